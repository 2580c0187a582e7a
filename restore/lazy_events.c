/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_events.c — the lazy-pages daemon's event thread
 * (lazy_pages_internal.h): it reads each process's uffd, serves a fault by
 * copying the block that holds it at once (ahead of the copy threads), and
 * applies the mm events (fork, remove, remap, unmap) to the process's map
 * while it holds that process's lock, so that no copy lands on an old view.
 */
#define LOG_PREFIX "lazy-pages: "
#include "restore/lazy_pages_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

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
	struct lp_proc *c = lp_proc_new(p->pid, ufd);
	int ret;

	if (!c) {
		close(ufd);
		return -ENOMEM;
	}
	fcntl(ufd, F_SETFL, O_NONBLOCK);
	c->src = p->src;
	ret = lazy_map_clone(&c->map, &p->map);
	if (!ret) {
		lp_proc_count(c);
		ret = lp_proc_add(d, c);
	}
	if (ret) {
		lp_proc_free(c);
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
			lp_proc_gone(d, p);
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
	ret = lp_fill(d, p, addr, NULL, end - addr, &got);
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
	ret = lp_copy_block(d, p, (uint32_t)f->block, f->addr, &bytes, &done_ns);
	atomic_fetch_add(&d->fault_bytes, bytes);
	if (!ret) {
		fault_waited(d, f, done_ns);
		lp_block_done(d, p, (uint32_t)f->block);
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
			lp_proc_gone(d, p);
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

int lp_event_loop(struct lp_daemon *d)
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
				ret = lp_handle_socket(d);
			} else if (tag - EV_PROC0 < d->nprocs) {
				ret = handle_proc(d, d->procs[tag - EV_PROC0]);
			}
		}
	}
	if (!ret)
		ret = atomic_load(&d->error);
	return ret;
}
