/* SPDX-License-Identifier: Apache-2.0 */
/* store_damage.h — for tests: find a chunk's object in a store, wherever it
 * lies (a loose file, or a range of a pack), and damage it.  Static helpers,
 * included by the tests that need them. */
#ifndef THAW_TEST_STORE_DAMAGE_H
#define THAW_TEST_STORE_DAMAGE_H

#include "test/check.h"
#include "store/pack.h"
#include "store/store.h"
#include "common/util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file holding chunk hash's object, where in it the object starts and
 * its length.  Returns whether it is in a pack. */
static inline bool chunk_where(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			       char path[PATH_MAX], off_t *off, size_t *len)
{
	struct store_chunk_loc loc;
	struct stat st;

	REQUIRE(store_chunk_locate(s, hash, &loc) == 0);
	if (loc.pack == STORE_LOOSE) {
		REQUIRE(store_chunk_path(s, hash, path, PATH_MAX) == 0);
		REQUIRE(stat(path, &st) == 0);
		*off = 0;
		*len = (size_t)st.st_size;
		return false;
	}
	REQUIRE(store_pack_path(s, loc.pack, path, PATH_MAX) == 0);
	*off = (off_t)loc.off;
	*len = loc.stored;
	return true;
}

/* Flip one byte at offset at of chunk hash's object. */
static inline void chunk_flip(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], size_t at)
{
	char path[PATH_MAX];
	off_t off;
	size_t len;
	uint8_t b;
	int fd;

	chunk_where(s, hash, path, &off, &len);
	REQUIRE(at < len);
	REQUIRE(chmod(path, 0644) == 0);
	fd = open(path, O_RDWR);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, &b, 1, off + (off_t)at) == 1);
	b ^= 0x40;
	REQUIRE(pwrite(fd, &b, 1, off + (off_t)at) == 1);
	close(fd);
}

/* Cut chunk hash's object to its first keep bytes: a loose file truncated,
 * or its pack truncated there (so pick a chunk that is the last of its
 * pack: chunk_last_in_pack()). */
static inline void chunk_cut(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], size_t keep)
{
	char path[PATH_MAX];
	off_t off;
	size_t len;

	chunk_where(s, hash, path, &off, &len);
	REQUIRE(keep < len);
	REQUIRE(chmod(path, 0644) == 0);
	REQUIRE(truncate(path, off + (off_t)keep) == 0);
}

/* Make chunk hash missing: its loose file removed, or its entry taken out of
 * its pack's index (the pack and the new index under a new name, as a gc
 * would write them, so that every store object sees the change). */
static inline void chunk_remove(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	char path[PATH_MAX], idx[PATH_MAX + 8], npack[PATH_MAX + 8], nidx[PATH_MAX + 8];
	struct pack_entry *e = NULL;
	uint64_t size = 0;
	size_t n = 0, len = 0, k = 0;
	char *buf = NULL;
	uint8_t *out;
	off_t off;

	if (!chunk_where(s, hash, path, &off, &len)) {
		REQUIRE(unlink(path) == 0);
		return;
	}
	size_t base = strlen(path) - strlen(".pack");
	char last = path[base - 1] == 'f' ? 'e' : 'f'; /* the new name: its last digit changed */
	snprintf(idx, sizeof(idx), "%.*s.idx", (int)base, path);
	snprintf(npack, sizeof(npack), "%.*s%c.pack", (int)base - 1, path, last);
	snprintf(nidx, sizeof(nidx), "%.*s%c.idx", (int)base - 1, path, last);
	REQUIRE(read_file(idx, &buf, &len, 1 << 30) == 0);
	REQUIRE(pack_index_parse((const uint8_t *)buf, len, &e, &n, &size) == 0);
	free(buf);
	for (size_t i = 0; i < n; i++)
		if (memcmp(e[i].hash, hash, CHUNK_HASH_LEN))
			e[k++] = e[i];
	REQUIRE(k == n - 1);
	out = pack_index_encode(e, k, size, &len);
	REQUIRE(out);
	REQUIRE(link(path, npack) == 0);
	REQUIRE(write_file_atomic(nidx, out, len, 0444) == 0);
	REQUIRE(unlink(idx) == 0);
	REQUIRE(unlink(path) == 0);
	free(out);
	free(e);
	REQUIRE(store_packs_refresh(s) == 0);
}

/* A chunk of file f whose object is the last of its pack (or any, for loose
 * objects): cutting its pack short harms it alone. */
static inline const struct manifest_chunk *chunk_last_in_pack(struct store *s,
							      const struct manifest_file *f)
{
	const struct manifest_chunk *best = NULL;
	char path[PATH_MAX], bpath[PATH_MAX] = "";
	off_t off, boff = -1;
	size_t len;

	for (size_t i = 0; i < f->nchunks; i++) {
		if (f->chunks[i].zero)
			continue;
		chunk_where(s, f->chunks[i].hash, path, &off, &len);
		if (!best || (!strcmp(path, bpath) && off > boff)) {
			best = &f->chunks[i];
			boff = off;
			snprintf(bpath, sizeof(bpath), "%s", path);
		}
	}
	REQUIRE(best);
	return best;
}

#endif
