/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill.h — a GPU start's device memory made and filled by thawd
 * while CRIU and the driver restore (docs/DESIGN.md, "GPU memory").
 *
 * libthaw-cuda's save wrote, beside each process's saved device memory
 * (gpu-<ns pid>.mem in the RAM tier), its layout (gpu-<ns pid>.layout).
 * From it thawd makes the same allocations on the instance's GPU, in its
 * own CUDA context, and copies the tier's file into them at the link's
 * speed, off the start's path.  At RESTORE the library receives them as
 * file descriptors over a socket in its out directory and maps them where
 * the saved memory was: the start waits for a map, not a copy.
 *
 * Everything here is an optimisation: where it does not apply (no layout,
 * a snapshot of several GPUs, no driver, THAW_GPU_PREFILL=0) or fails, no
 * socket is offered and the library copies as before.
 */
#ifndef THAW_GPU_PREFILL_H
#define THAW_GPU_PREFILL_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

struct gpu_prefill;

struct gpu_placement;

/* Start filling, in a thread, for the snapshot's processes (meta's
 * "gpu_memory"."ns_pids") whose layout is in tier_dir, on the one GPU of
 * placement (whose claim the memory made is then taken from: it lives until
 * gpu_prefill_end); offered on out_dir/<ns pid>.prefill once filled.  NULL
 * where it does not apply. */
struct gpu_prefill *gpu_prefill_start(const json_t *meta, const char *tier_dir,
				      const char *out_dir, struct gpu_placement *placement);

/* Wait until the memory is filled and offered (before RESTORE is asked).
 * 0, or -errno: nothing is offered then.  NULL: 0. */
int gpu_prefill_ready(struct gpu_prefill *p);

/* Stop offering, give back thawd's handles (the memory lives on in the
 * processes that mapped it), remove the sockets, free p.  summary (len > 0)
 * gets one line for the log.  NULL is fine. */
void gpu_prefill_end(struct gpu_prefill *p, char *summary, size_t len);

/* gpu_memory_restore (gpu_restore.h) with what pf filled offered first,
 * then pf ended; pf NULL: gpu_memory_restore alone.  id names the instance
 * in the log. */
int gpu_prefill_restore(struct gpu_prefill *pf, const json_t *meta, const pid_t *pids, size_t n,
			const char *out_dir, const char *id, double *copy_ms);

#endif
