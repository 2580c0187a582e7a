/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h — thawd's counters and histograms, written in Prometheus text format.
 *
 *	thaw_starts_total{function}                 start requests for a known function
 *	thaw_start_failures_total{function,code}    of which failed, by error code
 *	thaw_starts_refused_total{reason}            of which refused before any restore
 *	                                             (429, 503), by error code
 *	thaw_restore_phase_seconds{phase}            histogram, 1 ms … 60 s buckets;
 *	                                             phase = materialize, criu_restore,
 *	                                             gpu_restore, ready, total
 *	thaw_snapshots_total{result}                 snapshots finished: ok, failed
 *	thaw_standby_starts_total{function,result}   starts of functions with standbys:
 *	                                             hit, miss
 *	thaw_standby_instances{function}             standbys waiting (a gauge)
 *	thaw_instances_stopped_total{reason}         ended: exited, idle, lifetime,
 *	                                             delete, function_deleted
 *	thaw_start_boots_total{function,reason}      starts answered by a cold boot
 *	                                             (server/fallback.h)
 *	thaw_ram_tier_bytes, thaw_ram_tier_budget_bytes, thaw_store_bytes{kind},
 *	thaw_instances_running                       gauges the caller supplies
 *	thaw_ram_tier_damaged_total{found_by}        RAM tier entries dropped as damaged:
 *	                                             fill, scrub (restore/tier.h)
 *	thaw_ram_tier_rematerialized_total           of those, materialised again
 *	thaw_ram_tier_scrubbed_bytes_total           bytes the scrub read and checked
 *	                                             (these three the caller supplies too)
 *
 * Thread-safe: one mutex, held only while counting or writing.
 */
#ifndef THAW_SERVER_METRICS_H
#define THAW_SERVER_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum metrics_phase {
	PHASE_MATERIALIZE,
	PHASE_CRIU_RESTORE,
	PHASE_GPU_RESTORE,
	PHASE_READY,
	PHASE_TOTAL,
	PHASE_COUNT
};

/* The gauges, read by the caller at scrape time. */
struct metrics_gauges {
	bool have_tier;
	uint64_t ram_tier_bytes, ram_tier_budget_bytes;
	uint64_t tier_damaged_fill, tier_damaged_scrub, tier_rematerialized, tier_scrubbed_bytes;
	bool have_store;
	uint64_t store_logical, store_unique, store_stored;
	uint64_t instances_running;
	json_t *standby_pools; /* {"<function>": waiting standbys}, or NULL */
	/* The GPUs: [{"index","uuid","free_bytes","instances"}], or NULL */
	json_t *gpus;
};

struct metrics;

/* NULL on allocation failure. */
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m); /* NULL is fine */

/* A start of function was asked for (counted in thaw_starts_total). */
int metrics_start(struct metrics *m, const char *function);
/* It failed with code ("no_capacity", "timeout", …). */
int metrics_start_failed(struct metrics *m, const char *function, const char *code);
/* Restore phase durations of a successful start, in milliseconds. */
void metrics_restore_phases(struct metrics *m, const double ms[PHASE_COUNT]);
/* A start of a function that keeps standbys took one (hit) or found none. */
int metrics_standby(struct metrics *m, const char *function, bool hit);
/* A restore made, by where its snapshot was: "ram", "disk" or "remote". */
int metrics_start_tier(struct metrics *m, const char *function, const char *tier);
/* A start answered by booting the function rather than restoring it, and
 * why (FALLBACK_MARKED, _HOST, _DAMAGED, _RESTORE, _READY). */
int metrics_start_booted(struct metrics *m, const char *function, const char *reason);
/* A start refused before anything was restored, by its error code. */
int metrics_start_refused(struct metrics *m, const char *reason);
/* An instance ended: "exited", "idle", "lifetime" (thawd stopped it by
 * itself), "delete", "function_deleted". */
int metrics_instance_stopped(struct metrics *m, const char *reason);
/* A snapshot finished; result "ok" or "failed". */
int metrics_snapshot(struct metrics *m, const char *result);

/* Everything in Prometheus text format (version 0.0.4) into f.  0 or -EIO. */
int metrics_write(struct metrics *m, FILE *f, const struct metrics_gauges *g);

/* The same into a new string (you own *out). 0 or -ENOMEM/-EIO. */
int metrics_render(struct metrics *m, const struct metrics_gauges *g, char **out, size_t *len);

/* Escape a label value (backslash, double quote, newline) into out; false if
 * it does not fit. */
bool metrics_escape_label(const char *in, char *out, size_t outlen);

/* The upper bounds of the restore phase histogram, in seconds. */
extern const double metrics_phase_bounds[];
extern const size_t metrics_phase_nbounds;

#endif
