/* SPDX-License-Identifier: Apache-2.0 */
/* chunker.c — content-defined chunking on 4 KiB blocks; see chunker.h. */
#include "store/chunker.h"

#include <string.h>

#define K1 0x9e3779b97f4a7c15ull
#define K2 0xc2b2ae3d27d4eb4full

/* Four independent multiply-xor lanes so the multiplies pipeline; folded at
 * the end.  About a cycle per word: far below SHA-256's cost even with SHA-NI. */
static uint64_t hash_words(const uint8_t *p, size_t n, uint64_t lanes[4])
{
	uint64_t any = 0, w[4];
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		memcpy(w, p + i, 32);
		any |= w[0] | w[1] | w[2] | w[3];
		lanes[0] = (lanes[0] ^ w[0]) * K1;
		lanes[1] = (lanes[1] ^ w[1]) * K1;
		lanes[2] = (lanes[2] ^ w[2]) * K1;
		lanes[3] = (lanes[3] ^ w[3]) * K1;
	}
	for (; i < n; i++) {
		any |= p[i];
		lanes[0] = (lanes[0] ^ p[i]) * K2;
	}
	return any;
}

static uint64_t fold(const uint64_t l[4], size_t n)
{
	uint64_t h = l[0] ^ (l[1] * K2) ^ (l[2] >> 29 | l[2] << 35) ^ (l[3] >> 17 | l[3] << 47) ^ n;

	h ^= h >> 31;
	h *= K2;
	h ^= h >> 29;
	return h;
}

/* Whether every byte of the block is zero: stops at the first that is not,
 * which in a data block is almost always the first word. */
static bool all_zero(const uint8_t *p, size_t n)
{
	uint64_t w[4];

	for (size_t i = 0; i < n; i += 32) {
		memcpy(w, p + i, 32);
		if (w[0] | w[1] | w[2] | w[3])
			return false;
	}
	return true;
}

/* A whole block's hash is taken over 8 of its 64 cache lines, nine lines
 * apart (a stride no common record size shares), not every word: cut points
 * only need a value that follows the block's content, and reading every
 * word was a visible share of a put's CPU, most of it waiting on memory
 * (bench/LOG.md, "Mapped input and a sampled chunker").  Two blocks that
 * differ only outside the sample get the same cut decision, which is still
 * a decision by content. */
#define SAMPLE_LINES  8
#define SAMPLE_STRIDE 576

/* Blocks ahead whose sample lines are fetched while this one is hashed: the
 * lines are a stride apart, which the hardware prefetcher does not follow,
 * and each would otherwise wait on memory (prefetched, the sample costs about
 * a third of reading every word: bench/LOG.md, "Mapped input and a sampled
 * chunker"). */
#define PREFETCH_AHEAD 4

static void prefetch_sample(const uint8_t *block)
{
	for (size_t l = 0; l < SAMPLE_LINES; l++)
		__builtin_prefetch(block + l * SAMPLE_STRIDE);
}

uint64_t chunker_block_hash(const uint8_t *block, size_t n, bool *zero)
{
	uint64_t lanes[4] = {K1, K2, K1 ^ K2, ~K1};

	if (n < CHUNKER_BLOCK) {
		/* A file's short tail: every byte. */
		*zero = hash_words(block, n, lanes) == 0;
		return fold(lanes, n);
	}
	*zero = all_zero(block, n);
	if (*zero)
		return fold(lanes, n);
	for (size_t l = 0; l < SAMPLE_LINES; l++)
		hash_words(block + l * SAMPLE_STRIDE, 64, lanes);
	return fold(lanes, n);
}

int chunker_next(const uint8_t *data, size_t len, bool eof, struct chunker_cut *cut)
{
	size_t pos = 0;
	bool zero;

	if (len == 0)
		return 0;
	/* The first block says what this chunk is: a hole or data. */
	size_t n = len < CHUNKER_BLOCK ? len : CHUNKER_BLOCK;
	if (n < CHUNKER_BLOCK && !eof)
		return 0;
	uint64_t h = chunker_block_hash(data, n, &zero);
	pos = n;
	if (zero) {
		while (pos < len) {
			n = len - pos < CHUNKER_BLOCK ? len - pos : CHUNKER_BLOCK;
			if (n < CHUNKER_BLOCK && !eof)
				break;
			chunker_block_hash(data + pos, n, &zero);
			if (!zero)
				break;
			pos += n;
		}
		cut->len = pos;
		cut->zero = true;
		return 1;
	}
	for (;;) {
		if (pos >= CHUNKER_MIN && h < CHUNKER_CUT_THRESHOLD)
			break;
		if (pos >= CHUNKER_MAX)
			break;
		if (pos == len) {
			if (eof)
				break;
			return 0;
		}
		n = len - pos < CHUNKER_BLOCK ? len - pos : CHUNKER_BLOCK;
		if (n < CHUNKER_BLOCK && !eof)
			return 0;
		if (len - pos > (PREFETCH_AHEAD + 1) * CHUNKER_BLOCK)
			prefetch_sample(data + pos + PREFETCH_AHEAD * CHUNKER_BLOCK);
		h = chunker_block_hash(data + pos, n, &zero);
		if (zero)
			break; /* the hole starts a chunk of its own */
		pos += n;
	}
	cut->len = pos;
	cut->zero = false;
	return 1;
}
