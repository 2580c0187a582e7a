/* SPDX-License-Identifier: Apache-2.0 */
/* host_record.h — what a snapshot's restore depends on, recorded when it is
 * made, and whether a host has it.
 *
 * A snapshot's meta holds "host" (docs/DESIGN.md, "Restore or boot"):
 *
 *	{"kernel": "6.1.0-18-amd64", "arch": "x86_64", "criu": "4.2.1",
 *	 "xfeatures": 743,                        (x86: the XSAVE state components
 *	                                           the OS enables, XCR0)
 *	 "driver": {"cuda": 13000, "version": "580.159.04"},   (where a driver is usable)
 *	 "gpus": [{"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}],
 *	 "image": "sha256:…"}                     (a snapshot made on an image)
 *
 * A snapshot's "gpus" are the GPUs its function was given; a host's, all of
 * its own.  What is compared, each where it decides whether the restore can
 * work at all (the rest is recorded, to be read when a restore fails):
 *
 * - arch: CRIU restores onto the architecture it dumped on only;
 * - xfeatures: CRIU's FPU check (its default, --cpu-cap=fpu) refuses an image
 *   whose XSAVE components (AVX-512, AMX, PKRU…) the CPU lacks: checked here
 *   first, naming them, rather than as CRIU's error after a materialisation;
 * - criu: a CRIU older than the one that dumped may not read its images (a
 *   newer one reads older images: CRIU keeps them readable);
 * - a GPU snapshot only: the driver's version (the CUDA checkpoint is the
 *   driver's own format: restored by the same driver only), and each GPU's
 *   model and compute capability (its device state and kernels are of that
 *   architecture).  A host with no usable driver, or fewer GPUs than the
 *   snapshot's, is not "different": a start answers 503 no_gpu, as it did.
 *
 * Not compared: the kernel (CRIU checks, at restore, the kernel features it
 * needs, and a kernel of another release restores the images fine), and the
 * image (a start brings that very image by its digest, instance.h).
 */
#ifndef THAW_PREWARM_HOST_RECORD_H
#define THAW_PREWARM_HOST_RECORD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/config.h"
#include "common/cuda.h"

/* This host's record: its kernel, architecture and CPU, c->criu's version
 * (criu --version), the driver and every GPU, where there is one.  A new
 * object, or NULL out of memory.  Forks criu: a caller that asks often
 * keeps it. */
json_t *host_record_here(const struct thaw_config *c);
/* The first line prog prints for --version (runc's, CRIU's), into buf; ""
 * if it cannot be run. */
void host_record_version(const char *prog, char *buf, size_t len);

/* The record a snapshot keeps: here's (host_record_here), with only gpus
 * (the function's n GPUs; n 0: none) and the image digest (NULL or "":
 * none).  A new object, or NULL. */
json_t *host_record_snapshot(const json_t *here, const struct cuda_device *gpus, size_t n,
			     const char *image_digest);

/* Can the snapshot whose record is rec (its meta's "host",
 * function/snapshot_meta.h; gpu: a GPU function's) be restored on the host
 * here describes?  0: yes, or nothing to tell (rec NULL: a snapshot made
 * before records); 1: no, and why names every difference ("CRIU 4.1 here is
 * older than the snapshot's 4.2.1; …"). */
int host_record_compare(const json_t *rec, bool gpu, const json_t *here, char *why, size_t len);

#endif
