/* SPDX-License-Identifier: Apache-2.0 */
/* tier_internal.h — what tier.c shares with tier_fetch.c (the build of an
 * entry whose chunks come from the remote tier as they are written). */
#ifndef THAW_RESTORE_TIER_INTERNAL_H
#define THAW_RESTORE_TIER_INTERNAL_H

#include "restore/engine.h"
#include "restore/tier.h"
#include "store/manifest.h"
#include "store/remote.h"

/* Reserve need bytes of t's budget for the build of hex (the file resv
 * holds the figure until it is removed), evicting what nobody leases. */
int tier_reserve(struct tier *t, const char *hex, uint64_t need, const char *resv);
struct store *tier_store(struct tier *t);
const struct engine_opts *tier_engine_opts(struct tier *t);

/* What a filled build directory holds, for its publication. */
struct tier_fill {
	struct manifest *m;	  /* the snapshot's manifest (the caller frees it) */
	uint64_t bytes;		  /* reserved in resv: the files less their holes */
	struct engine_stats est;  /* the engine's part: the chunks the store had */
	struct remote_fetch_stats fst; /* the fetch's part */
	uint64_t fetched_written; /* bytes of fetched chunks written into the files */
};

/* Fill bdir with snapshot full's files (hex its id's hex) while the chunks
 * the store lacks are fetched from r: each written into the files as it
 * arrives (and stored, remote_fetch_missing_with), the rest read from the
 * store by the engine at the same time.  Reserves the room in resv.  0 and
 * *out, or -errno (logged) with out->m NULL and bdir to be removed. */
int tier_fill_fetching(struct tier *t, const char *hex, const char *full, const char *bdir,
		       const char *resv, struct remote *r, struct tier_fill *out);

#endif
