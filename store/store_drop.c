/* SPDX-License-Identifier: Apache-2.0 */
/* store_drop.c — damaged chunks taken out of the store's index: one that a
 * reader found (store_chunk_drop_damaged), or every one of a snapshot found
 * damaged and of the packs they lie in (store_heal).
 *
 * A put deduplicates against the index: a chunk whose stored copy is
 * damaged would be "already stored" for every snapshot of the same bytes,
 * and a re-snapshot made to replace a damaged one would name the damaged
 * copy again.  Dropping it from the index (the pack's index file rewritten
 * without its entry, what every later open reads; the table in memory, which
 * remembers the copy so that no later read of an index brings it back) makes
 * the next put write it anew; its old bytes are then garbage in their pack,
 * which gc reclaims as it does any chunk no index names.  Each chunk is
 * checked as store_verify checks it (store_check.c), so that `thaw store
 * verify` lists what a heal drops.
 */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define INDEX_MAX_BYTES (1ull << 30)

typedef void (*store_bad_fn)(const char *chunk_id, const char *why, void *arg);

/* Pack name's index file, its entries into *e (*n). */
static int read_index(struct store *s, const char *name, char path[PATH_MAX],
		      struct pack_entry **e, size_t *n, uint64_t *size)
{
	char *buf = NULL;
	size_t len = 0;
	int ret;

	ret = store_pack_file_path(s, name, "idx", path, PATH_MAX);
	if (!ret)
		ret = read_file(path, &buf, &len, INDEX_MAX_BYTES);
	if (!ret)
		ret = pack_index_parse((const uint8_t *)buf, len, e, n, size);
	free(buf);
	return ret;
}

static bool same_entry(const struct pack_entry *a, const struct pack_entry *b)
{
	return a->off == b->off && !memcmp(a->hash, b->hash, CHUNK_HASH_LEN);
}

/* Take the nbad entries bad of pack name out of its index file (rewritten
 * once, crash-safely) and out of the index in memory for good, each one
 * logged with why[i].  The memory's drop holds even where the file cannot
 * be rewritten.  0 or -errno. */
static int drop_from_pack(struct store *s, const char *name, const struct pack_entry *bad,
			  char (*why)[700], size_t nbad)
{
	struct pack_entry *e = NULL;
	uint64_t size = 0;
	size_t n = 0, k = 0, len = 0;
	uint8_t *out = NULL;
	char path[PATH_MAX], id[CHUNK_ID_LEN];
	int ret, r;

	/* One rewrite at a time: two drops from one pack must not each write
	 * the index it read, the other's drop undone. */
	pthread_mutex_lock(&s->drop_mu);
	ret = read_index(s, name, path, &e, &n, &size);
	for (size_t i = 0; !ret && i < n; i++) {
		bool drop = false;

		for (size_t j = 0; j < nbad && !drop; j++)
			drop = same_entry(&e[i], &bad[j]);
		if (!drop)
			e[k++] = e[i];
	}
	if (!ret && k < n) {
		out = pack_index_encode(e, k, size, &len);
		ret = out ? store_write_object(s, path, out, len, true, true) : -ENOMEM;
		ret = ret < 0 ? ret : 0;
	}
	pthread_mutex_unlock(&s->drop_mu);
	if (ret)
		pr_err("cannot rewrite pack index %s without its damaged chunks: %s (they stay "
		       "out of this process's index)", path, strerror(-ret));
	for (size_t j = 0; j < nbad; j++) {
		r = store_index_drop(s, bad[j].hash, name, bad[j].off);
		ret = ret ? ret : r;
		chunk_id_format(bad[j].hash, id);
		pr_warn("chunk %s is damaged: dropped from the store's index (pack %s: %s), so that "
			"the next snapshot holding it writes it anew", id, name, why[j]);
	}
	store_packs_reload(s); /* another pack may hold a sound copy */
	free(out);
	free(e);
	return ret;
}

/* A damaged loose object: removed, and logged with why. */
static int drop_loose(const char *path, const uint8_t hash[CHUNK_HASH_LEN], const char *why)
{
	char id[CHUNK_ID_LEN];

	chunk_id_format(hash, id);
	if (unlink(path) < 0 && errno != ENOENT) {
		int ret = -errno;

		pr_perror("cannot remove the damaged chunk %s", path);
		return ret;
	}
	pr_warn("chunk %s is damaged: dropped from the store's index (a loose object: %s), so "
		"that the next snapshot holding it writes it anew", id, why);
	return 0;
}

int store_chunk_drop_damaged(struct store *s, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct store_check_buf cb = { 0 };
	struct store_chunk_loc loc;
	struct pack_entry *e = NULL, *mine = NULL;
	uint64_t size = 0;
	size_t n = 0;
	char id[CHUNK_ID_LEN], name[PACK_NAME_LEN + 1] = "", path[PATH_MAX], pack[PATH_MAX];
	char why[1][700];
	int lock = -1, fd = -1, ret;

	chunk_id_format(hash, id);
	/* Shared, as a put: gc (exclusive) rewrites packs and their indexes. */
	lock = store_lock(s, LOCK_SH);
	if (lock < 0)
		return lock;
	ret = store_check_buf_init(&cb);
	if (!ret)
		ret = store_chunk_locate(s, hash, &loc);
	if (ret)
		goto out;
	if (loc.pack == STORE_LOOSE) {
		store_chunk_path(s, hash, path, sizeof(path));
		ret = store_check_loose(&cb, path, hash, why[0], sizeof(why[0]));
		if (ret == 1)
			ret = drop_loose(path, hash, why[0]) ?: 1;
		goto out;
	}
	pthread_rwlock_rdlock(&s->idx_lock);
	if (loc.pack < s->npacks)
		snprintf(name, sizeof(name), "%s", s->packs[loc.pack].name);
	pthread_rwlock_unlock(&s->idx_lock);
	ret = name[0] ? read_index(s, name, path, &e, &n, &size) : -ENOENT;
	for (size_t i = 0; !ret && i < n && !mine; i++)
		if (e[i].off == loc.off && !memcmp(e[i].hash, hash, CHUNK_HASH_LEN))
			mine = &e[i];
	if (!ret && !mine)
		ret = -ENOENT; /* not in its index any more */
	if (!ret)
		ret = store_pack_file_path(s, name, "pack", pack, sizeof(pack));
	if (!ret && (fd = open(pack, O_RDONLY | O_CLOEXEC)) < 0)
		ret = -errno;
	if (ret)
		goto out;
	if (store_check_pack_entry(&cb, fd, name, mine, why[0], sizeof(why[0])))
		ret = drop_from_pack(s, name, mine, why, 1) ?: 1;
out:
	if (ret == 0)
		pr_info("chunk %s reads back sound: kept", id);
	if (fd >= 0)
		close(fd);
	free(e);
	store_check_buf_release(&cb);
	close(lock);
	return ret;
}

/* store_heal */

struct heal {
	struct store *s;
	struct store_check_buf cb;
	struct hash_set want; /* the snapshot's chunks */
	struct hash_set seen; /* of them, those met in a pack or looked for loose */
	store_bad_fn bad;
	void *arg;
	uint64_t checked; /* objects checked */
	int nbad;         /* chunks found damaged or missing */
	int err;          /* the first drop that failed */
};

static void heal_report(struct heal *h, const uint8_t hash[CHUNK_HASH_LEN], const char *why)
{
	char id[CHUNK_ID_LEN];

	chunk_id_format(hash, id);
	if (h->bad)
		h->bad(id, why, h->arg);
	h->nbad++;
}

/* Check entry i of pack name (fd) into bad[] / why[]. */
static void heal_check(struct heal *h, int fd, const char *name, const struct pack_entry *e,
		       struct pack_entry *bad, char (*why)[700], size_t *nbad)
{
	h->checked++;
	if (store_check_pack_entry(&h->cb, fd, name, e, why[*nbad], sizeof(why[0]))) {
		heal_report(h, e->hash, why[*nbad]);
		bad[(*nbad)++] = *e;
	}
}

/* One pack: the snapshot's chunks in it checked, and where one is damaged,
 * every other chunk it holds; the damaged ones dropped. */
static int heal_pack(const char *name, const struct pack_entry *e, size_t n, uint64_t size,
		     int err, void *arg)
{
	struct heal *h = arg;
	struct pack_entry *bad = NULL;
	char (*why)[700] = NULL, path[PATH_MAX];
	size_t nbad = 0, i;
	bool any = false;
	int fd = -1, ret = 0;

	(void)size;
	if (!e) /* an unusable index: its chunks are missing (verify names it) */
		return err == -ENOMEM ? err : 0;
	for (i = 0; i < n && !any; i++)
		any = hash_set_has(&h->want, e[i].hash);
	if (!any)
		return 0;
	bad = malloc(n * sizeof(*bad));
	why = malloc(n * sizeof(*why));
	if (!bad || !why) {
		ret = -ENOMEM;
		goto out;
	}
	store_pack_file_path(h->s, name, "pack", path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		/* Held by the store lock: gone only if it was never there. */
		pr_err("cannot read pack %s: %s", path, strerror(errno));
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (!hash_set_has(&h->want, e[i].hash))
			continue;
		if (hash_set_add(&h->seen, e[i].hash) < 0) {
			ret = -ENOMEM;
			goto out;
		}
		heal_check(h, fd, name, &e[i], bad, why, &nbad);
	}
	/* A pack at fault: what else it holds, other snapshots' chunks too. */
	for (i = 0; nbad && i < n; i++)
		if (!hash_set_has(&h->want, e[i].hash))
			heal_check(h, fd, name, &e[i], bad, why, &nbad);
	if (nbad && (ret = drop_from_pack(h->s, name, bad, why, nbad)) != 0) {
		h->err = h->err ? h->err : ret;
		ret = ret == -ENOMEM ? ret : 0;
	}
out:
	if (fd >= 0)
		close(fd);
	free(bad);
	free(why);
	return ret;
}

/* The snapshot's chunks no pack holds: loose objects checked (and dropped
 * where damaged), or missing. */
static int heal_rest(struct heal *h, const struct manifest *m, const char *mid)
{
	char path[PATH_MAX], why[700];
	int ret;

	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t j = 0; j < m->files[i].nchunks; j++) {
			const struct manifest_chunk *c = &m->files[i].chunks[j];

			if (c->zero || hash_set_has(&h->seen, c->hash))
				continue;
			if (hash_set_add(&h->seen, c->hash) < 0)
				return -ENOMEM;
			store_chunk_path(h->s, c->hash, path, sizeof(path));
			h->checked++;
			ret = store_check_loose(&h->cb, path, c->hash, why, sizeof(why));
			if (ret == -ENOENT) {
				snprintf(why, sizeof(why), "missing, needed by %.80s of manifest %s",
					 m->files[i].path, mid);
				heal_report(h, c->hash, why);
			} else if (ret == 1) {
				heal_report(h, c->hash, why);
				ret = drop_loose(path, c->hash, why);
				h->err = h->err ? h->err : ret;
			}
		}
	return 0;
}

int store_heal(struct store *s, const char *id, store_bad_fn bad, void *arg)
{
	struct heal h = { .s = s, .bad = bad, .arg = arg };
	struct manifest *m = NULL;
	char mid[CHUNK_ID_LEN];
	uint64_t t0 = now_ns();
	int lock = -1, ret;

	hash_set_init(&h.want);
	hash_set_init(&h.seen);
	/* Shared, as a put: gc (exclusive) rewrites packs and their indexes. */
	lock = store_lock(s, LOCK_SH);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	ret = store_manifest_load(s, id, &m, mid);
	if (!ret)
		ret = store_check_buf_init(&h.cb);
	for (size_t i = 0; !ret && i < m->nfiles; i++)
		for (size_t j = 0; !ret && j < m->files[i].nchunks; j++)
			if (!m->files[i].chunks[j].zero &&
			    hash_set_add(&h.want, m->files[i].chunks[j].hash) < 0)
				ret = -ENOMEM;
	if (!ret)
		ret = store_foreach_pack(s, heal_pack, &h);
	if (!ret)
		ret = heal_rest(&h, m, mid);
	if (ret)
		goto out;
	pr_info("snapshot %s: %llu chunk objects checked (its own, and all of the packs a "
		"damaged one lies in) in %.1f ms: %d damaged or missing", mid,
		(unsigned long long)h.checked, ms_since(t0), h.nbad);
	ret = h.err ? h.err : h.nbad;
out:
	if (ret < 0)
		pr_err("cannot check snapshot %s for damage: %s", id, strerror(-ret));
	if (lock >= 0)
		close(lock);
	store_check_buf_release(&h.cb);
	hash_set_release(&h.want);
	hash_set_release(&h.seen);
	manifest_free(m);
	return ret;
}
