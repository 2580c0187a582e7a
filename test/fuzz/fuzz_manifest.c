/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_manifest.c — manifest_parse() on arbitrary bytes.
 *
 * Whatever the input, the parser must not crash, leak or read past len (the
 * input is not NUL-terminated).  When it accepts the input, the manifest must
 * survive serialize → parse → serialize unchanged (same bytes, same fields),
 * and its totals must add up: every file's chunks cover its size exactly.
 *
 * The parser logs every refusal with pr_err; thousands of lines a second would
 * drown the run, so stderr is closed for the target (libFuzzer's
 * -close_fd_mask=2 keeps its own and the sanitizers' reports) unless THAW_LOG
 * is set.
 */
#include "store/manifest.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1u << 20)

#define FUZZ_NAME "fuzz_manifest"
#include "test/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_quiet_stderr(argc, argv);
}

static void check_same(const struct manifest *a, const struct manifest *b)
{
	FUZZ_ASSERT(!strcmp(a->name, b->name));
	FUZZ_ASSERT(!strcmp(a->created, b->created));
	FUZZ_ASSERT(a->nfiles == b->nfiles);
	FUZZ_ASSERT(a->meta && b->meta && json_is_object(a->meta));
	FUZZ_ASSERT(json_equal(a->meta, b->meta));
	for (size_t i = 0; i < a->nfiles; i++) {
		const struct manifest_file *fa = &a->files[i], *fb = &b->files[i];

		FUZZ_ASSERT(!strcmp(fa->path, fb->path));
		FUZZ_ASSERT(fa->size == fb->size);
		FUZZ_ASSERT(fa->mode == fb->mode);
		FUZZ_ASSERT(fa->nchunks == fb->nchunks);
		for (size_t j = 0; j < fa->nchunks; j++) {
			const struct manifest_chunk *ca = &fa->chunks[j], *cb = &fb->chunks[j];

			FUZZ_ASSERT(ca->off == cb->off && ca->len == cb->len);
			FUZZ_ASSERT(ca->zero == cb->zero);
			if (!ca->zero) {
				FUZZ_ASSERT(ca->stored == cb->stored);
				FUZZ_ASSERT(!memcmp(ca->hash, cb->hash, CHUNK_HASH_LEN));
			}
		}
	}
}

/* Relative, and no "", "." or ".." component. */
static int path_ok(const char *p)
{
	if (!p || !*p || *p == '/')
		return 0;
	while (*p) {
		size_t n = strcspn(p, "/");

		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/' && !*++p)
			return 0; /* a trailing slash: an empty last component */
	}
	return 1;
}

/* What the header promises of an accepted manifest, and the totals recomputed. */
static void check_totals(const struct manifest *m)
{
	struct manifest_totals t;
	uint64_t logical = 0, zero = 0, stored = 0, chunks = 0;

	for (size_t i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];
		uint64_t off = 0;

		FUZZ_ASSERT(path_ok(f->path));
		FUZZ_ASSERT((f->mode & ~0777u) == 0);
		for (size_t j = 0; j < i && m->nfiles < 1000; j++)
			FUZZ_ASSERT(strcmp(f->path, m->files[j].path));
		for (size_t j = 0; j < f->nchunks; j++) {
			const struct manifest_chunk *c = &f->chunks[j];

			FUZZ_ASSERT(c->off == off);
			if (c->zero) {
				zero += c->len;
			} else {
				FUZZ_ASSERT(c->len <= CHUNK_MAX_RAW);
				stored += c->stored;
				chunks++;
			}
			off += c->len;
		}
		FUZZ_ASSERT(off == f->size);
		logical += f->size;
	}
	manifest_totals(m, &t);
	FUZZ_ASSERT(t.logical_bytes == logical);
	FUZZ_ASSERT(t.zero_bytes == zero);
	FUZZ_ASSERT(t.stored_bytes == stored);
	FUZZ_ASSERT(t.chunks == chunks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest *m = NULL, *m2 = NULL, *m3 = NULL;
	char *s1 = NULL, *s2 = NULL;
	size_t l1 = 0, l2 = 0;
	int ret;

	if (size > FUZZ_MAX_INPUT)
		return 0;
	ret = manifest_parse((const char *)data, size, &m);
	if (ret < 0) {
		FUZZ_ASSERT(ret == -EINVAL || ret == -ENOMEM);
		return 0;
	}
	FUZZ_ASSERT(m);
	check_totals(m);

	s1 = manifest_serialize(m, &l1);
	FUZZ_ASSERT(s1);
	FUZZ_ASSERT(strlen(s1) == l1);
	FUZZ_ASSERT(manifest_parse(s1, l1, &m2) == 0);
	check_same(m, m2);
	check_totals(m2);
	s2 = manifest_serialize(m2, &l2);
	FUZZ_ASSERT(s2);
	FUZZ_ASSERT(l1 == l2 && !memcmp(s1, s2, l1));

	/* One byte short is never a valid manifest: the JSON is cut. */
	if (l1 > 1) {
		ret = manifest_parse(s1, l1 - 1, &m3);
		FUZZ_ASSERT(ret == -EINVAL);
	}

	manifest_free(m3);
	free(s2);
	free(s1);
	manifest_free(m2);
	manifest_free(m);
	return 0;
}
