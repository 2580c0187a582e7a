/* SPDX-License-Identifier: Apache-2.0 */
/* cuda.h — the CUDA driver API, through dlopen("libcuda.so.1"), for the
 * checkpoint functions and the device list.  cuInit runs once per process.
 * Without a driver every call returns -ENODEV and cuda_available() is false:
 * "no GPU: CPU functions only".  Each CUresult is turned into -errno right
 * where it happens and logged with the driver's own name for it
 * (cuGetErrorName), e.g. "cuCheckpointProcessLock(1234): CUDA_ERROR_TIMEOUT".
 */
#ifndef THAW_CUDA_H
#define THAW_CUDA_H

#include "common/cuda_abi.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The driver's CUprocessState. */
enum cuda_proc_state {
	CUDA_PROC_RUNNING = CU_PROC_RUNNING,
	CUDA_PROC_LOCKED = CU_PROC_LOCKED,
	CUDA_PROC_CHECKPOINTED = CU_PROC_CHECKPOINTED,
	CUDA_PROC_FAILED = CU_PROC_FAILED,
};

struct cuda_device {
	int ordinal;
	char uuid[48];    /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	char name[96];    /* "NVIDIA H100 80GB HBM3" */
	uint64_t total_bytes;
	uint64_t free_bytes;
	int minor;        /* N of /dev/nvidiaN (NVML, else /proc/driver/nvidia); -1 unknown */
	int cc_major, cc_minor; /* compute capability (9.0 for an H100); -1 unknown */
};

struct cuda_gpu_pair {
	char old_uuid[48]; /* the GPU at checkpoint */
	char new_uuid[48]; /* the GPU to restore onto */
};

/* Load the driver and cuInit(0), once.  0, or -ENODEV with the reason logged at info. */
int cuda_init(void);
bool cuda_available(void);
/* The driver's entry point name (after cuda_init), or NULL: for the few
 * callers that use more of the driver API than the checkpoint calls
 * (restore/gpu_prefill.c). */
void *cuda_sym(const char *name);
/* Why cuda_init failed, in words ("libcuda.so.1: cannot open shared object
 * file…", "cuInit: CUDA_ERROR_NO_DEVICE"); "" when the driver is usable. */
const char *cuda_unavailable_reason(void);
/* The driver has the checkpoint API (cuCheckpointProcess*, driver >= 550). */
bool cuda_checkpoint_supported(void);
/* Driver version as the driver reports it (e.g. 13000 for 13.0). */
int cuda_driver_version(int *version);
/* The GPUs (you own *out; free()).  Free memory is read without creating a context. */
int cuda_devices(struct cuda_device **out, size_t *n);
/* The kernel driver's version ("580.159.04": NVML, else /proc/driver/nvidia/version)
 * into buf; 0, or -ENOENT where neither says. */
int cuda_kernel_driver_version(char *buf, size_t len);
/* The kernel driver's major version (580), 0 if unknown.  Restore onto
 * another GPU (GPU pairs) is the checkpoint API of driver 580 and later. */
int cuda_driver_major(void);
#define CUDA_PAIRS_MIN_DRIVER 580

/* The calls on a pid answer -ESRCH when that process holds no CUDA state. */
int cuda_process_state(pid_t pid, enum cuda_proc_state *state);
int cuda_restore_thread_id(pid_t pid, int *tid);
int cuda_lock(pid_t pid, unsigned timeout_ms);
int cuda_checkpoint(pid_t pid);
/* Restore onto the same GPUs (pairs NULL) or onto others (every checkpointed GPU listed). */
int cuda_restore(pid_t pid, const struct cuda_gpu_pair *pairs, size_t npairs);
int cuda_unlock(pid_t pid);
/* Of the given pids, those that hold CUDA state (cuda_process_state succeeds). */
int cuda_filter_processes(const pid_t *pids, size_t n, pid_t **cuda_pids, size_t *ncuda);

/* A step of the checkpoint API, for saying where the driver refused. */
enum cuda_step {
	CUDA_STEP_NONE = 0,
	CUDA_STEP_LOCK,
	CUDA_STEP_CHECKPOINT,
	CUDA_STEP_RESTORE,
	CUDA_STEP_UNLOCK,
};
/* "lock", "checkpoint", "restore", "unlock"; "" for CUDA_STEP_NONE. */
const char *cuda_step_name(enum cuda_step step);
/* The step at which the last cuda_checkpoint_group or cuda_restore_group
 * of this thread failed (CUDA_STEP_NONE where it succeeded), as
 * log_last_error() keeps its words. */
enum cuda_step cuda_group_failed_step(void);

/* The processes of one function, as one, in the driver's order for processes
 * that work together (NCCL, CUDA IPC): every one locked before any is
 * checkpointed, every one restored before any is unlocked.
 *
 * cuda_checkpoint_group: lock all (timeout_ms each), then checkpoint each.
 * All or none: on a failure those locked are unlocked and those checkpointed
 * restored and unlocked again, and *failed is the pid that failed.  Where
 * free GPU memory is known, gpus[i] (if not NULL) gets a bit per device
 * ordinal whose free memory grew when process i was checkpointed (the GPUs
 * it held), and used[ordinal] (if not NULL) the bytes freed there. */
int cuda_checkpoint_group(const pid_t *pids, size_t n, unsigned timeout_ms, uint32_t *gpus,
			  uint64_t used[CUDA_MAX_DEVICES], pid_t *failed);
/* Restore each checkpointed process (pairs as cuda_restore), then unlock
 * each.  All or none: if one fails to restore, those already restored are
 * checkpointed back (their GPU memory given back); if one fails to unlock,
 * those unlocked are locked and checkpointed back.  *failed: the pid that
 * failed (0 if none).  *restore_ms (if not NULL): how long the restores
 * took, the rest of the call being the unlocks (a burst's restores and
 * unlocks queue differently in the driver).  0 or the failing call's
 * -errno. */
int cuda_restore_group(const pid_t *pids, size_t n, const struct cuda_gpu_pair *pairs,
		       size_t npairs, pid_t *failed, double *restore_ms);

#endif
