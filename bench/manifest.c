/* SPDX-License-Identifier: Apache-2.0 */
/* manifest.c — loading a large image's manifest: the JSON against its binary form, in one run.
 *
 *	bench/manifest [--gb N] [--files N] [--runs N] [--dir DIR]
 *
 * Builds the manifest of a synthetic image of N GB (default 17.2, the 8B
 * function's image on the H100) shaped like the store's own: chunks of 16 KiB
 * to 256 KiB in 4 KiB steps averaging 64 KiB (chunker.h), 5% of them holes, a
 * third of the rest zstd-sized, spread over --files image files (default
 * 40), random hashes; writes it into a store in DIR (default /var/tmp) as a
 * put would, and times, best of --runs (default 5):
 *	- the JSON load (the baseline: what every load did before the binary
 *	  form): read, SHA-256 against its name, parse and check;
 *	- the first load of a store object that finds no binary form: the JSON,
 *	  and the binary written for the next;
 *	- store_manifest_load from the binary form (a fresh store object each
 *	  time, so no parsed copy is kept), page cache warm, and cold (the binary's
 *	  pages dropped first: read from the disk);
 *	- store_manifest_load again on the same store object (its copy of the
 *	  parsed manifest);
 * and prints a table: ms, and the JSON's time over each.
 */
#define LOG_PREFIX "bench: "
#include "common/log.h"
#include "common/util.h"
#include "store/internal.h"
#include "store/manifest.h"
#include "store/store.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* A chunk's length the way the chunker cuts: 16 KiB, then each further 4 KiB
 * block ends it with probability 1/12, at most 256 KiB. */
static uint64_t chunk_len(void)
{
	uint64_t len = 16 << 10;

	while (len < (256 << 10) && next() % 12)
		len += 4096;
	return len;
}

static struct manifest *make_manifest(uint64_t bytes, size_t nfiles)
{
	struct manifest *m = manifest_new("bench-manifest");

	if (!m || !(m->files = calloc(nfiles, sizeof(*m->files))))
		return NULL;
	json_object_set_new(m->meta, "criu", json_string("4.2"));
	json_object_set_new(m->meta, "driver", json_string("580.159.04"));
	for (size_t i = 0; i < nfiles; i++, m->nfiles++) {
		struct manifest_file *f = &m->files[i];
		uint64_t size = bytes / nfiles, off = 0;
		size_t cap = size / (32 << 10) + 16;
		char path[64];

		snprintf(path, sizeof(path), "pages-%zu.img", i + 1);
		f->path = strdup(path);
		f->mode = 0600;
		f->chunks = calloc(cap, sizeof(*f->chunks));
		if (!f->path || !f->chunks)
			return NULL;
		while (off < size && f->nchunks < cap) {
			struct manifest_chunk *c = &f->chunks[f->nchunks++];
			uint64_t r = next();

			c->off = off;
			c->len = MIN(chunk_len(), size - off);
			if (r % 100 < 5 && f->nchunks > 1 && !f->chunks[f->nchunks - 2].zero) {
				c->zero = true;
			} else {
				for (int k = 0; k < CHUNK_HASH_LEN; k += 8) {
					uint64_t h = next();
					memcpy(c->hash + k, &h, 8);
				}
				c->stored = (uint32_t)(r % 3 == 0 ? CHUNK_HEADER_SIZE + c->len / 4
								  : CHUNK_HEADER_SIZE + c->len);
			}
			off += c->len;
		}
		f->size = off;
	}
	return m;
}

static void drop_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

enum { R_JSON, R_FIRST, R_BIN, R_BIN_COLD, R_CACHED, NROWS };
static const char *const row_names[NROWS] = {
	"JSON: read, SHA-256, parse and check (the baseline)",
	"first load, no binary form: the JSON, the binary written",
	"store_manifest_load from the binary form, page cache warm",
	"store_manifest_load from the binary form, its pages dropped",
	"store_manifest_load again, same store object (parsed copy)",
};

int main(int argc, char **argv)
{
	double gb = 17.2, best[NROWS];
	unsigned runs = 5;
	size_t nfiles = 40;
	char base[PATH_MAX - 128] = "/var/tmp", dir[PATH_MAX], json[PATH_MAX], bin[PATH_MAX];
	char id[CHUNK_ID_LEN], a[32], b[32], c[32];
	uint8_t hash[CHUNK_HASH_LEN];
	struct manifest_totals t;
	struct stat st;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--gb") && v)
			gb = atof(argv[++i]);
		else if (!strcmp(argv[i], "--files") && v)
			nfiles = (size_t)atol(argv[++i]);
		else if (!strcmp(argv[i], "--runs") && v)
			runs = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && v)
			snprintf(base, sizeof(base), "%s", argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--gb N] [--files N] [--runs N] [--dir DIR]\n",
				argv[0]);
			return 2;
		}
	}
	if (gb <= 0 || !nfiles || !runs) {
		fprintf(stderr, "bad sizes\n");
		return 2;
	}
	struct manifest *m = make_manifest((uint64_t)(gb * 1e9), nfiles);
	size_t len;
	char *text = m ? manifest_serialize(m, &len) : NULL;
	if (!text) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	manifest_totals(m, &t);
	chunk_hash(text, len, hash);
	chunk_id_format(hash, id);
	snprintf(dir, sizeof(dir), "%s/thaw-bench-manifest-%d", base, getpid());
	struct store *s = store_open(dir);
	if (!s)
		return 1;
	store_manifest_path(s, hash, json, sizeof(json));
	store_manifest_bin_path(s, hash, bin, sizeof(bin));
	if (write_file_atomic(json, text, len, 0444)) {
		fprintf(stderr, "cannot write %s\n", json);
		return 1;
	}
	size_t entries = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		entries += m->files[i].nchunks;
	printf("manifest of %s of image in %zu files: %llu chunks and %llu holes, %s of JSON\n",
	       fmt_bytes(t.logical_bytes, a), m->nfiles, (unsigned long long)t.chunks,
	       (unsigned long long)(entries - t.chunks), fmt_bytes(len, b));
	free(text);
	for (int i = 0; i < NROWS; i++)
		best[i] = 1e30;
	for (unsigned r = 0; r < runs; r++) {
		struct manifest *x = NULL;
		struct store *f;
		uint64_t t0;
		double ms;

		/* The baseline: the JSON, as every load read it. */
		t0 = now_ns();
		if (store_manifest_read(json, hash, &x)) {
			fprintf(stderr, "JSON load failed: %s\n", log_last_error());
			return 1;
		}
		best[R_JSON] = MIN(best[R_JSON], ms_since(t0));
		manifest_free(x);

		/* No binary form yet: the JSON, and the binary written. */
		unlink(bin);
		f = store_open(dir);
		t0 = now_ns();
		if (!f || store_manifest_load(f, id, &x, NULL) || store_manifest_json_reads(f) != 1)
			return 1;
		best[R_FIRST] = MIN(best[R_FIRST], ms_since(t0));
		manifest_free(x);
		store_close(f);

		for (int cold = 0; cold < 2; cold++) {
			if (cold)
				drop_file(bin);
			f = store_open(dir);
			t0 = now_ns();
			if (!f || store_manifest_load(f, id, &x, NULL) ||
			    store_manifest_json_reads(f) != 0) {
				fprintf(stderr, "the binary form was not used\n");
				return 1;
			}
			ms = ms_since(t0);
			best[cold ? R_BIN_COLD : R_BIN] = MIN(best[cold ? R_BIN_COLD : R_BIN], ms);
			manifest_free(x);
			x = NULL;
			if (cold) {
				t0 = now_ns();
				if (store_manifest_load(f, id, &x, NULL))
					return 1;
				best[R_CACHED] = MIN(best[R_CACHED], ms_since(t0));
				manifest_free(x);
				x = NULL;
			}
			store_close(f);
		}
	}
	if (stat(bin, &st))
		return 1;
	printf("binary form: %s; best of %u runs\n\n", fmt_bytes((uint64_t)st.st_size, c), runs);
	printf("| load | ms | JSON ms / this |\n|---|---:|---:|\n");
	for (int i = 0; i < NROWS; i++)
		printf("| %s | %.1f | %.1f |\n", row_names[i], best[i], best[R_JSON] / best[i]);
	manifest_free(m);
	rm_rf(dir);
	return 0;
}
