/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h — what the remote tier's own files share (remote.c, the
 * remote's pack index, push, fetch, refs, gc); not for other modules. */
#ifndef THAW_REMOTE_INTERNAL_H
#define THAW_REMOTE_INTERNAL_H

#include "remote/remote.h"
#include "remote/s3.h"
#include "store/pack.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REMOTE_NAME_LEN 32 /* hex digits of a remote pack's name */

struct remote {
	struct s3 *s3;
	char *url;    /* s3://bucket[/prefix] */
	char *prefix; /* "" or "prefix/" */
	char describe[PATH_MAX + 1200];
	char cache_tag[17]; /* names this remote's cache under a store */
};

/* The full key of a name under the remote's prefix, into buf; returns buf
 * (remote.c). */
const char *remote_key(const struct remote *r, char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- the remote's packs and their chunks (remote_index.c) ---- */

struct rpack {
	char name[REMOTE_NAME_LEN + 1];
	uint64_t size;	    /* of the .pack, as listed */
	int64_t mtime_ms;   /* of the .pack */
	bool has_pack, has_idx;
	struct pack_entry *e; /* from its index */
	size_t n;
	bool excluded; /* gc marked it: a push does not rely on it */
};

struct rslot {
	uint32_t pack; /* + 1; 0: a free slot */
	uint32_t entry;
};

/* Every pack of the remote, and a hash table of their chunks. */
struct rindex {
	struct rpack *packs;
	size_t npacks, cap;
	struct rslot *slots;
	size_t nslots; /* a power of two */
};

/* Read the remote's packs and their indexes (cached under s, if given; s
 * NULL: nothing cached).  0, or -errno and x left empty. */
int remote_index_load(struct remote *r, struct store *s, struct rindex *x);
/* The pack named name (REMOTE_NAME_LEN hex digits) in x, added empty if
 * x does not have it yet; NULL: out of memory. */
struct rpack *remote_index_pack(struct rindex *x, const char *name);
/* Free what x holds and empty it (an empty x is fine). */
void remote_index_release(struct rindex *x);
/* Build x's hash table again from its packs (after a pack was added or
 * excluded); 0 or -ENOMEM. */
int remote_index_rehash(struct rindex *x);
/* Where the chunk hash lies in a pack not excluded, or NULL. */
const struct rslot *remote_index_find(const struct rindex *x, const uint8_t *hash);
/* The key of pack p's .pack or .idx (ext "pack" or "idx"), into buf. */
void remote_pack_key(const struct remote *r, const struct rpack *p, const char *ext, char *buf,
		     size_t cap);

/* ---- gc's marks, as a push and gc read them (remote_gc.c) ---- */

/* gc/pending.json: what the last gc marked as unreferenced, and when. */
struct remote_pending {
	bool exists, sweeping;
	char etag[80];
	int64_t marked_ms;
	int grace_s;
	char **keys; /* sorted */
	size_t n;
};

/* Read gc/pending.json into p (none: p->exists false, and 0); -EBADMSG
 * where it is damaged, or another -errno. */
int remote_pending_read(struct remote *r, struct remote_pending *p);
void remote_pending_release(struct remote_pending *p);
/* Whether the mark p lists key. */
bool remote_pending_has(const struct remote_pending *p, const char *key);

#endif
