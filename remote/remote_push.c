/* SPDX-License-Identifier: Apache-2.0 */
/* remote_push.c — remote_push (remote.h): a snapshot's missing chunks in
 * new packs, then its manifest, then its ref, around gc's marks. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "store/fill.h"
#include "store/manifest.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define RECHECK_ROUNDS 8   /* a push re-plans at most this often */
#define SWEEP_WAIT_S   120 /* a push waits this long for a sweep to end */

/* Exclude from x the packs that the mark p lists: a push uploads their
 * chunks again rather than rely on what gc may delete. */
static int exclude_pending(struct remote *r, struct rindex *x, const struct remote_pending *p)
{
	char k1[S3_KEY_MAX], k2[S3_KEY_MAX];
	bool changed = false;

	for (size_t i = 0; i < x->npacks; i++) {
		remote_pack_key(r, &x->packs[i], "pack", k1, sizeof(k1));
		remote_pack_key(r, &x->packs[i], "idx", k2, sizeof(k2));
		if (!x->packs[i].excluded && (remote_pending_has(p, k1) || remote_pending_has(p, k2))) {
			x->packs[i].excluded = true;
			changed = true;
		}
	}
	return changed ? remote_index_rehash(x) : 0;
}

struct push {
	struct remote *r;
	struct store *s;
	struct rindex x;
	struct hash_set sent; /* chunks uploaded by this push */
	uint8_t *buf;	      /* the pack being built */
	size_t fill;
	struct pack_entry *e;
	size_t n, cap;
	uint8_t *obj; /* one chunk object read from the store */
	remote_progress_fn progress;
	void *arg;
	uint64_t done, total;
	struct remote_push_stats st;
};

static void push_progress(void *arg, uint64_t bytes)
{
	struct push *p = arg;

	p->done += bytes;
	p->st.bytes_sent += bytes;
	if (p->progress)
		p->progress(p->arg, MIN(p->done, p->total), p->total);
}

static int random_remote_name(char name[REMOTE_NAME_LEN + 1])
{
	uint8_t b[REMOTE_NAME_LEN / 2];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -EIO;
	hex_encode(b, sizeof(b), name);
	return 0;
}

/* Upload the pack being built, then its index; it joins the remote index. */
static int push_flush_pack(struct push *p)
{
	char name[REMOTE_NAME_LEN + 1], key[S3_KEY_MAX];
	uint8_t *idx = NULL;
	size_t idx_len;
	int ret;

	if (!p->n)
		return 0;
	if ((ret = random_remote_name(name)))
		return ret;
	struct s3_source src = { .buf = p->buf, .fd = -1, .len = p->fill };
	ret = s3_upload(p->r->s3, remote_key(p->r, key, sizeof(key), "packs/%s.pack", name), &src,
			push_progress, p);
	if (ret)
		return ret;
	idx = pack_index_encode(p->e, p->n, p->fill, &idx_len);
	if (!idx)
		return -ENOMEM;
	struct s3_source isrc = { .buf = idx, .fd = -1, .len = idx_len };
	ret = s3_put(p->r->s3, remote_key(p->r, key, sizeof(key), "packs/%s.idx", name), &isrc);
	free(idx);
	if (ret)
		return ret;
	p->st.bytes_sent += idx_len;
	p->st.packs++;
	struct rpack *rp = remote_index_pack(&p->x, name);
	if (!rp)
		return -ENOMEM;
	rp->has_pack = rp->has_idx = true;
	rp->size = p->fill;
	rp->e = p->e;
	rp->n = p->n;
	p->e = NULL;
	p->n = p->cap = 0;
	p->fill = 0;
	return remote_index_rehash(&p->x);
}

/* Add chunk c (read from the store) to the pack being built. */
static int push_add_chunk(struct push *p, const struct manifest_chunk *c)
{
	size_t cap = chunk_encode_bound(CHUNK_MAX_RAW), len;
	int ret = store_read_chunk(p->s, c->hash, p->obj, cap, &len);

	if (ret) {
		char id[CHUNK_ID_LEN];
		chunk_id_format(c->hash, id);
		pr_err("cannot read chunk %s from the local store: %s", id, strerror(-ret));
		return ret;
	}
	if (p->fill + ALIGN_UP(len, PACK_ALIGN) > REMOTE_PACK_BYTES + (size_t)PACK_ALIGN &&
	    (ret = push_flush_pack(p)))
		return ret;
	if (ARRAY_GROW(p->e, p->cap, p->n + 1, 1024))
		return -ENOMEM;
	struct pack_entry *e = &p->e[p->n++];
	memcpy(e->hash, c->hash, CHUNK_HASH_LEN);
	e->off = p->fill;
	e->stored = (uint32_t)len;
	e->raw_len = (uint32_t)c->len;
	memcpy(p->buf + p->fill, p->obj, len);
	memset(p->buf + p->fill + len, 0, ALIGN_UP(len, PACK_ALIGN) - len);
	p->fill += ALIGN_UP(len, PACK_ALIGN);
	p->st.chunks_sent++;
	return hash_set_add(&p->sent, c->hash) < 0 ? -ENOMEM : 0;
}

/* Upload every chunk of m that the remote index lacks. */
static int push_missing(struct push *p, const struct manifest *m)
{
	struct hash_set seen;
	int ret = 0;

	hash_set_init(&seen);
	/* What is left to send, for the progress line. */
	for (size_t f = 0; f < m->nfiles && !ret; f++)
		for (size_t k = 0; k < m->files[f].nchunks; k++) {
			const struct manifest_chunk *c = &m->files[f].chunks[k];
			if (c->zero)
				continue;
			int added = hash_set_add(&seen, c->hash);
			if (added < 0) {
				ret = -ENOMEM;
				break;
			}
			if (added && !remote_index_find(&p->x, c->hash))
				p->total += ALIGN_UP(c->stored, PACK_ALIGN);
		}
	hash_set_release(&seen);
	hash_set_init(&seen);
	for (size_t f = 0; f < m->nfiles && !ret; f++)
		for (size_t k = 0; k < m->files[f].nchunks && !ret; k++) {
			const struct manifest_chunk *c = &m->files[f].chunks[k];
			if (c->zero || remote_index_find(&p->x, c->hash) ||
			    hash_set_has(&p->sent, c->hash))
				continue;
			ret = push_add_chunk(p, c);
		}
	if (!ret)
		ret = push_flush_pack(p);
	hash_set_release(&seen);
	return ret;
}

/* The remote keys that the ref of m will rely on: its packs and itself. */
static bool relies_on_marked(struct push *p, const struct manifest *m,
			     const struct remote_pending *pd, const char *manifest_key)
{
	char k[S3_KEY_MAX];

	if (remote_pending_has(pd, manifest_key))
		return true;
	for (size_t f = 0; f < m->nfiles; f++)
		for (size_t i = 0; i < m->files[f].nchunks; i++) {
			const struct manifest_chunk *c = &m->files[f].chunks[i];
			const struct rslot *o = c->zero ? NULL : remote_index_find(&p->x, c->hash);
			if (!o)
				continue;
			const struct rpack *rp = &p->x.packs[o->pack - 1];
			remote_pack_key(p->r, rp, "pack", k, sizeof(k));
			if (remote_pending_has(pd, k))
				return true;
			remote_pack_key(p->r, rp, "idx", k, sizeof(k));
			if (remote_pending_has(pd, k))
				return true;
		}
	return false;
}

static int put_bytes(struct push *p, const char *key, const void *buf, size_t len)
{
	struct s3_source src = { .buf = buf, .fd = -1, .len = len };
	int ret = s3_put(p->r->s3, key, &src);

	if (!ret)
		p->st.bytes_sent += len;
	return ret;
}

static char *ref_json(const char *function, const char *spec_json, const char *manifest_id)
{
	json_error_t jerr;
	json_t *spec = json_loads(spec_json, 0, &jerr), *ref;
	char when[32], *out;
	time_t now = time(NULL);
	struct tm tm;

	if (!json_is_object(spec)) {
		pr_err("the spec of %s is not a JSON object: %s", function,
		       spec ? "another JSON value" : jerr.text);
		json_decref(spec);
		return NULL;
	}
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	ref = json_pack("{s:s, s:s, s:o, s:s}", "function", function, "manifest", manifest_id,
			"spec", spec, "pushed", when);
	out = ref ? json_dumps(ref, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(ref);
	return out;
}

/* Before the ref: make sure that nothing it will reach is marked by a gc
 * that ran since the plan was made (etag: the mark the plan saw).  Marked
 * packs are not relied on (their chunks go up again in new packs); a marked
 * manifest is written again, which makes it newer than the mark; during a
 * sweep, wait for its end.  0 when the ref may go. */
static int push_recheck(struct push *p, const struct manifest *m, const char *manifest_key,
			const char *json, size_t json_len, char *etag, size_t etag_cap)
{
	uint64_t t0 = now_ns();

	for (int round = 0; round < RECHECK_ROUNDS; round++) {
		struct remote_pending pd;
		int ret = remote_pending_read(p->r, &pd);
		if (ret)
			return ret;
		if (!pd.exists || !strcmp(pd.etag, etag)) {
			remote_pending_release(&pd);
			return 0;
		}
		if (pd.sweeping) {
			remote_pending_release(&pd);
			if (ms_since(t0) > SWEEP_WAIT_S * 1000.0)
				break;
			pr_info("a remote gc is sweeping; waiting for it to end");
			usleep(500 * 1000);
			round--;
			continue;
		}
		snprintf(etag, etag_cap, "%s", pd.etag);
		/* A sweep may have ended since the plan: what it deleted was in
		 * the mark the plan saw, and the plan relied on none of it but
		 * the manifest, which is written again here in any case. */
		if (relies_on_marked(p, m, &pd, manifest_key)) {
			ret = exclude_pending(p->r, &p->x, &pd);
			if (!ret)
				ret = push_missing(p, m);
		}
		if (!ret)
			ret = put_bytes(p, manifest_key, json, json_len);
		remote_pending_release(&pd);
		if (ret)
			return ret;
	}
	pr_err("the remote's gc marks kept changing during the push; try again");
	return -EAGAIN;
}

int remote_push(struct remote *r, struct store *s, const char *function, const char *spec_json,
		const char *manifest_id, remote_progress_fn progress, void *arg,
		struct remote_push_stats *stats)
{
	struct push p = { .r = r, .s = s, .progress = progress, .arg = arg };
	struct manifest *m = NULL;
	struct remote_pending pd = { 0 };
	char full[CHUNK_ID_LEN], path[PATH_MAX], mkey[S3_KEY_MAX], rkey[S3_KEY_MAX], etag[80] = "";
	char *json = NULL, *ref = NULL;
	size_t json_len;
	uint8_t hash[CHUNK_HASH_LEN];
	uint64_t t0 = now_ns();
	int ret;

	hash_set_init(&p.sent);
	if (!id_valid(function)) {
		pr_err("bad function name '%s'", function);
		return -EINVAL;
	}
	ref = ref_json(function, spec_json, "");
	free(ref);
	ref = NULL;
	if ((ret = store_manifest_load(s, manifest_id, &m, full)))
		goto out;
	if ((ret = chunk_id_parse(full, hash)) || (ret = store_manifest_path(s, hash, path, sizeof(path))))
		goto out;
	if ((ret = read_file(path, &json, &json_len, MANIFEST_MAX_SIZE)))
		goto out;
	p.buf = malloc(REMOTE_PACK_BYTES + 2 * (size_t)PACK_ALIGN + chunk_encode_bound(CHUNK_MAX_RAW));
	p.obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW));
	if (!p.buf || !p.obj) {
		ret = -ENOMEM;
		goto out;
	}
	/* The plan: what the remote has that gc has not marked. */
	if ((ret = remote_pending_read(r, &pd)))
		goto out;
	snprintf(etag, sizeof(etag), "%s", pd.exists ? pd.etag : "");
	if ((ret = remote_index_load(r, s, &p.x)) || (ret = exclude_pending(r, &p.x, &pd)))
		goto out;
	p.total = json_len;
	if ((ret = push_missing(&p, m)))
		goto out;
	remote_key(r, mkey, sizeof(mkey), "manifests/%s", full + 7);
	/* The manifest: written unless there and not marked. */
	struct s3_object head;
	ret = s3_head(r->s3, mkey, &head);
	if (ret == -ENOENT || (!ret && remote_pending_has(&pd, mkey)))
		ret = put_bytes(&p, mkey, json, json_len);
	if (ret)
		goto out;
	push_progress(&p, 0);
	if ((ret = push_recheck(&p, m, mkey, json, json_len, etag, sizeof(etag))))
		goto out;
	ref = ref_json(function, spec_json, full);
	if (!ref) {
		ret = -EINVAL;
		goto out;
	}
	ret = put_bytes(&p, remote_key(r, rkey, sizeof(rkey), "refs/%s.json", function), ref,
			strlen(ref));
out:
	if (!ret) {
		struct hash_set all;
		hash_set_init(&all);
		for (size_t f = 0; m && f < m->nfiles; f++)
			for (size_t k = 0; k < m->files[f].nchunks; k++)
				if (!m->files[f].chunks[k].zero &&
				    hash_set_add(&all, m->files[f].chunks[k].hash) > 0) {
					p.st.chunks++;
					p.st.chunk_bytes += m->files[f].chunks[k].stored;
				}
		hash_set_release(&all);
		p.st.seconds = ms_since(t0) / 1e3;
		if (stats)
			*stats = p.st;
	}
	remote_pending_release(&pd);
	remote_index_release(&p.x);
	hash_set_release(&p.sent);
	free(p.buf);
	free(p.obj);
	free(p.e);
	free(json);
	free(ref);
	manifest_free(m);
	return ret;
}

