/* SPDX-License-Identifier: Apache-2.0 */
/* store_drop.c — a damaged chunk taken out of the store's index (store.h,
 * store_chunk_drop_damaged).
 *
 * A put deduplicates against the index: a chunk whose stored copy is
 * damaged would be "already stored" for every snapshot of the same bytes,
 * and a re-snapshot made to replace a damaged one would name the damaged
 * copy again.  Dropping it from the index (the pack's index file rewritten
 * without its entry, what every later open reads; the table in memory) makes
 * the next put write it anew; its old bytes are then garbage in their pack,
 * which gc reclaims as it does any chunk no index names.
 */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define INDEX_MAX_BYTES (1ull << 30)

/* Whether the object obj (obj_len bytes) holds the chunk named hash: as an
 * object with a header, or bare (its bytes are the chunk's). */
static bool sound(const uint8_t *obj, size_t obj_len, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct chunk_codec *c;
	long raw_len = store_object_raw_len(obj, obj_len);
	uint8_t *raw;
	bool ok = false;

	if (raw_len < 0) /* no header: a bare object, or a damaged header */
		return chunk_is_bare(obj_len, obj_len) && chunk_check_hash(obj, obj_len, hash) == 0;
	c = chunk_codec_new();
	raw = malloc(raw_len ? (size_t)raw_len : 1);
	if (c && raw)
		ok = chunk_decode(c, obj, obj_len, hash, raw, (size_t)raw_len) == 0;
	free(raw);
	chunk_codec_free(c);
	return ok;
}

/* Rewrite pack name's index file without hash's entry. */
static int rewrite_index(struct store *s, const char *name, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct pack_entry *e = NULL;
	uint64_t size = 0;
	size_t n = 0, len = 0, k = 0;
	uint8_t *out = NULL;
	char path[PATH_MAX], *buf = NULL;
	int ret;

	ret = store_pack_file_path(s, name, "idx", path, sizeof(path));
	if (!ret)
		ret = read_file(path, &buf, &len, INDEX_MAX_BYTES);
	if (!ret)
		ret = pack_index_parse((const uint8_t *)buf, len, &e, &n, &size);
	if (ret)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (memcmp(e[i].hash, hash, CHUNK_HASH_LEN))
			e[k++] = e[i];
	if (k == n)
		goto out; /* not in this index (any more) */
	out = pack_index_encode(e, k, size, &len);
	if (!out) {
		ret = -ENOMEM;
		goto out;
	}
	ret = store_write_object(s, path, out, len, true, true);
	ret = ret < 0 ? ret : 0;
out:
	if (ret)
		pr_err("cannot rewrite pack index %s without a damaged chunk: %s", path,
		       strerror(-ret));
	free(out);
	free(e);
	free(buf);
	return ret;
}

int store_chunk_drop_damaged(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	size_t cap = chunk_encode_bound(CHUNK_MAX_RAW), len = 0;
	struct store_chunk_loc loc;
	char id[CHUNK_ID_LEN], name[PACK_NAME_LEN + 1] = "", path[PATH_MAX];
	uint8_t *obj = malloc(cap);
	int lock = -1, ret;

	chunk_id_format(hash, id);
	if (!obj)
		return -ENOMEM;
	/* Shared, as a put: gc (exclusive) rewrites packs and their indexes. */
	lock = store_lock(s, LOCK_SH);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	ret = store_chunk_locate(s, hash, &loc);
	if (ret)
		goto out;
	ret = store_read_chunk(s, hash, obj, cap, &len);
	if (ret && ret != -EBADMSG)
		goto out;
	if (!ret && sound(obj, len, hash)) {
		pr_info("chunk %s reads back sound: kept", id);
		goto out;
	}
	if (loc.pack == STORE_LOOSE) {
		store_chunk_path(s, hash, path, sizeof(path));
		ret = unlink(path) < 0 && errno != ENOENT ? -errno : 0;
	} else {
		pthread_rwlock_rdlock(&s->idx_lock);
		if (loc.pack < s->npacks)
			snprintf(name, sizeof(name), "%s", s->packs[loc.pack].name);
		pthread_rwlock_unlock(&s->idx_lock);
		ret = name[0] ? rewrite_index(s, name, hash) : -ENOENT;
		if (!ret)
			store_index_drop(s, hash);
	}
	if (!ret) {
		pr_warn("chunk %s is damaged: dropped from the store's index (%s%s), so that the "
			"next snapshot holding it writes it anew",
			id, loc.pack == STORE_LOOSE ? "a loose object" : "pack ",
			loc.pack == STORE_LOOSE ? "" : name);
		ret = 1;
	}
out:
	if (lock >= 0)
		close(lock);
	free(obj);
	return ret;
}
