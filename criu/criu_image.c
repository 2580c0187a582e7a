/* SPDX-License-Identifier: Apache-2.0 */
/* criu_image.c — CRIU image files: magic, message framing and a small strict
 * protobuf wire codec; see criu_image.h.
 *
 * Field numbers are those of CRIU's images/ protobuf files (4.x): inventory_entry,
 * pstree_entry, mm_entry with vma_entry, pagemap_head and pagemap_entry
 * (vaddr 1, compat_nr_pages 2, in_parent 3, flags 4, nr_pages 5).
 */
#define LOG_PREFIX "criu_image: "
#include "criu/criu_image.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { WT_VARINT = 0, WT_64 = 1, WT_LEN = 2, WT_32 = 5 };

/* A view of one message (or of the file), with where it lies in the file for errors. */
struct rd {
	const uint8_t *p;
	size_t len, off;
	size_t base; /* file offset of p[0] */
	const char *name;
};

#define rd_err(r, fmt, ...)                                                                        \
	pr_err("%s: offset %zu: " fmt, (r)->name ? (r)->name : "image", (r)->base + (r)->off,      \
	       ##__VA_ARGS__)

static int rd_u32le(struct rd *r, uint32_t *v, const char *what)
{
	if (r->len - r->off < 4) {
		rd_err(r, "truncated: %s needs 4 bytes, %zu left", what, r->len - r->off);
		return -EINVAL;
	}
	*v = (uint32_t)r->p[r->off] | (uint32_t)r->p[r->off + 1] << 8 |
	     (uint32_t)r->p[r->off + 2] << 16 | (uint32_t)r->p[r->off + 3] << 24;
	r->off += 4;
	return 0;
}

static int rd_varint(struct rd *r, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned i = 0; i < 10; i++) {
		if (r->off >= r->len) {
			rd_err(r, "truncated varint");
			return -EINVAL;
		}
		uint8_t c = r->p[r->off++];
		/* The 10th byte holds bit 63 only. */
		if (i == 9 && c > 1) {
			rd_err(r, "varint longer than 64 bits");
			return -EINVAL;
		}
		x |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	rd_err(r, "varint longer than 10 bytes");
	return -EINVAL;
}

struct field {
	uint32_t num;
	unsigned wt;
	uint64_t v;    /* varint, 64- or 32-bit value */
	struct rd sub; /* length-delimited payload */
	size_t at;     /* file offset of the key, for errors */
};

/* The next field of a message: 1 and *f, 0 at the end of the message, or -EINVAL. */
static int rd_field(struct rd *r, struct field *f)
{
	uint64_t key, l;

	if (r->off == r->len)
		return 0;
	f->at = r->base + r->off;
	if (rd_varint(r, &key))
		return -EINVAL;
	f->num = (uint32_t)(key >> 3);
	f->wt = key & 7;
	if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
		rd_err(r, "bad field number %llu", (unsigned long long)(key >> 3));
		return -EINVAL;
	}
	switch (f->wt) {
	case WT_VARINT:
		return rd_varint(r, &f->v) ? -EINVAL : 1;
	case WT_64:
	case WT_32: {
		size_t n = f->wt == WT_64 ? 8 : 4;

		if (r->len - r->off < n) {
			rd_err(r, "truncated %zu-byte field %u", n, f->num);
			return -EINVAL;
		}
		f->v = 0;
		for (size_t i = 0; i < n; i++)
			f->v |= (uint64_t)r->p[r->off + i] << (8 * i);
		r->off += n;
		return 1;
	}
	case WT_LEN:
		if (rd_varint(r, &l))
			return -EINVAL;
		if (l > r->len - r->off) {
			rd_err(r, "field %u: length %llu past the end of its message (%zu left)",
			       f->num, (unsigned long long)l, r->len - r->off);
			return -EINVAL;
		}
		f->sub = (struct rd){r->p + r->off, (size_t)l, 0, r->base + r->off, r->name};
		r->off += l;
		return 1;
	default:
		rd_err(r, "field %u: unsupported wire type %u", f->num, f->wt);
		return -EINVAL;
	}
}

static int want_wt(const struct field *f, unsigned wt, const char *name, const char *field)
{
	if (f->wt == wt)
		return 0;
	pr_err("%s: offset %zu: %s (field %u) has wire type %u, expected %u", name ? name : "image",
	       f->at, field, f->num, f->wt, wt);
	return -EINVAL;
}

static int want_u32(const struct field *f, const char *name, const char *field, uint32_t *out)
{
	if (want_wt(f, WT_VARINT, name, field))
		return -EINVAL;
	if (f->v > UINT32_MAX) {
		pr_err("%s: offset %zu: %s = %llu does not fit 32 bits", name ? name : "image",
		       f->at, field, (unsigned long long)f->v);
		return -EINVAL;
	}
	*out = (uint32_t)f->v;
	return 0;
}

static int want_u64(const struct field *f, const char *name, const char *field, uint64_t *out)
{
	if (want_wt(f, WT_VARINT, name, field))
		return -EINVAL;
	*out = f->v;
	return 0;
}

static int want_bool(const struct field *f, const char *name, const char *field, bool *out)
{
	if (want_wt(f, WT_VARINT, name, field))
		return -EINVAL;
	if (f->v > 1) {
		pr_err("%s: offset %zu: %s = %llu is not a bool", name ? name : "image", f->at,
		       field, (unsigned long long)f->v);
		return -EINVAL;
	}
	*out = f->v;
	return 0;
}

static int missing(const struct rd *m, const char *msg, const char *field)
{
	pr_err("%s: offset %zu: %s without its required %s", m->name ? m->name : "image", m->base,
	       msg, field);
	return -EINVAL;
}

/* Check the file's magic: common/service magic then type magic, or for
 * inventory.img (type == CRIU_INVENTORY_MAGIC) the type magic alone. */
static int rd_magic(struct rd *r, uint32_t type)
{
	uint32_t m;

	if (rd_u32le(r, &m, "the magic"))
		return -EINVAL;
	if (m == CRIU_IMG_COMMON_MAGIC || m == CRIU_IMG_SERVICE_MAGIC) {
		if (rd_u32le(r, &m, "the image type's magic"))
			return -EINVAL;
	}
	if (m != type) {
		r->off -= 4;
		rd_err(r, "magic 0x%08x, expected 0x%08x: not this kind of CRIU image", m, type);
		return -EINVAL;
	}
	return 0;
}

/* The next framed message: 1 and *msg, 0 at the end of the file, -EINVAL. */
static int rd_message(struct rd *r, struct rd *msg)
{
	uint32_t l;

	if (r->off == r->len)
		return 0;
	if (rd_u32le(r, &l, "a message's length"))
		return -EINVAL;
	if (l > r->len - r->off) {
		r->off -= 4;
		rd_err(r, "truncated: a message of %u bytes, %zu left in the file", l,
		       r->len - r->off - 4);
		return -EINVAL;
	}
	*msg = (struct rd){r->p + r->off, l, 0, r->base + r->off, r->name};
	r->off += l;
	return 1;
}

/* Grow *arr (of *cap elements of size sz) to hold n + 1.  The callers' counts are
 * bounded by the input's length: every element took at least one byte of it. */
static int grow(void **arr, size_t *cap, size_t n, size_t sz)
{
	int ret = array_grow(arr, cap, n + 1, sz, 16);

	if (ret)
		pr_err("out of memory for %zu image entries", n + 1);
	return ret;
}

int criu_img_read_in(const char *dir, const char *name, uint8_t **buf, size_t *len)
{
	char path[PATH_MAX];

	*buf = NULL;
	*len = 0;
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	return criu_img_read_file(path, CRIU_IMG_MAX_FILE, buf, len);
}

int criu_img_read_file(const char *path, size_t max, uint8_t **buf, size_t *len)
{
	int fd = -1, ret = 0;
	uint8_t *b = NULL;
	struct stat st;
	size_t got = 0;

	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret != -ENOENT)
			pr_perror("open %s", path);
		goto out;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		pr_perror("stat %s", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		pr_err("%s: %s (%lld bytes, at most %zu taken)", path,
		       S_ISREG(st.st_mode) ? "too large" : "not a regular file",
		       (long long)st.st_size, max);
		ret = -EFBIG;
		goto out;
	}
	b = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!b) {
		ret = -ENOMEM;
		pr_err("%s: out of memory for %lld bytes", path, (long long)st.st_size);
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, b + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			pr_perror("read %s", path);
			goto out;
		}
		if (n == 0)
			break; /* shrank meanwhile: take what is there */
		got += (size_t)n;
	}
	*buf = b;
	*len = got;
	b = NULL;
out:
	free(b);
	if (fd >= 0)
		close(fd);
	return ret;
}

int criu_img_decode_inventory(const uint8_t *buf, size_t len, const char *name,
			      struct criu_img_inventory *out)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	struct field f;
	bool has_version = false;
	int ret;

	memset(out, 0, sizeof(*out));
	if (rd_magic(&r, CRIU_INVENTORY_MAGIC))
		return -EINVAL;
	ret = rd_message(&r, &m);
	if (ret <= 0) {
		if (!ret)
			rd_err(&r, "no inventory entry");
		return -EINVAL;
	}
	while ((ret = rd_field(&m, &f)) > 0) {
		switch (f.num) {
		case 1:
			if (want_u32(&f, name, "img_version", &out->img_version))
				return -EINVAL;
			has_version = true;
			break;
		case 2:
			if (want_bool(&f, name, "fdinfo_per_id", &out->fdinfo_per_id))
				return -EINVAL;
			out->has_fdinfo_per_id = true;
			break;
		case 4:
			if (want_bool(&f, name, "ns_per_id", &out->ns_per_id))
				return -EINVAL;
			out->has_ns_per_id = true;
			break;
		case 8:
			if (want_u64(&f, name, "dump_uptime", &out->dump_uptime))
				return -EINVAL;
			out->has_dump_uptime = true;
			break;
		}
	}
	if (ret < 0)
		return -EINVAL;
	if (!has_version)
		return missing(&m, "inventory_entry", "img_version");
	if (r.off != r.len) {
		rd_err(&r, "%zu bytes after the inventory entry", r.len - r.off);
		return -EINVAL;
	}
	return 0;
}

void criu_img_pstree_release(struct criu_img_pstree *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->e[i].threads);
	free(t->e);
	t->e = NULL;
	t->n = 0;
}

/* A repeated uint32: one varint, or a packed run of them. */
static int add_u32s(const struct field *f, const char *name, const char *field, uint32_t **arr,
		    size_t *n, size_t *cap)
{
	uint32_t v;

	if (f->wt == WT_LEN) {
		struct rd s = f->sub;
		uint64_t x;

		while (s.off < s.len) {
			if (rd_varint(&s, &x))
				return -EINVAL;
			if (x > UINT32_MAX) {
				rd_err(&s, "%s = %llu does not fit 32 bits", field,
				       (unsigned long long)x);
				return -EINVAL;
			}
			if (grow((void **)arr, cap, *n, sizeof(**arr)))
				return -ENOMEM;
			(*arr)[(*n)++] = (uint32_t)x;
		}
		return 0;
	}
	if (want_u32(f, name, field, &v))
		return -EINVAL;
	if (grow((void **)arr, cap, *n, sizeof(**arr)))
		return -ENOMEM;
	(*arr)[(*n)++] = v;
	return 0;
}

static int decode_pstree_entry(struct rd *m, struct criu_img_pstree_entry *e)
{
	struct field f;
	unsigned seen = 0;
	size_t cap = 0;
	int ret;

	memset(e, 0, sizeof(*e));
	while ((ret = rd_field(m, &f)) > 0) {
		switch (f.num) {
		case 1:
			ret = want_u32(&f, m->name, "pid", &e->pid);
			break;
		case 2:
			ret = want_u32(&f, m->name, "ppid", &e->ppid);
			break;
		case 3:
			ret = want_u32(&f, m->name, "pgid", &e->pgid);
			break;
		case 4:
			ret = want_u32(&f, m->name, "sid", &e->sid);
			break;
		case 5:
			ret = add_u32s(&f, m->name, "threads", &e->threads, &e->nthreads, &cap);
			break;
		default:
			ret = 0;
		}
		if (ret)
			return ret;
		if (f.num <= 4)
			seen |= 1u << f.num;
	}
	if (ret < 0)
		return ret;
	if (seen != 0x1e)
		return missing(m, "pstree_entry", "pid, ppid, pgid and sid");
	return 0;
}

int criu_img_decode_pstree(const uint8_t *buf, size_t len, const char *name,
			   struct criu_img_pstree *out)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	size_t cap = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	if (rd_magic(&r, CRIU_PSTREE_MAGIC))
		return -EINVAL;
	while ((ret = rd_message(&r, &m)) > 0) {
		ret = grow((void **)&out->e, &cap, out->n, sizeof(*out->e));
		if (ret)
			goto out;
		ret = decode_pstree_entry(&m, &out->e[out->n]);
		out->n++; /* its threads are freed by the release either way */
		if (ret)
			goto out;
	}
	if (!ret && !out->n) {
		rd_err(&r, "no process in the tree");
		ret = -EINVAL;
	}
out:
	if (ret) {
		criu_img_pstree_release(out);
		return ret == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	return 0;
}

void criu_img_mm_release(struct criu_img_mm *mm)
{
	if (!mm)
		return;
	free(mm->vmas);
	mm->vmas = NULL;
	mm->nvmas = 0;
}

static int decode_vma(struct rd *m, struct criu_img_vma *v)
{
	struct field f;
	unsigned seen = 0;
	int ret;

	memset(v, 0, sizeof(*v));
	while ((ret = rd_field(m, &f)) > 0) {
		switch (f.num) {
		case 1:
			ret = want_u64(&f, m->name, "vma start", &v->start);
			break;
		case 2:
			ret = want_u64(&f, m->name, "vma end", &v->end);
			break;
		case 3:
			ret = want_u64(&f, m->name, "vma pgoff", &v->pgoff);
			break;
		case 4:
			ret = want_u64(&f, m->name, "vma shmid", &v->shmid);
			break;
		case 5:
			ret = want_u32(&f, m->name, "vma prot", &v->prot);
			break;
		case 6:
			ret = want_u32(&f, m->name, "vma flags", &v->flags);
			break;
		case 7:
			ret = want_u32(&f, m->name, "vma status", &v->status);
			break;
		case 8: /* sint64: zigzag */
			ret = want_wt(&f, WT_VARINT, m->name, "vma fd");
			v->fd = (int64_t)(f.v >> 1) ^ -(int64_t)(f.v & 1);
			break;
		default:
			ret = 0;
		}
		if (ret)
			return ret;
		if (f.num <= 8)
			seen |= 1u << f.num;
	}
	if (ret < 0)
		return ret;
	if (seen != 0x1fe)
		return missing(m, "vma_entry",
			       "start, end, pgoff, shmid, prot, flags, status and fd");
	if (v->start >= v->end || (v->start | v->end) % CRIU_PAGE_SIZE) {
		pr_err("%s: offset %zu: vma %llx-%llx is empty or not page-aligned",
		       m->name ? m->name : "image", m->base, (unsigned long long)v->start,
		       (unsigned long long)v->end);
		return -EINVAL;
	}
	return 0;
}

int criu_img_decode_mm(const uint8_t *buf, size_t len, const char *name, struct criu_img_mm *out)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	struct field f;
	size_t cap = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	if (rd_magic(&r, CRIU_MM_MAGIC))
		return -EINVAL;
	ret = rd_message(&r, &m);
	if (ret <= 0) {
		if (!ret)
			rd_err(&r, "no mm entry");
		return -EINVAL;
	}
	while ((ret = rd_field(&m, &f)) > 0) {
		if (f.num != 14)
			continue;
		ret = want_wt(&f, WT_LEN, name, "vmas");
		if (!ret)
			ret = grow((void **)&out->vmas, &cap, out->nvmas, sizeof(*out->vmas));
		if (!ret)
			ret = decode_vma(&f.sub, &out->vmas[out->nvmas]);
		if (ret)
			goto out;
		out->nvmas++;
	}
	if (!ret && r.off != r.len) {
		rd_err(&r, "%zu bytes after the mm entry", r.len - r.off);
		ret = -EINVAL;
	}
out:
	if (ret) {
		criu_img_mm_release(out);
		return ret == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	return 0;
}

void criu_img_pagemap_release(struct criu_img_pagemap *pm)
{
	if (!pm)
		return;
	free(pm->e);
	pm->e = NULL;
	pm->n = 0;
}

uint64_t criu_img_pme_pages(const struct criu_img_pagemap_entry *e)
{
	return e->has_nr_pages ? e->nr_pages : e->compat_nr_pages;
}

uint32_t criu_img_pme_flags(const struct criu_img_pagemap_entry *e)
{
	if (e->has_in_parent && e->in_parent)
		return (e->has_flags ? e->flags : 0) | CRIU_PE_PARENT;
	return e->has_flags ? e->flags : CRIU_PE_PRESENT;
}

bool criu_img_pme_in_pages_file(const struct criu_img_pagemap_entry *e)
{
	uint32_t fl = criu_img_pme_flags(e);

	return (fl & CRIU_PE_PRESENT) && !(fl & CRIU_PE_PARENT);
}

int criu_img_pme_part(const struct criu_img_pagemap_entry *whole, uint64_t vaddr, uint64_t pages,
		      struct criu_img_pagemap_entry *part)
{
	bool compat = !whole->has_nr_pages || whole->compat_nr_pages;

	if (compat && pages > UINT32_MAX)
		return -EOVERFLOW;
	*part = *whole;
	part->vaddr = vaddr;
	if (part->has_nr_pages)
		part->nr_pages = pages;
	if (compat)
		part->compat_nr_pages = (uint32_t)pages;
	return 0;
}

int criu_img_pagemap_data_bytes(const struct criu_img_pagemap *pm, uint64_t *bytes)
{
	uint64_t pages = 0;

	for (size_t i = 0; i < pm->n; i++) {
		if (!criu_img_pme_in_pages_file(&pm->e[i]))
			continue;
		if (__builtin_add_overflow(pages, criu_img_pme_pages(&pm->e[i]), &pages))
			return -EOVERFLOW;
	}
	if (pages > UINT64_MAX / CRIU_PAGE_SIZE)
		return -EOVERFLOW;
	*bytes = pages * CRIU_PAGE_SIZE;
	return 0;
}

static int decode_pme(struct rd *m, struct criu_img_pagemap_entry *e)
{
	struct field f;
	bool has_vaddr = false, has_compat = false;
	uint64_t pages, bytes;
	int ret;

	memset(e, 0, sizeof(*e));
	while ((ret = rd_field(m, &f)) > 0) {
		switch (f.num) {
		case 1:
			ret = want_u64(&f, m->name, "vaddr", &e->vaddr);
			has_vaddr = true;
			break;
		case 2:
			ret = want_u32(&f, m->name, "compat_nr_pages", &e->compat_nr_pages);
			has_compat = true;
			break;
		case 3:
			ret = want_bool(&f, m->name, "in_parent", &e->in_parent);
			e->has_in_parent = true;
			break;
		case 4:
			ret = want_u32(&f, m->name, "flags", &e->flags);
			e->has_flags = true;
			break;
		case 5:
			ret = want_u64(&f, m->name, "nr_pages", &e->nr_pages);
			e->has_nr_pages = true;
			break;
		default:
			e->has_unknown = true;
			ret = 0;
		}
		if (ret)
			return ret;
	}
	if (ret < 0)
		return ret;
	if (!has_vaddr || !has_compat)
		return missing(m, "pagemap_entry", "vaddr and compat_nr_pages");
	pages = criu_img_pme_pages(e);
	if (e->vaddr % CRIU_PAGE_SIZE || !pages || pages > UINT64_MAX / CRIU_PAGE_SIZE ||
	    __builtin_add_overflow(e->vaddr, pages * CRIU_PAGE_SIZE, &bytes)) {
		pr_err("%s: offset %zu: pagemap entry %llx + %llu pages: unaligned, empty or "
		       "past the address space",
		       m->name ? m->name : "image", m->base, (unsigned long long)e->vaddr,
		       (unsigned long long)pages);
		return -EINVAL;
	}
	return 0;
}

int criu_img_decode_pagemap(const uint8_t *buf, size_t len, const char *name,
			    struct criu_img_pagemap *out)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	struct field f;
	bool has_id = false;
	size_t cap = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	if (rd_magic(&r, CRIU_PAGEMAP_MAGIC))
		return -EINVAL;
	ret = rd_message(&r, &m);
	if (ret <= 0) {
		if (!ret)
			rd_err(&r, "no pagemap head");
		return -EINVAL;
	}
	while ((ret = rd_field(&m, &f)) > 0) {
		if (f.num == 1) {
			if (want_u32(&f, name, "pages_id", &out->pages_id))
				return -EINVAL;
			has_id = true;
		}
	}
	if (ret < 0)
		return -EINVAL;
	if (!has_id)
		return missing(&m, "pagemap_head", "pages_id");
	while ((ret = rd_message(&r, &m)) > 0) {
		ret = grow((void **)&out->e, &cap, out->n, sizeof(*out->e));
		if (!ret)
			ret = decode_pme(&m, &out->e[out->n]);
		if (ret)
			break;
		out->n++;
	}
	if (ret) {
		criu_img_pagemap_release(out);
		return ret == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	return 0;
}

/* --- encoding (pagemaps) --------------------------------------------------- */

struct wr {
	uint8_t *p;
	size_t len, cap;
	int err;
};

static void wr_bytes(struct wr *w, const void *b, size_t n)
{
	if (w->err || !n) /* b may then be NULL, which memcpy must not get */
		return;
	if (n > SIZE_MAX - w->len || ARRAY_GROW(w->p, w->cap, w->len + n, 256)) {
		w->err = -ENOMEM;
		return;
	}
	memcpy(w->p + w->len, b, n);
	w->len += n;
}

static size_t varint_put(uint8_t *b, uint64_t v)
{
	size_t n = 0;

	do {
		b[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			b[n] |= 0x80;
		n++;
	} while (v);
	return n;
}

/* One varint field into b (at most 20 bytes). */
static size_t field_put(uint8_t *b, uint32_t num, uint64_t v)
{
	size_t n = varint_put(b, (uint64_t)num << 3 | WT_VARINT);

	return n + varint_put(b + n, v);
}

static void wr_u32le(struct wr *w, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};

	wr_bytes(w, b, 4);
}

int criu_img_encode_pagemap(const struct criu_img_pagemap *pm, uint8_t **buf, size_t *len)
{
	struct wr w = {0};
	uint8_t msg[5 * 20];
	size_t n;

	*buf = NULL;
	*len = 0;
	wr_u32le(&w, CRIU_IMG_COMMON_MAGIC);
	wr_u32le(&w, CRIU_PAGEMAP_MAGIC);
	n = field_put(msg, 1, pm->pages_id);
	wr_u32le(&w, (uint32_t)n);
	wr_bytes(&w, msg, n);
	for (size_t i = 0; i < pm->n; i++) {
		const struct criu_img_pagemap_entry *e = &pm->e[i];
		uint64_t pages = criu_img_pme_pages(e);

		if (e->has_unknown) {
			pr_err("pagemap entry %zu (%llx) has fields this codec does not know", i,
			       (unsigned long long)e->vaddr);
			free(w.p);
			return -ENOTSUP;
		}
		if (e->vaddr % CRIU_PAGE_SIZE || !pages || pages > UINT64_MAX / CRIU_PAGE_SIZE ||
		    e->vaddr + pages * CRIU_PAGE_SIZE < e->vaddr) {
			pr_err("pagemap entry %zu (%llx + %llu pages) would not decode", i,
			       (unsigned long long)e->vaddr, (unsigned long long)pages);
			free(w.p);
			return -EINVAL;
		}
		/* Fields in number order, optional ones only when present: what protobuf-c writes.
		 */
		n = field_put(msg, 1, e->vaddr);
		n += field_put(msg + n, 2, e->compat_nr_pages);
		if (e->has_in_parent)
			n += field_put(msg + n, 3, e->in_parent);
		if (e->has_flags)
			n += field_put(msg + n, 4, e->flags);
		if (e->has_nr_pages)
			n += field_put(msg + n, 5, e->nr_pages);
		wr_u32le(&w, (uint32_t)n);
		wr_bytes(&w, msg, n);
	}
	if (w.err) {
		pr_err("out of memory encoding a pagemap of %zu entries", pm->n);
		free(w.p);
		return w.err;
	}
	*buf = w.p;
	*len = w.len;
	return 0;
}

/* --- rewriting for a mapped restore ------------------------------------------ */

#define LINUX_MAP_ANONYMOUS 0x20u

/* The raw bytes of the field that rd_field just read from m (key included). */
static void wr_raw_field(struct wr *w, const struct rd *m, const struct field *f)
{
	wr_bytes(w, m->p + (f->at - m->base), m->base + m->off - f->at);
}

static void wr_varint_field(struct wr *w, uint32_t num, uint64_t v)
{
	uint8_t b[20];

	wr_bytes(w, b, field_put(b, num, v));
}

static void wr_len_field(struct wr *w, uint32_t num, const void *p, size_t n)
{
	uint8_t b[20];
	size_t k = varint_put(b, (uint64_t)num << 3 | WT_LEN);

	k += varint_put(b + k, n);
	wr_bytes(w, b, k);
	wr_bytes(w, p, n);
}

/* One VmaEntry rewritten per rm into w, every field it does not change as it was. */
static void remap_vma(struct wr *w, struct rd *v, const struct criu_img_vma_remap *rm)
{
	struct field f;

	while (rd_field(v, &f) > 0) {
		switch (f.num) {
		case 3:
			wr_varint_field(w, 3, rm->pgoff);
			break;
		case 4:
			wr_varint_field(w, 4, rm->file_id);
			break;
		case 6:
			wr_varint_field(w, 6, f.v & ~(uint64_t)LINUX_MAP_ANONYMOUS);
			break;
		case 7:
			wr_varint_field(w, 7, CRIU_VMA_AREA_REGULAR | CRIU_VMA_FILE_PRIVATE);
			break;
		case 10:
			break; /* written below */
		default:
			wr_raw_field(w, v, &f);
		}
	}
	wr_varint_field(w, 10, 0 /* O_RDONLY */);
}

int criu_img_mm_remap(const uint8_t *buf, size_t len, const char *name,
		      const struct criu_img_vma_remap *r, size_t n, uint8_t **out, size_t *outlen)
{
	struct criu_img_mm mm;
	struct rd rf = {buf, len, 0, 0, name}, m;
	struct wr body = {0}, w = {0};
	struct field f;
	size_t done = 0;
	int ret;

	*out = NULL;
	*outlen = 0;
	/* The whole image checked first: what follows walks it without checks. */
	ret = criu_img_decode_mm(buf, len, name, &mm);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		const struct criu_img_vma *v = NULL;

		for (size_t k = 0; k < mm.nvmas && !v; k++)
			if (mm.vmas[k].start == r[i].start)
				v = &mm.vmas[k];
		if (!v || !(v->status & CRIU_VMA_ANON_PRIVATE) || (v->status & CRIU_VMA_FILE_PRIVATE)) {
			pr_err("%s: no private anonymous VMA at %llx to map", name ? name : "mm",
			       (unsigned long long)r[i].start);
			criu_img_mm_release(&mm);
			return -ENOENT;
		}
	}
	criu_img_mm_release(&mm);

	rd_magic(&rf, CRIU_MM_MAGIC);
	rd_message(&rf, &m);
	while (rd_field(&m, &f) > 0) {
		const struct criu_img_vma_remap *rm = NULL;
		struct criu_img_vma v;
		struct rd sub;

		if (f.num == 14) {
			sub = f.sub;
			decode_vma(&sub, &v);
			for (size_t i = 0; i < n && !rm; i++)
				if (r[i].start == v.start)
					rm = &r[i];
		}
		if (!rm) {
			wr_raw_field(&body, &m, &f);
			continue;
		}
		struct wr vw = {0};

		sub = f.sub;
		remap_vma(&vw, &sub, rm);
		if (vw.err)
			body.err = vw.err;
		else
			wr_len_field(&body, 14, vw.p, vw.len);
		free(vw.p);
		done++;
	}
	wr_u32le(&w, CRIU_IMG_COMMON_MAGIC);
	wr_u32le(&w, CRIU_MM_MAGIC);
	wr_u32le(&w, (uint32_t)body.len);
	wr_bytes(&w, body.p, body.len);
	free(body.p);
	if (body.err || w.err) {
		pr_err("out of memory rewriting %s", name ? name : "an mm image");
		free(w.p);
		return -ENOMEM;
	}
	if (done != n) { /* two VMAs of r at one start */
		pr_err("%s: %zu VMAs to map, %zu rewritten", name ? name : "mm", n, done);
		free(w.p);
		return -EINVAL;
	}
	*out = w.p;
	*outlen = w.len;
	return 0;
}

int criu_img_files_max_id(const uint8_t *buf, size_t len, const char *name, uint32_t *max_id)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	struct field f;
	int ret;

	*max_id = 0;
	if (rd_magic(&r, CRIU_FILES_MAGIC))
		return -EINVAL;
	while ((ret = rd_message(&r, &m)) > 0) {
		bool has_id = false;

		while ((ret = rd_field(&m, &f)) > 0) {
			uint32_t id;

			if (f.num != 2)
				continue;
			if (want_u32(&f, name, "file_entry id", &id))
				return -EINVAL;
			has_id = true;
			if (id > *max_id)
				*max_id = id;
		}
		if (ret < 0)
			return -EINVAL;
		if (!has_id)
			return missing(&m, "file_entry", "id");
	}
	return ret < 0 ? -EINVAL : 0;
}

int criu_img_files_append_reg(uint8_t **buf, size_t *len, uint32_t id, const char *name,
			      int32_t mnt_id, uint64_t size, uint32_t mode)
{
	struct wr fown = {0}, reg = {0}, fe = {0}, w = {*buf, *len, *len, 0};
	int ret = 0;

	for (uint32_t k = 1; k <= 5; k++) /* uid, euid, signum, pid_type, pid */
		wr_varint_field(&fown, k, 0);
	wr_varint_field(&reg, 1, id);
	wr_varint_field(&reg, 2, 0); /* flags: O_RDONLY */
	wr_varint_field(&reg, 3, 0); /* pos */
	wr_len_field(&reg, 5, fown.p, fown.len);
	wr_len_field(&reg, 6, name, strlen(name));
	/* sint32: zigzag, so that -1 is 1 */
	wr_varint_field(&reg, 7, mnt_id < 0 ? 2 * (uint64_t)(-(int64_t)mnt_id) - 1 : 2 * (uint64_t)mnt_id);
	wr_varint_field(&reg, 8, size);
	wr_varint_field(&reg, 10, mode);
	wr_varint_field(&fe, 1, 1 /* REG */);
	wr_varint_field(&fe, 2, id);
	wr_len_field(&fe, 3, reg.p, reg.len);
	wr_u32le(&w, (uint32_t)fe.len);
	wr_bytes(&w, fe.p, fe.len);
	if (fown.err || reg.err || fe.err || w.err)
		ret = -ENOMEM;
	free(fown.p);
	free(reg.p);
	free(fe.p);
	*buf = w.p;
	*len = w.len;
	return ret;
}

int criu_img_mount_id(const uint8_t *buf, size_t len, const char *name, const char *mountpoint,
		      uint32_t *mnt_id)
{
	struct rd r = {buf, len, 0, 0, name}, m;
	struct field f;
	int ret;

	if (rd_magic(&r, CRIU_MNTS_MAGIC))
		return -EINVAL;
	while ((ret = rd_message(&r, &m)) > 0) {
		bool has_id = false, here = false;
		uint32_t id = 0;

		while ((ret = rd_field(&m, &f)) > 0) {
			if (f.num == 2) {
				if (want_u32(&f, name, "mnt_id", &id))
					return -EINVAL;
				has_id = true;
			} else if (f.num == 7) {
				if (want_wt(&f, WT_LEN, name, "mountpoint"))
					return -EINVAL;
				here = f.sub.len == strlen(mountpoint) &&
				       !memcmp(f.sub.p, mountpoint, f.sub.len);
			}
		}
		if (ret < 0)
			return -EINVAL;
		if (here && has_id) {
			*mnt_id = id;
			return 0;
		}
	}
	return ret < 0 ? -EINVAL : -ENOENT;
}
