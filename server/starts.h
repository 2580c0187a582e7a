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

/* Start function fn with o (NULL: none of it, a start thawd makes itself):
 * the answer's HTTP status; its body in *answer (a new reference: the
 * instance, or {"error":{"code","message"}}; NULL, with status 500, out of
 * memory) and its header in *hdr.  201 with the instance running and
 * tracked; otherwise nothing of the start is left held. */
unsigned starts_run(struct server *s, const char *fn, const struct start_opts *o,
		    json_t **answer, struct start_header *hdr);

#endif
