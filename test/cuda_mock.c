/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_mock.c — a fake libcuda.so.1 for test_cuda, so that the CUDA shim's
 * own logic (symbol loading, argument structs, UUIDs, state checks, CUresult
 * to -errno) is tested on machines without a GPU too.  test_cuda compiles it
 * at run time (cc -shared) and runs itself again with it on LD_LIBRARY_PATH.
 *
 * It behaves like driver 580 as seen on the H100: two GPUs; a pid listed in
 * $MOCK_CUDA_PIDS holds CUDA state (RUNNING at first), any other pid answers
 * CUDA_ERROR_NOT_INITIALIZED; the checkpoint calls move a process through
 * RUNNING -> LOCKED -> CHECKPOINTED -> LOCKED -> RUNNING and refuse other
 * orders with CUDA_ERROR_ILLEGAL_STATE.  Reserved fields must be zero.
 * Knobs: MOCK_CUDA_NO_DEVICE (cuInit fails), a lock timeout of 1 ms times out,
 * MOCK_CUDA_RESTORE_OOM (restore runs out of memory), MOCK_CUDA_RESTORE_FAIL_PID
 * (the restore of that pid runs out of memory), MOCK_CUDA_PAIRS_LOG (each
 * restore appends "pid old>new old>new…" to that file, "pid same" without
 * pairs).
 *
 * It is also a fake libnvidia-ml.so.1 (the test links that name to this
 * file, so that both share one state): with MOCK_NVML_FREE_MIB="a,b" GPU i
 * has that much free, less MOCK_CUDA_PROC_MIB for each listed process that
 * holds its GPU state (not checkpointed): process k of MOCK_CUDA_PIDS holds
 * GPU k % 2.  GPU i is /dev/nvidia(i+MOCK_NVML_MINOR_BASE).  Without
 * MOCK_NVML_FREE_MIB, nvmlInit fails (free memory unknown).
 *
 * Device memory (for libthaw-cuda's tests, test_gpumem): a device pointer
 * is an address of this process.  cuMemAlloc is anonymous memory; the VMM
 * calls are real address reservations (PROT_NONE) with memfd "physical"
 * allocations mapped over them, so that an unmapped range faults like
 * freed device memory and new memory reads as zero.  Copies are memcpy;
 * registering host memory does nothing.  cuGetProcAddress (both
 * signatures) resolves from a table, the _v2 entry point at the versions
 * the driver gives it.  mock_cuda_mem() tells a test what is live.
 * Knob: MOCK_CUDA_HTOD_LOG=FILE appends "pid begin end dev" (CLOCK_MONOTONIC
 * ns; dev: the GPU of the memory written, -1 unknown) for each
 * cuMemcpyHtoDAsync, to see whose copies ran when, and onto which GPU.
 * Knob: MOCK_CUDA_HTOD_MEET: a cuMemcpyHtoDAsync onto one GPU waits (up to
 * 10 s) until one onto another GPU has begun in this process: copies onto
 * two GPUs that run side by side overlap whatever the machine's load, ones
 * that run one after the other do not (a new value: a new meeting).
 * Knob: MOCK_CUDA_CTX_DEVICE: the device cuCtxGetDevice answers (0).
 * Knob: MOCK_CUDA_VISIBLE="1,0": the process sees the GPUs in that order
 * (its ordinal k is the GPU listed k-th: its UUID, where cuMemCreate's
 * memory goes); mock_cuda_dev() tells which GPU memory is on.
 * Knob: MOCK_CUDA_CTX_MEET: the same meeting for cuDevicePrimaryCtxRetain
 * (contexts made on two GPUs at once, or not); mock_cuda_meet_missed()
 * counts the meetings either knob waited for in vain.
 * Knob: MOCK_CUDA_HTOD_DELAY_MS sleeps in each cuMemcpyHtoDAsync (a slow
 * copy back, to see the function held while it runs).
 * Knob: MOCK_CUDA_ACCESS_LOG=FILE: a line a cuMemSetAccess (access_log),
 * which answers INVALID_VALUE for a range not mapped whole, as the driver.
 * Knob: MOCK_CUDA_CREATE_DELAY_MS sleeps in each cuMemCreate (a driver
 * slow to make memory); MOCK_CUDA_CREATE_LOG=FILE appends the
 * CLOCK_MONOTONIC ns at which each cuMemCreate returned.
 * Knob: MOCK_NVML_BLOCK_FILE (nvml_block): a hung nvmlDeviceGetMemoryInfo.
 * Knob: MOCK_CUDA_FAIL_FILE (mock_fails): a call that fails from its Nth on.
 * A VMM handle counts its references as the driver does (created or
 * imported 1, each retain +1, each release -1: the memory dies once none
 * is left and nothing maps it); mock_cuda_access() tells the locations a
 * mapping was given access for.
 *
 * The host a snapshot depends on (prewarm/host_record.h), to make it
 * another: MOCK_CUDA_DRIVER_VERSION (cuDriverGetVersion, default 13000),
 * MOCK_NVML_DRIVER (the kernel driver's version, default 580.159.04),
 * MOCK_CUDA_GPU_NAME (default "Mock GPU"), MOCK_CUDA_CC (the compute
 * capability, default "9.0").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The driver's ABI as thaw has it (common/cuda_abi.h, checked against
 * cuda.h by test_cuda): every entry point declared from it, so that each
 * definition below has the type thaw calls it with. */
#include "../common/cuda_abi.h"
#define MOCK_DECLARE(sym, params) cu_result sym params;
CU_ENTRY_POINTS(MOCK_DECLARE)
CU_ENTRY_POINTS_UNCHECKED(MOCK_DECLARE)

enum { RUNNING, LOCKED, CHECKPOINTED };
#define NGPU 2

static int inited;
static struct {
	int pid;
	int state;
} procs[16];

static int proc_index(int pid)
{
	const char *list = getenv("MOCK_CUDA_PIDS");
	char buf[256], *save = NULL;
	int n = 0;

	if (!list)
		return -1;
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t && n < 16; t = strtok_r(NULL, ",", &save), n++) {
		if (atoi(t) != pid)
			continue;
		if (procs[n].pid != pid) {
			procs[n].pid = pid;
			procs[n].state = RUNNING;
		}
		return n;
	}
	return -1;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return 0;
	return 1;
}

/* MOCK_CUDA_VISIBLE="1,0": the process's device ordinal k is the mock's
 * GPU of the k-th index listed (as CUDA_VISIBLE_DEVICES reorders them);
 * without it, ordinal k is GPU k. */
static int host_gpu(int ordinal)
{
	const char *v = getenv("MOCK_CUDA_VISIBLE");
	char buf[64], *save = NULL, *t;
	int k = 0;

	if (!v)
		return ordinal;
	snprintf(buf, sizeof(buf), "%s", v);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), k++)
		if (k == ordinal)
			return atoi(t);
	return ordinal;
}

static void gpu_uuid(int i, cu_uuid *u)
{
	for (int k = 0; k < 16; k++)
		u->bytes[k] = (unsigned char)(i * 16 + k);
}

static int known_uuid(const cu_uuid *u)
{
	cu_uuid g;

	for (int i = 0; i < NGPU; i++) {
		gpu_uuid(i, &g);
		if (!memcmp(&g, u, sizeof(g)))
			return 1;
	}
	return 0;
}

static void log_pairs(int pid, const cu_restore_args *a)
{
	const char *path = getenv("MOCK_CUDA_PAIRS_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;

	if (!f)
		return;
	fprintf(f, "%d", pid);
	if (!a || !a->gpuPairsCount)
		fprintf(f, " same");
	for (unsigned int k = 0; a && k < a->gpuPairsCount; k++)
		fprintf(f, " %d>%d", a->gpuPairs[k].oldUuid.bytes[0] / 16, a->gpuPairs[k].newUuid.bytes[0] / 16);
	fprintf(f, "\n");
	fclose(f);
}

cu_result cuInit(unsigned int flags)
{
	if (getenv("MOCK_CUDA_NO_DEVICE"))
		return 100;
	if (flags)
		return 1;
	inited = 1;
	return 0;
}

cu_result cuGetErrorName(cu_result e, const char **s)
{
	static const struct {
		int e;
		const char *name;
	} names[] = {
		{ 0, "CUDA_SUCCESS" },
		{ 1, "CUDA_ERROR_INVALID_VALUE" },
		{ 2, "CUDA_ERROR_OUT_OF_MEMORY" },
		{ 3, "CUDA_ERROR_NOT_INITIALIZED" },
		{ 100, "CUDA_ERROR_NO_DEVICE" },
		{ 101, "CUDA_ERROR_INVALID_DEVICE" },
		{ 401, "CUDA_ERROR_ILLEGAL_STATE" },
		{ 801, "CUDA_ERROR_NOT_SUPPORTED" },
		{ 909, "CUDA_ERROR_TIMEOUT" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].e == e) {
			*s = names[i].name;
			return 0;
		}
	}
	*s = NULL;
	return 1;
}

cu_result cuDriverGetVersion(int *v)
{
	const char *e = getenv("MOCK_CUDA_DRIVER_VERSION");

	*v = e && *e ? atoi(e) : 13000;
	return 0;
}

cu_result cuDeviceGetCount(int *n)
{
	if (!inited)
		return 3;
	*n = NGPU;
	return 0;
}

cu_result cuDeviceGet(int *dev, int ordinal)
{
	if (!inited)
		return 3;
	if (ordinal < 0 || ordinal >= NGPU)
		return 101;
	*dev = ordinal;
	return 0;
}

cu_result cuDeviceGetName(char *name, int len, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	const char *e = getenv("MOCK_CUDA_GPU_NAME");

	snprintf(name, len, "%s", e && *e ? e : "Mock GPU");
	return 0;
}

/* The compute capability (attributes 75 and 76): $MOCK_CUDA_CC ("8.0"),
 * else 9.0 as an H100's. */
cu_result cuDeviceGetAttribute(int *v, int attr, int dev)
{
	const char *e = getenv("MOCK_CUDA_CC");
	int major = 9, minor = 0;

	if (dev < 0 || dev >= NGPU)
		return 101;
	if (e && *e)
		sscanf(e, "%d.%d", &major, &minor);
	if (attr == 75)
		*v = major;
	else if (attr == 76)
		*v = minor;
	else
		return 1;
	return 0;
}

cu_result cuDeviceGetUuid_v2(cu_uuid *u, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	gpu_uuid(host_gpu(dev), u);
	return 0;
}

cu_result cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	*bytes = 80ULL << 30;
	return 0;
}

cu_result cuCheckpointProcessGetState(int pid, int *state)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	*state = procs[i].state;
	return 0;
}

cu_result cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	if (proc_index(pid) < 0)
		return 3;
	*tid = pid + 1;
	return 0;
}

cu_result cuCheckpointProcessLock(int pid, cu_lock_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && (a->reserved0 || !all_zero(a->reserved1, sizeof(a->reserved1))))
		return 1;
	if (procs[i].state != RUNNING)
		return 401;
	if (a && a->timeoutMs == 1)
		return 909;
	procs[i].state = LOCKED;
	return 0;
}

cu_result cuCheckpointProcessCheckpoint(int pid, cu_checkpoint_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && !all_zero(a, sizeof(*a)))
		return 1;
	if (procs[i].state != LOCKED)
		return 401;
	procs[i].state = CHECKPOINTED;
	return 0;
}

cu_result cuCheckpointProcessRestore(int pid, cu_restore_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && (!all_zero(a->reserved, sizeof(a->reserved)) || a->reserved1))
		return 1;
	if (a && a->gpuPairsCount) {
		if (!a->gpuPairs)
			return 1;
		for (unsigned int k = 0; k < a->gpuPairsCount; k++)
			if (!known_uuid(&a->gpuPairs[k].oldUuid) || !known_uuid(&a->gpuPairs[k].newUuid))
				return 1;
	}
	if (procs[i].state != CHECKPOINTED)
		return 401;
	log_pairs(pid, a);
	if (getenv("MOCK_CUDA_RESTORE_OOM"))
		return 2;
	if (getenv("MOCK_CUDA_RESTORE_FAIL_PID") && atoi(getenv("MOCK_CUDA_RESTORE_FAIL_PID")) == pid)
		return getenv("MOCK_CUDA_RESTORE_FAIL_RESULT") ?
			       atoi(getenv("MOCK_CUDA_RESTORE_FAIL_RESULT")) : 2; /* OUT_OF_MEMORY */
	procs[i].state = LOCKED;
	return 0;
}

cu_result cuCheckpointProcessUnlock(int pid, cu_unlock_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && !all_zero(a, sizeof(*a)))
		return 1;
	if (procs[i].state != LOCKED)
		return 401;
	procs[i].state = RUNNING;
	return 0;
}

/* ---- NVML ---- */

struct nvml_memory {
	unsigned long long total, free, used;
};

static unsigned long long env_list_mib(const char *name, int i)
{
	const char *v = getenv(name);
	char buf[256], *save = NULL;
	int n = 0;

	if (!v)
		return 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), n++)
		if (n == i)
			return strtoull(t, NULL, 10);
	return 0;
}

int nvmlInit_v2(void)
{
	return getenv("MOCK_NVML_FREE_MIB") ? 0 : 1;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
	for (int i = 0; i < NGPU; i++) {
		char s[48];
		cu_uuid u;

		gpu_uuid(i, &u);
		snprintf(s, sizeof(s),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u.bytes[0], u.bytes[1], u.bytes[2], u.bytes[3], u.bytes[4], u.bytes[5], u.bytes[6], u.bytes[7], u.bytes[8],
			 u.bytes[9], u.bytes[10], u.bytes[11], u.bytes[12], u.bytes[13], u.bytes[14], u.bytes[15]);
		if (!strcmp(s, uuid)) {
			*dev = (void *)(intptr_t)(i + 1);
			return 0;
		}
	}
	return 1;
}

/* MOCK_NVML_BLOCK_FILE: while that file exists, nvmlDeviceGetMemoryInfo
 * does not return (a driver that hangs), and <file>.waiting exists while a
 * call waits in it; the figures are answered once the file is gone. */
static void nvml_block(void)
{
	const char *f = getenv("MOCK_NVML_BLOCK_FILE");
	char waiting[4096];
	FILE *w;

	if (!f || access(f, F_OK))
		return;
	snprintf(waiting, sizeof(waiting), "%s.waiting", f);
	w = fopen(waiting, "w");
	if (w)
		fclose(w);
	while (access(f, F_OK) == 0)
		usleep(10 * 1000);
	unlink(waiting);
}

int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *m)
{
	int g = (int)(intptr_t)dev - 1;
	unsigned long long free_mib = env_list_mib("MOCK_NVML_FREE_MIB", g);
	unsigned long long per = getenv("MOCK_CUDA_PROC_MIB") ? strtoull(getenv("MOCK_CUDA_PROC_MIB"), NULL, 10) : 0;
	const char *list = getenv("MOCK_CUDA_PIDS");
	char buf[256], *save = NULL;
	int n = 0;

	if (g < 0 || g >= NGPU)
		return 1;
	nvml_block();
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	for (char *t = strtok_r(buf, ",", &save); t && n < 16; t = strtok_r(NULL, ",", &save), n++) {
		int pid = atoi(t), st = RUNNING;

		if (n % NGPU != g)
			continue;
		if (procs[n].pid == pid)
			st = procs[n].state;
		if (st != CHECKPOINTED && free_mib >= per)
			free_mib -= per;
	}
	m->total = 80ULL << 30;
	m->free = free_mib << 20;
	m->used = m->total - m->free;
	return 0;
}

int nvmlDeviceGetMinorNumber(void *dev, unsigned int *minor)
{
	int g = (int)(intptr_t)dev - 1;
	const char *base = getenv("MOCK_NVML_MINOR_BASE");

	if (g < 0 || g >= NGPU)
		return 1;
	*minor = (unsigned int)(g + (base ? atoi(base) : 0));
	return 0;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned int len)
{
	const char *e = getenv("MOCK_NVML_DRIVER");

	snprintf(buf, len, "%s", e && *e ? e : "580.159.04");
	return 0;
}

/* ---- device memory ---- */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


struct phys {
	int fd;
	int dev; /* the GPU it was made on; -1: imported */
	size_t size;
	int maps;
	int refs;     /* handles: 1 at its creation or import, +1 a retain, -1 a release */
	int released; /* refs went to 0: the memory dies with its last unmap */
	bool imported; /* from another process's export: not exported again */
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long live_phys_bytes, live_plain_bytes, mapped_bytes;
static struct {
	cu_ptr p;
	size_t size;
} plain[256];
static struct {
	cu_ptr va;
	size_t size;
	struct phys *ph;
	int nacc; /* the locations cuMemSetAccess gave access to */
	cu_mem_location acc[64];
} maps[1024];
static int ctx_token;
/* Handles are checked against the live mappings and a short list of
 * those made: a stale or made-up value is CUDA_ERROR_INVALID_VALUE. */
static struct phys *made[4096];
static int nmade;

/* MOCK_CUDA_FAIL_FILE: while that file exists, each of its lines "NAME N"
 * makes the entry point NAME fail (CUDA_ERROR_OUT_OF_MEMORY) from its
 * (N+1)-th call on, counted from when the file was written: a failure in
 * the middle of a save or a copy back, where a test wants it. */
static int mock_fails(const char *name)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static struct {
		char name[64];
		unsigned calls;
	} seen[16];
	static struct stat last;
	const char *path = getenv("MOCK_CUDA_FAIL_FILE");
	char line[128], n[64];
	unsigned after;
	int fail = 0;
	struct stat sb;
	FILE *f;

	if (!path)
		return 0;
	f = fopen(path, "re");
	pthread_mutex_lock(&mu);
	/* Counted anew for each file written. */
	if (!f || fstat(fileno(f), &sb) || sb.st_ino != last.st_ino ||
	    sb.st_mtim.tv_sec != last.st_mtim.tv_sec || sb.st_mtim.tv_nsec != last.st_mtim.tv_nsec) {
		memset(seen, 0, sizeof(seen));
		memset(&last, 0, sizeof(last));
		if (f && !fstat(fileno(f), &sb))
			last = sb;
	}
	while (f && fgets(line, sizeof(line), f)) {
		int i;

		if (sscanf(line, "%63s %u", n, &after) != 2 || strcmp(n, name))
			continue;
		for (i = 0; i < 16 && seen[i].name[0] && strcmp(seen[i].name, name); i++)
			;
		if (i == 16)
			break;
		snprintf(seen[i].name, sizeof(seen[i].name), "%s", name);
		fail = seen[i].calls++ >= after;
	}
	pthread_mutex_unlock(&mu);
	if (f)
		fclose(f);
	return fail;
}

/* The locations mapping va has access for, as cuMemSetAccess gave them:
 * how many, or -1 when nothing is mapped there. */
static int dst_dev(cu_ptr dst);

/* The mock's GPU of the memory mapped at va (-1: none, or not a device's). */
int mock_cuda_dev(cu_ptr va)
{
	return dst_dev(va);
}

int mock_cuda_access(cu_ptr va)
{
	int n = -1;

	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 1024; i++)
		if (maps[i].ph && maps[i].va == va)
			n = maps[i].nacc;
	pthread_mutex_unlock(&mem_mu);
	return n;
}

/* What is live: physical VMM memory, cuMemAlloc memory, mapped bytes. */
void mock_cuda_mem(unsigned long long *phys, unsigned long long *plain_bytes,
		   unsigned long long *mapped)
{
	pthread_mutex_lock(&mem_mu);
	*phys = live_phys_bytes;
	*plain_bytes = live_plain_bytes;
	*mapped = mapped_bytes;
	pthread_mutex_unlock(&mem_mu);
}

static void phys_maybe_free(struct phys *ph)
{
	if (!ph->released || ph->maps)
		return;
	close(ph->fd);
	live_phys_bytes -= ph->size;
	free(ph);
}

cu_result cuCtxGetCurrent(cu_ctx *ctx)
{
	*ctx = (cu_ctx)&ctx_token;
	return 0;
}
cu_result cuCtxSetCurrent(cu_ctx ctx)
{
	return 0;
}
/* MOCK_CUDA_CTX_DEVICE: the current context's device (default 0), where
 * cuMemAlloc's memory goes. */
cu_result cuCtxGetDevice(int *dev)
{
	const char *e = getenv("MOCK_CUDA_CTX_DEVICE");

	*dev = e ? atoi(e) : 0;
	return 0;
}
cu_result cuCtxSynchronize(void)
{
	return 0;
}
struct meet;
static void meet(struct meet *m, const char *knob, int dev);
static struct meet *ctx_meet(void);

/* MOCK_CUDA_CTX_MEET: a primary context made on one GPU waits for one made
 * on the other (meet). */
cu_result cuDevicePrimaryCtxRetain(cu_ctx *ctx, cu_device dev)
{
	if (getenv("MOCK_CUDA_CTX_MEET"))
		meet(ctx_meet(), getenv("MOCK_CUDA_CTX_MEET"), dev);
	*ctx = (cu_ctx)&ctx_token;
	return 0;
}
cu_result cuDeviceCanAccessPeer(int *can, int a, int b)
{
	*can = 0;
	return 0;
}

static cu_result plain_alloc(cu_ptr *p, size_t n)
{
	void *a = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (a == MAP_FAILED)
		return 2;
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 256; i++)
		if (!plain[i].p) {
			plain[i].p = (cu_ptr)a;
			plain[i].size = n ? n : 1;
			live_plain_bytes += plain[i].size;
			break;
		}
	pthread_mutex_unlock(&mem_mu);
	*p = (cu_ptr)a;
	return 0;
}

cu_result cuMemAlloc_v2(cu_ptr *p, size_t n)
{
	return plain_alloc(p, n);
}
cu_result cuMemAllocManaged(cu_ptr *p, size_t n, unsigned flags)
{
	return plain_alloc(p, n);
}
cu_result cuMemFree_v2(cu_ptr p)
{
	cu_result r = 1;

	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 256; i++)
		if (plain[i].p == p) {
			munmap((void *)p, plain[i].size);
			live_plain_bytes -= plain[i].size;
			plain[i].p = 0;
			r = 0;
			break;
		}
	pthread_mutex_unlock(&mem_mu);
	return r;
}

cu_result cuMemGetAllocationGranularity(size_t *g, const cu_mem_prop *prop, cu_gran_flags option)
{
	*g = 2u << 20;
	return 0;
}

cu_result cuMemAddressReserve(cu_ptr *p, size_t size, size_t align, cu_ptr addr,
			     unsigned long long flags)
{
	size_t a = 2u << 20;
	char *m = mmap(NULL, size + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uintptr_t u;

	if (m == MAP_FAILED)
		return 2;
	u = ((uintptr_t)m + a - 1) & ~(uintptr_t)(a - 1);
	if (u > (uintptr_t)m)
		munmap(m, u - (uintptr_t)m);
	munmap((char *)u + size, (uintptr_t)m + a - u);
	*p = (cu_ptr)u;
	return 0;
}

cu_result cuMemAddressFree(cu_ptr p, size_t size)
{
	return munmap((void *)p, size) ? 1 : 0;
}

static int handle_ok_locked(cu_handle h)
{
	for (int i = 0; i < nmade; i++)
		if ((cu_handle)(uintptr_t)made[i] == h)
			return 1;
	return 0;
}

/* MOCK_CUDA_CREATE_DELAY_MS and MOCK_CUDA_CREATE_LOG (see the top). */
static void create_knobs(void)
{
	const char *delay = getenv("MOCK_CUDA_CREATE_DELAY_MS");
	const char *path = getenv("MOCK_CUDA_CREATE_LOG");
	struct timespec ts;
	FILE *f;

	if (delay)
		usleep((useconds_t)atoi(delay) * 1000);
	f = path ? fopen(path, "a") : NULL;
	if (f) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
		fclose(f);
	}
}

cu_result cuMemCreate(cu_handle *h, size_t size, const cu_mem_prop *prop, unsigned long long flags)
{
	struct phys *ph;
	char name[32];

	create_knobs();
	if (mock_fails(__func__))
		return 2;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return 2;
	ph->refs = 1;
	ph->dev = prop->location.type == CU_LOC_DEVICE ? host_gpu(prop->location.id) : -1;
	/* Named for its GPU: an importer (another process) finds it there. */
	snprintf(name, sizeof(name), "mock-gpu-%d", ph->dev);
	ph->fd = memfd_create(name, MFD_CLOEXEC);
	if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size)) {
		free(ph);
		return 2;
	}
	ph->size = size;
	pthread_mutex_lock(&mem_mu);
	if (nmade < 4096)
		made[nmade++] = ph;
	live_phys_bytes += size;
	pthread_mutex_unlock(&mem_mu);
	*h = (cu_handle)(uintptr_t)ph;
	return 0;
}

/* POSIX file descriptor handles (type 1): the memfd itself, so that memory
 * exported by one process and imported by another is the same bytes.
 * Memory this process imported is not exported again: driver 580 answers
 * INVALID_VALUE (bench/gpu-share-probe.py), and a rank that had mapped
 * thawd's fill of its shared buffer could not hand it to its peer. */
cu_result cuMemExportToShareableHandle(void *out, cu_handle h, int type, unsigned long long flags)
{
	struct phys *ph = (struct phys *)(uintptr_t)h;
	bool imported;
	int fd;

	if (type != 1)
		return 1;
	pthread_mutex_lock(&mem_mu);
	imported = handle_ok_locked(h) && ph->imported;
	fd = handle_ok_locked(h) && !imported ? fcntl(ph->fd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&mem_mu);
	if (imported)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	if (fd < 0)
		return 1;
	*(int *)out = fd;
	return 0;
}

cu_result cuMemImportFromShareableHandle(cu_handle *h, void *os, int type)
{
	int fd = (int)(intptr_t)os;
	char link[64], target[128];
	struct phys *ph;
	struct stat sb;
	ssize_t n;

	if (type != 1 || fstat(fd, &sb) || !sb.st_size)
		return 1;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return 2;
	ph->refs = 1;
	ph->dev = -1;
	ph->imported = true;
	/* The GPU its memfd is named for (cuMemCreate). */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n > 0) {
		target[n] = '\0';
		if (sscanf(target, "/memfd:mock-gpu-%d", &ph->dev) != 1)
			ph->dev = -1;
	}
	ph->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	ph->size = (size_t)sb.st_size;
	pthread_mutex_lock(&mem_mu);
	if (nmade < 4096)
		made[nmade++] = ph;
	live_phys_bytes += ph->size;
	pthread_mutex_unlock(&mem_mu);
	*h = (cu_handle)(uintptr_t)ph;
	return 0;
}

static int handle_ok(cu_handle h)
{
	return handle_ok_locked(h);
}

static void handle_forget(struct phys *ph)
{
	for (int i = 0; i < nmade; i++)
		if (made[i] == ph) {
			made[i] = made[--nmade];
			return;
		}
}

cu_result cuMemMap(cu_ptr va, size_t size, size_t offset, cu_handle h,
		  unsigned long long flags)
{
	struct phys *ph = (struct phys *)(uintptr_t)h;
	int i;

	if (mock_fails(__func__))
		return 2;
	pthread_mutex_lock(&mem_mu);
	if (!handle_ok(h) || offset + size > ph->size) {
		pthread_mutex_unlock(&mem_mu);
		return 1;
	}
	if (mmap((void *)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd,
		 (off_t)offset) == MAP_FAILED) {
		pthread_mutex_unlock(&mem_mu);
		return 2;
	}
	for (i = 0; i < 1024 && maps[i].ph; i++)
		;
	if (i < 1024)
		maps[i].va = va, maps[i].size = size, maps[i].ph = ph, maps[i].nacc = 0;
	ph->maps++;
	mapped_bytes += size;
	pthread_mutex_unlock(&mem_mu);
	return 0;
}

/* Is [va, va + size) mapped whole, mapping after mapping, none straddling
 * its ends?  (mem_mu held.)  The driver's cuMemSetAccess wants that. */
static bool fully_mapped(cu_ptr va, size_t size)
{
	cu_ptr at = va;

	while (at < va + size) {
		int i;

		for (i = 0; i < 1024; i++)
			if (maps[i].ph && maps[i].va == at)
				break;
		if (i == 1024 || maps[i].va + maps[i].size > va + size)
			return false;
		at += maps[i].size;
	}
	return size > 0;
}

/* MOCK_CUDA_ACCESS_LOG=FILE appends "<pid> <bytes>" for each
 * cuMemSetAccess: how many calls a process made, over how much. */
static void access_log(size_t size)
{
	const char *path = getenv("MOCK_CUDA_ACCESS_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;

	if (f) {
		fprintf(f, "%d %zu\n", (int)getpid(), size);
		fclose(f);
	}
}

cu_result cuMemSetAccess(cu_ptr va, size_t size, const cu_access_desc *desc, size_t count)
{
	if (!count)
		return 1;
	access_log(size);
	pthread_mutex_lock(&mem_mu);
	if (!fully_mapped(va, size)) {
		pthread_mutex_unlock(&mem_mu);
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	}
	for (int i = 0; i < 1024; i++) {
		if (!maps[i].ph || maps[i].va < va || maps[i].va >= va + size)
			continue;
		for (size_t k = 0; k < count; k++) {
			int j;

			for (j = 0; j < maps[i].nacc; j++)
				if (maps[i].acc[j].type == desc[k].location.type &&
				    maps[i].acc[j].id == desc[k].location.id)
					break;
			if (j == maps[i].nacc && j < 64)
				maps[i].acc[maps[i].nacc++] = desc[k].location;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return 0;
}

/* MOCK_CUDA_UNMAP_LOG: each cuMemUnmap appends a line to that file (when
 * a process let go of its mappings, against when it offered them), after
 * MOCK_CUDA_UNMAP_DELAY_MS (a driver busy elsewhere). */
static void unmap_log(void)
{
	const char *path = getenv("MOCK_CUDA_UNMAP_LOG");
	const char *delay = getenv("MOCK_CUDA_UNMAP_DELAY_MS");
	FILE *f;

	if (delay)
		usleep((useconds_t)atoi(delay) * 1000);
	f = path ? fopen(path, "a") : NULL;
	if (f) {
		fputs("unmap\n", f);
		fclose(f);
	}
}

cu_result cuMemUnmap(cu_ptr va, size_t size)
{
	cu_result r = 1;

	unmap_log();
	if (mock_fails(__func__))
		return 2;
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 1024; i++) {
		struct phys *ph = maps[i].ph;

		if (!ph || maps[i].va < va || maps[i].va >= va + size)
			continue;
		mmap((void *)maps[i].va, maps[i].size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		mapped_bytes -= maps[i].size;
		maps[i].ph = NULL;
		ph->maps--;
		if (ph->released && !ph->maps)
			handle_forget(ph);
		phys_maybe_free(ph);
		r = 0;
	}
	pthread_mutex_unlock(&mem_mu);
	return r;
}

cu_result cuMemRelease(cu_handle h)
{
	struct phys *ph = (struct phys *)(uintptr_t)h;

	if (mock_fails(__func__))
		return 2;
	pthread_mutex_lock(&mem_mu);
	if (!handle_ok(h) || ph->released) {
		pthread_mutex_unlock(&mem_mu);
		return 1;
	}
	if (--ph->refs > 0) {
		pthread_mutex_unlock(&mem_mu);
		return 0;
	}
	ph->released = 1;
	if (!ph->maps)
		handle_forget(ph);
	phys_maybe_free(ph);
	pthread_mutex_unlock(&mem_mu);
	return 0;
}

cu_result cuMemRetainAllocationHandle(cu_handle *h, void *addr)
{
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 1024; i++)
		if (maps[i].ph && (cu_ptr)addr >= maps[i].va &&
		    (cu_ptr)addr < maps[i].va + maps[i].size) {
			/* One more reference, to be released; a handle whose
			 * references were all released lives again. */
			maps[i].ph->refs++;
			maps[i].ph->released = 0;
			*h = (cu_handle)(uintptr_t)maps[i].ph;
			pthread_mutex_unlock(&mem_mu);
			return 0;
		}
	pthread_mutex_unlock(&mem_mu);
	return 1;
}

cu_result cuMemcpyDtoH_v2(void *dst, cu_ptr src, size_t n)
{
	memcpy(dst, (void *)src, n);
	return 0;
}
cu_result cuMemcpyHtoD_v2(cu_ptr dst, const void *src, size_t n)
{
	memcpy((void *)dst, src, n);
	return 0;
}
static int straddles_pinned(const char *src, size_t n);

/* The GPU of the memory mapped at dst; -1 unknown. */
static int dst_dev(cu_ptr dst)
{
	int dev = -1;

	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 1024; i++)
		if (maps[i].ph && dst >= maps[i].va && dst < maps[i].va + maps[i].size) {
			dev = maps[i].ph->dev;
			break;
		}
	pthread_mutex_unlock(&mem_mu);
	return dev;
}

/* A meeting of calls onto two GPUs (MOCK_CUDA_HTOD_MEET, MOCK_CUDA_CTX_MEET):
 * a call onto dev notes that it began, then waits until one onto another
 * GPU has (10 s at most; a wait that ends without one is counted, for
 * mock_cuda_meet_missed).  What began is forgotten when the knob's value
 * changes: a test sets another value for each case. */
struct meet {
	int began[NGPU];
	char round[64];
};
static pthread_mutex_t meet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meet_cv = PTHREAD_COND_INITIALIZER;
static int meet_missed;

static void meet(struct meet *m, const char *knob, int dev)
{
	struct timespec until;
	int other = 0;

	if (dev < 0 || dev >= NGPU)
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&meet_mu);
	if (strncmp(knob, m->round, sizeof(m->round) - 1)) {
		snprintf(m->round, sizeof(m->round), "%s", knob);
		memset(m->began, 0, sizeof(m->began));
	}
	m->began[dev] = 1;
	pthread_cond_broadcast(&meet_cv);
	for (;;) {
		other = 0;
		for (int g = 0; g < NGPU; g++)
			other |= g != dev && m->began[g];
		if (other)
			break;
		if (pthread_cond_timedwait(&meet_cv, &meet_mu, &until)) {
			meet_missed++;
			break;
		}
	}
	pthread_mutex_unlock(&meet_mu);
}

static struct meet *ctx_meet(void)
{
	static struct meet m;

	return &m;
}

/* Meetings that ended without the other GPU's call. */
int mock_cuda_meet_missed(void)
{
	int n;

	pthread_mutex_lock(&meet_mu);
	n = meet_missed;
	pthread_mutex_unlock(&meet_mu);
	return n;
}

cu_result cuMemcpyHtoDAsync_v2(cu_ptr dst, const void *src, size_t n, cu_stream stream)
{
	const char *d = getenv("MOCK_CUDA_HTOD_DELAY_MS");

	if (straddles_pinned(src, n))
		return 1;
	if (mock_fails(__func__))
		return 2;

	const char *log = getenv("MOCK_CUDA_HTOD_LOG");
	struct timespec t0, t1;
	int dev = dst_dev(dst);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (getenv("MOCK_CUDA_HTOD_MEET")) {
		static struct meet m;

		meet(&m, getenv("MOCK_CUDA_HTOD_MEET"), dev);
	}
	if (d)
		usleep((useconds_t)atoi(d) * 1000);
	memcpy((void *)dst, src, n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (log) {
		FILE *f = fopen(log, "a");

		if (f) {
			fprintf(f, "%d %lld %lld %d\n", (int)getpid(),
				(long long)t0.tv_sec * 1000000000LL + t0.tv_nsec,
				(long long)t1.tv_sec * 1000000000LL + t1.tv_nsec, dev);
			fclose(f);
		}
	}
	return 0;
}
cu_result cuMemsetD32_v2(cu_ptr dst, unsigned v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((unsigned *)dst)[i] = v;
	return 0;
}
/* Pinned ranges: a copy from host memory that straddles the end of one
 * is refused, as the driver refuses it. */
static struct {
	const char *p;
	size_t n;
} pinned_ranges[256];

cu_result cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 256; i++)
		if (!pinned_ranges[i].p) {
			pinned_ranges[i].p = p;
			pinned_ranges[i].n = n;
			break;
		}
	pthread_mutex_unlock(&mem_mu);
	return 0;
}
cu_result cuMemHostUnregister(void *p)
{
	cu_result r = 1;

	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 256; i++)
		if (pinned_ranges[i].p == p) {
			pinned_ranges[i].p = NULL;
			r = 0;
			break;
		}
	pthread_mutex_unlock(&mem_mu);
	return r;
}

static int straddles_pinned(const char *src, size_t n)
{
	int bad = 0;

	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < 256 && !bad; i++) {
		const char *a = pinned_ranges[i].p, *b;

		if (!a)
			continue;
		b = a + pinned_ranges[i].n;
		if (src < b && src + n > a && (src < a || src + n > b))
			bad = 1;
	}
	pthread_mutex_unlock(&mem_mu);
	return bad;
}
cu_result cuMemAllocHost_v2(void **p, size_t n)
{
	*p = malloc(n);
	return *p ? 0 : 2;
}
cu_result cuMemFreeHost(void *p)
{
	free(p);
	return 0;
}
cu_result cuStreamCreate(cu_stream *s, unsigned flags)
{
	*s = (cu_stream)&ctx_token;
	return 0;
}
cu_result cuStreamSynchronize(cu_stream s)
{
	return 0;
}
cu_result cuStreamDestroy_v2(cu_stream s)
{
	return 0;
}

cu_result cuGetProcAddress_v2(const char *name, void **pfn, int version, cu_u64 flags,
			     cu_proc_query *status);

cu_result cuGetProcAddress(const char *name, void **pfn, int version, cu_u64 flags)
{
	static const struct {
		const char *name;
		int v2_from; /* the version from which name means name_v2; 0: never */
		void *v1, *v2;
	} t[] = {
		{ "cuInit", 0, (void *)cuInit, NULL },
		{ "cuGetErrorName", 0, (void *)cuGetErrorName, NULL },
		{ "cuGetProcAddress", 12000, (void *)cuGetProcAddress, (void *)cuGetProcAddress_v2 },
		{ "cuDeviceGetCount", 0, (void *)cuDeviceGetCount, NULL },
		{ "cuCtxGetCurrent", 0, (void *)cuCtxGetCurrent, NULL },
		{ "cuCtxSetCurrent", 0, (void *)cuCtxSetCurrent, NULL },
		{ "cuCtxGetDevice", 0, (void *)cuCtxGetDevice, NULL },
		{ "cuCtxSynchronize", 0, (void *)cuCtxSynchronize, NULL },
		{ "cuDevicePrimaryCtxRetain", 0, (void *)cuDevicePrimaryCtxRetain, NULL },
		{ "cuMemAlloc", 3020, NULL, (void *)cuMemAlloc_v2 },
		{ "cuMemFree", 3020, NULL, (void *)cuMemFree_v2 },
		{ "cuMemAllocManaged", 0, (void *)cuMemAllocManaged, NULL },
		{ "cuMemAddressReserve", 0, (void *)cuMemAddressReserve, NULL },
		{ "cuMemAddressFree", 0, (void *)cuMemAddressFree, NULL },
		{ "cuMemCreate", 0, (void *)cuMemCreate, NULL },
		{ "cuMemMap", 0, (void *)cuMemMap, NULL },
		{ "cuMemUnmap", 0, (void *)cuMemUnmap, NULL },
		{ "cuMemRelease", 0, (void *)cuMemRelease, NULL },
		{ "cuMemSetAccess", 0, (void *)cuMemSetAccess, NULL },
		{ "cuMemGetAllocationGranularity", 0, (void *)cuMemGetAllocationGranularity, NULL },
		{ "cuMemRetainAllocationHandle", 0, (void *)cuMemRetainAllocationHandle, NULL },
		{ "cuMemExportToShareableHandle", 0, (void *)cuMemExportToShareableHandle, NULL },
		{ "cuMemImportFromShareableHandle", 0, (void *)cuMemImportFromShareableHandle, NULL },
		{ "cuMemcpyDtoH", 3020, NULL, (void *)cuMemcpyDtoH_v2 },
		{ "cuMemcpyHtoD", 3020, NULL, (void *)cuMemcpyHtoD_v2 },
		{ "cuMemcpyHtoDAsync", 3020, NULL, (void *)cuMemcpyHtoDAsync_v2 },
		{ "cuMemsetD32", 3020, NULL, (void *)cuMemsetD32_v2 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (strcmp(t[i].name, name))
			continue;
		*pfn = t[i].v2_from && version >= t[i].v2_from ? t[i].v2 : t[i].v1;
		return *pfn ? 0 : 500;
	}
	*pfn = NULL;
	return 500; /* CUDA_ERROR_NOT_FOUND */
}

cu_result cuGetProcAddress_v2(const char *name, void **pfn, int version, cu_u64 flags,
			     cu_proc_query *status)
{
	cu_result r = cuGetProcAddress(name, pfn, version, flags);

	if (status)
		*status = r ? 1 : 0;
	return r;
}
