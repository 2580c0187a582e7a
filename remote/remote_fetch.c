/* SPDX-License-Identifier: Apache-2.0 */
/* remote_fetch.c — remote_fetch_manifest and remote_fetch_missing (remote.h):
 * a manifest's missing chunks fetched with parallel ranged GETs, checked and
 * stored by worker threads in new local packs, then the manifest. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "store/fill.h"
#include "store/manifest.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fetch_manifest_bytes(struct remote *r, const char *manifest_id, char **json,
				size_t *len, struct manifest **out)
{
	uint8_t want[CHUNK_HASH_LEN], got[CHUNK_HASH_LEN];
	char key[S3_KEY_MAX];
	uint8_t *buf = NULL;
	int ret;

	*json = NULL;
	if (out)
		*out = NULL;
	if (chunk_id_parse(manifest_id, want)) {
		pr_err("bad manifest id '%s'", manifest_id);
		return -EINVAL;
	}
	ret = s3_get(r->s3, remote_key(r, key, sizeof(key), "manifests/%s", manifest_id + 7),
		     MANIFEST_MAX_SIZE, &buf, len);
	if (ret == -ENOENT)
		pr_err("the remote has no manifest %s", manifest_id);
	if (ret)
		return ret;
	chunk_hash(buf, *len, got);
	if (memcmp(got, want, CHUNK_HASH_LEN)) {
		pr_err("remote manifest %s is damaged: its bytes do not hash to its name",
		       manifest_id);
		free(buf);
		return -EBADMSG;
	}
	struct manifest *m = NULL;
	ret = manifest_parse((const char *)buf, *len, &m);
	if (ret) {
		char why[512];
		snprintf(why, sizeof(why), "%s", log_last_error());
		pr_err("remote manifest %s: %s", manifest_id, why);
		free(buf);
		return ret;
	}
	if (out)
		*out = m;
	else
		manifest_free(m);
	*json = (char *)buf;
	return 0;
}

int remote_fetch_manifest(struct remote *r, const char *manifest_id, struct manifest **out)
{
	char *json = NULL;
	size_t len;
	int ret = fetch_manifest_bytes(r, manifest_id, &json, &len, out);

	free(json);
	return ret;
}

/* One chunk to fetch: where it lies in the remote's packs. */
struct want {
	uint8_t hash[CHUNK_HASH_LEN];
	uint32_t pack; /* index into the remote index's packs */
	uint64_t off;
	uint32_t stored, raw_len;
	bool early; /* a chunk of a file opts first() chose: fetched before the others */
};

/* One ranged GET: chunks v[first..first+n) of one pack, in order. */
struct span {
	size_t first, n;
	char key[S3_KEY_MAX];
	const uint8_t *buf; /* its bytes once fetched (got of them) */
	uint64_t got;
	bool bad;	     /* a chunk of it did not check: fetch it again */
	int consumer_err;    /* the consumer refused a chunk of it (opts chunk) */
	size_t bad_chunk;    /* that chunk, an index into fetch.w */
	const char *why;
	struct span *next;   /* in the workers' queue */
};

/* A thread that checks fetched ranges and stores them. */
struct fetch_worker {
	struct fetch *f;
	struct chunk_codec *codec;
	uint8_t *raw;
	pthread_t th;
	bool started;
};

/* The curl thread only receives: each range it completes is queued for the
 * workers, which check every chunk against its hash (in parallel) and add
 * the range's chunks to the pack writer (one at a time, under mu). */
struct fetch {
	struct remote *r;
	struct store *s;
	struct rindex x;
	struct want *w;
	size_t nw;
	struct span *spans;
	size_t nspans;
	struct pack_writer *pw;
	struct remote_fetch_opts o;
	uint64_t done, total;
	uint64_t unsealed; /* bytes added to pw since its packs were last made durable */
	struct remote_fetch_stats st; /* bytes_fetched and retries: the curl thread's */
	pthread_mutex_t mu; /* the queue, busy, stop, err, done, unsealed, pw, st.chunks_fetched */
	pthread_cond_t work, idle;
	struct span *head, *tail;
	int busy;
	bool stop;
	int err; /* the first error a worker met storing, -errno */
	struct fetch_worker *wk;
	int nwk;
};

/* Make what pw holds durable and indexed every REMOTE_FETCH_SEAL bytes: a
 * fetch that is killed keeps what it sealed (its manifest waits in the
 * store's pending/ meanwhile), and the next fetch goes on from there. */
static int seal_if_due(struct fetch *f)
{
	int ret;

	if (f->unsealed < REMOTE_FETCH_SEAL)
		return 0;
	ret = pack_writer_finish(f->pw);
	pack_writer_free(f->pw);
	f->pw = ret ? NULL : pack_writer_new(f->s);
	if (!ret && !f->pw)
		ret = -ENOMEM;
	f->unsealed = 0;
	return ret;
}

static int cmp_want(const void *a, const void *b)
{
	const struct want *x = a, *y = b;

	if (x->early != y->early)
		return x->early ? -1 : 1;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Check a fetched object against its hash where it lies: a bare or raw one
 * is hashed in place; only a zstd one is decoded (into raw).  *data: the
 * chunk's bytes, where they now are. */
static int check_object(struct fetch_worker *k, const uint8_t *obj, const struct want *c,
			const uint8_t **data)
{
	if (chunk_is_bare(c->stored, c->raw_len)) {
		*data = obj;
		return chunk_check_hash(obj, c->raw_len, c->hash);
	}
	if (c->stored == (uint64_t)c->raw_len + CHUNK_HEADER_SIZE) {
		*data = obj + CHUNK_HEADER_SIZE;
		return chunk_check_raw(obj, c->stored, c->hash, obj + CHUNK_HEADER_SIZE,
				       c->raw_len);
	}
	*data = k->raw;
	return chunk_decode(k->codec, obj, c->stored, c->hash, k->raw, c->raw_len);
}

/* Check every chunk of sp before any is stored: a bad one marks the whole
 * range to be fetched again.  Each good one goes to the consumer at once,
 * while its bytes are at hand (a zstd chunk is decoded only here). */
static void check_span(struct fetch_worker *k, struct span *sp)
{
	struct fetch *f = k->f;
	uint64_t base = f->w[sp->first].off;

	sp->bad = false;
	sp->consumer_err = 0;
	for (size_t i = 0; i < sp->n; i++) {
		const struct want *c = &f->w[sp->first + i];
		uint64_t at = c->off - base;
		const uint8_t *data;

		if (at + c->stored > sp->got) {
			sp->why = "cut short";
		} else if (check_object(k, sp->buf + at, c, &data)) {
			sp->why = "corrupt (its bytes do not hash to its name)";
		} else {
			if (f->o.chunk && !sp->consumer_err)
				sp->consumer_err = f->o.chunk(f->o.consumer, c->hash, data, c->raw_len);
			continue;
		}
		sp->bad = true;
		sp->bad_chunk = sp->first + i;
		return;
	}
}

/* Add sp's checked chunks to the pack writer; under f->mu. */
static int store_span(struct fetch *f, const struct span *sp)
{
	uint64_t base = f->w[sp->first].off;

	for (size_t i = 0; i < sp->n; i++) {
		const struct want *c = &f->w[sp->first + i];
		int ret = pack_writer_add_object(f->pw, c->hash, sp->buf + (c->off - base),
						 c->stored, c->raw_len);
		if (ret)
			return ret;
		f->st.chunks_fetched++;
		f->done += c->stored;
		f->unsealed += c->stored;
	}
	return seal_if_due(f);
}

static void *fetch_worker_main(void *arg)
{
	struct fetch_worker *k = arg;
	struct fetch *f = k->f;

	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->head && !f->stop)
			pthread_cond_wait(&f->work, &f->mu);
		if (!f->head)
			break;
		struct span *sp = f->head;
		f->head = sp->next;
		if (!f->head)
			f->tail = NULL;
		f->busy++;
		pthread_mutex_unlock(&f->mu);
		check_span(k, sp);
		pthread_mutex_lock(&f->mu);
		if (!f->err && sp->consumer_err)
			f->err = sp->consumer_err;
		if (!sp->bad && !f->err)
			f->err = store_span(f, sp);
		f->busy--;
		if (!f->head && !f->busy)
			pthread_cond_broadcast(&f->idle);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* Wait until every queued range is checked and stored: the first error. */
static int workers_drain(struct fetch *f)
{
	int ret;

	pthread_mutex_lock(&f->mu);
	while (f->head || f->busy)
		pthread_cond_wait(&f->idle, &f->mu);
	ret = f->err;
	pthread_mutex_unlock(&f->mu);
	return ret;
}

static void workers_stop(struct fetch *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_broadcast(&f->work);
	pthread_mutex_unlock(&f->mu);
	for (int i = 0; i < f->nwk; i++) {
		if (f->wk[i].started)
			pthread_join(f->wk[i].th, NULL);
		chunk_codec_free(f->wk[i].codec);
		free(f->wk[i].raw);
	}
	free(f->wk);
	f->wk = NULL;
	f->nwk = 0;
}

static int workers_start(struct fetch *f)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int n = (int)MIN(MAX(cpus, 1L), (long)REMOTE_FETCH_WORKERS), ret;

	f->wk = calloc((size_t)n, sizeof(*f->wk));
	if (!f->wk)
		return -ENOMEM;
	f->nwk = n;
	for (int i = 0; i < n; i++) {
		struct fetch_worker *k = &f->wk[i];
		k->f = f;
		k->codec = chunk_codec_new();
		k->raw = malloc(CHUNK_MAX_RAW);
		if (!k->codec || !k->raw)
			return -ENOMEM;
		if ((ret = pthread_create(&k->th, NULL, fetch_worker_main, k))) {
			pr_err("cannot start a fetch worker: %s", strerror(ret));
			return -ret;
		}
		k->started = true;
	}
	return 0;
}

static int span_done(struct s3_range *rg, int err, void *arg)
{
	struct fetch *f = arg;
	struct span *sp = rg->arg;
	char id[CHUNK_ID_LEN];

	f->st.bytes_fetched += rg->got;
	if (err) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", log_last_error());
		chunk_id_format(f->w[sp->first].hash, id);
		pr_err("cannot fetch chunk %s (and %zu more of %s): %s", id, sp->n - 1, sp->key, why);
		return err;
	}
	sp->buf = rg->buf;
	sp->got = rg->got;
	sp->next = NULL;
	pthread_mutex_lock(&f->mu);
	err = f->err;
	if (!err) {
		if (f->tail)
			f->tail->next = sp;
		else
			f->head = sp;
		f->tail = sp;
		pthread_cond_signal(&f->work);
	}
	pthread_mutex_unlock(&f->mu);
	if (err)
		return err; /* logged once the workers are drained */
	/* Progress as the bytes come (the workers' checks follow closely). */
	if (f->o.progress)
		f->o.progress(f->o.arg, MIN(f->st.bytes_fetched, f->total), f->total);
	return 0;
}

/* Group the wanted chunks (sorted by pack and offset) into ranges. */
static int make_spans(struct fetch *f)
{
	f->spans = calloc(f->nw ? f->nw : 1, sizeof(*f->spans));
	if (!f->spans)
		return -ENOMEM;
	for (size_t i = 0; i < f->nw; i++) {
		struct span *sp = f->nspans ? &f->spans[f->nspans - 1] : NULL;
		const struct want *c = &f->w[i];
		if (sp) {
			const struct want *first = &f->w[sp->first], *last = &f->w[sp->first + sp->n - 1];
			if (last->early == c->early && last->pack == c->pack &&
			    c->off <= last->off + last->stored + REMOTE_FETCH_GAP &&
			    c->off + c->stored - first->off <= REMOTE_FETCH_RANGE) {
				sp->n++;
				continue;
			}
		}
		sp = &f->spans[f->nspans++];
		sp->first = i;
		sp->n = 1;
		remote_pack_key(f->r, &f->x.packs[c->pack], "pack", sp->key, sizeof(sp->key));
	}
	return 0;
}

static uint64_t span_len(const struct fetch *f, const struct span *sp)
{
	const struct want *a = &f->w[sp->first], *b = &f->w[sp->first + sp->n - 1];

	return b->off + b->stored - a->off;
}

/* Fetch ranges v[0..n) and have the workers check and store them; a range
 * with a chunk that does not check is fetched again, after a pause, up to
 * S3_ATTEMPTS times in all. */
static int fetch_batch(struct fetch *f, struct s3_range *v, size_t n)
{
	char id[CHUNK_ID_LEN];
	int ret = 0;

	for (int tries = 1;; tries++) {
		int r = s3_get_ranges(f->r->s3, v, n, REMOTE_PARALLEL, span_done, f);
		int werr = workers_drain(f); /* also on failure: they read v's buffers */
		if (werr) {
			pr_err("cannot store a fetched chunk: %s", strerror(-werr));
			return werr;
		}
		if (r)
			return r;
		size_t nb = 0;
		for (size_t i = 0; i < n; i++) {
			const struct span *sp = v[i].arg;
			if (!sp->bad)
				continue;
			const struct want *c = &f->w[sp->bad_chunk];
			chunk_id_format(c->hash, id);
			if (tries >= S3_ATTEMPTS) {
				pr_err("chunk %s from %s at %llu: %s, %d times; the remote cannot give "
				       "it",
				       id, sp->key, (unsigned long long)c->off, sp->why, tries);
				return -EBADMSG;
			}
			pr_warn("chunk %s from %s at %llu: %s; fetching it again", id, sp->key,
				(unsigned long long)c->off, sp->why);
			f->st.retries++;
			v[nb++] = v[i];
		}
		if (!nb)
			return ret;
		n = nb;
		uint64_t ms = (uint64_t)S3_BACKOFF_MS << MIN(tries - 1, 10);
		struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* Fetch the spans, a batch of up to REMOTE_FETCH_BATCH bytes at a time. */
static int fetch_spans(struct fetch *f)
{
	struct s3_range *v = calloc(f->nspans ? f->nspans : 1, sizeof(*v));
	uint8_t *buf = malloc(REMOTE_FETCH_BATCH + REMOTE_FETCH_RANGE);
	bool first_called = false;
	int ret = 0;

	if (!v || !buf) {
		free(v);
		free(buf);
		return -ENOMEM;
	}
	ret = workers_start(f);
	for (size_t i = 0; i <= f->nspans && !ret;) {
		size_t n = 0, used = 0;
		bool early = i < f->nspans && f->w[f->spans[i].first].early;

		if (!early && !first_called) { /* the early chunks are all in */
			first_called = true;
			if (f->o.first_done)
				ret = f->o.first_done(f->o.consumer);
			if (ret)
				break;
		}
		if (i == f->nspans)
			break;
		while (i + n < f->nspans && f->w[f->spans[i + n].first].early == early &&
		       (n == 0 || used + span_len(f, &f->spans[i + n]) <= REMOTE_FETCH_BATCH)) {
			struct span *sp = &f->spans[i + n];
			v[n] = (struct s3_range){ .key = sp->key, .off = f->w[sp->first].off,
						  .len = span_len(f, sp), .buf = buf + used, .arg = sp };
			used += v[n].len;
			n++;
		}
		ret = fetch_batch(f, v, n);
		i += n;
	}
	workers_stop(f);
	if (!ret && f->o.progress)
		f->o.progress(f->o.arg, f->done, f->total);
	free(v);
	free(buf);
	return ret;
}

/* The chunks of m that the store lacks, each located in the remote. */
static int plan_fetch(struct fetch *f, const struct manifest *m)
{
	struct hash_set seen;
	int ret = 0;

	hash_set_init(&seen);
	/* The files first() chose, then the others: a chunk of both is early. */
	for (size_t n = 0; n < 2 * m->nfiles && !ret; n++) {
		size_t i = n < m->nfiles ? n : n - m->nfiles;
		bool early = f->o.first && f->o.first(f->o.consumer, m, i);

		if (early != (n < m->nfiles))
			continue;
		for (size_t k = 0; k < m->files[i].nchunks && !ret; k++) {
			const struct manifest_chunk *c = &m->files[i].chunks[k];
			struct store_chunk_loc loc;
			int added;
			if (c->zero)
				continue;
			if ((added = hash_set_add(&seen, c->hash)) <= 0) {
				ret = added;
				continue;
			}
			f->st.chunks++;
			if (store_chunk_locate(f->s, c->hash, &loc) == 0)
				continue;
			const struct rslot *o = remote_index_find(&f->x, c->hash);
			if (!o) {
				char id[CHUNK_ID_LEN];
				chunk_id_format(c->hash, id);
				pr_err("chunk %s (of %s) is in no pack of the remote", id,
				       m->files[i].path);
				ret = -ENOENT;
				break;
			}
			const struct pack_entry *e = &f->x.packs[o->pack - 1].e[o->entry];
			if (f->nw % 1024 == 0) {
				struct want *nv = realloc(f->w, (f->nw + 1024) * sizeof(*nv));
				if (!nv) {
					ret = -ENOMEM;
					break;
				}
				f->w = nv;
			}
			struct want *w = &f->w[f->nw++];
			memcpy(w->hash, c->hash, CHUNK_HASH_LEN);
			w->pack = o->pack - 1;
			w->off = e->off;
			w->stored = e->stored;
			w->raw_len = e->raw_len;
			w->early = early;
			f->total += e->stored;
			if (e->raw_len != c->len) {
				char id[CHUNK_ID_LEN];
				chunk_id_format(c->hash, id);
				pr_err("chunk %s: the remote's index says %u bytes, the manifest %llu",
				       id, e->raw_len, (unsigned long long)c->len);
				ret = -EBADMSG;
			}
		}
	}
	hash_set_release(&seen);
	if (!ret)
		qsort(f->w, f->nw, sizeof(*f->w), cmp_want);
	return ret;
}

int remote_fetch_missing(struct remote *r, struct store *s, const char *manifest_id,
			 remote_progress_fn progress, void *arg, struct remote_fetch_stats *stats)
{
	struct remote_fetch_opts o = { .progress = progress, .arg = arg };

	return remote_fetch_missing_with(r, s, manifest_id, &o, stats);
}

int remote_fetch_missing_with(struct remote *r, struct store *s, const char *manifest_id,
			      const struct remote_fetch_opts *opts, struct remote_fetch_stats *stats)
{
	struct fetch f = { .r = r,
			   .s = s,
			   .o = opts ? *opts : (struct remote_fetch_opts){ 0 },
			   .mu = PTHREAD_MUTEX_INITIALIZER,
			   .work = PTHREAD_COND_INITIALIZER,
			   .idle = PTHREAD_COND_INITIALIZER };
	struct manifest *m = NULL;
	uint8_t hash[CHUNK_HASH_LEN];
	char path[PATH_MAX], *json = NULL;
	size_t json_len;
	uint64_t t0 = now_ns();
	int lock = -1, ret;

	if (chunk_id_parse(manifest_id, hash)) {
		pr_err("bad manifest id '%s' (expected sha256:<64 hex>)", manifest_id);
		return -EINVAL;
	}
	if ((ret = fetch_manifest_bytes(r, manifest_id, &json, &json_len, &m)))
		goto out;
	/* As a put: gc waits until the chunks and their manifest are in. */
	lock = store_lock(s, LOCK_SH);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	if ((ret = store_packs_refresh(s)) || (ret = remote_index_load(r, s, &f.x)))
		goto out;
	/* Before any chunk: gc keeps what this fetch stores, also if it is
	 * killed, so that the next fetch goes on from there. */
	if ((ret = store_pending_put(s, hash, json, json_len)))
		goto out;
	if ((ret = plan_fetch(&f, m)) || (ret = make_spans(&f)))
		goto out;
	f.pw = pack_writer_new(s);
	if (!f.pw) {
		ret = -ENOMEM;
		goto out;
	}
	if (f.o.begin && (ret = f.o.begin(f.o.consumer, m)))
		goto out;
	if (f.o.progress)
		f.o.progress(f.o.arg, 0, f.total);
	if ((ret = fetch_spans(&f)) || (ret = pack_writer_finish(f.pw)))
		goto out;
	/* The manifest last: a store never holds one that lacks chunks. */
	if ((ret = store_manifest_path(s, hash, path, sizeof(path))))
		goto out;
	ret = store_write_object(s, path, json, json_len, true, false);
	ret = ret < 0 ? ret : 0;
	if (!ret)
		store_pending_drop(s, hash);
out:
	if (!ret && stats) {
		f.st.seconds = ms_since(t0) / 1e3;
		*stats = f.st;
	}
	pack_writer_free(f.pw); /* a pack not finished goes with it */
	if (lock >= 0)
		close(lock);
	pthread_mutex_destroy(&f.mu);
	pthread_cond_destroy(&f.work);
	pthread_cond_destroy(&f.idle);
	free(f.w);
	free(f.spans);
	remote_index_release(&f.x);
	manifest_free(m);
	free(json);
	return ret;
}

