/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill.c — see gpu_prefill.h: a fill's life, from its start to its
 * end, and what it does where no fill applies.  Its parts are named in
 * gpu_prefill_internal.h.
 *
 * A fill runs on a thread of its own (prefill_main): the device memory
 * made and filled (gpu_prefill_fill.c), then offered to the library until
 * it has taken it (gpu_prefill_serve.c).  A piece unlike its checksum fails
 * the fill with -EUCLEAN, which is not the fill's usual failure (the
 * library would copy the same damaged file itself): the start's GPU
 * restore fails, with the function's calls still held, and the entry is
 * reported (tier_damage_report) to be materialised again.  Where no fill
 * applies but the entry has checksums, a fill is only a check: its thread
 * reads the files whole while CRIU restores, and the library copies them
 * after only if they are sound.
 */
#define LOG_PREFIX "gpu: "
#include "restore/gpu_prefill.h"
#include "common/cuda.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "restore/gpu_pin.h"
#include "restore/gpu_prefill_cuda.h"
#include "restore/gpu_prefill_internal.h"
#include "restore/gpu_restore.h"
#include "restore/tier.h"
#include "restore/tier_sums.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void set_state(struct gpu_prefill *pf, int state)
{
	pthread_mutex_lock(&pf->mu);
	pf->state = state;
	pthread_cond_broadcast(&pf->cv);
	pthread_mutex_unlock(&pf->mu);
}

/* The RAM tier entry's checksums of each process's file (none with
 * THAW_GPU_VERIFY=0).  An entry without any (an older thaw made it) is
 * filled unchecked; one whose checksums are damaged or lack the file is
 * damaged (-EUCLEAN). */
static int load_sums(struct gpu_prefill *pf)
{
	const char *env = getenv("THAW_GPU_VERIFY");
	int ret;

	if (env && !strcmp(env, "0"))
		return 0;
	ret = tier_sums_load(pf->tier_dir, &pf->sums);
	if (ret == -ENOENT) {
		pf->unverified = true;
		return 0;
	}
	if (ret) {
		snprintf(pf->why, sizeof(pf->why), "its checksums (" TIER_SUMS "): %s",
			 ret == -EUCLEAN ? "damaged" : strerror(-ret));
		return ret;
	}
	for (size_t i = 0; i < pf->np; i++) {
		char name[64];

		snprintf(name, sizeof(name), GPUMEM_FILE_FMT, pf->p[i].ns_pid);
		pf->p[i].sum = tier_sums_find(pf->sums, name);
		if (!pf->p[i].sum) {
			snprintf(pf->why, sizeof(pf->why), "%s without a checksum", name);
			return -EUCLEAN;
		}
	}
	return 0;
}

/* A check-only fill's work: each process's file read whole and checked. */
static int check_files(struct gpu_prefill *pf)
{
	const struct tier_sum_file **f = calloc(pf->np + 1, sizeof(*f));
	uint64_t bad = 0, t0 = now_ns();
	size_t bi = 0;
	int ret = f ? load_sums(pf) : -ENOMEM;

	for (size_t i = 0; !ret && i < pf->np; i++)
		f[i] = pf->p[i].sum;
	if (!ret && pf->sums)
		ret = tier_sums_check_files(pf->tier_dir, f, pf->np, &bi, &bad);
	pf->verify_ns = now_ns() - t0;
	if (ret == -EUCLEAN && bad == UINT64_MAX)
		snprintf(pf->why, sizeof(pf->why), "%s of another size than it was made", f[bi]->path);
	else if (ret == -EUCLEAN && f && f[bi])
		snprintf(pf->why, sizeof(pf->why), "%s unlike its checksum: block %llu (bytes "
			 "%llu-%llu)", f[bi]->path, (unsigned long long)(bad / TIER_SUM_BLOCK),
			 (unsigned long long)bad, (unsigned long long)(bad + TIER_SUM_BLOCK - 1));
	else if (ret == -ENOENT && f && f[bi]) {
		snprintf(pf->why, sizeof(pf->why), "%s missing", f[bi]->path);
		ret = -EUCLEAN;
	} else if (ret && !pf->why[0])
		snprintf(pf->why, sizeof(pf->why), "checking: %s", strerror(-ret));
	free(f);
	return ret;
}

/* Every process's turn left (a fill that ends before it copies). */
static void leave_turns(struct gpu_prefill *pf)
{
	for (size_t i = 0; pf->p && i < pf->np; i++)
		gpu_turn_leave(&pf->p[i].turn);
}

static void *fill_proc_main(void *arg)
{
	struct pf_proc *p = arg;

	/* A context current on this thread, as the driver's allocation calls
	 * may want (made by prefill_main already). */
	prefill_use_device(p->pf->gpus[p->n ? p->a[0].dev : 0]);
	p->ret = prefill_fill_proc(p->pf, p);
	gpu_turn_leave(&p->turn);
	return NULL;
}

/* Each process filled on a thread of its own, all at once: the processes
 * of a function on GPUs of their own (one per GPU, tensor parallel) each
 * get their bytes over their own GPU's link side by side; those that share
 * a GPU wait for each other's copy in their turns.  What they did summed
 * into pf: the first failure (a damaged file first of all), the bytes, the
 * copy's span on each GPU. */
static int fill_procs(struct gpu_prefill *pf)
{
	bool *started = calloc(pf->np + 1, sizeof(bool));
	int ret = 0;

	if (!started) {
		leave_turns(pf);
		snprintf(pf->why, sizeof(pf->why), "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < pf->np; i++) {
		pf->p[i].pf = pf;
		started[i] = pthread_create(&pf->p[i].thread, NULL, fill_proc_main, &pf->p[i]) == 0;
		if (!started[i])
			fill_proc_main(&pf->p[i]);
	}
	for (size_t i = 0; i < pf->np; i++) {
		struct pf_proc *p = &pf->p[i];

		if (started[i])
			pthread_join(p->thread, NULL);
		if (p->ret && (!ret || (p->ret == -EUCLEAN && ret != -EUCLEAN))) {
			ret = p->ret;
			snprintf(pf->why, sizeof(pf->why), "%s", p->why);
		}
		pf->bytes += p->bytes;
		pf->offered_allocs += p->offered_allocs;
		pf->verify_ns += p->verify_ns;
		pf->pin_ms = p->pin_ms > pf->pin_ms ? p->pin_ms : pf->pin_ms;
		pf->make_ms = p->make_ms > pf->make_ms ? p->make_ms : pf->make_ms;
		if (p->turn.begin_ns && (!pf->copy_begin_ns || p->turn.begin_ns < pf->copy_begin_ns))
			pf->copy_begin_ns = p->turn.begin_ns;
		if (p->turn.end_ns > pf->copy_end_ns)
			pf->copy_end_ns = p->turn.end_ns;
		for (size_t k = 0; k < pf->ngpus && k < GPU_MAX; k++) {
			if (!p->gpu_bytes[k])
				continue;
			pf->gpu_bytes[k] += p->gpu_bytes[k];
			if (!pf->gpu_begin_ns[k] || p->turn.begin_ns < pf->gpu_begin_ns[k])
				pf->gpu_begin_ns[k] = p->turn.begin_ns;
			if (p->gpu_end_ns[k] > pf->gpu_end_ns[k])
				pf->gpu_end_ns[k] = p->gpu_end_ns[k];
		}
	}
	free(started);
	return ret;
}

/* A fill's thread: the memory made and filled, then offered until the
 * library has taken it or gpu_prefill_end; or, where no fill applies, the
 * files only checked.  Its state set either way, for gpu_prefill_ready. */
static void *prefill_main(void *arg)
{
	struct gpu_prefill *pf = arg;
	uint64_t t0 = now_ns();
	int ret = pf->check_only ? check_files(pf) : 0, bad = -1;

	if (pf->check_only) {
		if (ret == -EUCLEAN) {
			pr_err("the device memory in RAM tier entry %s is damaged: %s", pf->tier_dir,
			       pf->why);
			tier_damage_report(pf->tier_dir, TIER_FOUND_FILL, pf->why);
		}
		pf->fill_ms = ms_since(t0);
		set_state(pf, ret ? ret : 1);
		return NULL;
	}
	ret = prefill_use_devices(pf->gpus, pf->ngpus, &bad);
	pf->ctx_ms = ms_since(t0);
	pr_debug("fill: contexts on %zu GPU(s) in %.1f ms (%d)", pf->ngpus, pf->ctx_ms, ret);
	if (ret)
		snprintf(pf->why, sizeof(pf->why), "no CUDA context on GPU %d", bad);
	if (!ret)
		ret = load_sums(pf);
	if (!ret)
		ret = fill_procs(pf);
	/* Made or not, no restore waits for them any longer. */
	gpu_order_forget(&pf->making);
	leave_turns(pf);
	if (ret == -EUCLEAN) {
		pr_err("the device memory in RAM tier entry %s is damaged: %s", pf->tier_dir,
		       pf->why);
		tier_damage_report(pf->tier_dir, TIER_FOUND_FILL, pf->why);
	}
	/* All or nothing: a library that found a socket no one serves would
	 * wait for it. */
	for (size_t i = 0; ret && i < pf->np; i++)
		if (pf->p[i].listen_fd >= 0) {
			close(pf->p[i].listen_fd);
			pf->p[i].listen_fd = -1;
			unlink(pf->p[i].sock);
		}
	pf->fill_ms = ms_since(t0);
	pr_debug("fill: every process %s in %.1f ms", ret ? "failed" : "offered", pf->fill_ms);
	set_state(pf, ret ? ret : 1);
	if (!ret)
		prefill_serve(pf);
	return NULL;
}

/* Can a fill go by placement: a GPU of this host for each of the
 * snapshot's? */
static bool placement_fills(const struct snapshot_meta *sm, const struct gpu_placement *pl)
{
	if (!pl || !pl->n || pl->n != sm->ngpus || pl->n > GPU_MAX)
		return false;
	for (size_t k = 0; k < pl->n; k++)
		if (pl->dev[k].ordinal < 0 || pl->dev[k].ordinal >= CUDA_MAX_DEVICES)
			return false;
	return true;
}

/* May a layout without UUIDs (an older library's) go by device ordinal?
 * The process's ordinal is the snapshot's GPU of that index where CUDA was
 * told the function's GPUs (CUDA_VISIBLE_DEVICES, in the snapshot's
 * order), but the host's order where the function had every GPU of its
 * host: the two agree where the snapshot's GPUs are in host order.
 * Otherwise thawd cannot tell which GPU an allocation was on, and the
 * library copies, as before.  (A layout with UUIDs names the GPU.) */
static bool ordinals_are_indexes(const struct snapshot_meta *sm)
{
	for (size_t k = 1; k < sm->ngpus; k++)
		if (sm->gpus[k - 1].index < 0 || sm->gpus[k].index <= sm->gpus[k - 1].index)
			return false;
	return true;
}

/* Each process's turn on the GPUs its allocations are on, each joined
 * at once on all of them (gpu_turn.h), the processes in their order: here,
 * in the order the starts come, so that the first start's copies go
 * first on every GPU. */
static void join_turns(struct gpu_prefill *pf)
{
	for (size_t i = 0; i < pf->np; i++) {
		struct pf_proc *p = &pf->p[i];
		bool on[GPU_MAX] = { false };
		int ords[GPU_MAX];
		size_t n = 0;

		for (size_t k = 0; k < p->n; k++)
			on[p->a[k].dev] = true;
		for (size_t k = 0; k < pf->ngpus && k < GPU_MAX; k++)
			if (on[k])
				ords[n++] = pf->gpus[k];
		gpu_turn_join(&p->turn, ords, n);
	}
	pf->joined_ns = now_ns();
}

struct gpu_prefill *gpu_prefill_start(const struct snapshot_meta *sm, const char *tier_dir,
				      const char *out_dir, struct gpu_placement *placement)
{
	const struct snapshot_gpu_memory *gm = &sm->gpu_memory;
	const char *env = getenv("THAW_GPU_PREFILL"), *verify = getenv("THAW_GPU_VERIFY");
	bool fill = !(env && !strcmp(env, "0")) && out_dir && placement_fills(sm, placement) &&
		    !cuda_init();
	char sums[PATH_MAX + 16];
	struct gpu_prefill *pf;

	if (!tier_dir || !gm->nns_pids)
		return NULL;
	if (fill)
		fill = prefill_driver_load();
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return NULL;
	pf->wake[0] = pf->wake[1] = -1;
	snprintf(pf->tier_dir, sizeof(pf->tier_dir), "%s", tier_dir);
	snprintf(pf->out_dir, sizeof(pf->out_dir), "%s", out_dir);
	pthread_mutex_init(&pf->mu, NULL);
	pthread_cond_init(&pf->cv, NULL);
	pf->p = calloc(gm->nns_pids, sizeof(*pf->p));
	if (!pf->p || pipe2(pf->wake, O_CLOEXEC))
		goto fail;
	for (size_t i = 0; i < gm->nns_pids; i++) {
		struct pf_proc *p = &pf->p[pf->np++];

		p->ns_pid = gm->ns_pids[i];
		p->listen_fd = -1;
		/* A snapshot whose library wrote no layout (an older one)
		 * copies as it did. */
		if (fill && prefill_read_layout(tier_dir, p, sm->gpus, placement->n,
						ordinals_are_indexes(sm)))
			fill = false;
	}
	for (size_t i = 0; placement && i < placement->n && i < GPU_MAX; i++)
		pf->gpus[pf->ngpus++] = placement->dev[i].ordinal;
	/* No fill: only a check, where there is one to make; and where there
	 * is none either, only the library's turn on the GPUs it copies to. */
	snprintf(sums, sizeof(sums), "%s/" TIER_SUMS, tier_dir);
	if (!fill && ((verify && !strcmp(verify, "0")) || access(sums, F_OK))) {
		if (!pf->ngpus)
			goto fail;
		pf->library_only = true;
		pf->state = 1;
		return pf;
	}
	pf->check_only = !fill;
	if (fill) {
		pf->placement = placement;
		join_turns(pf);
	}
	if (pthread_create(&pf->thread, NULL, prefill_main, pf)) {
		leave_turns(pf);
		goto fail;
	}
	pf->started = true;
	return pf;
fail:
	pf->state = -EINVAL;
	gpu_prefill_end(pf, NULL, 0);
	return NULL;
}

bool gpu_prefill_fills(const struct gpu_prefill *p)
{
	return p && !p->check_only && !p->library_only;
}

const struct gpu_making *gpu_prefill_making(const struct gpu_prefill *p)
{
	return gpu_prefill_fills(p) ? &p->making : NULL;
}

void gpu_prefill_copy_span(const struct gpu_prefill *p, uint64_t *begin, uint64_t *end)
{
	*begin = p ? p->copy_begin_ns : 0;
	*end = p ? p->copy_end_ns : 0;
}

int gpu_prefill_ready(struct gpu_prefill *p)
{
	int st;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	while (!p->state)
		pthread_cond_wait(&p->cv, &p->mu);
	st = p->state;
	pthread_mutex_unlock(&p->mu);
	return st < 0 ? st : 0;
}

/* How long t waited for its turn (waited) or held it (ms). */
static double turn_ms(const struct gpu_turn *t, bool waited)
{
	if (!t->begin_ns)
		return 0.0;
	if (waited)
		return (double)(t->begin_ns - t->joined_ns) / 1e6;
	return t->end_ns ? (double)(t->end_ns - t->begin_ns) / 1e6 : 0.0;
}

struct let_go {
	struct pf_proc *p;
	size_t np;
	int ordinal; /* a GPU whose context the driver's calls run in, -1 none */
	bool own_thread; /* not the start's: it may wait for the restores */
};

static void let_go_now(struct pf_proc *procs, size_t np, int ordinal)
{
	if (ordinal >= 0)
		prefill_use_device(ordinal);
	for (size_t i = 0; i < np; i++) {
		prefill_let_go(&procs[i]);
		free(procs[i].a);
	}
	free(procs);
}

/* Let-go threads still running: the process waits for them at its exit
 * (a `thaw start` exits right after its start), since one inside the
 * driver while exit tears the driver down crashes the process. */
static pthread_mutex_t let_go_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t let_go_cv; /* on now_ns()'s clock: made in let_go_setup */
static int let_go_running;
static pthread_once_t let_go_once = PTHREAD_ONCE_INIT;

static void let_go_wait_all(void)
{
	struct timespec until = mono_after_ms(30 * 1000);

	pthread_mutex_lock(&let_go_mu);
	while (let_go_running > 0)
		if (pthread_cond_timedwait(&let_go_cv, &let_go_mu, &until))
			break;
	pthread_mutex_unlock(&let_go_mu);
}

/* Once, before the first let-go thread: its cv, and the wait at exit. */
static void let_go_setup(void)
{
	cond_init_monotonic(&let_go_cv);
	atexit(let_go_wait_all);
}

static void *let_go_main(void *arg)
{
	struct let_go *g = arg;

	/* Once no start restores: each call would wait behind them.  (On
	 * the start's own thread it cannot wait: the start is restoring.) */
	if (g->own_thread)
		gpu_order_quiet();
	let_go_now(g->p, g->np, g->ordinal);
	free(g);
	pthread_mutex_lock(&let_go_mu);
	let_go_running--;
	pthread_cond_broadcast(&let_go_cv);
	pthread_mutex_unlock(&let_go_mu);
	return NULL;
}

/* The fill's processes' allocations let go of (prefill_let_go) on a
 * thread of their own: unmapping, freeing and releasing are the driver's
 * work, which waits behind every restore the driver runs beside it, and
 * nothing the start needs waits for them.  procs (np of them) is freed
 * with them. */
static void let_go_later(struct pf_proc *procs, size_t np, int ordinal)
{
	bool holds = false;
	struct let_go *g;
	pthread_attr_t at;
	pthread_t th;
	bool started = false;

	/* A check, or a fill that made nothing: no driver call to wait for. */
	for (size_t i = 0; procs && i < np; i++)
		for (size_t k = 0; k < procs[i].n && procs[i].a; k++)
			holds |= procs[i].a[k].h || procs[i].a[k].mapped || procs[i].a[k].fd >= 0;
	g = holds ? malloc(sizeof(*g)) : NULL;
	if (!g) {
		/* Nothing held (or no memory for a thread): only a context
		 * where there is something for the driver to let go of. */
		let_go_now(procs, procs ? np : 0, holds ? ordinal : -1);
		return;
	}
	*g = (struct let_go){ procs, np, ordinal, true };
	pthread_once(&let_go_once, let_go_setup);
	pthread_mutex_lock(&let_go_mu);
	let_go_running++;
	pthread_mutex_unlock(&let_go_mu);
	if (!pthread_attr_init(&at)) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		started = pthread_create(&th, &at, let_go_main, g) == 0;
		pthread_attr_destroy(&at);
	}
	if (!started) {
		g->own_thread = false;
		let_go_main(g);
	}
}

void gpu_prefill_end(struct gpu_prefill *pf, char *summary, size_t len)
{
	if (!pf)
		return;
	if (pf->started) {
		if (write(pf->wake[1], "x", 1) < 0)
			pr_debug("waking the prefill thread: %s", strerror(errno));
		pthread_join(pf->thread, NULL);
	}
	if (summary && len && pf->library_only) {
		snprintf(summary, len, "the library copied the device memory in its GPUs' turn "
			 "(after %.1f ms, for %.1f ms)", turn_ms(&pf->lib_turn, true),
			 turn_ms(&pf->lib_turn, false));
	} else if (summary && len && pf->check_only) {
		snprintf(summary, len, "thaw checked the device memory in %.1f ms, the library "
			 "copied it in its GPUs' turn (after %.1f ms, for %.1f ms)%s%s%s",
			 pf->fill_ms, turn_ms(&pf->lib_turn, true), turn_ms(&pf->lib_turn, false),
			 pf->state < 0 ? " (failed: " : "", pf->state < 0 ? pf->why : "",
			 pf->state < 0 ? ")" : "");
	} else if (summary && len) {
		char b[32];

		snprintf(summary, len, "thaw filled %llu allocation(s), %s, in %.1f ms (contexts "
			 "%.1f ms, pinning %.1f ms, allocations made %.1f ms, its GPU's "
			 "turn after %.1f ms, the copy %.1f ms, %s %.1f ms of its threads)%s%s%s",
			 (unsigned long long)pf->offered_allocs, fmt_bytes(pf->bytes, b), pf->fill_ms,
			 pf->ctx_ms, pf->pin_ms, pf->make_ms,
			 pf->copy_begin_ns ? (pf->copy_begin_ns - pf->joined_ns) / 1e6 : 0.0,
			 pf->copy_end_ns ? (pf->copy_end_ns - pf->copy_begin_ns) / 1e6 : 0.0,
			 pf->unverified ? "not checked: no checksums; checking" : "checked in",
			 pf->verify_ns / 1e6, pf->state < 0 ? " (failed: " : "",
			 pf->state < 0 ? pf->why : "",
			 pf->state == -EUCLEAN ? ")" : pf->state < 0 ? "; the library copied)" : "");
	}
	leave_turns(pf);
	gpu_order_forget(&pf->making);
	for (size_t i = 0; pf->p && i < pf->np; i++) {
		struct pf_proc *p = &pf->p[i];

		if (p->pin)
			gpu_pin_put(p->pin);
		if (p->listen_fd >= 0)
			close(p->listen_fd);
		if (p->sock[0])
			unlink(p->sock);
	}
	/* The processes that mapped the memory hold it now. */
	let_go_later(pf->p, pf->np, pf->ngpus ? pf->gpus[0] : -1);
	tier_sums_free(pf->sums);
	for (int k = 0; k < 2; k++)
		if (pf->wake[k] >= 0)
			close(pf->wake[k]);
	pthread_mutex_destroy(&pf->mu);
	pthread_cond_destroy(&pf->cv);
	free(pf);
}

/* Each GPU thaw filled on, a line for the log: its bytes, how long its
 * copy waited for its turn on the GPU's link, how long it took and how
 * fast it went. */
static void log_gpus(const struct gpu_prefill *pf, const char *id)
{
	for (size_t k = 0; pf->state == 1 && k < pf->ngpus && k < GPU_MAX; k++) {
		double ms = pf->gpu_end_ns[k] > pf->gpu_begin_ns[k] ?
				    (double)(pf->gpu_end_ns[k] - pf->gpu_begin_ns[k]) / 1e6 : 0.0;
		char b[32];

		if (!pf->gpu_bytes[k] || !pf->gpu_begin_ns[k])
			continue;
		pr_info("%s: thaw filled GPU %d: %s in %.1f ms, %.1f GB/s (its turn after %.1f ms)",
			id, pf->gpus[k], fmt_bytes(pf->gpu_bytes[k], b), ms,
			ms > 0 ? (double)pf->gpu_bytes[k] / 1e6 / ms : 0.0,
			(double)(pf->gpu_begin_ns[k] - pf->joined_ns) / 1e6);
	}
}

int gpu_prefill_restore(struct gpu_prefill *pf, const struct snapshot_meta *sm, const pid_t *pids,
			size_t n, const char *out_dir, const char *id, double *copy_ms)
{
	uint64_t t0 = now_ns();
	char line[400];
	double waited;
	int ret;

	if (!pf)
		return gpu_memory_restore(&sm->gpu_memory, pids, n, out_dir, copy_ms);
	/* Filled by now, or nearly: offered before RESTORE is asked.  A
	 * failed fill offers nothing and the library copies; but not from a
	 * damaged file: the start fails, the function's calls still held. */
	pr_debug("%s: waiting for the fill", id);
	ret = gpu_prefill_ready(pf);
	if (ret == -EUCLEAN) {
		log_set_error("%s: the device memory in its RAM tier entry is damaged (%s): the "
			      "entry is dropped and materialised again", id, pf->why);
		gpu_prefill_end(pf, NULL, 0);
		return ret;
	}
	if (ret)
		pr_warn("thawd could not %s the device memory of %s (%s): the library copies it",
			pf->check_only ? "check" : "fill", id, pf->why);
	waited = ms_since(t0);
	/* The library copies it all (no fill, or a failed one): in its turn
	 * on the GPUs, in the order the copies are asked, as fills are. */
	if (ret || pf->check_only || pf->library_only) {
		gpu_turn_join(&pf->lib_turn, pf->gpus, pf->ngpus);
		gpu_turn_wait(&pf->lib_turn);
	}
	ret = gpu_memory_restore(&sm->gpu_memory, pids, n, out_dir, copy_ms);
	gpu_turn_leave(&pf->lib_turn);
	if (gpu_prefill_fills(pf))
		log_gpus(pf, id);
	gpu_prefill_end(pf, line, sizeof(line));
	pr_info("%s: %s; the start waited %.1f ms for it", id, line, waited);
	return ret;
}

void gpu_prefill_keep(pid_t holder, const struct snapshot_meta *sm, const char *tier_dir,
		      int ordinal)
{
	const struct snapshot_gpu_memory *gm = &sm->gpu_memory;

	if (!tier_dir || !gm->nns_pids || ordinal < 0 || ordinal >= CUDA_MAX_DEVICES ||
	    cuda_init() || !prefill_driver_load())
		return;
	for (size_t i = 0; i < gm->nns_pids; i++) {
		char path[PATH_MAX + 64];

		snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, tier_dir, (int)gm->ns_pids[i]);
		/* What cannot be kept, the take pins, as a start does. */
		gpu_pin_keep(holder, path, ordinal);
	}
}

void gpu_prefill_unkeep(pid_t holder)
{
	gpu_pin_unkeep(holder);
}

void gpu_prefill_finish(void)
{
	gpu_pin_stop();
}

int gpu_context_take(const struct snapshot_meta *sm, int ordinal, const char *uuid,
		     const pid_t *pids, size_t n, const char *tier_dir, const char *out_dir,
		     const char *id, double *copy_ms)
{
	uint64_t need = sm->gpu_memory.bytes;
	struct gpu_placement own = { 0 };
	char why[512];
	int ret;

	*copy_ms = 0;
	ret = gpu_place_on(ordinal, uuid, need, 0, &own, why, sizeof(why));
	if (ret) {
		log_set_error("%s", why);
		pr_err("%s: %s", id, why);
		return ret;
	}
	ret = gpu_prefill_restore(gpu_prefill_start(sm, tier_dir, out_dir, &own), sm, pids, n,
				  out_dir, id, copy_ms);
	gpu_release(&own);
	return ret;
}
