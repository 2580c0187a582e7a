/* SPDX-License-Identifier: Apache-2.0 */
/* pool.h — where requests routed through thawd go (/function/<id>/…,
 * server/proxy.h): the instances thawd started for them, their slots, a
 * bounded queue, and starts on demand.
 *
 * Each function has its own pool.  An instance of it has "concurrency" slots
 * (the spec's; function/spec.h); a request takes one for as long as the
 * instance works on it.  A request goes to the busiest instance that still
 * has a free slot, so that requests pack onto the fewest instances and the
 * others reach their "idle_s" and stop: scale to zero stays the lifetimes
 * thread's (server/lifetimes.h), which asks pool_idle about the instances
 * routed to, whose idle time counts from the end of their last request.
 * After a new snapshot of the function, new requests go to instances of it,
 * and those of the old one stop as soon as they serve none.
 *
 * No free slot: the request waits, first come first served, for the first
 * slot that frees or appears.  As many starts are made at once as the
 * waiting requests need (one per "concurrency" of them: the burst path), up
 * to "max_instances"; each is the start that POST /functions/<id>/start
 * makes (server/starts.h, with no query), so a standby is taken where there
 * is one, and admission, limits and metrics are a gateway's start's.  At most "queue"
 * requests wait beyond the slots of the instances being started, each at
 * most "queue_timeout_s": beyond, a request is refused (429 when the
 * function is at max_instances, else 503), as is one that waited too long
 * (503).
 *
 * Thread-safe: one lock, never held across a start, a stop or any I/O.
 */
#ifndef THAW_SERVER_POOL_H
#define THAW_SERVER_POOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct server;
struct pool;
struct pool_inst;

/* When thawd stops, how long the routed requests being served have to end. */
#define POOL_DRAIN_MS 10000

/* A slot taken on an instance: one request may go there until
 * pool_release.  What the caller needs to reach the instance stays valid
 * while it holds the slot. */
struct pool_slot {
	struct pool_inst *inst;
	char instance[64];
	pid_t pid;                   /* the instance's first process */
	unsigned long long pid_start;
	int netns_fd;                /* its network namespace */
	uint16_t port;               /* the function's port in it (127.0.0.1) */
	void *link;                  /* a connection to it that an earlier request
				      * left (the caller's, see pool_new), or NULL */
	double wait_ms;              /* how long the request waited for the slot */
};

/* Why a request got no slot: the answer to give. */
struct pool_refusal {
	unsigned status;  /* 404, 409, 429, 502, 503, … */
	const char *code; /* the error code (docs/API.md, "Errors") */
	bool retry_after; /* send Retry-After */
	char msg[512];
};

/* Has the client gone (it closed its connection)? */
typedef bool (*pool_gone_fn)(void *arg);

/* The pools of server s.  link_free frees a connection the caller left
 * with pool_release when its instance goes.  NULL when out of memory. */
struct pool *pool_new(struct server *s, void (*link_free)(void *link));
/* thawd is stopping: waiting requests are refused (503 shutting_down), no
 * start is made; wait for the starts in flight, then up to grace_ms for
 * the requests being served to finish.  After it, pool_stopping is true. */
void pool_shutdown(struct pool *p, unsigned grace_ms); /* NULL is fine */
/* True once pool_shutdown has given up waiting: requests still being
 * served should end now. */
bool pool_stopping(struct pool *p);
void pool_free(struct pool *p); /* NULL is fine; after the HTTP threads have ended */

/* A slot for a request to function fn, waiting for one if need be (and
 * starting instances), polling gone(arg) while it waits.  0 and *slot;
 * -EAGAIN with *why when refused (unknown function, queue full, waited too
 * long, no instance could be started, thawd stopping); -ECONNABORTED when
 * the client went away while waiting. */
int pool_acquire(struct pool *p, const char *fn, pool_gone_fn gone, void *arg,
		 struct pool_slot *slot, struct pool_refusal *why);
/* The request is done with its slot: the instance is free for the next one
 * (its idle time counts from now).  link (may be NULL): a connection to the
 * instance to keep for a later request.  broken: the instance could not be
 * reached at all; it takes no more requests. */
void pool_release(struct pool *p, struct pool_slot *slot, void *link, bool broken);

/* Instance rec (its record: restore/instance.h) of function fn, started
 * for routed requests by an earlier thawd and adopted (server/recover.c):
 * it takes the function's routed requests again, as one started here
 * would.  0, or -errno (logged: it then takes none). */
int pool_adopt(struct pool *p, const char *fn, const json_t *rec);

/* The lifetimes thread's question about instance id with "idle_s" idle_s at
 * now_ms (CLOCK_REALTIME), when it is one of the pool's and serves no
 * request: 1 when it has served none for idle_s (0: never idle), 2 when its
 * function has a new snapshot since it started (the function's requests go
 * to instances of that one); either way it then takes no more requests (the
 * caller stops it).  0 when neither; -ENOENT when it is not the pool's. */
int pool_idle(struct pool *p, const char *id, double idle_s, uint64_t now_ms);
/* Instance id is being stopped (whatever the reason): it takes no more
 * requests, and goes once the requests it serves are done.  It counts
 * against its function's max_instances until pool_gone. */
void pool_forget(struct pool *p, const char *id);
/* Instance id is gone (its stop is done, it is out of thawd's table): its
 * place goes to the requests waiting, if any (an instance is started for
 * them).  As max_instances is counted by the starts, an instance being
 * stopped keeps its place until then, and requests wait (queue) for it
 * rather than be refused. */
void pool_gone(struct pool *p, const char *id);

/* A routed request to fn ended with status after total_ms, of which it
 * waited wait_ms for a slot: counted for /metrics. */
void pool_count(struct pool *p, const char *fn, unsigned status, double total_ms,
		double wait_ms);
/* The pools' metrics in Prometheus text format (docs/API.md, GET /metrics)
 * after the *len bytes of *text (a string of malloc's: it may move).  0, or
 * -ENOMEM / -EIO with *text as it was. */
int pool_metrics_append(struct pool *p, char **text, size_t *len);

#endif
