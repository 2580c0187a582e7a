/* SPDX-License-Identifier: Apache-2.0 */
/* tier_internal.h — what tier.c shares with tier_fetch.c (the build of an
 * entry whose chunks come from the remote tier as they are written). */
#ifndef THAW_RESTORE_TIER_INTERNAL_H
#define THAW_RESTORE_TIER_INTERNAL_H

#include "restore/engine.h"
#include "restore/mapped.h"
#include "restore/tier.h"
#include "store/manifest.h"
#include "remote/remote.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

/* The tier and a lease of one of its entries (tier.c; the integrity of
 * entries, tier_scrub.c). */
#define HEX_LEN (2 * CHUNK_HASH_LEN)
/* Room left in a PATH_MAX for any name under the tier directory. */
#define TIER_DIR_MAX (PATH_MAX - 512)
/* Snapshots whose entry was dropped as damaged and not yet made again. */
#define REDO_MAX 16

struct tier {
	char dir[TIER_DIR_MAX];
	uint64_t budget;
	struct store *s;
	struct engine_opts opts;
	atomic_uint seq;
	uint64_t mapped_min; /* build mapped variants of VMAs this large; 0: none */
	pthread_mutex_t mu; /* st, redo */
	struct tier_stats st;
	char redo[REDO_MAX][HEX_LEN + 1];
	unsigned nredo;
};

struct tier_lease {
	char hex[HEX_LEN + 1];
	int fd; /* LOCK_SH on .locks/<hex> */
	dev_t dev; /* its directory when leased */
	ino_t ino;
	bool hit;
	bool mapped; /* <path>/.mapped is there */
	double ms;
	char path[PATH_MAX];
	char mapped_path[PATH_MAX + 16];
	char mapped_why[256];
};

/* Open .locks/<name> of t and flock it how: the descriptor (close drops
 * the lock), or -errno (-EWOULDBLOCK with LOCK_NB). */
int tier_lock(struct tier *t, const char *name, int how);

/* Reserve need bytes of t's budget for the build of hex (the file resv
 * holds the figure until it is removed), evicting what nobody leases. */
int tier_reserve(struct tier *t, const char *hex, uint64_t need, const char *resv);
struct store *tier_store(struct tier *t);
const struct engine_opts *tier_engine_opts(struct tier *t);
uint64_t tier_mapped_min(struct tier *t); /* 0: no mapped images */
/* Record in bdir/.mapped-why why the entry has no mapped image. */
void tier_record_unmapped(const char *bdir, const char *why);

/* --- tier_scrub.c: the integrity of entries. */

/* Lease the entry of hex (its 64 digits) only where it is complete, and
 * without making it the most recently used: -ENOENT where it is not. */
int tier_lease_existing(struct tier *t, const char *hex, struct tier_lease **out);
/* The leased entry's directory, as it was when leased: an entry made
 * again since is another directory. */
void tier_lease_ident(const struct tier_lease *l, dev_t *dev, ino_t *ino);
/* Drop the entry of hex as damaged (by found it; why, what was found), if
 * its directory is still (dev, ino): its metadata removed, its directory
 * renamed away and removed, even while leased (a file an instance maps
 * lives on in its mapping, never truncated), logged and counted; its next
 * materialisation is counted as a re-materialisation.  1 dropped, 0 it is
 * gone or another already, or -errno. */
int tier_drop_damaged(struct tier *t, const char *hex, dev_t dev, ino_t ino,
		      enum tier_found_by by, const char *why);
/* The scrub read and checked bytes; pass: it finished a pass. */
void tier_count_scrub(struct tier *t, uint64_t bytes, bool pass);

/* Was the entry of hex reported damaged by a reader (tier_damage_report)?
 * With drop (its build lock held), it is dropped if so. */
bool tier_drop_reported(struct tier *t, const char *hex, bool drop);
/* hex was materialised: counted as made again if it had been dropped as
 * damaged. */
void tier_redo_done(struct tier *t, const char *hex);

/* --- tier_layout.c: an entry's pages written once, into the mapped image. */

/* Is path a CRIU pages file ("pages-<id>.img")? */
bool tier_is_pages_file(const char *path);

/* A manifest's pages files, or all its other files, as a manifest of their
 * own for the engine (it shares m's file entries: m must outlive it). */
struct tier_part {
	struct manifest view;
	bool pages;	  /* the pages files (the bulk: the one that reports progress) */
	size_t *idx;	  /* the view's file k is m's file idx[k] */
	int *fds;	  /* the view's descriptors and writers, for the engine */
	struct engine_writer *writers;
};
int tier_part_view(const struct manifest *m, bool pages, struct tier_part *p);
void tier_part_release(struct tier_part *p);
/* The engine's figures of both parts, summed into sum. */
void tier_stats_add(struct engine_stats *sum, const struct engine_stats *part);
struct tier_layout;
/* The engine on part p, writing into fds (indexed by m's files) in bdir,
 * and through lay's windows where it has them (lay may be NULL). */
int tier_part_materialize(struct tier *t, struct tier_part *p, const char *bdir, const int *fds,
			  const struct tier_layout *lay, bool skip_missing, atomic_bool *cancel,
			  struct engine_stats *st);

struct tier_layout {
	struct mapped_windows win;
	const struct mapped_window **wins; /* per file of the manifest: its window, or NULL */
	bool windows;	  /* the pages go through windows */
	bool decided;	  /* bdir/.mapped is made, or .mapped-why says why not */
	struct mapped_result res;
	double plan_ms;
};
/* Once every file of m but the pages files is written in bdir: the mapped
 * image's layout and its windows (bdir/.mapped), or the reason it has none
 * (bdir/.mapped-why).  Where windows do not apply (logged) nothing is
 * decided and the pages files are to be written as they are.  0 or -errno
 * (out of memory). */
int tier_layout_begin(struct tier *t, const char *bdir, const struct manifest *m,
		      struct tier_layout *lay);
/* Every pages file went through its window: unmap them, remove the pages
 * files the windows stood for and list them in bdir/.elided; *bytes (the
 * entry's bytes in RAM) becomes what the entry now holds. */
int tier_layout_finish(struct tier_layout *lay, const char *bdir, const struct manifest *m,
		       uint64_t *bytes);
void tier_layout_release(struct tier_layout *lay);

/* What a filled build directory holds, for its publication. */
struct tier_fill {
	struct manifest *m;	  /* the snapshot's manifest (the caller frees it) */
	uint64_t bytes;		  /* reserved in resv: the files less their holes */
	struct engine_stats est;  /* the engine's part: the chunks the store had */
	struct remote_fetch_stats fst; /* the fetch's part */
	uint64_t fetched_written; /* bytes of fetched chunks written into the files */
	struct tier_layout lay;	  /* the mapped image's layout (tier_layout_release it) */
};

/* Fill bdir with snapshot full's files (hex its id's hex) while the chunks
 * the store lacks are fetched from r: each written into the files as it
 * arrives (and stored, remote_fetch_missing_with), the rest read from the
 * store by the engine at the same time.  Reserves the room in resv.  0 and
 * *out, or -errno (logged) with out->m NULL and bdir to be removed. */
int tier_fill_fetching(struct tier *t, const char *hex, const char *full, const char *bdir,
		       const char *resv, struct remote *r, struct tier_fill *out);

#endif
