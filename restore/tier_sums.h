/* SPDX-License-Identifier: Apache-2.0 */
/* tier_sums.h — checksums of a RAM tier entry's files, made when the entry
 * is materialised (docs/DESIGN.md, "The RAM tier's checksums").
 *
 * The chunks of a snapshot are checked against their SHA-256 as the engine
 * writes them into the tier; after that the tier's files are host memory
 * that every start reads again, and a fault there (a flipped bit, a stray
 * write) would reach every instance silently.  So each file of an entry
 * gets a checksum per TIER_SUM_BLOCK bytes, kept in the entry as .sums, for
 * the readers that can afford to check what they read (thawd's fill of
 * device memory, restore/gpu_prefill.c) and for the scrub that re-reads
 * the rest in the background (restore/tier_scrub.c).
 *
 * The hash is XXH3-64 (xxhash.h, inlined: nothing to link): ~10-30 GB/s a
 * core, so that the fill's threads hash a slice while the link copies it.
 * It is no defence against someone who writes the tier on purpose (who
 * could rewrite .sums as well); SHA-256 at ~2 GB/s a core would cost the
 * fill its speed.
 *
 * Which files: every regular file at the entry's top (not the dot files,
 * which say how it was built) and under .mapped/ (the mapped image and its
 * memory files), each hard-linked file once, under its name nearest the
 * top (where the fill looks gpu-<pid>.mem up).  A file's bytes past the end
 * of its last data, rounded up to a block ("covered"), must be a hole: the
 * memory files end in a 64 GiB one (restore/mapped.c) that nobody reads.
 * Not summed: the pages files tier_lease_whole writes into an entry later
 * (for a start that does not map); they are checked as the engine writes
 * them, and not again.
 */
#ifndef THAW_RESTORE_TIER_SUMS_H
#define THAW_RESTORE_TIER_SUMS_H

#include <stddef.h>
#include <stdint.h>

#define TIER_SUMS ".sums"	     /* in the entry's directory */
#define TIER_SUM_BLOCK (2ull << 20) /* divides the fill's 64 MiB pieces */

struct tier_sum_file {
	char *path;	   /* relative to the entry's directory */
	uint64_t size;	   /* the file's size */
	uint64_t covered;  /* bytes summed; from here to size, a hole */
	uint64_t nblocks;  /* covered / TIER_SUM_BLOCK, rounded up */
	uint64_t *sum;	   /* XXH3-64 of each block */
};

struct tier_sums {
	struct tier_sum_file *f;
	size_t n;
	uint64_t covered; /* of all the files */
};

/* XXH3-64 of n bytes at p. */
uint64_t tier_sum(const void *p, size_t n);

/* Sum the files of the entry being built in dir on up to 16 threads and
 * write dir/.sums (crash-safely).  *bytes (may be NULL): the bytes summed.
 * 0 or -errno (logged). */
int tier_sums_make(const char *dir, uint64_t *bytes);

/* Read dir/.sums.  0 and *out (tier_sums_free it); -ENOENT where the entry
 * has none (made by an older thaw); -EUCLEAN where it is damaged itself
 * (its own checksum, or anything out of bounds); -errno. */
int tier_sums_load(const char *dir, struct tier_sums **out);
void tier_sums_free(struct tier_sums *s); /* NULL is fine */

/* The sums of the file at path (relative to the entry), or NULL. */
const struct tier_sum_file *tier_sums_find(const struct tier_sums *s, const char *path);

/* Check bytes [off, off + len) of f's file, mapped whole (map_len bytes)
 * at base: every block they touch is hashed whole, and bytes past covered
 * must be zero.  0, or -EUCLEAN with *bad the first damaged offset. */
int tier_sums_check_mapped(const struct tier_sum_file *f, const void *base, uint64_t map_len,
			   uint64_t off, uint64_t len, uint64_t *bad);

/* Called before each block is read (bytes of it): the scrub's pacing.
 * Non-zero stops the check, which returns it. */
typedef int (*tier_sums_pace_fn)(uint64_t bytes, void *arg);

/* Check f's file in the entry at dir as it is: its size, each block that
 * holds data read (pread, not mapped: a hole stays a hole) and hashed, and
 * past covered nothing but zeros.  *read_bytes (may be NULL) gets what was
 * read.  0; -EUCLEAN with *bad the first damaged offset (UINT64_MAX: the
 * file is of another size); -ENOENT, the file is missing; pace's non-zero;
 * or -errno. */
int tier_sums_check_file(const char *dir, const struct tier_sum_file *f, tier_sums_pace_fn pace,
			 void *arg, uint64_t *bad, uint64_t *read_bytes);

/* Check the n files f of the entry at dir whole, as tier_sums_check_file
 * does, on up to 16 threads and at no pace (a start waits for it).  0; or
 * the first failure with *bad_file its index into f and *bad as
 * tier_sums_check_file says (-EUCLEAN, -ENOENT, -errno). */
int tier_sums_check_files(const char *dir, const struct tier_sum_file *const *f, size_t n,
			  size_t *bad_file, uint64_t *bad);

#endif
