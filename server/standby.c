/* SPDX-License-Identifier: Apache-2.0 */
/* standby.c — see standby.h. */
#define LOG_PREFIX "standby: "
#include "server/standby.h"
#include "common/log.h"
#include "common/util.h"
#include "function/spec.h"
#include "restore/instance.h"
#include "server/fallback.h"
#include "server/internal.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How often the thread looks without being woken: records removed from
 * outside (thaw stop) and functions put by a peer are noticed within it. */
#define STANDBY_TICK_MS 500
/* A refill begins only after this long with no start in flight: starts come
 * in bursts, and one made beside a start slows it (they share the CPU, and
 * the kernel's mount lock, which CRIU's restore takes often).  Not a lower
 * priority for the refill: a CRIU at nice 19 holding that lock slowed the
 * start beside it twice as much (bench/LOG.md). */
#define STANDBY_QUIET_MS 500
/* After a failed fetch of a function's chunks, or a failed restore of its
 * standby, the next try waits this long, doubled at each failure up to the
 * most: a remote that is down or a snapshot that cannot restore costs a try
 * a minute, not a loop. */
#define STANDBY_RETRY_MIN_MS 1000
#define STANDBY_RETRY_MAX_MS 60000

struct standby_entry {
	char id[64];
	char function[64];
	char snapshot[CHUNK_ID_LEN];
	bool gpu_context; /* made as its function asked: holding its contexts */
};

/* A function's snapshot whose last try failed: not tried again before
 * not_before_ns, unless it was the fetch and a start has fetched it since.
 * why is the failure as logged: the same one again is not. */
struct standby_retry {
	char function[64];
	char snapshot[CHUNK_ID_LEN];
	uint64_t not_before_ns;
	unsigned delay_ms;
	bool fetch;
	char why[512];
};

struct standby {
	struct server *srv;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct standby_entry *v; /* waiting standbys */
	size_t n, cap;
	bool stop, kicked, started;
	uint64_t last_kick_ns; /* the last standby_kick: a start ended then */
	struct standby_retry *r; /* the thread's own: no lock */
	size_t nr, rcap;
	pthread_t thread;
};

/* What one function wants: its current snapshot and N. */
struct want {
	char function[64];
	char snapshot[CHUNK_ID_LEN];
	unsigned n;
	bool gpu;
	bool gpu_context; /* "standby_gpu": "context" */
};

static bool record_exists(const struct server *s, const char *id)
{
	char path[PATH_MAX + 128];

	snprintf(path, sizeof(path), "%s/instances/%s.json", s->cfg.data_dir, id);
	return access(path, F_OK) == 0;
}

static void stop_standby(struct server *s, const struct standby_entry *e, const char *why)
{
	pr_info("retiring standby %s of %s: %s", e->id, e->function, why);
	if (instance_stop(&s->cfg, e->id) && log_last_error()[0])
		pr_warn("stop standby %s: %s", e->id, log_last_error());
}

/* Every function with "standby" > 0 and a current snapshot.  *n is their
 * count; the array is yours. */
static struct want *wanted(struct server *s, size_t *n)
{
	json_t *list = NULL, *v;
	struct want *w = NULL;
	size_t i;

	*n = 0;
	if (registry_list_ids(s->reg, &list))
		return NULL;
	w = calloc(json_array_size(list) + 1, sizeof(*w));
	json_array_foreach(list, i, v) {
		const char *id = json_string_value(v);
		struct func_spec *f = NULL;
		struct registry_snap snap;

		/* Gone since the list, or a spec that no longer parses (logged). */
		if (!w || !id || registry_get_spec(s->reg, id, &f, &snap))
			continue;
		if (f->standby > 0 && snap.id[0]) {
			snprintf(w[*n].function, sizeof(w[*n].function), "%s", id);
			memcpy(w[*n].snapshot, snap.id, sizeof(snap.id));
			w[*n].n = f->standby;
			w[*n].gpu = f->gpu;
			/* The function's word now, not its snapshot's: how it is
			 * served changes without a new snapshot.  "standby_gpu"'s
			 * default (spec_standby_gpu_default) is spec_parse's. */
			w[*n].gpu_context = f->standby_gpu_context;
			(*n)++;
		}
		spec_free(f);
	}
	json_decref(list);
	return w;
}

static const struct want *want_of(const struct want *w, size_t n, const char *fn)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(w[i].function, fn))
			return &w[i];
	return NULL;
}

/* Take out of the pool (lock held) every standby that is no longer wanted:
 * into *out, to be stopped without the lock. */
static size_t pick_stale(struct standby *p, const struct want *w, size_t nw,
			 struct standby_entry *out, const char **why)
{
	size_t nout = 0, i = 0;

	while (i < p->n) {
		const struct standby_entry *e = &p->v[i];
		const struct want *x = want_of(w, nw, e->function);
		size_t same = 0;

		for (size_t j = 0; j < i; j++)
			same += !strcmp(p->v[j].function, e->function);
		if (!x)
			why[nout] = "the function is gone or wants none";
		else if (strcmp(x->snapshot, e->snapshot))
			why[nout] = "its snapshot is no longer current";
		else if (x->gpu_context != e->gpu_context)
			why[nout] = x->gpu_context ? "the function wants standbys that hold their "
						     "GPU contexts"
						   : "the function wants standbys that hold "
						     "nothing on the GPU";
		else if (same >= x->n)
			why[nout] = "more than the function wants";
		else if (!record_exists(p->srv, e->id))
			why[nout] = "its record was removed";
		else {
			i++;
			continue;
		}
		out[nout++] = *e;
		p->v[i] = p->v[--p->n];
	}
	return nout;
}

static struct standby_retry *retry_of(struct standby *p, const struct want *w)
{
	for (size_t i = 0; i < p->nr; i++)
		if (!strcmp(p->r[i].function, w->function) &&
		    !strcmp(p->r[i].snapshot, w->snapshot))
			return &p->r[i];
	return NULL;
}

static bool backing_off(struct standby *p, const struct want *w)
{
	const struct standby_retry *r = retry_of(p, w);

	return r && now_ns() < r->not_before_ns;
}

/* Forget the failures of what is no longer wanted (a function deleted,
 * asking for none, or with another snapshot starts afresh) and the failed
 * fetches of snapshots that the store has now (a start fetched them). */
static void prune_retries(struct standby *p, const struct want *w, size_t nw)
{
	size_t i = 0;

	while (i < p->nr) {
		const struct want *x = want_of(w, nw, p->r[i].function);
		struct manifest *m = NULL;
		bool keep = x && !strcmp(x->snapshot, p->r[i].snapshot);

		if (keep && p->r[i].fetch &&
		    !store_manifest_load(p->srv->store, x->snapshot, &m, NULL))
			keep = false;
		manifest_free(m);
		if (keep)
			i++;
		else
			p->r[i] = p->r[--p->nr];
	}
}

/* w's try failed (fetch: its fetch, else its restore) with why: logged
 * unless it is the failure logged last for w, and not tried again for a
 * while.  -ENOMEM when it cannot be recorded (the caller then waits a tick). */
static int retry_later(struct standby *p, const struct want *w, bool fetch, const char *why)
{
	const char *what = fetch ? "fetch its snapshot from the remote" : "restore it";
	struct standby_retry *r = retry_of(p, w);

	if (!r && !ARRAY_GROW(p->r, p->rcap, p->nr + 1, 8)) {
		r = &p->r[p->nr++];
		memset(r, 0, sizeof(*r));
		snprintf(r->function, sizeof(r->function), "%s", w->function);
		snprintf(r->snapshot, sizeof(r->snapshot), "%s", w->snapshot);
	}
	if (!r) {
		pr_warn("no standby of %s: cannot %s: %s", w->function, what, why);
		return -ENOMEM;
	}
	r->delay_ms = r->delay_ms ? r->delay_ms * 2 : STANDBY_RETRY_MIN_MS;
	if (r->delay_ms > STANDBY_RETRY_MAX_MS)
		r->delay_ms = STANDBY_RETRY_MAX_MS;
	r->not_before_ns = now_ns() + (uint64_t)r->delay_ms * 1000000ULL;
	r->fetch = fetch;
	if (strcmp(r->why, why)) {
		pr_warn("no standby of %s yet: cannot %s: %s (trying again in %u s, then less often, "
			"up to every %d s)",
			w->function, what, why, r->delay_ms / 1000, STANDBY_RETRY_MAX_MS / 1000);
		snprintf(r->why, sizeof(r->why), "%s", why);
	} else {
		pr_debug("no standby of %s yet: cannot %s, again: trying again in %u s", w->function,
			 what, r->delay_ms / 1000);
	}
	return 0;
}

/* w's standby was made: its earlier failures are forgotten. */
static void retry_done(struct standby *p, const struct want *w)
{
	struct standby_retry *r = retry_of(p, w);

	if (!r)
		return;
	pr_info("a standby of %s is made, after: %s", w->function, r->why);
	*r = p->r[--p->nr];
}

/* The first function (lock held) with fewer standbys than it wants, if
 * the server's cap leaves room. */
static const struct want *pick_short(struct standby *p, const struct want *w, size_t nw)
{
	if (p->n >= p->srv->opts.max_standby)
		return NULL;
	for (size_t i = 0; i < nw; i++) {
		size_t have = 0;

		for (size_t j = 0; j < p->n; j++)
			have += !strcmp(p->v[j].function, w[i].function) &&
				!strcmp(p->v[j].snapshot, w[i].snapshot);
		if (have < w[i].n && !backing_off(p, &w[i]))
			return &w[i];
	}
	return NULL;
}

static int add_entry(struct standby *p, const struct standby_entry *e)
{
	if (ARRAY_GROW(p->v, p->cap, p->n + 1, 8))
		return -ENOMEM;
	p->v[p->n++] = *e;
	return 0;
}

/* Make one standby for w (no lock held); into the pool unless it went
 * stale meanwhile (the next round retires it then).  A snapshot whose
 * manifest the store lacks (pulled with ?fetch=0) is fetched first, and
 * then the round begins again: the fetch may have taken a while, and a
 * start may be in flight by now.  -errno when it failed and no retry could
 * be recorded. */
static int make_one(struct standby *p, const struct want *w)
{
	struct server *s = p->srv;
	struct standby_entry e = { 0 };
	struct instance in;
	double fetch_ms = 0;
	char why[768];
	int ret;

	log_clear_error();
	memset(&in, 0, sizeof(in));
	/* Its snapshot cannot serve (server/fallback.h): a CPU function's
	 * standbys boot, frozen once warm, until the new snapshot is ready; a
	 * GPU function's wait for it (a booted process's GPU state would be
	 * held all the while). */
	if (registry_unrestorable(s->reg, w->function, w->snapshot, why, sizeof(why))) {
		ret = w->gpu ? -EAGAIN : fallback_boot(s, w->function, w->snapshot, why, true, &in);
		if (ret)
			return retry_later(p, w, false,
					   w->gpu ? "its snapshot cannot serve and a GPU function's "
						    "standbys wait for the new one"
					   : log_last_error()[0] ? log_last_error()
								 : strerror(-ret));
		goto made;
	}
	ret = remote_sync_fetch(s, w->snapshot, &fetch_ms);
	if (ret)
		return retry_later(p, w, true,
				   log_last_error()[0] ? log_last_error() : strerror(-ret));
	if (fetch_ms > 0) {
		pr_info("fetched %s for the standbys of %s in %.0f ms", w->snapshot, w->function,
			fetch_ms);
		return 0;
	}
	log_clear_error();
	ret = instance_make_standby(&s->cfg, s->store, s->tier, w->snapshot, w->gpu_context,
				    &in);
	if (ret)
		return retry_later(p, w, false,
				   log_last_error()[0] ? log_last_error() : strerror(-ret));
made:
	retry_done(p, w);
	snprintf(e.id, sizeof(e.id), "%s", in.id);
	snprintf(e.function, sizeof(e.function), "%s", w->function);
	snprintf(e.snapshot, sizeof(e.snapshot), "%s", w->snapshot);
	e.gpu_context = w->gpu_context;
	pthread_mutex_lock(&p->lock);
	ret = p->stop ? -ECANCELED : add_entry(p, &e);
	pthread_mutex_unlock(&p->lock);
	if (ret)
		stop_standby(s, &e, ret == -ECANCELED ? "thawd is stopping" : "out of memory");
	return 0;
}

static void wait_kick(struct standby *p, int ms)
{
	struct timespec ts = mono_after_ms((uint64_t)ms);

	pthread_mutex_lock(&p->lock);
	while (!p->stop && !p->kicked)
		if (pthread_cond_timedwait(&p->cv, &p->lock, &ts) == ETIMEDOUT)
			break;
	p->kicked = false;
	pthread_mutex_unlock(&p->lock);
}

static void *refill_thread(void *arg)
{
	struct standby *p = arg;
	struct server *s = p->srv;

	while (!atomic_load(&s->stopping)) {
		struct standby_entry *stale = NULL;
		const char **why = NULL;
		const struct want *short_one = NULL;
		struct want one, *w;
		size_t nw, nstale = 0;
		bool quiet;

		w = wanted(s, &nw);
		prune_retries(p, w, nw);
		pthread_mutex_lock(&p->lock);
		if (p->stop) {
			pthread_mutex_unlock(&p->lock);
			free(w);
			break;
		}
		stale = calloc(p->n + 1, sizeof(*stale));
		why = calloc(p->n + 1, sizeof(*why));
		if (stale && why)
			nstale = pick_stale(p, w, nw, stale, why);
		/* Refill only once no start has been in flight for a while. */
		quiet = ms_since(p->last_kick_ns) >= STANDBY_QUIET_MS;
		if (s->tier && atomic_load(&s->starts_running) == 0 && quiet)
			short_one = pick_short(p, w, nw);
		if (short_one)
			one = *short_one;
		pthread_mutex_unlock(&p->lock);
		for (size_t i = 0; i < nstale; i++)
			stop_standby(s, &stale[i], why[i]);
		free(stale);
		free(why);
		free(w);
		if (short_one && make_one(p, &one))
			wait_kick(p, STANDBY_TICK_MS);
		else if (!short_one)
			wait_kick(p, quiet ? STANDBY_TICK_MS : STANDBY_QUIET_MS / 5);
	}
	return NULL;
}

struct standby *standby_new(struct server *s)
{
	struct standby *p = calloc(1, sizeof(*p));

	if (!p) {
		pr_err("out of memory: no standbys");
		return NULL;
	}
	p->srv = s;
	pthread_mutex_init(&p->lock, NULL);
	cond_init_monotonic(&p->cv);
	if (pthread_create(&p->thread, NULL, refill_thread, p)) {
		pr_err("cannot start the standby thread: no standbys");
		standby_free(p);
		return NULL;
	}
	p->started = true;
	return p;
}

void standby_free(struct standby *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->thread, NULL);
	if (p->n)
		pr_info("stopping %zu standby instance(s)", p->n);
	for (size_t i = 0; i < p->n; i++)
		stop_standby(p->srv, &p->v[i], "thawd is stopping");
	free(p->v);
	free(p->r);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

bool standby_take(struct standby *p, const char *fn, const char *snap, char id[64])
{
	bool found = false;

	if (!p)
		return false;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n && !found; i++) {
		if (strcmp(p->v[i].function, fn) || strcmp(p->v[i].snapshot, snap))
			continue;
		snprintf(id, 64, "%s", p->v[i].id);
		p->v[i] = p->v[--p->n];
		found = true;
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

void standby_kick(struct standby *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->kicked = true;
	p->last_kick_ns = now_ns();
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->lock);
}

void standby_retire_function(struct standby *p, const char *fn)
{
	struct standby_entry *out;
	size_t n = 0, i = 0;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	out = calloc(p->n + 1, sizeof(*out));
	while (out && i < p->n) {
		if (strcmp(p->v[i].function, fn)) {
			i++;
			continue;
		}
		out[n++] = p->v[i];
		p->v[i] = p->v[--p->n];
	}
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < n; i++)
		stop_standby(p->srv, &out[i], "its function is deleted");
	free(out);
}

json_t *standby_pool_sizes(struct standby *p)
{
	json_t *o = json_object();

	if (!p || !o)
		return o;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n; i++) {
		json_t *v = json_object_get(o, p->v[i].function);

		json_object_set_new(o, p->v[i].function,
				    json_integer(v ? json_integer_value(v) + 1 : 1));
	}
	pthread_mutex_unlock(&p->lock);
	return o;
}
