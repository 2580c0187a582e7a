/* SPDX-License-Identifier: Apache-2.0 */
/* engine.c — the io_uring restore engine; see engine.h.
 *
 * Every worker thread owns a ring, its share of the arena (registered with its
 * ring) and a zstd context, and nothing else: it takes the next distinct chunk
 * from one atomic counter, queues an openat into its fixed file table linked
 * to a read into one of its slots (or, where the kernel has no sparse file
 * table, opens the chunk itself), and decodes, checks and writes each chunk
 * whose read completes.  Nothing is handed between threads per chunk: with
 * the store in the page cache a read is a copy done by the thread that submits
 * it, and one submitting thread for all (the first design) ran the whole
 * engine at the speed of one core's copies, whatever the cores (bench/LOG.md,
 * the engine with one ring per worker).
 * A raw chunk read through the page cache goes straight into its place in the
 * file's mapping (header into the slot, payload into the file): one copy, as
 * a plain cp makes, then its hash.  On an error or a cancel every worker stops
 * queueing and waits for its reads in flight (the kernel writes into the arena
 * until then), so the arena is unmapped only when nothing uses it.
 */
#define LOG_PREFIX "engine: "
#include "restore/engine.h"
#include "common/fault.h"
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_ALIGN     4096u
#define ENGINE_BUFFERED_PER_WORKER 4u /* page-cache reads a worker has queued at once */
#define ENGINE_TICK_NS   50000000ull /* progress and cancel are looked at this often */
/* cachestat(2), Linux 6.5: the same number on every architecture; glibc 2.36
 * and the kernel headers here know neither the call nor its structs. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#define ENGINE_CACHE_SAMPLE   64 /* chunks looked at to judge the page cache */
#define ENGINE_CACHED_PERCENT 50 /* auto: at least this much cached, read buffered */
#define ENGINE_EXTENT_BYTES   (1u << 20)  /* one O_DIRECT read of neighbouring chunks */
#define ENGINE_EXTENT_GAP     (64u << 10) /* bytes of others read through between two */
#define ENGINE_EXTENT_INFLIGHT (64u << 20) /* bytes of O_DIRECT extent reads in flight */

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
	uint32_t pack;	/* its pack, an index into eng.pack_fds; NO_PACK: a loose file */
	uint32_t stored; /* its object's bytes where it lies */
	uint64_t off;	/* where the object starts in its pack */
	bool missing;	/* found nowhere in the store */
};

#define NO_PACK UINT32_MAX

/* One read: a run of distinct chunks that lie one after the other in one
 * pack (or one chunk: a loose one, or any read through the page cache). */
struct extent {
	uint32_t unit;	 /* its first, an index into units[] */
	uint32_t nunits;
	uint32_t len;	 /* bytes from off to the end of its last object */
	uint64_t off;	 /* where its first object starts */
};

struct slot {
	uint32_t ext; /* the extent it reads */
	int fd;       /* without ring-opened files: the chunk's fd */
	int res;      /* the read's result */
	int open_res; /* the ring's openat result */
	unsigned pending; /* completions still to come: openat and read, or read */
	uint8_t *buf; /* its part of the arena */
	uint8_t *dest; /* a raw chunk's payload read straight into the file here; NULL: all into buf */
	struct iovec iov[2]; /* with dest: the header into buf, the payload into dest */
	char *path;   /* the chunk's path, alive until the openat is submitted */
};

#define OP_OPEN (1ull << 32) /* user_data of an openat; a read's is its slot */

/* A worker's share of the work list: a contiguous part of it, which the
 * others take from too once theirs is done.  One cache line each: every take
 * is an atomic add on it. */
struct share {
	_Alignas(64) _Atomic size_t next;
	size_t end;
};

struct eng;

struct worker { /* one of the pool, with everything it touches per chunk */
	struct eng *e;
	pthread_t tid;
	struct io_uring ring;
	bool ring_ok, fixed; /* ring_ok: made (and exited by the worker's thread) */
	bool ring_files; /* chunks are opened by the ring into fixed file slots */
	struct slot *slots;
	unsigned nslots;
	uint32_t *freel; /* stack of free slots */
	unsigned nfree;
	uint32_t *done;  /* slots whose completions are all in */
	unsigned ndone;
	size_t take, take_end; /* the distinct chunks it took, not yet queued */
	unsigned inflight;    /* slots with completions still to come */
	unsigned unsubmitted; /* of which queued but not yet submitted */
	char *paths;
	struct chunk_codec *codec;
	uint8_t *raw;
};

struct eng {
	struct store *s;
	const struct manifest *m;
	const char *outdir;
	atomic_bool *cancel;

	struct occ *occ;
	uint32_t *order;
	struct unit *units;
	size_t nocc, nunits;
	struct extent *exts; /* the work list */
	size_t nexts;
	int *pack_fds;	   /* the packs the chunks lie in, opened once */
	uint32_t *pack_nos; /* their store numbers */
	size_t npacks;
	bool packs_direct; /* pack_fds are O_DIRECT */
	struct share *shares; /* the work list cut in one share per worker, or one */
	size_t nshares;
	int *fds;	    /* the files the engine made and closes; -1 where another's */
	const int *files;   /* the files written: fds, or the caller's (opts files) */
	uint8_t **maps; /* each file mapped shared, or NULL: write with pwrite */
	const struct engine_writer *writers; /* opts writers */
	atomic_bool populate; /* MADV_POPULATE_WRITE works here */
	bool mapped;          /* files are written through mappings */

	uint8_t *arena;
	size_t arena_len;
	size_t slot_bytes;
	unsigned slots_per_worker;
	size_t units_per_take; /* extents a worker takes at once */
	struct worker *workers;
	unsigned nworkers;
	atomic_bool direct; /* reads are O_DIRECT; turned off for good where refused */
	enum engine_direct direct_mode;

	pthread_mutex_t mu;
	pthread_cond_t done_cv;
	unsigned running; /* workers not yet finished, under mu */

	atomic_bool stop;
	int err;         /* first error, under mu */
	char errmsg[1024];
	struct fault fault; /* its facts (fault_note on the calling thread) */
	_Atomic uint64_t written, read, read_into_files;
};

static const struct manifest_chunk *occ_chunk(const struct eng *e, uint32_t o)
{
	return &e->m->files[e->occ[o].file].chunks[e->occ[o].chunk];
}

static const struct manifest_chunk *unit_chunk(const struct eng *e, const struct unit *u)
{
	return occ_chunk(e, e->order[u->first]);
}

/* Record the first error (the rest are consequences), and the chunk it
 * was met on (NULL: none) as its fault, and make everyone stop. */
static void __attribute__((format(printf, 4, 0)))
set_error_v(struct eng *e, int err, const uint8_t *chunk, const char *fmt, va_list ap)
{
	pthread_mutex_lock(&e->mu);
	if (!e->err) {
		e->err = err;
		vsnprintf(e->errmsg, sizeof(e->errmsg), fmt, ap);
		e->fault = (struct fault){ .step = FAULT_MATERIALIZE, .err = err };
		if (chunk) {
			e->fault.has_chunk = true;
			memcpy(e->fault.chunk, chunk, CHUNK_HASH_LEN);
		}
	}
	atomic_store(&e->stop, true);
	pthread_mutex_unlock(&e->mu);
}

static void __attribute__((format(printf, 3, 4))) set_error(struct eng *e, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error_v(e, err, NULL, fmt, ap);
	va_end(ap);
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

/* The work list: distinct chunks, in the order they first occur (so that reads
 * and writes go roughly front to back), each with all its occurrences.  One
 * pass through a hash table: sorting the occurrences by hash (the first
 * design) took ~0.1 s for the ~270,000 chunks of a 17 GB image. */
static int plan(struct eng *e, struct engine_stats *st)
{
	const struct manifest *m = e->m;
	uint32_t *table = NULL, *uidx = NULL;
	size_t n = 0, i, j, cap;
	int ret = 0;

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
			n++;
		}
	}
	if (n > UINT32_MAX / 4)
		return -E2BIG;
	st->files = m->nfiles;
	st->chunks = n;
	e->nocc = n;
	if (!n)
		return 0;
	for (cap = 1024; cap < 2 * n; cap *= 2)
		;
	e->occ = malloc(n * sizeof(*e->occ));
	e->order = malloc(n * sizeof(*e->order));
	e->units = malloc(n * sizeof(*e->units));
	uidx = malloc(n * sizeof(*uidx));
	table = calloc(cap, sizeof(*table)); /* a unit's number + 1; 0: free */
	if (!e->occ || !e->order || !e->units || !uidx || !table) {
		ret = -ENOMEM;
		goto out;
	}
	n = 0;
	for (i = 0; i < m->nfiles; i++)
		for (j = 0; j < m->files[i].nchunks; j++) {
			const uint8_t *h = m->files[i].chunks[j].hash;
			uint64_t k;
			size_t t;

			if (m->files[i].chunks[j].zero)
				continue;
			e->occ[n].file = (uint32_t)i;
			e->occ[n].chunk = (uint32_t)j;
			memcpy(&k, h, sizeof(k)); /* a hash: its bytes are uniform already */
			for (t = (size_t)k & (cap - 1); table[t]; t = (t + 1) & (cap - 1))
				if (!memcmp(occ_chunk(e, e->units[table[t] - 1].first)->hash, h,
					    CHUNK_HASH_LEN))
					break;
			if (!table[t]) {
				/* For now, first is the occurrence that names it. */
				e->units[e->nunits] = (struct unit){ .first = (uint32_t)n };
				table[t] = (uint32_t)++e->nunits;
			}
			uidx[n] = table[t] - 1;
			e->units[uidx[n]].count++;
			n++;
		}
	/* Each unit's occurrences contiguous in order[], in file order. */
	for (i = 0, j = 0; i < e->nunits; i++) {
		uint32_t c = e->units[i].count;

		e->units[i].first = (uint32_t)j;
		e->units[i].count = 0;
		j += c;
	}
	for (i = 0; i < n; i++) {
		struct unit *u = &e->units[uidx[i]];

		e->order[u->first + u->count++] = (uint32_t)i;
	}
	st->unique_chunks = e->nunits;
out:
	free(table);
	free(uidx);
	return ret;
}

static void close_packs(struct eng *e)
{
	for (size_t i = 0; e->pack_fds && i < e->npacks; i++)
		if (e->pack_fds[i] >= 0)
			close(e->pack_fds[i]);
	free(e->pack_fds);
	e->pack_fds = NULL;
}

/* The file unit u's object lies in: its pack, or its own file. */
static int unit_path(const struct eng *e, const struct unit *u, char *buf, size_t len)
{
	if (u->pack == NO_PACK)
		return store_chunk_path(e->s, unit_chunk(e, u)->hash, buf, len);
	return store_pack_path(e->s, e->pack_nos[u->pack], buf, len);
}

/* Where each distinct chunk lies: in which pack (each pack the snapshot
 * uses numbered here, for one fd each) at which offset, or in a file of its
 * own.  A chunk found nowhere is left to its read, which names it missing.
 * The slot size follows the objects' sizes where they lie. */
static int locate_units(struct eng *e)
{
	uint32_t *local = NULL; /* store pack number -> index into pack_nos, +1 */
	size_t nlocal = 0, max_stored = 1;
	int ret = 0;

	store_packs_refresh(e->s);
	free(e->pack_nos);
	e->pack_nos = NULL;
	e->npacks = 0;
	for (size_t i = 0; i < e->nunits && ret == 0; i++) {
		struct unit *u = &e->units[i];
		const struct manifest_chunk *c = unit_chunk(e, u);
		struct store_chunk_loc loc;

		u->pack = NO_PACK;
		u->stored = c->stored;
		u->off = 0;
		u->missing = store_chunk_locate(e->s, c->hash, &loc) != 0;
		if (!u->missing && loc.pack != STORE_LOOSE) {
			if (loc.pack >= nlocal) {
				size_t n = MAX((size_t)loc.pack + 1, nlocal * 2);
				uint32_t *v = realloc(local, n * sizeof(*v));
				if (!v) {
					ret = -ENOMEM;
					break;
				}
				memset(v + nlocal, 0, (n - nlocal) * sizeof(*v));
				local = v;
				nlocal = n;
			}
			if (!local[loc.pack]) {
				uint32_t *v = realloc(e->pack_nos, (e->npacks + 1) * sizeof(*v));
				if (!v) {
					ret = -ENOMEM;
					break;
				}
				e->pack_nos = v;
				e->pack_nos[e->npacks++] = loc.pack;
				local[loc.pack] = (uint32_t)e->npacks;
			}
			u->pack = local[loc.pack] - 1;
			u->stored = loc.stored;
			u->off = loc.off;
		}
		max_stored = MAX(max_stored, (size_t)u->stored);
	}
	free(local);
	e->slot_bytes = ALIGN_UP(max_stored, ENGINE_ALIGN);
	return ret;
}

/* Open each pack the chunks lie in, O_DIRECT when the reads are.  A pack
 * that is gone was rewritten by a gc before this restore's lease: look again,
 * once.  Where O_DIRECT is refused in auto mode, reads go buffered. */
static int open_packs(struct eng *e)
{
	char path[PATH_MAX];
	int ret = 0;

	for (int again = 0; again < 2; again++) {
		bool direct = atomic_load(&e->direct);
		size_t i;

		free(e->pack_fds);
		e->pack_fds = malloc(MAX(e->npacks, (size_t)1) * sizeof(*e->pack_fds));
		if (!e->pack_fds)
			return -ENOMEM;
		for (i = 0; i < e->npacks; i++)
			e->pack_fds[i] = -1;
		for (i = 0; i < e->npacks; i++) {
			ret = store_pack_path(e->s, e->pack_nos[i], path, sizeof(path));
			if (ret)
				break;
			e->pack_fds[i] = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
			if (e->pack_fds[i] >= 0)
				continue;
			ret = -errno;
			if (ret == -EINVAL && direct && e->direct_mode == ENGINE_DIRECT_AUTO) {
				pr_info("the store's filesystem refuses O_DIRECT; reading through the page cache");
				atomic_store(&e->direct, false);
				direct = false;
				ret = 0;
				i--;
				continue;
			}
			break;
		}
		e->packs_direct = direct;
		if (ret != -ENOENT)
			break;
		close_packs(e);
		if (again == 0 && (ret = locate_units(e)))
			break;
	}
	if (ret)
		pr_err("cannot open pack %s: %s", path, strerror(-ret));
	return ret;
}

/* With skip_missing: the chunks the store lacks are another writer's
 * (engine.h); only the rest are read. */
static void drop_missing(struct eng *e, struct engine_stats *st)
{
	size_t kept = 0;

	for (size_t i = 0; i < e->nunits; i++)
		if (!e->units[i].missing)
			e->units[kept++] = e->units[i];
	st->skipped_chunks = e->nunits - kept;
	e->nunits = kept;
}

static int cmp_store_order(const void *a, const void *b)
{
	const struct unit *x = a, *y = b;

	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The work list.  Read with O_DIRECT from packs, the distinct chunks go in
 * store order (pack by pack, front to back: one stream the disk reads
 * sequentially) and neighbours are read together, up to a slot of
 * ENGINE_EXTENT_BYTES, across gaps of at most ENGINE_EXTENT_GAP (padding,
 * chunks of other snapshots): a read of 64 KiB per chunk, in the order the
 * chunks first occur, kept a cold 17 GB start at 1.3 GB/s on a disk that
 * reads 1.8 GB/s sequentially.  Through the page cache a read is a copy,
 * made by the worker that submits it: one chunk each, in the order they
 * first occur, a raw one straight into the file where it can. */
static int build_extents(struct eng *e)
{
	bool join = e->packs_direct;

	e->exts = malloc(MAX(e->nunits, (size_t)1) * sizeof(*e->exts));
	if (!e->exts)
		return -ENOMEM;
	if (join) {
		qsort(e->units, e->nunits, sizeof(*e->units), cmp_store_order);
		e->slot_bytes = MAX(e->slot_bytes, (size_t)ENGINE_EXTENT_BYTES);
	}
	e->nexts = 0;
	for (size_t i = 0; i < e->nunits; i++) {
		const struct unit *u = &e->units[i];
		struct extent *x = e->nexts ? &e->exts[e->nexts - 1] : NULL;

		if (join && x && u->pack != NO_PACK && e->units[x->unit].pack == u->pack) {
			uint64_t end = ALIGN_UP(x->off + x->len, ENGINE_ALIGN);

			if (u->off >= end && u->off - end <= ENGINE_EXTENT_GAP &&
			    u->off + u->stored - x->off <= e->slot_bytes) {
				x->nunits++;
				x->len = (uint32_t)(u->off + u->stored - x->off);
				continue;
			}
		}
		e->exts[e->nexts++] = (struct extent){
			.unit = (uint32_t)i, .nunits = 1, .len = u->stored, .off = u->off};
	}
	return 0;
}

/* Pages of fd's len bytes at off that are in the page cache: cachestat(2), or
 * before Linux 6.5 whether a read that may not wait finds its first page. */
static int cached_pages(int fd, uint64_t off, uint64_t len, uint64_t page, uint64_t *pages)
{
	struct cachestat_range_ r = { off, len };
	struct cachestat_ cs = { 0 };
	uint8_t buf[ENGINE_ALIGN];
	struct iovec iov = { buf, sizeof(buf) };

	if (syscall(__NR_cachestat, fd, &r, &cs, 0) == 0) {
		*pages = MIN(cs.nr_cache, (len + page - 1) / page);
		return 0;
	}
	if (errno != ENOSYS)
		return -errno;
	if (preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT) >= 0) {
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
 * they read nearly the whole snapshot from the disk although its chunks were
 * all cached (bench/LOG.md, Engine), at the speed of a virtio disk shared with
 * other VMs instead of the page cache's.  Half
 * cached or more: the buffered reads of the rest still go to the disk, with
 * readahead. */
static int cached_percent(struct eng *e)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), total = 0, cached = 0;
	size_t n = MIN(e->nunits, (size_t)ENGINE_CACHE_SAMPLE);
	char path[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		const struct unit *u = &e->units[i * e->nunits / n];
		uint64_t pages = 0;
		int fd;

		if (unit_path(e, u, path, sizeof(path)))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* a missing chunk is reported by the read */
		if (cached_pages(fd, u->off, u->stored, page, &pages) == 0) {
			total += (u->stored + page - 1) / page;
			cached += pages;
		}
		close(fd);
	}
	return total ? (int)(cached * 100 / total) : -1;
}

static int open_chunk(struct eng *e, const struct manifest_chunk *c, int *fdp)
{
	char path[PATH_MAX];
	int ret, fd;

	ret = store_chunk_path(e->s, c->hash, path, sizeof(path));
	if (ret)
		return ret;
	for (;;) {
		fd = open(path, O_RDONLY | O_CLOEXEC | (atomic_load(&e->direct) ? O_DIRECT : 0));
		if (fd >= 0)
			break;
		if (errno == EINVAL && atomic_load(&e->direct) &&
		    e->direct_mode == ENGINE_DIRECT_AUTO) {
			pr_info("the store's filesystem refuses O_DIRECT; reading through the page cache");
			atomic_store(&e->direct, false);
			continue;
		}
		return -errno;
	}
	*fdp = fd;
	return 0;
}

static void __attribute__((format(printf, 4, 5)))
chunk_error(struct eng *e, int err, const uint8_t *chunk, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error_v(e, err, chunk, fmt, ap);
	va_end(ap);
}

/* Chunk c (at occurrence o) failed with err: the engine's error names it,
 * and its fault carries it. */
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
	chunk_error(e, err, c->hash, "chunk %s (%s at offset %llu): %s", id, f->path,
		    (unsigned long long)c->off, why);
}

/* Where occurrence o goes in its file's mapping, its pages prefaulted in one
 * call rather than one fault each; NULL: write it with pwrite.  A page is
 * only touched once populating it worked, so a full tmpfs means ENOSPC from
 * pwrite, never a SIGBUS. */
static uint8_t *map_dest(struct eng *e, uint32_t o)
{
	const struct manifest_chunk *c = occ_chunk(e, o);
	uint8_t *map = e->maps[e->occ[o].file];
	int ret;

	if (!map || !atomic_load(&e->populate))
		return NULL;
	ret = populate_write(map + c->off, c->len);
	if (ret == 0)
		return map + c->off;
	if (ret == -EINVAL)
		atomic_store(&e->populate, false); /* before Linux 5.14: pwrite only */
	return NULL;
}

/* The writer of occurrence o's file, or NULL: its descriptor. */
static const struct engine_writer *writer_of(const struct eng *e, uint32_t o)
{
	const struct engine_writer *w = e->writers ? &e->writers[e->occ[o].file] : NULL;

	return w && w->pwrite ? w : NULL;
}

/* Write occurrence o's bytes with pwrite, into its file or through its writer. */
static int pwrite_occ(const struct eng *e, uint32_t o, const void *src, size_t len, uint64_t off)
{
	const struct engine_writer *w = writer_of(e, o);

	if (w)
		return w->pwrite(w->arg, src, len, off);
	return pwrite_all(e->files[e->occ[o].file], src, len, (off_t)off);
}

/* The arena: every worker's slots, allocated and locked once, before any
 * worker starts.  Its size bounds the engine's memory: fewer workers, or
 * fewer reads in flight each, when it cannot hold one slot per read. */
static int setup_arena(struct eng *e, struct engine_opts *o)
{
	size_t fit = MAX((size_t)(o->arena_bytes / e->slot_bytes), (size_t)1);
	unsigned per = (o->queue_depth + o->threads - 1) / o->threads;
	int ret;

	/* Reads through the page cache are copies made as they are submitted:
	 * a few per worker keep the bytes in its cache until they are checked.
	 * Extents read with O_DIRECT are large: ENGINE_EXTENT_INFLIGHT keeps
	 * the disk busy (a 1.8 GB/s disk reads it in 35 ms) without pinning
	 * the whole arena. */
	if (!atomic_load(&e->direct))
		per = MIN(per, ENGINE_BUFFERED_PER_WORKER);
	else if (e->nexts < e->nunits)
		per = MIN(per, MAX(ENGINE_EXTENT_INFLIGHT / (unsigned)e->slot_bytes / o->threads, 2u));
	o->threads = (unsigned)MIN((size_t)o->threads, fit);
	per = (unsigned)MIN((size_t)per, fit / o->threads);
	e->slots_per_worker = MAX(per, 1u);
	e->arena_len = (size_t)o->threads * e->slots_per_worker * e->slot_bytes;
	e->arena = mmap(NULL, e->arena_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (e->arena == MAP_FAILED) {
		e->arena = NULL;
		ret = -errno;
		pr_perror("cannot map an arena of %zu bytes", e->arena_len);
		return ret;
	}
	/* Not inherited by a fork: io_uring pins the registered arena, and the
	 * kernel copies a process's pinned anonymous pages into the child at
	 * fork() rather than sharing them.  thawd forks (netns_create, the
	 * lazy-pages daemon, runc, the shim) for other starts while one
	 * materialises, and each such fork copied the arena with thawd's mm
	 * held, for a time that grows with the arena (tens of ms at the default
	 * queue depth; bench/LOG.md, Engine), next to nothing without it.  No
	 * child of ours touches the arena. */
	if (madvise(e->arena, e->arena_len, MADV_DONTFORK) < 0)
		pr_debug("madvise(MADV_DONTFORK) of the arena: %s", strerror(errno));
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
	return 0;
}

#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7)
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif

/* The worker's ring, its slots in the arena (registered as fixed buffers) and
 * fixed file table, and its codec; run on the worker's own thread, the only
 * one that ever submits to its ring. */
static int worker_setup(struct worker *w, unsigned index)
{
	static const unsigned flag_sets[] = {
		/* every queued entry submitted even if one fails early; completions
		 * run when this thread asks, by this thread, the only submitter */
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
		0, /* before Linux 5.19 */
	};
	struct eng *e = w->e;
	struct iovec *iov;
	int ret = -EINVAL;

	w->nslots = e->slots_per_worker;
	w->slots = calloc(w->nslots, sizeof(*w->slots));
	w->freel = calloc(w->nslots, sizeof(*w->freel));
	w->done = calloc(w->nslots, sizeof(*w->done));
	w->codec = chunk_codec_new();
	w->raw = malloc(CHUNK_MAX_RAW);
	iov = calloc(w->nslots, sizeof(*iov));
	if (!w->slots || !w->freel || !w->done || !w->codec || !w->raw || !iov) {
		free(iov);
		set_error(e, -ENOMEM, "cannot allocate a worker's buffers");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < w->nslots; i++) {
		w->slots[i].buf = e->arena + ((size_t)index * w->nslots + i) * e->slot_bytes;
		w->slots[i].fd = -1;
		iov[i].iov_base = w->slots[i].buf;
		iov[i].iov_len = e->slot_bytes;
		w->freel[w->nfree++] = w->nslots - 1 - i;
	}
	/* Two entries per slot: the openat and the read linked to it. */
	for (size_t f = 0; f < sizeof(flag_sets) / sizeof(flag_sets[0]); f++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = flag_sets[f];
		ret = io_uring_queue_init_params(2 * w->nslots, &w->ring, &p);
		if (ret != -EINVAL)
			break;
	}
	if (ret < 0) {
		free(iov);
		set_error(e, ret, "io_uring_queue_init(%u): %s", 2 * w->nslots, strerror(-ret));
		return ret;
	}
	w->ring_ok = true;
	ret = io_uring_register_buffers(&w->ring, iov, w->nslots);
	free(iov);
	if (ret == 0)
		w->fixed = true;
	else /* plain reads into the same arena still work, a little slower */
		pr_debug("cannot register the arena with io_uring (%s): plain reads", strerror(-ret));
	/* The file table: one entry per slot for loose chunks opened by the
	 * ring, then the packs, registered once. */
	w->paths = malloc((size_t)w->nslots * PATH_MAX);
	if (w->paths && io_uring_register_files_sparse(&w->ring, w->nslots + (unsigned)e->npacks) == 0 &&
	    (!e->npacks ||
	     io_uring_register_files_update(&w->ring, w->nslots, e->pack_fds, (unsigned)e->npacks) ==
		 (int)e->npacks)) {
		w->ring_files = true;
		for (unsigned i = 0; i < w->nslots; i++)
			w->slots[i].path = w->paths + (size_t)i * PATH_MAX;
	} else {
		pr_debug("no sparse file table in io_uring: chunks opened by the workers");
		if (w->paths)
			io_uring_unregister_files(&w->ring);
	}
	return 0;
}

/* Prepare slot s's read into sqe: the whole object into the slot, or with
 * sl->dest the header into the slot and the payload into the file. */
static void prep_read(struct worker *w, struct io_uring_sqe *sqe, unsigned s, int fd, bool fixed_file)
{
	struct eng *e = w->e;
	struct slot *sl = &w->slots[s];
	const struct extent *x = &e->exts[sl->ext];
	const struct unit *u = &e->units[x->unit];
	const struct manifest_chunk *c = unit_chunk(e, u);

	if (sl->dest) {
		sl->iov[0] = (struct iovec){ sl->buf, CHUNK_HEADER_SIZE };
		sl->iov[1] = (struct iovec){ sl->dest, c->len };
		io_uring_prep_readv(sqe, fd, sl->iov, 2, u->off);
	} else {
		/* Whole pages: an O_DIRECT read must be.  It comes back short at
		 * the end of a loose object; in a pack it reads the padding after
		 * the last object (each object starts on a page). */
		unsigned len = (unsigned)ALIGN_UP((size_t)x->len, ENGINE_ALIGN);

		if (w->fixed)
			io_uring_prep_read_fixed(sqe, fd, sl->buf, len, x->off, (int)s);
		else
			io_uring_prep_read(sqe, fd, sl->buf, len, x->off);
	}
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, s);
}

/* Queue slot s's chunk: openat into fixed file s linked to its read, or an
 * open here and the read.  Returns 0 or -errno (nothing queued). */
static int queue_chunk(struct worker *w, unsigned s)
{
	struct eng *e = w->e;
	struct slot *sl = &w->slots[s];
	const struct unit *u = &e->units[e->exts[sl->ext].unit];
	const struct manifest_chunk *c = unit_chunk(e, u);
	bool direct = atomic_load(&e->direct);
	struct io_uring_sqe *sqe;
	int ret;

	/* A raw chunk read through the page cache needs no slot for its bytes
	 * (O_DIRECT could not start the payload 16 bytes into the file). */
	sl->dest = NULL;
	if (!direct && !(u->pack != NO_PACK && e->packs_direct) && e->exts[sl->ext].nunits == 1 &&
	    u->stored == CHUNK_HEADER_SIZE + c->len)
		sl->dest = map_dest(e, e->order[u->first]);
	sl->open_res = 0;
	if (u->pack != NO_PACK) {
		/* Its pack is open already: the read alone. */
		sl->pending = 1;
		if (w->ring_files)
			prep_read(w, io_uring_get_sqe(&w->ring), s, (int)(w->nslots + u->pack), true);
		else
			prep_read(w, io_uring_get_sqe(&w->ring), s, e->pack_fds[u->pack], false);
		return 0;
	}
	if (!w->ring_files) {
		ret = open_chunk(e, c, &sl->fd);
		if (ret)
			return ret;
		sl->pending = 1;
		prep_read(w, io_uring_get_sqe(&w->ring), s, sl->fd, false);
		return 0;
	}
	ret = store_chunk_path(e->s, c->hash, sl->path, PATH_MAX);
	if (ret)
		return ret;
	/* The ring has two entries per slot: there is always room. */
	sqe = io_uring_get_sqe(&w->ring);
	/* No O_CLOEXEC: the kernel refuses it for direct descriptors, which no
	 * exec can inherit anyway. */
	io_uring_prep_openat_direct(sqe, AT_FDCWD, sl->path, O_RDONLY | (direct ? O_DIRECT : 0), 0, s);
	sqe->flags |= IOSQE_IO_LINK;
	io_uring_sqe_set_data64(sqe, OP_OPEN | s);
	sl->pending = 2;
	prep_read(w, io_uring_get_sqe(&w->ring), s, (int)s, true);
	return 0;
}

static void slot_release(struct worker *w, unsigned s)
{
	struct slot *sl = &w->slots[s];

	if (sl->fd >= 0)
		close(sl->fd);
	sl->fd = -1;
	w->freel[w->nfree++] = s;
}

/* A read may come back short only at the end of the file; read what is left
 * through the page cache (an O_DIRECT fd could not take the unaligned rest):
 * to the end of a loose object's file, or of the object in its pack. */
static int finish_short(struct eng *e, struct slot *sl, const struct extent *x)
{
	const struct unit *u = &e->units[x->unit];
	char path[PATH_MAX];
	int fd, ret;
	size_t got = (size_t)sl->res, want = u->pack == NO_PACK ? e->slot_bytes : x->len;

	ret = unit_path(e, u, path, sizeof(path));
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (got < want) {
		ssize_t n = pread(fd, sl->buf + got, want - got, (off_t)(x->off + got));
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

/* Read what a read straight into the file left out, the whole object into
 * the slot this time, so that it is decoded like any other. */
static int reread_into_slot(struct eng *e, struct slot *sl, const struct extent *x)
{
	sl->res = 0;
	sl->dest = NULL;
	return finish_short(e, sl, x);
}

/* Check unit u's object, its obj_len bytes at obj (with dest: its payload
 * read straight into the file there), and write it to every place it
 * occurs.  False on an error (set for everyone). */
static bool process_unit(struct worker *w, const struct unit *u, const uint8_t *obj,
			 size_t obj_len, uint8_t *dest)
{
	struct eng *e = w->e;
	uint32_t o0 = e->order[u->first];
	const struct manifest_chunk *c = occ_chunk(e, o0);
	/* Where the checked bytes end up (src), and whether that is already
	 * occurrence 0's place in its file. */
	const uint8_t *src;
	bool in_file;
	uint8_t *map0;
	int ret;

	if (dest) {
		ret = chunk_check_raw(obj, obj_len, c->hash, dest, c->len);
		if (!ret)
			atomic_fetch_add(&e->read_into_files, c->len);
		src = dest;
		in_file = true;
	} else if (!(map0 = map_dest(e, o0)) && u->stored == CHUNK_HEADER_SIZE + c->len) {
		/* Raw, written with pwrite: checked where it was read, no copy. */
		ret = chunk_check_raw(obj, obj_len, c->hash, obj + CHUNK_HEADER_SIZE, c->len);
		src = obj + CHUNK_HEADER_SIZE;
		in_file = false;
	} else if (!map0 && chunk_is_bare(u->stored, c->len)) {
		/* Bare, written with pwrite: the same, with no header to check. */
		ret = obj_len < c->len ? -EBADMSG : chunk_check_hash(obj, c->len, c->hash);
		src = obj;
		in_file = false;
	} else {
		/* Decoded in place, in the file: one copy.  A chunk that fails its
		 * check may leave bytes there; the whole output is thrown away then. */
		ret = chunk_decode(w->codec, obj, obj_len, c->hash, map0 ? map0 : w->raw, c->len);
		src = map0 ? map0 : w->raw;
		in_file = map0 != NULL;
	}
	if (ret) {
		chunk_failed(e, c, o0, ret,
			     u->pack != NO_PACK && obj_len < u->stored ? "cut short in its pack"
									: log_last_error());
		return false;
	}
	for (uint32_t k = 0; k < u->count && !atomic_load(&e->stop); k++) {
		uint32_t o = e->order[u->first + k];
		const struct manifest_chunk *d = occ_chunk(e, o);
		uint8_t *p = k == 0 ? (in_file ? (uint8_t *)src : NULL) : map_dest(e, o);

		if (p && p != src) {
			memcpy(p, src, d->len);
		} else if (!p) {
			ret = pwrite_occ(e, o, src, d->len, d->off);
			if (ret) {
				chunk_failed(e, d, o, ret, strerror(-ret));
				return false;
			}
		}
		atomic_fetch_add(&e->written, d->len);
	}
	return true;
}

/* A read is in: check and write each chunk of its extent. */
static void process_slot(struct worker *w, unsigned s)
{
	struct eng *e = w->e;
	struct slot *sl = &w->slots[s];
	const struct extent *x = &e->exts[sl->ext];
	const struct unit *u = &e->units[x->unit];
	uint32_t o0 = e->order[u->first];
	const struct manifest_chunk *c = occ_chunk(e, o0);
	int ret = 0;

	if (sl->res == -EINVAL && e->direct_mode == ENGINE_DIRECT_AUTO)
		sl->res = 0; /* O_DIRECT refused at read: read it all below, buffered */
	if (sl->res < 0) {
		chunk_failed(e, c, o0, sl->res,
			     sl->res == -ENOENT ? "missing from the store" : strerror(-sl->res));
		return;
	}
	/* In a pack, what follows the last object is padding or the next one. */
	if (u->pack != NO_PACK && !sl->dest && (uint32_t)sl->res > x->len)
		sl->res = (int)x->len;
	if (sl->dest && (uint32_t)sl->res != u->stored)
		ret = reread_into_slot(e, sl, x); /* shorter (or longer) than the manifest says */
	else if (!sl->dest && (uint32_t)sl->res < x->len)
		ret = finish_short(e, sl, x);
	if (ret) {
		chunk_failed(e, c, o0, ret, strerror(-ret));
		return;
	}
	atomic_fetch_add(&e->read, (uint64_t)sl->res);
	if (u->pack == NO_PACK || x->nunits == 1) {
		process_unit(w, u, sl->buf, (size_t)sl->res, sl->dest);
		return;
	}
	for (uint32_t i = 0; i < x->nunits && !atomic_load(&e->stop); i++) {
		const struct unit *v = &e->units[x->unit + i];
		size_t at = (size_t)(v->off - x->off);
		size_t avail = (size_t)sl->res > at ? MIN((size_t)v->stored, (size_t)sl->res - at) : 0;

		if (!process_unit(w, v, sl->buf + at, avail, NULL))
			return;
	}
}

/* Count a completion; returns the slot once it has all of its, else -1. */
static int reap_one(struct worker *w, struct io_uring_cqe *cqe)
{
	struct eng *e = w->e;
	uint64_t d = io_uring_cqe_get_data64(cqe);
	struct slot *sl = &w->slots[(uint32_t)d];

	if (d & OP_OPEN)
		sl->open_res = cqe->res;
	else
		sl->res = cqe->res;
	if (--sl->pending)
		return -1;
	if (sl->open_res < 0)
		sl->res = sl->open_res; /* the linked read was cancelled */
	/* Some filesystems refuse O_DIRECT at open, some at read: the worker
	 * reads this one through the page cache, and so do later opens. */
	if (sl->res == -EINVAL && atomic_load(&e->direct) && e->direct_mode == ENGINE_DIRECT_AUTO) {
		pr_info("O_DIRECT fails with EINVAL here; reading through the page cache");
		atomic_store(&e->direct, false);
	}
	w->inflight--;
	return (int)(uint32_t)d;
}

/* Gather the completions there are into w->done. */
static void reap(struct worker *w)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&w->ring, head, cqe) {
		int s = reap_one(w, cqe);

		seen++;
		if (s >= 0)
			w->done[w->ndone++] = (uint32_t)s;
	}
	io_uring_cq_advance(&w->ring, seen);
}

static bool cancelled(struct eng *e)
{
	if (e->cancel && atomic_load(e->cancel)) {
		set_error(e, -ECANCELED, "cancelled");
		return true;
	}
	return atomic_load(&e->stop);
}

/* Take the next run of distinct chunks: from the worker's own share, else
 * from the first other share with chunks left.  Returns false when none are.
 * Runs: the next chunk's bytes usually follow the last one's in the same file,
 * and workers that wrote neighbouring chunks would share each 2 MiB page (its
 * folio lock and page-table lock) while it is allocated and mapped (on the
 * H100, 16 workers: 0.22 s with runs of 32 chunks, 0.45 s one at a time).
 * Shares: each worker starts in its own part of the snapshot, mostly its own
 * file, so that pwrite()s do not queue on one file's inode lock, which tmpfs
 * holds for the copy and the page allocation of every write.  Mapped files
 * have no such lock; there all workers take from one share, a stream in
 * store order (on the H100, 16 workers, shares and one stream ran alike,
 * cold and warm: engine-order in bench/LOG.md). */
static bool take_run(struct worker *w)
{
	struct eng *e = w->e;
	size_t self = (size_t)(w - e->workers);

	for (size_t k = 0; k < e->nshares; k++) {
		struct share *sh = &e->shares[(self + k) % e->nshares];
		size_t t;

		if (atomic_load_explicit(&sh->next, memory_order_relaxed) >= sh->end)
			continue;
		t = atomic_fetch_add(&sh->next, e->units_per_take);
		if (t < sh->end) {
			w->take = t;
			w->take_end = MIN(t + e->units_per_take, sh->end);
			return true;
		}
	}
	return false;
}

/* Queue reads of the chunks it takes while the worker has free slots. */
static void fill(struct worker *w)
{
	struct eng *e = w->e;

	while (w->nfree && !cancelled(e)) {
		size_t next;
		unsigned s;
		int ret;

		if (w->take == w->take_end && !take_run(w))
			return;
		next = w->take++;
		s = w->freel[--w->nfree];
		w->slots[s].ext = (uint32_t)next;
		ret = queue_chunk(w, s);
		if (ret) {
			const struct unit *u = &e->units[e->exts[next].unit];

			chunk_failed(e, unit_chunk(e, u), e->order[u->first], ret,
				     ret == -ENOENT ? "missing from the store" : strerror(-ret));
			slot_release(w, s);
			return;
		}
		w->inflight++;
		w->unsubmitted++;
	}
}

/* Submit what fill() queued; false on an error that stops the worker. */
static bool submit(struct worker *w, unsigned wait)
{
	int ret = io_uring_submit_and_wait(&w->ring, wait);

	if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
		set_error(w->e, ret, "io_uring_submit: %s", strerror(-ret));
		return false;
	}
	if (ret >= 0)
		w->unsubmitted = 0;
	return true;
}

/* The worker's loop: keep its slots reading, decode and write what came in.
 * Ends when the chunks are all taken and its reads all done; after a stop it
 * goes on only until its reads in flight are done.  Each slot goes back to
 * the disk as soon as its chunks are written, not once the whole batch of
 * completions is: with O_DIRECT, a worker that checked a batch of reads
 * before queueing any more left the disk idle meanwhile (on the 2-core dev
 * VM the engine read a cold store at 0.6x the disk's speed). */
static void worker_run(struct worker *w)
{
	struct eng *e = w->e;
	bool ok = true;

	while (ok) {
		fill(w);
		if (!w->inflight)
			return;
		ok = submit(w, io_uring_cq_ready(&w->ring) ? 0 : 1);
		if (!ok)
			break;
		reap(w);
		for (unsigned i = 0; i < w->ndone; i++) {
			if (ok && !atomic_load(&e->stop))
				process_slot(w, w->done[i]);
			slot_release(w, w->done[i]);
			if (ok && i + 1 < w->ndone) {
				fill(w);
				if (w->unsubmitted)
					ok = submit(w, 0);
			}
		}
		w->ndone = 0;
	}
	/* The submit failed, so the reads queued since the last one never went
	 * out: wait only for those that did. */
	while (w->inflight > w->unsubmitted) {
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(&w->ring, &cqe) < 0)
			break; /* cannot happen with reads in flight; the ring's exit waits too */
		reap(w);
		for (unsigned i = 0; i < w->ndone; i++)
			slot_release(w, w->done[i]);
		w->ndone = 0;
	}
}

/* What a worker leaves once its thread has ended (its ring went with it). */
static void worker_free(struct worker *w)
{
	if (w->slots)
		for (unsigned i = 0; i < w->nslots; i++)
			if (w->slots[i].fd >= 0)
				close(w->slots[i].fd);
	free(w->slots);
	free(w->freel);
	free(w->done);
	free(w->paths);
	chunk_codec_free(w->codec);
	free(w->raw);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct eng *e = w->e;

	if (worker_setup(w, (unsigned)(w - e->workers)) == 0)
		worker_run(w);
	/* The ring goes here, on its own thread, once its reads are done (it
	 * unregisters its buffers and files); the flags that say how it went
	 * stay for the stats. */
	if (w->ring_ok)
		io_uring_queue_exit(&w->ring);
	pthread_mutex_lock(&e->mu);
	e->running--;
	pthread_cond_broadcast(&e->done_cv);
	pthread_mutex_unlock(&e->mu);
	return NULL;
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

/* The calling thread, while the workers work: progress, and cancels. */
static void watch_workers(struct eng *e, const struct engine_opts *o, const struct engine_stats *st)
{
	uint64_t last = 0;

	pthread_mutex_lock(&e->mu);
	while (e->running) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)ENGINE_TICK_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&e->done_cv, &e->mu, &ts);
		pthread_mutex_unlock(&e->mu);
		cancelled(e);
		report(e, o, st->hole_bytes, st->logical_bytes, &last);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
}

/* Whether writing file fd through a mapping beats pwrite.  A mapping saves a
 * copy (a raw chunk's payload is read straight into it, through the page
 * cache) and the inode lock that many pwrite()ing workers queue on; it costs a
 * page-table entry per page.  With 4 KiB pages that costs more than the copy
 * it saves, with 2 MiB pages (tmpfs huge=, which says so in st_blksize) far
 * less (bench/LOG.md, Engine). */
static bool map_pays(const struct eng *e, const struct engine_opts *o, int fd)
{
	struct stat sb;

	if (o->write != ENGINE_WRITE_AUTO)
		return o->write == ENGINE_WRITE_MMAP;
	if (o->threads > ENGINE_PWRITE_MAX_THREADS)
		return true;
	return !atomic_load(&e->direct) && fstat(fd, &sb) == 0 && sb.st_blksize >= (2 << 20);
}

static int map_files(struct eng *e, const struct engine_opts *o)
{
	e->maps = calloc(MAX(e->m->nfiles, (size_t)1), sizeof(*e->maps));
	if (!e->maps)
		return -ENOMEM;
	atomic_store(&e->populate, true);
	e->writers = o->writers;
	for (size_t i = 0; i < e->m->nfiles; i++) {
		const struct engine_writer *w = e->writers ? &e->writers[i] : NULL;
		void *p;

		if (!e->m->files[i].size || !map_pays(e, o, e->files[i]))
			continue;
		if (w && w->map) {
			e->maps[i] = w->map;
			e->mapped = true;
			continue;
		}
		if (w && w->pwrite)
			continue; /* never the descriptor's mapping: not where its bytes go */
		p = mmap(NULL, e->m->files[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, e->files[i], 0);
		if (p == MAP_FAILED) {
			pr_debug("cannot map %s/%s (%s): writing it with pwrite", e->outdir,
				 e->m->files[i].path, strerror(errno));
			continue;
		}
		e->maps[i] = p;
		e->mapped = true;
	}
	return 0;
}

static void unmap_files(struct eng *e)
{
	if (!e->maps)
		return;
	for (size_t i = 0; i < e->m->nfiles; i++)
		if (e->maps[i] && !(e->writers && e->writers[i].map))
			munmap(e->maps[i], e->m->files[i].size);
	free(e->maps);
	e->maps = NULL;
}

static void eng_release(struct eng *e)
{
	unmap_files(e);
	if (e->workers)
		for (unsigned i = 0; i < e->nworkers; i++)
			worker_free(&e->workers[i]);
	free(e->workers);
	free(e->shares);
	if (e->arena)
		munmap(e->arena, e->arena_len);
	if (e->fds)
		for (size_t i = 0; i < e->m->nfiles; i++)
			if (e->fds[i] >= 0)
				close(e->fds[i]);
	free(e->fds);
	close_packs(e);
	free(e->pack_nos);
	free(e->occ);
	free(e->order);
	free(e->units);
	free(e->exts);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->done_cv);
}

/* Start the workers and wait for them; returns how many ran. */
static unsigned run_workers(struct eng *e, const struct engine_opts *o, const struct engine_stats *st)
{
	unsigned n = 0;

	e->workers = calloc(o->threads, sizeof(*e->workers));
	if (!e->workers) {
		set_error(e, -ENOMEM, "cannot allocate %u workers", o->threads);
		return 0;
	}
	e->nworkers = o->threads;
	e->shares = aligned_alloc(64, ALIGN_UP(o->threads * sizeof(*e->shares), 64));
	if (!e->shares) {
		set_error(e, -ENOMEM, "cannot allocate %u workers", o->threads);
		return 0;
	}
	e->nshares = o->order == ENGINE_ORDER_SHARES ? o->threads
		     : o->order == ENGINE_ORDER_STREAM ? 1
		     : e->mapped		       ? 1
						       : o->threads;
	for (size_t i = 0; i < e->nshares; i++) {
		atomic_init(&e->shares[i].next, e->nexts * i / e->nshares);
		e->shares[i].end = e->nexts * (i + 1) / e->nshares;
	}
	/* Runs of ~2 MiB (32 chunks of 64 KiB on average), shorter where a few
	 * long runs would leave workers idle at the end; in extents of several
	 * chunks, as many extents as hold about that many chunks. */
	e->units_per_take = o->units_per_take ? o->units_per_take
			    : MAX((size_t)1, MIN((size_t)ENGINE_UNITS_PER_TAKE,
						 e->nunits / ((size_t)o->threads * 8)));
	if (e->nexts < e->nunits)
		e->units_per_take = MAX((size_t)1, e->units_per_take * e->nexts / e->nunits);
	for (unsigned i = 0; i < o->threads; i++) {
		struct worker *w = &e->workers[i];
		int ret;

		w->e = e;
		pthread_mutex_lock(&e->mu);
		e->running++;
		pthread_mutex_unlock(&e->mu);
		ret = pthread_create(&w->tid, NULL, worker_main, w);
		if (ret) {
			pthread_mutex_lock(&e->mu);
			e->running--;
			pthread_mutex_unlock(&e->mu);
			set_error(e, -ret, "cannot start worker threads: %s", strerror(ret));
			break;
		}
		n++;
	}
	watch_workers(e, o, st);
	for (unsigned i = 0; i < n; i++)
		pthread_join(e->workers[i].tid, NULL);
	return n;
}

int engine_materialize(struct store *s, const struct manifest *m, const char *outdir,
		       const struct engine_opts *opts, struct engine_stats *stp)
{
	struct engine_opts o;
	struct engine_stats st;
	struct eng e;
	pthread_condattr_t ca;
	unsigned nthreads = 0;
	uint64_t start = now_ns();
	int ret;

	engine_opts_default(&o);
	if (opts) {
		o.cancel = opts->cancel;
		o.progress = opts->progress;
		o.progress_arg = opts->progress_arg;
		o.direct = opts->direct;
		o.write = opts->write;
		o.order = opts->order;
		if (opts->queue_depth)
			o.queue_depth = opts->queue_depth;
		if (opts->arena_bytes)
			o.arena_bytes = opts->arena_bytes;
		if (opts->threads)
			o.threads = opts->threads;
		o.units_per_take = opts->units_per_take;
		o.files = opts->files;
		o.skip_missing = opts->skip_missing;
		o.writers = opts->writers;
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
	atomic_store(&e.direct, o.direct != ENGINE_DIRECT_OFF);
	pthread_mutex_init(&e.mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e.done_cv, &ca);
	pthread_condattr_destroy(&ca);

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
	if (o.files) {
		/* The other writer's: never closed here (-1 in e.fds). */
		e.files = o.files;
		for (size_t f = 0; f < m->nfiles; f++)
			e.fds[f] = -1;
	} else {
		ret = engine_create_files(m, outdir, e.fds);
		if (ret) {
			free(e.fds);
			e.fds = NULL;
			goto out;
		}
		e.files = e.fds;
	}
	if (!e.nunits)
		goto done;
	ret = locate_units(&e);
	if (ret)
		goto out;
	if (o.skip_missing) {
		drop_missing(&e, &st);
		if (!e.nunits)
			goto done;
	}
	if (o.direct == ENGINE_DIRECT_AUTO) {
		st.cached_percent = cached_percent(&e);
		if (st.cached_percent >= ENGINE_CACHED_PERCENT)
			atomic_store(&e.direct, false);
		pr_debug("%d%% of the sampled chunk pages are cached: %s reads", st.cached_percent,
			 atomic_load(&e.direct) ? "O_DIRECT" : "buffered");
	}
	ret = open_packs(&e);
	if (ret)
		goto out;
	ret = build_extents(&e);
	if (ret)
		goto out;
	o.threads = (unsigned)MIN((size_t)o.threads, e.nexts);
	ret = setup_arena(&e, &o);
	if (ret)
		goto out;
	ret = map_files(&e, &o);
	if (ret)
		goto out;
	st.setup_seconds = (double)(now_ns() - start) / 1e9;
	nthreads = run_workers(&e, &o, &st);
	ret = e.err;
	if (ret) {
		pr_err("%s", e.errmsg);
		fault_note(&e.fault);
		goto out;
	}
done:
	unmap_files(&e);
	for (size_t f = 0; f < m->nfiles; f++) {
		if (e.fds[f] >= 0 && close(e.fds[f]) < 0 && !ret) {
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
	st.read_into_files = atomic_load(&e.read_into_files);
	st.direct = atomic_load(&e.direct) && e.nunits;
	st.fixed_buffers = nthreads > 0;
	st.ring_opens = nthreads > 0;
	for (unsigned i = 0; i < nthreads; i++) {
		st.fixed_buffers &= e.workers[i].fixed;
		st.ring_opens &= e.workers[i].ring_files;
	}
	st.mapped = e.mapped;
	st.shares = e.nshares > 1;
	st.threads = nthreads;
	st.queue_depth = nthreads * e.slots_per_worker;
	st.slots = st.queue_depth;
	st.slot_bytes = e.slot_bytes;
	st.seconds = (double)(now_ns() - start) / 1e9;
	if (stp)
		*stp = st;
	eng_release(&e);
	return ret;
}
