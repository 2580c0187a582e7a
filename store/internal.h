/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h — what the store's own files share; not for other modules. */
#ifndef THAW_STORE_INTERNAL_H
#define THAW_STORE_INTERNAL_H

#include "store/store.h"
#include "store/fill.h"
#include "store/pack.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/stat.h>

/* Manifests are content-addressed: one parsed and checked is good for as long
 * as its file is the same file, unchanged (inode, size and mtime, not ctime; a
 * file damaged by a write is read and checked again).  The last used are
 * kept, within a count and a byte budget, as reading and checking the
 * manifest of a multi-GB image costs ~0.3 s, on every start (bench/LOG.md). */

struct store_cached_manifest {
	uint8_t hash[CHUNK_HASH_LEN];
	struct manifest *m; /* NULL: a free slot */
	struct stat st;	    /* of its file when it was read */
	uint64_t used;	    /* for least recently used */
	size_t bytes;	    /* manifest_mem_bytes(m) */
};

/* A pack this store object knows of (pack.h).  Numbers index store.packs and
 * are never reused while the store is open, so a location stays meaningful. */
struct store_pack {
	char name[PACK_NAME_LEN + 1];
	uint64_t size;
	bool gone; /* its index is no longer there (gc removed it) */
};

/* One chunk in the index of packs: open addressing on the hash's first bytes. */
struct store_index_slot {
	uint8_t hash[CHUNK_HASH_LEN];
	uint64_t off;
	uint32_t pack;
	uint32_t stored; /* 0: a free slot */
};

struct store {
	char *dir;
	int dirfd; /* the store directory, for syncfs() and short name lookups */
	pthread_mutex_t cache_mu;
	uint64_t cache_clock;
	uint64_t cache_bytes, cache_budget; /* held by the cache, and the most it may */
	atomic_uint_fast64_t manifest_reads; /* see store_manifest_reads() */
	atomic_uint_fast64_t manifest_json_reads; /* of which from the JSON, not the binary */
	struct store_cached_manifest cache[STORE_MANIFEST_CACHE];

	enum store_layout layout; /* how a put writes new chunks */
	bool direct;		  /* packs written with O_DIRECT (where the filesystem takes it) */
	bool map_input;		  /* a put maps its large input files instead of read() */
	unsigned put_workers;	  /* a put's workers (each its own pack); 0: one a CPU */
	pthread_rwlock_t idx_lock; /* the packs and the index below */
	struct store_pack *packs;
	size_t npacks, packs_cap;
	struct store_index_slot *slots;
	size_t nslots, slots_cap; /* used and allocated (a power of two) */
	struct timespec packs_mtime; /* of packs/ when last read */
	uint64_t packs_read_ns;	     /* CLOCK_REALTIME of that read */
	bool packs_reload;	     /* the next read rebuilds the index from every file */
	/* Copies of chunks dropped as damaged (store_drop.c), under idx_lock:
	 * never indexed again by this store object, whatever an index file
	 * still says (one whose rewrite failed, or was read before it). */
	struct hash_set dropped_hashes;
	struct store_dropped {
		uint8_t hash[CHUNK_HASH_LEN];
		char pack[PACK_NAME_LEN + 1];
		uint64_t off;
	} *dropped;
	size_t ndropped, dropped_cap;
	pthread_mutex_t drop_mu; /* one rewrite of a pack's index at a time */
};

/* The index of packs (store_packs.c).  store_index_add_pack() makes a pack
 * known (its entries into the index; a hash already there keeps its first
 * place); 0 or -ENOMEM. */
int store_index_add_pack(struct store *s, const char *name, uint64_t size,
			 const struct pack_entry *e, size_t n);
/* Whether hash is in a known pack; *loc its place (may be NULL). */
bool store_index_find(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
		      struct store_chunk_loc *loc);
/* The copy of hash at off in pack found damaged (store_drop.c): out of the
 * index in memory if it is that copy that the index holds, and never taken
 * into it again by this store object.  0 or -ENOMEM. */
int store_index_drop(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], const char *pack,
		     uint64_t off);
/* The next store_packs_read builds the index again from every index file
 * (a drop may have hidden another pack's copy of a chunk). */
void store_packs_reload(struct store *s);
/* Read packs/ again if it changed since (force: in any case): new indexes
 * are loaded, and if a known pack is gone the index is rebuilt from those
 * left.  0 or -errno. */
int store_packs_read(struct store *s, bool force);
void store_index_release(struct store *s);

/* Call fn for each pack under packs/ that has an index: its name, its entries
 * and its size as its index says, or e NULL and err (-EBADMSG, -EIO...) when
 * the index cannot be used.  A non-zero return of fn stops the walk and is
 * returned. */
typedef int (*store_pack_fn)(const char *name, const struct pack_entry *e, size_t n,
			     uint64_t size, int err, void *arg);
int store_foreach_pack(struct store *s, store_pack_fn fn, void *arg);
/* packs/<name>.<ext> (ext "pack" or "idx"), into buf. */
int store_pack_file_path(struct store *s, const char *name, const char *ext, char *buf,
			 size_t len);

/* A chunk's name relative to the store directory: "chunks/<2 hex>/<62 hex>". */
#define STORE_CHUNK_NAME_LEN (7 + 2 * CHUNK_HASH_LEN + 2)
int store_chunk_name(const uint8_t hash[CHUNK_HASH_LEN], char name[STORE_CHUNK_NAME_LEN]);
/* store_write_object() of a chunk object given as head (its header, or header
 * and payload) followed by payload_len bytes at payload (may be 0), written
 * with one writev, to name (store_chunk_name()), not fsynced. */
int store_write_chunk(struct store *s, const char *name, const void *head, size_t head_len,
		      const void *payload, size_t payload_len, bool replace);

/* Keep a copy of m, the manifest hash parsed and checked from the file st
 * describes, in the cache of parsed manifests (out of memory: not kept). */
void store_manifest_cache_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			      const struct stat *st, const struct manifest *m);

/* The binary form of each manifest (manifest.h), beside the JSON: written
 * when the manifest is, or by the first load that has to read the JSON; a
 * load uses it only for the very JSON file it was made from.  Best effort:
 * a store where it cannot be written is read from the JSON. */
#define STORE_MANIFEST_BIN_DIR "manifests-bin"
void store_manifest_bin_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			    const struct stat *st, const struct manifest *m);
/* Path of manifest hash's binary form, into buf. */
int store_manifest_bin_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
			    size_t len);
/* For verify: whether the binary form of manifest hash, made from the JSON
 * file json_path, is sound.  0 (sound, none, or made from another version
 * of the JSON: the next load makes it again), or -EBADMSG (damaged; a load
 * reads the JSON then, and writes the binary form anew), the reason in
 * log_last_error().  Reads only. */
int store_manifest_bin_verify(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
			      const char *json_path);
/* Remove the binary forms whose manifest is gone (gc, store lock held
 * exclusively); the number removed, or -errno. */
int store_manifest_bins_sweep(struct store *s);
/* How many loads of this store object read and checked the JSON. */
uint64_t store_manifest_json_reads(struct store *s);

/* <store>/<dir>/<64 hex of hash> into buf (manifests, their binary forms,
 * pending manifests); -ENAMETOOLONG. */
int store_hash_path(const struct store *s, const char *dir, const uint8_t hash[CHUNK_HASH_LEN],
		    char *buf, size_t len);
/* Turn a manifest id or unique hex prefix (>= 12 digits) into its hash. */
int store_manifest_resolve(struct store *s, const char *id, uint8_t hash[CHUNK_HASH_LEN]);
/* Read and parse the manifest file at path, checking that its bytes hash to
 * hash when hash is not NULL. */
int store_manifest_read(const char *path, const uint8_t *hash, struct manifest **out);

/* Call fn for each chunk object: its hash (NULL when the name is not a chunk
 * name), its path and its name relative to the store.  A non-zero return of
 * fn stops the walk and is returned. */
typedef int (*store_chunk_fn)(const uint8_t *hash, const char *path, const char *name, void *arg);
int store_foreach_chunk(struct store *s, store_chunk_fn fn, void *arg);
/* The same over manifests/ (hash NULL for a name that is not 64 hex). */
int store_foreach_manifest(struct store *s, store_chunk_fn fn, void *arg);

/* What a check of chunk objects reads and decodes with (store_check.c): a
 * codec, and room for the largest object and the largest chunk.  init: 0 or
 * -ENOMEM (logged). */
struct store_check_buf {
	struct chunk_codec *codec;
	uint8_t *obj, *raw;
};
int store_check_buf_init(struct store_check_buf *b);
void store_check_buf_release(struct store_check_buf *b);
/* Read entry e's object from the pack fd into b->obj and decode and check
 * it (its bytes into b->raw): 0; -errno if it cannot be read; -ENODATA if
 * the pack ends inside it; -EBADMSG if it is corrupt (logged with why). */
int store_read_pack_object(struct store_check_buf *b, int fd, const struct pack_entry *e);
/* The check of one chunk object, the one store_verify reports by and
 * store_heal drops by: entry e of pack name (open as fd), or the loose
 * object at path.  0 sound; 1 damaged, why saying how (corrupt, cut short,
 * unreadable); for a loose object -ENOENT if it is gone. */
int store_check_pack_entry(struct store_check_buf *b, int fd, const char *name,
			   const struct pack_entry *e, char *why, size_t len);
int store_check_loose(struct store_check_buf *b, const char *path,
		      const uint8_t hash[CHUNK_HASH_LEN], char *why, size_t len);

/* Read the chunk object at path (at most chunk_encode_bound(CHUNK_MAX_RAW)
 * bytes) into obj; *obj_len its size.  -ENOENT if missing, -EBADMSG if too big. */
int store_read_object(const char *path, uint8_t *obj, size_t cap, size_t *obj_len);
/* raw_len from a chunk object's header, or -EBADMSG. */
long store_object_raw_len(const uint8_t *obj, size_t obj_len);

#endif
