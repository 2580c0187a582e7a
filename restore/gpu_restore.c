/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_restore.c — see gpu_restore.h. */
#define LOG_PREFIX "gpu: "
#include "restore/gpu_restore.h"
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The snapshot's GPU i: its UUID, model and the GPU memory its processes
 * held, where prewarm recorded them ("gpus": [{"uuid","name","used_bytes"}]
 * or plain UUID strings). */
static const char *gpu_uuid(const json_t *g)
{
	return json_is_string(g) ? json_string_value(g) :
				   json_string_value(json_object_get(g, "uuid"));
}

static uint64_t json_bytes(const json_t *o, const char *const *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		json_t *v = json_object_get(o, keys[i]);

		if (json_is_integer(v) && json_integer_value(v) > 0)
			return (uint64_t)json_integer_value(v);
	}
	return 0;
}

static const char *const used_keys[] = { "used_bytes", "memory_used_bytes", "gpu_bytes",
					 "used" };
static const char *const total_keys[] = { "gpu_used_bytes", "gpu_bytes", "gpu_memory_bytes" };

/* What snapshot GPU g needs free: its recorded usage, 0 if none. */
static uint64_t gpu_need(const json_t *g)
{
	return json_is_object(g) ? json_bytes(g, used_keys, ARRAY_SIZE(used_keys)) : 0;
}

/* The device for snapshot GPU g among those not yet taken: its own (by UUID)
 * if it has room, else the one of the same model with the most free memory
 * that has room, else any with room (the driver then refuses a different
 * chip type: warned).  -1 if none has room. */
static int choose_one(const json_t *g, const struct cuda_device *devs, size_t ndevs,
		      const bool *taken, uint64_t reserve)
{
	const char *uuid = gpu_uuid(g), *model = json_is_object(g) ?
		json_string_value(json_object_get(g, "name")) : NULL;
	uint64_t need = gpu_need(g) + reserve;
	int best = -1, best_other = -1;

	for (size_t d = 0; d < ndevs; d++)
		if (!taken[d] && uuid && !strcmp(devs[d].uuid, uuid) && devs[d].free_bytes >= need)
			return (int)d;
	for (size_t d = 0; d < ndevs; d++) {
		int *slot = !model || !strcmp(model, devs[d].name) ? &best : &best_other;

		if (taken[d] || devs[d].free_bytes < need)
			continue;
		if (*slot < 0 || devs[d].free_bytes > devs[*slot].free_bytes)
			*slot = (int)d;
	}
	return best >= 0 ? best : best_other;
}

/* gpu_choose, each chosen device keeping reserve bytes free besides. */
static int choose(const json_t *gpus, const struct cuda_device *devs, size_t ndevs,
		  uint64_t reserve, size_t *choice, bool *moved, char *why, size_t whylen)
{
	size_t nold = json_array_size(gpus), i;
	bool *taken = calloc(ndevs + 1, sizeof(bool));
	char a[32], b[32], c[32];
	const json_t *g;
	int ret = 0;

	*moved = false;
	if (!taken)
		return -ENOMEM;
	if (ndevs < nold) {
		snprintf(why, whylen, "the snapshot used %zu GPU(s), this host has %zu", nold, ndevs);
		ret = -ENODEV;
		goto out;
	}
	json_array_foreach(gpus, i, g) {
		int d = choose_one(g, devs, ndevs, taken, reserve);

		if (d < 0) {
			uint64_t most = 0;

			for (size_t k = 0; k < ndevs; k++)
				if (!taken[k] && devs[k].free_bytes > most)
					most = devs[k].free_bytes;
			if (reserve)
				snprintf(why, whylen,
					 "no GPU has room for the snapshot's GPU %zu: it needs %s "
					 "and --gpu-mem-reserve keeps %s free, the most free on a "
					 "GPU left is %s",
					 i, fmt_bytes(gpu_need(g), a), fmt_bytes(reserve, c),
					 fmt_bytes(most, b));
			else
				snprintf(why, whylen,
					 "no GPU has room for the snapshot's GPU %zu: it needs %s, "
					 "the most free on a GPU left is %s (not restoring: a "
					 "restore that runs out of GPU memory can leave the "
					 "process stuck)",
					 i, fmt_bytes(gpu_need(g), a), fmt_bytes(most, b));
			ret = -EAGAIN; /* GPU memory frees as instances stop: 503, retry */
			goto out;
		}
		taken[d] = true;
		choice[i] = (size_t)d;
		if (!gpu_uuid(g) || strcmp(devs[d].uuid, gpu_uuid(g)))
			*moved = true;
	}
out:
	free(taken);
	return ret;
}

int gpu_choose(const json_t *gpus, const struct cuda_device *devs, size_t ndevs, size_t *choice,
	       bool *moved, char *why, size_t whylen)
{
	return choose(gpus, devs, ndevs, 0, choice, moved, why, whylen);
}

int gpu_admit_devices(const json_t *gpus, const struct cuda_device *devs, size_t ndevs,
		      uint64_t reserve, char *why, size_t whylen)
{
	size_t *choice = calloc(json_array_size(gpus) + 1, sizeof(*choice));
	bool moved, known = false;
	int ret;

	if (!choice)
		return -ENOMEM;
	/* No free-memory figure (no NVML): nothing to judge by here. */
	for (size_t d = 0; d < ndevs; d++)
		known |= devs[d].free_bytes > 0;
	ret = known ? choose(gpus, devs, ndevs, reserve, choice, &moved, why, whylen) : 0;
	free(choice);
	return ret;
}

int gpu_admit(const json_t *meta, uint64_t reserve, char *why, size_t whylen)
{
	const json_t *gpus = json_object_get(meta, "gpus");
	struct cuda_device *devs = NULL;
	size_t ndevs = 0;
	int ret;

	/* Not a GPU function; or no driver, or no device list: the restore
	 * itself then says why it cannot go on. */
	if (!json_array_size(gpus) || cuda_init() || cuda_devices(&devs, &ndevs))
		return 0;
	ret = gpu_admit_devices(gpus, devs, ndevs, reserve, why, whylen);
	free(devs);
	return ret;
}

/* The GPUs to restore onto (gpu_choose): targets[i] is snapshot GPU i's; and
 * when any is another than it came from, pairs for every one (the driver
 * wants every checkpointed GPU listed). */
static int map_gpus(const json_t *gpus, struct cuda_device *devs, size_t ndevs,
		    struct cuda_gpu_pair **pairs, size_t *npairs, struct cuda_device ***targets)
{
	size_t nold = json_array_size(gpus), *choice;
	char why[512];
	bool moved;
	const json_t *g;
	size_t i;
	int ret;

	*pairs = NULL;
	*npairs = 0;
	*targets = calloc(nold ? nold : 1, sizeof(**targets));
	choice = calloc(nold ? nold : 1, sizeof(*choice));
	if (!*targets || !choice) {
		free(choice);
		return -ENOMEM;
	}
	ret = gpu_choose(gpus, devs, ndevs, choice, &moved, why, sizeof(why));
	if (ret) {
		pr_err("%s", why);
		free(choice);
		return ret;
	}
	for (i = 0; i < nold; i++)
		(*targets)[i] = &devs[choice[i]];
	if (moved) {
		*pairs = calloc(nold ? nold : 1, sizeof(**pairs));
		if (!*pairs) {
			free(choice);
			return -ENOMEM;
		}
	}
	json_array_foreach(gpus, i, g) {
		const char *old = gpu_uuid(g), *model = json_is_object(g) ?
			json_string_value(json_object_get(g, "name")) : NULL;
		const struct cuda_device *to = (*targets)[i];

		if (!moved)
			break;
		if (!old) {
			pr_err("the snapshot's GPU %zu has no UUID", i);
			free(choice);
			return -EINVAL;
		}
		if (model && strcmp(model, to->name) != 0)
			pr_warn("GPU %s was a %s, restoring onto %s (%s): the driver needs the "
				"same chip type", old, model, to->uuid, to->name);
		snprintf((*pairs)[i].old_uuid, sizeof((*pairs)[i].old_uuid), "%s", old);
		snprintf((*pairs)[i].new_uuid, sizeof((*pairs)[i].new_uuid), "%s", to->uuid);
		pr_info("GPU %s -> %s", old, to->uuid);
	}
	*npairs = moved ? nold : 0;
	free(choice);
	return 0;
}

/* Without per-GPU figures, the snapshot's total must fit the GPUs chosen:
 * a restore that runs out of GPU memory can leave the process stuck for
 * good.  (With them, gpu_choose has checked each.) */
static int check_free(const json_t *meta, const json_t *gpus, struct cuda_device **targets)
{
	uint64_t total = json_bytes(meta, total_keys, ARRAY_SIZE(total_keys)), free_sum = 0;
	char a[32], b[32];
	const json_t *g;
	size_t i;

	json_array_foreach(gpus, i, g) {
		if (gpu_need(g))
			return 0;
		if (targets[i])
			free_sum += targets[i]->free_bytes;
	}
	if (!total) {
		pr_warn("the snapshot records no GPU memory figure: restoring without a "
			"free-memory check");
		return 0;
	}
	if (free_sum < total) {
		pr_err("the GPUs have %s free, the snapshot needs %s: not restoring",
		       fmt_bytes(free_sum, a), fmt_bytes(total, b));
		return -EAGAIN;
	}
	return 0;
}

int pidns_members(pid_t init, pid_t **pids, size_t *n)
{
	char path[64], want[64], got[64];
	struct dirent *de;
	size_t cap = 16;
	ssize_t len;
	DIR *d = NULL;
	int ret = 0;

	*n = 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)init);
	len = readlink(path, want, sizeof(want) - 1);
	if (len < 0) {
		ret = -errno;
		pr_perror("readlink %s", path);
		return ret;
	}
	want[len] = '\0';
	*pids = malloc(cap * sizeof(**pids));
	d = opendir("/proc");
	if (!*pids || !d) {
		ret = *pids ? -errno : -ENOMEM;
		pr_err("cannot list /proc");
		goto out;
	}
	(*pids)[(*n)++] = init;
	while ((de = readdir(d))) {
		char *end;
		long v = strtol(de->d_name, &end, 10);

		if (*end || v <= 0 || v == init)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/ns/pid", v);
		len = readlink(path, got, sizeof(got) - 1);
		if (len < 0)
			continue; /* gone meanwhile */
		got[len] = '\0';
		if (strcmp(got, want))
			continue;
		if (*n == cap) {
			pid_t *np = realloc(*pids, 2 * cap * sizeof(**pids));

			if (!np) {
				ret = -ENOMEM;
				goto out;
			}
			*pids = np;
			cap *= 2;
		}
		(*pids)[(*n)++] = (pid_t)v;
	}
out:
	if (d)
		closedir(d);
	if (ret) {
		free(*pids);
		*pids = NULL;
		*n = 0;
	}
	return ret;
}

static int restore_one(pid_t pid, const struct cuda_gpu_pair *pairs, size_t npairs)
{
	enum cuda_proc_state st;
	int ret = cuda_process_state(pid, &st);
	uint64_t t0 = now_ns(), t1 = t0;

	if (ret)
		return ret;
	if (st == CUDA_PROC_CHECKPOINTED) {
		ret = cuda_restore(pid, npairs ? pairs : NULL, npairs);
		if (ret)
			return ret;
		st = CUDA_PROC_LOCKED;
		t1 = now_ns();
	}
	if (st == CUDA_PROC_LOCKED) {
		ret = cuda_unlock(pid);
		/* The two halves apart: a lazy start's overlap shows in one. */
		if (!ret)
			pr_info("CUDA process %d: restore %.1f ms, unlock %.1f ms", (int)pid,
				(t1 - t0) / 1e6, ms_since(t1));
	} else if (st == CUDA_PROC_FAILED) {
		pr_err("CUDA process %d is in the failed state", (int)pid);
		ret = -EIO;
	}
	return ret;
}

int gpu_restore_container(const struct runner *r, const char *id, pid_t init,
			  const json_t *meta, pid_t **pids, size_t *n)
{
	const json_t *gpus = json_object_get(meta, "gpus");
	size_t nall = 0, ndevs = 0, npairs = 0, nrec = json_array_size(json_object_get(meta, "cuda_pids"));
	struct cuda_device *devs = NULL, **targets = NULL;
	struct cuda_gpu_pair *pairs = NULL;
	pid_t *all = NULL;
	int ret;

	*pids = NULL;
	*n = 0;
	ret = cuda_init();
	if (ret) {
		pr_err("this is a GPU function and this host has no usable GPU driver: %s",
		       cuda_unavailable_reason());
		return -ENODEV;
	}
	ret = cuda_devices(&devs, &ndevs);
	if (ret)
		goto out;
	ret = map_gpus(gpus, devs, ndevs, &pairs, &npairs, &targets);
	if (ret)
		goto out;
	ret = check_free(meta, gpus, targets);
	if (ret)
		goto out;
	/* CRIU gave the processes their old pids inside the container's PID
	 * namespace; the host pids are new.  The members of that namespace,
	 * not runc ps: on a cgroup v2 host the restored processes were seen
	 * outside the cgroup runc ps reads (it answered null). */
	ret = pidns_members(init, &all, &nall);
	if (ret) {
		pr_warn("falling back to runc ps for the processes of %s", id);
		ret = runner_pids(r, id, &all, &nall);
	}
	if (ret)
		goto out;
	ret = cuda_filter_processes(all, nall, pids, n);
	if (ret)
		goto out;
	if (*n < nrec)
		pr_warn("the snapshot had %zu CUDA process(es), %zu found after restore", nrec, *n);
	if (*n == 0 && nrec) {
		pr_err("none of the snapshot's %zu CUDA process(es) holds CUDA state after restore",
		       nrec);
		ret = -ESRCH;
		goto out;
	}
	for (size_t i = 0; i < *n; i++) {
		ret = restore_one((*pids)[i], pairs, npairs);
		if (ret)
			goto out;
	}
out:
	if (ret) {
		free(*pids);
		*pids = NULL;
		*n = 0;
	}
	free(all);
	free(devs);
	free(targets);
	free(pairs);
	return ret;
}

void gpu_quiesce(const pid_t *pids, size_t n)
{
	if (n && cuda_init())
		return;
	for (size_t i = 0; i < n; i++) {
		enum cuda_proc_state st;

		if (cuda_process_state(pids[i], &st))
			continue; /* gone, or no CUDA state */
		if (st == CUDA_PROC_RUNNING && cuda_lock(pids[i], GPU_LOCK_TIMEOUT_MS)) {
			pr_warn("could not lock CUDA process %d before the kill: %s", (int)pids[i],
				log_last_error());
			continue;
		}
		if (st != CUDA_PROC_CHECKPOINTED && cuda_checkpoint(pids[i]))
			pr_warn("could not checkpoint CUDA process %d before the kill: %s",
				(int)pids[i], log_last_error());
	}
}
