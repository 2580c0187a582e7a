/* SPDX-License-Identifier: Apache-2.0 */
/* lifetimes.c — see lifetimes.h. */
#define LOG_PREFIX "lifetimes: "
#include "server/lifetimes.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/instance.h"
#include "restore/instance_ended.h"
#include "restore/shim.h"
#include "server/exits.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/metrics.h"
#include "server/pool.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a dead first process's wait status may take to come from the
 * keeper (server/exits.h). */
#define EXIT_STATUS_WAIT_MS 1000

struct lifetimes {
	struct server *srv;
	pthread_t thread;
	bool started;
	atomic_bool stop;
	atomic_uint stops_running; /* stop threads not yet done */
};

struct stop_job {
	struct server *srv;
	struct lifetimes *lt;
	char id[64];
	char function[64];
	const char *reason; /* the metric's label */
	struct instance_end end;
	int grace_ms;
	bool begun; /* stop_begin done: the thread finishes it */
};

/* The quick half of a stop of instance id: claimed (-EALREADY: another
 * stop has it), no routed request sent to it any more, its record saying
 * "stopping" and its endpoint closed (instance_stop_begin).  0, or -ENOENT
 * (no record: nothing claimed). */
static int stop_begin(struct server *s, const char *id, const struct instance_end *end)
{
	int ret = insts_claim(s->insts, id);

	if (ret)
		return ret;
	pool_forget(s->pool, id);
	log_clear_error();
	ret = instance_stop_begin(&s->cfg, id, end && end->why[0] ? end->why : "stopped");
	if (ret == -ENOENT || ret == -EINVAL) {
		insts_remove(s->insts, id);
		pool_gone(s->pool, id);
		insts_release(s->insts, id);
		return ret;
	}
	/* Anything else (a record not written, a shim that would not go):
	 * the teardown still ends what is there, and says what it could not. */
	if (ret)
		pr_warn("instance %s: the stop goes on: %s", id,
			log_last_error()[0] ? log_last_error() : strerror(-ret));
	return 0;
}

/* The rest of a stop that stop_begin began: everything torn down, the
 * instance dropped from the table once it is gone, the claim released. */
static int stop_finish(struct server *s, const char *id, int grace_ms,
		       const struct instance_end *end)
{
	int ret;

	log_clear_error();
	ret = instance_end(&s->cfg, id, grace_ms, end);
	/* A stop that failed leaves the instance (or what is left of it)
	 * recorded: it stays tracked, counted against its max_instances and
	 * stopped again later, never forgotten while it may still run. */
	if (!ret || ret == -ENOENT || ret == -EINVAL) {
		insts_remove(s->insts, id);
		pool_gone(s->pool, id);
	}
	insts_release(s->insts, id);
	return ret;
}

int lifetimes_stop_instance(struct server *s, const char *id, int grace_ms,
			    const struct instance_end *end)
{
	int ret = stop_begin(s, id, end);

	return ret ? ret : stop_finish(s, id, grace_ms, end);
}

int lifetimes_stop_now(struct server *s, const char *id, const char *label, const char *why)
{
	struct instance_end end = { 0 };
	int ret;

	snprintf(end.why, sizeof(end.why), "%s", why);
	ret = lifetimes_stop_instance(s, id, 0, &end);
	if (ret == 0)
		metrics_instance_stopped(s->metrics, label);
	return ret;
}

static void *stop_thread(void *arg)
{
	struct stop_job *j = arg;
	int ret = j->begun ? stop_finish(j->srv, j->id, j->grace_ms, &j->end) :
			     lifetimes_stop_instance(j->srv, j->id, j->grace_ms, &j->end);

	if (ret == 0) {
		pr_info("instance %s of %s %s: %s", j->id, j->function,
			j->end.exited ? "exited" : "stopped", j->end.why);
		metrics_instance_stopped(j->srv->metrics, j->reason);
	} else if (ret != -EALREADY && ret != -ENOENT) {
		pr_warn("instance %s of %s (%s): stop failed: %s", j->id, j->function, j->reason,
			log_last_error()[0] ? log_last_error() : strerror(-ret));
	}
	atomic_fetch_sub(&j->lt->stops_running, 1);
	free(j);
	return NULL;
}

/* Run j on a thread of its own; 0, or -errno (j freed, nothing run). */
static int spawn_job(struct lifetimes *lt, struct stop_job *j)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	atomic_fetch_add(&lt->stops_running, 1);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&t, &attr, stop_thread, j);
	if (ret) {
		atomic_fetch_sub(&lt->stops_running, 1);
		free(j);
	}
	pthread_attr_destroy(&attr);
	return -ret;
}

static void spawn_stop(struct lifetimes *lt, const struct inst_view *v, const char *reason,
		       const struct instance_end *end, int grace_ms)
{
	struct stop_job *j = calloc(1, sizeof(*j));

	if (!j)
		return;
	*j = (struct stop_job){ .srv = lt->srv, .lt = lt, .reason = reason, .end = *end,
				.grace_ms = grace_ms };
	snprintf(j->id, sizeof(j->id), "%s", v->ref.id);
	snprintf(j->function, sizeof(j->function), "%s", v->ref.function);
	spawn_job(lt, j);
}

int lifetimes_stop_background(struct server *s, const char *id, int grace_ms,
			      const struct instance_end *end, const char *label)
{
	struct lifetimes *lt = s->lifetimes;
	struct stop_job *j = lt ? calloc(1, sizeof(*j)) : NULL;
	int ret;

	if (!j) {
		ret = lifetimes_stop_instance(s, id, grace_ms, end);
		if (ret == 0)
			metrics_instance_stopped(s->metrics, label);
		return ret;
	}
	ret = stop_begin(s, id, end);
	if (ret) {
		free(j);
		return ret;
	}
	*j = (struct stop_job){ .srv = s, .lt = lt, .reason = label, .end = *end,
				.grace_ms = grace_ms, .begun = true };
	snprintf(j->id, sizeof(j->id), "%s", id);
	if (insts_function(s->insts, id, j->function))
		snprintf(j->function, sizeof(j->function), "?");
	/* Without a thread the stop is finished here: late, never lost. */
	if (spawn_job(lt, j)) {
		ret = stop_finish(s, id, grace_ms, end);
		if (ret == 0)
			metrics_instance_stopped(s->metrics, label);
	}
	return ret;
}

/* Why instance v is due to stop now (the metric's label, with how it ended
 * in *end), or NULL. */
static const char *due(const struct server *s, const struct inst_view *v, uint64_t now,
		       struct instance_end *end)
{
	const struct inst_limits *l = &v->limits;
	uint64_t last = 0;
	unsigned open_conns = 0;
	int routed;

	memset(end, 0, sizeof(*end));
	if (v->pid > 0 && !proc_alive(v->pid, v->pid_start)) {
		end->exited = true;
		end->have_status = exits_lookup(v->pid, v->pid_start, &end->wait_status);
		/* Seen dead (a zombie) before the keeper reaped it and said so:
		 * its word is a moment away. */
		for (int i = 0; !end->have_status && !v->adopted && i < EXIT_STATUS_WAIT_MS / 10; i++) {
			usleep(10 * 1000);
			end->have_status = exits_lookup(v->pid, v->pid_start, &end->wait_status);
		}
		if (!end->have_status)
			snprintf(end->why, sizeof(end->why), "status unknown: %s",
				 v->adopted ? "its process was started by an earlier thawd" :
					      "its process was not reaped by thawd's keeper");
		return "exited";
	}
	if (!l->started_ms)
		return NULL;
	if (l->lifetime_s > 0 && now >= l->started_ms + (uint64_t)(l->lifetime_s * 1000)) {
		snprintf(end->why, sizeof(end->why), "lifetime %g s", l->lifetime_s);
		return "lifetime";
	}
	/* An instance of routed requests is idle from the end of the last one
	 * (server/pool.h), or done with once its function has a new
	 * snapshot; any other is idle from its endpoint's last use. */
	routed = pool_idle(s->pool, v->ref.id, l->idle_s, now);
	if (routed == 2) {
		snprintf(end->why, sizeof(end->why), "idle, its function's snapshot replaced");
		return "idle";
	}
	/* Never idle from before its start answered: the endpoint is made
	 * earlier (a standby's long before its take, a start's while CRIU
	 * and the driver restore), and nobody could use it until then. */
	if (routed == 1 ||
	    (routed == -ENOENT && l->idle_s > 0 &&
	     instance_activity(&s->cfg, v->ref.id, &last, &open_conns) == 0 && !open_conns &&
	     now >= (last > l->started_ms ? last : l->started_ms) + (uint64_t)(l->idle_s * 1000))) {
		snprintf(end->why, sizeof(end->why), "idle %g s", l->idle_s);
		return "idle";
	}
	return NULL;
}

static void *watch(void *arg)
{
	struct lifetimes *lt = arg;
	struct server *s = lt->srv;

	uint64_t expired_ms = 0;

	while (!atomic_load(&lt->stop) && !atomic_load(&s->stopping)) {
		struct inst_view *v = NULL;
		struct instance_end end;
		uint64_t now = realtime_ms();
		size_t n = 0;

		if (insts_list(s->insts, &v, &n) == 0) {
			for (size_t i = 0; i < n; i++) {
				const char *why = due(s, &v[i], now, &end);

				if (why)
					spawn_stop(lt, &v[i], why, &end,
						   end.exited ? 0 : (int)(v[i].limits.grace_s * 1000));
			}
		}
		free(v);
		exits_drain();
		if (now >= expired_ms + LIFETIMES_EXPIRE_MS) {
			unsigned gone = instance_ended_expire(&s->cfg, s->opts.keep_ended_s * 1000);

			if (gone)
				pr_debug("%u ended instance record(s) expired", gone);
			expired_ms = now;
		}
		usleep(LIFETIMES_TICK_MS * 1000);
	}
	return NULL;
}

int lifetimes_start(struct server *s)
{
	struct lifetimes *lt = calloc(1, sizeof(*lt));
	int ret;

	if (!lt)
		return -ENOMEM;
	lt->srv = s;
	ret = pthread_create(&lt->thread, NULL, watch, lt);
	if (ret) {
		pr_err("cannot start the lifetimes thread: %s", strerror(ret));
		free(lt);
		return -ret;
	}
	lt->started = true;
	s->lifetimes = lt;
	return 0;
}

void lifetimes_finish(struct server *s)
{
	struct lifetimes *lt = s->lifetimes;

	if (!lt)
		return;
	atomic_store(&lt->stop, true);
	if (lt->started)
		pthread_join(lt->thread, NULL);
	while (atomic_load(&lt->stops_running))
		usleep(20 * 1000);
	free(lt);
	s->lifetimes = NULL;
}
