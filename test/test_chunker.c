/* SPDX-License-Identifier: Apache-2.0 */
/* test_chunker.c — cut points: on 4 KiB boundaries, within min/max, averaging
 * ~64 KiB; zero blocks become holes cut at their edges; a 4 KiB insertion moves
 * no cut point after the next one; feeding data in pieces gives the same cuts. */
#include "common/util.h"
#include "store/chunker.h"
#include "test/check.h"

#include <stdlib.h>
#include <string.h>

struct cuts {
	size_t n, *off;
	bool *zero;
};

/* Cut the whole buffer, feeding it `piece` bytes at a time (as put does). */
static void cut_all(const uint8_t *d, size_t len, size_t piece, struct cuts *c)
{
	size_t pos = 0, have = 0;
	struct chunker_cut cut;

	c->n = 0;
	c->off = malloc(sizeof(size_t) * (len / 4096 + 2));
	c->zero = malloc(sizeof(bool) * (len / 4096 + 2));
	REQUIRE(c->off && c->zero);
	while (pos < len) {
		have = MIN(len - pos, MAX(have, piece));
		bool eof = pos + have == len;
		if (!chunker_next(d + pos, have, eof, &cut)) {
			REQUIRE(!eof && have < CHUNKER_MAX);
			have += piece;
			continue;
		}
		REQUIRE(cut.len > 0 && cut.len <= have);
		/* Holes split at a piece's end are merged, as put merges them. */
		if (cut.zero && c->n && c->zero[c->n - 1] && c->off[c->n - 1] < pos) {
			pos += cut.len;
			have -= cut.len;
			continue;
		}
		c->off[c->n] = pos;
		c->zero[c->n++] = cut.zero;
		pos += cut.len;
		have -= cut.len;
	}
	c->off[c->n] = len;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += 8) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		memcpy(p + i, &seed, MIN(8, n - i));
	}
}

int main(void)
{
	const size_t len = 64u << 20;
	uint8_t *d = malloc(len + 4096), *e = malloc(len + 4096);
	struct cuts a, b, c;

	REQUIRE(d && e);
	fill(d, len, 42);
	/* A few zero runs: one block, a long run, and one at the very end. */
	memset(d + (1u << 20), 0, 4096);
	memset(d + (9u << 20), 0, 3u << 20);
	memset(d + len - 20000, 0, 20000);
	cut_all(d, len, 8u << 20, &a);

	size_t data_chunks = 0, data_bytes = 0;
	for (size_t i = 0; i < a.n; i++) {
		size_t l = a.off[i + 1] - a.off[i];
		CHECK(a.off[i] % 4096 == 0);
		if (a.zero[i]) {
			for (size_t k = a.off[i]; k < a.off[i + 1]; k++)
				if (d[k]) {
					CHECK(!"a hole holds data");
					break;
				}
			CHECK(i == 0 || !a.zero[i - 1]); /* holes are maximal */
			continue;
		}
		CHECK(l <= CHUNKER_MAX);
		/* Shorter than min only before a hole or at the end. */
		if (l < CHUNKER_MIN)
			CHECK(i + 1 == a.n || a.zero[i + 1]);
		data_chunks++;
		data_bytes += l;
	}
	size_t avg = data_bytes / data_chunks;
	printf("%zu chunks, average %zu bytes\n", data_chunks, avg);
	CHECK(avg > 48 * 1024 && avg < 88 * 1024);
	/* The zero runs are holes, at their exact edges. */
	int found = 0;
	for (size_t i = 0; i < a.n; i++) {
		if (!a.zero[i])
			continue;
		found++;
		CHECK(a.off[i] == (1u << 20) || a.off[i] == (9u << 20) ||
		      a.off[i] == ((len - 20000) & ~4095ul) + 4096);
	}
	CHECK_EQ(found, 3);

	/* Fed in small pieces: the same cuts. */
	cut_all(d, len, 300 * 1024, &c);
	CHECK_EQ(c.n, a.n);
	CHECK(c.n == a.n && !memcmp(c.off, a.off, a.n * sizeof(size_t)));

	/* Insert 4 KiB at 40 KiB: every cut after the next one is the same, shifted. */
	memcpy(e, d, 40960);
	fill(e + 40960, 4096, 7);
	memcpy(e + 40960 + 4096, d + 40960, len - 40960);
	cut_all(e, len + 4096, 8u << 20, &b);
	size_t moved = 0, k = 0;
	for (size_t i = 0; i < a.n; i++) {
		if (a.off[i] <= 40960)
			continue;
		while (k < b.n && b.off[k] < a.off[i] + 4096)
			k++;
		if (k >= b.n || b.off[k] != a.off[i] + 4096)
			moved++;
	}
	printf("cut points moved by the insertion: %zu of %zu\n", moved, a.n);
	CHECK(moved <= 1);

	/* Tiny inputs: a tail shorter than a block is a block of its own. */
	struct chunker_cut cut;
	CHECK_EQ(chunker_next(d, 100, false, &cut), 0);
	CHECK_EQ(chunker_next(d, 100, true, &cut), 1);
	CHECK_EQ(cut.len, 100);
	CHECK(!cut.zero);
	memset(e, 0, 8192);
	CHECK_EQ(chunker_next(e, 5000, true, &cut), 1);
	CHECK_EQ(cut.len, 5000);
	CHECK(cut.zero);
	CHECK_EQ(chunker_next(e, 5000, false, &cut), 1); /* a hole is returned early */
	CHECK_EQ(cut.len, 4096);
	CHECK(cut.zero);
	CHECK_EQ(chunker_next(d, 0, true, &cut), 0);
	bool z;
	CHECK(chunker_block_hash(d, 4096, &z) != chunker_block_hash(d + 4096, 4096, &z));

	/* A block is zero only if every byte is: one non-zero byte anywhere,
	 * the last one included, makes it data. */
	memset(e, 0, 8192);
	chunker_block_hash(e, 4096, &z);
	CHECK(z);
	for (size_t at = 0; at < 4096; at += 1023) {
		memset(e, 0, 4096);
		e[at] = 1;
		chunker_block_hash(e, 4096, &z);
		CHECK(!z);
	}
	e[4095] = 1;
	chunker_block_hash(e, 4096, &z);
	CHECK(!z);

	/* The hash reads a sample of the block: the first line and the line
	 * every 576 bytes after it.  A byte in a sampled line changes it; one
	 * between sampled lines does not (the cut decision is still a function
	 * of the block's content). */
	memcpy(e, d, 4096);
	uint64_t h0 = chunker_block_hash(e, 4096, &z);
	e[576 * 3 + 5] ^= 1; /* in the fourth sampled line */
	CHECK(chunker_block_hash(e, 4096, &z) != h0);
	e[576 * 3 + 5] ^= 1;
	e[100] ^= 1; /* between the first and second sampled lines */
	CHECK(chunker_block_hash(e, 4096, &z) == h0);
	/* A short tail is hashed whole. */
	memcpy(e, d, 4096);
	h0 = chunker_block_hash(e, 1000, &z);
	e[100] ^= 1;
	CHECK(chunker_block_hash(e, 1000, &z) != h0);
	free(a.off), free(a.zero), free(b.off), free(b.zero), free(c.off), free(c.zero);
	free(d);
	free(e);
	return check_failures ? 1 : 0;
}
