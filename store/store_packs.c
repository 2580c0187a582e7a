/* SPDX-License-Identifier: Apache-2.0 */
/* store_packs.c — the store's index of its packs: which pack holds a chunk,
 * where.  Every index file under packs/ is loaded into one hash table in
 * memory (48 bytes a chunk: ~3 MB for a 4 GB GPU image), read again when
 * packs/ changes (a put of another process, a gc). */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INDEX_MAX_BYTES (1ull << 30) /* no index file is larger than this */

static size_t slot_of(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	uint64_t k;

	memcpy(&k, hash, 8);
	size_t i = (size_t)k & (s->slots_cap - 1);
	while (s->slots[i].stored && memcmp(s->slots[i].hash, hash, CHUNK_HASH_LEN))
		i = (i + 1) & (s->slots_cap - 1);
	return i;
}

static int grow(struct store *s, size_t want)
{
	size_t cap = s->slots_cap ? s->slots_cap : 1024;
	struct store_index_slot *old = s->slots;
	size_t old_cap = s->slots_cap;

	while (want * 2 > cap)
		cap *= 2;
	if (cap == s->slots_cap)
		return 0;
	s->slots = calloc(cap, sizeof(*s->slots));
	if (!s->slots) {
		s->slots = old;
		return -ENOMEM;
	}
	s->slots_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].stored)
			s->slots[slot_of(s, old[i].hash)] = old[i];
	free(old);
	return 0;
}

/* Whether entry e of pack name is a copy dropped as damaged.  idx_lock held. */
static bool dropped(const struct store *s, const char *name, const struct pack_entry *e)
{
	if (!s->ndropped || !hash_set_has(&s->dropped_hashes, e->hash))
		return false;
	for (size_t i = 0; i < s->ndropped; i++)
		if (s->dropped[i].off == e->off && !strcmp(s->dropped[i].pack, name) &&
		    !memcmp(s->dropped[i].hash, e->hash, CHUNK_HASH_LEN))
			return true;
	return false;
}

/* With idx_lock held for writing. */
static int add_pack_locked(struct store *s, const char *name, uint64_t size,
			   const struct pack_entry *e, size_t n)
{
	uint32_t no;

	for (size_t i = 0; i < s->npacks; i++)
		if (!s->packs[i].gone && !strcmp(s->packs[i].name, name))
			return 0; /* known already */
	if (ARRAY_GROW(s->packs, s->packs_cap, s->npacks + 1, 16))
		return -ENOMEM;
	if (s->npacks >= STORE_LOOSE || grow(s, s->nslots + n) < 0)
		return -ENOMEM;
	no = (uint32_t)s->npacks++;
	snprintf(s->packs[no].name, sizeof(s->packs[no].name), "%s", name);
	s->packs[no].size = size;
	s->packs[no].gone = false;
	for (size_t i = 0; i < n; i++) {
		struct store_index_slot *sl = &s->slots[slot_of(s, e[i].hash)];
		if (sl->stored)
			continue; /* in an earlier pack too (two puts at once): the first serves */
		if (dropped(s, name, &e[i]))
			continue;
		memcpy(sl->hash, e[i].hash, CHUNK_HASH_LEN);
		sl->off = e[i].off;
		sl->pack = no;
		sl->stored = e[i].stored;
		s->nslots++;
	}
	return 0;
}

int store_index_add_pack(struct store *s, const char *name, uint64_t size,
			 const struct pack_entry *e, size_t n)
{
	pthread_rwlock_wrlock(&s->idx_lock);
	int ret = add_pack_locked(s, name, size, e, n);
	pthread_rwlock_unlock(&s->idx_lock);
	if (ret)
		pr_err("out of memory for the index of packs");
	return ret;
}

bool store_index_find(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
		      struct store_chunk_loc *loc)
{
	bool found = false;

	pthread_rwlock_rdlock(&s->idx_lock);
	if (s->slots_cap) {
		const struct store_index_slot *sl = &s->slots[slot_of(s, hash)];
		found = sl->stored != 0;
		if (found && loc) {
			loc->pack = sl->pack;
			loc->stored = sl->stored;
			loc->off = sl->off;
		}
	}
	pthread_rwlock_unlock(&s->idx_lock);
	return found;
}

/* Take the slot of hash out of the table.  idx_lock held for writing. */
static void slot_remove(struct store *s, size_t i)
{
	size_t j, home, mask = s->slots_cap - 1;

	s->slots[i].stored = 0;
	s->nslots--;
	/* Linear probing: move back each later entry of the run that the hole
	 * would now hide from its home slot. */
	for (j = (i + 1) & mask; s->slots[j].stored; j = (j + 1) & mask) {
		uint64_t k;

		memcpy(&k, s->slots[j].hash, 8);
		home = (size_t)k & mask;
		if (((j - home) & mask) < ((j - i) & mask))
			continue; /* its home lies between the hole and it */
		s->slots[i] = s->slots[j];
		s->slots[j].stored = 0;
		i = j;
	}
}

int store_index_drop(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], const char *pack,
		     uint64_t off)
{
	struct store_dropped *d;
	int ret = 0;

	pthread_rwlock_wrlock(&s->idx_lock);
	if (s->slots_cap) {
		size_t i = slot_of(s, hash);
		const struct store_index_slot *sl = &s->slots[i];

		if (sl->stored && sl->off == off && sl->pack < s->npacks &&
		    !strcmp(s->packs[sl->pack].name, pack))
			slot_remove(s, i);
	}
	/* Remembered, so that no later read of an index brings it back. */
	if (hash_set_add(&s->dropped_hashes, hash) < 0 ||
	    ARRAY_GROW(s->dropped, s->dropped_cap, s->ndropped + 1, 16)) {
		ret = -ENOMEM;
		goto out;
	}
	d = &s->dropped[s->ndropped++];
	memcpy(d->hash, hash, CHUNK_HASH_LEN);
	snprintf(d->pack, sizeof(d->pack), "%s", pack);
	d->off = off;
out:
	pthread_rwlock_unlock(&s->idx_lock);
	return ret;
}

void store_packs_reload(struct store *s)
{
	pthread_rwlock_wrlock(&s->idx_lock);
	s->packs_reload = true;
	pthread_rwlock_unlock(&s->idx_lock);
}

/* Load the index file packs/<name>.idx; -ENOENT if it is gone, -EBADMSG if bad
 * (logged; the pack is then left out, and verify reports it). */
static int load_index(struct store *s, const char *name)
{
	char path[PATH_MAX];
	struct pack_entry *e = NULL;
	uint64_t size = 0;
	size_t n = 0, len = 0;
	char *buf = NULL;
	int ret;

	snprintf(path, sizeof(path), "%s/packs/%s.idx", s->dir, name);
	ret = read_file(path, &buf, &len, INDEX_MAX_BYTES);
	if (ret == -ENOENT)
		return ret;
	if (ret < 0) {
		pr_err("cannot read pack index %s: %s", path, strerror(-ret));
		return ret;
	}
	ret = pack_index_parse((const uint8_t *)buf, len, &e, &n, &size);
	free(buf);
	if (ret < 0) {
		pr_err("pack index %s is unusable; its chunks are left out", path);
		return ret;
	}
	ret = add_pack_locked(s, name, size, e, n);
	free(e);
	return ret;
}

static bool is_index_name(const char *d, char name[PACK_NAME_LEN + 1])
{
	if (strlen(d) != PACK_NAME_LEN + 4 || strcmp(d + PACK_NAME_LEN, ".idx") ||
	    strspn(d, "0123456789abcdef") != PACK_NAME_LEN)
		return false;
	memcpy(name, d, PACK_NAME_LEN);
	name[PACK_NAME_LEN] = '\0';
	return true;
}

/* The index names under packs/ into *names (PACK_NAME_LEN + 1 each). */
static int list_indexes(struct store *s, char (**names)[PACK_NAME_LEN + 1], size_t *n)
{
	char dir[PATH_MAX], name[PACK_NAME_LEN + 1];
	char (*v)[PACK_NAME_LEN + 1] = NULL;
	size_t cap = 0;
	struct dirent *de;
	DIR *d;

	*n = 0;
	snprintf(dir, sizeof(dir), "%s/packs", s->dir);
	d = opendir(dir);
	if (!d) {
		int ret = -errno;
		pr_perror("cannot read %s", dir);
		return ret;
	}
	while ((de = readdir(d))) {
		if (!is_index_name(de->d_name, name))
			continue;
		if (ARRAY_GROW(v, cap, *n + 1, 64)) {
			free(v);
			closedir(d);
			return -ENOMEM;
		}
		memcpy(v[(*n)++], name, sizeof(name));
	}
	closedir(d);
	*names = v;
	return 0;
}

static bool listed(char (*names)[PACK_NAME_LEN + 1], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int store_packs_read(struct store *s, bool force)
{
	char (*names)[PACK_NAME_LEN + 1] = NULL;
	char dir[PATH_MAX];
	struct stat st;
	size_t n = 0;
	bool rebuild = false;
	int ret;

	snprintf(dir, sizeof(dir), "%s/packs", s->dir);
	if (stat(dir, &st) < 0) {
		ret = -errno;
		pr_perror("cannot read %s", dir);
		return ret;
	}
	pthread_rwlock_wrlock(&s->idx_lock);
	/* A directory's mtime may keep its value across changes made within one
	 * clock tick: read it again while the last reading is that recent. */
	uint64_t mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
	if (!force && !s->packs_reload && st.st_mtim.tv_sec == s->packs_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == s->packs_mtime.tv_nsec && s->packs_read_ns > mtime_ns + 1000000000ull) {
		pthread_rwlock_unlock(&s->idx_lock);
		return 0;
	}
	s->packs_read_ns = realtime_ns();
	s->packs_mtime = st.st_mtim;
	ret = list_indexes(s, &names, &n);
	if (ret)
		goto out;
	rebuild = s->packs_reload;
	s->packs_reload = false;
	for (size_t i = 0; i < s->npacks && !rebuild; i++)
		rebuild = !s->packs[i].gone && !listed(names, n, s->packs[i].name);
	if (rebuild) {
		/* A pack went (gc), or a copy was dropped: start the table again
		 * from the indexes left, so that a chunk that was also in another
		 * pack is found there.  Pack
		 * numbers are not reused: a location taken before stays what it was. */
		for (size_t i = 0; i < s->npacks; i++)
			s->packs[i].gone = true;
		memset(s->slots, 0, s->slots_cap * sizeof(*s->slots));
		s->nslots = 0;
	}
	for (size_t i = 0; i < n; i++) {
		int r = load_index(s, names[i]);
		if (r == -ENOMEM) {
			ret = r;
			break;
		}
	}
out:
	pthread_rwlock_unlock(&s->idx_lock);
	free(names);
	return ret;
}

int store_packs_refresh(struct store *s)
{
	return store_packs_read(s, true);
}

int store_chunk_locate(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
		       struct store_chunk_loc *loc)
{
	char path[PATH_MAX];

	if (store_index_find(s, hash, loc))
		return 0;
	if (store_packs_read(s, false) == 0 && store_index_find(s, hash, loc))
		return 0;
	store_chunk_path(s, hash, path, sizeof(path));
	if (access(path, F_OK) < 0)
		return -ENOENT;
	loc->pack = STORE_LOOSE;
	loc->stored = 0;
	loc->off = 0;
	return 0;
}

int store_pack_path(struct store *s, uint32_t pack, char *buf, size_t len)
{
	int ret = 0;

	pthread_rwlock_rdlock(&s->idx_lock);
	if (pack >= s->npacks)
		ret = -ENOENT;
	else if ((size_t)snprintf(buf, len, "%s/packs/%s.pack", s->dir, s->packs[pack].name) >= len)
		ret = -ENAMETOOLONG;
	pthread_rwlock_unlock(&s->idx_lock);
	return ret;
}

int store_read_chunk(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], uint8_t *obj,
		     size_t cap, size_t *obj_len)
{
	struct store_chunk_loc loc;
	char path[PATH_MAX];
	int ret, fd;

	for (int again = 0;; again++) {
		ret = store_chunk_locate(s, hash, &loc);
		if (ret)
			return ret;
		if (loc.pack == STORE_LOOSE) {
			store_chunk_path(s, hash, path, sizeof(path));
			return store_read_object(path, obj, cap, obj_len);
		}
		if (loc.stored > cap)
			return -EBADMSG;
		ret = store_pack_path(s, loc.pack, path, sizeof(path));
		if (ret)
			return ret;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			break;
		/* Its pack was rewritten by a gc since we looked: look again, once. */
		if (errno != ENOENT || again)
			return -errno;
		store_packs_refresh(s);
	}
	ssize_t got = pread_upto(fd, obj, loc.stored, (off_t)loc.off);
	close(fd);
	if (got < 0)
		return (int)got;
	*obj_len = (size_t)got;
	return *obj_len < loc.stored ? -EBADMSG : 0; /* less: the pack was cut short */
}

void store_set_pack_direct(struct store *s, bool direct)
{
	s->direct = direct;
}

void store_set_layout(struct store *s, enum store_layout layout)
{
	s->layout = layout;
}

void store_index_release(struct store *s)
{
	free(s->slots);
	free(s->packs);
	s->slots = NULL;
	s->packs = NULL;
	s->nslots = s->slots_cap = s->npacks = s->packs_cap = 0;
}

int store_foreach_pack(struct store *s, store_pack_fn fn, void *arg)
{
	char (*names)[PACK_NAME_LEN + 1] = NULL;
	char path[PATH_MAX];
	size_t n = 0;
	int ret;

	ret = list_indexes(s, &names, &n);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct pack_entry *e = NULL;
		uint64_t size = 0;
		size_t ne = 0, len = 0;
		char *buf = NULL;
		int err;

		snprintf(path, sizeof(path), "%s/packs/%s.idx", s->dir, names[i]);
		err = read_file(path, &buf, &len, INDEX_MAX_BYTES);
		if (err == -ENOENT)
			continue; /* removed since the listing */
		if (err == 0)
			err = pack_index_parse((const uint8_t *)buf, len, &e, &ne, &size);
		free(buf);
		if (err == -ENOMEM) {
			ret = err;
			break;
		}
		ret = fn(names[i], err ? NULL : e, ne, size, err, arg);
		free(e);
	}
	free(names);
	return ret;
}

int store_pack_file_path(struct store *s, const char *name, const char *ext, char *buf,
			 size_t len)
{
	if ((size_t)snprintf(buf, len, "%s/packs/%s.%s", s->dir, name, ext) >= len)
		return -ENAMETOOLONG;
	return 0;
}
