/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_chunk.c — chunk objects from a damaged or hostile disk, and the codec's round trip.
 *
 * 1. The input as a chunk object: chunk_decode() against a fixed expected hash
 *    (that of FIXED_LEN bytes of a known pattern; the seed corpus holds valid
 *    objects of it, so the success path is reached too) must never crash or
 *    touch bytes outside the object and the raw buffer, both sized exactly; it
 *    returns 0 only for bytes that really hash to the expected id.
 * 2. The input as raw data: chunk_encode() then chunk_decode() gives the same
 *    bytes back; the header says what the store promises; a wrong length, a
 *    truncated object or a flipped byte never decodes to other bytes.
 * 3. The input as a chunk id string: chunk_id_parse() accepts exactly what
 *    chunk_id_format() writes.
 *
 * stderr is closed for the target (-close_fd_mask=2; see fuzz_common.h)
 * unless THAW_LOG is set: every refused object is logged.
 */
#include "store/chunk.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXED_LEN 8192

#define FUZZ_NAME "fuzz_chunk"
#include "test/fuzz/fuzz_common.h"

static struct chunk_codec *codec;
static uint8_t fixed_hash[CHUNK_HASH_LEN];

/* The content whose hash every decoded object is checked against. */
static void fixed_content(uint8_t *buf, size_t len)
{
	static const char pat[] = "thaw fuzz chunk\n";

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)pat[i % (sizeof(pat) - 1)];
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static uint8_t fixed[FIXED_LEN];

	fixed_content(fixed, sizeof(fixed));
	chunk_hash(fixed, sizeof(fixed), fixed_hash);
	codec = chunk_codec_new();
	FUZZ_ASSERT(codec);
	return fuzz_quiet_stderr(argc, argv);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void fuzz_decode(const uint8_t *data, size_t size)
{
	size_t raw_len = FIXED_LEN;
	uint8_t *raw, h[CHUNK_HASH_LEN];
	int ret;

	/* Ask for the length the header claims, so that the payload is decoded;
	 * the decoder must still refuse anything above CHUNK_MAX_RAW itself. */
	if (size >= CHUNK_HEADER_SIZE) {
		raw_len = le32(data + 8);
		if (raw_len > CHUNK_MAX_RAW)
			raw_len = CHUNK_MAX_RAW;
	}
	raw = malloc(raw_len ? raw_len : 1);
	FUZZ_ASSERT(raw);
	ret = chunk_decode(codec, data, size, fixed_hash, raw, raw_len);
	FUZZ_ASSERT(ret == 0 || ret == -EBADMSG);
	if (ret == 0) {
		chunk_hash(raw, raw_len, h);
		FUZZ_ASSERT(!memcmp(h, fixed_hash, CHUNK_HASH_LEN));
		FUZZ_ASSERT(raw_len == FIXED_LEN);
		/* The same object with a length that disagrees is refused. */
		ret = chunk_decode(codec, data, size, fixed_hash, raw, raw_len - 1);
		FUZZ_ASSERT(ret == -EBADMSG);
	}
	free(raw);
}

static void fuzz_round_trip(const uint8_t *data, size_t size)
{
	size_t n = size < CHUNK_MAX_RAW ? size : CHUNK_MAX_RAW;
	uint8_t hash[CHUNK_HASH_LEN], *obj = NULL, *raw = NULL;
	size_t bound;
	long len;
	int ret;

	if (n == 0)
		return;
	chunk_hash(data, n, hash);
	bound = chunk_encode_bound(n);
	FUZZ_ASSERT(bound >= CHUNK_HEADER_SIZE + n);
	obj = malloc(bound);
	raw = malloc(n + 1);
	FUZZ_ASSERT(obj && raw);

	len = chunk_encode(codec, data, n, obj, bound);
	FUZZ_ASSERT(len > CHUNK_HEADER_SIZE && (size_t)len <= bound);
	FUZZ_ASSERT(!memcmp(obj, "THCK", 4));
	FUZZ_ASSERT(obj[4] == 1);
	FUZZ_ASSERT(obj[5] == CHUNK_RAW || obj[5] == CHUNK_ZSTD);
	FUZZ_ASSERT(obj[6] == 0 && obj[7] == 0);
	FUZZ_ASSERT(le32(obj + 8) == n);
	FUZZ_ASSERT(le32(obj + 12) == (size_t)len - CHUNK_HEADER_SIZE);
	if (obj[5] == CHUNK_RAW)
		FUZZ_ASSERT(le32(obj + 12) == n && !memcmp(obj + CHUNK_HEADER_SIZE, data, n));
	else /* zstd is kept only where it saves something */
		FUZZ_ASSERT(le32(obj + 12) < n);

	ret = chunk_decode(codec, obj, (size_t)len, hash, raw, n);
	FUZZ_ASSERT(ret == 0);
	FUZZ_ASSERT(!memcmp(raw, data, n));

	/* A length that disagrees with the header is refused. */
	FUZZ_ASSERT(chunk_decode(codec, obj, (size_t)len, hash, raw, n + 1) == -EBADMSG);
	/* So is a truncated object. */
	FUZZ_ASSERT(chunk_decode(codec, obj, (size_t)len - 1, hash, raw, n) == -EBADMSG);
	/* A flipped payload byte may still decode (zstd has slack bits), but never
	 * into other bytes: the hash is checked. */
	long at = len - 1 - (long)(data[0] % (len - CHUNK_HEADER_SIZE));

	obj[at] ^= (uint8_t)(1u << (data[n - 1] % 8));
	memset(raw, 0xa5, n);
	ret = chunk_decode(codec, obj, (size_t)len, hash, raw, n);
	FUZZ_ASSERT(ret == -EBADMSG || (ret == 0 && !memcmp(raw, data, n)));

	free(raw);
	free(obj);
}

static void fuzz_id(const uint8_t *data, size_t size)
{
	char s[CHUNK_ID_LEN + 8], id[CHUNK_ID_LEN];
	uint8_t hash[CHUNK_HASH_LEN], back[CHUNK_HASH_LEN];
	size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
	int ret;

	memcpy(s, data, n);
	s[n] = '\0';
	ret = chunk_id_parse(s, hash);
	FUZZ_ASSERT(ret == 0 || ret == -EINVAL);
	if (ret == 0) {
		chunk_id_format(hash, id);
		FUZZ_ASSERT(!strcmp(id, s));
	}

	chunk_hash(data, size, hash);
	chunk_id_format(hash, id);
	FUZZ_ASSERT(strlen(id) == CHUNK_ID_LEN - 1 && !strncmp(id, "sha256:", 7));
	FUZZ_ASSERT(chunk_id_parse(id, back) == 0 && !memcmp(hash, back, CHUNK_HASH_LEN));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > CHUNK_MAX_RAW + CHUNK_HEADER_SIZE + 4096)
		return 0;
	fuzz_decode(data, size);
	fuzz_round_trip(data, size);
	fuzz_id(data, size);
	return 0;
}
