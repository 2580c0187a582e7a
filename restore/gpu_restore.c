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

static struct cuda_device *find_dev(struct cuda_device *d, size_t n, const char *uuid)
{
	for (size_t i = 0; uuid && i < n; i++)
		if (!strcmp(d[i].uuid, uuid))
			return &d[i];
	return NULL;
}

/* Map the snapshot's GPUs onto this host's: the same ones where they are all
 * here (no pairs), else in order onto as many GPUs of this host (pairs; the
 * driver wants every checkpointed GPU listed).  targets[i] is the device
 * snapshot GPU i restores onto. */
static int map_gpus(const json_t *gpus, struct cuda_device *devs, size_t ndevs,
		    struct cuda_gpu_pair **pairs, size_t *npairs, struct cuda_device ***targets)
{
	size_t nold = json_array_size(gpus), i;
	bool all_here = true;
	const json_t *g;

	*pairs = NULL;
	*npairs = 0;
	*targets = calloc(nold ? nold : 1, sizeof(**targets));
	if (!*targets)
		return -ENOMEM;
	json_array_foreach(gpus, i, g)
		if (!find_dev(devs, ndevs, gpu_uuid(g)))
			all_here = false;
	if (all_here) {
		json_array_foreach(gpus, i, g)
			(*targets)[i] = find_dev(devs, ndevs, gpu_uuid(g));
		return 0;
	}
	if (ndevs < nold) {
		pr_err("the snapshot used %zu GPU(s), this host has %zu", nold, ndevs);
		return -ENODEV;
	}
	*pairs = calloc(nold, sizeof(**pairs));
	if (!*pairs)
		return -ENOMEM;
	json_array_foreach(gpus, i, g) {
		const char *old = gpu_uuid(g), *model = json_string_value(json_object_get(g, "name"));

		if (!old) {
			pr_err("the snapshot's GPU %zu has no UUID", i);
			return -EINVAL;
		}
		if (model && strcmp(model, devs[i].name))
			pr_warn("GPU %s was a %s, restoring onto %s (%s): the driver needs the "
				"same chip type", old, model, devs[i].uuid, devs[i].name);
		snprintf((*pairs)[i].old_uuid, sizeof((*pairs)[i].old_uuid), "%s", old);
		snprintf((*pairs)[i].new_uuid, sizeof((*pairs)[i].new_uuid), "%s", devs[i].uuid);
		(*targets)[i] = &devs[i];
		pr_info("GPU %s -> %s", old, devs[i].uuid);
	}
	*npairs = nold;
	return 0;
}

/* A restore that runs out of GPU memory can leave the process stuck for
 * good: refuse before trying when the recorded usage does not fit. */
static int check_free(const json_t *meta, const json_t *gpus, struct cuda_device **targets)
{
	uint64_t total = json_bytes(meta, total_keys, ARRAY_SIZE(total_keys)), free_sum = 0;
	bool per_gpu = false;
	char a[32], b[32];
	const json_t *g;
	size_t i;

	json_array_foreach(gpus, i, g) {
		uint64_t need = json_is_object(g) ? json_bytes(g, used_keys, ARRAY_SIZE(used_keys)) : 0;

		if (!targets[i])
			continue;
		free_sum += targets[i]->free_bytes;
		if (!need)
			continue;
		per_gpu = true;
		if (targets[i]->free_bytes < need) {
			pr_err("GPU %s has %s free, the snapshot needs %s: not restoring (a "
			       "restore that runs out of GPU memory can leave the process stuck)",
			       targets[i]->uuid, fmt_bytes(targets[i]->free_bytes, a),
			       fmt_bytes(need, b));
			return -ENOSPC;
		}
	}
	if (per_gpu)
		return 0;
	if (!total) {
		pr_warn("the snapshot records no GPU memory figure: restoring without a "
			"free-memory check");
		return 0;
	}
	if (free_sum < total) {
		pr_err("the GPUs have %s free, the snapshot needs %s: not restoring",
		       fmt_bytes(free_sum, a), fmt_bytes(total, b));
		return -ENOSPC;
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
