/* SPDX-License-Identifier: Apache-2.0 */
/* chunk.h — one chunk of content: its name, its encoding on disk, its check.
 *
 * A chunk is named by the SHA-256 of its uncompressed bytes, written
 * "sha256:<64 hex>" (the OCI convention).  On disk a chunk object is a 16-byte
 * header followed by the payload:
 *
 *	offset 0  "THCK"          magic
 *	       4  u8  version     1
 *	       5  u8  encoding    CHUNK_RAW or CHUNK_ZSTD
 *	       6  u16 reserved    0
 *	       8  u32 raw_len     uncompressed bytes (little endian)
 *	      12  u32 payload_len bytes that follow the header (little endian)
 *
 * The encoding is zstd at CHUNK_ZSTD_LEVEL, or raw where compression saves
 * less than CHUNK_MIN_SAVING_PCT percent (GPU weights barely compress), or
 * where the bytes at both ends of the chunk look random (not tried).
 *
 * In a pack (pack.h), a raw chunk of whole pages may also be stored bare: its
 * payload alone, no header, so that a put writes it with O_DIRECT straight
 * from the input's pages rather than copying it behind a header.  Its size
 * says so (chunk_is_bare): stored == raw_len, a multiple of 4096.  No headed
 * object has that size: a raw one is raw_len + 16, a zstd one at most
 * 16 + 95% of raw_len.
 *
 * Decoding always checks the hash: a chunk read is a verified chunk.
 */
#ifndef THAW_STORE_CHUNK_H
#define THAW_STORE_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHUNK_HASH_LEN       32
#define CHUNK_ID_LEN         (7 + 2 * CHUNK_HASH_LEN + 1) /* "sha256:" + hex + NUL */
#define CHUNK_HEADER_SIZE    16
#define CHUNK_MAX_RAW        (1u << 20) /* no chunk is larger than this uncompressed */
#define CHUNK_ZSTD_LEVEL     1          /* the one place the level is set */
#define CHUNK_MIN_SAVING_PCT 5
#define CHUNK_SAMPLE         1024 /* bytes looked at, at each end and the middle, before trying zstd */
#define CHUNK_RANDOM_CHI2    400  /* below this, a sample's bytes look random */

enum chunk_encoding { CHUNK_RAW = 0, CHUNK_ZSTD = 1 };

struct chunk_codec; /* per-thread zstd and digest contexts; one per worker thread */

struct chunk_codec *chunk_codec_new(void);
void chunk_codec_free(struct chunk_codec *c); /* NULL is fine */

/* SHA-256 of len bytes. */
void chunk_hash(const void *data, size_t len, uint8_t out[CHUNK_HASH_LEN]);
/* The same with c's own digest context: no allocation per call, and nothing
 * to leak if the caller abandons the call midway (a SIGBUS jump out of a
 * mapped file's read, common/sigbus.h); the next call starts afresh. */
void chunk_codec_hash(struct chunk_codec *c, const void *data, size_t len,
		      uint8_t out[CHUNK_HASH_LEN]);
/* "sha256:<hex>" of a hash. */
void chunk_id_format(const uint8_t hash[CHUNK_HASH_LEN], char out[CHUNK_ID_LEN]);
/* Parse "sha256:<64 lowercase hex>"; -EINVAL for anything else. */
int chunk_id_parse(const char *id, uint8_t hash[CHUNK_HASH_LEN]);

/* Whether an object of stored bytes holding raw_len bytes is a bare payload. */
static inline bool chunk_is_bare(uint64_t stored, size_t raw_len)
{
	return stored == raw_len && raw_len >= 4096 && raw_len % 4096 == 0;
}

/* Largest object chunk_encode() can produce for raw_len bytes. */
size_t chunk_encode_bound(size_t raw_len);
/* Whether an object of size bytes could hold raw_len bytes: a header, and no
 * more than chunk_encode_bound(raw_len). */
bool chunk_object_size_possible(uint64_t size, size_t raw_len);
/* Encode raw_len (<= CHUNK_MAX_RAW) bytes into out (chunk_encode_bound() bytes):
 * header + zstd or raw payload.  Returns the object's length, or -errno. */
long chunk_encode(struct chunk_codec *c, const void *raw, size_t raw_len, void *out, size_t out_cap);
/* As chunk_encode(), but a raw payload is not copied: out gets the header
 * (and a zstd payload after it), and *payload points at the payload: in out
 * after the header (zstd) or at raw itself (raw).  Returns the object's length. */
long chunk_encode_parts(struct chunk_codec *c, const void *raw, size_t raw_len, void *out,
			size_t out_cap, const void **payload);
/* Decode a chunk object of obj_len bytes (a bare one too) into raw (raw_len
 * bytes expected) and check that it hashes to expect.  Returns 0, or -EBADMSG for anything wrong
 * (bad header, lengths that disagree, zstd error, hash mismatch), logged with
 * the chunk's id. */
int chunk_decode(struct chunk_codec *c, const void *obj, size_t obj_len,
		 const uint8_t expect[CHUNK_HASH_LEN], void *raw, size_t raw_len);
/* The check of a bare object's raw_len bytes, read where they are used:
 * 0, or -EBADMSG when they do not hash to expect (logged with the id). */
int chunk_check_hash(const void *raw, size_t raw_len, const uint8_t expect[CHUNK_HASH_LEN]);
/* The check of a raw chunk object of obj_len bytes whose payload was read
 * elsewhere (straight into its destination, no copy): its 16-byte header at
 * header, its raw_len bytes at raw.  Same returns as chunk_decode(). */
int chunk_check_raw(const void *header, size_t obj_len, const uint8_t expect[CHUNK_HASH_LEN],
		    const void *raw, size_t raw_len);

#endif
