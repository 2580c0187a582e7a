/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill_fill.c — the fill itself (gpu_prefill_internal.h).
 *
 * A fill makes each allocation exportable (POSIX file descriptor), maps
 * them all into one address range of thawd's, and copies the tier's file
 * into it on several threads, each copying its slice of the file a piece
 * at a time from the pin cache's mapping (gpu_pin.h), then unmaps them
 * again: only the handles and their descriptors are kept until the library
 * has taken them.
 *
 * Each thread checks each piece against the RAM tier entry's checksums
 * (tier_sums.h) while the link copies (copy_slice): the hash reads what
 * the link reads.  A piece unlike its checksum fails the fill with
 * -EUCLEAN.
 */
#define LOG_PREFIX "gpu: "
#include "common/cuda.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_pin.h"
#include "restore/gpu_prefill_cuda.h"
#include "restore/gpu_prefill_internal.h"
#include "restore/gpu_restore.h"
#include "restore/tier_sums.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define ALIGN_2M(x) (((x) + (2ull << 20) - 1) & ~((2ull << 20) - 1))

/* The snapshot's GPU whose UUID is uuid: its index in gpus, or -1. */
static int gpu_of_uuid(const struct snapshot_gpu *gpus, size_t ngpus, const char *uuid)
{
	for (size_t k = 0; k < ngpus; k++)
		if (gpus[k].uuid && !strcasecmp(gpus[k].uuid, uuid))
			return (int)k;
	return -1;
}

int prefill_read_layout(const char *dir, struct pf_proc *p, const struct snapshot_gpu *gpus,
			size_t ngpus, bool by_index)
{
	char path[PATH_MAX + 64], line[256];
	size_t cap = 0;
	FILE *f;
	int ret = 0;

	snprintf(path, sizeof(path), "%s/" GPUMEM_LAYOUT_FMT, dir, p->ns_pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f) || strncmp(line, GPUMEM_LAYOUT_MAGIC, strlen(GPUMEM_LAYOUT_MAGIC))) {
		fclose(f);
		return -EINVAL;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long off, size;
		unsigned c, rdma, usage;
		char uuid[64];
		int dev, k, got;

		got = sscanf(line, "%llu %llu %d %u %u %u %63s", &off, &size, &dev, &c, &rdma, &usage,
			     uuid);
		/* The GPU it was on: by its UUID; a layout without one (an
		 * older library), or a snapshot that recorded none, by the
		 * ordinal, where that is the snapshot's GPU of that index
		 * (by_index). */
		k = got == 7 ? gpu_of_uuid(gpus, ngpus, uuid) : -1;
		if (k < 0 && (got < 7 || !gpus[0].uuid) && by_index)
			k = dev;
		if (got < 6 || !size || size > (1ull << 48) || off > (1ull << 48) ||
		    off % (2ull << 20) || dev < 0 || k < 0 || (size_t)k >= ngpus || k >= GPU_MAX ||
		    c) {
			/* Not what a fill handles (compressed memory, a GPU
			 * the snapshot did not record or cannot tell) or not
			 * a layout (sizes beyond any GPU's, which would
			 * overflow): the library copies it all. */
			ret = -EINVAL;
			break;
		}
		if (ARRAY_GROW(p->a, cap, p->n + 1, 64)) {
			ret = -ENOMEM;
			break;
		}
		p->a[p->n++] = (struct pf_alloc){ .off = off, .size = size, .dev = k, .fd = -1 };
		if (off + size > p->len)
			p->len = off + size;
	}
	fclose(f);
	return ret;
}

/* Read-write access for the copy to each mapped allocation of p, in as
 * few calls as the driver takes: one for each run of allocations that lie
 * next to each other in the range on one GPU (the driver sets access over
 * a range mapped whole), where that fails one an allocation.  An
 * allocation that cannot have it is unmapped: not filled, not offered. */
static void set_access_runs(struct gpu_prefill *pf, struct pf_proc *p, cu_ptr va)
{
	const struct prefill_cu *cu = &prefill_cu;

	for (size_t i = 0, j; i < p->n; i = j + 1) {
		const struct pf_alloc *a = &p->a[i];
		cu_access_desc acc = { .location = { CU_LOC_DEVICE, pf->gpus[a->dev] },
				       .flags = CU_ACCESS_RW };

		for (j = i; j + 1 < p->n && p->a[j].mapped && p->a[j + 1].mapped &&
			    p->a[j + 1].dev == a->dev &&
			    p->a[j + 1].off == p->a[j].off + p->a[j].size;
		     j++)
			;
		if (!a->mapped)
			continue;
		if (j > i && !cu->set_access(va + a->off, p->a[j].off + p->a[j].size - a->off,
					     &acc, 1))
			continue;
		for (size_t k = i; k <= j; k++)
			if (cu->set_access(va + p->a[k].off, p->a[k].size, &acc, 1)) {
				cu->unmap(va + p->a[k].off, p->a[k].size);
				p->a[k].mapped = false;
			}
	}
}

/* The allocations made, exportable, each on its own GPU, and mapped into
 * one range of thawd's at their file offsets (a range may map memory of
 * several GPUs), with access for the copy.  *va, the range. */
static int make_allocs(struct gpu_prefill *pf, struct pf_proc *p, cu_ptr *va)
{
	const struct prefill_cu *cu = &prefill_cu;

	if (cu->reserve(va, ALIGN_2M(p->len), 2ull << 20, 0, 0))
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];
		int o = pf->gpus[a->dev];
		cu_mem_prop prop = { .type = CU_ALLOC_PINNED,
				     .requestedHandleTypes = CU_HANDLE_POSIX_FD,
				     .location = { CU_LOC_DEVICE, o } };

		if (cu->create(&a->h, a->size, &prop, 0)) {
			a->h = 0;
			continue;
		}
		/* Exported now, before its turn, not after the copy: beside a
		 * burst of the driver's restores each of the driver's calls
		 * waits, and 115 exports after the copy held a start for up
		 * to 0.4 s on the H200. */
		if (cu->export_fd(&a->fd, a->h, CU_HANDLE_POSIX_FD, 0)) {
			a->fd = -1;
			cu->release(a->h);
			a->h = 0;
			continue;
		}
		/* Never into a child (spawn closes them too). */
		fcntl(a->fd, F_SETFD, FD_CLOEXEC);
		a->mapped = !cu->map(*va + a->off, a->size, 0, a->h, 0);
	}
	/* Beside a burst of the driver's restores each call waits: the GPU
	 * example's 115 allocations take one call, not 115. */
	set_access_runs(pf, p, *va);
	return 0;
}

/* Allocations made but not mapped were never filled: not offered. */
static void drop_unfilled(struct pf_proc *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];

		if (!a->h || a->mapped)
			continue;
		if (a->fd >= 0)
			close(a->fd);
		a->fd = -1;
		prefill_cu.release(a->h);
		a->h = 0;
	}
}

/* Every allocation of p let go of in thawd: unmapped from its range, the
 * range freed, exports closed, handles released (what a process mapped
 * stays its own). */
void prefill_let_go(struct pf_proc *p)
{
	const struct prefill_cu *cu = &prefill_cu;

	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];

		if (a->mapped)
			cu->unmap(p->va + a->off, a->size);
		a->mapped = false;
		if (a->fd >= 0)
			close(a->fd);
		a->fd = -1;
		if (a->h)
			cu->release(a->h);
		a->h = 0;
	}
	if (p->va)
		cu->addr_free(p->va, ALIGN_2M(p->len));
	p->va = 0;
}

/* One thread's share of a file's copy: the allocations of the process's
 * device dev (on GPU ordinal) that lie in its bytes. */
struct slice {
	struct pf_proc *p;
	cu_ptr va;
	uint64_t off, len;
	int dev, ordinal, err;
	int cr; /* the driver's error */
	uint64_t bad;	    /* -EUCLEAN: the first damaged byte */
	uint64_t verify_ns; /* spent checking */
	uint64_t end_ns;    /* its copies landed (now_ns()) */
};

/* Piece k of s: bytes [*a, *b) of the file. */
static void piece_bounds(const struct slice *s, int k, uint64_t *a, uint64_t *b)
{
	*a = s->off + (uint64_t)k * PIECE;
	*b = *a + PIECE < s->off + s->len ? *a + PIECE : s->off + s->len;
}

/* Check piece k of s against its checksums (none: nothing to do). */
static void check_piece(struct slice *s, int k)
{
	uint64_t a, b, t0 = now_ns();

	if (s->err || !s->p->sum)
		return;
	piece_bounds(s, k, &a, &b);
	s->err = tier_sums_check_mapped(s->p->sum, s->p->base, s->p->pin->len, a, b - a, &s->bad);
	s->verify_ns += now_ns() - t0;
}

/* Do the allocations in [a, b) of the file all lie on s's device?  Only
 * then may s pin a piece itself: a piece two devices' slices share is
 * copied unpinned rather than pinned and unpinned under another's copy. */
static bool piece_alone(const struct slice *s, uint64_t a, uint64_t b)
{
	for (size_t i = 0; i < s->p->n; i++) {
		const struct pf_alloc *al = &s->p->a[i];

		if (al->dev != s->dev && al->off < b && al->off + al->size > a)
			return false;
	}
	return true;
}

/* Copy the file's bytes of [s->off, s->off + s->len) into s's device's
 * allocations that lie there, a piece at a time.  A piece the cache could
 * not pin is pinned here, so that its copy runs while the next is pinned, and
 * unpinned once all have landed.  Each piece is checked against its
 * checksums while the link copies: the thread queues piece k's copy and
 * then hashes piece k-1, so that the stream always has a copy queued
 * behind the one it runs (hashing a piece takes nearly as long as a
 * stream's share of the link copies it: checked right after its own copy
 * was queued, the stream idled whenever the hash ran slower). */
static void *copy_slice(void *arg)
{
	const struct prefill_cu *cu = &prefill_cu;
	struct slice *s = arg;
	int npieces = (int)((s->len + PIECE - 1) / PIECE), k;
	bool *pinned = calloc((size_t)npieces + 1, sizeof(bool));
	cu_stream st = NULL;

	if (!pinned || prefill_use_device(s->ordinal) || prefill_stream_get(s->ordinal, &st)) {
		s->err = -EIO;
		free(pinned);
		return NULL;
	}
	for (k = 0; k < npieces && !s->err; k++) {
		uint64_t a, b;

		piece_bounds(s, k, &a, &b);
		/* Pieces are PIECE-aligned in the file, as the cache's are. */
		if (!s->p->pin->pinned[a / PIECE] && piece_alone(s, a, b))
			pinned[k] = prefill_pin_piece(s->p->base + a, b - a, 0);
		for (size_t i = 0; i < s->p->n; i++) {
			const struct pf_alloc *al = &s->p->a[i];
			uint64_t x = al->off > a ? al->off : a;
			uint64_t y = al->off + al->size < b ? al->off + al->size : b;

			if (!al->mapped || al->dev != s->dev || x >= y)
				continue;
			if ((s->cr = cu->copy(s->va + x, s->p->base + x, y - x, st)))
				s->err = -EIO;
		}
		if (k > 0)
			check_piece(s, k - 1);
	}
	if (k == npieces && npieces > 0)
		check_piece(s, npieces - 1);
	if (cu->stream_sync(st))
		s->err = -EIO;
	s->end_ns = now_ns();
	prefill_stream_put(s->ordinal, st, !s->err);
	for (k = 0; k < npieces; k++)
		if (pinned[k])
			cu->host_unregister(s->p->base + s->off + (uint64_t)k * PIECE);
	free(pinned);
	return NULL;
}

_Static_assert(PREFILL_MAX_JOBS >= MAX_THREADS * GPU_MAX, "a job per thread of every GPU");

/* The copy threads of a file with bytes for ndev GPUs: MAX_THREADS for each
 * GPU where the host has a core for each (a span process's GPUs then each
 * get as many as a process of one GPU does: the threads also check what
 * they copy, and one GPU's link takes ~16 of them), else MAX_THREADS (or
 * the host's cores) shared among them. */
static int copy_threads(int ndev)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int all = ndev * MAX_THREADS, host = cpus > MAX_THREADS ? (int)cpus : MAX_THREADS;

	return all < host ? all : host;
}

/* The tier's file copied into p's allocations.  Each device's allocations
 * are copied by threads of their own, streams on that GPU, all devices'
 * at once: a process spanning GPUs gets its bytes over every GPU's link
 * side by side, not one link after the other.  The threads
 * (copy_threads) are shared out among the devices the file has bytes
 * for. */
static int copy_file(const struct gpu_prefill *pf, struct pf_proc *p, cu_ptr va)
{
	struct slice s[PREFILL_MAX_JOBS];
	uint64_t lo[GPU_MAX] = { 0 }, hi[GPU_MAX] = { 0 }, bytes[GPU_MAX] = { 0 };
	int made = 0, ret = 0, ndev = 0, total;

	for (size_t i = 0; i < p->n; i++) {
		const struct pf_alloc *a = &p->a[i];

		if (!bytes[a->dev]) {
			lo[a->dev] = a->off;
			ndev++;
		}
		lo[a->dev] = a->off < lo[a->dev] ? a->off : lo[a->dev];
		hi[a->dev] = a->off + a->size > hi[a->dev] ? a->off + a->size : hi[a->dev];
		bytes[a->dev] += a->size;
	}
	total = copy_threads(ndev);
	for (int d = 0; d < GPU_MAX && ndev; d++) {
		int n = prefill_threads_for(bytes[d]), cap = total / ndev;
		uint64_t from = lo[d] / PIECE * PIECE, slice;

		if (!bytes[d])
			continue;
		n = n < cap ? n : cap > 0 ? cap : 1;
		/* Whole pieces, as the cache pinned them: a copy that
		 * straddled two pinned ranges is refused by the driver. */
		slice = (hi[d] - from + (uint64_t)n - 1) / (uint64_t)n;
		slice = (slice + PIECE - 1) / PIECE * PIECE;
		for (uint64_t off = from; off < hi[d] && made < PREFILL_MAX_JOBS; off += slice, made++)
			s[made] = (struct slice){ .p = p, .va = va, .off = off, .dev = d,
						  .ordinal = pf->gpus[d],
						  .len = off + slice > hi[d] ? hi[d] - off : slice };
	}
	prefill_run_jobs(copy_slice, s, sizeof(s[0]), made);
	for (int i = 0; i < made; i++) {
		p->verify_ns += s[i].verify_ns;
		if (s[i].end_ns > p->gpu_end_ns[s[i].dev])
			p->gpu_end_ns[s[i].dev] = s[i].end_ns;
		if (s[i].err == -EUCLEAN && ret != -EUCLEAN) {
			ret = -EUCLEAN;
			snprintf(p->why, sizeof(p->why), "%s unlike its checksum: block %llu "
				 "(bytes %llu-%llu)", p->sum->path,
				 (unsigned long long)(s[i].bad / TIER_SUM_BLOCK),
				 (unsigned long long)s[i].bad,
				 (unsigned long long)(s[i].bad + TIER_SUM_BLOCK - 1));
		} else if (s[i].err && !ret) {
			ret = s[i].err;
			snprintf(p->why, sizeof(p->why), "copying: CUDA error %d", s[i].cr);
		}
	}
	return ret;
}

int prefill_fill_proc(struct gpu_prefill *pf, struct pf_proc *p)
{
	char path[PATH_MAX + 64];
	uint64_t t0;
	cu_ptr va = 0;
	int ret;

	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, pf->tier_dir, p->ns_pid);
	/* Pinned for every context (gpu_pin.h), in one of p's own GPUs'. */
	t0 = now_ns();
	p->pin = gpu_pin_get(path, pf->gpus[p->n ? p->a[0].dev : 0]);
	p->pin_ms = ms_since(t0);
	pr_debug("fill of process %d: its file pinned in %.1f ms", p->ns_pid, p->pin_ms);
	if (!p->pin || p->pin->len < p->len) {
		snprintf(p->why, sizeof(p->why), "cannot map %.100s whole", path);
		gpu_turn_leave(&p->turn);
		return -EIO;
	}
	p->base = p->pin->base;
	t0 = now_ns();
	/* Made before the driver's restores begin (gpu_order.h). */
	gpu_order_making(&pf->making);
	ret = make_allocs(pf, p, &va);
	p->make_ms = ms_since(t0);
	gpu_order_made(&pf->making);
	pr_debug("fill of process %d: %zu allocation(s) made in %.1f ms", p->ns_pid, p->n,
		 p->make_ms);
	if (!ret) {
		uint64_t made[GPU_MAX] = { 0 };

		for (size_t i = 0; i < p->n; i++)
			made[p->a[i].dev] += p->a[i].h ? p->a[i].size : 0;
		/* On the GPUs now: the placement no longer holds them back. */
		for (size_t k = 0; k < pf->ngpus; k++)
			gpu_claim_taken(pf->placement, k, made[k]);
	}
	if (ret)
		snprintf(p->why, sizeof(p->why), "no address range of %llu bytes",
			 (unsigned long long)p->len);
	/* The fills of one GPU copy one at a time, in the order their starts
	 * (and a start's processes) asked (gpu_turn.h), a process of several
	 * GPUs in its turn on all of them at once; pinning and making the
	 * allocations ran before.  The link is free again once the copy is
	 * done. */
	if (!ret) {
		gpu_turn_wait(&p->turn);
		pr_debug("fill of process %d: its turn came", p->ns_pid);
		ret = copy_file(pf, p, va);
		pr_debug("fill of process %d: copied (%d)", p->ns_pid, ret);
	}
	gpu_turn_leave(&p->turn);
	p->va = va;
	if (ret) {
		prefill_let_go(p);
		return ret;
	}
	/* Offered as soon as copied: thawd's mapping of what it offers stays
	 * until the fill ends (gpu_prefill_end lets go of it off the start's
	 * path), since unmapping is the driver's work too. */
	drop_unfilled(p);
	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];

		if (a->fd >= 0) {
			p->bytes += a->size;
			p->gpu_bytes[a->dev] += a->size;
			p->offered_allocs++;
		}
	}
	return prefill_offer(pf, p);
}
