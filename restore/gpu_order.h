/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_order.h — the order of thaw's own calls into the CUDA driver around
 * the driver's restores (docs/DESIGN.md, "Bursts").
 *
 * The driver serialises its calls with its restores: beside a burst of 8
 * restores every other call waits (bench/RESULTS.md, "Bursts"), save a
 * copy, which runs at the link's speed through them.  A fill's
 * allocations (~350 calls for the GPU example) made while the restores ran
 * took 1.7 s on the H200 and its copy then came after them, one fill after
 * another: the starts waited up to 0.8 s for their fills.  Made before the
 * restores begin (~40 ms a fill alone), they are copied while the restores
 * run.  So:
 *
 *   - a fill says when each of its processes begins making its
 *     allocations (once its file is pinned) and when they are made;
 *   - a start's driver restore first waits, at most GPU_ORDER_WAIT_MS,
 *     until every fill making allocations then, begun no later than its
 *     own, has made them.  Not for a pin: a file the pin cache does not
 *     hold yet takes ~0.3-0.9 s to pin (a `thaw start`, or a snapshot's
 *     first start), which the restore runs beside, as it always did;
 *   - what thawd lets go of after a start (unmapping, releasing) waits,
 *     at most GPU_ORDER_QUIET_MS, until no start is in its GPU restore:
 *     nothing needs it soon, and every call of it would wait behind them.
 *
 * Both waits are off unless THAW_GPU_ORDER=1.  Measured alike (each on a
 * thawd of its own, primed alike, each burst from a quiet GPU), bursts of 8
 * were quicker without them: 201 at p50 / p99 1546 / 1624 ms against
 * 1629 / 1724 with them, no start waiting for its fill either way (H200,
 * 32 starts each; bench/RESULTS.md).  The 0.8 s waits for fills that made
 * the order were measured before a fill's access was set in runs, and the
 * gain it showed then came of a comparison that favoured the default.
 */
#ifndef THAW_GPU_ORDER_H
#define THAW_GPU_ORDER_H

#include <stdint.h>

/* The most a restore waits for fills' allocations, and a let-go for the
 * restores in flight. */
#define GPU_ORDER_WAIT_MS 500
#define GPU_ORDER_QUIET_MS 10000

/* A fill's place among the fills making their allocations.  The caller
 * owns it (zeroed). */
struct gpu_making {
	uint64_t seq;	/* when it first began (0: not yet) */
	int left;	/* its processes making theirs now */
	struct gpu_making *next;
};

/* One of m's processes begins making its allocations. */
void gpu_order_making(struct gpu_making *m);

/* That process has made them (or given up). */
void gpu_order_made(struct gpu_making *m);

/* m is done, whatever is left of it (a fill ended early).  Twice is fine. */
void gpu_order_forget(struct gpu_making *m);

/* Before a start's driver restore: wait, at most GPU_ORDER_WAIT_MS, until
 * no fill begun no later than own (NULL, or own not begun yet: any fill) is
 * making its allocations; the start then counts as restoring until
 * gpu_order_restored.  The ms waited. */
double gpu_order_restore_begin(const struct gpu_making *own);

/* The start's GPU restore is over (done or failed). */
void gpu_order_restored(void);

/* Wait, at most GPU_ORDER_QUIET_MS, until no start is restoring. */
void gpu_order_quiet(void);

#endif
