/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_pages.c — thaw's lazy-pages daemon (see lazy_pages.h).
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
#define LOG_PREFIX "lazy-pages: "
#include "restore/lazy_pages.h"
#include "restore/lazy_map.h"
#include "common/log.h"
#include "common/util.h"
#include "criu/criu_image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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

static void set_error(struct lp_daemon *d, int err)
{
	int none = 0;

	atomic_compare_exchange_strong(&d->error, &none, err);
	atomic_store(&d->stop, true);
	pthread_mutex_lock(&d->mu);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void wake_event_thread(struct lp_daemon *d)
{
	uint64_t one = 1;

	if (write(d->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_perror("eventfd write");
}

/* ---- filling pages ---- */

/* UFFDIO_COPY (src) or UFFDIO_ZEROPAGE (src NULL) of [dst, dst+len), waking
 * whoever waits there.  Pages already there (-EEXIST) are skipped; a page
 * in no registered VMA (-ENOENT: unmapped, or a VMA split under us) is
 * retried page by page and, for a copy, counted lost if it is gone; a run
 * of zeros stops there.  *filled gets the
 * bytes filled.  0, -EAGAIN (an mm change is in flight: retry once its event
 * is read), -ESRCH (the process is gone) or -errno (logged). */
static int fill(struct lp_daemon *d, struct lp_proc *p, uint64_t dst, const uint8_t *src,
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
	ret = fill(c->d, c->p, pc->addr, c->p->src + c->b->file_off + (pc->img - c->b->img),
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
	ret = fill(d, p, k->img + k->len, NULL, len, &got);
	atomic_fetch_add(&d->hole_bytes, got);
	/* Zeroing holes only spares faults: on an mm change in flight (taken
	 * again, the hole would be charged to the budget twice) or an error
	 * (fill logged it), what is not zeroed yet is left to them. */
	return ret == -ESRCH ? ret : 0;
}

/* Copy what is left of block b (claimed by the caller), the piece holding
 * first (if any) before the rest.  0, -EAGAIN, -ESRCH or -errno. */
static int copy_block(struct lp_daemon *d, struct lp_proc *p, uint32_t b, uint64_t first,
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

static void proc_gone(struct lp_daemon *d, struct lp_proc *p)
{
	if (!atomic_exchange(&p->gone, true)) {
		pr_info("%d (uffd %d): the process is gone", p->pid, p->uffd);
		wake_event_thread(d);
	}
}

static void block_done(struct lp_daemon *d, struct lp_proc *p, uint32_t b)
{
	size_t left;

	lazy_map_done(&p->map, b);
	left = atomic_fetch_sub(&p->remaining, 1) - 1;
	if (!left)
		wake_event_thread(d);
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

static int copy_slots_open(int slots)
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
		ret = copy_block(d, p, (uint32_t)i, 0, &bytes, NULL);
		if (!ret)
			ret = zero_hole(d, p, (uint32_t)i);
		if (!ret)
			block_done(d, p, (uint32_t)i);
		pthread_rwlock_unlock(&p->lock);
		atomic_fetch_add(&d->prefetch_bytes, bytes);
		if (ret != -EAGAIN || atomic_load(&d->stop))
			break;
		sched_yield(); /* the event thread reads the event, then we go on */
	}
	slot_give(d, slot);
	if (ret == -ESRCH)
		proc_gone(d, p);
	else if (ret && ret != -EAGAIN)
		set_error(d, ret);
	return 1;
}

static void *copy_thread(void *arg)
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

/* ---- processes ---- */

static int proc_add(struct lp_daemon *d, struct lp_proc *p)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ret = 0;

	pthread_mutex_lock(&d->mu);
	if (ARRAY_GROW(d->procs, d->pcap, d->nprocs + 1, 16)) {
		ret = -ENOMEM;
		goto out;
	}
	p->idx = d->nprocs;
	ev.data.u64 = EV_PROC0 + p->idx;
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, p->uffd, &ev)) {
		ret = -errno;
		pr_perror("epoll_ctl(uffd %d)", p->uffd);
		goto out;
	}
	d->procs[d->nprocs++] = p;
	d->gen++;
	pthread_cond_broadcast(&d->cv);
out:
	pthread_mutex_unlock(&d->mu);
	return ret;
}

static struct lp_proc *proc_new(int pid, int uffd)
{
	struct lp_proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	p->uffd = uffd;
	atomic_store(&p->stream, NO_STREAM);
	pthread_rwlock_init(&p->lock, NULL);
	return p;
}

static void proc_free(struct lp_proc *p)
{
	if (!p)
		return;
	if (p->uffd >= 0)
		close(p->uffd);
	lazy_map_release(&p->map);
	pthread_rwlock_destroy(&p->lock);
	free(p->faults);
	free(p);
}

static void proc_count(struct lp_proc *p)
{
	size_t todo = 0;

	for (size_t b = 0; b < p->map.nblocks; b++)
		if (lazy_map_state(&p->map, (uint32_t)b) != LAZY_DONE)
			todo++;
	atomic_store(&p->remaining, todo);
}

/* How the holes between blocks are sized (which of them zero_hole takes). */
static void hole_sizes(const struct lp_proc *p)
{
	static const uint64_t upto[] = { 64 << 10, 2 << 20, 64 << 20, 1 << 30, UINT64_MAX };
	uint64_t n[5] = { 0 }, bytes[5] = { 0 };

	for (size_t b = 0; b < p->map.nblocks; b++) {
		uint64_t h = p->map.blocks[b].hole_after;
		size_t c = 0;

		if (!h)
			continue;
		while (h > upto[c])
			c++;
		n[c]++;
		bytes[c] += h;
	}
	pr_info("%d: holes <= 64 KiB: %llu (%llu KiB), <= 2 MiB: %llu (%llu KiB), <= 64 MiB: %llu "
		"(%llu KiB), <= 1 GiB: %llu (%llu KiB), more: %llu (%llu KiB)",
		p->pid, (unsigned long long)n[0], (unsigned long long)bytes[0] >> 10,
		(unsigned long long)n[1], (unsigned long long)bytes[1] >> 10,
		(unsigned long long)n[2], (unsigned long long)bytes[2] >> 10,
		(unsigned long long)n[3], (unsigned long long)bytes[3] >> 10,
		(unsigned long long)n[4], (unsigned long long)bytes[4] >> 10);
}

/* pages-<id>.img, mapped once for every process that reads it. */
static int map_pages(struct lp_daemon *d, uint32_t id, uint64_t need, const uint8_t **out)
{
	char name[64];
	struct stat st;
	struct lp_src *v;
	void *addr;
	int fd, ret = 0;

	snprintf(name, sizeof(name), "pages-%u.img", id);
	fd = openat(d->images_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		ret = -errno;
		pr_perror("%s/%s", d->o->images_dir, name);
		goto out;
	}
	if ((uint64_t)st.st_size < need) {
		pr_err("%s/%s holds %lld bytes, its pagemap needs %llu", d->o->images_dir, name,
		       (long long)st.st_size, (unsigned long long)need);
		ret = -EINVAL;
		goto out;
	}
	addr = mmap(NULL, need, PROT_READ, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
	if (addr == MAP_FAILED) {
		ret = -errno;
		pr_perror("mmap %s", name);
		goto out;
	}
	v = realloc(d->srcs, (d->nsrcs + 1) * sizeof(*v));
	if (!v) {
		munmap(addr, need);
		ret = -ENOMEM;
		goto out;
	}
	d->srcs = v;
	d->srcs[d->nsrcs++] = (struct lp_src){ .addr = addr, .len = need };
	*out = addr;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

/* What process pid owes: its mm and pagemap images, its pages file. */
static int proc_load(struct lp_daemon *d, struct lp_proc *p)
{
	struct criu_img_pagemap pm = { 0 };
	struct criu_img_mm mm = { 0 };
	uint8_t *buf = NULL;
	char name[64];
	size_t len;
	uint64_t need = 0;
	int ret;

	snprintf(name, sizeof(name), "mm-%d.img", p->pid);
	ret = criu_img_read_in(d->o->images_dir, name, &buf, &len);
	if (!ret)
		ret = criu_img_decode_mm(buf, len, name, &mm);
	free(buf);
	buf = NULL;
	if (ret)
		goto out;
	snprintf(name, sizeof(name), "pagemap-%d.img", p->pid);
	ret = criu_img_read_in(d->o->images_dir, name, &buf, &len);
	if (!ret)
		ret = criu_img_decode_pagemap(buf, len, name, &pm);
	if (ret)
		goto out;
	ret = lazy_map_build(&p->map, &pm, &mm, d->block);
	if (ret)
		goto out;
	for (size_t b = 0; b < p->map.nblocks; b++)
		if (p->map.blocks[b].file_off + p->map.blocks[b].len > need)
			need = p->map.blocks[b].file_off + p->map.blocks[b].len;
	if (need)
		ret = map_pages(d, pm.pages_id, need, &p->src);
	proc_count(p);
	pr_info("%d (uffd %d): %zu blocks, %llu bytes to fill; %llu bytes of holes between them",
		p->pid, p->uffd, p->map.nblocks, (unsigned long long)p->map.bytes,
		(unsigned long long)p->map.hole_bytes);
	hole_sizes(p);
out:
	free(buf);
	criu_img_pagemap_release(&pm);
	criu_img_mm_release(&mm);
	return ret;
}

/* ---- the restore's socket ---- */

static int listen_socket(struct lp_daemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", LAZY_PAGES_SOCK_NAME);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		pr_perror("socket");
		return -errno;
	}
	unlink(sa.sun_path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 10)) {
		int err = -errno;

		pr_perror("listen on %s/%s", d->o->work_dir, sa.sun_path);
		close(fd);
		return err;
	}
	d->listen_fd = fd;
	return 0;
}

/* Exactly len bytes (pid, FINISHED): never more, so that the byte that
 * carries the next uffd is left for recv_uffd.  1 got them, 0 the restore
 * closed the socket first, -errno. */
static int recv_exact(int fd, void *buf, size_t len)
{
	ssize_t n;

	do
		n = recv(fd, buf, len, MSG_WAITALL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	return (size_t)n == len ? 1 : -EPROTO;
}

/* CRIU's send_fd(): one payload byte carrying SCM_RIGHTS with one fd. */
static int recv_uffd(int sk)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	struct cmsghdr *cm;
	ssize_t n;
	int fd;

	do
		n = recvmsg(sk, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	cm = CMSG_FIRSTHDR(&mh);
	if (n != 1 || !cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(sizeof(int)) || (mh.msg_flags & MSG_CTRUNC))
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	return fd;
}

static int task_count(struct lp_daemon *d, size_t *n)
{
	struct criu_img_pstree t = { 0 };
	uint8_t *buf = NULL;
	size_t len;
	int ret;

	ret = criu_img_read_in(d->o->images_dir, "pstree.img", &buf, &len);
	if (!ret)
		ret = criu_img_decode_pstree(buf, len, "pstree.img", &t);
	*n = t.n;
	criu_img_pstree_release(&t);
	free(buf);
	return ret;
}

/* Accept the restore and take one uffd per live task, as criu lazy-pages
 * does (the restore sends them all before it lets any task run). */
static int receive_tasks(struct lp_daemon *d)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EV_SOCK };
	size_t ntasks;
	int ret;

	ret = task_count(d, &ntasks);
	if (ret)
		return ret;
	d->client = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (d->client < 0) {
		pr_perror("accept on %s", LAZY_PAGES_SOCK_NAME);
		return -errno;
	}
	close(d->listen_fd);
	d->listen_fd = -1;
	for (size_t i = 0; i < ntasks; i++) {
		struct lp_proc *p;
		int pid, uffd;

		ret = recv_exact(d->client, &pid, sizeof(pid));
		if (ret <= 0) {
			pr_err("the restore %s before it sent task %zu of %zu",
			       ret ? "broke the protocol" : "closed the socket", i + 1, ntasks);
			return ret ? ret : -EPIPE;
		}
		if (pid < 0) {
			pr_info("%d: a zombie, no pages", -pid);
			continue;
		}
		uffd = recv_uffd(d->client);
		if (uffd < 0) {
			pr_err("no userfaultfd for task %d from the restore: %s", pid, strerror(-uffd));
			return uffd;
		}
		fcntl(uffd, F_SETFL, O_NONBLOCK);
		p = proc_new(pid, uffd);
		if (!p) {
			close(uffd);
			return -ENOMEM;
		}
		ret = proc_load(d, p);
		if (!ret)
			ret = proc_add(d, p);
		if (ret) {
			proc_free(p);
			return ret;
		}
	}
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->client, &ev)) {
		pr_perror("epoll_ctl(socket)");
		return -errno;
	}
	return 0;
}

/* The socket after the tasks: FINISHED, then the restore's close. */
static int handle_socket(struct lp_daemon *d)
{
	uint32_t word;
	int ret = recv_exact(d->client, &word, sizeof(word));

	if (ret < 0) {
		pr_err("reading the restore's socket: %s", strerror(-ret));
		return ret;
	}
	if (ret == 0) {
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, d->client, NULL);
		close(d->client);
		d->client = -1;
		if (atomic_load(&d->finished))
			return 0;
		pr_err("the restore closed its socket before it said it had finished");
		return -EPIPE;
	}
	if (word != LAZY_PAGES_RESTORE_FINISHED) {
		pr_err("unexpected word 0x%x from the restore", word);
		return -EPROTO;
	}
	pr_info("the restore finished: filling the rest with %u threads", d->nthreads);
	pthread_mutex_lock(&d->mu);
	d->finished_ns = now_ns();
	atomic_store(&d->finished, true);
	d->gen++;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

/* ---- events and faults (the event thread) ---- */

static int queue_fault(struct lp_proc *p, uint64_t addr, long block)
{
	if (ARRAY_GROW(p->faults, p->fcap, p->nfaults + 1, 16))
		return -ENOMEM;
	p->faults[p->nfaults++] =
		(struct lp_fault){ .addr = addr, .block = block, .read_ns = now_ns() };
	return 0;
}

static int handle_fork(struct lp_daemon *d, struct lp_proc *p, int ufd)
{
	struct lp_proc *c = proc_new(p->pid, ufd);
	int ret;

	if (!c) {
		close(ufd);
		return -ENOMEM;
	}
	fcntl(ufd, F_SETFL, O_NONBLOCK);
	c->src = p->src;
	ret = lazy_map_clone(&c->map, &p->map);
	if (!ret) {
		proc_count(c);
		ret = proc_add(d, c);
	}
	if (ret) {
		proc_free(c);
		return ret;
	}
	pr_info("%d (uffd %d): forked a child (uffd %d), %zu blocks to fill in it", p->pid,
		p->uffd, ufd, atomic_load(&c->remaining));
	return 0;
}

static int handle_remove(struct lp_daemon *d, struct lp_proc *p, const struct uffd_msg *m)
{
	struct uffdio_range r = { .start = m->arg.remove.start,
				  .len = m->arg.remove.end - m->arg.remove.start };

	/* MADV_DONTNEED leaves the VMA: unregister the range so that it
	 * reads zeros from the kernel, never pages of ours.  An unmapped
	 * range has no VMA left to unregister. */
	if (m->event == UFFD_EVENT_REMOVE && ioctl(p->uffd, UFFDIO_UNREGISTER, &r)) {
		if (errno == ENOMEM) { /* the kernel's word for a process gone */
			proc_gone(d, p);
			return 0;
		}
		pr_perror("%d: UFFDIO_UNREGISTER 0x%llx+%llu", p->pid, (unsigned long long)r.start,
			  (unsigned long long)r.len);
		return -errno;
	}
	return lazy_map_drop(&p->map, r.start, r.len);
}

static int handle_msg(struct lp_daemon *d, struct lp_proc *p, const struct uffd_msg *m)
{
	uint64_t before = lazy_map_pending_bytes(&p->map), after;
	int ret;

	switch (m->event) {
	case UFFD_EVENT_PAGEFAULT:
		atomic_fetch_add(&d->nfaults, 1);
		return queue_fault(p, m->arg.pagefault.address & ~(uint64_t)(PAGE - 1), -1);
	case UFFD_EVENT_FORK:
		d->nfork++;
		return handle_fork(d, p, (int)m->arg.fork.ufd);
	case UFFD_EVENT_REMAP:
		d->nremap++;
		pr_debug("%d: REMAP 0x%llx -> 0x%llx (%llu bytes)", p->pid,
			 (unsigned long long)m->arg.remap.from, (unsigned long long)m->arg.remap.to,
			 (unsigned long long)m->arg.remap.len);
		ret = lazy_map_remap(&p->map, m->arg.remap.from, m->arg.remap.to, m->arg.remap.len);
		break;
	case UFFD_EVENT_REMOVE:
	case UFFD_EVENT_UNMAP:
		if (m->event == UFFD_EVENT_REMOVE)
			d->nremove++;
		else
			d->nunmap++;
		pr_debug("%d: %s 0x%llx-0x%llx", p->pid,
			 m->event == UFFD_EVENT_REMOVE ? "REMOVE" : "UNMAP",
			 (unsigned long long)m->arg.remove.start,
			 (unsigned long long)m->arg.remove.end);
		ret = handle_remove(d, p, m);
		break;
	default:
		pr_err("%d: unexpected userfaultfd event %u", p->pid, m->event);
		return -EPROTO;
	}
	after = lazy_map_pending_bytes(&p->map);
	if (after < before)
		d->dropped_bytes += before - after;
	return ret;
}

/* Read and apply every message p has now, p's lock held exclusive.
 * *got: how many.  0 or -errno. */
static int drain(struct lp_daemon *d, struct lp_proc *p, size_t *got)
{
	struct uffd_msg msgs[MSGS_PER_READ];
	int ret = 0;

	*got = 0;
	pthread_rwlock_wrlock(&p->lock);
	while (!ret) {
		ssize_t n = read(p->uffd, msgs, sizeof(msgs));

		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				ret = -errno;
				pr_perror("%d: read uffd %d", p->pid, p->uffd);
			}
			break;
		}
		if (n == 0 || n % sizeof(msgs[0])) {
			pr_err("%d: short read of %zd bytes from uffd %d", p->pid, n, p->uffd);
			ret = -EPROTO;
			break;
		}
		for (size_t i = 0; !ret && i < n / sizeof(msgs[0]); i++)
			ret = handle_msg(d, p, &msgs[i]);
		*got += n / sizeof(msgs[0]);
	}
	pthread_rwlock_unlock(&p->lock);
	return ret;
}

/* A fault where no data is owed: zeros, for the run from the fault up to
 * the next pending piece or the end of the block window (pages there that
 * exist are skipped), or the page alone if that run leaves its VMA. */
static int serve_zero(struct lp_daemon *d, struct lp_proc *p, uint64_t addr, uint64_t gap_hi)
{
	uint64_t end = (addr & ~(d->block - 1)) + d->block, got = 0;
	struct uffdio_range one = { .start = addr, .len = PAGE };
	int ret;

	if (end > gap_hi)
		end = gap_hi;
	ret = fill(d, p, addr, NULL, end - addr, &got);
	atomic_fetch_add(&d->zero_bytes, got);
	if (ret == -EAGAIN || ret == -ESRCH)
		return ret;
	/* Someone (a copy, an earlier zero run) may have filled it: wake. */
	if (!ret && ioctl(p->uffd, UFFDIO_WAKE, &one) && errno != ENOENT)
		pr_perror("%d: UFFDIO_WAKE 0x%llx", p->pid, (unsigned long long)addr);
	return ret;
}

/* A fault served: how long it waited since it was read. */
static void fault_waited(struct lp_daemon *d, const struct lp_fault *f, uint64_t done_ns)
{
	uint64_t w = done_ns > f->read_ns ? done_ns - f->read_ns : 0;

	d->fault_wait_ns += w;
	if (w > d->fault_wait_max_ns)
		d->fault_wait_max_ns = w;
}

static const char *lazy_state_name(enum lazy_block_state st)
{
	return st == LAZY_DONE ? "done" : st == LAZY_CLAIMED ? "being copied" : "to do";
}

/* Serve one fault: 0 served (or a copy thread will), -EAGAIN later,
 * -ESRCH the process is gone, -errno. */
static int serve_fault(struct lp_daemon *d, struct lp_proc *p, struct lp_fault *f)
{
	uint64_t gap_hi = UINT64_MAX, bytes = 0, done_ns;
	long i;
	int ret;

	if (f->block < 0) {
		struct uffdio_range one = { .start = f->addr, .len = PAGE };

		i = lazy_map_find(&p->map, f->addr, NULL, &gap_hi);
		if (i < 0) {
			pr_debug("%d: fault at 0x%llx: zeros", p->pid, (unsigned long long)f->addr);
			ret = serve_zero(d, p, f->addr, gap_hi);
			if (!ret)
				fault_waited(d, f, now_ns());
			return ret;
		}
		f->block = p->map.pieces[i].block;
		pr_debug("%d: fault at 0x%llx: block %ld, %s; cursor at %zu", p->pid,
			 (unsigned long long)f->addr, f->block,
			 lazy_state_name(lazy_map_state(&p->map, (uint32_t)f->block)),
			 atomic_load(&p->cursor));
		if (!lazy_map_claim(&p->map, (uint32_t)f->block)) {
			/* A copy thread has it (its copy wakes the fault) or it
			 * is done (the fault raced the copy): wake to be sure. */
			if (lazy_map_state(&p->map, (uint32_t)f->block) == LAZY_DONE) {
				if (ioctl(p->uffd, UFFDIO_WAKE, &one) && errno != ENOENT)
					pr_perror("%d: UFFDIO_WAKE", p->pid);
				fault_waited(d, f, now_ns());
			} else {
				d->faults_on_copies++;
			}
			f->block = -1;
			return 0;
		}
	}
	ret = copy_block(d, p, (uint32_t)f->block, f->addr, &bytes, &done_ns);
	atomic_fetch_add(&d->fault_bytes, bytes);
	if (!ret) {
		fault_waited(d, f, done_ns);
		block_done(d, p, (uint32_t)f->block);
		atomic_store(&p->stream, (size_t)f->block + 1);
	}
	return ret;
}

/* Serve p's queued faults; those that meet an mm change stay queued. */
static int serve_faults(struct lp_daemon *d, struct lp_proc *p)
{
	size_t keep = 0;
	int ret = 0;

	for (size_t i = 0; i < p->nfaults; i++) {
		int r = atomic_load(&p->gone) ? 0 : serve_fault(d, p, &p->faults[i]);

		if (r == -EAGAIN) {
			p->faults[keep++] = p->faults[i];
			continue;
		}
		if (r == -ESRCH) {
			proc_gone(d, p);
			r = 0;
		}
		if (r && !ret)
			ret = r;
	}
	p->nfaults = keep;
	return ret;
}

static int handle_proc(struct lp_daemon *d, struct lp_proc *p)
{
	size_t got;
	int ret;

	do {
		ret = drain(d, p, &got);
		if (!ret)
			ret = serve_faults(d, p);
		/* Faults wait on an event the kernel has not queued yet. */
		if (!ret && p->nfaults && !got)
			sched_yield();
	} while (!ret && p->nfaults && !atomic_load(&d->stop));
	return ret;
}

static bool all_done(struct lp_daemon *d)
{
	if (!atomic_load(&d->finished))
		return false;
	for (size_t i = 0; i < d->nprocs; i++)
		if (!atomic_load(&d->procs[i]->gone) && atomic_load(&d->procs[i]->remaining))
			return false;
	return true;
}

static int event_loop(struct lp_daemon *d)
{
	struct epoll_event evs[32];
	int ret = 0;

	while (!ret && !atomic_load(&d->stop) && !all_done(d)) {
		int n = epoll_wait(d->epfd, evs, 32, 1000);

		if (n < 0 && errno != EINTR) {
			pr_perror("epoll_wait");
			return -errno;
		}
		for (int i = 0; !ret && i < n; i++) {
			uint64_t tag = evs[i].data.u64, v;

			if (tag == EV_WAKE) {
				if (read(d->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					ret = -errno;
			} else if (tag == EV_SOCK) {
				ret = handle_socket(d);
			} else if (tag - EV_PROC0 < d->nprocs) {
				ret = handle_proc(d, d->procs[tag - EV_PROC0]);
			}
		}
	}
	if (!ret)
		ret = atomic_load(&d->error);
	return ret;
}

/* ---- the daemon ---- */

static void summary(struct lp_daemon *d, uint64_t t0, int ret)
{
	double ms = (now_ns() - t0) / 1e6;
	uint64_t fb = atomic_load(&d->fault_bytes), pb = atomic_load(&d->prefetch_bytes);

	log_msg(ret ? LOG_ERR : LOG_INFO, LOG_PREFIX,
		"%s: %zu processes, %llu faults; copied %llu pages by faults, %llu by prefetch "
		"(%.1f MiB, %.0f MiB/s; %llu blocks of it right after a fault's), %llu zero pages "
		"by faults, %llu in holes, %llu lost; %.1f ms, %u copy threads, "
		"%llu KiB blocks; events: %llu remap, %llu remove, %llu unmap, %llu fork, "
		"%llu pending bytes dropped by them; faults waited %.1f ms in all, at most %.2f ms, "
		"%llu on a block a copy thread had",
		ret ? "failed" : "done", d->nprocs, (unsigned long long)atomic_load(&d->nfaults),
		(unsigned long long)(fb / PAGE), (unsigned long long)(pb / PAGE),
		(fb + pb) / 1048576.0, ms > 0 ? (fb + pb) / 1048576.0 / (ms / 1000) : 0,
		(unsigned long long)atomic_load(&d->streamed_blocks),
		(unsigned long long)(atomic_load(&d->zero_bytes) / PAGE),
		(unsigned long long)(atomic_load(&d->hole_bytes) / PAGE),
		(unsigned long long)atomic_load(&d->lost_pages), ms, d->nthreads,
		(unsigned long long)(d->block >> 10), (unsigned long long)d->nremap,
		(unsigned long long)d->nremove, (unsigned long long)d->nunmap,
		(unsigned long long)d->nfork, (unsigned long long)d->dropped_bytes,
		(double)d->fault_wait_ns / 1e6, (double)d->fault_wait_max_ns / 1e6,
		(unsigned long long)d->faults_on_copies);
}

static int setup(struct lp_daemon *d)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EV_WAKE };
	int ret;

	d->images_fd = open(d->o->images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->images_fd < 0) {
		pr_perror("images dir %s", d->o->images_dir);
		return -errno;
	}
	if (chdir(d->o->work_dir)) {
		pr_perror("work dir %s", d->o->work_dir);
		return -errno;
	}
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->epfd < 0 || d->wake_fd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->wake_fd, &ev)) {
		pr_perror("epoll/eventfd");
		return -errno;
	}
	ret = listen_socket(d);
	if (ret)
		return ret;
	if (d->o->status_fd >= 0) {
		char zero = '\0';

		if (write(d->o->status_fd, &zero, 1) != 1) {
			pr_perror("status fd %d", d->o->status_fd);
			return -errno;
		}
		close(d->o->status_fd);
	}
	return 0;
}

int lazy_pages_run(const struct lazy_pages_opts *o)
{
	struct lp_daemon d = { .o = o, .copy_sem = -1, .images_fd = -1, .listen_fd = -1,
			       .client = -1, .epfd = -1, .wake_fd = -1 };
	pthread_t th[LAZY_PAGES_MAX_THREADS];
	unsigned started = 0;
	uint64_t t0 = now_ns();
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int ret;

	d.block = o->block_bytes ? o->block_bytes : LAZY_PAGES_DEFAULT_BLOCK;
	d.nthreads = o->threads ? o->threads : (cpus > 8 ? 8 : cpus > 0 ? (unsigned)cpus : 1);
	if (d.nthreads > LAZY_PAGES_MAX_THREADS || d.block < PAGE || (d.block & (d.block - 1))) {
		pr_err("bad settings: %u threads (1..%d), %llu-byte blocks (a power of two >= 4 KiB)",
		       d.nthreads, LAZY_PAGES_MAX_THREADS, (unsigned long long)d.block);
		return -EINVAL;
	}
	{
		int slots = o->copy_slots ? o->copy_slots : (cpus > 1 ? (int)cpus / 2 : 1);

		d.copy_sem = slots > 0 ? copy_slots_open(slots) : -1;
		pr_info("%u copy threads, %d copy slots on this machine; holes up to %llu KiB "
			"zeroed as they are reached", d.nthreads, slots,
			(unsigned long long)(o->zero_hole_bytes >> 10));
	}
	pthread_mutex_init(&d.mu, NULL);
	pthread_cond_init(&d.cv, NULL);
	ret = setup(&d);
	if (ret)
		goto out;
	for (; started < d.nthreads; started++) {
		ret = -pthread_create(&th[started], NULL, copy_thread, &d);
		if (ret) {
			errno = -ret;
			pr_perror("pthread_create");
			goto out;
		}
	}
	ret = receive_tasks(&d);
	if (!ret)
		ret = event_loop(&d);
out:
	if (ret)
		set_error(&d, ret);
	pthread_mutex_lock(&d.mu);
	atomic_store(&d.stop, true);
	pthread_cond_broadcast(&d.cv);
	pthread_mutex_unlock(&d.mu);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	summary(&d, t0, ret);
	for (size_t i = 0; i < d.nprocs; i++)
		proc_free(d.procs[i]);
	free(d.procs);
	for (size_t i = 0; i < d.nsrcs; i++)
		munmap(d.srcs[i].addr, d.srcs[i].len);
	free(d.srcs);
	for (int i = 0, fds[5] = { d.images_fd, d.listen_fd, d.client, d.epfd, d.wake_fd }; i < 5;
	     i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_cond_destroy(&d.cv);
	pthread_mutex_destroy(&d.mu);
	return ret;
}
