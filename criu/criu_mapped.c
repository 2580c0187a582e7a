/* SPDX-License-Identifier: Apache-2.0 */
/* criu_mapped.c — the CRIU image's side of a mapped image; see criu_mapped.h.
 *
 * Which VMAs.  Only a VMA whose status is exactly REGULAR|ANON_PRIVATE, with
 * HEAP at most (no stack, vdso or other kernel area), mapped MAP_PRIVATE|MAP_ANONYMOUS
 * without MAP_GROWSDOWN, whose pages are all in the pages file (none in a
 * parent image) and hold at least min_bytes.  And none that another process
 * of the image maps privately too: CRIU restores a forked child's VMA that
 * its parent also has by inheriting the parent's across fork, and a child
 * whose VMA became a file mapping while its parent's stayed anonymous (or
 * the other way round) would lose that sharing or read the wrong pages.
 *
 * The heap.  The brk heap (most of a Python process's memory) is mapped too:
 * CRIU restores the brk pointers with prctl whatever backs the VMA, a brk()
 * that grows the heap then adds anonymous memory after the file mapping (zero,
 * as glibc expects of fresh brk memory), and one that shrinks it unmaps.
 *
 * The pagemap.  A mapped VMA's pagemap entries are dropped (split where an
 * entry straddles the VMA's ends) and its pages leave the pages file; every
 * other entry is kept, split at VMA ends too, so that each run told to the
 * caller is mapped or kept whole.
 */
#include "criu/criu_mapped.h"
#include "common/util.h"
#include "criu/criu_pagemap.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Executable memory (a JIT's code) is copied, not mapped: the memory
 * files' mount is noexec (OCI_BIND_INERT), where a PROT_EXEC map fails. */
static bool candidate(const struct criu_img_vma *v)
{
	uint32_t st = v->status & ~CRIU_VMA_AREA_HEAP;

	return st == (CRIU_VMA_AREA_REGULAR | CRIU_VMA_ANON_PRIVATE) &&
	       (v->flags & (MAP_PRIVATE | MAP_ANONYMOUS)) == (MAP_PRIVATE | MAP_ANONYMOUS) &&
	       !(v->flags & (MAP_GROWSDOWN | MAP_SHARED)) && !(v->prot & PROT_EXEC);
}

static bool is_private(const struct criu_img_vma *v)
{
	return (v->status & (CRIU_VMA_ANON_PRIVATE | CRIU_VMA_FILE_PRIVATE)) != 0;
}

/* Does a process of the image other than self map [start, end) privately? */
static bool shared_with_other(const struct criu_mapped_image *im, size_t self, uint64_t start,
			      uint64_t end)
{
	for (size_t i = 0; i < im->nprocs; i++) {
		const struct criu_img_mm *mm = &im->procs[i].mm;

		if (i == self || !im->procs[i].has_mm)
			continue;
		for (size_t k = 0; k < mm->nvmas; k++)
			if (is_private(&mm->vmas[k]) && mm->vmas[k].start < end &&
			    start < mm->vmas[k].end)
				return true;
	}
	return false;
}

/* The VMA index holding addr, or -1. */
static long vma_index(const struct criu_img_mm *mm, uint64_t addr)
{
	size_t lo = 0, hi = mm->nvmas;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < mm->vmas[mid].start)
			hi = mid;
		else if (addr >= mm->vmas[mid].end)
			lo = mid + 1;
		else
			return (long)mid;
	}
	return -1;
}


/* The pids of pstree.img, one criu_mapped_proc each. */
static int load_pstree(const char *image_dir, struct criu_mapped_image *im)
{
	struct criu_img_pstree t = {0};
	uint8_t *buf = NULL;
	size_t len;
	int ret;

	ret = criu_img_read_in(image_dir, "pstree.img", &buf, &len);
	if (!ret)
		ret = criu_img_decode_pstree(buf, len, "pstree.img", &t);
	free(buf);
	if (ret)
		return ret;
	im->procs = calloc(t.n, sizeof(*im->procs));
	if (!im->procs) {
		criu_img_pstree_release(&t);
		return -ENOMEM;
	}
	im->nprocs = t.n;
	for (size_t i = 0; i < t.n; i++)
		im->procs[i].pid = t.e[i].pid;
	criu_img_pstree_release(&t);
	return 0;
}

/* Count the bytes of p's pages in the pages file per VMA, and mark the VMAs
 * with a page that is not there. */
static void count_data(struct criu_mapped_proc *p)
{
	for (size_t k = 0; k < p->pm.n; k++) {
		const struct criu_img_pagemap_entry *e = &p->pm.e[k];
		uint64_t a = e->vaddr, end = a + criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
		bool in_file = criu_img_pme_in_pages_file(e);

		while (a < end) {
			long v = vma_index(&p->mm, a);
			uint64_t stop = v < 0 ? a + CRIU_PAGE_SIZE
					      : (p->mm.vmas[v].end < end ? p->mm.vmas[v].end : end);

			if (v >= 0 && in_file)
				p->data[v] += stop - a;
			else if (v >= 0)
				p->bad[v] = true;
			a = stop;
		}
	}
}

/* p's mm and pagemap; nothing (has_mm false) for a process CRIU keeps no
 * memory of. */
static int load_proc(const char *image_dir, struct criu_mapped_proc *p)
{
	uint8_t *buf = NULL;
	char name[64];
	size_t len;
	int ret;

	snprintf(name, sizeof(name), "mm-%u.img", p->pid);
	ret = criu_img_read_in(image_dir, name, &buf, &len);
	if (ret == -ENOENT)
		return 0; /* a zombie, or a process CRIU keeps no memory of */
	if (!ret)
		ret = criu_img_decode_mm(buf, len, name, &p->mm);
	free(buf);
	buf = NULL;
	if (ret)
		return ret;
	p->has_mm = true;
	snprintf(name, sizeof(name), "pagemap-%u.img", p->pid);
	ret = criu_img_read_in(image_dir, name, &buf, &len);
	if (!ret)
		ret = criu_img_decode_pagemap(buf, len, name, &p->pm);
	free(buf);
	if (ret)
		return ret;
	p->map = calloc(p->mm.nvmas + 1, sizeof(*p->map));
	p->data = calloc(p->mm.nvmas + 1, sizeof(*p->data));
	p->bad = calloc(p->mm.nvmas + 1, sizeof(*p->bad));
	if (!p->map || !p->data || !p->bad)
		return -ENOMEM;
	count_data(p);
	return 0;
}

int criu_mapped_load(const char *image_dir, struct criu_mapped_image *im)
{
	int ret;

	memset(im, 0, sizeof(*im));
	ret = load_pstree(image_dir, im);
	for (size_t i = 0; !ret && i < im->nprocs; i++)
		ret = load_proc(image_dir, &im->procs[i]);
	return ret;
}

void criu_mapped_release(struct criu_mapped_image *im)
{
	for (size_t i = 0; i < im->nprocs; i++) {
		criu_img_mm_release(&im->procs[i].mm);
		criu_img_pagemap_release(&im->procs[i].pm);
		free(im->procs[i].map);
		free(im->procs[i].data);
		free(im->procs[i].bad);
	}
	free(im->procs);
	memset(im, 0, sizeof(*im));
}

int criu_mapped_choose(struct criu_mapped_image *im, uint64_t min_bytes,
		       struct criu_mapped_choice *c, char *why, size_t whylen)
{
	for (size_t i = 0; i < im->nprocs; i++) {
		struct criu_mapped_proc *p = &im->procs[i];
		bool any = false;

		for (size_t k = 0; p->has_mm && k < p->mm.nvmas; k++) {
			const struct criu_img_vma *v = &p->mm.vmas[k];

			if (!candidate(v) || p->bad[k] || p->data[k] < min_bytes)
				continue;
			if (shared_with_other(im, i, v->start, v->end)) {
				c->vmas_shared++;
				continue;
			}
			p->map[k] = any = true;
			c->vmas++;
			c->mapped_bytes += p->data[k];
		}
		c->processes += any;
	}
	if (c->vmas)
		return 0;
	if (c->vmas_shared)
		snprintf(why, whylen,
			 "its %u large private mappings are each shared with a forked process",
			 c->vmas_shared);
	else
		snprintf(why, whylen,
			 "no private anonymous mapping holds %llu KiB of pages or more",
			 (unsigned long long)(min_bytes >> 10));
	return -ENODATA;
}

bool criu_mapped_proc_any(const struct criu_mapped_proc *p)
{
	for (size_t k = 0; p->has_mm && k < p->mm.nvmas; k++)
		if (p->map[k])
			return true;
	return false;
}

bool criu_mapped_rewritten(const struct criu_mapped_image *im, const char *name)
{
	char own[64];

	if (!strcmp(name, "files.img"))
		return true;
	for (size_t i = 0; i < im->nprocs; i++) {
		const struct criu_mapped_proc *p = &im->procs[i];

		if (!criu_mapped_proc_any(p))
			continue;
		snprintf(own, sizeof(own), "mm-%u.img", p->pid);
		if (!strcmp(name, own))
			return true;
		snprintf(own, sizeof(own), "pagemap-%u.img", p->pid);
		if (!strcmp(name, own))
			return true;
		snprintf(own, sizeof(own), "pages-%u.img", p->pm.pages_id);
		if (!strcmp(name, own))
			return true;
	}
	return false;
}

/* --- The pagemap ----------------------------------------------------------- */

struct split {
	const struct criu_mapped_proc *p;
	const uint64_t *base;
	criu_mapped_run_fn fn;
	void *arg;
};

/* Where the run from a (before end, the entry's end) stops: the end of its
 * VMA v, or for an address in no VMA (CRIU would refuse it) the start of the
 * next VMA, so that each run is mapped or kept whole. */
static uint64_t run_end(const struct criu_img_mm *mm, long v, uint64_t a, uint64_t end)
{
	uint64_t stop = v < 0 ? end : (mm->vmas[v].end < end ? mm->vmas[v].end : end);

	if (v < 0)
		for (size_t k = 0; k < mm->nvmas; k++)
			if (mm->vmas[k].start > a && mm->vmas[k].start < stop)
				stop = mm->vmas[k].start;
	return stop;
}

/* The pagemap walk's step (criu_pagemap.h): e split at VMA ends, the runs
 * of mapped VMAs dropped and told to the caller, the others kept. */
static int split_entry(struct criu_pagemap_rewrite *rw, const struct criu_img_pagemap_entry *e,
		       uint64_t ioff, void *arg)
{
	const struct split *s = arg;
	const struct criu_mapped_proc *p = s->p;
	uint64_t a = e->vaddr, end = a + criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
	bool in_file = criu_img_pme_in_pages_file(e);

	while (a < end) {
		long v = vma_index(&p->mm, a);
		uint64_t stop = run_end(&p->mm, v, a, end), at = ioff + (a - e->vaddr), ooff;
		int ret;

		if (v >= 0 && p->map[v]) {
			ret = s->fn(s->arg, v, at, a - s->base[v], stop - a);
		} else {
			ret = criu_pagemap_keep(rw, a, (stop - a) / CRIU_PAGE_SIZE, &ooff);
			if (!ret && in_file)
				ret = s->fn(s->arg, -1, at, ooff, stop - a);
		}
		if (ret)
			return ret;
		a = stop;
	}
	return 0;
}

int criu_mapped_pagemap(const struct criu_mapped_proc *p, const uint64_t *base,
			criu_mapped_run_fn fn, void *arg, struct criu_img_pagemap *npm,
			uint64_t *kept_bytes)
{
	struct split s = {p, base, fn, arg};
	struct criu_pagemap_rewrite rw;
	int ret = criu_pagemap_rewrite(&p->pm, split_entry, &s, &rw);

	if (!ret) {
		*npm = rw.to;
		*kept_bytes = rw.kept_bytes;
		memset(&rw.to, 0, sizeof(rw.to)); /* now *npm's */
	}
	criu_pagemap_rewrite_release(&rw);
	return ret;
}
