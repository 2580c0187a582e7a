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

struct stream {
	struct tier *t;
	const char *hex, *bdir, *resv;
	struct tier_fill *out;
	int *fds;		/* the files, made by begin; -1 until then */
	size_t nfds;
	struct place *places;	/* every non-hole chunk of the manifest, by hash */
	size_t nplaces;
	pthread_t engine;
	bool engine_running;
	int engine_ret;
	atomic_bool cancel;	/* the fetch failed: the engine stops */
	_Atomic uint64_t written;
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

static void *engine_main(void *arg)
{
	struct stream *x = arg;
	struct engine_opts o = *tier_engine_opts(x->t);

	o.files = x->fds;
	o.skip_missing = true;
	o.cancel = &x->cancel;
	o.progress = NULL;
	x->engine_ret = engine_materialize(tier_store(x->t), x->out->m, x->bdir, &o, &x->out->est);
	if (x->engine_ret)
		pr_err("materialising the chunks the store had: %s", log_last_error());
	return NULL;
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
	if (ret)
		return ret;
	ret = pthread_create(&x->engine, NULL, engine_main, x);
	if (ret)
		return -ret;
	x->engine_running = true;
	return 0;
}

/* A checked chunk: into every place it has in the files. */
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
		int ret = pwrite_all(x->fds[p->file], data, len, (off_t)p->off);

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
	struct stream x = { .t = t, .hex = hex, .bdir = bdir, .resv = resv, .out = out };
	struct remote_fetch_opts o = { .begin = on_begin, .chunk = on_chunk, .consumer = &x };
	int ret;

	memset(out, 0, sizeof(*out));
	ret = remote_fetch_missing_with(r, tier_store(t), full, &o, &out->fst);
	if (ret)
		atomic_store(&x.cancel, true);
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
	out->fetched_written = atomic_load(&x.written);
	if (ret) {
		manifest_free(out->m);
		out->m = NULL;
	}
	return ret;
}
