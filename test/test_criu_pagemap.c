/* SPDX-License-Identifier: Apache-2.0 */
/* test_criu_pagemap: the one pagemap rewriter (criu/criu_pagemap.h) that
 * zero elision and the mapped image share.  Parts kept of an entry become
 * entries with its other fields, their count where the entry kept it
 * (nr_pages, a non-zero compat_nr_pages, or compat_nr_pages alone); each
 * kept part's offset in the old pages file and in the new one are counted
 * over the entries in the pages file only; a part outside its entry or
 * before one already kept, and a count that does not fit 32 bits where it
 * must, are refused; a callback's error ends the walk. */
#include "criu/criu_pagemap.h"
#include "test/check.h"

#include <errno.h>

#define P CRIU_PAGE_SIZE

/* What each case's callback keeps of entry i: parts (page offset, pages). */
struct want {
	struct {
		uint64_t at, pages;
	} part[4];
	size_t n;
};

struct run {
	const struct want *w; /* per entry */
	uint64_t ooff[8];     /* the new pages file offsets criu_pagemap_keep gave */
	size_t nooff;
	size_t entry;
	int fail_at; /* entry at which the callback fails with -EIO; -1 never */
};

static int keep(struct criu_pagemap_rewrite *rw, const struct criu_img_pagemap_entry *e,
		uint64_t ioff, void *arg)
{
	struct run *r = arg;
	const struct want *w = &r->w[r->entry];

	if ((int)r->entry++ == r->fail_at)
		return -EIO;
	for (size_t k = 0; k < w->n; k++) {
		int ret = criu_pagemap_keep(rw, e->vaddr + w->part[k].at * P, w->part[k].pages,
					    &r->ooff[r->nooff++]);

		if (ret)
			return ret;
	}
	return 0;
}

static void splits(void)
{
	struct criu_img_pagemap_entry e[] = {
	    /* 4 pages in the file, nr_pages only */
	    {.vaddr = 0x10000, .has_nr_pages = true, .nr_pages = 4},
	    /* 2 in the parent image */
	    {.vaddr = 0x20000, .compat_nr_pages = 2, .has_in_parent = true, .in_parent = true},
	    /* 3 in the file, compat_nr_pages only (an older CRIU) */
	    {.vaddr = 0x30000, .compat_nr_pages = 3},
	    /* 5 in the file, both counts (kept both ways) */
	    {.vaddr = 0x40000, .compat_nr_pages = 5, .has_nr_pages = true, .nr_pages = 5},
	};
	struct criu_img_pagemap pm = {.pages_id = 9, .e = e, .n = 4};
	const struct want w[] = {
	    {{{1, 2}}, 1},	   /* the middle of the first */
	    {{{0, 2}}, 1},	   /* the parent's, whole */
	    {{{0, 1}, {2, 1}}, 2}, /* both ends of the third */
	    {{{0, 0}}, 0},	   /* none of the last */
	};
	struct run r = {.w = w, .fail_at = -1};
	struct criu_pagemap_rewrite rw;

	CASE("splits");
	CHECK_EQ(criu_pagemap_rewrite(&pm, keep, &r, &rw), 0);
	CHECK_EQ(rw.to.pages_id, 9);
	REQUIRE(rw.to.n == 4);
	CHECK_EQ(rw.to.e[0].vaddr, 0x11000);
	CHECK_EQ(rw.to.e[0].nr_pages, 2);
	CHECK_EQ(rw.to.e[0].compat_nr_pages, 0);
	CHECK_EQ(rw.src[0], 1 * P);
	CHECK_EQ(r.ooff[0], 0);
	CHECK(rw.to.e[1].in_parent && rw.to.e[1].compat_nr_pages == 2);
	CHECK_EQ(rw.src[1], 0);
	CHECK_EQ(rw.to.e[2].vaddr, 0x30000);
	CHECK_EQ(rw.to.e[2].compat_nr_pages, 1);
	CHECK(!rw.to.e[2].has_nr_pages);
	CHECK_EQ(rw.src[2], 4 * P); /* after the first's 4: the parent's are not in the file */
	CHECK_EQ(r.ooff[2], 2 * P);
	CHECK_EQ(rw.to.e[3].vaddr, 0x32000);
	CHECK_EQ(rw.src[3], 6 * P);
	CHECK_EQ(r.ooff[3], 3 * P);
	CHECK_EQ(rw.kept_bytes, 4 * P);
	criu_pagemap_rewrite_release(&rw);

	/* The last entry kept in part: both its counts say so. */
	const struct want w2[] = {{{{0, 0}}, 0}, {{{0, 0}}, 0}, {{{0, 0}}, 0}, {{{1, 3}}, 1}};

	CASE("both counts");
	r = (struct run){.w = w2, .fail_at = -1};
	CHECK_EQ(criu_pagemap_rewrite(&pm, keep, &r, &rw), 0);
	REQUIRE(rw.to.n == 1);
	CHECK_EQ(rw.to.e[0].nr_pages, 3);
	CHECK_EQ(rw.to.e[0].compat_nr_pages, 3);
	CHECK_EQ(rw.src[0], 8 * P);
	CHECK_EQ(rw.kept_bytes, 3 * P);
	criu_pagemap_rewrite_release(&rw);

	CASE("a callback's error");
	r = (struct run){.w = w, .fail_at = 2};
	CHECK_EQ(criu_pagemap_rewrite(&pm, keep, &r, &rw), -EIO);
	criu_pagemap_rewrite_release(&rw);
	CASE_END();
}

static void refused(void)
{
	struct criu_img_pagemap_entry e[] = {
	    {.vaddr = 0x10000, .has_nr_pages = true, .nr_pages = 4},
	};
	struct criu_img_pagemap pm = {.e = e, .n = 1};
	const struct want bad[][1] = {
	    {{{{3, 2}}, 1}},	     /* past the entry's end */
	    {{{{2, 1}, {1, 1}}, 2}}, /* out of order */
	    {{{{1, 1}, {1, 1}}, 2}}, /* twice */
	    {{{{0, 0}}, 1}},	     /* empty */
	};
	struct criu_pagemap_rewrite rw;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct run r = {.w = bad[i], .fail_at = -1};

		CASE("refused %zu", i);
		CHECK_EQ(criu_pagemap_rewrite(&pm, keep, &r, &rw), -EINVAL);
		criu_pagemap_rewrite_release(&rw);
	}

	/* A count past 32 bits where compat_nr_pages must hold it. */
	struct criu_img_pagemap_entry big = {.vaddr = 0x10000,
					     .compat_nr_pages = 1,
					     .has_nr_pages = true,
					     .nr_pages = (1ull << 32) + 2};
	struct criu_img_pagemap pbig = {.e = &big, .n = 1};
	const struct want whole = {{{0, (1ull << 32) + 2}}, 1};
	struct run r = {.w = &whole, .fail_at = -1};

	CASE("overflow");
	CHECK_EQ(criu_pagemap_rewrite(&pbig, keep, &r, &rw), -EOVERFLOW);
	criu_pagemap_rewrite_release(&rw);
	big.compat_nr_pages = 0; /* nr_pages only: it fits */
	r = (struct run){.w = &whole, .fail_at = -1};
	CASE("no overflow");
	CHECK_EQ(criu_pagemap_rewrite(&pbig, keep, &r, &rw), 0);
	CHECK_EQ(rw.kept_bytes, ((1ull << 32) + 2) * P);
	criu_pagemap_rewrite_release(&rw);
	CASE_END();
}

int main(void)
{
	splits();
	refused();
	return check_failures ? 1 : 0;
}
