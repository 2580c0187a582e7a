/* SPDX-License-Identifier: Apache-2.0 */
/* prewarm_gpu.c — a snapshot's GPU part (prewarm_internal.h): the GPUs its
 * boot is given, libthaw-cuda's save of the function's device memory
 * (common/gpumem.h) and its place in the image, the CUDA checkpoint of
 * every process (common/cuda.h), and what the driver did with a function
 * of several processes or GPUs (span_record.h).
 */
#define LOG_PREFIX "prewarm: "
#include "prewarm/prewarm_internal.h"
#include "common/cuda.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/util.h"
#include "common/span_record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CUDA_LOCK_TIMEOUT_MS 10000
/* A save copies the function's device memory to disk: minutes for the
 * largest GPUs' worth, before the library gives up itself. */
#define GPUMEM_SAVE_TIMEOUT_MS (15 * 60 * 1000)

int prewarm_gpu_meta(const struct job *j, struct snapshot_meta *sm)
{
	struct snapshot_gpu_memory *m = &sm->gpu_memory;
	struct snapshot_gpu *gpus = calloc(j->ngpu + 1, sizeof(*gpus));
	size_t k;

	if (!gpus)
		return -ENOMEM;
	for (size_t i = 0; i < j->ngpu; i++) {
		const struct cuda_device *d = &j->gpu[i];
		int o = d->ordinal;

		gpus[i] = (struct snapshot_gpu){
			.uuid = d->uuid, .name = d->name, .index = o, .total_bytes = d->total_bytes,
			.used_bytes = o >= 0 && o < CUDA_MAX_DEVICES ? j->gpu_used[o] : 0 };
	}
	sm->gpus = gpus;
	sm->ngpus = j->ngpu;
	if (!j->spec->gpu)
		return 0;
	/* Which process held which of the GPUs, where it could be told. */
	sm->cuda_processes = j->cuda_procs;
	sm->ncuda_processes = j->ncuda_procs;
	for (k = 0; k < ARRAY_SIZE(j->gpumem_ns) && j->gpumem_ns[k]; k++)
		;
	*m = (struct snapshot_gpu_memory){ .recorded = true, .thaw = j->gpumem_moved > 0,
					   .why = j->gpumem_moved > 0 ? "" : j->gpumem_why,
					   .mount = j->gpumem, .bytes = j->gpumem_bytes,
					   .allocs = j->gpumem_allocs, .left_bytes = j->gpumem_left,
					   .ns_pids = j->gpumem_ns, .nns_pids = k };
	return 0;
}

/* The GPUs for the function's boot: its spec's "gpus" of them, those with
 * the most free memory (the lower index on a tie). */
int prewarm_choose_gpus(struct job *j)
{
	struct cuda_device *d = NULL;
	size_t n = 0, want = j->spec->gpus ? j->spec->gpus : 1;
	int ret = cuda_devices(&d, &n);

	if (ret)
		return ret;
	if (n < want) {
		pr_err("%s asks for %zu GPU(s); this host has %zu", j->spec->id, want, n);
		free(d);
		return -ENODEV;
	}
	j->gpu = calloc(want, sizeof(*j->gpu));
	if (!j->gpu) {
		free(d);
		return -ENOMEM;
	}
	for (size_t k = 0; k < want; k++) {
		size_t best = n;

		for (size_t i = 0; i < n; i++)
			if (d[i].ordinal >= 0 && (best == n || d[i].free_bytes > d[best].free_bytes))
				best = i;
		j->gpu[k] = d[best];
		d[best].ordinal = -1; /* taken */
	}
	j->ngpu = want;
	j->nhost_gpus = n;
	free(d);
	return 0;
}

/* The pid of a host process as its own PID namespace sees it (restore maps
 * CUDA processes by it); 0 if unknown. */
static pid_t ns_pid(pid_t pid)
{
	char path[64], buf[4096], *l;
	long v = 0;
	ssize_t n;
	int fd;

	/* read_file() trusts st_size, which is 0 for /proc files. */
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	l = strstr(buf, "\nNSpid:");
	if (l) {
		char *end = strchr(l + 1, '\n'), *last = NULL;

		if (end)
			*end = '\0';
		for (char *t = strtok(l + 7, " \t"); t; t = strtok(NULL, " \t"))
			last = t;
		if (last)
			v = strtol(last, NULL, 10);
	}
	return (pid_t)v;
}

/* Copy a file (the library into the job's directories, then the image). */
static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, ret = 0;
	struct stat st;

	if (in < 0 || fstat(in, &st) < 0) {
		ret = -errno;
		pr_perror("%s", from);
		goto out;
	}
	/* 0644 whatever the umask: the function preloads this copy of a public
	 * library, and an image's user need not be root. */
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0 || fchmod(out, 0644) < 0) {
		ret = -errno;
		pr_perror("%s", to);
		goto out;
	}
	for (off_t left = st.st_size; left > 0;) {
		ssize_t k = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);

		if (k <= 0) {
			ret = k < 0 ? -errno : -EIO;
			pr_err("copying %s to %s: %s", from, to, strerror(-ret));
			goto out;
		}
		left -= k;
	}
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return ret;
}

/* A GPU function preloads libthaw-cuda unless its spec says "gpu_memory":
 * "driver" or the library is not there (then why says so, and the driver
 * carries all of its GPU memory, as before).  The library travels in the
 * image: CRIU puts the restored process's mapping of it back from there. */
int prewarm_gpumem_prepare(struct job *j)
{
	char lib[PATH_MAX], why[PATH_MAX + 64], to[2 * PATH_MAX];
	int ret;

	if (j->spec->gpu_memory_driver) {
		snprintf(j->gpumem_why, sizeof(j->gpumem_why),
			 "the spec asks for the driver's checkpoint (\"gpu_memory\": \"driver\")");
		return 0;
	}
	if (gpumem_library(lib, sizeof(lib), why, sizeof(why))) {
		snprintf(j->gpumem_why, sizeof(j->gpumem_why), "libthaw-cuda.so not found (%.400s)",
			 why);
		pr_warn("%s: %s", j->spec->id, j->gpumem_why);
		return 0;
	}
	snprintf(j->gpumem_in, sizeof(j->gpumem_in), "%s/gpu-in", j->work);
	snprintf(j->gpumem_out, sizeof(j->gpumem_out), "%s/gpu-out", j->work);
	snprintf(to, sizeof(to), "%s/%s", j->gpumem_in, GPUMEM_LIB_NAME);
	ret = mkdir_p(j->gpumem_in, 0755);
	if (!ret)
		ret = mkdir_p(j->gpumem_out, 0755);
	if (!ret)
		ret = copy_file(lib, to);
	if (ret)
		return ret;
	j->gpumem = true;
	return 0;
}

/* Before the driver's lock: each CUDA process saves and unmaps the device
 * memory libthaw-cuda can move.  A process where it cannot (no library,
 * nothing movable, a failure the library undid) is left to the driver. */
static int gpumem_save(struct job *j, const pid_t *cuda, size_t ncuda)
{
	struct gpumem_status *st = calloc(ncuda + 1, sizeof(*st));
	pid_t *ns = calloc(ncuda + 1, sizeof(*ns));
	char line[256];
	uint64_t t0;
	int ret;

	if (!st || !ns) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < ncuda; i++)
		ns[i] = ns_pid(cuda[i]);
	t0 = now_ns();
	ret = gpumem_save_all(cuda, ns, ncuda, j->gpumem_out, GPUMEM_SAVE_TIMEOUT_MS, st,
			      &j->gpumem_moved, j->gpumem_why, sizeof(j->gpumem_why));
	j->gpumem_save_ms = ms_since(t0);
	if (ret) {
		for (size_t i = 0; i < ncuda; i++)
			if (st[i].error[0])
				log_set_error("libthaw-cuda: %s", st[i].error);
		pr_err("%s", log_last_error());
		goto out;
	}
	for (size_t i = 0; i < ncuda; i++) {
		if (gpumem_carried(&st[i])) {
			size_t k = 0;

			while (k < ARRAY_SIZE(j->gpumem_ns) && j->gpumem_ns[k])
				k++;
			if (k < ARRAY_SIZE(j->gpumem_ns))
				j->gpumem_ns[k] = ns[i];
			gpumem_describe(&st[i], line, sizeof(line));
			pr_info("%s: process %d: %s", j->spec->id, (int)cuda[i], line);
		} else {
			pr_info("%s: process %d keeps its GPU memory in the driver's checkpoint: %s",
				j->spec->id, (int)cuda[i], st[i].error);
		}
		j->gpumem_bytes += st[i].bytes;
		j->gpumem_allocs += st[i].allocs;
		j->gpumem_left += st[i].left_bytes;
		/* What the restore needs free on each GPU: the memory the
		 * driver gives back at its checkpoint, and this. */
		for (size_t g = 0; g < j->ngpu && g < ARRAY_SIZE(st[i].dev_bytes); g++) {
			int o = j->gpu[g].ordinal;

			if (o >= 0 && o < CUDA_MAX_DEVICES)
				j->gpu_saved[o] += st[i].dev_bytes[g];
		}
	}
out:
	free(st);
	free(ns);
	return ret;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

/* After the dump: the saved memory and the library into the image. */
int prewarm_gpumem_into_image(struct job *j)
{
	char from[2 * PATH_MAX], to[2 * PATH_MAX];
	struct dirent *de;
	DIR *d;
	int ret;

	snprintf(from, sizeof(from), "%s/%s", j->gpumem_in, GPUMEM_LIB_NAME);
	snprintf(to, sizeof(to), "%s/%s", j->image, GPUMEM_LIB_NAME);
	ret = copy_file(from, to);
	if (ret)
		return ret;
	d = opendir(j->gpumem_out);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		/* The saved memory and its layout (GPUMEM_FILE_FMT,
		 * GPUMEM_LAYOUT_FMT); not a temporary file left behind. */
		if (strncmp(de->d_name, "gpu-", 4) ||
		    (!ends_with(de->d_name, ".mem") && !ends_with(de->d_name, ".layout")))
			continue;
		snprintf(from, sizeof(from), "%s/%s", j->gpumem_out, de->d_name);
		snprintf(to, sizeof(to), "%s/%s", j->image, de->d_name);
		if (rename(from, to) < 0) {
			ret = -errno;
			pr_perror("rename %s %s", from, to);
			break;
		}
	}
	closedir(d);
	return ret;
}

/* A function of several CUDA processes or GPUs: what the driver did with its
 * checkpoint, for thaw doctor (span_record.h).  refusal: the driver's words,
 * or NULL when it worked; step and hint: where it refused and what the spec
 * could set to avoid it. */
static void record_span(struct job *j, size_t ncuda, const char *refusal, enum cuda_step step,
			const char *hint)
{
	struct span_record r = { .refused = refusal != NULL, .processes = (unsigned)ncuda,
				 .gpus = (unsigned)j->ngpu };

	if (ncuda < 2 && j->ngpu < 2)
		return;
	if (cuda_kernel_driver_version(r.driver, sizeof(r.driver)))
		snprintf(r.driver, sizeof(r.driver), "unknown");
	snprintf(r.function, sizeof(r.function), "%s", j->spec->id);
	snprintf(r.error, sizeof(r.error), "%s", refusal ? refusal : "");
	snprintf(r.step, sizeof(r.step), "%s", refusal ? cuda_step_name(step) : "");
	snprintf(r.hint, sizeof(r.hint), "%s", refusal && hint ? hint : "");
	span_record_write(j->c->data_dir, &r);
}

int prewarm_cuda_checkpoint(struct job *j)
{
	pid_t *pids = NULL, *cuda = NULL, failed = 0;
	uint32_t *held = NULL;
	size_t n = 0, ncuda = 0;
	int ret;

	ret = runner_pids(&j->r, j->cid, &pids, &n);
	if (ret)
		goto out;
	ret = cuda_filter_processes(pids, n, &cuda, &ncuda);
	if (ret)
		goto out;
	if (ncuda == 0)
		pr_warn("%s: a GPU function with no CUDA process", j->spec->id);
	if (j->gpumem && ncuda) {
		ret = gpumem_save(j, cuda, ncuda);
		if (ret)
			goto out;
	}
	held = calloc(ncuda + 1, sizeof(*held));
	if (!held) {
		ret = -ENOMEM;
		goto out;
	}
	/* Every process locked before any is checkpointed, all or none; what
	 * each checkpoint frees on each GPU is what the function holds there:
	 * the figure a restore checks free memory against (gpu_restore.c). */
	ret = cuda_checkpoint_group(cuda, ncuda, CUDA_LOCK_TIMEOUT_MS, held, j->gpu_used,
				    &failed);
	if (ret) {
		enum cuda_step step = cuda_group_failed_step();
		/* Only for a function of several processes: one alone shares
		 * nothing and waits in no collective. */
		const char *hint = ncuda > 1 ? span_refusal_hint(step, ret) : "";
		char drv[64] = "unknown", cause[512];

		snprintf(cause, sizeof(cause), "%s", log_last_error());
		cuda_kernel_driver_version(drv, sizeof(drv));
		log_set_error("the driver (%s) refused to %s CUDA process %d of %zu: %s; no snapshot "
			      "of %s is made on this host%s%s%s", drv,
			      step == CUDA_STEP_LOCK ? "lock" : "checkpoint", (int)failed, ncuda,
			      cause[0] ? cause : strerror(-ret), j->spec->id,
			      hint[0] ? " (most likely " : "", hint, hint[0] ? ")" : "");
		pr_err("%s", log_last_error());
		record_span(j, ncuda, cause[0] ? cause : strerror(-ret), step, hint);
		goto out;
	}
	record_span(j, ncuda, NULL, CUDA_STEP_NONE, NULL);
	for (size_t o = 0; o < CUDA_MAX_DEVICES; o++)
		if (j->gpu_saved[o])
			j->gpu_used[o] += j->gpu_saved[o];
	j->cuda_procs = calloc(ncuda + 1, sizeof(*j->cuda_procs));
	if (!j->cuda_procs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < ncuda; i++) {
		struct snapshot_cuda_process *p = &j->cuda_procs[j->ncuda_procs++];

		p->pid = cuda[i];
		p->ns_pid = ns_pid(cuda[i]);
		for (size_t g = 0; g < j->ngpu && g < 64; g++) {
			int o = j->gpu[g].ordinal;

			if (o >= 0 && o < 32 && (held[i] & (1u << o)))
				p->gpus |= 1ull << g;
		}
	}
out:
	free(held);
	free(pids);
	free(cuda);
	return ret;
}
