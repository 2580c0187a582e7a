/* SPDX-License-Identifier: Apache-2.0 */
/* fault.h — what a failure was, as facts a caller decides on, beside its
 * -errno: the step that failed, and what it failed on.  The words of the
 * failure are for people (log_last_error()); a decision reads these fields,
 * never the words.
 *
 * Kept small and general, so that a step that has a fact to give adds a
 * value to enum fault_step and, where it is new, a field here.  Today the
 * restore engine fills one where a chunk of the store is damaged or
 * missing (restore/engine.c, store/store_get.c), instance_start hands it to
 * its caller in struct instance's fault, and the server's fallback reads
 * its chunk (server/fallback.c).
 *
 * Between the engine and the start that called it, the fault travels as the
 * calling thread's last fault (fault_note, fault_take), as the words do in
 * log_last_error(): the layers between (the RAM tier's build and its lease)
 * pass an int.
 */
#ifndef THAW_COMMON_FAULT_H
#define THAW_COMMON_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#define FAULT_CHUNK_LEN 32 /* a chunk's SHA-256 (store/chunk.h, CHUNK_HASH_LEN) */

enum fault_step {
	FAULT_NONE = 0,
	FAULT_MATERIALIZE, /* a snapshot's chunks read out of the store */
};

struct fault {
	enum fault_step step;
	int err;                        /* -errno; 0 for none */
	bool has_chunk;                 /* it failed on a chunk (err says how: -EBADMSG
					 * damaged, -ENOENT missing, -ENOSPC writing it…) */
	uint8_t chunk[FAULT_CHUNK_LEN]; /* that chunk's SHA-256 */
};

/* This thread's last fault becomes *f (a copy). */
void fault_note(const struct fault *f);
/* This thread's last fault into *out (FAULT_NONE if none), and cleared. */
void fault_take(struct fault *out);
void fault_clear(void);
/* The step's name, as the start's phases name it ("materialize"); "" for FAULT_NONE. */
const char *fault_step_name(enum fault_step step);

#endif
