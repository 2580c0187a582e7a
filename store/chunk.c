/* SPDX-License-Identifier: Apache-2.0 */
/* chunk.c — chunk names, encoding and checked decoding; see chunk.h. */
#define LOG_PREFIX "chunk: "
#include "store/chunk.h"
#include "common/log.h"
#include "common/util.h"

#include <endian.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#define CHUNK_MAGIC   "THCK"
#define CHUNK_VERSION 1

struct chunk_codec {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	EVP_MD_CTX *md;
};

struct chunk_codec *chunk_codec_new(void)
{
	struct chunk_codec *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	c->md = EVP_MD_CTX_new();
	if (!c->cctx || !c->dctx || !c->md) {
		pr_err("cannot create zstd or digest contexts");
		chunk_codec_free(c);
		return NULL;
	}
	ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, CHUNK_ZSTD_LEVEL);
	/* No checksum or size in the frame: the chunk header and hash cover both. */
	ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_checksumFlag, 0);
	return c;
}

void chunk_codec_free(struct chunk_codec *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	EVP_MD_CTX_free(c->md);
	free(c);
}

/* Fetch the digest once: an implicit fetch per call costs a lock and a lookup. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* The digest to use: the fetched one, or the implicit if the fetch failed. */
static const EVP_MD *sha256(void)
{
	pthread_once(&sha256_once, sha256_fetch);
	return sha256_md ? sha256_md : EVP_sha256();
}

/* A digest that failed (cannot happen short of a broken libcrypto) never matches. */
static void hash_failed(uint8_t out[CHUNK_HASH_LEN])
{
	pr_err("SHA-256 failed in libcrypto");
	memset(out, 0, CHUNK_HASH_LEN);
}

void chunk_hash(const void *data, size_t len, uint8_t out[CHUNK_HASH_LEN])
{
	unsigned int n = CHUNK_HASH_LEN;

	if (!EVP_Digest(data, len, out, &n, sha256(), NULL))
		hash_failed(out);
}

void chunk_codec_hash(struct chunk_codec *c, const void *data, size_t len,
		      uint8_t out[CHUNK_HASH_LEN])
{
	unsigned int n = CHUNK_HASH_LEN;

	if (!EVP_DigestInit_ex2(c->md, sha256(), NULL) || !EVP_DigestUpdate(c->md, data, len) ||
	    !EVP_DigestFinal_ex(c->md, out, &n))
		hash_failed(out);
}

void chunk_id_format(const uint8_t hash[CHUNK_HASH_LEN], char out[CHUNK_ID_LEN])
{
	memcpy(out, "sha256:", 7);
	hex_encode(hash, CHUNK_HASH_LEN, out + 7);
}

int chunk_id_parse(const char *id, uint8_t hash[CHUNK_HASH_LEN])
{
	if (!id || strncmp(id, "sha256:", 7))
		return -EINVAL;
	id += 7;
	/* Lowercase only: one id, one spelling, one file name. */
	for (size_t i = 0; i < 2 * CHUNK_HASH_LEN; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return -EINVAL;
	return hex_decode(id, hash, CHUNK_HASH_LEN);
}

size_t chunk_encode_bound(size_t raw_len)
{
	size_t z = ZSTD_compressBound(raw_len);

	return CHUNK_HEADER_SIZE + (z > raw_len ? z : raw_len);
}

bool chunk_object_size_possible(uint64_t size, size_t raw_len)
{
	return size >= CHUNK_HEADER_SIZE && size <= chunk_encode_bound(raw_len);
}

static void put_header(uint8_t *out, enum chunk_encoding enc, uint32_t raw_len,
		       uint32_t payload_len)
{
	uint32_t v;

	memcpy(out, CHUNK_MAGIC, 4);
	out[4] = CHUNK_VERSION;
	out[5] = (uint8_t)enc;
	out[6] = 0;
	out[7] = 0;
	v = htole32(raw_len);
	memcpy(out + 8, &v, 4);
	v = htole32(payload_len);
	memcpy(out + 12, &v, 4);
}

/* Whether n bytes at p look like uniformly random bytes: the chi-squared
 * statistic of their byte counts against a uniform distribution.  For n
 * random bytes it has 255 degrees of freedom (mean 255, deviation ~23);
 * bytes that an order-0 coder could shrink by even a few percent score in
 * the thousands. */
static bool looks_random(const uint8_t *p, size_t n)
{
	uint32_t cnt[4][256] = {{0}};
	uint64_t sum = 0;
	size_t i = 0;

	/* Four tables, so that neighbouring bytes do not wait on one counter. */
	for (; i + 4 <= n; i += 4) {
		cnt[0][p[i]]++;
		cnt[1][p[i + 1]]++;
		cnt[2][p[i + 2]]++;
		cnt[3][p[i + 3]]++;
	}
	for (; i < n; i++)
		cnt[0][p[i]]++;
	for (int b = 0; b < 256; b++) {
		uint64_t c = (uint64_t)cnt[0][b] + cnt[1][b] + cnt[2][b] + cnt[3][b];
		sum += c * c;
	}
	/* chi2 = 256 * sum / n - n */
	return sum * 256 < (CHUNK_RANDOM_CHI2 + n) * n;
}

/* A chunk whose first, middle and last CHUNK_SAMPLE bytes all look random is
 * stored raw without trying zstd: on such bytes zstd -1 runs through and
 * gives up, a real cost in a put of GPU weights or other incompressible
 * data.  (Sampling with zstd itself did not pay: each extra call's setup costs
 * about what compressing a whole 64 KiB chunk does; bench/LOG.md, store ingest.)
 * Three 1 KiB samples, not 4 KiB: counting 3 x 4 KiB of every ~60 KiB chunk
 * was a tenth of a put's CPU on the H100's host (perf; bench/LOG.md), and 1 KiB
 * still tells apart anything zstd could shrink by CHUNK_MIN_SAVING_PCT: such
 * bytes score ~0.5 per byte over random's ~255 in all, 800 and more here
 * against the bar of 400, which random bytes pass by ~6 deviations.
 * Random-looking bytes that repeat within a chunk could have compressed and
 * are stored raw: a few percent of space, never a wrong byte. */
static bool skip_compression(const uint8_t *raw, size_t raw_len)
{
	return raw_len >= 4 * CHUNK_SAMPLE && looks_random(raw, CHUNK_SAMPLE) &&
	       looks_random(raw + (raw_len - CHUNK_SAMPLE) / 2, CHUNK_SAMPLE) &&
	       looks_random(raw + raw_len - CHUNK_SAMPLE, CHUNK_SAMPLE);
}

long chunk_encode_parts(struct chunk_codec *c, const void *raw, size_t raw_len, void *out,
			size_t out_cap, const void **payload)
{
	uint8_t *o = out;
	size_t z;

	if (raw_len > CHUNK_MAX_RAW || out_cap < CHUNK_HEADER_SIZE + raw_len)
		return -EINVAL;
	if (!skip_compression(raw, raw_len)) {
		/* Compressed output larger than this is not worth keeping: store raw. */
		size_t keep_below = raw_len - raw_len * CHUNK_MIN_SAVING_PCT / 100;
		size_t cap = MIN(out_cap - CHUNK_HEADER_SIZE, keep_below);

		z = ZSTD_compress2(c->cctx, o + CHUNK_HEADER_SIZE, cap, raw, raw_len);
		if (!ZSTD_isError(z) && z < keep_below) {
			put_header(o, CHUNK_ZSTD, (uint32_t)raw_len, (uint32_t)z);
			*payload = o + CHUNK_HEADER_SIZE;
			return (long)(CHUNK_HEADER_SIZE + z);
		}
		/* "Destination too small" only means it does not compress enough. */
		if (ZSTD_isError(z) && ZSTD_getErrorCode(z) != ZSTD_error_dstSize_tooSmall)
			pr_warn("zstd: %s; storing raw", ZSTD_getErrorName(z));
		ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
	}
	put_header(o, CHUNK_RAW, (uint32_t)raw_len, (uint32_t)raw_len);
	*payload = raw;
	return (long)(CHUNK_HEADER_SIZE + raw_len);
}

long chunk_encode(struct chunk_codec *c, const void *raw, size_t raw_len, void *out, size_t out_cap)
{
	const void *payload;
	long n = chunk_encode_parts(c, raw, raw_len, out, out_cap, &payload);

	if (n > 0 && payload == raw)
		memcpy((uint8_t *)out + CHUNK_HEADER_SIZE, raw, raw_len);
	return n;
}

/* The header's checks, shared by both decoders: id gets the chunk's name
 * (for their messages); 0 with *enc, *hpay set, or -EBADMSG logged. */
static int check_header(const uint8_t *o, size_t obj_len, const uint8_t expect[CHUNK_HASH_LEN],
			char id[CHUNK_ID_LEN], size_t raw_len, uint8_t *enc, uint32_t *payload_len)
{
	uint32_t hraw, hpay;

	chunk_id_format(expect, id);
	if (obj_len < CHUNK_HEADER_SIZE || memcmp(o, CHUNK_MAGIC, 4) || o[4] != CHUNK_VERSION ||
	    o[6] || o[7]) {
		pr_err("chunk %s: bad header", id);
		return -EBADMSG;
	}
	memcpy(&hraw, o + 8, 4);
	memcpy(&hpay, o + 12, 4);
	hraw = le32toh(hraw);
	hpay = le32toh(hpay);
	if (hraw != raw_len || hraw > CHUNK_MAX_RAW ||
	    (uint64_t)hpay != obj_len - CHUNK_HEADER_SIZE) {
		pr_err("chunk %s: lengths disagree (header raw %u payload %u, object %zu bytes, "
		       "expected raw %zu)",
		       id, hraw, hpay, obj_len, raw_len);
		return -EBADMSG;
	}
	if (o[5] == CHUNK_RAW && hpay != hraw) {
		pr_err("chunk %s: raw payload of %u bytes for %u", id, hpay, hraw);
		return -EBADMSG;
	}
	if (o[5] != CHUNK_RAW && o[5] != CHUNK_ZSTD) {
		pr_err("chunk %s: unknown encoding %u", id, o[5]);
		return -EBADMSG;
	}
	*enc = o[5];
	*payload_len = hpay;
	return 0;
}

static int check_hash(const char *id, const void *raw, size_t raw_len,
		      const uint8_t expect[CHUNK_HASH_LEN])
{
	uint8_t got[CHUNK_HASH_LEN];

	chunk_hash(raw, raw_len, got);
	if (memcmp(got, expect, CHUNK_HASH_LEN)) {
		char gid[CHUNK_ID_LEN];
		chunk_id_format(got, gid);
		pr_err("chunk %s: content hashes to %s", id, gid);
		return -EBADMSG;
	}
	return 0;
}

int chunk_check_hash(const void *raw, size_t raw_len, const uint8_t expect[CHUNK_HASH_LEN])
{
	char id[CHUNK_ID_LEN];

	chunk_id_format(expect, id);
	return check_hash(id, raw, raw_len, expect);
}

int chunk_decode(struct chunk_codec *c, const void *obj, size_t obj_len,
		 const uint8_t expect[CHUNK_HASH_LEN], void *raw, size_t raw_len)
{
	const uint8_t *o = obj;
	char id[CHUNK_ID_LEN];
	uint32_t hpay;
	uint8_t enc;
	int ret;

	if (chunk_is_bare(obj_len, raw_len)) {
		memcpy(raw, obj, raw_len);
		return chunk_check_hash(raw, raw_len, expect);
	}
	ret = check_header(o, obj_len, expect, id, raw_len, &enc, &hpay);
	if (ret)
		return ret;
	if (enc == CHUNK_RAW) {
		memcpy(raw, o + CHUNK_HEADER_SIZE, raw_len);
	} else {
		size_t n = ZSTD_decompressDCtx(c->dctx, raw, raw_len, o + CHUNK_HEADER_SIZE, hpay);
		if (ZSTD_isError(n)) {
			pr_err("chunk %s: zstd: %s", id, ZSTD_getErrorName(n));
			ZSTD_DCtx_reset(c->dctx, ZSTD_reset_session_only);
			return -EBADMSG;
		}
		if (n != raw_len) {
			pr_err("chunk %s: decompressed to %zu bytes, expected %zu", id, n, raw_len);
			return -EBADMSG;
		}
	}
	return check_hash(id, raw, raw_len, expect);
}

int chunk_check_raw(const void *header, size_t obj_len, const uint8_t expect[CHUNK_HASH_LEN],
		    const void *raw, size_t raw_len)
{
	char id[CHUNK_ID_LEN];
	uint32_t hpay;
	uint8_t enc;
	int ret = check_header(header, obj_len, expect, id, raw_len, &enc, &hpay);

	if (ret)
		return ret;
	if (enc != CHUNK_RAW) {
		pr_err("chunk %s: compressed, where the manifest's sizes say raw", id);
		return -EBADMSG;
	}
	return check_hash(id, raw, raw_len, expect);
}
