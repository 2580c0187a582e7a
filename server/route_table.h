/* SPDX-License-Identifier: Apache-2.0 */
/* route_table.h — which handler (server/api.h) answers which route and
 * method: the one edge from the HTTP transport (server/http.c) to the
 * handlers.  Routed requests (/function/<id>/…) stream through
 * server/proxy.h instead and never reach it.
 */
#ifndef THAW_SERVER_ROUTE_TABLE_H
#define THAW_SERVER_ROUTE_TABLE_H

struct req;

/* Answer q, routed, authorised and with its body read, by its route's
 * handler; 404 for a route with none.  What the handler returned. */
int route_table_dispatch(struct req *q);

#endif
