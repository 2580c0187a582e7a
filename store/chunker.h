/* SPDX-License-Identifier: Apache-2.0 */
/* chunker.h — content-defined cut points on 4 KiB block boundaries.
 *
 * A file is seen as 4 KiB blocks (its tail, if shorter, is a block of its own).
 * Each block is classified: all zero, or not (a scan that stops at the first
 * non-zero word), and a fast multiply-xor hash of a fixed eighth of its bytes
 * (far cheaper than SHA-256; a short tail is hashed whole).  A chunk of data
 * blocks ends
 *	- before an all-zero block (zero runs are holes, never stored),
 *	- after a block whose hash falls under CHUNKER_CUT_THRESHOLD, once the
 *	  chunk holds at least CHUNKER_MIN bytes,
 *	- at CHUNKER_MAX bytes.
 * Cut decisions depend only on the blocks since the previous cut, so inserting
 * 4 KiB near the start of a file moves no cut point after the next one.
 * A run of zero blocks is one hole of any length.
 */
#ifndef THAW_STORE_CHUNKER_H
#define THAW_STORE_CHUNKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHUNKER_BLOCK 4096u
#define CHUNKER_MIN   (16u << 10)
#define CHUNKER_AVG   (64u << 10)
#define CHUNKER_MAX   (256u << 10)
/* Past CHUNKER_MIN a block ends the chunk with probability 1/12, so chunks
 * average MIN + 12 blocks = 64 KiB. */
#define CHUNKER_CUT_THRESHOLD (UINT64_MAX / ((CHUNKER_AVG - CHUNKER_MIN) / CHUNKER_BLOCK))

struct chunker_cut {
	size_t len; /* bytes from the start of the data */
	bool zero;  /* a hole: every byte is zero */
};

/* The next chunk at the start of data[0..len).  eof: data ends where the file
 * ends.  Returns 1 and *cut, or 0 when more data is needed to decide (never
 * when eof or len >= CHUNKER_MAX).  A zero run that reaches the end of data
 * without eof is returned as a hole anyway: the caller merges adjacent holes. */
int chunker_next(const uint8_t *data, size_t len, bool eof, struct chunker_cut *cut);

/* The hash of one block of n bytes (n <= CHUNKER_BLOCK); *zero tells whether
 * every byte is zero.  Exposed for tests and benchmarks. */
uint64_t chunker_block_hash(const uint8_t *block, size_t n, bool *zero);

#endif
