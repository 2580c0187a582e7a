/* SPDX-License-Identifier: Apache-2.0 */
/* test_mapped_image.c — the image rewrites of a mapped restore, on images
 * built here field by field (criu/criu_image.h):
 *   - criu_img_mm_remap turns one private anonymous VMA into a private file
 *     mapping (status, flags without MAP_ANONYMOUS, shmid, pgoff, fdflags),
 *     keeps its other fields (madv) and every other byte, and refuses a VMA
 *     that is not there, one that is not anonymous, and a truncated image;
 *     an entry with no fields comes back as it was;
 *   - criu_img_files_max_id and criu_img_files_append_reg: the new entry has
 *     the next id and decodes again;
 *   - criu_img_mount_id finds a mount by its mountpoint, and only that one.
 * The whole path on real CRIU images is test/e2e_mapped.sh.
 */
#include "criu/criu_image.h"
#include "test/check.h"
#include "test/criu_pb.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void vma(struct buf *v, uint64_t start, uint64_t end, uint32_t flags, uint32_t status,
		bool madv)
{
	v->n = 0;
	put_field(v, 1, start);
	put_field(v, 2, end);
	put_field(v, 3, 0);
	put_field(v, 4, 0);
	put_field(v, 5, 3);
	put_field(v, 6, flags);
	put_field(v, 7, status);
	put_field(v, 8, 1); /* fd -1, zigzag */
	if (madv)
		put_field(v, 9, 0x4000);
}

static void test_mm_remap(void)
{
	const uint32_t anon = CRIU_VMA_AREA_REGULAR | CRIU_VMA_ANON_PRIVATE;
	const uint32_t filep = CRIU_VMA_AREA_REGULAR | CRIU_VMA_FILE_PRIVATE;
	struct buf m = { .n = 0 }, v, f;
	struct criu_img_vma_remap r = { 0x200000, 42, 0x1000 };
	struct criu_img_mm mm;
	uint8_t *out = NULL;
	size_t len;

	for (uint32_t k = 1; k <= 11; k++)
		put_field(&m, k, 0x1000 * k);
	put_field(&m, 12, 7);
	vma(&v, 0x200000, 0x600000, 0x22, anon, true);
	put_bytes(&m, 14, v.p, v.n);
	vma(&v, 0x600000, 0x601000, 0x02, filep, false);
	put_bytes(&m, 14, v.p, v.n);
	put_field(&m, 15, 1);
	file_start(&f, CRIU_MM_MAGIC);
	file_msg(&f, &m);

	CHECK_EQ(criu_img_mm_remap(f.p, f.n, "mm", &r, 1, &out, &len), 0);
	REQUIRE(out);
	CHECK_EQ(criu_img_decode_mm(out, len, "mm", &mm), 0);
	CHECK_EQ(mm.nvmas, 2);
	if (mm.nvmas == 2) {
		CHECK_EQ(mm.vmas[0].start, 0x200000);
		CHECK_EQ(mm.vmas[0].end, 0x600000);
		CHECK_EQ(mm.vmas[0].status, filep);
		CHECK_EQ(mm.vmas[0].flags, 0x02); /* MAP_ANONYMOUS gone, MAP_PRIVATE kept */
		CHECK_EQ(mm.vmas[0].shmid, 42);
		CHECK_EQ(mm.vmas[0].pgoff, 0x1000);
		CHECK_EQ(mm.vmas[0].fd, -1);
		CHECK_EQ(mm.vmas[1].status, filep); /* untouched */
	}
	criu_img_mm_release(&mm);
	/* madv (field 9, 0x4000) kept and fdflags (field 10) 0: the bytes 0x48 0x80 0x80
	 * 0x01 and 0x50 0x00 are in the rewritten VMA. */
	CHECK(memmem(out, len, "\x48\x80\x80\x01", 4) != NULL);
	CHECK(memmem(out, len, "\x50\x00", 2) != NULL);
	/* Everything after the VMAs as it was. */
	CHECK(len > 2 && out[len - 2] == 0x78 && out[len - 1] == 1);
	free(out);

	r.start = 0x300000; /* no VMA starts there */
	CHECK_EQ(criu_img_mm_remap(f.p, f.n, "mm", &r, 1, &out, &len), -ENOENT);
	r.start = 0x600000; /* already a file mapping */
	CHECK_EQ(criu_img_mm_remap(f.p, f.n, "mm", &r, 1, &out, &len), -ENOENT);
	r.start = 0x200000;
	CHECK_EQ(criu_img_mm_remap(f.p, f.n - 3, "mm", &r, 1, &out, &len), -EINVAL);
	CHECK_EQ(criu_img_mm_remap(f.p, f.n, "mm", NULL, 0, &out, &len), 0);
	CHECK_EQ(len, f.n);
	CHECK(out && !memcmp(out, f.p, f.n)); /* nothing to remap: the same bytes */
	free(out);

	/* An mm entry with no fields at all: an empty body, copied from NULL
	 * (undefined for memcpy, even of 0 bytes: UBSan's nonnull-attribute). */
	m.n = 0;
	file_start(&f, CRIU_MM_MAGIC);
	file_msg(&f, &m);
	CHECK_EQ(criu_img_mm_remap(f.p, f.n, "mm", NULL, 0, &out, &len), 0);
	CHECK_EQ(len, f.n);
	CHECK(out && !memcmp(out, f.p, f.n));
	free(out);
}

static void test_files(void)
{
	struct buf f, e;
	uint8_t *b;
	size_t n;
	uint32_t max = 0;

	file_start(&f, CRIU_FILES_MAGIC);
	for (uint32_t id = 3; id <= 7; id += 4) {
		e.n = 0;
		put_field(&e, 1, 2); /* PIPE */
		put_field(&e, 2, id);
		file_msg(&f, &e);
	}
	CHECK_EQ(criu_img_files_max_id(f.p, f.n, "files.img", &max), 0);
	CHECK_EQ(max, 7);
	b = malloc(f.n);
	REQUIRE(b);
	memcpy(b, f.p, f.n);
	n = f.n;
	CHECK_EQ(criu_img_files_append_reg(&b, &n, 8, "/.thaw/1-7f00", -1, 1 << 20, 0100644), 0);
	CHECK(n > f.n && !memcmp(b, f.p, f.n));
	CHECK_EQ(criu_img_files_max_id(b, n, "files.img", &max), 0);
	CHECK_EQ(max, 8);
	CHECK(memmem(b, n, "/.thaw/1-7f00", 13) != NULL);
	CHECK(memmem(b, n, "\x38\x01", 2) != NULL); /* mnt_id -1: sint32 zigzag 1 */
	free(b);
	/* An entry without an id, and a truncated file. */
	e.n = 0;
	put_field(&e, 1, 1);
	file_msg(&f, &e);
	CHECK_EQ(criu_img_files_max_id(f.p, f.n, "files.img", &max), -EINVAL);
	CHECK_EQ(criu_img_files_max_id(f.p, f.n - 1, "files.img", &max), -EINVAL);
}

static void test_mount_id(void)
{
	const char *points[] = { "/", "/.thaw", "/.thaw/x" };
	struct buf f, e;
	uint32_t id = 0;

	file_start(&f, CRIU_MNTS_MAGIC);
	for (uint32_t i = 0; i < 3; i++) {
		e.n = 0;
		put_field(&e, 1, 5);
		put_field(&e, 2, 70 + i);
		put_bytes(&e, 7, points[i], strlen(points[i]));
		file_msg(&f, &e);
	}
	CHECK_EQ(criu_img_mount_id(f.p, f.n, "mnts", "/.thaw", &id), 0);
	CHECK_EQ(id, 71);
	CHECK_EQ(criu_img_mount_id(f.p, f.n, "mnts", "/.tha", &id), -ENOENT);
	CHECK_EQ(criu_img_mount_id(f.p, f.n, "mnts", "/nothing", &id), -ENOENT);
	CHECK_EQ(criu_img_mount_id(f.p, f.n - 2, "mnts", "/.thaw/x", &id), -EINVAL);
	CHECK_EQ(criu_img_mount_id(f.p, 4, "mnts", "/.thaw", &id), -EINVAL);
}

int main(void)
{
	test_mm_remap();
	test_files();
	test_mount_id();
	if (!check_failures)
		printf("test_mapped_image: all passed\n");
	return check_failures ? 1 : 0;
}
