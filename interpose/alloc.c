/* SPDX-License-Identifier: Apache-2.0 */
/* alloc.c — the function's device allocations, as the library sees them.
 *
 * Movable memory is memory the library can unmap while keeping its address:
 * memory made with the driver's VMM calls (cuMemAddressReserve, cuMemCreate,
 * cuMemMap).  So cuMemAlloc of 2 MiB or more (THAW_GPUMEM_MIN_BYTES) is
 * made that way here — an address range, a physical allocation mapped over
 * it, read-write for its device and each device that can reach it as a peer
 * (what cuMemAlloc memory is once peer access is on) — and the function's
 * own VMM calls (PyTorch's expandable segments) are recorded.  Handles are
 * the function's values: after a restore the physical memory is new and so
 * is the driver's handle, and the table maps the old value to it.
 *
 * Left to the driver's checkpoint (counted, named in the status): smaller
 * allocations, stream-ordered, managed and pitched ones, and any physical
 * allocation mapped twice or in part.  One exported or imported (another
 * process may use it) is carried only as share.c says: exported and
 * imported as a POSIX descriptor, and paired by thawd.
 */
#include "interpose/gm.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

pthread_mutex_t gm_lock = PTHREAD_MUTEX_INITIALIZER;
struct gm_map *gm_maps;
struct gm_left gm_left;
size_t gm_min_bytes = 2u << 20;

/* Physical allocations the function made or got, by its handle value. */
struct gm_handle **gm_handles;
size_t gm_nhandles;
static size_t cap_handles;

static cu_handle next_virtual = 1ull << 62;

/* Allocations left to the driver (pointer -> size), for the live count. */
struct left_entry {
	cu_ptr p;
	size_t size;
};
static struct left_entry *lefts;
static size_t nlefts, cap_lefts;

static void *grow(void *a, size_t *cap, size_t n, size_t size)
{
	void *b;
	size_t c;

	if (n < *cap)
		return a;
	c = *cap ? *cap * 2 : 64;
	b = realloc(a, c * size);
	if (b)
		*cap = c;
	return b;
}

static void left_add(cu_ptr p, size_t size)
{
	struct left_entry *l;

	pthread_mutex_lock(&gm_lock);
	l = grow(lefts, &cap_lefts, nlefts, sizeof(*lefts));
	if (l) {
		lefts = l;
		lefts[nlefts++] = (struct left_entry){ p, size };
		gm_left.allocs++;
		gm_left.bytes += size;
	}
	pthread_mutex_unlock(&gm_lock);
}

static void left_remove(cu_ptr p)
{
	pthread_mutex_lock(&gm_lock);
	for (size_t i = 0; i < nlefts; i++) {
		if (lefts[i].p != p)
			continue;
		gm_left.allocs--;
		gm_left.bytes -= lefts[i].size;
		lefts[i] = lefts[--nlefts];
		break;
	}
	pthread_mutex_unlock(&gm_lock);
}

static struct gm_handle *handle_find(cu_handle vh)
{
	for (size_t i = 0; i < gm_nhandles; i++)
		if (gm_handles[i]->vh == vh && !gm_handles[i]->dead)
			return gm_handles[i];
	return NULL;
}

/* The driver's handle for the function's value (the value itself when the
 * library never saw it). */
static cu_handle real_of(cu_handle vh)
{
	struct gm_handle *h;
	cu_handle rh = vh;

	pthread_mutex_lock(&gm_lock);
	h = handle_find(vh);
	if (h && h->rh)
		rh = h->rh;
	pthread_mutex_unlock(&gm_lock);
	return rh;
}

/* Record a new physical allocation; its value for the function is the
 * driver's, unless an older one the function still holds has that value. */
static struct gm_handle *handle_add(cu_handle rh, size_t size,
				    const cu_mem_prop *prop)
{
	struct gm_handle *h = calloc(1, sizeof(*h)), **a;

	if (!h)
		return NULL;
	a = grow(gm_handles, &cap_handles, gm_nhandles, sizeof(*gm_handles));
	if (!a) {
		free(h);
		return NULL;
	}
	gm_handles = a;
	h->rh = rh;
	h->vh = handle_find(rh) ? next_virtual++ : rh;
	h->refs = 1;
	h->size = size;
	if (prop)
		h->prop = *prop;
	gm_handles[gm_nhandles++] = h;
	return h;
}

static void handle_maybe_drop(struct gm_handle *h)
{
	if (h->refs > 0 || h->nmaps > 0)
		return;
	h->dead = true;
	if (h->nfds) {
		gm_share_fds_close(h);
		gm_share_fds_write();
	}
	for (size_t i = 0; i < gm_nhandles; i++) {
		if (gm_handles[i] != h)
			continue;
		gm_handles[i] = gm_handles[--gm_nhandles];
		free(h);
		return;
	}
}

static struct gm_map *map_add(cu_ptr va, size_t size, size_t offset, struct gm_handle *h)
{
	struct gm_map *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->va = va;
	m->size = size;
	m->offset = offset;
	m->h = h;
	m->device = h ? h->prop.location.id : 0;
	if (gm_real.cuCtxGetCurrent)
		gm_real.cuCtxGetCurrent(&m->ctx);
	m->next = gm_maps;
	gm_maps = m;
	if (h)
		h->nmaps++;
	return m;
}

static void map_free(struct gm_map **pp)
{
	struct gm_map *m = *pp;

	*pp = m->next;
	if (m->h) {
		m->h->nmaps--;
		handle_maybe_drop(m->h);
	}
	free(m);
}

/* Each of the library's entry points starts so: the driver resolved (a
 * call before the process has libcuda answers as the driver would), the
 * control thread started, the call counted in by the gate. */
#define OWN_ENTER()                                                                          \
	do {                                                                                 \
		if (gm_real_init())                                                          \
			return CU_ERR_NOT_INITIALIZED;                                       \
		gm_control_start();                                                          \
		gm_gate_enter();                                                             \
	} while (0)

/* --- cuMemAlloc made movable --- */

static size_t granularity(const cu_mem_prop *prop)
{
	size_t g = 0;

	if (gm_real.cuMemGetAllocationGranularity(&g, prop, CU_GRAN_MINIMUM) != CU_SUCCESS ||
	    !g)
		g = 2u << 20;
	return g;
}

/* Read-write for dev and each device that can reach it as a peer. */
/* The number of them, or -1 when there are more peers than a mapping's
 * access is kept for (the driver's own cuMemAlloc then, not a mapping
 * some peer could not reach). */
static int access_for(int dev, cu_access_desc *d)
{
	int n = 0, count = 0;

	d[n++] = (cu_access_desc){ { CU_LOC_DEVICE, dev }, CU_ACCESS_RW };
	if (gm_real.cuDeviceGetCount(&count) != CU_SUCCESS)
		return n;
	for (int e = 0; e < count; e++) {
		int can = 0;

		if (e == dev || gm_real.cuDeviceCanAccessPeer(&can, e, dev) != CU_SUCCESS || !can)
			continue;
		if (n == GM_MAX_ACCESS)
			return -1;
		d[n++] = (cu_access_desc){ { CU_LOC_DEVICE, e }, CU_ACCESS_RW };
	}
	return n;
}

/* 0, or the driver's error; nothing is left behind on an error. */
static cu_result movable_alloc(cu_ptr *dptr, size_t bytes)
{
	cu_mem_prop prop = { .type = CU_ALLOC_PINNED,
				     .location = { CU_LOC_DEVICE, 0 } };
	cu_handle rh = 0;
	cu_access_desc acc[GM_MAX_ACCESS];
	cu_ptr va = 0;
	struct gm_handle *h;
	struct gm_map *m;
	size_t size;
	cu_result r;
	int nacc;

	r = gm_real.cuCtxGetDevice(&prop.location.id);
	if (r != CU_SUCCESS)
		return r;
	nacc = access_for(prop.location.id, acc);
	if (nacc < 0)
		return CU_ERR_NOT_SUPPORTED;
	size = (bytes + granularity(&prop) - 1) / granularity(&prop) * granularity(&prop);
	r = gm_real.cuMemAddressReserve(&va, size, 0, 0, 0);
	if (r != CU_SUCCESS)
		return r;
	r = gm_real.cuMemCreate(&rh, size, &prop, 0);
	if (r != CU_SUCCESS)
		goto free_va;
	r = gm_real.cuMemMap(va, size, 0, rh, 0);
	if (r != CU_SUCCESS)
		goto release;
	r = gm_real.cuMemSetAccess(va, size, acc, (size_t)nacc);
	if (r != CU_SUCCESS)
		goto unmap;
	/* The memory dies with its unmap, as cuMemFree expects. */
	r = gm_real.cuMemRelease(rh);
	if (r != CU_SUCCESS)
		goto unmap;
	pthread_mutex_lock(&gm_lock);
	h = handle_add(rh, size, &prop);
	m = h ? map_add(va, size, 0, h) : NULL;
	if (m) {
		h->refs = 0;
		m->ours = true;
		m->reserved = size;
		memcpy(m->access, acc, sizeof(acc));
		m->naccess = nacc;
	} else if (h) {
		h->refs = 0;
		handle_maybe_drop(h);
	}
	pthread_mutex_unlock(&gm_lock);
	if (!m) {
		gm_real.cuMemUnmap(va, size);
		gm_real.cuMemAddressFree(va, size);
		return CU_ERR_OUT_OF_MEMORY;
	}
	*dptr = va;
	return CU_SUCCESS;
unmap:
	gm_real.cuMemUnmap(va, size);
release:
	gm_real.cuMemRelease(rh);
free_va:
	gm_real.cuMemAddressFree(va, size);
	return r;
}

static cu_result own_mem_alloc(cu_ptr *dptr, size_t bytes)
{
	cu_result r;

	OWN_ENTER();
	r = bytes >= gm_min_bytes ? movable_alloc(dptr, bytes) : CU_ERR_NOT_SUPPORTED;
	if (r != CU_SUCCESS) {
		/* Too small to be worth a mapping, or the VMM path refused:
		 * the driver's own allocation, left to its checkpoint. */
		r = gm_real.cuMemAlloc_v2(dptr, bytes);
		if (r == CU_SUCCESS)
			left_add(*dptr, bytes);
	}
	gm_gate_exit();
	return r;
}

static cu_result own_mem_free(cu_ptr p)
{
	struct gm_map **pp, *m = NULL;
	size_t size = 0, reserved = 0;
	cu_result r;

	OWN_ENTER();
	pthread_mutex_lock(&gm_lock);
	for (pp = &gm_maps; *pp; pp = &(*pp)->next)
		if ((*pp)->ours && (*pp)->va == p)
			break;
	if (*pp) {
		m = *pp;
		size = m->size;
		reserved = m->reserved;
		map_free(pp);
	}
	pthread_mutex_unlock(&gm_lock);
	if (m) {
		r = gm_real.cuMemUnmap(p, size);
		if (r == CU_SUCCESS)
			r = gm_real.cuMemAddressFree(p, reserved);
	} else {
		r = gm_real.cuMemFree_v2(p);
		if (r == CU_SUCCESS)
			left_remove(p);
	}
	gm_gate_exit();
	return r;
}

/* --- allocations left to the driver, counted --- */

static cu_result counted(cu_result r, cu_ptr *dptr, size_t bytes)
{
	if (r == CU_SUCCESS && dptr)
		left_add(*dptr, bytes);
	return r;
}

#define LEFT_ALLOC(name, field, params, args, bytes)                                         \
	static cu_result name params                                                           \
	{                                                                                     \
		cu_result r;                                                                   \
		OWN_ENTER();                                                                  \
		r = counted(gm_real.field args, dptr, bytes);                                 \
		gm_gate_exit();                                                               \
		return r;                                                                     \
	}
LEFT_ALLOC(own_alloc_async, cuMemAllocAsync, (cu_ptr * dptr, size_t n, cu_stream s),
	   (dptr, n, s), n)
LEFT_ALLOC(own_alloc_async_ptsz, cuMemAllocAsync_ptsz, (cu_ptr * dptr, size_t n, cu_stream s),
	   (dptr, n, s), n)
LEFT_ALLOC(own_alloc_pool, cuMemAllocFromPoolAsync,
	   (cu_ptr * dptr, size_t n, cu_pool pool, cu_stream s), (dptr, n, pool, s), n)
LEFT_ALLOC(own_alloc_pool_ptsz, cuMemAllocFromPoolAsync_ptsz,
	   (cu_ptr * dptr, size_t n, cu_pool pool, cu_stream s), (dptr, n, pool, s), n)
LEFT_ALLOC(own_alloc_managed, cuMemAllocManaged, (cu_ptr * dptr, size_t n, unsigned f),
	   (dptr, n, f), n)
LEFT_ALLOC(own_alloc_pitch, cuMemAllocPitch_v2,
	   (cu_ptr * dptr, size_t *pitch, size_t w, size_t h, unsigned e),
	   (dptr, pitch, w, h, e), *pitch * h)

static cu_result own_free_async(cu_ptr p, cu_stream s)
{
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemFreeAsync(p, s);
	if (r == CU_SUCCESS)
		left_remove(p);
	gm_gate_exit();
	return r;
}

static cu_result own_free_async_ptsz(cu_ptr p, cu_stream s)
{
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemFreeAsync_ptsz(p, s);
	if (r == CU_SUCCESS)
		left_remove(p);
	gm_gate_exit();
	return r;
}

/* --- the function's own VMM calls --- */

static cu_result own_create(cu_handle *handle, size_t size,
			   const cu_mem_prop *prop, unsigned long long flags)
{
	struct gm_handle *h = NULL;
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemCreate(handle, size, prop, flags);
	if (r == CU_SUCCESS) {
		pthread_mutex_lock(&gm_lock);
		h = handle_add(*handle, size, prop);
		/* Shareable (PyTorch asks for a file descriptor handle type)
		 * is not shared: only an export makes it so. */
		if (h)
			*handle = h->vh;
		pthread_mutex_unlock(&gm_lock);
	}
	gm_gate_exit();
	return r;
}

/* One of the function's references let go.  Where the library knows
 * the handle, the driver's handle is released, never the function's value
 * (after a restore that names nothing, or another allocation); a handle
 * the function holds no reference to any more is the driver's error. */
static cu_result own_release(cu_handle vh)
{
	struct gm_handle *h;
	cu_result r = CU_SUCCESS;

	OWN_ENTER();
	pthread_mutex_lock(&gm_lock);
	h = handle_find(vh);
	if (!h)
		r = gm_real.cuMemRelease(vh); /* not one the library saw */
	else if (h->refs <= 0)
		r = CU_ERR_INVALID_VALUE;
	else if (h->rh)
		r = gm_real.cuMemRelease(h->rh);
	/* Saved (no driver handle): its memory is in the file, the count is
	 * all there is of it until the copy back. */
	if (h && r == CU_SUCCESS) {
		h->refs--;
		handle_maybe_drop(h);
	}
	pthread_mutex_unlock(&gm_lock);
	gm_gate_exit();
	return r;
}

static cu_result own_map(cu_ptr va, size_t size, size_t offset,
			cu_handle vh, unsigned long long flags)
{
	struct gm_handle *h;
	cu_result r;

	OWN_ENTER();
	pthread_mutex_lock(&gm_lock);
	h = handle_find(vh);
	r = gm_real.cuMemMap(va, size, offset, h && h->rh ? h->rh : vh, flags);
	/* An import's size is what its first mapping says (the driver tells
	 * no size for a handle). */
	if (r == CU_SUCCESS && h && !h->size && !h->nmaps)
		h->size = offset + size;
	if (r == CU_SUCCESS)
		map_add(va, size, offset, h);
	pthread_mutex_unlock(&gm_lock);
	gm_gate_exit();
	return r;
}

static cu_result own_unmap(cu_ptr va, size_t size)
{
	cu_result r;

	OWN_ENTER();
	pthread_mutex_lock(&gm_lock);
	r = gm_real.cuMemUnmap(va, size);
	if (r == CU_SUCCESS)
		for (struct gm_map **pp = &gm_maps; *pp;) {
			if (!(*pp)->ours && (*pp)->va >= va && (*pp)->va < va + size)
				map_free(pp);
			else
				pp = &(*pp)->next;
		}
	pthread_mutex_unlock(&gm_lock);
	gm_gate_exit();
	return r;
}

static cu_result own_set_access(cu_ptr va, size_t size, const cu_access_desc *desc,
			       size_t count)
{
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemSetAccess(va, size, desc, count);
	if (r == CU_SUCCESS) {
		pthread_mutex_lock(&gm_lock);
		for (struct gm_map *m = gm_maps; m; m = m->next) {
			if (m->va + m->size <= va || m->va >= va + size)
				continue;
			for (size_t i = 0; i < count; i++) {
				int k;

				for (k = 0; k < m->naccess; k++)
					if (m->access[k].location.id == desc[i].location.id &&
					    m->access[k].location.type == desc[i].location.type)
						break;
				if (k < GM_MAX_ACCESS) {
					m->access[k] = desc[i];
					if (k == m->naccess)
						m->naccess++;
				} else {
					/* Not kept: it could not be
					 * mapped back as it is. */
					m->access_full = true;
				}
			}
		}
		pthread_mutex_unlock(&gm_lock);
	}
	gm_gate_exit();
	return r;
}

static cu_result own_retain_handle(cu_handle *handle, void *addr)
{
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemRetainAllocationHandle(handle, addr);
	if (r == CU_SUCCESS) {
		pthread_mutex_lock(&gm_lock);
		for (size_t i = 0; i < gm_nhandles; i++)
			if (gm_handles[i]->rh == *handle && !gm_handles[i]->dead) {
				/* One more reference of the function's. */
				gm_handles[i]->refs++;
				*handle = gm_handles[i]->vh;
				break;
			}
		pthread_mutex_unlock(&gm_lock);
	}
	gm_gate_exit();
	return r;
}

static cu_result own_props_from_handle(cu_mem_prop *prop, cu_handle vh)
{
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemGetAllocationPropertiesFromHandle(prop, real_of(vh));
	gm_gate_exit();
	return r;
}

/* A dup of fd kept with h, for thawd to pair the process that imports it
 * with the one that exported it (share.c says why a dup).  Not under
 * thaw, or past GM_MAX_SHARE_FDS: the handle is left to the driver. */
static void keep_fd(struct gm_handle *h, int fd)
{
	int d;

	if (!gm_out_dir || h->nfds == GM_MAX_SHARE_FDS ||
	    (d = fcntl(fd, F_DUPFD_CLOEXEC, 100)) < 0) {
		h->share_full = true;
		return;
	}
	h->fds[h->nfds++] = d;
	gm_share_fds_write();
}

static cu_result own_export_handle(void *out, cu_handle vh, int type,
				  unsigned long long flags)
{
	struct gm_handle *h;
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemExportToShareableHandle(out, real_of(vh), type, flags);
	pthread_mutex_lock(&gm_lock);
	h = handle_find(vh);
	if (h) {
		h->shared = true;
		if (r == CU_SUCCESS && type == CU_HANDLE_POSIX_FD) {
			h->exported = true;
			keep_fd(h, *(int *)out);
		} else {
			h->share_full = true; /* a kind share.c does not carry */
		}
	}
	pthread_mutex_unlock(&gm_lock);
	gm_gate_exit();
	return r;
}

static cu_result own_import_handle(cu_handle *handle, void *os, int type)
{
	struct gm_handle *h;
	cu_result r;

	OWN_ENTER();
	r = gm_real.cuMemImportFromShareableHandle(handle, os, type);
	if (r == CU_SUCCESS) {
		pthread_mutex_lock(&gm_lock);
		h = handle_add(*handle, 0, NULL);
		if (h) {
			h->shared = true;
			h->imported = true;
			if (type == CU_HANDLE_POSIX_FD)
				keep_fd(h, (int)(intptr_t)os);
			else
				h->share_full = true;
			*handle = h->vh;
		}
		pthread_mutex_unlock(&gm_lock);
	}
	gm_gate_exit();
	return r;
}

/* The driver's address of each call the library implements, and its own. */
void *gm_own(void *p)
{
#define OWN_ENTRY(sym, fn) { *(void **)&gm_real.sym, (void *)fn },
	const struct {
		void *real, *own;
	} table[] = { GM_EXPORTS_OWN_MEM(OWN_ENTRY) };
#undef OWN_ENTRY

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (table[i].real && table[i].real == p)
			return table[i].own;
	return NULL;
}

/* The same, for programs linked against libcuda (exports.h). */
GM_EXPORTS_OWN_MEM(GM_EXPORT_AS)
