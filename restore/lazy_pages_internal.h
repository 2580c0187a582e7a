/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_pages_internal.h — thaw's lazy-pages daemon (lazy_pages.h) as its
 * parts share it:
 *
 *   lazy_pages.c   the daemon's run: settings, setup, threads, summary
 *   lazy_procs.c   the restored processes: their uffds received over the
 *                  restore's socket, their page maps loaded
 *   lazy_copy.c    filling pages (UFFDIO_COPY/ZEROPAGE), the machine-wide
 *                  copy slots, and the copy threads that prefetch blocks
 *   lazy_events.c  the event thread: faults served first, and the mm
 *                  events (fork, remove, remap, unmap) applied
 *
 * Locking.  Each process has a rwlock.  Copy threads hold it shared while
 * they look up a block's pieces and UFFDIO_COPY them; the event thread holds
 * it exclusive from before it read()s that process's uffd until it has
 * applied what it read.  This matters because the kernel lets copies through
 * again (mmap_changing drops) as soon as an event is read: a copy with the
 * old view between that read and its bookkeeping could, after a REMOVE, put
 * old data back where the process must now read zeros, or fill a range
 * being handed to a forked child.  A copy that meets an event not read yet
 * gets -EAGAIN and retries once the lock is free again.
 */
#ifndef THAW_LAZY_PAGES_INTERNAL_H
#define THAW_LAZY_PAGES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "criu/criu_image.h"
#include "restore/lazy_map.h"
#include "restore/lazy_pages.h"

#define PAGE		CRIU_PAGE_SIZE
#define EV_SOCK		0
#define EV_WAKE		1
#define EV_PROC0	2
#define MSGS_PER_READ	16
#define NO_STREAM	SIZE_MAX

/* A fault the event thread could not serve yet (an mm change in flight). */
struct lp_fault {
	uint64_t addr;
	long block;	  /* claimed by the event thread, or -1 */
	uint64_t read_ns; /* when the event thread read it */
};

struct lp_proc {
	int pid;    /* pstree pid (a forked child: its parent's) */
	int uffd;
	size_t idx; /* in d->procs: its epoll tag is EV_PROC0 + idx */
	struct lazy_map map;
	const uint8_t *src; /* pages-N.img, mapped (owned by d->srcs) */
	pthread_rwlock_t lock;
	atomic_size_t cursor;	 /* the next block a copy thread tries */
	atomic_size_t stream;	 /* the next block after the last fault's, or NO_STREAM */
	atomic_size_t remaining; /* blocks not done */
	atomic_bool gone;	 /* exited: nothing more to copy */
	struct lp_fault *faults; /* event thread only */
	size_t nfaults, fcap;
};

struct lp_src {
	void *addr;
	size_t len;
};

struct lp_daemon {
	const struct lazy_pages_opts *o;
	uint64_t block;
	unsigned nthreads;
	int copy_sem; /* the machine's copy slots (SysV semaphore id), or -1 */
	int images_fd, listen_fd, client, epfd, wake_fd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct lp_proc **procs; /* grows under mu; entries never move */
	size_t nprocs, pcap;
	struct lp_src *srcs;
	size_t nsrcs;
	unsigned gen;	     /* bumped under mu when there is new work */
	atomic_bool finished; /* LAZY_PAGES_RESTORE_FINISHED came */
	atomic_bool stop;
	atomic_int error; /* the first fatal -errno */
	atomic_uint_fast64_t fault_bytes, prefetch_bytes, zero_bytes, hole_bytes, nfaults, lost_pages;
	/* event thread only: how long faults waited from being read until the
	 * copy (or zeros) holding their page returned, and how many met a block
	 * a copy thread was copying (their wait is not known here) */
	uint64_t fault_wait_ns, fault_wait_max_ns, faults_on_copies;
	atomic_uint_fast64_t streamed_blocks; /* prefetched because a fault came before them */
	uint64_t finished_ns;
	/* event thread only: mm events seen, pending bytes they dropped */
	uint64_t nremap, nremove, nunmap, nfork, dropped_bytes;
};

/* lazy_pages.c */

/* Record the first fatal error and make every thread stop. */
void lp_set_error(struct lp_daemon *d, int err);
/* Wake the event thread from its epoll_wait (a process done or gone). */
void lp_wake_event_thread(struct lp_daemon *d);

/* lazy_procs.c */

/* A process of the restore, with its uffd; NULL without memory. */
struct lp_proc *lp_proc_new(int pid, int uffd);
void lp_proc_free(struct lp_proc *p);
/* p added to d's processes and to the event thread's epoll set; the copy
 * threads woken.  0 or -errno. */
int lp_proc_add(struct lp_daemon *d, struct lp_proc *p);
/* p's blocks not done yet counted into its remaining. */
void lp_proc_count(struct lp_proc *p);
/* The socket the restore connects to, in the work directory.  0 or -errno. */
int lp_listen_socket(struct lp_daemon *d);
/* Accept the restore and take one uffd per live task, as criu lazy-pages
 * does (the restore sends them all before it lets any task run). */
int lp_receive_tasks(struct lp_daemon *d);
/* The socket after the tasks: FINISHED, then the restore's close. */
int lp_handle_socket(struct lp_daemon *d);

/* lazy_copy.c */

/* UFFDIO_COPY (src) or UFFDIO_ZEROPAGE (src NULL) of [dst, dst+len) into p;
 * *filled gets the bytes filled.  0, -EAGAIN (an mm change is in flight),
 * -ESRCH (the process is gone) or -errno (logged). */
int lp_fill(struct lp_daemon *d, struct lp_proc *p, uint64_t dst, const uint8_t *src,
	    uint64_t len, uint64_t *filled);
/* Copy what is left of block b (claimed by the caller), the piece holding
 * first (if any) before the rest.  0, -EAGAIN, -ESRCH or -errno. */
int lp_copy_block(struct lp_daemon *d, struct lp_proc *p, uint32_t b, uint64_t first,
		  uint64_t *bytes, uint64_t *first_done_ns);
/* Block b of p is done; the event thread is woken when p has none left. */
void lp_block_done(struct lp_daemon *d, struct lp_proc *p, uint32_t b);
/* p exited: nothing more to copy into it (said once). */
void lp_proc_gone(struct lp_daemon *d, struct lp_proc *p);
/* The machine's copy slots for this slot count (a SysV semaphore id), or
 * -1: copy without a machine-wide limit. */
int lp_copy_slots_open(int slots);
/* A copy thread (pthread_create's fn, arg the daemon): prefetches blocks
 * once the restore has finished, until all are done or the daemon stops. */
void *lp_copy_thread(void *arg);

/* lazy_events.c */

/* The event thread's loop: the restore's socket, the processes' faults and
 * mm events, until every process is done or gone.  0 or -errno. */
int lp_event_loop(struct lp_daemon *d);

#endif
