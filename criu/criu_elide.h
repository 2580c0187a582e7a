/* SPDX-License-Identifier: Apache-2.0 */
/* criu_elide.h — drop all-zero pages from a CRIU image before it is stored.
 *
 * A page that a process wrote zeros to is dumped by CRIU like any other
 * (docs/DESIGN.md: a large share of a GPU image).  Where restore is certain to
 * read zero for a page missing from the pagemap — a private anonymous mapping
 * that CRIU maps afresh — the page need not be stored nor read back at all.
 */
#ifndef THAW_CRIU_CRIU_ELIDE_H
#define THAW_CRIU_CRIU_ELIDE_H

#include <stdint.h>

struct criu_elide_stats {
	uint64_t bytes_before;	      /* pages files' bytes of the processes, before */
	uint64_t bytes_after;	      /* and after */
	uint64_t pages_elided;	      /* zero pages dropped */
	uint32_t processes;	      /* processes with memory in the image */
	uint32_t processes_rewritten; /* of them, those whose pagemap was rewritten */
	/* Zero pages kept, by why they were kept: */
	uint64_t kept_file_private; /* file-backed private mapping: restore maps the file */
	uint64_t kept_shared;	    /* shared, SysV IPC or memfd memory */
	uint64_t kept_special;	    /* vdso, vvar, vsyscall, AIO ring, stack guard, unknown bits */
	uint64_t kept_inherited;    /* an ancestor has a private mapping there (see criu_elide.c) */
	uint64_t kept_no_vma;	    /* no VMA of the process covers the page */
	uint64_t kept_too_few;	    /* elidable, but too few in the process to rewrite it */
};

/* For every process of the image in image_dir (pstree.img), drop the all-zero
 * pages of its private anonymous mappings from pagemap-<pid>.img and its pages
 * file (if at least 256 of them, 1 MiB, go: see criu_elide.c); everything else
 * is left byte-identical.  A rewritten process's pages
 * go to a new pages-<id>.img and its pagemap is replaced by rename, so that a
 * failure or a crash at any point leaves an image CRIU can restore (the
 * original, or the elided one).  st (may be NULL) is filled in.
 * Returns 0 or -errno (logged). */
int criu_elide_zero_pages(const char *image_dir, struct criu_elide_stats *st);

#endif
