/* SPDX-License-Identifier: Apache-2.0 */
/* engine_naive.c — the baseline: one thread, chunk after chunk, read, decode
 * and check, write.  What a straightforward restore would do; the benchmark
 * measures the io_uring engine against it in the same run. */
#define LOG_PREFIX "engine: "
#include "restore/engine.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_chunk(struct store *s, const struct manifest_chunk *c, uint8_t *buf, size_t cap,
		      size_t *len)
{
	return store_read_chunk(s, c->hash, buf, cap, len);
}

/* The engine's contract: a chunk that failed is this thread's fault. */
static void chunk_fault(const struct manifest_chunk *c, int err)
{
	struct fault f = { .step = FAULT_MATERIALIZE, .err = err, .has_chunk = true };

	memcpy(f.chunk, c->hash, CHUNK_HASH_LEN);
	fault_note(&f);
}

int engine_materialize_naive(struct store *s, const struct manifest *m, const char *outdir,
			     const struct engine_opts *o, struct engine_stats *stp)
{
	struct engine_stats st = { 0 };
	struct chunk_codec *codec = chunk_codec_new();
	size_t cap = CHUNK_HEADER_SIZE + CHUNK_MAX_RAW + 1; /* +1: a longer object shows */
	uint8_t *obj = malloc(cap), *raw = malloc(CHUNK_MAX_RAW);
	int *fds = calloc(MAX(m->nfiles, (size_t)1), sizeof(*fds));
	uint64_t start = now_ns(), last = 0;
	char id[CHUNK_ID_LEN];
	int ret = -ENOMEM;

	if (!codec || !obj || !raw || !fds)
		goto out;
	ret = engine_create_files(m, outdir, fds);
	if (ret) {
		free(fds);
		fds = NULL;
		goto out;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];

		st.logical_bytes += f->size;
		for (size_t j = 0; j < f->nchunks; j++) {
			const struct manifest_chunk *c = &f->chunks[j];
			size_t len = 0;

			if (o && o->cancel && atomic_load(o->cancel)) {
				pr_err("cancelled");
				ret = -ECANCELED;
				goto out;
			}
			if (c->zero) {
				st.holes++;
				st.hole_bytes += c->len;
				continue;
			}
			st.chunks++;
			chunk_id_format(c->hash, id);
			if (c->len > CHUNK_MAX_RAW) {
				pr_err("chunk %s (%s): %llu bytes, more than a chunk holds", id, f->path,
				       (unsigned long long)c->len);
				ret = -EINVAL;
				goto out;
			}
			ret = read_chunk(s, c, obj, cap, &len);
			if (ret) {
				pr_err("chunk %s (%s at offset %llu): %s", id, f->path,
				       (unsigned long long)c->off,
				       ret == -ENOENT ? "missing from the store" : strerror(-ret));
				chunk_fault(c, ret);
				goto out;
			}
			st.read_bytes += len;
			ret = chunk_decode(codec, obj, len, c->hash, raw, c->len);
			if (ret) {
				const char *why = log_last_error();
				/* chunk_decode's words start with the id: say it once. */
				if (!strncmp(why, "chunk ", 6) && !strncmp(why + 6, id, CHUNK_ID_LEN - 1))
					why += 6 + CHUNK_ID_LEN - 1 + 2;
				pr_err("chunk %s (%s at offset %llu): %s", id, f->path,
				       (unsigned long long)c->off, why);
				chunk_fault(c, ret);
				goto out;
			}
			ret = pwrite_all(fds[i], raw, c->len, (off_t)c->off);
			if (ret) {
				pr_err("chunk %s (%s at offset %llu): cannot write it: %s", id,
				       f->path, (unsigned long long)c->off, strerror(-ret));
				chunk_fault(c, ret);
				goto out;
			}
			st.written_bytes += c->len;
			if (o && o->progress && now_ns() - last > 50000000ull) {
				last = now_ns();
				o->progress(st.hole_bytes + st.written_bytes, 0, o->progress_arg);
			}
		}
	}
	st.files = m->nfiles;
	st.unique_chunks = st.chunks;
	st.threads = 1;
	ret = 0;
	for (size_t i = 0; i < m->nfiles; i++) {
		if (close(fds[i]) < 0 && !ret) {
			ret = -errno;
			pr_perror("close %s/%s", outdir, m->files[i].path);
		}
		fds[i] = -1;
	}
out:
	if (fds)
		for (size_t i = 0; i < m->nfiles; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	free(fds);
	free(obj);
	free(raw);
	chunk_codec_free(codec);
	st.seconds = (double)(now_ns() - start) / 1e9;
	if (stp)
		*stp = st;
	return ret;
}
