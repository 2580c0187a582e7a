/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench: the scale-to-zero scenario (--idle-stop S).  The starts keep
 * their instances (no DELETE); once the last answer is in, every instance is
 * watched until thawd stops it for being idle.  Each must end "stopped: idle",
 * its stop requested (the ended record's stop.requested_ms: when thawd acted
 * on the idle timer and the instance stopped serving) between S and
 * S + IDLE_ON_TIME_S seconds after its last use (the inference answer), and
 * none of the function's instances may be left running.  The teardown after
 * the request (a graceful exit, runc's delete) is the machine's, not the
 * timer's: on a loaded machine it took seconds, and judging by ended_ms made
 * the scenario fail for what it does not measure.  A record from a thawd
 * without stop.requested_ms is judged by ended_ms. */
#include "internal.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IDLE_ON_TIME_S 2.0 /* thawd's tick, a slow machine */
#define IDLE_POLL_MS 100
/* The shim sees the last bytes a little before the client does. */
#define IDLE_EARLY_SLACK_S 0.05

int idle_watch(struct bench *b, const char *iid)
{
	struct idle_inst *w;

	if (b->nidle == b->capidle) {
		size_t cap = b->capidle ? b->capidle * 2 : 64;

		w = realloc(b->idle, cap * sizeof(*w));
		if (!w)
			return -ENOMEM;
		b->idle = w;
		b->capidle = cap;
	}
	w = &b->idle[b->nidle++];
	memset(w, 0, sizeof(*w));
	snprintf(w->iid, sizeof(w->iid), "%s", iid);
	w->last_use_ms = realtime_ms();
	return 0;
}

/* Has instance w ended?  1 (when its stop was asked: *stop_ms; why:
 * reason), 0 not yet, <0 error. */
static int ended(const struct bench *b, const struct idle_inst *w, uint64_t *stop_ms,
		 char *reason, size_t rlen)
{
	char path[256], *body = NULL;
	long status = 0;
	json_t *j;
	const char *st;
	int ret;

	snprintf(path, sizeof(path), "/instances/%s", w->iid);
	ret = bench_get(b, path, &status, &body, 5);
	if (ret < 0 || status != 200) {
		free(body);
		return ret < 0 ? ret : -EIO;
	}
	j = json_loads(body, 0, NULL);
	free(body);
	st = json_string_value(json_object_get(j, "state"));
	/* An ended record (thawd --keep-ended) has ended_ms; a live record
	 * whose process is gone while it is being torn down says "exited"
	 * without one. */
	ret = st && (!strcmp(st, "stopped") || !strcmp(st, "exited")) &&
	      json_is_integer(json_object_get(j, "ended_ms"));
	if (ret) {
		json_t *req = json_object_get(json_object_get(j, "stop"), "requested_ms");

		*stop_ms = (uint64_t)json_integer_value(json_is_integer(req) ? req :
							 json_object_get(j, "ended_ms"));
		snprintf(reason, rlen, "%s", json_string_value(json_object_get(j, "reason")) ?: "");
	}
	json_decref(j);
	return ret;
}

/* Instances of the function GET /instances still lists (running ones). */
static long left_running(const struct bench *b)
{
	char *body = NULL;
	long status = 0, n = 0;
	json_t *j, *one;
	size_t i;

	if (bench_get(b, "/instances", &status, &body, 5) < 0 || status != 200) {
		free(body);
		return -1;
	}
	j = json_loads(body, 0, NULL);
	free(body);
	json_array_foreach(json_object_get(j, "instances"), i, one) {
		const char *fn = json_string_value(json_object_get(one, "function"));

		n += fn && !strcmp(fn, b->function);
	}
	json_decref(j);
	return n;
}

int idle_check(struct bench *b)
{
	uint64_t deadline = realtime_ms() + (uint64_t)((b->idle_stop_s + 10) * 1000);
	size_t pending = b->nidle;

	printf("idle: watching %zu instance(s) until thawd stops them (idle_s %g)\n", b->nidle,
	       b->idle_stop_s);
	fflush(stdout);
	while (pending && realtime_ms() < deadline && !stop_requested) {
		for (size_t i = 0; i < b->nidle; i++) {
			struct idle_inst *w = &b->idle[i];
			uint64_t at = 0;
			char reason[160];
			double late_s;

			if (w->done)
				continue;
			if (ended(b, w, &at, reason, sizeof(reason)) <= 0)
				continue;
			w->done = true;
			pending--;
			late_s = ((double)at - (double)w->last_use_ms) / 1000.0 - b->idle_stop_s;
			if (strncmp(reason, "stopped: idle", 13)) {
				kinds_add(&b->idle_failures, "ended_otherwise");
				pr_warn("instance %s ended \"%s\", not idle", w->iid, reason);
			} else if (late_s < -IDLE_EARLY_SLACK_S) {
				kinds_add(&b->idle_failures, "early");
			} else if (late_s > IDLE_ON_TIME_S) {
				kinds_add(&b->idle_failures, "late");
			} else {
				b->idle_on_time++;
			}
			stats_add(&b->idle_lateness, late_s * 1000);
		}
		if (pending)
			usleep(IDLE_POLL_MS * 1000);
	}
	for (size_t i = 0; i < b->nidle; i++)
		if (!b->idle[i].done)
			kinds_add(&b->idle_failures, "not_stopped");
	b->idle_left = left_running(b);
	if (b->idle_left != 0)
		kinds_add(&b->idle_failures, b->idle_left < 0 ? "cannot_list" : "left_running");
	return 0;
}

void idle_report(const struct bench *b, FILE *f)
{
	if (!(b->idle_stop_s > 0))
		return;
	fprintf(f, "idle stops: %zu watched, %llu on time (%g-%g s after last use), %zu left "
		"running\n", b->nidle, (unsigned long long)b->idle_on_time, b->idle_stop_s,
		b->idle_stop_s + IDLE_ON_TIME_S, b->idle_left > 0 ? (size_t)b->idle_left : 0);
}
