/* SPDX-License-Identifier: Apache-2.0 */
/* api_remote.c — POST /functions/<id>/push and POST /functions/<id>/pull
 * (server/api.h): the remote tier's routes; the pushes and pulls
 * themselves are server/remote_sync.h's background service.
 */
#define LOG_PREFIX "remote: "
#include "server/api.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "store/chunk.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define PULL_RETRY_AFTER "10"

static int no_remote(struct req *q)
{
	return reply_error(q, 409, "no_remote",
			   "thawd has no remote (start it with --remote s3://BUCKET/PREFIX)");
}

int api_post_push(struct req *q)
{
	struct server *s = q->srv;
	const char *fn = q->route.id;
	char snap[CHUNK_ID_LEN];
	enum snap_state st;
	json_t *j;
	bool wait;
	int ret;

	if (query_bool(req_query(q, "wait"), &wait))
		return reply_error(q, 400, "bad_request", "wait must be 0 or 1");
	if (!s->remote_sync)
		return no_remote(q);
	ret = registry_ready_snapshot(s->reg, fn, snap, &st);
	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no function %s", fn);
	if (ret)
		return reply_error(q, 409, "no_snapshot", "function %s has no ready snapshot to push",
				   fn);
	ret = remote_sync_push_now(s, fn, wait, &j);
	if (ret == -ENOMEM)
		return reply_error(q, 500, "internal", "out of memory");
	if (ret) {
		int r = reply_error(q, 502, "remote_failed", "push of %s failed: %s", fn,
				    json_string_value(json_object_get(j, "error")) ?: "?");

		json_decref(j);
		return r;
	}
	return reply_json(q, wait ? 200 : 202, json_pack("{s:o}", "push", j));
}

/* A pull's failure as an answer: what the remote lacks is a 404, a spec
 * naming a directory this host does not allow a 403, a function busy here a
 * 409, the remote failing (unreachable, refusing, corrupt) a 502. */
static struct api_err pull_error(int err)
{
	switch (-err) {
	case ENOENT:
		return (struct api_err){ 404, "not_found" };
	case EACCES:
		return (struct api_err){ 403, "forbidden" };
	case EBUSY:
	case EINPROGRESS:
		return (struct api_err){ 409, "conflict" };
	case EIO:
	case EBADMSG:
	case EPROTO:
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ETIMEDOUT:
	case ENOKEY:
		return (struct api_err){ 502, "remote_failed" };
	default:
		return api_err_from_errno(err);
	}
}

int api_post_pull(struct req *q)
{
	struct server *s = q->srv;
	json_t *j = NULL;
	char loc[64], jid[32];
	bool wait, fetch = true, reserved;
	int ret, jerr = 0;

	if (query_bool(req_query(q, "wait"), &wait) ||
	    (req_query(q, "fetch") && query_bool(req_query(q, "fetch"), &fetch)))
		return reply_error(q, 400, "bad_request", "wait and fetch must be 0 or 1");
	if (!s->remote_sync)
		return no_remote(q);
	if (server_refusing(s))
		return reply_error_hdr(q, 503, "Retry-After", PULL_RETRY_AFTER, "shutting_down",
				       "thawd is stopping");
	ret = remote_sync_pull(s, q->route.id, fetch, jid, &reserved);
	if (ret && !reserved)
		return reply_error_hdr(q, 503, "Retry-After", PULL_RETRY_AFTER,
				       ret == -ESHUTDOWN ? "shutting_down" : "no_capacity",
				       "%s", ret == -EAGAIN ? "--max-snapshots snapshots or pulls are "
							      "running already" : strerror(-ret));
	if (ret)
		return reply_error(q, 500, "internal", "cannot start the pull: %s", strerror(-ret));
	snprintf(loc, sizeof(loc), "/jobs/%s", jid);
	if (wait)
		jobs_wait(s->jobs, jid);
	if (jobs_get_json(s->jobs, jid, &j, &jerr))
		return reply_error(q, 500, "internal", "job %s vanished", jid);
	if (jerr) {
		struct api_err e = pull_error(jerr);
		const char *msg =
		    json_string_value(json_object_get(json_object_get(j, "error"), "message"));
		int r = reply_error(q, e.status, e.code, "%s", msg ? msg : strerror(-jerr));

		json_decref(j);
		return r;
	}
	return reply_json_hdr(q, wait ? 200 : 202, json_pack("{s:o}", "job", j), "Location", loc);
}
