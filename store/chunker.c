/* chunker.c — content-defined chunking on 4 KiB blocks; see chunker.h. */
#include "store/chunker.h"

#include <string.h>

#define K1 0x9e3779b97f4a7c15ull
#define K2 0xc2b2ae3d27d4eb4full

/* Four independent multiply-xor lanes so the multiplies pipeline; folded at
 * the end.  About a cycle per word: ~20x faster than SHA-256 with SHA-NI. */
uint64_t chunker_block_hash(const uint8_t *block, size_t n, bool *zero)
{
	uint64_t a = K1, b = K2, c = K1 ^ K2, d = ~K1, any = 0, w[4];
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		memcpy(w, block + i, 32);
		any |= w[0] | w[1] | w[2] | w[3];
		a = (a ^ w[0]) * K1;
		b = (b ^ w[1]) * K1;
		c = (c ^ w[2]) * K1;
		d = (d ^ w[3]) * K1;
	}
	for (; i < n; i++) {
		any |= block[i];
		a = (a ^ block[i]) * K2;
	}
	*zero = any == 0;
	uint64_t h = a ^ (b * K2) ^ (c >> 29 | c << 35) ^ (d >> 17 | d << 47) ^ n;
	h ^= h >> 31;
	h *= K2;
	h ^= h >> 29;
	return h;
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
		h = chunker_block_hash(data + pos, n, &zero);
		if (zero)
			break; /* the hole starts a chunk of its own */
		pos += n;
	}
	cut->len = pos;
	cut->zero = false;
	return 1;
}
