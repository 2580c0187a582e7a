/* SPDX-License-Identifier: Apache-2.0 */
/* api_functions.c — the control plane's routes (server/api.h): functions
 * (GET, PUT, DELETE /functions[/<id>]), their snapshots (POST
 * /functions/<id>/snapshot, run as jobs on their own threads) and the jobs
 * (GET /jobs[/<jid>]).
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "function/confine.h"
#include "function/spec.h"
#include "images/image.h"
#include "prewarm/prewarm.h"
#include "server/api.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/remote_sync.h"

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

/* Drop a snapshot nobody points at any more: its chunks go at the next gc. */
static void forget_snapshot(struct server *s, const char *snap)
{
	int ret;

	if (!snap[0])
		return;
	ret = store_manifest_delete(s->store, snap);
	if (ret && ret != -ENOENT)
		pr_warn("cannot delete snapshot %s: %s", snap, api_why(ret));
}

/* A function runs as root in its container: its rootfs, its directory,
 * its mounts' sources and a local image only where the operator allows
 * (thawd --allow-root).  The key at fault (in mkey, for a mount), with why
 * in err, or NULL.  An image's function has its cwd in the image.  Checked
 * again where they are used (function/confine.h). */
static const char *spec_path_forbidden(struct server *s, const json_t *spec, char *mkey,
				       size_t mkey_len, char *err, size_t errlen)
{
	const char *image = json_string_value(json_object_get(spec, "image"));
	enum image_transport t;
	char local[PATH_MAX];
	const char *key;

	key = function_paths_forbidden(&s->cfg, json_string_value(json_object_get(spec, "bundle")),
				       json_string_value(json_object_get(spec, "cwd")), image, err,
				       errlen);
	if (key)
		return key;
	key = function_mounts_forbidden(&s->cfg, json_object_get(spec, "mounts"), mkey, mkey_len,
					err, errlen);
	if (key)
		return key;
	if (image && !spec_image_ref(image, &t, local, sizeof(local), NULL, 0) &&
	    t != IMAGE_DOCKER && !config_path_allowed(&s->cfg, local, err, errlen))
		return "image";
	return NULL;
}

int api_put_function(struct req *q)
{
	struct server *s = q->srv;
	char err[512] = "", loc[128], forgot[CHUNK_ID_LEN] = "", mkey[48];
	json_t *spec = NULL, *j = NULL;
	const char *key;
	bool created = false;
	int ret;

	if (atomic_load(&s->stopping))
		return reply_error(q, 503, "shutting_down", "thawd is stopping");
	log_clear_error();
	ret = function_body_parse(q->route.id, q->body, q->len, &spec, err, sizeof(err));
	if (ret == -EINVAL)
		return reply_error(q, 400, "bad_request", "%s", err);
	if (!ret && (key = spec_path_forbidden(s, spec, mkey, sizeof(mkey), err, sizeof(err)))) {
		json_decref(spec);
		return reply_error(q, 403, "forbidden", "%s: %s", key, err);
	}
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot check the spec: %s", err);
	}
	ret = registry_put(s->reg, q->route.id, spec, &created, forgot);
	json_decref(spec);
	forget_snapshot(s, forgot);
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
	ret = registry_get_json(s->reg, q->route.id, &j);
	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	snprintf(loc, sizeof(loc), "/functions/%s", q->route.id);
	return reply_json_hdr(q, created ? 201 : 200, j, "Location", loc);
}

/* The function is marked "deleting" (and so gone to clients) before
 * anything is stopped, and its file removed only once its instances are
 * stopped: a thawd killed in between leaves the mark, and the next one's
 * recovery (recover.c) finishes the delete. */
int api_delete_function(struct req *q)
{
	struct server *s = q->srv;
	const char *fn = q->route.id;
	char snap[CHUNK_ID_LEN] = "", failed[128];
	size_t stopped;
	int ret;

	log_clear_error();
	ret = registry_delete_begin(s->reg, fn, snap);
	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no function %s", fn);
	if (ret == -EALREADY)
		return reply_error(q, 409, "conflict",
				   "function %s is being deleted by another request", fn);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot delete function %s: %s", fn,
				   api_why(ret));
	}
	/* Starts that finish after this see the function gone and stop
	 * their instance themselves (post_start). */
	ret = api_stop_function_instances(s, fn, &stopped, failed);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		registry_delete_release(s->reg, fn);
		return reply_error(q, e.status, e.code,
				   "function %s is being deleted, but %s: %s; DELETE it again to "
				   "finish",
				   fn, failed, api_why(ret));
	}
	forget_snapshot(s, snap);
	ret = registry_delete(s->reg, fn, NULL);
	if (ret) {
		registry_delete_release(s->reg, fn);
		return reply_error(q, 500, "internal",
				   "function %s is being deleted, but its file could not be "
				   "removed: %s; DELETE it again to finish",
				   fn, api_why(ret));
	}
	pr_info("function %s deleted, %zu instance(s) stopped", fn, stopped);
	remote_sync_forget(s, fn);
	return reply_empty(q, 204);
}

/* ---- snapshots ---- */

struct snapshot_task {
	struct server *srv;
	char function[64];
	char job[32];
	json_t *spec;
};

static void snapshot_task_free(void *p)
{
	struct snapshot_task *t = p;

	json_decref(t->spec);
	free(t);
}

/* Where a snapshot is (its image's pull and unpack, then its phases): its job's "progress". */
static void snapshot_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct snapshot_task *t = arg;

	jobs_progress(t->srv->jobs, t->job, phase, done, total);
}

static int snapshot_run(void *arg, json_t **result, char *err, size_t errlen)
{
	struct snapshot_task *t = arg;
	struct server *s = t->srv;
	struct snapshot_result res = { 0 };
	struct func_spec *spec = NULL;
	char perr[512] = "", forgot[CHUNK_ID_LEN] = "", log[PATH_MAX];
	json_t *tag = NULL;
	int ret;

	log_clear_error();
	ret = spec_parse(t->spec, t->function, &spec, perr, sizeof(perr));
	if (ret) {
		snprintf(err, errlen, "the recorded spec does not parse: %s",
			 perr[0] ? perr : strerror(-ret));
		goto out;
	}
	/* Tagged as this thawd's, so that a manifest a crash leaves unnamed is
	 * known as such at the next start-up (recover.c). */
	tag = json_pack("{s:o}", "thawd", registry_snapshot_tag(s->reg, t->function, t->job));
	if (!tag) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	pr_info("snapshot of %s (%s) begins", t->function, t->job);
	log_clear_error();
	/* The function's output goes to the job's log (GET /jobs/<jid>/logs). */
	ret = prewarm_snapshot_opts(
		&s->cfg, s->store, spec,
		&(struct prewarm_opts){
			.extra_meta = tag,
			.log_path = jobs_log_path(s->jobs, t->job, log, sizeof(log)) ? NULL : log,
			.progress = snapshot_progress,
			.progress_arg = t },
		&res);
	if (ret) {
		snprintf(err, errlen, "%s", api_why(ret));
		goto out;
	}
	*result = json_pack("{s:s, s:I, s:I, s:O}", "snapshot", res.snapshot_id, "image_bytes",
			    (json_int_t)res.image_bytes, "stored_bytes",
			    (json_int_t)res.stored_bytes, "timings_ms",
			    res.timings_ms ? res.timings_ms : json_null());
	if (*result && res.image_digest[0])
		json_object_set_new(*result, "image", json_string(res.image_digest));
	if (registry_snapshot_end(s->reg, t->function, t->job, res.snapshot_id, res.image_bytes,
				  res.stored_bytes, res.timings_ms, NULL, forgot) == -ENOENT) {
		pr_warn("function %s was deleted or changed during its snapshot: snapshot %s "
			"is dropped",
			t->function, res.snapshot_id);
		forget_snapshot(s, res.snapshot_id);
	}
	/* The snapshot this one replaced: nothing starts from it any more (a
	 * start in flight holds a lease on it, a mapped instance its tier entry). */
	forget_snapshot(s, forgot);
	pr_info("snapshot of %s ready: %s, %llu bytes of image", t->function, res.snapshot_id,
		(unsigned long long)res.image_bytes);
	remote_sync_push(s, t->function); /* with a remote: the fleet's, in the background */
out:
	if (ret) {
		pr_warn("snapshot of %s failed: %s", t->function, err);
		registry_snapshot_end(s->reg, t->function, t->job, NULL, 0, 0, NULL, err, NULL);
	}
	metrics_snapshot(s->metrics, ret ? "failed" : "ok");
	snapshot_result_release(&res);
	spec_free(spec);
	json_decref(tag);
	return ret;
}

/* Where snapshot_launch failed. */
enum launch_step { LAUNCH_RESERVE, LAUNCH_BEGIN, LAUNCH_RUN };

/* A snapshot job of fn, reserved (--max-snapshots), begun in the registry
 * (its state "building") and running on its thread; its id in jid.  0, or
 * -errno and *step: at LAUNCH_RESERVE -EAGAIN (the jobs are full) or
 * -ESHUTDOWN; at LAUNCH_BEGIN -ENOENT (no such function), -EBUSY (one is
 * building) or the registry's write error; at LAUNCH_RUN the thread's. */
static int snapshot_launch(struct server *s, const char *fn, char jid[32],
			   enum launch_step *step)
{
	struct snapshot_task *t = NULL;
	struct job *job;
	json_t *spec = NULL;
	int ret;

	*step = LAUNCH_RESERVE;
	job = jobs_reserve(s->jobs, "snapshot", fn, &ret);
	if (!job)
		return ret;
	snprintf(jid, 32, "%s", job_id(job));
	*step = LAUNCH_BEGIN;
	ret = registry_snapshot_begin(s->reg, fn, jid, &spec);
	if (ret) {
		jobs_unreserve(s->jobs, job);
		return ret;
	}
	*step = LAUNCH_RUN;
	t = calloc(1, sizeof(*t));
	if (!t) {
		json_decref(spec);
		jobs_unreserve(s->jobs, job);
		registry_snapshot_end(s->reg, fn, jid, NULL, 0, 0, NULL, "out of memory", NULL);
		return -ENOMEM;
	}
	t->srv = s;
	snprintf(t->function, sizeof(t->function), "%s", fn);
	snprintf(t->job, sizeof(t->job), "%s", jid);
	t->spec = spec;
	ret = jobs_run(s->jobs, job, snapshot_run, t, snapshot_task_free);
	if (ret)
		registry_snapshot_end(s->reg, fn, jid, NULL, 0, 0, NULL, "cannot start a thread",
				      NULL);
	return ret;
}

int api_snapshot_launch(struct server *s, const char *fn, char jid[32])
{
	enum launch_step step;

	return snapshot_launch(s, fn, jid, &step);
}

int api_post_snapshot(struct req *q)
{
	struct server *s = q->srv;
	enum launch_step step;
	struct api_err e;
	json_t *j = NULL;
	char loc[64], jid[32];
	bool wait;
	int ret, jerr = 0;

	if (query_bool(req_query(q, "wait"), &wait))
		return reply_error(q, 400, "bad_request", "wait must be 0 or 1");
	if (!registry_exists(s->reg, q->route.id))
		return reply_error(q, 404, "not_found", "no function %s", q->route.id);
	if (atomic_load(&s->stopping))
		return reply_error_hdr(q, 503, "Retry-After", SNAPSHOT_RETRY_AFTER,
				       "shutting_down", "thawd is stopping");
	ret = snapshot_launch(s, q->route.id, jid, &step);
	if (ret && step == LAUNCH_RESERVE) {
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
	if (ret && step == LAUNCH_BEGIN) {
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

