/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_map.c — the block and piece bookkeeping of the lazy-pages daemon. */
#define LOG_PREFIX "lazy-map: "
#include "restore/lazy_map.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int piece_reserve(struct lazy_map *m, size_t more)
{
	return ARRAY_GROW(m->pieces, m->cap, m->npieces + more, 64);
}

static int piece_insert(struct lazy_map *m, size_t at, const struct lazy_piece *p)
{
	if (piece_reserve(m, 1))
		return -ENOMEM;
	memmove(&m->pieces[at + 1], &m->pieces[at], (m->npieces - at) * sizeof(*p));
	m->pieces[at] = *p;
	m->npieces++;
	return 0;
}

static void piece_remove(struct lazy_map *m, size_t at, size_t n)
{
	memmove(&m->pieces[at], &m->pieces[at + n], (m->npieces - at - n) * sizeof(m->pieces[0]));
	m->npieces -= n;
}

/* The first piece that starts at or above addr. */
static size_t lower_bound(const struct lazy_map *m, uint64_t addr)
{
	size_t lo = 0, hi = m->npieces;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->pieces[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int block_add(struct lazy_map *m, size_t *cap, uint64_t img, uint64_t len, uint64_t off,
		     uint32_t vma)
{
	struct lazy_piece p = { .addr = img, .len = len, .img = img };

	if (ARRAY_GROW(m->blocks, *cap, m->nblocks + 1, 64))
		return -ENOMEM;
	if (m->npieces && m->pieces[m->npieces - 1].addr + m->pieces[m->npieces - 1].len > img) {
		pr_err("lazy pagemap entries are not in address order at 0x%llx",
		       (unsigned long long)img);
		return -EINVAL;
	}
	p.block = (uint32_t)m->nblocks;
	m->blocks[m->nblocks++] =
		(struct lazy_block){ .img = img, .len = len, .file_off = off, .vma = vma };
	m->bytes += len;
	return piece_insert(m, m->npieces, &p);
}

/* Cut [start, end) (data at file offset off) at VMA ends and block windows. */
static int add_entry(struct lazy_map *m, size_t *cap, const struct criu_img_mm *mm, size_t *v,
		     uint64_t start, uint64_t end, uint64_t off, uint64_t block_bytes)
{
	while (start < end) {
		uint64_t stop;
		int ret;

		while (*v < mm->nvmas && mm->vmas[*v].end <= start)
			(*v)++;
		if (*v == mm->nvmas || mm->vmas[*v].start > start) {
			pr_err("lazy pages at 0x%llx lie in no VMA of the mm image",
			       (unsigned long long)start);
			return -EINVAL;
		}
		stop = (start & ~(block_bytes - 1)) + block_bytes;
		if (stop > end)
			stop = end;
		if (stop > mm->vmas[*v].end)
			stop = mm->vmas[*v].end;
		ret = block_add(m, cap, start, stop - start, off, (uint32_t)*v);
		if (ret)
			return ret;
		off += stop - start;
		start = stop;
	}
	return 0;
}

int lazy_map_build(struct lazy_map *m, const struct criu_img_pagemap *pm,
		   const struct criu_img_mm *mm, uint64_t block_bytes)
{
	uint64_t off = 0;
	size_t cap = 0, v = 0;
	int ret = 0;

	memset(m, 0, sizeof(*m));
	if (block_bytes < CRIU_PAGE_SIZE || (block_bytes & (block_bytes - 1)))
		return -EINVAL;
	for (size_t i = 0; i < pm->n; i++) {
		const struct criu_img_pagemap_entry *e = &pm->e[i];
		uint64_t len = criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
		uint32_t flags = criu_img_pme_flags(e);

		if ((flags & CRIU_PE_LAZY) && (flags & CRIU_PE_PARENT)) {
			pr_err("lazy pages at 0x%llx are in a parent image: not supported",
			       (unsigned long long)e->vaddr);
			ret = -EINVAL;
			goto out;
		}
		/* PE_LAZY without PE_PRESENT holds no data: those pages read as zero. */
		if ((flags & CRIU_PE_LAZY) && criu_img_pme_in_pages_file(e)) {
			ret = add_entry(m, &cap, mm, &v, e->vaddr, e->vaddr + len, off, block_bytes);
			if (ret)
				goto out;
		}
		if (criu_img_pme_in_pages_file(e))
			off += len;
	}
	for (size_t b = 0; b + 1 < m->nblocks; b++) {
		struct lazy_block *k = &m->blocks[b];

		if (k[1].vma == k->vma && k[1].img > k->img + k->len) {
			k->hole_after = k[1].img - (k->img + k->len);
			m->hole_bytes += k->hole_after;
		}
	}
	atomic_store(&m->hole_budget, m->bytes);
	m->state = calloc(m->nblocks ? m->nblocks : 1, sizeof(*m->state));
	if (!m->state)
		ret = -ENOMEM;
out:
	if (ret)
		lazy_map_release(m);
	return ret;
}

int lazy_map_clone(struct lazy_map *dst, const struct lazy_map *m)
{
	memset(dst, 0, sizeof(*dst));
	dst->blocks = malloc((m->nblocks ? m->nblocks : 1) * sizeof(*dst->blocks));
	dst->state = calloc(m->nblocks ? m->nblocks : 1, sizeof(*dst->state));
	if (!dst->blocks || !dst->state || piece_reserve(dst, m->npieces)) {
		lazy_map_release(dst);
		return -ENOMEM;
	}
	memcpy(dst->blocks, m->blocks, m->nblocks * sizeof(*dst->blocks));
	dst->nblocks = m->nblocks;
	dst->bytes = m->bytes;
	dst->hole_bytes = m->hole_bytes;
	atomic_store(&dst->hole_budget, atomic_load(&m->hole_budget));
	dst->moved = m->moved;
	for (size_t b = 0; b < m->nblocks; b++)
		if (lazy_map_state(m, (uint32_t)b) == LAZY_DONE)
			atomic_store(&dst->state[b], LAZY_DONE);
	for (size_t i = 0; i < m->npieces; i++)
		if (lazy_map_state(m, m->pieces[i].block) != LAZY_DONE)
			dst->pieces[dst->npieces++] = m->pieces[i];
	return 0;
}

void lazy_map_release(struct lazy_map *m)
{
	free(m->blocks);
	free((void *)m->state);
	free(m->pieces);
	memset(m, 0, sizeof(*m));
}

long lazy_map_find(const struct lazy_map *m, uint64_t addr, uint64_t *gap_lo, uint64_t *gap_hi)
{
	size_t i = lower_bound(m, addr + 1); /* the first piece above addr */
	const struct lazy_piece *below = i ? &m->pieces[i - 1] : NULL;

	if (below && addr < below->addr + below->len)
		return (long)(i - 1);
	if (gap_lo)
		*gap_lo = below ? below->addr + below->len : 0;
	if (gap_hi)
		*gap_hi = i < m->npieces ? m->pieces[i].addr : UINT64_MAX;
	return -1;
}

int lazy_map_each_piece(const struct lazy_map *m, uint32_t b,
			int (*fn)(const struct lazy_piece *p, void *arg), void *arg)
{
	size_t i = 0;
	int ret;

	/* Until a remap the pieces are in block order: start at the block's. */
	if (!m->moved && b < m->nblocks)
		i = lower_bound(m, m->blocks[b].img);
	for (; i < m->npieces; i++) {
		if (m->pieces[i].block != b) {
			if (!m->moved && m->pieces[i].block > b)
				break;
			continue;
		}
		ret = fn(&m->pieces[i], arg);
		if (ret)
			return ret;
	}
	return 0;
}

/* Make addr a piece boundary: split the piece that holds it inside. */
static int split_at(struct lazy_map *m, uint64_t addr)
{
	long i = lazy_map_find(m, addr, NULL, NULL);
	struct lazy_piece tail;
	uint64_t head;

	if (i < 0 || m->pieces[i].addr == addr)
		return 0;
	head = addr - m->pieces[i].addr;
	tail = m->pieces[i];
	tail.addr += head;
	tail.img += head;
	tail.len -= head;
	m->pieces[i].len = head;
	return piece_insert(m, (size_t)i + 1, &tail);
}

int lazy_map_drop(struct lazy_map *m, uint64_t addr, uint64_t len)
{
	uint64_t end = addr + len < addr ? UINT64_MAX : addr + len;
	size_t i, j;

	if (!len)
		return 0;
	if (split_at(m, addr) || split_at(m, end))
		return -ENOMEM;
	i = lower_bound(m, addr);
	for (j = i; j < m->npieces && m->pieces[j].addr < end; j++)
		;
	piece_remove(m, i, j - i);
	return 0;
}

int lazy_map_remap(struct lazy_map *m, uint64_t from, uint64_t to, uint64_t len)
{
	struct lazy_piece *moving = NULL;
	size_t i, j, n, at;
	int ret;

	if (!len || from == to)
		return 0;
	ret = lazy_map_drop(m, to, len);
	if (!ret && (split_at(m, from) || split_at(m, from + len)))
		ret = -ENOMEM;
	if (ret)
		return ret;
	i = lower_bound(m, from);
	for (j = i; j < m->npieces && m->pieces[j].addr < from + len; j++)
		;
	n = j - i;
	if (!n)
		return 0;
	moving = malloc(n * sizeof(*moving));
	if (!moving)
		return -ENOMEM;
	memcpy(moving, &m->pieces[i], n * sizeof(*moving));
	piece_remove(m, i, n);
	for (size_t k = 0; k < n; k++)
		moving[k].addr = moving[k].addr - from + to;
	/* The destination is empty now: the moved run goes in as a whole. */
	at = lower_bound(m, to);
	memmove(&m->pieces[at + n], &m->pieces[at], (m->npieces - at) * sizeof(*moving));
	memcpy(&m->pieces[at], moving, n * sizeof(*moving));
	m->npieces += n;
	m->moved = true;
	free(moving);
	return 0;
}

uint64_t lazy_map_take_hole(struct lazy_map *m, uint32_t b, uint64_t max)
{
	uint64_t len = m->blocks[b].hole_after;
	uint_fast64_t left = atomic_load(&m->hole_budget);

	if (!len || len > max || m->moved)
		return 0;
	do
		if (left < len)
			return 0;
	while (!atomic_compare_exchange_weak(&m->hole_budget, &left, left - len));
	return len;
}

bool lazy_map_claim(struct lazy_map *m, uint32_t b)
{
	uint8_t expect = LAZY_TODO;

	return atomic_compare_exchange_strong(&m->state[b], &expect, LAZY_CLAIMED);
}

void lazy_map_done(struct lazy_map *m, uint32_t b)
{
	atomic_store_explicit(&m->state[b], LAZY_DONE, memory_order_release);
}

enum lazy_block_state lazy_map_state(const struct lazy_map *m, uint32_t b)
{
	return (enum lazy_block_state)atomic_load_explicit(&m->state[b], memory_order_acquire);
}

uint64_t lazy_map_pending_bytes(const struct lazy_map *m)
{
	uint64_t n = 0;

	for (size_t i = 0; i < m->npieces; i++)
		if (lazy_map_state(m, m->pieces[i].block) != LAZY_DONE)
			n += m->pieces[i].len;
	return n;
}
