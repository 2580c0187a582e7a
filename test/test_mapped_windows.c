/* SPDX-License-Identifier: Apache-2.0 */
/* test_mapped_windows.c — mapped_build_windows, with the pages written through
 * its windows afterwards, makes the same mapped image as mapped_build's copy.
 *
 * The image is synthetic, built here field by field (as test_mapped_image.c
 * builds its messages), with two processes:
 *   pid 1 (pages-7.img): two large private anonymous VMAs side by side, the
 *     first the heap and not 2 MiB-aligned; a pagemap entry straddles them,
 *     another straddles the small VMA below and the first, and the first
 *     has a run of absent pages (a hole in its memory file).  Not mapped: the
 *     small VMA (below MIN_BYTES), a file mapping with a lazy page (not in
 *     the pages file) and a stack.
 *   pid 2 (pages-8.img): nothing to map, so its files are linked, not
 *     rewritten.
 * What it checks:
 *   - mapped_build of the complete image: each memory file holds the page
 *     at vaddr at (vaddr - base), the new pages file the pages kept, in
 *     pagemap order; the new pagemap and mm say so;
 *   - mapped_build_windows of the same image with its pages files still
 *     holes, then each window filled, half by memcpy (after
 *     MADV_POPULATE_WRITE) and half by mapped_window_pwrite, in 64 KiB chunks
 *     of which some of either kind straddle a piece boundary: image/ and mem/
 *     have the copy's names, sizes and bytes, and its holes;
 *   - a pages file shorter than its pagemap says: an error, nothing under
 *     out_dir and no windows; mapped_window_pwrite past the window's end: an
 *     error.
 */
#include "common/oci.h"
#include "common/util.h"
#include "restore/mapped.h"
#include "criu/criu_image.h"
#include "test/check.h"
#include "test/criu_pb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PG	   ((uint64_t)CRIU_PAGE_SIZE)
#define MIN_BYTES  (64u << 10)
#define CHUNK	   (64u << 10)
#define HUGE	   (2ull << 20)	 /* memory files start at the VMA rounded down to this */
#define GROW_SLACK (64ull << 30) /* and end in a hole this long (mapped.c) */

/* --- the image ---------------------------------------------------------------- */

#define ANON	  (CRIU_VMA_AREA_REGULAR | CRIU_VMA_ANON_PRIVATE)
#define FILEP	  (CRIU_VMA_AREA_REGULAR | CRIU_VMA_FILE_PRIVATE)
#define PRIV_ANON (MAP_PRIVATE | MAP_ANONYMOUS)

#define V0 0x20008000ull    /* small: 8 pages, below MIN_BYTES */
#define V1 0x20010000ull    /* the heap, 1024 pages; its file's base is 0x20000000 */
#define V2 (V1 + 1024 * PG) /* 512 pages, right after V1; base 0x20400000 */
#define V3 0x30000000ull    /* a file mapping */
#define V4 0x40000000ull    /* a stack: large, but not a candidate */
#define V5 0x50000000ull    /* pid 2's only VMA, small */

struct vma_def {
	uint64_t start, pages;
	uint32_t flags, status;
};

static const struct vma_def vmas1[] = {
    {V0, 8, PRIV_ANON, ANON},
    {V1, 1024, PRIV_ANON, ANON | CRIU_VMA_AREA_HEAP},
    {V2, 512, PRIV_ANON, ANON},
    {V3, 64, MAP_PRIVATE, FILEP},
    {V4, 64, PRIV_ANON | MAP_GROWSDOWN, ANON | CRIU_VMA_AREA_STACK},
};
static const struct vma_def vmas2[] = {{V5, 4, PRIV_ANON, ANON}};

/* A pagemap entry: flags 0 writes none (CRIU reads PE_PRESENT); nr: the count
 * in nr_pages (field 5, as CRIU 4 writes it), else in compat_nr_pages. */
struct pme_def {
	uint64_t vaddr, pages;
	uint32_t flags;
	bool nr;
};

static const struct pme_def pm1[] = {
    {V0, 8 + 100, 0, false},			 /* V0 (kept) then V1 (mapped) */
    {V1 + 150 * PG, 600, CRIU_PE_PRESENT, true}, /* after 50 absent pages */
    {V2 - 20 * PG, 50, 0, true},		 /* V1's last 20 pages, V2's first 30 */
    {V3, 10, CRIU_PE_PRESENT, false},
    {V3 + 20 * PG, 4, CRIU_PE_LAZY, true}, /* not in the pages file */
    {V4, 32, 0, false},
};
static const struct pme_def pm2[] = {{V5, 4, 0, true}};

#define PAGES1 (108 + 600 + 50 + 10 + 32) /* pages in pages-7.img */
#define PAGES2 4			  /* in pages-8.img */
#define MAPPED (100 + 600 + 20 + 30)	  /* of them, in V1 and V2 */
#define KEPT   (8 + 10 + 32)

static char root[64]; /* the test's directory, under /var/tmp */
static uint8_t pages1[PAGES1 * CRIU_PAGE_SIZE], pages2[PAGES2 * CRIU_PAGE_SIZE];

static void cleanup(void)
{
	if (root[0])
		rm_rf(root);
}

/* Bytes that differ from page to page and from file to file. */
static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 32);
	}
}

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	REQUIRE(fd >= 0);
	REQUIRE(write_all(fd, p, n) == 0);
	close(fd);
}

/* A pages file of size bytes that is all hole, as the tier has it before the
 * engine writes it. */
static void put_hole(const char *dir, const char *name, uint64_t size)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, (off_t)size) == 0);
	close(fd);
}

static void put_mm(const char *dir, uint32_t pid, const struct vma_def *v, size_t n)
{
	struct buf m = {.n = 0}, e, f;
	char name[32];

	put_field(&m, 1, 0x400000); /* mm_start_code, and so on: not read, kept */
	put_field(&m, 2, 0x401000);
	for (size_t i = 0; i < n; i++) {
		e.n = 0;
		put_field(&e, 1, v[i].start);
		put_field(&e, 2, v[i].start + v[i].pages * PG);
		put_field(&e, 3, 0);
		put_field(&e, 4, 0);
		put_field(&e, 5, PROT_READ | PROT_WRITE);
		put_field(&e, 6, v[i].flags);
		put_field(&e, 7, v[i].status);
		put_field(&e, 8, 1); /* fd -1, zigzag */
		put_bytes(&m, 14, e.p, e.n);
	}
	file_start(&f, CRIU_MM_MAGIC);
	file_msg(&f, &m);
	snprintf(name, sizeof(name), "mm-%u.img", pid);
	put_file(dir, name, f.p, f.n);
}

static void put_pagemap(const char *dir, uint32_t pid, uint32_t pages_id, const struct pme_def *pm,
			size_t n)
{
	struct buf e, f;
	char name[32];

	file_start(&f, CRIU_PAGEMAP_MAGIC);
	e.n = 0;
	put_field(&e, 1, pages_id);
	file_msg(&f, &e);
	for (size_t i = 0; i < n; i++) {
		e.n = 0;
		put_field(&e, 1, pm[i].vaddr);
		put_field(&e, 2, pm[i].nr ? 0 : pm[i].pages);
		if (pm[i].flags)
			put_field(&e, 4, pm[i].flags);
		if (pm[i].nr)
			put_field(&e, 5, pm[i].pages);
		file_msg(&f, &e);
	}
	snprintf(name, sizeof(name), "pagemap-%u.img", pid);
	put_file(dir, name, f.p, f.n);
}

enum pages_as {
	PAGES_WRITTEN, /* the pages files hold the pages */
	PAGES_HOLES,   /* at full size, not written yet */
	PAGES_SHORT,   /* pages-7.img a page shorter than its pagemap says */
	PAGES_EMPTY,   /* pages-7.img empty: the pagemap still names its pages */
};

static void make_image(const char *dir, enum pages_as how)
{
	static const char core[] = "not parsed: linked as it is";
	const char *points[] = {"/", OCI_MAPPED_DEST};
	struct buf e, f;

	REQUIRE(mkdir(dir, 0755) == 0);
	file_start(&f, CRIU_PSTREE_MAGIC);
	for (uint32_t pid = 1; pid <= 2; pid++) {
		e.n = 0;
		put_field(&e, 1, pid);
		put_field(&e, 2, pid - 1);
		put_field(&e, 3, 1);
		put_field(&e, 4, 1);
		file_msg(&f, &e);
	}
	put_file(dir, "pstree.img", f.p, f.n);
	put_mm(dir, 1, vmas1, ARRAY_SIZE(vmas1));
	put_mm(dir, 2, vmas2, ARRAY_SIZE(vmas2));
	put_pagemap(dir, 1, 7, pm1, ARRAY_SIZE(pm1));
	put_pagemap(dir, 2, 8, pm2, ARRAY_SIZE(pm2));

	file_start(&f, CRIU_FILES_MAGIC); /* one REG file, id 5: the new ones are 6, 7 */
	e.n = 0;
	put_field(&e, 1, 1);
	put_field(&e, 2, 5);
	file_msg(&f, &e);
	put_file(dir, "files.img", f.p, f.n);

	file_start(&f, CRIU_MNTS_MAGIC);
	for (uint32_t i = 0; i < ARRAY_SIZE(points); i++) {
		e.n = 0;
		put_field(&e, 1, 5);
		put_field(&e, 2, 70 + i);
		put_bytes(&e, 7, points[i], strlen(points[i]));
		file_msg(&f, &e);
	}
	put_file(dir, "mountpoints-12.img", f.p, f.n);
	put_file(dir, "core-1.img", core, sizeof(core));

	switch (how) {
	case PAGES_WRITTEN:
		put_file(dir, "pages-7.img", pages1, sizeof(pages1));
		put_file(dir, "pages-8.img", pages2, sizeof(pages2));
		return;
	case PAGES_HOLES:
		put_hole(dir, "pages-7.img", sizeof(pages1));
		break;
	case PAGES_SHORT:
		put_hole(dir, "pages-7.img", sizeof(pages1) - PG);
		break;
	case PAGES_EMPTY:
		put_hole(dir, "pages-7.img", 0);
		break;
	}
	put_hole(dir, "pages-8.img", sizeof(pages2));
}

/* --- what a mapped build must hold -------------------------------------------- */

static void path_of(char *path, size_t size, const char *dir, const char *sub, const char *name)
{
	snprintf(path, size, "%s/%s/%s", dir, sub, name);
}

/* The image's pages against the build in out: each page of V1 and V2 in its
 * memory file at (vaddr - base), the others in the new pages file, in order;
 * the new pagemap and mm as the rewrite makes them. */
static void check_layout(const char *out)
{
	static uint8_t kept[KEPT * CRIU_PAGE_SIZE];
	char path[PATH_MAX + 64];
	int fd1, fd2;
	uint64_t ioff = 0, nkept = 0, wrong = 0;
	uint8_t *buf = NULL, page[CRIU_PAGE_SIZE];
	size_t len;

	path_of(path, sizeof(path), out, "mem", "1-20010000");
	fd1 = open(path, O_RDONLY | O_CLOEXEC);
	path_of(path, sizeof(path), out, "mem", "1-20410000");
	fd2 = open(path, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd1 >= 0 && fd2 >= 0);
	for (size_t i = 0; i < ARRAY_SIZE(pm1); i++) {
		if (pm1[i].flags & CRIU_PE_LAZY)
			continue;
		for (uint64_t k = 0; k < pm1[i].pages; k++, ioff += PG) {
			uint64_t va = pm1[i].vaddr + k * PG;
			bool in1 = va >= V1 && va < V2, in2 = va >= V2 && va < V2 + 512 * PG;
			int fd = in1 ? fd1 : in2 ? fd2 : -1;
			uint64_t base = (in1 ? V1 : V2) & ~(HUGE - 1);

			if (fd < 0) {
				REQUIRE(nkept < KEPT);
				memcpy(kept + nkept++ * PG, pages1 + ioff, PG);
				continue;
			}
			CHECK_EQ(pread(fd, page, PG, (off_t)(va - base)), PG);
			if (memcmp(page, pages1 + ioff, PG) && !wrong++)
				fprintf(stderr, "%s: page %llx is not the image's\n", out,
					(unsigned long long)va);
		}
	}
	close(fd1);
	close(fd2);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(ioff, sizeof(pages1));
	CHECK_EQ(nkept, KEPT);

	path_of(path, sizeof(path), out, "image", "pages-7.img");
	REQUIRE(criu_img_read_file(path, sizeof(pages1), &buf, &len) == 0);
	CHECK(len == sizeof(kept) && !memcmp(buf, kept, len));
	free(buf);

	{ /* the pagemap keeps V0's part of the first entry, and the unmapped VMAs' */
		const uint64_t want[] = {V0, V3, V3 + 20 * PG, V4};
		struct criu_img_pagemap pm;
		uint64_t bytes = 0;

		path_of(path, sizeof(path), out, "image", "pagemap-1.img");
		REQUIRE(criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len) == 0);
		REQUIRE(criu_img_decode_pagemap(buf, len, "pagemap-1.img", &pm) == 0);
		free(buf);
		CHECK_EQ(pm.pages_id, 7);
		CHECK_EQ(pm.n, ARRAY_SIZE(want));
		for (size_t i = 0; i < pm.n && i < ARRAY_SIZE(want); i++)
			CHECK_EQ(pm.e[i].vaddr, want[i]);
		if (pm.n)
			CHECK_EQ(criu_img_pme_pages(&pm.e[0]), 8);
		CHECK(criu_img_pagemap_data_bytes(&pm, &bytes) == 0 && bytes == KEPT * PG);
		criu_img_pagemap_release(&pm);
	}
	{ /* V1 and V2 are now private mappings of their files, at their offsets */
		struct criu_img_mm mm;

		path_of(path, sizeof(path), out, "image", "mm-1.img");
		REQUIRE(criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len) == 0);
		REQUIRE(criu_img_decode_mm(buf, len, "mm-1.img", &mm) == 0);
		free(buf);
		REQUIRE(mm.nvmas == ARRAY_SIZE(vmas1));
		for (size_t i = 0; i < mm.nvmas; i++) {
			bool mapped = vmas1[i].start == V1 || vmas1[i].start == V2;

			CHECK_EQ(mm.vmas[i].status, mapped ? FILEP : vmas1[i].status);
			CHECK_EQ(mm.vmas[i].flags, mapped
						       ? vmas1[i].flags & ~(uint32_t)MAP_ANONYMOUS
						       : vmas1[i].flags);
			if (mapped)
				CHECK_EQ(mm.vmas[i].pgoff, 0x10000);
		}
		CHECK_EQ(mm.vmas[1].shmid, 6);
		CHECK_EQ(mm.vmas[2].shmid, 7);
		criu_img_mm_release(&mm);
	}
}

/* --- comparing two builds ----------------------------------------------------- */

static int not_dot(const struct dirent *de)
{
	return de->d_name[0] != '.';
}

/* The data extents of fd below end, as start/end pairs into seg: their count. */
static size_t data_segments(int fd, uint64_t end, uint64_t *seg, size_t max)
{
	size_t n = 0;
	off_t at = 0;

	while ((uint64_t)at < end && n + 2 <= max) {
		off_t d = lseek(fd, at, SEEK_DATA), h;

		if (d < 0 || (uint64_t)d >= end)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		REQUIRE(h > d);
		seg[n++] = (uint64_t)d;
		seg[n++] = MIN((uint64_t)h, end);
		at = h;
	}
	return n;
}

/* Memory files a and b: the same bytes over the VMA's extent (the file's
 * size less its tail hole: never read the 64 GiB), the same data and holes
 * there, and nothing but hole after it. */
static void same_mem_file(const char *a, const char *b, uint64_t size)
{
	static uint8_t x[1 << 20], y[1 << 20];
	uint64_t sa[64], sb[64], extent = size - GROW_SLACK;
	size_t na, nb;
	int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);

	REQUIRE(fa >= 0 && fb >= 0);
	REQUIRE(size > GROW_SLACK && extent % PG == 0);
	for (uint64_t at = 0; at < extent; at += sizeof(x)) {
		size_t n = (size_t)MIN((uint64_t)sizeof(x), extent - at);

		REQUIRE(pread(fa, x, n, (off_t)at) == (ssize_t)n);
		REQUIRE(pread(fb, y, n, (off_t)at) == (ssize_t)n);
		if (memcmp(x, y, n)) {
			fprintf(stderr, "%s and %s differ in [%llu, +%zu)\n", a, b,
				(unsigned long long)at, n);
			check_failures++;
		}
	}
	na = data_segments(fa, size, sa, ARRAY_SIZE(sa));
	nb = data_segments(fb, size, sb, ARRAY_SIZE(sb));
	CHECK(na > 0);
	CHECK(na == nb && !memcmp(sa, sb, na * sizeof(*sa)));
	CHECK(na && sa[na - 1] <= extent);
	errno = 0;
	CHECK(lseek(fb, (off_t)extent, SEEK_DATA) < 0 && errno == ENXIO);
	close(fa);
	close(fb);
}

/* Directories a and b (image/ or mem/ of two builds): the same names, sizes
 * and bytes. */
static void same_dir(const char *a, const char *b, bool mem)
{
	struct dirent **la = NULL, **lb = NULL;
	int na = scandir(a, &la, not_dot, alphasort), nb = scandir(b, &lb, not_dot, alphasort);

	REQUIRE(na > 0 && nb >= 0);
	CHECK_EQ(na, nb);
	for (int i = 0; i < na && i < nb; i++) {
		char pa[PATH_MAX + 256], pb[PATH_MAX + 256];
		struct stat sa, sb;
		char *ba = NULL, *bb = NULL;
		size_t la_n, lb_n;

		CHECK_STR(la[i]->d_name, lb[i]->d_name);
		snprintf(pa, sizeof(pa), "%s/%s", a, la[i]->d_name);
		snprintf(pb, sizeof(pb), "%s/%s", b, lb[i]->d_name);
		REQUIRE(stat(pa, &sa) == 0 && stat(pb, &sb) == 0);
		CHECK_EQ(sa.st_size, sb.st_size);
		if (sa.st_size != sb.st_size)
			continue;
		if (mem) {
			CHECK_EQ(sa.st_mode, sb.st_mode);
			same_mem_file(pa, pb, (uint64_t)sa.st_size);
			continue;
		}
		REQUIRE(read_file(pa, &ba, &la_n, 16 << 20) == 0);
		REQUIRE(read_file(pb, &bb, &lb_n, 16 << 20) == 0);
		if (la_n != lb_n || memcmp(ba, bb, la_n)) {
			fprintf(stderr, "%s and %s differ\n", pa, pb);
			check_failures++;
		}
		free(ba);
		free(bb);
	}
	for (int i = 0; i < na; i++)
		free(la[i]);
	for (int i = 0; i < nb; i++)
		free(lb[i]);
	free(la);
	free(lb);
}

/* --- the windows -------------------------------------------------------------- */

/* Does [off, off + len) of w hold the start of a piece other than its first? */
static bool straddles(const struct mapped_window *w, uint64_t off, uint64_t len)
{
	for (size_t i = 0; i < w->np; i++)
		if (w->p[i].ioff > off && w->p[i].ioff < off + len)
			return true;
	return false;
}

/* The pages file's bytes src into w: even 64 KiB chunks through the mapping,
 * odd ones with mapped_window_pwrite.  Counts the chunks of each kind that
 * straddle two pieces, which the fixture must have. */
static void fill_window(const struct mapped_window *w, const uint8_t *src, int *by_copy,
			int *by_pwrite)
{
	for (uint64_t off = 0, k = 0; off < w->len; off += CHUNK, k++) {
		size_t n = (size_t)MIN((uint64_t)CHUNK, w->len - off);

		if (k & 1) {
			*by_pwrite += straddles(w, off, n);
			CHECK_EQ(mapped_window_pwrite(w, src + off, n, off), 0);
			continue;
		}
		*by_copy += straddles(w, off, n);
		/* Populated first, as the header asks: a full file system is then
		 * an error here, not a SIGBUS in the memcpy. */
		REQUIRE(madvise(w->addr + off, n, MADV_POPULATE_WRITE) == 0);
		memcpy(w->addr + off, src + off, n);
	}
}

static void test_windows(void)
{
	char img[128], holes[128], copy[128], win_out[128], a[PATH_MAX], b[PATH_MAX];
	struct mapped_result res, res2;
	struct mapped_windows win;
	const struct mapped_window *w;
	int by_copy = 0, by_pwrite = 0, fd, ret;
	uint8_t tail[2 * CRIU_PAGE_SIZE] = {0};
	struct stat s1, s2;

	snprintf(img, sizeof(img), "%s/img", root);
	snprintf(holes, sizeof(holes), "%s/holes", root);
	snprintf(copy, sizeof(copy), "%s/copy", root);
	snprintf(win_out, sizeof(win_out), "%s/win", root);
	make_image(img, PAGES_WRITTEN);
	make_image(holes, PAGES_HOLES);

	/* The copy: the reference. */
	REQUIRE(mapped_build(img, copy, MIN_BYTES, &res) == 0);
	if (!res.vmas)
		fprintf(stderr, "nothing mapped: %s\n", res.why);
	REQUIRE(res.vmas >= 1);
	CHECK_EQ(res.vmas, 2);
	CHECK_EQ(res.processes, 1);
	CHECK_EQ(res.vmas_shared, 0);
	CHECK_EQ(res.mapped_bytes, MAPPED * PG);
	CHECK_EQ(res.kept_bytes, KEPT * PG);
	check_layout(copy);

	/* The windows, on the image whose pages are still to be written. */
	ret = mapped_build_windows(holes, win_out, MIN_BYTES, &res2, &win);
	if (ret == -EINVAL && strstr(res2.why, "MADV_POPULATE_WRITE"))
		SKIP(res2.why);
	if (ret)
		fprintf(stderr, "mapped_build_windows: %s (%s)\n", strerror(-ret), res2.why);
	REQUIRE(ret == 0);
	CHECK_EQ(res2.vmas, res.vmas);
	CHECK_EQ(res2.processes, res.processes);
	CHECK_EQ(res2.mapped_bytes, res.mapped_bytes);
	CHECK_EQ(res2.kept_bytes, res.kept_bytes);
	CHECK_EQ(res2.new_bytes, res.new_bytes);
	/* One window: pid 2 maps nothing, so pages-8.img is linked, not windowed. */
	CHECK_EQ(win.n, 1);
	w = mapped_window_of(&win, "pages-7.img");
	REQUIRE(w && w->addr);
	CHECK(mapped_window_of(&win, "pages-8.img") == NULL);
	CHECK_EQ(w->len, sizeof(pages1));

	fill_window(w, pages1, &by_copy, &by_pwrite);
	CHECK(by_copy > 0); /* else the fixture no longer tests what it says */
	CHECK(by_pwrite > 0);
	/* Past the end: refused.  The second's first page, inside, is the pages
	 * file's own last page, so what it writes before it fails is right. */
	memcpy(tail, pages1 + sizeof(pages1) - PG, PG);
	CHECK(mapped_window_pwrite(w, tail, PG, w->len) < 0);
	CHECK(mapped_window_pwrite(w, tail, 2 * PG, w->len - PG) < 0);
	CHECK(mapped_window_pwrite(w, tail, 1, w->len + (1ull << 30)) < 0);
	mapped_windows_release(&win);
	CHECK(win.n == 0 && win.w == NULL);

	/* pid 2's pages file, written where the engine writes it: image/ links it. */
	snprintf(a, sizeof(a), "%s/pages-8.img", holes);
	snprintf(b, sizeof(b), "%s/image/pages-8.img", win_out);
	REQUIRE(stat(a, &s1) == 0 && stat(b, &s2) == 0);
	CHECK(s1.st_ino == s2.st_ino);
	fd = open(a, O_WRONLY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	REQUIRE(pwrite_all(fd, pages2, sizeof(pages2), 0) == 0);
	close(fd);

	check_layout(win_out);
	snprintf(a, sizeof(a), "%s/image", copy);
	snprintf(b, sizeof(b), "%s/image", win_out);
	same_dir(a, b, false);
	snprintf(a, sizeof(a), "%s/mem", copy);
	snprintf(b, sizeof(b), "%s/mem", win_out);
	same_dir(a, b, true);
	{ /* the 50 absent pages of V1 read as a hole, not as written zeros */
		snprintf(b, sizeof(b), "%s/mem/1-20010000", win_out);
		fd = open(b, O_RDONLY | O_CLOEXEC);
		REQUIRE(fd >= 0);
		CHECK_EQ(lseek(fd, (off_t)(0x10000 + 100 * PG), SEEK_DATA),
			 (off_t)(0x10000 + 150 * PG));
		close(fd);
	}
}

/* A pages file shorter than its pagemap: no build, no windows, nothing left. */
static void test_short(enum pages_as how, const char *what)
{
	char img[128], out[128];
	struct mapped_result res;
	struct mapped_windows win;
	int ret;

	snprintf(img, sizeof(img), "%s/%s", root, what);
	snprintf(out, sizeof(out), "%s/%s-out", root, what);
	make_image(img, how);
	memset(&win, 0xa5, sizeof(win)); /* what it was must not matter */
	ret = mapped_build_windows(img, out, MIN_BYTES, &res, &win);
	if (ret >= 0)
		fprintf(stderr,
			"%s pages file: mapped_build_windows returned %d, %u VMAs, "
			"%zu windows\n",
			what, ret, res.vmas, win.n);
	CHECK(ret < 0);
	CHECK_EQ(res.vmas, 0);
	CHECK(win.n == 0 && win.w == NULL);
	errno = 0;
	CHECK(access(out, F_OK) < 0 && errno == ENOENT);
	mapped_windows_release(&win); /* after a failure: nothing to release, no harm */
	if (ret >= 0)
		rm_rf(out);
}

int main(void)
{
	fill_random(pages1, sizeof(pages1), 1);
	fill_random(pages2, sizeof(pages2), 2);
	snprintf(root, sizeof(root), "/var/tmp/thaw-test-mapped-windows-XXXXXX");
	REQUIRE(mkdtemp(root));
	atexit(cleanup);

	test_windows();
	test_short(PAGES_SHORT, "short");
	test_short(PAGES_EMPTY, "empty");
	if (!check_failures)
		printf("test_mapped_windows: all passed\n");
	return check_failures ? 1 : 0;
}
