/* SPDX-License-Identifier: Apache-2.0 */
/* mapped.c — the mapped variant of a snapshot's image; see mapped.h.
 *
 * Which VMAs.  Only a VMA whose status is exactly REGULAR|ANON_PRIVATE, with
 * HEAP at most (no stack, vdso or other kernel area), mapped MAP_PRIVATE|MAP_ANONYMOUS
 * without MAP_GROWSDOWN, whose pages are all in the pages file (none in a
 * parent image) and hold at least min_bytes.  And none that another process
 * of the image maps privately too: CRIU restores a forked child's VMA that
 * its parent also has by inheriting the parent's across fork, and a child
 * whose VMA became a file mapping while its parent's stayed anonymous (or
 * the other way round) would lose that sharing or read the wrong pages.
 *
 * The heap.  The brk heap (most of a Python process's memory) is mapped too:
 * CRIU restores the brk pointers with prctl whatever backs the VMA, a brk()
 * that grows the heap then adds anonymous memory after the file mapping (zero,
 * as glibc expects of fresh brk memory), and one that shrinks it unmaps.
 *
 * The rewrite.  A mapped VMA's VmaEntry becomes a private file mapping
 * (criu_img_mm_remap) of a new REG FileEntry appended to files.img, naming
 * /.thaw/<pid>-<addr> on the mount at OCI_MAPPED_DEST with the file's size
 * and mode (CRIU checks both at restore); its pagemap entries are dropped
 * (split where an entry straddles the VMA's ends) and its pages leave the
 * pages file.  CRIU then maps the file and copies nothing.  MAP_ANONYMOUS
 * must go from the flags too: left there, CRIU maps zeroed anonymous memory
 * and reports no error (docs/MAPPED.md).
 *
 * Growth.  A process may mremap() a mapping larger (glibc's realloc of a
 * large block does): an anonymous mapping grows with zero pages, a file
 * mapping with the file's bytes, and past the file's end with SIGBUS.  So
 * every mem file ends in a hole of GROW_SLACK bytes after its VMA: a grown
 * mapping reads zero there, as it would have.  The hole costs nothing until
 * it is read.
 */
#define LOG_PREFIX "mapped: "
#include "restore/mapped.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/util.h"
#include "store/criu_image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HUGE_ALIGN (2ull << 20)
#define GROW_SLACK (64ull << 30)
#define COPY_BUF   (8u << 20)
#define MEM_MODE   0644

struct proc {
	uint32_t pid;
	struct criu_img_mm mm;
	struct criu_img_pagemap pm;
	bool has_mm;
	bool *map;    /* per VMA: mapped */
	uint64_t *data; /* per VMA: bytes of its pages in the pages file */
	bool *bad;    /* per VMA: a page not in the pages file */
};

struct build {
	const char *image_dir, *out_dir;
	char img[PATH_MAX], mem[PATH_MAX];
	struct proc *procs;
	size_t nprocs;
	uint32_t mnt_id;
	uint8_t *files; /* files.img, growing */
	size_t files_len;
	uint32_t next_id;
	uint8_t *buf; /* COPY_BUF */
	struct mapped_result *res;
};

static bool candidate(const struct criu_img_vma *v)
{
	uint32_t st = v->status & ~CRIU_VMA_AREA_HEAP;

	return st == (CRIU_VMA_AREA_REGULAR | CRIU_VMA_ANON_PRIVATE) &&
	       (v->flags & (MAP_PRIVATE | MAP_ANONYMOUS)) == (MAP_PRIVATE | MAP_ANONYMOUS) &&
	       !(v->flags & (MAP_GROWSDOWN | MAP_SHARED));
}

static bool is_private(const struct criu_img_vma *v)
{
	return (v->status & (CRIU_VMA_ANON_PRIVATE | CRIU_VMA_FILE_PRIVATE)) != 0;
}

/* Does a process of the image other than self map [start, end) privately? */
static bool shared_with_other(const struct build *b, size_t self, uint64_t start, uint64_t end)
{
	for (size_t i = 0; i < b->nprocs; i++) {
		const struct criu_img_mm *mm = &b->procs[i].mm;

		if (i == self || !b->procs[i].has_mm)
			continue;
		for (size_t k = 0; k < mm->nvmas; k++)
			if (is_private(&mm->vmas[k]) && mm->vmas[k].start < end &&
			    start < mm->vmas[k].end)
				return true;
	}
	return false;
}

/* The VMA index holding addr, or -1. */
static long vma_index(const struct criu_img_mm *mm, uint64_t addr)
{
	size_t lo = 0, hi = mm->nvmas;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < mm->vmas[mid].start)
			hi = mid;
		else if (addr >= mm->vmas[mid].end)
			lo = mid + 1;
		else
			return (long)mid;
	}
	return -1;
}

static int read_image(const struct build *b, const char *name, uint8_t **buf, size_t *len)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", b->image_dir, name);
	return criu_img_read_file(path, CRIU_IMG_MAX_FILE, buf, len);
}

/* Read pstree, every process's mm and pagemap; count each VMA's data. */
static int load(struct build *b)
{
	struct criu_img_pstree t = { 0 };
	uint8_t *buf = NULL;
	size_t len;
	int ret;

	ret = read_image(b, "pstree.img", &buf, &len);
	if (!ret)
		ret = criu_img_decode_pstree(buf, len, "pstree.img", &t);
	free(buf);
	if (ret)
		return ret;
	b->procs = calloc(t.n, sizeof(*b->procs));
	if (!b->procs) {
		criu_img_pstree_release(&t);
		return -ENOMEM;
	}
	b->nprocs = t.n;
	for (size_t i = 0; i < t.n; i++)
		b->procs[i].pid = t.e[i].pid;
	criu_img_pstree_release(&t);

	for (size_t i = 0; i < b->nprocs; i++) {
		struct proc *p = &b->procs[i];
		char name[64];

		snprintf(name, sizeof(name), "mm-%u.img", p->pid);
		ret = read_image(b, name, &buf, &len);
		if (ret == -ENOENT)
			continue; /* a zombie, or a process CRIU keeps no memory of */
		if (!ret)
			ret = criu_img_decode_mm(buf, len, name, &p->mm);
		free(buf);
		buf = NULL;
		if (ret)
			return ret;
		p->has_mm = true;
		snprintf(name, sizeof(name), "pagemap-%u.img", p->pid);
		ret = read_image(b, name, &buf, &len);
		if (!ret)
			ret = criu_img_decode_pagemap(buf, len, name, &p->pm);
		free(buf);
		buf = NULL;
		if (ret)
			return ret;
		p->map = calloc(p->mm.nvmas + 1, sizeof(*p->map));
		p->data = calloc(p->mm.nvmas + 1, sizeof(*p->data));
		p->bad = calloc(p->mm.nvmas + 1, sizeof(*p->bad));
		if (!p->map || !p->data || !p->bad)
			return -ENOMEM;
		for (size_t k = 0; k < p->pm.n; k++) {
			const struct criu_img_pagemap_entry *e = &p->pm.e[k];
			uint64_t a = e->vaddr, end = a + criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
			bool in_file = criu_img_pme_in_pages_file(e);

			while (a < end) {
				long v = vma_index(&p->mm, a);
				uint64_t stop = v < 0 ? a + CRIU_PAGE_SIZE
						      : (p->mm.vmas[v].end < end ? p->mm.vmas[v].end
										  : end);

				if (v >= 0 && in_file)
					p->data[v] += stop - a;
				else if (v >= 0)
					p->bad[v] = true;
				a = stop;
			}
		}
	}
	return 0;
}

/* Choose the VMAs to map; 0, or -ENODATA with res->why when there are none. */
static int choose(struct build *b, uint64_t min_bytes)
{
	struct mapped_result *res = b->res;
	uint64_t largest = 0;

	for (size_t i = 0; i < b->nprocs; i++) {
		struct proc *p = &b->procs[i];
		bool any = false;

		for (size_t k = 0; p->has_mm && k < p->mm.nvmas; k++) {
			const struct criu_img_vma *v = &p->mm.vmas[k];

			if (!candidate(v) || p->bad[k] || p->data[k] < min_bytes)
				continue;
			if (shared_with_other(b, i, v->start, v->end)) {
				res->vmas_shared++;
				continue;
			}
			if (p->data[k] > largest)
				largest = p->data[k];
			p->map[k] = any = true;
			res->vmas++;
			res->mapped_bytes += p->data[k];
		}
		res->processes += any;
	}
	if (res->vmas)
		return 0;
	if (res->vmas_shared)
		snprintf(res->why, sizeof(res->why),
			 "its %u large private mappings are each shared with a forked process",
			 res->vmas_shared);
	else
		snprintf(res->why, sizeof(res->why),
			 "no private anonymous mapping holds %llu KiB of pages or more",
			 (unsigned long long)(min_bytes >> 10));
	return -ENODATA;
}

int mapped_mount_id(const char *image_dir, uint32_t *mnt_id)
{
	DIR *d = opendir(image_dir);
	struct dirent *de;
	int ret = -ENOENT;

	if (!d) {
		ret = -errno;
		pr_perror("open %s", image_dir);
		return ret;
	}
	while (ret == -ENOENT && (de = readdir(d))) {
		char path[PATH_MAX + 256];
		uint8_t *buf = NULL;
		size_t len;

		if (strncmp(de->d_name, "mountpoints-", 12))
			continue;
		snprintf(path, sizeof(path), "%s/%s", image_dir, de->d_name);
		ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len);
		if (!ret)
			ret = criu_img_mount_id(buf, len, de->d_name, OCI_MAPPED_DEST, mnt_id);
		free(buf);
	}
	closedir(d);
	return ret;
}

/* The mount the memory files are on, from the image's mountpoints. */
static int find_mount(struct build *b)
{
	int ret = mapped_mount_id(b->image_dir, &b->mnt_id);

	if (ret == -ENOENT)
		snprintf(b->res->why, sizeof(b->res->why),
			 "the snapshot has no %s mount (it was taken before mapped restore)",
			 OCI_MAPPED_DEST);
	return ret;
}

/* Copy len bytes from in at *ioff to out at ooff. */
static int copy_range(struct build *b, int in, uint64_t ioff, int out, uint64_t ooff, uint64_t len)
{
	while (len) {
		size_t n = len < COPY_BUF ? (size_t)len : COPY_BUF;
		ssize_t r = pread(in, b->buf, n, (off_t)ioff), w;

		if (r <= 0) {
			int err = r < 0 ? -errno : -EIO;

			pr_err("read of the pages file at %llu: %s", (unsigned long long)ioff,
			       r < 0 ? strerror(errno) : "it ends early");
			return err;
		}
		w = pwrite(out, b->buf, (size_t)r, (off_t)ooff);
		if (w != r) {
			int err = w < 0 ? -errno : -EIO;

			pr_err("write of a memory file: %s", w < 0 ? strerror(errno) : "short");
			return err;
		}
		ioff += (uint64_t)r;
		ooff += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

static int write_whole(const char *path, const uint8_t *buf, size_t len)
{
	return write_file_atomic(path, (const char *)buf, len, 0644);
}

/* One process with mapped VMAs: its memory files, pagemap, pages file, mm. */
static int rewrite_proc(struct build *b, struct proc *p)
{
	struct criu_img_vma_remap *rm = NULL;
	struct criu_img_pagemap npm = { .pages_id = p->pm.pages_id };
	int *mem_fd = NULL, in = -1, out = -1, ret = 0;
	uint64_t *base = NULL, ioff = 0, ooff = 0;
	size_t nrm = 0, cap = 0, len;
	char path[PATH_MAX + 64];
	uint8_t *buf = NULL;

	mem_fd = malloc(p->mm.nvmas * sizeof(*mem_fd));
	base = calloc(p->mm.nvmas, sizeof(*base));
	rm = calloc(p->mm.nvmas, sizeof(*rm));
	if (!mem_fd || !base || !rm) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < p->mm.nvmas; k++)
		mem_fd[k] = -1;
	/* The memory files, and their file entries. */
	for (size_t k = 0; k < p->mm.nvmas; k++) {
		const struct criu_img_vma *v = &p->mm.vmas[k];
		char name[64], inner[128];
		uint64_t size;
		struct stat st;

		if (!p->map[k])
			continue;
		base[k] = v->start & ~(HUGE_ALIGN - 1);
		size = v->end - base[k] + GROW_SLACK;
		snprintf(name, sizeof(name), "%u-%llx", p->pid, (unsigned long long)v->start);
		snprintf(path, sizeof(path), "%s/%s", b->mem, name);
		mem_fd[k] = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, MEM_MODE);
		if (mem_fd[k] < 0 || fchmod(mem_fd[k], MEM_MODE) || ftruncate(mem_fd[k], (off_t)size) ||
		    fstat(mem_fd[k], &st)) {
			ret = -errno;
			pr_perror("memory file %s", path);
			goto out;
		}
		snprintf(inner, sizeof(inner), "%s/%s", OCI_MAPPED_DEST, name);
		rm[nrm] = (struct criu_img_vma_remap){ v->start, b->next_id, v->start - base[k] };
		ret = criu_img_files_append_reg(&b->files, &b->files_len, b->next_id, inner,
						(int32_t)b->mnt_id, size, st.st_mode);
		if (ret)
			goto out;
		b->next_id++;
		nrm++;
	}
	/* The pages: into the memory files, or kept in the new pages file. */
	snprintf(path, sizeof(path), "%s/pages-%u.img", b->image_dir, p->pm.pages_id);
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/pages-%u.img", b->img, p->pm.pages_id);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		ret = -errno;
		pr_perror("create %s", path);
		goto out;
	}
	for (size_t i = 0; i < p->pm.n; i++) {
		const struct criu_img_pagemap_entry *e = &p->pm.e[i];
		uint64_t a = e->vaddr, end = a + criu_img_pme_pages(e) * CRIU_PAGE_SIZE;
		bool in_file = criu_img_pme_in_pages_file(e);

		/* Split at VMA ends: each piece is mapped or kept whole. */
		while (a < end) {
			long v = vma_index(&p->mm, a);
			uint64_t stop = v < 0 ? end : (p->mm.vmas[v].end < end ? p->mm.vmas[v].end : end);

			if (v < 0) { /* no VMA (CRIU would refuse): kept up to the next VMA */
				for (size_t k = 0; k < p->mm.nvmas; k++)
					if (p->mm.vmas[k].start > a && p->mm.vmas[k].start < stop)
						stop = p->mm.vmas[k].start;
			}
			if (v >= 0 && p->map[v]) {
				ret = copy_range(b, in, ioff, mem_fd[v], a - base[v], stop - a);
			} else {
				struct criu_img_pagemap_entry ne = *e;
				uint64_t pages = (stop - a) / CRIU_PAGE_SIZE;

				ne.vaddr = a;
				if (ne.has_nr_pages) {
					ne.nr_pages = pages;
				} else if (pages > UINT32_MAX) {
					ret = -EOVERFLOW;
				} else {
					ne.compat_nr_pages = (uint32_t)pages;
				}
				if (!ret && cap == npm.n) {
					struct criu_img_pagemap_entry *ge;

					cap = cap ? cap * 2 : 64;
					ge = realloc(npm.e, cap * sizeof(*npm.e));
					if (!ge)
						ret = -ENOMEM;
					else
						npm.e = ge;
				}
				if (!ret) {
					npm.e[npm.n++] = ne;
					if (in_file) {
						ret = copy_range(b, in, ioff, out, ooff, stop - a);
						ooff += stop - a;
						b->res->kept_bytes += stop - a;
					}
				}
			}
			if (ret)
				goto out;
			if (in_file)
				ioff += stop - a;
			a = stop;
		}
	}
	b->res->new_bytes += ooff;
	/* The new pagemap and mm. */
	ret = criu_img_encode_pagemap(&npm, &buf, &len);
	if (ret)
		goto out;
	snprintf(path, sizeof(path), "%s/pagemap-%u.img", b->img, p->pid);
	ret = write_whole(path, buf, len);
	free(buf);
	buf = NULL;
	if (ret)
		goto out;
	{
		uint8_t *mm = NULL, *nmm = NULL;
		size_t mlen, nlen;
		char name[64];

		snprintf(name, sizeof(name), "mm-%u.img", p->pid);
		ret = read_image(b, name, &mm, &mlen);
		if (!ret)
			ret = criu_img_mm_remap(mm, mlen, name, rm, nrm, &nmm, &nlen);
		free(mm);
		if (!ret) {
			snprintf(path, sizeof(path), "%s/%s", b->img, name);
			ret = write_whole(path, nmm, nlen);
		}
		free(nmm);
	}
out:
	for (size_t k = 0; mem_fd && k < p->mm.nvmas; k++)
		if (mem_fd[k] >= 0)
			close(mem_fd[k]);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	free(npm.e);
	free(mem_fd);
	free(base);
	free(rm);
	return ret;
}

/* Was name written by the rewrite (so not to be linked from the original)? */
static bool rewritten(const struct build *b, const char *name)
{
	char own[64];

	if (!strcmp(name, "files.img"))
		return true;
	for (size_t i = 0; i < b->nprocs; i++) {
		const struct proc *p = &b->procs[i];
		bool any = false;

		for (size_t k = 0; p->has_mm && k < p->mm.nvmas; k++)
			any |= p->map[k];
		if (!any)
			continue;
		snprintf(own, sizeof(own), "mm-%u.img", p->pid);
		if (!strcmp(name, own))
			return true;
		snprintf(own, sizeof(own), "pagemap-%u.img", p->pid);
		if (!strcmp(name, own))
			return true;
		snprintf(own, sizeof(own), "pages-%u.img", p->pm.pages_id);
		if (!strcmp(name, own))
			return true;
	}
	return false;
}

/* Every file of the original that the rewrite left alone, hard-linked. */
static int link_rest(struct build *b)
{
	DIR *d = opendir(b->image_dir);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		ret = -errno;
		pr_perror("open %s", b->image_dir);
		return ret;
	}
	while (!ret && (de = readdir(d))) {
		char from[PATH_MAX + 256], to[PATH_MAX + 256];
		struct stat st;

		snprintf(from, sizeof(from), "%s/%s", b->image_dir, de->d_name);
		if (de->d_name[0] == '.' || lstat(from, &st) || !S_ISREG(st.st_mode) ||
		    rewritten(b, de->d_name))
			continue;
		snprintf(to, sizeof(to), "%s/%s", b->img, de->d_name);
		if (link(from, to) < 0) {
			ret = -errno;
			pr_perror("link %s to %s", from, to);
		}
	}
	closedir(d);
	return ret;
}

static void free_build(struct build *b)
{
	for (size_t i = 0; i < b->nprocs; i++) {
		criu_img_mm_release(&b->procs[i].mm);
		criu_img_pagemap_release(&b->procs[i].pm);
		free(b->procs[i].map);
		free(b->procs[i].data);
		free(b->procs[i].bad);
	}
	free(b->procs);
	free(b->files);
	free(b->buf);
}

int mapped_build(const char *image_dir, const char *out_dir, uint64_t min_bytes,
		 struct mapped_result *res)
{
	struct build b = { .image_dir = image_dir, .out_dir = out_dir, .res = res };
	char path[PATH_MAX + 64];
	bool made = false;
	uint32_t max_id;
	int ret;

	memset(res, 0, sizeof(*res));
	if (!min_bytes)
		min_bytes = MAPPED_MIN_BYTES_DEFAULT;
	if (snprintf(b.img, sizeof(b.img), "%s/image", out_dir) >= (int)sizeof(b.img) ||
	    snprintf(b.mem, sizeof(b.mem), "%s/mem", out_dir) >= (int)sizeof(b.mem))
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/pstree.img", image_dir);
	if (access(path, F_OK)) {
		snprintf(res->why, sizeof(res->why), "not a CRIU image (no pstree.img)");
		return 0;
	}
	ret = load(&b);
	if (ret)
		goto out;
	ret = find_mount(&b);
	if (!ret)
		ret = choose(&b, min_bytes);
	if (ret == -ENOENT || ret == -ENODATA) {
		res->vmas = 0;
		ret = 0;
		goto out;
	}
	if (ret)
		goto out;
	snprintf(path, sizeof(path), "%s/files.img", image_dir);
	ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &b.files, &b.files_len);
	if (!ret)
		ret = criu_img_files_max_id(b.files, b.files_len, "files.img", &max_id);
	if (ret)
		goto out;
	b.next_id = max_id + 1;
	b.buf = malloc(COPY_BUF);
	if (!b.buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (mkdir(out_dir, 0755) < 0) {
		ret = -errno;
		pr_perror("mkdir %s", out_dir);
		goto out;
	}
	made = true;
	if (mkdir(b.img, 0755) < 0 || mkdir(b.mem, 0755) < 0) {
		ret = -errno;
		pr_perror("mkdir under %s", out_dir);
		goto out;
	}
	for (size_t i = 0; i < b.nprocs && !ret; i++) {
		bool any = false;

		for (size_t k = 0; b.procs[i].has_mm && k < b.procs[i].mm.nvmas; k++)
			any |= b.procs[i].map[k];
		if (any)
			ret = rewrite_proc(&b, &b.procs[i]);
	}
	if (ret)
		goto out;
	snprintf(path, sizeof(path), "%s/files.img", b.img);
	ret = write_whole(path, b.files, b.files_len);
	if (!ret)
		ret = link_rest(&b);
	if (!ret) {
		res->new_bytes += res->mapped_bytes + b.files_len;
		pr_info("%s: %u VMAs of %u processes mapped (%llu MiB), %llu MiB left to copy",
			image_dir, res->vmas, res->processes,
			(unsigned long long)(res->mapped_bytes >> 20),
			(unsigned long long)(res->kept_bytes >> 20));
	}
out:
	if (ret && made)
		rm_rf(out_dir);
	if (ret) {
		snprintf(res->why, sizeof(res->why), "building the mapped image failed: %s",
			 strerror(-ret));
		res->vmas = 0;
	}
	free_build(&b);
	return ret;
}
