/* SPDX-License-Identifier: Apache-2.0 */
/* prewarm_internal.h — what prewarm.c (the snapshot, phase by phase)
 * shares with prewarm_gpu.c (its GPU part: the GPUs chosen, libthaw-cuda's
 * save of device memory, the CUDA checkpoint); not for other modules.
 */
#ifndef THAW_PREWARM_PREWARM_INTERNAL_H
#define THAW_PREWARM_PREWARM_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/config.h"
#include "common/cuda.h"
#include "common/logfile.h"
#include "common/runner.h"
#include "function/confine.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "function/userns.h"

/* One snapshot in progress: its paths, its container, its log, its GPUs. */
struct job {
	const struct thaw_config *c;
	const struct func_spec *spec;
	bool on_image; /* spec is image_apply's: its bundle is the image cache's */
	struct function_host_paths held; /* the bundle's host directories, until the job ends */
	struct runner r;
	char state_dir[PATH_MAX + 16];
	char work[PATH_MAX + 256];
	char netns[PATH_MAX + 300];
	char bundle[PATH_MAX + 300];
	char image[PATH_MAX + 300];
	char criu_work[PATH_MAX + 300];
	char log[PATH_MAX + 300];
	char runc_log[PATH_MAX + 300];
	char cid[128];
	bool netns_made, container_made;
	/* The host range of its user namespace (function/userns.h); size 0:
	 * none, the host's uid 0. */
	struct userns_range userns;
	pid_t pid;
	/* The drain thread: container stdout/stderr into function.log. */
	struct runner_stdio stdio;
	struct logfile out;
	int stop_fd;
	pthread_t drain;
	bool drain_started;
	/* GPU memory the checkpoint gave back, per device ordinal (what the
	 * function holds, and so what a restore needs free); 0 unknown. */
	uint64_t gpu_used[CUDA_MAX_DEVICES];
	uint64_t gpu_saved[CUDA_MAX_DEVICES]; /* of it, saved by libthaw-cuda */
	/* The GPUs the function's container is given (its spec's "gpus"),
	 * chosen before its boot; and its CUDA processes, with which of them
	 * each held. */
	struct cuda_device *gpu;
	size_t ngpu, nhost_gpus;
	struct snapshot_cuda_process *cuda_procs;
	size_t ncuda_procs;
	/* libthaw-cuda (common/gpumem.h): its two directories when the
	 * container preloads it; what moved, and why not where nothing did. */
	bool gpumem;
	char gpumem_in[PATH_MAX + 400], gpumem_out[PATH_MAX + 400];
	char gpumem_why[600];
	uint64_t gpumem_bytes, gpumem_allocs, gpumem_left;
	size_t gpumem_moved;
	pid_t gpumem_ns[64]; /* the moved processes' pids in the container */
	double gpumem_save_ms;
};

/* The GPUs for the function's boot (j->gpu, j->ngpu): its spec's "gpus" of
 * them, those with the most free memory (the lower index on a tie).  0 or
 * -errno with the reason set. */
int prewarm_choose_gpus(struct job *j);
/* A GPU function preloads libthaw-cuda unless its spec says "gpu_memory":
 * "driver" or the library is not there (then j->gpumem_why says so, and
 * the driver carries all of its GPU memory).  0 or -errno. */
int prewarm_gpumem_prepare(struct job *j);
/* After the dump: the saved memory and the library into the image.  0 or
 * -errno. */
int prewarm_gpumem_into_image(struct job *j);
/* The meta's GPU part (function/snapshot_meta.h) into sm: the GPUs the
 * function was given with what it held on each (sm->gpus, new: free it),
 * and for a GPU function its CUDA processes and who carries its device
 * memory (pointing into j).  0 or -ENOMEM. */
int prewarm_gpu_meta(const struct job *j, struct snapshot_meta *sm);
/* Every CUDA process of the function's container: device memory saved by
 * libthaw-cuda where it is preloaded, then locked and checkpointed by the
 * driver (j->cuda_procs, j->gpu_used, ...).  0 or -errno with the reason
 * set. */
int prewarm_cuda_checkpoint(struct job *j);

#endif
