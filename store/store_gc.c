/* SPDX-License-Identifier: Apache-2.0 */
/* store_gc.c — verify every object, and collect the garbage.
 *
 * gc holds the store lock exclusively, so no put is between writing its chunks
 * and its manifest, and no lease is half taken.  It marks the chunks of every
 * manifest and of every live lease (a lease is a hard link of its manifest, so
 * it still names the chunks of a deleted manifest), then deletes every pack
 * and loose chunk holding nothing marked, rewrites a pack that is mostly
 * garbage (GC_REPACK_PCT) unless a live lease uses one of its chunks (a
 * restore in progress reads it where its index said), keeps the chunks of a
 * young pending manifest (a fetch from the remote tier, internal.h), and removes the stale
 * leases, packs a dead put left without an index, and all temp files.  A manifest that cannot be
 * read stops gc: deleting chunks it might name would be worse than keeping them.
 */
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
#include <time.h>
#include <unistd.h>

struct gc {
	struct store *s;
	struct hash_set live;	/* chunks of a manifest or a live lease */
	struct hash_set leased; /* chunks of a live lease: their packs stay as they are */
	struct hash_set kept;	/* chunks in a pack kept so far: a copy elsewhere is garbage */
	struct store_check_buf cb;
	uint64_t freed_chunks, freed_bytes;
};

/* A pack is rewritten without its garbage once at least this share of its
 * bytes is garbage (rewriting costs reading and writing what is kept). */
#define GC_REPACK_PCT 25

static int mark_manifest(struct gc *g, const struct manifest *m, bool leased)
{
	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t j = 0; j < m->files[i].nchunks; j++) {
			const uint8_t *h = m->files[i].chunks[j].hash;
			if (m->files[i].chunks[j].zero)
				continue;
			if (hash_set_add(&g->live, h) < 0 ||
			    (leased && hash_set_add(&g->leased, h) < 0))
				return -ENOMEM;
		}
	return 0;
}

static int gc_manifest(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct manifest *m = NULL;
	int ret;

	if (!hash) {
		pr_warn("gc: ignoring %s: not a manifest name", path);
		return 0;
	}
	ret = store_manifest_read(path, hash, &m);
	if (ret == -ENOENT)
		return 0;
	if (ret < 0) {
		pr_err("gc: cannot read manifest %s, so cannot tell which chunks it needs; "
		       "nothing deleted (delete it or restore it first)",
		       path);
		return ret;
	}
	ret = mark_manifest(arg, m, false);
	manifest_free(m);
	return ret;
}

static int gc_leases(struct gc *g)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int ret = 0;

	snprintf(dir, sizeof(dir), "%s/leases", g->s->dir);
	d = opendir(dir);
	if (!d) {
		ret = -errno;
		pr_perror("cannot read %s", dir);
		return ret;
	}
	while ((de = readdir(d)) && ret == 0) {
		struct manifest *m = NULL;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			/* Nobody holds it: its holder is gone. */
			pr_info("gc: removing stale lease %s", de->d_name);
			unlink(path);
			close(fd);
			continue;
		}
		close(fd);
		if (store_manifest_read(path, NULL, &m) < 0) {
			pr_err("gc: cannot read live lease %s; nothing deleted", path);
			ret = -EBADMSG;
			break;
		}
		ret = mark_manifest(g, m, true);
		manifest_free(m);
	}
	closedir(d);
	return ret;
}

/* The chunks of the manifests fetches are filling (STORE_PENDING_DIR) are
 * live while the manifest is young enough for its fetch to go on; an older
 * one, or one that does not parse, is removed (its chunks then go). */
static int gc_pending(struct gc *g)
{
	char dir[PATH_MAX], path[PATH_MAX + 256];
	time_t now = time(NULL);
	struct dirent *de;
	struct stat st;
	DIR *d;
	int ret = 0;

	snprintf(dir, sizeof(dir), "%s/" STORE_PENDING_DIR, g->s->dir);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) && ret == 0) {
		struct manifest *m = NULL;

		if (de->d_name[0] == '.' ||
		    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path) ||
		    stat(path, &st) < 0)
			continue;
		if (now - st.st_mtime > STORE_PENDING_MAX_AGE_S ||
		    store_manifest_read(path, NULL, &m) < 0) {
			pr_info("gc: removing %s, a fetch that did not finish", path);
			unlink(path);
			continue;
		}
		ret = mark_manifest(g, m, false);
		manifest_free(m);
	}
	closedir(d);
	return ret;
}

static int gc_chunk(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct gc *g = arg;
	struct stat sb;

	/* Garbage: no one needs it, or a pack holds it too (unless a restore in
	 * progress may be reading this copy). */
	if (!hash || (hash_set_has(&g->live, hash) &&
		      (!hash_set_has(&g->kept, hash) || hash_set_has(&g->leased, hash))))
		return 0;
	if (lstat(path, &sb) == 0 && unlink(path) == 0) {
		g->freed_chunks++;
		g->freed_bytes += (uint64_t)sb.st_size;
	}
	return 0;
}

/* Remove a pack: its index first, so that no reader finds it half gone. */
static void remove_pack(struct gc *g, const char *name)
{
	char path[PATH_MAX];

	store_pack_file_path(g->s, name, "idx", path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		pr_perror("gc: cannot remove %s", path);
	store_pack_file_path(g->s, name, "pack", path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		pr_perror("gc: cannot remove %s", path);
}

/* Copy the live chunks of pack name (fd) into a new pack, each checked on
 * the way; 0, or -errno with the old pack left as it was. */
static int repack(struct gc *g, const char *name, int fd, const struct pack_entry *e, size_t n,
		  const bool *keep)
{
	struct pack_writer *w = pack_writer_new(g->s);
	uint32_t stored;
	int ret = w ? 0 : -ENOMEM;

	for (size_t i = 0; i < n && ret == 0; i++) {
		if (!keep[i])
			continue;
		if (store_read_pack_object(&g->cb, fd, &e[i])) {
			char id[CHUNK_ID_LEN];
			chunk_id_format(e[i].hash, id);
			pr_err("gc: chunk %s in pack %s is unreadable or corrupt; the pack is kept "
			       "as it is (see thaw store verify)",
			       id, name);
			ret = -EBADMSG;
			break;
		}
		ret = pack_writer_add(w, g->cb.codec, e[i].hash, g->cb.raw, e[i].raw_len, &stored, NULL,
				      NULL);
	}
	if (ret == 0)
		ret = pack_writer_finish(w);
	pack_writer_free(w);
	return ret;
}

static int gc_pack(const char *name, const struct pack_entry *e, size_t n, uint64_t size, int err,
		   void *arg)
{
	struct gc *g = arg;
	uint64_t dead_bytes = 0, dead = 0, kept_bytes = 0;
	bool leased = false, *keep = NULL;
	char path[PATH_MAX];
	int fd = -1, ret = 0;

	if (err) {
		pr_warn("gc: pack %s has an unusable index; left as it is", name);
		return 0;
	}
	keep = calloc(n ? n : 1, sizeof(*keep));
	if (!keep)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		keep[i] = hash_set_has(&g->live, e[i].hash) && !hash_set_has(&g->kept, e[i].hash);
		leased = leased || hash_set_has(&g->leased, e[i].hash);
		if (!keep[i]) {
			dead++;
			dead_bytes += ALIGN_UP(e[i].stored, PACK_ALIGN);
		} else {
			kept_bytes += ALIGN_UP(e[i].stored, PACK_ALIGN);
		}
	}
	/* Bytes no entry names are garbage too: a damaged chunk dropped from
	 * the index (store_chunk_drop_damaged). */
	if (size > kept_bytes + dead_bytes)
		dead_bytes = size - kept_bytes;
	if (dead == n) {
		remove_pack(g, name);
		g->freed_chunks += dead;
		g->freed_bytes += size;
		goto out;
	}
	if (dead_bytes && !leased && dead_bytes * 100 >= size * GC_REPACK_PCT) {
		store_pack_file_path(g->s, name, "pack", path, sizeof(path));
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			pr_perror("gc: cannot read pack %s", path);
		} else if (repack(g, name, fd, e, n, keep) == 0) {
			remove_pack(g, name);
			g->freed_chunks += dead;
			g->freed_bytes += dead_bytes;
		}
	}
	/* Kept, as it was or in its new pack. */
	for (size_t i = 0; i < n && ret == 0; i++)
		if (keep[i] && hash_set_add(&g->kept, e[i].hash) < 0)
			ret = -ENOMEM;
out:
	if (fd >= 0)
		close(fd);
	free(keep);
	return ret;
}

/* Packs with no index: a put that died before indexing them (no put runs
 * while gc holds the store lock). */
static void gc_orphan_packs(struct gc *g)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	struct stat sb;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/packs", g->s->dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len != PACK_NAME_LEN + 5 || strcmp(de->d_name + PACK_NAME_LEN, ".pack"))
			continue;
		char name[PACK_NAME_LEN + 1];
		snprintf(name, sizeof(name), "%.*s", PACK_NAME_LEN, de->d_name);
		store_pack_file_path(g->s, name, "idx", path, sizeof(path));
		if (access(path, F_OK) == 0 || errno != ENOENT)
			continue;
		store_pack_file_path(g->s, name, "pack", path, sizeof(path));
		if (lstat(path, &sb) == 0 && unlink(path) == 0) {
			pr_info("gc: removed %s, a pack a put left without its index", de->d_name);
			g->freed_bytes += (uint64_t)sb.st_size;
		}
	}
	closedir(d);
}

int store_gc(struct store *s, uint64_t *freed_chunks, uint64_t *freed_bytes)
{
	struct gc g = {.s = s};
	char tmp[PATH_MAX];
	int lock = -1, ret;

	hash_set_init(&g.live);
	hash_set_init(&g.leased);
	hash_set_init(&g.kept);
	ret = store_check_buf_init(&g.cb);
	if (ret)
		goto out;
	lock = store_lock(s, LOCK_EX);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	ret = store_foreach_manifest(s, gc_manifest, &g);
	if (ret == 0)
		ret = gc_leases(&g);
	if (ret == 0)
		ret = gc_pending(&g);
	if (ret == 0)
		ret = store_foreach_pack(s, gc_pack, &g);
	if (ret == 0) {
		gc_orphan_packs(&g);
		ret = store_foreach_chunk(s, gc_chunk, &g);
	}
	if (ret == 0)
		store_packs_refresh(s);
	if (ret == 0) {
		/* No put runs while we hold the lock: every temp file is left over. */
		snprintf(tmp, sizeof(tmp), "%s/tmp", s->dir);
		rm_rf(tmp);
		ret = mkdir_p(tmp, 0700);
	}
	if (ret == 0) {
		int r = store_manifest_bins_sweep(s);
		if (r < 0)
			pr_warn("gc: cannot sweep the manifests' binary forms: %s", strerror(-r));
	}
	if (ret == 0) {
		pr_info("gc: freed %llu chunks, %llu bytes", (unsigned long long)g.freed_chunks,
			(unsigned long long)g.freed_bytes);
		if (freed_chunks)
			*freed_chunks = g.freed_chunks;
		if (freed_bytes)
			*freed_bytes = g.freed_bytes;
	}
out:
	if (lock >= 0)
		close(lock);
	hash_set_release(&g.live);
	hash_set_release(&g.leased);
	hash_set_release(&g.kept);
	store_check_buf_release(&g.cb);
	return ret;
}

/* verify */

struct verify {
	struct store *s;
	struct store_check_buf cb;
	struct hash_set present, missing;
	char (*bad_packs)[PACK_NAME_LEN + 1]; /* packs whose index is unusable */
	size_t nbad_packs;
	void (*bad)(const char *chunk_id, const char *why, void *arg);
	void *arg;
	int nbad;
	bool quick; /* store_check: no chunk object is read */
};

static void report(struct verify *v, const char *id, const char *why)
{
	pr_err("bad: %s: %s", id, why);
	if (v->bad)
		v->bad(id, why, v->arg);
	v->nbad++;
}

static int verify_chunk(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct verify *v = arg;
	char id[CHUNK_ID_LEN], why[600];

	if (!hash) {
		report(v, name, "not a chunk object name");
		return 0;
	}
	chunk_id_format(hash, id);
	if (hash_set_add(&v->present, hash) < 0)
		return -ENOMEM;
	if (v->quick)
		return 0;
	/* -ENOENT: deleted by a gc meanwhile. */
	if (store_check_loose(&v->cb, path, hash, why, sizeof(why)) == 1)
		report(v, id, why);
	return 0;
}

/* Check one object of a pack (fd) as verify_chunk checks a loose one. */
static int verify_pack_entry(struct verify *v, int fd, const char *name,
			     const struct pack_entry *e)
{
	char id[CHUNK_ID_LEN], why[700];

	if (hash_set_add(&v->present, e->hash) < 0)
		return -ENOMEM;
	if (store_check_pack_entry(&v->cb, fd, name, e, why, sizeof(why))) {
		chunk_id_format(e->hash, id);
		report(v, id, why);
	}
	return 0;
}

/* store_check's look at a pack (fd, at path): its chunks are there as far
 * as its length goes; each one the file is too short to hold is reported
 * (a pack cut short), and only those count as present. */
static int verify_pack_length(struct verify *v, int fd, const char *path,
			      const struct pack_entry *e, size_t n)
{
	char id[CHUNK_ID_LEN], why[PATH_MAX + 100];
	struct stat st;

	if (fstat(fd, &st) < 0) {
		snprintf(why, sizeof(why), "unreadable pack: %s", strerror(errno));
		report(v, path, why);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (e[i].off + e[i].stored <= (uint64_t)st.st_size) {
			if (hash_set_add(&v->present, e[i].hash) < 0)
				return -ENOMEM;
			continue;
		}
		chunk_id_format(e[i].hash, id);
		snprintf(why, sizeof(why), "corrupt (pack %s is cut short at its offset %llu)", path,
			 (unsigned long long)e[i].off);
		report(v, id, why);
	}
	return 0;
}

static int verify_pack(const char *name, const struct pack_entry *e, size_t n, uint64_t size,
		       int err, void *arg)
{
	struct verify *v = arg;
	char path[PATH_MAX], why[300];
	int fd, ret = 0;

	if (err) {
		snprintf(why, sizeof(why), "unusable pack index (%s): its chunks cannot be found",
			 err == -EBADMSG ? "corrupt" : strerror(-err));
		store_pack_file_path(v->s, name, "idx", path, sizeof(path));
		report(v, path, why);
		void *nv = realloc(v->bad_packs, (v->nbad_packs + 1) * sizeof(*v->bad_packs));
		if (!nv)
			return -ENOMEM;
		v->bad_packs = nv;
		snprintf(v->bad_packs[v->nbad_packs++], PACK_NAME_LEN + 1, "%s", name);
		return 0;
	}
	store_pack_file_path(v->s, name, "pack", path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* removed by a gc since the listing */
		snprintf(why, sizeof(why), "unreadable pack: %s", strerror(errno));
		report(v, path, why);
		return 0;
	}
	if (v->quick) {
		ret = verify_pack_length(v, fd, path, e, n);
		close(fd);
		return ret;
	}
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = verify_pack_entry(v, fd, name, &e[i]);
	close(fd);
	return ret;
}

/* Whether a chunk the scan did not see was written since (a put runs beside
 * verify): in a pack that appeared since, or loose.  Not in a pack whose
 * index the scan found unusable. */
static bool found_since(struct verify *v, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct store_chunk_loc loc;
	char path[PATH_MAX];

	if (store_chunk_locate(v->s, hash, &loc) < 0)
		return false;
	if (loc.pack == STORE_LOOSE)
		return true;
	if (store_pack_path(v->s, loc.pack, path, sizeof(path)) < 0)
		return false;
	const char *base = strrchr(path, '/') + 1;
	for (size_t i = 0; i < v->nbad_packs; i++)
		if (!strncmp(base, v->bad_packs[i], PACK_NAME_LEN))
			return false;
	return true;
}

static int verify_manifest(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct verify *v = arg;
	struct manifest *m = NULL;
	char id[CHUNK_ID_LEN], mid[CHUNK_ID_LEN], why[700];
	int ret;

	if (!hash) {
		report(v, name, "not a manifest name");
		return 0;
	}
	chunk_id_format(hash, mid);
	ret = store_manifest_read(path, hash, &m);
	if (ret == -ENOENT)
		return 0;
	if (ret < 0) {
		snprintf(why, sizeof(why), "manifest unreadable: %s", log_last_error());
		report(v, mid, why);
		return 0;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		for (size_t j = 0; j < m->files[i].nchunks; j++) {
			const struct manifest_chunk *c = &m->files[i].chunks[j];
			if (c->zero || hash_set_has(&v->present, c->hash))
				continue;
			if (found_since(v, c->hash) || hash_set_add(&v->missing, c->hash) != 1)
				continue; /* written since the scan, or reported already */
			chunk_id_format(c->hash, id);
			snprintf(why, sizeof(why), "missing, needed by %.80s of manifest %s",
				 m->files[i].path, mid);
			report(v, id, why);
		}
	}
	manifest_free(m);
	/* Its binary form, what a load reads: a damaged one costs only the
	 * JSON's read (and is written anew), but it is a damaged file. */
	ret = store_manifest_bin_verify(v->s, hash, path);
	if (ret == -EBADMSG) {
		char bin[PATH_MAX];

		snprintf(why, sizeof(why),
			 "damaged binary form of manifest %s (%s): loads read its JSON, which is "
			 "sound, and write it anew",
			 mid, log_last_error());
		store_manifest_bin_path(v->s, hash, bin, sizeof(bin));
		report(v, bin, why);
	} else if (ret < 0) {
		snprintf(why, sizeof(why), "binary form of manifest %s unreadable: %s", mid,
			 strerror(-ret));
		report(v, mid, why);
	}
	return 0;
}

static int verify_run(struct store *s, bool quick,
		      void (*bad)(const char *chunk_id, const char *why, void *arg), void *arg)
{
	struct verify v = {.s = s, .bad = bad, .arg = arg, .quick = quick};
	int lock = -1, ret;

	hash_set_init(&v.present);
	hash_set_init(&v.missing);
	ret = store_check_buf_init(&v.cb);
	if (ret)
		goto out;
	/* Under the store lock: no gc rewrites a pack while it is read. */
	lock = store_lock(s, LOCK_SH);
	if (lock < 0) {
		ret = lock;
		goto out;
	}
	ret = store_foreach_chunk(s, verify_chunk, &v);
	if (ret == 0)
		ret = store_foreach_pack(s, verify_pack, &v);
	if (ret == 0)
		ret = store_foreach_manifest(s, verify_manifest, &v);
	if (ret == 0)
		ret = v.nbad;
out:
	if (lock >= 0)
		close(lock);
	hash_set_release(&v.present);
	hash_set_release(&v.missing);
	free(v.bad_packs);
	store_check_buf_release(&v.cb);
	return ret;
}

int store_verify(struct store *s, void (*bad)(const char *chunk_id, const char *why, void *arg),
		 void *arg)
{
	return verify_run(s, false, bad, arg);
}

int store_check(struct store *s, void (*bad)(const char *chunk_id, const char *why, void *arg),
		void *arg)
{
	return verify_run(s, true, bad, arg);
}
