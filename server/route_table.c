/* SPDX-License-Identifier: Apache-2.0 */
/* route_table.c — see route_table.h. */
#include "server/route_table.h"
#include "server/api.h"
#include "server/internal.h"
#include "server/logs.h"
#include "common/util.h"

#include <stddef.h>

#define ANY_METHOD (~0u)

/* One row: a route, the methods it takes here, its handler.  The first row
 * of a route whose methods hold the request's wins; the methods a route
 * allows at all were checked before (route_methods, a 405 otherwise). */
static const struct {
	enum route_kind kind;
	unsigned methods;
	int (*handle)(struct req *q);
} routes[] = {
	{ ROUTE_HEALTHZ, ANY_METHOD, api_get_healthz },
	{ ROUTE_READYZ, ANY_METHOD, api_get_readyz },
	{ ROUTE_DRAIN, ANY_METHOD, api_post_drain },
	{ ROUTE_METRICS, ANY_METHOD, api_get_metrics },
	{ ROUTE_FUNCTIONS, ANY_METHOD, api_get_functions },
	{ ROUTE_FUNCTION, METHOD_PUT, api_put_function },
	{ ROUTE_FUNCTION, METHOD_DELETE, api_delete_function },
	{ ROUTE_FUNCTION, ANY_METHOD, api_get_function },
	{ ROUTE_FUNCTION_SNAPSHOT, ANY_METHOD, api_post_snapshot },
	{ ROUTE_FUNCTION_START, ANY_METHOD, api_post_start },
	{ ROUTE_FUNCTION_PUSH, ANY_METHOD, api_post_push },
	{ ROUTE_FUNCTION_PULL, ANY_METHOD, api_post_pull },
	{ ROUTE_INSTANCES, ANY_METHOD, api_get_instances },
	{ ROUTE_INSTANCE, METHOD_DELETE, api_delete_instance },
	{ ROUTE_INSTANCE, ANY_METHOD, api_get_instance },
	{ ROUTE_INSTANCE_LOGS, ANY_METHOD, logs_get_instance },
	{ ROUTE_JOBS, ANY_METHOD, api_get_jobs },
	{ ROUTE_JOB, ANY_METHOD, api_get_job },
	{ ROUTE_JOB_LOGS, ANY_METHOD, logs_get_job },
	/* ROUTE_FUNCTION_PROXY: http.c hands these to proxy.c. */
};

int route_table_dispatch(struct req *q)
{
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++)
		if (routes[i].kind == q->route.kind && (routes[i].methods & q->method))
			return routes[i].handle(q);
	return reply_error(q, 404, "not_found", "no such path");
}
