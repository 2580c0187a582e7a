/* SPDX-License-Identifier: Apache-2.0 */
/* criu_elide.c — zero-page elision in a CRIU image; see criu_elide.h.
 *
 * Which pages may go.  CRIU restores a private anonymous VMA by mapping fresh
 * anonymous memory (zero) and writing the pagemap's pages into it, so a zero
 * page missing from the pagemap reads zero as before.  Not so elsewhere:
 * a file-backed private mapping is restored by mapping the file, whose data
 * shows through a page missing from the pagemap; shared anonymous, SysV and
 * memfd memory have their own images (pagemap-shmem-*), and vdso/vvar/AIO
 * rings are the kernel's.  Only a VMA whose status is REGULAR|ANON_PRIVATE
 * (with STACK or HEAP at most) is considered; any other bit keeps its pages.
 *
 * Fork children.  CRIU restores a child's private VMA that has the same range
 * in its parent by inheriting the parent's mapping across fork (COW: see
 * vma_inherited() and premap in criu/mem.c) and then writing the child's own
 * pages over it; restore_priv_vma_content() then madvise(MADV_DONTNEED)s the
 * pages the parent restored and the child's pagemap lacks, which would make
 * a child's elided page read zero as it should.  We do not lean on that
 * last step: it is the detail of one restorer, and thaw restores images by
 * other paths too (lazy restore, our own page loading), where a page missing
 * from a child's pagemap may well show the ancestor's content.  So the rule
 * is the one that holds whatever fills the child's memory: a child's zero
 * page is elided only if no ancestor in pstree.img has a private mapping
 * (anonymous or file) overlapping that page, i.e. nothing can be inherited
 * there.  A root process has no ancestor in the image.  Pages kept by this
 * rule are counted in kept_inherited.
 *
 * Crash safety.  The kept pages are copied to a new pages-<id>.img (an id no
 * file in the directory has), fsynced; the new pagemap naming that id is
 * written beside the old one, fsynced and renamed over it — the commit — and
 * only then is the old pages file removed.  Before the rename the original
 * image is intact (plus a stray new pages file, removed on the error path);
 * after it the elided image is complete (plus, on a crash, the old pages
 * file, which nothing names).
 */
#define LOG_PREFIX "criu_elide: "
#include "criu/criu_elide.h"
#include "criu/criu_image.h"
#include "criu/criu_pagemap.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_PAGES 256 /* pages read at a time while scanning */

/* A process is rewritten only if at least this many pages go.  Rewriting
 * copies (and fsyncs) all its kept pages: hundreds of MiB to save a few
 * pages costs the snapshot more than restore gains, and the store already
 * keeps all-zero runs as holes. */
#define MIN_ELIDE_PAGES 256

enum keep_why {
	ELIDABLE,
	KEEP_FILE_PRIVATE,
	KEEP_SHARED,
	KEEP_SPECIAL,
	KEEP_INHERITED,
	KEEP_NO_VMA
};

struct proc {
	uint32_t pid, ppid;
	struct criu_img_mm mm;
	bool has_mm;
};

struct range {
	uint64_t start, end;
};

static enum keep_why vma_kind(const struct criu_img_vma *v)
{
	const uint32_t ok = CRIU_VMA_AREA_REGULAR | CRIU_VMA_ANON_PRIVATE | CRIU_VMA_AREA_STACK |
			    CRIU_VMA_AREA_HEAP;
	uint32_t s = v->status;

	if (s & CRIU_VMA_FILE_PRIVATE)
		return KEEP_FILE_PRIVATE;
	if (s & (CRIU_VMA_FILE_SHARED | CRIU_VMA_ANON_SHARED | CRIU_VMA_AREA_SYSVIPC |
		 CRIU_VMA_AREA_MEMFD))
		return KEEP_SHARED;
	if ((s & ok) != s || !(s & CRIU_VMA_AREA_REGULAR) || !(s & CRIU_VMA_ANON_PRIVATE))
		return KEEP_SPECIAL;
	return ELIDABLE;
}

static bool page_is_zero(const uint8_t *p)
{
	static const uint8_t zero[8];

	/* The first 8 bytes are zero and every byte equals the one 8 before it. */
	return !memcmp(p, zero, 8) && !memcmp(p, p + 8, CRIU_PAGE_SIZE - 8);
}

/* The VMA that holds addr, or NULL; vmas ascending and disjoint (checked). */
static const struct criu_img_vma *vma_at(const struct criu_img_mm *mm, uint64_t addr)
{
	size_t lo = 0, hi = mm->nvmas;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct criu_img_vma *v = &mm->vmas[mid];

		if (addr < v->start)
			hi = mid;
		else if (addr >= v->end)
			lo = mid + 1;
		else
			return v;
	}
	return NULL;
}

static bool overlaps(const struct range *r, size_t n, uint64_t start, uint64_t end)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].start < end && start < r[i].end)
			return true;
	return false;
}

/* The private mappings of p's ancestors, as ranges (you own *out). */
static int ancestor_ranges(const struct proc *procs, size_t nprocs, size_t self, struct range **out,
			   size_t *nout)
{
	struct range *r = NULL;
	size_t n = 0, cap = 0;
	uint32_t ppid = procs[self].ppid;

	*out = NULL;
	*nout = 0;
	/* At most nprocs steps: a cycle in a corrupt pstree must not loop. */
	for (size_t step = 0; ppid && step < nprocs; step++) {
		size_t a;

		for (a = 0; a < nprocs && procs[a].pid != ppid; a++)
			;
		if (a == nprocs)
			break; /* the parent is outside the image */
		for (size_t i = 0; procs[a].has_mm && i < procs[a].mm.nvmas; i++) {
			const struct criu_img_vma *v = &procs[a].mm.vmas[i];

			if (!(v->status & (CRIU_VMA_ANON_PRIVATE | CRIU_VMA_FILE_PRIVATE)))
				continue;
			if (ARRAY_GROW(r, cap, n + 1, 64)) {
				free(r);
				return -ENOMEM;
			}
			r[n++] = (struct range){v->start, v->end};
		}
		ppid = procs[a].ppid;
	}
	*out = r;
	*nout = n;
	return 0;
}

/* Copy len bytes at off of in to the end of out: in the kernel where it can
 * (copy_file_range), through buf where it cannot (another file system). */
static int copy_range(int in, uint64_t off, int out, uint64_t len, uint8_t *buf, size_t bufsz)
{
	while (len) {
		loff_t o = (loff_t)off;
		size_t n = len < (1u << 30) ? (size_t)len : 1u << 30;
		ssize_t r = copy_file_range(in, &o, out, NULL, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 &&
		    (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP))
			break; /* the rest through buf */
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	while (len) {
		size_t n = len < bufsz ? (size_t)len : bufsz;
		ssize_t r = pread(in, buf, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		int ret = write_all(out, buf, (size_t)r);
		if (ret)
			return ret;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

/* What the scan of one process's pages file needs, and what it counts. */
struct scan {
	const char *pages_path;
	int fd;
	uint8_t *buf; /* SCAN_PAGES pages */
	const struct criu_img_mm *mm;
	const struct range *anc; /* the ancestors' private mappings */
	size_t nanc;
	struct criu_elide_stats *st;
	uint64_t elided;
};

/* Why page va stays (ELIDABLE: it may go if it is zero). */
static enum keep_why page_kind(const struct scan *s, uint64_t va)
{
	const struct criu_img_vma *v = vma_at(s->mm, va);
	enum keep_why why = v ? vma_kind(v) : KEEP_NO_VMA;

	if (why == ELIDABLE && s->nanc && overlaps(s->anc, s->nanc, va, va + CRIU_PAGE_SIZE))
		why = KEEP_INHERITED;
	return why;
}

static void count_kept_zero(struct criu_elide_stats *st, enum keep_why why)
{
	st->kept_file_private += why == KEEP_FILE_PRIVATE;
	st->kept_shared += why == KEEP_SHARED;
	st->kept_special += why == KEEP_SPECIAL;
	st->kept_inherited += why == KEEP_INHERITED;
	st->kept_no_vma += why == KEEP_NO_VMA;
}

/* n pages at off of the pages file, into s->buf. */
static int read_pages(struct scan *s, uint64_t off, size_t n)
{
	ssize_t r;

	do
		r = pread(s->fd, s->buf, n * CRIU_PAGE_SIZE, (off_t)off);
	while (r < 0 && errno == EINTR);
	if (r == (ssize_t)(n * CRIU_PAGE_SIZE))
		return 0;
	pr_err("%s: cannot read %zu pages at offset %llu: %s", s->pages_path, n,
	       (unsigned long long)off, r < 0 ? strerror(errno) : "short file");
	return r < 0 ? -errno : -EINVAL;
}

/* The pagemap walk's step (criu_pagemap.h): e's pages, page by page, kept
 * in runs of those that are not zero or may not go. */
static int scan_entry(struct criu_pagemap_rewrite *rw, const struct criu_img_pagemap_entry *e,
		      uint64_t off, void *arg)
{
	struct scan *s = arg;
	uint64_t pages = criu_img_pme_pages(e);
	uint64_t run_start = 0, run_len = 0;
	int ret;

	if (!criu_img_pme_in_pages_file(e))
		return criu_pagemap_keep(rw, e->vaddr, pages, NULL);
	for (uint64_t done = 0; done < pages;) {
		size_t n = pages - done < SCAN_PAGES ? (size_t)(pages - done) : SCAN_PAGES;

		ret = read_pages(s, off, n);
		if (ret)
			return ret;
		for (size_t k = 0; k < n; k++) {
			uint64_t va = e->vaddr + (done + k) * CRIU_PAGE_SIZE;
			enum keep_why why = page_kind(s, va);
			bool zero = page_is_zero(s->buf + k * CRIU_PAGE_SIZE);

			if (zero && why == ELIDABLE) {
				s->elided++;
				if (run_len) {
					ret = criu_pagemap_keep(rw, run_start, run_len, NULL);
					if (ret)
						return ret;
					run_len = 0;
				}
				continue;
			}
			if (!run_len)
				run_start = va;
			run_len++;
			if (zero)
				count_kept_zero(s->st, why);
		}
		done += n;
		off += n * CRIU_PAGE_SIZE;
	}
	return run_len ? criu_pagemap_keep(rw, run_start, run_len, NULL) : 0;
}

/* Decide, page by page, what stays: fills rw (the new pagemap and where each
 * kept run comes from), *elided and the kept-counts of st. */
static int scan(const char *pages_path, int fd, const struct criu_img_pagemap *pm,
		const struct criu_img_mm *mm, const struct range *anc, size_t nanc,
		struct criu_pagemap_rewrite *rw, uint64_t *elided, struct criu_elide_stats *st)
{
	struct scan s = {pages_path, fd, NULL, mm, anc, nanc, st, 0};
	int ret;

	s.buf = malloc((size_t)SCAN_PAGES * CRIU_PAGE_SIZE);
	if (!s.buf) {
		memset(rw, 0, sizeof(*rw));
		ret = -ENOMEM;
	} else {
		ret = criu_pagemap_rewrite(pm, scan_entry, &s, rw);
	}
	free(s.buf);
	*elided = s.elided;
	if (ret == -ENOMEM)
		pr_err("out of memory planning the elision of %s", pages_path);
	return ret;
}

/* Elide one process's zero pages; *next_id is the next unused pages id. */
static int elide_proc(const char *dir, struct proc *procs, size_t nprocs, size_t self,
		      uint32_t *next_id, struct criu_elide_stats *st)
{
	char pm_path[PATH_MAX], old_pages[PATH_MAX], new_pages[PATH_MAX];
	struct criu_img_pagemap pm = {0};
	struct criu_pagemap_rewrite rw = {0};
	uint64_t elided = 0;
	struct range *anc = NULL;
	size_t nanc = 0, len = 0;
	uint8_t *raw = NULL, *enc = NULL, *cbuf = NULL;
	int fd = -1, nfd = -1, ret;
	bool made_new = false;
	uint64_t want, after = 0;
	struct stat sb, pmst;

	snprintf(pm_path, sizeof(pm_path), "%s/pagemap-%u.img", dir, procs[self].pid);
	ret = criu_img_read_file(pm_path, CRIU_IMG_MAX_FILE, &raw, &len);
	if (ret == -ENOENT) {
		ret = 0; /* a zombie: no memory */
		goto out;
	}
	if (ret || (ret = criu_img_decode_pagemap(raw, len, pm_path, &pm)))
		goto out;
	if (stat(pm_path, &pmst)) {
		ret = -errno;
		pr_perror("stat %s", pm_path);
		goto out;
	}
	if (!procs[self].has_mm) {
		ret = -EINVAL;
		pr_err("%s: process %u has a pagemap but no mm image", dir, procs[self].pid);
		goto out;
	}
	st->processes++;
	snprintf(old_pages, sizeof(old_pages), "%s/pages-%u.img", dir, pm.pages_id);
	fd = open(old_pages, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		ret = -errno;
		pr_perror("open %s", old_pages);
		goto out;
	}
	ret = criu_img_pagemap_data_bytes(&pm, &want);
	if (ret || (uint64_t)sb.st_size != want) {
		pr_err("%s: %lld bytes, but %s describes %llu", old_pages, (long long)sb.st_size,
		       pm_path, (unsigned long long)want);
		ret = -EINVAL;
		goto out;
	}
	st->bytes_before += want;
	ret = ancestor_ranges(procs, nprocs, self, &anc, &nanc);
	if (ret)
		goto out;
	ret = scan(old_pages, fd, &pm, &procs[self].mm, anc, nanc, &rw, &elided, st);
	if (ret)
		goto out;
	if (elided < MIN_ELIDE_PAGES) {
		st->kept_too_few += elided;
		st->bytes_after += want;
		goto out;
	}

	/* Write aside: the kept pages under a new id. */
	if (!*next_id) {
		ret = -EOVERFLOW;
		pr_err("%s: no pages id left", dir);
		goto out;
	}
	rw.to.pages_id = (*next_id)++;
	snprintf(new_pages, sizeof(new_pages), "%s/pages-%u.img", dir, rw.to.pages_id);
	nfd = open(new_pages, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, sb.st_mode & 07777);
	if (nfd < 0) {
		ret = -errno;
		pr_perror("create %s", new_pages);
		goto out;
	}
	made_new = true;
	cbuf = malloc(1 << 20);
	if (!cbuf) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < rw.to.n; i++) {
		const struct criu_img_pagemap_entry *e = &rw.to.e[i];
		uint64_t bytes = criu_img_pme_pages(e) * CRIU_PAGE_SIZE;

		if (!criu_img_pme_in_pages_file(e))
			continue;
		ret = copy_range(fd, rw.src[i], nfd, bytes, cbuf, 1 << 20);
		if (ret) {
			pr_err("copy pages into %s: %s", new_pages, strerror(-ret));
			goto out;
		}
		after += bytes;
	}
	if (fsync(nfd)) {
		ret = -errno;
		pr_perror("fsync %s", new_pages);
		goto out;
	}
	ret = criu_img_encode_pagemap(&rw.to, &enc, &len);
	if (ret)
		goto out;
	/* The commit: the pagemap now names the new pages file. */
	ret = write_file_atomic(pm_path, enc, len, pmst.st_mode & 07777);
	if (ret)
		goto out;
	made_new = false;
	if (unlink(old_pages))
		pr_warn("%s: cannot remove the old pages file %s (nothing names it): %s", dir,
			old_pages, strerror(errno));
	fsync_dir(dir);
	st->bytes_after += after;
	st->pages_elided += elided;
	st->processes_rewritten++;
	pr_info(
	    "process %u: %llu zero pages elided, pages-%u.img -> pages-%u.img (%llu -> %llu bytes)",
	    procs[self].pid, (unsigned long long)elided, pm.pages_id, rw.to.pages_id,
	    (unsigned long long)want, (unsigned long long)after);
out:
	if (made_new && unlink(new_pages))
		pr_warn("cannot remove %s after a failure: %s (the original image is intact)",
			new_pages, strerror(errno));
	if (nfd >= 0)
		close(nfd);
	if (fd >= 0)
		close(fd);
	free(cbuf);
	free(enc);
	free(raw);
	free(anc);
	criu_pagemap_rewrite_release(&rw);
	criu_img_pagemap_release(&pm);
	return ret;
}

/* The highest N of the directory's pages-N.img files, 0 if none. */
static int max_pages_id(const char *dir, uint32_t *max)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	*max = 0;
	if (!d) {
		int ret = -errno;

		pr_perror("open %s", dir);
		return ret;
	}
	while ((de = readdir(d))) {
		unsigned long id;
		char *end;

		if (strncmp(de->d_name, "pages-", 6))
			continue;
		errno = 0;
		id = strtoul(de->d_name + 6, &end, 10);
		if (!errno && strcmp(end, ".img") == 0 && id <= UINT32_MAX && id > *max)
			*max = (uint32_t)id;
	}
	closedir(d);
	return 0;
}

int criu_elide_zero_pages(const char *image_dir, struct criu_elide_stats *stp)
{
	struct criu_elide_stats st = {0};
	struct criu_img_pstree tree = {0};
	struct proc *procs = NULL;
	char path[PATH_MAX];
	uint8_t *raw = NULL;
	size_t len = 0;
	uint32_t next_id;
	int ret;

	snprintf(path, sizeof(path), "%s/pstree.img", image_dir);
	ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &raw, &len);
	if (ret) {
		if (ret == -ENOENT)
			pr_err("%s: no pstree.img: not a CRIU image", image_dir);
		goto out;
	}
	ret = criu_img_decode_pstree(raw, len, path, &tree);
	free(raw);
	raw = NULL;
	if (ret)
		goto out;
	procs = calloc(tree.n, sizeof(*procs));
	if (!procs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < tree.n; i++) {
		procs[i].pid = tree.e[i].pid;
		procs[i].ppid = tree.e[i].ppid;
		snprintf(path, sizeof(path), "%s/mm-%u.img", image_dir, procs[i].pid);
		ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &raw, &len);
		if (ret == -ENOENT)
			continue; /* no memory of its own */
		if (ret || (ret = criu_img_decode_mm(raw, len, path, &procs[i].mm)))
			goto out;
		free(raw);
		raw = NULL;
		procs[i].has_mm = true;
		for (size_t v = 1; v < procs[i].mm.nvmas; v++) {
			if (procs[i].mm.vmas[v].start < procs[i].mm.vmas[v - 1].end) {
				pr_err("%s: vmas not ascending and disjoint at %llx", path,
				       (unsigned long long)procs[i].mm.vmas[v].start);
				ret = -EINVAL;
				goto out;
			}
		}
	}
	ret = max_pages_id(image_dir, &next_id);
	if (ret)
		goto out;
	if (next_id == UINT32_MAX) {
		ret = -EOVERFLOW;
		pr_err("%s: no pages id left", image_dir);
		goto out;
	}
	next_id++;
	for (size_t i = 0; i < tree.n; i++) {
		ret = elide_proc(image_dir, procs, tree.n, i, &next_id, &st);
		if (ret)
			goto out;
	}
out:
	free(raw);
	for (size_t i = 0; procs && i < tree.n; i++)
		criu_img_mm_release(&procs[i].mm);
	free(procs);
	criu_img_pstree_release(&tree);
	if (stp)
		*stp = st;
	if (ret == -ENOMEM)
		pr_err("%s: out of memory", image_dir);
	return ret;
}
