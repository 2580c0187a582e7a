/* SPDX-License-Identifier: Apache-2.0 */
/* remote_sync.c — see remote_sync.h. */
#define LOG_PREFIX "remote: "
#include "server/remote_sync.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/tier.h"
#include "server/api.h"
#include "server/errors.h"
#include "server/fallback.h"
#include "server/internal.h"
#include "server/jobs.h"
#include "server/registry.h"
#include "store/manifest.h"
#include "remote/remote.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The latest push of one function. */
struct push {
	char function[64];
	char manifest[CHUNK_ID_LEN];
	const char *state; /* "queued", "uploading", "done", "failed" */
	bool again;        /* queued once more while uploading */
	uint64_t done, total;
	struct remote_push_stats stats;
	char error[512];
	uint64_t queued_ms, finished_ms;
	unsigned long long generation; /* pushes of it finished so far */
};

struct remote_sync {
	struct server *srv;
	struct remote *remote;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct push *p;
	size_t n, cap;
	pthread_t thread;
	bool started, stop;
	/* Fetches in flight, one per snapshot (under lock): two starts (or a
	 * start, a pull and a standby) of one snapshot must not fetch its
	 * chunks twice, and fetches of different snapshots run at once. */
	struct fetching *fetching;
	pthread_cond_t fetch_cv;
	/* Functions being learned from the remote (remote_sync_learn), one
	 * pull each, under lock; their waiters on fetch_cv too. */
	struct learning *learning;
	/* The refs' poller: what the last listing showed, and when to stop. */
	pthread_t poller;
	bool polling, poll_stop;
	pthread_cond_t poll_cv;
	json_t *seen; /* {function: {"etag", "manifest"}} */
};

/* A function being learned: a node on its learner's stack. */
struct learning {
	const char *function;
	bool done;
	int ret;
	unsigned waiters;
	struct learning *next;
};

/* A fetch in flight: a node on its caller's stack. */
struct fetching {
	const char *snap;
	struct fetching *next;
};

/* Wait until no other fetch of snap is in flight, then be the one. */
static void fetch_begin(struct remote_sync *rs, struct fetching *me, const char *snap)
{
	pthread_mutex_lock(&rs->lock);
	for (;;) {
		struct fetching *f = rs->fetching;

		while (f && strcmp(f->snap, snap))
			f = f->next;
		if (!f)
			break;
		pthread_cond_wait(&rs->fetch_cv, &rs->lock);
	}
	*me = (struct fetching){ .snap = snap, .next = rs->fetching };
	rs->fetching = me;
	pthread_mutex_unlock(&rs->lock);
}

static void fetch_end(struct remote_sync *rs, struct fetching *me)
{
	struct fetching **p;

	pthread_mutex_lock(&rs->lock);
	for (p = &rs->fetching; *p && *p != me; p = &(*p)->next)
		;
	if (*p)
		*p = me->next;
	pthread_cond_broadcast(&rs->fetch_cv);
	pthread_mutex_unlock(&rs->lock);
}

/* ---- pushes ---- */

static struct push *find_push(struct remote_sync *rs, const char *function)
{
	for (size_t i = 0; i < rs->n; i++)
		if (!strcmp(rs->p[i].function, function))
			return &rs->p[i];
	return NULL;
}

/* function's entry, made if missing; lock held.  NULL out of memory. */
static struct push *get_push(struct remote_sync *rs, const char *function)
{
	struct push *p = find_push(rs, function);

	if (p)
		return p;
	if (ARRAY_GROW(rs->p, rs->cap, rs->n + 1, 16))
		return NULL;
	p = &rs->p[rs->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->function, sizeof(p->function), "%s", function);
	return p;
}

/* Queue a push of function; lock held.  Its entry, or NULL. */
static struct push *queue_push(struct remote_sync *rs, const char *function)
{
	struct push *p = get_push(rs, function);

	if (!p)
		return NULL;
	if (p->state && !strcmp(p->state, "uploading")) {
		p->again = true; /* a newer snapshot may be there: once more after */
	} else if (!p->state || strcmp(p->state, "queued")) {
		p->state = "queued";
		p->queued_ms = realtime_ms();
		p->done = p->total = 0;
		p->error[0] = '\0';
	}
	pthread_cond_broadcast(&rs->cv);
	return p;
}

void remote_sync_push(struct server *s, const char *function)
{
	struct remote_sync *rs = s->remote_sync;

	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	if (!queue_push(rs, function))
		pr_warn("push of %s not queued: out of memory", function);
	pthread_mutex_unlock(&rs->lock);
}

struct push_progress {
	struct remote_sync *rs;
	char function[64];
};

static void on_push_progress(void *arg, uint64_t done, uint64_t total)
{
	struct push_progress *pp = arg;
	struct push *p;

	pthread_mutex_lock(&pp->rs->lock);
	p = find_push(pp->rs, pp->function);
	if (p) {
		p->done = done;
		p->total = total;
	}
	pthread_mutex_unlock(&pp->rs->lock);
}

/* The spec of GET /functions/<id> object f: f without what thawd adds. */
static char *spec_text(const json_t *f)
{
	json_t *spec = json_deep_copy(f);
	char *text;

	if (!spec)
		return NULL;
	json_object_del(spec, "id");
	json_object_del(spec, "snapshot");
	json_object_del(spec, "push");
	text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(spec);
	return text;
}

/* Upload function's current snapshot: 0, or -errno with err. */
static int push_one(struct remote_sync *rs, const char *function, char manifest[CHUNK_ID_LEN],
		    struct remote_push_stats *stats, char *err, size_t errlen)
{
	struct server *s = rs->srv;
	struct push_progress pp = { .rs = rs };
	struct store_lease *lease = NULL;
	enum snap_state st;
	json_t *f = NULL;
	char *spec = NULL;
	int ret;

	snprintf(pp.function, sizeof(pp.function), "%s", function);
	ret = registry_ready_snapshot(s->reg, function, manifest, &st);
	if (ret) {
		snprintf(err, errlen, "%s", ret == -ENOENT ? "the function is gone" :
					     "the function has no ready snapshot");
		return ret;
	}
	ret = registry_get_json(s->reg, function, &f);
	if (!ret && !(spec = spec_text(f)))
		ret = -ENOMEM;
	/* The snapshot's chunks stay through a local gc while they go. */
	if (!ret && !(lease = store_lease_take(s->store, manifest)))
		ret = -EIO;
	if (!ret) {
		log_clear_error();
		ret = remote_push(rs->remote, s->store, function, spec, manifest, on_push_progress,
				  &pp, stats);
	}
	if (ret)
		snprintf(err, errlen, "%s", log_last_error()[0] ? log_last_error() : strerror(-ret));
	store_lease_release(lease);
	free(spec);
	json_decref(f);
	return ret;
}

static void *push_thread(void *arg)
{
	struct remote_sync *rs = arg;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		struct push *p = NULL;
		struct remote_push_stats stats = { 0 };
		char function[64], manifest[CHUNK_ID_LEN] = "", err[512] = "";
		int ret;

		for (size_t i = 0; !p && i < rs->n; i++)
			if (rs->p[i].state && !strcmp(rs->p[i].state, "queued"))
				p = &rs->p[i];
		if (!p) {
			if (rs->stop)
				break;
			pthread_cond_wait(&rs->cv, &rs->lock);
			continue;
		}
		p->state = "uploading";
		snprintf(function, sizeof(function), "%s", p->function);
		pthread_mutex_unlock(&rs->lock);

		pr_info("push of %s to %s begins", function, remote_describe(rs->remote));
		ret = push_one(rs, function, manifest, &stats, err, sizeof(err));
		/* Deleted while it went up: its ref must not outlive it. */
		if (!ret && !registry_exists(rs->srv->reg, function)) {
			remote_delete_ref(rs->remote, function);
			snprintf(err, sizeof(err), "the function was deleted during the push");
			ret = -ENOENT;
		}
		if (ret)
			pr_warn("push of %s failed: %s", function, err);
		else
			pr_info("push of %s done: %s, %llu of %llu chunks sent (%llu bytes) in %.1f s",
				function, manifest, (unsigned long long)stats.chunks_sent,
				(unsigned long long)stats.chunks, (unsigned long long)stats.bytes_sent,
				stats.seconds);

		pthread_mutex_lock(&rs->lock);
		p = find_push(rs, function); /* the array may have grown */
		if (!p)
			continue;
		p->state = ret ? "failed" : "done";
		snprintf(p->manifest, sizeof(p->manifest), "%s", manifest);
		snprintf(p->error, sizeof(p->error), "%s", err);
		p->stats = stats;
		p->finished_ms = realtime_ms();
		p->generation++;
		if (p->again) {
			p->again = false;
			queue_push(rs, function);
		}
		pthread_cond_broadcast(&rs->cv);
	}
	pthread_mutex_unlock(&rs->lock);
	return NULL;
}

void remote_sync_forget(struct server *s, const char *function)
{
	struct remote_sync *rs = s->remote_sync;
	struct push *p;
	int ret;

	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	p = find_push(rs, function);
	if (p && p->state && !strcmp(p->state, "queued"))
		p->state = NULL; /* an upload in progress checks for itself when done */
	pthread_mutex_unlock(&rs->lock);
	log_clear_error();
	ret = remote_delete_ref(rs->remote, function);
	if (ret)
		pr_warn("function %s deleted here, but its ref on %s stays: %s", function,
			remote_describe(rs->remote), log_last_error());
	else
		pr_info("function %s deleted from %s too", function, remote_describe(rs->remote));
}

static json_t *push_json(const struct push *p)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:I}", "state", p->state, "bytes_done",
			      (json_int_t)p->done, "bytes_total", (json_int_t)p->total,
			      "queued_ms", (json_int_t)p->queued_ms);

	if (!j)
		return NULL;
	if (p->generation) {
		json_object_set_new(j, "manifest", json_string(p->manifest));
		json_object_set_new(j, "finished_ms", json_integer((json_int_t)p->finished_ms));
		json_object_set_new(j, "chunks", json_integer((json_int_t)p->stats.chunks));
		json_object_set_new(j, "chunks_sent",
				    json_integer((json_int_t)p->stats.chunks_sent));
		json_object_set_new(j, "bytes_sent", json_integer((json_int_t)p->stats.bytes_sent));
		json_object_set_new(j, "seconds", json_real(p->stats.seconds));
	}
	json_object_set_new(j, "error", p->error[0] ? json_string(p->error) : json_null());
	return j;
}

void remote_sync_describe(struct server *s, const char *function, json_t *f)
{
	struct remote_sync *rs = s->remote_sync;
	struct push *p;

	if (!rs || !f)
		return;
	pthread_mutex_lock(&rs->lock);
	p = find_push(rs, function);
	json_object_set_new(f, "push", p && p->state ? push_json(p) : json_null());
	pthread_mutex_unlock(&rs->lock);
}

/* ---- fetches ---- */

/* The start's snapshot from the remote, streamed into the RAM tier as it
 * comes (restore/tier.h), so that the start finds it there; where the tier
 * has no room for it, or has it already, into the store only (the start
 * then materialises it as any other). */
static int fetch_into_tier(struct server *s, const char *snap, struct remote_fetch_stats *st)
{
	struct remote_sync *rs = s->remote_sync;
	struct tier_lease *lease = NULL;
	struct manifest *m = NULL;
	int ret = -ENOSPC;

	if (s->tier)
		ret = tier_acquire_fetching(s->tier, snap, rs->remote, st, &lease);
	tier_release(lease);
	if (ret == -ENOSPC) {
		pr_info("%s: %s; fetching it into the store only", snap,
			s->tier ? "no room in the RAM tier" : "no RAM tier");
		return remote_fetch_missing(rs->remote, s->store, snap, NULL, NULL, st);
	}
	if (ret)
		return ret;
	ret = store_manifest_load(s->store, snap, &m, NULL);
	manifest_free(m);
	if (ret == -ENOENT) /* the tier had it: the store still lacks it */
		ret = remote_fetch_missing(rs->remote, s->store, snap, NULL, NULL, st);
	return ret;
}

int remote_sync_fetch(struct server *s, const char *snap, double *ms)
{
	struct remote_sync *rs = s->remote_sync;
	struct remote_fetch_stats st = { 0 };
	struct manifest *m = NULL;
	struct fetching me;
	uint64_t t0 = now_ns();
	int ret;

	*ms = 0;
	if (!rs)
		return 0;
	ret = store_manifest_load(s->store, snap, &m, NULL);
	manifest_free(m);
	if (ret != -ENOENT)
		return 0; /* there, or another trouble the start reports itself */
	fetch_begin(rs, &me, snap);
	log_clear_error();
	ret = fetch_into_tier(s, snap, &st);
	fetch_end(rs, &me);
	*ms = (double)(now_ns() - t0) / 1e6;
	if (ret)
		pr_warn("fetch of %s failed: %s", snap, log_last_error());
	else
		pr_info("fetched %s: %llu of %llu chunks, %llu bytes in %.0f ms", snap,
			(unsigned long long)st.chunks_fetched, (unsigned long long)st.chunks,
			(unsigned long long)st.bytes_fetched, *ms);
	return ret;
}

/* ---- pulls ---- */

struct pull_task {
	struct server *srv;
	char function[64];
	char job[32];
	bool fetch;
};

static void on_pull_progress(void *arg, uint64_t done, uint64_t total)
{
	struct pull_task *t = arg;

	jobs_progress(t->srv->jobs, t->job, "fetch", done, total);
}

/* The pulled spec, checked and recorded as a PUT's body is (its paths
 * too: registry_admit, with no PUT or other pull in between): 0, *spec
 * and registry_put's *created and forgot, or -errno with err. */
static int pulled_spec(struct server *s, const char *function, const char *text, json_t **spec,
		       bool *created, char *forgot, char *err, size_t errlen)
{
	char why[1024], key[48] = "";
	int ret = function_body_parse(function, text, strlen(text), spec, err, errlen);

	if (!ret) {
		ret = registry_admit(s->reg, &s->cfg, function, *spec, created, forgot, NULL, key,
				     sizeof(key), why, sizeof(why));
		if (ret && key[0])
			snprintf(err, errlen, "the remote's spec of %s: %s: %s", function, key,
				 why);
		else if (ret)
			snprintf(err, errlen, "%s",
				 ret == -EBUSY	     ? "a snapshot of it is building" :
				 ret == -EINPROGRESS ? "it is being deleted" :
						       strerror(-ret));
	}
	if (ret && *spec) {
		json_decref(*spec);
		*spec = NULL;
	}
	return ret;
}

static int pull_run(void *arg, json_t **result, char *err, size_t errlen)
{
	struct pull_task *t = arg;
	struct server *s = t->srv;
	struct remote_sync *rs = s->remote_sync;
	struct remote_fetch_stats st = { 0 };
	struct manifest_totals tot = { 0 };
	struct manifest *m = NULL;
	struct fetching me;
	char snap[CHUNK_ID_LEN], forgot[CHUNK_ID_LEN] = "", why[1024] = "";
	json_t *spec = NULL, *old = NULL;
	char *text = NULL;
	bool created, building = false, differs;
	int ret;

	log_clear_error();
	ret = remote_pull_ref(rs->remote, t->function, &text, snap);
	if (ret) {
		snprintf(err, errlen, "%s", log_last_error()[0] ? log_last_error() : strerror(-ret));
		goto out;
	}
	ret = pulled_spec(s, t->function, text, &spec, &created, forgot, err, errlen);
	if (forgot[0])
		store_manifest_delete(s->store, forgot);
	if (ret)
		goto out;
	/* While it is fetched the function is "building": a start goes on
	 * from the snapshot it had, a PUT or snapshot of it waits. */
	ret = registry_snapshot_begin(s->reg, t->function, t->job, &old);
	json_decref(old);
	if (ret) {
		snprintf(err, errlen, "%s", ret == -EBUSY ? "a snapshot of it is building" :
					     strerror(-ret));
		goto out;
	}
	building = true;
	fetch_begin(rs, &me, snap);
	log_clear_error();
	if (t->fetch)
		ret = remote_fetch_missing(rs->remote, s->store, snap, on_pull_progress, t, &st);
	if (!ret && store_manifest_load(s->store, snap, &m, NULL) == -ENOENT)
		ret = remote_fetch_manifest(rs->remote, snap, &m); /* ?fetch=0: sizes only */
	fetch_end(rs, &me);
	if (ret) {
		snprintf(err, errlen, "%s", log_last_error()[0] ? log_last_error() : strerror(-ret));
		goto out;
	}
	manifest_totals(m, &tot);
	ret = registry_snapshot_end(s->reg, t->function, t->job, snap, tot.logical_bytes,
				    tot.stored_bytes, NULL, NULL, forgot);
	building = false;
	if (ret) {
		snprintf(err, errlen, "the function was deleted or changed during the pull");
		goto out;
	}
	if (forgot[0] && strcmp(forgot, snap))
		store_manifest_delete(s->store, forgot);
	/* Checked before its first start as a start would (server/fallback.h):
	 * a snapshot of a host unlike this one is marked, and boots. */
	differs = fallback_pulled(
		s, t->function, snap, m->meta,
		!strcmp(json_string_value(json_object_get(spec, "on_restore_failure")) ?: "", "fail"),
		why, sizeof(why));
	*result = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:f}", "snapshot", snap,
			    "image_bytes", (json_int_t)tot.logical_bytes, "fetched", t->fetch,
			    "chunks", (json_int_t)st.chunks, "chunks_fetched",
			    (json_int_t)st.chunks_fetched, "bytes_fetched",
			    (json_int_t)st.bytes_fetched, "fetch_seconds", st.seconds);
	if (*result) {
		json_object_set_new(*result, "restorable", json_boolean(!differs));
		if (differs)
			json_object_set_new(*result, "why", json_string(why));
	}
	pr_info("pulled %s from %s: snapshot %s, %llu of %llu chunks fetched (%llu bytes) in %.1f s",
		t->function, remote_describe(rs->remote), snap,
		(unsigned long long)st.chunks_fetched, (unsigned long long)st.chunks,
		(unsigned long long)st.bytes_fetched, st.seconds);
out:
	if (ret) {
		pr_warn("pull of %s failed: %s", t->function, err);
		if (building)
			registry_snapshot_end(s->reg, t->function, t->job, NULL, 0, 0, NULL, err, NULL);
	}
	manifest_free(m);
	json_decref(spec);
	free(text);
	return ret;
}

/* ---- what the routes ask (server/api_remote.c) ---- */

int remote_sync_push_now(struct server *s, const char *function, bool wait, json_t **push)
{
	struct remote_sync *rs = s->remote_sync;
	unsigned long long gen;
	struct push *p;
	bool failed;

	*push = NULL;
	pthread_mutex_lock(&rs->lock);
	p = queue_push(rs, function);
	if (!p) {
		pthread_mutex_unlock(&rs->lock);
		return -ENOMEM;
	}
	/* The push that answers is the one after every push now queued or
	 * running: one that is uploading now may predate the snapshot. */
	gen = p->generation + (strcmp(p->state, "uploading") ? 1 : 2);
	while (wait && (p = find_push(rs, function)) && p->generation < gen &&
	       !atomic_load(&s->stopping))
		pthread_cond_wait(&rs->cv, &rs->lock);
	p = find_push(rs, function);
	*push = p ? push_json(p) : NULL;
	failed = p && wait && !strcmp(p->state, "failed");
	pthread_mutex_unlock(&rs->lock);
	if (!*push)
		return -ENOMEM;
	return failed ? -EIO : 0;
}

static void pull_task_free(void *p)
{
	free(p);
}

/* Start a pull job of function. */
static int pull_start(struct server *s, const char *function, bool fetch, char jid[32],
		      bool *reserved)
{
	struct pull_task *t;
	struct job *job;
	int ret;

	/* A pull is a snapshot made elsewhere: it takes a snapshot's place. */
	*reserved = false;
	job = jobs_reserve(s->jobs, "pull", function, &ret);
	if (!job)
		return ret;
	*reserved = true;
	t = calloc(1, sizeof(*t));
	if (!t) {
		jobs_unreserve(s->jobs, job);
		return -ENOMEM;
	}
	snprintf(jid, 32, "%s", job_id(job));
	*t = (struct pull_task){ .srv = s, .fetch = fetch };
	snprintf(t->function, sizeof(t->function), "%s", function);
	snprintf(t->job, sizeof(t->job), "%s", jid);
	return jobs_run(s->jobs, job, pull_run, t, pull_task_free);
}

/* Wait until no pull of function that this host made by itself (learned,
 * or following the remote) is in flight: a pull asked for meanwhile would
 * meet it building (409), though both want the same. */
static void learning_wait(struct remote_sync *rs, const char *function)
{
	struct learning *l;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		for (l = rs->learning; l && strcmp(l->function, function); l = l->next)
			;
		if (!l)
			break;
		pthread_cond_wait(&rs->fetch_cv, &rs->lock);
	}
	pthread_mutex_unlock(&rs->lock);
}

/* Whether a pull of function that this host made by itself is in flight. */
static bool learning_now(struct remote_sync *rs, const char *function)
{
	struct learning *l;

	pthread_mutex_lock(&rs->lock);
	for (l = rs->learning; l && strcmp(l->function, function); l = l->next)
		;
	pthread_mutex_unlock(&rs->lock);
	return l != NULL;
}

int remote_sync_pull(struct server *s, const char *function, bool fetch, char jid[32],
		     bool *reserved)
{
	learning_wait(s->remote_sync, function);
	return pull_start(s, function, fetch, jid, reserved);
}

/* ---- what this host learns of the fleet ---- */

/* Run a pull of function (fetch=0: the manifest only) and wait for it: 0,
 * or its -errno (-ENOENT: the remote has no ref of it). */
static int pull_and_wait(struct server *s, const char *function)
{
	char jid[32];
	bool reserved;
	json_t *j = NULL;
	int ret, err = 0;

	ret = pull_start(s, function, false, jid, &reserved);
	if (ret)
		return ret;
	ret = jobs_wait(s->jobs, jid);
	if (!ret)
		ret = jobs_get_json(s->jobs, jid, &j, &err);
	json_decref(j);
	return ret ? ret : err;
}

/* One pull of function that this host makes by itself, at a time:
 * concurrent calls wait for the one in flight and share its result.  With
 * if_missing, none when the function is registered here by then. */
static int single_pull(struct server *s, const char *function, bool if_missing)
{
	struct remote_sync *rs = s->remote_sync;
	struct learning me = { .function = function }, *l;
	int ret;

	pthread_mutex_lock(&rs->lock);
	for (l = rs->learning; l && strcmp(l->function, function); l = l->next)
		;
	if (l) {
		/* Another request pulls it now: its answer is ours. */
		l->waiters++;
		while (!l->done)
			pthread_cond_wait(&rs->fetch_cv, &rs->lock);
		ret = l->ret;
		l->waiters--;
		pthread_cond_broadcast(&rs->fetch_cv);
		pthread_mutex_unlock(&rs->lock);
		return ret;
	}
	me.next = rs->learning;
	rs->learning = &me;
	pthread_mutex_unlock(&rs->lock);

	/* Registered meanwhile (a learner that just ended, a PUT): done. */
	ret = if_missing && registry_exists(s->reg, function) ? 0 : pull_and_wait(s, function);

	pthread_mutex_lock(&rs->lock);
	me.ret = ret;
	me.done = true;
	pthread_cond_broadcast(&rs->fetch_cv);
	while (me.waiters)
		pthread_cond_wait(&rs->fetch_cv, &rs->lock);
	for (struct learning **p = &rs->learning; *p; p = &(*p)->next) {
		if (*p == &me) {
			*p = me.next;
			break;
		}
	}
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

int remote_sync_learn(struct server *s, const char *function)
{
	int ret;

	if (!s->remote_sync)
		return -ENOENT;
	ret = single_pull(s, function, true);
	if (ret && ret != -ENOENT)
		pr_warn("%s is not registered here, and learning it from the remote failed: %s",
			function, strerror(-ret));
	else if (!ret)
		pr_info("%s learned from the remote (its chunks come with its first start)",
			function);
	return ret;
}

int remote_sync_ensure(struct server *s, const char *function, struct api_err *e, char *msg,
		       size_t msglen)
{
	int ret;

	/* Draining, the start or request is refused anyway: nothing to learn.
	 * Registered, and not by a pull still in flight: nothing either (the
	 * pull registers the function before its snapshot is ready: a start
	 * then would answer 409 no_snapshot). */
	if (!s->remote_sync || server_refusing(s) ||
	    (registry_exists(s->reg, function) && !learning_now(s->remote_sync, function)))
		return 0;
	ret = remote_sync_learn(s, function);
	switch (ret) {
	case 0:
	case -ENOENT: return 0; /* the caller finds it, or answers 404 itself */
	case -EAGAIN:
		*e = api_err_known(503, "no_capacity");
		snprintf(msg, msglen,
			 "%s is not registered here yet, and --max-snapshots pulls or snapshots "
			 "are running: try again",
			 function);
		break;
	case -ESHUTDOWN:
		*e = api_err_known(503, "shutting_down");
		snprintf(msg, msglen, "thawd is stopping");
		break;
	case -EACCES:
		*e = api_err_known(403, "forbidden");
		snprintf(msg, msglen, "the remote's spec of %s names a directory this host does "
				      "not allow", function);
		break;
	default:
		*e = api_err_known(502, "remote_failed");
		snprintf(msg, msglen, "%s could not be learned from the remote: %s", function,
			 strerror(-ret));
	}
	return ret;
}

/* The poller's view of one function that has a ref: the ref's ETag and the
 * manifest it named when last read. */
static const char *seen_str(json_t *seen, const char *fn, const char *key)
{
	return json_string_value(json_object_get(json_object_get(seen, fn), key));
}

/* A ref that changed (or first seen): read it, and follow it here when
 * this host has the function, its snapshot is not the ref's, and nothing
 * of this host's own is on its way (a snapshot or pull building here, a
 * push of it queued, uploading or failed: this host's newer snapshot, which
 * its push makes the ref).  The remote is the fleet's word on a function's
 * snapshot. */
static void poll_changed(struct remote_sync *rs, const char *fn, const char *etag)
{
	struct server *s = rs->srv;
	char man[CHUNK_ID_LEN], cur[CHUNK_ID_LEN] = "";
	enum snap_state state = SNAP_NONE;
	char *text = NULL;
	struct push *p;
	bool mine;
	int ret;

	ret = remote_pull_ref(rs->remote, fn, &text, man);
	free(text);
	if (ret)
		return; /* gone meanwhile (the next listing says so), or unreadable */
	json_object_set_new(rs->seen, fn, json_pack("{s:s, s:s}", "etag", etag, "manifest", man));
	/* Only a ready snapshot is followed: none (a PUT here changed the
	 * spec, or the first snapshot is building) is this host's own doing. */
	ret = registry_ready_snapshot(s->reg, fn, cur, &state);
	if (ret || state == SNAP_BUILDING || !strcmp(cur, man))
		return;
	pthread_mutex_lock(&rs->lock);
	p = find_push(rs, fn);
	mine = p && p->state && strcmp(p->state, "done");
	pthread_mutex_unlock(&rs->lock);
	if (mine)
		return;
	pr_info("%s has a new snapshot in the remote (%s): following it", fn, man);
	ret = single_pull(s, fn, false);
	if (ret)
		pr_warn("%s: following the remote's snapshot failed: %s (tried again at the next "
			"change)",
			fn, strerror(-ret));
}

/* A ref gone: the function was deleted in the fleet.  Deleted here too when
 * this host still has the snapshot the ref named (not one of its own made
 * since, which its push will put back). */
static void poll_gone(struct remote_sync *rs, const char *fn, const char *man)
{
	struct server *s = rs->srv;
	char cur[CHUNK_ID_LEN] = "", msg[512];
	enum snap_state state = SNAP_NONE;
	struct api_err e;

	if (registry_ready_snapshot(s->reg, fn, cur, &state) || strcmp(cur, man))
		return;
	pr_info("%s was deleted from the remote: deleting it here", fn);
	if (api_function_delete(s, fn, false, &e, msg, sizeof(msg)) && e.status != 404)
		pr_warn("%s: %s", fn, msg);
}

static void poll_once(struct remote_sync *rs)
{
	json_t *tags = NULL, *v;
	const char *fn;
	void *tmp;
	int ret;

	ret = remote_list_ref_tags(rs->remote, &tags);
	if (ret) {
		pr_warn("cannot list the remote's functions: %s",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		return;
	}
	json_object_foreach_safe(rs->seen, tmp, fn, v)
	{
		if (!json_object_get(tags, fn)) {
			char man[CHUNK_ID_LEN];

			snprintf(man, sizeof(man), "%s", seen_str(rs->seen, fn, "manifest") ?: "");
			json_object_del(rs->seen, fn);
			poll_gone(rs, fn, man);
		}
	}
	json_object_foreach(tags, fn, v)
	{
		if (atomic_load(&rs->srv->stopping))
			break;
		if (!seen_str(rs->seen, fn, "etag") ||
		    strcmp(seen_str(rs->seen, fn, "etag"), json_string_value(v)))
			poll_changed(rs, fn, json_string_value(v));
	}
	json_decref(tags);
}

static void *poll_thread(void *arg)
{
	struct remote_sync *rs = arg;
	struct server *s = rs->srv;

	for (;;) {
		struct timespec until;

		poll_once(rs);
		until = mono_after_ms((uint64_t)s->opts.remote_poll_s * 1000);
		pthread_mutex_lock(&rs->lock);
		while (!rs->poll_stop && pthread_cond_timedwait(&rs->poll_cv, &rs->lock, &until) == 0)
			;
		if (rs->poll_stop) {
			pthread_mutex_unlock(&rs->lock);
			break;
		}
		pthread_mutex_unlock(&rs->lock);
	}
	return NULL;
}

/* ---- life ---- */

int remote_sync_start(struct server *s)
{
	struct remote_sync *rs;
	int ret;

	if (!s->opts.remote_url)
		return 0;
	rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	rs->srv = s;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->fetch_cv, NULL);
	pthread_cond_init(&rs->cv, NULL);
	cond_init_monotonic(&rs->poll_cv);
	rs->seen = json_object();
	ret = remote_open(s->opts.remote_url, s->opts.s3_endpoint, &rs->remote);
	if (!ret && !rs->seen)
		ret = -ENOMEM;
	if (!ret) {
		ret = -pthread_create(&rs->thread, NULL, push_thread, rs);
		rs->started = ret == 0;
	}
	if (!ret && s->opts.remote_poll_s) {
		ret = -pthread_create(&rs->poller, NULL, poll_thread, rs);
		rs->polling = ret == 0;
	}
	s->remote_sync = rs;
	if (ret) {
		pr_err("cannot use the remote %s: %s", s->opts.remote_url,
		       log_last_error()[0] ? log_last_error() : strerror(-ret));
		remote_sync_finish(s);
		return ret;
	}
	pr_info("remote: %s", remote_describe(rs->remote));
	return 0;
}

void remote_sync_quiesce(struct server *s)
{
	struct remote_sync *rs = s->remote_sync;

	if (!rs)
		return;
	if (rs->polling) {
		pthread_mutex_lock(&rs->lock);
		rs->poll_stop = true;
		pthread_cond_broadcast(&rs->poll_cv);
		pthread_mutex_unlock(&rs->lock);
		pthread_join(rs->poller, NULL);
		rs->polling = false;
	}
	if (!rs->started)
		return;
	pthread_mutex_lock(&rs->lock);
	rs->stop = true;
	/* Queued pushes not begun are dropped: a later push (the next
	 * snapshot, or by hand) uploads what is missing. */
	for (size_t i = 0; i < rs->n; i++) {
		if (rs->p[i].state && !strcmp(rs->p[i].state, "queued")) {
			rs->p[i].state = "failed";
			snprintf(rs->p[i].error, sizeof(rs->p[i].error), "thawd stopped first");
			rs->p[i].generation++;
		}
	}
	pthread_cond_broadcast(&rs->cv);
	pthread_mutex_unlock(&rs->lock);
	pthread_join(rs->thread, NULL);
	rs->started = false;
}

void remote_sync_finish(struct server *s)
{
	struct remote_sync *rs = s->remote_sync;

	if (!rs)
		return;
	remote_sync_quiesce(s);
	remote_close(rs->remote);
	pthread_cond_destroy(&rs->cv);
	pthread_cond_destroy(&rs->fetch_cv);
	pthread_cond_destroy(&rs->poll_cv);
	json_decref(rs->seen);
	pthread_mutex_destroy(&rs->lock);
	free(rs->p);
	free(rs);
	s->remote_sync = NULL;
}
