/* SPDX-License-Identifier: Apache-2.0 */
/* api_metrics.c — GET /healthz and GET /metrics (server/api.h): the
 * counters of server/metrics.h with the gauges read at each scrape (the RAM
 * tier, the store, at most STAT_MAX_AGE_NS old, instances, standbys, GPUs,
 * routed pools). */
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

#define STAT_MAX_AGE_NS (5ull * 1000 * 1000 * 1000)

int api_get_healthz(struct req *q)
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

int api_get_metrics(struct req *q)
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
