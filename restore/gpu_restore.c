/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_restore.c — see gpu_restore.h. */
#define LOG_PREFIX "gpu: "
#include "restore/gpu_restore.h"
#include "common/cuda.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/span_record.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* GPU memory that placements hold back until their GPU restore has run
 * (gpu_place, gpu_release), and how many placements are in flight, by
 * device ordinal: a burst of starts sees each other's choices, not only
 * NVML's free figure. */
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t claimed[CUDA_MAX_DEVICES];
static unsigned in_flight[CUDA_MAX_DEVICES];

static unsigned flight_of(const struct cuda_device *d)
{
	return d->ordinal >= 0 && d->ordinal < CUDA_MAX_DEVICES ? in_flight[d->ordinal] : 0;
}

/* Is device a a better place than b (both with room)?  More free memory,
 * then fewer placements in flight, then the snapshot's own GPU, then the
 * lower ordinal. */
static bool better(const struct cuda_device *a, const struct cuda_device *b, const char *uuid)
{
	if (a->free_bytes != b->free_bytes)
		return a->free_bytes > b->free_bytes;
	if (flight_of(a) != flight_of(b))
		return flight_of(a) < flight_of(b);
	if (uuid && !strcmp(a->uuid, uuid) != !strcmp(b->uuid, uuid))
		return !strcmp(a->uuid, uuid);
	return a->ordinal < b->ordinal;
}

/* The device for snapshot GPU g among those not yet taken: of the same model,
 * the one with the most free memory that has room (its own GPU on a tie);
 * else any with room (the driver then refuses a different chip type:
 * warned).  A snapshot that did not record its GPU's model goes to its own
 * GPU when that has room.  -1 if none has room. */
static int choose_one(const struct snapshot_gpu *g, const struct cuda_device *devs, size_t ndevs,
		      const bool *taken, uint64_t reserve)
{
	const char *uuid = g->uuid, *model = g->name;
	uint64_t need = g->used_bytes + reserve;
	int best = -1, best_other = -1;

	for (size_t d = 0; !model && d < ndevs; d++)
		if (!taken[d] && uuid && !strcmp(devs[d].uuid, uuid) && devs[d].free_bytes >= need)
			return (int)d;
	for (size_t d = 0; d < ndevs; d++) {
		int *slot = !model || !strcmp(model, devs[d].name) ? &best : &best_other;

		if (taken[d] || devs[d].free_bytes < need)
			continue;
		if (*slot < 0 || better(&devs[d], &devs[*slot], uuid))
			*slot = (int)d;
	}
	return best >= 0 ? best : best_other;
}

/* The device a start asks for by word ("1", "GPU-…"): its index, or -1. */
static int find_device(const char *word, const struct cuda_device *devs, size_t ndevs)
{
	char *end;
	long v;

	if (!*word)
		return -1;
	errno = 0;
	v = strtol(word, &end, 10);
	if (!*end && !errno) {
		for (size_t d = 0; d < ndevs; d++)
			if (devs[d].ordinal == v)
				return (int)d;
		return -1;
	}
	for (size_t d = 0; d < ndevs; d++)
		if (!strcasecmp(devs[d].uuid, word) ||
		    (!strncasecmp(devs[d].uuid, "GPU-", 4) && !strcasecmp(devs[d].uuid + 4, word)))
			return (int)d;
	return -1;
}

/* The devices request names ("1", "GPU-…", "0,1"), one per snapshot GPU, into
 * choice: -EINVAL (why) when it names a GPU this host does not have, one
 * twice, another number of GPUs than the snapshot used, or another model;
 * -EAGAIN when one it names has no room. */
static int choose_asked(const struct snapshot_gpu *gpus, size_t nold, const char *request,
			const struct cuda_device *devs, size_t ndevs, uint64_t reserve,
			size_t *choice, char *why, size_t whylen)
{
	size_t k = 0;
	char buf[512], *save = NULL, a[32], b[32];
	bool *taken = calloc(ndevs + 1, sizeof(bool));
	int ret = 0;

	if (!taken)
		return -ENOMEM;
	snprintf(buf, sizeof(buf), "%s", request);
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save), k++) {
		const struct snapshot_gpu *g = k < nold ? &gpus[k] : NULL;
		int d = find_device(w, devs, ndevs);

		if (!g) {
			snprintf(why, whylen, "gpu=%s names more GPUs than the snapshot's %zu",
				 request, nold);
			ret = -EINVAL;
			goto out;
		}
		if (d < 0) {
			snprintf(why, whylen, "gpu=%s: this host has no GPU %s (it has %zu: 0 to "
				 "%zu, or their UUIDs)", request, w, ndevs, ndevs ? ndevs - 1 : 0);
			ret = -EINVAL;
			goto out;
		}
		if (taken[d]) {
			snprintf(why, whylen, "gpu=%s names GPU %d twice", request, devs[d].ordinal);
			ret = -EINVAL;
			goto out;
		}
		if (g->name && strcmp(g->name, devs[d].name)) {
			snprintf(why, whylen, "GPU %d is a %s and the snapshot's GPU %zu was a %s: "
				 "the driver restores onto the same chip type only", devs[d].ordinal,
				 devs[d].name, k, g->name);
			ret = -EINVAL;
			goto out;
		}
		if (devs[d].free_bytes < g->used_bytes + reserve) {
			snprintf(why, whylen, "GPU %d has %s free (less what starts in flight are "
				 "taking); the snapshot's GPU %zu needs %s%s", devs[d].ordinal,
				 fmt_bytes(devs[d].free_bytes, a), k, fmt_bytes(g->used_bytes, b),
				 reserve ? " and --gpu-mem-reserve besides" : "");
			ret = -EAGAIN;
			goto out;
		}
		taken[d] = true;
		choice[k] = (size_t)d;
	}
	if (k != nold) {
		snprintf(why, whylen, "gpu=%s names %zu GPU(s); the snapshot used %zu", request, k,
			 nold);
		ret = -EINVAL;
	}
out:
	free(taken);
	return ret;
}

/* gpu_choose, each chosen device keeping reserve bytes free besides. */
static int choose(const struct snapshot_gpu *gpus, size_t nold, const struct cuda_device *devs,
		  size_t ndevs, uint64_t reserve, size_t *choice, bool *moved, char *why,
		  size_t whylen)
{
	bool *taken = calloc(ndevs + 1, sizeof(bool));
	char a[32], b[32], c[32];
	int ret = 0;

	*moved = false;
	if (!taken)
		return -ENOMEM;
	if (ndevs < nold) {
		snprintf(why, whylen, "the snapshot used %zu GPU(s), this host has %zu", nold, ndevs);
		ret = -ENODEV;
		goto out;
	}
	for (size_t i = 0; i < nold; i++) {
		const struct snapshot_gpu *g = &gpus[i];
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
					 i, fmt_bytes(g->used_bytes, a), fmt_bytes(reserve, c),
					 fmt_bytes(most, b));
			else
				snprintf(why, whylen,
					 "no GPU has room for the snapshot's GPU %zu: it needs %s, "
					 "the most free on a GPU left is %s (not restoring: a "
					 "restore that runs out of GPU memory can leave the "
					 "process stuck)",
					 i, fmt_bytes(g->used_bytes, a), fmt_bytes(most, b));
			ret = -EAGAIN; /* GPU memory frees as instances stop: 503, retry */
			goto out;
		}
		taken[d] = true;
		choice[i] = (size_t)d;
		if (!g->uuid || strcmp(devs[d].uuid, g->uuid))
			*moved = true;
	}
out:
	free(taken);
	return ret;
}

int gpu_choose(const struct snapshot_gpu *gpus, size_t ngpus, const struct cuda_device *devs,
	       size_t ndevs, size_t *choice, bool *moved, char *why, size_t whylen)
{
	return choose(gpus, ngpus, devs, ndevs, 0, choice, moved, why, whylen);
}

int gpu_admit_devices(const struct snapshot_gpu *gpus, size_t ngpus,
		      const struct cuda_device *devs, size_t ndevs, uint64_t reserve, char *why,
		      size_t whylen)
{
	size_t *choice = calloc(ngpus + 1, sizeof(*choice));
	bool moved, known = false;
	int ret;

	if (!choice)
		return -ENOMEM;
	/* No free-memory figure (no NVML): nothing to judge by here. */
	for (size_t d = 0; d < ndevs; d++)
		known |= devs[d].free_bytes > 0;
	ret = known ? choose(gpus, ngpus, devs, ndevs, reserve, choice, &moved, why, whylen) : 0;
	free(choice);
	return ret;
}

int gpu_place_devices(const struct snapshot_gpu *gpus, size_t nold, const char *request,
		      const struct cuda_device *devs, size_t ndevs, uint64_t reserve,
		      struct gpu_placement *p, char *why, size_t whylen)
{
	size_t choice[GPU_MAX] = { 0 };
	struct cuda_device *eff = NULL;
	int ret;

	memset(p, 0, sizeof(*p));
	if (nold > GPU_MAX) {
		snprintf(why, whylen, "the snapshot used %zu GPUs; thaw places at most %d", nold,
			 GPU_MAX);
		return -EINVAL;
	}
	eff = calloc(ndevs + 1, sizeof(*eff));
	if (!eff)
		return -ENOMEM;
	/* No free-memory figure on any device (no NVML): nothing is judged by
	 * memory, as gpu_admit_devices does; the restore itself says if it
	 * does not fit.  Else every GPU would read as full. */
	bool known = false;

	for (size_t d = 0; d < ndevs; d++)
		known |= devs[d].free_bytes > 0;
	pthread_mutex_lock(&claims_lock);
	/* What each device has free once the placements in flight have taken
	 * theirs. */
	for (size_t d = 0; d < ndevs; d++) {
		uint64_t c = devs[d].ordinal >= 0 && devs[d].ordinal < CUDA_MAX_DEVICES ?
				     claimed[devs[d].ordinal] : 0;

		eff[d] = devs[d];
		if (!known)
			eff[d].free_bytes = UINT64_MAX;
		else
			eff[d].free_bytes = devs[d].free_bytes > c ? devs[d].free_bytes - c : 0;
	}
	if (request && *request)
		ret = choose_asked(gpus, nold, request, eff, ndevs, reserve, choice, why, whylen);
	else
		ret = choose(gpus, nold, eff, ndevs, reserve, choice, &p->moved, why, whylen);
	if (ret)
		goto out;
	p->n = nold;
	for (size_t i = 0; i < nold; i++) {
		const struct cuda_device *d = &devs[choice[i]];
		int o = d->ordinal;

		p->dev[i] = eff[choice[i]];
		if (!known)
			p->dev[i].free_bytes = 0; /* unknown, as the device said */
		if (!gpus[i].uuid || strcmp(d->uuid, gpus[i].uuid))
			p->moved = true;
		p->claim[i] = gpus[i].used_bytes;
		if (o >= 0 && o < CUDA_MAX_DEVICES) {
			claimed[o] += p->claim[i];
			in_flight[o]++;
		}
	}
	p->held = true;
out:
	pthread_mutex_unlock(&claims_lock);
	free(eff);
	return ret;
}

int gpu_place(const struct snapshot_meta *sm, const char *request, uint64_t reserve,
	      struct gpu_placement *p, char *why, size_t whylen)
{
	struct cuda_device *devs = NULL;
	size_t ndevs = 0;
	int ret;

	memset(p, 0, sizeof(*p));
	if (!sm->ngpus)
		return 0; /* a snapshot that recorded no GPU: the driver's own mapping */
	ret = cuda_init();
	if (ret) {
		snprintf(why, whylen, "this is a GPU function and this host has no usable GPU "
			 "driver: %s", cuda_unavailable_reason());
		return -ENODEV;
	}
	ret = cuda_devices(&devs, &ndevs);
	if (ret) {
		snprintf(why, whylen, "cannot list this host's GPUs: %s", strerror(-ret));
		return ret;
	}
	ret = gpu_place_devices(sm->gpus, sm->ngpus, request, devs, ndevs, reserve, p, why,
				whylen);
	free(devs);
	return ret;
}

uint64_t gpu_free_bytes(int ordinal)
{
	struct cuda_device *devs = NULL;
	uint64_t v = 0;
	size_t n = 0;

	if (cuda_init() || cuda_devices(&devs, &n))
		return 0;
	for (size_t d = 0; d < n; d++)
		if (devs[d].ordinal == ordinal)
			v = devs[d].free_bytes;
	free(devs);
	return v;
}

int gpu_place_on(int ordinal, const char *uuid, uint64_t need, uint64_t reserve,
		 struct gpu_placement *p, char *why, size_t whylen)
{
	struct cuda_device *devs = NULL;
	struct snapshot_gpu g = { .index = ordinal, .used_bytes = need };
	char asked[16];
	size_t ndevs = 0, d;
	int ret;

	memset(p, 0, sizeof(*p));
	if (cuda_init() || cuda_devices(&devs, &ndevs)) {
		snprintf(why, whylen, "cannot list this host's GPUs: %s", cuda_unavailable_reason());
		return -ENODEV;
	}
	for (d = 0; d < ndevs; d++)
		if (devs[d].ordinal == ordinal)
			break;
	if (d == ndevs || strcmp(devs[d].uuid, uuid)) {
		snprintf(why, whylen, "GPU %d is no longer %s", ordinal, uuid);
		ret = -ENODEV;
		goto out;
	}
	/* As if the snapshot had used this GPU and need bytes on it. */
	g.uuid = devs[d].uuid;
	g.name = devs[d].name;
	snprintf(asked, sizeof(asked), "%d", ordinal);
	ret = gpu_place_devices(&g, 1, asked, devs, ndevs, reserve, p, why, whylen);
out:
	free(devs);
	return ret;
}

void gpu_release(struct gpu_placement *p)
{
	if (!p || !p->held)
		return;
	pthread_mutex_lock(&claims_lock);
	for (size_t i = 0; i < p->n; i++) {
		int o = p->dev[i].ordinal;

		if (o < 0 || o >= CUDA_MAX_DEVICES)
			continue;
		claimed[o] = claimed[o] > p->claim[i] ? claimed[o] - p->claim[i] : 0;
		if (in_flight[o])
			in_flight[o]--;
	}
	p->held = false;
	pthread_mutex_unlock(&claims_lock);
}

void gpu_claim_taken(struct gpu_placement *p, size_t i, uint64_t bytes)
{
	pthread_mutex_lock(&claims_lock);
	if (p && p->held && i < p->n) {
		int o = p->dev[i].ordinal;
		uint64_t k = bytes < p->claim[i] ? bytes : p->claim[i];

		p->claim[i] -= k;
		if (o >= 0 && o < CUDA_MAX_DEVICES)
			claimed[o] = claimed[o] > k ? claimed[o] - k : 0;
	}
	pthread_mutex_unlock(&claims_lock);
}

/* The GPU pairs for the driver when some snapshot GPU goes elsewhere: one
 * for every snapshot GPU (the driver wants every checkpointed GPU listed);
 * *npairs 0 when each stays. */
static int make_pairs(const struct snapshot_meta *sm, const struct gpu_placement *p,
		      struct cuda_gpu_pair **pairs, size_t *npairs)
{
	*pairs = NULL;
	*npairs = 0;
	if (!p->moved)
		return 0;
	*pairs = calloc(p->n ? p->n : 1, sizeof(**pairs));
	if (!*pairs)
		return -ENOMEM;
	for (size_t i = 0; i < sm->ngpus && i < p->n; i++) {
		const char *old = sm->gpus[i].uuid, *model = sm->gpus[i].name;
		const struct cuda_device *to = &p->dev[i];

		if (!old) {
			pr_err("the snapshot's GPU %zu has no UUID", i);
			free(*pairs);
			*pairs = NULL;
			return -EINVAL;
		}
		if (model && strcmp(model, to->name) != 0)
			pr_warn("GPU %s was a %s, restoring onto %s (%s): the driver needs the "
				"same chip type", old, model, to->uuid, to->name);
		snprintf((*pairs)[i].old_uuid, sizeof((*pairs)[i].old_uuid), "%s", old);
		snprintf((*pairs)[i].new_uuid, sizeof((*pairs)[i].new_uuid), "%s", to->uuid);
		pr_info("GPU %s -> %s (GPU %d)", old, to->uuid, to->ordinal);
	}
	*npairs = p->n;
	return 0;
}

/* Without per-GPU figures, the snapshot's total must fit the GPUs chosen:
 * a restore that runs out of GPU memory can leave the process stuck for
 * good.  (With them, the placement has checked each.) */
static int check_free(const struct snapshot_meta *sm, const struct gpu_placement *p)
{
	uint64_t total = sm->gpu_used_bytes, free_sum = 0;
	char a[32], b[32];

	for (size_t i = 0; i < sm->ngpus; i++) {
		if (sm->gpus[i].used_bytes)
			return 0;
		if (i < p->n)
			free_sum += p->dev[i].free_bytes;
	}
	if (!total) {
		pr_warn("the snapshot records no GPU memory figure: restoring without a "
			"free-memory check");
		return 0;
	}
	if (!free_sum) {
		pr_warn("the GPUs give no free-memory figure (no NVML): restoring without a "
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
		if (ARRAY_GROW(*pids, cap, *n + 1, 16)) {
			ret = -ENOMEM;
			goto out;
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

/* The last refused restore of gpu_restore_container on this thread, for
 * gpu_span_record: the step, the driver's words, the hint. */
static __thread struct span_record last_refusal;

void gpu_span_record(const char *data_dir, const char *function, const struct snapshot_meta *sm,
		     int ret)
{
	struct span_record r;

	if (!data_dir || (sm->ncuda_processes < 2 && sm->ngpus < 2))
		return;
	if (ret) {
		if (!last_refusal.refused)
			return; /* not the driver's refusal: nothing to say of it */
		r = last_refusal;
		snprintf(r.function, sizeof(r.function), "%s", function);
		span_record_write(data_dir, &r);
		return;
	}
	/* Restored: a refusal of this function's start on this driver is
	 * past (a snapshot's record stays). */
	if (span_record_read(data_dir, &r) || !r.refused || strcmp(r.function, function) ||
	    (strcmp(r.step, "restore") && strcmp(r.step, "unlock")))
		return;
	r.refused = false;
	r.error[0] = r.hint[0] = '\0';
	span_record_write(data_dir, &r);
}

int gpu_restore_container(const struct runner *r, const char *id, pid_t init,
			  const struct snapshot_meta *sm, struct gpu_placement *place, pid_t **pids,
			  size_t *n)
{
	size_t nall = 0, npairs = 0, nrec = sm->ncuda_processes;
	double restore_ms = 0;
	struct gpu_placement own = { 0 }, *p = place;
	struct cuda_gpu_pair *pairs = NULL;
	pid_t *all = NULL, failed = 0;
	char why[512];
	uint64_t t0;
	int ret;

	*pids = NULL;
	*n = 0;
	memset(&last_refusal, 0, sizeof(last_refusal));
	ret = cuda_init();
	if (ret) {
		pr_err("this is a GPU function and this host has no usable GPU driver: %s",
		       cuda_unavailable_reason());
		ret = -ENODEV;
		goto out;
	}
	if (!p || (!p->held && sm->ngpus)) {
		p = &own;
		ret = gpu_place(sm, NULL, 0, p, why, sizeof(why));
		if (ret) {
			pr_err("%s", why);
			goto out;
		}
	}
	ret = make_pairs(sm, p, &pairs, &npairs);
	if (!ret)
		ret = check_free(sm, p);
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
	/* Every process restored before any is unlocked, all or none. */
	t0 = now_ns();
	ret = cuda_restore_group(*pids, *n, pairs, npairs, &failed, &restore_ms);
	if (ret) {
		enum cuda_step step = cuda_group_failed_step();
		/* Only for several processes: one alone shares nothing. */
		const char *hint = *n > 1 ? span_refusal_hint(step, ret) : "";
		struct span_record *rec = &last_refusal;
		char cause[512], onto[128] = "";

		snprintf(cause, sizeof(cause), "%s", log_last_error());
		for (size_t i = 0; i < p->n; i++)
			snprintf(onto + strlen(onto), sizeof(onto) - strlen(onto), "%s%d",
				 i ? "," : " onto GPU ", p->dev[i].ordinal);
		log_set_error("CUDA process %d (of %zu) could not be restored%s: %s; %s%s%s%s",
			      (int)failed, *n, onto, cause[0] ? cause : strerror(-ret),
			      *n > 1 ? "the others were checkpointed back, the start fails" :
				       "the start fails",
			      hint[0] ? " (" : "", hint, hint[0] ? ")" : "");
		pr_err("%s", log_last_error());
		*rec = (struct span_record){ .refused = true, .processes = (unsigned)*n,
					   .gpus = (unsigned)sm->ngpus };
		if (cuda_kernel_driver_version(rec->driver, sizeof(rec->driver)))
			snprintf(rec->driver, sizeof(rec->driver), "unknown");
		snprintf(rec->step, sizeof(rec->step), "%s", cuda_step_name(step));
		snprintf(rec->error, sizeof(rec->error), "%s", cause[0] ? cause : strerror(-ret));
		snprintf(rec->hint, sizeof(rec->hint), "%s", hint);
		goto out;
	}
	pr_info("%zu CUDA process(es) of %s restored and unlocked in %.1f ms (restored in %.1f)%s",
		*n, id, ms_since(t0), restore_ms, npairs ? " (onto other GPUs)" : "");
out:
	if (ret) {
		free(*pids);
		*pids = NULL;
		*n = 0;
	}
	/* The GPU memory is taken now (or not at all): NVML's figure says it. */
	gpu_release(p);
	free(all);
	free(pairs);
	return ret;
}

void gpu_lock_for_kill(const pid_t *pids, size_t n)
{
	if (!n || cuda_init())
		return;
	for (size_t i = 0; i < n; i++) {
		enum cuda_proc_state st;

		if (cuda_process_state(pids[i], &st) || st != CUDA_PROC_RUNNING)
			continue; /* gone, no CUDA state, or locked or checkpointed already */
		if (cuda_lock(pids[i], GPU_LOCK_TIMEOUT_MS))
			pr_warn("could not lock CUDA process %d before the kill: %s", (int)pids[i],
				log_last_error());
	}
}

/* The pid of host process pid inside its PID namespace (the last NSpid). */
static pid_t inner_pid(pid_t pid)
{
	char path[64], line[256];
	pid_t inner = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (strncmp(line, "NSpid:", 6))
			continue;
		for (p = line + 6;; p = end) {
			long v = strtol(p, &end, 10);

			if (end == p)
				break;
			inner = (pid_t)v;
		}
	}
	fclose(f);
	return inner;
}

int gpu_memory_restore(const struct snapshot_gpu_memory *gm, const pid_t *pids, size_t n,
		       const char *out_dir, double *copy_ms)
{
	struct gpumem_status *st = NULL;
	pid_t *ask = NULL, *ask_ns = NULL;
	uint64_t t0 = now_ns();
	size_t k = 0;
	int ret = 0;

	*copy_ms = 0;
	if (!gm->nns_pids || !out_dir)
		return 0;
	ask = calloc(n + 1, sizeof(*ask));
	ask_ns = calloc(n + 1, sizeof(*ask_ns));
	st = calloc(n + 1, sizeof(*st));
	if (!ask || !ask_ns || !st) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		pid_t inner = inner_pid(pids[i]);
		size_t w;

		for (w = 0; w < gm->nns_pids; w++)
			if (gm->ns_pids[w] == inner)
				break;
		if (w == gm->nns_pids || !gpumem_loaded(pids[i]))
			continue;
		ask[k] = pids[i];
		ask_ns[k++] = inner;
	}
	if (k < gm->nns_pids) {
		log_set_error("%zu of the snapshot's %zu process(es) with saved GPU memory found "
			      "with libthaw-cuda after the restore", k, gm->nns_pids);
		pr_err("%s", log_last_error());
		ret = -ESRCH;
		goto out;
	}
	ret = gpumem_request(ask, ask_ns, k, GPUMEM_OP_RESTORE, out_dir, GPUMEM_RESTORE_TIMEOUT_MS,
			     st);
	for (size_t i = 0; i < k; i++) {
		char line[256];

		if (st[i].ok) {
			gpumem_describe(&st[i], line, sizeof(line));
			/* At info: where a start's copy went (map, fault in, pin,
			 * the whole copy on N threads) is what tuning it needs. */
			pr_info("process %d copied back: %s, %d threads, %d slices pinned, map %.1f ms, "
				"populate %.1f ms, pin %.1f ms, copy %.1f ms",
				(int)ask[i], line, st[i].copy_threads, st[i].pinned_slices, st[i].map_ms,
				st[i].populate_ms, st[i].register_ms, st[i].copy_ms);
			continue;
		}
		log_set_error("the GPU memory of process %d could not be put back: %s",
			      (int)ask[i], st[i].error[0] ? st[i].error : "no answer");
		pr_err("%s", log_last_error());
		if (!ret)
			ret = -EIO;
	}
out:
	*copy_ms = ms_since(t0);
	free(ask);
	free(ask_ns);
	free(st);
	return ret;
}
