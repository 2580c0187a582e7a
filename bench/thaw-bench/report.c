/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench: the report, a table on stdout, JSON and an SVG. */
#include "internal.h"

#include "common/log.h"
#include "common/plot.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reporting --------------------------------------------------------- */

static void print_row(const char *name, struct stats *s)
{
	struct stats_summary m;

	if (stats_summarize(s, &m) < 0) {
		printf("%-28s %6d %9s %9s %9s %9s %9s\n", name, 0, "-", "-", "-", "-", "-");
		return;
	}
	printf("%-28s %6zu %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, m.n, m.mean, m.p50, m.p90,
	       m.p99, m.max);
}

static void print_kinds(const char *label, const struct kinds *k)
{
	printf("%s", label);
	if (!k->n)
		printf(" none");
	for (size_t i = 0; i < k->n; i++)
		printf("%s %s %llu", i ? "," : "", k->name[i], (unsigned long long)k->count[i]);
	printf("\n");
}

static void print_mode(const struct bench *b, FILE *f)
{
	if (b->burst > 0)
		fprintf(f, "burst %ld x %ld round%s", b->burst, b->repeat, b->repeat > 1 ? "s" : "");
	else
		fprintf(f, "rate %g/s for %g s (%s arrivals, seed %llu)", b->rate, b->duration_s,
			b->poisson ? "poisson" : "fixed", (unsigned long long)b->seed);
	if (b->cold_tier)
		fprintf(f, ", cold RAM tier");
}

static void print_baseline(struct baseline *bl)
{
	if (!bl->requested)
		return;
	if (bl->available)
		print_row(bl->name, &bl->lat);
	else
		printf("%-28s %s\n", bl->name, bl->why);
	if (bl->available && bl->failures.n)
		print_kinds("  failed runs:", &bl->failures);
}

void print_table(struct bench *b)
{
	printf("thaw-bench: function %s at %s, ", b->function, b->url);
	print_mode(b, stdout);
	printf(", infer %s %s\n\n", b->infer_method, b->infer_path);
	printf("%-28s %6s %9s %9s %9s %9s %9s\n", "latency (ms)", "n", "mean", "p50", "p90",
	       "p99", "max");
	print_row("thaw start -> first answer", &b->latency);
	print_row("  start answered (201)", &b->answer);
	print_baseline(&b->cold);
	print_baseline(&b->plain);
	printf("\nrestore phases, mean of thawd's timings_ms over %llu good starts (ms):",
	       (unsigned long long)b->ok);
	for (int i = 0; i < NPHASES; i++) {
		double m;

		if (stats_mean(&b->phase[i], &m) == 0)
			printf(" %s %.1f", phase_names[i], m);
		else
			printf(" %s -", phase_names[i]);
	}
	printf("\n");
	print_kinds("tier:", &b->tiers);
	print_kinds("restored:", &b->modes);
	printf("starts: %llu attempted, %llu ok, %llu failed (%.1f s wall, max send lag %.1f ms)\n",
	       (unsigned long long)b->attempts, (unsigned long long)b->ok,
	       (unsigned long long)(b->attempts - b->ok), b->wall_s, b->max_send_lag_ms);
	print_kinds("failures:", &b->failures);
	print_kinds("instance deletes failed:", &b->delete_failures);
	if (b->idle_stop_s > 0) {
		idle_report(b, stdout);
		print_row("  stopped after last use+idle", &b->idle_lateness);
		print_kinds("idle-stop failures:", &b->idle_failures);
	}
}

static json_t *summary_json(struct stats *s)
{
	struct stats_summary m;

	if (stats_summarize(s, &m) < 0)
		return json_pack("{s:i}", "n", 0);
	return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)m.n, "mean", m.mean,
			 "min", m.min, "p50", m.p50, "p90", m.p90, "p99", m.p99, "max", m.max);
}

static json_t *kinds_json(const struct kinds *k)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < k->n; i++)
		json_object_set_new(o, k->name[i], json_integer((json_int_t)k->count[i]));
	return o;
}

static json_t *baseline_json(struct baseline *bl)
{
	json_t *o;

	if (!bl->requested)
		return json_null();
	o = json_pack("{s:b}", "available", bl->available);
	if (!o)
		return NULL;
	if (bl->available) {
		json_object_set_new(o, "latency_ms", summary_json(&bl->lat));
		json_object_set_new(o, "failures", kinds_json(&bl->failures));
	} else {
		json_object_set_new(o, "reason", json_string(bl->why));
	}
	return o;
}

int write_json(struct bench *b)
{
	json_t *j, *ph, *mode;
	char *text = NULL;
	int ret = -ENOMEM;

	ph = json_object();
	for (int i = 0; ph && i < NPHASES; i++) {
		double m;

		json_object_set_new(ph, phase_names[i],
				    stats_mean(&b->phase[i], &m) == 0 ? json_real(m) : json_null());
	}
	if (b->burst > 0)
		mode = json_pack("{s:s,s:I,s:I,s:b}", "kind", "burst", "burst", (json_int_t)b->burst,
				 "rounds", (json_int_t)b->repeat, "cold_tier", b->cold_tier);
	else
		mode = json_pack("{s:s,s:f,s:f,s:s,s:I,s:b}", "kind", "rate", "rate", b->rate,
				 "duration_s", b->duration_s, "arrivals",
				 b->poisson ? "poisson" : "fixed", "seed", (json_int_t)b->seed,
				 "cold_tier", b->cold_tier);
	j = json_pack("{s:s,s:s,s:o,s:{s:s,s:s},s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:f,s:f,s:{s:o,s:o}}",
		      "url", b->url, "function", b->function, "mode", mode, "infer", "method",
		      b->infer_method, "path", b->infer_path, "attempts", (json_int_t)b->attempts,
		      "ok", (json_int_t)b->ok, "failed", (json_int_t)(b->attempts - b->ok),
		      "start_latency_ms", summary_json(&b->latency), "start_answer_ms",
		      summary_json(&b->answer), "phases_mean_ms", ph, "failures",
		      kinds_json(&b->failures), "delete_failures", kinds_json(&b->delete_failures),
		      "tier", kinds_json(&b->tiers), "restore_mode", kinds_json(&b->modes),
		      "wall_s", b->wall_s, "max_send_lag_ms",
		      b->max_send_lag_ms, "baselines", "cold_boot", baseline_json(&b->cold),
		      "plain_restore", baseline_json(&b->plain));
	if (j && b->idle_stop_s > 0)
		json_object_set_new(j, "idle_stop",
				    json_pack("{s:f,s:I,s:I,s:I,s:o,s:o}", "idle_s", b->idle_stop_s,
					      "watched", (json_int_t)b->nidle, "on_time",
					      (json_int_t)b->idle_on_time, "left_running",
					      (json_int_t)b->idle_left, "late_ms",
					      summary_json(&b->idle_lateness), "failures",
					      kinds_json(&b->idle_failures)));
	if (!j) {
		pr_err("building the JSON report failed");
		goto out;
	}
	text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text)
		goto out;
	ret = write_file_atomic(b->json_path, text, strlen(text), 0644);
out:
	free(text);
	json_decref(j);
	return ret;
}

int write_svg(struct bench *b)
{
	struct stats *sets[] = { &b->latency, &b->cold.lat, &b->plain.lat };
	const char *names[] = { "thaw start (POST /start to first correct answer)",
				"cold boot (container start to first answer)",
				"plain runc restore from tmpfs" };
	bool shown[] = { true, b->cold.requested, b->plain.requested };
	struct plot_series ser[3];
	char title[256];
	size_t n = 0;
	int ret;

	for (size_t i = 0; i < ARRAY_SIZE(sets); i++) {
		if (!shown[i])
			continue;
		ser[n].name = names[i];
		ser[n].samples = stats_count(sets[i]);
		if (stats_cdf(sets[i], (struct stats_point **)&ser[n].pts, &ser[n].n) < 0) {
			ser[n].pts = NULL;
			ser[n].n = 0;
		}
		n++;
	}
	/* What ran, as the report says it: a burst of 1 is one start at a time. */
	if (b->burst == 1)
		snprintf(title, sizeof(title), "start latency CDF: %s, one start at a time, %ld rounds",
			 b->function, b->repeat);
	else if (b->burst > 1)
		snprintf(title, sizeof(title), "start latency CDF: %s, bursts of %ld, %ld rounds",
			 b->function, b->burst, b->repeat);
	else
		snprintf(title, sizeof(title), "start latency CDF: %s, open-loop arrivals at %.3g/s",
			 b->function, b->rate);
	ret = plot_cdf_svg_write(b->svg_path, title, "start latency (ms)", ser, n);
	for (size_t i = 0; i < n; i++)
		free((void *)ser[i].pts);
	return ret;
}
