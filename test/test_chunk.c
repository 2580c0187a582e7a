/* SPDX-License-Identifier: Apache-2.0 */
/* test_chunk.c — chunk ids, encode/decode round trips, and every kind of damage caught. */
#include "common/log.h"
#include "store/chunk.h"
#include "test/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(seed >> 56);
	}
}

static void roundtrip(struct chunk_codec *c, const uint8_t *raw, size_t len, int want_enc)
{
	size_t cap = chunk_encode_bound(len);
	uint8_t *obj = malloc(cap), *back = malloc(len + 1);
	uint8_t h[CHUNK_HASH_LEN];

	REQUIRE(obj && back);
	chunk_hash(raw, len, h);
	long n = chunk_encode(c, raw, len, obj, cap);
	CHECK(n >= CHUNK_HEADER_SIZE);
	CHECK(!memcmp(obj, "THCK", 4));
	if (want_enc >= 0)
		CHECK_EQ(obj[5], want_enc);
	CHECK_EQ(chunk_decode(c, obj, (size_t)n, h, back, len), 0);
	CHECK(!memcmp(back, raw, len));

	/* Every corruption is refused, and names the chunk. */
	if (n > CHUNK_HEADER_SIZE) {
		char id[CHUNK_ID_LEN];
		chunk_id_format(h, id);
		obj[n - 1] ^= 0x40;
		log_clear_error();
		CHECK_EQ(chunk_decode(c, obj, (size_t)n, h, back, len), -EBADMSG);
		CHECK(strstr(log_last_error(), id) != NULL);
		obj[n - 1] ^= 0x40;
		CHECK_EQ(chunk_decode(c, obj, (size_t)n - 1, h, back, len), -EBADMSG);
	}
	CHECK_EQ(chunk_decode(c, obj, 8, h, back, len), -EBADMSG);
	obj[0] = 'X';
	CHECK_EQ(chunk_decode(c, obj, (size_t)n, h, back, len), -EBADMSG);
	obj[0] = 'T';
	if (len > 0)
		CHECK_EQ(chunk_decode(c, obj, (size_t)n, h, back, len - 1), -EBADMSG);
	uint8_t other[CHUNK_HASH_LEN];
	memcpy(other, h, sizeof(other));
	other[5] ^= 1;
	CHECK_EQ(chunk_decode(c, obj, (size_t)n, other, back, len), -EBADMSG);
	free(obj);
	free(back);
}

int main(void)
{
	struct chunk_codec *c = chunk_codec_new();
	uint8_t h[CHUNK_HASH_LEN], h2[CHUNK_HASH_LEN];
	char id[CHUNK_ID_LEN];
	size_t big = CHUNK_MAX_RAW;
	uint8_t *buf = malloc(big);

	REQUIRE(c && buf);
	/* The SHA-256 of "abc" is the well-known test vector. */
	chunk_hash("abc", 3, h);
	chunk_id_format(h, id);
	CHECK_STR(id, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	CHECK_EQ(chunk_id_parse(id, h2), 0);
	CHECK(!memcmp(h, h2, sizeof(h)));
	CHECK_EQ(chunk_id_parse(
		     "sha256:BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", h2),
		 -EINVAL);
	CHECK_EQ(chunk_id_parse("sha256:ba78", h2), -EINVAL);
	CHECK_EQ(chunk_id_parse(
		     "sha512:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", h2),
		 -EINVAL);
	CHECK_EQ(
	    chunk_id_parse(
		"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0", h2),
	    -EINVAL);
	CHECK_EQ(chunk_id_parse(NULL, h2), -EINVAL);

	fill_random(buf, big, 1);
	roundtrip(c, buf, big, CHUNK_RAW); /* incompressible: raw */
	roundtrip(c, buf, 4097, CHUNK_RAW);
	roundtrip(c, buf, 1, CHUNK_RAW);
	roundtrip(c, buf, 0, CHUNK_RAW);
	for (size_t i = 0; i < big; i++)
		buf[i] = (uint8_t)(i % 251 < 200 ? 7 : i);
	roundtrip(c, buf, big, CHUNK_ZSTD); /* compresses well: zstd */
	roundtrip(c, buf, 65536, CHUNK_ZSTD);
	CHECK_EQ(chunk_encode(c, buf, CHUNK_MAX_RAW + 1, buf, 10), -EINVAL);

	/* Random bytes are not even tried with zstd (their samples look random);
	 * a chunk with random ends but a compressible middle still is, and so is
	 * one whose one end is compressible. */
	fill_random(buf, 65536, 2);
	memset(buf + 24576, 'a', 16384);
	roundtrip(c, buf, 65536, CHUNK_ZSTD);
	fill_random(buf, 65536, 3);
	for (size_t i = 65536 - 8192; i < 65536; i++)
		buf[i] = (uint8_t)"thaw store "[i % 11];
	fill_random(buf, 65536 - 8192, 4);
	memcpy(buf + 32768, buf, 16384); /* a repeat zstd finds, with text at the end */
	roundtrip(c, buf, 65536, CHUNK_ZSTD);
	/* Random bytes of 7 bits (zstd saves ~12%) at every sample and between:
	 * the samples must not pass for random. */
	fill_random(buf, 65536, 8);
	for (size_t i = 0; i < 65536; i++)
		buf[i] &= 0x7f;
	roundtrip(c, buf, 65536, CHUNK_ZSTD);
	/* Text with random bytes at every sample: compression is not tried, and
	 * that is the documented cost (it would have saved more than 5%). */
	for (size_t i = 0; i < 65536; i++)
		buf[i] = (uint8_t)"restore the pages that matter "[i % 30];
	fill_random(buf, CHUNK_SAMPLE, 5);
	fill_random(buf + (65536 - CHUNK_SAMPLE) / 2, CHUNK_SAMPLE, 6);
	fill_random(buf + 65536 - CHUNK_SAMPLE, CHUNK_SAMPLE, 7);
	roundtrip(c, buf, 65536, CHUNK_RAW);

	chunk_codec_free(c);
	chunk_codec_free(NULL);
	free(buf);
	return check_failures ? 1 : 0;
}
