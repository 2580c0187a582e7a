/* SPDX-License-Identifier: Apache-2.0 */
/* engine.h — materialise a snapshot's image files from the store, fast.
 *
 * Chunk objects are read with io_uring (IORING_OP_READ_FIXED, O_DIRECT where
 * the store's filesystem takes it and the chunks are not in the page cache)
 * into one arena allocated once, locked in memory and registered as fixed
 * buffers, one slot per chunk in flight.  Each of a pool of worker threads has
 * its own ring and its own slots: it takes the next distinct chunk, reads it,
 * decodes it (zstd or raw), checks its SHA-256 and writes it into the target
 * files, which were created and ftruncate()d to their size first, so holes are
 * simply never written.  Writes are pwrite()s, or decodes straight into the
 * file's shared mapping (pages prefaulted with MADV_POPULATE_WRITE): tmpfs
 * takes the inode lock for each write, so many workers writing one large file
 * would queue behind each other; and a raw chunk read through the page cache
 * has its payload read straight into the mapping.  Memory is bounded by the
 * arena, whatever the snapshot size.  A chunk used several times in the
 * snapshot is read and checked once and written to every place it appears.
 */
#ifndef THAW_RESTORE_ENGINE_H
#define THAW_RESTORE_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/manifest.h"
#include "store/store.h"

#define ENGINE_DEFAULT_ARENA (256ull << 20)
/* Reads in flight.  O_DIRECT from a cold disk wants many: on the H100's
 * virtio disk, 34k chunk reads of a 2 GiB snapshot took 1.54-2.13 s
 * (median 1.66) at 256 against 1.63-2.31 s (median 2.10) at 64, four
 * interleaved rounds.  Buffered reads stay at a few per worker (engine.c). */
#define ENGINE_DEFAULT_QD    256
#define ENGINE_UNITS_PER_TAKE 32 /* ~2 MiB of 64 KiB chunks: see fill() in engine.c */

enum engine_direct {
	ENGINE_DIRECT_AUTO = 0, /* buffered when a sample of the chunks is mostly in the page
				 * cache (cachestat), else O_DIRECT if the store's filesystem
				 * takes it, else buffered */
	ENGINE_DIRECT_ON,       /* O_DIRECT or fail */
	ENGINE_DIRECT_OFF,      /* buffered reads (page cache) */
};

enum engine_write {
	ENGINE_WRITE_AUTO = 0, /* mmap above ENGINE_PWRITE_MAX_THREADS workers, or into
				* huge pages with reads through the page cache; else pwrite */
	ENGINE_WRITE_PWRITE,
	ENGINE_WRITE_MMAP,     /* where a file cannot be mapped or populated: pwrite */
};
#define ENGINE_PWRITE_MAX_THREADS 4

enum engine_order {
	ENGINE_ORDER_AUTO = 0, /* shares where the files are written with pwrite (the
				* inode lock), one stream where they are mapped */
	ENGINE_ORDER_SHARES,   /* each worker starts in its own part of the work list (its
				* own file, mostly) and steals from the others when done */
	ENGINE_ORDER_STREAM,   /* all workers take runs from one cursor in store order: the
				* disk sees one nearly sequential stream */
};

/* Called from the calling thread, at most ~20 times a second and once at
 * the end: done of total logical bytes (holes count as done from the start). */
typedef void (*engine_progress_fn)(uint64_t done, uint64_t total, void *arg);

/* A file whose bytes are written elsewhere than into its descriptor.  The
 * engine writes it through map, or with pwrite() where it would have used
 * pwrite on the file itself (engine_write), and never into files[i]. */
struct engine_writer {
	uint8_t *map; /* a shared, writable mapping of the file's size (the caller's) */
	int (*pwrite)(void *arg, const void *buf, size_t len, uint64_t off); /* NULL: none */
	void *arg;
};

struct engine_opts {
	unsigned queue_depth;   /* reads in flight, shared out among the workers (at most 4 each
				 * through the page cache); 0: ENGINE_DEFAULT_QD */
	uint64_t arena_bytes;   /* most bytes of the read arena; 0: ENGINE_DEFAULT_ARENA.  One slot
				 * per read in flight is used (no more help); where the arena
				 * holds fewer, fewer reads are in flight, or fewer workers run. */
	unsigned threads;       /* decode/write workers; 0: online CPUs */
	unsigned units_per_take; /* distinct chunks a worker takes at once; 0: up to
				  * ENGINE_UNITS_PER_TAKE, fewer for small snapshots */
	enum engine_direct direct;
	enum engine_write write;
	enum engine_order order;
	atomic_bool *cancel;    /* may be NULL; when it turns true the engine stops with -ECANCELED */
	/* Another writer fills the same files at the same time (the remote
	 * tier's fetch, tier.h): files are the descriptors it made with
	 * engine_create_files (used as they are, left open; NULL: the engine
	 * makes its own), and a chunk the store lacks is that writer's to
	 * write, not an error (st->skipped_chunks).  Both write a chunk's exact
	 * bytes, so one written twice is harmless. */
	const int *files;
	bool skip_missing;
	/* May be NULL: per file, where its bytes go if not into files[i]
	 * (the mapped layout's windows, restore/mapped.h). */
	const struct engine_writer *writers;
	engine_progress_fn progress; /* may be NULL */
	void *progress_arg;
};

struct engine_stats {
	uint64_t logical_bytes; /* sum of file sizes */
	uint64_t hole_bytes;    /* of which holes, never written */
	uint64_t written_bytes; /* bytes written into the files */
	uint64_t read_bytes;    /* bytes of chunk objects read from the store */
	uint64_t read_into_files; /* of the written bytes, raw chunks read straight into the
				   * files' mappings (page-cache reads only) */
	uint64_t chunks;        /* non-hole chunks in the manifest */
	uint64_t unique_chunks; /* of which distinct: each is read once */
	uint64_t skipped_chunks; /* of those, not in the store and left (opts skip_missing) */
	uint64_t holes;         /* hole runs */
	uint64_t files;
	double seconds;
	double setup_seconds;   /* of which before the workers started: the plan, the files,
				 * the cache sample, the arena */
	bool direct;            /* O_DIRECT was used for the reads */
	int cached_percent;     /* ENGINE_DIRECT_AUTO: share of the sampled chunk pages found in
				 * the page cache; -1 where not looked at */
	bool fixed_buffers;     /* the arena was registered with io_uring */
	bool mapped;            /* written through shared mappings, not pwrite */
	bool shares;            /* workers started in shares of the work list, not one stream */
	bool ring_opens;        /* chunks were opened by io_uring (openat into fixed files) */
	unsigned threads, queue_depth, slots;
	uint64_t slot_bytes;
};

/* opts with every default filled in (threads = online CPUs...). */
void engine_opts_default(struct engine_opts *o);

/* Write the files of manifest m under outdir (created if needed; files in it
 * are replaced).  o may be NULL for the defaults; st may be NULL.  Returns 0,
 * or -errno with the reason logged on the calling thread (log_last_error()):
 * a bad or missing chunk names its id and the file, -ECANCELED if *o->cancel
 * turned true.  A failure on a chunk is also the calling thread's fault
 * (common/fault.h: FAULT_MATERIALIZE, the chunk, the -errno), for a caller to
 * decide on.  On failure outdir holds partial files: the caller removes it. */
int engine_materialize(struct store *s, const struct manifest *m, const char *outdir,
		       const struct engine_opts *o, struct engine_stats *st);

/* The baseline the engine is measured against: one thread, chunk after chunk,
 * pread, decode and check, pwrite.  Same contract as engine_materialize (only
 * o->cancel and o->progress are used). */
int engine_materialize_naive(struct store *s, const struct manifest *m, const char *outdir,
			     const struct engine_opts *o, struct engine_stats *st);

/* Create outdir and every file of m in it, each truncated to its size with its
 * mode; fds[m->nfiles] receives the open (O_RDWR: they may be mapped) descriptors.  Shared by
 * both engines.  On failure no descriptor is left open. */
int engine_create_files(const struct manifest *m, const char *outdir, int *fds);

#endif
