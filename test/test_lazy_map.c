/* SPDX-License-Identifier: Apache-2.0 */
/* test_lazy_map.c — the lazy-pages daemon's bookkeeping: blocks cut at VMA
 * ends and block windows with the right pages-file offsets, faults found or
 * their zero gaps, and the pieces after MADV_DONTNEED/munmap (drop), mremap
 * (remap) and fork (clone), and the holes between blocks of one VMA. */
#include "restore/lazy_map.h"
#include "test/check.h"

#include <errno.h>

#define P 4096ull
#define BLK (16 * P)

struct collect {
	struct lazy_piece p[16];
	int n;
};

static int collect_fn(const struct lazy_piece *p, void *arg)
{
	struct collect *c = arg;

	if (c->n < 16)
		c->p[c->n] = *p;
	c->n++;
	return 0;
}

static struct collect pieces_of(const struct lazy_map *m, uint32_t b)
{
	struct collect c = { .n = 0 };

	lazy_map_each_piece(m, b, collect_fn, &c);
	return c;
}

static struct criu_img_pagemap_entry pme(uint64_t vaddr, uint64_t pages, uint32_t flags)
{
	return (struct criu_img_pagemap_entry){ .vaddr = vaddr, .has_flags = true, .flags = flags,
						.has_nr_pages = true, .nr_pages = pages };
}

int main(void)
{
	/* VMAs: [0x100000, +40 pages) and [+40 pages, +48 pages), then one far away. */
	struct criu_img_vma vmas[3] = {
		{ .start = 0x100000, .end = 0x100000 + 40 * P },
		{ .start = 0x100000 + 40 * P, .end = 0x100000 + 48 * P },
		{ .start = 0x800000, .end = 0x800000 + 4 * P },
	};
	struct criu_img_mm mm = { .vmas = vmas, .nvmas = 3 };
	struct criu_img_pagemap_entry e[4] = {
		pme(0x100000, 2, CRIU_PE_PRESENT),		   /* eager: file 0..2 */
		pme(0x100000 + 4 * P, 42, CRIU_PE_PRESENT | CRIU_PE_LAZY), /* file 2..44 */
		pme(0x800000, 2, CRIU_PE_LAZY),			   /* lazy, no data */
		pme(0x800000 + 2 * P, 2, CRIU_PE_PRESENT | CRIU_PE_LAZY), /* file 44..46 */
	};
	struct criu_img_pagemap pm = { .pages_id = 1, .e = e, .n = 4 };
	struct lazy_map m, c;
	struct collect got;
	uint64_t lo, hi;
	long i;

	REQUIRE(lazy_map_build(&m, &pm, &mm, BLK) == 0);
	/* 0x104000..0x110000 (window end), ..0x120000, ..0x128000 (VMA end),
	 * ..0x12e000 (entry end), 0x802000..0x804000. */
	REQUIRE(m.nblocks == 5);
	CHECK_EQ(m.blocks[0].img, 0x104000);
	CHECK_EQ(m.blocks[0].len, 12 * P);
	CHECK_EQ(m.blocks[0].file_off, 2 * P);
	CHECK_EQ(m.blocks[1].img, 0x110000);
	CHECK_EQ(m.blocks[1].len, 16 * P);
	CHECK_EQ(m.blocks[1].file_off, 14 * P);
	CHECK_EQ(m.blocks[2].len, 8 * P);
	CHECK_EQ(m.blocks[3].img, 0x128000);
	CHECK_EQ(m.blocks[3].len, 6 * P);
	CHECK_EQ(m.blocks[3].file_off, 38 * P);
	CHECK_EQ(m.blocks[4].img, 0x802000);
	CHECK_EQ(m.blocks[4].file_off, 44 * P);
	CHECK_EQ(m.bytes, 44 * P);
	CHECK_EQ(lazy_map_pending_bytes(&m), 44 * P);

	/* Faults: in a piece, in the eager head, in the zero run. */
	CHECK_EQ(lazy_map_find(&m, 0x110000 + 5 * P + 7, NULL, NULL), 1);
	CHECK_EQ(lazy_map_find(&m, 0x100000, &lo, &hi), -1);
	CHECK_EQ(lo, 0);
	CHECK_EQ(hi, 0x104000);
	CHECK_EQ(lazy_map_find(&m, 0x800000 + P, &lo, &hi), -1);
	CHECK_EQ(lo, 0x12e000);
	CHECK_EQ(hi, 0x802000);

	/* Claims: once. */
	CHECK(lazy_map_claim(&m, 1));
	CHECK(!lazy_map_claim(&m, 1));
	lazy_map_done(&m, 1);
	CHECK_EQ(lazy_map_state(&m, 1), LAZY_DONE);
	CHECK_EQ(lazy_map_pending_bytes(&m), 28 * P);

	/* MADV_DONTNEED of the middle of block 0: two pieces left, both of block 0. */
	REQUIRE(lazy_map_drop(&m, 0x104000 + 2 * P, 3 * P) == 0);
	got = pieces_of(&m, 0);
	REQUIRE(got.n == 2);
	CHECK_EQ(got.p[0].addr, 0x104000);
	CHECK_EQ(got.p[0].len, 2 * P);
	CHECK_EQ(got.p[1].addr, 0x104000 + 5 * P);
	CHECK_EQ(got.p[1].img, 0x104000 + 5 * P);
	CHECK_EQ(got.p[1].len, 7 * P);
	CHECK_EQ(lazy_map_find(&m, 0x104000 + 3 * P, &lo, &hi), -1);
	CHECK_EQ(lo, 0x104000 + 2 * P);
	CHECK_EQ(hi, 0x104000 + 5 * P);

	/* mremap of [block 2 tail, block 3 head) far up, over a pending block 4
	 * page: the destination's pending page is gone, the moved pieces keep
	 * their image addresses. */
	REQUIRE(lazy_map_remap(&m, 0x120000 + 4 * P, 0x802000 + P, 6 * P) == 0);
	CHECK(m.moved);
	got = pieces_of(&m, 2);
	REQUIRE(got.n == 2);
	CHECK_EQ(got.p[0].addr, 0x120000);
	CHECK_EQ(got.p[0].len, 4 * P);
	CHECK_EQ(got.p[1].addr, 0x802000 + P);
	CHECK_EQ(got.p[1].img, 0x120000 + 4 * P);
	CHECK_EQ(got.p[1].len, 4 * P);
	got = pieces_of(&m, 3);
	REQUIRE(got.n == 2);
	CHECK_EQ(got.p[0].addr, 0x128000 + 2 * P);
	CHECK_EQ(got.p[1].addr, 0x802000 + 5 * P);
	CHECK_EQ(got.p[1].img, 0x128000);
	CHECK_EQ(got.p[1].len, 2 * P);
	got = pieces_of(&m, 4);
	REQUIRE(got.n == 1);
	CHECK_EQ(got.p[0].addr, 0x802000);
	CHECK_EQ(got.p[0].len, P);
	i = lazy_map_find(&m, 0x802000 + 2 * P, NULL, NULL);
	REQUIRE(i >= 0);
	CHECK_EQ(m.pieces[i].block, 2);
	for (size_t k = 1; k < m.npieces; k++)
		CHECK(m.pieces[k - 1].addr + m.pieces[k - 1].len <= m.pieces[k].addr);

	/* munmap across two pieces of different blocks. */
	REQUIRE(lazy_map_drop(&m, 0x802000, 3 * P) == 0);
	CHECK_EQ(pieces_of(&m, 4).n, 0);
	got = pieces_of(&m, 2);
	REQUIRE(got.n == 2);
	CHECK_EQ(got.p[1].addr, 0x802000 + 3 * P);
	CHECK_EQ(got.p[1].img, 0x120000 + 6 * P);

	/* fork: done blocks stay done, a claimed one is the child's to do. */
	CHECK(lazy_map_claim(&m, 0));
	REQUIRE(lazy_map_clone(&c, &m) == 0);
	CHECK_EQ(lazy_map_state(&c, 0), LAZY_TODO);
	CHECK_EQ(lazy_map_state(&c, 1), LAZY_DONE);
	CHECK_EQ(pieces_of(&c, 0).n, 2);
	CHECK_EQ(pieces_of(&c, 1).n, 0);
	CHECK_EQ(lazy_map_pending_bytes(&c), lazy_map_pending_bytes(&m));
	lazy_map_release(&c);

	/* Holes: only between blocks of one VMA (elided zero pages); the
	 * entries above abut or change VMA, so they have none. */
	for (size_t b = 0; b < m.nblocks; b++)
		CHECK_EQ(m.blocks[b].hole_after, 0);
	CHECK_EQ(m.hole_bytes, 0);
	{
		struct criu_img_vma hv[2] = { { .start = 0x200000, .end = 0x200000 + 32 * P },
					      { .start = 0x200000 + 32 * P,
						.end = 0x200000 + 40 * P } };
		struct criu_img_mm hmm = { .vmas = hv, .nvmas = 2 };
		struct criu_img_pagemap_entry he[3] = {
			pme(0x200000, 2, CRIU_PE_PRESENT | CRIU_PE_LAZY),
			pme(0x200000 + 10 * P, 3, CRIU_PE_PRESENT | CRIU_PE_LAZY),
			pme(0x200000 + 36 * P, 1, CRIU_PE_PRESENT | CRIU_PE_LAZY),
		};
		struct criu_img_pagemap hpm = { .pages_id = 1, .e = he, .n = 3 };
		struct lazy_map h;

		REQUIRE(lazy_map_build(&h, &hpm, &hmm, BLK) == 0);
		REQUIRE(h.nblocks == 3);
		CHECK_EQ(h.blocks[0].hole_after, 8 * P);
		CHECK_EQ(h.blocks[1].hole_after, 0); /* the next block is in another VMA */
		CHECK_EQ(h.blocks[2].hole_after, 0);
		CHECK_EQ(h.hole_bytes, 8 * P);
		REQUIRE(lazy_map_clone(&c, &h) == 0);
		CHECK_EQ(c.blocks[0].hole_after, 8 * P);
		CHECK_EQ(c.hole_bytes, 8 * P);
		/* Taking holes: not over the cap, not beyond the budget (the
		 * data's 6 pages here, so this 8-page hole never), none after
		 * a remap; the clone has its own budget. */
		CHECK_EQ(lazy_map_take_hole(&h, 0, 4 * P), 0);
		CHECK_EQ(lazy_map_take_hole(&h, 0, 64 * P), 0);
		CHECK_EQ(lazy_map_take_hole(&h, 1, 64 * P), 0);
		atomic_store(&h.hole_budget, 20 * P);
		CHECK_EQ(lazy_map_take_hole(&h, 0, 64 * P), 8 * P);
		CHECK_EQ(lazy_map_take_hole(&h, 0, 64 * P), 8 * P);
		CHECK_EQ(lazy_map_take_hole(&h, 0, 64 * P), 0); /* 4 pages left */
		CHECK_EQ(atomic_load(&h.hole_budget), 4 * P);
		CHECK_EQ(atomic_load(&c.hole_budget), 6 * P);
		atomic_store(&c.hole_budget, 20 * P);
		REQUIRE(lazy_map_remap(&c, 0x200000, 0x280000, 2 * P) == 0);
		CHECK_EQ(lazy_map_take_hole(&c, 0, 64 * P), 0);
		lazy_map_release(&c);
		lazy_map_release(&h);
	}

	/* A lazy entry outside every VMA is refused. */
	e[3].vaddr = 0x900000;
	lazy_map_release(&m);
	CHECK(lazy_map_build(&m, &pm, &mm, BLK) == -EINVAL);
	CHECK(lazy_map_build(&m, &pm, &mm, 3 * P) == -EINVAL);
	return check_failures ? 1 : 0;
}
