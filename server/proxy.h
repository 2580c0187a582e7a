/* SPDX-License-Identifier: Apache-2.0 */
/* proxy.h — requests routed through thawd: /function/<id>/<path>, any
 * method, forwarded to an instance of function <id> (server/pool.h gives the
 * slot) and its answer streamed back as the instance produces it.
 *
 * libcurl talks to the instance, over a connection made straight into the
 * instance's network namespace to the function's port (not through its
 * endpoint's relay): one hop less, and a refused connection means that no
 * byte of the request reached the function.  What goes: the method, the
 * path after /function/<id> with the query as the client sent them, every
 * header but the hop-by-hop ones (and thawd's own token), with
 * X-Forwarded-For and X-Forwarded-Proto; the body as it arrives, in step
 * with the instance taking it.  What comes back: the status, the headers but
 * the hop-by-hop ones, the body as the instance writes it (chunked where its
 * length is not known).
 *
 * An instance that could not be reached before any byte of the request went
 * to it (connection refused: it died, or no longer listens) takes no more
 * requests, and the request goes to another, once.  Past that, a failure
 * before the answer began is a 502 naming the cause; during the answer, the
 * connection is cut.  A client that goes away frees its slot at once.
 *
 * Each request runs on its connection's thread (thawd's libmicrohttpd runs
 * one per connection): waiting for a slot, sending, and the answer's
 * callback all block that thread only.
 */
#ifndef THAW_SERVER_PROXY_H
#define THAW_SERVER_PROXY_H

#include <stddef.h>

struct req;
struct server;

/* Free a connection kept between requests (pool_new's link_free). */
void proxy_link_free(void *link);

/* libmicrohttpd's access handler for a routed request (q->route.kind is
 * ROUTE_FUNCTION_PROXY): its first call (size NULL: the head is in; waits
 * for a slot), each part of the body (data, *size; all taken), and its last
 * (*size 0: the body is in; the answer is queued).  0, or -errno when the
 * connection must be closed without an answer. */
int proxy_request(struct req *q, const char *method, const char *data, size_t *size);
/* The request is over (libmicrohttpd's completion, whatever became of it):
 * what it still holds is let go, and it is counted in /metrics; q->note
 * says, for the access log, which instance served it and how long it
 * waited. */
void proxy_request_done(struct req *q);
/* Wait, at most ms, for the routed requests not yet over to end: after
 * pool_shutdown, an answer the instance has made is still on its way to
 * its client, and libmicrohttpd's stop would cut it. */
void proxy_drain(struct server *s, unsigned ms);

#endif
