/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_turn.h — copies onto the GPUs in the order their starts asked
 * (docs/DESIGN.md, "GPU memory").
 *
 * A start's device memory crosses the host-to-GPU link once: thawd's fill
 * copies it (gpu_prefill_fill.c) or, where no fill applies
 * (THAW_GPU_PREFILL=0, an older snapshot or layout that cannot tell its
 * GPUs, a failed fill), the library in the restored process does.  One
 * copy alone runs at the link's speed; a burst
 * of them side by side shares the link so that every start finishes last.
 * So each copy waits for its turn on the GPUs it copies to: the first start
 * gets its bytes after its own bytes' time, the k-th after k of them.
 *
 * A turn joins the line of each of its GPUs at once, under one lock: the
 * lines agree on who came first, so a turn that spans GPUs never waits in a
 * circle with another.  The caller owns the struct (zeroed); it must leave
 * before it is freed.
 */
#ifndef THAW_GPU_TURN_H
#define THAW_GPU_TURN_H

#include "common/cuda_abi.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_turn {
	struct gpu_turn *next[CUDA_MAX_DEVICES]; /* behind it in each GPU's line */
	bool in[CUDA_MAX_DEVICES];		 /* in that GPU's line */
	bool joined;
	uint64_t joined_ns, begin_ns, end_ns; /* now_ns(); 0: not yet */
};

/* t joins the lines of the n GPUs (ordinals; those out of range ignored).
 * Joining again, or with no GPU, does nothing. */
void gpu_turn_join(struct gpu_turn *t, const int *ordinals, size_t n);

/* Wait until t is first in each line it joined (at once where it joined
 * none); begin_ns is set. */
void gpu_turn_wait(struct gpu_turn *t);

/* t leaves its lines (done, failed, or it never copied): those behind it
 * move up.  end_ns is set where it had begun.  Leaving twice is fine. */
void gpu_turn_leave(struct gpu_turn *t);

#endif
