/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_drop.c — a chunk a restore found damaged leaves the store's
 * index (store_chunk_drop_damaged), so that a put of the same bytes writes
 * it anew instead of deduplicating against the damaged copy:
 * - a sound chunk is kept (0), a chunk nowhere is -ENOENT;
 * - a flipped byte in a packed chunk (raw, zstd): dropped (1), no longer
 *   found, in this store object and in a new one (its pack's index file was
 *   rewritten), while the pack's other chunks still are;
 * - the same bytes put again are written anew (counted as new), the first
 *   manifest reads back whole, verify finds nothing wrong, nor after a gc;
 * - a damaged loose object is removed;
 * - store_heal of a snapshot with two damaged chunks in one pack, and a
 *   damaged chunk of another snapshot in that pack: all three dropped, the
 *   very list store_verify gives; its old index file read again does not
 *   bring them back into this store object's index; a put of the same bytes
 *   writes all three anew and both snapshots read back whole.
 */
#include "common/log.h"
#include "common/util.h"
#include "store/internal.h"
#include "test/check.h"
#include "test/store_damage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-store-drop-XXXXXX";

static bool same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	bool same;

	REQUIRE(read_file(a, &x, &nx, 1 << 26) == 0 && read_file(b, &y, &ny, 1 << 26) == 0);
	same = nx == ny && !memcmp(x, y, nx);
	free(x);
	free(y);
	return same;
}

static void test_packs(const char *const *paths)
{
	char dir[PATH_MAX], mid[CHUNK_ID_LEN], again[CHUNK_ID_LEN], out[PATH_MAX + 8],
	    want[2 * PATH_MAX + 16];
	struct store_put_stats st = { 0 };
	struct store_chunk_loc loc;
	struct manifest *m = NULL;
	const struct manifest_chunk *bad[2];
	uint64_t freed = 0;
	struct store *s, *s2;

	snprintf(dir, sizeof(dir), "%s/packs", root);
	s = store_open(dir);
	REQUIRE(s);
	REQUIRE(store_put(s, "f", paths, 2, NULL, false, mid, NULL) == 0);
	REQUIRE(store_manifest_load(s, mid, &m, NULL) == 0);
	REQUIRE(m->files[0].nchunks > 2 && m->files[1].nchunks > 2);
	bad[0] = &m->files[0].chunks[1]; /* random bytes: a raw chunk */
	bad[1] = &m->files[1].chunks[1]; /* compressible: a zstd chunk */

	CASE("a sound chunk is kept");
	CHECK_EQ(store_chunk_drop_damaged(s, m->files[0].chunks[0].hash), 0);
	CHECK_EQ(store_chunk_locate(s, m->files[0].chunks[0].hash, &loc), 0);
	CASE("a chunk nowhere");
	{
		uint8_t none[CHUNK_HASH_LEN] = { 1, 2, 3 };

		CHECK_EQ(store_chunk_drop_damaged(s, none), -ENOENT);
	}
	for (int i = 0; i < 2; i++) {
		char path[PATH_MAX];
		off_t off;
		size_t len;

		CASE("file %d: a flipped byte", i);
		chunk_where(s, bad[i]->hash, path, &off, &len);
		chunk_flip(s, bad[i]->hash, len / 2);
		CHECK_EQ(store_chunk_drop_damaged(s, bad[i]->hash), 1);
		CHECK_EQ(store_chunk_locate(s, bad[i]->hash, &loc), -ENOENT);
		CHECK_EQ(store_chunk_drop_damaged(s, bad[i]->hash), -ENOENT);
	}
	CASE("the others stay, the dropped stay out for a new store object");
	for (size_t f = 0; f < 2; f++)
		for (size_t k = 0; k < m->files[f].nchunks; k++)
			if (k != 1)
				CHECK_EQ(store_chunk_locate(s, m->files[f].chunks[k].hash, &loc), 0);
	s2 = store_open(dir);
	REQUIRE(s2);
	CHECK_EQ(store_chunk_locate(s2, bad[0]->hash, &loc), -ENOENT);
	CHECK_EQ(store_chunk_locate(s2, bad[1]->hash, &loc), -ENOENT);
	CHECK_EQ(store_chunk_locate(s2, m->files[1].chunks[0].hash, &loc), 0);
	store_close(s2);

	CASE("put again: written anew");
	REQUIRE(store_put(s, "again", paths, 2, NULL, false, again, &st) == 0);
	CHECK_EQ(st.new_bytes, bad[0]->len + bad[1]->len);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	snprintf(out, sizeof(out), "%s/out", root);
	CHECK_EQ(store_get(s, mid, out, false), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(want, sizeof(want), "%s/%s", out, m->files[i].path);
		CHECK(same_file(paths[i], want));
	}
	rm_rf(out);
	CASE("gc keeps everything a manifest names");
	CHECK_EQ(store_gc(s, NULL, &freed), 0);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	CHECK_EQ(store_get(s, mid, out, false), 0);
	rm_rf(out);
	CASE_END();
	manifest_free(m);
	store_close(s);
}

static void test_loose(const char *const *paths)
{
	char dir[PATH_MAX], mid[CHUNK_ID_LEN], path[PATH_MAX];
	struct store_put_stats st = { 0 };
	struct store_chunk_loc loc;
	struct manifest *m = NULL;
	struct store *s;
	off_t off;
	size_t len;

	snprintf(dir, sizeof(dir), "%s/loose", root);
	s = store_open(dir);
	REQUIRE(s);
	store_set_layout(s, STORE_LAYOUT_LOOSE);
	REQUIRE(store_put(s, "f", paths, 1, NULL, false, mid, NULL) == 0);
	REQUIRE(store_manifest_load(s, mid, &m, NULL) == 0);
	const struct manifest_chunk *c = &m->files[0].chunks[1];
	REQUIRE(!chunk_where(s, c->hash, path, &off, &len));
	chunk_flip(s, c->hash, len / 2);
	CHECK_EQ(store_chunk_drop_damaged(s, c->hash), 1);
	CHECK(access(path, F_OK) < 0);
	CHECK_EQ(store_chunk_locate(s, c->hash, &loc), -ENOENT);
	REQUIRE(store_put(s, "again", paths, 1, NULL, false, mid, &st) == 0);
	CHECK_EQ(st.new_bytes, c->len);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	manifest_free(m);
	store_close(s);
}

struct ids {
	char v[8][CHUNK_ID_LEN];
	int n;
};

static void note_id(const char *id, const char *why, void *arg)
{
	struct ids *l = arg;

	if (l->n < 8)
		snprintf(l->v[l->n++], CHUNK_ID_LEN, "%s", id);
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Whether l holds exactly the ids of the n hashes h. */
static bool same_ids(struct ids *l, const uint8_t *const *h, int n)
{
	struct ids w = { .n = n };

	for (int i = 0; i < n; i++)
		chunk_id_format(h[i], w.v[i]);
	qsort(w.v, (size_t)n, CHUNK_ID_LEN, cmp_id);
	qsort(l->v, (size_t)l->n, CHUNK_ID_LEN, cmp_id);
	return l->n == n && !memcmp(l->v, w.v, (size_t)n * CHUNK_ID_LEN);
}

/* A chunk of f (not a hole) in the pack at path, other than skip; NULL if none. */
static const struct manifest_chunk *in_pack(struct store *s, const struct manifest_file *f,
					    const char *path, const struct manifest_chunk *skip)
{
	char p[PATH_MAX];
	off_t off;
	size_t len;

	for (size_t k = 0; k < f->nchunks; k++)
		if (!f->chunks[k].zero && &f->chunks[k] != skip &&
		    chunk_where(s, f->chunks[k].hash, p, &off, &len) && !strcmp(p, path))
			return &f->chunks[k];
	return NULL;
}

static void test_heal(const char *const *paths)
{
	char dir[PATH_MAX], all[CHUNK_ID_LEN], mid[CHUNK_ID_LEN], again[CHUNK_ID_LEN];
	char path[PATH_MAX], idx[PATH_MAX], out[PATH_MAX + 8], want[2 * PATH_MAX + 16];
	struct store_put_stats st = { 0 };
	struct store_chunk_loc loc;
	struct manifest *m = NULL, *x = NULL;
	const struct manifest_chunk *bad[3];
	struct ids verified = { 0 }, healed = { 0 };
	char *old_idx = NULL;
	size_t old_len = 0;
	off_t off;
	size_t len;
	struct store *s, *s2;

	snprintf(dir, sizeof(dir), "%s/heal", root);
	s = store_open(dir);
	REQUIRE(s);
	/* x holds both files, m one: the pack of m's chunks holds x's too.
	 * With a worker a CPU, which pack a chunk lands in is the threads'
	 * timing (under load one worker took a whole file, and no pack held
	 * chunks of both): one worker, one pack. */
	store_set_put_workers(s, 1);
	REQUIRE(store_put(s, "all", paths, 2, NULL, false, all, NULL) == 0);
	REQUIRE(store_put(s, "snap", paths, 1, NULL, false, mid, NULL) == 0);
	REQUIRE(store_manifest_load(s, all, &x, NULL) == 0);
	REQUIRE(store_manifest_load(s, mid, &m, NULL) == 0);
	bad[0] = &m->files[0].chunks[1];
	REQUIRE(chunk_where(s, bad[0]->hash, path, &off, &len));
	bad[1] = in_pack(s, &m->files[0], path, bad[0]);
	bad[2] = in_pack(s, &x->files[1], path, NULL);
	REQUIRE(bad[1] && bad[2]);
	snprintf(idx, sizeof(idx), "%.*s.idx", (int)(strlen(path) - 5), path);
	REQUIRE(read_file(idx, &old_idx, &old_len, 1 << 30) == 0);
	for (int i = 0; i < 3; i++) {
		chunk_where(s, bad[i]->hash, path, &off, &len);
		chunk_flip(s, bad[i]->hash, len / 2);
	}
	const uint8_t *h[3] = { bad[0]->hash, bad[1]->hash, bad[2]->hash };

	CASE("heal: three damaged in one pack, two of them the snapshot's");
	CHECK_EQ(store_verify(s, note_id, &verified), 3);
	CHECK(same_ids(&verified, h, 3));
	CHECK_EQ(store_heal(s, mid, note_id, &healed), 3);
	CHECK(same_ids(&healed, h, 3));
	for (int i = 0; i < 3; i++)
		CHECK_EQ(store_chunk_locate(s, h[i], &loc), -ENOENT);
	s2 = store_open(dir);
	REQUIRE(s2);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(store_chunk_locate(s2, h[i], &loc), -ENOENT);
	store_close(s2);
	CHECK_EQ(store_heal(s, mid, NULL, NULL), 2); /* missing now: nothing more to drop */

	CASE("heal: the old index read again does not bring them back");
	REQUIRE(chmod(idx, 0644) == 0);
	REQUIRE(write_file_atomic(idx, old_idx, old_len, 0444) == 0);
	store_packs_reload(s);
	REQUIRE(store_packs_refresh(s) == 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(store_chunk_locate(s, h[i], &loc), -ENOENT);
	for (size_t k = 0; k < m->files[0].nchunks; k++)
		if (&m->files[0].chunks[k] != bad[0] && &m->files[0].chunks[k] != bad[1])
			CHECK_EQ(store_chunk_locate(s, m->files[0].chunks[k].hash, &loc), 0);

	CASE("heal: put again writes all three anew");
	REQUIRE(store_put(s, "again", paths, 2, NULL, false, again, &st) == 0);
	CHECK_EQ(st.new_bytes, bad[0]->len + bad[1]->len + bad[2]->len);
	snprintf(out, sizeof(out), "%s/out", root);
	CHECK_EQ(store_get(s, all, out, false), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(want, sizeof(want), "%s/%s", out, x->files[i].path);
		CHECK(same_file(paths[i], want));
	}
	rm_rf(out);
	CHECK_EQ(store_get(s, mid, out, false), 0);
	rm_rf(out);
	CASE_END();
	free(old_idx);
	manifest_free(m);
	manifest_free(x);
	store_close(s);
}

int main(void)
{
	char a[PATH_MAX], b[PATH_MAX];
	const size_t size = 2u << 20;
	uint8_t *buf = malloc(size);
	uint64_t x = 777;

	log_set_level(LOG_ERR);
	REQUIRE(buf && mkdtemp(root));
	for (size_t i = 0; i < size; i++) {
		x = x * 6364136223846793005ull + 1;
		buf[i] = (uint8_t)(x >> 56);
	}
	snprintf(a, sizeof(a), "%s/pages-1.img", root);
	REQUIRE(write_file_atomic(a, buf, size, 0644) == 0);
	for (size_t i = 0; i < size; i++)
		buf[i] = (uint8_t)((i * 7) / 4096 + (i % 13 == 0 ? buf[i] : 0));
	snprintf(b, sizeof(b), "%s/pages-2.img", root);
	REQUIRE(write_file_atomic(b, buf, size, 0644) == 0);
	free(buf);
	const char *paths[] = { a, b };

	test_packs(paths);
	test_loose(paths);
	test_heal(paths);
	rm_rf(root);
	return check_failures ? 1 : 0;
}
