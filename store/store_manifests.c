/* SPDX-License-Identifier: Apache-2.0 */
/* store_manifests.c — finding, loading, listing and deleting manifests; store totals. */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_MIN_PREFIX 12

struct prefix_match {
	const char *prefix;
	size_t len;
	int found;
	uint8_t hash[CHUNK_HASH_LEN];
};

static int match_prefix(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct prefix_match *pm = arg;
	const char *base = strrchr(name, '/') + 1;

	if (hash && !strncmp(base, pm->prefix, pm->len)) {
		pm->found++;
		memcpy(pm->hash, hash, CHUNK_HASH_LEN);
	}
	return 0;
}

int store_manifest_resolve(struct store *s, const char *id, uint8_t hash[CHUNK_HASH_LEN])
{
	struct prefix_match pm = {0};
	const char *hex = id;
	int ret;

	if (!id || !*id) {
		pr_err("no manifest id given");
		return -EINVAL;
	}
	if (!strncmp(id, "sha256:", 7))
		hex = id + 7;
	size_t n = strlen(hex);
	if (n == 2 * CHUNK_HASH_LEN && strspn(hex, "0123456789abcdef") == n)
		return hex_decode(hex, hash, CHUNK_HASH_LEN);
	if (n < MANIFEST_MIN_PREFIX || n > 2 * CHUNK_HASH_LEN ||
	    strspn(hex, "0123456789abcdef") != n) {
		pr_err("'%.80s' is not a manifest id (sha256:<64 hex>, or at least %d hex digits "
		       "of one)",
		       id, MANIFEST_MIN_PREFIX);
		return -EINVAL;
	}
	pm.prefix = hex;
	pm.len = n;
	ret = store_foreach_manifest(s, match_prefix, &pm);
	if (ret < 0)
		return ret;
	if (pm.found == 0) {
		pr_err("no manifest %s in %s", id, s->dir);
		return -ENOENT;
	}
	if (pm.found > 1) {
		pr_err("manifest id %s is ambiguous (%d manifests match)", id, pm.found);
		return -EINVAL;
	}
	memcpy(hash, pm.hash, CHUNK_HASH_LEN);
	return 0;
}

int store_manifest_read(const char *path, const uint8_t *hash, struct manifest **out)
{
	uint8_t got[CHUNK_HASH_LEN];
	char *buf = NULL;
	size_t len;
	int ret;

	*out = NULL;
	ret = read_file(path, &buf, &len, MANIFEST_MAX_SIZE);
	if (ret < 0) {
		if (ret == -EFBIG)
			pr_err("manifest %s is larger than %u bytes", path, MANIFEST_MAX_SIZE);
		else if (ret != -ENOENT)
			pr_err("cannot read %s: %s", path, strerror(-ret));
		return ret == -EFBIG ? -EBADMSG : ret;
	}
	if (hash) {
		chunk_hash(buf, len, got);
		if (memcmp(got, hash, CHUNK_HASH_LEN)) {
			pr_err("manifest %s is damaged: its bytes do not hash to its name", path);
			ret = -EBADMSG;
			goto out;
		}
	}
	ret = manifest_parse(buf, len, out);
	if (ret < 0) {
		char why[512];
		snprintf(why, sizeof(why), "%s", log_last_error());
		pr_err("manifest %s: %s", path, why);
	}
out:
	free(buf);
	return ret;
}

/* Not ctime: a lease is a hard link of the manifest (store_lease.c), and
 * every link and unlink changes it, so each materialisation would throw the
 * parsed copy away (the next start read the GPU example's manifest again:
 * ~0.4 s).  A write into the file changes mtime; a new file, the inode. */
static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The cache's entry for hash, or NULL; s->cache_mu held. */
static struct store_cached_manifest *cache_find(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	for (size_t i = 0; i < STORE_MANIFEST_CACHE; i++)
		if (s->cache[i].m && !memcmp(s->cache[i].hash, hash, CHUNK_HASH_LEN))
			return &s->cache[i];
	return NULL;
}

/* A copy of the manifest named hash cached from the file st describes, or NULL. */
static struct manifest *cache_get(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
				  const struct stat *st)
{
	struct store_cached_manifest *e;
	struct manifest *m = NULL;

	pthread_mutex_lock(&s->cache_mu);
	e = cache_find(s, hash);
	if (e && same_file(&e->st, st)) {
		e->used = ++s->cache_clock;
		m = manifest_copy(e->m);
	}
	pthread_mutex_unlock(&s->cache_mu);
	return m;
}

/* Forget entry e; s->cache_mu held. */
static void cache_evict(struct store *s, struct store_cached_manifest *e)
{
	manifest_free(e->m);
	e->m = NULL;
	s->cache_bytes -= e->bytes;
	e->bytes = 0;
}

#define NO_SLOT STORE_MANIFEST_CACHE

/* The least recently used entry but the one in slot keep (NO_SLOT: none
 * kept), or NULL; s->cache_mu held. */
static struct store_cached_manifest *cache_lru(struct store *s, size_t keep)
{
	struct store_cached_manifest *lru = NULL;

	for (size_t i = 0; i < STORE_MANIFEST_CACHE; i++) {
		struct store_cached_manifest *e = &s->cache[i];

		if (i != keep && e->m && (!lru || e->used < lru->used))
			lru = e;
	}
	return lru;
}

/* Keep a copy of m, read from the file st describes, under hash (in its old
 * slot, a free one, else the least recently used's), evicting the least
 * recently used others until the cache is within its byte budget; a manifest
 * larger than the budget, or out of memory, is simply not kept. */
void store_manifest_cache_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			      const struct stat *st, const struct manifest *m)
{
	struct store_cached_manifest *slot, *lru;
	size_t bytes = manifest_mem_bytes(m);
	struct manifest *c = bytes <= s->cache_budget ? manifest_copy(m) : NULL;

	pthread_mutex_lock(&s->cache_mu);
	slot = cache_find(s, hash); /* read again from a changed file: replace it */
	if (slot)
		cache_evict(s, slot);
	if (!c)
		goto out;
	if (!slot) {
		for (size_t i = 0; i < STORE_MANIFEST_CACHE && !slot; i++)
			if (!s->cache[i].m)
				slot = &s->cache[i];
		if (!slot) {
			slot = cache_lru(s, NO_SLOT);
			cache_evict(s, slot);
		}
	}
	while (s->cache_bytes + bytes > s->cache_budget &&
	       (lru = cache_lru(s, (size_t)(slot - s->cache))))
		cache_evict(s, lru);
	slot->m = c;
	slot->st = *st;
	slot->bytes = bytes;
	memcpy(slot->hash, hash, CHUNK_HASH_LEN);
	slot->used = ++s->cache_clock;
	s->cache_bytes += bytes;
out:
	pthread_mutex_unlock(&s->cache_mu);
}

void store_set_manifest_cache_bytes(struct store *s, uint64_t bytes)
{
	struct store_cached_manifest *lru;

	pthread_mutex_lock(&s->cache_mu);
	s->cache_budget = bytes;
	while (s->cache_bytes > bytes && (lru = cache_lru(s, NO_SLOT)))
		cache_evict(s, lru);
	pthread_mutex_unlock(&s->cache_mu);
}

uint64_t store_manifest_reads(struct store *s)
{
	return atomic_load(&s->manifest_reads);
}

/* The cached copy of hash, if any, goes (its manifest was deleted). */
static void cache_drop(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct store_cached_manifest *e;

	pthread_mutex_lock(&s->cache_mu);
	e = cache_find(s, hash);
	if (e)
		cache_evict(s, e);
	pthread_mutex_unlock(&s->cache_mu);
}

int store_manifest_bin_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
			    size_t len)
{
	return store_hash_path(s, STORE_MANIFEST_BIN_DIR, hash, buf, len);
}

static void bin_source(const struct stat *st, struct manifest_bin_source *src)
{
	src->size = (uint64_t)st->st_size;
	src->ino = (uint64_t)st->st_ino;
	src->mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
}

void store_manifest_bin_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			    const struct stat *st, const struct manifest *m)
{
	struct manifest_bin_source src;
	char path[PATH_MAX];
	uint8_t *buf;
	size_t len;

	bin_source(st, &src);
	buf = manifest_bin_encode(m, hash, &src, &len);
	if (!buf) {
		pr_debug("no binary form of a manifest: out of memory");
		return;
	}
	/* Not synced: a binary a crash cut short fails its checksum and is
	 * made again from the JSON. */
	if (store_manifest_bin_path(s, hash, path, sizeof(path)) == 0 &&
	    store_write_object(s, path, buf, len, false, false) < 0)
		pr_warn("cannot write %s: loads will read the manifest's JSON", path);
	free(buf);
}

/* The manifest hash from its binary form, made from the JSON file st
 * describes: 0 and *out, or -errno with *out NULL.  One that is damaged,
 * stale or of another version is removed (the JSON's load makes it again). */
static int bin_load(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], const struct stat *st,
		    struct manifest **out)
{
	struct manifest_bin_source src;
	char path[PATH_MAX], *buf = NULL;
	size_t len;
	int ret;

	*out = NULL;
	bin_source(st, &src);
	ret = store_manifest_bin_path(s, hash, path, sizeof(path));
	if (ret == 0)
		ret = read_file(path, &buf, &len, MANIFEST_MAX_SIZE);
	if (ret)
		return ret; /* none: an older store, or one being written */
	ret = manifest_bin_decode((const uint8_t *)buf, len, hash, &src, out);
	free(buf);
	if (ret == -EBADMSG) {
		char why[256];

		snprintf(why, sizeof(why), "%s", log_last_error());
		pr_warn("%s is damaged (%s): reading the manifest's JSON", path, why);
	}
	if (ret == -EBADMSG || ret == -ESTALE)
		unlink(path);
	return ret;
}

int store_manifest_bin_verify(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			      const char *json_path)
{
	struct manifest_bin_source src;
	struct manifest *m = NULL;
	char path[PATH_MAX], *buf = NULL;
	struct stat st;
	size_t len;
	int ret;

	if (stat(json_path, &st) < 0)
		return 0; /* deleted meanwhile: so is its binary form, at the next gc */
	bin_source(&st, &src);
	ret = store_manifest_bin_path(s, hash, path, sizeof(path));
	if (ret == 0)
		ret = read_file(path, &buf, &len, MANIFEST_MAX_SIZE);
	if (ret == -ENOENT)
		return 0;
	if (ret == -EFBIG)
		log_set_error("larger than any manifest");
	if (ret == 0)
		ret = manifest_bin_decode((const uint8_t *)buf, len, hash, &src, &m);
	free(buf);
	manifest_free(m);
	if (ret == -ESTALE)
		return 0;
	if (ret == -EFBIG)
		return -EBADMSG;
	return ret;
}

uint64_t store_manifest_json_reads(struct store *s)
{
	return atomic_load(&s->manifest_json_reads);
}

int store_manifest_load(struct store *s, const char *id, struct manifest **out,
			char full_id[CHUNK_ID_LEN])
{
	uint8_t hash[CHUNK_HASH_LEN];
	char path[PATH_MAX], fid[CHUNK_ID_LEN];
	int ret;

	*out = NULL;
	ret = store_manifest_resolve(s, id, hash);
	if (ret < 0)
		return ret;
	chunk_id_format(hash, fid);
	store_manifest_path(s, hash, path, sizeof(path));
	/* Only the very file that was read and checked (internal.h).  Without
	 * its file no binary form is used either: a deleted manifest is gone. */
	struct stat st;
	bool have_st = stat(path, &st) == 0;
	if (have_st)
		*out = cache_get(s, hash, &st);
	if (*out) {
		ret = 0;
	} else {
		if (!have_st || bin_load(s, hash, &st, out) < 0) {
			ret = store_manifest_read(path, hash, out);
			if (ret == -ENOENT)
				pr_err("no manifest %s in %s", fid, s->dir);
			if (ret == 0)
				atomic_fetch_add(&s->manifest_json_reads, 1);
			if (ret == 0 && have_st)
				store_manifest_bin_put(s, hash, &st, *out);
		}
		if (ret == 0)
			atomic_fetch_add(&s->manifest_reads, 1);
		if (ret == 0 && have_st)
			store_manifest_cache_put(s, hash, &st, *out);
	}
	if (ret == 0 && full_id)
		memcpy(full_id, fid, CHUNK_ID_LEN);
	return ret;
}

int store_manifest_delete(struct store *s, const char *id)
{
	uint8_t hash[CHUNK_HASH_LEN];
	char path[PATH_MAX];
	int ret;

	ret = store_manifest_resolve(s, id, hash);
	if (ret < 0)
		return ret;
	store_manifest_path(s, hash, path, sizeof(path));
	cache_drop(s, hash);
	if (unlink(path) < 0) {
		ret = -errno;
		pr_perror("cannot delete %s", path);
		return ret;
	}
	/* Its binary form after it (a load never uses one without its JSON);
	 * one left by a crash here goes at the next gc. */
	store_manifest_bin_path(s, hash, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		pr_warn("cannot delete %s: %s (gc will)", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/manifests", s->dir);
	return fsync_dir(path);
}

int store_manifest_bins_sweep(struct store *s)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	int removed = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/" STORE_MANIFEST_BIN_DIR, s->dir);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		uint8_t hash[CHUNK_HASH_LEN];
		bool keep = false;

		if (de->d_name[0] == '.')
			continue;
		if (strlen(de->d_name) == 2 * CHUNK_HASH_LEN &&
		    strspn(de->d_name, "0123456789abcdef") == 2 * CHUNK_HASH_LEN &&
		    hex_decode(de->d_name, hash, CHUNK_HASH_LEN) == 0) {
			store_manifest_path(s, hash, path, sizeof(path));
			keep = access(path, F_OK) == 0;
		}
		if (keep || snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		if (unlink(path) == 0)
			removed++;
		else
			pr_warn("gc: cannot remove %s: %s", path, strerror(errno));
	}
	closedir(d);
	return removed;
}

static int list_one(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	json_t *arr = arg;
	struct manifest *m = NULL;
	struct manifest_totals t;
	char id[CHUNK_ID_LEN];

	if (!hash)
		return 0;
	if (store_manifest_read(path, hash, &m) < 0) {
		pr_warn("skipping unreadable manifest %s", path);
		return 0;
	}
	chunk_id_format(hash, id);
	manifest_totals(m, &t);
	int ret = json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:I,s:I}", "id", id, "name",
						       m->name, "created", m->created, "files",
						       (json_int_t)m->nfiles, "logical_bytes",
						       (json_int_t)t.logical_bytes));
	manifest_free(m);
	return ret ? -ENOMEM : 0;
}

static int by_created(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(json_string_value(json_object_get(x, "created")),
		       json_string_value(json_object_get(y, "created")));

	return c ? c
		 : strcmp(json_string_value(json_object_get(x, "id")),
			  json_string_value(json_object_get(y, "id")));
}

int store_list(struct store *s, json_t **out)
{
	json_t *arr = json_array(), *sorted = NULL;
	json_t **v = NULL;
	int ret;

	*out = NULL;
	if (!arr)
		return -ENOMEM;
	ret = store_foreach_manifest(s, list_one, arr);
	if (ret < 0)
		goto out;
	/* Oldest first, so that a listing reads as a history. */
	size_t n = json_array_size(arr);
	v = malloc((n ? n : 1) * sizeof(*v));
	sorted = json_array();
	if (!v || !sorted) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		v[i] = json_array_get(arr, i);
	qsort(v, n, sizeof(*v), by_created);
	for (size_t i = 0; i < n; i++)
		json_array_append(sorted, v[i]);
	*out = sorted;
	sorted = NULL;
out:
	free(v);
	json_decref(sorted);
	json_decref(arr);
	return ret;
}

static int stat_manifest(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct store_stats *st = arg;
	struct manifest *m = NULL;
	struct manifest_totals t;

	if (!hash || store_manifest_read(path, hash, &m) < 0)
		return 0;
	manifest_totals(m, &t);
	st->logical_bytes += t.logical_bytes;
	st->zero_bytes += t.zero_bytes;
	st->manifests++;
	manifest_free(m);
	return 0;
}

static int stat_chunk(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct store_stats *st = arg;
	uint8_t hdr[CHUNK_HEADER_SIZE];
	struct stat sb;
	int fd;

	if (!hash)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; /* gone under us (gc): not counted */
	if (fstat(fd, &sb) == 0) {
		ssize_t n = pread(fd, hdr, sizeof(hdr), 0);
		long raw = n == (ssize_t)sizeof(hdr) ? store_object_raw_len(hdr, sizeof(hdr)) : -1;
		st->chunks++;
		st->stored_bytes += (uint64_t)sb.st_size;
		if (raw > 0)
			st->unique_bytes += (uint64_t)raw;
	}
	close(fd);
	return 0;
}

struct stat_packs {
	struct store_stats *st;
	struct hash_set seen; /* a chunk in two packs (two puts at once) counts once */
};

static int stat_pack(const char *name, const struct pack_entry *e, size_t n, uint64_t size,
		     int err, void *arg)
{
	struct stat_packs *sp = arg;

	if (!e)
		return 0;
	sp->st->stored_bytes += size; /* what the pack takes, its padding included */
	for (size_t i = 0; i < n; i++) {
		int r = hash_set_add(&sp->seen, e[i].hash);
		if (r < 0)
			return r;
		if (r == 1) {
			sp->st->chunks++;
			sp->st->unique_bytes += e[i].raw_len;
		}
	}
	return 0;
}

int store_stat(struct store *s, struct store_stats *st)
{
	struct stat_packs sp = {.st = st};
	int ret;

	memset(st, 0, sizeof(*st));
	hash_set_init(&sp.seen);
	ret = store_foreach_manifest(s, stat_manifest, st);
	if (ret == 0)
		ret = store_foreach_pack(s, stat_pack, &sp);
	if (ret == 0)
		ret = store_foreach_chunk(s, stat_chunk, st);
	hash_set_release(&sp.seen);
	return ret;
}

int store_pending_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], const void *json,
		      size_t len)
{
	char path[PATH_MAX];
	int ret = store_hash_path(s, STORE_PENDING_DIR, hash, path, sizeof(path));

	if (!ret)
		ret = store_write_object(s, path, json, len, true, true);
	return ret < 0 ? ret : 0;
}

void store_pending_drop(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	char path[PATH_MAX];

	if (!store_hash_path(s, STORE_PENDING_DIR, hash, path, sizeof(path)) && unlink(path) < 0 &&
	    errno != ENOENT)
		pr_warn("cannot remove %s: %s", path, strerror(errno));
}
