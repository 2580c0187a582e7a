/* SPDX-License-Identifier: Apache-2.0 */
/* mapped.h — a snapshot's image rewritten so that its memory is mapped, not copied.
 *
 * CRIU restores a private anonymous VMA by mapping fresh memory and copying
 * every page of the image into it: each instance pays for a copy of the
 * snapshot's memory, in time and in RAM.  A mapped image instead keeps the
 * pages of each large private anonymous VMA in a file of their own, laid out
 * by address, and tells CRIU that the VMA is a private mapping of that file:
 * CRIU maps it, the process reads the tier's page cache (one copy shared by
 * every instance) and its writes go copy-on-write into its own memory.  The
 * file never changes.
 *
 * Layout of a mapped build under out_dir:
 *	image/            the CRIU image for runc restore (files that did not
 *	                  change are hard links to the original's)
 *	mem/<pid>-<addr>  one file per mapped VMA: byte (vaddr - base) holds the
 *	                  page at vaddr, base the VMA's start rounded down to
 *	                  2 MiB (so that file offsets and addresses agree modulo
 *	                  2 MiB and a huge-page tmpfs maps it with huge pages);
 *	                  a hole where the image has no page, reading zero
 * At restore, mem/ must be bind-mounted at OCI_MAPPED_DEST in the container
 * (the image's file entries name /.thaw/<pid>-<addr> on that mount).
 */
#ifndef THAW_RESTORE_MAPPED_H
#define THAW_RESTORE_MAPPED_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* A VMA is mapped only if its pages in the image hold at least this much:
 * below it the copy is cheap and a file per VMA is not. */
#define MAPPED_MIN_BYTES_DEFAULT (1u << 20)

struct mapped_result {
	uint64_t mapped_bytes; /* image data moved into mem/ */
	uint64_t kept_bytes;   /* image data left in the pages files of image/ */
	uint64_t new_bytes;    /* bytes this build wrote (mem/ and rewritten files) */
	uint32_t vmas;         /* VMAs mapped */
	uint32_t processes;    /* processes with at least one */
	uint32_t vmas_shared;  /* large VMAs left as they were: another process of
				* the image (a forked child) shares the range */
	char why[256];         /* vmas == 0: why nothing is mapped, in words */
};

/* Build the mapped variant of the CRIU image in image_dir under out_dir
 * (created; it must not exist).  Returns 0 with res->vmas > 0 when built;
 * 0 with res->vmas == 0 and res->why set when mapping does not apply to this
 * image (nothing left under out_dir); -errno on failure (logged; nothing
 * left under out_dir).  min_bytes: 0 for MAPPED_MIN_BYTES_DEFAULT.  The
 * pages are copied by up to 16 threads (one per CPU), all joined before it
 * returns. */
int mapped_build(const char *image_dir, const char *out_dir, uint64_t min_bytes,
		 struct mapped_result *res);

/* Windows: the mapped variant built before the pages are written.  Each
 * pages file of a process with mapped VMAs gets a window, len bytes of
 * shared, writable mappings laid so that byte i of the window is where byte
 * i of that pages file belongs in the mapped variant (a memory file, or the
 * new pages file in image/).  Writing a pages file's bytes into its window,
 * each page populated first (MADV_POPULATE_WRITE: a full tmpfs is then an
 * error, not a SIGBUS), builds the variant with one copy of the memory, not
 * two; the pages file itself is never needed. */
struct mapped_piece {
	uint64_t ioff, len; /* these bytes of the pages file ... */
	int fd;		    /* ... are these of this file (the window's own descriptor) */
	uint64_t ooff;
};
struct mapped_window {
	char name[64]; /* "pages-<id>.img" */
	uint8_t *addr;
	uint64_t len;  /* the pages file's size */
	struct mapped_piece *p; /* what the window maps, by ioff */
	size_t np;
	int *fds;      /* the destinations, open while the window is */
	size_t nfds;
	bool huge;     /* they are on a huge-page tmpfs */
	uint8_t *resv; /* the addresses reserved for it (resv_len bytes) */
	uint64_t resv_len;
};
struct mapped_windows {
	struct mapped_window *w;
	size_t n;
};
/* A window may take this many mappings at most (the process has 65530). */
#define MAPPED_WINDOW_MAX_MAPS 16384u

/* mapped_build for an image in image_dir whose pages files are there at
 * their full size but not written yet (everything else must be complete):
 * out_dir gets the same layout, its memory files and new pages files still
 * holes, and *win the windows to fill them through.  The pages files of
 * processes without mapped VMAs are hard-linked into image/ as they are, so
 * writing them in image_dir fills them there too.  0 with res->vmas == 0:
 * mapping does not apply (res->why; nothing made, no windows); -errno
 * (nothing made, no windows; res->why says why where the image allows
 * mapping but not windows: -E2BIG, too many pieces; -EINVAL, a kernel that
 * cannot populate mappings).  Unmap with mapped_windows_release once every
 * pages file went through its window. */
int mapped_build_windows(const char *image_dir, const char *out_dir, uint64_t min_bytes,
			 struct mapped_result *res, struct mapped_windows *win);
/* The window of pages file name ("pages-3.img"), or NULL. */
const struct mapped_window *mapped_window_of(const struct mapped_windows *win, const char *name);
/* Write len bytes of the pages file at off where they belong, with pwrite:
 * into a 4 KiB-page tmpfs that costs one copy, where a write through the
 * window first clears each new page at its fault, then copies into it.
 * 0 or -errno. */
int mapped_window_pwrite(const struct mapped_window *w, const void *buf, size_t len, uint64_t off);
void mapped_windows_release(struct mapped_windows *win);

/* The mount id of OCI_MAPPED_DEST in the CRIU image in image_dir: 0, -ENOENT
 * when the image has no such mount (a snapshot taken before mapped restore:
 * a restore bundle must then not bind anything there), -errno otherwise. */
int mapped_mount_id(const char *image_dir, uint32_t *mnt_id);

#endif
