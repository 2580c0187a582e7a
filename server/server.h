/* SPDX-License-Identifier: Apache-2.0 */
/* server.h — thawd: the HTTP API of docs/API.md over libmicrohttpd.
 *
 * One thread per connection (libmicrohttpd's), so a start or a snapshot with
 * ?wait=1 occupies only its own connection's thread and /healthz and /metrics
 * answer while they run; asynchronous snapshots run on job threads.  No lock
 * is held across a start or a snapshot.
 *
 *	struct server *s = server_new(&cfg, &opts);   recovery of an earlier run
 *	server_start(s);                               listening
 *	… SIGTERM …
 *	server_shutdown(s);   stop accepting, finish running work, stop instances
 *	server_free(s);
 */
#ifndef THAW_SERVER_SERVER_H
#define THAW_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

#define SERVER_DEFAULT_LISTEN        "127.0.0.1:8080"
#define SERVER_DEFAULT_MAX_BODY      (1u << 20)
#define SERVER_DEFAULT_MAX_STARTS    32u
#define SERVER_DEFAULT_MAX_SNAPSHOTS 2u
#define SERVER_DEFAULT_MAX_STANDBY   16u
#define SERVER_DEFAULT_MAX_CONNS     512u
#define SERVER_DEFAULT_MAX_CONNS_PER_IP 64u
#define SERVER_DEFAULT_REQUEST_TIMEOUT  30u /* seconds */
#define SERVER_DEFAULT_KEEP_ENDED_S  600u /* seconds */
#define SERVER_DEFAULT_DRAIN_TIMEOUT 30u /* seconds */
#define SERVER_DEFAULT_REMOTE_POLL_S 10u /* seconds */

struct server_opts {
	const char *listen;     /* "HOST:PORT" ("[::1]:PORT" for IPv6); port 0: any free one */
	const char *token_file; /* NULL: no token asked */
	const char *control_token_file; /* NULL, or a token for functions, snapshots, jobs */
	const char *data_token_file;    /* NULL, or a token for starts and instances */
	const char *tls_cert_file; /* NULL, or a PEM certificate (chain): serve HTTPS */
	const char *tls_key_file;  /* its PEM private key; both or neither */
	const char *port_file;  /* NULL, or a file to write the bound port into once listening */
	size_t max_body;        /* request bodies above this get 413 */
	unsigned max_starts;    /* concurrent starts; more get 503 + Retry-After */
	unsigned max_snapshots; /* concurrent snapshots; likewise */
	unsigned max_standby;   /* standby instances of all functions together */
	double idle_s;          /* default "idle_s" of functions that set none; 0: off */
	unsigned keep_ended_s;  /* an ended instance's record and output stay this long */
	const char *remote_url;  /* NULL, or "s3://bucket/prefix": the fleet's remote tier */
	const char *s3_endpoint; /* NULL: $AWS_ENDPOINT_URL, else AWS */
	unsigned remote_poll_s;  /* seconds between two listings of the remote's refs
				  * (a delete or a new snapshot elsewhere followed
				  * here); 0: none */
	uint64_t mem_reserve;   /* a start that could leave less available memory answers
				 * 503; 0: no admission check */
	uint64_t gpu_mem_reserve; /* a GPU function's start that would leave a GPU less
				   * free memory answers 503 (0: only one that does not
				   * fit at all) */
	uint64_t tier_scrub_rate; /* bytes a second the RAM tier's scrub reads at most
				   * (restore/tier.h); 0: no scrub */
	unsigned max_conns;     /* concurrent connections */
	unsigned max_conns_per_ip; /* concurrent connections from one address; 0: no limit */
	unsigned request_timeout;  /* seconds a connection has to send a whole request (head
				    * and body) from its opening or its previous answer;
				    * 0: no such deadline */
	unsigned drain_timeout;    /* seconds a drain waits for routed requests and starts
				    * in flight before thawd stops anyway */
};

void server_opts_default(struct server_opts *o);

struct server;

/* Read the token files and the TLS certificate and key (a bad one: NULL,
 * nothing touched), lock the data directory (<data>/thawd.lock: one thawd
 * per data directory; if another holds it, NULL before anything else is
 * touched), open its registry, store and RAM tier, and recover from an
 * earlier run (stop recorded instances, mark building snapshots failed,
 * clean snapshot leftovers).  NULL on error, logged. */
struct server *server_new(const struct thaw_config *c, const struct server_opts *o);
/* Listen and serve on libmicrohttpd's threads, over TLS if a certificate
 * was given.  0 or -errno. */
int server_start(struct server *s);
/* Concurrent starts it admits: --max-starts, lowered to what the file
 * descriptor limit allows. */
unsigned server_max_starts(const struct server *s);
/* The port it listens on (after server_start). */
uint16_t server_port(const struct server *s);
/* POST /drain calls hook (once): thawd_main's sends thawd SIGTERM, whose
 * handling drains. */
void server_set_drain_hook(struct server *s, void (*hook)(void));
/* Drain: GET /readyz answers 503, new starts and new routed requests 503
 * with Retry-After (a balancer sends them to another host), while
 * thawd goes on listening and the routed requests and starts in flight
 * finish, --drain-timeout seconds at most.  Then server_shutdown. */
void server_drain(struct server *s);
/* Mark the drain begun (server_drain does it too): called where the signal
 * is taken, before a second one may end thawd, so that POST /drain then
 * sends none. */
void server_drain_begin(struct server *s);
/* Stop accepting, answer 503 to new work, wait for running starts and
 * snapshots, then stop the instances this thawd started. */
void server_shutdown(struct server *s);
void server_free(struct server *s); /* NULL is fine */

#endif
