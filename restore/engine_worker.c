/* SPDX-License-Identifier: Apache-2.0 */
/* engine_worker.c — one of the engine's workers (engine_internal.h): its
 * own ring, slots in the arena and file table; it takes runs of extents
 * from the shares, queues their reads (a chunk's openat linked to its read
 * where the ring can open files), reaps them and hands each read's chunks
 * to engine_write.c, giving the slot back to the disk at once.  Only this
 * thread ever submits to its ring.
 */
#define LOG_PREFIX "engine: "
#include "restore/engine_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

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
		eng_set_error(e, -ENOMEM, "cannot allocate a worker's buffers");
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
		eng_set_error(e, ret, "io_uring_queue_init(%u): %s", 2 * w->nslots, strerror(-ret));
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
	const struct manifest_chunk *c = eng_unit_chunk(e, u);

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
	const struct manifest_chunk *c = eng_unit_chunk(e, u);
	bool direct = atomic_load(&e->direct);
	struct io_uring_sqe *sqe;
	int ret;

	/* A raw chunk read through the page cache needs no slot for its bytes
	 * (O_DIRECT could not start the payload 16 bytes into the file). */
	sl->dest = NULL;
	if (!direct && !(u->pack != NO_PACK && e->packs_direct) && e->exts[sl->ext].nunits == 1 &&
	    u->stored == CHUNK_HEADER_SIZE + c->len)
		sl->dest = eng_map_dest(e, e->order[u->first]);
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

	ret = eng_unit_path(e, u, path, sizeof(path));
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

/* A read is in: check and write each chunk of its extent. */
static void process_slot(struct worker *w, unsigned s)
{
	struct eng *e = w->e;
	struct slot *sl = &w->slots[s];
	const struct extent *x = &e->exts[sl->ext];
	const struct unit *u = &e->units[x->unit];
	uint32_t o0 = e->order[u->first];
	const struct manifest_chunk *c = eng_occ_chunk(e, o0);
	int ret = 0;

	if (sl->res == -EINVAL && e->direct_mode == ENGINE_DIRECT_AUTO)
		sl->res = 0; /* O_DIRECT refused at read: read it all below, buffered */
	if (sl->res < 0) {
		eng_chunk_failed(e, c, o0, sl->res,
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
		eng_chunk_failed(e, c, o0, ret, strerror(-ret));
		return;
	}
	atomic_fetch_add(&e->read, (uint64_t)sl->res);
	if (u->pack == NO_PACK || x->nunits == 1) {
		eng_process_unit(w, u, sl->buf, (size_t)sl->res, sl->dest);
		return;
	}
	for (uint32_t i = 0; i < x->nunits && !atomic_load(&e->stop); i++) {
		const struct unit *v = &e->units[x->unit + i];
		size_t at = (size_t)(v->off - x->off);
		size_t avail = (size_t)sl->res > at ? MIN((size_t)v->stored, (size_t)sl->res - at) : 0;

		if (!eng_process_unit(w, v, sl->buf + at, avail, NULL))
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

	while (w->nfree && !eng_cancelled(e)) {
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

			eng_chunk_failed(e, eng_unit_chunk(e, u), e->order[u->first], ret,
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
		eng_set_error(w->e, ret, "io_uring_submit: %s", strerror(-ret));
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
void eng_worker_free(struct worker *w)
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

void *eng_worker_main(void *arg)
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
