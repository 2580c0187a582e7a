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
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

struct uuid {
	unsigned char b[16];
};
struct lock_args {
	unsigned int timeout_ms;
	unsigned int reserved0;
	unsigned long long reserved1[7];
};
struct plain_args {
	unsigned long long reserved[8];
};
struct pair {
	struct uuid old_uuid, new_uuid;
};
struct restore_args {
	struct pair *pairs;
	unsigned int count;
	char reserved[52 - sizeof(struct pair *)];
	unsigned long long reserved1;
};

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

static void gpu_uuid(int i, struct uuid *u)
{
	for (int k = 0; k < 16; k++)
		u->b[k] = (unsigned char)(i * 16 + k);
}

static int known_uuid(const struct uuid *u)
{
	struct uuid g;

	for (int i = 0; i < NGPU; i++) {
		gpu_uuid(i, &g);
		if (!memcmp(&g, u, sizeof(g)))
			return 1;
	}
	return 0;
}

static void log_pairs(int pid, const struct restore_args *a)
{
	const char *path = getenv("MOCK_CUDA_PAIRS_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;

	if (!f)
		return;
	fprintf(f, "%d", pid);
	if (!a || !a->count)
		fprintf(f, " same");
	for (unsigned int k = 0; a && k < a->count; k++)
		fprintf(f, " %d>%d", a->pairs[k].old_uuid.b[0] / 16, a->pairs[k].new_uuid.b[0] / 16);
	fprintf(f, "\n");
	fclose(f);
}

CUresult cuInit(unsigned int flags)
{
	if (getenv("MOCK_CUDA_NO_DEVICE"))
		return 100;
	if (flags)
		return 1;
	inited = 1;
	return 0;
}

CUresult cuGetErrorName(CUresult e, const char **s)
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

CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

CUresult cuDeviceGetCount(int *n)
{
	if (!inited)
		return 3;
	*n = NGPU;
	return 0;
}

CUresult cuDeviceGet(int *dev, int ordinal)
{
	if (!inited)
		return 3;
	if (ordinal < 0 || ordinal >= NGPU)
		return 101;
	*dev = ordinal;
	return 0;
}

CUresult cuDeviceGetName(char *name, int len, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	snprintf(name, len, "Mock GPU");
	return 0;
}

CUresult cuDeviceGetUuid_v2(struct uuid *u, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	gpu_uuid(dev, u);
	return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
	if (dev < 0 || dev >= NGPU)
		return 101;
	*bytes = 80ULL << 30;
	return 0;
}

CUresult cuCheckpointProcessGetState(int pid, int *state)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	*state = procs[i].state;
	return 0;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	if (proc_index(pid) < 0)
		return 3;
	*tid = pid + 1;
	return 0;
}

CUresult cuCheckpointProcessLock(int pid, struct lock_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && (a->reserved0 || !all_zero(a->reserved1, sizeof(a->reserved1))))
		return 1;
	if (procs[i].state != RUNNING)
		return 401;
	if (a && a->timeout_ms == 1)
		return 909;
	procs[i].state = LOCKED;
	return 0;
}

CUresult cuCheckpointProcessCheckpoint(int pid, struct plain_args *a)
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

CUresult cuCheckpointProcessRestore(int pid, struct restore_args *a)
{
	int i = proc_index(pid);

	if (i < 0)
		return 3;
	if (a && (!all_zero(a->reserved, sizeof(a->reserved)) || a->reserved1))
		return 1;
	if (a && a->count) {
		if (!a->pairs)
			return 1;
		for (unsigned int k = 0; k < a->count; k++)
			if (!known_uuid(&a->pairs[k].old_uuid) || !known_uuid(&a->pairs[k].new_uuid))
				return 1;
	}
	if (procs[i].state != CHECKPOINTED)
		return 401;
	log_pairs(pid, a);
	if (getenv("MOCK_CUDA_RESTORE_OOM"))
		return 2;
	if (getenv("MOCK_CUDA_RESTORE_FAIL_PID") && atoi(getenv("MOCK_CUDA_RESTORE_FAIL_PID")) == pid)
		return 2;
	procs[i].state = LOCKED;
	return 0;
}

CUresult cuCheckpointProcessUnlock(int pid, struct plain_args *a)
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
		struct uuid u;

		gpu_uuid(i, &u);
		snprintf(s, sizeof(s),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u.b[0], u.b[1], u.b[2], u.b[3], u.b[4], u.b[5], u.b[6], u.b[7], u.b[8],
			 u.b[9], u.b[10], u.b[11], u.b[12], u.b[13], u.b[14], u.b[15]);
		if (!strcmp(s, uuid)) {
			*dev = (void *)(intptr_t)(i + 1);
			return 0;
		}
	}
	return 1;
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
	snprintf(buf, len, "580.159.04");
	return 0;
}
