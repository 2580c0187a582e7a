/* SPDX-License-Identifier: Apache-2.0 */
/* gpumem.h — thawd's side of libthaw-cuda.so (interpose/, the library
 * preloaded into GPU functions; docs/DESIGN.md "GPU memory").
 *
 * Before the driver's checkpoint, each CUDA process of a function is asked
 * to SAVE: hold its CUDA calls, save its movable device memory into
 * <out>/gpu-<ns pid>.mem and unmap it.  After the driver's restore and
 * unlock, it is asked to RESTORE: map and copy that memory back from the
 * RAM tier, then let its calls go.  The questions are a real-time signal
 * (sigqueue), the answers a status file per process in the out directory
 * (common/gpumem_protocol.h): nothing stays open across the CRIU dump.
 */
#ifndef THAW_GPUMEM_H
#define THAW_GPUMEM_H

#include "common/gpumem_protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A process's answer: the record it wrote (gpumem_protocol.h). */
struct gpumem_status {
	bool answered; /* false: error says why there is no answer */
	/* ok, error (the library's words, or why it did not answer), allocs,
	 * bytes, dev_bytes, the times…: GPUMEM_RECORD_FIELDS. */
	struct {
		GPUMEM_RECORD_MEMBERS
	};
};

/* The process's memory moved: private memory saved, or shared memory
 * carried (an importer saves no bytes of its own, yet its RESTORE takes its
 * memory back from its creator). */
static inline bool gpumem_carried(const struct gpumem_status *st)
{
	return st->ok && (st->allocs || st->shared_allocs);
}

/* Whether the library is mapped into pid (it loaded there). */
bool gpumem_loaded(pid_t pid);

/* Ask each of the n processes pids (ns_pids: the same processes' pids in
 * the container, which name their files) to do op, then wait for all the
 * answers in out_dir (the host path of GPUMEM_OUT_DEST) for at most
 * timeout_ms.  st[i] is process i's answer.  0 when every process
 * answered, ok or not; -ETIMEDOUT or -ESRCH when one did not (its
 * st[i].error says which).  Only ask a process gpumem_loaded() found the
 * library in: thaw's signal would end any other. */
int gpumem_request(const pid_t *pids, const pid_t *ns_pids, size_t n, enum gpumem_op op,
		   const char *out_dir, unsigned timeout_ms, struct gpumem_status *st);

/* SAVE for each of the n processes that has the library (the others are
 * left to the driver: st[i].error says why, st[i].ok false); *moved is how
 * many moved their memory.  why gets, when none did, the first reason (a
 * process without the library, the library's own words); "" otherwise.
 * 0, or -errno when a process could not be asked or did not answer in
 * time (it may still be saving), or -EIO when one's save failed and it
 * could not put its memory back (st[i].held: its calls stay held): the
 * snapshot cannot go on. */
int gpumem_save_all(const pid_t *pids, const pid_t *ns_pids, size_t n, const char *out_dir,
		    unsigned timeout_ms, struct gpumem_status *st, size_t *moved, char *why,
		    size_t whylen);

/* A copy back is at the link's speed: seconds for the largest GPUs. */
#define GPUMEM_RESTORE_TIMEOUT_MS (5 * 60 * 1000)

/* RELEASE to each that has the library (no answer is awaited): the copy back's pinned memory
 * is let go, once the start has answered. */
void gpumem_release(const pid_t *pids, size_t n);

/* The library to preload: $THAW_GPUMEM_LIB, else libthaw-cuda.so beside
 * the running program.  0, or -ENOENT (why says where it looked). */
int gpumem_library(char *path, size_t len, char *why, size_t whylen);

/* "3 allocations, 1.2 GiB" etc.: a status in one line for logs. */
void gpumem_describe(const struct gpumem_status *st, char *buf, size_t len);

#endif
