/* SPDX-License-Identifier: Apache-2.0 */
/* fill.h — what a module that fills the store from elsewhere, or reads it
 * for elsewhere (remote/: the remote tier's fetch, push and gc), uses
 * beyond store.h: the store's lock, a manifest's pending place and its
 * file, crash-safe object writes, and a set of chunk hashes.  The store's
 * own files have it through internal.h. */
#ifndef THAW_STORE_FILL_H
#define THAW_STORE_FILL_H

#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/file.h>

/* Take the store's lock file (LOCK_SH for puts and leases, LOCK_EX for gc);
 * returns the fd that holds it, or -errno.  Close it to release. */
int store_lock(struct store *s, int how);

/* Write len bytes as the object at path, crash-safely: an unnamed file
 * (O_TMPFILE) in path's directory, fsynced if sync (else its writeback is only
 * started), then linked to path, which it never replaces (its directory
 * created if missing).  If replace, or where the filesystem has no O_TMPFILE:
 * a unique O_EXCL file in tmp/, then renamed to path (over it if replace;
 * else RENAME_NOREPLACE, or link() where that is not supported).
 * Returns 1 if written, 0 if path already existed, or -errno. */
int store_write_object(struct store *s, const char *path, const void *buf, size_t len, bool sync,
		       bool replace);

/* Manifests being filled: a fetch from the remote tier (remote/)
 * writes the manifest it fetches chunks for here first (store_pending_put),
 * and removes it (store_pending_drop) once the real manifest is written,
 * after all its chunks.  gc keeps the chunks of a pending manifest younger
 * than STORE_PENDING_MAX_AGE_S (a fetch that was killed can go on where it
 * stopped) and removes older ones. */
#define STORE_PENDING_DIR "pending"
#define STORE_PENDING_MAX_AGE_S (24 * 3600)
int store_pending_put(struct store *s, const uint8_t hash[CHUNK_HASH_LEN], const void *json,
		      size_t len);
void store_pending_drop(struct store *s, const uint8_t hash[CHUNK_HASH_LEN]);

/* Path of manifest hash, into buf. */
int store_manifest_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
			size_t len);

/* A set of chunk hashes. */
struct hash_set {
	uint8_t (*slots)[CHUNK_HASH_LEN];
	bool *used;
	size_t cap, n;
};
void hash_set_init(struct hash_set *h);
void hash_set_release(struct hash_set *h);
int hash_set_add(struct hash_set *h,
		 const uint8_t hash[CHUNK_HASH_LEN]); /* 1 new, 0 had, -ENOMEM */
bool hash_set_has(const struct hash_set *h, const uint8_t hash[CHUNK_HASH_LEN]);

#endif
