/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_pages.c — thaw's lazy-pages daemon (see lazy_pages.h). *
 * The daemon's run: its settings checked, its socket, epoll set and the
 * restore's images opened, the copy threads started, the restore's tasks
 * received and the event loop run until every process is done or gone, and
 * the summary logged.  Its parts, and the locking between its threads, are
 * in lazy_pages_internal.h.
 */
#define LOG_PREFIX "lazy-pages: "
#include "restore/lazy_pages_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

void lp_set_error(struct lp_daemon *d, int err)
{
	int none = 0;

	atomic_compare_exchange_strong(&d->error, &none, err);
	atomic_store(&d->stop, true);
	pthread_mutex_lock(&d->mu);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

void lp_wake_event_thread(struct lp_daemon *d)
{
	uint64_t one = 1;

	if (write(d->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_perror("eventfd write");
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
	ret = lp_listen_socket(d);
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

		d.copy_sem = slots > 0 ? lp_copy_slots_open(slots) : -1;
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
		ret = -pthread_create(&th[started], NULL, lp_copy_thread, &d);
		if (ret) {
			errno = -ret;
			pr_perror("pthread_create");
			goto out;
		}
	}
	ret = lp_receive_tasks(&d);
	if (!ret)
		ret = lp_event_loop(&d);
out:
	if (ret)
		lp_set_error(&d, ret);
	pthread_mutex_lock(&d.mu);
	atomic_store(&d.stop, true);
	pthread_cond_broadcast(&d.cv);
	pthread_mutex_unlock(&d.mu);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	summary(&d, t0, ret);
	for (size_t i = 0; i < d.nprocs; i++)
		lp_proc_free(d.procs[i]);
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
