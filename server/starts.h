/* SPDX-License-Identifier: Apache-2.0 */
/* starts.h — a start of a function (docs/API.md, POST /functions/<id>/start):
 * admission (its snapshot ready, thawd not stopping, a RAM tier, limits,
 * memory, GPUs, --max-starts), the GPU reservation, the fetch of a function
 * pulled without its chunks, a standby if one waits, else a restore (or a
 * cold boot, server/fallback.h), its metrics, and the answer.
 *
 * A component: the start route's handler (api.c) calls it with what its
 * query asks, and server/pool.c calls it for routed requests that found no
 * free instance.  It answers in memory, never on a connection; the caller
 * sends or reads the answer.  Called on the caller's own thread; starts run
 * at once, as many as --max-starts admits.
 */
#ifndef THAW_SERVER_STARTS_H
#define THAW_SERVER_STARTS_H

#include <jansson.h>
#include <stdbool.h>

#include "restore/instance.h"

struct server;

/* What a start asks beyond its function's spec (a gateway's query). */
struct start_opts {
	/* ?gpu=: the GPUs it goes on (an index or a UUID, comma-separated),
	 * else NULL: those with the most free memory. */
	const char *gpu;
	/* ?idle_s=, ?max_lifetime_s= for this instance; negative: the spec's. */
	double idle_s, lifetime_s;
	/* Why the query did not parse, or NULL: the start is refused with 400
	 * bad_request at the step that reads its limits. */
	const char *bad_query;
	/* Whether its client has gone (it gave up waiting), asked once the
	 * instance runs: then it is stopped, and the answer is 499.  NULL:
	 * never. */
	bool (*client_gone)(void *arg);
	void *client_arg;
	/* For requests routed through thawd (server/pool.c): recorded so
	 * (instance_set_limits), for a later thawd that adopts it. */
	bool routed;
};

/* A header the answer carries: Location (201) or Retry-After (a refusal
 * that may be retried); name NULL: none. */
struct start_header {
	const char *name;
	char value[128];
};

/* What a start gives its caller: the facts its in-process callers decide
 * on (server/pool.c), and the HTTP answer made from them (api.c sends it). */
struct start_result {
	unsigned status;    /* the answer's HTTP status */
	/* Not 201: the error's code (server/errors.h; a static string) and
	 * message; refused: nothing was restored (a 429 or 503 with
	 * Retry-After: --max-starts, max_instances, no room), so it may be
	 * tried again. */
	const char *code;
	char msg[1024];
	bool refused;
	struct instance in; /* 201: the instance, running and tracked */
	json_t *answer;     /* the body (you own it; NULL with status 500: out of memory) */
	struct start_header hdr;
};

/* Start function fn with o (NULL: none of it, a start thawd makes itself):
 * its result in *r (start_result_release it), and r->status.  201 with the
 * instance running and tracked; otherwise nothing of the start is left
 * held. */
unsigned starts_run(struct server *s, const char *fn, const struct start_opts *o,
		    struct start_result *r);
void start_result_release(struct start_result *r);

#endif
