/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill_internal.h — one fill (restore/gpu_prefill.h) as its parts
 * share it:
 *
 *   gpu_prefill.c        its life: started, checked (tier_sums.h), waited
 *                        for, ended; a context standby's take
 *   gpu_prefill_fill.c   the fill itself: the layout read, the allocations
 *                        made, the tier's files copied into them in turn
 *   gpu_prefill_serve.c  the fd-passing server that offers them to the
 *                        library
 *   gpu_pin.c            the pin cache the copies read from
 *   gpu_prefill_cuda.c   the driver's entry points and thawd's contexts
 */
#ifndef THAW_GPU_PREFILL_INTERNAL_H
#define THAW_GPU_PREFILL_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "common/cuda_abi.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_order.h"
#include "restore/gpu_restore.h"
#include "restore/gpu_turn.h"

struct pinned_file;
struct snapshot_gpu;
struct tier_sum_file;
struct tier_sums;

/* One allocation of a process's saved device memory (its layout's line). */
struct pf_alloc {
	uint64_t off, size;
	int dev;     /* the snapshot's GPU it was on (pf->gpus[dev] here) */
	cu_handle h; /* 0: could not be made, not offered */
	int fd;      /* its export, -1 none */
	bool mapped; /* in thawd's range, for the copy */
};

/* One process of the snapshot: its allocations, its file, its socket,
 * and its fill, which runs on a thread of its own beside the other
 * processes' (prefill_fill_proc): each in its own turn on the GPUs its
 * allocations are on. */
struct pf_proc {
	struct gpu_prefill *pf;
	int ns_pid;
	struct pf_alloc *a;
	size_t n;
	uint64_t len; /* the file's bytes the allocations span */
	char *base;   /* the file, mapped (the pin cache's mapping) */
	cu_ptr va;    /* thawd's range its allocations are mapped in (0: none) */
	const struct tier_sum_file *sum; /* its checksums; NULL: not checked */
	struct pinned_file *pin;
	int listen_fd;
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	bool served;
	struct gpu_turn turn; /* on its allocations' GPUs, joined at the start */
	pthread_t thread;
	int ret;	      /* its fill's */
	char why[200];	      /* its first failure */
	uint64_t bytes, offered_allocs, verify_ns;
	double pin_ms, make_ms; /* its file pinned (the cache), its allocations made */
	uint64_t gpu_bytes[GPU_MAX];  /* filled on the snapshot's GPU k */
	uint64_t gpu_end_ns[GPU_MAX]; /* its last copy onto GPU k ended (now_ns()) */
};

struct gpu_prefill {
	struct gpu_placement *placement; /* whose claim the fill takes its bytes from */
	char tier_dir[PATH_MAX], out_dir[PATH_MAX];
	struct pf_proc *p;
	size_t np;
	pthread_t thread;
	bool started;
	int wake[2]; /* gpu_prefill_end writes: stop serving */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0 filling, 1 offered, <0 -errno */
	uint64_t joined_ns; /* its processes' turns joined (gpu_turn.h) */
	struct gpu_making making; /* its allocations, before restores (gpu_order.h) */
	uint64_t copy_begin_ns, copy_end_ns; /* now_ns(); 0: not yet */
	/* Per snapshot GPU k (on gpus[k]): bytes filled, the first copy onto
	 * it began and the last ended (now_ns(); 0: none). */
	uint64_t gpu_bytes[GPU_MAX], gpu_begin_ns[GPU_MAX], gpu_end_ns[GPU_MAX];
	/* Where the library copies (library_only, check_only, a failed
	 * fill), its turn on the placement's GPUs, taken when it is asked. */
	struct gpu_turn lib_turn;
	int gpus[CUDA_MAX_DEVICES]; /* the host GPU of the snapshot's GPU k */
	size_t ngpus;
	bool library_only; /* neither a fill nor a check: only the turn */
	char why[200]; /* the first failure, for the log */
	uint64_t bytes, offered_allocs;
	double fill_ms;
	double ctx_ms, pin_ms, make_ms; /* its parts: the slowest process's pin and make */
	struct tier_sums *sums; /* the entry's checksums; NULL: none, or not checked */
	uint64_t verify_ns;	/* the threads' time spent checking, summed */
	bool unverified;	/* the entry has no checksums (an older thaw made it) */
	bool check_only;	/* no fill applies: the files are only checked */
};

/* gpu_prefill_fill.c */

/* Read dir/gpu-<ns>.layout into p, each allocation's dev the snapshot's
 * GPU it was on (of gpus, ngpus of them): by the UUID the line names, or,
 * in a layout without UUIDs (an older library), the device ordinal where
 * by_index (the process's ordinal k is the snapshot's GPU k).  0, -EINVAL
 * for a layout a fill does not handle (compressed memory, a GPU not the
 * snapshot's or that cannot be told) or not a layout, -errno. */
int prefill_read_layout(const char *dir, struct pf_proc *p, const struct snapshot_gpu *gpus,
			size_t ngpus, bool by_index);
/* Fill one process's allocations, in p's turn (left once its copy is
 * done); on success each filled one has its export descriptor and is
 * offered on its socket (prefill_offer).  Touches only p (and the
 * placement's claims, under their lock): the processes of a fill run it
 * side by side.  0, or -errno with p->why set (-EUCLEAN: the file is
 * unlike its checksums). */
int prefill_fill_proc(struct gpu_prefill *pf, struct pf_proc *p);
/* What thawd holds of p's allocations let go of: its mappings and range,
 * the exports, the handles (a process that mapped one keeps it). */
void prefill_let_go(struct pf_proc *p);

/* gpu_prefill_serve.c */

/* p's socket, listening at pf->out_dir/<ns pid>.prefill: 0, or -errno with
 * p->why set. */
int prefill_offer(struct gpu_prefill *pf, struct pf_proc *p);
/* Serve each process's socket once, until all were served, none connects
 * for a minute, or gpu_prefill_end writes to pf->wake. */
void prefill_serve(struct gpu_prefill *pf);

#endif
