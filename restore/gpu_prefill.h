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
 * an older layout whose GPUs are not in host order, no driver,
 * THAW_GPU_PREFILL=0) or fails, no socket is offered and the library
 * copies as before.  But not from a RAM
 * tier entry unlike its checksums (restore/tier_sums.h): the fill checks
 * what it copies, and where it does not apply it only checks the files.
 */
#ifndef THAW_GPU_PREFILL_H
#define THAW_GPU_PREFILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct gpu_prefill;

struct gpu_placement;
struct snapshot_meta;

/* Start filling, in a thread, for the snapshot's processes (its meta's
 * gpu_memory.ns_pids) whose layout is in tier_dir, on placement's GPUs
 * (each allocation on its own, every GPU copied at once; their claims the
 * memory made is then taken from: it lives until gpu_prefill_end);
 * offered on out_dir/<ns pid>.prefill once filled.  Where no fill applies
 * but tier_dir has checksums, only a check of the files;
 * where neither applies, only the library's turn on placement's GPUs for
 * its own copy (gpu_turn.h).  NULL where placement names no GPU and no fill
 * or check applies. */
struct gpu_prefill *gpu_prefill_start(const struct snapshot_meta *sm, const char *tier_dir,
				      const char *out_dir, struct gpu_placement *placement);

/* Does thawd fill p's memory (or has it), rather than the library copy
 * it?  NULL: false. */
bool gpu_prefill_fills(const struct gpu_prefill *p);

/* p's place among the fills making their allocations, for the start's
 * driver restore to wait for (gpu_order.h); NULL where it fills nothing. */
struct gpu_making;
const struct gpu_making *gpu_prefill_making(const struct gpu_prefill *p);

/* Wait until the memory is filled and offered (before RESTORE is asked).
 * 0, or -errno: nothing is offered then (-EUCLEAN: the files are damaged,
 * and the library must not copy them either).  NULL: 0. */
int gpu_prefill_ready(struct gpu_prefill *p);

/* When p's copy began and ended (now_ns()'s clock; 0: not yet, or it did
 * not copy).  The fills of one GPU copy one after another, in the order
 * gpu_prefill_start was called: the first start gets its bytes first. */
void gpu_prefill_copy_span(const struct gpu_prefill *p, uint64_t *begin, uint64_t *end);

/* Stop offering, give back thawd's handles (the memory lives on in the
 * processes that mapped it), remove the sockets, free p.  summary (len > 0)
 * gets one line for the log.  NULL is fine. */
void gpu_prefill_end(struct gpu_prefill *p, char *summary, size_t len);

/* gpu_memory_restore (gpu_restore.h) with what pf filled offered first,
 * then pf ended; pf NULL: gpu_memory_restore alone.  Where the library
 * copies it all (no fill, or a failed one), it does so in its turn on the
 * GPUs, in the order the starts come here.  id names the instance
 * in the log.  -EUCLEAN, nothing asked of the library, where pf found the
 * tier's files damaged (reported: tier_damage_report). */
int gpu_prefill_restore(struct gpu_prefill *pf, const struct snapshot_meta *sm, const pid_t *pids,
			size_t n, const char *out_dir, const char *id, double *copy_ms);

/* The take of a standby that holds its contexts (restored and unlocked by
 * the driver when it was made, its device memory unmapped and its calls
 * held): on GPU ordinal, which must still be uuid, room checked for the
 * device memory thaw carries (its meta's gpu_memory.bytes), that memory
 * filled from tier_dir and mapped by each of the n processes pids, whose
 * calls then go on (gpu_prefill_restore).  No driver call but the fill's.
 * 0, or -errno with the reason set (-EAGAIN: no room on that GPU now). */
int gpu_context_take(const struct snapshot_meta *sm, int ordinal, const char *uuid,
		     const pid_t *pids, size_t n, const char *tier_dir, const char *out_dir,
		     const char *id, double *copy_ms);

/* Keep the tier's files of the snapshot's saved device memory (its meta's
 * gpu_memory processes, in tier_dir) pinned for GPU ordinal while process holder lives
 * or until gpu_prefill_unkeep: a context standby's take then copies
 * without pinning (~25 ms a GiB).  Best effort: what cannot be pinned now
 * is pinned by the take's fill, as a start's is. */
void gpu_prefill_keep(pid_t holder, const struct snapshot_meta *sm, const char *tier_dir,
		      int ordinal);
/* What holder kept is no longer kept (its take filled from it, or it
 * stopped; a holder that is gone is let go by itself within seconds). */
void gpu_prefill_unkeep(pid_t holder);

/* At thawd's shutdown, once no start runs: the pin cache's reaper stopped
 * and joined, every keep and every pinned tier file let go (gpu_pin.h).
 * Nothing to do where no fill or keep ever applied. */
void gpu_prefill_finish(void);

#endif
