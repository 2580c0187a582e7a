/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_criu_image.c — the CRIU image decoders on arbitrary bytes.
 *
 * Every decoder (inventory, pstree, mm, pagemap) gets the input; whatever it
 * is, none may crash, leak or read past len.  An accepted pagemap must encode
 * (unless it has fields the codec does not know), decode back to the same
 * entries, and encode again to the same bytes; its entries must be what the
 * decoder promises (page-aligned, not empty, not wrapping).  The pagemap
 * rewriter (criu_pagemap.h) then keeps each entry whole, and the upper half
 * of each: its new pagemap must be what was kept, in order, at the offsets
 * the old pages file had them, and encode as the decoded one did.
 *
 * The decoders log every refusal with pr_err; stderr is closed for the target
 * (libFuzzer's -close_fd_mask=2) unless THAW_LOG is set (fuzz_common.h).
 */
#include "criu/criu_image.h"
#include "criu/criu_pagemap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1u << 20)

#define FUZZ_NAME "fuzz_criu_image"
#include "test/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_quiet_stderr(argc, argv);
}

static void check_pagemap(const struct criu_img_pagemap *pm)
{
	struct criu_img_pagemap pm2;
	uint8_t *b1 = NULL, *b2 = NULL;
	size_t l1, l2;
	uint64_t bytes;
	int ret;

	for (size_t i = 0; i < pm->n; i++) {
		uint64_t n = criu_img_pme_pages(&pm->e[i]);

		FUZZ_ASSERT(pm->e[i].vaddr % CRIU_PAGE_SIZE == 0);
		FUZZ_ASSERT(n > 0 && n <= UINT64_MAX / CRIU_PAGE_SIZE);
		FUZZ_ASSERT(pm->e[i].vaddr + n * CRIU_PAGE_SIZE > pm->e[i].vaddr);
	}
	ret = criu_img_pagemap_data_bytes(pm, &bytes);
	FUZZ_ASSERT(ret == 0 || ret == -EOVERFLOW);
	ret = criu_img_encode_pagemap(pm, &b1, &l1);
	if (ret) {
		FUZZ_ASSERT(ret == -ENOTSUP || ret == -ENOMEM);
		return;
	}
	FUZZ_ASSERT(criu_img_decode_pagemap(b1, l1, "re-encoded", &pm2) == 0);
	FUZZ_ASSERT(pm2.pages_id == pm->pages_id && pm2.n == pm->n);
	for (size_t i = 0; i < pm->n; i++) {
		const struct criu_img_pagemap_entry *a = &pm->e[i], *b = &pm2.e[i];

		FUZZ_ASSERT(a->vaddr == b->vaddr && a->compat_nr_pages == b->compat_nr_pages);
		FUZZ_ASSERT(a->has_in_parent == b->has_in_parent && a->in_parent == b->in_parent);
		FUZZ_ASSERT(a->has_flags == b->has_flags && a->flags == b->flags);
		FUZZ_ASSERT(a->has_nr_pages == b->has_nr_pages && a->nr_pages == b->nr_pages);
		FUZZ_ASSERT(!b->has_unknown);
	}
	FUZZ_ASSERT(criu_img_encode_pagemap(&pm2, &b2, &l2) == 0);
	FUZZ_ASSERT(l1 == l2 && !memcmp(b1, b2, l1));
	/* One byte short cuts the last message (or the head): never accepted as is. */
	if (pm->n) {
		struct criu_img_pagemap pm3;

		if (criu_img_decode_pagemap(b1, l1 - 1, "cut", &pm3) == 0) {
			FUZZ_ASSERT(0);
			criu_img_pagemap_release(&pm3);
		}
	}
	criu_img_pagemap_release(&pm2);
	free(b2);
	free(b1);
}

/* The rewriter's callback: keep e whole (arg NULL) or its upper half. */
static int keep_some(struct criu_pagemap_rewrite *rw, const struct criu_img_pagemap_entry *e,
		     uint64_t ioff, void *arg)
{
	uint64_t pages = criu_img_pme_pages(e), skip = arg ? pages / 2 : 0;

	(void)ioff;
	return criu_pagemap_keep(rw, e->vaddr + skip * CRIU_PAGE_SIZE, pages - skip, NULL);
}

static void check_rewrite(const struct criu_img_pagemap *pm, bool half)
{
	struct criu_pagemap_rewrite rw;
	uint64_t ioff = 0, kept = 0;
	uint8_t *b = NULL;
	size_t l;
	int ret = criu_pagemap_rewrite(pm, keep_some, half ? (void *)1 : NULL, &rw);

	/* A count that must go in compat_nr_pages and does not fit: refused. */
	FUZZ_ASSERT(ret == 0 || ret == -EOVERFLOW || ret == -ENOMEM);
	if (ret) {
		criu_pagemap_rewrite_release(&rw);
		return;
	}
	FUZZ_ASSERT(rw.to.n == pm->n && rw.to.pages_id == pm->pages_id);
	for (size_t i = 0; i < pm->n; i++) {
		const struct criu_img_pagemap_entry *a = &pm->e[i], *k = &rw.to.e[i];
		uint64_t pages = criu_img_pme_pages(a), skip = half ? pages / 2 : 0;
		bool in_file = criu_img_pme_in_pages_file(a);

		FUZZ_ASSERT(k->vaddr == a->vaddr + skip * CRIU_PAGE_SIZE);
		FUZZ_ASSERT(criu_img_pme_pages(k) == pages - skip);
		FUZZ_ASSERT(criu_img_pme_flags(k) == criu_img_pme_flags(a));
		FUZZ_ASSERT(!in_file || rw.src[i] == ioff + skip * CRIU_PAGE_SIZE);
		if (in_file) {
			ioff += pages * CRIU_PAGE_SIZE;
			kept += (pages - skip) * CRIU_PAGE_SIZE;
		}
	}
	FUZZ_ASSERT(rw.kept_bytes == kept);
	ret = criu_img_encode_pagemap(&rw.to, &b, &l);
	FUZZ_ASSERT(ret == 0 || ret == -ENOTSUP || ret == -ENOMEM);
	free(b);
	criu_pagemap_rewrite_release(&rw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct criu_img_inventory inv;
	struct criu_img_pstree tree;
	struct criu_img_mm mm;
	struct criu_img_pagemap pm;
	int ret;

	if (size > FUZZ_MAX_INPUT)
		return 0;
	ret = criu_img_decode_inventory(data, size, "fuzz", &inv);
	FUZZ_ASSERT(ret == 0 || ret == -EINVAL);
	ret = criu_img_decode_pstree(data, size, "fuzz", &tree);
	FUZZ_ASSERT(ret == 0 || ret == -EINVAL || ret == -ENOMEM);
	if (!ret) {
		FUZZ_ASSERT(tree.n > 0);
		criu_img_pstree_release(&tree);
	}
	ret = criu_img_decode_mm(data, size, "fuzz", &mm);
	FUZZ_ASSERT(ret == 0 || ret == -EINVAL || ret == -ENOMEM);
	if (!ret) {
		for (size_t i = 0; i < mm.nvmas; i++)
			FUZZ_ASSERT(mm.vmas[i].start < mm.vmas[i].end &&
				    mm.vmas[i].end % CRIU_PAGE_SIZE == 0);
		criu_img_mm_release(&mm);
	}
	ret = criu_img_decode_pagemap(data, size, "fuzz", &pm);
	FUZZ_ASSERT(ret == 0 || ret == -EINVAL || ret == -ENOMEM);
	if (!ret) {
		check_pagemap(&pm);
		check_rewrite(&pm, false);
		check_rewrite(&pm, true);
		criu_img_pagemap_release(&pm);
	}
	return 0;
}
