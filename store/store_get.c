/* SPDX-License-Identifier: Apache-2.0 */
/* store_get.c — write a manifest's files out of the store.
 *
 * Every file is written to a temp name beside its final one (truncated to its
 * size first, so holes stay holes), chunk by chunk, fsynced; only when all of
 * them are complete are they renamed into place.  On any error every temp file
 * is removed, and every directory it made under outdir: a failed get leaves
 * no file behind.  The get holds a lease on
 * its manifest, so a concurrent gc keeps its chunks.
 */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct get_out {
	char final[PATH_MAX];
	char tmp[PATH_MAX];
};

/* The directories a get made, to be removed again if it fails. */
struct made_dirs {
	char **paths; /* parents before children */
	size_t n, cap;
};

/* mkdir_p(path), noting in md each directory of it below its first base
 * bytes (outdir, made already) that did not exist. */
static int mkdir_noted(const char *path, size_t base, struct made_dirs *md)
{
	char prefix[PATH_MAX];
	size_t len = strlen(path);
	struct stat st;

	if (len >= sizeof(prefix))
		return -ENAMETOOLONG;
	for (size_t i = base + 1; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		memcpy(prefix, path, i);
		prefix[i] = '\0';
		if (lstat(prefix, &st) == 0 || errno != ENOENT)
			continue;
		if (ARRAY_GROW(md->paths, md->cap, md->n + 1, 8))
			return -ENOMEM;
		md->paths[md->n] = strdup(prefix);
		if (!md->paths[md->n])
			return -ENOMEM;
		md->n++;
	}
	return mkdir_p(path, 0700);
}

/* Remove what mkdir_noted made (children first); with undo false, only
 * forget it. */
static void made_dirs_release(struct made_dirs *md, bool undo)
{
	for (size_t i = md->n; i-- > 0;) {
		if (undo)
			rmdir(md->paths[i]);
		free(md->paths[i]);
	}
	free(md->paths);
}

/* Chunk c could not be read (err): this thread's fault, as the engine's
 * (common/fault.h). */
static void chunk_fault(const struct manifest_chunk *c, int err)
{
	struct fault f = { .step = FAULT_MATERIALIZE, .err = err, .has_chunk = true };

	memcpy(f.chunk, c->hash, CHUNK_HASH_LEN);
	fault_note(&f);
}

static int get_file(struct store *s, struct chunk_codec *codec, const struct manifest_file *f,
		    struct get_out *o, uint8_t *obj, uint8_t *raw, struct progress *prog,
		    uint64_t *done)
{
	char id[CHUNK_ID_LEN];
	int fd = -1, ret = 0;

	fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, f->mode & 0777);
	if (fd < 0) {
		ret = -errno;
		pr_perror("cannot create %s", o->tmp);
		o->tmp[0] = '\0'; /* not ours to remove */
		return ret;
	}
	if (ftruncate(fd, (off_t)f->size) < 0) {
		ret = -errno;
		pr_perror("cannot size %s", o->tmp);
		goto out;
	}
	for (size_t i = 0; i < f->nchunks; i++) {
		const struct manifest_chunk *c = &f->chunks[i];
		size_t obj_len = 0;

		*done += c->len;
		if (c->zero)
			continue;
		chunk_id_format(c->hash, id);
		ret = store_read_chunk(s, c->hash, obj, chunk_encode_bound(CHUNK_MAX_RAW), &obj_len);
		if (ret == 0)
			ret = chunk_decode(codec, obj, obj_len, c->hash, raw, c->len);
		if (ret == -ENOENT)
			pr_err("chunk %s of %s at offset %llu is missing", id, f->path,
			       (unsigned long long)c->off);
		else if (ret == -EBADMSG)
			pr_err("chunk %s of %s at offset %llu is corrupt", id, f->path,
			       (unsigned long long)c->off);
		else if (ret < 0)
			pr_err("cannot read chunk %s of %s: %s", id, f->path, strerror(-ret));
		if (ret < 0) {
			chunk_fault(c, ret);
			goto out;
		}
		ret = pwrite_all(fd, raw, c->len, (off_t)c->off);
		if (ret < 0) {
			pr_err("cannot write %s: %s", o->tmp, strerror(-ret));
			goto out;
		}
		progress_update(prog, *done);
	}
	if (fsync(fd) < 0) {
		ret = -errno;
		pr_perror("fsync %s", o->tmp);
	}
out:
	if (close(fd) < 0 && ret == 0) {
		ret = -errno;
		pr_perror("close %s", o->tmp);
	}
	return ret;
}

int store_get(struct store *s, const char *id, const char *outdir, bool show_progress)
{
	struct manifest *m = NULL;
	struct store_lease *lease = NULL;
	char full[CHUNK_ID_LEN];
	struct manifest_totals t;
	struct chunk_codec *codec = NULL;
	struct get_out *outs = NULL;
	struct progress prog;
	uint8_t *obj = NULL, *raw = NULL;
	uint64_t done = 0;
	size_t made = 0;
	struct made_dirs dirs = { 0 };
	int ret;

	ret = store_manifest_load(s, id, &m, full);
	if (ret < 0)
		return ret;
	/* A gc meanwhile must not take the chunks from under us. */
	lease = store_lease_take(s, full);
	if (!lease) {
		ret = -EIO;
		goto out;
	}
	/* outdir itself stays: the caller named it. */
	ret = mkdir_p(outdir, 0700);
	if (ret < 0)
		goto out;
	codec = chunk_codec_new();
	obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW));
	raw = malloc(CHUNK_MAX_RAW);
	outs = calloc(m->nfiles ? m->nfiles : 1, sizeof(*outs));
	if (!codec || !obj || !raw || !outs) {
		pr_err("out of memory");
		ret = -ENOMEM;
		goto out;
	}
	manifest_totals(m, &t);
	progress_init(&prog, "get", t.logical_bytes);
	if (!show_progress)
		prog.enabled = false;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];
		struct get_out *o = &outs[i];
		const char *slash = strrchr(f->path, '/');

		if (snprintf(o->final, sizeof(o->final), "%s/%s", outdir, f->path) >=
		    (int)sizeof(o->final)) {
			pr_err("path too long: %s/%s", outdir, f->path);
			ret = -ENAMETOOLONG;
			goto out;
		}
		/* The manifest's paths are clean (manifest_parse), so they stay under outdir. */
		snprintf(o->tmp, sizeof(o->tmp), "%s/%.*s%s.%s.thaw-get-%d", outdir,
			 slash ? (int)(slash - f->path + 1) : 0, f->path, "",
			 slash ? slash + 1 : f->path, getpid());
		if (slash) {
			char dir[PATH_MAX];
			snprintf(dir, sizeof(dir), "%s/%.*s", outdir, (int)(slash - f->path),
				 f->path);
			ret = mkdir_noted(dir, strlen(outdir), &dirs);
			if (ret < 0)
				goto out;
		}
		ret = get_file(s, codec, f, o, obj, raw, &prog, &done);
		made = i + 1; /* its temp file exists even if it failed */
		if (ret < 0)
			goto out;
	}
	progress_done(&prog);
	for (size_t i = 0; i < m->nfiles; i++) {
		if (rename(outs[i].tmp, outs[i].final) < 0) {
			ret = -errno;
			pr_perror("cannot rename %s to %s", outs[i].tmp, outs[i].final);
			goto out;
		}
		outs[i].tmp[0] = '\0';
	}
	ret = fsync_dir(outdir);
out:
	if (ret < 0) {
		for (size_t i = 0; i < made; i++)
			if (outs[i].tmp[0])
				unlink(outs[i].tmp);
	}
	made_dirs_release(&dirs, ret < 0);
	free(outs);
	free(raw);
	free(obj);
	chunk_codec_free(codec);
	store_lease_release(lease);
	manifest_free(m);
	return ret;
}
