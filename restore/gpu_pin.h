/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_pin.h — the RAM tier's device-memory files, mapped and pinned once for
 * every fill that copies from them (restore/gpu_prefill.h).
 *
 * Pinning is most of a fill (~25 ms a GiB, under the driver's own lock),
 * and a burst of starts of one function would pin the same pages once
 * each, one after another.  The pages are the tier's page cache: pinning
 * them costs no memory while the file lives.  A file no fill has used for
 * GPU_PIN_IDLE_S, or that is gone or replaced, is let go by a reaper thread
 * (so that a deleted file's pages are not held); so is what a context
 * standby kept (gpu_pin_keep) once its holder is gone.  gpu_pin_stop ends
 * the reaper and lets go of everything unused (thawd's shutdown).
 *
 * Call only once prefill_driver_load (gpu_prefill_cuda.h) has returned
 * true.  Thread-safe.
 */
#ifndef THAW_GPU_PIN_H
#define THAW_GPU_PIN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define GPU_PIN_IDLE_S 30

/* A file of the cache.  A fill reads base, len and pinned; the rest is the
 * cache's own (gpu_pin.c). */
struct pinned_file {
	char *base;   /* the whole file, mapped read-only and shared */
	size_t len;
	bool *pinned; /* per PIECE: pinned for every context (a piece that
		       * could not be is pinned by the fill that copies it) */
	size_t npieces;
	/* The cache's. */
	char path[PATH_MAX + 64];
	dev_t dev;
	ino_t ino;
	struct timespec mtime; /* a file rewritten in place is another file */
	int ordinal;	       /* the device whose context pinned it */
	int users;
	int state; /* 0 pinning, 1 done (pinned, or failed) */
	bool failed;
	uint64_t last_used;
	struct pinned_file *next;
};

/* The pinned mapping of the file at path, made (pinned in ordinal's
 * context, for every context) if the cache has none of that file as it is
 * now; a caller that finds it being made waits for it.  NULL when it cannot
 * be mapped.  gpu_pin_put when done. */
struct pinned_file *gpu_pin_get(const char *path, int ordinal);
void gpu_pin_put(struct pinned_file *f);

/* Keep path pinned (gpu_pin_get) while process holder lives, or until
 * gpu_pin_unkeep(holder).  Best effort: nothing kept where it cannot be. */
void gpu_pin_keep(pid_t holder, const char *path, int ordinal);
/* What holder kept is no longer kept. */
void gpu_pin_unkeep(pid_t holder);

/* Stop the reaper and wait for it to end, then let go of every keep and
 * every file no fill is using (the rest stay until their gpu_pin_put, and
 * are let go by a later reaper or stop).  For thawd's shutdown, once no
 * start runs.  A later gpu_pin_get starts the reaper again.  Nothing to do
 * where no file was ever pinned. */
void gpu_pin_stop(void);

#endif
