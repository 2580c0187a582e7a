/* SPDX-License-Identifier: Apache-2.0 */
/* instance_internal.h — what instance.c shares with instance_boot.c (an
 * instance booted cold rather than restored, made and stopped the same
 * way); not for other modules.
 */
#ifndef THAW_RESTORE_INSTANCE_INTERNAL_H
#define THAW_RESTORE_INSTANCE_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/runner.h"
#include "function/spec.h"
#include "restore/instance.h"
#include "restore/lazy_watch.h"

/* Everything a start builds, so that one function can undo any prefix of it. */
struct start_ctx {
	const struct thaw_config *c;
	struct runner r;
	char runc_root[PATH_MAX];
	char dir[PATH_MAX];    /* <data>/instances/<id> */
	char record[PATH_MAX + 16]; /* <data>/instances/<id>.json */
	char netns[PATH_MAX + 16];
	char bundle[PATH_MAX + 16];
	char work[PATH_MAX + 16];
	char log[PATH_MAX + 16];
	bool have_dir, have_netns, have_container;
	pid_t shim_pid;
	unsigned long long shim_start, pid_start;
	uint16_t port;
	struct runner_stdio stdio;
	pid_t *cuda_pids;
	size_t ncuda;
	bool gpu;
	/* Lazy restore: the daemon (in x.work, where runc restore --lazy-pages
	 * looks for lazy-pages.socket) and its watcher. */
	bool lazy;
	struct lazy_watch lz;
	unsigned long long lz_watcher_start, lz_daemon_start;
	char lazy_log[PATH_MAX + 16];
	char lazy_status[PATH_MAX + 16];
	char activity[PATH_MAX + 16]; /* the shim's activity file (restore/shim.h) */
	/* Mapped restore: the process that holds the tier lease for the
	 * instance's life, and the directory bound at OCI_MAPPED_DEST when the
	 * instance does not map (the snapshot's mount must be given one). */
	bool mapped;
	pid_t holder;
	unsigned long long holder_start;
	char mapped_empty[PATH_MAX + 16];
	/* libthaw-cuda's mounts (the meta's "gpu_memory": "mount"): the tier
	 * entry read-only, and <dir>/gpu-out for its answers. */
	const char *gpumem_in;
	char gpumem_out[PATH_MAX + 16];
	/* A standby: its snapshot's meta (spec, GPUs, CUDA pids), recorded for
	 * instance_activate, which then needs no manifest. */
	const json_t *standby_meta;
	/* A graceful stop: the container's first process (host pid) gets
	 * SIGTERM and this long to exit before SIGKILL. */
	pid_t init;
	int grace_ms;
	/* A stop that keeps what ended (restore/instance_ended.h): how, and
	 * the record as it was; NULL: nothing kept. */
	const struct instance_end *end;
	const json_t *end_rec;
};

/* instance.c's steps, for instance_boot.c: the new instance's id, directory
 * and record path (x->dir, x->record, x->runc_root, x->r set; x->have_dir);
 * its record written in state; its readiness awaited (who: "the booted
 * function"); and whatever x holds undone, newest first. */
int instance_ctx_dir(struct start_ctx *x, struct instance *in);
int instance_ctx_record(struct start_ctx *x, const struct instance *in, const char *state);
int instance_ctx_ready(struct start_ctx *x, const struct func_spec *spec, struct instance *in,
		       const char *who);
int instance_ctx_teardown(struct start_ctx *x, const char *id);
/* The timings of a booted instance (instance_boot.c), for instance_to_json. */
json_t *instance_boot_timings(const struct instance *in);

#endif
