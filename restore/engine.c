/* engine.c — the io_uring restore engine; see engine.h.
 *
 * One submitting thread (the caller) queues, for each distinct chunk, an
 * openat into the slot's fixed file linked to a READ_FIXED into the slot's part
 * of the arena (or, where the kernel has no sparse file table, opens the chunk
 * itself); it reaps completions and hands the filled slots to the workers
 * through a ready queue.  Workers decode and check each chunk, write it to every
 * place it occurs (pwrite, or in place in the file's mapping) and give the slot
 * back.  On any error or a cancel the submitter stops queueing, drains what is
 * in flight (the kernel writes into the arena until then) and the workers skip
 * what is left, so the arena is only unmapped when nothing uses it.
 */
#define LOG_PREFIX "engine: "
#include "restore/engine.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_ALIGN     4096u
#define ENGINE_MAX_SLOTS 4096u
#define ENGINE_TICK_NS   50000000ull /* progress and cancel are looked at this often */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; glibc 2.36 headers may lack it */
#endif
/* cachestat(2), Linux 6.5: the same number on every architecture; glibc 2.36
 * and the kernel headers here know neither the call nor its structs. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#define ENGINE_CACHE_SAMPLE   64 /* chunks looked at to judge the page cache */
#define ENGINE_CACHED_PERCENT 50 /* auto: at least this much cached, read buffered */

struct cachestat_range_ {
	uint64_t off, len;
};

struct cachestat_ {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

struct occ { /* one non-hole chunk of the manifest */
	uint32_t file, chunk;
};

struct unit { /* one distinct chunk: read once, written to every occurrence */
	uint32_t first; /* index into order[] */
	uint32_t count; /* occurrences, contiguous in order[] */
};

struct slot {
	uint32_t unit;
	int fd;       /* without ring-opened files: the chunk's fd */
	int res;      /* the read's result */
	int open_res; /* the ring's openat result */
	unsigned pending; /* completions still to come: openat and read, or read */
	uint8_t *buf;
	char *path;   /* the chunk's path, alive until the openat is submitted */
};

#define OP_OPEN (1ull << 32) /* user_data of an openat; a read's is its slot */

struct eng {
	struct store *s;
	const struct manifest *m;
	const char *outdir;
	atomic_bool *cancel;

	struct occ *occ;
	uint32_t *order;
	struct unit *units;
	size_t nocc, nunits;
	int *fds;
	uint8_t **maps; /* each file mapped shared, or NULL: write with pwrite */
	atomic_bool populate; /* MADV_POPULATE_WRITE works here */
	bool mapped;          /* files are written through mappings */

	uint8_t *arena;
	size_t arena_len;
	struct slot *slots;
	unsigned nslots;
	size_t slot_bytes;
	struct io_uring ring;
	bool ring_ok, fixed, direct;
	bool ring_files; /* chunks are opened by the ring into fixed file slots */
	bool async_reads; /* buffered reads go to io-wq, not inline in the submitter */
	char *paths;
	enum engine_direct direct_mode;

	pthread_mutex_t mu;
	pthread_cond_t work_cv, free_cv;
	uint32_t *ready; /* FIFO of slots to decode, nslots entries */
	unsigned rhead, rcount;
	uint32_t *freel; /* stack of free slots */
	unsigned nfree;
	bool finished; /* no more slots will become ready */
	unsigned inflight; /* reads in the ring; the submitting thread's own */

	atomic_bool stop;
	int err;         /* first error, under mu */
	char errmsg[1024];
	_Atomic uint64_t written, read;
};

static const struct manifest_chunk *occ_chunk(const struct eng *e, uint32_t o)
{
	return &e->m->files[e->occ[o].file].chunks[e->occ[o].chunk];
}

static const struct manifest_chunk *unit_chunk(const struct eng *e, const struct unit *u)
{
	return occ_chunk(e, e->order[u->first]);
}

/* Record the first error (the rest are consequences) and make everyone stop. */
static void __attribute__((format(printf, 3, 4))) set_error(struct eng *e, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&e->mu);
	if (!e->err) {
		e->err = err;
		va_start(ap, fmt);
		vsnprintf(e->errmsg, sizeof(e->errmsg), fmt, ap);
		va_end(ap);
	}
	atomic_store(&e->stop, true);
	pthread_cond_broadcast(&e->free_cv);
	pthread_mutex_unlock(&e->mu);
}

void engine_opts_default(struct engine_opts *o)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	memset(o, 0, sizeof(*o));
	o->queue_depth = ENGINE_DEFAULT_QD;
	o->arena_bytes = ENGINE_DEFAULT_ARENA;
	o->threads = n > 0 ? (unsigned)n : 1;
	o->direct = ENGINE_DIRECT_AUTO;
}

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct eng *e = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = memcmp(occ_chunk(e, x)->hash, occ_chunk(e, y)->hash, CHUNK_HASH_LEN);

	if (c)
		return c;
	return x < y ? -1 : x > y;
}

static int cmp_unit(const void *a, const void *b, void *arg)
{
	const struct eng *e = arg;
	uint32_t x = e->order[((const struct unit *)a)->first];
	uint32_t y = e->order[((const struct unit *)b)->first];

	return x < y ? -1 : x > y;
}

/* The work list: distinct chunks, in the order they first occur (so that reads
 * and writes go roughly front to back), each with all its occurrences. */
static int plan(struct eng *e, struct engine_stats *st)
{
	const struct manifest *m = e->m;
	size_t n = 0, i, j;
	uint32_t max_stored = 0;

	for (i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];

		st->logical_bytes += f->size;
		for (j = 0; j < f->nchunks; j++) {
			const struct manifest_chunk *c = &f->chunks[j];

			if (c->zero) {
				st->holes++;
				st->hole_bytes += c->len;
				continue;
			}
			/* The manifest came from disk: a stored size the decoder could
			 * never accept would only overrun a slot. */
			if (c->stored < CHUNK_HEADER_SIZE || c->stored > CHUNK_HEADER_SIZE + c->len ||
			    c->len > CHUNK_MAX_RAW) {
				char id[CHUNK_ID_LEN];
				chunk_id_format(c->hash, id);
				pr_err("chunk %s in %s: stored size %u impossible for %llu bytes", id,
				       f->path, c->stored, (unsigned long long)c->len);
				return -EINVAL;
			}
			max_stored = MAX(max_stored, c->stored);
			n++;
		}
	}
	if (n > UINT32_MAX - 1)
		return -E2BIG;
	st->files = m->nfiles;
	st->chunks = n;
	e->nocc = n;
	e->slot_bytes = ALIGN_UP((size_t)MAX(max_stored, 1u), ENGINE_ALIGN);
	if (!n)
		return 0;
	e->occ = malloc(n * sizeof(*e->occ));
	e->order = malloc(n * sizeof(*e->order));
	e->units = malloc(n * sizeof(*e->units));
	if (!e->occ || !e->order || !e->units)
		return -ENOMEM;
	n = 0;
	for (i = 0; i < m->nfiles; i++)
		for (j = 0; j < m->files[i].nchunks; j++)
			if (!m->files[i].chunks[j].zero) {
				e->occ[n].file = (uint32_t)i;
				e->occ[n].chunk = (uint32_t)j;
				e->order[n] = (uint32_t)n;
				n++;
			}
	qsort_r(e->order, n, sizeof(*e->order), cmp_order, e);
	for (i = 0; i < n; i = j) {
		const uint8_t *h = occ_chunk(e, e->order[i])->hash;

		for (j = i + 1; j < n && !memcmp(occ_chunk(e, e->order[j])->hash, h, CHUNK_HASH_LEN); j++)
			;
		e->units[e->nunits].first = (uint32_t)i;
		e->units[e->nunits].count = (uint32_t)(j - i);
		e->nunits++;
	}
	qsort_r(e->units, e->nunits, sizeof(*e->units), cmp_unit, e);
	st->unique_chunks = e->nunits;
	return 0;
}

/* Pages of fd's first len bytes that are in the page cache: cachestat(2), or
 * before Linux 6.5 whether a read that may not wait finds its first page. */
static int cached_pages(int fd, uint64_t len, uint64_t page, uint64_t *pages)
{
	struct cachestat_range_ r = { 0, len };
	struct cachestat_ cs = { 0 };
	uint8_t buf[ENGINE_ALIGN];
	struct iovec iov = { buf, sizeof(buf) };

	if (syscall(__NR_cachestat, fd, &r, &cs, 0) == 0) {
		*pages = MIN(cs.nr_cache, (len + page - 1) / page);
		return 0;
	}
	if (errno != ENOSYS)
		return -errno;
	if (preadv2(fd, &iov, 1, 0, RWF_NOWAIT) >= 0) {
		*pages = (len + page - 1) / page;
		return 0;
	}
	*pages = 0;
	return errno == EAGAIN ? 0 : -errno;
}

/* How much of the snapshot's chunks the page cache holds, in percent of the
 * pages of up to ENGINE_CACHE_SAMPLE distinct chunks spread over the work
 * list; -1 when none could be looked at.  O_DIRECT reads go to the disk even
 * when the page cache holds the chunk (a start right after a prewarm, or a
 * snapshot evicted from the tier and wanted again): on the development VM
 * they read 1962 MiB from the disk for a 2 GiB snapshot whose chunks were all
 * cached (buffered reads: 6 MiB), at the speed of a virtio disk shared with
 * other VMs (0.5-0.7 GB/s when quiet) instead of the page cache's.  Half
 * cached or more: the buffered reads of the rest still go to the disk, with
 * readahead. */
static int cached_percent(struct eng *e)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), total = 0, cached = 0;
	size_t n = MIN(e->nunits, (size_t)ENGINE_CACHE_SAMPLE);
	char path[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		const struct manifest_chunk *c = unit_chunk(e, &e->units[i * e->nunits / n]);
		uint64_t pages = 0;
		int fd;

		if (store_chunk_path(e->s, c->hash, path, sizeof(path)))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* a missing chunk is reported by the read */
		if (cached_pages(fd, c->stored, page, &pages) == 0) {
			total += (c->stored + page - 1) / page;
			cached += pages;
		}
		close(fd);
	}
	return total ? (int)(cached * 100 / total) : -1;
}

static int setup_arena(struct eng *e, const struct engine_opts *o)
{
	struct io_uring_params p;
	struct iovec *iov = NULL;
	unsigned i;
	int ret;

	e->nslots = (unsigned)MIN(o->arena_bytes / e->slot_bytes, (uint64_t)ENGINE_MAX_SLOTS);
	/* Slots past the reads in flight and a small backlog per worker only cost
	 * time to fault in, lock and pin; and a small snapshot needs few. */
	e->nslots = MIN(e->nslots, 2 * o->queue_depth + 4 * o->threads);
	e->nslots = (unsigned)MIN((size_t)e->nslots, e->nunits);
	e->nslots = MAX(e->nslots, 2u);
	e->arena_len = (size_t)e->nslots * e->slot_bytes;
	e->arena = mmap(NULL, e->arena_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (e->arena == MAP_FAILED) {
		e->arena = NULL;
		ret = -errno;
		pr_perror("cannot map an arena of %zu bytes", e->arena_len);
		return ret;
	}
	/* Pinned memory: no page faults in the reads, no swapping mid-restore. */
	if (mlock(e->arena, e->arena_len) < 0) {
		if (errno != EPERM && errno != ENOMEM && errno != EAGAIN) {
			ret = -errno;
			pr_perror("mlock arena");
			return ret;
		}
		pr_warn("cannot lock the %zu-byte arena in memory (%s); going on unlocked",
			e->arena_len, strerror(errno));
	}

	e->slots = calloc(e->nslots, sizeof(*e->slots));
	e->ready = calloc(e->nslots, sizeof(*e->ready));
	e->freel = calloc(e->nslots, sizeof(*e->freel));
	iov = calloc(e->nslots, sizeof(*iov));
	if (!e->slots || !e->ready || !e->freel || !iov) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < e->nslots; i++) {
		e->slots[i].buf = e->arena + (size_t)i * e->slot_bytes;
		e->slots[i].fd = -1;
		iov[i].iov_base = e->slots[i].buf;
		iov[i].iov_len = e->slot_bytes;
		e->freel[e->nfree++] = e->nslots - 1 - i;
	}

	memset(&p, 0, sizeof(p));
	/* Completions are reaped by this thread only: no IPIs to run them early. */
	p.flags = IORING_SETUP_COOP_TASKRUN;
	/* Two entries per read: the openat and the read linked to it. */
	ret = io_uring_queue_init_params(2 * o->queue_depth, &e->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(2 * o->queue_depth, &e->ring, &p);
	}
	if (ret < 0) {
		pr_err("io_uring_queue_init(%u): %s", o->queue_depth, strerror(-ret));
		goto out;
	}
	e->ring_ok = true;
	ret = io_uring_register_buffers(&e->ring, iov, e->nslots);
	if (ret < 0) {
		/* Plain reads into the same arena still work, a little slower. */
		pr_warn("cannot register the arena with io_uring (%s); using plain reads",
			strerror(-ret));
		ret = 0;
	} else {
		e->fixed = true;
	}
	/* The ring opens each chunk into the slot's own fixed file: with page-cache
	 * hits a submitter that opened and read would do that work alone, in
	 * series, while the workers wait on it. */
	e->paths = malloc((size_t)e->nslots * PATH_MAX);
	if (e->paths && io_uring_register_files_sparse(&e->ring, e->nslots) == 0) {
		e->ring_files = true;
		for (i = 0; i < e->nslots; i++)
			e->slots[i].path = e->paths + (size_t)i * PATH_MAX;
	} else {
		pr_debug("no sparse file table in io_uring: chunks opened by the submitter");
	}
	e->async_reads = o->threads > 2;
out:
	free(iov);
	return ret;
}

static int open_chunk(struct eng *e, const struct manifest_chunk *c, int *fdp)
{
	char path[PATH_MAX];
	int ret, fd;

	ret = store_chunk_path(e->s, c->hash, path, sizeof(path));
	if (ret)
		return ret;
	for (;;) {
		fd = open(path, O_RDONLY | O_CLOEXEC | (e->direct ? O_DIRECT : 0));
		if (fd >= 0)
			break;
		if (errno == EINVAL && e->direct && e->direct_mode == ENGINE_DIRECT_AUTO) {
			pr_info("the store's filesystem refuses O_DIRECT; reading through the page cache");
			e->direct = false;
			continue;
		}
		return -errno;
	}
	*fdp = fd;
	return 0;
}

static void chunk_failed(struct eng *e, const struct manifest_chunk *c, uint32_t o, int err,
			 const char *why)
{
	char id[CHUNK_ID_LEN];
	const struct manifest_file *f = &e->m->files[e->occ[o].file];

	chunk_id_format(c->hash, id);
	/* chunk_decode's words start with the id: say it once. */
	if (!strncmp(why, "chunk ", 6) && !strncmp(why + 6, id, CHUNK_ID_LEN - 1) &&
	    !strncmp(why + 6 + CHUNK_ID_LEN - 1, ": ", 2))
		why += 6 + CHUNK_ID_LEN + 1;
	set_error(e, err, "chunk %s (%s at offset %llu): %s", id, f->path,
		  (unsigned long long)c->off, why);
}

static void queue_read(struct eng *e, struct io_uring_sqe *sqe, unsigned s, int fd, bool fixed_file)
{
	struct slot *sl = &e->slots[s];
	const struct manifest_chunk *c = unit_chunk(e, &e->units[sl->unit]);
	unsigned len = (unsigned)ALIGN_UP((size_t)c->stored, ENGINE_ALIGN);

	if (e->fixed)
		io_uring_prep_read_fixed(sqe, fd, sl->buf, len, 0, (int)s);
	else
		io_uring_prep_read(sqe, fd, sl->buf, len, 0);
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	/* O_DIRECT reads are asynchronous anyway; buffered ones that hit the page
	 * cache would be copied inline, by the one submitting thread. */
	if (e->async_reads && !e->direct)
		sqe->flags |= IOSQE_ASYNC;
	io_uring_sqe_set_data64(sqe, s);
}

/* Queue slot s's chunk: openat into fixed file s linked to its read, or an
 * open here and the read.  Returns 0 or -errno (nothing queued). */
static int queue_chunk(struct eng *e, unsigned s)
{
	struct slot *sl = &e->slots[s];
	const struct manifest_chunk *c = unit_chunk(e, &e->units[sl->unit]);
	struct io_uring_sqe *sqe, *rsqe;
	int ret;

	if (!e->ring_files) {
		ret = open_chunk(e, c, &sl->fd);
		if (ret)
			return ret;
		sqe = io_uring_get_sqe(&e->ring);
		if (!sqe) /* cannot happen: the ring has 2 x queue_depth entries */
			return -EBUSY;
		sl->pending = 1;
		sl->open_res = 0;
		queue_read(e, sqe, s, sl->fd, false);
		return 0;
	}
	ret = store_chunk_path(e->s, c->hash, sl->path, PATH_MAX);
	if (ret)
		return ret;
	if (io_uring_sq_space_left(&e->ring) < 2)
		return -EBUSY;
	sqe = io_uring_get_sqe(&e->ring);
	rsqe = io_uring_get_sqe(&e->ring);
	/* No O_CLOEXEC: the kernel refuses it for direct descriptors, which no
	 * exec can inherit anyway. */
	io_uring_prep_openat_direct(sqe, AT_FDCWD, sl->path, O_RDONLY | (e->direct ? O_DIRECT : 0),
				    0, s);
	sqe->flags |= IOSQE_IO_LINK;
	io_uring_sqe_set_data64(sqe, OP_OPEN | s);
	sl->pending = 2;
	sl->open_res = 0;
	queue_read(e, rsqe, s, (int)s, true);
	return 0;
}

static void slot_release(struct eng *e, unsigned s)
{
	struct slot *sl = &e->slots[s];

	if (sl->fd >= 0)
		close(sl->fd);
	sl->fd = -1;
	pthread_mutex_lock(&e->mu);
	e->freel[e->nfree++] = s;
	pthread_cond_signal(&e->free_cv);
	pthread_mutex_unlock(&e->mu);
}

/* A read may come back short only at the end of the file; read what is left
 * through the page cache (an O_DIRECT fd could not take the unaligned rest). */
static int finish_short(struct eng *e, struct slot *sl, const struct manifest_chunk *c)
{
	char path[PATH_MAX];
	int fd, ret;
	size_t got = (size_t)sl->res;

	ret = store_chunk_path(e->s, c->hash, path, sizeof(path));
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (got < e->slot_bytes) {
		ssize_t n = pread(fd, sl->buf + got, e->slot_bytes - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	sl->res = (int)got;
	return ret;
}

/* Where occurrence o goes in its file's mapping, its pages prefaulted in one
 * call rather than one fault each; NULL: write it with pwrite.  A page is
 * only touched once populating it worked, so a full tmpfs means ENOSPC from
 * pwrite, never a SIGBUS. */
static uint8_t *map_dest(struct eng *e, uint32_t o)
{
	const struct manifest_chunk *c = occ_chunk(e, o);
	uint8_t *map = e->maps[e->occ[o].file];
	uintptr_t a, b;

	if (!map || !atomic_load(&e->populate))
		return NULL;
	a = (uintptr_t)(map + c->off) & ~(uintptr_t)(ENGINE_ALIGN - 1);
	b = ALIGN_UP((uintptr_t)(map + c->off + c->len), ENGINE_ALIGN);
	if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0)
		return map + c->off;
	if (errno == EINVAL)
		atomic_store(&e->populate, false); /* before Linux 5.14: pwrite only */
	return NULL;
}

static void process_slot(struct eng *e, struct chunk_codec *codec, uint8_t *raw, unsigned s)
{
	struct slot *sl = &e->slots[s];
	const struct unit *u = &e->units[sl->unit];
	uint32_t o0 = e->order[u->first];
	const struct manifest_chunk *c = occ_chunk(e, o0);
	uint8_t *first;
	int ret;

	if (sl->res == -EINVAL && e->direct_mode == ENGINE_DIRECT_AUTO)
		sl->res = 0; /* O_DIRECT refused at read: read it all below, buffered */
	if (sl->res < 0) {
		chunk_failed(e, c, o0, sl->res,
			     sl->res == -ENOENT ? "missing from the store" : strerror(-sl->res));
		return;
	}
	if ((uint32_t)sl->res < c->stored) {
		ret = finish_short(e, sl, c);
		if (ret) {
			chunk_failed(e, c, o0, ret, strerror(-ret));
			return;
		}
	}
	atomic_fetch_add(&e->read, (uint64_t)sl->res);
	/* Decoded in place, in the file: one copy.  A chunk that fails its check
	 * may leave bytes there; the whole output is thrown away then. */
	first = map_dest(e, o0);
	ret = chunk_decode(codec, sl->buf, (size_t)sl->res, c->hash, first ? first : raw, c->len);
	if (ret) {
		chunk_failed(e, c, o0, ret, log_last_error());
		return;
	}
	if (!first)
		first = raw;
	for (uint32_t k = 0; k < u->count && !atomic_load(&e->stop); k++) {
		uint32_t o = e->order[u->first + k];
		const struct manifest_chunk *d = occ_chunk(e, o);
		uint8_t *p = k == 0 ? (first == raw ? NULL : first) : map_dest(e, o);

		if (p && p != first) {
			memcpy(p, first, d->len);
		} else if (!p) {
			ret = pwrite_all(e->fds[e->occ[o].file], first, d->len, (off_t)d->off);
			if (ret) {
				chunk_failed(e, d, o, ret, strerror(-ret));
				return;
			}
		}
		atomic_fetch_add(&e->written, d->len);
	}
}

static void *worker(void *arg)
{
	struct eng *e = arg;
	struct chunk_codec *codec = chunk_codec_new();
	uint8_t *raw = malloc(CHUNK_MAX_RAW);

	if (!codec || !raw)
		set_error(e, -ENOMEM, "cannot allocate a worker's buffers");
	for (;;) {
		unsigned s;

		pthread_mutex_lock(&e->mu);
		while (!e->rcount && !e->finished)
			pthread_cond_wait(&e->work_cv, &e->mu);
		if (!e->rcount) {
			pthread_mutex_unlock(&e->mu);
			break;
		}
		s = e->ready[e->rhead];
		e->rhead = (e->rhead + 1) % e->nslots;
		e->rcount--;
		pthread_mutex_unlock(&e->mu);

		if (!atomic_load(&e->stop))
			process_slot(e, codec, raw, s);
		slot_release(e, s);
	}
	chunk_codec_free(codec);
	free(raw);
	return NULL;
}

static void push_ready(struct eng *e, unsigned s)
{
	pthread_mutex_lock(&e->mu);
	e->ready[(e->rhead + e->rcount) % e->nslots] = s;
	e->rcount++;
	pthread_cond_signal(&e->work_cv);
	pthread_mutex_unlock(&e->mu);
}

static bool cancelled(struct eng *e)
{
	if (e->cancel && atomic_load(e->cancel)) {
		set_error(e, -ECANCELED, "cancelled");
		return true;
	}
	return atomic_load(&e->stop);
}

/* Count a completion; once a slot has all of its, hand it to the workers. */
static void reap_one(struct eng *e, struct io_uring_cqe *cqe)
{
	uint64_t d = io_uring_cqe_get_data64(cqe);
	struct slot *sl = &e->slots[(uint32_t)d];

	if (d & OP_OPEN)
		sl->open_res = cqe->res;
	else
		sl->res = cqe->res;
	if (--sl->pending)
		return;
	if (sl->open_res < 0)
		sl->res = sl->open_res; /* the linked read was cancelled */
	/* Some filesystems refuse O_DIRECT at open, some at read: the worker
	 * reads this one through the page cache, and so do later opens. */
	if (sl->res == -EINVAL && e->direct && e->direct_mode == ENGINE_DIRECT_AUTO) {
		pr_info("O_DIRECT fails with EINVAL here; reading through the page cache");
		e->direct = false;
	}
	e->inflight--;
	push_ready(e, (uint32_t)d);
}

static void report(struct eng *e, const struct engine_opts *o, uint64_t hole_bytes,
		   uint64_t total, uint64_t *last)
{
	uint64_t now = now_ns();

	if (!o->progress || now - *last < ENGINE_TICK_NS)
		return;
	*last = now;
	o->progress(hole_bytes + atomic_load(&e->written), total, o->progress_arg);
}

static int submit_loop(struct eng *e, const struct engine_opts *o, const struct engine_stats *st)
{
	size_t next = 0;
	uint64_t last = 0;
	struct io_uring_cqe *cqe;

	for (;;) {
		unsigned queued = 0;
		bool stopping = cancelled(e);

		while (!stopping && next < e->nunits && e->inflight + queued < o->queue_depth) {
			const struct manifest_chunk *c;
			unsigned s;
			int ret;

			pthread_mutex_lock(&e->mu);
			if (!e->nfree) {
				pthread_mutex_unlock(&e->mu);
				break;
			}
			s = e->freel[--e->nfree];
			pthread_mutex_unlock(&e->mu);

			e->slots[s].unit = (uint32_t)next;
			c = unit_chunk(e, &e->units[next]);
			ret = queue_chunk(e, s);
			if (ret) {
				chunk_failed(e, c, e->order[e->units[next].first], ret,
					     ret == -ENOENT ? "missing from the store" : strerror(-ret));
				slot_release(e, s);
				stopping = true;
				break;
			}
			queued++;
			next++;
		}
		if (queued) {
			int ret = io_uring_submit(&e->ring);
			if (ret < 0) {
				/* Nothing went out: give the slots back. */
				set_error(e, ret, "io_uring_submit: %s", strerror(-ret));
				pr_err("io_uring_submit: %s", strerror(-ret));
				return ret; /* nothing went out: nothing to drain */
			}
			e->inflight += queued;
		}
		report(e, o, st->hole_bytes, st->logical_bytes, &last);
		if (!e->inflight) {
			if (stopping || next >= e->nunits)
				break;
			/* Every slot is with the workers: wait for one to come back. */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)ENGINE_TICK_NS;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_mutex_lock(&e->mu);
			if (!e->nfree && !atomic_load(&e->stop))
				pthread_cond_timedwait(&e->free_cv, &e->mu, &ts);
			pthread_mutex_unlock(&e->mu);
			continue;
		}
		struct __kernel_timespec kts = { .tv_sec = 0, .tv_nsec = (long long)ENGINE_TICK_NS };
		int ret = io_uring_wait_cqe_timeout(&e->ring, &cqe, &kts);
		if (ret == -ETIME || ret == -EINTR)
			continue;
		if (ret < 0) {
			set_error(e, ret, "io_uring_wait_cqe: %s", strerror(-ret));
			return ret;
		}
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&e->ring, head, cqe) {
			seen++;
			reap_one(e, cqe);
		}
		io_uring_cq_advance(&e->ring, seen);
	}
	return 0;
}

static int map_files(struct eng *e, const struct engine_opts *o)
{
	e->maps = calloc(MAX(e->m->nfiles, (size_t)1), sizeof(*e->maps));
	if (!e->maps)
		return -ENOMEM;
	atomic_store(&e->populate, true);
	if (o->write == ENGINE_WRITE_PWRITE ||
	    (o->write == ENGINE_WRITE_AUTO && o->threads <= ENGINE_PWRITE_MAX_THREADS))
		return 0;
	e->mapped = true;
	for (size_t i = 0; i < e->m->nfiles; i++) {
		void *p;

		if (!e->m->files[i].size)
			continue;
		p = mmap(NULL, e->m->files[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, e->fds[i], 0);
		if (p == MAP_FAILED) {
			pr_debug("cannot map %s/%s (%s): writing it with pwrite", e->outdir,
				 e->m->files[i].path, strerror(errno));
			continue;
		}
		e->maps[i] = p;
	}
	return 0;
}

static void unmap_files(struct eng *e)
{
	if (!e->maps)
		return;
	for (size_t i = 0; i < e->m->nfiles; i++)
		if (e->maps[i])
			munmap(e->maps[i], e->m->files[i].size);
	free(e->maps);
	e->maps = NULL;
}

static void eng_release(struct eng *e)
{
	unmap_files(e);
	if (e->ring_ok)
		io_uring_queue_exit(&e->ring); /* also unregisters the buffers */
	if (e->slots)
		for (unsigned i = 0; i < e->nslots; i++)
			if (e->slots[i].fd >= 0)
				close(e->slots[i].fd);
	if (e->arena)
		munmap(e->arena, e->arena_len);
	if (e->fds)
		for (size_t i = 0; i < e->m->nfiles; i++)
			if (e->fds[i] >= 0)
				close(e->fds[i]);
	free(e->fds);
	free(e->slots);
	free(e->paths);
	free(e->ready);
	free(e->freel);
	free(e->occ);
	free(e->order);
	free(e->units);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->work_cv);
	pthread_cond_destroy(&e->free_cv);
}

int engine_materialize(struct store *s, const struct manifest *m, const char *outdir,
		       const struct engine_opts *opts, struct engine_stats *stp)
{
	struct engine_opts o;
	struct engine_stats st;
	struct eng e;
	pthread_t *tids = NULL;
	unsigned nthreads = 0, i;
	uint64_t start = now_ns();
	int ret;

	engine_opts_default(&o);
	if (opts) {
		o.cancel = opts->cancel;
		o.progress = opts->progress;
		o.progress_arg = opts->progress_arg;
		o.direct = opts->direct;
		o.write = opts->write;
		if (opts->queue_depth)
			o.queue_depth = opts->queue_depth;
		if (opts->arena_bytes)
			o.arena_bytes = opts->arena_bytes;
		if (opts->threads)
			o.threads = opts->threads;
	}
	o.queue_depth = MIN(o.queue_depth, 4096u);
	memset(&st, 0, sizeof(st));
	st.cached_percent = -1;
	memset(&e, 0, sizeof(e));
	e.s = s;
	e.m = m;
	e.outdir = outdir;
	e.cancel = o.cancel;
	e.direct_mode = o.direct;
	e.direct = o.direct != ENGINE_DIRECT_OFF;
	pthread_mutex_init(&e.mu, NULL);
	pthread_cond_init(&e.work_cv, NULL);
	pthread_cond_init(&e.free_cv, NULL);

	ret = plan(&e, &st);
	if (ret) {
		if (ret == -ENOMEM)
			pr_err("cannot allocate the work list of %zu chunks", e.nocc);
		goto out;
	}
	e.fds = malloc(MAX(m->nfiles, (size_t)1) * sizeof(*e.fds));
	if (!e.fds) {
		ret = -ENOMEM;
		goto out;
	}
	ret = engine_create_files(m, outdir, e.fds);
	if (ret) {
		free(e.fds);
		e.fds = NULL;
		goto out;
	}
	if (!e.nunits)
		goto done;
	if (o.direct == ENGINE_DIRECT_AUTO) {
		st.cached_percent = cached_percent(&e);
		if (st.cached_percent >= ENGINE_CACHED_PERCENT)
			e.direct = false;
		pr_debug("%d%% of the sampled chunk pages are cached: %s reads", st.cached_percent,
			 e.direct ? "O_DIRECT" : "buffered");
	}
	o.threads = (unsigned)MIN((size_t)o.threads, e.nunits);
	ret = map_files(&e, &o);
	if (ret)
		goto out;
	ret = setup_arena(&e, &o);
	if (ret)
		goto out;
	o.queue_depth = MIN(o.queue_depth, e.nslots);

	tids = calloc(o.threads, sizeof(*tids));
	if (!tids) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < o.threads; i++) {
		ret = -pthread_create(&tids[i], NULL, worker, &e);
		if (ret) {
			set_error(&e, ret, "cannot start worker threads: %s", strerror(-ret));
			break;
		}
		nthreads++;
	}
	if (nthreads)
		submit_loop(&e, &o, &st);
	/* After an error the kernel may still be reading into slots: wait for
	 * every read before the arena can go. */
	while (e.inflight) {
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(&e.ring, &cqe) < 0)
			break; /* cannot happen with reads in flight; the exit below waits too */
		reap_one(&e, cqe);
		io_uring_cqe_seen(&e.ring, cqe);
	}
	pthread_mutex_lock(&e.mu);
	e.finished = true;
	pthread_cond_broadcast(&e.work_cv);
	pthread_mutex_unlock(&e.mu);
	for (i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);
	ret = e.err;
	if (ret) {
		pr_err("%s", e.errmsg);
		goto out;
	}
done:
	unmap_files(&e);
	for (size_t f = 0; f < m->nfiles; f++) {
		if (close(e.fds[f]) < 0 && !ret) {
			ret = -errno;
			pr_perror("close %s/%s", outdir, m->files[f].path);
		}
		e.fds[f] = -1;
	}
	if (o.progress)
		o.progress(st.logical_bytes, st.logical_bytes, o.progress_arg);
out:
	st.read_bytes = atomic_load(&e.read);
	st.written_bytes = atomic_load(&e.written);
	st.direct = e.direct && e.nunits;
	st.fixed_buffers = e.fixed;
	st.mapped = e.mapped;
	st.ring_opens = e.ring_files;
	st.threads = nthreads;
	st.queue_depth = o.queue_depth;
	st.slots = e.nslots;
	st.slot_bytes = e.slot_bytes;
	st.seconds = (double)(now_ns() - start) / 1e9;
	if (stp)
		*stp = st;
	free(tids);
	eng_release(&e);
	return ret;
}
