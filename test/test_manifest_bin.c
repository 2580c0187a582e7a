/* SPDX-License-Identifier: Apache-2.0 */
/* test_manifest_bin.c — the binary form of a manifest: it round-trips to the
 * same manifest (the same JSON, so the same id); a put writes it and a load
 * reads it, not the JSON; a damaged, truncated, other-version or mismatched
 * one is refused and the load falls back to the JSON (and writes it anew);
 * a store with only JSON manifests still loads; delete and gc remove it. */
#include "common/log.h"
#include "common/util.h"
#include "store/internal.h"
#include "store/manifest.h"
#include "store/store.h"
#include "test/check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-manifest-bin-XXXXXX";

static const char *good =
	"{\"version\":1,\"name\":\"fn-a\",\"created\":\"2026-11-23T00:00:00Z\","
	"\"files\":[{\"path\":\"pages-1.img\",\"size\":73728,\"mode\":420,\"chunks\":["
	"{\"off\":0,\"len\":65536,\"id\":\"sha256:"
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"stored\":1234},"
	"{\"off\":65536,\"len\":8192,\"zero\":true}]},"
	"{\"path\":\"sub/x.img\",\"size\":0,\"mode\":384,\"chunks\":[]}],"
	"\"meta\":{\"criu\":\"4.2\",\"pids\":[1,2],\"t\":0.25,\"s\":\"\\u00e9\"}}";

static const struct manifest_bin_source src0 = {73728, 42, 1234567890123456789ull};

/* Whether a and b serialise to the same JSON. */
static bool same_json(const struct manifest *a, const struct manifest *b)
{
	size_t la, lb;
	char *ja = manifest_serialize(a, &la), *jb = manifest_serialize(b, &lb);
	bool same = ja && jb && la == lb && !memcmp(ja, jb, la);

	free(ja);
	free(jb);
	return same;
}

/* Re-checksum a binary after editing its body. */
static void reseal(uint8_t *buf, size_t len)
{
	chunk_hash(buf, len - CHUNK_HASH_LEN, buf + len - CHUNK_HASH_LEN);
}

static void test_codec(void)
{
	struct manifest *m = NULL, *b = NULL;
	uint8_t hash[CHUNK_HASH_LEN], other[CHUNK_HASH_LEN];
	struct manifest_bin_source src = src0;
	uint8_t *buf, *copy;
	size_t len;

	REQUIRE(manifest_parse(good, strlen(good), &m) == 0);
	chunk_hash(good, strlen(good), hash);
	buf = manifest_bin_encode(m, hash, &src, &len);
	REQUIRE(buf);
	CHECK_EQ(len, MANIFEST_BIN_HEADER + 2 * MANIFEST_BIN_FILE + 2 * MANIFEST_BIN_CHUNK +
			      strlen("fn-a") + strlen("2026-11-23T00:00:00Z") +
			      strlen("{\"criu\":\"4.2\",\"pids\":[1,2],\"s\":\"\xc3\xa9\",\"t\":0.25}") +
			      strlen("pages-1.img") + strlen("sub/x.img") + 5 + CHUNK_HASH_LEN);

	/* Round trip: the same manifest, field by field and as JSON. */
	REQUIRE(manifest_bin_decode(buf, len, hash, &src, &b) == 0);
	CHECK(same_json(m, b));
	CHECK_STR(b->name, "fn-a");
	CHECK_EQ(b->nfiles, 2);
	CHECK_EQ(b->files[0].nchunks, 2);
	CHECK_EQ(b->files[0].chunks[1].off, 65536);
	CHECK(b->files[0].chunks[1].zero);
	CHECK_EQ(b->files[0].chunks[0].stored, 1234);
	CHECK_EQ(b->files[1].mode, 0600);
	CHECK_EQ(b->files[1].nchunks, 0);
	manifest_free(b);
	b = NULL;

	/* Every truncation is refused, none trusted. */
	for (size_t n = 0; n < len; n++) {
		CHECK_EQ(manifest_bin_decode(buf, n, hash, &src, &b), -EBADMSG);
		CHECK(b == NULL);
	}
	/* Every single flipped byte: damaged (checksum), or stale where it is
	 * the version; never accepted. */
	copy = malloc(len);
	REQUIRE(copy);
	for (size_t i = 0; i < len; i++) {
		memcpy(copy, buf, len);
		copy[i] ^= 0x20;
		int r = manifest_bin_decode(copy, len, hash, &src, &b);
		CHECK(r == -EBADMSG || (r == -ESTALE && i >= 4 && i < 8));
		CHECK(b == NULL);
	}
	/* Another version, even sealed: stale. */
	memcpy(copy, buf, len);
	copy[4] = 2;
	reseal(copy, len);
	CHECK_EQ(manifest_bin_decode(copy, len, hash, &src, &b), -ESTALE);
	/* Sealed but saying what the JSON parser would refuse: damaged. */
	memcpy(copy, buf, len);
	memcpy(copy + MANIFEST_BIN_HEADER + 2 * MANIFEST_BIN_FILE + 40, "\1\0\0\0", 4); /* stored: 1 */
	reseal(copy, len);
	CHECK_EQ(manifest_bin_decode(copy, len, hash, &src, &b), -EBADMSG);
	memcpy(copy, buf, len);
	copy[MANIFEST_BIN_HEADER] ^= 1; /* a file size its chunks do not add up to */
	reseal(copy, len);
	CHECK_EQ(manifest_bin_decode(copy, len, hash, &src, &b), -EBADMSG);
	memcpy(copy, buf, len);
	memcpy(copy + len - CHUNK_HASH_LEN - strlen("sub/x.img") - 1, "../x.img", 8);
	reseal(copy, len);
	CHECK_EQ(manifest_bin_decode(copy, len, hash, &src, &b), -EBADMSG);
	free(copy);

	/* Another manifest, another file of it: stale. */
	memcpy(other, hash, sizeof(other));
	other[31] ^= 1;
	CHECK_EQ(manifest_bin_decode(buf, len, other, &src, &b), -ESTALE);
	src.mtime_ns++;
	CHECK_EQ(manifest_bin_decode(buf, len, hash, &src, &b), -ESTALE);
	src = src0;
	src.ino++;
	CHECK_EQ(manifest_bin_decode(buf, len, hash, &src, &b), -ESTALE);
	src = src0;
	src.size--;
	CHECK_EQ(manifest_bin_decode(buf, len, hash, &src, &b), -ESTALE);
	CHECK(b == NULL);
	free(buf);
	manifest_free(m);
}

static void make_file(const char *path, size_t size, uint64_t seed)
{
	uint8_t *b = calloc(1, size);

	REQUIRE(b);
	for (size_t i = 0; i < size / 2; i++) { /* the second half a hole */
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (uint8_t)(seed >> 56);
	}
	REQUIRE(write_file_atomic(path, b, size, 0644) == 0);
	free(b);
}

/* A load by a fresh store object: its result, and whether it read the JSON. */
static int load_fresh(const char *dir, const char *id, struct manifest **m, bool *json)
{
	struct store *s = store_open(dir);
	int r;

	REQUIRE(s);
	r = store_manifest_load(s, id, m, NULL);
	*json = store_manifest_json_reads(s) > 0;
	store_close(s);
	return r;
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Damage the binary at path with how, then load: refused, loaded from the
 * JSON, and written anew so that the next load reads it. */
static void check_fallback(const char *dir, const char *id, const char *bin,
			   const struct manifest *want, const char *how)
{
	struct manifest *m = NULL;
	bool json;
	uint8_t *b;
	char *buf = NULL;
	size_t len;

	REQUIRE(read_file(bin, &buf, &len, 1 << 30) == 0);
	b = (uint8_t *)buf;
	if (!strcmp(how, "flip")) {
		b[len / 2] ^= 0x40;
	} else if (!strcmp(how, "truncate")) {
		len -= 7;
	} else if (!strcmp(how, "version")) {
		b[4] = 9;
		reseal(b, len);
	} else if (!strcmp(how, "mismatch")) {
		b[8] ^= 1; /* another manifest's, sealed */
		reseal(b, len);
	} else if (!strcmp(how, "empty")) {
		len = 0;
	}
	REQUIRE(unlink(bin) == 0);
	REQUIRE(write_file_atomic(bin, buf, len, 0444) == 0);
	free(buf);
	CHECK_EQ(load_fresh(dir, id, &m, &json), 0);
	if (!json)
		fprintf(stderr, "a %s binary was used\n", how);
	CHECK(json);
	CHECK(m && same_json(m, want));
	manifest_free(m);
	m = NULL;
	CHECK(exists(bin));
	CHECK_EQ(load_fresh(dir, id, &m, &json), 0);
	CHECK(!json);
	CHECK(m && same_json(m, want));
	manifest_free(m);
}

static void test_store(void)
{
	char dir[PATH_MAX], in[PATH_MAX], f1[PATH_MAX], bin[PATH_MAX], json[PATH_MAX];
	char id[CHUNK_ID_LEN], id2[CHUNK_ID_LEN];
	uint8_t hash[CHUNK_HASH_LEN];
	struct manifest *want = NULL, *m = NULL;
	bool from_json;

	snprintf(dir, sizeof(dir), "%s/store", root);
	snprintf(in, sizeof(in), "%s/in", root);
	snprintf(f1, sizeof(f1), "%s/in/pages-1.img", root);
	REQUIRE(mkdir_p(in, 0755) == 0);
	make_file(f1, 3 << 20, 7);

	struct store *s = store_open(dir);
	const char *paths[] = {in};
	REQUIRE(s);
	REQUIRE(store_put(s, "bin", paths, 1, NULL, false, id, NULL) == 0);
	store_close(s);
	REQUIRE(chunk_id_parse(id, hash) == 0);
	s = store_open(dir);
	REQUIRE(s);
	store_manifest_path(s, hash, json, sizeof(json));
	store_manifest_bin_path(s, hash, bin, sizeof(bin));
	store_close(s);

	/* The put wrote it: a load reads it, not the JSON. */
	CHECK(exists(bin));
	REQUIRE(load_fresh(dir, id, &want, &from_json) == 0);
	CHECK(!from_json);
	{
		size_t len;
		char *j = manifest_serialize(want, &len);
		uint8_t h[CHUNK_HASH_LEN];

		REQUIRE(j);
		chunk_hash(j, len, h);
		CHECK(!memcmp(h, hash, CHUNK_HASH_LEN)); /* the very manifest its name says */
		free(j);
	}

	/* Each damage: refused, the JSON read, the binary written anew. */
	static const char *const hows[] = {"flip", "truncate", "version", "mismatch", "empty"};
	for (size_t i = 0; i < sizeof(hows) / sizeof(hows[0]); i++) {
		CASE("damage: %s", hows[i]);
		check_fallback(dir, id, bin, want, hows[i]);
	}
	CASE_END();

	/* The JSON changed (a write into it): the binary is not trusted, and a
	 * damaged JSON fails the load as before. */
	{
		char *buf = NULL;
		size_t len;

		REQUIRE(read_file(json, &buf, &len, 1 << 30) == 0);
		REQUIRE(chmod(json, 0644) == 0);
		buf[len / 2] ^= 1;
		int fd = open(json, O_WRONLY);
		REQUIRE(fd >= 0 && pwrite(fd, buf, len, 0) == (ssize_t)len);
		close(fd);
		CHECK_EQ(load_fresh(dir, id, &m, &from_json), -EBADMSG);
		CHECK(m == NULL);
		buf[len / 2] ^= 1;
		fd = open(json, O_WRONLY);
		REQUIRE(fd >= 0 && pwrite(fd, buf, len, 0) == (ssize_t)len);
		close(fd);
		free(buf);
		CHECK_EQ(load_fresh(dir, id, &m, &from_json), 0);
		CHECK(from_json);
		manifest_free(m);
		m = NULL;
	}

	/* A store with only the JSON (written before binaries): loads, and
	 * gets its binary. */
	REQUIRE(unlink(bin) == 0);
	CHECK_EQ(load_fresh(dir, id, &m, &from_json), 0);
	CHECK(from_json && m && same_json(m, want));
	manifest_free(m);
	m = NULL;
	CHECK(exists(bin));

	/* Without its JSON, no binary is used. */
	REQUIRE(rename(json, f1) == 0);
	CHECK_EQ(load_fresh(dir, id, &m, &from_json), -ENOENT);
	REQUIRE(rename(f1, json) == 0);

	/* Delete removes it; gc removes one left behind. */
	make_file(f1, 2 << 20, 8);
	s = store_open(dir);
	REQUIRE(s);
	REQUIRE(store_put(s, "bin2", paths, 1, NULL, false, id2, NULL) == 0);
	CHECK_EQ(store_manifest_delete(s, id), 0);
	CHECK(!exists(bin));
	{
		char stray[PATH_MAX + 32], keep[PATH_MAX];
		uint8_t h2[CHUNK_HASH_LEN];

		REQUIRE(chunk_id_parse(id2, h2) == 0);
		store_manifest_bin_path(s, h2, keep, sizeof(keep));
		CHECK(exists(keep));
		REQUIRE(write_file_atomic(bin, "x", 1, 0644) == 0); /* a crash between the two unlinks */
		snprintf(stray, sizeof(stray), "%s/" STORE_MANIFEST_BIN_DIR "/junk", dir);
		REQUIRE(write_file_atomic(stray, "x", 1, 0644) == 0);
		CHECK_EQ(store_gc(s, NULL, NULL), 0);
		CHECK(!exists(bin));
		CHECK(!exists(stray));
		CHECK(exists(keep));
	}
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	store_close(s);
	manifest_free(want);
}

int main(void)
{
	REQUIRE(mkdtemp(root));
	test_codec();
	test_store();
	rm_rf(root);
	return check_failures ? 1 : 0;
}
