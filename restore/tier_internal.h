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

/* Reserve need bytes of t's budget for the build of hex (the file resv
 * holds the figure until it is removed), evicting what nobody leases. */
int tier_reserve(struct tier *t, const char *hex, uint64_t need, const char *resv);
struct store *tier_store(struct tier *t);
const struct engine_opts *tier_engine_opts(struct tier *t);
uint64_t tier_mapped_min(struct tier *t); /* 0: no mapped images */
/* Record in bdir/.mapped-why why the entry has no mapped image. */
void tier_record_unmapped(const char *bdir, const char *why);

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
