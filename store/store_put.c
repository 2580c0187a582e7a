/* SPDX-License-Identifier: Apache-2.0 */
/* store_put.c — ingest files into chunks and a manifest.
 *
 * One reader (the calling thread) streams each file in 8 MiB buffers and cuts
 * it into chunks (chunker.h); a pool of workers hashes each chunk, skips it if
 * the store has it, else encodes and writes it.  Buffers are reference counted
 * by the chunks still in flight, so reading overlaps hashing, and at most
 * PUT_NBUF buffers are in memory.  The manifest keeps the file's chunk order
 * whatever order workers finish in: each job knows its slot.
 *
 * New chunks go into a pack of each worker's own (pack.h), or, in the loose
 * layout, a file each.
 *
 * Crash safety: packs and chunk objects are linked into place only when
 * complete; each pack is synced before its index is written (loose objects:
 * one syncfs()), all before the manifest, which is fsynced, is linked into
 * place.  So a crash at any point leaves complete objects, and never a
 * manifest that names a missing chunk.  The whole put holds the store lock
 * shared, so gc cannot delete a chunk between our "it exists" and the manifest.
 */
#define LOG_PREFIX "store: "
#include "store/chunker.h"
#include "criu/criu_cuts.h"
#include "store/internal.h"
#include "common/log.h"
#include "common/sigbus.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define PUT_BUF_SIZE	(8u << 20)
#define PUT_NBUF	4
#define PUT_MAX_WORKERS 8
#define PUT_MAX_DEPTH	64
#define PUT_BATCH	16 /* chunks the reader hands to the workers at once */

/* A window of the input: its bytes read into data, or a view of a mapped
 * file.  Buffers bound the work in flight either way. */
struct put_buf {
	uint8_t *data;	     /* PUT_BUF_SIZE bytes for read() */
	const uint8_t *view; /* the window: data, or into the mapping */
	bool mapped;	     /* view is a mapping's: reading it may fault (SIGBUS) */
	int refs;	     /* the reader's, plus one per chunk in flight */
};

struct put_job {
	struct put_job *next;
	struct put_buf *buf;
	const uint8_t *data;
	uint32_t len;
	size_t file, idx;
	uint8_t hash[CHUNK_HASH_LEN];
	uint32_t stored;
	bool fresh; /* written by this put */
	bool twin;  /* a chunk another job of this put writes: stored found at the end */
	bool held;  /* stored bare from buf's bytes: buf's reference goes when it is written */
};

struct put_input {
	char *src; /* path to read */
	char *rel; /* path in the manifest */
};

struct put {
	struct store *s;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* a job was queued, or stop */
	pthread_cond_t free_cv; /* a buffer was freed */
	struct put_job *head, *tail;
	/* The reader's jobs not yet queued, and their buffer references: queued
	 * PUT_BATCH at a time, with one wake-up, rather than one each: on the
	 * H100's VM waking an idle worker on another vCPU for every ~64 KiB chunk
	 * cost a put that stores nothing several times its hashing's overhead
	 * elsewhere (bench/LOG.md, "Packs"). */
	struct put_job *pend_head, *pend_tail;
	unsigned npend;
	bool stop;
	int err;
	char errmsg[512]; /* a worker's words for err, for the caller's thread */
	struct put_buf bufs[PUT_NBUF];

	bool loose_present; /* the store holds loose chunks too: look there as well */
	struct hash_set claimed; /* chunks this put is writing to packs (under mu) */

	struct manifest *m;
	struct put_job **jobs;
	size_t njobs, jobs_cap;
	struct store_put_stats st;
};

/* A chunk into one file of its own (THAW_STORE_LAYOUT=loose). */
static int put_chunk_loose(struct put *p, struct chunk_codec *codec, uint8_t *obj,
			   struct put_job *j)
{
	char name[STORE_CHUNK_NAME_LEN];
	const void *payload;
	struct stat sb;
	bool replace = false;
	int ret;

	store_chunk_name(j->hash, name);
	/* Dedup before encoding: a chunk we have costs a hash and a stat. */
	if (fstatat(p->s->dirfd, name, &sb, 0) == 0) {
		if (chunk_object_size_possible((uint64_t)sb.st_size, j->len)) {
			j->stored = (uint32_t)sb.st_size;
			return 0;
		}
		/* Impossible length (e.g. cut short by a power loss): write it anew. */
		pr_warn("chunk object %s/%s has an impossible size %lld; rewriting it", p->s->dir,
			name, (long long)sb.st_size);
		replace = true;
	} else if (errno != ENOENT) {
		ret = -errno;
		pr_perror("cannot stat %s/%s", p->s->dir, name);
		return ret;
	}
	long n = chunk_encode_parts(codec, j->data, j->len, obj, chunk_encode_bound(CHUNK_MAX_RAW),
				    &payload);
	if (n < 0) {
		pr_err("cannot encode a chunk of %u bytes: %s", j->len, strerror((int)-n));
		return (int)n;
	}
	/* A raw chunk goes from the input buffer straight into the file, not
	 * through obj: header and payload in one writev. */
	if (payload == j->data)
		ret =
		    store_write_chunk(p->s, name, obj, CHUNK_HEADER_SIZE, payload, j->len, replace);
	else
		ret = store_write_chunk(p->s, name, obj, (size_t)n, NULL, 0, replace);
	if (ret < 0)
		return ret;
	j->stored = (uint32_t)n;
	j->fresh = ret == 1;
	return 0;
}

/* A chunk into this worker's pack, unless a pack or a loose object has it,
 * or another job of this put is writing it.  A raw chunk of whole pages goes
 * in bare, written from the input's own pages (j->buf held until the pack
 * writer releases it): the copy behind a header was a sizeable share of a
 * put's CPU (perf; bench/LOG.md, "Bare raw chunks").  An input file
 * rewritten in place between the hash and the write would store bytes that
 * do not match their name, as a rewrite between the hash and a copy would
 * have: every read checks the hash, so it shows as a bad chunk, never as a
 * wrong restore. */
static int put_chunk_pack(struct put *p, struct chunk_codec *codec, struct pack_writer *w,
			  struct put_job *j)
{
	struct store_chunk_loc loc;
	char name[STORE_CHUNK_NAME_LEN];
	struct stat sb;
	int ret;

	if (store_index_find(p->s, j->hash, &loc)) {
		j->stored = loc.stored;
		return 0;
	}
	if (p->loose_present) {
		store_chunk_name(j->hash, name);
		if (fstatat(p->s->dirfd, name, &sb, 0) == 0 &&
		    chunk_object_size_possible((uint64_t)sb.st_size, j->len)) {
			j->stored = (uint32_t)sb.st_size;
			return 0;
		}
	}
	pthread_mutex_lock(&p->mu);
	ret = hash_set_add(&p->claimed, j->hash);
	pthread_mutex_unlock(&p->mu);
	if (ret < 0)
		return ret;
	if (ret == 0) {
		j->twin = true;
		return 0;
	}
	ret = pack_writer_add(w, codec, j->hash, j->data, j->len, &j->stored, j->buf, &j->held);
	j->fresh = ret == 0;
	return ret;
}

struct put_chunk_call {
	struct put *p;
	struct chunk_codec *codec;
	uint8_t *obj;
	struct pack_writer *w;
	struct put_job *j;
};

static int put_chunk_call(void *arg)
{
	struct put_chunk_call *c = arg;

	chunk_codec_hash(c->codec, c->j->data, c->j->len, c->j->hash);
	return c->w ? put_chunk_pack(c->p, c->codec, c->w, c->j)
		    : put_chunk_loose(c->p, c->codec, c->obj, c->j);
}

/* An input file shrank (or could not be read) while the put mapped it. */
static int input_changed(const char *path)
{
	pr_err("cannot read %s: it changed while being read", path);
	return -EIO;
}

/* fn(arg), under the SIGBUS guard where it reads a mapping of path. */
static int read_input(bool mapped, int (*fn)(void *), void *arg, const char *path)
{
	int ret;

	if (!mapped)
		return fn(arg);
	ret = sigbus_guarded(fn, arg);
	return ret == -EFAULT ? input_changed(path) : ret;
}

/* Hash a chunk and store it unless the store has it.  A chunk of a mapped
 * file is read under the SIGBUS guard: nothing it calls while reading the
 * chunk holds a lock (the claim's mutex is taken after hashing and released
 * before encoding).  A fault leaves this worker's pack half-appended, which
 * is never finished: the put fails. */
static int put_chunk(struct put *p, struct chunk_codec *codec, uint8_t *obj,
		     struct pack_writer *w, struct put_job *j)
{
	struct put_chunk_call c = {p, codec, obj, w, j};

	return read_input(j->buf->mapped, put_chunk_call, &c, p->m->files[j->file].path);
}

static int put_error(struct put *p);

/* CPU seconds the calling thread has used. */
static double thread_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) < 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* With p->mu held: one reference on b goes; the last wakes the reader. */
static void buf_unref(struct put *p, struct put_buf *b)
{
	if (--b->refs == 0)
		pthread_cond_broadcast(&p->free_cv);
}

/* The pack writer wrote (or dropped) a bare chunk read from b: the job's
 * reference on b goes, as it would have after a copy. */
static void put_release(void *arg, void *token)
{
	struct put *p = arg;

	pthread_mutex_lock(&p->mu);
	buf_unref(p, token);
	pthread_mutex_unlock(&p->mu);
}

/* With p->mu held: the put fails with ret (its words kept for the caller's
 * thread), unless it failed already. */
static void put_failed(struct put *p, int ret)
{
	if (ret < 0 && !p->err) {
		p->err = ret;
		snprintf(p->errmsg, sizeof(p->errmsg), "%s", log_last_error());
	}
}

/* A pack writer's result: a bare payload it could not read (-EFAULT) is the
 * input file shrinking under the put; the file the worker read last is the
 * one mapped (one mapped file is in flight at a time). */
static int writer_result(struct put *p, int ret, size_t last_file)
{
	return ret == -EFAULT ? input_changed(p->m->files[last_file].path) : ret;
}

/* Called with p->mu held, and returns with it held: write what the worker's
 * pack writer holds of the input before the worker waits for more work, so
 * that the reader, which may be waiting for those buffers, goes on. */
static void put_worker_flush(struct put *p, struct pack_writer *w, size_t last_file)
{
	int ret;

	pthread_mutex_unlock(&p->mu);
	ret = writer_result(p, pack_writer_flush(w), last_file);
	pthread_mutex_lock(&p->mu);
	put_failed(p, ret);
}

static void *put_worker(void *arg)
{
	struct put *p = arg;
	struct chunk_codec *codec = chunk_codec_new();
	uint8_t *obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW));
	struct pack_writer *w = NULL;
	int err = codec && obj ? 0 : -ENOMEM;
	size_t last_file = 0;

	if (!err && p->s->layout == STORE_LAYOUT_PACK && !(w = pack_writer_new(p->s)))
		err = -ENOMEM;
	if (w)
		pack_writer_set_release(w, put_release, p);
	if (err)
		pr_err("out of memory for a put worker");
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->head && !p->stop) {
			if (pack_writer_holds(w))
				put_worker_flush(p, w, last_file);
			else
				pthread_cond_wait(&p->work_cv, &p->mu);
		}
		struct put_job *j = p->head;
		if (!j)
			break;
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
		/* After a failure, jobs are only drained, so that their buffers come back. */
		bool skip = err || p->err;
		pthread_mutex_unlock(&p->mu);
		int ret = skip ? 0 : put_chunk(p, codec, obj, w, j);
		last_file = j->file;
		pthread_mutex_lock(&p->mu);
		put_failed(p, ret);
		if (err && !p->err)
			p->err = err;
		if (!j->held)
			buf_unref(p, j->buf);
	}
	pthread_mutex_unlock(&p->mu);
	/* This worker's last pack made durable and indexed, unless the put failed. */
	if (w && !err && put_error(p) == 0) {
		int ret = writer_result(p, pack_writer_finish(w), last_file);
		pthread_mutex_lock(&p->mu);
		put_failed(p, ret);
		pthread_mutex_unlock(&p->mu);
	}
	pack_writer_free(w);
	chunk_codec_free(codec);
	free(obj);
	double cpu = thread_cpu_s();
	pthread_mutex_lock(&p->mu);
	p->st.workers_cpu_s += cpu;
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Queue the reader's pending jobs for the workers, each holding its buffer.
 * Called before the reader waits for anything the workers free. */
static void hand_out(struct put *p)
{
	if (!p->npend)
		return;
	pthread_mutex_lock(&p->mu);
	for (struct put_job *j = p->pend_head; j; j = j->next)
		j->buf->refs++;
	if (p->tail)
		p->tail->next = p->pend_head;
	else
		p->head = p->pend_head;
	p->tail = p->pend_tail;
	if (p->npend > 1)
		pthread_cond_broadcast(&p->work_cv);
	else
		pthread_cond_signal(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	p->pend_head = p->pend_tail = NULL;
	p->npend = 0;
}

static struct put_buf *buf_get(struct put *p)
{
	struct put_buf *b = NULL;

	hand_out(p); /* the buffers we wait for are freed by these jobs */
	pthread_mutex_lock(&p->mu);
	for (;;) {
		for (int i = 0; i < PUT_NBUF && !b; i++)
			if (p->bufs[i].refs == 0)
				b = &p->bufs[i];
		if (b)
			break;
		pthread_cond_wait(&p->free_cv, &p->mu);
	}
	b->refs = 1;
	pthread_mutex_unlock(&p->mu);
	return b;
}

static void buf_put(struct put *p, struct put_buf *b)
{
	hand_out(p); /* before the reader's reference goes: they hold theirs */
	pthread_mutex_lock(&p->mu);
	buf_unref(p, b);
	pthread_mutex_unlock(&p->mu);
}

static int file_append(struct manifest_file *f, size_t *cap, const struct manifest_chunk *c)
{
	if (ARRAY_GROW(f->chunks, *cap, f->nchunks + 1, 64))
		return -ENOMEM;
	f->chunks[f->nchunks++] = *c;
	return 0;
}

static int emit(struct put *p, size_t fi, size_t *cap, struct put_buf *b, const uint8_t *data,
		uint64_t off, const struct chunker_cut *cut)
{
	struct manifest_file *f = &p->m->files[fi];
	struct manifest_chunk c = {.off = off, .len = cut->len, .zero = cut->zero};
	struct put_job *j;

	if (cut->zero) {
		p->st.zero_bytes += cut->len;
		/* The chunker ends a hole at a buffer's end; the next one continues it. */
		if (f->nchunks && f->chunks[f->nchunks - 1].zero) {
			f->chunks[f->nchunks - 1].len += cut->len;
			return 0;
		}
		return file_append(f, cap, &c);
	}
	if (ARRAY_GROW(p->jobs, p->jobs_cap, p->njobs + 1, 1024))
		return -ENOMEM;
	j = calloc(1, sizeof(*j));
	if (!j || file_append(f, cap, &c) < 0) {
		free(j);
		return -ENOMEM;
	}
	j->buf = b;
	j->data = data;
	j->len = (uint32_t)cut->len;
	j->file = fi;
	j->idx = f->nchunks - 1;
	p->jobs[p->njobs++] = j;
	if (p->pend_tail)
		p->pend_tail->next = j;
	else
		p->pend_head = j;
	p->pend_tail = j;
	if (++p->npend >= PUT_BATCH)
		hand_out(p);
	return 0;
}

static int put_error(struct put *p)
{
	pthread_mutex_lock(&p->mu);
	int err = p->err;
	pthread_mutex_unlock(&p->mu);
	return err;
}

/* A CRIU pages file is cut at its pagemap entries' boundaries (criu_cuts.h),
 * and within entries by content; any other file, or a pages file whose
 * pagemap cannot be read, by content alone.  No address-aligned steps within
 * entries: between two boots of one function ASLR moves mappings by whole
 * pages, and such steps then cut the same bytes differently (measured with
 * e2e_dedup's two snapshots of the CPU example: a small fraction shared
 * with such steps, most of it without; bench/LOG.md). */
static void pages_cuts(const struct put_input *in, uint64_t size, uint64_t **cuts, size_t *n)
{
	const char *slash = strrchr(in->src, '/');
	const char *base = slash ? slash + 1 : in->src;
	char dir[PATH_MAX];

	if (strncmp(base, "pages-", 6))
		return;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (snprintf(dir, sizeof(dir), "%.*s", (int)(slash - in->src), in->src) >=
		 (int)sizeof(dir))
		return;
	int ret = criu_pages_cuts(dir, base, size, cuts, n);
	if (ret < 0 && ret != -ENOENT)
		pr_warn("%s: cut by content alone (its pagemap: %s)", in->src, strerror(-ret));
}

/* The file a put is reading: mapped whole, or read into the put's buffers. */
struct put_src {
	const struct put_input *in;
	int fd;
	uint64_t size;
	const uint8_t *map; /* or NULL: read() */
};

/* Map large regular files: chunking and hashing then read the page cache in
 * place, which saves a copy of every byte (bench/LOG.md, "Mapped input and a
 * sampled chunker").  Small files, and files that cannot be mapped, are read. */
static void src_map(struct put *p, struct put_src *src)
{
	void *m;

	if (!p->s->map_input || src->size < PUT_BUF_SIZE || src->size > SIZE_MAX)
		return;
	m = mmap(NULL, (size_t)src->size, PROT_READ, MAP_SHARED, src->fd, 0);
	if (m == MAP_FAILED)
		return;
	madvise(m, (size_t)src->size, MADV_SEQUENTIAL);
	src->map = m;
}

/* Wait until no job holds a buffer: the workers are done with the mapping. */
static void bufs_wait_idle(struct put *p)
{
	hand_out(p);
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < PUT_NBUF; i++)
		while (p->bufs[i].refs)
			pthread_cond_wait(&p->free_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* Fill b from *have up to a buffer's worth: read() into it, or, mapped, the
 * window of the mapping at pos (its pages populated in one call, so that a
 * file truncated under us is an error here rather than a fault later). */
static int src_fill(struct put_src *src, struct put_buf *b, uint64_t pos, size_t *have,
		    bool *eof, uint64_t *done)
{
	if (src->map) {
		uint64_t left = src->size - pos;
		size_t n = left < PUT_BUF_SIZE ? (size_t)left : PUT_BUF_SIZE;
		uintptr_t from = (uintptr_t)(src->map + pos) & ~(uintptr_t)4095;
		uintptr_t to = (uintptr_t)(src->map + pos + n);

		b->view = src->map + pos;
		*done += n - *have;
		*have = n;
		*eof = pos + n == src->size;
		/* EINVAL: a kernel before 5.14; the pages then fault in as read. */
		if (n && madvise((void *)from, to - from, MADV_POPULATE_READ) < 0 &&
		    errno != EINVAL) {
			if (errno == EFAULT)
				return input_changed(src->in->src);
			int ret = -errno;
			pr_perror("cannot read %s", src->in->src);
			return ret;
		}
		return 0;
	}
	b->view = b->data;
	while (!*eof && *have < PUT_BUF_SIZE) {
		ssize_t n = read(src->fd, b->data + *have, PUT_BUF_SIZE - *have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int ret = -errno;
			pr_perror("cannot read %s", src->in->src);
			return ret;
		}
		if (n == 0)
			*eof = true;
		*have += (size_t)n;
		*done += (uint64_t)n;
	}
	return 0;
}

struct chunker_call {
	const uint8_t *data;
	size_t len;
	bool end;
	struct chunker_cut *cut;
};

static int chunker_call(void *arg)
{
	struct chunker_call *c = arg;

	return chunker_next(c->data, c->len, c->end, c->cut);
}

/* chunker_next(), guarded where it reads a mapping. */
static int next_cut(const struct put_src *src, const uint8_t *data, size_t len, bool end,
		    struct chunker_cut *cut)
{
	struct chunker_call c = {data, len, end, cut};

	return read_input(src->map != NULL, chunker_call, &c, src->in->src);
}

void store_set_put_workers(struct store *s, unsigned n)
{
	s->put_workers = n;
}

void store_set_input_map(struct store *s, bool map)
{
	s->map_input = map;
}

static int put_file(struct put *p, size_t fi, const struct put_input *in, struct progress *prog,
		    uint64_t *done)
{
	struct manifest_file *f = &p->m->files[fi];
	struct put_src src = {.in = in, .fd = -1};
	struct put_buf *b = NULL;
	struct stat sb;
	uint64_t *cuts = NULL;
	size_t ncuts = 0, ci = 0;
	size_t have = 0, cap = 0;
	uint64_t pos = 0; /* file offset of b->view[0] */
	bool eof = false;
	int ret = 0;

	src.fd = open(in->src, O_RDONLY | O_CLOEXEC);
	if (src.fd < 0) {
		ret = -errno;
		pr_perror("cannot open %s", in->src);
		return ret;
	}
	if (fstat(src.fd, &sb) < 0) {
		ret = -errno;
		pr_perror("cannot stat %s", in->src);
		goto out;
	}
	f->path = strdup(in->rel);
	if (!f->path) {
		ret = -ENOMEM;
		goto out;
	}
	f->mode = sb.st_mode & 0777;
	src.size = (uint64_t)sb.st_size;
	pages_cuts(in, src.size, &cuts, &ncuts);
	src_map(p, &src);
	if (!src.map)
		posix_fadvise(src.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	b = buf_get(p);
	b->mapped = src.map != NULL;
	for (;;) {
		ret = src_fill(&src, b, pos, &have, &eof, done);
		if (ret < 0)
			goto out;
		progress_update(prog, *done);
		size_t off = 0;
		struct chunker_cut cut;
		while (off < have) {
			/* A forced cut ends the data the chunker sees, as the end of
			 * the file would. */
			size_t len = have - off;
			bool end = eof;
			while (ci < ncuts && cuts[ci] <= pos + off)
				ci++;
			if (ci < ncuts && cuts[ci] - (pos + off) <= len) {
				len = (size_t)(cuts[ci] - (pos + off));
				end = true;
			}
			ret = next_cut(&src, b->view + off, len, end, &cut);
			if (ret < 0)
				goto out;
			if (!ret)
				break;
			ret = emit(p, fi, &cap, b, b->view + off, pos + off, &cut);
			if (ret < 0)
				goto out;
			off += cut.len;
		}
		ret = put_error(p);
		if (ret < 0)
			goto out;
		if (eof && off == have)
			break;
		/* Carry the undecided tail (< CHUNKER_MAX) to the front of a fresh
		 * buffer; a mapping's next window simply starts there. */
		struct put_buf *nb = buf_get(p);
		nb->mapped = b->mapped;
		if (!src.map)
			memcpy(nb->data, b->view + off, have - off);
		buf_put(p, b);
		b = nb;
		have -= off;
		pos += off;
	}
	f->size = pos + have;
	p->st.logical_bytes += f->size;
out:
	if (b)
		buf_put(p, b);
	if (src.map) {
		bufs_wait_idle(p);
		munmap((void *)src.map, (size_t)src.size);
	}
	free(cuts);
	close(src.fd);
	return ret;
}

static int add_input(struct put_input **v, size_t *n, size_t *cap, const char *src, const char *rel)
{
	if (ARRAY_GROW(*v, *cap, *n + 1, 16))
		return -ENOMEM;
	(*v)[*n].src = strdup(src);
	(*v)[*n].rel = strdup(rel);
	if (!(*v)[*n].src || !(*v)[*n].rel) {
		free((*v)[*n].src);
		free((*v)[*n].rel);
		return -ENOMEM;
	}
	(*n)++;
	return 0;
}

static int walk_dir(struct put_input **v, size_t *n, size_t *cap, const char *dir, const char *rel,
		    int depth, uint64_t *total)
{
	char src[PATH_MAX], r[PATH_MAX];
	struct dirent *de;
	struct stat sb;
	DIR *d;
	int ret = 0;

	if (depth > PUT_MAX_DEPTH) {
		pr_err("%s: directories nested too deep", dir);
		return -ELOOP;
	}
	d = opendir(dir);
	if (!d) {
		ret = -errno;
		pr_perror("cannot read directory %s", dir);
		return ret;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(src, sizeof(src), "%s/%s", dir, de->d_name) >= (int)sizeof(src) ||
		    snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
			(int)sizeof(r)) {
			pr_err("path too long under %s", dir);
			ret = -ENAMETOOLONG;
			break;
		}
		if (lstat(src, &sb) < 0) {
			ret = -errno;
			pr_perror("cannot stat %s", src);
			break;
		}
		if (S_ISDIR(sb.st_mode))
			ret = walk_dir(v, n, cap, src, r, depth + 1, total);
		else if (S_ISREG(sb.st_mode)) {
			ret = add_input(v, n, cap, src, r);
			*total += (uint64_t)sb.st_size;
		} else
			pr_warn("skipping %s: not a regular file", src);
		if (ret < 0)
			break;
	}
	closedir(d);
	return ret;
}

static int cmp_rel(const void *a, const void *b)
{
	return strcmp(((const struct put_input *)a)->rel, ((const struct put_input *)b)->rel);
}

static int collect_inputs(const char *const *paths, size_t npaths, struct put_input **out,
			  size_t *nout, uint64_t *total)
{
	struct put_input *v = NULL;
	size_t n = 0, cap = 0;
	struct stat sb;
	int ret = 0;

	for (size_t i = 0; i < npaths && ret == 0; i++) {
		if (stat(paths[i], &sb) < 0) {
			ret = -errno;
			pr_perror("cannot read %s", paths[i]);
		} else if (S_ISDIR(sb.st_mode)) {
			ret = walk_dir(&v, &n, &cap, paths[i], "", 0, total);
		} else if (S_ISREG(sb.st_mode)) {
			const char *base = strrchr(paths[i], '/');
			base = base ? base + 1 : paths[i];
			ret = add_input(&v, &n, &cap, paths[i], base);
			*total += (uint64_t)sb.st_size;
		} else {
			pr_err("%s is not a regular file or a directory", paths[i]);
			ret = -EINVAL;
		}
	}
	if (ret == 0 && n > 1) {
		/* Sorted, so that the same inputs give the same manifest. */
		qsort(v, n, sizeof(*v), cmp_rel);
		for (size_t i = 1; i < n && ret == 0; i++) {
			if (!strcmp(v[i - 1].rel, v[i].rel)) {
				pr_err("%s and %s would both be stored as %s", v[i - 1].src,
				       v[i].src, v[i].rel);
				ret = -EINVAL;
			}
		}
	}
	*out = v;
	*nout = n;
	return ret;
}

/* Write the manifest: check it as a load would, serialize, put it in place
 * under its hash.  It is not parsed back: the serialiser writes exactly what
 * jansson would (test_manifest holds it to that), jansson itself encodes every
 * string, and parsing it back was a few percent of a put's CPU (bench/LOG.md,
 * "A put's CPU on the H100 profiled"). */
static int write_manifest(struct store *s, const struct manifest *m, char id[CHUNK_ID_LEN])
{
	uint8_t hash[CHUNK_HASH_LEN];
	char path[PATH_MAX], dir[PATH_MAX];
	bool written;
	struct stat st;
	size_t len;
	char *json;
	int ret = manifest_check(m);

	if (ret < 0) {
		pr_err("refusing to write a manifest a load would refuse");
		return ret;
	}
	json = manifest_serialize(m, &len);
	if (!json)
		return -ENOMEM;
	chunk_hash(json, len, hash);
	store_manifest_path(s, hash, path, sizeof(path));
	ret = store_write_object(s, path, json, len, true, false);
	if (ret < 0)
		goto out;
	written = ret == 1;
	snprintf(dir, sizeof(dir), "%s/manifests", s->dir);
	ret = fsync_dir(dir);
	if (ret < 0)
		goto out;
	chunk_id_format(hash, id);
	/* Keep what a load would parse from these bytes, so that the first
	 * start of a new snapshot does not read and check the manifest again
	 * (~0.3 s for a 3 GB image, bench/LOG.md), and its binary form, so
	 * that no later load has to either.  Only for the file written
	 * here: one already there is checked when loaded. */
	if (written && stat(path, &st) == 0) {
		store_manifest_cache_put(s, hash, &st, m);
		store_manifest_bin_put(s, hash, &st, m);
	}
out:
	free(json);
	return ret;
}

/* Whether chunks/ holds any loose chunk directory (a store written before
 * packs, or with THAW_STORE_LAYOUT=loose). */
static bool has_loose_chunks(struct store *s)
{
	char dir[PATH_MAX];
	struct dirent *de;
	bool any = false;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/chunks", s->dir);
	d = opendir(dir);
	if (!d)
		return true; /* cannot tell: look */
	while (!any && (de = readdir(d)))
		any = de->d_name[0] != '.';
	closedir(d);
	return any;
}

int store_put(struct store *s, const char *name, const char *const *paths, size_t npaths,
	      json_t *meta, bool show_progress, char id[CHUNK_ID_LEN],
	      struct store_put_stats *stats)
{
	struct put p = {.s = s};
	struct put_input *inputs = NULL;
	pthread_t workers[PUT_MAX_WORKERS];
	struct progress prog;
	size_t ninputs = 0, nworkers = 0;
	uint64_t total = 0, done = 0;
	int lock = -1, ret;

	hash_set_init(&p.claimed);
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.work_cv, NULL);
	pthread_cond_init(&p.free_cv, NULL);
	if (meta && !json_is_object(meta)) {
		pr_err("manifest meta must be a JSON object");
		ret = -EINVAL;
		goto out;
	}
	ret = collect_inputs(paths, npaths, &inputs, &ninputs, &total);
	if (ret < 0)
		goto out;
	lock = store_lock(s, LOCK_SH);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	/* Under the lock no gc runs: the packs read now stay until the put ends. */
	ret = store_packs_read(s, false);
	if (ret < 0)
		goto out;
	p.loose_present = has_loose_chunks(s);
	p.m = manifest_new(name);
	if (!p.m || (ninputs && !(p.m->files = calloc(ninputs, sizeof(*p.m->files))))) {
		ret = -ENOMEM;
		goto out;
	}
	if (meta) {
		json_decref(p.m->meta);
		p.m->meta = json_incref(meta);
	}
	for (int i = 0; i < PUT_NBUF; i++) {
		p.bufs[i].view = p.bufs[i].data = alloc_huge(PUT_BUF_SIZE);
		if (!p.bufs[i].data) {
			pr_err("out of memory for put buffers");
			ret = -ENOMEM;
			goto out;
		}
	}
	long ncpu = s->put_workers ? (long)s->put_workers : sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = ncpu < 1 ? 1 : (size_t)MIN(ncpu, PUT_MAX_WORKERS);
	for (; nworkers < want; nworkers++) {
		ret = -pthread_create(&workers[nworkers], NULL, put_worker, &p);
		if (ret < 0) {
			pr_err("cannot start a put worker: %s", strerror(-ret));
			goto stop;
		}
	}
	progress_init(&prog, "put", show_progress ? total : 0);
	if (!show_progress)
		prog.enabled = false;
	double reader0 = thread_cpu_s();
	for (size_t i = 0; i < ninputs && ret == 0; i++) {
		p.m->nfiles = i + 1;
		ret = put_file(&p, i, &inputs[i], &prog, &done);
	}
	p.st.reader_cpu_s = thread_cpu_s() - reader0;
	progress_done(&prog);
stop:
	hand_out(&p);
	pthread_mutex_lock(&p.mu);
	p.stop = true;
	pthread_cond_broadcast(&p.work_cv);
	pthread_mutex_unlock(&p.mu);
	for (size_t i = 0; i < nworkers; i++)
		pthread_join(workers[i], NULL);
	if (ret == 0)
		ret = p.err;
	/* A worker's failure is reported by whoever called us, from this thread. */
	if (ret < 0 && ret == p.err && p.errmsg[0])
		log_set_error("%s", p.errmsg);
	if (ret < 0)
		goto out;

	for (size_t i = 0; i < p.njobs; i++) {
		struct put_job *j = p.jobs[i];
		struct manifest_chunk *c = &p.m->files[j->file].chunks[j->idx];
		struct store_chunk_loc loc;

		if (j->twin) {
			/* Its twin's pack is indexed now. */
			if (!store_index_find(s, j->hash, &loc)) {
				pr_err("a chunk this put wrote is not in its packs' index");
				ret = -EIO;
				goto out;
			}
			j->stored = loc.stored;
		}
		memcpy(c->hash, j->hash, CHUNK_HASH_LEN);
		c->stored = j->stored;
		p.st.chunks++;
		if (j->fresh) {
			p.st.new_bytes += j->len;
			p.st.new_stored += j->stored;
		} else {
			p.st.dup_bytes += j->len;
		}
	}
	/* Every chunk object durable before the manifest that names them
	 * (packs are synced as they are finished). */
	if (s->layout == STORE_LAYOUT_LOOSE && syncfs(s->dirfd) < 0) {
		ret = -errno;
		pr_perror("syncfs %s", s->dir);
		goto out;
	}
	ret = write_manifest(s, p.m, id);
	if (ret == 0 && stats)
		*stats = p.st;
out:
	for (size_t i = 0; i < p.njobs; i++)
		free(p.jobs[i]);
	free(p.jobs);
	for (int i = 0; i < PUT_NBUF; i++)
		free(p.bufs[i].data);
	for (size_t i = 0; i < ninputs; i++) {
		free(inputs[i].src);
		free(inputs[i].rel);
	}
	free(inputs);
	manifest_free(p.m);
	if (lock >= 0)
		close(lock);
	pthread_cond_destroy(&p.free_cv);
	pthread_cond_destroy(&p.work_cv);
	pthread_mutex_destroy(&p.mu);
	hash_set_release(&p.claimed);
	return ret;
}
