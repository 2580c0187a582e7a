/* SPDX-License-Identifier: Apache-2.0 */
/* ready.h — talk to a function inside its network namespace: one HTTP call,
 * and waiting until it is ready (HTTP 2xx on a path, or a TCP connect).
 *
 * Each call opens its own connection (netns_connect) and closes it before
 * returning, so no connection is open when the function is checkpointed.
 */
#ifndef THAW_FUNCTION_READY_H
#define THAW_FUNCTION_READY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "function/spec.h"

/* The answer to one HTTP call. */
struct http_answer {
	int status;  /* e.g. 200 */
	char *body;  /* NUL-terminated (you own it; free()), may be "" */
	size_t len;
};

/* One HTTP/1.1 request (Connection: close) to 127.0.0.1:port in the
 * namespace at netns; body may be NULL.  0 and *ans filled (any status), or
 * -errno: -ECONNREFUSED (nothing listens), -ETIMEDOUT, -EPROTO (not HTTP).
 * Connection failures are not logged (callers poll); protocol errors are. */
int ready_http(const char *netns, uint16_t port, const char *method, const char *path,
	       const char *body, int timeout_ms, struct http_answer *ans);
void http_answer_release(struct http_answer *a);

/* Poll until the function answers: kind READY_HTTP, a 2xx to GET path;
 * READY_TCP, a connection accepted.  Stops early with -ESRCH once pid (the
 * function's first process, host pid; 0: not watched) is gone.  -ETIMEDOUT
 * after timeout_s.  On failure, why (may be NULL) says what the last probe saw. */
int ready_wait(const char *netns, uint16_t port, enum ready_kind kind, const char *path,
	       double timeout_s, pid_t pid, char *why, size_t whylen);

/* Is process pid alive (not gone, not a zombie)? */
bool ready_pid_alive(pid_t pid);

#endif
