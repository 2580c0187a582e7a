/* SPDX-License-Identifier: Apache-2.0 */
/* criu_image.h — a strict reader (and, for pagemaps, writer) of CRIU 4.x image files.
 *
 * A CRIU image file is a u32 magic header (IMG_COMMON_MAGIC or IMG_SERVICE_MAGIC
 * then the file type's magic; inventory.img has only its own magic) followed by
 * messages, each a little-endian u32 length and that many bytes of protobuf.
 * pages-N.img has no header: it is the raw data of the pagemap's PE_PRESENT
 * entries, in pagemap order.
 *
 * The decoders take a whole file in memory (criu_img_read_file) and a name
 * for messages; they check every length against the buffer, skip fields they
 * do not know, refuse a known field of the wrong wire type, a missing required
 * field or a truncated message, and log what was wrong, in which file, at
 * which offset.  They return 0 or -EINVAL (-ENOMEM when out of memory).
 */
#ifndef THAW_CRIU_CRIU_IMAGE_H
#define THAW_CRIU_CRIU_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* criu/include/magic.h */
#define CRIU_IMG_COMMON_MAGIC  0x54564319u
#define CRIU_IMG_SERVICE_MAGIC 0x55105940u
#define CRIU_INVENTORY_MAGIC   0x58313116u
#define CRIU_PSTREE_MAGIC      0x50273030u
#define CRIU_PAGEMAP_MAGIC     0x56084025u
#define CRIU_MM_MAGIC	       0x57492820u
#define CRIU_FILES_MAGIC       0x56303138u
#define CRIU_MNTS_MAGIC	       0x55563928u

/* PagemapEntry.flags (criu/include/pagemap.h) */
#define CRIU_PE_PARENT	1u
#define CRIU_PE_LAZY	2u
#define CRIU_PE_PRESENT 4u

/* VmaEntry.status bits (criu/include/image.h) */
#define CRIU_VMA_AREA_REGULAR	      (1u << 0)
#define CRIU_VMA_AREA_STACK	      (1u << 1)
#define CRIU_VMA_AREA_VSYSCALL	      (1u << 2)
#define CRIU_VMA_AREA_VDSO	      (1u << 3)
#define CRIU_VMA_AREA_HEAP	      (1u << 5)
#define CRIU_VMA_FILE_PRIVATE	      (1u << 6)
#define CRIU_VMA_FILE_SHARED	      (1u << 7)
#define CRIU_VMA_ANON_SHARED	      (1u << 8)
#define CRIU_VMA_ANON_PRIVATE	      (1u << 9)
#define CRIU_VMA_AREA_SYSVIPC	      (1u << 10)
#define CRIU_VMA_AREA_SOCKET	      (1u << 11)
#define CRIU_VMA_AREA_VVAR	      (1u << 12)
#define CRIU_VMA_AREA_AIORING	      (1u << 13)
#define CRIU_VMA_AREA_MEMFD	      (1u << 14)
#define CRIU_VMA_AREA_SHSTK	      (1u << 15)
#define CRIU_VMA_AREA_GUARD	      (1u << 16)
#define CRIU_VMA_AREA_UPROBES	      (1u << 17)
#define CRIU_VMA_AREA_NOT_ACCOUNTABLE (1u << 18)
#define CRIU_VMA_EXT_PLUGIN	      (1u << 27)
#define CRIU_VMA_UNSUPP		      (1u << 31)

#define CRIU_PAGE_SIZE 4096u

/* Image files other than pages-N.img are small; a larger one is refused. */
#define CRIU_IMG_MAX_FILE (64u << 20)

struct criu_img_inventory {
	uint32_t img_version;
	bool has_fdinfo_per_id, fdinfo_per_id;
	bool has_ns_per_id, ns_per_id;
	bool has_dump_uptime;
	uint64_t dump_uptime;
};

struct criu_img_pstree_entry {
	uint32_t pid, ppid, pgid, sid;
	uint32_t *threads; /* nthreads of them */
	size_t nthreads;
};

struct criu_img_pstree {
	struct criu_img_pstree_entry *e;
	size_t n;
};

struct criu_img_vma {
	uint64_t start, end, pgoff, shmid;
	uint32_t prot, flags, status;
	int64_t fd;
};

struct criu_img_mm {
	struct criu_img_vma *vmas; /* in image order (ascending start for CRIU's images) */
	size_t nvmas;
};

/* A PagemapEntry as it is on disk: which optional fields were there is kept,
 * so that encoding what was decoded gives the same bytes. */
struct criu_img_pagemap_entry {
	uint64_t vaddr;
	uint32_t compat_nr_pages; /* field 2 (required; 0 when nr_pages is used) */
	bool has_in_parent, in_parent;
	bool has_flags;
	uint32_t flags;
	bool has_nr_pages;
	uint64_t nr_pages; /* field 5 */
	bool has_unknown;  /* fields this codec does not know: not encodable */
};

struct criu_img_pagemap {
	uint32_t pages_id;
	struct criu_img_pagemap_entry *e;
	size_t n;
};

/* Read a whole image file of at most max bytes: 0 and *buf (you own it; free()),
 * or -errno (logged). */
int criu_img_read_file(const char *path, size_t max, uint8_t **buf, size_t *len);
/* criu_img_read_file of dir/name, at most CRIU_IMG_MAX_FILE bytes
 * (-ENAMETOOLONG where the path does not fit). */
int criu_img_read_in(const char *dir, const char *name, uint8_t **buf, size_t *len);

int criu_img_decode_inventory(const uint8_t *buf, size_t len, const char *name,
			      struct criu_img_inventory *out);
/* On success *out is yours: criu_img_pstree_release(). */
int criu_img_decode_pstree(const uint8_t *buf, size_t len, const char *name,
			   struct criu_img_pstree *out);
/* On success *out is yours: criu_img_mm_release(). */
int criu_img_decode_mm(const uint8_t *buf, size_t len, const char *name, struct criu_img_mm *out);
/* On success *out is yours: criu_img_pagemap_release().  Entries are checked:
 * page-aligned vaddr, at least one page, no wrap past the address space. */
int criu_img_decode_pagemap(const uint8_t *buf, size_t len, const char *name,
			    struct criu_img_pagemap *out);
/* A pagemap file's bytes: 0 and *buf (you own it), -ENOTSUP for an entry with
 * unknown fields, -EINVAL for an entry that would not decode, -ENOMEM. */
int criu_img_encode_pagemap(const struct criu_img_pagemap *pm, uint8_t **buf, size_t *len);

/* --- rewriting an image for a mapped restore (criu_mapped.h, restore/mapped.c) --- */

/* One private anonymous VMA of an mm image to become a private mapping of a
 * file: VmaEntry status REGULAR|FILE_PRIVATE, flags without MAP_ANONYMOUS,
 * shmid file_id (a FileEntry's id), pgoff, fdflags O_RDONLY. */
struct criu_img_vma_remap {
	uint64_t start; /* the VMA's start: it must be in the image */
	uint64_t file_id;
	uint64_t pgoff; /* the byte offset of start in the file */
};
/* The bytes of the mm image buf with the n VMAs of r rewritten as above and
 * every other byte as it was: 0 and *out (you own it; free()), -ENOENT (logged)
 * if a VMA of r is not in the image or is not private anonymous, -EINVAL for
 * an image that does not decode, -ENOMEM. */
int criu_img_mm_remap(const uint8_t *buf, size_t len, const char *name,
		      const struct criu_img_vma_remap *r, size_t n, uint8_t **out, size_t *outlen);
/* The largest FileEntry id in files.img (0 if it has none): 0 or -EINVAL. */
int criu_img_files_max_id(const uint8_t *buf, size_t len, const char *name, uint32_t *max_id);
/* Append to *buf (a files.img's bytes, realloc()ed) a FileEntry of type REG
 * with id, for the file at path name (as the restored process sees it) on
 * mount mnt_id, opened O_RDONLY at 0, with the size and mode CRIU checks at
 * restore.  0 or -ENOMEM. */
int criu_img_files_append_reg(uint8_t **buf, size_t *len, uint32_t id, const char *name,
			      int32_t mnt_id, uint64_t size, uint32_t mode);
/* The mnt_id of the mount at mountpoint in a mountpoints image: 0, -ENOENT
 * if there is none, -EINVAL for an image that does not decode. */
int criu_img_mount_id(const uint8_t *buf, size_t len, const char *name, const char *mountpoint,
		      uint32_t *mnt_id);

void criu_img_pstree_release(struct criu_img_pstree *t);
void criu_img_mm_release(struct criu_img_mm *mm);
void criu_img_pagemap_release(struct criu_img_pagemap *pm);

/* What CRIU makes of an entry when it reads it (criu/pagemap.c): pages is
 * nr_pages if present, else compat_nr_pages; flags gains PE_PARENT from
 * in_parent, and is PE_PRESENT when absent. */
uint64_t criu_img_pme_pages(const struct criu_img_pagemap_entry *e);
uint32_t criu_img_pme_flags(const struct criu_img_pagemap_entry *e);
/* Whether the entry's pages are in pages-<pages_id>.img. */
bool criu_img_pme_in_pages_file(const struct criu_img_pagemap_entry *e);
/* Make *part a piece of whole: its pages pages from vaddr, whole's other
 * fields kept.  The count goes where CRIU put it: nr_pages in 4.x images
 * (and compat_nr_pages too where whole had one there), compat_nr_pages in
 * older ones.  The pagemap rewriter (criu_pagemap.h), which the elider and
 * the mapped image's rewrite share, splits entries with it.  Returns 0, or -EOVERFLOW where pages does not fit the 32-bit
 * compat_nr_pages it must go in. */
int criu_img_pme_part(const struct criu_img_pagemap_entry *whole, uint64_t vaddr, uint64_t pages,
		      struct criu_img_pagemap_entry *part);
/* Bytes of pages-<pages_id>.img that the pagemap describes (0, or -EOVERFLOW). */
int criu_img_pagemap_data_bytes(const struct criu_img_pagemap *pm, uint64_t *bytes);

#endif
