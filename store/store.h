/* SPDX-License-Identifier: Apache-2.0 */
/* store.h — the content-addressed chunk store.
 *
 * Layout under the store directory:
 *	packs/<16 hex>.pack, .idx chunk objects many to a file, and their index
 *	                          (pack.h): where a put writes new chunks
 *	chunks/<2 hex>/<62 hex>   loose chunk objects (chunk.h), one file each,
 *	                          named by their hash (the layout before packs,
 *	                          still read; THAW_STORE_LAYOUT=loose writes it)
 *	manifests/<64 hex>        manifests (manifest.h), named by the hash of their bytes
 *	manifests-bin/<64 hex>    their binary forms (manifest.h), what a load reads;
 *	                          made again from the JSON where missing or unusable
 *	leases/                   one file per restore in progress, flock()ed by its holder
 *	tmp/                      objects being replaced, or written where the filesystem has
 *	                          no O_TMPFILE; cleared of stale files by gc
 *	lock                      flock: puts hold it shared, gc exclusive
 *
 * Writes are crash-safe: an object is written into an unnamed file in its
 * directory (O_TMPFILE; else a named one in tmp/), fsynced where it must be,
 * and linked to its name; EEXIST means it is already stored.  A reader never
 * sees a partial object, and a crash before the link leaves nothing.  Every
 * function is safe to call from several threads, and several processes may
 * use one store at once.  Functions return 0 or -errno and log the reason
 * (log_last_error() tells it), unless they say otherwise.
 */
#ifndef THAW_STORE_STORE_H
#define THAW_STORE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/chunk.h"
#include "store/manifest.h"

struct store;
struct store_lease;

struct store_stats {
	uint64_t logical_bytes; /* sum over manifests of their files' sizes */
	uint64_t unique_bytes;  /* uncompressed bytes of the distinct chunks */
	uint64_t stored_bytes;  /* bytes of chunk objects on disk */
	uint64_t zero_bytes;    /* sum over manifests of their holes */
	uint64_t chunks;        /* distinct chunk objects */
	uint64_t manifests;
};

struct store_put_stats {
	uint64_t logical_bytes; /* bytes read from the input files */
	uint64_t zero_bytes;    /* of which in holes */
	uint64_t new_bytes;     /* uncompressed bytes of chunks that were not stored yet */
	uint64_t new_stored;    /* bytes written for them */
	uint64_t dup_bytes;     /* uncompressed bytes of chunks that were already there */
	uint64_t chunks;
	double reader_cpu_s;	/* CPU time of the thread that read and cut the input */
	double workers_cpu_s;	/* of the workers: hashing, lookups, encoding, writing */
};

/* Open (creating its layout if needed) the store at dir, with the settings
 * of the environment (config_store_init, common/config.h).  NULL on error, logged. */
struct store *store_open(const char *dir);
struct config_store;
/* The same with settings (a thaw_config's .store; NULL: the environment's). */
struct store *store_open_with(const char *dir, const struct config_store *settings);
void store_close(struct store *s); /* NULL is fine */
const char *store_path(const struct store *s);

/* Path of the loose chunk object named hash, into buf (whether it exists or not). */
int store_chunk_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
		     size_t len);

/* Where a put writes new chunks: into packs (the default), or a file each
 * (THAW_STORE_LAYOUT=loose, struct config_store's loose). */
enum store_layout { STORE_LAYOUT_PACK, STORE_LAYOUT_LOOSE };
void store_set_layout(struct store *s, enum store_layout layout);
/* Whether packs are written with O_DIRECT (where the filesystem takes it;
 * the default, THAW_STORE_DIRECT=1|0, config_store's direct) or
 * through the page cache.  O_DIRECT costs no CPU for the copy and leaves no
 * dirty pages behind, but a snapshot's first restore then reads the disk. */
void store_set_pack_direct(struct store *s, bool direct);
/* Whether a put maps input files of 8 MiB and more (the default,
 * THAW_STORE_MAP=1|0, config_store's map_input) or reads them with
 * read(), which copies every byte once more.  A mapped file truncated under
 * the put fails that put (common/sigbus.h), never the process. */
void store_set_input_map(struct store *s, bool map);
/* How many workers a put runs, each writing a pack of its own (0, the
 * default: one a CPU, at most the put's limit).  One puts every new chunk
 * of a put into one pack, whatever the threads' timing (the tests that
 * damage chunks of one pack). */
void store_set_put_workers(struct store *s, unsigned n);

/* Where a chunk object lies. */
#define STORE_LOOSE UINT32_MAX
struct store_chunk_loc {
	uint32_t pack;	 /* a pack's number (store_pack_path()), or STORE_LOOSE */
	uint32_t stored; /* the object's size (0 for a loose object: its file's size) */
	uint64_t off;	 /* where the object starts in its pack, a multiple of 4096 */
};
/* Find the chunk named hash: in a pack (looking for packs written since,
 * when it is in none known) or loose.  0, or -ENOENT. */
int store_chunk_locate(struct store *s, const uint8_t hash[CHUNK_HASH_LEN],
		       struct store_chunk_loc *loc);
/* Path of pack number pack, into buf; -ENOENT for no such number. */
int store_pack_path(struct store *s, uint32_t pack, char *buf, size_t len);
/* Look at packs/ again now (a reader about to locate many chunks after
 * taking its lease: gc may have rewritten packs since the last look). */
int store_packs_refresh(struct store *s);
/* Read the chunk object named hash, wherever it lies, into obj (cap bytes);
 * *obj_len its size.  -ENOENT if it is nowhere, -EBADMSG if larger than cap
 * or cut short in its pack. */
int store_read_chunk(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], uint8_t *obj,
		     size_t cap, size_t *obj_len);

/* A chunk a reader found damaged (a restore: it failed its check where the
 * store said it lies): read and checked again, and if it is bad, taken out
 * of the store's index (its pack's index file rewritten without it, crash-
 * safely; a loose object removed), so that the next put meeting those bytes
 * writes them anew instead of deduplicating against the damaged copy, which
 * gc then reclaims.  This store object never indexes that copy again,
 * whatever an index file says.  1 dropped, 0 sound (nothing done), -ENOENT
 * nowhere, or -errno. */
int store_chunk_drop_damaged(struct store *s, const uint8_t hash[CHUNK_HASH_LEN]);

/* A snapshot found damaged (a restore met a bad chunk of manifest id): every
 * chunk the manifest names is checked, and every other chunk of each pack a
 * damaged one lies in, as store_verify checks them (the same function), and
 * each damaged one is dropped as store_chunk_drop_damaged drops one (a pack's
 * index rewritten once).  Each damaged or missing chunk is reported through
 * bad() (may be NULL) with store_verify's words.  Reads every chunk of the
 * snapshot: as long as its materialisation from a cold store.  Returns the
 * number of damaged or missing chunks (>= 0), or -errno (a drop that failed
 * too: its chunk stays out of this store object's index all the same). */
int store_heal(struct store *s, const char *id,
	       void (*bad)(const char *chunk_id, const char *why, void *arg), void *arg);

/* Ingest files into a new manifest named name (meta: an object or NULL; the
 * store takes its own reference) and print its id into id.  Each path is a
 * regular file (stored under its base name) or a directory (its regular files,
 * recursively, under their paths relative to it).  progress: draw a progress
 * line on a terminal.  stats may be NULL. */
int store_put(struct store *s, const char *name, const char *const *paths, size_t npaths,
	      json_t *meta, bool progress, char id[CHUNK_ID_LEN], struct store_put_stats *stats);

/* Load and check the manifest id ("sha256:<hex>"; a unique hex prefix of at
 * least 12 digits is accepted too).  -ENOENT if there is none. */
int store_manifest_load(struct store *s, const char *id, struct manifest **out,
			char full_id[CHUNK_ID_LEN]);
/* A store object keeps the last used parsed manifests: at most this many,
 * holding at most STORE_MANIFEST_CACHE_BYTES (store_set_manifest_cache_bytes
 * changes it).  A 3.2 GB GPU image's manifest holds ~3 MB parsed and costs
 * ~0.1-0.5 s to read and check, so that every function of a busy thawd keeps
 * its manifest parsed. */
#define STORE_MANIFEST_CACHE	   64
#define STORE_MANIFEST_CACHE_BYTES (256ull << 20)
void store_set_manifest_cache_bytes(struct store *s, uint64_t bytes);

/* How many manifest files this store object has read and checked: the loads
 * its cache of parsed manifests could not answer (a put leaves the manifest it
 * wrote in that cache, so the first start after a snapshot does not read it). */
uint64_t store_manifest_reads(struct store *s);

/* Write the files of manifest id under outdir (created if needed), holes as
 * holes.  Each file is written aside and renamed into place when complete, so
 * a failure leaves no half-written file, nor a directory it made in outdir; a
 * bad chunk fails with its id named, and is the calling thread's fault
 * (common/fault.h), as the restore engine's. */
int store_get(struct store *s, const char *id, const char *outdir, bool progress);

/* Manifests as a JSON array of {"id","name","created","files","logical_bytes"}. */
int store_list(struct store *s, json_t **out);
int store_stat(struct store *s, struct store_stats *st);

/* Read and check every chunk.  Each bad or missing chunk is reported through
 * bad() (may be NULL) and logged.  Returns the number of bad chunks (>= 0), or -errno. */
int store_verify(struct store *s, void (*bad)(const char *chunk_id, const char *why, void *arg),
		 void *arg);
/* store_verify's cheap half, reading no chunk object: every manifest and
 * its binary form parse, every chunk a manifest names is in a usable pack
 * index or loose, and every pack is as long as its index says.  A chunk
 * whose bytes are damaged in place passes (store_verify finds it).  Returns
 * the number of bad objects (>= 0), or -errno. */
int store_check(struct store *s, void (*bad)(const char *chunk_id, const char *why, void *arg),
		void *arg);

/* Delete chunks no manifest references and no live lease protects, and stale
 * temp files.  freed_* may be NULL. */
int store_gc(struct store *s, uint64_t *freed_chunks, uint64_t *freed_bytes);

/* A restore in progress leases its manifest: gc keeps the manifest and its
 * chunks while the lease lives (also across processes; a lease whose holder
 * died is stale and ignored).  NULL on error. */
struct store_lease *store_lease_take(struct store *s, const char *manifest_id);
void store_lease_release(struct store_lease *l); /* NULL is fine */

/* Delete a manifest (its chunks go at the next gc). */
int store_manifest_delete(struct store *s, const char *id);

#endif
