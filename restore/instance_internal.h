/* SPDX-License-Identifier: Apache-2.0 */
/* instance_internal.h — what the instance files share: instance.c (the
 * start), instance_record.c (directory, id, record), instance_stop.c (stop
 * and teardown), instance_standby.c (a standby taken) and instance_boot.c
 * (an instance booted cold rather than restored, made and stopped the same
 * way); not for other modules.
 */
#ifndef THAW_RESTORE_INSTANCE_INTERNAL_H
#define THAW_RESTORE_INSTANCE_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/runner.h"
#include "function/confine.h"
#include "function/userns.h"
#include "function/spec.h"
#include "restore/gpu_restore.h"
#include "restore/instance.h"
#include "restore/instance_ended.h"

struct snapshot_meta;
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
	/* Its user namespace's host range (the snapshot's, function/userns.h);
	 * size 0: none.  Its network namespace is then runc's, bound at netns
	 * once the container is there (netns_adopt). */
	struct userns_range userns;
	/* The host directories the bundle binds (function/confine.h), held
	 * until runc has returned. */
	struct function_host_paths held;
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
	/* Its device memory being filled by thawd meanwhile (gpu_prefill.h). */
	struct gpu_prefill *prefill;
	/* A standby: its snapshot's meta (spec, GPUs, CUDA processes), written
	 * into its record (snapshot_meta_to_json) for instance_activate, which
	 * then needs no manifest.  Set only for instance_ctx_record's call. */
	const struct snapshot_meta *standby_meta;
	/* A graceful stop: the container's first process (host pid) gets
	 * SIGTERM and this long to exit before SIGKILL. */
	pid_t init;
	int grace_ms;
	/* A stop that keeps what ended (restore/instance_ended.h): how, and
	 * the record as it was; NULL: nothing kept. */
	const struct instance_end *end;
	const json_t *end_rec;
	/* A start that failed its readiness check (instance_ctx_ready): its
	 * output is kept as an ended instance's by the teardown, not put in
	 * the start's error, which reaches the data plane. */
	bool keep_output;
	/* Where the teardown writes that failed start's end (end points here):
	 * the context's own, as it outlives every use of end. */
	struct instance_end failed_start_end;
};

/* A start's steps, shared by every way an instance is made or ended.  The
 * new instance's id, directory and paths (x->dir, x->record, x->runc_root,
 * x->netns, x->bundle, x->work, x->log, x->activity; x->r; x->have_dir):
 * 0 or -errno (logged). */
int instance_ctx_dir(struct start_ctx *x, struct instance *in);
/* x->r: the runner of x->c's runc and CRIU in x->runc_root. */
void instance_ctx_runner(struct start_ctx *x);
/* The record (what instance_to_json says, and what stop needs) written in
 * state: 0 or -errno (logged). */
int instance_ctx_record(struct start_ctx *x, const struct instance *in, const char *state);
/* The endpoint shim started on the function's stdout and stderr (which it
 * drains into x->log from now on): in->endpoint, in->t.endpoint.  0 or
 * -errno. */
int instance_ctx_endpoint(struct start_ctx *x, const struct func_spec *spec, struct instance *in);
/* The spec's readiness check of in, timed into in->t.ready; on failure the
 * error says why and names the instance whose output is kept (who: "the
 * restored function", "the standby", "the booted function"): never the
 * output itself, which may hold the function's secrets. */
int instance_ctx_ready(struct start_ctx *x, const struct func_spec *spec, struct instance *in,
		       const char *who);
/* Undo whatever x holds, newest first.  0, or the first error (logged)
 * with what is left named.  Failing for want of descriptors or memory
 * (EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN), it goes on with what is left
 * for up to 30 s: a start that failed for that want leaves nothing. */
int instance_ctx_teardown(struct start_ctx *x, const char *id);

/* ---- paths and records (instance_record.c) ---- */

/* A path into buf; -ENAMETOOLONG (logged) if it does not fit. */
int __attribute__((format(printf, 3, 4))) instance_path(char *buf, size_t len, const char *fmt,
							 ...);
/* <data>/instances/<id>.json into buf; -ENAMETOOLONG (logged). */
int instance_record_path(const struct thaw_config *c, const char *id, char *buf, size_t len);
/* thaw's runc root, <data>/runc, into buf; -ENAMETOOLONG (logged). */
int instance_runc_root(const struct thaw_config *c, char *buf, size_t len);
/* The record at path: 0 and *out (you own it), -ENOENT, or -EINVAL (logged)
 * if it is not a JSON object. */
int instance_record_load(const char *path, json_t **out);
/* rec's integer key into *v: true, or false if it has none. */
bool instance_record_num(const json_t *rec, const char *key, long long *v);
/* rec's "cuda_pids" (those that are positive integers) into *pids (you own
 * it; NULL when there are none) and *n.  -ENOMEM. */
int instance_record_cuda_pids(const json_t *rec, pid_t **pids, size_t *n);
/* in->t as the record's "timings_ms" (a new reference), or NULL. */
json_t *instance_timings_json(const struct instance *in);
/* The GPUs of in: those of placement p. */
void instance_set_gpus(struct instance *in, const struct gpu_placement *p);
/* The timings of a booted instance (instance_boot.c), for instance_to_json. */
json_t *instance_boot_timings(const struct instance *in);

#endif
