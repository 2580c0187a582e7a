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
 *
 * This file is the run itself; the work list, a worker and the writing of
 * what it read are parts of their own (engine_internal.h lists them).
 */
#define LOG_PREFIX "engine: "
#include "restore/engine_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_BUFFERED_PER_WORKER 4u /* page-cache reads a worker has queued at once */
#define ENGINE_TICK_NS   50000000ull /* progress and cancel are looked at this often */
#define ENGINE_CACHED_PERCENT 50 /* auto: at least this much cached, read buffered */
#define ENGINE_EXTENT_INFLIGHT (64u << 20) /* bytes of O_DIRECT extent reads in flight */

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

void eng_set_error(struct eng *e, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error_v(e, err, NULL, fmt, ap);
	va_end(ap);
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
void eng_chunk_failed(struct eng *e, const struct manifest_chunk *c, uint32_t o, int err,
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

bool eng_cancelled(struct eng *e)
{
	if (e->cancel && atomic_load(e->cancel)) {
		eng_set_error(e, -ECANCELED, "cancelled");
		return true;
	}
	return atomic_load(&e->stop);
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
		struct timespec ts = mono_timespec(now_ns() + ENGINE_TICK_NS);

		pthread_cond_timedwait(&e->done_cv, &e->mu, &ts);
		pthread_mutex_unlock(&e->mu);
		eng_cancelled(e);
		report(e, o, st->hole_bytes, st->logical_bytes, &last);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
}

static void eng_release(struct eng *e)
{
	eng_unmap_files(e);
	if (e->workers)
		for (unsigned i = 0; i < e->nworkers; i++)
			eng_worker_free(&e->workers[i]);
	free(e->workers);
	free(e->shares);
	if (e->arena)
		munmap(e->arena, e->arena_len);
	if (e->fds)
		for (size_t i = 0; i < e->m->nfiles; i++)
			if (e->fds[i] >= 0)
				close(e->fds[i]);
	free(e->fds);
	eng_close_packs(e);
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
		eng_set_error(e, -ENOMEM, "cannot allocate %u workers", o->threads);
		return 0;
	}
	e->nworkers = o->threads;
	e->shares = aligned_alloc(64, ALIGN_UP(o->threads * sizeof(*e->shares), 64));
	if (!e->shares) {
		eng_set_error(e, -ENOMEM, "cannot allocate %u workers", o->threads);
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
		ret = pthread_create(&w->tid, NULL, eng_worker_main, w);
		if (ret) {
			pthread_mutex_lock(&e->mu);
			e->running--;
			pthread_mutex_unlock(&e->mu);
			eng_set_error(e, -ret, "cannot start worker threads: %s", strerror(ret));
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
	cond_init_monotonic(&e.done_cv);

	ret = eng_plan(&e, &st);
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
	ret = eng_locate_units(&e);
	if (ret)
		goto out;
	if (o.skip_missing) {
		eng_drop_missing(&e, &st);
		if (!e.nunits)
			goto done;
	}
	if (o.direct == ENGINE_DIRECT_AUTO) {
		st.cached_percent = eng_cached_percent(&e);
		if (st.cached_percent >= ENGINE_CACHED_PERCENT)
			atomic_store(&e.direct, false);
		pr_debug("%d%% of the sampled chunk pages are cached: %s reads", st.cached_percent,
			 atomic_load(&e.direct) ? "O_DIRECT" : "buffered");
	}
	ret = eng_open_packs(&e);
	if (ret)
		goto out;
	ret = eng_build_extents(&e);
	if (ret)
		goto out;
	o.threads = (unsigned)MIN((size_t)o.threads, e.nexts);
	ret = setup_arena(&e, &o);
	if (ret)
		goto out;
	ret = eng_map_files(&e, &o);
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
	eng_unmap_files(&e);
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
