/* SPDX-License-Identifier: Apache-2.0 */
/* criu_pagemap.c — a pagemap rewritten; see criu_pagemap.h. */
#define LOG_PREFIX "criu_pagemap: "
#include "criu/criu_pagemap.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int criu_pagemap_keep(struct criu_pagemap_rewrite *rw, uint64_t vaddr, uint64_t pages,
		      uint64_t *ooff)
{
	const struct criu_img_pagemap_entry *e = rw->cur;
	uint64_t end = e->vaddr + criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
	struct criu_img_pagemap_entry part;
	bool in_file = criu_img_pme_in_pages_file(e);
	uint64_t bytes = pages * CRIU_PAGE_SIZE;
	int ret;

	/* The new pages file holds the kept pages in the old one's order. */
	if (!pages || vaddr % CRIU_PAGE_SIZE || vaddr < rw->next_va || vaddr > end ||
	    pages > (end - vaddr) / CRIU_PAGE_SIZE) {
		pr_err("pagemap entry %llx: a part %llx + %llu pages is outside it or out of order",
		       (unsigned long long)e->vaddr, (unsigned long long)vaddr,
		       (unsigned long long)pages);
		return -EINVAL;
	}
	ret = criu_img_pme_part(e, vaddr, pages, &part);
	if (ret) {
		pr_err("pagemap entry %llx: %llu pages do not fit its 32-bit count",
		       (unsigned long long)e->vaddr, (unsigned long long)pages);
		return ret;
	}
	{
		size_t cap = rw->cap; /* to.e and src grow together */

		if (ARRAY_GROW(rw->to.e, cap, rw->to.n + 1, 64) ||
		    ARRAY_GROW(rw->src, rw->src_cap, rw->to.n + 1, 64))
			return -ENOMEM;
		rw->cap = cap;
	}
	rw->to.e[rw->to.n] = part;
	rw->src[rw->to.n] = in_file ? rw->cur_ioff + (vaddr - e->vaddr) : 0;
	rw->to.n++;
	rw->next_va = vaddr + bytes;
	if (ooff)
		*ooff = rw->kept_bytes;
	if (in_file)
		rw->kept_bytes += bytes;
	return 0;
}

int criu_pagemap_rewrite(const struct criu_img_pagemap *from, criu_pagemap_entry_fn fn, void *arg,
			 struct criu_pagemap_rewrite *rw)
{
	uint64_t ioff = 0;

	memset(rw, 0, sizeof(*rw));
	rw->to.pages_id = from->pages_id;
	for (size_t i = 0; i < from->n; i++) {
		const struct criu_img_pagemap_entry *e = &from->e[i];
		int ret;

		rw->cur = e;
		rw->cur_ioff = ioff;
		rw->next_va = e->vaddr;
		ret = fn(rw, e, ioff, arg);
		if (ret)
			return ret;
		if (criu_img_pme_in_pages_file(e) &&
		    __builtin_add_overflow(ioff, criu_img_pme_pages(e) * CRIU_PAGE_SIZE, &ioff)) {
			pr_err("pagemap entry %llx: its pages file would pass 2^64 bytes",
			       (unsigned long long)e->vaddr);
			return -EOVERFLOW;
		}
	}
	rw->cur = NULL;
	return 0;
}

void criu_pagemap_rewrite_release(struct criu_pagemap_rewrite *rw)
{
	criu_img_pagemap_release(&rw->to);
	free(rw->src);
	memset(rw, 0, sizeof(*rw));
}
