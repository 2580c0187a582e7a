/* SPDX-License-Identifier: Apache-2.0 */
/* tier.h — the RAM tier: snapshots materialised once, restored many times.
 *
 * <dir>/<64 hex>/ holds the image files of one snapshot, complete (it is built
 * in <dir>/.build-* and renamed into place).  The tier has a byte budget and
 * evicts least recently used snapshots that nobody leases.  Concurrent
 * acquires of one snapshot, in one process or several, wait on a single
 * materialisation (flock on <dir>/.locks/<hex>).
 */
#ifndef THAW_RESTORE_TIER_H
#define THAW_RESTORE_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#include "common/config.h"

struct engine_opts;
struct tier;
struct tier_lease;

/* The tier's root, before tier_open (tier_root.c).  Where thaw can (root, a
 * kernel with huge pages for tmpfs, mode not OFF, dir not a mount already and
 * empty), dir becomes a tmpfs of its own mounted with huge=within_size and a
 * size a little above budget; a tmpfs that thaw mounted there earlier is
 * reused (and resized to the budget); a mount someone else made, or a root
 * where a mount is not possible, is used as the plain directory it is.  One
 * log line says which.  Nothing is ever unmounted here: the mount outlives
 * thawd, as the files of a plain tier do. */
enum tier_root_kind {
	TIER_ROOT_PLAIN,       /* a directory on whatever filesystem holds it */
	TIER_ROOT_MOUNTED,     /* a huge-page tmpfs this call mounted */
	TIER_ROOT_REUSED,      /* a huge-page tmpfs thaw had mounted before */
	TIER_ROOT_USER,        /* a mount of someone else's */
	TIER_ROOT_WOULD_MOUNT, /* tier_root_probe only: prepare would mount one */
};
/* Returns 0 (kind may be NULL), or -errno: dir cannot be created, or mode is
 * CONFIG_HUGE_ON and no huge-page tmpfs could be had (-EOPNOTSUPP). */
int tier_root_prepare(const char *dir, uint64_t budget, enum config_huge mode,
		      enum tier_root_kind *kind);
/* What tier_root_prepare would do, changing nothing (thaw doctor); why: the
 * reason in words for PLAIN and USER.  Returns 0. */
int tier_root_probe(const char *dir, enum config_huge mode, enum tier_root_kind *kind, char *why,
		    size_t len);
const char *tier_root_kind_name(enum tier_root_kind k);
/* Does this VM give free memory back to its host in huge-page blocks
 * (virtio_balloon free page reporting)?  auto mounts no huge tmpfs then. */
bool tier_root_page_reporting(void);
/* Unmount the tier tmpfs thaw mounted at dir (tests, the benchmark):
 * -ENOENT where dir is no such mount, which is then left alone. */
int tier_root_unmount(const char *dir);

/* Open the tier at dir with a budget; opts NULL for the engine's defaults.
 * Entries left by an earlier run are checked (complete ones kept, partial ones
 * removed).  NULL on error. */
struct tier *tier_open(const char *dir, uint64_t budget_bytes, struct store *s,
		       const struct engine_opts *opts);
void tier_close(struct tier *t);

/* Build a mapped variant (restore/mapped.h) of each snapshot this tier
 * materialises from now on, mapping VMAs with at least min_bytes of pages;
 * 0: none.  tier_open's default: MAPPED_MIN_BYTES_DEFAULT. */
void tier_set_mapped(struct tier *t, uint64_t min_bytes);

/* Lease snapshot id (a manifest id), materialising it first if it is not in
 * the tier.  While leased it is never evicted. */
int tier_acquire(struct tier *t, const char *snapshot_id, struct tier_lease **out);
/* tier_acquire of a snapshot that the store may lack (in part, or its
 * manifest too): its chunks the store lacks are fetched from the remote r
 * (remote/remote.h) and written into the entry as they arrive, while the
 * engine reads the others from the store; they join the store as well,
 * then the manifest.  fst (may be NULL): the fetch's figures.  Where the
 * entry is complete already, nothing is fetched: the store may still lack
 * the snapshot (remote_fetch_missing makes it whole). */
struct remote;
struct remote_fetch_stats;
int tier_acquire_fetching(struct tier *t, const char *snapshot_id, struct remote *r,
			  struct remote_fetch_stats *fst, struct tier_lease **out);
/* In an entry that left pages files out (they are in its mapped image
 * only): [[path, size], ...] of them. */
#define TIER_ELIDED ".elided"

/* The directory holding the snapshot's image files.  Where the entry has a
 * mapped image, the pages files it holds are in the mapped image only:
 * call tier_lease_whole before restoring from this directory. */
const char *tier_lease_path(const struct tier_lease *l);
/* Have the leased entry hold its whole CRIU image: the pages files its
 * build wrote only into the mapped image (tier_layout.c) are written from
 * the store (once per entry, under its build lock; counted in the budget).
 * For a start that does not map (lazy or eager pages).  0 or -errno. */
int tier_lease_whole(struct tier *t, struct tier_lease *l);
/* Does the entry lack pages files that are in its mapped image only? */
bool tier_lease_partial(const struct tier_lease *l);
/* The directory of the entry's mapped variant (image/ and mem/), or NULL
 * when it has none; then tier_lease_mapped_why says why, in words. */
const char *tier_lease_mapped(const struct tier_lease *l);
const char *tier_lease_mapped_why(const struct tier_lease *l);
/* true if the snapshot was already in the tier ("ram"), false if this acquire
 * (or one it waited on) materialised it ("disk"). */
bool tier_lease_hit(const struct tier_lease *l);
/* The descriptor that holds the lease (a flock, which lasts while any
 * process holds a duplicate of it): a helper that inherits it keeps the
 * snapshot in the tier until it exits.  Still the lease's: do not close it. */
int tier_lease_fd(const struct tier_lease *l);
/* Milliseconds this acquire spent materialising or waiting. */
double tier_lease_materialize_ms(const struct tier_lease *l);
void tier_release(struct tier_lease *l); /* NULL is fine */

uint64_t tier_used_bytes(struct tier *t);
uint64_t tier_budget_bytes(struct tier *t);

/* Who found an entry damaged: a reader that checks what it reads (thawd's
 * fill of device memory, restore/gpu_prefill.c), or the scrub. */
enum tier_found_by {
	TIER_FOUND_FILL,
	TIER_FOUND_SCRUB,
	TIER_FOUND_N,
};
const char *tier_found_by_name(enum tier_found_by by); /* "fill", "scrub" */

/* What this tier object (this process) did since tier_open. */
struct tier_stats {
	uint64_t materializations; /* snapshots this process read from the store */
	uint64_t hits;             /* acquires that found the snapshot complete */
	uint64_t waits;            /* acquires that waited on another's materialisation */
	uint64_t evictions, evicted_bytes;
	uint64_t read_bytes;       /* chunk bytes read from the store */
	uint64_t written_bytes;    /* image bytes written into the tier */
	uint64_t damaged[TIER_FOUND_N]; /* entries dropped as damaged, by who found it */
	uint64_t rematerialized;   /* entries materialised again after being dropped so */
	uint64_t scrubbed_bytes;   /* bytes the scrub read and checked */
	uint64_t scrub_passes;     /* passes the scrub finished over every entry */
};
void tier_get_stats(struct tier *t, struct tier_stats *st);

/* The RAM tier's integrity (tier_sums.h: each entry's checksums, made when
 * it is materialised).  A reader that found bytes of the entry whose
 * directory is dir (a lease's path, or where a container sees it) unlike
 * their checksum says so here, in any thread: the next tier_acquire of that
 * entry, and the scrub at once, drop it and materialise it again from the
 * store.  Kept for this process only, and for the directory that was
 * damaged (an entry made since is another). */
void tier_damage_report(const char *dir, enum tier_found_by by, const char *why);

/* The scrub (tier_scrub.c): a thread that reads every entry's files again
 * and checks them against their checksums, rate bytes a second at most;
 * an entry found damaged is dropped, logged, counted (tier_stats) and
 * materialised again.  Passes over the whole tier follow each other at
 * least TIER_SCRUB_PASS_S apart ($THAW_TIER_SCRUB_PASS_S).  NULL where
 * rate is 0 (no scrub) or the thread cannot start (logged). */
#define TIER_SCRUB_RATE_DEFAULT (64ull << 20)
#define TIER_SCRUB_PASS_S 60
struct tier_scrub;
struct tier_scrub *tier_scrub_start(struct tier *t, uint64_t rate);
void tier_scrub_stop(struct tier_scrub *sc); /* NULL is fine */
/* One pass over every entry, here and now, rate bytes a second at most (0:
 * no limit): the scrub's, for tests.  0, or -errno; *damaged (may be NULL)
 * the entries it found damaged. */
int tier_scrub_pass(struct tier *t, uint64_t rate, unsigned *damaged);

#endif
