/* SPDX-License-Identifier: Apache-2.0 */
/* api_functions.c — the control plane's routes (server/api.h): functions
 * (GET, PUT, DELETE /functions[/<id>]), their snapshots (POST
 * /functions/<id>/snapshot: a job of server/snapshots.h) and the jobs
 * (GET /jobs[/<jid>]).
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "function/spec.h"
#include "server/api.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "server/snapshots.h"
#include "server/userns_holds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNAPSHOT_RETRY_AFTER "10"

/* ---- functions ---- */

int api_get_functions(struct req *q)
{
	json_t *arr;
	int ret = registry_list_json(q->srv->reg, &arr);

	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, json_pack("{s:o}", "functions", arr));
}

int api_get_function(struct req *q)
{
	json_t *j;
	int ret = registry_get_json(q->srv->reg, q->route.id, &j);

	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no function %s", q->route.id);
	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	remote_sync_describe(q->srv, q->route.id, j);
	return reply_json(q, 200, j);
}

int api_put_function(struct req *q)
{
	struct server *s = q->srv;
	char err[512] = "", loc[128], forgot[CHUNK_ID_LEN] = "", mkey[48] = "";
	json_t *spec = NULL, *j = NULL;
	bool created = false;
	int ret;

	if (server_refusing(s))
		return reply_error(q, 503, "shutting_down", "thawd is stopping");
	log_clear_error();
	ret = function_body_parse(q->route.id, q->body, q->len, &spec, err, sizeof(err));
	if (ret == -EINVAL)
		return reply_error(q, 400, "bad_request", "%s", err);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot check the spec: %s", err);
	}
	/* A function runs as root in its container: its rootfs, its
	 * directory, its mounts' sources and a local image only where the
	 * operator allows (thawd --allow-root), never thaw's own state, and
	 * a directory it writes reached by nothing else (function/confine.h,
	 * against every registered function, checked again where they are
	 * used).  The answer is what this PUT recorded, read under its own
	 * lock: a DELETE racing it may remove the function the moment after,
	 * and that is no error of this PUT's. */
	ret = registry_admit(s->reg, &s->cfg, q->route.id, spec, &created, forgot, &j, mkey,
			     sizeof(mkey), err, sizeof(err));
	json_decref(spec);
	if (mkey[0]) {
		if (ret == -EINVAL)
			return reply_error(q, 400, "bad_request", "%s: %s", mkey, err);
		if (ret == -EACCES)
			return reply_error(q, 403, "forbidden", "%s: %s", mkey, err);
		return reply_error(q, 500, "internal", "%s: %s", mkey, err);
	}
	snapshots_forget(s, forgot);
	if (ret == -EBUSY)
		return reply_error(q, 409, "conflict",
				   "function %s has a snapshot building; try again when it is done",
				   q->route.id);
	if (ret == -EINPROGRESS)
		return reply_error(q, 409, "conflict",
				   "function %s is being deleted; PUT it again once the delete is "
				   "done (a delete that failed is finished by DELETE)",
				   q->route.id);
	if (ret) {
		/* A full disk is 507 no_space here too, as everywhere. */
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot record function %s: %s",
				   q->route.id, api_why(ret));
	}
	snprintf(loc, sizeof(loc), "/functions/%s", q->route.id);
	return reply_json_hdr(q, created ? 201 : 200, j, "Location", loc);
}

/* The function is marked "deleting" (and so gone to clients) before
 * anything is stopped, and its file removed only once its instances are
 * stopped: a thawd killed in between leaves the mark, and the next one's
 * recovery (recover.c) finishes the delete. */
int api_function_delete(struct server *s, const char *fn, bool fleet, struct api_err *e,
			char *msg, size_t msglen)
{
	char snap[CHUNK_ID_LEN] = "", failed[128];
	size_t stopped;
	int ret;

	log_clear_error();
	ret = registry_delete_begin(s->reg, fn, snap);
	if (ret == -ENOENT) {
		*e = api_err_known(404, "not_found");
		snprintf(msg, msglen, "no function %s", fn);
		return ret;
	}
	if (ret == -EALREADY) {
		*e = api_err_known(409, "conflict");
		snprintf(msg, msglen, "function %s is being deleted by another request", fn);
		return ret;
	}
	if (ret) {
		*e = api_err_from_errno(ret);
		snprintf(msg, msglen, "cannot delete function %s: %s", fn, api_why(ret));
		return ret;
	}
	/* Starts that finish after this see the function gone and stop
	 * their instance themselves (post_start). */
	ret = api_stop_function_instances(s, fn, &stopped, failed);
	if (ret) {
		*e = api_err_from_errno(ret);
		registry_delete_release(s->reg, fn);
		snprintf(msg, msglen,
			 "function %s is being deleted, but %s: %s; DELETE it again to finish", fn,
			 failed, api_why(ret));
		return ret;
	}
	snapshots_forget(s, snap);
	ret = registry_delete(s->reg, fn, NULL);
	if (ret) {
		registry_delete_release(s->reg, fn);
		*e = api_err_known(500, "internal");
		snprintf(msg, msglen,
			 "function %s is being deleted, but its file could not be removed: %s; "
			 "DELETE it again to finish",
			 fn, api_why(ret));
		return ret;
	}
	pr_info("function %s deleted, %zu instance(s) stopped", fn, stopped);
	/* Its user namespace's range goes back to the pool, with its image's
	 * rootfs idmapped to it, once nothing of it runs: now, or when its
	 * last snapshot job ends (userns_holds.h). */
	userns_release_unheld(s, fn);
	if (fleet)
		remote_sync_forget(s, fn);
	return 0;
}

int api_delete_function(struct req *q)
{
	struct api_err e;
	char msg[512];

	if (api_function_delete(q->srv, q->route.id, true, &e, msg, sizeof(msg)))
		return reply_error(q, e.status, e.code, "%s", msg);
	return reply_empty(q, 204);
}

/* ---- snapshots ---- */


int api_post_snapshot(struct req *q)
{
	struct server *s = q->srv;
	enum snapshots_step step;
	struct api_err e;
	json_t *j = NULL;
	char loc[64], jid[32];
	bool wait;
	int ret, jerr = 0;

	if (query_bool(req_query(q, "wait"), &wait))
		return reply_error(q, 400, "bad_request", "wait must be 0 or 1");
	if (!registry_exists(s->reg, q->route.id))
		return reply_error(q, 404, "not_found", "no function %s", q->route.id);
	if (server_refusing(s))
		return reply_error_hdr(q, 503, "Retry-After", SNAPSHOT_RETRY_AFTER,
				       "shutting_down", "thawd is stopping");
	ret = snapshots_launch(s, q->route.id, jid, &step);
	if (ret && step == SNAPSHOTS_RESERVE) {
		if (ret == -EAGAIN)
			return reply_error_hdr(q, 503, "Retry-After", SNAPSHOT_RETRY_AFTER,
					       "no_capacity",
					       "%u snapshot(s) are running already (--max-snapshots)",
					       s->opts.max_snapshots);
		if (ret == -ESHUTDOWN)
			return reply_error_hdr(q, 503, "Retry-After", SNAPSHOT_RETRY_AFTER,
					       "shutting_down", "thawd is stopping");
		e = api_err_from_errno(ret);
		return reply_error(q, e.status, e.code, "%s", strerror(-ret));
	}
	if (ret && step == SNAPSHOTS_BEGIN) {
		if (ret == -ENOENT)
			return reply_error(q, 404, "not_found", "no function %s", q->route.id);
		if (ret == -EBUSY)
			return reply_error(q, 409, "conflict",
					   "a snapshot of %s is already building", q->route.id);
		/* Recording it began (a full disk: 507 no_space). */
		e = api_err_from_errno(ret);
		return reply_error(q, e.status, e.code, "%s", api_why(ret));
	}
	if (ret)
		return reply_error(q, 500, "internal", "cannot start the snapshot: %s",
				   strerror(-ret));
	snprintf(loc, sizeof(loc), "/jobs/%s", jid);
	if (!wait) {
		if (jobs_get_json(s->jobs, jid, &j, NULL))
			return reply_error(q, 500, "internal", "job %s vanished", jid);
		return reply_json_hdr(q, 202, json_pack("{s:o}", "job", j), "Location", loc);
	}
	jobs_wait(s->jobs, jid);
	if (jobs_get_json(s->jobs, jid, &j, &jerr))
		return reply_error(q, 500, "internal", "job %s vanished", jid);
	if (jerr) {
		const char *msg = json_string_value(
			json_object_get(json_object_get(j, "error"), "message"));
		int r;

		e = api_err_from_errno(jerr);
		r = reply_error(q, e.status, e.code, "%s", msg ? msg : strerror(-jerr));

		json_decref(j);
		return r;
	}
	return reply_json_hdr(q, 200, json_pack("{s:o}", "job", j), "Location", loc);
}
/* ---- jobs ---- */

int api_get_jobs(struct req *q)
{
	json_t *arr;
	int ret = jobs_list_json(q->srv->jobs, &arr);

	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, json_pack("{s:o}", "jobs", arr));
}

int api_get_job(struct req *q)
{
	json_t *j;
	int ret = jobs_get_json(q->srv->jobs, q->route.id, &j, NULL);

	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no job %s", q->route.id);
	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, j);
}

