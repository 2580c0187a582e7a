/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c — see pool.h. */
#define LOG_PREFIX "pool: "
#include "server/pool.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "restore/shim.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/lifetimes.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/starts.h"
#include "store/chunk.h"
#include "store/manifest.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A function's settings are read from the registry at most this often: a
 * PUT that changes them is seen within it. */
#define PARAMS_MAX_AGE_NS (1000ull * 1000 * 1000)
/* How often a waiting request looks whether its client is still there. */
#define WAIT_POLL_NS (50ull * 1000 * 1000)
/* Ids of instances stopped before their start had put them here. */
#define FORGOTTEN_KEPT 32
/* Distinct statuses counted per function; the rest count as "other". */
#define STATUSES_MAX 16

static const double seconds_bounds[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
					 0.05,   0.1,   0.25,   0.5,   1,    2.5,
					 5,      10,    30,     60,    120 };

struct pool_fn;

struct pool_inst {
	struct pool_inst *next;
	struct pool_fn *fn;
	char id[64];
	char snapshot[CHUNK_ID_LEN]; /* the snapshot it was restored from */
	pid_t pid;
	unsigned long long pid_start;
	int netns_fd;
	uint16_t port;
	unsigned inflight;
	bool draining;  /* takes no more requests: idle and being stopped, or unreachable */
	bool forgotten; /* being stopped: goes with its last request */
	uint64_t last_end_ms; /* CLOCK_REALTIME: when its last request ended */
	void **links;         /* connections kept for later requests */
	size_t nlinks;
};

/* A request waiting for a slot, on its own thread's stack. */
struct waiter {
	struct waiter *prev, *next;
	pthread_cond_t cv;
	struct pool_inst *got;  /* handed a slot of it */
	bool failed;            /* refused meanwhile: why */
	struct pool_refusal why;
};

struct params {
	unsigned concurrency, queue, max_instances;
	double queue_timeout_s;
};

struct pool_fn {
	struct pool_fn *next;
	char id[64];
	struct params par;
	char snapshot[CHUNK_ID_LEN]; /* its current one: newcomers go to its instances */
	uint64_t params_ns; /* when read (now_ns) */
	bool gone;          /* the registry has it no more */
	struct pool_inst *insts;
	unsigned starting;  /* starts in flight for its requests */
	unsigned stopping;  /* its instances being stopped: not counted against
			     * max_instances (insts_reserve), but a start refused
			     * for what they hold is tried again once they go */
	struct waiter *head, *tail;
	unsigned waiting;
	/* Metrics */
	struct stats_hist latency, wait;
	struct {
		unsigned status; /* 0: other */
		uint64_t n;
	} statuses[STATUSES_MAX + 1];
	size_t nstatuses;
	/* Its starts' results (thaw_routed_starts_total): an instance; a
	 * start refused before anything was restored (429 or 503 with
	 * Retry-After: max_instances, --max-starts, no room on the GPUs or in
	 * memory), which the requests outlive by waiting for the instances
	 * there are; and a start that failed, or whose instance could not be
	 * used. */
	uint64_t starts_ok, starts_refused, starts_failed;
};

struct pool {
	struct server *srv;
	void (*link_free)(void *link);
	pthread_mutex_t lock;
	pthread_cond_t cv;        /* a start thread ended, a request was released */
	struct pool_fn *fns;
	unsigned starters;        /* start threads running */
	bool stopping;            /* no waiting, no starts */
	atomic_bool abort;        /* requests being served should end */
	char forgotten[FORGOTTEN_KEPT][64];
	unsigned nforgotten;
	/* Instances being stopped (pool_forget) until pool_gone: id, function. */
	struct stop_ref {
		char id[64];
		char fn[64];
	} *stops;
	size_t nstops, capstops;
};

static int refuse(struct pool_refusal *why, unsigned status, const char *code, bool retry,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int refuse(struct pool_refusal *why, unsigned status, const char *code, bool retry,
		  const char *fmt, ...)
{
	va_list ap;

	why->status = status;
	why->code = code;
	why->retry_after = retry;
	va_start(ap, fmt);
	vsnprintf(why->msg, sizeof(why->msg), fmt, ap);
	va_end(ap);
	return -EAGAIN;
}

/* ---- functions and instances (under the lock) ---- */

static struct pool_fn *fn_find(struct pool *p, const char *id)
{
	for (struct pool_fn *f = p->fns; f; f = f->next)
		if (!strcmp(f->id, id))
			return f;
	return NULL;
}

static struct pool_fn *fn_new(struct pool *p, const char *id)
{
	struct pool_fn *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	if (stats_hist_init(&f->latency, seconds_bounds, ARRAY_SIZE(seconds_bounds)) ||
	    stats_hist_init(&f->wait, seconds_bounds, ARRAY_SIZE(seconds_bounds))) {
		stats_hist_release(&f->latency);
		free(f);
		return NULL;
	}
	snprintf(f->id, sizeof(f->id), "%s", id);
	f->next = p->fns;
	p->fns = f;
	return f;
}

static void fn_free(struct pool_fn *f)
{
	stats_hist_release(&f->latency);
	stats_hist_release(&f->wait);
	free(f);
}

/* Instances that take requests or will: all but those being stopped
 * (f->stopping counts those). */
static unsigned live(const struct pool_fn *f)
{
	unsigned n = 0;

	for (const struct pool_inst *i = f->insts; i; i = i->next)
		n += !i->forgotten;
	return n;
}

/* Was i restored from a snapshot its function has replaced since? */
static bool stale(const struct pool_inst *i)
{
	return i->fn->snapshot[0] && strcmp(i->snapshot, i->fn->snapshot);
}

/* The busiest instance of the current snapshot with a free slot (the
 * oldest of equals: the list is newest first, and a later one wins only by
 * being busier). */
static struct pool_inst *pick(struct pool_fn *f)
{
	struct pool_inst *best = NULL;

	for (struct pool_inst *i = f->insts; i; i = i->next) {
		if (i->draining || i->inflight >= f->par.concurrency || stale(i))
			continue;
		if (!best || i->inflight >= best->inflight)
			best = i;
	}
	return best;
}

static void take(struct pool_inst *i, struct pool_slot *slot)
{
	memset(slot, 0, sizeof(*slot));
	slot->inst = i;
	snprintf(slot->instance, sizeof(slot->instance), "%s", i->id);
	slot->pid = i->pid;
	slot->pid_start = i->pid_start;
	slot->netns_fd = i->netns_fd;
	slot->port = i->port;
	if (i->nlinks)
		slot->link = i->links[--i->nlinks];
}

static void dequeue(struct pool_fn *f, struct waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		f->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		f->tail = w->prev;
	w->prev = w->next = NULL;
	f->waiting--;
}

static void enqueue(struct pool_fn *f, struct waiter *w)
{
	w->prev = f->tail;
	w->next = NULL;
	if (f->tail)
		f->tail->next = w;
	else
		f->head = w;
	f->tail = w;
	f->waiting++;
}

/* Free slots of i go to the requests waiting longest. */
static void hand_slots(struct pool_fn *f, struct pool_inst *i)
{
	while (f->head && !i->draining && i->inflight < f->par.concurrency) {
		struct waiter *w = f->head;

		dequeue(f, w);
		i->inflight++;
		w->got = i;
		pthread_cond_signal(&w->cv);
	}
}

static void fail_waiters(struct pool_fn *f, const struct pool_refusal *why)
{
	while (f->head) {
		struct waiter *w = f->head;

		dequeue(f, w);
		w->failed = true;
		w->why = *why;
		pthread_cond_signal(&w->cv);
	}
}

/* Unlink instance i of its function (it is freed by the caller, outside
 * the lock). */
static void inst_unlink(struct pool_inst *i)
{
	struct pool_inst **pp = &i->fn->insts;

	while (*pp && *pp != i)
		pp = &(*pp)->next;
	if (*pp)
		*pp = i->next;
	i->next = NULL;
}

static void inst_free(struct pool *p, struct pool_inst *i)
{
	if (!i)
		return;
	for (size_t k = 0; k < i->nlinks; k++)
		p->link_free(i->links[k]);
	free(i->links);
	if (i->netns_fd >= 0)
		close(i->netns_fd);
	free(i);
}

static struct pool_inst *inst_find(struct pool *p, const char *id)
{
	for (struct pool_fn *f = p->fns; f; f = f->next)
		for (struct pool_inst *i = f->insts; i; i = i->next)
			if (!strcmp(i->id, id))
				return i;
	return NULL;
}

/* ---- settings ---- */

/* The defaults ("concurrency" by "gpu", "queue", "queue_timeout_s") are
 * spec_parse's. */
static void params_of(const struct func_spec *f, struct params *par)
{
	par->concurrency = f->concurrency ? f->concurrency : 1;
	par->queue = f->queue;
	par->queue_timeout_s = f->queue_timeout_s;
	par->max_instances = f->max_instances;
}

/* Function fn's pool with its settings at most PARAMS_MAX_AGE_NS old:
 * 0, -ENOENT (no such function: a pool left empty goes), or -ENOMEM. */
static int refresh(struct pool *p, const char *fn)
{
	struct pool_fn *f;
	struct params par = { 0 };
	struct registry_snap snap = { 0 };
	struct func_spec *spec = NULL;
	bool fresh;
	int ret;

	pthread_mutex_lock(&p->lock);
	f = fn_find(p, fn);
	fresh = f && !f->gone && now_ns() - f->params_ns < PARAMS_MAX_AGE_NS;
	pthread_mutex_unlock(&p->lock);
	if (fresh)
		return 0;
	ret = registry_get_spec(p->srv->reg, fn, &spec, &snap);
	if (!ret)
		params_of(spec, &par);
	spec_free(spec);
	pthread_mutex_lock(&p->lock);
	f = fn_find(p, fn);
	if (ret == -ENOENT && f) {
		f->gone = true;
		if (!f->insts && !f->starting && !f->waiting) {
			struct pool_fn **pp = &p->fns;

			while (*pp != f)
				pp = &(*pp)->next;
			*pp = f->next;
			fn_free(f);
		}
	}
	if (!ret && !f && !(f = fn_new(p, fn)))
		ret = -ENOMEM;
	if (!ret) {
		f->par = par;
		memcpy(f->snapshot, snap.id, sizeof(snap.id));
		f->params_ns = now_ns();
		f->gone = false;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

/* ---- starts ---- */

struct start_arg {
	struct pool *p;
	char fn[64];
};

/* The function's port in its namespace: its snapshot's spec's (a spec on
 * an image may leave it to the image; the snapshot has it resolved).  0,
 * -EINVAL (its spec has none, or its meta does not parse), or the manifest
 * load's -errno (-ENOENT: the snapshot is gone, replaced or deleted since
 * the start began). */
static int snapshot_port(struct pool *p, const char *snap, uint16_t *port)
{
	struct manifest *m = NULL;
	struct snapshot_meta sm;
	char why[256];
	int ret = store_manifest_load(p->srv->store, snap, &m, NULL);

	if (ret)
		return ret;
	ret = snapshot_meta_parse(m->meta, &sm, why, sizeof(why));
	manifest_free(m);
	if (ret)
		pr_warn("snapshot %s: its meta: %s", snap, why);
	else if (!sm.spec || !sm.spec->port)
		ret = -EINVAL;
	else
		*port = sm.spec->port;
	snapshot_meta_release(&sm);
	return ret == -EBADMSG ? -EINVAL : ret;
}

/* The instance a start answered, ready to take requests: 0 and *out, or
 * -errno with why in msg. */
static int inst_new(struct pool *p, const char *id, const char *snap, pid_t pid,
		    struct pool_inst **out, char *msg, size_t len)
{
	struct pool_inst *i = NULL;
	char netns[PATH_MAX];
	int ret;

	*out = NULL;
	if (!id || !id[0] || !snap || !snap[0]) {
		snprintf(msg, len, "the start answered no instance");
		return -EINVAL;
	}
	i = calloc(1, sizeof(*i));
	if (!i) {
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	i->netns_fd = -1;
	snprintf(i->id, sizeof(i->id), "%s", id);
	snprintf(i->snapshot, sizeof(i->snapshot), "%s", snap);
	i->pid = pid;
	proc_start_time(i->pid, &i->pid_start);
	ret = snapshot_port(p, snap, &i->port);
	if (ret == -EINVAL)
		snprintf(msg, len, "instance %s: its snapshot %s names no port", id, snap);
	else if (ret)
		snprintf(msg, len,
			 "instance %s: its snapshot %s is gone (the function was deleted or "
			 "snapshotted again during the start): %s",
			 id, snap, strerror(-ret));
	if (ret)
		goto err;
	/* Where restore/instance.c keeps its namespace (bound there for its
	 * life): requests go straight to the function's port in it. */
	ret = -ENAMETOOLONG;
	if ((size_t)snprintf(netns, sizeof(netns), "%s/instances/%s/netns", p->srv->cfg.data_dir,
			     id) < sizeof(netns)) {
		i->netns_fd = open(netns, O_RDONLY | O_CLOEXEC);
		ret = i->netns_fd < 0 ? -errno : 0;
	}
	if (ret) {
		snprintf(msg, len, "instance %s: cannot open its network namespace: %s", id,
			 strerror(-ret));
		goto err;
	}
	*out = i;
	return 0;
err:
	inst_free(p, i);
	return ret;
}

/* A start's refusal as the answer of the requests that waited for it: the
 * start's own status and code (docs/API.md, POST /functions/<id>/start),
 * the code one that goes with the status (errors.h). */
static void start_refusal(const struct start_result *r, const char *fn,
			  struct pool_refusal *why)
{
	struct api_err k = api_err_known(r->status >= 400 ? r->status : 500, r->code);

	refuse(why, k.status, k.code, k.status == 429 || k.status == 503,
	       "no instance of %s could be started: %s", fn, r->msg[0] ? r->msg : "no answer");
}

static bool was_forgotten(struct pool *p, const char *id)
{
	for (unsigned k = 0; k < FORGOTTEN_KEPT; k++)
		if (!strcmp(p->forgotten[k], id))
			return true;
	return false;
}

static void *start_main(void *arg)
{
	struct start_arg *a = arg;
	struct pool *p = a->p;
	struct pool_inst *i = NULL, *drop = NULL;
	struct pool_refusal why = { 0 };
	struct pool_fn *f;
	struct start_result r;
	char msg[256];
	int ret = 0;

	static const struct start_opts routed = { .idle_s = -1, .lifetime_s = -1, .routed = true };
	starts_run(p->srv, a->fn, &routed, &r);
	if (r.status == 201)
		ret = inst_new(p, r.in.id, r.in.snapshot, r.in.pid, &i, msg, sizeof(msg));
	if (ret) {
		pr_warn("start of %s for its requests: %s; the instance is stopped", a->fn, msg);
		if (r.in.id[0])
			lifetimes_stop_instance(p->srv, r.in.id, 0, NULL);
		/* A race lost to a DELETE or a new snapshot is no failure of an
		 * instance: the next request starts one of what is there now. */
		if (ret == -ENOENT)
			refuse(&why, 503, "unavailable", true,
			       "no instance of %s could be started: %s", a->fn, msg);
		else
			refuse(&why, 502, "instance_failed", false,
			       "no instance of %s could be reached: %s", a->fn, msg);
	} else if (r.status != 201) {
		start_refusal(&r, a->fn, &why);
	}
	/* Nothing was restored: no failure, though the requests it was made
	 * for may wait longer (a start that failed has said why in the log). */
	if (r.refused)
		pr_info("a start of %s for its requests was refused: %s", a->fn, why.msg);
	pthread_mutex_lock(&p->lock);
	f = fn_find(p, a->fn); /* kept while it has starts */
	f->starting--;
	if (i && was_forgotten(p, i->id)) {
		/* Stopped (its function deleted) before it got here. */
		drop = i;
		i = NULL;
		refuse(&why, 404, "not_found", false, "function %s was deleted", a->fn);
	}
	if (i) {
		i->fn = f;
		i->last_end_ms = realtime_ms();
		i->next = f->insts;
		f->insts = i;
		f->starts_ok++;
		hand_slots(f, i);
	} else {
		if (r.refused)
			f->starts_refused++;
		else
			f->starts_failed++;
		/* Nothing left to serve them: the waiting requests are told why.
		 * An instance being stopped may hold what the start was
		 * refused for (room on a GPU, memory): they wait for it to go
		 * (pool_gone starts one then). */
		if (!live(f) && !f->starting && !f->stopping)
			fail_waiters(f, &why);
	}
	p->starters--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->lock);
	inst_free(p, drop);
	start_result_release(&r);
	free(a);
	return NULL;
}

int pool_adopt(struct pool *p, const char *fn, const json_t *rec)
{
	struct pool_inst *i = NULL;
	struct pool_fn *f;
	char msg[256];
	int ret;

	if (!p)
		return -ENOENT;
	/* A record has what a start gives: its id, snapshot, pid. */
	ret = inst_new(p, json_string_value(json_object_get(rec, "instance")),
		       json_string_value(json_object_get(rec, "snapshot")),
		       (pid_t)json_integer_value(json_object_get(rec, "pid")), &i, msg, sizeof(msg));
	if (ret) {
		pr_warn("adopted instance of %s: %s: no routed request goes to it", fn, msg);
		return ret;
	}
	pthread_mutex_lock(&p->lock);
	f = fn_find(p, fn);
	if (!f)
		f = fn_new(p, fn); /* its settings are read at its first request */
	if (f) {
		i->fn = f;
		i->last_end_ms = realtime_ms();
		i->next = f->insts;
		f->insts = i;
		i = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	if (i) {
		inst_free(p, i);
		return -ENOMEM;
	}
	return 0;
}

/* Start instances of f until those starting have a slot for each of
 * demand requests, within max_instances.  Under the lock. */
static void start_for(struct pool *p, struct pool_fn *f, unsigned demand)
{
	const struct params *par = &f->par;

	while (!p->stopping && demand > f->starting * par->concurrency &&
	       (!par->max_instances ||
		live(f) + f->starting < par->max_instances)) {
		struct start_arg *a = calloc(1, sizeof(*a));
		pthread_attr_t attr;
		pthread_t t;
		int ret;

		if (!a)
			break;
		a->p = p;
		snprintf(a->fn, sizeof(a->fn), "%s", f->id);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		ret = pthread_create(&t, &attr, start_main, a);
		pthread_attr_destroy(&attr);
		if (ret) {
			pr_warn("cannot start a thread for a start of %s: %s", f->id, strerror(ret));
			free(a);
			break;
		}
		f->starting++;
		p->starters++;
	}
}

/* ---- requests ---- */

/* A slot of f for a request that arrived at t0, taken at once, or else the
 * decision to wait for one (starting instances) or to refuse.  Under the
 * lock: 0 and *slot; 1: wait; -EAGAIN and *why. */
static int admit(struct pool *p, struct pool_fn *f, struct pool_slot *slot,
		 struct pool_refusal *why)
{
	unsigned max = f->par.max_instances;
	struct pool_inst *i;

	if (p->stopping)
		return refuse(why, 503, "shutting_down", false, "thawd is stopping");
	/* First come, first served: a slot goes to a newcomer only when
	 * nobody waits. */
	i = f->head ? NULL : pick(f);
	if (i) {
		i->inflight++;
		take(i, slot);
		return 0;
	}
	start_for(p, f, f->waiting + 1);
	if (f->waiting + 1 <= f->starting * f->par.concurrency + f->par.queue)
		return 1;
	if (max && live(f) + f->starting >= max)
		return refuse(why, 429, "too_many_instances", true,
			      "function %s is at its max_instances (%u), their slots are busy and "
			      "its queue is full (%u request(s) waiting)",
			      f->id, max, f->waiting);
	return refuse(why, 503, "queue_full", true,
		      "function %s has its queue full (%u request(s) waiting for an instance)",
		      f->id, f->waiting);
}

/* Wait in f's queue, until t0 + its queue_timeout_s, for a slot handed over
 * (0 and *slot), a refusal (-EAGAIN and *why), or the client's leaving
 * (-ECONNABORTED), polling gone(arg).  Called, and returns, with the lock
 * held; lets it go while it waits and while it polls. */
static int wait_slot(struct pool *p, struct pool_fn *f, uint64_t t0, pool_gone_fn gone, void *arg,
		     struct pool_slot *slot, struct pool_refusal *why)
{
	uint64_t deadline = t0 + (uint64_t)(f->par.queue_timeout_s * 1e9);
	struct waiter w = { 0 };
	int ret = -EAGAIN;

	cond_init_monotonic(&w.cv);
	enqueue(f, &w);
	for (;;) {
		uint64_t now = now_ns(), until = MIN(now + WAIT_POLL_NS, deadline);
		struct timespec ts;
		bool left = false;

		if (w.got || w.failed)
			break;
		if (p->stopping) {
			refuse(&w.why, 503, "shutting_down", false, "thawd is stopping");
			break;
		}
		if (now >= deadline) {
			refuse(&w.why, 503, "queue_timeout", true,
			       "no instance of %s was free within its queue_timeout_s (%g s)", f->id,
			       f->par.queue_timeout_s);
			break;
		}
		if (gone) {
			pthread_mutex_unlock(&p->lock);
			left = gone(arg);
			pthread_mutex_lock(&p->lock);
		}
		if (left && !w.got && !w.failed) {
			ret = -ECONNABORTED;
			break;
		}
		ts = mono_timespec(until);
		pthread_cond_timedwait(&w.cv, &p->lock, &ts);
	}
	if (w.got) {
		take(w.got, slot);
		ret = 0;
	} else if (!w.failed) {
		dequeue(f, &w); /* still queued: it gave up */
	}
	if (ret == -EAGAIN)
		*why = w.why;
	pthread_cond_destroy(&w.cv);
	return ret;
}

int pool_acquire(struct pool *p, const char *fn, pool_gone_fn gone, void *arg,
		 struct pool_slot *slot, struct pool_refusal *why)
{
	uint64_t t0 = now_ns();
	struct pool_fn *f;
	int ret;

	memset(slot, 0, sizeof(*slot));
	slot->netns_fd = -1;
	ret = refresh(p, fn);
	if (ret == -ENOENT)
		return refuse(why, 404, "not_found", false, "no function %s", fn);
	if (ret)
		return refuse(why, 503, "no_capacity", true, "out of memory");
	pthread_mutex_lock(&p->lock);
	f = fn_find(p, fn);
	if (!f || f->gone)
		ret = refuse(why, 404, "not_found", false, "no function %s", fn);
	else if ((ret = admit(p, f, slot, why)) == 1)
		ret = wait_slot(p, f, t0, gone, arg, slot, why);
	pthread_mutex_unlock(&p->lock);
	if (!ret)
		slot->wait_ms = ms_since(t0);
	return ret;
}

void pool_release(struct pool *p, struct pool_slot *slot, void *link, bool broken)
{
	struct pool_inst *i = slot->inst, *dead = NULL;
	void *drop = link;

	if (!i) {
		if (link)
			p->link_free(link);
		return;
	}
	pthread_mutex_lock(&p->lock);
	i->inflight--;
	i->last_end_ms = realtime_ms();
	if (broken)
		i->draining = true;
	/* At most one idle connection per slot. */
	if (link && !i->forgotten && i->nlinks < i->fn->par.concurrency) {
		void **l = realloc(i->links, (i->nlinks + 1) * sizeof(*l));

		if (l) {
			i->links = l;
			i->links[i->nlinks++] = link;
			drop = NULL;
		}
	}
	hand_slots(i->fn, i);
	if (i->forgotten && !i->inflight) {
		inst_unlink(i);
		dead = i;
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->lock);
	if (drop)
		p->link_free(drop);
	inst_free(p, dead);
	slot->inst = NULL;
	slot->link = NULL;
	slot->netns_fd = -1;
}

int pool_idle(struct pool *p, const char *id, double idle_s, uint64_t now_ms)
{
	struct pool_inst *i;
	int ret = -ENOENT;

	if (!p)
		return -ENOENT;
	pthread_mutex_lock(&p->lock);
	i = inst_find(p, id);
	if (i && !i->inflight && stale(i))
		ret = 2;
	else if (i)
		ret = !i->inflight && idle_s > 0 &&
		      now_ms >= i->last_end_ms + (uint64_t)(idle_s * 1000);
	if (ret > 0)
		i->draining = true;
	pthread_mutex_unlock(&p->lock);
	return ret;
}

void pool_forget(struct pool *p, const char *id)
{
	struct pool_inst *i, *dead = NULL;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	i = inst_find(p, id);
	if (i) {
		struct pool_fn *f = i->fn;

		bool known = false;

		for (size_t k = 0; k < p->nstops && !known; k++)
			known = !strcmp(p->stops[k].id, id);
		/* Until pool_gone it is counted here (not against
		 * max_instances): a start refused for the GPU or the memory it
		 * still holds is tried again when it goes. */
		if (!known && !ARRAY_GROW(p->stops, p->capstops, p->nstops + 1, 8)) {
			snprintf(p->stops[p->nstops].id, 64, "%s", id);
			snprintf(p->stops[p->nstops].fn, 64, "%s", f->id);
			p->nstops++;
			f->stopping++;
		}
		i->draining = i->forgotten = true;
		if (!i->inflight) {
			inst_unlink(i);
			dead = i;
		}
	} else {
		/* Maybe a start of ours that has not put it here yet. */
		snprintf(p->forgotten[p->nforgotten++ % FORGOTTEN_KEPT], 64, "%s", id);
	}
	pthread_mutex_unlock(&p->lock);
	inst_free(p, dead);
}

void pool_gone(struct pool *p, const char *id)
{
	struct pool_fn *f;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (size_t k = 0; k < p->nstops; k++) {
		if (strcmp(p->stops[k].id, id))
			continue;
		f = fn_find(p, p->stops[k].fn);
		p->stops[k] = p->stops[--p->nstops];
		if (!f)
			break;
		f->stopping--;
		/* Requests still waiting (a start refused for what it held on
		 * a GPU or in memory) get another start now. */
		if (f->waiting)
			start_for(p, f, f->waiting);
		else if (!live(f) && !f->starting && !f->stopping)
			pthread_cond_broadcast(&p->cv);
		break;
	}
	pthread_mutex_unlock(&p->lock);
}

/* ---- metrics ---- */

void pool_count(struct pool *p, const char *fn, unsigned status, double total_ms,
		double wait_ms)
{
	struct pool_fn *f;
	size_t k;

	pthread_mutex_lock(&p->lock);
	f = fn_find(p, fn);
	if (f) {
		stats_hist_add(&f->latency, total_ms / 1000);
		stats_hist_add(&f->wait, wait_ms / 1000);
		for (k = 0; k < f->nstatuses && f->statuses[k].status != status; k++)
			;
		if (k == f->nstatuses && k < STATUSES_MAX)
			f->statuses[f->nstatuses++].status = status;
		else if (k == f->nstatuses)
			k = STATUSES_MAX; /* "other" */
		f->statuses[k].n++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* A histogram's series under the family's one HELP and TYPE (those
 * stats_hist_write_prom writes would repeat per function). */
static void write_hist(FILE *out, const char *name, const char *fn, const struct stats_hist *h)
{
	for (size_t k = 0; k <= h->nbounds; k++) {
		if (k < h->nbounds)
			fprintf(out, "%s_bucket{function=\"%s\",le=\"%g\"} %llu\n", name, fn,
				h->bounds[k], (unsigned long long)stats_hist_cumulative(h, k));
		else
			fprintf(out, "%s_bucket{function=\"%s\",le=\"+Inf\"} %llu\n", name, fn,
				(unsigned long long)h->total);
	}
	fprintf(out, "%s_sum{function=\"%s\"} %.9g\n", name, fn, h->sum);
	fprintf(out, "%s_count{function=\"%s\"} %llu\n", name, fn, (unsigned long long)h->total);
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int write_metrics(struct pool *p, FILE *out)
{
	char e[256];

	pthread_mutex_lock(&p->lock);
	family(out, "thaw_routed_requests_total", "counter",
	       "Requests routed to a function's instances (/function/<id>/...), by the status "
	       "answered (other: past the 16 first statuses).");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		if (!metrics_escape_label(f->id, e, sizeof(e)))
			continue;
		for (size_t k = 0; k <= STATUSES_MAX; k++) {
			if (!f->statuses[k].n)
				continue;
			if (k == STATUSES_MAX)
				fprintf(out, "thaw_routed_requests_total{function=\"%s\",status=\"other\"} %llu\n",
					e, (unsigned long long)f->statuses[k].n);
			else
				fprintf(out, "thaw_routed_requests_total{function=\"%s\",status=\"%u\"} %llu\n",
					e, f->statuses[k].status, (unsigned long long)f->statuses[k].n);
		}
	}
	family(out, "thaw_routed_request_seconds", "histogram",
	       "Routed requests, from their arrival to the end of their answer.");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		if (metrics_escape_label(f->id, e, sizeof(e)))
			write_hist(out, "thaw_routed_request_seconds", e, &f->latency);
	}
	family(out, "thaw_routed_wait_seconds", "histogram",
	       "Time routed requests waited for an instance (a free slot).");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		if (metrics_escape_label(f->id, e, sizeof(e)))
			write_hist(out, "thaw_routed_wait_seconds", e, &f->wait);
	}
	family(out, "thaw_routed_queue", "gauge", "Routed requests waiting for an instance now.");
	for (struct pool_fn *f = p->fns; f; f = f->next)
		if (metrics_escape_label(f->id, e, sizeof(e)))
			fprintf(out, "thaw_routed_queue{function=\"%s\"} %u\n", e, f->waiting);
	family(out, "thaw_routed_in_flight", "gauge",
	       "Routed requests that instances are serving now.");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		unsigned n = 0;

		for (struct pool_inst *i = f->insts; i; i = i->next)
			n += i->inflight;
		if (metrics_escape_label(f->id, e, sizeof(e)))
			fprintf(out, "thaw_routed_in_flight{function=\"%s\"} %u\n", e, n);
	}
	family(out, "thaw_routed_instances", "gauge",
	       "Instances taking routed requests (not being stopped).");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		unsigned n = 0;

		for (struct pool_inst *i = f->insts; i; i = i->next)
			n += !i->draining;
		if (metrics_escape_label(f->id, e, sizeof(e)))
			fprintf(out, "thaw_routed_instances{function=\"%s\"} %u\n", e, n);
	}
	family(out, "thaw_routed_starts_total", "counter",
	       "Starts made because routed requests found no free instance, by result (refused: "
	       "nothing was restored, e.g. at max_instances or without room on a GPU).");
	for (struct pool_fn *f = p->fns; f; f = f->next) {
		if (!metrics_escape_label(f->id, e, sizeof(e)))
			continue;
		fprintf(out, "thaw_routed_starts_total{function=\"%s\",result=\"ok\"} %llu\n", e,
			(unsigned long long)f->starts_ok);
		fprintf(out, "thaw_routed_starts_total{function=\"%s\",result=\"refused\"} %llu\n", e,
			(unsigned long long)f->starts_refused);
		fprintf(out, "thaw_routed_starts_total{function=\"%s\",result=\"failed\"} %llu\n", e,
			(unsigned long long)f->starts_failed);
	}
	pthread_mutex_unlock(&p->lock);
	return ferror(out) ? -EIO : 0;
}

int pool_metrics_append(struct pool *p, char **text, size_t *len)
{
	char *buf = NULL, *t;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	int ret;

	if (!f)
		return -ENOMEM;
	ret = write_metrics(p, f);
	if (fclose(f) && !ret)
		ret = -ENOMEM;
	t = ret ? NULL : realloc(*text, *len + n + 1);
	if (!ret && !t)
		ret = -ENOMEM;
	if (!ret) {
		memcpy(t + *len, buf, n + 1);
		*text = t;
		*len += n;
	}
	free(buf);
	return ret;
}

/* ---- life ---- */

struct pool *pool_new(struct server *s, void (*link_free)(void *link))
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->srv = s;
	p->link_free = link_free;
	pthread_mutex_init(&p->lock, NULL);
	cond_init_monotonic(&p->cv);
	return p;
}

void pool_shutdown(struct pool *p, unsigned grace_ms)
{
	struct pool_refusal why;
	uint64_t deadline = now_ns() + (uint64_t)grace_ms * 1000000ull;
	unsigned busy;

	if (!p)
		return;
	refuse(&why, 503, "shutting_down", false, "thawd is stopping");
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	for (struct pool_fn *f = p->fns; f; f = f->next)
		fail_waiters(f, &why);
	/* A start in flight ends by itself: a restore under way finishes, a new
	 * one is refused (thawd is stopping). */
	while (p->starters)
		pthread_cond_wait(&p->cv, &p->lock);
	for (;;) {
		struct timespec ts;

		busy = 0;
		for (struct pool_fn *f = p->fns; f; f = f->next)
			for (struct pool_inst *i = f->insts; i; i = i->next)
				busy += i->inflight;
		if (!busy || now_ns() >= deadline)
			break;
		ts = mono_timespec(deadline);
		pthread_cond_timedwait(&p->cv, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	if (busy)
		pr_info("%u routed request(s) still being served after %u ms: ended", busy,
			grace_ms);
	atomic_store(&p->abort, true);
}

bool pool_stopping(struct pool *p)
{
	return atomic_load(&p->abort);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	while (p->fns) {
		struct pool_fn *f = p->fns;

		p->fns = f->next;
		while (f->insts) {
			struct pool_inst *i = f->insts;

			f->insts = i->next;
			inst_free(p, i);
		}
		fn_free(f);
	}
	free(p->stops);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
