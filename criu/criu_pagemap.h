/* SPDX-License-Identifier: Apache-2.0 */
/* criu_pagemap.h — a process's pagemap rewritten: some of its pages kept, the rest dropped.
 *
 * Two rewrites take pages out of a CRIU image: zero elision (criu_elide.h, at
 * snapshot) and the mapped image (criu_mapped.h, whose pages move to memory
 * files).  Both walk the pagemap's entries, keep parts of them and re-emit
 * those parts as the new pagemap, whose pages file then holds the kept pages
 * in order.  They do it here, one way: an entry is split with
 * criu_img_pme_part (the page count where CRIU put it, nr_pages and a non-zero
 * compat_nr_pages alike; -EOVERFLOW where it does not fit), the parts kept of
 * an entry must be in it and ascending, and where each part's pages lie in
 * the old pages file and go in the new one is counted once.
 *
 *	struct criu_pagemap_rewrite rw;
 *	ret = criu_pagemap_rewrite(&old, keep_what, arg, &rw);
 *	... rw.to is the new pagemap, rw.src[i] where its entry i's pages were ...
 *	criu_pagemap_rewrite_release(&rw);
 */
#ifndef THAW_CRIU_CRIU_PAGEMAP_H
#define THAW_CRIU_CRIU_PAGEMAP_H

#include "criu/criu_image.h"

#include <stddef.h>
#include <stdint.h>

struct criu_pagemap_rewrite {
	struct criu_img_pagemap to; /* the new pagemap; pages_id the old one's */
	uint64_t *src;		    /* per entry of to in the pages file: the offset of
				     * its pages in the old pages file (0 for others) */
	uint64_t kept_bytes;	    /* bytes of the new pages file */
	/* The walk's own: */
	size_t cap, src_cap;
	const struct criu_img_pagemap_entry *cur; /* the entry being walked ... */
	uint64_t cur_ioff;			  /* ... its pages' offset in the old file ... */
	uint64_t next_va;			  /* ... and where a part of it may start */
};

/* Called for each entry e of the old pagemap, in order: it keeps the parts of
 * e it wants with criu_pagemap_keep (none: e is dropped).  ioff: where e's
 * pages begin in the old pages file, when they are in it
 * (criu_img_pme_in_pages_file).  0 or -errno, which ends the walk. */
typedef int (*criu_pagemap_entry_fn)(struct criu_pagemap_rewrite *rw,
				     const struct criu_img_pagemap_entry *e, uint64_t ioff,
				     void *arg);

/* Walk from's entries through fn and fill *rw (zeroed here) with what fn
 * kept.  0, or fn's -errno, -EINVAL (logged) for a part outside its entry
 * or before one kept already, -EOVERFLOW (logged) for a part whose count does
 * not fit where its entry keeps it, -ENOMEM.  Release *rw whatever it returns. */
int criu_pagemap_rewrite(const struct criu_img_pagemap *from, criu_pagemap_entry_fn fn, void *arg,
			 struct criu_pagemap_rewrite *rw);

/* From an entry_fn: keep pages pages of the current entry from vaddr as an
 * entry of the new pagemap.  *ooff (may be NULL): where they go in the new
 * pages file, when they are in one.  0 or -errno as criu_pagemap_rewrite. */
int criu_pagemap_keep(struct criu_pagemap_rewrite *rw, uint64_t vaddr, uint64_t pages,
		      uint64_t *ooff);

void criu_pagemap_rewrite_release(struct criu_pagemap_rewrite *rw);

#endif
