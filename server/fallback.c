/* SPDX-License-Identifier: Apache-2.0 */
/* fallback.c — see fallback.h. */
#define LOG_PREFIX "thawd: "
#include "server/fallback.h"
#include "common/log.h"
#include "common/util.h"
#include "function/bundle.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "images/image.h"
#include "prewarm/host_record.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/registry.h"
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FALLBACK_VERDICTS_MAX 4096

/* What is known of one snapshot: whether this host can restore it (and
 * why not), and when its re-snapshot was last launched. */
struct verdict {
	char snap[CHUNK_ID_LEN];
	bool checked, differs;
	char why[768];
	uint64_t resnapshot_ns; /* CLOCK_MONOTONIC of the last launch; 0: none */
	bool heal; /* damaged: its re-snapshot heals it first (until one is launched) */
};

struct fallback {
	pthread_mutex_t lock;
	json_t *here; /* this host's record (host_record_here), made once */
	struct verdict *v;
	size_t n, cap;
};

struct fallback *fallback_new(const struct thaw_config *c)
{
	struct fallback *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	/* Now rather than at the first start: criu --version, the driver. */
	f->here = host_record_here(c);
	return f;
}

void fallback_free(struct fallback *f)
{
	if (!f)
		return;
	json_decref(f->here);
	free(f->v);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* snap's verdict, added if new; NULL out of memory.  f->lock held. */
static struct verdict *verdict_of(struct fallback *f, const char *snap)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->v[i].snap, snap))
			return &f->v[i];
	/* Bounded: the oldest snapshots' verdicts go first (a snapshot is
	 * judged again, at worst, if it ever comes back). */
	if (f->n >= FALLBACK_VERDICTS_MAX) {
		memmove(f->v, f->v + FALLBACK_VERDICTS_MAX / 4,
			(f->n - FALLBACK_VERDICTS_MAX / 4) * sizeof(*f->v));
		f->n -= FALLBACK_VERDICTS_MAX / 4;
	}
	if (ARRAY_GROW(f->v, f->cap, f->n + 1, 16))
		return NULL;
	memset(&f->v[f->n], 0, sizeof(f->v[f->n]));
	snprintf(f->v[f->n].snap, sizeof(f->v[f->n].snap), "%s", snap);
	return &f->v[f->n++];
}

/* snap's verdict, known already: true and *differs (why) if it is. */
static bool known_verdict(struct fallback *f, const char *snap, bool *differs, char *why,
			  size_t len)
{
	bool known = false;

	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n; i++) {
		if (strcmp(f->v[i].snap, snap) || !f->v[i].checked)
			continue;
		known = true;
		*differs = f->v[i].differs;
		snprintf(why, len, "%s", f->v[i].why);
	}
	pthread_mutex_unlock(&f->lock);
	return known;
}

/* Does this host differ from the record in snap's meta sm?  Kept as snap's
 * verdict.  sm NULL: its meta does not parse, which tells nothing (the
 * start says what is wrong with it). */
static bool judge(struct server *s, const char *snap, const struct snapshot_meta *sm, char *why,
		  size_t len)
{
	struct fallback *f = s->fallback;
	struct verdict *v;
	char w[768] = "";
	bool differs;

	pthread_mutex_lock(&f->lock);
	if (!f->here)
		f->here = host_record_here(&s->cfg); /* criu --version: once */
	differs = sm && f->here &&
		  host_record_compare(sm->host, sm->gpu, f->here, w, sizeof(w)) == 1;
	v = verdict_of(f, snap);
	if (v) {
		v->checked = true;
		v->differs = differs;
		snprintf(v->why, sizeof(v->why), "%s", w);
	}
	pthread_mutex_unlock(&f->lock);
	if (differs) {
		snprintf(why, len, "%s", w);
		pr_warn("snapshot %s cannot be restored on this host: %s", snap, w);
	}
	return differs;
}

/* judge of a meta as the manifest holds it. */
static bool judge_json(struct server *s, const char *snap, const json_t *meta, char *why,
		       size_t len)
{
	struct snapshot_meta sm;
	char w[256];
	bool parsed = !snapshot_meta_parse(meta, &sm, w, sizeof(w));
	bool differs = judge(s, snap, parsed ? &sm : NULL, why, len);

	snapshot_meta_release(&sm);
	return differs;
}

/* Does this host differ from snap's record?  Compared once: the host does
 * not change under a running thawd, nor does a snapshot. */
static bool host_differs(struct server *s, const char *snap, char *why, size_t len)
{
	struct manifest *m = NULL;
	bool differs = false;

	if (!s->fallback || known_verdict(s->fallback, snap, &differs, why, len))
		return differs;
	if (store_manifest_load(s->store, snap, &m, NULL))
		return false; /* the start says what is wrong with it */
	differs = judge_json(s, snap, m->meta, why, len);
	manifest_free(m);
	return differs;
}

bool fallback_pulled(struct server *s, const char *fn, const char *snap, const json_t *meta,
		     bool fails, char *why, size_t len)
{
	char w[768];
	int ret;

	if (!s->fallback || !judge_json(s, snap, meta, w, sizeof(w)))
		return false;
	snprintf(why, len, "the snapshot was made on a host unlike this one: %s", w);
	if (fails)
		return true;
	ret = registry_snapshot_unrestorable(s->reg, fn, snap, why);
	if (ret && ret != -ENOENT)
		pr_warn("function %s: cannot mark snapshot %s unrestorable: %s", fn, snap,
			strerror(-ret));
	return true;
}

static void resnapshot(struct server *s, const char *fn, const char *snap, bool heal);

bool fallback_precheck(struct server *s, const char *fn, const char *snap, bool fails,
		       const char **reason, char *why, size_t len)
{
	char w[768];

	if (!fails && registry_unrestorable(s->reg, fn, snap, why, len)) {
		*reason = FALLBACK_MARKED;
		resnapshot(s, fn, snap, false); /* marked by a pull, or a re-snapshot to retry */
		return true;
	}
	if (!host_differs(s, snap, w, sizeof(w)))
		return false;
	*reason = FALLBACK_HOST;
	snprintf(why, len, "the snapshot was made on a host unlike this one: %s", w);
	if (!fails)
		fallback_mark(s, fn, snap, why, NULL);
	return true;
}

bool fallback_applies(struct server *s, const char *fn, const char *snap, int err,
		      const struct instance *in, const char **reason, char *why, size_t len)
{
	enum fault_step step = in->fault.step;
	char cur[CHUNK_ID_LEN] = "";
	struct manifest *m = NULL;
	struct api_err e;
	int ret;

	/* A race lost (start_lost's to answer), or its image (image_lost's). */
	if (registry_ready_snapshot(s->reg, fn, cur, NULL) || strcmp(cur, snap) ||
	    step == FAULT_IMAGE)
		return false;
	snprintf(why, len, "%s", log_last_error()[0] ? log_last_error() : strerror(-err));
	if (err == -ENOENT) {
		/* Damage only if its manifest is what is gone (start_lost). */
		ret = store_manifest_load(s->store, snap, &m, NULL);
		manifest_free(m);
		if (ret != -ENOENT && ret != -EBADMSG)
			return false;
		snprintf(why, len, "snapshot %s: its manifest is %s", snap,
			 ret == -ENOENT ? "missing from the store" : "damaged");
		err = -EBADMSG;
	}
	e = api_err_from_errno(err);
	if (err == -EBADMSG)
		*reason = FALLBACK_DAMAGED;
	else if (step == FAULT_READY)
		*reason = FALLBACK_READY;
	else if (e.status == 500 || e.status == 504 ||
		 (errno_part_missing(err) &&
		  (step == FAULT_CRIU_RESTORE || step == FAULT_GPU_RESTORE)))
		*reason = FALLBACK_RESTORE; /* CRIU, runc; the driver gone or refusing */
	else
		return false;
	return true;
}

int fallback_boot(struct server *s, const char *fn, const char *snap, const char *why,
		  bool standby, struct instance *in)
{
	struct image im = { .lock_fd = -1 };
	struct func_spec *spec = NULL, *run = NULL;
	json_t *f = NULL;
	char err[512], **argv = NULL;
	int ret;

	ret = registry_get_json(s->reg, fn, &f);
	if (ret) {
		log_set_error("function %s is gone", fn);
		return ret;
	}
	/* What GET /functions/<id> answers: the spec and its "snapshot". */
	json_object_del(f, "snapshot");
	ret = spec_parse(f, fn, &spec, err, sizeof(err));
	if (ret) {
		log_set_error("its spec does not parse: %s", err);
		goto out;
	}
	if (spec->image) {
		/* As a snapshot boots it: the spec's image, from the cache. */
		ret = image_get(&s->cfg, spec->image, s->cfg.registry_auth, NULL, NULL, &im);
		if (!ret && (ret = image_apply(&im, spec, &run, err, sizeof(err))))
			log_set_error("%s (%s): %s", spec->image, im.digest, err);
		if (ret)
			goto out;
	}
	if (!(run ? run : spec)->command && (run ? run : spec)->bundle)
		argv = function_bundle_args((run ? run : spec)->bundle);
	ret = instance_boot(&s->cfg,
			    &(struct instance_boot){ .spec = run ? run : spec, .argv = argv,
						     .snapshot = snap, .why = why,
						     .image = im.digest, .standby = standby },
			    in);
out:
	function_argv_free(argv);
	/* Held until the boot is done: a running container keeps its root,
	 * which the cache's gc respects. */
	image_release(&im);
	spec_free(run);
	spec_free(spec);
	json_decref(f);
	return ret;
}

bool fallback_fault_damaged(const struct fault *fault)
{
	return fault && fault->has_chunk && (fault->err == -EBADMSG || fault->err == -ENOENT);
}

void fallback_heal(struct server *s, const char *snap, const struct fault *fault)
{
	int n;

	if (!fallback_fault_damaged(fault))
		return;
	n = store_heal(s->store, snap, NULL, NULL);
	if (n >= 0)
		pr_warn("snapshot %s: %d damaged or missing chunk(s); the damaged are out of the "
			"store's index, for the next snapshot to write anew", snap, n);
}

/* Launch snap's re-snapshot, unless one was launched less than the retry
 * ago (a failed one: a successful one replaced snap and cleared the mark).
 * heal: snap is damaged, and its re-snapshot (this one, or the next launched
 * where this one cannot be) heals it first. */
static void resnapshot(struct server *s, const char *fn, const char *snap, bool heal)
{
	struct fallback *f = s->fallback;
	struct verdict *v;
	char jid[32];
	uint64_t now = now_ns();
	bool go = false;
	int ret;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	v = verdict_of(f, snap);
	if (v && heal)
		v->heal = true;
	if (v && (!v->resnapshot_ns ||
		  now - v->resnapshot_ns > FALLBACK_RESNAPSHOT_RETRY_S * 1000000000ull)) {
		v->resnapshot_ns = now;
		heal = v->heal;
		go = true;
	}
	pthread_mutex_unlock(&f->lock);
	if (!go)
		return;
	ret = api_snapshot_launch(s, fn, heal ? snap : NULL, jid);
	if (!ret) {
		pr_info("function %s: its snapshot %s cannot serve; re-snapshot %s launched%s", fn,
			snap, jid, heal ? ", which heals it first" : "");
		pthread_mutex_lock(&f->lock);
		v = verdict_of(f, snap);
		if (v)
			v->heal = false;
		pthread_mutex_unlock(&f->lock);
		return;
	}
	if (ret != -EBUSY)
		pr_warn("function %s: no re-snapshot now (%s); the next start tries again", fn,
			ret == -EAGAIN ? "--max-snapshots jobs are running" : strerror(-ret));
	/* Building already (one at a time): counted as launched.  Not launched
	 * (the jobs full, thawd stopping): tried again by a start in a while,
	 * not by every start. */
	pthread_mutex_lock(&f->lock);
	v = verdict_of(f, snap);
	if (v && ret != -EBUSY)
		v->resnapshot_ns =
			now - (FALLBACK_RESNAPSHOT_RETRY_S - FALLBACK_LAUNCH_RETRY_S) * 1000000000ull;
	pthread_mutex_unlock(&f->lock);
}

void fallback_mark(struct server *s, const char *fn, const char *snap, const char *why,
		   const struct fault *fault)
{
	int ret;

	ret = registry_snapshot_unrestorable(s->reg, fn, snap, why);
	if (ret == -ENOENT)
		return; /* deleted, or another snapshot by now */
	if (ret)
		pr_warn("function %s: cannot mark snapshot %s unrestorable: %s", fn, snap,
			strerror(-ret));
	resnapshot(s, fn, snap, fallback_fault_damaged(fault));
}
