/* SPDX-License-Identifier: Apache-2.0 */
/* api_metrics.c — GET /healthz and GET /metrics (server/api.h): the
 * counters of server/metrics.h with the gauges: read at each scrape (the RAM
 * tier, instances, standbys, routed pools, the GPUs' instances) or, where
 * reading is slow (the store's walk, the GPUs' free memory), by a thread of
 * their own while someone scrapes, at most STORE_MAX_AGE_NS and
 * GPUS_MAX_AGE_NS old (docs/API.md says how stale). */
#define LOG_PREFIX "thawd: "
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/instance.h"
#include "restore/tier.h"
#include "server/api.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/metrics.h"
#include "server/pool.h"
#include "server/standby.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* How old a slow gauge may get while someone scrapes: the store's figures
 * (a walk of every manifest, pack and chunk: 0.3 s for 1.5 GiB of chunks on
 * a small VM, most of a second on a GPU host with a few large snapshots)
 * and the GPUs' free memory (NVML, a millisecond or so on the H200, but a
 * driver may hang).  A thread reads them; a scrape only copies them. */
#define STORE_MAX_AGE_NS (10ull * 1000 * 1000 * 1000)
#define GPUS_MAX_AGE_NS (2ull * 1000 * 1000 * 1000)
/* Nobody scraped for this long: nothing is read until someone does. */
#define SCRAPED_RECENTLY_NS (60ull * 1000 * 1000 * 1000)
#define GAUGES_TICK_MS 1000

/* Liveness: up while thawd serves, draining included (a balancer that
 * restarted a draining host would cut the requests it is finishing). */
int api_get_healthz(struct req *q)
{
	json_t *j = json_pack("{s:s}", "status", "ok");

	if (j && server_refusing(q->srv))
		json_object_set_new(j, "draining", json_true());
	return reply_json(q, 200, j);
}

/* Readiness: whether a start sent here now would be taken.  A balancer
 * takes a host out on a 503 and back on a 200; the reason is for people,
 * the status for the balancer. */
int api_get_readyz(struct req *q)
{
	struct server *s = q->srv;
	unsigned running = atomic_load(&s->starts_running);
	const char *why = NULL;
	json_t *j;

	if (server_refusing(s))
		why = "draining";
	else if (!s->tier)
		why = "unavailable"; /* every start would answer 503 */
	else if (running >= s->opts.max_starts)
		why = "full"; /* --max-starts starts running */
	j = json_pack("{s:s, s:i, s:i, s:i}", "status", why ? why : "ready", "starts_running",
		      (int)running, "max_starts", (int)s->opts.max_starts, "routed_open",
		      (int)atomic_load(&s->routed_open));
	if (!why)
		return reply_json(q, 200, j);
	return reply_json_hdr(q, 503, j, "Retry-After", "1");
}

/* POST /drain: what SIGTERM does, asked over HTTP (thawd_main's hook sends
 * thawd the signal, so that both take one path).  Answered at once; the
 * hook runs once the answer is sent (http.c, on_completed): with nothing
 * in flight the shutdown follows within milliseconds and closed the
 * connection before its 202 went out.  thawd exits once the drain is
 * over. */
int api_post_drain(struct req *q)
{
	struct server *s = q->srv;

	if (!atomic_exchange(&s->draining, true)) {
		pr_info("drain asked by %s: no new work; exiting once routed requests are over",
			q->path);
		q->drain_after = true;
	}
	return reply_json(q, 202, json_pack("{s:s}", "status", "draining"));
}

/* Each GPU's index, uuid and free memory (NULL on a host without). */
static json_t *read_gpus(void)
{
	struct cuda_device *devs = NULL;
	json_t *out = NULL;
	size_t n = 0;

	if (!cuda_available() || cuda_devices(&devs, &n) || !n)
		goto out;
	out = json_array();
	for (size_t d = 0; out && d < n; d++)
		json_array_append_new(out, json_pack("{s:i, s:s, s:I}", "index", devs[d].ordinal,
						     "uuid", devs[d].uuid, "free_bytes",
						     (json_int_t)devs[d].free_bytes));
out:
	free(devs);
	return out;
}

static void *gauges_thread(void *arg)
{
	struct server *s = arg;

	pthread_mutex_lock(&s->stat_lock);
	while (!s->stat_stop) {
		uint64_t now = now_ns();
		bool scraped = now - s->scraped_ns < SCRAPED_RECENTLY_NS;
		bool gpus = scraped && (!s->gpus_ns || now - s->gpus_ns >= GPUS_MAX_AGE_NS);
		bool store = scraped && (!s->stat_ns || now - s->stat_ns >= STORE_MAX_AGE_NS);
		struct timespec until;

		if (gpus || store) {
			struct store_stats st;
			json_t *g = NULL;
			bool ok = false;

			pthread_mutex_unlock(&s->stat_lock);
			if (gpus)
				g = read_gpus();
			if (store)
				ok = store_stat(s->store, &st) == 0;
			pthread_mutex_lock(&s->stat_lock);
			if (gpus) {
				json_decref(s->gpus);
				s->gpus = g;
				s->gpus_ns = now_ns();
			}
			if (store) {
				s->stat_ok = ok;
				if (ok)
					s->stat = st;
				s->stat_ns = now_ns();
			}
			continue;
		}
		until = mono_after_ms(GAUGES_TICK_MS);
		pthread_cond_timedwait(&s->stat_cv, &s->stat_lock, &until);
	}
	pthread_mutex_unlock(&s->stat_lock);
	return NULL;
}

int api_metrics_start(struct server *s)
{
	int ret;

	/* Read once at the start, so that the first scrape has figures. */
	s->scraped_ns = now_ns();
	ret = pthread_create(&s->stat_thread, NULL, gauges_thread, s);
	if (ret) {
		pr_err("cannot start the metrics thread: %s", strerror(ret));
		return -ret;
	}
	s->stat_started = true;
	return 0;
}

void api_metrics_finish(struct server *s)
{
	if (!s->stat_started)
		return;
	pthread_mutex_lock(&s->stat_lock);
	s->stat_stop = true;
	pthread_cond_signal(&s->stat_cv);
	pthread_mutex_unlock(&s->stat_lock);
	pthread_join(s->stat_thread, NULL);
	s->stat_started = false;
	json_decref(s->gpus);
	s->gpus = NULL;
}

/* The GPUs for /metrics: each one's free memory (as last read) and the
 * instances (running ones, whose record names their GPUs) on it; NULL on a
 * host without, or before the first read.  Takes gpus (a copy). */
static json_t *gpu_gauges(struct server *s, json_t *out)
{
	json_t *list = NULL, *rec, *g, *v;
	size_t i, k, d;

	json_array_foreach(out, d, v) {
		json_object_set_new(v, "instances", json_integer(0));
	}
	if (!out || instance_list(&s->cfg, &list))
		goto out;
	json_array_foreach(list, i, rec) {
		const char *st = json_string_value(json_object_get(rec, "state"));

		if (!st || (strcmp(st, "running") && strcmp(st, "starting")))
			continue;
		json_array_foreach(json_object_get(rec, "gpus"), k, g) {
			const char *uuid = json_string_value(json_object_get(g, "uuid"));

			json_array_foreach(out, d, v) {
				if (uuid && !strcmp(uuid, json_string_value(json_object_get(v, "uuid"))))
					json_object_set_new(v, "instances",
							    json_integer(json_integer_value(json_object_get(v, "instances")) + 1));
			}
		}
	}
out:
	json_decref(list);
	return out;
}

int api_get_metrics(struct req *q)
{
	struct server *s = q->srv;
	struct metrics_gauges g = { 0 };
	json_t *pools, *gpus;
	size_t alive = 0, len = 0;
	uint64_t now;
	char *text = NULL;
	int ret;

	if (s->tier) {
		struct tier_stats ts;

		g.have_tier = true;
		g.ram_tier_bytes = tier_used_bytes(s->tier);
		g.ram_tier_budget_bytes = tier_budget_bytes(s->tier);
		tier_get_stats(s->tier, &ts);
		g.tier_damaged_fill = ts.damaged[TIER_FOUND_FILL];
		g.tier_damaged_scrub = ts.damaged[TIER_FOUND_SCRUB];
		g.tier_rematerialized = ts.rematerialized;
		g.tier_scrubbed_bytes = ts.scrubbed_bytes;
	}
	pthread_mutex_lock(&s->stat_lock);
	if (s->stat_ok) {
		g.have_store = true;
		g.store_logical = s->stat.logical_bytes;
		g.store_unique = s->stat.unique_bytes;
		g.store_stored = s->stat.stored_bytes;
	}
	gpus = json_deep_copy(s->gpus);
	/* Figures going stale while nobody scraped: read anew now, for the
	 * next scrape (this one answers with what there is). */
	now = now_ns();
	if (now - s->gpus_ns >= GPUS_MAX_AGE_NS || now - s->stat_ns >= STORE_MAX_AGE_NS)
		pthread_cond_signal(&s->stat_cv);
	s->scraped_ns = now;
	pthread_mutex_unlock(&s->stat_lock);
	insts_count(s->insts, &alive);
	g.instances_running = alive;
	pools = s->standby ? standby_pool_sizes(s->standby) : NULL;
	g.standby_pools = pools;
	g.gpus = gpu_gauges(s, gpus);
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
