/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_map.h — which pages of one restored process a lazy-pages daemon still
 * owes it, where they are now, and where their data is in pages-N.img.
 *
 * The data is cut into blocks: a block is a run of PE_LAZY pages of one
 * pagemap entry inside one VMA of mm-N.img (UFFDIO_COPY never crosses a VMA)
 * and inside one aligned block_bytes window of the address space, so it is
 * also one run of the pages file.  A block is copied whole, by whoever claims
 * it (lazy_map_claim: an atomic todo -> claimed -> done), so that a fault and
 * a prefetch never copy the same block twice.
 *
 * Pieces say where a block's pages are now: the process may mremap() them
 * (lazy_map_remap), madvise(MADV_DONTNEED) or munmap() them (lazy_map_drop)
 * before they are copied.  Pieces are kept sorted by their current address;
 * the piece list changes only under the caller's exclusive lock (the daemon's
 * event thread), the block states at any time.
 */
#ifndef THAW_RESTORE_LAZY_MAP_H
#define THAW_RESTORE_LAZY_MAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "criu/criu_image.h"

enum lazy_block_state { LAZY_TODO = 0, LAZY_CLAIMED = 1, LAZY_DONE = 2 };

struct lazy_block {
	uint64_t img;	   /* address at dump time */
	uint64_t len;	   /* bytes, whole pages */
	uint64_t file_off; /* where img's data is in pages-N.img */
	uint64_t hole_after; /* bytes from its end to the next block, when that is in
			      * the same VMA (pages the image leaves zero: elided zero
			      * pages, or never touched), else 0 */
	uint32_t vma;	   /* index of its VMA in mm-N.img */
};

struct lazy_piece {
	uint64_t addr;	/* where the pages are now */
	uint64_t len;	/* bytes */
	uint64_t img;	/* their address at dump time */
	uint32_t block; /* the block they belong to */
};

struct lazy_map {
	struct lazy_block *blocks;
	_Atomic uint8_t *state; /* enum lazy_block_state, one per block */
	size_t nblocks;
	struct lazy_piece *pieces; /* sorted by addr, never overlapping */
	size_t npieces, cap;
	bool moved; /* a remap happened: pieces are no longer in block order */
	uint64_t bytes; /* of all blocks */
	uint64_t hole_bytes; /* of all blocks' hole_after */
	atomic_uint_fast64_t hole_budget; /* hole bytes lazy_map_take_hole may still give */
};

/* Build the map of one process from its pagemap and mm images: every
 * PE_LAZY|PE_PRESENT entry, cut at VMA ends and at block_bytes-aligned
 * addresses (block_bytes: a power of two, at least a page).  0, or -EINVAL
 * (a lazy entry outside every VMA, data in a parent image: logged), -ENOMEM. */
int lazy_map_build(struct lazy_map *m, const struct criu_img_pagemap *pm,
		   const struct criu_img_mm *mm, uint64_t block_bytes);
/* The map of a forked child: the same blocks, those done in m done, the
 * others todo (a block claimed in the parent is copied into the parent only),
 * the pieces of every block not done.  0 or -ENOMEM. */
int lazy_map_clone(struct lazy_map *dst, const struct lazy_map *m);
void lazy_map_release(struct lazy_map *m);

/* The index of the piece that holds addr, or -1.  *gap_lo and *gap_hi (may be
 * NULL) get the free run around addr when no piece holds it: from the end
 * of the piece below (or 0) to the start of the piece above (or UINT64_MAX). */
long lazy_map_find(const struct lazy_map *m, uint64_t addr, uint64_t *gap_lo, uint64_t *gap_hi);
/* Call fn for each piece of block b (in address order), stopping at the first
 * non-zero return, which it returns. */
int lazy_map_each_piece(const struct lazy_map *m, uint32_t b,
			int (*fn)(const struct lazy_piece *p, void *arg), void *arg);

/* The pages in [addr, addr+len) are gone (MADV_DONTNEED, munmap): no piece
 * covers them any more.  0 or -ENOMEM. */
int lazy_map_drop(struct lazy_map *m, uint64_t addr, uint64_t len);
/* mremap moved [from, from+len) to [to, to+len): what was pending at the
 * destination is gone, what was pending at the source is now there.
 * 0 or -ENOMEM. */
int lazy_map_remap(struct lazy_map *m, uint64_t from, uint64_t to, uint64_t len);

/* The hole after block b that the caller should map to zeros now: its
 * hole_after, if that is at most max, the pieces have not moved (a remap may
 * have put pieces there) and the map's hole budget (its data bytes, at
 * build; a clone gets what is left) still holds it, which this takes from
 * the budget; else 0.  Safe from any thread holding the caller's shared lock. */
uint64_t lazy_map_take_hole(struct lazy_map *m, uint32_t b, uint64_t max);

/* todo -> claimed: true if the caller now owns block b. */
bool lazy_map_claim(struct lazy_map *m, uint32_t b);
/* claimed -> done. */
void lazy_map_done(struct lazy_map *m, uint32_t b);
enum lazy_block_state lazy_map_state(const struct lazy_map *m, uint32_t b);
/* Bytes still owed: the pieces of blocks not yet done (for tests and logs). */
uint64_t lazy_map_pending_bytes(const struct lazy_map *m);

#endif
