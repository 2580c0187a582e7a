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

/* The steps of a start (restore/instance.c, "The start path, step by
 * step" in docs/DESIGN.md) and of a cold boot (restore/instance_boot.c):
 * where a start failed.  Their names (fault_step_name) are the phases of
 * its timings and the words of its failure ("failed at ready"). */
#define FAULT_STEPS(X)                                                         \
	X(LOAD, "load")                 /* its manifest and spec read */      \
	X(IMAGE, "image")               /* its image taken from the cache */  \
	X(MATERIALIZE, "materialize")   /* its chunks read out of the store */ \
	X(SETUP, "setup")               /* its directory, namespace, bundle */ \
	X(CRIU_RESTORE, "criu_restore") /* runc restore */                    \
	X(ENDPOINT, "endpoint")         /* its shim listening */              \
	X(STANDBY, "standby")           /* parked as a standby */             \
	X(LAZY_WAIT, "lazy_wait")       /* its lazy pages' daemon */          \
	X(GPU_RESTORE, "gpu_restore")   /* the driver's restore, the fill */  \
	X(READY, "ready")               /* its readiness check */             \
	X(RECORD, "record")             /* its record written */              \
	X(BOOT, "boot")                 /* a cold boot's runc run */          \
	X(WARMUP, "warmup")             /* a cold boot's warm-up calls */

enum fault_step {
	FAULT_NONE = 0,
#define FAULT_STEP_ENUM(e, name) FAULT_##e,
	FAULT_STEPS(FAULT_STEP_ENUM)
#undef FAULT_STEP_ENUM
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
/* The step's name, as the start's phases name it ("materialize"); "" for
 * FAULT_NONE. */
const char *fault_step_name(enum fault_step step);

#endif
