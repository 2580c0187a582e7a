/* SPDX-License-Identifier: Apache-2.0 */
/* http.h — thawd's HTTP transport (libmicrohttpd), as thawd.c drives it:
 * listen, serve each request on its connection's thread (handed to
 * route_table.h, or to proxy.h for a routed one), stop.
 *
 * What a client can hold: at most --max-connections connections, at most
 * --max-connections-per-ip from one address, each only as long as it takes
 * to send a whole request within --request-timeout seconds (a reaper
 * thread closes one that is late).  The request object (struct req) and
 * the helpers its handler uses are internal.h's (reply.c).
 */
#ifndef THAW_SERVER_HTTP_H
#define THAW_SERVER_HTTP_H

struct server;

/* The connections' lock and condition in s (before http_start). */
void http_init(struct server *s);
/* Their release (after http_stop, or when http_start never ran). */
void http_release(struct server *s);
/* Before server_new touches the data directory: an address another
 * program listens on (a second thawd on the first one's port) or that is
 * not this host's stops thawd here, leaving no data directory behind.
 * http_start still says so if the address is taken in between.  0 or
 * -errno (logged). */
int http_listen_precheck(const char *listen);
/* Listen on s->listen (over TLS if s->tls has a certificate) and serve on
 * libmicrohttpd's threads; s->port is the port bound.  0 or -errno
 * (logged). */
int http_start(struct server *s);
/* Stop accepting connections; those open are still served. */
void http_quiesce(struct server *s);
/* Stop the daemon (its connections' threads are joined) and the reaper.
 * Safe when never started, and twice. */
void http_stop(struct server *s);

#endif
