/* SPDX-License-Identifier: Apache-2.0 */
/* api.c — POST /functions/<id>/start (server/api.h): its query read, the
 * start made (server/starts.h), its answer sent.  The other routes are in
 * the api_*.c files.
 */
#include "server/api.h"
#include "server/internal.h"
#include "server/starts.h"

#include <stdbool.h>

static bool client_gone(void *arg)
{
	return req_client_gone(arg);
}

int api_post_start(struct req *q)
{
	struct start_opts o = { .gpu = req_query(q, "gpu"), .idle_s = -1, .lifetime_s = -1,
				.client_gone = client_gone, .client_arg = q };
	struct start_result r;
	char why[256];

	if (req_query_seconds(q, "idle_s", &o.idle_s, why, sizeof(why)) ||
	    req_query_seconds(q, "max_lifetime_s", &o.lifetime_s, why, sizeof(why)))
		o.bad_query = why;
	starts_run(q->srv, q->route.id, &o, &r);
	/* reply_json_hdr takes the body. */
	return reply_json_hdr(q, r.status, r.answer, r.hdr.name, r.hdr.name ? r.hdr.value : NULL);
}
