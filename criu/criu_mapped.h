/* SPDX-License-Identifier: Apache-2.0 */
/* criu_mapped.h — the CRIU image's side of a mapped image (restore/mapped.h).
 *
 * A mapped image keeps the pages of large private anonymous VMAs in memory
 * files of their own, and its CRIU image says that those VMAs are private
 * mappings of the files.  What that asks of the image is here: which VMAs may
 * be mapped (criu_mapped_choose; criu_mapped.c says why those), and each
 * process's pagemap with those VMAs' pages taken out, the pages left in the
 * pages file and those leaving it told to the caller one run at a time
 * (criu_mapped_pagemap).  Where the pages go, the memory files, the copy and
 * the windows are the caller's (restore/mapped.c); the mm and files.img
 * rewrites are the codec's (criu_img_mm_remap, criu_img_files_append_reg).
 */
#ifndef THAW_CRIU_CRIU_MAPPED_H
#define THAW_CRIU_CRIU_MAPPED_H

#include "criu/criu_image.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A process of the image: its mm and pagemap, and per VMA what the choice
 * needs and made. */
struct criu_mapped_proc {
	uint32_t pid;
	struct criu_img_mm mm;
	struct criu_img_pagemap pm;
	bool has_mm;	/* false: no mm-<pid>.img (a zombie); nothing else is set */
	bool *map;	/* per VMA: mapped (criu_mapped_choose) */
	uint64_t *data; /* per VMA: bytes of its pages in the pages file */
	bool *bad;	/* per VMA: a page not in the pages file */
};

struct criu_mapped_image {
	struct criu_mapped_proc *procs; /* in pstree.img's order */
	size_t nprocs;
};

/* What criu_mapped_choose chose. */
struct criu_mapped_choice {
	uint64_t mapped_bytes; /* pages of the chosen VMAs */
	uint32_t vmas;	       /* VMAs chosen */
	uint32_t processes;    /* processes with at least one */
	uint32_t vmas_shared;  /* large VMAs left: another process maps the range too */
};

/* Read the image in image_dir: pstree.img, then each process's mm and pagemap
 * (none for a process without mm-<pid>.img), and count each VMA's pages.
 * 0 or -errno (logged by the codec); criu_mapped_release(im) either way. */
int criu_mapped_load(const char *image_dir, struct criu_mapped_image *im);
void criu_mapped_release(struct criu_mapped_image *im);

/* Mark the VMAs to map: private anonymous, all their pages in the pages file,
 * at least min_bytes of them, and no other process mapping the range
 * privately.  0 with *c filled in, or -ENODATA when there are none (why, of
 * whylen bytes, says why in words). */
int criu_mapped_choose(struct criu_mapped_image *im, uint64_t min_bytes,
		       struct criu_mapped_choice *c, char *why, size_t whylen);

/* Whether p has a VMA to map (its mm, pagemap and pages file are rewritten). */
bool criu_mapped_proc_any(const struct criu_mapped_proc *p);

/* Whether the mapped image rewrites image file name of im (files.img, and a
 * process with mapped VMAs' mm, pagemap and pages file), rather than keep it. */
bool criu_mapped_rewritten(const struct criu_mapped_image *im, const char *name);

/* A run of len bytes of a process's pages, at ioff in its old pages file:
 * vma >= 0, they go to VMA vma's memory file at off; vma < 0, they stay, at
 * off in the new pages file.  0 or -errno, which ends the rewrite. */
typedef int (*criu_mapped_run_fn)(void *arg, long vma, uint64_t ioff, uint64_t off, uint64_t len);

/* p's new pagemap, into *npm (you own it: criu_img_pagemap_release()):
 * p->pm without the pages of p's mapped VMAs, entries split at VMA ends.
 * base[k]: the address byte 0 of VMA k's memory file stands for.  Each run
 * of pages that is mapped, or kept in the pages file, goes to fn in pagemap
 * order; *kept_bytes: the new pages file's size.  0, fn's -errno, or -errno
 * as criu_pagemap_rewrite. */
int criu_mapped_pagemap(const struct criu_mapped_proc *p, const uint64_t *base,
			criu_mapped_run_fn fn, void *arg, struct criu_img_pagemap *npm,
			uint64_t *kept_bytes);

#endif
