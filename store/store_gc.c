/* store_gc.c — verify every object, and collect the garbage.
 *
 * gc holds the store lock exclusively, so no put is between writing its chunks
 * and its manifest, and no lease is half taken.  It marks the chunks of every
 * manifest and of every live lease (a lease is a hard link of its manifest, so
 * it still names the chunks of a deleted manifest), then deletes every chunk
 * not marked, the stale leases and all temp files.  A manifest that cannot be
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
#include <unistd.h>

struct gc {
	struct store *s;
	struct hash_set live;
	uint64_t freed_chunks, freed_bytes;
};

static int mark_manifest(struct gc *g, const struct manifest *m)
{
	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t j = 0; j < m->files[i].nchunks; j++)
			if (!m->files[i].chunks[j].zero &&
			    hash_set_add(&g->live, m->files[i].chunks[j].hash) < 0)
				return -ENOMEM;
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
	ret = mark_manifest(arg, m);
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
		ret = mark_manifest(g, m);
		manifest_free(m);
	}
	closedir(d);
	return ret;
}

static int gc_chunk(const uint8_t *hash, const char *path, const char *name, void *arg)
{
	struct gc *g = arg;
	struct stat sb;

	if (!hash || hash_set_has(&g->live, hash))
		return 0;
	if (lstat(path, &sb) == 0 && unlink(path) == 0) {
		g->freed_chunks++;
		g->freed_bytes += (uint64_t)sb.st_size;
	}
	return 0;
}

int store_gc(struct store *s, uint64_t *freed_chunks, uint64_t *freed_bytes)
{
	struct gc g = {.s = s};
	char tmp[PATH_MAX];
	int lock, ret;

	hash_set_init(&g.live);
	lock = store_lock(s, LOCK_EX);
	if (lock < 0)
		return lock;
	ret = store_foreach_manifest(s, gc_manifest, &g);
	if (ret == 0)
		ret = gc_leases(&g);
	if (ret == 0)
		ret = store_foreach_chunk(s, gc_chunk, &g);
	if (ret == 0) {
		/* No put runs while we hold the lock: every temp file is left over. */
		snprintf(tmp, sizeof(tmp), "%s/tmp", s->dir);
		rm_rf(tmp);
		ret = mkdir_p(tmp, 0755);
	}
	if (ret == 0) {
		pr_info("gc: freed %llu chunks, %llu bytes", (unsigned long long)g.freed_chunks,
			(unsigned long long)g.freed_bytes);
		if (freed_chunks)
			*freed_chunks = g.freed_chunks;
		if (freed_bytes)
			*freed_bytes = g.freed_bytes;
	}
	close(lock);
	hash_set_release(&g.live);
	return ret;
}

/* verify */

struct verify {
	struct store *s;
	struct chunk_codec *codec;
	uint8_t *obj, *raw;
	struct hash_set present, missing;
	void (*bad)(const char *chunk_id, const char *why, void *arg);
	void *arg;
	int nbad;
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
	size_t obj_len = 0;
	int ret;

	if (!hash) {
		report(v, name, "not a chunk object name");
		return 0;
	}
	chunk_id_format(hash, id);
	if (hash_set_add(&v->present, hash) < 0)
		return -ENOMEM;
	ret = store_read_object(path, v->obj, chunk_encode_bound(CHUNK_MAX_RAW), &obj_len);
	if (ret == -ENOENT)
		return 0; /* deleted by a gc meanwhile */
	if (ret == -EBADMSG) {
		report(v, id, "corrupt (larger than any chunk object)");
		return 0;
	}
	if (ret == 0) {
		long raw_len = store_object_raw_len(v->obj, obj_len);
		if (raw_len < 0) {
			report(v, id,
			       obj_len < CHUNK_HEADER_SIZE ? "corrupt (truncated header)"
							   : "corrupt (bad header)");
			return 0;
		}
		ret = chunk_decode(v->codec, v->obj, obj_len, hash, v->raw, (size_t)raw_len);
	}
	if (ret == -EBADMSG) {
		snprintf(why, sizeof(why), "corrupt (%s)", log_last_error());
		report(v, id, why);
	} else if (ret < 0) {
		snprintf(why, sizeof(why), "unreadable: %s", strerror(-ret));
		report(v, id, why);
	}
	return 0;
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
			char cpath[PATH_MAX];
			store_chunk_path(v->s, c->hash, cpath, sizeof(cpath));
			if (access(cpath, F_OK) == 0 || hash_set_add(&v->missing, c->hash) != 1)
				continue; /* written since the scan, or reported already */
			chunk_id_format(c->hash, id);
			snprintf(why, sizeof(why), "missing, needed by %.80s of manifest %s",
				 m->files[i].path, mid);
			report(v, id, why);
		}
	}
	manifest_free(m);
	return 0;
}

int store_verify(struct store *s, void (*bad)(const char *chunk_id, const char *why, void *arg),
		 void *arg)
{
	struct verify v = {.s = s, .bad = bad, .arg = arg};
	int ret;

	hash_set_init(&v.present);
	hash_set_init(&v.missing);
	v.codec = chunk_codec_new();
	v.obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW));
	v.raw = malloc(CHUNK_MAX_RAW);
	if (!v.codec || !v.obj || !v.raw) {
		pr_err("out of memory");
		ret = -ENOMEM;
		goto out;
	}
	ret = store_foreach_chunk(s, verify_chunk, &v);
	if (ret == 0)
		ret = store_foreach_manifest(s, verify_manifest, &v);
	if (ret == 0)
		ret = v.nbad;
out:
	hash_set_release(&v.present);
	hash_set_release(&v.missing);
	free(v.raw);
	free(v.obj);
	chunk_codec_free(v.codec);
	return ret;
}
