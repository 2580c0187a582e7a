/* SPDX-License-Identifier: Apache-2.0 */
/* api.c — what each request of the HTTP API (docs/API.md) does.
 *
 * Called on the connection's own thread with the request routed, its token
 * checked and its body read (http.c).  Every path answers, and every failure
 * is an error answer: nothing here may take the server down.
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "prewarm/prewarm.h"
#include "function/confine.h"
#include "function/spec.h"
#include "restore/gpu_restore.h"
#include "restore/instance.h"
#include "restore/instance_ended.h"
#include "restore/shim.h"
#include "restore/tier.h"
#include "server/errors.h"
#include "server/fallback.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/logs.h"
#include "server/lifetimes.h"
#include "server/metrics.h"
#include "server/pool.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "server/standby.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STAT_MAX_AGE_NS (5ull * 1000 * 1000 * 1000)
#define START_RETRY_AFTER    "1"
#define SNAPSHOT_RETRY_AFTER "10"

/* The message of a failure: the words of the place that failed, else errno's. */
static const char *why(int err)
{
	const char *m = log_last_error();

	return m && *m ? m : strerror(-err);
}

/* ---- /healthz, /metrics ---- */

static int get_healthz(struct req *q)
{
	return reply_json(q, 200, json_pack("{s:s}", "status", "ok"));
}

static void refresh_store_stat(struct server *s)
{
	pthread_mutex_lock(&s->stat_lock);
	if (!s->stat_ns || now_ns() - s->stat_ns > STAT_MAX_AGE_NS) {
		struct store_stats st;

		s->stat_ok = store_stat(s->store, &st) == 0;
		if (s->stat_ok)
			s->stat = st;
		s->stat_ns = now_ns();
	}
	pthread_mutex_unlock(&s->stat_lock);
}

/* The GPUs for /metrics: each one's free memory and the instances (running
 * ones, whose record names their GPUs) on it; NULL on a host without. */
static json_t *gpu_gauges(struct server *s)
{
	struct cuda_device *devs = NULL;
	json_t *out = NULL, *list = NULL, *rec, *g;
	size_t n = 0, i, k;

	if (!cuda_available() || cuda_devices(&devs, &n) || !n)
		goto out;
	out = json_array();
	for (size_t d = 0; out && d < n; d++)
		json_array_append_new(out, json_pack("{s:i, s:s, s:I, s:i}", "index",
						     devs[d].ordinal, "uuid", devs[d].uuid,
						     "free_bytes", (json_int_t)devs[d].free_bytes,
						     "instances", 0));
	if (!out || instance_list(&s->cfg, &list))
		goto out;
	json_array_foreach(list, i, rec) {
		const char *st = json_string_value(json_object_get(rec, "state"));

		if (!st || (strcmp(st, "running") && strcmp(st, "starting")))
			continue;
		json_array_foreach(json_object_get(rec, "gpus"), k, g) {
			const char *uuid = json_string_value(json_object_get(g, "uuid"));
			size_t d;
			json_t *v;

			json_array_foreach(out, d, v) {
				if (uuid && !strcmp(uuid, json_string_value(json_object_get(v, "uuid"))))
					json_object_set_new(v, "instances",
							    json_integer(json_integer_value(json_object_get(v, "instances")) + 1));
			}
		}
	}
out:
	json_decref(list);
	free(devs);
	return out;
}

static int get_metrics(struct req *q)
{
	struct server *s = q->srv;
	struct metrics_gauges g = { 0 };
	json_t *pools;
	size_t alive = 0, len = 0;
	char *text = NULL;
	int ret;

	if (s->tier) {
		g.have_tier = true;
		g.ram_tier_bytes = tier_used_bytes(s->tier);
		g.ram_tier_budget_bytes = tier_budget_bytes(s->tier);
	}
	refresh_store_stat(s);
	pthread_mutex_lock(&s->stat_lock);
	if (s->stat_ok) {
		g.have_store = true;
		g.store_logical = s->stat.logical_bytes;
		g.store_unique = s->stat.unique_bytes;
		g.store_stored = s->stat.stored_bytes;
	}
	pthread_mutex_unlock(&s->stat_lock);
	insts_count(s->insts, &alive);
	g.instances_running = alive;
	pools = s->standby ? standby_pool_sizes(s->standby) : NULL;
	g.standby_pools = pools;
	g.gpus = gpu_gauges(s);
	ret = metrics_render(s->metrics, &g, &text, &len);
	if (!ret && s->pool)
		ret = pool_metrics_append(s->pool, &text, &len);
	json_decref(g.gpus);
	json_decref(pools);
	if (ret)
		return reply_error(q, 500, "internal", "cannot write the metrics: %s",
				   strerror(-ret));
	return reply_text(q, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- functions ---- */

static int get_functions(struct req *q)
{
	json_t *arr;
	int ret = registry_list_json(q->srv->reg, &arr);

	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, json_pack("{s:o}", "functions", arr));
}

static int get_function(struct req *q)
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
		pr_warn("cannot delete snapshot %s: %s", snap, why(ret));
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

static int put_function(struct req *q)
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
				   q->route.id, why(ret));
	}
	ret = registry_get_json(s->reg, q->route.id, &j);
	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	snprintf(loc, sizeof(loc), "/functions/%s", q->route.id);
	return reply_json_hdr(q, created ? 201 : 200, j, "Location", loc);
}

static const char *record_id(json_t *rec)
{
	const char *id = json_string_value(json_object_get(rec, "instance"));

	return id ? id : json_string_value(json_object_get(rec, "id"));
}

/* Whether rec is an instance that a start of this thawd is still making:
 * that start stops it itself if its function is gone when it is done. */
static bool own_start(json_t *rec)
{
	const char *state = json_string_value(json_object_get(rec, "state"));
	json_t *pid = json_object_get(rec, "starter_pid");

	return state && !strcmp(state, "starting") && json_is_integer(pid) &&
	       json_integer_value(pid) == getpid();
}

/* Stop instance id, unless another request is stopping it: 0, -EALREADY
 * (another is: it will be gone when that one is done), or instance_stop's
 * error (-ENOENT: no record, already stopped).  Counted in /metrics under
 * label; why is kept with its ended record. */
static int stop_instance(struct server *s, const char *id, const char *label, const char *why)
{
	struct instance_end end = { 0 };
	int ret;

	snprintf(end.why, sizeof(end.why), "%s", why);
	ret = lifetimes_stop_instance(s, id, 0, &end);
	if (ret == 0)
		metrics_instance_stopped(s->metrics, label);
	return ret;
}

/* Stop the instances of function (all of them: its standbys, this thawd's,
 * and those on disk that name it), but for those its starts in progress are
 * making.  *stopped: how many were stopped.  0 once none is left (or only
 * one another request is stopping), else the error of the first that could
 * not be stopped, or of the listing; what failed, in words, into failed. */
static int stop_function_instances(struct server *s, const char *function, size_t *stopped,
				   char failed[128])
{
	struct inst_ref *refs = NULL;
	json_t *list = NULL, *rec;
	size_t n = 0, i;
	int ret, err = 0;

	*stopped = 0;
	failed[0] = '\0';
	standby_retire_function(s->standby, function);
	if (insts_take(s->insts, function, &refs, &n) == 0) {
		for (i = 0; i < n; i++) {
			ret = stop_instance(s, refs[i].id, "function_deleted", "its function was deleted");
			if (ret == 0)
				(*stopped)++;
			else if (ret != -EALREADY && ret != -ENOENT)
				pr_warn("stop instance %s of %s: %s", refs[i].id, function,
					why(ret));
		}
	}
	free(refs);
	/* The records on disk are the word on what is left: those above that
	 * failed are still there, and are tried once more. */
	log_clear_error();
	ret = instance_list(&s->cfg, &list);
	if (ret || !json_is_array(list)) {
		err = ret ? ret : -EIO;
		snprintf(failed, 128, "its instances could not be listed");
		pr_warn("function %s: cannot list its instances: %s", function, why(err));
		goto out;
	}
	json_array_foreach(list, i, rec)
	{
		const char *fn = json_string_value(json_object_get(rec, "function"));
		const char *id = record_id(rec);

		if (!fn || !id || strcmp(fn, function) || !id_valid(id) || own_start(rec))
			continue;
		ret = stop_instance(s, id, "function_deleted", "its function was deleted");
		if (ret == 0) {
			(*stopped)++;
		} else if (ret != -EALREADY && ret != -ENOENT) {
			pr_warn("stop instance %s of %s: %s", id, function, why(ret));
			if (!err) {
				err = ret;
				snprintf(failed, 128, "instance %s could not be stopped", id);
			}
		}
	}
out:
	json_decref(list);
	return err;
}

/* The function is marked "deleting" (and so gone to clients) before
 * anything is stopped, and its file removed only once its instances are
 * stopped: a thawd killed in between leaves the mark, and the next one's
 * recovery (recover.c) finishes the delete. */
static int delete_function(struct req *q)
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
				   why(ret));
	}
	/* Starts that finish after this see the function gone and stop
	 * their instance themselves (post_start). */
	ret = stop_function_instances(s, fn, &stopped, failed);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		registry_delete_release(s->reg, fn);
		return reply_error(q, e.status, e.code,
				   "function %s is being deleted, but %s: %s; DELETE it again to "
				   "finish",
				   fn, failed, why(ret));
	}
	forget_snapshot(s, snap);
	ret = registry_delete(s->reg, fn, NULL);
	if (ret) {
		registry_delete_release(s->reg, fn);
		return reply_error(q, 500, "internal",
				   "function %s is being deleted, but its file could not be "
				   "removed: %s; DELETE it again to finish",
				   fn, why(ret));
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
		snprintf(err, errlen, "%s", why(ret));
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

static int post_snapshot(struct req *q)
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
		return reply_error(q, e.status, e.code, "%s", why(ret));
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

/* ---- starts ---- */

static json_t *start_answer(const struct instance *in)
{
	json_t *j = instance_to_json(in);

	if (!j)
		j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b, s:{s:f, s:f, s:f, s:f, s:f}}",
			      "instance", in->id, "function", in->function, "snapshot",
			      in->snapshot, "endpoint", in->endpoint, "pid", (int)in->pid, "tier",
			      in->tier_hit ? "ram" : "disk", "lazy", in->lazy, "timings_ms",
			      "materialize", in->t.materialize, "criu_restore", in->t.criu_restore,
			      "gpu_restore", in->t.gpu_restore, "ready", in->t.ready, "total",
			      in->t.total);
	else if (!json_object_get(j, "function"))
		json_object_set_new(j, "function", json_string(in->function));
	return j;
}

static int start_failed(struct req *q, unsigned status, const char *code, const char *hname,
			const char *hvalue, const char *msg)
{
	metrics_start_failed(q->srv->metrics, q->route.id, code);
	/* A 429 or 503 with Retry-After is a refusal: nothing was restored. */
	if (hname && (status == 429 || status == 503))
		metrics_start_refused(q->srv->metrics, code);
	return reply_error_hdr(q, status, hname, hvalue, code, "start of %s: %s", q->route.id,
			       msg);
}

/* A start of snapshot snap failed with err: the answer.  A start that lost
 * a race says what the race left: the function deleted meanwhile (404 for
 * whatever failed), or, where something was missing (ENOENT), its snapshot
 * forgotten (409 no_snapshot) or replaced (409 conflict).  ENOENT with the
 * same snapshot still current is the store's loss: its manifest gone (500
 * damaged), or something else (500 internal).  Damaged data (EBADMSG: a
 * chunk, a pack index, a manifest, or a chunk the manifest names that is
 * nowhere) marks the snapshot damaged in the registry. */
static int start_lost(struct req *q, const char *snap, int err)
{
	struct server *s = q->srv;
	const char *fn = q->route.id;
	char cur[CHUNK_ID_LEN], msg[1024];
	enum snap_state st = SNAP_NONE;
	struct manifest *m = NULL;
	struct api_err e;
	int ret;

	snprintf(msg, sizeof(msg), "%s", why(err));
	pr_warn("start of %s failed: %s", fn, msg);
	ret = registry_ready_snapshot(s->reg, fn, cur, &st);
	if (ret == -ENOENT)
		return start_failed(q, 404, "not_found", NULL, NULL,
				    "the function was deleted during the start");
	if (err == -ENOENT && ret == -ENODATA)
		return start_failed(q, 409, "no_snapshot", NULL, NULL,
				    "the function's snapshot was forgotten during the start (its "
				    "spec changed)");
	if (err == -ENOENT && strcmp(cur, snap))
		return start_failed(q, 409, "conflict", NULL, NULL,
				    "the function's snapshot was replaced during the start; start "
				    "again");
	if (err == -ENOENT) {
		ret = store_manifest_load(s->store, snap, &m, NULL);
		manifest_free(m);
		if (ret == -ENOENT || ret == -EBADMSG) {
			err = -EBADMSG;
			snprintf(msg, sizeof(msg), "snapshot %s: its manifest is %s", snap,
				 ret == -ENOENT ? "missing from the store" : "damaged");
		}
	}
	e = api_err_from_errno(err);
	if (err == -EBADMSG) {
		uint8_t h[CHUNK_HASH_LEN];

		ret = registry_snapshot_damaged(s->reg, fn, snap, msg);
		if (ret && ret != -ENOENT)
			pr_warn("function %s: cannot mark snapshot %s damaged: %s", fn, snap,
				strerror(-ret));
		/* Out of the index: a new snapshot writes it anew. */
		if (!fallback_damaged_chunk(msg, h))
			store_chunk_drop_damaged(s->store, h);
	}
	return start_failed(q, e.status, e.code, e.status == 503 ? "Retry-After" : NULL,
			    START_RETRY_AFTER, msg);
}

/* A start whose snapshot's image this host could not have (instance.h,
 * image_get_digest): its source lacks it, refuses, cannot be reached, or
 * holds another image now (409 image_changed: a new snapshot takes that
 * one).  The reason names the image by its digest. */
static int image_lost(struct req *q, int err)
{
	char msg[1024];
	struct api_err e;

	snprintf(msg, sizeof(msg), "%s", why(err));
	pr_warn("start of %s failed: %s", q->route.id, msg);
	if (err == -ESTALE)
		return start_failed(q, 409, "image_changed", NULL, NULL, msg);
	e = api_err_from_errno(err);
	if (e.status == 500)
		e = (struct api_err){ 502, "image_unavailable" };
	return start_failed(q, e.status, e.code, e.status == 503 ? "Retry-After" : NULL,
			    START_RETRY_AFTER, msg);
}

/* A start that booted, its snapshot unable to serve (boot_why), and whose
 * boot failed with err: the boot's error, saying both.  A function deleted
 * meanwhile is a 404, as for any start. */
static int boot_lost(struct req *q, const char *boot_why, int err)
{
	char msg[1024];
	struct api_err e;

	snprintf(msg, sizeof(msg), "its snapshot cannot serve (%.400s), and booting it failed: %s",
		 boot_why, why(err));
	pr_warn("start of %s failed: %s", q->route.id, msg);
	if (!registry_exists(q->srv->reg, q->route.id))
		return start_failed(q, 404, "not_found", NULL, NULL,
				    "the function was deleted during the start");
	e = api_err_from_errno(err);
	return start_failed(q, e.status, e.code, e.status == 503 ? "Retry-After" : NULL,
			    START_RETRY_AFTER, msg);
}

/* A query number of seconds, 0 to a year: 0, or -EINVAL with why. */
static int query_seconds(struct req *q, const char *key, double *out, char *why, size_t len)
{
	const char *v = req_query(q, key);

	if (v && query_seconds_parse(v, SPEC_MAX_SECONDS, out)) {
		snprintf(why, len, "%s: must be a number of seconds from 0 to %.0f (decimal digits)",
			 key, SPEC_MAX_SECONDS);
		return -EINVAL;
	}
	return 0;
}

/* The start's limits: the function's max_instances, idle_s (else thawd's
 * default), max_lifetime_s and stop_grace_s, with ?idle_s= and
 * ?max_lifetime_s= overriding them for this instance. */
static int start_limits(struct req *q, const json_t *f, unsigned *max_instances,
			struct inst_limits *lim, char *why, size_t len)
{
	const json_t *g;

	memset(lim, 0, sizeof(*lim));
	lim->idle_s = q->srv->opts.idle_s;
	lim->grace_s = SPEC_DEFAULT_STOP_GRACE_S;
	*max_instances = (unsigned)json_integer_value(json_object_get(f, "max_instances"));
	if ((g = json_object_get(f, "idle_s")))
		lim->idle_s = json_number_value(g);
	lim->lifetime_s = json_number_value(json_object_get(f, "max_lifetime_s"));
	if ((g = json_object_get(f, "stop_grace_s")))
		lim->grace_s = json_number_value(g);
	if (query_seconds(q, "idle_s", &lim->idle_s, why, len) ||
	    query_seconds(q, "max_lifetime_s", &lim->lifetime_s, why, len))
		return -EINVAL;
	return 0;
}

/* The host's MemAvailable in bytes; 0 when it cannot be read. */
static uint64_t mem_available(void)
{
	unsigned long long kib = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kib * 1024;
}

/* Admission by memory (--mem-reserve): would a start of fn, at most its
 * snapshot's image in new memory (a materialisation into the tier, or a
 * copy of every page), leave the host less than the reserve?  Refused
 * before anything is restored, rather than killed by the OOM killer
 * half-way; why says the figures. */
static bool memory_admits(struct server *s, const char *fn, const json_t *f, char *why,
			  size_t len)
{
	uint64_t avail, need;
	char a[32], b[32], c[32];

	if (!s->opts.mem_reserve)
		return true;
	need = (uint64_t)json_integer_value(
		json_object_get(json_object_get(f, "snapshot"), "image_bytes"));
	avail = mem_available();
	if (avail >= need && avail - need >= s->opts.mem_reserve)
		return true;
	snprintf(why, len, "the host has %s of memory available; a start of %s may take %s, "
		 "which would leave less than --mem-reserve %s", fmt_bytes(avail, a), fn,
		 fmt_bytes(need, b), fmt_bytes(s->opts.mem_reserve, c));
	return false;
}

/* Where a GPU start's GPUs go (gpu_place): the ones ?gpu= asks for (an
 * index or a UUID, comma-separated for a function of several), else those
 * with the most free memory once the starts in flight have taken theirs,
 * each keeping --gpu-mem-reserve free.  Held in *gp until the start's CUDA
 * restore.  0 (nothing to place for a CPU function), or the HTTP status of
 * the refusal with code and why: 400 for a request this host cannot meet,
 * 503 when the GPUs have no room (or no driver). */
static unsigned place_gpus(struct req *q, const json_t *f, const char *snap,
			   struct gpu_placement *gp, const char **code, char *why, size_t len)
{
	const char *asked = req_query(q, "gpu");
	struct manifest *m = NULL;
	int ret;

	memset(gp, 0, sizeof(*gp));
	if (!json_is_true(json_object_get(f, "gpu"))) {
		*code = "bad_request";
		snprintf(why, len, "gpu=%s: %s is not a GPU function", asked ? asked : "",
			 q->route.id);
		return asked ? 400 : 0;
	}
	if (store_manifest_load(q->srv->store, snap, &m, NULL))
		return 0; /* the start reports a missing manifest itself */
	ret = gpu_place(m->meta, asked, q->srv->opts.gpu_mem_reserve, gp, why, len);
	manifest_free(m);
	*code = ret == -EINVAL ? "bad_request" : ret == -EAGAIN ? "no_gpu_memory" : "no_gpu";
	return !ret ? 0 : ret == -EINVAL ? 400 : 503;
}

/* A standby of fn's snapshot snap, activated into *in onto gp's GPUs: 0,
 * or non-zero when there was none or it failed (the start then restores as
 * usual).  Counted as a hit or a miss for a function that keeps standbys. */
static int take_standby(struct server *s, const char *fn, const json_t *f, const char *snap,
			struct gpu_placement *gp, struct instance *in)
{
	char id[64];
	int ret = -ENOENT;

	while (standby_take(s->standby, fn, snap, id)) {
		ret = instance_activate_on(&s->cfg, id, gp, in);
		if (ret == 0)
			break;
		pr_warn("standby %s of %s not usable (%s): trying another", id, fn,
			log_last_error()[0] ? log_last_error() : why(ret));
		log_clear_error();
	}
	if (ret == 0 || json_integer_value(json_object_get(f, "standby")) > 0)
		metrics_standby(s->metrics, fn, ret == 0);
	return ret;
}

/* Restore snap onto gp into *in, or, when that fails for a reason of the
 * snapshot or the host (fallback_applies) and fails is false, boot fn cold
 * instead (*reason says why).  A snapshot whose boot worked is marked, and
 * its re-snapshot launched (fallback_mark), as is a damaged one whether the
 * boot worked or not.  0, or the restore's -errno, its error then saying
 * why the boot did not answer either. */
static int restore_or_boot(struct server *s, const char *fn, const char *snap, bool fails,
			   struct gpu_placement *gp, struct instance *in, const char **reason)
{
	char why[768], msg[1024];
	int ret, boot;

	ret = instance_start_on(&s->cfg, s->store, s->tier, snap, INSTANCE_MODE_AUTO, gp, in);
	if (!ret || fails || !fallback_applies(s, fn, snap, ret, in, reason, why, sizeof(why)))
		return ret;
	snprintf(msg, sizeof(msg), "%s", log_last_error());
	pr_warn("start of %s: its snapshot did not restore (%s): booting it instead", fn, why);
	/* What is left half-made is gone (instance_start's promise). */
	gpu_release(gp);
	boot = fallback_boot(s, fn, snap, why, false, in);
	if (!strcmp(*reason, FALLBACK_DAMAGED) && registry_snapshot_damaged(s->reg, fn, snap, why))
		pr_warn("function %s: cannot mark snapshot %s damaged", fn, snap);
	if (!boot || !strcmp(*reason, FALLBACK_DAMAGED))
		fallback_mark(s, fn, snap, why);
	if (!boot)
		return 0;
	log_set_error("%s; booting it instead failed too: %.300s", msg, log_last_error());
	return ret;
}

/* A start of q's function, whose GET /functions/<id> object f (NULL if it
 * is gone) gives its limits, standbys and snapshot's size. */
static int start_function(struct req *q, const json_t *f)
{
	struct server *s = q->srv;
	const char *fn = q->route.id;
	char snap[CHUNK_ID_LEN], loc[128], msg[768], boot_why[768] = "";
	enum snap_state st = SNAP_NONE;
	struct inst_limits lim;
	struct instance in;
	struct gpu_placement gp;
	const char *code = NULL, *boot_reason = NULL;
	/* "on_restore_failure": "fail" (docs/DESIGN.md, "Restore or boot") */
	bool fails = !strcmp(json_string_value(json_object_get(f, "on_restore_failure")) ?: "",
			     "fail");
	double fetch_ms = 0;
	json_t *answer;
	unsigned running, max_instances, have, status;
	bool placed;
	int ret;

	ret = registry_ready_snapshot(s->reg, fn, snap, &st);
	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no function %s", fn);
	metrics_start(s->metrics, fn);
	if (ret) {
		snprintf(msg, sizeof(msg), "no ready snapshot (snapshot state: %s)%s",
			 snap_state_name(st),
			 st == SNAP_BUILDING ? "" : "; POST /functions/<id>/snapshot first");
		return start_failed(q, 409, "no_snapshot", NULL, NULL, msg);
	}
	if (atomic_load(&s->stopping))
		return start_failed(q, 503, "shutting_down", "Retry-After", START_RETRY_AFTER,
				    "thawd is stopping");
	if (!s->tier)
		return start_failed(q, 503, "unavailable", "Retry-After", START_RETRY_AFTER,
				    "the RAM tier is not open (see thawd's log)");
	ret = start_limits(q, f, &max_instances, &lim, msg, sizeof(msg));
	if (ret)
		return start_failed(q, 400, "bad_request", NULL, NULL, msg);
	if (!memory_admits(s, fn, f, msg, sizeof(msg)))
		return start_failed(q, 503, "no_memory", "Retry-After", START_RETRY_AFTER, msg);
	/* Its snapshot marked, or made on a host unlike this one: boot (or,
	 * "on_restore_failure": "fail", say why not), restoring nothing. */
	if (fallback_precheck(s, fn, snap, fails, &boot_reason, boot_why, sizeof(boot_why)) &&
	    fails)
		return start_failed(q, 500, "host_mismatch", NULL, NULL, boot_why);
	memset(&gp, 0, sizeof(gp));
	status = boot_why[0] ? 0 : place_gpus(q, f, snap, &gp, &code, msg, sizeof(msg));
	if (status)
		return start_failed(q, status, code, status == 503 ? "Retry-After" : NULL,
				    START_RETRY_AFTER, msg);
	if (insts_reserve(s->insts, fn, max_instances, &have)) {
		gpu_release(&gp);
		snprintf(msg, sizeof(msg), "function %s has %u instance(s), its max_instances", fn,
			 have);
		return start_failed(q, 429, "too_many_instances", "Retry-After", START_RETRY_AFTER,
				    msg);
	}
	running = atomic_fetch_add(&s->starts_running, 1);
	if (running >= s->opts.max_starts) {
		atomic_fetch_sub(&s->starts_running, 1);
		insts_unreserve(s->insts, fn);
		gpu_release(&gp);
		snprintf(msg, sizeof(msg), "%u start(s) are running already (--max-starts %u)",
			 running, s->opts.max_starts);
		return start_failed(q, 503, "no_capacity", "Retry-After", START_RETRY_AFTER, msg);
	}
	/* A function pulled without its chunks (?fetch=0) gets them now. */
	ret = boot_why[0] ? 0 : remote_sync_fetch(s, snap, &fetch_ms);
	if (ret) {
		atomic_fetch_sub(&s->starts_running, 1);
		insts_unreserve(s->insts, fn);
		gpu_release(&gp);
		snprintf(msg, sizeof(msg), "its snapshot is not in the store and the remote could "
			 "not give it: %s", log_last_error());
		return start_failed(q, 502, "remote_failed", NULL, NULL, msg);
	}
	memset(&in, 0, sizeof(in));
	log_clear_error();
	placed = gp.held;
	ret = take_standby(s, fn, f, snap, &gp, &in);
	/* A standby that failed gave its GPUs back: placed again, as asked. */
	if (ret && placed && !gp.held &&
	    (status = place_gpus(q, f, snap, &gp, &code, msg, sizeof(msg)))) {
		atomic_fetch_sub(&s->starts_running, 1);
		insts_unreserve(s->insts, fn);
		return start_failed(q, status, code, status == 503 ? "Retry-After" : NULL,
				    START_RETRY_AFTER, msg);
	}
	if (ret && boot_why[0])
		ret = fallback_boot(s, fn, snap, boot_why, false, &in);
	else if (ret)
		ret = restore_or_boot(s, fn, snap, fails, &gp, &in, &boot_reason);
	gpu_release(&gp);
	atomic_fetch_sub(&s->starts_running, 1);
	standby_kick(s->standby); /* a refill waits for no start in flight */
	if (!ret) {
		unsigned long long pid_start = 0;

		snprintf(in.function, sizeof(in.function), "%s", fn);
		proc_start_time(in.pid, &pid_start);
		if (insts_add(s->insts, in.id, fn, in.pid, pid_start, false))
			pr_warn("instance %s is not tracked (out of memory)", in.id);
	}
	insts_unreserve(s->insts, fn);
	if (ret && boot_why[0])
		return boot_lost(q, boot_why, ret);
	if (ret && in.failed && !strcmp(in.failed, "image"))
		return image_lost(q, ret);
	if (ret)
		return start_lost(q, snap, ret);
	lim.started_ms = realtime_ms();
	insts_set_limits(s->insts, in.id, &lim);
	if (instance_set_limits(&s->cfg, in.id, lim.idle_s, lim.lifetime_s, lim.grace_s))
		pr_warn("instance %s: its limits are not recorded", in.id);
	if (!registry_exists(s->reg, fn)) {
		/* Deleted while we restored: the delete left this start's
		 * instance to it (own_start), or is stopping it now. */
		insts_remove(s->insts, in.id);
		stop_instance(s, in.id, "function_deleted", "its function was deleted during its start");
		return start_failed(q, 404, "not_found", NULL, NULL,
				    "the function was deleted during the start; its instance "
				    "is stopped");
	}
	if (req_client_gone(q)) {
		/* The gateway gave up (its timeout): nobody will ever use or
		 * delete this instance, so it must not outlive the request. */
		insts_remove(s->insts, in.id);
		stop_instance(s, in.id, "client_gone", "its client gave up waiting for the start");
		pr_warn("start of %s: the client closed the connection before the answer; "
			"instance %s stopped",
			fn, in.id);
		return start_failed(q, 499, "client_gone", NULL, NULL,
				    "the client closed the connection");
	}
	if (in.booted)
		metrics_start_booted(s->metrics, fn, boot_reason ? boot_reason : FALLBACK_MARKED);
	else
		metrics_restore_phases(s->metrics,
				       (double[PHASE_COUNT]){ in.t.materialize, in.t.criu_restore,
							      in.t.gpu_restore, in.t.ready,
							      in.t.total });
	pr_info("instance %s of %s at %s in %.1f ms (%s, %s)", in.id, fn, in.endpoint, in.t.total,
		in.tier_hit ? "ram" : "disk", in.lazy ? "lazy" : "eager");
	snprintf(loc, sizeof(loc), "/instances/%s", in.id);
	answer = start_answer(&in);
	if (answer && fetch_ms > 0)
		json_object_set_new(answer, "remote_fetch_ms", json_real(fetch_ms));
	return reply_json_hdr(q, 201, answer, "Location", loc);
}

static int post_start(struct req *q)
{
	json_t *f = NULL;
	int ret;

	/* Read once: the spec's limits, its standbys, its snapshot's size. */
	registry_get_json(q->srv->reg, q->route.id, &f);
	ret = start_function(q, f);
	json_decref(f);
	return ret;
}

unsigned api_start_internal(struct server *s, const char *fn, json_t **answer)
{
	struct req q = { .srv = s, .method = METHOD_POST, .route.kind = ROUTE_FUNCTION_START,
			 .start_ns = now_ns() };

	snprintf(q.route.id, sizeof(q.route.id), "%s", fn);
	snprintf(q.method_str, sizeof(q.method_str), "POST");
	snprintf(q.path, sizeof(q.path), "/functions/%s/start", fn);
	post_start(&q);
	*answer = q.answer;
	return q.answered ? q.status : 500;
}

/* ---- the image a start restores onto ---- */

/* ---- instances ---- */

/* What a record may not show: a standby's snapshot_meta holds its
 * function's spec, the values of its "env" among it (an API key), and the
 * instance routes are the data plane's, which may not read a spec
 * (docs/API.md, "Authentication").  Taking a standby reads it from disk. */
static void record_for_client(json_t *rec)
{
	json_object_del(rec, "snapshot_meta");
}

static int get_instances(struct req *q, const char *one)
{
	json_t *list = NULL, *rec, *found = NULL;
	size_t i;
	int ret;

	ret = instance_list(&q->srv->cfg, &list);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot list instances: %s", why(ret));
	}
	if (!one) {
		/* ?all=1: with the instances that ended and are still kept, as
		 * `docker ps -a` lists exited containers. */
		const char *all = req_query(q, "all");

		if (all && strcmp(all, "0") && strcmp(all, "false"))
			instance_ended_list(&q->srv->cfg, list);
		json_array_foreach(list, i, rec) {
			record_for_client(rec);
		}
		return reply_json(q, 200, json_pack("{s:o}", "instances", list));
	}
	json_array_foreach(list, i, rec)
	{
		const char *id = record_id(rec);

		if (id && !strcmp(id, one)) {
			found = json_incref(rec);
			break;
		}
	}
	json_decref(list);
	if (!found && id_valid(one))
		instance_ended_get(&q->srv->cfg, one, &found);
	if (!found)
		return reply_error(q, 404, "not_found", "no instance %s", one);
	record_for_client(found);
	return reply_json(q, 200, found);
}

/* The record of instance id (a new reference) with its state, as GET
 * /instances shows it: 0, -ENOENT, or instance_list's error. */
static int find_record(struct server *s, const char *id, json_t **out)
{
	json_t *list = NULL, *rec;
	size_t i;
	int ret;

	*out = NULL;
	ret = instance_list(&s->cfg, &list);
	if (ret)
		return ret;
	json_array_foreach(list, i, rec)
	{
		const char *rid = record_id(rec);

		if (rid && !strcmp(rid, id)) {
			*out = json_incref(rec);
			break;
		}
	}
	json_decref(list);
	return *out ? 0 : -ENOENT;
}

/* 404 for a DELETE of instance id, saying how it ended if it has. */
static int no_instance(struct req *q, const char *id)
{
	json_t *ended = NULL;
	int ret;

	if (instance_ended_get(&q->srv->cfg, id, &ended))
		return reply_error(q, 404, "not_found", "no instance %s", id);
	ret = reply_error(q, 404, "not_found", "no instance %s: it has ended (%s)", id,
			  json_string_value(json_object_get(ended, "reason")) ?: "?");
	json_decref(ended);
	return ret;
}

static int delete_instance(struct req *q)
{
	const char *id = q->route.id;
	const char *state;
	json_t *rec = NULL;
	double recorded_grace, grace_s;
	struct instance_end end = { 0 };
	char msg[160];
	bool starting;
	int ret;

	/* A start in progress owns what it has made so far: tearing that
	 * down under it would only make it fail.  Once it has answered, the
	 * instance is there to stop. */
	log_clear_error();
	ret = find_record(q->srv, id, &rec);
	state = json_string_value(json_object_get(rec, "state"));
	starting = state && !strcmp(state, "starting");
	/* Its function's stop_grace_s, recorded at its start (0 in records of
	 * instances thawd did not start: killed at once, as before). */
	recorded_grace = json_number_value(json_object_get(rec, "stop_grace_s"));
	json_decref(rec);
	if (ret == -ENOENT)
		return no_instance(q, id);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot list instances: %s", why(ret));
	}
	if (starting)
		return reply_error(q, 409, "conflict",
				   "instance %s is starting; stop it once its start has answered",
				   id);
	grace_s = recorded_grace;
	if (query_seconds(q, "grace_s", &grace_s, msg, sizeof(msg)))
		return reply_error(q, 400, "bad_request", "%s", msg);
	snprintf(end.why, sizeof(end.why), "DELETE");
	ret = lifetimes_stop_instance(q->srv, id, (int)(grace_s * 1000), &end);
	if (ret == 0)
		metrics_instance_stopped(q->srv->metrics, "delete");
	if (ret == -EALREADY)
		return reply_error(q, 409, "conflict",
				   "instance %s is being stopped by another request", id);
	if (ret == -ENOENT)
		return no_instance(q, id);
	if (ret) {
		struct api_err e = api_err_from_errno(ret);

		return reply_error(q, e.status, e.code, "cannot stop instance %s: %s", id,
				   why(ret));
	}
	return reply_empty(q, 204);
}

/* ---- jobs ---- */

static int get_jobs(struct req *q)
{
	json_t *arr;
	int ret = jobs_list_json(q->srv->jobs, &arr);

	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, json_pack("{s:o}", "jobs", arr));
}

static int get_job(struct req *q)
{
	json_t *j;
	int ret = jobs_get_json(q->srv->jobs, q->route.id, &j, NULL);

	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no job %s", q->route.id);
	if (ret)
		return reply_error(q, 500, "internal", "%s", strerror(-ret));
	return reply_json(q, 200, j);
}

int api_dispatch(struct req *q)
{
	switch (q->route.kind) {
	case ROUTE_HEALTHZ:
		return get_healthz(q);
	case ROUTE_METRICS:
		return get_metrics(q);
	case ROUTE_FUNCTIONS:
		return get_functions(q);
	case ROUTE_FUNCTION:
		if (q->method == METHOD_PUT)
			return put_function(q);
		if (q->method == METHOD_DELETE)
			return delete_function(q);
		return get_function(q);
	case ROUTE_FUNCTION_SNAPSHOT:
		return post_snapshot(q);
	case ROUTE_FUNCTION_START:
		return post_start(q);
	case ROUTE_INSTANCES:
		return get_instances(q, NULL);
	case ROUTE_INSTANCE:
		if (q->method == METHOD_DELETE)
			return delete_instance(q);
		return get_instances(q, q->route.id);
	case ROUTE_JOBS:
		return get_jobs(q);
	case ROUTE_JOB:
		return get_job(q);
	case ROUTE_INSTANCE_LOGS:
		return logs_get_instance(q);
	case ROUTE_JOB_LOGS:
		return logs_get_job(q);
	case ROUTE_FUNCTION_PUSH:
		return remote_sync_post_push(q);
	case ROUTE_FUNCTION_PULL:
		return remote_sync_post_pull(q);
	case ROUTE_FUNCTION_PROXY: /* http.c hands these to proxy.c */
	case ROUTE_NONE:
		break;
	}
	return reply_error(q, 404, "not_found", "no such path");
}
