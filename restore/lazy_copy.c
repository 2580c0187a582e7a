/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_copy.c — how the lazy-pages daemon puts pages into a process
 * (lazy_pages_internal.h): UFFDIO_COPY of a block's pieces from the mapped
 * page images, zero pages for the holes between blocks, and the copy
 * threads that prefetch every block once the restore has finished, in slots
 * shared by every daemon on the machine so that many starts at once do not
 * each take all the cores.
 */
#define LOG_PREFIX "lazy-pages: "
#include "restore/lazy_pages_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/sem.h>
#include <time.h>
#include <unistd.h>

/* ---- filling pages ---- */

/* UFFDIO_COPY (src) or UFFDIO_ZEROPAGE (src NULL) of [dst, dst+len), waking
 * whoever waits there.  Pages already there (-EEXIST) are skipped; a page
 * in no registered VMA (-ENOENT: unmapped, or a VMA split under us) is
 * retried page by page and, for a copy, counted lost if it is gone; a run
 * of zeros stops there.  *filled gets the
 * bytes filled.  0, -EAGAIN (an mm change is in flight: retry once its event
 * is read), -ESRCH (the process is gone) or -errno (logged). */
int lp_fill(struct lp_daemon *d, struct lp_proc *p, uint64_t dst, const uint8_t *src,
	    uint64_t len, uint64_t *filled)
{
	bool single = false;

	*filled = 0;
	while (len) {
		uint64_t n = single ? PAGE : len;
		int64_t done;
		int err = 0;

		if (src) {
			struct uffdio_copy c = { .dst = dst, .src = (uintptr_t)src, .len = n };

			if (ioctl(p->uffd, UFFDIO_COPY, &c))
				err = errno;
			done = c.copy;
		} else {
			struct uffdio_zeropage z = { .range = { .start = dst, .len = n } };

			if (ioctl(p->uffd, UFFDIO_ZEROPAGE, &z))
				err = errno;
			done = z.zeropage;
		}
		if (!err)
			done = (int64_t)n;
		if (done > 0) {
			dst += done;
			if (src)
				src += done;
			len -= done;
			*filled += done;
		}
		if (!err) {
			if (single && len && !(dst & 0x1fffff))
				single = false; /* past the trouble: large copies again */
			continue;
		}
		switch (err) {
		case EEXIST:
			if (done <= 0) {
				dst += PAGE;
				if (src)
					src += PAGE;
				len -= PAGE;
			}
			break;
		case ENOENT:
			if (!single && n > PAGE) {
				single = true;
				break;
			}
			if (!src)
				return 0; /* a run of zeros ends where its VMA does */
			if (done <= 0) {
				atomic_fetch_add(&d->lost_pages, 1);
				dst += PAGE;
				if (src)
					src += PAGE;
				len -= PAGE;
			}
			break;
		case EAGAIN:
			return -EAGAIN;
		case ESRCH:
		case ENOSPC:
			return -ESRCH;
		default:
			errno = err;
			pr_perror("%d: %s at 0x%llx (%llu bytes)", p->pid,
				  src ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE", (unsigned long long)dst,
				  (unsigned long long)n);
			return -err;
		}
	}
	return 0;
}

struct copy_ctx {
	struct lp_daemon *d;
	struct lp_proc *p;
	const struct lazy_block *b;
	uint64_t first; /* the piece holding this address goes first (a fault) */
	uint64_t first_done_ns; /* when the copy of that piece returned */
	bool skip_first;
	uint64_t bytes;
};

static int copy_piece(const struct lazy_piece *pc, void *arg)
{
	struct copy_ctx *c = arg;
	uint64_t got = 0;
	int ret;

	if (c->skip_first && c->first >= pc->addr && c->first < pc->addr + pc->len)
		return 0;
	ret = lp_fill(c->d, c->p, pc->addr, c->p->src + c->b->file_off + (pc->img - c->b->img),
		      pc->len, &got);
	c->bytes += got;
	if (c->first >= pc->addr && c->first < pc->addr + pc->len)
		c->first_done_ns = now_ns();
	return ret;
}

/* The hole after block b (pages the image leaves zero between its data and
 * the next block's, in one VMA: elided zero pages) mapped to the zero page
 * now, before the process reads it.  The CUDA restore reads every page of
 * its saved state, elided ones too, and each would fault: a round trip to
 * this daemon while it runs, a kernel fault after.  On the H100 this took
 * nearly all of the GPU example's driver thread's page-fault time away
 * (bench/LOG.md, "zero holes mapped ahead of it").  Zero-page entries
 * cost no memory, only page tables (2 MiB a GiB); lazy_map_take_hole says
 * which holes are worth that (not the largest, nor more hole than data: a
 * sparse reservation is not) and safe (none after a remap).
 * 0, or -ESRCH (the process is gone). */
static int zero_hole(struct lp_daemon *d, struct lp_proc *p, uint32_t b)
{
	const struct lazy_block *k = &p->map.blocks[b];
	uint64_t len = lazy_map_take_hole(&p->map, b, d->o->zero_hole_bytes), got = 0;
	int ret;

	if (!len)
		return 0;
	ret = lp_fill(d, p, k->img + k->len, NULL, len, &got);
	atomic_fetch_add(&d->hole_bytes, got);
	/* Zeroing holes only spares faults: on an mm change in flight (taken
	 * again, the hole would be charged to the budget twice) or an error
	 * (fill logged it), what is not zeroed yet is left to them. */
	return ret == -ESRCH ? ret : 0;
}

/* Copy what is left of block b (claimed by the caller), the piece holding
 * first (if any) before the rest.  0, -EAGAIN, -ESRCH or -errno. */
int lp_copy_block(struct lp_daemon *d, struct lp_proc *p, uint32_t b, uint64_t first,
		  uint64_t *bytes, uint64_t *first_done_ns)
{
	struct copy_ctx c = { .d = d, .p = p, .b = &p->map.blocks[b], .first = first };
	long i = first ? lazy_map_find(&p->map, first, NULL, NULL) : -1;
	int ret = 0;

	if (i >= 0 && p->map.pieces[i].block == b) {
		ret = copy_piece(&p->map.pieces[i], &c);
		c.skip_first = true;
	}
	if (!ret)
		ret = lazy_map_each_piece(&p->map, b, copy_piece, &c);
	*bytes = c.bytes;
	if (first_done_ns)
		*first_done_ns = c.first_done_ns ? c.first_done_ns : now_ns();
	return ret;
}

void lp_proc_gone(struct lp_daemon *d, struct lp_proc *p)
{
	if (!atomic_exchange(&p->gone, true)) {
		pr_info("%d (uffd %d): the process is gone", p->pid, p->uffd);
		lp_wake_event_thread(d);
	}
}

void lp_block_done(struct lp_daemon *d, struct lp_proc *p, uint32_t b)
{
	size_t left;

	lazy_map_done(&p->map, b);
	left = atomic_fetch_sub(&p->remaining, 1) - 1;
	if (!left)
		lp_wake_event_thread(d);
	/* The fill's progress in tenths, to set beside the restore's own log
	 * (when a CUDA restore waits on the fill, this is what it waits for). */
	if (p->map.nblocks >= 10 && left % (p->map.nblocks / 10) == 0)
		pr_info("%d: %zu of %zu blocks left", p->pid, left, p->map.nblocks);
}

/* ---- copy slots ----
 *
 * One SysV semaphore per slot count, machine-wide, whose value is the
 * number of copy threads (of all daemons) that may copy at once.  SysV
 * because SEM_UNDO gives a slot back when its holder dies, even by SIGKILL:
 * a lost page source must not shrink the next starts' slots.  A daemon that
 * cannot get a slot in SLOT_WAIT_MS copies anyway (a semaphore left at 0 by
 * a creator killed before it set the value must not stall every restore).
 * Faults never wait for a slot: the event thread copies without one. */

#define COPY_SEM_KEY_BASE 0x74680000 /* "th" + slots */
#define SLOT_WAIT_MS	  200

int lp_copy_slots_open(int slots)
{
	key_t key = (key_t)(COPY_SEM_KEY_BASE + (slots & 0xffff));
	int id = semget(key, 1, IPC_CREAT | IPC_EXCL | 0600);

	if (id >= 0) {
		if (semctl(id, 0, SETVAL, slots) < 0) {
			pr_perror("copy slots: semctl SETVAL");
			semctl(id, 0, IPC_RMID);
			return -1;
		}
		return id;
	}
	if (errno == EEXIST)
		id = semget(key, 1, 0600);
	if (id < 0)
		pr_perror("copy slots: semget (copying without a machine-wide limit)");
	return id;
}

/* Take a slot: true if taken (give it back with slot_give), false to copy
 * without one (no semaphore, stopping, or waited SLOT_WAIT_MS). */
static bool slot_take(struct lp_daemon *d)
{
	struct sembuf op = { .sem_num = 0, .sem_op = -1, .sem_flg = SEM_UNDO };
	struct timespec ts = { .tv_sec = 0, .tv_nsec = SLOT_WAIT_MS * 1000000L };

	if (d->copy_sem < 0)
		return false;
	while (semtimedop(d->copy_sem, &op, 1, &ts) < 0) {
		if (errno != EINTR)
			return false;
		if (atomic_load(&d->stop))
			return false;
	}
	return true;
}

static void slot_give(struct lp_daemon *d, bool taken)
{
	struct sembuf op = { .sem_num = 0, .sem_op = 1, .sem_flg = SEM_UNDO };

	if (taken && semop(d->copy_sem, &op, 1) < 0)
		pr_perror("copy slots: semop");
}

/* ---- copy threads ---- */

/* The next block of the stream that the last fault started, or NO_STREAM.
 * A process that faults is reading its memory somewhere the copy threads
 * have not reached (the CUDA restore reads the GPU's saved state this way,
 * front to back); the blocks after the fault are what it reads next, so the
 * copy threads take those first, ahead of it, and go back to their cursor
 * when the stream meets blocks already copied. */
static size_t stream_take(struct lp_proc *p)
{
	size_t s = atomic_load(&p->stream);

	while (s != NO_STREAM && !atomic_compare_exchange_weak(&p->stream, &s, s + 1))
		;
	return s;
}

/* The stream that handed out block i has met the end or copied blocks. */
static void stream_end(struct lp_proc *p, size_t i)
{
	size_t s = i + 1;

	atomic_compare_exchange_strong(&p->stream, &s, NO_STREAM);
}

/* Claim and copy the next block of p (the fault's stream first, else the
 * cursor's): 1 did one, 0 none left. */
static int prefetch_one(struct lp_daemon *d, struct lp_proc *p)
{
	size_t i = stream_take(p);
	bool streamed = i != NO_STREAM;
	uint64_t bytes = 0;
	int ret;

	bool slot;

	if (!streamed)
		i = atomic_fetch_add(&p->cursor, 1);
	if (i >= p->map.nblocks) {
		if (!streamed)
			return 0;
		stream_end(p, i);
		return 1;
	}
	if (atomic_load(&p->gone))
		return 1;
	/* The slot before the claim: a block claimed while waiting would make
	 * a fault on it wait too. */
	slot = slot_take(d);
	if (!lazy_map_claim(&p->map, (uint32_t)i)) {
		slot_give(d, slot);
		if (streamed)
			stream_end(p, i);
		return 1;
	}
	if (streamed)
		atomic_fetch_add(&d->streamed_blocks, 1);
	for (;;) {
		pthread_rwlock_rdlock(&p->lock);
		ret = lp_copy_block(d, p, (uint32_t)i, 0, &bytes, NULL);
		if (!ret)
			ret = zero_hole(d, p, (uint32_t)i);
		if (!ret)
			lp_block_done(d, p, (uint32_t)i);
		pthread_rwlock_unlock(&p->lock);
		atomic_fetch_add(&d->prefetch_bytes, bytes);
		if (ret != -EAGAIN || atomic_load(&d->stop))
			break;
		sched_yield(); /* the event thread reads the event, then we go on */
	}
	slot_give(d, slot);
	if (ret == -ESRCH)
		lp_proc_gone(d, p);
	else if (ret && ret != -EAGAIN)
		lp_set_error(d, ret);
	return 1;
}

void *lp_copy_thread(void *arg)
{
	struct lp_daemon *d = arg;

	for (;;) {
		unsigned gen;
		size_t n;
		bool any = false;

		pthread_mutex_lock(&d->mu);
		while (!atomic_load(&d->stop) && !atomic_load(&d->finished))
			pthread_cond_wait(&d->cv, &d->mu);
		gen = d->gen;
		n = d->nprocs;
		pthread_mutex_unlock(&d->mu);
		while (!atomic_load(&d->stop) &&
		       now_ns() < d->finished_ns + d->o->prefetch_delay_ms * 1000000ull)
			usleep(10000);
		if (atomic_load(&d->stop))
			break;
		for (size_t i = 0; i < n && !atomic_load(&d->stop); i++) {
			struct lp_proc *p;

			/* d->procs may be reallocated by a fork: read it under mu. */
			pthread_mutex_lock(&d->mu);
			p = d->procs[i];
			pthread_mutex_unlock(&d->mu);
			while (prefetch_one(d, p) && !atomic_load(&d->stop))
				any = true;
		}
		if (any)
			continue;
		pthread_mutex_lock(&d->mu);
		while (!atomic_load(&d->stop) && d->gen == gen)
			pthread_cond_wait(&d->cv, &d->mu);
		pthread_mutex_unlock(&d->mu);
	}
	return NULL;
}
