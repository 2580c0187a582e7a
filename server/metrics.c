/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c — see metrics.h. */
#define LOG_PREFIX "metrics: "
#include "server/metrics.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A bound on label series, so that a client cannot grow thawd's memory
 * without end through ids; counts past it are dropped (and said once). */
#define MAX_SERIES 4096

enum family {
	FAM_STARTS,
	FAM_START_FAILURES,
	FAM_REFUSED,
	FAM_SNAPSHOTS,
	FAM_STANDBY,
	FAM_STOPPED,
	FAM_BOOTS,
	FAM_TIER,
	FAM_COUNT
};

static const struct {
	const char *name, *help;
} families[FAM_COUNT] = {
	[FAM_STARTS] = { "thaw_starts_total", "Start requests for a registered function." },
	[FAM_START_FAILURES] = { "thaw_start_failures_total",
				 "Start requests that failed, by error code." },
	[FAM_REFUSED] = { "thaw_starts_refused_total",
			  "Starts refused before anything was restored (429 or 503), by reason: "
			  "too_many_instances, no_memory, no_gpu_memory, no_capacity, "
			  "shutting_down, unavailable." },
	[FAM_SNAPSHOTS] = { "thaw_snapshots_total", "Snapshots finished, by result." },
	[FAM_STANDBY] = { "thaw_standby_starts_total",
			  "Starts of functions that keep standbys: hit (a standby taken) or "
			  "miss (none left: a full restore)." },
	[FAM_STOPPED] = { "thaw_instances_stopped_total",
			  "Instances that ended, by reason: exited (its process died), idle, "
			  "lifetime, delete (DELETE /instances/<id>), function_deleted." },
	[FAM_BOOTS] = { "thaw_start_boots_total",
			"Starts answered by booting the function cold instead of restoring its "
			"snapshot, by reason: marked (its snapshot marked unrestorable before), "
			"host (this host differs from the snapshot's), damaged, restore, ready." },
	[FAM_TIER] = { "thaw_start_tier_total",
		       "Successful restores, by where their snapshot came from: ram (the RAM "
		       "tier had it), disk (materialised from the store), remote (fetched from "
		       "the remote tier first)." },
};

static const char *const phase_names[PHASE_COUNT] = {
	"materialize", "criu_restore", "gpu_restore", "ready", "total",
};

const double metrics_phase_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
					0.5,   1,      2.5,   5,    10,    20,   30,  60 };
const size_t metrics_phase_nbounds = ARRAY_SIZE(metrics_phase_bounds);

struct series {
	enum family fam;
	char *labels; /* rendered: function="a",code="b" */
	uint64_t value;
};

struct metrics {
	pthread_mutex_t lock;
	struct series *s;
	size_t n, cap;
	bool warned_full;
	struct stats_hist phase[PHASE_COUNT];
};

struct metrics *metrics_new(void)
{
	struct metrics *m = calloc(1, sizeof(*m));
	int i;

	if (!m)
		return NULL;
	pthread_mutex_init(&m->lock, NULL);
	for (i = 0; i < PHASE_COUNT; i++) {
		if (stats_hist_init(&m->phase[i], metrics_phase_bounds, metrics_phase_nbounds))
			goto err;
	}
	return m;
err:
	while (i-- > 0)
		stats_hist_release(&m->phase[i]);
	pthread_mutex_destroy(&m->lock);
	free(m);
	return NULL;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		free(m->s[i].labels);
	free(m->s);
	for (int i = 0; i < PHASE_COUNT; i++)
		stats_hist_release(&m->phase[i]);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

bool metrics_escape_label(const char *in, char *out, size_t outlen)
{
	size_t o = 0;

	if (!in)
		in = "";
	for (; *in; in++) {
		const char *rep = NULL;
		char one[2] = { *in, '\0' };

		if (*in == '\\')
			rep = "\\\\";
		else if (*in == '"')
			rep = "\\\"";
		else if (*in == '\n')
			rep = "\\n";
		else
			rep = one;
		size_t l = strlen(rep);
		if (o + l >= outlen)
			return false;
		memcpy(out + o, rep, l);
		o += l;
	}
	if (o >= outlen)
		return false;
	out[o] = '\0';
	return true;
}

/* Add delta to the series fam{labels}, creating it.  Called with the lock held. */
static int bump(struct metrics *m, enum family fam, const char *labels, uint64_t delta)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->s[i].fam == fam && !strcmp(m->s[i].labels, labels)) {
			m->s[i].value += delta;
			return 0;
		}
	}
	if (m->n == MAX_SERIES) {
		if (!m->warned_full)
			pr_warn("more than %d label series: further ones are not counted",
				MAX_SERIES);
		m->warned_full = true;
		return -ENOSPC;
	}
	if (ARRAY_GROW(m->s, m->cap, m->n + 1, 16))
		return -ENOMEM;
	char *l = strdup(labels);
	if (!l)
		return -ENOMEM;
	m->s[m->n++] = (struct series){ .fam = fam, .labels = l, .value = delta };
	return 0;
}

static int count(struct metrics *m, enum family fam, const char *k1, const char *v1,
		 const char *k2, const char *v2)
{
	char e1[256], e2[256], labels[600];
	int ret;

	if (!metrics_escape_label(v1, e1, sizeof(e1)) ||
	    (k2 && !metrics_escape_label(v2, e2, sizeof(e2))))
		return -EINVAL;
	if (k2)
		snprintf(labels, sizeof(labels), "%s=\"%s\",%s=\"%s\"", k1, e1, k2, e2);
	else
		snprintf(labels, sizeof(labels), "%s=\"%s\"", k1, e1);
	pthread_mutex_lock(&m->lock);
	ret = bump(m, fam, labels, 1);
	pthread_mutex_unlock(&m->lock);
	return ret;
}

int metrics_start(struct metrics *m, const char *function)
{
	return count(m, FAM_STARTS, "function", function, NULL, NULL);
}

int metrics_start_failed(struct metrics *m, const char *function, const char *code)
{
	return count(m, FAM_START_FAILURES, "function", function, "code", code);
}

int metrics_standby(struct metrics *m, const char *function, bool hit)
{
	return count(m, FAM_STANDBY, "function", function, "result", hit ? "hit" : "miss");
}

int metrics_start_tier(struct metrics *m, const char *function, const char *tier)
{
	return count(m, FAM_TIER, "function", function, "tier", tier);
}

int metrics_instance_stopped(struct metrics *m, const char *reason)
{
	return count(m, FAM_STOPPED, "reason", reason, NULL, NULL);
}

int metrics_start_booted(struct metrics *m, const char *function, const char *reason)
{
	return count(m, FAM_BOOTS, "function", function, "reason", reason);
}

int metrics_start_refused(struct metrics *m, const char *reason)
{
	return count(m, FAM_REFUSED, "reason", reason, NULL, NULL);
}

int metrics_snapshot(struct metrics *m, const char *result)
{
	return count(m, FAM_SNAPSHOTS, "result", result, NULL, NULL);
}

void metrics_restore_phases(struct metrics *m, const double ms[PHASE_COUNT])
{
	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < PHASE_COUNT; i++)
		stats_hist_add(&m->phase[i], ms[i] / 1000.0);
	pthread_mutex_unlock(&m->lock);
}

static void write_hist(FILE *f, const char *name, const char *labels, const struct stats_hist *h)
{
	uint64_t c = 0;

	for (size_t i = 0; i <= h->nbounds; i++) {
		c += h->counts[i];
		if (i < h->nbounds)
			fprintf(f, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, h->bounds[i],
				(unsigned long long)c);
		else
			fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
				(unsigned long long)c);
	}
	fprintf(f, "%s_sum{%s} %.9g\n", name, labels, h->sum);
	fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->total);
}

static void write_gauge(FILE *f, const char *name, const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
		(unsigned long long)v);
}

int metrics_write(struct metrics *m, FILE *f, const struct metrics_gauges *g)
{
	pthread_mutex_lock(&m->lock);
	for (int fam = 0; fam < FAM_COUNT; fam++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", families[fam].name,
			families[fam].help, families[fam].name);
		for (size_t i = 0; i < m->n; i++) {
			if (m->s[i].fam == (enum family)fam)
				fprintf(f, "%s{%s} %llu\n", families[fam].name, m->s[i].labels,
					(unsigned long long)m->s[i].value);
		}
	}
	fprintf(f, "# HELP thaw_restore_phase_seconds Time of each restore phase of the "
		   "starts that succeeded.\n# TYPE thaw_restore_phase_seconds histogram\n");
	for (int i = 0; i < PHASE_COUNT; i++) {
		char labels[64];

		snprintf(labels, sizeof(labels), "phase=\"%s\"", phase_names[i]);
		write_hist(f, "thaw_restore_phase_seconds", labels, &m->phase[i]);
	}
	pthread_mutex_unlock(&m->lock);

	if (g && g->have_tier) {
		write_gauge(f, "thaw_ram_tier_bytes", "Bytes of snapshots in the RAM tier.",
			    g->ram_tier_bytes);
		write_gauge(f, "thaw_ram_tier_budget_bytes", "Byte budget of the RAM tier.",
			    g->ram_tier_budget_bytes);
		fprintf(f, "# HELP thaw_ram_tier_damaged_total RAM tier entries found damaged "
			   "(unlike their checksums) and dropped, by who found them.\n"
			   "# TYPE thaw_ram_tier_damaged_total counter\n"
			   "thaw_ram_tier_damaged_total{found_by=\"fill\"} %llu\n"
			   "thaw_ram_tier_damaged_total{found_by=\"scrub\"} %llu\n",
			(unsigned long long)g->tier_damaged_fill,
			(unsigned long long)g->tier_damaged_scrub);
		fprintf(f, "# HELP thaw_ram_tier_rematerialized_total RAM tier entries "
			   "materialised again after being dropped as damaged.\n"
			   "# TYPE thaw_ram_tier_rematerialized_total counter\n"
			   "thaw_ram_tier_rematerialized_total %llu\n",
			(unsigned long long)g->tier_rematerialized);
		fprintf(f, "# HELP thaw_ram_tier_scrubbed_bytes_total Bytes of the RAM tier the "
			   "scrub read and checked.\n"
			   "# TYPE thaw_ram_tier_scrubbed_bytes_total counter\n"
			   "thaw_ram_tier_scrubbed_bytes_total %llu\n",
			(unsigned long long)g->tier_scrubbed_bytes);
	}
	if (g && g->have_store) {
		fprintf(f, "# HELP thaw_store_bytes Bytes in the chunk store: logical (all "
			   "snapshots' files), unique (distinct chunks, uncompressed), stored "
			   "(on disk).\n# TYPE thaw_store_bytes gauge\n");
		fprintf(f, "thaw_store_bytes{kind=\"logical\"} %llu\n",
			(unsigned long long)g->store_logical);
		fprintf(f, "thaw_store_bytes{kind=\"unique\"} %llu\n",
			(unsigned long long)g->store_unique);
		fprintf(f, "thaw_store_bytes{kind=\"stored\"} %llu\n",
			(unsigned long long)g->store_stored);
	}
	if (g)
		write_gauge(f, "thaw_instances_running", "Instances this thawd started that run.",
			    g->instances_running);
	if (g && g->standby_pools) {
		const char *fn;
		json_t *v;

		fprintf(f, "# HELP thaw_standby_instances Standby instances waiting, by "
			   "function.\n# TYPE thaw_standby_instances gauge\n");
		json_object_foreach(g->standby_pools, fn, v) {
			char e[256];

			if (metrics_escape_label(fn, e, sizeof(e)))
				fprintf(f, "thaw_standby_instances{function=\"%s\"} %lld\n", e,
					(long long)json_integer_value(v));
		}
	}
	if (g && json_array_size(g->gpus)) {
		static const char *const fams[][2] = {
			{ "thaw_gpu_free_bytes", "free_bytes" },
			{ "thaw_gpu_instances", "instances" },
		};
		static const char *const help[] = {
			"Free memory of each GPU (NVML; 0 where unknown).",
			"Instances whose CUDA state is on each GPU.",
		};
		size_t i;
		json_t *v;

		for (size_t k = 0; k < ARRAY_SIZE(fams); k++) {
			fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", fams[k][0], help[k],
				fams[k][0]);
			json_array_foreach(g->gpus, i, v) {
				char e[128];

				if (metrics_escape_label(json_string_value(json_object_get(v, "uuid")) ?: "",
							 e, sizeof(e)))
					fprintf(f, "%s{gpu=\"%lld\",uuid=\"%s\"} %lld\n", fams[k][0],
						(long long)json_integer_value(json_object_get(v, "index")),
						e,
						(long long)json_integer_value(json_object_get(v, fams[k][1])));
			}
		}
	}
	return ferror(f) ? -EIO : 0;
}

int metrics_render(struct metrics *m, const struct metrics_gauges *g, char **out, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	int ret;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	ret = metrics_write(m, f, g);
	if (fclose(f) && !ret)
		ret = -ENOMEM;
	if (ret) {
		free(buf);
		return ret;
	}
	*out = buf;
	if (len)
		*len = n;
	return 0;
}
