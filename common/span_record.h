/* SPDX-License-Identifier: Apache-2.0 */
/* span_record.h — what the driver did with the last checkpoint or restore
 * of a function spanning several CUDA processes or GPUs on this host.
 *
 * Whether a driver can checkpoint and restore such a function (one CUDA
 * process per GPU talking over NCCL) is known only by trying: driver
 * 580.159.04 refused one with CUDA_ERROR_NOT_READY at the lock, and the
 * restore of ranks sharing memory it would carry with NOT_SUPPORTED.  The
 * snapshot (prewarm_gpu.c) and the start (restore/instance.c) refuse
 * themselves with the driver's words; this record keeps them, with the
 * step the driver refused, what the spec could set to avoid it and the
 * driver's version, in <data_dir>/gpu-span.json, so that `thaw doctor` says
 * it without a cold boot of its own.  One record, the last outcome: a later
 * success replaces a refusal, and a record of another driver version is
 * shown as stale.
 */
#ifndef THAW_COMMON_SPAN_RECORD_H
#define THAW_COMMON_SPAN_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include "common/cuda.h"

#define SPAN_RECORD_FILE "gpu-span.json"

struct span_record {
	char driver[64];     /* the kernel driver's version, "unknown" if not read */
	char function[128];  /* the function's id */
	char at[32];         /* when, RFC 3339 UTC */
	char step[16];       /* what was refused (cuda_step_name): "lock" or
			      * "checkpoint" (a snapshot's), "restore" or
			      * "unlock" (a start's); "" where it worked, or in
			      * a record from before steps (a checkpoint's) */
	char error[512];     /* the driver's words; "" for a checkpoint that worked */
	char hint[512];      /* what the spec could set to avoid it
			      * (span_refusal_hint); "" where none is known */
	bool refused;
	unsigned processes;  /* CUDA processes of the function */
	unsigned gpus;       /* GPUs it was given */
};

/* Write r (r->at filled in here) to <data_dir>/gpu-span.json, atomically.
 * 0 or -errno (logged as a warning: a record never fails a snapshot). */
int span_record_write(const char *data_dir, struct span_record *r);
/* Read it: 0, -ENOENT where no such function was ever checkpointed here,
 * -EINVAL for a file that is not a record (logged), -errno.  A record
 * written before steps and hints reads them as "". */
int span_record_read(const char *data_dir, struct span_record *r);

/* What most likely made the driver refuse a function of several processes
 * at step with err (the call's -errno), and what its spec could set to
 * avoid it (NCCL's environment); "" where nothing is known.  From
 * bench/RESULTS.md ("Tensor parallel"): driver 580 refuses the restore of
 * processes that share memory it would carry (NOT_SUPPORTED for exported
 * VMM handles, INVALID_VALUE for legacy CUDA IPC), and the lock of one whose
 * GPU work never ends (a rank waiting inside an NCCL collective). */
const char *span_refusal_hint(enum cuda_step step, int err);

/* thaw doctor's gpu-span line for r, the host's kernel driver being driver
 * now: into buf; true where it is a warning (a refusal by this driver). */
bool span_record_describe(const struct span_record *r, const char *driver, char *buf,
			  size_t len);

#endif
