/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_corrupt.c — a flipped byte or a truncated object in any one chunk:
 * verify reports exactly that chunk, get fails naming it and leaves no file. */
#include "common/log.h"
#include "common/util.h"
#include "store/internal.h"
#include "test/check.h"
#include "test/store_damage.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-store-bad-XXXXXX";

struct seen {
	int n;
	char id[CHUNK_ID_LEN];
};

static void on_bad(const char *id, const char *why, void *arg)
{
	struct seen *s = arg;

	s->n++;
	snprintf(s->id, sizeof(s->id), "%s", id);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* verify names the one bad chunk id, and get fails naming it with want. */
static void expect_bad(struct store *s, const char *mid, const char *id, int get_err,
		       const char *want)
{
	char out[PATH_MAX];
	struct seen seen = {0};

	CHECK_EQ(store_verify(s, on_bad, &seen), 1);
	CHECK_EQ(seen.n, 1);
	CHECK_STR(seen.id, id);
	snprintf(out, sizeof(out), "%s/out", root);
	rm_rf(out);
	log_clear_error();
	CHECK_EQ(store_get(s, mid, out, false), get_err);
	if (!strstr(log_last_error(), id) || !strstr(log_last_error(), want)) {
		fprintf(stderr, "error \"%s\" does not name %s as %s\n", log_last_error(), id,
			want);
		check_failures++;
	}
	CHECK_EQ(count_entries(out), 0);
}

/* Damage chunk c of the manifest one way, check, then put it back. */
static void damage(struct store *s, const char *mid, const struct manifest_chunk *c,
		   const char *file, int how)
{
	char path[PATH_MAX], id[CHUNK_ID_LEN], want[256];
	char *orig = NULL;
	size_t len = 0;

	chunk_id_format(c->hash, id);
	store_chunk_path(s, c->hash, path, sizeof(path));
	REQUIRE(read_file(path, &orig, &len, 1 << 21) == 0);
	REQUIRE(chmod(path, 0644) == 0);
	if (how == 0) { /* flip one byte in the payload */
		int fd = open(path, O_WRONLY);
		char b = (char)(orig[len / 2 + 8] ^ 0x10);
		REQUIRE(fd >= 0 && pwrite(fd, &b, 1, (off_t)(len / 2 + 8)) == 1);
		close(fd);
	} else if (how == 1) { /* truncated object */
		REQUIRE(truncate(path, (off_t)len / 2) == 0);
	} else { /* truncated into its header */
		REQUIRE(truncate(path, 7) == 0);
	}
	snprintf(want, sizeof(want), "of %s at offset %llu is corrupt", file,
		 (unsigned long long)c->off);
	expect_bad(s, mid, id, -EBADMSG, want);

	/* Missing altogether: reported as missing, get fails naming it. */
	if (how == 0) {
		REQUIRE(unlink(path) == 0);
		expect_bad(s, mid, id, -ENOENT, "missing");
	}
	REQUIRE(write_file_atomic(path, orig, len, 0444) == 0);
	free(orig);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
}

/* The same damage to chunks in packs: a flipped byte in any of them, one
 * cut short with its pack, one missing from its pack's index, and a pack
 * index that is itself corrupt. */
static void test_packs(const char *const *paths)
{
	char dir[PATH_MAX], id[CHUNK_ID_LEN], mid[CHUNK_ID_LEN], path[PATH_MAX];
	struct manifest *m = NULL;
	off_t off;
	size_t len;

	snprintf(dir, sizeof(dir), "%s/packs-store", root);
	struct store *s = store_open(dir);
	REQUIRE(s);
	REQUIRE(store_put(s, "bad", paths, 2, NULL, false, mid, NULL) == 0);
	REQUIRE(store_manifest_load(s, mid, &m, NULL) == 0);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	for (size_t f = 0; f < 2; f++) {
		size_t n = m->files[f].nchunks;
		size_t picks[] = {0, n / 2, n - 1};
		for (size_t p = 0; p < 3; p++) {
			const struct manifest_chunk *c = &m->files[f].chunks[picks[p]];
			REQUIRE(chunk_where(s, c->hash, path, &off, &len));
			chunk_id_format(c->hash, id);
			chunk_flip(s, c->hash, len / 2);
			expect_bad(s, mid, id, -EBADMSG, "is corrupt");
			chunk_flip(s, c->hash, len / 2);
			CHECK_EQ(store_verify(s, NULL, NULL), 0);
		}
	}
	/* Cut short: the pack ends inside the last object of one of them. */
	const struct manifest_chunk *c = chunk_last_in_pack(s, &m->files[1]);
	chunk_id_format(c->hash, id);
	chunk_where(s, c->hash, path, &off, &len);
	chunk_cut(s, c->hash, len / 2);
	expect_bad(s, mid, id, -EBADMSG, "is corrupt");
	/* Missing from the index (the cut one back first: the same bytes put again). */
	const char *again[] = {paths[1]};
	REQUIRE(store_gc(s, NULL, NULL) == 0);
	chunk_remove(s, c->hash);
	chunk_id_format(c->hash, id);
	expect_bad(s, mid, id, -ENOENT, "missing");
	REQUIRE(store_put(s, "again", again, 1, NULL, false, id, NULL) == 0);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	/* A corrupt index: reported by its path; its chunks are then missing. */
	c = &m->files[0].chunks[0];
	chunk_where(s, c->hash, path, &off, &len);
	snprintf(path + strlen(path) - 5, 5, ".idx");
	REQUIRE(chmod(path, 0644) == 0);
	int fd = open(path, O_WRONLY);
	REQUIRE(fd >= 0 && pwrite(fd, "X", 1, 30) == 1);
	close(fd);
	REQUIRE(store_packs_refresh(s) == 0);
	struct seen seen = {0};
	CHECK(store_verify(s, on_bad, &seen) > 1);
	CHECK(strstr(log_last_error(), "missing") != NULL);
	manifest_free(m);
	store_close(s);
}

int main(void)
{
	char dir[PATH_MAX], a[PATH_MAX], b[PATH_MAX], mid[CHUNK_ID_LEN];
	const size_t size = 3u << 20;
	uint8_t *buf = malloc(size);
	struct manifest *m = NULL;
	uint64_t x = 12345;

	REQUIRE(buf && mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/store", root);
	struct store *s = store_open(dir);
	REQUIRE(s);
	/* Loose objects first (a file each, the layout before packs); then
	 * packs, in test_packs(). */
	store_set_layout(s, STORE_LAYOUT_LOOSE);
	/* Two files: one random (raw chunks), one compressible (zstd chunks). */
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
	const char *paths[] = {a, b};
	REQUIRE(store_put(s, "bad", paths, 2, NULL, false, mid, NULL) == 0);
	REQUIRE(store_manifest_load(s, mid, &m, NULL) == 0);
	REQUIRE(m->nfiles == 2 && m->files[0].nchunks > 3 && m->files[1].nchunks > 3);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);

	/* First, a middle and the last chunk of each file, each damage in turn. */
	for (size_t f = 0; f < 2; f++) {
		size_t n = m->files[f].nchunks;
		size_t picks[] = {0, n / 2, n - 1};
		for (size_t p = 0; p < 3; p++)
			for (int how = 0; how < 3; how++)
				damage(s, mid, &m->files[f].chunks[picks[p]], m->files[f].path,
				       how);
	}
	/* A chunk object cut into its header (an impossible size, as a power
	 * loss can leave): a put of the same bytes writes it anew over it,
	 * through a named temp in tmp/ and a rename, and leaves no temp. */
	{
		const struct manifest_chunk *c = &m->files[0].chunks[1];
		char cpath[PATH_MAX], tmpdir[PATH_MAX + 8], again[CHUNK_ID_LEN];

		store_chunk_path(s, c->hash, cpath, sizeof(cpath));
		REQUIRE(chmod(cpath, 0644) == 0 && truncate(cpath, 7) == 0);
		CHECK_EQ(store_verify(s, NULL, NULL), 1);
		REQUIRE(store_put(s, "again", paths, 2, NULL, false, again, NULL) == 0);
		CHECK_EQ(store_verify(s, NULL, NULL), 0);
		snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", dir);
		CHECK_EQ(count_entries(tmpdir), 0);
	}
	/* A damaged manifest is reported by its id. */
	char mpath[PATH_MAX];
	struct seen seen = {0};
	uint8_t mh[CHUNK_HASH_LEN];
	REQUIRE(chunk_id_parse(mid, mh) == 0);
	store_manifest_path(s, mh, mpath, sizeof(mpath));
	REQUIRE(chmod(mpath, 0644) == 0);
	REQUIRE(truncate(mpath, 100) == 0);
	CHECK_EQ(store_verify(s, on_bad, &seen), 1);
	CHECK_STR(seen.id, mid);
	CHECK(store_get(s, mid, dir, false) < 0);

	manifest_free(m);
	store_close(s);
	test_packs(paths);
	rm_rf(root);
	free(buf);
	return check_failures ? 1 : 0;
}
