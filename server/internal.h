/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h — the server's state, shared by its files (thawd.c: start-up,
 * the components, shutdown; http.c: the HTTP transport; reply.c: a
 * request's helpers; route_table.c, the api*.c files and logs.c: the
 * requests; recover.c: recovery of an earlier run; the components).  Not
 * for use outside server/.
 */
#ifndef THAW_SERVER_INTERNAL_H
#define THAW_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "server/auth.h"
#include "server/route.h"
#include "server/server.h"
#include "server/tls.h"
#include "store/store.h"

struct MHD_Daemon;
struct MHD_Connection;
struct tier;
struct registry;
struct jobs;
struct metrics;
struct insts;
struct standby;
struct lifetimes;
struct remote_sync;
struct collector;
struct conn_track;
struct pool;
struct proxy_call;

struct server {
	struct thaw_config cfg;
	struct server_opts opts;
	char listen[128];
	char port_file[PATH_MAX];
	struct auth auth;
	struct tls tls; /* tls.cert NULL: plain HTTP */
	struct store *store;
	struct tier *tier; /* NULL if the RAM tier could not be opened: starts answer 503 */
	struct tier_scrub *scrub; /* its entries checked again in the background; NULL: none */
	struct registry *reg;
	struct jobs *jobs;
	struct metrics *metrics;
	struct insts *insts;
	struct standby *standby; /* NULL: no standbys (--max-standby 0, no RAM tier) */
	struct lifetimes *lifetimes; /* server/lifetimes.h; NULL until started */
	struct remote_sync *remote_sync; /* server/remote_sync.h; NULL: no --remote */
	struct pool *pool; /* server/pool.h: routed requests; NULL: none (no memory) */
	struct fallback *fallback; /* server/fallback.h: restore or boot */
	struct collector *collector; /* server/snapshots.h: the store's gc; NULL: none */
	struct MHD_Daemon *mhd;
	int lock_fd; /* <data>/thawd.lock, flock()ed for thawd's life; -1 until taken */
	uint16_t port;
	atomic_uint starts_running;
	atomic_uint routed_open; /* routed requests not yet over (proxy.c) */
	atomic_bool stopping;
	/* Draining (server_drain): not ready (GET /readyz 503), new starts
	 * and new routed requests refused with 503 and Retry-After, so that a
	 * load balancer sends them elsewhere; routed requests already in go
	 * on.  stopping follows once they are over. */
	atomic_bool draining;
	void (*drain_hook)(void); /* POST /drain calls it once (thawd_main: SIGTERM itself) */
	/* What the file descriptor limit allows (server_fd_budget): routed
	 * requests' connections to instances (proxy.c's links, in use or kept)
	 * at most links_max; more answer 503. */
	unsigned fd_limit;
	unsigned links_max;
	atomic_uint links;
	pthread_t preload; /* recover_preload_manifests(), if preload_started */
	bool preload_started;

	/* Open connections and their deadlines (http.c): a reaper thread
	 * closes a connection that has not sent a whole request in time. */
	pthread_mutex_t conn_lock;
	pthread_cond_t conn_cv;
	struct conn_track *conns;
	pthread_t reaper;
	bool reaper_started, reaper_stop, reaper_idle;

	/* /metrics' slow gauges, read by a thread of their own and never on
	 * a scrape (server/api_metrics.c): store_stat walks the whole store,
	 * and the GPUs' free memory is the driver's to give. */
	pthread_mutex_t stat_lock;
	pthread_cond_t stat_cv;
	pthread_t stat_thread;
	bool stat_started, stat_stop;
	struct store_stats stat;
	uint64_t stat_ns; /* when stat was read; 0: never */
	bool stat_ok;
	json_t *gpus;      /* each GPU's index, uuid, free_bytes; NULL: none (yet) */
	uint64_t gpus_ns;  /* when gpus was read; 0: never */
	uint64_t scraped_ns; /* the last scrape (or the start) */
};

/* Whether new work is refused (503 shutting_down): thawd drains or stops. */
static inline bool server_refusing(struct server *s)
{
	return atomic_load(&s->stopping) || atomic_load(&s->draining);
}

/* One request. */
struct req {
	struct server *srv;
	struct MHD_Connection *conn; /* NULL until its first access-handler call */
	struct conn_track *ct;       /* its connection's deadline, if tracked */
	/* The request target as libmicrohttpd saw it before parsing it: where
	 * it starts, its length up to the first NUL, its first control byte
	 * before that (-1: none). */
	const char *target;
	size_t target_len;
	long target_ctl;
	enum http_method method;
	char method_str[16];
	char path[256]; /* for the log, truncated */
	struct route route;
	char *body;
	size_t len, cap;
	bool too_big;
	bool answered;
	/* POST /drain: the drain begins once its answer is sent (on_completed),
	 * not before: the shutdown would close the connection under it. */
	bool drain_after;
	unsigned status;
	uint64_t start_ns;
	/* A routed request (/function/<id>/…, server/proxy.h): its target as
	 * it came (on_uri's copy, query included), its forwarding, and what
	 * the log line adds (the instance, the wait). */
	char *raw_target;
	struct proxy_call *proxy;
	char note[112];
};

/* A request's helpers, for its handler (reply.c).  The answers each return
 * 0, or -ENOMEM when no answer could be queued (the connection is then
 * closed). */
int reply_json(struct req *q, unsigned status, json_t *body); /* steals body */
int reply_error(struct req *q, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* reply_error with a header (Retry-After, Allow, …). */
int reply_error_hdr(struct req *q, unsigned status, const char *hname, const char *hvalue,
		    const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
int reply_text(struct req *q, unsigned status, const char *ctype, char *body, size_t len);
int reply_empty(struct req *q, unsigned status);
/* Add a header to the next reply_json (Location). */
int reply_json_hdr(struct req *q, unsigned status, json_t *body, const char *hname,
		   const char *hvalue);
/* The value of query parameter key, or NULL. */
const char *req_query(struct req *q, const char *key);
/* Query parameter key as a number of seconds, 0 to a year, into *out (left
 * as it is when absent): 0, or -EINVAL with why. */
int req_query_seconds(struct req *q, const char *key, double *out, char *why, size_t len);
/* true if the client has closed its end of the connection (it gave up
 * waiting): an answer would reach nobody. */
bool req_client_gone(struct req *q);

/* A snapshot job of fn, as POST /functions/<fn>/snapshot makes (a
 * re-snapshot, server/fallback.h): its id in jid.  heal (may be NULL): a
 * damaged snapshot that the job heals first (store_heal), so that its put
 * writes every damaged chunk anew.  0, or -EAGAIN (--max-snapshots jobs),
 * -ESHUTDOWN, -ENOENT (no such function), -EBUSY (one is building), or
 * another -errno.  (snapshots.c) */
int api_snapshot_launch(struct server *s, const char *fn, const char *heal, char jid[32]);

/* Start-up recovery and shutdown (recover.c). */
/* Take <data>/thawd.lock (exclusive, non-blocking, kept in s->lock_fd) and
 * write thawd's pid into it.  0, or -EWOULDBLOCK when another process holds
 * it (logged, naming the data directory and that process's pid if known),
 * or another -errno. */
int recover_lock_data_dir(struct server *s);
int recover_startup(struct server *s);
/* In the background, read the manifests of ready snapshots (as many as the
 * store keeps parsed) into the store's cache, so that the first start of each
 * after a restart does not read and check its manifest (~0.3 s for a 3 GB
 * image).  A failure only costs that time later.  server_free() joins it. */
void recover_preload_manifests(struct server *s);
/* The instances adopted from an earlier run (recover_startup) that served
 * routed requests ("routed" in their record) take them again (pool_adopt):
 * once s->pool exists. */
void recover_route_adopted(struct server *s);
void stop_own_instances(struct server *s);

#endif
