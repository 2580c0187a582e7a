/* SPDX-License-Identifier: Apache-2.0 */
/* remote_index.c — the remote's packs and their chunks (internal.h): the
 * listing of packs/, their indexes (cached under the store, as packs never
 * change) and a hash table of the chunks they hold. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "store/store.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INDEX_MAX_BYTES (256u << 20) /* a pack index larger than this is refused */

void remote_index_release(struct rindex *x)
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

struct rpack *remote_index_pack(struct rindex *x, const char *name)
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
	struct rpack *p = remote_index_pack(l->x, base);
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
	ret = s3_get(r->s3, remote_key(r, key, sizeof(key), "packs/%s.idx", p->name), INDEX_MAX_BYTES,
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

int remote_index_rehash(struct rindex *x)
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
const struct rslot *remote_index_find(const struct rindex *x, const uint8_t *hash)
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
int remote_index_load(struct remote *r, struct store *s, struct rindex *x)
{
	char key[S3_KEY_MAX], dir[PATH_MAX];
	struct list_packs l = { r, x, 0 };
	int ret;

	memset(x, 0, sizeof(*x));
	ret = s3_list(r->s3, remote_key(r, key, sizeof(key), "packs/"), list_pack_object, &l);
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
		ret = remote_index_rehash(x);
	if (ret)
		remote_index_release(x);
	return ret;
}


void remote_pack_key(const struct remote *r, const struct rpack *p, const char *ext, char *buf,
		     size_t cap)
{
	remote_key(r, buf, cap, "packs/%s.%s", p->name, ext);
}

