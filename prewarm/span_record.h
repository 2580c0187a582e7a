/* SPDX-License-Identifier: Apache-2.0 */
/* span_record.h — what the driver did with the last checkpoint of a function
 * spanning several CUDA processes or GPUs on this host.
 *
 * Whether a driver can checkpoint such a function (one CUDA process per GPU
 * talking over NCCL) is known only by trying: driver 580.159.04 refused one
 * with CUDA_ERROR_NOT_READY at the lock.  The snapshot refuses itself with
 * the driver's words; this record keeps them, with the driver's version, in
 * <data_dir>/gpu-span.json, so that `thaw doctor` says it without a cold boot
 * of its own.  One record, the last outcome: a later success replaces a
 * refusal, and a record of another driver version is shown as stale.
 */
#ifndef THAW_PREWARM_SPAN_RECORD_H
#define THAW_PREWARM_SPAN_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#define SPAN_RECORD_FILE "gpu-span.json"

struct span_record {
	char driver[64];     /* the kernel driver's version, "unknown" if not read */
	char function[128];  /* the function's id */
	char at[32];         /* when, RFC 3339 UTC */
	char error[512];     /* the driver's words; "" for a checkpoint that worked */
	bool refused;
	unsigned processes;  /* CUDA processes of the function */
	unsigned gpus;       /* GPUs it was given */
};

/* Write r (r->at filled in here) to <data_dir>/gpu-span.json, atomically.
 * 0 or -errno (logged as a warning: a record never fails a snapshot). */
int span_record_write(const char *data_dir, struct span_record *r);
/* Read it: 0, -ENOENT where no such function was ever checkpointed here,
 * -EINVAL for a file that is not a record (logged), -errno. */
int span_record_read(const char *data_dir, struct span_record *r);

#endif
