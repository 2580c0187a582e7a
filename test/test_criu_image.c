/* SPDX-License-Identifier: Apache-2.0 */
/* test_criu_image.c — the CRIU image codec and zero elision on a real image.
 *
 * A small Python process tree is dumped with the real CRIU (--leave-running):
 * the parent holds written zeros and random data, its forked child has zeroed
 * memory the parent still holds non-zero.  The image must decode and add up
 * (pstree, mm, pagemap; each pages file as large as its pagemap says), the
 * pagemap must encode back to the same bytes, truncated and garbage files
 * must be refused; then elision on a copy: the parent's zero pages go, the
 * child's zeros over inherited data stay, and every page kept has the data it
 * had.  Skips (77) only when CRIU cannot run at all.
 */
#include "common/log.h"
#include "common/util.h"
#include "criu/criu_elide.h"
#include "criu/criu_image.h"
#include "test/check.h"

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZERO_MIB 8

static char criu[PATH_MAX];

static const char proc_py[] = "import os, sys, time\n"
			      "z = bytearray(ZERO_MIB << 20)\n"
			      "for i in range(0, len(z), 4096): z[i] = 1\n"
			      "for i in range(0, len(z), 4096): z[i] = 0\n"
			      "r = os.urandom(4 << 20)\n"
			      "d = bytearray(os.urandom(1 << 20))\n"
			      "rd, wr = os.pipe()\n"
			      "if os.fork() == 0:\n"
			      "    d[:] = bytes(len(d))\n"
			      "    os.write(wr, b'c')\n"
			      "    time.sleep(600); os._exit(0)\n"
			      "os.read(rd, 1)\n"
			      "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
			      "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
			      "time.sleep(600)\n";

static uint8_t *slurp(const char *path, size_t *len)
{
	uint8_t *b = NULL;

	if (criu_img_read_file(path, 1ull << 32, &b, len))
		return NULL;
	return b;
}

/* Decode a whole file with the decoder for its kind; 0 or -EINVAL. */
static int decode_as(const char *kind, const uint8_t *b, size_t len)
{
	int ret;

	if (!strcmp(kind, "pagemap")) {
		struct criu_img_pagemap pm;

		ret = criu_img_decode_pagemap(b, len, "test", &pm);
		if (!ret)
			criu_img_pagemap_release(&pm);
	} else if (!strcmp(kind, "mm")) {
		struct criu_img_mm mm;

		ret = criu_img_decode_mm(b, len, "test", &mm);
		if (!ret)
			criu_img_mm_release(&mm);
	} else if (!strcmp(kind, "pstree")) {
		struct criu_img_pstree t;

		ret = criu_img_decode_pstree(b, len, "test", &t);
		if (!ret)
			criu_img_pstree_release(&t);
	} else {
		struct criu_img_inventory inv;

		ret = criu_img_decode_inventory(b, len, "test", &inv);
	}
	return ret;
}

/* Every cut of the file inside its header or a message is refused; a cut at
 * a message boundary may be accepted (fewer entries).  Garbage is refused. */
static void check_hostile(const char *kind, const uint8_t *b, size_t len)
{
	uint8_t *g = malloc(len + 64);
	size_t boundary = 8; /* after the magic; inventory has 4 */

	REQUIRE(g);
	if (!strcmp(kind, "inventory"))
		boundary = 4;
	CHECK_EQ(decode_as(kind, b, len), 0);
	for (size_t cut = 0; cut < len; cut++) {
		int ret = decode_as(kind, b, cut);
		bool at_boundary = false;

		for (size_t o = boundary; o <= cut;) {
			if (o == cut) {
				at_boundary = true;
				break;
			}
			if (len - o < 4)
				break;
			o += 4 + ((size_t)b[o] | (size_t)b[o + 1] << 8 | (size_t)b[o + 2] << 16 |
				  (size_t)b[o + 3] << 24);
		}
		/* The first message (head/entry) is required in all four kinds. */
		if (!at_boundary || cut <= boundary) {
			if (ret == 0) {
				fprintf(stderr, "%s cut at %zu of %zu accepted\n", kind, cut, len);
				check_failures++;
				break;
			}
		}
	}
	/* A wrong magic, a length past the end, a bad wire type. */
	memcpy(g, b, len);
	g[0] ^= 0xff;
	CHECK(decode_as(kind, g, len) != 0);
	memcpy(g, b, len);
	g[boundary + 3] = 0x7f; /* first message's length: huge */
	CHECK(decode_as(kind, g, len) != 0);
	memcpy(g, b, len);
	g[boundary + 4] = (uint8_t)((g[boundary + 4] & ~7) | 3); /* group wire type */
	CHECK(decode_as(kind, g, len) != 0);
	/* Random bytes after a valid header. */
	srand(7);
	for (int round = 0; round < 200; round++) {
		size_t n = boundary + (size_t)(rand() % 64);

		memcpy(g, b, boundary);
		for (size_t i = boundary; i < n; i++)
			g[i] = (uint8_t)rand();
		decode_as(kind, g, n); /* must not crash; ASan/UBSan builds check the rest */
	}
	free(g);
}

static pid_t start_tree(const char *dir, pid_t *py)
{
	char script[PATH_MAX], ready[PATH_MAX];
	FILE *f;
	pid_t pid;

	snprintf(script, sizeof(script), "%s/proc.py", dir);
	snprintf(ready, sizeof(ready), "%s/ready", dir);
	f = fopen(script, "w");
	REQUIRE(f);
	fprintf(f, "ZERO_MIB = %d\n", ZERO_MIB);
	fputs(proc_py, f);
	fclose(f);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		/* Its own session, no terminal: CRIU dumps it without --shell-job. */
		setsid();
		if (!freopen("/dev/null", "r", stdin) || !freopen("/dev/null", "w", stdout))
			_exit(127);
		execlp("python3", "python3", script, ready, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && access(ready, F_OK); i++)
		usleep(50 * 1000);
	REQUIRE(access(ready, F_OK) == 0);
	*py = pid;
	return pid;
}

/* The pages file's bytes at a vaddr of a pagemap, or NULL. */
static const uint8_t *page_at(const struct criu_img_pagemap *pm, const uint8_t *pages, uint64_t va)
{
	uint64_t off = 0;

	for (size_t i = 0; i < pm->n; i++) {
		uint64_t n = criu_img_pme_pages(&pm->e[i]);

		if (!criu_img_pme_in_pages_file(&pm->e[i]))
			continue;
		if (va >= pm->e[i].vaddr && va < pm->e[i].vaddr + n * CRIU_PAGE_SIZE)
			return pages + off + (va - pm->e[i].vaddr);
		off += n * CRIU_PAGE_SIZE;
	}
	return NULL;
}

struct img_proc {
	uint32_t pid, ppid;
	struct criu_img_mm mm;
	struct criu_img_pagemap pm;
	uint8_t *pages;
	size_t pages_len;
	uint8_t *pm_raw;
	size_t pm_len;
};

static void load_proc(const char *dir, struct img_proc *p)
{
	char path[PATH_MAX];
	uint8_t *raw;
	size_t len;
	uint64_t want;

	snprintf(path, sizeof(path), "%s/mm-%u.img", dir, p->pid);
	raw = slurp(path, &len);
	REQUIRE(raw);
	CHECK_EQ(criu_img_decode_mm(raw, len, path, &p->mm), 0);
	if (!strstr(dir, "elided"))
		check_hostile("mm", raw, len);
	free(raw);
	snprintf(path, sizeof(path), "%s/pagemap-%u.img", dir, p->pid);
	p->pm_raw = slurp(path, &p->pm_len);
	REQUIRE(p->pm_raw);
	REQUIRE(criu_img_decode_pagemap(p->pm_raw, p->pm_len, path, &p->pm) == 0);
	snprintf(path, sizeof(path), "%s/pages-%u.img", dir, p->pm.pages_id);
	p->pages = slurp(path, &p->pages_len);
	REQUIRE(p->pages);
	REQUIRE(criu_img_pagemap_data_bytes(&p->pm, &want) == 0);
	CHECK_EQ(p->pages_len, want);
	/* Every page lies in one of the process's VMAs (an entry may span adjacent ones). */
	for (size_t i = 0; i < p->pm.n; i++) {
		uint64_t a = p->pm.e[i].vaddr, n = criu_img_pme_pages(&p->pm.e[i]);

		for (uint64_t k = 0; k < n; k++) {
			bool in = false;

			for (size_t v = 0; v < p->mm.nvmas && !in; v++)
				in = a + k * CRIU_PAGE_SIZE >= p->mm.vmas[v].start &&
				     a + k * CRIU_PAGE_SIZE < p->mm.vmas[v].end;
			if (!in) {
				fprintf(stderr, "%s/pagemap-%u.img: page %llx in no vma\n", dir,
					p->pid, (unsigned long long)(a + k * CRIU_PAGE_SIZE));
				check_failures++;
				break;
			}
		}
	}
}

static void free_proc(struct img_proc *p)
{
	criu_img_mm_release(&p->mm);
	criu_img_pagemap_release(&p->pm);
	free(p->pages);
	free(p->pm_raw);
}

static const struct criu_img_vma *vma_of(const struct criu_img_mm *mm, uint64_t va)
{
	for (size_t v = 0; v < mm->nvmas; v++)
		if (va >= mm->vmas[v].start && va < mm->vmas[v].end)
			return &mm->vmas[v];
	return NULL;
}

/* A split entry's count goes where CRIU put the whole's (criu_img_pme_part). */
static void check_pme_part(void)
{
	struct criu_img_pagemap_entry v4 = { .vaddr = 0x1000, .has_nr_pages = true, .nr_pages = 9 },
				      both = v4, old = { .vaddr = 0x1000, .compat_nr_pages = 9 }, p;

	both.compat_nr_pages = 9;
	CHECK_EQ(criu_img_pme_part(&v4, 0x3000, 2, &p), 0);
	CHECK(p.vaddr == 0x3000 && p.has_nr_pages && p.nr_pages == 2 && !p.compat_nr_pages);
	CHECK_EQ(criu_img_pme_part(&v4, 0x3000, (uint64_t)UINT32_MAX + 1, &p), 0);
	CHECK(p.nr_pages == (uint64_t)UINT32_MAX + 1);
	CHECK_EQ(criu_img_pme_part(&both, 0x3000, 2, &p), 0);
	CHECK(p.nr_pages == 2 && p.compat_nr_pages == 2);
	CHECK_EQ(criu_img_pme_part(&old, 0x2000, 3, &p), 0);
	CHECK(p.vaddr == 0x2000 && !p.has_nr_pages && p.compat_nr_pages == 3);
	CHECK_EQ(criu_img_pme_part(&old, 0x2000, (uint64_t)UINT32_MAX + 1, &p), -EOVERFLOW);
}

int main(void)
{
	char tmpl[] = "/tmp/test_criu_image.XXXXXX", img[256], el[256], cmd[8192], path[PATH_MAX];
	const char *root = getenv("THAW_ROOT");
	struct criu_img_inventory inv;
	struct criu_img_pstree tree;
	struct criu_elide_stats st;
	struct img_proc procs[2] = {0}, elided[2] = {0};
	uint8_t *raw, *enc;
	size_t len, elen;
	pid_t py = -1;
	char *dir;

	log_set_level(LOG_INFO);
	check_pme_part();
	if (check_failures) /* before a skip can hide it */
		return 1;
	if (getenv("THAW_CRIU"))
		snprintf(criu, sizeof(criu), "%s", getenv("THAW_CRIU"));
	else
		snprintf(criu, sizeof(criu), "%s/.deps/criu-wrapper", root ? root : ".");
	if (geteuid() != 0)
		SKIP("needs root for criu dump");
	snprintf(cmd, sizeof(cmd), "%s --version >/dev/null 2>&1", criu);
	if (system(cmd) != 0)
		SKIP("criu cannot run");
	if (system("python3 -c 0") != 0)
		SKIP("no python3");

	dir = mkdtemp(tmpl);
	REQUIRE(dir);
	snprintf(img, sizeof(img), "%s/img", dir);
	snprintf(el, sizeof(el), "%s/elided", dir);
	REQUIRE(mkdir_p(img, 0755) == 0);
	start_tree(dir, &py);
	snprintf(cmd, sizeof(cmd),
		 "%s dump -t %d -D %s --leave-running -o dump.log -v4 && cp -a %s %s", criu, py,
		 img, img, el);
	int rc = system(cmd);
	kill(-py, SIGKILL);
	waitpid(py, NULL, 0);
	if (rc != 0) {
		snprintf(cmd, sizeof(cmd), "grep -i error %s/dump.log | tail -5", img);
		(void)system(cmd);
		REQUIRE(!"criu dump of the test process tree");
	}

	/* inventory, pstree */
	snprintf(path, sizeof(path), "%s/inventory.img", img);
	raw = slurp(path, &len);
	REQUIRE(raw);
	CHECK_EQ(criu_img_decode_inventory(raw, len, path, &inv), 0);
	CHECK_EQ(inv.img_version, 2); /* CRTOOLS_IMAGES_V1_1 */
	check_hostile("inventory", raw, len);
	free(raw);
	snprintf(path, sizeof(path), "%s/pstree.img", img);
	raw = slurp(path, &len);
	REQUIRE(raw);
	REQUIRE(criu_img_decode_pstree(raw, len, path, &tree) == 0);
	check_hostile("pstree", raw, len);
	free(raw);
	REQUIRE(tree.n == 2);
	CHECK_EQ(tree.e[0].pid, py);
	CHECK_EQ(tree.e[0].ppid, 0);
	CHECK_EQ(tree.e[1].ppid, py);
	CHECK(tree.e[0].nthreads >= 1 && tree.e[0].threads[0] == (uint32_t)py);
	CHECK_EQ(tree.e[0].sid, py);

	/* mm, pagemap, pages: consistent; the pagemap round-trips. */
	for (int i = 0; i < 2; i++) {
		procs[i].pid = tree.e[i].pid;
		procs[i].ppid = tree.e[i].ppid;
		load_proc(img, &procs[i]);
		CHECK(procs[i].mm.nvmas > 10);
		CHECK(procs[i].pm.n > 0);
		REQUIRE(criu_img_encode_pagemap(&procs[i].pm, &enc, &elen) == 0);
		CHECK(elen == procs[i].pm_len && !memcmp(enc, procs[i].pm_raw, elen));
		free(enc);
	}
	check_hostile("pagemap", procs[0].pm_raw, procs[0].pm_len);

	/* Elision on the copy. */
	REQUIRE(criu_elide_zero_pages(el, &st) == 0);
	printf(
	    "elision: %llu -> %llu bytes, %llu pages elided, kept zero pages: file-private %llu, "
	    "shared %llu, special %llu, inherited %llu, no vma %llu, too few %llu\n",
	    (unsigned long long)st.bytes_before, (unsigned long long)st.bytes_after,
	    (unsigned long long)st.pages_elided, (unsigned long long)st.kept_file_private,
	    (unsigned long long)st.kept_shared, (unsigned long long)st.kept_special,
	    (unsigned long long)st.kept_inherited, (unsigned long long)st.kept_no_vma,
	    (unsigned long long)st.kept_too_few);
	CHECK(st.pages_elided >= (ZERO_MIB << 20) / CRIU_PAGE_SIZE);
	CHECK_EQ(st.bytes_before - st.bytes_after, st.pages_elided * CRIU_PAGE_SIZE);
	CHECK_EQ(st.processes, 2);
	/* The child zeroed 1 MiB that its parent holds non-zero: kept. */
	CHECK(st.kept_inherited >= (1 << 20) / CRIU_PAGE_SIZE);
	for (int i = 0; i < 2; i++) {
		uint64_t gone = 0;

		elided[i].pid = procs[i].pid;
		load_proc(el, &elided[i]);
		/* Every page kept has its data; every page gone was zero, anonymous private,
		 * and (in the child) where the parent has no private mapping. */
		for (size_t e = 0; e < procs[i].pm.n; e++) {
			const struct criu_img_pagemap_entry *pe = &procs[i].pm.e[e];

			if (!criu_img_pme_in_pages_file(pe))
				continue;
			for (uint64_t k = 0; k < criu_img_pme_pages(pe); k++) {
				uint64_t va = pe->vaddr + k * CRIU_PAGE_SIZE;
				const uint8_t *a = page_at(&procs[i].pm, procs[i].pages, va);
				const uint8_t *b = page_at(&elided[i].pm, elided[i].pages, va);
				const struct criu_img_vma *v = vma_of(&procs[i].mm, va);
				static const uint8_t zero[CRIU_PAGE_SIZE];

				REQUIRE(a);
				if (b) {
					if (memcmp(a, b, CRIU_PAGE_SIZE)) {
						fprintf(stderr, "pid %u page %llx changed\n",
							procs[i].pid, (unsigned long long)va);
						check_failures++;
					}
					continue;
				}
				gone++;
				CHECK(!memcmp(a, zero, CRIU_PAGE_SIZE));
				CHECK(
				    v && (v->status & CRIU_VMA_ANON_PRIVATE) &&
				    !(v->status & (CRIU_VMA_FILE_PRIVATE | CRIU_VMA_ANON_SHARED)));
				if (i == 1)
					CHECK(!vma_of(&procs[0].mm, va));
			}
		}
		if (i == 0)
			CHECK(gone >= (ZERO_MIB << 20) / CRIU_PAGE_SIZE);
		if (gone)
			CHECK(elided[i].pm.pages_id != procs[i].pm.pages_id);
	}
	/* The old pages files are gone, nothing else changed. */
	snprintf(cmd, sizeof(cmd), "test ! -e %s/pages-%u.img", el, procs[0].pm.pages_id);
	CHECK_EQ(system(cmd), 0);
	snprintf(cmd, sizeof(cmd),
		 "cmp -s %s/mm-%u.img %s/mm-%u.img && cmp -s %s/core-%u.img %s/core-%u.img", img,
		 procs[0].pid, el, procs[0].pid, img, procs[0].pid, el, procs[0].pid);
	CHECK_EQ(system(cmd), 0);

	/* A second run has nothing left to elide and changes nothing. */
	REQUIRE(criu_elide_zero_pages(el, &st) == 0);
	CHECK_EQ(st.pages_elided, 0);
	CHECK_EQ(st.processes_rewritten, 0);

	/* A failure after the new pages file is written (the pagemap's temp file
	 * cannot be made: a directory is in its way) leaves the original image as
	 * it was, with no new file left behind. */
	snprintf(cmd, sizeof(cmd),
		 "rm -rf %s/roll && cp -a %s %s/roll && mkdir %s/roll/pagemap-%u.img.tmp.%d", dir,
		 img, dir, dir, procs[0].pid, (int)getpid());
	REQUIRE(system(cmd) == 0);
	snprintf(path, sizeof(path), "%s/roll", dir);
	CHECK(criu_elide_zero_pages(path, &st) != 0);
	snprintf(cmd, sizeof(cmd), "rmdir %s/roll/pagemap-%u.img.tmp.%d && diff -r %s %s/roll", dir,
		 procs[0].pid, (int)getpid(), img, dir);
	CHECK_EQ(system(cmd), 0);

	/* A pages file shorter than its pagemap says: refused, image untouched. */
	snprintf(cmd, sizeof(cmd), "truncate -s -4096 %s/pages-%u.img", img, procs[0].pm.pages_id);
	REQUIRE(system(cmd) == 0);
	CHECK(criu_elide_zero_pages(img, &st) != 0);
	snprintf(path, sizeof(path), "%s/pagemap-%u.img", img, procs[0].pid);
	raw = slurp(path, &len);
	CHECK(raw && len == procs[0].pm_len && !memcmp(raw, procs[0].pm_raw, len));
	free(raw);

	for (int i = 0; i < 2; i++) {
		free_proc(&procs[i]);
		free_proc(&elided[i]);
	}
	criu_img_pstree_release(&tree);
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
