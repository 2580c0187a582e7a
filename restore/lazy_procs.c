/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_procs.c — the processes the lazy-pages daemon serves
 * (lazy_pages_internal.h): each restored task's uffd, received over the
 * restore's socket as criu lazy-pages receives them, and its page map
 * (which pages of which image go where, in blocks) loaded from the
 * restore's images; a forked child's is made by the event thread.
 */
#define LOG_PREFIX "lazy-pages: "
#include "restore/lazy_pages_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- processes ---- */

int lp_proc_add(struct lp_daemon *d, struct lp_proc *p)
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

struct lp_proc *lp_proc_new(int pid, int uffd)
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

void lp_proc_free(struct lp_proc *p)
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

void lp_proc_count(struct lp_proc *p)
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
	lp_proc_count(p);
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

int lp_listen_socket(struct lp_daemon *d)
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
int lp_receive_tasks(struct lp_daemon *d)
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
		p = lp_proc_new(pid, uffd);
		if (!p) {
			close(uffd);
			return -ENOMEM;
		}
		ret = proc_load(d, p);
		if (!ret)
			ret = lp_proc_add(d, p);
		if (ret) {
			lp_proc_free(p);
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
int lp_handle_socket(struct lp_daemon *d)
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
