/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill_cuda.c — see gpu_prefill_cuda.h. */
#include "restore/gpu_prefill_cuda.h"
#include "common/cuda.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

struct prefill_cu prefill_cu;
static bool cu_ok;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
/* One lock a GPU: making a context takes ~0.2 s, and two GPUs' are made
 * at once (prefill_use_devices). */
static pthread_mutex_t ctx_lock[CUDA_MAX_DEVICES] = {
	[0 ... CUDA_MAX_DEVICES - 1] = PTHREAD_MUTEX_INITIALIZER
};
static cu_ctx ctxs[CUDA_MAX_DEVICES];

static void load_driver(void)
{
	struct prefill_cu *cu = &prefill_cu;

#define SYM(f, name) (cu->f = (__typeof__(cu->f))cuda_sym(name))
	cu_ok = SYM(device_get, "cuDeviceGet") && SYM(primary_retain, "cuDevicePrimaryCtxRetain") &&
		SYM(ctx_set_current, "cuCtxSetCurrent") && SYM(create, "cuMemCreate") &&
		SYM(release, "cuMemRelease") && SYM(reserve, "cuMemAddressReserve") &&
		SYM(addr_free, "cuMemAddressFree") && SYM(map, "cuMemMap") &&
		SYM(unmap, "cuMemUnmap") && SYM(set_access, "cuMemSetAccess") &&
		SYM(export_fd, "cuMemExportToShareableHandle") &&
		SYM(host_register, "cuMemHostRegister_v2") &&
		SYM(host_unregister, "cuMemHostUnregister") &&
		SYM(copy, "cuMemcpyHtoDAsync_v2") && SYM(stream_create, "cuStreamCreate") &&
		SYM(stream_sync, "cuStreamSynchronize") && SYM(stream_destroy, "cuStreamDestroy_v2");
#undef SYM
}

bool prefill_driver_load(void)
{
	pthread_once(&cu_once, load_driver);
	return cu_ok;
}

int prefill_use_device(int ordinal)
{
	int dev, r = 0;

	if (ordinal < 0 || ordinal >= CUDA_MAX_DEVICES)
		return -EINVAL;
	/* Never loaded (a start that filled nothing): no entry points. */
	if (!cu_ok)
		return -EIO;
	pthread_mutex_lock(&ctx_lock[ordinal]);
	if (!ctxs[ordinal]) {
		r = prefill_cu.device_get(&dev, ordinal);
		if (!r)
			r = prefill_cu.primary_retain(&ctxs[ordinal], dev);
	}
	pthread_mutex_unlock(&ctx_lock[ordinal]);
	if (!r)
		r = prefill_cu.ctx_set_current(ctxs[ordinal]);
	return r ? -EIO : 0;
}

/* Streams made once a GPU and kept: a fill's copy threads used to make
 * and destroy one each, on the path of every copy, and a copy beside a
 * burst of the driver's restores was 2-14x slower than alone.  A GPU's
 * streams are used by one fill at a time (its turn), but a free list
 * keeps any other use safe. */
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_stream free_streams[CUDA_MAX_DEVICES][MAX_THREADS];
static size_t nfree_streams[CUDA_MAX_DEVICES];

int prefill_stream_get(int ordinal, cu_stream *st)
{
	*st = NULL;
	if (ordinal < 0 || ordinal >= CUDA_MAX_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&stream_lock);
	if (nfree_streams[ordinal])
		*st = free_streams[ordinal][--nfree_streams[ordinal]];
	pthread_mutex_unlock(&stream_lock);
	if (*st)
		return 0;
	return prefill_cu.stream_create(st, CU_STREAM_NONBLOCKING) ? -EIO : 0;
}

void prefill_stream_put(int ordinal, cu_stream st, bool sound)
{
	if (!st)
		return;
	pthread_mutex_lock(&stream_lock);
	if (sound && ordinal >= 0 && ordinal < CUDA_MAX_DEVICES &&
	    nfree_streams[ordinal] < MAX_THREADS) {
		free_streams[ordinal][nfree_streams[ordinal]++] = st;
		st = NULL;
	}
	pthread_mutex_unlock(&stream_lock);
	if (st)
		prefill_cu.stream_destroy(st);
}

struct ctx_job {
	int ordinal, ret;
};

static void *ctx_job_run(void *arg)
{
	struct ctx_job *j = arg;

	j->ret = prefill_use_device(j->ordinal);
	return NULL;
}

int prefill_use_devices(const int *ordinals, size_t n, int *failed)
{
	struct ctx_job jobs[MAX_THREADS];
	size_t k;

	for (k = 0; k < n && k < MAX_THREADS; k++)
		jobs[k] = (struct ctx_job){ .ordinal = ordinals[k] };
	prefill_run_jobs(ctx_job_run, jobs, sizeof(jobs[0]), (int)k);
	for (size_t i = 0; i < k; i++)
		if (jobs[i].ret) {
			*failed = jobs[i].ordinal;
			return jobs[i].ret;
		}
	return 0;
}

bool prefill_pin_piece(char *p, size_t n, unsigned flags)
{
	madvise(p, n, MADV_POPULATE_READ);
	return prefill_cu.host_register(p, n, CU_HOSTREG_READ_ONLY | flags) == 0;
}

int prefill_threads_for(uint64_t len)
{
	uint64_t n = (len + SLICE_MIN - 1) / SLICE_MIN;

	return n > MAX_THREADS ? MAX_THREADS : n < 1 ? 1 : (int)n;
}

void prefill_run_jobs(void *(*fn)(void *), void *jobs, size_t size, int n)
{
	pthread_t th[PREFILL_MAX_JOBS];
	bool started[PREFILL_MAX_JOBS];

	for (int i = 0; i < n && i < PREFILL_MAX_JOBS; i++) {
		started[i] = pthread_create(&th[i], NULL, fn, (char *)jobs + i * size) == 0;
		if (!started[i])
			fn((char *)jobs + i * size);
	}
	for (int i = 0; i < n && i < PREFILL_MAX_JOBS; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}
