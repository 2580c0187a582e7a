/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_pages.h — thaw's lazy-pages daemon: the other side of
 * `criu restore --lazy-pages` (CRIU 4.2's protocol), a drop-in for
 * `criu lazy-pages`.
 *
 * It listens on lazy-pages.socket in its work directory.  The restore
 * connects once and, for each task of pstree.img, sends its pid (an int)
 * and, for a live task (pid > 0), that task's userfaultfd (SCM_RIGHTS with
 * one byte of payload); a zombie comes as -pid with no fd.  After the
 * restore it sends LAZY_PAGES_RESTORE_FINISHED (a u32) and closes.
 *
 * One event thread reads every uffd (faults first: it copies the block
 * around a faulting address itself; REMAP/REMOVE/UNMAP/FORK events change
 * what is pending, see lazy_map.h) and N copy threads fill the rest in
 * large UFFDIO_COPYs straight from pages-N.img, mapped read-only.  The
 * copy threads of every daemon on the machine share copy_slots: a burst of
 * lazy starts does not put 8 copy threads per instance on the cores that
 * the instances' own restores (and their faults) need.
 */
#ifndef THAW_RESTORE_LAZY_PAGES_H
#define THAW_RESTORE_LAZY_PAGES_H

#include <stdint.h>

#define LAZY_PAGES_SOCK_NAME	    "lazy-pages.socket"
#define LAZY_PAGES_RESTORE_FINISHED 0x52535446u /* "ReSTore Finished" (criu/uffd.c) */
#define LAZY_PAGES_DEFAULT_BLOCK    (2u << 20)
#define LAZY_PAGES_MAX_THREADS	    64
#define LAZY_PAGES_DEFAULT_ZERO_HOLE (1ull << 30)

struct lazy_pages_opts {
	const char *images_dir; /* the checkpoint's image files */
	const char *work_dir;	/* where lazy-pages.socket is made (we chdir there) */
	int status_fd;		/* gets one '\0' once the socket listens, then is closed; -1 */
	unsigned threads;	/* copy threads; 0: min(8, CPUs) */
	int copy_slots;		/* copy threads of all the daemons on this machine that may
				 * copy at once (a SysV semaphore, see lazy_pages.c);
				 * 0: CPUs / 2; -1: no limit */
	uint64_t block_bytes;	/* copy unit; 0: LAZY_PAGES_DEFAULT_BLOCK (a power of two) */
	uint64_t zero_hole_bytes; /* the largest hole between two blocks of one VMA that
				   * the copy threads map to the zero page after the block
				   * before it (0: none; see zero_hole) */
	unsigned prefetch_delay_ms; /* hold the copy threads back this long after the restore
				     * finished (tests: a process's mm changes then meet
				     * pages not copied yet; the daemon outlives a start) */
};

/* Serve one lazy restore until every page of every process is copied (or
 * its process or range is gone) and the restore said it finished: 0.
 * -errno on a protocol error, a copy error it cannot explain, or the
 * restore closing the socket before it finished (each logged). */
int lazy_pages_run(const struct lazy_pages_opts *o);

#endif
