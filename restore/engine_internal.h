/* SPDX-License-Identifier: Apache-2.0 */
/* engine_internal.h — one run of the io_uring restore engine (engine.h), as
 * its parts share it:
 *
 *   engine.c         the run: options, the first error, the arena, the
 *                    worker threads started and watched, the stats
 *   engine_plan.c    the work list: the distinct chunks, where each lies
 *                    in the store, read in which order and in which extents
 *   engine_worker.c  a worker: its ring, its reads queued and reaped, its
 *                    share of the work list taken
 *   engine_write.c   a chunk read: checked (and decoded) and written to
 *                    every place it occurs, through the files' mappings or
 *                    pwrite
 *
 * Split so that each part can be read alone: the work list is made once,
 * before any worker starts, and only read by them afterwards; a worker's
 * ring and slots are its own; only the error, the counters and the shares
 * are written by several threads.
 */
#ifndef THAW_ENGINE_INTERNAL_H
#define THAW_ENGINE_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fault.h"
#include "restore/engine.h"

#define ENGINE_ALIGN     4096u
struct occ { /* one non-hole chunk of the manifest */
	uint32_t file, chunk;
};

struct unit { /* one distinct chunk: read once, written to every occurrence */
	uint32_t first; /* index into order[] */
	uint32_t count; /* occurrences, contiguous in order[] */
	uint32_t pack;	/* its pack, an index into eng.pack_fds; NO_PACK: a loose file */
	uint32_t stored; /* its object's bytes where it lies */
	uint64_t off;	/* where the object starts in its pack */
	bool missing;	/* found nowhere in the store */
};

#define NO_PACK UINT32_MAX

/* One read: a run of distinct chunks that lie one after the other in one
 * pack (or one chunk: a loose one, or any read through the page cache). */
struct extent {
	uint32_t unit;	 /* its first, an index into units[] */
	uint32_t nunits;
	uint32_t len;	 /* bytes from off to the end of its last object */
	uint64_t off;	 /* where its first object starts */
};

/* A read in flight, in a worker's part of the arena (engine_worker.c). */
struct slot;

/* A worker's share of the work list: a contiguous part of it, which the
 * others take from too once theirs is done.  One cache line each: every take
 * is an atomic add on it. */
struct share {
	_Alignas(64) _Atomic size_t next;
	size_t end;
};

struct eng;

struct worker { /* one of the pool, with everything it touches per chunk */
	struct eng *e;
	pthread_t tid;
	struct io_uring ring;
	bool ring_ok, fixed; /* ring_ok: made (and exited by the worker's thread) */
	bool ring_files; /* chunks are opened by the ring into fixed file slots */
	struct slot *slots;
	unsigned nslots;
	uint32_t *freel; /* stack of free slots */
	unsigned nfree;
	uint32_t *done;  /* slots whose completions are all in */
	unsigned ndone;
	size_t take, take_end; /* the distinct chunks it took, not yet queued */
	unsigned inflight;    /* slots with completions still to come */
	unsigned unsubmitted; /* of which queued but not yet submitted */
	char *paths;
	struct chunk_codec *codec;
	uint8_t *raw;
};

struct eng {
	struct store *s;
	const struct manifest *m;
	const char *outdir;
	atomic_bool *cancel;

	struct occ *occ;
	uint32_t *order;
	struct unit *units;
	size_t nocc, nunits;
	struct extent *exts; /* the work list */
	size_t nexts;
	int *pack_fds;	   /* the packs the chunks lie in, opened once */
	uint32_t *pack_nos; /* their store numbers */
	size_t npacks;
	bool packs_direct; /* pack_fds are O_DIRECT */
	struct share *shares; /* the work list cut in one share per worker, or one */
	size_t nshares;
	int *fds;	    /* the files the engine made and closes; -1 where another's */
	const int *files;   /* the files written: fds, or the caller's (opts files) */
	uint8_t **maps; /* each file mapped shared, or NULL: write with pwrite */
	const struct engine_writer *writers; /* opts writers */
	atomic_bool populate; /* MADV_POPULATE_WRITE works here */
	bool mapped;          /* files are written through mappings */

	uint8_t *arena;
	size_t arena_len;
	size_t slot_bytes;
	unsigned slots_per_worker;
	size_t units_per_take; /* extents a worker takes at once */
	struct worker *workers;
	unsigned nworkers;
	atomic_bool direct; /* reads are O_DIRECT; turned off for good where refused */
	enum engine_direct direct_mode;

	pthread_mutex_t mu;
	pthread_cond_t done_cv;
	unsigned running; /* workers not yet finished, under mu */

	atomic_bool stop;
	int err;         /* first error, under mu */
	char errmsg[1024];
	struct fault fault; /* its facts (fault_note on the calling thread) */
	_Atomic uint64_t written, read, read_into_files;
};

static inline const struct manifest_chunk *eng_occ_chunk(const struct eng *e, uint32_t o)
{
	return &e->m->files[e->occ[o].file].chunks[e->occ[o].chunk];
}

static inline const struct manifest_chunk *eng_unit_chunk(const struct eng *e, const struct unit *u)
{
	return eng_occ_chunk(e, e->order[u->first]);
}

/* engine.c */

/* Record the first error (the rest are consequences) and make every worker
 * stop. */
void __attribute__((format(printf, 3, 4))) eng_set_error(struct eng *e, int err, const char *fmt,
							  ...);
/* Chunk c (at occurrence o) failed with err: the engine's error names it,
 * and its fault carries it. */
void eng_chunk_failed(struct eng *e, const struct manifest_chunk *c, uint32_t o, int err,
		      const char *why);
/* Is the run stopped (an error, or the caller's cancel, made an error
 * here)? */
bool eng_cancelled(struct eng *e);

/* engine_plan.c */

/* The work list's distinct chunks and their occurrences, from the
 * manifest; st's counts of files, chunks and holes.  0 or -errno. */
int eng_plan(struct eng *e, struct engine_stats *st);
/* Where each distinct chunk lies, and the slot size that holds the
 * largest.  0 or -errno. */
int eng_locate_units(struct eng *e);
/* Open the packs the chunks lie in (O_DIRECT when the reads are); closed
 * by eng_close_packs.  0 or -errno. */
int eng_open_packs(struct eng *e);
void eng_close_packs(struct eng *e);
/* Without the chunks the store lacks (engine_opts skip_missing). */
void eng_drop_missing(struct eng *e, struct engine_stats *st);
/* The extents the workers read, in the order they read them.  0 or
 * -ENOMEM. */
int eng_build_extents(struct eng *e);
/* How much of a sample of the chunks the page cache holds, in percent; -1
 * when none could be looked at. */
int eng_cached_percent(struct eng *e);
/* The file unit u's object lies in: its pack, or its own file. */
int eng_unit_path(const struct eng *e, const struct unit *u, char *buf, size_t len);

/* engine_worker.c */

/* A worker's thread (pthread_create's fn, arg its struct worker): runs
 * until the chunks are all taken or the run stops. */
void *eng_worker_main(void *arg);
/* What a worker leaves once its thread has ended. */
void eng_worker_free(struct worker *w);

/* engine_write.c */

/* Check unit u's object (obj_len bytes at obj; with dest, its payload read
 * straight into the file there) and write it to every place it occurs.
 * False on an error (set for everyone). */
bool eng_process_unit(struct worker *w, const struct unit *u, const uint8_t *obj, size_t obj_len,
		      uint8_t *dest);
/* Where occurrence o goes in its file's mapping, prefaulted; NULL: write it
 * with pwrite. */
uint8_t *eng_map_dest(struct eng *e, uint32_t o);
/* Map the files where that pays (or take the writers' mappings); undone by
 * eng_unmap_files.  0 or -ENOMEM. */
int eng_map_files(struct eng *e, const struct engine_opts *o);
void eng_unmap_files(struct eng *e);

#endif
