/* SPDX-License-Identifier: Apache-2.0 */
/* manifest.h — what a snapshot is: files, each a list of chunks and holes.
 *
 * A manifest is JSON (jansson), stored content-addressed in the store; its id
 * is "sha256:<hex>" of its serialized bytes.  Shape:
 *
 *	{"version":1, "name":"fn-a", "created":"2026-11-23T00:00:00Z",
 *	 "files":[{"path":"pages-1.img","size":N,"mode":420,
 *	           "chunks":[{"off":0,"len":65536,"id":"sha256:…","stored":1234},
 *	                     {"off":65536,"len":8192,"zero":true}, …]}, …],
 *	 "meta":{…free-form: kernel, criu, driver versions, GPUs, pids, timings…}}
 *
 * The parser is strict, since a manifest may come from a damaged or hostile
 * disk: paths are relative, with no "..", "." or empty component, unique;
 * chunks are in order, contiguous and add up to the file's size; each chunk
 * is at most CHUNK_MAX_RAW bytes (holes may be longer); ids are well formed.
 */
#ifndef THAW_STORE_MANIFEST_H
#define THAW_STORE_MANIFEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"

#define MANIFEST_VERSION  1
#define MANIFEST_MAX_SIZE (512u << 20) /* a manifest file larger than this is refused */

struct manifest_chunk {
	uint64_t off;    /* offset in the file */
	uint64_t len;    /* uncompressed bytes */
	uint32_t stored; /* bytes of the chunk object on disk, header included; 0 for a hole */
	bool zero;       /* an all-zero run: never stored, left as a hole in the file */
	uint8_t hash[CHUNK_HASH_LEN];
};

struct manifest_file {
	char *path;    /* relative path inside the snapshot */
	uint64_t size; /* bytes */
	uint32_t mode; /* permission bits (0777 mask) */
	size_t nchunks;
	struct manifest_chunk *chunks;
};

struct manifest {
	char *name;
	char *created; /* RFC 3339, UTC */
	size_t nfiles;
	struct manifest_file *files;
	json_t *meta; /* an object, never NULL; the manifest owns a reference */
};

/* Totals over a manifest. */
struct manifest_totals {
	uint64_t logical_bytes; /* sum of file sizes */
	uint64_t zero_bytes;    /* bytes in holes */
	uint64_t stored_bytes;  /* sum of chunk objects (a chunk used twice counts twice) */
	uint64_t chunks;        /* non-hole chunks */
};

/* An empty manifest with that name and created = now; NULL on allocation failure. */
struct manifest *manifest_new(const char *name);
void manifest_free(struct manifest *m); /* NULL is fine */
/* A deep copy of m (you own it), or NULL when out of memory. */
struct manifest *manifest_copy(const struct manifest *m);
/* About how much memory m holds (its files, chunk lists and strings; the
 * metadata counted as its serialised size). */
size_t manifest_mem_bytes(const struct manifest *m);

/* Parse and check len bytes of JSON.  0 and *out (you own it), or -EINVAL with
 * the reason logged (pr_err, so log_last_error() tells it). */
int manifest_parse(const char *json, size_t len, struct manifest **out);
/* The parser's checks of paths and chunk lists, on a manifest built in
 * memory: 0, or -EINVAL with the reason logged. */
int manifest_check(const struct manifest *m);
/* Serialize to compact JSON with sorted keys; you own the returned string. NULL on failure
 * (out of memory, or a string that is not UTF-8). */
char *manifest_serialize(const struct manifest *m, size_t *len);

void manifest_totals(const struct manifest *m, struct manifest_totals *t);

/* The binary form of a manifest: what a load reads, kept by the store beside
 * the JSON, which stays the manifest (its hash is the id; it is what travels).
 * Parsing a 17 GB image's JSON (~270,000 chunks, a hex id each) took 1.6 s;
 * the binary is one read, one SHA-256 and a loop over fixed-size entries.
 * Little endian:
 *
 *	offset 0   "THMB"     magic
 *	       4   u32        version (MANIFEST_BIN_VERSION)
 *	       8   hash[32]   the manifest's id: the SHA-256 of its JSON
 *	      40   u64 x 3    the JSON file it was made from: size, inode, mtime (ns)
 *	      64   u64        files
 *	      72   u64        chunk entries (holes included)
 *	      80   u64        bytes of strings
 *	      88   u64        0
 *	      96   files x {u64 size, u64 chunks, u32 mode, u32 0}
 *	           chunks x {hash[32], u64 len, u32 stored, u32 flags (1: a hole)},
 *	           file after file, each file's in order (offsets follow from lengths)
 *	           strings: name, created, meta (compact JSON), then each file's path,
 *	           each ending in a NUL byte
 *	      end  SHA-256 of every byte before it
 *
 * A binary is trusted only for the very JSON file it was made from, unchanged
 * (its name, and the file's inode, size and mtime: the rule the store's cache
 * of parsed manifests follows), and only once its checksum and every check
 * manifest_parse makes hold; anything else falls back to the JSON. */
#define MANIFEST_BIN_VERSION 1
#define MANIFEST_BIN_HEADER  96u
#define MANIFEST_BIN_FILE    24u
#define MANIFEST_BIN_CHUNK   48u

/* The JSON file a binary was made from. */
struct manifest_bin_source {
	uint64_t size, ino, mtime_ns;
};

/* The binary form of m, whose JSON hashes to hash and is the file src
 * describes: a malloc'd buffer (you own it), *len its size.  NULL when out of
 * memory or when m's meta cannot be serialised. */
uint8_t *manifest_bin_encode(const struct manifest *m, const uint8_t hash[CHUNK_HASH_LEN],
			     const struct manifest_bin_source *src, size_t *len);
/* Check and decode len bytes of a binary manifest, expected to be manifest
 * hash made from the JSON file src: 0 and *out (you own it); -ESTALE when it
 * is sound but of another version, another manifest or another file (logged
 * with pr_debug); -EBADMSG when it is damaged (bad magic, length or checksum,
 * or what it says fails manifest_parse's checks; logged with pr_err); -ENOMEM. */
int manifest_bin_decode(const uint8_t *buf, size_t len, const uint8_t hash[CHUNK_HASH_LEN],
			const struct manifest_bin_source *src, struct manifest **out);

#endif
