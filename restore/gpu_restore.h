/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_restore.h — the CUDA half of restoring and stopping an instance.
 *
 * After runc restore the container's CUDA processes are back but their GPU
 * state is still in their host memory (checkpointed).  For each: check that
 * the GPU has room (a restore that runs out of GPU memory can leave the
 * process stuck for good), cuCheckpointProcessRestore (with GPU pairs when
 * this host's GPUs are not the ones of the snapshot), then Unlock.
 */
#ifndef THAW_RESTORE_GPU_RESTORE_H
#define THAW_RESTORE_GPU_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/cuda.h"
#include "common/runner.h"
#include "function/snapshot_meta.h"

#define GPU_LOCK_TIMEOUT_MS 10000

/* GPUs one function may span (a spec's "gpus"). */
#define GPU_MAX 8

/* Where a start's GPUs go, chosen before anything is restored. */
struct gpu_placement {
	size_t n;                        /* the snapshot's GPUs (its meta's gpus) */
	struct cuda_device dev[GPU_MAX]; /* where snapshot GPU i goes (free_bytes: as
					  * seen then, less what others held back) */
	uint64_t claim[GPU_MAX];         /* GPU memory held back on dev[i] */
	bool moved;                      /* some GPU is another than it came from */
	bool held;                       /* claims held until gpu_release */
};

/* Choose where the GPUs of a snapshot whose meta is sm go, and hold their
 * GPU memory back from every other placement of this process until
 * gpu_release (a burst of starts spreads over the GPUs: each placement sees
 * what those in flight are about to take, and their number breaks ties).
 * request NULL: gpu_choose's rule on what is left free; else the GPUs a
 * start asks for, one per snapshot GPU, by index or UUID, comma-separated
 * ("1", "GPU-…", "0,1").  reserve: what each chosen GPU must keep free
 * besides (--gpu-mem-reserve).  0 (p->n 0 when the snapshot recorded no
 * GPU); -EINVAL (why) for a request naming a GPU this host does not have,
 * one twice, another count or model; -EAGAIN (why) when a GPU has no room;
 * -ENODEV without a driver or with fewer GPUs than the snapshot used. */
int gpu_place(const struct snapshot_meta *sm, const char *request, uint64_t reserve,
	      struct gpu_placement *p, char *why, size_t whylen);
/* The same for the snapshot GPUs gpus (ngpus of them) on devs (what
 * cuda_devices gave). */
int gpu_place_devices(const struct snapshot_gpu *gpus, size_t ngpus, const char *request,
		      const struct cuda_device *devs, size_t ndevs, uint64_t reserve,
		      struct gpu_placement *p, char *why, size_t whylen);
/* A placement of one GPU, device ordinal with uuid (checked: the GPU a
 * standby holds its contexts on must still be that one), holding need
 * bytes back: what a context standby's take fills.  -EAGAIN (why) when it
 * has not need + reserve free, -ENODEV when this host has no such GPU. */
int gpu_place_on(int ordinal, const char *uuid, uint64_t need, uint64_t reserve,
		 struct gpu_placement *p, char *why, size_t whylen);
/* bytes of placement p's GPU i are allocated now (NVML's free figure
 * shows them: thaw filled them before the driver's restore): no longer held
 * back, so that no other placement counts them twice. */
void gpu_claim_taken(struct gpu_placement *p, size_t i, uint64_t bytes);
/* NVML's free memory of the GPU of device ordinal now; 0 if unknown. */
uint64_t gpu_free_bytes(int ordinal);
/* Give back what p holds.  Twice, or on a placement that holds nothing: nothing. */
void gpu_release(struct gpu_placement *p);

/* Restore and unlock every CUDA process of container id, whose first
 * process has host pid init, onto the GPUs of place (NULL, or one that
 * holds nothing: placed here), as one: every process restored before any is
 * unlocked; if one fails, those restored are checkpointed back and the
 * error names the process (the caller tears the instance down).  The
 * placement is released at the end (its memory is then taken or given up).
 * sm is the snapshot's meta (its GPUs, CUDA processes, memory figures if
 * recorded).  *pids (you own it) are the host pids restored.  -ENODEV
 * without a driver. */
int gpu_restore_container(const struct runner *r, const char *id, pid_t init,
			  const struct snapshot_meta *sm, struct gpu_placement *place,
			  pid_t **pids, size_t *n);

/* After gpu_restore_container: each of the n restored processes pids
 * whose device memory libthaw-cuda saved (gm: the snapshot meta's
 * gpu_memory, its ns_pids) maps new memory at its addresses and copies it back from the
 * RAM tier (the directory bound at GPUMEM_IN_DEST), then lets its CUDA
 * calls go; it answers in out_dir (the host directory at GPUMEM_OUT_DEST).
 * *copy_ms: how long that took.  0 (nothing to do for a snapshot whose
 * memory the driver carried), or -errno with the reason set: the caller
 * ends the instance (its calls stay held). */
int gpu_memory_restore(const struct snapshot_gpu_memory *gm, const pid_t *pids, size_t n,
		       const char *out_dir, double *copy_ms);

/* Where the snapshot's GPUs (gpus, ngpus of them) go on this host's devs:
 * choice[i] is the device index for snapshot GPU i.  Each goes to the GPU
 * of its model with the most free memory that has room for its recorded
 * usage (on a tie: fewer placements in flight, then its own GPU, then the
 * lower index; a snapshot that recorded no model stays on its own GPU if it
 * has room), else to any with room; each device takes one.  *moved: some GPU is not the one it
 * came from (the restore then passes GPU pairs).  -EAGAIN (why says which
 * GPU needs what, and the most free) when one has nowhere to go, -ENODEV
 * with fewer devices than the snapshot used.  On one GPU this is the
 * free-memory check; on several, the placement. */
int gpu_choose(const struct snapshot_gpu *gpus, size_t ngpus, const struct cuda_device *devs,
	       size_t ndevs, size_t *choice, bool *moved, char *why, size_t whylen);

/* The same on devs (what cuda_devices gave). */
int gpu_admit_devices(const struct snapshot_gpu *gpus, size_t ngpus,
		      const struct cuda_device *devs, size_t ndevs, uint64_t reserve, char *why,
		      size_t whylen);

/* The host pids of every process in the PID namespace of init (the
 * container's processes), init first.  You own *pids. */
int pidns_members(pid_t init, pid_t **pids, size_t *n);

/* Before a kill: each CUDA process of pids that runs is locked (with a
 * timeout): the driver lets the calls in flight finish and takes no more,
 * so that the kill never finds it mid-work (a kill mid-work hung the host
 * on some drivers).  Not checkpointed: the driver's checkpoint copies all
 * of the process's device memory to host memory, which the kill then frees
 * (16 GiB on the H200: the checkpoint 8.7-12.3 s, the kill's reaping
 * 1.05-1.09 s, against 0.11 s after the lock alone; the GPU memory free once
 * it is reaped either way, bench/LOG.md).  Processes that are gone or hold
 * no CUDA state are skipped; one that cannot be locked in time is killed
 * all the same (a warning). */
/* After gpu_restore_container of a function of several CUDA processes or
 * GPUs (its snapshot's meta sm, its id function) returned ret on this
 * thread: for thaw doctor (common/span_record.h), in data_dir, a refusal
 * by the driver (the step, its words, what the spec could set to avoid
 * it), or a success where the record held this function's refused start.
 * Nothing for a function of one process and one GPU, or for a failure
 * that was not the driver's refusal. */
void gpu_span_record(const char *data_dir, const char *function, const struct snapshot_meta *sm,
		     int ret);

void gpu_lock_for_kill(const pid_t *pids, size_t n);

#endif
