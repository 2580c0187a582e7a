/* SPDX-License-Identifier: Apache-2.0 */
/* move.c — the function's movable device memory saved to a file and copied
 * back (docs/DESIGN.md, "GPU memory", has the measurements this follows).
 *
 * Save (the gate closed, no call inside the driver): synchronise each
 * context that has movable memory; copy each mapping into the file through
 * two pinned 64 MiB buffers (an all-zero block is left a hole: the store
 * never keeps zero runs anyway); then unmap each mapping — its physical
 * memory freed, its address range kept — and give back the driver's
 * handle where the function still holds one (its value maps to a new one
 * after the restore).  Each mapping starts at a 2 MiB offset of the file,
 * so that the copy back reads whole huge pages of the RAM tier.
 *
 * Copy back (after the driver's restore and unlock, the gate still closed):
 * new physical memory mapped at every saved address with the access it had,
 * then the file — the RAM tier's one page-cache copy, bound read-only into
 * the container — mapped, cut into slices, each slice registered with the
 * driver (pinned) and copied by its own thread on its own stream, so that
 * pinning overlaps the copies: the link's speed, not one thread's.  The
 * slices stay pinned until thawd says the start has answered (RELEASE):
 * unpinning costs as much as pinning.
 * THAW_GPUMEM_READ_ONLY=1 (tests) opens the file read-only even where it
 * could be opened read-write, as it is in a container.
 */
#include "interpose/gm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALIGN_2M(x) (((x) + (2ull << 20) - 1) & ~((2ull << 20) - 1))
#define BOUNCE_BYTES (64u << 20)
#define MAX_THREADS 16
#define SLICE_MIN (256ull << 20)

/* The first failure is the one told: "what: CUDA_ERROR_…". */
static void fail(struct gpumem_record *r, const char *what, cu_result cr)
{
	char buf[32];

	if (r->error[0])
		return;
	r->ok = false;
	snprintf(r->error, sizeof(r->error), "%s: %s", what, gm_error_name(cr, buf, sizeof(buf)));
}

/* Its bytes go into the file (gm_carry_of). */
static bool movable(const struct gm_map *m)
{
	return gm_carry_of(m) == GM_COPY;
}

static void count_left(struct gpumem_record *r)
{
	r->left_allocs = gm_left.allocs;
	r->left_bytes = gm_left.bytes;
	for (struct gm_map *m = gm_maps; m; m = m->next)
		if (!m->saved && gm_carry_of(m) == GM_LEAVE) {
			r->left_allocs++;
			r->left_bytes += m->size;
		}
}

static cu_result use_ctx(cu_ctx ctx, int device)
{
	cu_ctx c = ctx;
	cu_result cr = CU_SUCCESS;

	if (!c)
		cr = gm_real.cuDevicePrimaryCtxRetain(&c, device);
	return cr == CU_SUCCESS ? gm_real.cuCtxSetCurrent(c) : cr;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	const uint64_t *w = (const void *)p;

	for (size_t i = 0; i < n / 8; i++)
		if (w[i])
			return false;
	return true;
}

/* Copy m's bytes to fd at m->file_off. */
static int save_one(int fd, struct gm_map *m, void *bounce, struct gpumem_record *r)
{
	for (size_t off = 0; off < m->size; off += BOUNCE_BYTES) {
		size_t n = m->size - off < BOUNCE_BYTES ? m->size - off : BOUNCE_BYTES;
		cu_result cr = gm_real.cuMemcpyDtoH_v2(bounce, m->va + off, n);

		if (cr != CU_SUCCESS) {
			fail(r, "cuMemcpyDtoH of an allocation", cr);
			return -1;
		}
		if (all_zero(bounce, n))
			continue;
		for (size_t w = 0; w < n;) {
			ssize_t k = pwrite(fd, (char *)bounce + w, n - w, (off_t)(m->file_off + off + w));

			if (k <= 0) {
				snprintf(r->error, sizeof(r->error), "writing the saved memory: %s",
					 k < 0 ? strerror(errno) : "short write");
				r->ok = false;
				return -1;
			}
			w += (size_t)k;
		}
	}
	return 0;
}

static int unmap_one(struct gm_map *m, struct gpumem_record *r)
{
	cu_result cr = gm_real.cuMemUnmap(m->va, m->size);

	if (cr != CU_SUCCESS) {
		fail(r, "cuMemUnmap", cr);
		return -1;
	}
	m->saved = true;
	/* Each reference the function still holds keeps the memory: give
	 * them back too (its value will name new memory, with as many). */
	for (int i = 0; i < m->h->refs; i++) {
		cr = gm_real.cuMemRelease(m->h->rh);
		if (cr != CU_SUCCESS) {
			/* The memory stays the driver's until the process ends;
			 * the save fails and maps new memory back. */
			fail(r, "cuMemRelease of a saved allocation's handle", cr);
			m->h->rh = 0;
			return -1;
		}
	}
	m->h->rh = 0;
	return 0;
}

static int map_new(struct gm_map *m, struct gpumem_record *r);

/* m's bytes copied back from the file in through buf; 0, or -1 with why. */
static int put_back_one(int in, void *buf, struct gm_map *m, char *why, size_t len)
{
	char ebuf[32];

	for (size_t off = 0; off < m->size; off += BOUNCE_BYTES) {
		size_t n = m->size - off < BOUNCE_BYTES ? m->size - off : BOUNCE_BYTES;
		ssize_t got = pread(in, buf, n, (off_t)(m->file_off + off));
		cu_result cr;

		if (got != (ssize_t)n) {
			snprintf(why, len, "reading the saved memory: %s",
				 got < 0 ? strerror(errno) : "short read");
			return -1;
		}
		cr = gm_real.cuMemcpyHtoDAsync_v2(m->va + off, buf, n, NULL);
		if (cr == CU_SUCCESS)
			cr = gm_real.cuCtxSynchronize();
		if (cr != CU_SUCCESS) {
			snprintf(why, len, "copying it back: %s", gm_error_name(cr, ebuf, sizeof(ebuf)));
			return -1;
		}
	}
	return 0;
}

/* After a save failed halfway: new memory mapped at each address it
 * unmapped, and the bytes copied back from the file at path (through
 * buf).  What cannot be put back leaves the function without memory it
 * uses: r says so (after the save's own failure) and r->held keeps its
 * calls held, for thawd to end it rather than let it run on. */
static void put_back(const char *path, void *buf, struct gpumem_record *r)
{
	char why[160] = "", first[128] = "", ebuf[32];
	int in = open(path, O_RDONLY | O_CLOEXEC), lost = 0;
	size_t k;

	if (in < 0)
		snprintf(first, sizeof(first), "%.60s: %s", path, strerror(errno));
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		struct gpumem_record mr = { .ok = true };

		if (!m->saved)
			continue;
		why[0] = '\0';
		if (m->h->shared) {
			/* The same memory again, not a copy of it: the other
			 * processes map it still. */
			cu_result cr = gm_share_remap(m);

			if (cr != CU_SUCCESS)
				snprintf(why, sizeof(why), "mapping shared memory again: %s",
					 gm_error_name(cr, ebuf, sizeof(ebuf)));
		} else if (in < 0 || !buf)
			snprintf(why, sizeof(why), "%s", in < 0 ? first : "no copy buffer");
		else if (map_new(m, &mr))
			snprintf(why, sizeof(why), "%.150s", mr.error);
		else
			put_back_one(in, buf, m, why, sizeof(why));
		if (why[0] && !lost++)
			snprintf(first, sizeof(first), "%.120s", why);
	}
	if (in >= 0)
		close(in);
	if (!lost)
		return;
	r->held = true;
	k = strlen(r->error);
	snprintf(r->error + k, sizeof(r->error) - k,
		 "; %d allocation(s) could not be put back (%s): the function's CUDA calls stay "
		 "held",
		 lost, first);
}

void gm_save(const char *dir, unsigned seq, struct gpumem_record *r)
{
	char path[4096];
	void *bounce = NULL;
	uint64_t total = 0;
	double t0 = gm_now_ms(), t;
	int fd = -1;
	cu_result cr;

	memset(r, 0, sizeof(*r));
	r->ok = true;
	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, dir, (int)getpid());
	if (gm_gate_close(10000)) {
		snprintf(r->error, sizeof(r->error),
			 "a CUDA call of the function did not return within 10 s");
		r->ok = false;
		return;
	}
	r->hold_ms = gm_now_ms() - t0;
	pthread_mutex_lock(&gm_lock);
	gm_share_pair(dir);
	t = gm_now_ms();
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		if (gm_carry_of(m) == GM_LEAVE)
			continue;
		cr = use_ctx(m->ctx, m->device);
		if (cr == CU_SUCCESS)
			cr = gm_real.cuCtxSynchronize();
		if (cr != CU_SUCCESS) {
			fail(r, "synchronising the function's context", cr);
			goto out;
		}
	}
	r->sync_ms = gm_now_ms() - t;
	/* Shared memory is copied once its other processes are quiet too. */
	if (gm_share_agree(dir, seq, r))
		goto out;
	t = gm_now_ms();
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		if (!movable(m))
			continue;
		m->file_off = total;
		total = ALIGN_2M(total + m->size);
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)total) < 0) {
		snprintf(r->error, sizeof(r->error), "%.200s: %s", path, strerror(errno));
		r->ok = false;
		goto out;
	}
	cr = total ? gm_real.cuMemAllocHost_v2(&bounce, BOUNCE_BYTES) : CU_SUCCESS;
	if (cr != CU_SUCCESS) {
		fail(r, "cuMemAllocHost", cr);
		goto out;
	}
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		if (!movable(m))
			continue;
		/* (Never without a buffer: total counts m.) */
		cr = bounce ? use_ctx(m->ctx, m->device) : CU_ERR_OUT_OF_MEMORY;
		if (cr != CU_SUCCESS) {
			fail(r, "the allocation's context", cr);
			goto out;
		}
		if (save_one(fd, m, bounce, r))
			goto out;
	}
	r->copy_ms = gm_now_ms() - t;
	/* Everything is in the file: only now unmap.  A failure halfway maps
	 * back what was unmapped, so the function keeps all of its memory. */
	t = gm_now_ms();
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		enum gm_carry c = gm_carry_of(m);

		if (c == GM_LEAVE)
			continue;
		if (unmap_one(m, r))
			goto out;
		if (m->h->shared) {
			m->h->carried = true;
			r->shared_allocs++;
			r->shared_bytes += m->size;
		}
		if (c == GM_DROP)
			continue; /* its bytes are its creator's to save */
		r->allocs++;
		r->bytes += m->size;
		if (m->device >= 0 && m->device < CUDA_MAX_DEVICES)
			r->dev_bytes[m->device] += m->size;
	}
	r->map_ms = gm_now_ms() - t;
	/* The kept descriptors go, whatever became of their memory: of memory
	 * saved they would keep what the driver must no longer see, and of
	 * memory left to the driver they are opens of the driver's device
	 * (/dev/nvidiactl), which CRIU cannot dump ("Can't dump file … chr
	 * 195:255": every snapshot of a function whose sharing stayed the
	 * driver's failed so).  The restore hands over new ones for what it
	 * carried; what the driver kept is not paired again. */
	for (size_t i = 0; i < gm_nhandles; i++)
		if (gm_handles[i]->nfds)
			gm_share_fds_close(gm_handles[i]);
	gm_share_fds_write();
	count_left(r);
	/* Without it a restore still works: the library copies. */
	gm_layout_write(dir);
out:
	if (!r->ok) {
		put_back(path, bounce, r);
		r->allocs = r->bytes = 0;
		memset(r->dev_bytes, 0, sizeof(r->dev_bytes));
	}
	if (bounce)
		gm_real.cuMemFreeHost(bounce);
	if (fd >= 0)
		close(fd);
	if (!r->ok)
		unlink(path);
	pthread_mutex_unlock(&gm_lock);
	/* A function whose memory is not all back stays held: thawd ends it. */
	if (!r->ok && !r->held)
		gm_gate_open();
	r->total_ms = gm_now_ms() - t0;
}

cu_result gm_map_handle(struct gm_map *m, cu_handle rh, bool with_access)
{
	cu_result cr = gm_real.cuMemMap(m->va, m->size, 0, rh, 0);

	if (cr == CU_SUCCESS && m->naccess && with_access)
		cr = gm_real.cuMemSetAccess(m->va, m->size, m->access, (size_t)m->naccess);
	if (cr != CU_SUCCESS) {
		gm_real.cuMemUnmap(m->va, m->size);
		return cr;
	}
	/* The new memory has one reference, rh's; the function holds
	 * m->h->refs: as many are taken (each a retain of the mapping), or
	 * none (released: the memory dies with its unmap).  Kept in h->rh
	 * either way, as at the allocation, so the mapping stays movable. */
	for (int i = 1; i < m->h->refs; i++) {
		cu_handle extra;

		cr = gm_real.cuMemRetainAllocationHandle(&extra, (void *)(uintptr_t)m->va);
		if (cr != CU_SUCCESS) {
			while (--i > 0)
				gm_real.cuMemRelease(rh);
			gm_real.cuMemUnmap(m->va, m->size);
			return cr;
		}
	}
	if (m->h->refs == 0)
		gm_real.cuMemRelease(rh);
	m->h->rh = rh;
	m->saved = false;
	m->access_pending = !with_access && m->naccess;
	return CU_SUCCESS;
}

static int by_va(const void *a, const void *b)
{
	cu_ptr x = (*(struct gm_map *const *)a)->va, y = (*(struct gm_map *const *)b)->va;

	return x < y ? -1 : x > y;
}

static bool same_access(const struct gm_map *a, const struct gm_map *b)
{
	return a->naccess == b->naccess &&
	       !memcmp(a->access, b->access, sizeof(a->access[0]) * (size_t)a->naccess);
}

void gm_access_pending(struct gpumem_record *r)
{
	struct gm_map **v;
	size_t n = 0, k = 0;

	for (struct gm_map *m = gm_maps; m; m = m->next)
		n += m->access_pending;
	v = n ? calloc(n, sizeof(*v)) : NULL;
	for (struct gm_map *m = gm_maps; v && m; m = m->next)
		if (m->access_pending)
			v[k++] = m;
	if (v)
		qsort(v, n, sizeof(*v), by_va);
	/* Beside a burst of the driver's restores every call waits: the GPU
	 * example's 115 mappings take a call or a few, not 115. */
	for (size_t i = 0, j; v && i < n; i = j + 1) {
		cu_result cr = CU_SUCCESS;

		for (j = i; j + 1 < n && v[j]->va + v[j]->size == v[j + 1]->va &&
			    same_access(v[i], v[j + 1]);
		     j++)
			;
		if (j > i)
			cr = gm_real.cuMemSetAccess(v[i]->va, v[j]->va + v[j]->size - v[i]->va,
						    v[i]->access, (size_t)v[i]->naccess);
		for (size_t q = i; q <= j && (j == i || cr != CU_SUCCESS); q++) {
			cu_result one = gm_real.cuMemSetAccess(v[q]->va, v[q]->size, v[q]->access,
							       (size_t)v[q]->naccess);

			if (one != CU_SUCCESS && r->ok)
				fail(r, "setting access to device memory thawd filled", one);
		}
	}
	for (struct gm_map *m = gm_maps; m; m = m->next)
		m->access_pending = false;
	if (n && !v && r->ok)
		fail(r, "setting access to device memory thawd filled", CU_ERR_OUT_OF_MEMORY);
	free(v);
}

/* New physical memory at m's address, with its access. */
static int map_new(struct gm_map *m, struct gpumem_record *r)
{
	cu_handle rh = 0;
	cu_result cr;

	cr = gm_real.cuMemCreate(&rh, m->size, &m->h->prop, 0);
	if (cr != CU_SUCCESS) {
		fail(r, "cuMemCreate", cr);
		return -1;
	}
	cr = gm_map_handle(m, rh, true);
	if (cr != CU_SUCCESS) {
		gm_real.cuMemRelease(rh);
		fail(r, "mapping new device memory at a saved address", cr);
		return -1;
	}
	return 0;
}

/* The copy back: one thread per slice of the file, each slice pinned and
 * copied a piece at a time, so that the copy of one piece runs while the
 * next is pinned.  Pinning a range first walks its pages: they are
 * populated by the slice's own thread beforehand (MADV_POPULATE_READ),
 * in parallel, rather than faulted in one by one inside the driver. */
#define PIECE (64ull << 20)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

struct slice {
	char *base;      /* the file's mapping */
	uint64_t off, len;
	bool writable;   /* the mapping is (the file could be opened read-write) */
	bool *pinned;    /* per piece: pinned (unpinned at RELEASE) */
	int npinned, npieces;
	cu_result reg_cr; /* why a piece could not be pinned */
	cu_result cr;
	char what[64];
	double populate_ms, register_ms;
};

static struct {
	char *base;
	size_t len;
	struct slice s[MAX_THREADS];
	int n;
} pinned;

/* Queue the copies of the mappings' bytes that lie in [a, b) of the file. */
static cu_result copy_range(struct slice *s, uint64_t a, uint64_t b, cu_stream st)
{
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		uint64_t x, y;
		cu_result cr;

		if (!m->restoring || m->file_off + m->size <= a || m->file_off >= b)
			continue;
		x = m->file_off > a ? m->file_off : a;
		y = m->file_off + m->size < b ? m->file_off + m->size : b;
		cr = gm_real.cuMemcpyHtoDAsync_v2(m->va + (x - m->file_off), s->base + x, y - x, st);
		if (cr != CU_SUCCESS)
			return cr;
	}
	return CU_SUCCESS;
}

static void *copy_slice(void *arg)
{
	struct slice *s = arg;
	cu_stream st = NULL;
	cu_result cr = CU_SUCCESS;
	double t;

	/* Pinning and the stream need a context current on this thread:
	 * the first mapping's (VMM memory is the process's, any will do). */
	for (struct gm_map *m = gm_maps; m; m = m->next)
		if (m->restoring) {
			cr = use_ctx(m->ctx, m->device);
			break;
		}
	if (cr == CU_SUCCESS)
		cr = gm_real.cuStreamCreate(&st, 1 /* non-blocking */);
	if (cr != CU_SUCCESS) {
		s->cr = cr;
		snprintf(s->what, sizeof(s->what), "a copy stream");
		return NULL;
	}
	s->npieces = (int)((s->len + PIECE - 1) / PIECE);
	/* Which pieces are pinned, to unpin them at RELEASE.  Without it
	 * nothing is pinned (it could not be unpinned), and every piece is
	 * still copied: the driver stages an unpinned copy itself. */
	s->pinned = calloc((size_t)s->npieces, sizeof(*s->pinned));
	if (!s->pinned)
		s->reg_cr = CU_ERR_OUT_OF_MEMORY;
	t = gm_now_ms();
	madvise(s->base + s->off, s->len, MADV_POPULATE_READ);
	s->populate_ms = gm_now_ms() - t;
	for (int k = 0; k < s->npieces; k++) {
		uint64_t a = s->off + (uint64_t)k * PIECE;
		uint64_t n = s->off + s->len - a < PIECE ? s->off + s->len - a : PIECE;
		cu_result rc = CU_ERR_OUT_OF_MEMORY;

		/* Pinned, the copy runs at the link's speed; not, the driver
		 * stages it through its own buffers.  A read-only pin where
		 * the driver has it; a read-write one where the mapping allows. */
		t = gm_now_ms();
		if (s->pinned)
			rc = gm_real.cuMemHostRegister_v2(s->base + a, n, CU_HOSTREG_READ_ONLY);
		if (s->pinned && rc != CU_SUCCESS && s->writable)
			rc = gm_real.cuMemHostRegister_v2(s->base + a, n, 0);
		s->register_ms += gm_now_ms() - t;
		if (rc == CU_SUCCESS) {
			s->pinned[k] = true;
			s->npinned++;
		} else {
			s->reg_cr = rc;
		}
		cr = copy_range(s, a, a + n, st);
		if (cr != CU_SUCCESS) {
			s->cr = cr;
			snprintf(s->what, sizeof(s->what), "cuMemcpyHtoDAsync");
			break;
		}
	}
	cr = gm_real.cuStreamSynchronize(st);
	if (cr != CU_SUCCESS && !s->cr) {
		s->cr = cr;
		snprintf(s->what, sizeof(s->what), "cuStreamSynchronize");
	}
	gm_real.cuStreamDestroy_v2(st);
	return NULL;
}

void gm_restore(const char *dir, const char *out_dir, struct gpumem_record *r)
{
	char path[4096];
	pthread_t th[MAX_THREADS];
	uint64_t total = 0, slice;
	double t0 = gm_now_ms(), t;
	struct stat st;
	bool writable = false;
	char ebuf[32];
	int fd = -1, n;

	memset(r, 0, sizeof(*r));
	r->ok = true;
	gm_trace("restore: asked");
	gm_release_pinned();
	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, dir, (int)getpid());
	pthread_mutex_lock(&gm_lock);
	for (struct gm_map *m = gm_maps; m; m = m->next)
		m->restoring = false;
	/* What thawd filled while CRIU and the driver restored: mapped, not
	 * copied.  What is still saved after it is copied here. */
	gm_trace("restore: begins");
	gm_prefill_take(out_dir, r);
	t = gm_now_ms();
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		/* An import is its creator's to hand over (gm_share_restore). */
		if (!m->saved || m->h->imported)
			continue;
		gm_trace("restore: new memory at %#llx", (unsigned long long)m->va);
		if (map_new(m, r))
			goto out;
		m->restoring = true;
		r->allocs++;
		r->bytes += m->size;
		if (m->device >= 0 && m->device < CUDA_MAX_DEVICES)
			r->dev_bytes[m->device] += m->size;
		if (m->file_off + m->size > total)
			total = m->file_off + m->size;
	}
	r->map_ms = gm_now_ms() - t;
	t = gm_now_ms();
	if (total) {
		/* Read-write where allowed (a test's own directory): a pin
		 * then needs no read-only support from the driver. */
		fd = getenv("THAW_GPUMEM_READ_ONLY") ? -1 : open(path, O_RDWR | O_CLOEXEC);
		writable = fd >= 0;
		if (fd < 0)
			fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size < total) {
			snprintf(r->error, sizeof(r->error), "%.200s: %s", path,
				 fd < 0 ? strerror(errno) : "shorter than the memory it holds");
			r->ok = false;
			goto out;
		}
		pinned.len = (size_t)st.st_size;
		pinned.base = mmap(NULL, pinned.len, PROT_READ | (writable ? PROT_WRITE : 0),
				   MAP_SHARED, fd, 0);
		if (pinned.base == MAP_FAILED) {
			pinned.base = NULL;
			snprintf(r->error, sizeof(r->error), "mmap %.200s: %s", path, strerror(errno));
			r->ok = false;
			goto out;
		}
		n = (int)((total + SLICE_MIN - 1) / SLICE_MIN);
		n = n > MAX_THREADS ? MAX_THREADS : n < 1 ? 1 : n;
		slice = ALIGN_2M((total + (uint64_t)n - 1) / (uint64_t)n);
		pinned.n = 0;
		for (uint64_t off = 0; off < total && pinned.n < MAX_THREADS; off += slice) {
			struct slice *s = &pinned.s[pinned.n];

			*s = (struct slice){ .base = pinned.base, .off = off, .writable = writable,
					     .len = off + slice > total ? total - off : slice };
			if (pthread_create(&th[pinned.n], NULL, copy_slice, s)) {
				copy_slice(s);
				th[pinned.n] = 0;
			}
			pinned.n++;
		}
		for (int i = 0; i < pinned.n; i++) {
			if (th[i])
				pthread_join(th[i], NULL);
			if (pinned.s[i].cr && r->ok)
				fail(r, pinned.s[i].what, pinned.s[i].cr);
			if (pinned.s[i].npinned == pinned.s[i].npieces)
				r->pinned_slices++;
			else
				snprintf(r->register_error, sizeof(r->register_error), "%s",
					 gm_error_name(pinned.s[i].reg_cr, ebuf, sizeof(ebuf)));
			if (pinned.s[i].populate_ms > r->populate_ms)
				r->populate_ms = pinned.s[i].populate_ms;
			if (pinned.s[i].register_ms > r->register_ms)
				r->register_ms = pinned.s[i].register_ms;
		}
		r->copy_threads = pinned.n;
	}
	r->copy_ms = gm_now_ms() - t;
out:
	if (fd >= 0)
		close(fd);
	/* Its copy done (or failed: its importers are told), the memory it
	 * shares is handed over, and what it imports taken. */
	gm_trace("restore: copied (%s), sharing", r->ok ? "ok" : r->error);
	gm_share_restore(out_dir, r);
	gm_trace("restore: shared (%s)", r->ok ? "ok" : r->error);
	count_left(r);
	pthread_mutex_unlock(&gm_lock);
	/* Only now may the function touch its memory again.  After a failure
	 * the gate stays closed: thawd ends the instance. */
	if (r->ok)
		gm_gate_open();
	else
		r->held = true;
	r->total_ms = gm_now_ms() - t0;
}

void gm_release_pinned(void)
{
	for (int i = 0; i < pinned.n; i++) {
		struct slice *sl = &pinned.s[i];

		for (int k = 0; sl->pinned && k < sl->npieces; k++)
			if (sl->pinned[k])
				gm_real.cuMemHostUnregister(pinned.base + sl->off + (uint64_t)k * PIECE);
		free(sl->pinned);
		sl->pinned = NULL;
	}
	pinned.n = 0;
	if (pinned.base)
		munmap(pinned.base, pinned.len);
	pinned.base = NULL;
}
