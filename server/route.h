/* SPDX-License-Identifier: Apache-2.0 */
/* route.h — what a request asks for: the path parsed into a route and an id,
 * the method checked against the route, the body parsed as JSON.
 *
 * Pure functions (no I/O, no global state) so that they can be fuzzed and
 * unit-tested apart from the HTTP server.  Paths are parsed strictly: the path
 * as it came on the wire (thawd does not let libmicrohttpd unescape it), no
 * empty segment, no trailing slash, no percent-encoding, every id checked
 * with id_valid(), so nothing a client sends can name a file outside the data
 * directory.
 */
#ifndef THAW_SERVER_ROUTE_H
#define THAW_SERVER_ROUTE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define ROUTE_PATH_MAX 1024 /* longer paths are answered 404 */

enum route_kind {
	ROUTE_NONE = 0,
	ROUTE_HEALTHZ,           /* /healthz: liveness */
	ROUTE_READYZ,            /* /readyz: readiness (can this host take starts now) */
	ROUTE_DRAIN,             /* /drain: stop taking work, finish, exit */
	ROUTE_METRICS,           /* /metrics */
	ROUTE_FUNCTIONS,         /* /functions */
	ROUTE_FUNCTION,          /* /functions/<id> */
	ROUTE_FUNCTION_SNAPSHOT, /* /functions/<id>/snapshot */
	ROUTE_FUNCTION_START,    /* /functions/<id>/start */
	ROUTE_INSTANCES,         /* /instances */
	ROUTE_INSTANCE,          /* /instances/<iid> */
	ROUTE_JOBS,              /* /jobs (thaw's addition: snapshot jobs) */
	ROUTE_JOB,               /* /jobs/<jid> */
	ROUTE_INSTANCE_LOGS,     /* /instances/<iid>/logs */
	ROUTE_JOB_LOGS,          /* /jobs/<jid>/logs */
	ROUTE_FUNCTION_PUSH,     /* /functions/<id>/push (server/remote_sync.h) */
	ROUTE_FUNCTION_PULL,     /* /functions/<id>/pull */
	ROUTE_FUNCTION_PROXY,    /* /function/<id>[/<anything>]: routed to an instance
				  * (server/proxy.h), any method */
};

enum http_method {
	METHOD_OTHER = 0,
	METHOD_GET = 1 << 0,
	METHOD_PUT = 1 << 1,
	METHOD_POST = 1 << 2,
	METHOD_DELETE = 1 << 3,
};

struct route {
	enum route_kind kind;
	char id[64]; /* the function, instance or job id; "" for collections */
};

/* Parse path (without the query string).  0 and *r; -ENOENT for a path that
 * names nothing (404); -EINVAL for a malformed id (400), with the reason in
 * err. */
int route_parse(const char *path, struct route *r, char *err, size_t errlen);

enum http_method method_parse(const char *method);
/* The methods route kind allows (a mask of enum http_method), and the same as
 * an Allow header value ("GET, PUT, DELETE"). */
unsigned route_methods(enum route_kind kind);
const char *route_allow(enum route_kind kind);

/* A boolean query parameter (?wait=1): NULL, "0", "false" → false; "", "1",
 * "true" → true; 0 and *out, -EINVAL for anything else. */
int query_bool(const char *value, bool *out);
/* A number of seconds in a query (?idle_s=2.5): decimal digits with at most
 * one ".", nothing else (strtod would take "0x1p3", "1e3", " 8", "inf"),
 * from 0 to max.  0 and *out, or -EINVAL. */
int query_seconds_parse(const char *value, double max, double *out);

/* Parse a request body as one JSON object.  0 and *out (a new reference), or
 * -EINVAL with jansson's message and position in err. */
int body_parse_object(const char *buf, size_t len, json_t **out, char *err, size_t errlen);

/* The body of PUT /functions/<id>: a JSON object checked by spec_parse(), with
 * an "id" (if any) equal to id.  0 and *spec_json (the spec as spec_to_json()
 * writes it: a new reference), -EINVAL with the reason in err (400), or
 * another -errno from spec_parse (the spec module is not available, no
 * memory). */
int function_body_parse(const char *id, const char *buf, size_t len, json_t **spec_json, char *err,
			size_t errlen);

/* Split a listen address "HOST:PORT" or "[V6]:PORT" into host and port
 * (digits, at most 65535).  0 or -EINVAL. */
int listen_addr_parse(const char *s, char *host, size_t hostlen, char *port, size_t portlen);

/* The token scope route kind needs (an enum auth_scope mask): 0 for
 * /healthz (open), AUTH_SCOPE_ALL for /metrics (any valid token will do: the
 * caller checks for a non-empty intersection), AUTH_SCOPE_CONTROL for
 * functions, snapshots and jobs (their logs too), AUTH_SCOPE_DATA for starts
 * and instances (their logs too). */
unsigned route_scope(enum route_kind kind);

/* Whether the host part of a listen address (listen_addr_parse's host) is a
 * loopback one: 127.0.0.0/8, ::1 or "localhost".  Anything else, 0.0.0.0 and
 * "::" included, is not. */
bool host_is_loopback(const char *host);
/* Whether a Host header names a loopback host: localhost, 127.x.y.z or
 * [::1], each with or without ":PORT".  NULL (no header) is false. */
bool host_header_is_loopback(const char *value);

/* Whether a request's Content-Type fits what it does (a guard against
 * cross-site requests a browser sends without asking: form posts).  method,
 * the Content-Type header (NULL: none) and the body (len 0: none).  0, or
 * -EINVAL with the reason in err (415). */
int content_type_check(enum http_method method, const char *ctype, const char *body, size_t len,
		       char *err, size_t errlen);

#endif
