/* SPDX-License-Identifier: Apache-2.0 */
/* test_engine.c — the io_uring engine writes exactly what was stored: random,
 * zero, sparse, mixed, duplicated, empty and nested files, modes kept, holes
 * kept; the same bytes as store_get and as the naive engine; in O_DIRECT and
 * buffered mode, with a tiny arena and queue as with the defaults; a corrupt
 * or missing chunk fails naming the chunk and the file; a cancel stops it;
 * beside another writer, a chunk the store lacks is left to it; a file with a
 * writer is written only through it. */
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "store/store.h"
#include "test/check.h"
#include "test/store_damage.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rnd() >> 24);
}

static void fill_text(uint8_t *p, size_t n)
{
	static const char *w[] = { "alpha ", "bravo ", "charlie ", "delta\n", "echo " };
	size_t i = 0;

	while (i < n) {
		const char *s = w[rnd() % 5];
		for (; *s && i < n; s++)
			p[i++] = (uint8_t)*s;
	}
}

static void write_file(const char *dir, const char *name, const uint8_t *buf, size_t len,
		       mode_t mode)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	REQUIRE(write_all(fd, buf, len) == 0);
	REQUIRE(fchmod(fd, mode) == 0);
	close(fd);
}

/* A sparse file: islands of data in a sea of never-written bytes. */
static void write_sparse(const char *dir, const char *name, size_t size, mode_t mode)
{
	char path[PATH_MAX + 64];
	uint8_t buf[65536];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, (off_t)size) == 0);
	for (size_t off = 256 << 10; off + sizeof(buf) < size; off += 1 << 20) {
		fill_random(buf, sizeof(buf));
		REQUIRE(pwrite_all(fd, buf, sizeof(buf), (off_t)off) == 0);
	}
	REQUIRE(fchmod(fd, mode) == 0);
	close(fd);
}

static void make_source(const char *src)
{
	size_t n = 5 << 20;
	uint8_t *buf = malloc(n);

	REQUIRE(buf);
	REQUIRE(mkdir_p(src, 0755) == 0);
	fill_random(buf, (3 << 20) + 123);
	write_file(src, "random.img", buf, (3 << 20) + 123, 0600);
	memset(buf, 0, 2 << 20);
	write_file(src, "zero.img", buf, 2 << 20, 0644);
	write_sparse(src, "sparse.img", 6 << 20, 0640);
	/* mixed: text, random, zeros, text again, a short tail */
	fill_text(buf, 1 << 20);
	fill_random(buf + (1 << 20), 1 << 20);
	memset(buf + (2 << 20), 0, 1 << 20);
	fill_text(buf + (3 << 20), (2 << 20) - 777);
	write_file(src, "mixed.img", buf, n - 777, 0755);
	/* the same 512 KiB four times: read once, written four times */
	fill_random(buf, 512 << 10);
	for (int i = 1; i < 4; i++)
		memcpy(buf + i * (512 << 10), buf, 512 << 10);
	write_file(src, "dup.img", buf, 2 << 20, 0444);
	write_file(src, "empty.img", buf, 0, 0600);
	char sub[PATH_MAX + 16];
	snprintf(sub, sizeof(sub), "%s/sub/dir", src);
	REQUIRE(mkdir_p(sub, 0755) == 0);
	fill_text(buf, 10000);
	write_file(sub, "nested.img", buf, 10000, 0600);
	free(buf);
}

/* Compare every file of m under a and b: bytes and mode; holes: b's files
 * hold no more blocks than their data needs. */
static int same_tree(const struct manifest *m, const char *a, const char *b, bool check_holes)
{
	int bad = 0;

	for (size_t i = 0; i < m->nfiles; i++) {
		char pa[2 * PATH_MAX], pb[2 * PATH_MAX];
		char *da = NULL, *db = NULL;
		size_t la = 0, lb = 0;
		struct stat sa, sb;
		const struct manifest_file *f = &m->files[i];

		snprintf(pa, sizeof(pa), "%s/%s", a, f->path);
		snprintf(pb, sizeof(pb), "%s/%s", b, f->path);
		if (read_file(pa, &da, &la, 64 << 20) || read_file(pb, &db, &lb, 64 << 20) ||
		    la != lb || memcmp(da, db, la)) {
			fprintf(stderr, "%s differs from %s\n", pb, pa);
			bad++;
		} else if (stat(pa, &sa) || stat(pb, &sb) || (sa.st_mode & 0700) != (sb.st_mode & 07777)) {
			/* The owner's bits only (restore/engine_files.c): an image
			 * holds a process's memory, open to no one else. */
			fprintf(stderr, "%s: mode %o, expected %o\n", pb, sb.st_mode & 07777,
				sa.st_mode & 0700);
			bad++;
		} else if (check_holes) {
			uint64_t data = 0;
			for (size_t j = 0; j < f->nchunks; j++)
				if (!f->chunks[j].zero)
					data += f->chunks[j].len;
			/* allocation is in 4 KiB pages: each chunk may round up one page */
			if ((uint64_t)sb.st_blocks * 512 > data + 4096 * (f->nchunks + 1)) {
				fprintf(stderr, "%s: %llu bytes allocated for %llu of data: holes filled\n",
					pb, (unsigned long long)sb.st_blocks * 512,
					(unsigned long long)data);
				bad++;
			}
		}
		free(da);
		free(db);
	}
	return bad;
}

/* Put every chunk of m in the page cache (read it) or take it out (fadvise). */
static void set_cached(struct store *s, const struct manifest *m, bool cached)
{
	uint8_t buf[1 << 16];
	char path[PATH_MAX];

	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t j = 0; j < m->files[i].nchunks; j++) {
			const struct manifest_chunk *c = &m->files[i].chunks[j];
			int fd;

			off_t off;
			size_t len;

			if (c->zero)
				continue;
			chunk_where(s, c->hash, path, &off, &len);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			REQUIRE(fd >= 0);
			if (cached) {
				for (size_t got = 0; got < len;) {
					ssize_t r = pread(fd, buf, MIN(sizeof(buf), len - got),
							  off + (off_t)got);
					if (r <= 0)
						break;
					got += (size_t)r;
				}
			} else {
				fdatasync(fd);
				posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the whole pack */
			}
			close(fd);
		}
}

static void test_roundtrip(struct store *s, const char *src, const char *id)
{
	struct manifest *m = NULL;
	struct engine_opts o;
	struct engine_stats st;
	char full[CHUNK_ID_LEN], out[PATH_MAX], path[PATH_MAX + 64];
	struct stat sb;

	REQUIRE(store_manifest_load(s, id, &m, full) == 0);

	/* store_get as the reference */
	snprintf(out, sizeof(out), "%s/get", root);
	REQUIRE(store_get(s, id, out, false) == 0);
	CHECK_EQ(same_tree(m, src, out, false), 0);

	/* defaults: O_DIRECT on this disk, with the chunks out of the page cache */
	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-%d", getpid());
	rm_rf(out);
	set_cached(s, m, false);
	CHECK_EQ(engine_materialize(s, m, out, NULL, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	snprintf(path, sizeof(path), "%s/get", root);
	CHECK_EQ(same_tree(m, path, out, true), 0);
	CHECK_EQ(st.files, m->nfiles);
	CHECK(st.unique_chunks < st.chunks); /* dup.img */
	CHECK(st.holes > 0);
	CHECK_EQ(st.written_bytes + st.hole_bytes, st.logical_bytes);
	CHECK(st.read_bytes > 0);
	CHECK(st.fixed_buffers);
	CHECK(st.ring_opens);
	printf("defaults: %llu bytes, %llu chunks (%llu distinct), %llu holes, direct %d, "
	       "%u threads, %u slots of %llu\n",
	       (unsigned long long)st.logical_bytes, (unsigned long long)st.chunks,
	       (unsigned long long)st.unique_chunks, (unsigned long long)st.holes, st.direct,
	       st.threads, st.slots, (unsigned long long)st.slot_bytes);
	/* The store is on a disk filesystem here, which takes O_DIRECT. */
	CHECK(st.direct);
	CHECK(st.cached_percent >= 0 && st.cached_percent < 50);
	CHECK_EQ(st.shares, !st.mapped && st.threads > 1); /* auto: shares with pwrite */
	snprintf(path, sizeof(path), "%s/zero.img", out);
	CHECK(stat(path, &sb) == 0 && sb.st_blocks == 0);

	/* a tiny arena and queue, more threads than cores, buffered */
	engine_opts_default(&o);
	o.arena_bytes = 1;
	o.queue_depth = 1;
	o.threads = 5;
	o.direct = ENGINE_DIRECT_OFF;
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0); /* over the previous output */
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK(!st.direct);
	/* The arena holds one slot: one worker, one read at a time. */
	CHECK_EQ(st.slots, 1);
	CHECK_EQ(st.threads, 1);
	CHECK(!st.mapped); /* auto, few workers, 4 KiB pages: pwrite */

	/* written through mappings, raw chunks read straight into them */
	engine_opts_default(&o);
	o.write = ENGINE_WRITE_MMAP;
	o.direct = ENGINE_DIRECT_OFF;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK(st.mapped);
	CHECK(st.read_into_files > 0 && st.read_into_files <= st.written_bytes);
	CHECK(!st.shares); /* auto: mapped files, one stream */
	/* the other order each way */
	o.order = ENGINE_ORDER_SHARES;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK_EQ(st.shares, st.threads > 1);
	o.order = ENGINE_ORDER_AUTO;
	o.write = ENGINE_WRITE_PWRITE;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK(!st.mapped);
	CHECK_EQ(st.read_into_files, 0);

	/* O_DIRECT required */
	o.direct = ENGINE_DIRECT_ON;
	o.queue_depth = 3;
	o.arena_bytes = 4 << 20;
	o.threads = 2;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK(st.direct);
	CHECK_EQ(st.shares, st.threads > 1); /* auto, writing with pwrite */
	o.order = ENGINE_ORDER_STREAM;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	CHECK(st.direct && !st.shares);

	/* the naive baseline agrees */
	rm_rf(out);
	CHECK_EQ(engine_materialize_naive(s, m, out, NULL, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	rm_rf(out);
	manifest_free(m);
}

/* auto reads through the page cache when the chunks are in it (O_DIRECT would
 * read them from the disk again), with O_DIRECT when they are not; a setting
 * other than auto is followed whatever the cache holds. */
static void test_cache_choice(struct store *s, const char *id)
{
	struct manifest *m = NULL;
	struct engine_opts o;
	struct engine_stats st;
	char out[PATH_MAX];

	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-cache-%d", getpid());
	engine_opts_default(&o);

	set_cached(s, m, true);
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	printf("cached: %d%%, direct %d\n", st.cached_percent, st.direct);
	CHECK(st.cached_percent >= 90);
	CHECK(!st.direct);

	o.direct = ENGINE_DIRECT_ON;
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK(st.direct);
	CHECK_EQ(st.cached_percent, -1);

	o.direct = ENGINE_DIRECT_AUTO;
	set_cached(s, m, false);
	rm_rf(out);
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	printf("dropped: %d%%, direct %d\n", st.cached_percent, st.direct);
	CHECK(st.cached_percent >= 0 && st.cached_percent < 10);
	CHECK(st.direct);
	rm_rf(out);
	manifest_free(m);
}

/* A store on tmpfs: O_DIRECT may or may not be taken; auto must work either way. */
static void test_tmpfs_store(const char *src)
{
	char dir[PATH_MAX], out[PATH_MAX], id[CHUNK_ID_LEN];
	const char *paths[] = { src };
	struct store *s;
	struct manifest *m = NULL;
	struct engine_stats st;

	snprintf(dir, sizeof(dir), "/dev/shm/thaw-test-engine-store-%d", getpid());
	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-out-%d", getpid());
	s = store_open(dir);
	REQUIRE(s);
	REQUIRE(store_put(s, "tmpfs", paths, 1, NULL, false, id, NULL) == 0);
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	CHECK_EQ(engine_materialize(s, m, out, NULL, &st), 0);
	CHECK_EQ(same_tree(m, src, out, true), 0);
	printf("tmpfs store: direct %d\n", st.direct);
	manifest_free(m);
	store_close(s);
	rm_rf(out);
	rm_rf(dir);
}

enum harm { FLIP_BYTE, REMOVE, TRUNCATE };

static void damage(struct store *s, const struct manifest_chunk *c, enum harm how)
{
	if (how == REMOVE)
		chunk_remove(s, c->hash);
	else if (how == TRUNCATE)
		chunk_cut(s, c->hash, c->stored - 100);
	else
		chunk_flip(s, c->hash, CHUNK_HEADER_SIZE + 100);
}

/* Snapshot one file of fresh random data (raw chunks) in the layout given,
 * damage a chunk (its middle one; in a pack cut short, the pack's last), and
 * check that the naive engine and the engine, whichever way it reads and
 * writes, fail naming it. */
static void test_bad_chunk(struct store *s, enum harm how, enum store_layout layout)
{
	static const char *ways[] = { "naive", "engine, defaults", "engine, pwrite",
				      "engine, O_DIRECT", "engine, buffered into mappings" };
	char src[PATH_MAX], out[PATH_MAX], id[CHUNK_ID_LEN], cid[CHUNK_ID_LEN];
	const char *paths[1];
	struct manifest *m = NULL;
	size_t n = 3 << 20;
	uint8_t *buf = malloc(n);
	int ret;

	REQUIRE(buf);
	snprintf(src, sizeof(src), "%s/bad-%d-%d", root, (int)how, (int)layout);
	REQUIRE(mkdir_p(src, 0755) == 0);
	fill_random(buf, n);
	write_file(src, "victim.img", buf, n, 0600);
	free(buf);
	paths[0] = src;
	store_set_layout(s, layout);
	REQUIRE(store_put(s, "bad", paths, 1, NULL, false, id, NULL) == 0);
	store_set_layout(s, STORE_LAYOUT_PACK);
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	REQUIRE(m->nfiles == 1 && m->files[0].nchunks > 4);
	const struct manifest_chunk *c = &m->files[0].chunks[m->files[0].nchunks / 2];
	if (how == TRUNCATE)
		c = chunk_last_in_pack(s, &m->files[0]);
	chunk_id_format(c->hash, cid);
	damage(s, c, how);

	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-bad-%d", getpid());
	for (size_t way = 0; way < sizeof(ways) / sizeof(ways[0]); way++) {
		struct engine_opts o;

		CASE("%s store, chunk %s, %s",
		     layout == STORE_LAYOUT_PACK ? "packed" : "loose",
		     how == FLIP_BYTE ? "flipped" : how == REMOVE ? "removed" : "cut short",
		     ways[way]);
		engine_opts_default(&o);
		o.write = way == 2 ? ENGINE_WRITE_PWRITE : way == 4 ? ENGINE_WRITE_MMAP : o.write;
		o.direct = way == 3 ? ENGINE_DIRECT_ON : way == 4 ? ENGINE_DIRECT_OFF : o.direct;
		log_clear_error();
		ret = way == 0 ? engine_materialize_naive(s, m, out, NULL, NULL)
			       : engine_materialize(s, m, out, &o, NULL);
		CHECK_EQ(ret, how == REMOVE ? -ENOENT : -EBADMSG);
		fprintf(stderr, "expected failure (%s): %s\n", ways[way], log_last_error());
		CHECK(strstr(log_last_error(), cid) != NULL);
		CHECK(strstr(log_last_error(), "victim.img") != NULL);
		rm_rf(out);
	}
	CASE_END();
	manifest_free(m);
}

/* The engine beside another writer (the remote tier's streamed fetch): the
 * files made by the caller and left open, a chunk the store lacks left to
 * the caller (skipped, not an error), which writes its bytes itself; the
 * result is the whole file.  Without skip_missing the same is an error. */
static void test_skip_missing(struct store *s)
{
	char src[PATH_MAX], out[PATH_MAX], id[CHUNK_ID_LEN], path[PATH_MAX + 16];
	const char *paths[1];
	struct manifest *m = NULL;
	struct engine_opts o;
	struct engine_stats st;
	size_t n = 3 << 20;
	uint8_t *buf = malloc(n), *back = malloc(n);
	int fd = -1;

	REQUIRE(buf && back);
	snprintf(src, sizeof(src), "%s/skip", root);
	REQUIRE(mkdir_p(src, 0755) == 0);
	fill_random(buf, n);
	write_file(src, "part.img", buf, n, 0600);
	paths[0] = src;
	REQUIRE(store_put(s, "skip", paths, 1, NULL, false, id, NULL) == 0);
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	REQUIRE(m->nfiles == 1 && m->files[0].nchunks > 4);
	const struct manifest_chunk *c = &m->files[0].chunks[m->files[0].nchunks / 2];
	chunk_remove(s, c->hash);

	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-skip-%d", getpid());
	REQUIRE(engine_create_files(m, out, &fd) == 0);
	REQUIRE(pwrite_all(fd, buf + c->off, c->len, (off_t)c->off) == 0); /* the other writer */
	engine_opts_default(&o);
	o.files = &fd;
	o.skip_missing = true;
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	CHECK_EQ(st.skipped_chunks, 1);
	CHECK_EQ(st.unique_chunks, m->files[0].nchunks);
	CHECK(fcntl(fd, F_GETFD) >= 0); /* still the caller's, open */
	snprintf(path, sizeof(path), "%s/part.img", out);
	int rfd = open(path, O_RDONLY);
	CHECK(rfd >= 0 && pread(rfd, back, n, 0) == (ssize_t)n && !memcmp(buf, back, n));
	if (rfd >= 0)
		close(rfd);
	close(fd);
	rm_rf(out);

	/* the same without skip_missing: the missing chunk is named */
	o.files = NULL;
	o.skip_missing = false;
	CHECK_EQ(engine_materialize(s, m, out, &o, NULL), -ENOENT);
	rm_rf(out);
	manifest_free(m);
	free(buf);
	free(back);
}

static void test_cancel(struct store *s, const char *id)
{
	struct manifest *m = NULL;
	struct engine_opts o;
	atomic_bool cancel = true;
	char out[PATH_MAX];

	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	engine_opts_default(&o);
	o.cancel = &cancel;
	snprintf(out, sizeof(out), "/dev/shm/thaw-test-engine-cancel-%d", getpid());
	CHECK_EQ(engine_materialize(s, m, out, &o, NULL), -ECANCELED);
	CHECK_EQ(engine_materialize_naive(s, m, out, &o, NULL), -ECANCELED);
	rm_rf(out);
	manifest_free(m);
}

/* The redirected file of test_writers: what writers[0] hands on goes there,
 * counted (workers call it at once), each write checked to lie inside the
 * file's size.  The mapped layout's windows are such a place (tier_layout.c). */
struct redirect {
	int fd;
	uint64_t size;
	uint64_t bytes;
};

static int redirect_pwrite(void *arg, const void *buf, size_t len, uint64_t off)
{
	struct redirect *r = arg;

	if (off > r->size || len > r->size - off)
		return -ERANGE;
	__atomic_fetch_add(&r->bytes, len, __ATOMIC_RELAXED);
	return pwrite_all(r->fd, buf, len, (off_t)off);
}

static int full_pwrite(void *arg, const void *buf, size_t len, uint64_t off)
{
	(void)arg, (void)buf, (void)len, (void)off;
	return -ENOSPC;
}

/* path holds exactly want's len bytes. */
static bool holds(const char *path, const uint8_t *want, size_t len)
{
	char *got = NULL;
	size_t n = 0;
	bool ok = read_file(path, &got, &n, 64 << 20) == 0 && n == len && !memcmp(got, want, len);

	free(got);
	return ok;
}

/* Occurrences of chunk hash in f. */
static size_t count_in(const struct manifest_file *f, const uint8_t *hash)
{
	size_t n = 0;

	for (size_t j = 0; j < f->nchunks; j++)
		n += !f->chunks[j].zero && !memcmp(f->chunks[j].hash, hash, CHUNK_HASH_LEN);
	return n;
}

/* writers: file 0's bytes go through writers[0], its pwrite or its map,
 * never into its own file under outdir, which stays as created (zeros, not a
 * block written: tmpfs); file 1, with no writer, is written as usual.  A
 * random (raw) chunk occurs twice in file 0 and once in file 1, so one read
 * is written both through the writer and into a file of the engine's; text
 * chunks are decoded (zstd).  A writer that fails fails the whole, naming
 * the file. */
static void test_writers(struct store *s)
{
	char src[PATH_MAX], dir[PATH_MAX], out[PATH_MAX + 8], redir[PATH_MAX + 16];
	char p0[2 * PATH_MAX], p1[2 * PATH_MAX], id[CHUNK_ID_LEN];
	const char *paths[1];
	/* A starts on a 4 KiB block and a hole follows it wherever it is, so
	 * that it is cut alike each time (store/chunker.h). */
	const size_t a = 256 << 10, hole = 128 << 10, t = (200 << 10) + 123;
	const size_t n0 = a + hole + a + hole + t, n1 = a + hole + t;
	uint8_t *f0 = calloc(n0, 1), *f1 = calloc(n1, 1), *zeros = calloc(n0, 1);
	struct manifest *m = NULL;
	struct engine_stats st;
	uint64_t data0 = 0;

	REQUIRE(f0 && f1 && zeros);
	fill_random(f0, a);
	memcpy(f0 + a + hole, f0, a);
	fill_text(f0 + 2 * (a + hole), t);
	memcpy(f1, f0, a);
	fill_text(f1 + a + hole, t);
	snprintf(src, sizeof(src), "%s/writers", root);
	REQUIRE(mkdir_p(src, 0755) == 0);
	write_file(src, "0-redir.img", f0, n0, 0600);
	write_file(src, "1-plain.img", f1, n1, 0644);
	paths[0] = src;
	REQUIRE(store_put(s, "writers", paths, 1, NULL, false, id, NULL) == 0);
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	REQUIRE(m->nfiles == 2 && !strcmp(m->files[0].path, "0-redir.img"));
	const struct manifest_file *mf = &m->files[0];
	REQUIRE(!mf->chunks[0].zero && count_in(mf, mf->chunks[0].hash) == 2 &&
		count_in(&m->files[1], mf->chunks[0].hash) == 1);
	for (size_t j = 0; j < mf->nchunks; j++)
		data0 += mf->chunks[j].zero ? 0 : mf->chunks[j].len;
	REQUIRE(data0 < n0); /* a hole */

	snprintf(dir, sizeof(dir), "/dev/shm/thaw-test-engine-writers-%d", getpid());
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(redir, sizeof(redir), "%s/redirected", dir);
	snprintf(p0, sizeof(p0), "%s/0-redir.img", out);
	snprintf(p1, sizeof(p1), "%s/1-plain.img", out);
	for (int w = ENGINE_WRITE_PWRITE; w <= ENGINE_WRITE_MMAP; w++) {
		struct redirect r = { .size = n0 };
		struct engine_writer wr[2] = { { NULL, redirect_pwrite, &r }, { 0 } };
		struct engine_opts o;
		uint8_t *map = NULL;
		bool populates = false;
		struct stat sb;

		rm_rf(dir);
		REQUIRE(mkdir_p(dir, 0755) == 0);
		r.fd = open(redir, O_RDWR | O_CREAT | O_TRUNC, 0600);
		REQUIRE(r.fd >= 0 && ftruncate(r.fd, (off_t)n0) == 0);
		engine_opts_default(&o);
		o.write = (enum engine_write)w;
		o.writers = wr;
		if (w == ENGINE_WRITE_MMAP) {
			map = mmap(NULL, n0, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
			REQUIRE(map != MAP_FAILED);
			wr[0].map = map;
			populates = madvise(map, 4096, MADV_POPULATE_WRITE) == 0;
		}
		CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
		if (map)
			munmap(map, n0);
		close(r.fd);
		printf("writers, %s: %llu bytes through pwrite\n",
		       w == ENGINE_WRITE_MMAP ? "mmap" : "pwrite", (unsigned long long)r.bytes);
		CHECK(holds(redir, f0, n0));
		CHECK(holds(p0, zeros, n0));
		CHECK(stat(p0, &sb) == 0 && sb.st_blocks == 0);
		CHECK(holds(p1, f1, n1));
		CHECK_EQ(st.mapped, w == ENGINE_WRITE_MMAP);
		CHECK_EQ(st.written_bytes + st.hole_bytes, st.logical_bytes);
		/* With pwrite, each occurrence of each data chunk once.  With mmap,
		 * where this kernel populates mappings (5.14), all through the map. */
		if (w == ENGINE_WRITE_PWRITE)
			CHECK_EQ(r.bytes, data0);
		else if (populates)
			CHECK_EQ(r.bytes, 0);
	}

	/* A writer's error is the engine's.  With no map, mmap writes through
	 * the writer too: a mapping of outdir's file would succeed instead. */
	for (int w = ENGINE_WRITE_PWRITE; w <= ENGINE_WRITE_MMAP; w++) {
		struct engine_writer wr[2] = { { NULL, full_pwrite, NULL }, { 0 } };
		struct engine_opts o;

		rm_rf(dir);
		engine_opts_default(&o);
		o.write = (enum engine_write)w;
		o.writers = wr;
		log_clear_error();
		CHECK_EQ(engine_materialize(s, m, out, &o, NULL), -ENOSPC);
		fprintf(stderr, "expected failure: %s\n", log_last_error());
		CHECK(strstr(log_last_error(), "0-redir.img") != NULL);
	}
	rm_rf(dir);
	manifest_free(m);
	free(f0);
	free(f1);
	free(zeros);
}

/* Scratch tmpfs mounts of the cases below (at most one at a time), for
 * cleanup() to remove should a REQUIRE exit mid-case. */
static char scratch_fs[PATH_MAX];

/* Mount a tmpfs with opts at /dev/shm/thaw-test-engine-NAME-PID; false (and
 * a line saying the case is not run) where this machine will not. */
static bool scratch_mount(const char *name, const char *opts)
{
	snprintf(scratch_fs, sizeof(scratch_fs), "/dev/shm/thaw-test-engine-%s-%d", name, getpid());
	REQUIRE(mkdir_p(scratch_fs, 0755) == 0);
	if (mount("thaw-test", scratch_fs, "tmpfs", 0, opts) == 0)
		return true;
	printf("cannot mount a tmpfs with %s (%s): %s case not run\n", opts, strerror(errno), name);
	rmdir(scratch_fs);
	scratch_fs[0] = '\0';
	return false;
}

static void scratch_unmount(void)
{
	if (!scratch_fs[0])
		return;
	umount2(scratch_fs, MNT_DETACH);
	rmdir(scratch_fs);
	scratch_fs[0] = '\0';
}

/* A full tmpfs must fail the materialisation with ENOSPC, not kill the
 * process with SIGBUS through the mapping. */
static void test_full_tmpfs(struct store *s, const char *id)
{
	struct manifest *m = NULL;
	char out[PATH_MAX + 8];

	if (!scratch_mount("small", "size=4m"))
		return;
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	snprintf(out, sizeof(out), "%s/out", scratch_fs);
	for (int w = ENGINE_WRITE_PWRITE; w <= ENGINE_WRITE_MMAP; w++) {
		struct engine_opts o;

		engine_opts_default(&o);
		o.write = (enum engine_write)w;
		log_clear_error();
		CHECK_EQ(engine_materialize(s, m, out, &o, NULL), -ENOSPC);
		fprintf(stderr, "expected failure: %s\n", log_last_error());
		rm_rf(out);
	}
	manifest_free(m);
	scratch_unmount();
}

/* auto writes through mappings into huge pages (tmpfs huge=within_size), and
 * reads raw chunks straight into them when the store is in the page cache. */
static void test_huge_target(struct store *s, const char *src, const char *id)
{
	struct manifest *m = NULL;
	struct engine_opts o;
	struct engine_stats st;
	char out[PATH_MAX + 8];

	if (!scratch_mount("huge", "size=256m,huge=within_size"))
		return;
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	snprintf(out, sizeof(out), "%s/out", scratch_fs);
	engine_opts_default(&o);
	o.threads = 2;
	o.direct = ENGINE_DIRECT_OFF;
	CHECK_EQ(engine_materialize(s, m, out, &o, &st), 0);
	/* Holes inside a 2 MiB page are memory there: bytes are checked, not holes. */
	CHECK_EQ(same_tree(m, src, out, false), 0);
	printf("huge tmpfs: mapped %d, %llu bytes read into the files\n", st.mapped,
	       (unsigned long long)st.read_into_files);
	CHECK(st.mapped);
	CHECK(st.read_into_files > 0);
	manifest_free(m);
	scratch_unmount();
}

/* REQUIRE exits: leave nothing behind either way. */
static void cleanup(void)
{
	scratch_unmount();
	char p[PATH_MAX];
	const char *names[] = { "", "-store", "-out", "-bad", "-cancel", "-writers" };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(p, sizeof(p), "/dev/shm/thaw-test-engine%s-%d", names[i], getpid());
		rm_rf(p);
	}
	if (root[0])
		rm_rf(root);
}

int main(void)
{
	char src[PATH_MAX], sdir[PATH_MAX], id[CHUNK_ID_LEN];
	const char *paths[1];
	struct store *s;

	/* As thaw and thawd run (cli/thaw.c, server/thawd_main.c): what they
	 * create is the owner's only, store_get's files as the engine's. */
	umask(077);
	/* A disk filesystem, not tmpfs, so that O_DIRECT is exercised. */
	snprintf(root, sizeof(root), "/var/tmp/thaw-test-engine-XXXXXX");
	REQUIRE(mkdtemp(root));
	atexit(cleanup);
	snprintf(src, sizeof(src), "%s/src", root);
	snprintf(sdir, sizeof(sdir), "%s/store", root);
	make_source(src);
	s = store_open(sdir);
	REQUIRE(s);
	paths[0] = src;
	REQUIRE(store_put(s, "engine", paths, 1, NULL, false, id, NULL) == 0);

	test_roundtrip(s, src, id);
	test_cache_choice(s, id);
	test_tmpfs_store(src);
	test_cancel(s, id);
	test_skip_missing(s);
	test_writers(s);
	test_full_tmpfs(s, id);
	test_huge_target(s, src, id);
	for (int layout = STORE_LAYOUT_PACK; layout <= STORE_LAYOUT_LOOSE; layout++) {
		test_bad_chunk(s, FLIP_BYTE, layout);
		test_bad_chunk(s, REMOVE, layout);
		test_bad_chunk(s, TRUNCATE, layout);
	}

	store_close(s);
	return check_failures ? 1 : 0;
}
