/* SPDX-License-Identifier: Apache-2.0 */
/* test_tier_sums.c — the RAM tier's checksums (restore/tier_sums.h) and its
 * scrub (restore/tier_scrub.c), on a snapshot of three files: random bytes
 * of no whole number of blocks, one with a hole inside, one of 16 MiB that
 * holds 1 MiB of data and a hole after it (as a mapped memory file does):
 *   - a materialised entry has its checksums, each file with its size and
 *     the bytes they cover (the tail hole not);
 *   - a pass of the scrub finds it sound; so it does after a reader's
 *     private mapping faulted zero pages into the tail hole;
 *   - one byte flipped, non-zero data in the tail hole, a damaged .sums:
 *     each found by the scrub, the entry dropped and materialised again
 *     (another directory, the source's bytes), counted;
 *   - a reader's report (tier_damage_report): the next acquire makes the
 *     entry again;
 *   - tier_sums_check_mapped on a copy: sound, a flipped byte named by its
 *     block, a byte past covered;
 *   - a tier opened on an entry without checksums (an older thaw's)
 *     removes it;
 *   - a file linked at the top and into the mapped image is summed under
 *     its name at the top, whichever directory entry readdir gives first.
 */
#include "common/util.h"
#include "restore/tier.h"
#include "restore/tier_sums.h"
#include "store/store.h"
#include "test/check.h"
#include "test/tier_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char src[300];

static void write_at(const char *path, const void *buf, size_t n, off_t off)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	REQUIRE(fd >= 0);
	REQUIRE(pwrite(fd, buf, n, off) == (ssize_t)n);
	close(fd);
}

static void make_source(void)
{
	uint8_t *b = malloc(4 * MIB);
	char p[400];

	REQUIRE(b);
	REQUIRE(mkdir_p(src, 0755) == 0);
	fill_random(b, 4 * MIB);
	snprintf(p, sizeof(p), "%s/random.img", src);
	write_at(p, b, 3 * MIB + 100, 0);
	snprintf(p, sizeof(p), "%s/holed.img", src);
	write_at(p, b, MIB, 0);
	write_at(p, b + MIB, MIB, 5 * MIB); /* 4 MiB of hole between */
	snprintf(p, sizeof(p), "%s/tail.img", src);
	write_at(p, b + 2 * MIB, MIB, 0);
	REQUIRE(truncate(p, 16 * MIB) == 0);
	free(b);
}

/* The entry's file name equals the source's, byte for byte. */
static bool same(const char *entry, const char *name)
{
	char a[400], b[PATH_MAX + 64];

	snprintf(a, sizeof(a), "%s/%s", src, name);
	snprintf(b, sizeof(b), "%s/%s", entry, name);
	return same_bytes(a, b);
}

static ino_t ino_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* The entry of id leased, its path into dir; its directory's inode. */
static ino_t entry(struct tier *t, const char *id, char *dir, size_t len)
{
	struct tier_lease *l = NULL;
	ino_t ino;

	REQUIRE(tier_acquire(t, id, &l) == 0);
	snprintf(dir, len, "%s", tier_lease_path(l));
	ino = ino_of(dir);
	tier_release(l);
	return ino;
}

static void test_sums(struct tier *t, const char *id)
{
	char dir[PATH_MAX], p[PATH_MAX + 64];
	struct tier_sums *s = NULL;
	const struct tier_sum_file *f;
	unsigned damaged = 9;
	struct tier_stats st;
	uint8_t *m;
	int fd;

	entry(t, id, dir, sizeof(dir));
	REQUIRE(tier_sums_load(dir, &s) == 0);
	CHECK_EQ(s->n, 3);
	f = tier_sums_find(s, "random.img");
	CHECK(f && f->size == 3 * MIB + 100 && f->covered == f->size && f->nblocks == 2);
	f = tier_sums_find(s, "holed.img");
	CHECK(f && f->size == 6 * MIB && f->covered == 6 * MIB && f->nblocks == 3);
	f = tier_sums_find(s, "tail.img");
	CHECK(f && f->size == 16 * MIB && f->covered == TIER_SUM_BLOCK && f->nblocks == 1);
	tier_sums_free(s);
	CHECK_EQ(tier_scrub_pass(t, 0, &damaged), 0);
	CHECK_EQ(damaged, 0);
	/* What holds data was read: not the holes, nor the tail. */
	tier_get_stats(t, &st);
	CHECK_EQ(st.scrubbed_bytes, 9 * MIB + 100);
	CHECK_EQ(st.scrub_passes, 1);

	/* A reader's private mapping faults zero pages into the tail hole. */
	snprintf(p, sizeof(p), "%s/tail.img", dir);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	m = mmap(NULL, 16 * MIB, PROT_READ, MAP_PRIVATE, fd, 0);
	REQUIRE(m != MAP_FAILED);
	CHECK_EQ(m[8 * MIB] + m[12 * MIB + 123], 0);
	munmap(m, 16 * MIB);
	close(fd);
	CHECK_EQ(tier_scrub_pass(t, 0, &damaged), 0);
	CHECK_EQ(damaged, 0);
}

/* damage(dir) done to the entry of id: the scrub finds it, and the entry
 * is made again, sound. */
static void scrub_finds(struct tier *t, const char *id, const char *what, const char *file,
			off_t off, const char *bytes)
{
	char dir[PATH_MAX], p[PATH_MAX + 64];
	struct tier_stats a, b;
	unsigned damaged = 0;
	ino_t before;

	CASE("%s", what);
	before = entry(t, id, dir, sizeof(dir));
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	write_at(p, bytes, strlen(bytes), off);
	tier_get_stats(t, &a);
	CHECK_EQ(tier_scrub_pass(t, 0, &damaged), 0);
	CHECK_EQ(damaged, 1);
	tier_get_stats(t, &b);
	CHECK_EQ(b.damaged[TIER_FOUND_SCRUB], a.damaged[TIER_FOUND_SCRUB] + 1);
	CHECK_EQ(b.rematerialized, a.rematerialized + 1);
	/* Made again by the scrub: another directory, the source's bytes. */
	CHECK(ino_of(dir) != 0 && ino_of(dir) != before);
	CHECK(same(dir, "random.img") && same(dir, "holed.img") && same(dir, "tail.img"));
	CHECK_EQ(tier_scrub_pass(t, 0, &damaged), 0);
	CHECK_EQ(damaged, 0);
	CASE_END();
}

static void test_report(struct tier *t, const char *id)
{
	char dir[PATH_MAX];
	struct tier_lease *l = NULL;
	struct tier_stats st;
	ino_t before = entry(t, id, dir, sizeof(dir));

	tier_damage_report(dir, TIER_FOUND_FILL, "a test's word");
	REQUIRE(tier_acquire(t, id, &l) == 0);
	CHECK(!tier_lease_hit(l));
	CHECK(ino_of(dir) != before);
	CHECK(same(dir, "random.img"));
	tier_release(l);
	tier_get_stats(t, &st);
	CHECK_EQ(st.damaged[TIER_FOUND_FILL], 1);
	/* Once made again, an acquire finds it. */
	REQUIRE(tier_acquire(t, id, &l) == 0);
	CHECK(tier_lease_hit(l));
	tier_release(l);
}

static void test_check_mapped(struct tier *t, const char *id)
{
	char dir[PATH_MAX], p[PATH_MAX + 64], *buf = NULL;
	struct tier_sums *s = NULL;
	const struct tier_sum_file *f;
	uint64_t bad = 0;
	size_t len = 0;
	int fd;

	entry(t, id, dir, sizeof(dir));
	REQUIRE(tier_sums_load(dir, &s) == 0);
	f = tier_sums_find(s, "holed.img");
	REQUIRE(f);
	snprintf(p, sizeof(p), "%s/holed.img", dir);
	REQUIRE(read_file(p, &buf, &len, 64 * MIB) == 0 && len == f->size);
	CHECK_EQ(tier_sums_check_mapped(f, buf, len, 0, len, &bad), 0);
	buf[4 * MIB + 7] ^= 1;
	CHECK_EQ(tier_sums_check_mapped(f, buf, len, 0, 2 * MIB, &bad), 0);
	CHECK_EQ(tier_sums_check_mapped(f, buf, len, 2 * MIB, 4 * MIB, &bad), -EUCLEAN);
	CHECK_EQ(bad, 4 * MIB);
	CHECK_EQ(tier_sums_check_mapped(f, buf, len - 1, 0, 2 * MIB, &bad), -EUCLEAN);
	free(buf);
	f = tier_sums_find(s, "tail.img");
	REQUIRE(f);
	buf = calloc(1, 8 * MIB);
	REQUIRE(buf);
	snprintf(p, sizeof(p), "%s/tail.img", dir);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0 && pread(fd, buf, 2 * MIB, 0) == (ssize_t)(2 * MIB));
	close(fd);
	/* Its first 8 MiB (all a buffer here holds), as though mapped whole. */
	CHECK_EQ(tier_sums_check_mapped(f, buf, f->size, 0, 8 * MIB, &bad), 0);
	buf[5 * MIB] = 1;
	CHECK_EQ(tier_sums_check_mapped(f, buf, f->size, 4 * MIB, 4 * MIB, &bad), -EUCLEAN);
	CHECK_EQ(bad, 5 * MIB);
	free(buf);
	tier_sums_free(s);
}

static void test_unsummed(struct store *st, const char *id)
{
	char dir[PATH_MAX], p[PATH_MAX + 16], meta[PATH_MAX + 16];
	struct tier *t = tier_open(tdir, 1ull << 30, st, NULL);

	REQUIRE(t);
	entry(t, id, dir, sizeof(dir));
	tier_close(t);
	snprintf(p, sizeof(p), "%s/" TIER_SUMS, dir);
	REQUIRE(unlink(p) == 0);
	snprintf(meta, sizeof(meta), "%s.meta", dir);
	t = tier_open(tdir, 1ull << 30, st, NULL);
	REQUIRE(t);
	CHECK(access(meta, F_OK) != 0 && access(dir, F_OK) != 0);
	tier_close(t);
}

/* An entry whose device-memory files are linked into .mapped/ as well (as
 * restore/mapped.c links an image's files): the fill looks their sums up
 * by their names at the top.  Eight of them, made in both orders, in the
 * tier's filesystem: readdir meets .mapped/ before some of them whatever
 * order it gives. */
static void test_linked(void)
{
	for (int top_first = 0; top_first < 2; top_first++) {
		char d[PATH_MAX], a[PATH_MAX + 64], b[PATH_MAX + 64];
		struct tier_sums *s = NULL;
		uint8_t buf[4096];

		snprintf(d, sizeof(d), "%s-linked-%d", tdir, top_first);
		REQUIRE(mkdir(d, 0700) == 0);
		snprintf(b, sizeof(b), "%s/.mapped", d);
		if (top_first == 0)
			REQUIRE(mkdir(b, 0700) == 0);
		for (int pid = 1; pid <= 8; pid++) {
			snprintf(a, sizeof(a), "%s/gpu-%d.mem", d, pid);
			fill_random(buf, sizeof(buf));
			write_at(a, buf, sizeof(buf), 0);
		}
		if (top_first == 1)
			REQUIRE(mkdir(b, 0700) == 0);
		for (int pid = 1; pid <= 8; pid++) {
			snprintf(a, sizeof(a), "%s/gpu-%d.mem", d, pid);
			snprintf(b, sizeof(b), "%s/.mapped/gpu-%d.mem", d, pid);
			REQUIRE(link(a, b) == 0);
		}
		REQUIRE(tier_sums_make(d, NULL) == 0);
		REQUIRE(tier_sums_load(d, &s) == 0);
		CHECK_EQ(s->n, 8);
		for (int pid = 1; pid <= 8; pid++) {
			snprintf(a, sizeof(a), "gpu-%d.mem", pid);
			CHECK(tier_sums_find(s, a) != NULL);
		}
		tier_sums_free(s);
		rm_rf(d);
	}
}

int main(void)
{
	char id[CHUNK_ID_LEN];
	const char *paths[1] = { src };
	struct store *s;
	struct tier *t;

	tier_test_dirs("tier-sums");
	snprintf(src, sizeof(src), "%s/src", root);
	make_source();
	s = store_open(sdir);
	REQUIRE(s);
	REQUIRE(store_put(s, "sums", paths, 1, NULL, false, id, NULL) == 0);
	t = tier_open(tdir, 1ull << 30, s, NULL);
	REQUIRE(t);
	tier_set_mapped(t, 0);

	test_sums(t, id);
	scrub_finds(t, id, "a flipped byte", "random.img", 2 * MIB + 77, "\xff");
	scrub_finds(t, id, "a byte in the hole inside", "holed.img", 3 * MIB, "x");
	scrub_finds(t, id, "data in the tail hole", "tail.img", 10 * MIB, "x");
	scrub_finds(t, id, "the checksums themselves", TIER_SUMS, 40, "\x01");
	test_report(t, id);
	test_check_mapped(t, id);
	tier_close(t);
	test_unsummed(s, id);
	test_linked();

	store_close(s);
	return check_failures ? 1 : 0;
}
