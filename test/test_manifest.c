/* SPDX-License-Identifier: Apache-2.0 */
/* test_manifest.c — canonical round trip, and each hostile manifest refused with its reason. */
#include "common/log.h"
#include "common/util.h"
#include "store/chunk.h"
#include "store/manifest.h"
#include "test/check.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID1 "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static const char *good =
    "{\"version\":1,\"name\":\"fn-a\",\"created\":\"2026-11-23T00:00:00Z\","
    "\"files\":[{\"path\":\"pages-1.img\",\"size\":73728,\"mode\":420,\"chunks\":["
    "{\"off\":0,\"len\":65536,\"id\":\"" ID1 "\",\"stored\":1234},"
    "{\"off\":65536,\"len\":8192,\"zero\":true}]},"
    "{\"path\":\"sub/dir/empty.img\",\"size\":0,\"mode\":384,\"chunks\":[]}],"
    "\"meta\":{\"criu\":\"4.2.1\",\"pids\":[1,2]}}";

/* good with FROM replaced by TO must be refused with a message mentioning WHY. */
static void bad(const char *from, const char *to, const char *why)
{
	char buf[4096];
	const char *p = strstr(good, from);
	struct manifest *m = (struct manifest *)1;

	REQUIRE(p);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(p - good), good, to, p + strlen(from));
	log_clear_error();
	int r = manifest_parse(buf, strlen(buf), &m);
	if (r != -EINVAL || m != NULL) {
		fprintf(stderr, "accepted: %s\n", buf);
		check_failures++;
		return;
	}
	if (!strstr(log_last_error(), why)) {
		fprintf(stderr, "replacing %s by %s: error \"%s\" does not mention \"%s\"\n", from,
			to, log_last_error(), why);
		check_failures++;
	}
}

/* What manifest_serialize() wrote before it built its text itself: a jansson
 * tree dumped compact with sorted keys.  Its bytes are the manifest id, so
 * the two must agree byte for byte. */
static char *serialize_with_jansson(const struct manifest *m)
{
	json_t *files = json_array(), *root;
	char *s;

	for (size_t i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];
		json_t *chunks = json_array();

		for (size_t j = 0; j < f->nchunks; j++) {
			const struct manifest_chunk *c = &f->chunks[j];
			char id[CHUNK_ID_LEN];

			chunk_id_format(c->hash, id);
			json_array_append_new(
			    chunks, c->zero ? json_pack("{s:I,s:I,s:b}", "off", (json_int_t)c->off,
							"len", (json_int_t)c->len, "zero", 1)
					    : json_pack("{s:I,s:I,s:s,s:I}", "off", (json_int_t)c->off,
							"len", (json_int_t)c->len, "id", id, "stored",
							(json_int_t)c->stored));
		}
		json_array_append_new(files, json_pack("{s:s,s:I,s:i,s:o}", "path", f->path, "size",
						       (json_int_t)f->size, "mode",
						       (int)(f->mode & 0777), "chunks", chunks));
	}
	root = json_pack("{s:i,s:s,s:s,s:o,s:O}", "version", MANIFEST_VERSION, "name", m->name,
			 "created", m->created, "files", files, "meta", m->meta);
	REQUIRE(root);
	s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return s;
}

/* Manifests with awkward strings, holes, large numbers and nested meta
 * serialise to exactly what jansson writes. */
static void test_same_bytes_as_jansson(void)
{
	static const char *const paths[] = {"pages-1.img", "a \"quoted\" name", "back\\slash",
					    "tab\tnewline\n", "ctl\x01\x1f", "caf\xc3\xa9/\xe2\x82\xac",
					    "slash/in/path"};
	struct manifest *m = manifest_new("n\"a\\m\u00e9");
	char *ours, *theirs;
	size_t len;

	REQUIRE(m);
	m->files = calloc(ARRAY_SIZE(paths), sizeof(*m->files));
	REQUIRE(m->files);
	m->nfiles = ARRAY_SIZE(paths);
	for (size_t i = 0; i < m->nfiles; i++) {
		struct manifest_file *f = &m->files[i];

		f->path = strdup(paths[i]);
		f->mode = 0600 + (unsigned)i;
		f->nchunks = i; /* the first file has none */
		f->chunks = calloc(i + 1, sizeof(*f->chunks));
		REQUIRE(f->path && f->chunks);
		for (size_t j = 0; j < i; j++) {
			struct manifest_chunk *c = &f->chunks[j];

			c->off = j ? (uint64_t)INT64_MAX - 100 + j : 0;
			c->len = 4096 * (j + 1);
			c->zero = (i + j) % 3 == 0;
			c->stored = c->zero ? 0 : UINT32_MAX - (uint32_t)j;
			for (int k = 0; k < CHUNK_HASH_LEN && !c->zero; k++)
				c->hash[k] = (uint8_t)(i * 31 + j * 7 + (size_t)k);
			f->size += c->len;
		}
	}
	json_object_set_new(m->meta, "zeta", json_pack("{s:i,s:[s,f]}", "b", 1, "a", "x\"y", 0.5));
	json_object_set_new(m->meta, "alpha", json_string("\xc3\xbc"));
	ours = manifest_serialize(m, &len);
	theirs = serialize_with_jansson(m);
	REQUIRE(ours && theirs);
	CHECK_EQ(len, strlen(theirs));
	CHECK_STR(ours, theirs);
	free(ours);
	free(theirs);

	/* A path that is not UTF-8 cannot be written, as before. */
	free(m->files[1].path);
	m->files[1].path = strdup("bad\xff");
	CHECK(manifest_serialize(m, &len) == NULL);
	manifest_free(m);
}

/* manifest_check, on a manifest built in memory as a put builds it (an empty
 * file's chunk list NULL), takes what the parser takes and refuses the
 * same faults; manifest_copy copies it. */
static void test_check_in_memory(void)
{
	struct manifest *m = manifest_new("fn"), *c;

	REQUIRE(m);
	m->files = calloc(2, sizeof(*m->files));
	REQUIRE(m->files);
	m->nfiles = 2;
	m->files[0].path = strdup("empty");
	m->files[1].path = strdup("dir/pages-1.img");
	m->files[1].chunks = calloc(2, sizeof(struct manifest_chunk));
	REQUIRE(m->files[0].path && m->files[1].path && m->files[1].chunks);
	m->files[1].nchunks = 2;
	m->files[1].size = 12288;
	m->files[1].chunks[0] = (struct manifest_chunk){.off = 0, .len = 8192, .stored = 100};
	m->files[1].chunks[1] = (struct manifest_chunk){.off = 8192, .len = 4096, .zero = true};
	CHECK(manifest_check(m) == 0);
	c = manifest_copy(m);
	REQUIRE(c);
	CHECK_EQ(c->nfiles, 2);
	CHECK_EQ(c->files[0].nchunks, 0);
	CHECK_EQ(c->files[1].chunks[1].len, 4096);
	manifest_free(c);

	m->files[1].chunks[1].off = 8193; /* a gap */
	CHECK(manifest_check(m) == -EINVAL);
	CHECK(strstr(log_last_error(), "out of order"));
	m->files[1].chunks[1].off = 8192;
	m->files[1].size = 12289; /* chunks fall short of the size */
	CHECK(manifest_check(m) == -EINVAL);
	m->files[1].size = 12288;
	free(m->files[0].path);
	m->files[0].path = strdup("a/../b");
	CHECK(manifest_check(m) == -EINVAL);
	CHECK(strstr(log_last_error(), "clean relative path"));
	free(m->files[0].path);
	m->files[0].path = strdup("dir/pages-1.img"); /* twice */
	CHECK(manifest_check(m) == -EINVAL);
	CHECK(strstr(log_last_error(), "twice"));
	free(m->files[0].path);
	m->files[0].path = strdup("dir"); /* a file and a directory */
	CHECK(manifest_check(m) == -EINVAL);
	manifest_free(m);
}

int main(void)
{
	test_same_bytes_as_jansson();
	test_check_in_memory();
	struct manifest *m = NULL, *m2 = NULL;
	struct manifest_totals t;
	char *s1, *s2;
	size_t l1, l2;

	log_set_level(LOG_ERR + 0);
	REQUIRE(manifest_parse(good, strlen(good), &m) == 0);
	CHECK_STR(m->name, "fn-a");
	CHECK_EQ(m->nfiles, 2);
	CHECK_STR(m->files[0].path, "pages-1.img");
	CHECK_EQ(m->files[0].nchunks, 2);
	CHECK(m->files[0].chunks[1].zero);
	CHECK_EQ(m->files[0].chunks[0].stored, 1234);
	CHECK_EQ(m->files[0].mode, 0644);
	manifest_totals(m, &t);
	CHECK_EQ(t.logical_bytes, 73728);
	CHECK_EQ(t.zero_bytes, 8192);
	CHECK_EQ(t.stored_bytes, 1234);
	CHECK_EQ(t.chunks, 1);

	/* Canonical: serialize, parse, serialize gives the same bytes. */
	s1 = manifest_serialize(m, &l1);
	REQUIRE(s1);
	REQUIRE(manifest_parse(s1, l1, &m2) == 0);
	s2 = manifest_serialize(m2, &l2);
	REQUIRE(s2);
	CHECK_EQ(l1, l2);
	CHECK_STR(s1, s2);
	CHECK(strstr(s1, "\"files\":[{\"chunks\":[{\"id\":") != NULL); /* sorted keys */
	CHECK(strchr(s1, ' ') == NULL || strstr(s1, "\": ") == NULL);  /* compact */
	free(s1);
	free(s2);
	manifest_free(m2);
	manifest_free(m);
	manifest_free(NULL);

	m = manifest_new("x");
	REQUIRE(m && m->meta && m->created && strlen(m->created) == 20);
	s1 = manifest_serialize(m, &l1);
	REQUIRE(s1);
	CHECK_EQ(manifest_parse(s1, l1, &m2), 0);
	manifest_free(m2);
	free(s1);
	manifest_free(m);

	bad("\"pages-1.img\"", "\"/pages-1.img\"", "path");
	bad("\"pages-1.img\"", "\"a/../pages-1.img\"", "path");
	bad("\"pages-1.img\"", "\"..\"", "path");
	bad("\"pages-1.img\"", "\"./pages-1.img\"", "path");
	bad("\"pages-1.img\"", "\"a//b\"", "path");
	bad("\"pages-1.img\"", "\"a/\"", "path");
	bad("\"pages-1.img\"", "\"\"", "path");
	bad("\"pages-1.img\"", "\"a\\u0000b\"", "JSON");
	bad("\"sub/dir/empty.img\"", "\"pages-1.img\"", "twice");
	bad("\"sub/dir/empty.img\"", "\"pages-1.img/x\"", "directory");
	bad("\"size\":73728", "\"size\":73729", "add up");
	bad("\"size\":73728", "\"size\":70000", "past");
	bad("\"size\":73728", "\"size\":-1", "range");
	bad("\"size\":73728", "\"size\":\"73728\"", "not an integer");
	bad("\"off\":65536", "\"off\":65535", "expected");
	bad("\"off\":65536", "\"off\":65537", "gap");
	bad("\"off\":0,", "\"off\":1,", "expected");
	bad("\"len\":8192", "\"len\":0", "len is 0");
	bad("\"len\":65536,", "\"len\":2000000,", "larger than a chunk");
	bad(ID1, "sha256:BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	    "bad chunk id");
	bad(ID1, "sha256:ba78", "bad chunk id");
	bad(ID1, "md5:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	    "bad chunk id");
	bad("\"stored\":1234", "\"stored\":\"1234\"", "not an integer");
	bad("\"stored\":1234", "\"stored\":3", "header");
	bad(",\"stored\":1234", "", "stored");
	bad("\"zero\":true", "\"zero\":1", "boolean");
	bad("\"version\":1", "\"version\":2", "version");
	bad("\"version\":1", "\"version\":\"1\"", "version");
	bad("\"name\":\"fn-a\"", "\"name\":7", "name");
	bad("\"name\":\"fn-a\"", "\"name\":\"fn-a\",\"name\":\"b\"", "JSON");
	bad("\"name\":\"fn-a\"", "\"name\":\"fn-a\",\"extra\":1", "unknown member");
	bad("\"mode\":420", "\"mode\":420.0", "mode");
	bad("\"meta\":{", "\"meta\":[{", "JSON"); /* unbalanced: not JSON at all */
	bad("\"meta\":{\"criu\":\"4.2.1\",\"pids\":[1,2]}", "\"meta\":[]", "meta");
	bad("{\"version\"", "[{\"version\"", "JSON");
	bad("\"chunks\":[]", "\"chunks\":null", "chunks");
	bad("{\"off\":65536,", "7,{\"off\":65536,", "not an object");

	const char *nofiles = "{\"version\":1,\"name\":\"a\",\"created\":\"x\",\"files\":{}}";
	CHECK_EQ(manifest_parse(nofiles, strlen(nofiles), &m), -EINVAL);
	CHECK(strstr(log_last_error(), "\"files\"") != NULL);
	int r = manifest_parse("{", 1, &m);
	CHECK_EQ(r, -EINVAL);
	CHECK(strstr(log_last_error(), "JSON") != NULL);
	return check_failures ? 1 : 0;
}
