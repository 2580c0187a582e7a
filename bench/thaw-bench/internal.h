/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench's parts (main.c: options; load.c: the starts on libcurl multi;
 * baselines.c: cold boot and plain restore; report.c: table, JSON, SVG)
 * and what they share.  Internal to bench/thaw-bench/. */
#ifndef THAW_BENCH_INTERNAL_H
#define THAW_BENCH_INTERNAL_H

#define LOG_PREFIX "thaw-bench: "

#include "common/stats.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_BODY (4u << 20) /* an answer larger than this is a bad response */
#define NPHASES 9
#define MAX_KINDS_N 64

/* Counts by name: failure kinds ("start_http_503"), tiers ("ram"), restore
 * modes ("lazy"). */
struct kinds {
	char name[MAX_KINDS_N][48];
	uint64_t count[MAX_KINDS_N];
	size_t n;
};

/* A baseline series, measured in the same run. */
struct baseline {
	const char *name;
	bool requested;
	bool available;
	char why[512]; /* why it is not available */
	struct stats lat;
	struct kinds failures;
};

/* An instance the idle-stop scenario waits to see stopped (idle.c). */
struct idle_inst {
	char iid[128];
	uint64_t last_use_ms; /* CLOCK_REALTIME ms of its inference answer */
	bool done;
};

struct bench {
	/* what to run */
	const char *url;
	const char *function;
	char auth_header[600];
	char infer_method[16];
	char *infer_path;
	char *infer_body;
	char *expect;
	size_t expect_len;
	double start_timeout_s, infer_timeout_s, delete_timeout_s;
	bool keep_instances;
	long max_failures; /* more failed starts than this: exit 3 */
	long burst, repeat;
	double rate, duration_s;
	bool poisson;
	uint64_t seed;
	bool cold_tier;
	const char *cold_cmd;
	const char *round_cmd; /* run (untimed) before each burst round */
	const char *json_path, *svg_path;
	const char *baseline_cold_spec, *baseline_plain_image;
	long baseline_runs;
	const char *runc_root;
	double idle_stop_s; /* > 0: the idle-stop scenario (idle.c) */
	/* while running */
	CURLM *multi;
	int active;
	/* results */
	uint64_t attempts, ok;
	double max_send_lag_ms, wall_s;
	struct stats latency, answer, phase[NPHASES];
	struct kinds failures, delete_failures, tiers, modes;
	struct baseline cold, plain;
	/* the idle-stop scenario */
	struct idle_inst *idle;
	size_t nidle, capidle;
	uint64_t idle_on_time;
	long idle_left; /* the function's instances still running at the end; -1 unknown */
	struct stats idle_lateness; /* ms after last use + idle_s */
	struct kinds idle_failures;
};

extern const char *const phase_names[NPHASES];
/* Set by SIGINT/SIGTERM: no new starts or baseline runs. */
extern volatile sig_atomic_t stop_requested;

/* main.c */
void kinds_add(struct kinds *k, const char *name);

/* load.c */
/* GET path of thawd; *status the HTTP status (0 if none), *body yours if not NULL. */
int bench_get(const struct bench *b, const char *path, long *status, char **body,
	      double timeout_s);
/* The measured run: every start of the mode, to completion. */
int run_thaw(struct bench *b);

/* idle.c */
/* Watch instance iid, just used, until it is stopped for being idle. */
int idle_watch(struct bench *b, const char *iid);
/* Wait for every watched instance to be stopped; judge each. */
int idle_check(struct bench *b);
void idle_report(const struct bench *b, FILE *f);

/* baselines.c */
void run_baselines(struct bench *b);

/* report.c */
void print_table(struct bench *b);
int write_json(struct bench *b);
int write_svg(struct bench *b);

#endif
