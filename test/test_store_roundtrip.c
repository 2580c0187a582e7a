/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_roundtrip.c — put then get gives the same bytes, for every shape of
 * file: random, all zero, mixed, sparse, empty, sizes off 4 KiB, several files
 * in one put, a directory; holes are never stored. */
#include "common/log.h"
#include "common/util.h"
#include "store/chunker.h"
#include "store/store.h"
#include "test/check.h"

/* store/internal.h keeps 8 manifests parsed: list more than that. */
#define STORE_MANIFEST_CACHE_TEST_MIN 8

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-store-rt-XXXXXX";
static uint64_t rng = 88172645463325252ull;

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		p[i] = (uint8_t)rng;
	}
}

static void write_file(const char *path, const uint8_t *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
	REQUIRE(fd >= 0);
	REQUIRE(write_all(fd, data, len) == 0);
	close(fd);
}

static int same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t lx = 0, ly = 0;
	int same = read_file(a, &x, &lx, 1u << 30) == 0 && read_file(b, &y, &ly, 1u << 30) == 0 &&
		   lx == ly && !memcmp(x, y, lx);
	if (!same)
		fprintf(stderr, "%s and %s differ (%zu and %zu bytes)\n", a, b, lx, ly);
	free(x);
	free(y);
	return same;
}

/* Put one file, get it back, compare; returns the put stats. */
static struct store_put_stats roundtrip(struct store *s, const char *name, const char *path)
{
	const char *paths[] = {path};
	struct store_put_stats st = {0};
	char id[CHUNK_ID_LEN], out[PATH_MAX], back[2 * PATH_MAX];
	struct stat a, b;

	CHECK_EQ(store_put(s, name, paths, 1, NULL, false, id, &st), 0);
	snprintf(out, sizeof(out), "%s/out-%s", root, name);
	CHECK_EQ(store_get(s, id, out, false), 0);
	snprintf(back, sizeof(back), "%s/%s", out, strrchr(path, '/') + 1);
	CHECK(same_file(path, back));
	REQUIRE(stat(path, &a) == 0 && stat(back, &b) == 0);
	CHECK_EQ(b.st_mode & 0777, a.st_mode & 0777);
	/* Holes stay holes: the copy takes no more blocks than its data needs. */
	CHECK((uint64_t)b.st_blocks * 512 <= st.logical_bytes - st.zero_bytes + 4 * 4096);
	CHECK_EQ(st.logical_bytes, (uint64_t)a.st_size);
	return st;
}

int main(void)
{
	char dir[PATH_MAX], path[PATH_MAX], p2[PATH_MAX], id[CHUNK_ID_LEN], id2[CHUNK_ID_LEN];
	const size_t big = 24u << 20;
	uint8_t *buf = malloc(big);
	struct store_put_stats st;
	struct store_stats ss;
	struct store *s;

	REQUIRE(buf && mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/store", root);
	s = store_open(dir);
	REQUIRE(s);

	/* Random: all new, incompressible, nothing zero. */
	snprintf(path, sizeof(path), "%s/random.img", root);
	fill_random(buf, big);
	write_file(path, buf, big);
	st = roundtrip(s, "random", path);
	CHECK_EQ(st.zero_bytes, 0);
	CHECK_EQ(st.new_bytes, big);
	CHECK(st.new_stored >= big && st.new_stored < big + big / 100);
	CHECK(st.chunks >= big / CHUNKER_MAX && st.chunks <= big / CHUNKER_MIN);
	/* Its chunks are whole pages of a mapped file: stored bare, written from
	 * the mapping, no header (pack.h): exactly its bytes. */
	CHECK_EQ(st.new_stored, big);
	/* Again: every chunk is already there. */
	st = roundtrip(s, "random", path);
	CHECK_EQ(st.new_bytes, 0);
	CHECK_EQ(st.dup_bytes, big);

	/* All zero: one hole, nothing stored. */
	REQUIRE(store_stat(s, &ss) == 0);
	uint64_t chunks_before = ss.chunks, stored_before = ss.stored_bytes;
	snprintf(path, sizeof(path), "%s/zero.img", root);
	memset(buf, 0, big);
	write_file(path, buf, big);
	st = roundtrip(s, "zero", path);
	CHECK_EQ(st.zero_bytes, big);
	CHECK_EQ(st.chunks, 0);
	CHECK_EQ(st.new_stored, 0);
	REQUIRE(store_stat(s, &ss) == 0);
	CHECK_EQ(ss.chunks, chunks_before);
	CHECK_EQ(ss.stored_bytes, stored_before);
	CHECK(ss.zero_bytes >= big);

	/* Mixed: runs of random, zero and compressible data at odd 4 KiB multiples. */
	snprintf(path, sizeof(path), "%s/mixed.img", root);
	for (size_t off = 0, k = 0; off < big; k++) {
		size_t n = MIN(big - off, (size_t)(4096 * (1 + (k * 37) % 91)));
		if (k % 3 == 0)
			fill_random(buf + off, n);
		else if (k % 3 == 1)
			memset(buf + off, 0, n);
		else
			for (size_t i = 0; i < n; i++)
				buf[off + i] = (uint8_t)(i / 64);
		off += n;
	}
	write_file(path, buf, big);
	st = roundtrip(s, "mixed", path);
	CHECK(st.zero_bytes > big / 4);
	CHECK(st.new_stored < st.new_bytes); /* the compressible runs were compressed */

	/* Sparse: holes made with ftruncate and lseek, data here and there. */
	snprintf(path, sizeof(path), "%s/sparse.img", root);
	{
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		REQUIRE(fd >= 0);
		REQUIRE(ftruncate(fd, 100 << 20) == 0);
		fill_random(buf, 1 << 20);
		REQUIRE(pwrite_all(fd, buf, 12345, 7 << 20) == 0);
		REQUIRE(pwrite_all(fd, buf, 1 << 20, 50 << 20) == 0);
		REQUIRE(lseek(fd, (100 << 20) - 10, SEEK_SET) >= 0);
		REQUIRE(write_all(fd, "tail bytes", 10) == 0);
		close(fd);
	}
	st = roundtrip(s, "sparse", path);
	CHECK(st.zero_bytes >= (100u << 20) - (2u << 20) - 3 * 4096);
	CHECK(st.new_bytes <= (2u << 20));

	/* Empty and awkward sizes. */
	static const size_t sizes[] = {0,     1,     4095,   4096,   4097,   16383,
				       16385, 65537, 262143, 262145, 1048577};
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		char name[32];
		snprintf(name, sizeof(name), "size-%zu", sizes[i]);
		snprintf(path, sizeof(path), "%s/%s", root, name);
		fill_random(buf, sizes[i]);
		write_file(path, buf, sizes[i]);
		st = roundtrip(s, name, path);
		CHECK_EQ(st.logical_bytes, sizes[i]);
	}
	/* A tail of zeros shorter than a block is a hole too, and still the right size. */
	snprintf(path, sizeof(path), "%s/zerotail.img", root);
	fill_random(buf, 8192);
	memset(buf + 8192, 0, 100);
	write_file(path, buf, 8292);
	st = roundtrip(s, "zerotail", path);
	CHECK_EQ(st.zero_bytes, 100);

	/* Several files and a directory in one put. */
	snprintf(dir, sizeof(dir), "%s/tree/a/b", root);
	REQUIRE(mkdir_p(dir, 0755) == 0);
	fill_random(buf, 300000);
	snprintf(path, sizeof(path), "%s/tree/a/b/deep.img", root);
	write_file(path, buf, 300000);
	snprintf(path, sizeof(path), "%s/tree/top.img", root);
	write_file(path, buf + 1000, 5000);
	snprintf(path, sizeof(path), "%s/tree/a/empty", root);
	write_file(path, buf, 0);
	snprintf(path, sizeof(path), "%s/tree", root);
	snprintf(p2, sizeof(p2), "%s/random.img", root);
	const char *paths[] = {path, p2};
	CHECK_EQ(store_put(s, "tree", paths, 2, NULL, false, id, NULL), 0);
	snprintf(dir, sizeof(dir), "%s/out-tree", root);
	CHECK_EQ(store_get(s, id, dir, false), 0);
	const char *rels[] = {"a/b/deep.img", "top.img", "a/empty", "random.img"};
	for (size_t i = 0; i < ARRAY_SIZE(rels); i++) {
		char x[2 * PATH_MAX], y[2 * PATH_MAX];
		snprintf(x, sizeof(x), "%s/%s/%s", root, i == 3 ? "" : "tree", rels[i]);
		snprintf(y, sizeof(y), "%s/%s", dir, rels[i]);
		CHECK(same_file(x, y));
	}
	/* A prefix of the id loads the same manifest; the full id comes back. */
	struct manifest *m = NULL;
	char prefix[20];
	snprintf(prefix, sizeof(prefix), "%.19s", id);
	CHECK_EQ(store_manifest_load(s, prefix, &m, id2), 0);
	CHECK_STR(id2, id);
	CHECK(m && m->nfiles == 4);
	manifest_free(m);
	CHECK_EQ(store_manifest_load(s, "sha256:0123", &m, NULL), -EINVAL);
	CHECK_EQ(store_manifest_load(
		     s, "sha256:0000000000000000000000000000000000000000000000000000000000000000",
		     &m, NULL),
		 -ENOENT);

	/* Two inputs that would share a name are refused. */
	const char *dup[] = {p2, p2};
	log_clear_error();
	CHECK_EQ(store_put(s, "dup", dup, 2, NULL, false, id, NULL), -EINVAL);
	CHECK(strstr(log_last_error(), "both") != NULL);
	const char *missing[] = {"/nonexistent/file"};
	CHECK(store_put(s, "missing", missing, 1, NULL, false, id, NULL) == -ENOENT);

	/* The list knows them all; stat adds up. */
	json_t *list = NULL;
	CHECK_EQ(store_list(s, &list), 0);
	REQUIRE(store_stat(s, &ss) == 0);
	CHECK_EQ(json_array_size(list), ss.manifests);
	CHECK(ss.manifests >= 15); /* same content in the same second: same manifest */
	CHECK(ss.unique_bytes < ss.logical_bytes);
	json_decref(list);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);

	/* A manifest loaded again comes from the store's cache: an equal copy the
	 * caller owns; once deleted, it is gone from the cache too.  The put
	 * left it there, so not even the first load reads the file. */
	struct manifest *m1 = NULL, *m2 = NULL;
	const char *fresh[] = {path};
	char id3[CHUNK_ID_LEN];
	REQUIRE(store_put(s, "fresh", fresh, 1, NULL, false, id3, NULL) == 0);
	uint64_t reads = store_manifest_reads(s);
	REQUIRE(store_manifest_load(s, id3, &m1, NULL) == 0);
	CHECK_EQ(store_manifest_reads(s), reads);
	manifest_free(m1);
	/* A lease (a hard link of the manifest: its ctime changes) taken and
	 * released, as every materialisation does, keeps the parsed copy. */
	struct store_lease *lease = store_lease_take(s, id3);
	REQUIRE(lease != NULL);
	store_lease_release(lease);
	REQUIRE(store_manifest_load(s, id3, &m1, NULL) == 0);
	CHECK_EQ(store_manifest_reads(s), reads);
	manifest_free(m1);
	REQUIRE(store_manifest_load(s, id2, &m1, NULL) == 0);
	REQUIRE(store_manifest_load(s, id2, &m2, NULL) == 0);
	CHECK(m1 != m2 && m1->nfiles == m2->nfiles && m1->files != m2->files);
	for (size_t i = 0; i < m1->nfiles && i < m2->nfiles; i++) {
		CHECK_STR(m1->files[i].path, m2->files[i].path);
		CHECK_EQ(m1->files[i].nchunks, m2->files[i].nchunks);
		CHECK(!memcmp(m1->files[i].chunks, m2->files[i].chunks,
			      m1->files[i].nchunks * sizeof(*m1->files[i].chunks)));
	}
	CHECK(json_equal(m1->meta, m2->meta) && m1->meta != m2->meta);
	json_object_set_new(m1->meta, "changed", json_true()); /* a copy: the cache's is unchanged */
	manifest_free(m1);
	REQUIRE(store_manifest_load(s, id2, &m1, NULL) == 0);
	CHECK(json_object_get(m1->meta, "changed") == NULL);
	manifest_free(m1);
	manifest_free(m2);
	/* Every manifest loaded, twice, under three byte budgets: each load is
	 * still the manifest asked for, whatever was evicted meanwhile.  The
	 * default budget keeps them all (more than the 8 an earlier cache held):
	 * the second round reads no file.  A budget of one byte keeps none: every
	 * load reads.  A budget of about two keeps the last used. */
	REQUIRE(store_list(s, &list) == 0);
	size_t nman = json_array_size(list);
	REQUIRE(nman > STORE_MANIFEST_CACHE_TEST_MIN);
	const uint64_t budgets[] = {STORE_MANIFEST_CACHE_BYTES, 1, 0};
	for (size_t b = 0; b < ARRAY_SIZE(budgets); b++) {
		uint64_t budget = budgets[b];
		uint64_t before_round2 = 0;

		if (!budget) { /* room for the largest two and a half */
			for (size_t i = 0; i < nman; i++) {
				REQUIRE(store_manifest_load(s, json_string_value(json_object_get(
						json_array_get(list, i), "id")), &m1, NULL) == 0);
				budget = MAX(budget, (uint64_t)manifest_mem_bytes(m1) * 5 / 2);
				manifest_free(m1);
			}
		}
		store_set_manifest_cache_bytes(s, budget);
		for (int round = 0; round < 2; round++) {
			if (round == 1)
				before_round2 = store_manifest_reads(s);
			for (size_t i = 0; i < nman; i++) {
				const char *mid = json_string_value(
				    json_object_get(json_array_get(list, i), "id"));
				char got[CHUNK_ID_LEN];
				REQUIRE(mid && store_manifest_load(s, mid, &m1, got) == 0);
				CHECK_STR(got, mid);
				CHECK_EQ(m1->nfiles, json_integer_value(json_object_get(
							 json_array_get(list, i), "files")));
				manifest_free(m1);
			}
		}
		uint64_t round2 = store_manifest_reads(s) - before_round2;
		printf("manifest cache, budget %llu bytes: %llu of %zu loads read the file\n",
		       (unsigned long long)budget, (unsigned long long)round2, nman);
		if (b == 0)
			CHECK_EQ(round2, 0);
		else if (b == 1)
			CHECK_EQ(round2, nman);
		else {
			/* In order, each evicts the oldest: loads read again... */
			CHECK(round2 > 0);
			/* ...but the last one loaded is kept. */
			uint64_t r = store_manifest_reads(s);
			REQUIRE(store_manifest_load(s, json_string_value(json_object_get(
					json_array_get(list, nman - 1), "id")), &m1, NULL) == 0);
			manifest_free(m1);
			CHECK_EQ(store_manifest_reads(s), r);
		}
	}
	store_set_manifest_cache_bytes(s, STORE_MANIFEST_CACHE_BYTES);
	json_decref(list);
	/* Another store object on the same directory (a restarted thawd) has
	 * nothing cached: its first load reads the file, its second does not. */
	struct store *s2 = store_open(store_path(s));
	REQUIRE(s2 != NULL);
	REQUIRE(store_manifest_load(s2, id2, &m1, NULL) == 0);
	manifest_free(m1);
	CHECK_EQ(store_manifest_reads(s2), 1);
	REQUIRE(store_manifest_load(s2, id2, &m1, NULL) == 0);
	manifest_free(m1);
	CHECK_EQ(store_manifest_reads(s2), 1);
	store_close(s2);

	CHECK_EQ(store_manifest_delete(s, id2), 0);
	CHECK_EQ(store_manifest_load(s, id2, &m1, NULL), -ENOENT);

	store_close(s);
	rm_rf(root);
	free(buf);
	return check_failures ? 1 : 0;
}
