/* SPDX-License-Identifier: Apache-2.0 */
/* tier_fetch.c — a RAM tier entry built while its chunks are fetched.
 *
 * A start from the remote tier used to fetch the whole snapshot into the
 * store and then materialise it from there: the fetch, then a second read of
 * what it had just written.  Here the fetch's checked chunks are written
 * into the entry's files as they arrive, on the fetch's worker threads,
 * while the engine reads the chunks the store already had (skip_missing):
 * the entry is complete when the last range is in.  A chunk's places in the
 * files come from an index of the manifest sorted by hash.
 *
 * The pages files come last (tier_layout.c): the fetch brings the chunks
 * of every other file first (remote_fetch_opts first), the engine writes
 * those the store has, and once both are in, the mapped image's layout is
 * planned from them; then the pages files' chunks are written through its
 * windows, straight into the memory files.  A chunk of a pages file that
 * came early (it is in another file too) was written into the pages file
 * and is copied into the window once there is one.
 */
#define LOG_PREFIX "tier: "
#include "restore/tier_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One place a chunk is written: file, offset. */
struct place {
	uint8_t hash[CHUNK_HASH_LEN];
	uint32_t file;
	uint64_t off;
};

/* A pages file's range written before its window was there. */
struct early {
	uint32_t file;
	uint64_t off, len;
};

struct stream {
	struct tier *t;
	const char *hex, *bdir, *resv;
	struct tier_fill *out;
	int *fds;		/* the files, made by begin; -1 until then */
	size_t nfds;
	struct place *places;	/* every non-hole chunk of the manifest, by hash */
	size_t nplaces;
	struct tier_part rest, pages; /* the engine's two parts */
	pthread_t engine;
	bool engine_running;
	int engine_ret;
	atomic_bool cancel;	/* the fetch failed: the engine stops */
	_Atomic uint64_t written;
	atomic_bool placed;	/* the layout is made: windows are written through */
	pthread_mutex_t mu;	/* rest_done, go, early */
	pthread_cond_t cv;
	bool rest_done;		/* the engine wrote the files but the pages files */
	bool go;		/* the layout is made (or the fetch failed): pages next */
	struct early *early;
	size_t nearly;
};

static int cmp_place(const void *a, const void *b)
{
	return memcmp(((const struct place *)a)->hash, ((const struct place *)b)->hash,
		      CHUNK_HASH_LEN);
}

static int index_places(struct stream *x, const struct manifest *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t k = 0; k < m->files[i].nchunks; k++)
			n += !m->files[i].chunks[k].zero;
	x->places = malloc((n ? n : 1) * sizeof(*x->places));
	if (!x->places)
		return -ENOMEM;
	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t k = 0; k < m->files[i].nchunks; k++) {
			const struct manifest_chunk *c = &m->files[i].chunks[k];

			if (c->zero)
				continue;
			struct place *p = &x->places[x->nplaces++];
			memcpy(p->hash, c->hash, CHUNK_HASH_LEN);
			p->file = (uint32_t)i;
			p->off = c->off;
		}
	qsort(x->places, x->nplaces, sizeof(*x->places), cmp_place);
	return 0;
}

/* The engine on what the store has: every file but the pages files, then,
 * once the layout is made, the pages files (through its windows). */
static void *engine_main(void *arg)
{
	struct stream *x = arg;
	struct engine_stats st;
	int ret;

	ret = tier_part_materialize(x->t, &x->rest, x->bdir, x->fds, NULL, true, &x->cancel, &st);
	if (!ret)
		tier_stats_add(&x->out->est, &st);
	pthread_mutex_lock(&x->mu);
	x->rest_done = true;
	x->engine_ret = ret;
	pthread_cond_broadcast(&x->cv);
	while (!ret && !x->go)
		pthread_cond_wait(&x->cv, &x->mu);
	pthread_mutex_unlock(&x->mu);
	if (!ret && !atomic_load(&x->cancel)) {
		ret = tier_part_materialize(x->t, &x->pages, x->bdir, x->fds, &x->out->lay, true,
					    &x->cancel, &st);
		if (!ret)
			tier_stats_add(&x->out->est, &st);
		x->engine_ret = ret;
	}
	if (ret && ret != -ECANCELED)
		pr_err("materialising the chunks the store had: %s", log_last_error());
	return NULL;
}

static bool first_files(void *arg, const struct manifest *m, size_t file)
{
	return !tier_is_pages_file(m->files[file].path);
}

static int window_write(uint8_t *win, uint64_t off, const void *data, size_t len)
{
	int ret = populate_write(win + off, len);

	if (!ret)
		memcpy(win + off, data, len);
	return ret;
}

/* The pages files' ranges written before the windows: into them. */
static int copy_early(struct stream *x)
{
	for (size_t i = 0; i < x->nearly; i++) {
		const struct early *e = &x->early[i];
		const struct mapped_window *w = x->out->lay.wins[e->file];
		uint8_t *win = w ? w->addr : NULL;
		ssize_t r;
		int ret;

		if (!win)
			continue;
		ret = populate_write(win + e->off, e->len);
		if (ret)
			return ret;
		r = pread(x->fds[e->file], win + e->off, e->len, (off_t)e->off);
		if (r != (ssize_t)e->len)
			return r < 0 ? -errno : -EIO;
	}
	return 0;
}

/* Every chunk of the other files is in, the engine's part of them too:
 * the layout, and the pages files next. */
static int on_first_done(void *arg)
{
	struct stream *x = arg;
	int ret;

	pthread_mutex_lock(&x->mu);
	while (!x->rest_done)
		pthread_cond_wait(&x->cv, &x->mu);
	ret = x->engine_ret;
	pthread_mutex_unlock(&x->mu);
	if (!ret)
		ret = tier_layout_begin(x->t, x->bdir, x->out->m, &x->out->lay);
	if (!ret && x->out->lay.windows)
		ret = copy_early(x);
	if (ret)
		pr_err("%s: the mapped image's layout: %s", x->bdir, strerror(-ret));
	atomic_store(&x->placed, true);
	pthread_mutex_lock(&x->mu);
	x->go = true;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	return ret;
}

/* The fetch has its manifest: room, files, the index, and the engine on
 * what the store holds, before the first range is asked for. */
static int on_begin(void *arg, const struct manifest *m)
{
	struct stream *x = arg;
	struct manifest_totals tot;
	int ret;

	x->out->m = manifest_copy(m);
	if (!x->out->m)
		return -ENOMEM;
	manifest_totals(m, &tot);
	x->out->bytes = tot.logical_bytes - tot.zero_bytes;
	ret = tier_reserve(x->t, x->hex, x->out->bytes, x->resv);
	if (ret)
		return ret;
	x->fds = malloc((m->nfiles ? m->nfiles : 1) * sizeof(*x->fds));
	if (!x->fds)
		return -ENOMEM;
	ret = engine_create_files(m, x->bdir, x->fds);
	if (ret) {
		free(x->fds);
		x->fds = NULL;
		return ret;
	}
	x->nfds = m->nfiles;
	ret = index_places(x, m);
	if (!ret)
		ret = tier_part_view(x->out->m, false, &x->rest);
	if (!ret)
		ret = tier_part_view(x->out->m, true, &x->pages);
	if (ret)
		return ret;
	ret = pthread_create(&x->engine, NULL, engine_main, x);
	if (ret)
		return -ret;
	x->engine_running = true;
	return 0;
}

static int note_early(struct stream *x, const struct place *p, size_t len)
{
	struct early *g;
	int ret = 0;

	pthread_mutex_lock(&x->mu);
	g = realloc(x->early, (x->nearly + 1) * sizeof(*g));
	if (g) {
		x->early = g;
		x->early[x->nearly++] = (struct early){ p->file, p->off, len };
	} else {
		ret = -ENOMEM;
	}
	pthread_mutex_unlock(&x->mu);
	return ret;
}

/* A checked chunk: into every place it has in the files (a pages file's
 * through its window, once there is one). */
static int on_chunk(void *arg, const uint8_t hash[CHUNK_HASH_LEN], const void *data, size_t len)
{
	struct stream *x = arg;
	size_t lo = 0, hi = x->nplaces;

	while (lo < hi) { /* the first place with this hash */
		size_t mid = lo + (hi - lo) / 2;

		if (memcmp(x->places[mid].hash, hash, CHUNK_HASH_LEN) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < x->nplaces && !memcmp(x->places[lo].hash, hash, CHUNK_HASH_LEN); lo++) {
		const struct place *p = &x->places[lo];
		bool placed = atomic_load(&x->placed);
		const struct mapped_window *w = placed ? x->out->lay.wins[p->file] : NULL;
		int ret;

		/* As the engine writes: through the window on huge pages (a fault
		 * maps 2 MiB, and no worker waits on a file's inode lock), with
		 * pwrite on 4 KiB pages (no page cleared before it is copied into). */
		if (w && w->huge)
			ret = window_write(w->addr, p->off, data, len);
		else if (w)
			ret = mapped_window_pwrite(w, data, len, p->off);
		else
			ret = pwrite_all(x->fds[p->file], data, len, (off_t)p->off);

		if (!ret && !placed && tier_is_pages_file(x->out->m->files[p->file].path))
			ret = note_early(x, p, len);
		if (ret) {
			pr_err("write %s/%s at %llu: %s", x->bdir, x->out->m->files[p->file].path,
			       (unsigned long long)p->off, strerror(-ret));
			return ret;
		}
		atomic_fetch_add(&x->written, len);
	}
	return 0;
}

int tier_fill_fetching(struct tier *t, const char *hex, const char *full, const char *bdir,
		       const char *resv, struct remote *r, struct tier_fill *out)
{
	struct stream x = { .t = t, .hex = hex, .bdir = bdir, .resv = resv, .out = out,
			    .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct remote_fetch_opts o = { .begin = on_begin, .chunk = on_chunk, .first = first_files,
				       .first_done = on_first_done, .consumer = &x };
	int ret;

	memset(out, 0, sizeof(*out));
	ret = remote_fetch_missing_with(r, tier_store(t), full, &o, &out->fst);
	if (ret) {
		atomic_store(&x.cancel, true);
		pthread_mutex_lock(&x.mu);
		x.go = true; /* an engine waiting for the layout: it is not coming */
		pthread_cond_broadcast(&x.cv);
		pthread_mutex_unlock(&x.mu);
	}
	if (x.engine_running) {
		pthread_join(x.engine, NULL);
		if (!ret)
			ret = x.engine_ret;
	}
	for (size_t i = 0; i < x.nfds; i++)
		if (close(x.fds[i]) < 0 && !ret) {
			ret = -errno;
			pr_perror("close %s/%s", bdir, out->m->files[i].path);
		}
	free(x.fds);
	free(x.places);
	free(x.early);
	tier_part_release(&x.rest);
	tier_part_release(&x.pages);
	pthread_mutex_destroy(&x.mu);
	pthread_cond_destroy(&x.cv);
	out->fetched_written = atomic_load(&x.written);
	if (!ret)
		ret = tier_layout_finish(&out->lay, bdir, out->m, &out->bytes);
	if (ret) {
		tier_layout_release(&out->lay);
		manifest_free(out->m);
		out->m = NULL;
	}
	return ret;
}
