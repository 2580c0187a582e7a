/* SPDX-License-Identifier: Apache-2.0 */
/* pack.h — pack files: many chunk objects in one file, and their index.
 *
 * A store holding one file per ~64 KiB chunk pays for a file per chunk: on a
 * disk filesystem the inode allocation alone was most of a put's CPU time
 * (bench/LOG.md, "Store ingest into a store on disk").  A put now appends
 * its new chunk objects to pack files instead, written with O_DIRECT in 4 MiB
 * writes where the filesystem takes it (no page cache copy, which on ext4
 * cost far more CPU than the write itself: bench/LOG.md, "Packs").
 *
 *	packs/<16 hex>.pack   chunk objects (chunk.h), each starting on a
 *	                      PACK_ALIGN boundary (zero padding between), so
 *	                      that the restore engine reads them with O_DIRECT;
 *	                      a raw chunk of whole pages may be bare (no header,
 *	                      chunk_is_bare), written from the caller's pages
 *	packs/<16 hex>.idx    the pack's index, written once the pack is complete
 *	                      and durable: only an indexed pack exists for readers
 *
 * The index file (little endian):
 *	offset 0   "THPI"     magic
 *	       4   u32        version (1)
 *	       8   u64        count of entries
 *	      16   u64        the pack's size in bytes
 *	      24   count x {hash[32], u64 off, u32 stored, u32 raw_len}
 *	      end  SHA-256 of every byte before it
 *
 * Crash safety: a pack is written unnamed (O_TMPFILE) and linked when
 * complete and synced; its index is written the same way after it.  A crash
 * leaves at most a pack with no index, which no reader sees and gc removes.
 * gc rewrites a pack whose chunks are partly garbage only when no lease (a
 * restore in progress) holds any of its chunks, so a reader that holds a
 * lease always finds its chunks where its index said.
 */
#ifndef THAW_STORE_PACK_H
#define THAW_STORE_PACK_H

#include "store/chunk.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PACK_ALIGN	   4096u
#define PACK_MAX_BYTES	   (256ull << 20) /* a put starts a new pack beyond this */
#define PACK_WRITE_BYTES   (4u << 20)	  /* one write to the pack */
#define PACK_INDEX_HEADER  24u
#define PACK_INDEX_ENTRY   48u
#define PACK_NAME_LEN	   16 /* hex digits of a pack's name */

struct store;

struct pack_entry {
	uint8_t hash[CHUNK_HASH_LEN];
	uint64_t off;
	uint32_t stored;
	uint32_t raw_len;
};

/* Parse and check an index file's bytes: magic, version, length, checksum,
 * and every entry (aligned, inside the pack, a possible object size).
 * *out (malloc'd, the caller frees it) gets the entries, *n their count,
 * *pack_size the pack's size.  0, -EBADMSG (logged with the reason) or -ENOMEM. */
int pack_index_parse(const uint8_t *buf, size_t len, struct pack_entry **out, size_t *n,
		     uint64_t *pack_size);
/* The index file's bytes for n entries of a pack of pack_size bytes, into a
 * malloc'd buffer (*len its size).  NULL when out of memory. */
uint8_t *pack_index_encode(const struct pack_entry *e, size_t n, uint64_t pack_size, size_t *len);

/* A writer appends chunk objects to packs of its own (one thread each). */
struct pack_writer;

/* A writer for store s.  NULL when out of memory (logged). */
struct pack_writer *pack_writer_new(struct store *s);
/* Append the chunk raw (raw_len bytes, hashing to hash) encoded with codec:
 * *stored gets its object's size.  With hold (and a release function set), a
 * raw chunk of whole pages at a page-aligned raw is not copied: it is stored
 * bare and written from raw itself, *held is set, and the caller keeps raw's
 * bytes as they are until release(arg, hold) says they are written or no
 * longer wanted.  0 or -errno (-EFAULT: a payload held could not be read). */
int pack_writer_add(struct pack_writer *w, struct chunk_codec *codec,
		    const uint8_t hash[CHUNK_HASH_LEN], const void *raw, size_t raw_len,
		    uint32_t *stored, void *hold, bool *held);
/* Append a chunk object already encoded (obj, stored bytes, a chunk of
 * raw_len bytes hashing to hash), as it is: a chunk fetched from another
 * store, checked by the caller, keeps the size its manifest records.
 * 0 or -errno. */
int pack_writer_add_object(struct pack_writer *w, const uint8_t hash[CHUNK_HASH_LEN],
			   const void *obj, uint32_t stored, uint32_t raw_len);
/* Who gets held payloads back (see pack_writer_add); called on the writer's
 * thread, from pack_writer_add, _flush, _finish or _free. */
void pack_writer_set_release(struct pack_writer *w, void (*release)(void *arg, void *token),
			     void *arg);
/* Write what is queued now, so that every held payload is released: a
 * caller about to wait for more work must not keep its input waiting.
 * 0 or -errno. */
int pack_writer_flush(struct pack_writer *w);
/* Whether w holds payloads not written yet. */
bool pack_writer_holds(const struct pack_writer *w);
/* Make every pack written so far durable and indexed, and visible to
 * this store object's lookups.  0 or -errno. */
int pack_writer_finish(struct pack_writer *w);
/* Free the writer; a pack not finished is dropped (its unnamed file goes with
 * it).  NULL is fine. */
void pack_writer_free(struct pack_writer *w);

#endif
