/* SPDX-License-Identifier: Apache-2.0 */
/* remote.c — the remote tier (remote.h): push, pull, fetch and gc of a
 * store's snapshots on an S3-compatible object store. */
#define LOG_PREFIX "remote: "
#include "remote/remote.h"
#include "remote/s3.h"
#include "store/fill.h"
#include "store/manifest.h"
#include "store/pack.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define REMOTE_NAME_LEN	   32		/* hex digits of a remote pack's name */
#define REF_MAX_BYTES	   (1u << 20)	/* a ref larger than this is refused */
#define INDEX_MAX_BYTES	   (256u << 20) /* a pack index larger than this is refused */
#define PENDING_MAX_BYTES  (256u << 20)
#define RECHECK_ROUNDS	   8		/* a push re-plans at most this often */
#define SWEEP_WAIT_S	   120		/* a push waits this long for a sweep to end */

struct remote {
	struct s3 *s3;
	char *url;    /* s3://bucket[/prefix] */
	char *prefix; /* "" or "prefix/" */
	char describe[PATH_MAX + 1200];
	char cache_tag[17]; /* names this remote's cache under a store */
};

/* ---- opening ---- */

static int parse_url(const char *url, char **bucket, char **prefix)
{
	const char *b, *slash;
	size_t n;

	*bucket = *prefix = NULL;
	if (!url || strncmp(url, "s3://", 5)) {
		pr_err("bad remote '%s': expected s3://BUCKET or s3://BUCKET/PREFIX",
		       url ? url : "");
		return -EINVAL;
	}
	b = url + 5;
	slash = strchr(b, '/');
	n = slash ? (size_t)(slash - b) : strlen(b);
	*bucket = strndup(b, n);
	if (!*bucket)
		return -ENOMEM;
	const char *p = slash ? slash + 1 : "";
	while (*p == '/')
		p++;
	n = strlen(p);
	while (n && p[n - 1] == '/')
		n--;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == '\\' ||
		    (p[i] == '.' && (i == 0 || p[i - 1] == '/') &&
		     (i + 1 == n || p[i + 1] == '/' || (p[i + 1] == '.' && (i + 2 == n || p[i + 2] == '/'))))) {
			pr_err("bad remote '%s': the prefix has a '.', '..' or control character", url);
			free(*bucket);
			*bucket = NULL;
			return -EINVAL;
		}
	if (n > 512) {
		pr_err("bad remote '%s': the prefix is longer than 512 bytes", url);
		free(*bucket);
		*bucket = NULL;
		return -EINVAL;
	}
	if (asprintf(prefix, "%.*s%s", (int)n, p, n ? "/" : "") < 0) {
		*prefix = NULL;
		return -ENOMEM;
	}
	return 0;
}

int remote_open(const char *url, const char *endpoint, struct remote **out)
{
	struct remote *r = calloc(1, sizeof(*r));
	char *bucket = NULL;
	uint8_t h[CHUNK_HASH_LEN];
	char hex[2 * CHUNK_HASH_LEN + 1], *tag = NULL;
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	if (!url)
		url = getenv("THAW_REMOTE");
	if (!url || !*url) {
		pr_err("no remote: give --remote s3://BUCKET/PREFIX or set THAW_REMOTE");
		ret = -EINVAL;
		goto out;
	}
	ret = parse_url(url, &bucket, &r->prefix);
	if (ret)
		goto out;
	ret = s3_open(bucket, endpoint, &r->s3);
	if (ret)
		goto out;
	r->url = strdup(url);
	if (!r->url) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(r->describe, sizeof(r->describe), "s3://%s/%s: %s", bucket, r->prefix,
		 s3_describe(r->s3));
	/* The cache is per remote and endpoint: two servers may have the same
	 * bucket name. */
	if (asprintf(&tag, "%s/%s %s", bucket, r->prefix, s3_describe(r->s3)) < 0) {
		tag = NULL;
		ret = -ENOMEM;
		goto out;
	}
	chunk_hash(tag, strlen(tag), h);
	hex_encode(h, 8, hex);
	memcpy(r->cache_tag, hex, 16);
	r->cache_tag[16] = '\0';
	*out = r;
	r = NULL;
out:
	free(tag);
	free(bucket);
	remote_close(r);
	return ret;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	s3_close(r->s3);
	free(r->url);
	free(r->prefix);
	free(r);
}

const char *remote_describe(const struct remote *r)
{
	return r->describe;
}

struct s3 *remote_s3(struct remote *r)
{
	return r->s3;
}

/* The full key of a name under the remote's prefix, into buf. */
static const char *key_of(const struct remote *r, char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static const char *key_of(const struct remote *r, char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	size_t n = (size_t)snprintf(buf, cap, "%s", r->prefix);

	va_start(ap, fmt);
	vsnprintf(buf + n, cap - n, fmt, ap);
	va_end(ap);
	return buf;
}

/* ---- the remote's packs and their chunks ---- */

struct rpack {
	char name[REMOTE_NAME_LEN + 1];
	uint64_t size;	    /* of the .pack, as listed */
	int64_t mtime_ms;   /* of the .pack */
	bool has_pack, has_idx;
	struct pack_entry *e; /* from its index */
	size_t n;
	bool excluded; /* gc marked it: a push does not rely on it */
};

struct rslot {
	uint32_t pack; /* + 1; 0: a free slot */
	uint32_t entry;
};

struct rindex {
	struct rpack *packs;
	size_t npacks, cap;
	struct rslot *slots;
	size_t nslots; /* a power of two */
};

static void rindex_release(struct rindex *x)
{
	for (size_t i = 0; i < x->npacks; i++)
		free(x->packs[i].e);
	free(x->packs);
	free(x->slots);
	memset(x, 0, sizeof(*x));
}

static bool is_remote_name(const char *s, size_t n)
{
	if (n != REMOTE_NAME_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static struct rpack *rindex_pack(struct rindex *x, const char *name)
{
	for (size_t i = 0; i < x->npacks; i++)
		if (!strcmp(x->packs[i].name, name))
			return &x->packs[i];
	if (ARRAY_GROW(x->packs, x->cap, x->npacks + 1, 64))
		return NULL;
	struct rpack *p = &x->packs[x->npacks++];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	return p;
}

struct list_packs {
	struct remote *r;
	struct rindex *x;
	int err;
};

static int list_pack_object(const struct s3_object *o, void *arg)
{
	struct list_packs *l = arg;
	const char *name = o->key + strlen(l->r->prefix) + strlen("packs/");
	const char *dot = strrchr(name, '.');
	char base[REMOTE_NAME_LEN + 1];

	if (!dot || !is_remote_name(name, (size_t)(dot - name)))
		return 0; /* not ours: left alone */
	memcpy(base, name, REMOTE_NAME_LEN);
	base[REMOTE_NAME_LEN] = '\0';
	struct rpack *p = rindex_pack(l->x, base);
	if (!p)
		return -ENOMEM;
	if (!strcmp(dot, ".pack")) {
		p->has_pack = true;
		p->size = o->size;
		p->mtime_ms = o->mtime_ms;
	} else if (!strcmp(dot, ".idx")) {
		p->has_idx = true;
	}
	return 0;
}

static int cache_dir(const struct remote *r, struct store *s, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/remote/%s/idx", store_path(s), r->cache_tag);
	return mkdir_p(buf, 0755);
}

/* The index of pack p: from the cache, else from the remote (then cached). */
static int load_pack_index(struct remote *r, struct store *s, struct rpack *p)
{
	char dir[PATH_MAX], path[PATH_MAX + 64], key[S3_KEY_MAX];
	uint8_t *buf = NULL;
	size_t len = 0;
	uint64_t pack_size;
	int ret;

	ret = s ? cache_dir(r, s, dir, sizeof(dir)) : -ENOENT;
	if (!ret) {
		snprintf(path, sizeof(path), "%s/%s.idx", dir, p->name);
		ret = read_file(path, (char **)&buf, &len, INDEX_MAX_BYTES);
	}
	if (ret == 0 && pack_index_parse(buf, len, &p->e, &p->n, &pack_size) == 0 &&
	    pack_size == p->size)
		goto out;
	free(buf);
	buf = NULL;
	ret = s3_get(r->s3, key_of(r, key, sizeof(key), "packs/%s.idx", p->name), INDEX_MAX_BYTES,
		     &buf, &len);
	if (ret)
		goto out;
	ret = pack_index_parse(buf, len, &p->e, &p->n, &pack_size);
	if (ret) {
		pr_err("remote pack index %s is damaged", key);
		goto out;
	}
	if (pack_size != p->size) {
		/* A pack that does not match its index is no use: skip it. */
		pr_warn("remote pack %s is %llu bytes, its index says %llu: not used", p->name,
			(unsigned long long)p->size, (unsigned long long)pack_size);
		free(p->e);
		p->e = NULL;
		p->n = 0;
		goto out;
	}
	if (s && write_file_atomic(path, buf, len, 0644) < 0)
		pr_warn("cannot cache %s (going on without)", path);
out:
	free(buf);
	return ret;
}

static uint64_t slot_key(const uint8_t *h)
{
	uint64_t k;

	memcpy(&k, h, sizeof(k));
	return k;
}

static int rindex_hash(struct rindex *x)
{
	size_t total = 0, cap = 1024;

	for (size_t i = 0; i < x->npacks; i++)
		total += x->packs[i].n;
	while (cap < total * 2)
		cap *= 2;
	free(x->slots);
	x->slots = calloc(cap, sizeof(*x->slots));
	if (!x->slots)
		return -ENOMEM;
	x->nslots = cap;
	for (size_t i = 0; i < x->npacks; i++) {
		if (x->packs[i].excluded)
			continue;
		for (size_t j = 0; j < x->packs[i].n; j++) {
			size_t k = slot_key(x->packs[i].e[j].hash) & (cap - 1);
			bool dup = false;
			for (; x->slots[k].pack; k = (k + 1) & (cap - 1)) {
				const struct rslot *o = &x->slots[k];
				if (!memcmp(x->packs[o->pack - 1].e[o->entry].hash,
					    x->packs[i].e[j].hash, CHUNK_HASH_LEN)) {
					dup = true;
					break;
				}
			}
			if (!dup)
				x->slots[k] = (struct rslot){ (uint32_t)i + 1, (uint32_t)j };
		}
	}
	return 0;
}

/* Where the chunk hash lies in a pack not excluded, or NULL. */
static const struct rslot *rindex_find(const struct rindex *x, const uint8_t *hash)
{
	if (!x->nslots)
		return NULL;
	for (size_t k = slot_key(hash) & (x->nslots - 1); x->slots[k].pack;
	     k = (k + 1) & (x->nslots - 1)) {
		const struct rslot *o = &x->slots[k];
		if (!memcmp(x->packs[o->pack - 1].e[o->entry].hash, hash, CHUNK_HASH_LEN))
			return o;
	}
	return NULL;
}

/* Read the remote's packs and their indexes (cached under s, if given). */
static int rindex_load(struct remote *r, struct store *s, struct rindex *x)
{
	char key[S3_KEY_MAX], dir[PATH_MAX];
	struct list_packs l = { r, x, 0 };
	int ret;

	memset(x, 0, sizeof(*x));
	ret = s3_list(r->s3, key_of(r, key, sizeof(key), "packs/"), list_pack_object, &l);
	for (size_t i = 0; !ret && i < x->npacks; i++)
		if (x->packs[i].has_pack && x->packs[i].has_idx)
			ret = load_pack_index(r, s, &x->packs[i]);
	/* Indexes of packs gone from the remote leave the cache. */
	if (!ret && s && cache_dir(r, s, dir, sizeof(dir)) == 0) {
		DIR *d = opendir(dir);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			size_t n = strlen(de->d_name);
			if (n != REMOTE_NAME_LEN + 4 || strcmp(de->d_name + REMOTE_NAME_LEN, ".idx"))
				continue;
			bool live = false;
			for (size_t i = 0; i < x->npacks && !live; i++)
				live = x->packs[i].has_idx &&
				       !strncmp(x->packs[i].name, de->d_name, REMOTE_NAME_LEN);
			if (!live)
				unlinkat(dirfd(d), de->d_name, 0);
		}
		if (d)
			closedir(d);
	}
	if (!ret)
		ret = rindex_hash(x);
	if (ret)
		rindex_release(x);
	return ret;
}

/* ---- gc's marks, as a push and gc read them ---- */

struct pending {
	bool exists, sweeping;
	char etag[80];
	int64_t marked_ms;
	int grace_s;
	char **keys; /* sorted */
	size_t n;
};

static void pending_release(struct pending *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->keys[i]);
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool pending_has(const struct pending *p, const char *key)
{
	return p->n && bsearch(&key, p->keys, p->n, sizeof(*p->keys), cmp_str);
}

/* Read gc/pending.json (none: p->exists false). */
static int pending_read(struct remote *r, struct pending *p)
{
	char key[S3_KEY_MAX];
	struct s3_object head;
	uint8_t *buf = NULL;
	size_t len;
	json_t *j = NULL, *objs, *v;
	json_error_t jerr;
	size_t i;
	int ret;

	memset(p, 0, sizeof(*p));
	key_of(r, key, sizeof(key), "gc/pending.json");
	ret = s3_head(r->s3, key, &head);
	if (ret == -ENOENT)
		return 0;
	if (!ret)
		ret = s3_get(r->s3, key, PENDING_MAX_BYTES, &buf, &len);
	if (ret == -ENOENT)
		return 0;
	if (ret)
		return ret;
	j = json_loadb((const char *)buf, len, 0, &jerr);
	objs = json_object_get(j, "objects");
	if (!json_is_object(j) || !json_is_array(objs) ||
	    !json_is_integer(json_object_get(j, "marked_ms"))) {
		pr_err("%s is damaged: %s; remove it to start gc afresh", key,
		       j ? "not the shape gc writes" : jerr.text);
		ret = -EBADMSG;
		goto out;
	}
	p->exists = true;
	snprintf(p->etag, sizeof(p->etag), "%s", head.etag);
	p->sweeping = json_is_true(json_object_get(j, "sweeping"));
	p->marked_ms = json_integer_value(json_object_get(j, "marked_ms"));
	p->grace_s = (int)json_integer_value(json_object_get(j, "grace_s"));
	p->keys = calloc(json_array_size(objs) + 1, sizeof(*p->keys));
	if (!p->keys) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(objs, i, v)
	{
		if (!json_is_string(v) || !(p->keys[p->n] = strdup(json_string_value(v)))) {
			ret = json_is_string(v) ? -ENOMEM : -EBADMSG;
			goto out;
		}
		p->n++;
	}
	qsort(p->keys, p->n, sizeof(*p->keys), cmp_str);
out:
	if (ret)
		pending_release(p);
	json_decref(j);
	free(buf);
	return ret;
}

static void pack_key(const struct remote *r, const struct rpack *p, const char *ext, char *buf,
		     size_t cap)
{
	key_of(r, buf, cap, "packs/%s.%s", p->name, ext);
}

/* Exclude from x the packs that the mark p lists: a push uploads their
 * chunks again rather than rely on what gc may delete. */
static int exclude_pending(struct remote *r, struct rindex *x, const struct pending *p)
{
	char k1[S3_KEY_MAX], k2[S3_KEY_MAX];
	bool changed = false;

	for (size_t i = 0; i < x->npacks; i++) {
		pack_key(r, &x->packs[i], "pack", k1, sizeof(k1));
		pack_key(r, &x->packs[i], "idx", k2, sizeof(k2));
		if (!x->packs[i].excluded && (pending_has(p, k1) || pending_has(p, k2))) {
			x->packs[i].excluded = true;
			changed = true;
		}
	}
	return changed ? rindex_hash(x) : 0;
}

/* ---- push ---- */

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
	ret = s3_upload(p->r->s3, key_of(p->r, key, sizeof(key), "packs/%s.pack", name), &src,
			push_progress, p);
	if (ret)
		return ret;
	idx = pack_index_encode(p->e, p->n, p->fill, &idx_len);
	if (!idx)
		return -ENOMEM;
	struct s3_source isrc = { .buf = idx, .fd = -1, .len = idx_len };
	ret = s3_put(p->r->s3, key_of(p->r, key, sizeof(key), "packs/%s.idx", name), &isrc);
	free(idx);
	if (ret)
		return ret;
	p->st.bytes_sent += idx_len;
	p->st.packs++;
	struct rpack *rp = rindex_pack(&p->x, name);
	if (!rp)
		return -ENOMEM;
	rp->has_pack = rp->has_idx = true;
	rp->size = p->fill;
	rp->e = p->e;
	rp->n = p->n;
	p->e = NULL;
	p->n = p->cap = 0;
	p->fill = 0;
	return rindex_hash(&p->x);
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
			if (added && !rindex_find(&p->x, c->hash))
				p->total += ALIGN_UP(c->stored, PACK_ALIGN);
		}
	hash_set_release(&seen);
	hash_set_init(&seen);
	for (size_t f = 0; f < m->nfiles && !ret; f++)
		for (size_t k = 0; k < m->files[f].nchunks && !ret; k++) {
			const struct manifest_chunk *c = &m->files[f].chunks[k];
			if (c->zero || rindex_find(&p->x, c->hash) ||
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
static bool relies_on_marked(struct push *p, const struct manifest *m, const struct pending *pd,
			     const char *manifest_key)
{
	char k[S3_KEY_MAX];

	if (pending_has(pd, manifest_key))
		return true;
	for (size_t f = 0; f < m->nfiles; f++)
		for (size_t i = 0; i < m->files[f].nchunks; i++) {
			const struct manifest_chunk *c = &m->files[f].chunks[i];
			const struct rslot *o = c->zero ? NULL : rindex_find(&p->x, c->hash);
			if (!o)
				continue;
			const struct rpack *rp = &p->x.packs[o->pack - 1];
			pack_key(p->r, rp, "pack", k, sizeof(k));
			if (pending_has(pd, k))
				return true;
			pack_key(p->r, rp, "idx", k, sizeof(k));
			if (pending_has(pd, k))
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
		struct pending pd;
		int ret = pending_read(p->r, &pd);
		if (ret)
			return ret;
		if (!pd.exists || !strcmp(pd.etag, etag)) {
			pending_release(&pd);
			return 0;
		}
		if (pd.sweeping) {
			pending_release(&pd);
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
		pending_release(&pd);
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
	struct pending pd = { 0 };
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
	if ((ret = pending_read(r, &pd)))
		goto out;
	snprintf(etag, sizeof(etag), "%s", pd.exists ? pd.etag : "");
	if ((ret = rindex_load(r, s, &p.x)) || (ret = exclude_pending(r, &p.x, &pd)))
		goto out;
	p.total = json_len;
	if ((ret = push_missing(&p, m)))
		goto out;
	key_of(r, mkey, sizeof(mkey), "manifests/%s", full + 7);
	/* The manifest: written unless there and not marked. */
	struct s3_object head;
	ret = s3_head(r->s3, mkey, &head);
	if (ret == -ENOENT || (!ret && pending_has(&pd, mkey)))
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
	ret = put_bytes(&p, key_of(r, rkey, sizeof(rkey), "refs/%s.json", function), ref,
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
	pending_release(&pd);
	rindex_release(&p.x);
	hash_set_release(&p.sent);
	free(p.buf);
	free(p.obj);
	free(p.e);
	free(json);
	free(ref);
	manifest_free(m);
	return ret;
}

/* ---- refs ---- */

static int ref_read(struct remote *r, const char *key, json_t **out)
{
	uint8_t *buf = NULL;
	size_t len;
	json_error_t jerr;
	uint8_t h[CHUNK_HASH_LEN];
	int ret = s3_get(r->s3, key, REF_MAX_BYTES, &buf, &len);

	*out = NULL;
	if (ret)
		return ret;
	json_t *j = json_loadb((const char *)buf, len, 0, &jerr);
	free(buf);
	const char *fn = json_string_value(json_object_get(j, "function"));
	const char *id = json_string_value(json_object_get(j, "manifest"));
	if (!json_is_object(j) || !fn || !id_valid(fn) || !id || chunk_id_parse(id, h) ||
	    !json_is_object(json_object_get(j, "spec"))) {
		pr_err("remote ref %s is damaged: %s", key, j ? "not the shape a push writes" : jerr.text);
		json_decref(j);
		return -EBADMSG;
	}
	*out = j;
	return 0;
}

int remote_delete_ref(struct remote *r, const char *function)
{
	char key[S3_KEY_MAX];

	if (!id_valid(function)) {
		pr_err("bad function name '%s'", function);
		return -EINVAL;
	}
	return s3_delete(r->s3, key_of(r, key, sizeof(key), "refs/%s.json", function));
}

int remote_pull_ref(struct remote *r, const char *function, char **spec_json,
		    char manifest_id[CHUNK_ID_LEN])
{
	char key[S3_KEY_MAX];
	json_t *j;
	int ret;

	*spec_json = NULL;
	if (!id_valid(function)) {
		pr_err("bad function name '%s'", function);
		return -EINVAL;
	}
	ret = ref_read(r, key_of(r, key, sizeof(key), "refs/%s.json", function), &j);
	if (ret == -ENOENT)
		log_set_error("the remote has no function '%s' (no %s)", function, key);
	if (ret)
		return ret;
	snprintf(manifest_id, CHUNK_ID_LEN, "%s", json_string_value(json_object_get(j, "manifest")));
	*spec_json = json_dumps(json_object_get(j, "spec"), JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return *spec_json ? 0 : -ENOMEM;
}

struct list_refs {
	struct remote *r;
	json_t *out;
};

static int list_ref(const struct s3_object *o, void *arg)
{
	struct list_refs *l = arg;
	json_t *j;
	size_t n = strlen(o->key);

	if (n < 5 || strcmp(o->key + n - 5, ".json"))
		return 0;
	int ret = ref_read(l->r, o->key, &j);
	if (ret == -ENOENT || ret == -EBADMSG)
		return 0; /* deleted meanwhile, or not ours: not a function */
	if (ret)
		return ret;
	json_t *e = json_pack("{s:O, s:O, s:O}", "function", json_object_get(j, "function"),
			      "manifest", json_object_get(j, "manifest"), "pushed",
			      json_object_get(j, "pushed") ? json_object_get(j, "pushed")
							   : json_null());
	json_decref(j);
	if (!e || json_array_append_new(l->out, e))
		return -ENOMEM;
	return 0;
}

int remote_list_refs(struct remote *r, json_t **out)
{
	char key[S3_KEY_MAX];
	struct list_refs l = { r, json_array() };
	int ret;

	*out = NULL;
	if (!l.out)
		return -ENOMEM;
	ret = s3_list(r->s3, key_of(r, key, sizeof(key), "refs/"), list_ref, &l);
	if (ret) {
		json_decref(l.out);
		return ret;
	}
	*out = l.out; /* keys come sorted, and so do the functions */
	return 0;
}

/* ---- fetch ---- */

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
	ret = s3_get(r->s3, key_of(r, key, sizeof(key), "manifests/%s", manifest_id + 7),
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
		pack_key(f->r, &f->x.packs[c->pack], "pack", sp->key, sizeof(sp->key));
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
		size_t i = n % m->nfiles;
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
			const struct rslot *o = rindex_find(&f->x, c->hash);
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
	if ((ret = store_packs_refresh(s)) || (ret = rindex_load(r, s, &f.x)))
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
	rindex_release(&f.x);
	manifest_free(m);
	free(json);
	return ret;
}

/* ---- gc ---- */

struct objects {
	struct s3_object *v;
	size_t n, cap;
	const char *skip1, *skip2; /* prefixes gc never touches */
};

static int collect_object(const struct s3_object *o, void *arg)
{
	struct objects *l = arg;

	if (!strncmp(o->key, l->skip1, strlen(l->skip1)) ||
	    !strncmp(o->key, l->skip2, strlen(l->skip2)))
		return 0;
	if (ARRAY_GROW(l->v, l->cap, l->n + 1, 256))
		return -ENOMEM;
	l->v[l->n++] = *o;
	return 0;
}

/* Every key a ref reaches: refs' manifests, and the packs holding any of
 * their chunks (with their indexes). */
struct reach {
	char **keys;
	size_t n, cap;
	uint64_t refs;
};

static int reach_add(struct reach *rc, const char *key)
{
	if (ARRAY_GROW(rc->keys, rc->cap, rc->n + 1, 256))
		return -ENOMEM;
	return (rc->keys[rc->n] = strdup(key)) ? (rc->n++, 0) : -ENOMEM;
}

static void reach_release(struct reach *rc)
{
	for (size_t i = 0; i < rc->n; i++)
		free(rc->keys[i]);
	free(rc->keys);
	memset(rc, 0, sizeof(*rc));
}

static int reachable(struct remote *r, struct reach *rc)
{
	json_t *refs = NULL, *e;
	struct hash_set live;
	struct rindex x;
	char key[S3_KEY_MAX];
	size_t i;
	int ret;

	memset(rc, 0, sizeof(*rc));
	memset(&x, 0, sizeof(x));
	hash_set_init(&live);
	/* Refs first, then the packs: a pack written after the listing of refs
	 * is newer than any mark this gc makes, so it is never deleted as a
	 * result of this view. */
	if ((ret = remote_list_refs(r, &refs)))
		goto out;
	json_array_foreach(refs, i, e)
	{
		struct manifest *m = NULL;
		const char *id = json_string_value(json_object_get(e, "manifest"));
		rc->refs++;
		ret = remote_fetch_manifest(r, id, &m);
		if (ret) {
			char why[1024];
			snprintf(why, sizeof(why), "%s", log_last_error());
			pr_err("function %s: %s; gc stops, deleting nothing",
			       json_string_value(json_object_get(e, "function")), why);
			goto out;
		}
		for (size_t f = 0; f < m->nfiles && !ret; f++)
			for (size_t k = 0; k < m->files[f].nchunks && !ret; k++)
				if (!m->files[f].chunks[k].zero &&
				    hash_set_add(&live, m->files[f].chunks[k].hash) < 0)
					ret = -ENOMEM;
		manifest_free(m);
		if (!ret)
			ret = reach_add(rc, key_of(r, key, sizeof(key), "manifests/%s", id + 7));
		if (ret)
			goto out;
	}
	if ((ret = rindex_load(r, NULL, &x)))
		goto out;
	for (size_t p = 0; p < x.npacks && !ret; p++) {
		bool used = false;
		for (size_t k = 0; k < x.packs[p].n && !used; k++)
			used = hash_set_has(&live, x.packs[p].e[k].hash);
		if (!used)
			continue;
		pack_key(r, &x.packs[p], "pack", key, sizeof(key));
		ret = reach_add(rc, key);
		pack_key(r, &x.packs[p], "idx", key, sizeof(key));
		if (!ret)
			ret = reach_add(rc, key);
	}
	if (!ret && rc->n)
		qsort(rc->keys, rc->n, sizeof(*rc->keys), cmp_str);
out:
	json_decref(refs);
	rindex_release(&x);
	hash_set_release(&live);
	if (ret)
		reach_release(rc);
	return ret;
}

static bool reach_has(const struct reach *rc, const char *key)
{
	return rc->n && bsearch(&key, rc->keys, rc->n, sizeof(*rc->keys), cmp_str);
}

/* Every object gc may delete (packs/, manifests/), with its size and age. */
static int list_collectable(struct remote *r, struct objects *all)
{
	char k1[S3_KEY_MAX], k2[S3_KEY_MAX], pre[S3_KEY_MAX];

	memset(all, 0, sizeof(*all));
	all->skip1 = key_of(r, k1, sizeof(k1), "refs/");
	all->skip2 = key_of(r, k2, sizeof(k2), "gc/");
	int ret = s3_list(r->s3, key_of(r, pre, sizeof(pre), "packs/"), collect_object, all);
	if (!ret)
		ret = s3_list(r->s3, key_of(r, pre, sizeof(pre), "manifests/"), collect_object, all);
	all->skip1 = all->skip2 = NULL;
	return ret;
}

static int pending_write(struct remote *r, const char *const *keys, size_t n, int64_t marked_ms,
			 int grace_s, bool sweeping)
{
	json_t *objs = json_array(), *j;
	char key[S3_KEY_MAX], *text;
	int ret;

	for (size_t i = 0; objs && i < n; i++)
		if (json_array_append_new(objs, json_string(keys[i]))) {
			json_decref(objs);
			objs = NULL;
		}
	j = objs ? json_pack("{s:i, s:I, s:i, s:b, s:o}", "version", 1, "marked_ms",
			     (json_int_t)marked_ms, "grace_s", grace_s, "sweeping", sweeping,
			     "objects", objs)
		 : NULL;
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return -ENOMEM;
	struct s3_source src = { .buf = text, .fd = -1, .len = strlen(text) };
	ret = s3_put(r->s3, key_of(r, key, sizeof(key), "gc/pending.json"), &src);
	free(text);
	return ret;
}

/* Delete what the mark pd lists that is still unreachable and not written
 * since the mark; an index before its pack. */
static int sweep(struct remote *r, const struct pending *pd, const struct reach *rc,
		 const struct objects *all, struct remote_gc_stats *st)
{
	int ret = 0;

	for (int pass = 0; pass < 2 && !ret; pass++)
		for (size_t i = 0; i < all->n && !ret; i++) {
			const struct s3_object *o = &all->v[i];
			size_t n = strlen(o->key);
			bool idx = n > 4 && !strcmp(o->key + n - 4, ".idx");
			if ((pass == 0) != idx)
				continue;
			if (!pending_has(pd, o->key) || reach_has(rc, o->key) ||
			    o->mtime_ms >= pd->marked_ms)
				continue;
			ret = s3_delete(r->s3, o->key);
			if (!ret) {
				st->deleted++;
				st->deleted_bytes += o->size;
				pr_info("gc: deleted %s", o->key);
			}
		}
	return ret;
}

int remote_gc(struct remote *r, int grace_s, bool dry_run, struct remote_gc_stats *stats)
{
	struct remote_gc_stats st = { 0 };
	struct pending pd = { 0 };
	struct reach rc = { 0 };
	struct objects all = { 0 };
	char **cand = NULL;
	size_t ncand = 0;
	int ret;

	if (grace_s < 0)
		grace_s = REMOTE_GC_GRACE_S;
	if ((ret = pending_read(r, &pd)))
		goto out;
	int64_t now = s3_server_time_ms(r->s3);
	if (pd.exists && !pd.sweeping) {
		int64_t age_s = (now - pd.marked_ms) / 1000;
		int need = MAX(grace_s, pd.grace_s);
		if (age_s < need) {
			st.wait_s = need - age_s;
			st.marked = pd.n;
			goto out; /* the mark stands until its grace is over */
		}
		/* Tell pushes that a sweep is on, before looking at what to delete. */
		if (!dry_run &&
		    (ret = pending_write(r, (const char *const *)pd.keys, pd.n, pd.marked_ms,
					 pd.grace_s, true)))
			goto out;
	}
	if ((ret = reachable(r, &rc)) || (ret = list_collectable(r, &all)))
		goto out;
	/* The server's clock when the listing answered: anything written later
	 * is newer than this mark. */
	int64_t mark_ms = s3_server_time_ms(r->s3);
	st.refs = rc.refs;
	if (pd.exists && !dry_run && (ret = sweep(r, &pd, &rc, &all, &st)))
		goto out;
	cand = calloc(all.n + 1, sizeof(*cand));
	if (!cand) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < all.n; i++) {
		if (reach_has(&rc, all.v[i].key)) {
			st.kept++;
			continue;
		}
		/* Deleted by this sweep: not marked again. */
		if (pd.exists && !dry_run && pending_has(&pd, all.v[i].key) &&
		    all.v[i].mtime_ms < pd.marked_ms)
			continue;
		cand[ncand++] = all.v[i].key;
	}
	st.marked = ncand;
	if (!dry_run)
		ret = pending_write(r, (const char *const *)cand, ncand, mark_ms, grace_s, false);
out:
	if (stats)
		*stats = st;
	free(cand);
	free(all.v);
	reach_release(&rc);
	pending_release(&pd);
	return ret;
}
