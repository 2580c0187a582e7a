/* SPDX-License-Identifier: Apache-2.0 */
/* cuda.c — the CUDA driver API through dlopen("libcuda.so.1").
 *
 * thaw must build and run where there is no CUDA at all (CI, the development
 * machines), so nothing here needs cuda.h: the driver's types and entry
 * points are common/cuda_abi.h's, checked against the real header where
 * there is one (test_cuda).
 *
 * cuInit runs once per process: each separate driver attach costs seconds, so
 * the long-lived daemon holds it.  Free GPU memory is read through NVML, which
 * needs no CUDA context (a context would cost ~0.2 s and GPU memory).
 */
#define LOG_PREFIX "cuda: "
#include "common/cuda.h"
#include "common/cuda_abi.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* NVML, for free memory without a context. */
typedef int nvml_return;
typedef void *nvml_device;
struct nvml_memory {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

static struct {
	void *lib;
	void *nvml;
	int init_err; /* cuda_init's answer, set once */
	cu_fn_cuInit *init;
	cu_fn_cuGetErrorName *get_error_name;
	cu_fn_cuDriverGetVersion *driver_get_version;
	cu_fn_cuDeviceGetCount *device_get_count;
	cu_fn_cuDeviceGet *device_get;
	cu_fn_cuDeviceGetName *device_get_name;
	cu_fn_cuDeviceGetUuid_v2 *device_get_uuid;
	cu_fn_cuDeviceTotalMem_v2 *device_total_mem;
	cu_fn_cuDeviceGetAttribute *device_get_attribute; /* may be NULL */
	cu_fn_cuCheckpointProcessGetState *get_state;
	cu_fn_cuCheckpointProcessGetRestoreThreadId *get_restore_thread_id;
	cu_fn_cuCheckpointProcessLock *lock;
	cu_fn_cuCheckpointProcessCheckpoint *checkpoint;
	cu_fn_cuCheckpointProcessRestore *restore;
	cu_fn_cuCheckpointProcessUnlock *unlock;
	nvml_return (*nvml_init)(void);
	nvml_return (*nvml_by_uuid)(const char *uuid, nvml_device *dev);
	nvml_return (*nvml_memory)(nvml_device dev, struct nvml_memory *mem);
	nvml_return (*nvml_minor)(nvml_device dev, unsigned int *minor);
	nvml_return (*nvml_driver_version)(char *buf, unsigned int len);
} drv = { .init_err = -ENODEV };

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static char no_gpu_reason[256] = "not initialised";

/* Say once, at info level, why there is no GPU, and keep the words for
 * cuda_unavailable_reason(). */
static void no_gpu(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void no_gpu(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(no_gpu_reason, sizeof(no_gpu_reason), fmt, ap);
	va_end(ap);
	pr_info("no GPU: CPU functions only (%s)", no_gpu_reason);
}

static const char *cu_name(cu_result r)
{
	const char *name = NULL;

	if (drv.get_error_name && drv.get_error_name(r, &name) == CU_SUCCESS && name)
		return name;
	return "CUDA_ERROR_UNKNOWN";
}

static int cu_errno(cu_result r)
{
	switch (r) {
	case CU_SUCCESS:
		return 0;
	case CU_ERR_NOT_INITIALIZED:
	case CU_ERR_DEINITIALIZED:
	case CU_ERR_NO_DEVICE:
	case CU_ERR_INVALID_DEVICE:
		return -ENODEV;
	case CU_ERR_TIMEOUT:
		return -ETIMEDOUT;
	case CU_ERR_INVALID_VALUE:
		return -EINVAL;
	case CU_ERR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CU_ERR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case CU_ERR_NOT_FOUND: /* no CUDA process with that pid */
		return -ESRCH;
	case CU_ERR_NOT_PERMITTED:
		return -EPERM;
	default:
		return -EIO;
	}
}

/* Turn a CUresult of call fn on pid into -errno, logging failures once. */
static int cu_check(cu_result r, const char *fn, pid_t pid)
{
	if (r == CU_SUCCESS)
		return 0;
	if (pid <= 0) {
		pr_err("%s: %s", fn, cu_name(r));
		return cu_errno(r);
	}
	/* Our own driver is initialised by then: on a checkpoint call, driver
	 * 580 answers NOT_INITIALIZED for a process that never used CUDA. */
	if (r == CU_ERR_NOT_INITIALIZED) {
		pr_err("%s(%d): %s (the process holds no CUDA state)", fn, (int)pid, cu_name(r));
		return -ESRCH;
	}
	pr_err("%s(%d): %s", fn, (int)pid, cu_name(r));
	return cu_errno(r);
}

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p)
		pr_debug("no %s in the driver: %s", name, dlerror());
	return p;
}

static void load_nvml(void)
{
	drv.nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!drv.nvml) {
		pr_debug("no NVML (%s): free GPU memory unknown", dlerror());
		return;
	}
	drv.nvml_init = (__typeof__(drv.nvml_init))sym(drv.nvml, "nvmlInit_v2");
	drv.nvml_by_uuid = (__typeof__(drv.nvml_by_uuid))sym(drv.nvml, "nvmlDeviceGetHandleByUUID");
	drv.nvml_memory = (__typeof__(drv.nvml_memory))sym(drv.nvml, "nvmlDeviceGetMemoryInfo");
	drv.nvml_minor = (__typeof__(drv.nvml_minor))sym(drv.nvml, "nvmlDeviceGetMinorNumber");
	drv.nvml_driver_version =
		(__typeof__(drv.nvml_driver_version))sym(drv.nvml, "nvmlSystemGetDriverVersion");
	if (!drv.nvml_init || !drv.nvml_by_uuid || !drv.nvml_memory || drv.nvml_init() != 0) {
		pr_debug("NVML unusable: free GPU memory unknown");
		drv.nvml_by_uuid = NULL;
		drv.nvml_memory = NULL;
		drv.nvml_minor = NULL;
		drv.nvml_driver_version = NULL;
	}
}

static void do_init(void)
{
	const char *hide = getenv("THAW_NO_GPU");
	cu_result r;

	/* Tests and operators may hide the GPU to exercise the CPU-only path. */
	if (hide && *hide && strcmp(hide, "0")) {
		no_gpu("THAW_NO_GPU is set");
		return;
	}
	drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!drv.lib) {
		no_gpu("%s", dlerror());
		return;
	}
#define LOAD(field, name)                                                            \
	do {                                                                         \
		drv.field = (__typeof__(drv.field))sym(drv.lib, name);              \
	} while (0)
	LOAD(init, "cuInit");
	LOAD(get_error_name, "cuGetErrorName");
	LOAD(driver_get_version, "cuDriverGetVersion");
	LOAD(device_get_count, "cuDeviceGetCount");
	LOAD(device_get, "cuDeviceGet");
	LOAD(device_get_name, "cuDeviceGetName");
	LOAD(device_get_uuid, "cuDeviceGetUuid_v2");
	if (!drv.device_get_uuid)
		LOAD(device_get_uuid, "cuDeviceGetUuid");
	LOAD(device_total_mem, "cuDeviceTotalMem_v2");
	LOAD(device_get_attribute, "cuDeviceGetAttribute");
	LOAD(get_state, "cuCheckpointProcessGetState");
	LOAD(get_restore_thread_id, "cuCheckpointProcessGetRestoreThreadId");
	LOAD(lock, "cuCheckpointProcessLock");
	LOAD(checkpoint, "cuCheckpointProcessCheckpoint");
	LOAD(restore, "cuCheckpointProcessRestore");
	LOAD(unlock, "cuCheckpointProcessUnlock");
#undef LOAD
	if (!drv.init || !drv.driver_get_version || !drv.device_get_count || !drv.device_get ||
	    !drv.device_get_name || !drv.device_get_uuid || !drv.device_total_mem) {
		no_gpu("libcuda.so.1 lacks the device API");
		goto unload;
	}
	r = drv.init(0);
	if (r != CU_SUCCESS) {
		no_gpu("cuInit: %s", cu_name(r));
		goto unload;
	}
	if (!drv.get_state || !drv.lock || !drv.checkpoint || !drv.restore || !drv.unlock)
		pr_warn("this driver has no checkpoint API (driver >= 550 needed): "
			"GPU functions cannot be snapshotted");
	load_nvml();
	no_gpu_reason[0] = '\0';
	drv.init_err = 0;
	return;
unload:
	dlclose(drv.lib);
	drv.lib = NULL;
	drv.get_error_name = NULL;
}

int cuda_init(void)
{
	pthread_once(&init_once, do_init);
	return drv.init_err;
}

void *cuda_sym(const char *name)
{
	return cuda_init() || !drv.lib ? NULL : dlsym(drv.lib, name);
}

bool cuda_available(void)
{
	return cuda_init() == 0;
}

bool cuda_checkpoint_supported(void)
{
	return cuda_init() == 0 && drv.get_state && drv.lock && drv.checkpoint && drv.restore &&
	       drv.unlock;
}

const char *cuda_unavailable_reason(void)
{
	cuda_init();
	return no_gpu_reason;
}

int cuda_driver_version(int *version)
{
	int ret = cuda_init();

	if (ret)
		return ret;
	return cu_check(drv.driver_get_version(version), "cuDriverGetVersion", 0);
}

static void uuid_format(const cu_uuid *u, char out[48])
{
	const unsigned char *b = u->bytes;

	snprintf(out, 48,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

/* "GPU-xxxxxxxx-xxxx-…" (the prefix optional) into 16 bytes. */
static int uuid_parse(const char *s, cu_uuid *u)
{
	size_t n = 0;

	if (!strncmp(s, "GPU-", 4))
		s += 4;
	for (; *s && n < 32; s++) {
		int v;

		if (*s == '-')
			continue;
		if (*s >= '0' && *s <= '9')
			v = *s - '0';
		else if (*s >= 'a' && *s <= 'f')
			v = *s - 'a' + 10;
		else if (*s >= 'A' && *s <= 'F')
			v = *s - 'A' + 10;
		else
			return -EINVAL;
		if (n % 2 == 0)
			u->bytes[n / 2] = v << 4;
		else
			u->bytes[n / 2] |= v;
		n++;
	}
	return n == 32 && !*s ? 0 : -EINVAL;
}

/* The value after "key:" on a line of the driver's /proc files, trimmed. */
static bool proc_field(const char *line, const char *key, char *out, size_t len)
{
	size_t k = strlen(key), n;

	if (strncmp(line, key, k) || line[k] != ':')
		return false;
	line += k + 1;
	line += strspn(line, " \t");
	n = strcspn(line, "\r\n");
	snprintf(out, len, "%.*s", (int)n, line);
	return true;
}

/* The minor of /dev/nvidiaN for the GPU with uuid, from the kernel driver's
 * /proc/driver/nvidia/gpus/<bus>/information; -1 if not found. */
static int proc_minor(const char *uuid)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	struct dirent *de;
	int found = -1;

	while (d && found < 0 && (de = readdir(d))) {
		char path[512], line[256], v[128], u[sizeof(v)] = "";
		int minor = -1;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", de->d_name);
		f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f)) {
			if (proc_field(line, "GPU UUID", v, sizeof(v)))
				snprintf(u, sizeof(u), "%s", v);
			else if (proc_field(line, "Device Minor", v, sizeof(v)))
				minor = atoi(v);
		}
		if (f)
			fclose(f);
		if (minor >= 0 && !strcasecmp(u, uuid))
			found = minor;
	}
	if (d)
		closedir(d);
	return found;
}

int cuda_kernel_driver_version(char *buf, size_t len)
{
	char line[512], *p;
	FILE *f;

	if (cuda_init() == 0 && drv.nvml_driver_version &&
	    drv.nvml_driver_version(buf, (unsigned int)len) == 0 && buf[0])
		return 0;
	/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue …" */
	f = fopen("/proc/driver/nvidia/version", "re");
	if (!f)
		return -ENOENT;
	p = fgets(line, sizeof(line), f) ? strstr(line, "Kernel Module") : NULL;
	fclose(f);
	if (!p)
		return -ENOENT;
	p += strlen("Kernel Module");
	p += strspn(p, " \t");
	snprintf(buf, len, "%.*s", (int)strcspn(p, " \t\n"), p);
	return buf[0] ? 0 : -ENOENT;
}

int cuda_driver_major(void)
{
	char v[64];

	return cuda_kernel_driver_version(v, sizeof(v)) ? 0 : atoi(v);
}

int cuda_devices(struct cuda_device **out, size_t *n)
{
	struct cuda_device *devs = NULL;
	int count = 0, ret;

	*out = NULL;
	*n = 0;
	ret = cuda_init();
	if (ret)
		return ret;
	ret = cu_check(drv.device_get_count(&count), "cuDeviceGetCount", 0);
	if (ret)
		return ret;
	if (count <= 0)
		return 0;
	devs = calloc(count, sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	for (int i = 0; i < count; i++) {
		struct cuda_device *d = &devs[i];
		cu_uuid uuid;
		cu_device dev;
		size_t total = 0;

		ret = cu_check(drv.device_get(&dev, i), "cuDeviceGet", 0);
		if (!ret)
			ret = cu_check(drv.device_get_name(d->name, sizeof(d->name), dev),
				       "cuDeviceGetName", 0);
		if (!ret)
			ret = cu_check(drv.device_get_uuid(&uuid, dev), "cuDeviceGetUuid", 0);
		if (!ret)
			ret = cu_check(drv.device_total_mem(&total, dev), "cuDeviceTotalMem", 0);
		if (ret) {
			free(devs);
			return ret;
		}
		d->ordinal = i;
		d->name[sizeof(d->name) - 1] = '\0';
		/* The compute capability a snapshot's kernels were built for
		 * (prewarm/host_record.h); -1 where the driver does not say. */
		d->cc_major = d->cc_minor = -1;
		if (drv.device_get_attribute &&
		    (drv.device_get_attribute(&d->cc_major, CU_ATTR_CC_MAJOR, dev) != CU_SUCCESS ||
		     drv.device_get_attribute(&d->cc_minor, CU_ATTR_CC_MINOR, dev) != CU_SUCCESS))
			d->cc_major = d->cc_minor = -1;
		uuid_format(&uuid, d->uuid);
		d->total_bytes = total;
		d->minor = -1;
		if (drv.nvml_memory) {
			nvml_device h;
			struct nvml_memory mem;
			unsigned int minor;

			if (drv.nvml_by_uuid(d->uuid, &h) == 0) {
				if (drv.nvml_memory(h, &mem) == 0)
					d->free_bytes = mem.free;
				if (drv.nvml_minor && drv.nvml_minor(h, &minor) == 0)
					d->minor = (int)minor;
			}
		}
		if (d->minor < 0)
			d->minor = proc_minor(d->uuid);
	}
	*out = devs;
	*n = count;
	return 0;
}

/* The checkpoint calls need the driver and its checkpoint API. */
static int ckpt_ready(void *fn, const char *name)
{
	int ret = cuda_init();

	if (ret)
		return ret;
	if (!fn) {
		pr_err("%s: not in this driver (driver >= 550 needed)", name);
		return -EOPNOTSUPP;
	}
	return 0;
}

int cuda_process_state(pid_t pid, enum cuda_proc_state *state)
{
	int s = 0, ret = ckpt_ready(drv.get_state, "cuCheckpointProcessGetState");

	if (ret)
		return ret;
	ret = cu_check(drv.get_state(pid, &s), "cuCheckpointProcessGetState", pid);
	if (!ret)
		*state = s;
	return ret;
}

int cuda_restore_thread_id(pid_t pid, int *tid)
{
	int ret = ckpt_ready(drv.get_restore_thread_id, "cuCheckpointProcessGetRestoreThreadId");

	if (ret)
		return ret;
	return cu_check(drv.get_restore_thread_id(pid, tid),
			"cuCheckpointProcessGetRestoreThreadId", pid);
}

int cuda_lock(pid_t pid, unsigned timeout_ms)
{
	cu_lock_args args = { .timeoutMs = timeout_ms };
	int ret = ckpt_ready(drv.lock, "cuCheckpointProcessLock");

	if (ret)
		return ret;
	return cu_check(drv.lock(pid, &args), "cuCheckpointProcessLock", pid);
}

int cuda_checkpoint(pid_t pid)
{
	cu_checkpoint_args args = { { 0 } };
	int ret = ckpt_ready(drv.checkpoint, "cuCheckpointProcessCheckpoint");

	if (ret)
		return ret;
	return cu_check(drv.checkpoint(pid, &args), "cuCheckpointProcessCheckpoint", pid);
}

int cuda_restore(pid_t pid, const struct cuda_gpu_pair *pairs, size_t npairs)
{
	cu_restore_args args;
	cu_gpu_pair *cp = NULL;
	int ret = ckpt_ready(drv.restore, "cuCheckpointProcessRestore");

	if (ret)
		return ret;
	memset(&args, 0, sizeof(args));
	if (pairs && npairs) {
		cp = calloc(npairs, sizeof(*cp));
		if (!cp)
			return -ENOMEM;
		for (size_t i = 0; i < npairs; i++) {
			if (uuid_parse(pairs[i].old_uuid, &cp[i].oldUuid) ||
			    uuid_parse(pairs[i].new_uuid, &cp[i].newUuid)) {
				pr_err("cuCheckpointProcessRestore(%d): bad GPU UUID pair %s -> %s",
				       (int)pid, pairs[i].old_uuid, pairs[i].new_uuid);
				ret = -EINVAL;
				goto out;
			}
		}
		args.gpuPairs = cp;
		args.gpuPairsCount = (unsigned int)npairs;
	}
	ret = cu_check(drv.restore(pid, &args), "cuCheckpointProcessRestore", pid);
out:
	free(cp);
	return ret;
}

int cuda_unlock(pid_t pid)
{
	cu_unlock_args args = { { 0 } };
	int ret = ckpt_ready(drv.unlock, "cuCheckpointProcessUnlock");

	if (ret)
		return ret;
	return cu_check(drv.unlock(pid, &args), "cuCheckpointProcessUnlock", pid);
}

int cuda_filter_processes(const pid_t *pids, size_t n, pid_t **cuda_pids, size_t *ncuda)
{
	pid_t *out = NULL;
	size_t k = 0;
	int ret;

	*cuda_pids = NULL;
	*ncuda = 0;
	ret = ckpt_ready(drv.get_state, "cuCheckpointProcessGetState");
	if (ret)
		return ret;
	out = calloc(n ? n : 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	/* Most of a container's processes hold no CUDA state: their GetState
	 * failure is the answer, not an error, so it is not logged. */
	for (size_t i = 0; i < n; i++) {
		int s;

		if (drv.get_state(pids[i], &s) == CU_SUCCESS)
			out[k++] = pids[i];
	}
	*cuda_pids = out;
	*ncuda = k;
	return 0;
}

/* Free memory by device ordinal (0 where unknown); false if none is known. */
static bool free_by_ordinal(uint64_t out[CUDA_MAX_DEVICES])
{
	struct cuda_device *d = NULL;
	size_t n = 0;
	bool known = false;

	memset(out, 0, CUDA_MAX_DEVICES * sizeof(*out));
	if (cuda_devices(&d, &n))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (d[i].ordinal < 0 || d[i].ordinal >= CUDA_MAX_DEVICES)
			continue;
		out[d[i].ordinal] = d[i].free_bytes;
		known |= d[i].free_bytes > 0;
	}
	free(d);
	return known;
}

/* Put processes [0, n) of a group that failed back as they were: running.
 * Each is at most checkpointed; what cannot be undone is said. */
static void group_undo(const pid_t *pids, size_t n)
{
	for (size_t i = n; i-- > 0;) {
		enum cuda_proc_state st;

		if (cuda_process_state(pids[i], &st))
			continue;
		if (st == CUDA_PROC_CHECKPOINTED && cuda_restore(pids[i], NULL, 0))
			pr_warn("CUDA process %d is left checkpointed", (int)pids[i]);
		else if (st != CUDA_PROC_RUNNING && cuda_unlock(pids[i]))
			pr_warn("CUDA process %d is left locked", (int)pids[i]);
	}
}

static __thread enum cuda_step group_step;

const char *cuda_step_name(enum cuda_step step)
{
	static const char *const names[] = { "", "lock", "checkpoint", "restore", "unlock" };

	return (size_t)step < ARRAY_SIZE(names) ? names[step] : "";
}

enum cuda_step cuda_group_failed_step(void)
{
	return group_step;
}

int cuda_checkpoint_group(const pid_t *pids, size_t n, unsigned timeout_ms, uint32_t *gpus,
			  uint64_t used[CUDA_MAX_DEVICES], pid_t *failed)
{
	uint64_t before[CUDA_MAX_DEVICES], after[CUDA_MAX_DEVICES];
	bool known;
	size_t i;
	int ret = 0;

	*failed = 0;
	group_step = CUDA_STEP_NONE;
	if (used)
		memset(used, 0, CUDA_MAX_DEVICES * sizeof(*used));
	if (gpus)
		memset(gpus, 0, n * sizeof(*gpus));
	known = free_by_ordinal(before);
	for (i = 0; i < n; i++) {
		ret = cuda_lock(pids[i], timeout_ms);
		if (ret) {
			*failed = pids[i];
			group_step = CUDA_STEP_LOCK;
			group_undo(pids, i);
			return ret;
		}
	}
	for (i = 0; i < n; i++) {
		ret = cuda_checkpoint(pids[i]);
		if (ret) {
			*failed = pids[i];
			group_step = CUDA_STEP_CHECKPOINT;
			group_undo(pids, n);
			return ret;
		}
		if (!known)
			continue;
		/* What this checkpoint gave back, GPU by GPU: the GPUs it held. */
		free_by_ordinal(after);
		for (int o = 0; o < CUDA_MAX_DEVICES; o++) {
			if (!before[o] || after[o] <= before[o])
				continue;
			if (gpus && o < 32)
				gpus[i] |= 1u << o;
			if (used)
				used[o] += after[o] - before[o];
			before[o] = after[o];
		}
	}
	return 0;
}

int cuda_restore_group(const pid_t *pids, size_t n, const struct cuda_gpu_pair *pairs,
		       size_t npairs, pid_t *failed, double *restore_ms)
{
	uint64_t t0 = now_ns();
	size_t i;
	int ret = 0;

	*failed = 0;
	group_step = CUDA_STEP_NONE;
	for (i = 0; i < n; i++) {
		enum cuda_proc_state st;

		ret = cuda_process_state(pids[i], &st);
		if (!ret && st == CUDA_PROC_CHECKPOINTED)
			ret = cuda_restore(pids[i], pairs, npairs);
		else if (!ret && st == CUDA_PROC_FAILED)
			ret = -EIO;
		if (ret)
			goto restore_failed;
	}
	if (restore_ms)
		*restore_ms = ms_since(t0);
	for (i = 0; i < n; i++) {
		enum cuda_proc_state st;

		ret = cuda_process_state(pids[i], &st);
		if (!ret && st == CUDA_PROC_LOCKED)
			ret = cuda_unlock(pids[i]);
		if (ret)
			goto unlock_failed;
	}
	return 0;
restore_failed:
	*failed = pids[i];
	group_step = CUDA_STEP_RESTORE;
	/* Those restored give their GPU memory back: checkpointed again, the
	 * instance can be torn down without the driver mid-work. */
	for (size_t k = i; k-- > 0;)
		if (cuda_checkpoint(pids[k]))
			pr_warn("CUDA process %d restored but not checkpointed back: it holds "
				"its GPU memory until it is killed", (int)pids[k]);
	return ret;
unlock_failed:
	*failed = pids[i];
	group_step = CUDA_STEP_UNLOCK;
	for (size_t k = 0; k < n; k++) {
		enum cuda_proc_state st;

		if (cuda_process_state(pids[k], &st) || st == CUDA_PROC_CHECKPOINTED)
			continue;
		if (st == CUDA_PROC_RUNNING && cuda_lock(pids[k], 10000)) {
			pr_warn("CUDA process %d is left running", (int)pids[k]);
			continue;
		}
		if (cuda_checkpoint(pids[k]))
			pr_warn("CUDA process %d is left locked", (int)pids[k]);
	}
	return ret;
}
