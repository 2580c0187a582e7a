/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill_cuda.h — what thawd's fill (gpu_prefill_fill.c) and its pin
 * cache (gpu_pin.c) share: the driver's entry points they call, thawd's own
 * context on each GPU, and the pieces and threads they work in.
 *
 * thawd keeps one primary context per GPU it has filled memory on (made at
 * the first fill: ~0.2 s and some GPU memory, once).  The entry points are
 * looked up once, the first time a fill or a keep applies
 * (prefill_driver_load); none is called before that has returned true.
 */
#ifndef THAW_GPU_PREFILL_CUDA_H
#define THAW_GPU_PREFILL_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cuda_abi.h"

/* A file is pinned, checked and copied in pieces this big: small enough
 * that a piece's copy runs while the next is pinned, big enough that the
 * driver's per-call cost stays small. */
#define PIECE (64ull << 20)
/* A thread per this many bytes of a file, up to MAX_THREADS: one thread
 * alone cannot check pieces as fast as the link copies them (a piece's
 * hash, ~5.3 GB/s a thread on the H200, takes about as long as its copy
 * on one of 9 streams: a 2.23 GiB fill on 9 threads copied in 62 ms
 * checked against 52 unchecked; on 16 the hashes hide behind the link). */
#define SLICE_MIN (128ull << 20)
#define MAX_THREADS 16
/* The most jobs prefill_run_jobs runs at once: MAX_THREADS for each of
 * the GPUs one process may span. */
#define PREFILL_MAX_JOBS (MAX_THREADS * 8)

/* The driver's entry points a fill and the pin cache call. */
struct prefill_cu {
	cu_fn_cuDeviceGet *device_get;
	cu_fn_cuDevicePrimaryCtxRetain *primary_retain;
	cu_fn_cuCtxSetCurrent *ctx_set_current;
	cu_fn_cuMemCreate *create;
	cu_fn_cuMemRelease *release;
	cu_fn_cuMemAddressReserve *reserve;
	cu_fn_cuMemAddressFree *addr_free;
	cu_fn_cuMemMap *map;
	cu_fn_cuMemUnmap *unmap;
	cu_fn_cuMemSetAccess *set_access;
	cu_fn_cuMemExportToShareableHandle *export_fd;
	cu_fn_cuMemHostRegister_v2 *host_register;
	cu_fn_cuMemHostUnregister *host_unregister;
	cu_fn_cuMemcpyHtoDAsync_v2 *copy;
	cu_fn_cuStreamCreate *stream_create;
	cu_fn_cuStreamSynchronize *stream_sync;
	cu_fn_cuStreamDestroy_v2 *stream_destroy;
};
extern struct prefill_cu prefill_cu;

/* Look the entry points up (once, whoever asks first; cuda_init must have
 * succeeded): true when the driver has every one. */
bool prefill_driver_load(void);

/* thawd's context on device ordinal, made if none, current on this thread:
 * 0, -EINVAL for an ordinal out of range, -EIO where the driver refuses. */
int prefill_use_device(int ordinal);

/* thawd's contexts on the n GPUs ordinals (n <= MAX_THREADS), those not
 * made yet made at once, each on a thread of its own (a span start makes
 * all of its GPUs' in one context's time).  0, or -errno with *failed the
 * first ordinal that has none. */
int prefill_use_devices(const int *ordinals, size_t n, int *failed);

/* Pin [p, p + n) of a file's mapping read-only (with flags, CU_HOSTREG_*),
 * its pages populated first by this thread (in parallel with the others':
 * the driver then only pins, under its own lock).  true when pinned. */
bool prefill_pin_piece(char *p, size_t n, unsigned flags);

/* A stream on GPU ordinal for one copy thread (its context current:
 * prefill_use_device): one kept from an earlier copy, else made now.
 * prefill_stream_put gives it back once its copies are done (sound: it saw
 * no error; else it is destroyed). */
int prefill_stream_get(int ordinal, cu_stream *st);
void prefill_stream_put(int ordinal, cu_stream st, bool sound);

/* The threads for len bytes of a file: one per SLICE_MIN, 1 to
 * MAX_THREADS. */
int prefill_threads_for(uint64_t len);

/* fn on each of the n jobs (size bytes apart from jobs; n <=
 * PREFILL_MAX_JOBS) on a thread of its own, or here where a thread cannot
 * start; returns when all have ended. */
void prefill_run_jobs(void *(*fn)(void *), void *jobs, size_t size, int n);

#endif
