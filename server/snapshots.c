/* SPDX-License-Identifier: Apache-2.0 */
/* snapshots.c — see snapshots.h. */
#define LOG_PREFIX "thawd: "
#include "server/snapshots.h"
#include "common/log.h"
#include "common/util.h"
#include "function/spec.h"
#include "prewarm/prewarm.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "server/userns_holds.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct collector {
	struct server *srv;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool wanted, stop;
};

static void collector_kick(struct collector *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->wanted = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void *collector_main(void *arg)
{
	struct collector *c = arg;
	uint64_t chunks, bytes;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->wanted && !c->stop)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop)
			break;
		/* Drops that come while it runs ask for one more. */
		c->wanted = false;
		pthread_mutex_unlock(&c->mu);
		chunks = bytes = 0;
		if (store_gc(c->srv->store, &chunks, &bytes) == 0)
			pr_info("store gc in the background: %llu chunk(s), %llu bytes freed",
				(unsigned long long)chunks, (unsigned long long)bytes);
		else
			pr_warn("store gc in the background: %s; the next drop or start-up "
				"tries again",
				log_last_error());
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int snapshots_collector_start(struct server *s)
{
	struct collector *c = calloc(1, sizeof(*c));
	int ret;

	if (!c) {
		pr_err("out of memory");
		return -ENOMEM;
	}
	c->srv = s;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	ret = -pthread_create(&c->thread, NULL, collector_main, c);
	if (ret) {
		pr_err("cannot start the store's collector: %s", strerror(-ret));
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return ret;
	}
	s->collector = c;
	return 0;
}

void snapshots_collector_stop(struct server *s)
{
	struct collector *c = s ? s->collector : NULL;

	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	s->collector = NULL;
}

void snapshots_forget(struct server *s, const char *snap)
{
	int ret;

	if (!snap[0])
		return;
	ret = store_manifest_delete(s->store, snap);
	if (ret && ret != -ENOENT)
		pr_warn("cannot delete snapshot %s: %s", snap, api_why(ret));
	else
		collector_kick(s->collector);
}

struct snapshot_task {
	struct server *srv;
	char function[64];
	char job[32];
	json_t *spec;
	char heal[CHUNK_ID_LEN]; /* a damaged snapshot to heal first; "": none */
};

static void snapshot_task_free(void *p)
{
	struct snapshot_task *t = p;

	/* Its container is gone: the function's range may go back. */
	userns_unhold(t->srv, t->function);
	json_decref(t->spec);
	free(t);
}

/* Where a snapshot is (its image's pull and unpack, then its phases): its job's "progress". */
static void snapshot_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct snapshot_task *t = arg;

	jobs_progress(t->srv->jobs, t->job, phase, done, total);
}

/* The damaged snapshot this job replaces, healed before the put: every
 * damaged chunk out of the store's index, for the put to write anew.  Its
 * failure leaves the put to run as it would have. */
static void snapshot_heal(struct snapshot_task *t)
{
	int n;

	jobs_progress(t->srv->jobs, t->job, "heal", 0, 0);
	n = store_heal(t->srv->store, t->heal, NULL, NULL);
	if (n >= 0)
		pr_info("snapshot of %s (%s): the snapshot it replaces, %s, had %d damaged or "
			"missing chunk(s); the damaged are out of the store's index", t->function,
			t->job, t->heal, n);
	log_clear_error();
}

static int snapshot_run(void *arg, json_t **result, char *err, size_t errlen)
{
	struct snapshot_task *t = arg;
	struct server *s = t->srv;
	struct snapshot_result res = { 0 };
	struct func_spec *spec = NULL;
	char perr[512] = "", forgot[CHUNK_ID_LEN] = "", log[PATH_MAX];
	struct snapshot_tag tag;
	int ret;

	log_clear_error();
	ret = spec_parse(t->spec, t->function, &spec, perr, sizeof(perr));
	if (ret == -EINVAL) {
		/* It parsed when it was PUT: an older thaw let it in. */
		snprintf(err, errlen,
			 "the function's spec was recorded by a thaw that accepted what this one "
			 "refuses (%s): PUT the function again with a spec it accepts",
			 perr);
		ret = -ENOEXEC;
		goto out;
	}
	if (ret) {
		snprintf(err, errlen, "the recorded spec does not parse: %s",
			 perr[0] ? perr : strerror(-ret));
		goto out;
	}
	/* Tagged as this thawd's, so that a manifest a crash leaves unnamed is
	 * known as such at the next start-up (recover.c). */
	tag = registry_snapshot_tag(s->reg, t->function, t->job);
	pr_info("snapshot of %s (%s) begins", t->function, t->job);
	if (t->heal[0])
		snapshot_heal(t);
	log_clear_error();
	/* The function's output goes to the job's log (GET /jobs/<jid>/logs). */
	ret = prewarm_snapshot_opts(
		&s->cfg, s->store, spec,
		&(struct prewarm_opts){
			.thawd = &tag,
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
		snapshots_forget(s, res.snapshot_id);
	}
	/* The snapshot this one replaced: nothing starts from it any more (a
	 * start in flight holds a lease on it, a mapped instance its tier entry). */
	snapshots_forget(s, forgot);
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
	return ret;
}

static int launch(struct server *s, const char *fn, const char *heal, char jid[32],
		  enum snapshots_step *step)
{
	struct snapshot_task *t = NULL;
	struct job *job;
	json_t *spec = NULL;
	int ret;

	*step = SNAPSHOTS_RESERVE;
	job = jobs_reserve(s->jobs, "snapshot", fn, &ret);
	if (!job)
		return ret;
	snprintf(jid, 32, "%s", job_id(job));
	*step = SNAPSHOTS_BEGIN;
	ret = registry_snapshot_begin(s->reg, fn, jid, &spec);
	if (ret) {
		jobs_unreserve(s->jobs, job);
		return ret;
	}
	*step = SNAPSHOTS_RUN;
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
	snprintf(t->heal, sizeof(t->heal), "%s", heal ? heal : "");
	/* Held from before its thread runs: jobs_run frees t either way. */
	userns_hold(fn);
	ret = jobs_run(s->jobs, job, snapshot_run, t, snapshot_task_free);
	if (ret)
		registry_snapshot_end(s->reg, fn, jid, NULL, 0, 0, NULL, "cannot start a thread",
				      NULL);
	return ret;
}

int snapshots_launch(struct server *s, const char *fn, char jid[32],
			   enum snapshots_step *step)
{
	return launch(s, fn, NULL, jid, step);
}

int api_snapshot_launch(struct server *s, const char *fn, const char *heal, char jid[32])
{
	enum snapshots_step step;

	return launch(s, fn, heal, jid, &step);
}
