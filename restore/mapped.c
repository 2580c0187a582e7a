/* SPDX-License-Identifier: Apache-2.0 */
/* mapped.c — the mapped variant of a snapshot's image; see mapped.h.
 *
 * Which VMAs are mapped, and the pagemap without their pages, are the CRIU
 * image's side: criu/criu_mapped.c.  Here: the memory files, the copy or
 * the windows that fill them, and the image's other rewrites.
 *
 * The rewrite.  A mapped VMA's VmaEntry becomes a private file mapping
 * (criu_img_mm_remap) of a new REG FileEntry appended to files.img, naming
 * /.thaw/<pid>-<addr> on the mount at OCI_MAPPED_DEST with the file's size
 * and mode (CRIU checks both at restore); its pagemap entries are dropped
 * (split where an entry straddles the VMA's ends) and its pages leave the
 * pages file (criu_mapped_pagemap).  CRIU then maps the file and copies
 * nothing.  MAP_ANONYMOUS must go from the flags too: left there, CRIU maps
 * zeroed anonymous memory and reports no error (docs/MAPPED.md).
 *
 * Growth.  A process may mremap() a mapping larger (glibc's realloc of a
 * large block does): an anonymous mapping grows with zero pages, a file
 * mapping with the file's bytes, and past the file's end with SIGBUS.  So
 * every mem file ends in a hole of GROW_SLACK bytes after its VMA: a grown
 * mapping reads zero there, as it would have.  The hole costs nothing until
 * it is read.
 */
#define LOG_PREFIX "mapped: "
#include "restore/mapped.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/util.h"
#include "criu/criu_image.h"
#include "criu/criu_mapped.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HUGE_ALIGN (2ull << 20)
#define GROW_SLACK (64ull << 30)
#define MEM_MODE   0600

struct build {
	const char *image_dir, *out_dir;
	char img[PATH_MAX], mem[PATH_MAX];
	struct criu_mapped_image im;
	uint32_t mnt_id;
	uint8_t *files; /* files.img, growing */
	size_t files_len;
	uint32_t next_id;
	struct mapped_result *res;
	struct mapped_windows *win; /* mapped_build_windows: windows, not a copy */
	size_t maps;		    /* mappings the windows hold so far */
};


int mapped_mount_id(const char *image_dir, uint32_t *mnt_id)
{
	DIR *d = opendir(image_dir);
	struct dirent *de;
	int ret = -ENOENT;

	if (!d) {
		ret = -errno;
		pr_perror("open %s", image_dir);
		return ret;
	}
	while (ret == -ENOENT && (de = readdir(d))) {
		char path[PATH_MAX + 256];
		uint8_t *buf = NULL;
		size_t len;

		if (strncmp(de->d_name, "mountpoints-", 12))
			continue;
		snprintf(path, sizeof(path), "%s/%s", image_dir, de->d_name);
		ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len);
		if (!ret)
			ret = criu_img_mount_id(buf, len, de->d_name, OCI_MAPPED_DEST, mnt_id);
		free(buf);
	}
	closedir(d);
	return ret;
}

/* Choose the VMAs to map (criu_mapped_choose) into the result; 0, or
 * -ENODATA with res->why when there are none. */
static int choose(struct build *b, uint64_t min_bytes)
{
	struct criu_mapped_choice c = { 0 };
	struct mapped_result *res = b->res;
	int ret = criu_mapped_choose(&b->im, min_bytes, &c, res->why, sizeof(res->why));

	res->vmas = c.vmas;
	res->processes = c.processes;
	res->vmas_shared = c.vmas_shared;
	res->mapped_bytes = c.mapped_bytes;
	return ret;
}

/* The mount the memory files are on, from the image's mountpoints. */
static int find_mount(struct build *b)
{
	int ret = mapped_mount_id(b->image_dir, &b->mnt_id);

	if (ret == -ENOENT)
		snprintf(b->res->why, sizeof(b->res->why),
			 "the snapshot has no %s mount (it was taken before mapped restore)",
			 OCI_MAPPED_DEST);
	return ret;
}

/* --- The copy ----------------------------------------------------------------
 *
 * A process's pages leave its pages file for its memory files and its new
 * pages file in one copy, planned while the pagemap is rewritten and run by
 * several threads once it is.
 *
 * Who copies what.  A thread takes a whole file and writes all of it, the
 * largest file first.  Splitting a file between threads gains nothing: tmpfs
 * holds a file's inode lock across each write, copy and page allocation
 * included, so threads writing one file take turns.  Two threads copying the
 * same files cut into 8 MiB pieces kept 0.99 CPUs busy, no faster than one;
 * 16 engine workers writing one file spun 17.9 CPU-s on that lock
 * (bench/LOG.md).  Whole files, two threads ran 1.9x one with 4 KiB pages,
 * 1.6x with huge pages.  The largest file bounds the copy, so it starts
 * first rather than last.
 *
 * How.  copy_file_range: tmpfs has no copy of its own, so the kernel splices
 * the pages file's page-cache pages into the write: one copy, where
 * pread/pwrite make two.  One thread, 2.15 GB in 61 VMAs of a synthetic
 * image, best of 7 interleaved, dev VM (2 cores, AMD EPYC):
 *
 *	                                           /dev/shm   huge=within_size
 *	pread/pwrite, 8 MiB malloc()ed (the old)    1.27 s     0.52 s
 *	pread/pwrite, 2 MiB page-aligned             1.09 s     0.26 s
 *	pwrite from a mapping of the pages file      1.15 s     0.26 s
 *	copy_file_range                              1.00 s     0.27 s
 *
 * (pread into a mapping of the memory file was slowest on both: every page
 * faulted in and zeroed before the copy.)  Into huge pages, as the tier's own
 * mount has them, all that is page-aligned runs alike; with 4 KiB pages
 * copy_file_range is 9% ahead.  The old copy lost most to alignment, not to
 * the method: malloc() put its buffer 16 bytes into a page, so every copy in
 * and out of it ran misaligned (page-aligned, the same loop took 1.13 and
 * 0.27 s).  So: copy_file_range, and a page-aligned buffer where it refuses
 * (another filesystem).
 */

/* Threads: one per CPU, as the copy is CPU work in the kernel (page
 * allocation, memcpy), no more than there are files, and up to 16: past that
 * memory bandwidth rather than CPUs bounds it (16 engine workers copied 17-22
 * GB/s on the 16-core H100 VM, bench/LOG.md), and thawd's other starts need
 * CPUs meanwhile. */
#define COPY_MAX_THREADS 16
#define COPY_BUF	 HUGE_ALIGN /* the fallback's buffer, per thread */
/* A file with at least COPY_SPLIT bytes to copy is cut into slices of
 * COPY_SLICE that several threads copy at once through shared mappings of
 * the pages file and of the memory file: page faults do not take the inode
 * lock that serialises writes.  The GPU example's image is mostly one VMA
 * (the CUDA checkpoint's host copy of the GPU state): whole files, its copy
 * was one thread's, 1.0 s of its 2.7 s disk-tier materialisation on the
 * H200 VM (bench/LOG.md). */
#define COPY_SPLIT	 (256ull << 20)
#define COPY_SLICE	 (32ull << 20)
/* Below this many threads a split does not pay: through a mapping each
 * 4 KiB page is zeroed at its fault, then copied, so one thread copies at
 * about half the speed of copy_file_range (2 cores, 1.1 GB: 0.65 s split
 * in two against 0.33 s whole). */
#define COPY_SPLIT_THREADS 4

/* len bytes of the pages file at ioff go to ooff in the destination. */
struct piece {
	uint64_t ioff, ooff, len;
};

/* A file the copy writes, and its pieces in order. */
struct dest {
	int fd;
	struct piece *p;
	size_t n, cap;
	uint64_t bytes;
	uint8_t *map; /* split: the file mapped shared (map_len bytes); NULL: copied whole */
	size_t map_len;
};

/* What a thread takes: a whole file, or a slice of a split one. */
struct work {
	size_t dest;
	bool slice;
	struct piece p; /* the slice */
	uint64_t bytes;
};

struct copy {
	int in; /* the pages file */
	const uint8_t *in_map; /* mapped, where a file is split; in_len bytes */
	size_t in_len;
	struct dest *d;
	size_t nd;
	struct work *w; /* whole files and slices, largest first */
	size_t nw, wcap;
	atomic_size_t next;   /* the next of w to take */
	atomic_bool no_range; /* copy_file_range refused: a buffer it is */
	bool alloc;	      /* windows: allocate the destinations' pieces, copy nothing ... */
	uintptr_t window;     /* ... but those that the window maps at an address that agrees
			       * with their file offset modulo 2 MiB (the window's address) */
	atomic_int err;	      /* the first failure, -errno ... */
	char why[256];	      /* ... and its words, logged once all threads are done */
};

/* c: zeroed; copy_release() it whatever this returns. */
static int copy_init(struct copy *c, int in, size_t nd)
{
	c->in = in;
	c->nd = nd;
	c->d = calloc(nd, sizeof(*c->d));
	return c->d ? 0 : -ENOMEM;
}

static void copy_release(struct copy *c)
{
	for (size_t i = 0; c->d && i < c->nd; i++) {
		free(c->d[i].p);
		if (c->d[i].map)
			munmap(c->d[i].map, c->d[i].map_len);
	}
	if (c->in_map)
		munmap((void *)c->in_map, c->in_len);
	free(c->d);
	free(c->w);
}

/* Plan the copy of len bytes of the pages file at ioff to fd at ooff, as
 * destination i of c; one piece with the last if it follows on. */
static int copy_add(struct copy *c, size_t i, int fd, uint64_t ioff, uint64_t ooff, uint64_t len)
{
	struct dest *d = &c->d[i];
	struct piece *last = d->n ? &d->p[d->n - 1] : NULL;

	d->fd = fd;
	d->bytes += len;
	if (last && last->ioff + last->len == ioff && last->ooff + last->len == ooff) {
		last->len += len;
		return 0;
	}
	if (ARRAY_GROW(d->p, d->cap, d->n + 1, 16))
		return -ENOMEM;
	d->p[d->n++] = (struct piece){ ioff, ooff, len };
	return 0;
}

/* Record the copy's first failure (those after it are its consequences);
 * returns err. */
static int copy_fail(struct copy *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int copy_fail(struct copy *c, int err, const char *fmt, ...)
{
	int none = 0;
	va_list ap;

	if (atomic_compare_exchange_strong(&c->err, &none, err)) {
		va_start(ap, fmt);
		vsnprintf(c->why, sizeof(c->why), fmt, ap);
		va_end(ap);
	}
	return err;
}

static int ends_early(struct copy *c, uint64_t ioff)
{
	return copy_fail(c, -EIO, "read of the pages file at %llu: it ends early",
			 (unsigned long long)ioff);
}

/* A piece with copy_file_range, from *done on; -EXDEV (not recorded) where
 * it cannot copy between these files, *done saying how far it got. */
static int copy_range(struct copy *c, int fd, const struct piece *p, uint64_t *done)
{
	while (*done < p->len) {
		loff_t in_off = (loff_t)(p->ioff + *done), out_off = (loff_t)(p->ooff + *done);
		ssize_t r = copy_file_range(c->in, &in_off, fd, &out_off, p->len - *done, 0);

		if (r < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
			      errno == ENOSYS)) {
			if (!atomic_exchange(&c->no_range, true))
				pr_debug("copy_file_range: %s: copying through a buffer",
					 strerror(errno));
			return -EXDEV;
		}
		if (r < 0)
			return copy_fail(c, -errno, "copy from the pages file at %llu: %s",
					 (unsigned long long)(p->ioff + *done), strerror(errno));
		if (r == 0)
			return ends_early(c, p->ioff + *done);
		*done += (uint64_t)r;
	}
	return 0;
}

/* A piece through buf (COPY_BUF bytes, page-aligned), from done on. */
static int copy_buffered(struct copy *c, int fd, const struct piece *p, uint64_t done,
			 uint8_t *buf)
{
	while (done < p->len) {
		size_t n = (size_t)MIN(p->len - done, (uint64_t)COPY_BUF);
		ssize_t r = pread(c->in, buf, n, (off_t)(p->ioff + done)), w;

		if (r < 0)
			return copy_fail(c, -errno, "read of the pages file at %llu: %s",
					 (unsigned long long)(p->ioff + done), strerror(errno));
		if (r == 0)
			return ends_early(c, p->ioff + done);
		w = pwrite(fd, buf, (size_t)r, (off_t)(p->ooff + done));
		if (w != r)
			return copy_fail(c, w < 0 ? -errno : -EIO, "write of a memory file: %s",
					 w < 0 ? strerror(errno) : "short");
		done += (uint64_t)r;
	}
	return 0;
}

/* One piece; *buf: this thread's buffer, allocated when first needed. */
static int copy_piece(struct copy *c, int fd, const struct piece *p, uint8_t **buf)
{
	uint64_t done = 0;

	if (!atomic_load(&c->no_range)) {
		int ret = copy_range(c, fd, p, &done);

		if (ret != -EXDEV)
			return ret;
	}
	if (!*buf && posix_memalign((void **)buf, CRIU_PAGE_SIZE, COPY_BUF)) {
		*buf = NULL;
		return copy_fail(c, -ENOMEM, "no memory for a copy buffer");
	}
	return copy_buffered(c, fd, p, done, *buf);
}

/* A slice of a split file, from the pages file's mapping into the memory
 * file's: its pages populated first in one call, so that a full tmpfs is
 * an error here (ENOSPC) and never a SIGBUS in the memcpy.  Where populating
 * is not known (before Linux 5.14), the slice is copied as a piece. */
static int copy_slice(struct copy *c, const struct dest *d, const struct piece *p, uint8_t **buf)
{
	uint8_t *to = d->map + p->ooff;
	int ret;

	if (p->ioff + p->len > c->in_len)
		return ends_early(c, c->in_len);
	if (p->ooff + p->len > d->map_len)
		return copy_fail(c, -EIO, "memory file: a page at %llu beyond its end",
				 (unsigned long long)(p->ooff + p->len));
	ret = populate_write(to, p->len);
	if (ret == -EINVAL)
		return copy_piece(c, d->fd, p, buf);
	if (ret)
		return copy_fail(c, ret, "memory file at %llu: %s", (unsigned long long)p->ooff,
				 strerror(-ret));
	memcpy(to, c->in_map + p->ioff, p->len);
	return 0;
}

/* A window's piece of a file on a huge-page tmpfs, allocated before it is
 * written: tmpfs gives a page fault a huge page only where the mapping's
 * address and the file offset agree modulo 2 MiB, which a window can make
 * true of one piece in 512 (make_window picks the largest), while
 * fallocate() allocates huge pages whatever maps them.  Without it the
 * other pieces' memory files would be 4 KiB pages that no instance maps
 * with 2 MiB ones.  The pages are cleared at their first fault, as they
 * would have been. */
static int alloc_piece(struct copy *c, int fd, const struct piece *p)
{
	if ((c->window + p->ioff - p->ooff) % HUGE_ALIGN == 0)
		return 0; /* its faults get huge pages: the window placed it so */
	if (fallocate(fd, 0, (off_t)p->ooff, (off_t)p->len) == 0)
		return 0;
	return copy_fail(c, -errno, "allocate %llu bytes of a memory file at %llu: %s",
			 (unsigned long long)p->len, (unsigned long long)p->ooff, strerror(errno));
}

/* A copy thread: whole files and slices, the largest left first, until none
 * is left or a copy failed. */
static void *copy_thread(void *arg)
{
	struct copy *c = arg;
	uint8_t *buf = NULL;
	size_t t;

	while (!atomic_load(&c->err) && (t = atomic_fetch_add(&c->next, 1)) < c->nw) {
		const struct work *w = &c->w[t];
		const struct dest *d = &c->d[w->dest];

		if (w->slice) {
			copy_slice(c, d, &w->p, &buf);
			continue;
		}
		for (size_t k = 0; k < d->n; k++)
			if (c->alloc ? alloc_piece(c, d->fd, &d->p[k]) : copy_piece(c, d->fd, &d->p[k], &buf))
				break;
	}
	free(buf);
	return NULL;
}

static int larger_first(const void *a, const void *b)
{
	uint64_t x = ((const struct work *)a)->bytes, y = ((const struct work *)b)->bytes;

	return x < y ? 1 : x > y ? -1 : 0;
}

static int add_work(struct copy *c, struct work w)
{
	if (ARRAY_GROW(c->w, c->wcap, c->nw + 1, 64))
		return -ENOMEM;
	c->w[c->nw++] = w;
	return 0;
}

/* Map d (and the pages file, once) for slices; false: copy it whole. */
static bool map_for_slices(struct copy *c, struct dest *d)
{
	struct stat st;
	void *m;

	if (!c->in_map) {
		if (fstat(c->in, &st) < 0 || !st.st_size)
			return false;
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, c->in, 0);
		if (m == MAP_FAILED)
			return false;
		c->in_map = m;
		c->in_len = (size_t)st.st_size;
	}
	if (fstat(d->fd, &st) < 0 || !st.st_size)
		return false;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd, 0);
	if (m == MAP_FAILED)
		return false;
	d->map = m;
	d->map_len = (size_t)st.st_size;
	return true;
}

/* The work list: each file whole, or cut into slices where it is large
 * and more than its share of threads threads' work (whole files keep
 * threads busy otherwise, and a copy through mappings costs a thread more:
 * each page is zeroed at its fault, then copied). */
static int plan_work(struct copy *c, size_t threads)
{
	uint64_t total = 0;

	for (size_t i = 0; i < c->nd; i++)
		total += c->d[i].bytes;
	for (size_t i = 0; i < c->nd; i++) {
		struct dest *d = &c->d[i];
		int ret = 0;

		if (!d->n)
			continue;
		if (c->alloc || d->bytes < COPY_SPLIT || d->bytes * threads <= total ||
		    threads < COPY_SPLIT_THREADS || !map_for_slices(c, d)) {
			ret = add_work(c, (struct work){ .dest = i, .bytes = d->bytes });
			if (ret)
				return ret;
			continue;
		}
		for (size_t k = 0; k < d->n && !ret; k++)
			for (uint64_t at = 0; at < d->p[k].len && !ret; at += COPY_SLICE) {
				uint64_t len = MIN(COPY_SLICE, d->p[k].len - at);

				ret = add_work(c, (struct work){
							  .dest = i,
							  .slice = true,
							  .p = { d->p[k].ioff + at, d->p[k].ooff + at, len },
							  .bytes = len });
			}
		if (ret)
			return ret;
	}
	qsort(c->w, c->nw, sizeof(*c->w), larger_first);
	return 0;
}

/* Run the planned copy on this thread and the others it starts.  0 or -errno
 * (logged once, here, on the caller's thread). */
static int copy_run(struct copy *c)
{
	pthread_t th[COPY_MAX_THREADS - 1];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t threads = MIN((size_t)MAX(cpus, 1L), (size_t)COPY_MAX_THREADS), want, started = 0;
	int ret = plan_work(c, threads);

	if (ret)
		return ret;
	want = MIN(threads, c->nw);
	for (; started + 1 < want; started++) {
		int err = pthread_create(&th[started], NULL, copy_thread, c);

		if (err) { /* fewer threads: slower, not wrong */
			pr_debug("copying with %zu threads, not %zu: %s", started + 1, want,
				 strerror(err));
			break;
		}
	}
	copy_thread(c);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (atomic_load(&c->err))
		pr_err("%s", c->why);
	return atomic_load(&c->err);
}

/* --- Windows ------------------------------------------------------------------
 *
 * Where the pages files are still to be written (the RAM tier's build), the
 * copy is planned as above and not run: the pages file gets a window, one
 * range of addresses in which each piece of the plan is a shared mapping
 * of its destination at its offset.  Byte i of the window is where byte i of
 * the pages file belongs, so whoever writes the pages file's bytes into the
 * window (the engine, the fetch) writes them once, into the memory files.
 * Pieces are whole pages at both ends: a pages file holds whole pages.
 */

/* Are c's destinations on a huge-page tmpfs (st_blksize says so)? */
static bool huge_pages(const struct copy *c)
{
	struct stat st;

	for (size_t i = 0; i < c->nd; i++)
		if (c->d[i].n)
			return fstat(c->d[i].fd, &st) == 0 && st.st_blksize >= (blksize_t)HUGE_ALIGN;
	return false;
}

static int cmp_piece(const void *a, const void *b)
{
	uint64_t x = ((const struct mapped_piece *)a)->ioff, y = ((const struct mapped_piece *)b)->ioff;

	return x < y ? -1 : x > y;
}

/* The window's pieces by ioff, each with a descriptor of its own. */
static int window_pieces(struct mapped_window *w, const struct copy *c)
{
	size_t pieces = 0;

	for (size_t i = 0; i < c->nd; i++)
		pieces += c->d[i].n;
	w->np = w->nfds = 0;
	w->p = malloc(MAX(pieces, (size_t)1) * sizeof(*w->p));
	w->fds = malloc(MAX(c->nd, (size_t)1) * sizeof(*w->fds));
	if (!w->p || !w->fds)
		return -ENOMEM;
	for (size_t i = 0; i < c->nd; i++) {
		int fd;

		if (!c->d[i].n)
			continue;
		fd = fcntl(c->d[i].fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		w->fds[w->nfds++] = fd;
		for (size_t k = 0; k < c->d[i].n; k++)
			w->p[w->np++] = (struct mapped_piece){ c->d[i].p[k].ioff, c->d[i].p[k].len, fd,
							       c->d[i].p[k].ooff };
	}
	qsort(w->p, w->np, sizeof(*w->p), cmp_piece);
	return 0;
}

int mapped_window_pwrite(const struct mapped_window *w, const void *buf, size_t len, uint64_t off)
{
	size_t lo = 0, hi = w->np;

	while (lo < hi) { /* the first piece that ends after off */
		size_t mid = lo + (hi - lo) / 2;

		if (w->p[mid].ioff + w->p[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (len) {
		const struct mapped_piece *p = &w->p[lo];
		uint64_t at, n;
		int ret;

		if (lo == w->np || p->ioff > off)
			return -EFAULT; /* the pieces cover the whole pages file */
		at = off - p->ioff;
		n = MIN((uint64_t)len, p->len - at);
		ret = pwrite_all(p->fd, buf, (size_t)n, (off_t)(p->ooff + at));
		if (ret)
			return ret;
		buf = (const uint8_t *)buf + n;
		off += n;
		len -= (size_t)n;
		lo++;
	}
	return 0;
}

/* Where in 2 MiB the window starts so that its largest piece's addresses
 * and file offsets agree modulo 2 MiB. */
static uint64_t largest_shift(const struct mapped_window *w)
{
	const struct mapped_piece *big = NULL;

	for (size_t k = 0; k < w->np; k++)
		if (!big || w->p[k].len > big->len)
			big = &w->p[k];
	return big ? (big->ooff - big->ioff) % HUGE_ALIGN : 0;
}

/* Pages file name of len bytes (holes; in: open on it) gets its window. */
static int make_window(struct build *b, struct copy *c, int in, const char *name)
{
	struct mapped_windows *win = b->win;
	struct mapped_window *w;
	const struct mapped_piece *last;
	struct stat st;
	uint8_t *base;
	int ret;

	if (fstat(in, &st) < 0)
		return -errno;
	w = realloc(win->w, (win->n + 1) * sizeof(*w));
	if (!w)
		return -ENOMEM;
	win->w = w;
	w = &win->w[win->n++]; /* mapped_windows_release frees what it holds */
	memset(w, 0, sizeof(*w));
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->len = (uint64_t)st.st_size;
	ret = window_pieces(w, c);
	if (ret)
		return ret;
	if (b->maps + w->np > MAPPED_WINDOW_MAX_MAPS) {
		snprintf(b->res->why, sizeof(b->res->why),
			 "its pages lie in more than %u pieces", MAPPED_WINDOW_MAX_MAPS);
		return -E2BIG;
	}
	last = w->np ? &w->p[w->np - 1] : NULL; /* they do not overlap: it ends last */
	if (last && last->ioff + last->len > w->len) {
		pr_err("%s: the pagemap names %llu bytes of pages, the file holds %llu", name,
		       (unsigned long long)(last->ioff + last->len), (unsigned long long)w->len);
		return -EBADMSG;
	}
	if (!w->len) { /* no pages at all: nothing to write, no window */
		free(w->p);
		free(w->fds);
		win->n--;
		return 0;
	}
	/* Placed so that the largest piece's addresses agree with its file
	 * offsets modulo 2 MiB: on a huge-page tmpfs its faults then map (and
	 * allocate) 2 MiB pages, one fault each instead of 512. */
	w->resv_len = w->len + 2 * HUGE_ALIGN;
	w->resv = mmap(NULL, w->resv_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (w->resv == MAP_FAILED) {
		w->resv = NULL;
		return -errno;
	}
	base = (uint8_t *)ALIGN_UP((uintptr_t)w->resv, HUGE_ALIGN) + largest_shift(w);
	w->addr = base;
	c->window = (uintptr_t)base;
	for (size_t k = 0; k < w->np; k++) {
		const struct mapped_piece *p = &w->p[k];

		if (mmap(base + p->ioff, p->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd,
			 (off_t)p->ooff) == MAP_FAILED) {
			ret = -errno;
			pr_perror("map a piece of %s", name);
			return ret;
		}
	}
	b->maps += w->np;
	w->huge = huge_pages(c);
	if (w->huge) {
		c->alloc = true;
		ret = copy_run(c);
		if (ret)
			return ret;
	}
	/* Writers populate the window before they touch it (a full tmpfs is
	 * then ENOSPC, not SIGBUS); where the kernel cannot, no window. */
	ret = populate_write(base, CRIU_PAGE_SIZE);
	if (ret == -EINVAL)
		snprintf(b->res->why, sizeof(b->res->why),
			 "this kernel cannot populate mappings (MADV_POPULATE_WRITE)");
	return ret;
}

void mapped_windows_release(struct mapped_windows *win)
{
	for (size_t i = 0; win->w && i < win->n; i++) {
		if (win->w[i].resv)
			munmap(win->w[i].resv, win->w[i].resv_len);
		for (size_t k = 0; k < win->w[i].nfds; k++)
			close(win->w[i].fds[k]);
		free(win->w[i].fds);
		free(win->w[i].p);
	}
	free(win->w);
	memset(win, 0, sizeof(*win));
}

const struct mapped_window *mapped_window_of(const struct mapped_windows *win, const char *name)
{
	for (size_t i = 0; i < win->n; i++)
		if (!strcmp(win->w[i].name, name))
			return &win->w[i];
	return NULL;
}

static int write_whole(const char *path, const uint8_t *buf, size_t len)
{
	return write_file_atomic(path, (const char *)buf, len, 0600);
}

/* --- One process's rewrite ---------------------------------------------------
 *
 * A process with mapped VMAs gets, in this order: a memory file per mapped
 * VMA (and its FileEntry in files.img), the plan of where each run of its
 * pages goes (criu_mapped_pagemap), the pages put there (a window, or the
 * copy), then its new pagemap and mm.
 */

/* What one process's rewrite opened and made so far. */
struct proc_rewrite {
	const struct criu_mapped_proc *p;
	int *mem_fd;		       /* per VMA: its memory file, or -1 */
	uint64_t *base;		       /* per VMA: the address byte 0 of its memory file holds */
	struct criu_img_vma_remap *rm; /* the VMAs for criu_img_mm_remap, nrm of them */
	size_t nrm;
	int in, out; /* the pages file, and the new one in image/ */
	struct copy c;
	struct criu_img_pagemap npm; /* the new pagemap */
	uint64_t kept;		     /* bytes of the new pages file */
};

static int proc_rewrite_init(struct proc_rewrite *r, const struct criu_mapped_proc *p)
{
	memset(r, 0, sizeof(*r));
	r->p = p;
	r->in = r->out = -1;
	r->mem_fd = malloc(p->mm.nvmas * sizeof(*r->mem_fd));
	for (size_t k = 0; r->mem_fd && k < p->mm.nvmas; k++)
		r->mem_fd[k] = -1;
	r->base = calloc(p->mm.nvmas, sizeof(*r->base));
	r->rm = calloc(p->mm.nvmas, sizeof(*r->rm));
	return r->mem_fd && r->base && r->rm ? 0 : -ENOMEM;
}

static void proc_rewrite_release(struct proc_rewrite *r)
{
	copy_release(&r->c);
	for (size_t k = 0; r->mem_fd && k < r->p->mm.nvmas; k++)
		if (r->mem_fd[k] >= 0)
			close(r->mem_fd[k]);
	if (r->in >= 0)
		close(r->in);
	if (r->out >= 0)
		close(r->out);
	criu_img_pagemap_release(&r->npm);
	free(r->mem_fd);
	free(r->base);
	free(r->rm);
}

/* Mapped VMA k's memory file (holes, its size GROW_SLACK past the VMA) and
 * the FileEntry that names it where the restored process sees it. */
static int make_mem_file(struct build *b, struct proc_rewrite *r, size_t k)
{
	const struct criu_img_vma *v = &r->p->mm.vmas[k];
	char name[64], inner[128], path[PATH_MAX + 64];
	uint64_t size;
	struct stat st;
	int fd, ret;

	r->base[k] = v->start & ~(HUGE_ALIGN - 1);
	size = v->end - r->base[k] + GROW_SLACK;
	snprintf(name, sizeof(name), "%u-%llx", r->p->pid, (unsigned long long)v->start);
	snprintf(path, sizeof(path), "%s/%s", b->mem, name);
	fd = r->mem_fd[k] = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, MEM_MODE);
	if (fd < 0 || fchmod(fd, MEM_MODE) || ftruncate(fd, (off_t)size) || fstat(fd, &st)) {
		ret = -errno;
		pr_perror("memory file %s", path);
		return ret;
	}
	snprintf(inner, sizeof(inner), "%s/%s", OCI_MAPPED_DEST, name);
	r->rm[r->nrm] = (struct criu_img_vma_remap){ v->start, b->next_id, v->start - r->base[k] };
	ret = criu_img_files_append_reg(&b->files, &b->files_len, b->next_id, inner,
					(int32_t)b->mnt_id, size, st.st_mode);
	if (ret)
		return ret;
	b->next_id++;
	r->nrm++;
	return 0;
}

static int make_mem_files(struct build *b, struct proc_rewrite *r)
{
	for (size_t k = 0; k < r->p->mm.nvmas; k++) {
		int ret = r->p->map[k] ? make_mem_file(b, r, k) : 0;

		if (ret)
			return ret;
	}
	return 0;
}

/* Open the pages file and create the new one; the copy's destinations are
 * VMA k's memory file as k, the new pages file as the last. */
static int open_pages(struct build *b, struct proc_rewrite *r)
{
	char path[PATH_MAX + 64];
	int ret;

	snprintf(path, sizeof(path), "%s/pages-%u.img", b->image_dir, r->p->pm.pages_id);
	r->in = open(path, O_RDONLY | O_CLOEXEC);
	if (r->in < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
	ret = copy_init(&r->c, r->in, r->p->mm.nvmas + 1);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/pages-%u.img", b->img, r->p->pm.pages_id);
	r->out = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600); /* RDWR: a window maps it */
	if (r->out < 0) {
		ret = -errno;
		pr_perror("create %s", path);
		return ret;
	}
	return 0;
}

/* criu_mapped_pagemap's runs, planned as pieces of the copy. */
static int plan_run(void *arg, long vma, uint64_t ioff, uint64_t off, uint64_t len)
{
	struct proc_rewrite *r = arg;

	if (vma >= 0)
		return copy_add(&r->c, (size_t)vma, r->mem_fd[vma], ioff, off, len);
	return copy_add(&r->c, r->p->mm.nvmas, r->out, ioff, off, len);
}

/* The new pagemap, and the plan of where the pages go. */
static int plan_pages(struct build *b, struct proc_rewrite *r)
{
	int ret = criu_mapped_pagemap(r->p, r->base, plan_run, r, &r->npm, &r->kept);

	if (!ret)
		b->res->kept_bytes += r->kept;
	return ret;
}

/* The pages where the plan puts them: copied now, or a window to write
 * them through (the new pages file made its size first: it is a hole). */
static int place_pages(struct build *b, struct proc_rewrite *r)
{
	char name[64];

	if (!b->win)
		return copy_run(&r->c);
	snprintf(name, sizeof(name), "pages-%u.img", r->p->pm.pages_id);
	if (ftruncate(r->out, (off_t)r->kept) < 0)
		return -errno;
	return make_window(b, &r->c, r->in, name);
}

static int write_pagemap(struct build *b, struct proc_rewrite *r)
{
	char path[PATH_MAX + 64];
	uint8_t *buf = NULL;
	size_t len;
	int ret;

	ret = criu_img_encode_pagemap(&r->npm, &buf, &len);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/pagemap-%u.img", b->img, r->p->pid);
	ret = write_whole(path, buf, len);
	free(buf);
	return ret;
}

/* The mm image with the mapped VMAs as private mappings of their files. */
static int write_mm(struct build *b, struct proc_rewrite *r)
{
	char name[64], path[PATH_MAX + 64];
	uint8_t *mm = NULL, *nmm = NULL;
	size_t mlen, nlen;
	int ret;

	snprintf(name, sizeof(name), "mm-%u.img", r->p->pid);
	ret = criu_img_read_in(b->image_dir, name, &mm, &mlen);
	if (!ret)
		ret = criu_img_mm_remap(mm, mlen, name, r->rm, r->nrm, &nmm, &nlen);
	free(mm);
	if (!ret) {
		snprintf(path, sizeof(path), "%s/%s", b->img, name);
		ret = write_whole(path, nmm, nlen);
	}
	free(nmm);
	return ret;
}

/* One process with mapped VMAs: its memory files, pages, pagemap and mm. */
static int rewrite_proc(struct build *b, const struct criu_mapped_proc *p)
{
	struct proc_rewrite r;
	int ret = proc_rewrite_init(&r, p);

	if (!ret)
		ret = make_mem_files(b, &r);
	if (!ret)
		ret = open_pages(b, &r);
	if (!ret)
		ret = plan_pages(b, &r);
	if (!ret)
		ret = place_pages(b, &r);
	if (!ret) {
		b->res->new_bytes += r.kept;
		ret = write_pagemap(b, &r);
	}
	if (!ret)
		ret = write_mm(b, &r);
	proc_rewrite_release(&r);
	return ret;
}

/* Every file of the original that the rewrite left alone, hard-linked. */
static int link_rest(struct build *b)
{
	DIR *d = opendir(b->image_dir);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		ret = -errno;
		pr_perror("open %s", b->image_dir);
		return ret;
	}
	while (!ret && (de = readdir(d))) {
		char from[PATH_MAX + 256], to[PATH_MAX + 256];
		struct stat st;

		snprintf(from, sizeof(from), "%s/%s", b->image_dir, de->d_name);
		if (de->d_name[0] == '.' || lstat(from, &st) || !S_ISREG(st.st_mode) ||
		    criu_mapped_rewritten(&b->im, de->d_name))
			continue;
		snprintf(to, sizeof(to), "%s/%s", b->img, de->d_name);
		if (link(from, to) < 0) {
			ret = -errno;
			pr_perror("link %s to %s", from, to);
		}
	}
	closedir(d);
	return ret;
}

static void free_build(struct build *b)
{
	criu_mapped_release(&b->im);
	free(b->files);
}

static int build_mapped(const char *image_dir, const char *out_dir, uint64_t min_bytes,
			struct mapped_result *res, struct mapped_windows *win)
{
	struct build b = { .image_dir = image_dir, .out_dir = out_dir, .res = res, .win = win };
	char path[PATH_MAX + 64];
	bool made = false;
	uint32_t max_id;
	int ret;

	memset(res, 0, sizeof(*res));
	if (!min_bytes)
		min_bytes = MAPPED_MIN_BYTES_DEFAULT;
	if (snprintf(b.img, sizeof(b.img), "%s/image", out_dir) >= (int)sizeof(b.img) ||
	    snprintf(b.mem, sizeof(b.mem), "%s/mem", out_dir) >= (int)sizeof(b.mem))
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/pstree.img", image_dir);
	if (access(path, F_OK)) {
		snprintf(res->why, sizeof(res->why), "not a CRIU image (no pstree.img)");
		return 0;
	}
	ret = criu_mapped_load(image_dir, &b.im);
	if (ret)
		goto out;
	ret = find_mount(&b);
	if (!ret)
		ret = choose(&b, min_bytes);
	if (ret == -ENOENT || ret == -ENODATA) {
		res->vmas = 0;
		ret = 0;
		goto out;
	}
	if (ret)
		goto out;
	snprintf(path, sizeof(path), "%s/files.img", image_dir);
	ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &b.files, &b.files_len);
	if (!ret)
		ret = criu_img_files_max_id(b.files, b.files_len, "files.img", &max_id);
	if (ret)
		goto out;
	b.next_id = max_id + 1;
	if (mkdir(out_dir, 0700) < 0) {
		ret = -errno;
		pr_perror("mkdir %s", out_dir);
		goto out;
	}
	made = true;
	if (mkdir(b.img, 0700) < 0 || mkdir(b.mem, 0700) < 0) {
		ret = -errno;
		pr_perror("mkdir under %s", out_dir);
		goto out;
	}
	for (size_t i = 0; i < b.im.nprocs && !ret; i++)
		if (criu_mapped_proc_any(&b.im.procs[i]))
			ret = rewrite_proc(&b, &b.im.procs[i]);
	if (ret)
		goto out;
	snprintf(path, sizeof(path), "%s/files.img", b.img);
	ret = write_whole(path, b.files, b.files_len);
	if (!ret)
		ret = link_rest(&b);
	if (!ret) {
		res->new_bytes += res->mapped_bytes + b.files_len;
		pr_info("%s: %u VMAs of %u processes mapped (%llu MiB), %llu MiB left to copy",
			image_dir, res->vmas, res->processes,
			(unsigned long long)(res->mapped_bytes >> 20),
			(unsigned long long)(res->kept_bytes >> 20));
	}
out:
	if (ret && win)
		mapped_windows_release(win);
	if (ret && made)
		rm_rf(out_dir);
	if (ret) {
		if (!win || !res->why[0])
			snprintf(res->why, sizeof(res->why), "building the mapped image failed: %s",
				 strerror(-ret));
		res->vmas = 0;
	}
	free_build(&b);
	return ret;
}

int mapped_build(const char *image_dir, const char *out_dir, uint64_t min_bytes,
		 struct mapped_result *res)
{
	return build_mapped(image_dir, out_dir, min_bytes, res, NULL);
}

int mapped_build_windows(const char *image_dir, const char *out_dir, uint64_t min_bytes,
			 struct mapped_result *res, struct mapped_windows *win)
{
	memset(win, 0, sizeof(*win));
	return build_mapped(image_dir, out_dir, min_bytes, res, win);
}
