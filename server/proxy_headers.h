/* SPDX-License-Identifier: Apache-2.0 */
/* proxy_headers.h — which headers the routed proxy (proxy.c) passes on,
 * each way, and the ones it writes itself.
 *
 * A request's and an answer's hop-by-hop headers (RFC 9110, 7.6.1, and
 * those a Connection header names) stay on their own hop; the framing is
 * libcurl's and libmicrohttpd's to write.  The forwarding headers
 * (X-Forwarded-*, Forwarded, X-Real-IP) are thawd's alone, so that a
 * function can trust what it reads there, and behind a token the
 * Authorization header is thawd's: never passed to the function.
 */
#ifndef THAW_SERVER_PROXY_HEADERS_H
#define THAW_SERVER_PROXY_HEADERS_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* The names a Connection header lists, kept for the filter: ",a,b," */
#define PROXY_CONN_NAMES_MAX 512

/* Is the header of name (len bytes) hop-by-hop, or framing? */
bool proxy_hop_by_hop(const char *name, size_t len);

/* Add the names a Connection header's value (vl bytes) lists to set
 * (",a,b,", lowercase, size bytes): they are hop-by-hop too.  false when
 * set is full: the message then cannot be passed on faithfully. */
bool proxy_conn_names_add(char *set, size_t size, const char *v, size_t vl);

/* Does set (proxy_conn_names_add's) list the name of len bytes? */
bool proxy_conn_named(const char *set, const char *name, size_t len);

/* The headers for the instance, appended to *hdrs: the client's on conn
 * but the hop-by-hop ones (and those its Connection names), the forwarding
 * ones and, with drop_authorization, Authorization; then thawd's own
 * forwarding ones (where the request came from, and proto).  0, -EINVAL (a
 * Connection header listing too much), or -ENOMEM. */
int proxy_request_headers(struct MHD_Connection *conn, bool drop_authorization, const char *proto,
			  struct curl_slist **hdrs);

#endif
