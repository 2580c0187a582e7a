/* SPDX-License-Identifier: Apache-2.0 */
/* engine_plan.c — the engine's work list (engine_internal.h): made once,
 * before any worker starts.  The manifest's chunks are deduplicated into
 * units (each distinct chunk read once, written to all its places), each
 * located in the store (a pack and an offset, or a loose file), and cut
 * into extents, the reads: in store order and joined with their neighbours
 * where the reads go to the disk with O_DIRECT, one chunk each in the
 * order they first occur where they go through the page cache.
 */
#define LOG_PREFIX "engine: "
#include "restore/engine_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* cachestat(2), Linux 6.5: the same number on every architecture; glibc 2.36
 * and the kernel headers here know neither the call nor its structs. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#define ENGINE_CACHE_SAMPLE   64 /* chunks looked at to judge the page cache */
#define ENGINE_EXTENT_BYTES   (1u << 20)  /* one O_DIRECT read of neighbouring chunks */
#define ENGINE_EXTENT_GAP     (64u << 10) /* bytes of others read through between two */

struct cachestat_range_ {
	uint64_t off, len;
};

struct cachestat_ {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* The work list: distinct chunks, in the order they first occur (so that reads
 * and writes go roughly front to back), each with all its occurrences.  One
 * pass through a hash table: sorting the occurrences by hash (the first
 * design) took ~0.1 s for the ~270,000 chunks of a 17 GB image. */
int eng_plan(struct eng *e, struct engine_stats *st)
{
	const struct manifest *m = e->m;
	uint32_t *table = NULL, *uidx = NULL;
	size_t n = 0, i, j, cap;
	int ret = 0;

	for (i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];

		st->logical_bytes += f->size;
		for (j = 0; j < f->nchunks; j++) {
			const struct manifest_chunk *c = &f->chunks[j];

			if (c->zero) {
				st->holes++;
				st->hole_bytes += c->len;
				continue;
			}
			/* The manifest came from disk: a stored size the decoder could
			 * never accept would only overrun a slot. */
			if (c->stored < CHUNK_HEADER_SIZE || c->stored > CHUNK_HEADER_SIZE + c->len ||
			    c->len > CHUNK_MAX_RAW) {
				char id[CHUNK_ID_LEN];
				chunk_id_format(c->hash, id);
				pr_err("chunk %s in %s: stored size %u impossible for %llu bytes", id,
				       f->path, c->stored, (unsigned long long)c->len);
				return -EINVAL;
			}
			n++;
		}
	}
	if (n > UINT32_MAX / 4)
		return -E2BIG;
	st->files = m->nfiles;
	st->chunks = n;
	e->nocc = n;
	if (!n)
		return 0;
	for (cap = 1024; cap < 2 * n; cap *= 2)
		;
	/* occ and units zeroed, though each entry is written before it is read:
	 * the static analyzer cannot follow table[] to see that a probe reaches
	 * only units (and their occurrences) made earlier, and fresh pages cost
	 * nothing to clear. */
	e->occ = calloc(n, sizeof(*e->occ));
	e->order = malloc(n * sizeof(*e->order));
	e->units = calloc(n, sizeof(*e->units));
	uidx = malloc(n * sizeof(*uidx));
	table = calloc(cap, sizeof(*table)); /* a unit's number + 1; 0: free */
	if (!e->occ || !e->order || !e->units || !uidx || !table) {
		ret = -ENOMEM;
		goto out;
	}
	n = 0;
	for (i = 0; i < m->nfiles; i++)
		for (j = 0; j < m->files[i].nchunks; j++) {
			const uint8_t *h = m->files[i].chunks[j].hash;
			uint64_t k;
			size_t t;

			if (m->files[i].chunks[j].zero)
				continue;
			e->occ[n].file = (uint32_t)i;
			e->occ[n].chunk = (uint32_t)j;
			memcpy(&k, h, sizeof(k)); /* a hash: its bytes are uniform already */
			for (t = (size_t)k & (cap - 1); table[t]; t = (t + 1) & (cap - 1))
				if (!memcmp(eng_occ_chunk(e, e->units[table[t] - 1].first)->hash, h,
					    CHUNK_HASH_LEN))
					break;
			if (!table[t]) {
				/* For now, first is the occurrence that names it. */
				e->units[e->nunits] = (struct unit){ .first = (uint32_t)n };
				table[t] = (uint32_t)++e->nunits;
			}
			uidx[n] = table[t] - 1;
			e->units[uidx[n]].count++;
			n++;
		}
	/* Each unit's occurrences contiguous in order[], in file order. */
	for (i = 0, j = 0; i < e->nunits; i++) {
		uint32_t c = e->units[i].count;

		e->units[i].first = (uint32_t)j;
		e->units[i].count = 0;
		j += c;
	}
	for (i = 0; i < n; i++) {
		struct unit *u = &e->units[uidx[i]];

		e->order[u->first + u->count++] = (uint32_t)i;
	}
	st->unique_chunks = e->nunits;
out:
	free(table);
	free(uidx);
	return ret;
}

void eng_close_packs(struct eng *e)
{
	for (size_t i = 0; e->pack_fds && i < e->npacks; i++)
		if (e->pack_fds[i] >= 0)
			close(e->pack_fds[i]);
	free(e->pack_fds);
	e->pack_fds = NULL;
}

/* The file unit u's object lies in: its pack, or its own file. */
int eng_unit_path(const struct eng *e, const struct unit *u, char *buf, size_t len)
{
	if (u->pack == NO_PACK)
		return store_chunk_path(e->s, eng_unit_chunk(e, u)->hash, buf, len);
	return store_pack_path(e->s, e->pack_nos[u->pack], buf, len);
}

/* Where each distinct chunk lies: in which pack (each pack the snapshot
 * uses numbered here, for one fd each) at which offset, or in a file of its
 * own.  A chunk found nowhere is left to its read, which names it missing.
 * The slot size follows the objects' sizes where they lie. */
int eng_locate_units(struct eng *e)
{
	uint32_t *local = NULL; /* store pack number -> index into pack_nos, +1 */
	size_t nlocal = 0, max_stored = 1;
	int ret = 0;

	store_packs_refresh(e->s);
	free(e->pack_nos);
	e->pack_nos = NULL;
	e->npacks = 0;
	for (size_t i = 0; i < e->nunits && ret == 0; i++) {
		struct unit *u = &e->units[i];
		const struct manifest_chunk *c = eng_unit_chunk(e, u);
		struct store_chunk_loc loc;

		u->pack = NO_PACK;
		u->stored = c->stored;
		u->off = 0;
		u->missing = store_chunk_locate(e->s, c->hash, &loc) != 0;
		if (!u->missing && loc.pack != STORE_LOOSE) {
			if (loc.pack >= nlocal) {
				size_t n = MAX((size_t)loc.pack + 1, nlocal * 2);
				uint32_t *v = realloc(local, n * sizeof(*v));
				if (!v) {
					ret = -ENOMEM;
					break;
				}
				memset(v + nlocal, 0, (n - nlocal) * sizeof(*v));
				local = v;
				nlocal = n;
			}
			if (!local[loc.pack]) {
				uint32_t *v = realloc(e->pack_nos, (e->npacks + 1) * sizeof(*v));
				if (!v) {
					ret = -ENOMEM;
					break;
				}
				e->pack_nos = v;
				e->pack_nos[e->npacks++] = loc.pack;
				local[loc.pack] = (uint32_t)e->npacks;
			}
			u->pack = local[loc.pack] - 1;
			u->stored = loc.stored;
			u->off = loc.off;
		}
		max_stored = MAX(max_stored, (size_t)u->stored);
	}
	free(local);
	e->slot_bytes = ALIGN_UP(max_stored, ENGINE_ALIGN);
	return ret;
}

/* Open each pack the chunks lie in, O_DIRECT when the reads are.  A pack
 * that is gone was rewritten by a gc before this restore's lease: look again,
 * once.  Where O_DIRECT is refused in auto mode, reads go buffered. */
int eng_open_packs(struct eng *e)
{
	char path[PATH_MAX];
	int ret = 0;

	for (int again = 0; again < 2; again++) {
		bool direct = atomic_load(&e->direct);
		size_t i;

		free(e->pack_fds);
		e->pack_fds = malloc(MAX(e->npacks, (size_t)1) * sizeof(*e->pack_fds));
		if (!e->pack_fds)
			return -ENOMEM;
		for (i = 0; i < e->npacks; i++)
			e->pack_fds[i] = -1;
		for (i = 0; i < e->npacks; i++) {
			ret = store_pack_path(e->s, e->pack_nos[i], path, sizeof(path));
			if (ret)
				break;
			e->pack_fds[i] = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
			if (e->pack_fds[i] >= 0)
				continue;
			ret = -errno;
			if (ret == -EINVAL && direct && e->direct_mode == ENGINE_DIRECT_AUTO) {
				pr_info("the store's filesystem refuses O_DIRECT; reading through the page cache");
				atomic_store(&e->direct, false);
				direct = false;
				ret = 0;
				i--;
				continue;
			}
			break;
		}
		e->packs_direct = direct;
		if (ret != -ENOENT)
			break;
		eng_close_packs(e);
		if (again == 0 && (ret = eng_locate_units(e)))
			break;
	}
	if (ret)
		pr_err("cannot open pack %s: %s", path, strerror(-ret));
	return ret;
}

/* With skip_missing: the chunks the store lacks are another writer's
 * (engine.h); only the rest are read. */
void eng_drop_missing(struct eng *e, struct engine_stats *st)
{
	size_t kept = 0;

	for (size_t i = 0; i < e->nunits; i++)
		if (!e->units[i].missing)
			e->units[kept++] = e->units[i];
	st->skipped_chunks = e->nunits - kept;
	e->nunits = kept;
}

static int cmp_store_order(const void *a, const void *b)
{
	const struct unit *x = a, *y = b;

	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The work list.  Read with O_DIRECT from packs, the distinct chunks go in
 * store order (pack by pack, front to back: one stream the disk reads
 * sequentially) and neighbours are read together, up to a slot of
 * ENGINE_EXTENT_BYTES, across gaps of at most ENGINE_EXTENT_GAP (padding,
 * chunks of other snapshots): a read of 64 KiB per chunk, in the order the
 * chunks first occur, kept a cold 17 GB start at 1.3 GB/s on a disk that
 * reads 1.8 GB/s sequentially.  Through the page cache a read is a copy,
 * made by the worker that submits it: one chunk each, in the order they
 * first occur, a raw one straight into the file where it can. */
int eng_build_extents(struct eng *e)
{
	bool join = e->packs_direct;

	e->exts = malloc(MAX(e->nunits, (size_t)1) * sizeof(*e->exts));
	if (!e->exts)
		return -ENOMEM;
	if (join) {
		qsort(e->units, e->nunits, sizeof(*e->units), cmp_store_order);
		e->slot_bytes = MAX(e->slot_bytes, (size_t)ENGINE_EXTENT_BYTES);
	}
	e->nexts = 0;
	for (size_t i = 0; i < e->nunits; i++) {
		const struct unit *u = &e->units[i];
		struct extent *x = e->nexts ? &e->exts[e->nexts - 1] : NULL;

		if (join && x && u->pack != NO_PACK && e->units[x->unit].pack == u->pack) {
			uint64_t end = ALIGN_UP(x->off + x->len, ENGINE_ALIGN);

			if (u->off >= end && u->off - end <= ENGINE_EXTENT_GAP &&
			    u->off + u->stored - x->off <= e->slot_bytes) {
				x->nunits++;
				x->len = (uint32_t)(u->off + u->stored - x->off);
				continue;
			}
		}
		e->exts[e->nexts++] = (struct extent){
			.unit = (uint32_t)i, .nunits = 1, .len = u->stored, .off = u->off};
	}
	return 0;
}

/* Pages of fd's len bytes at off that are in the page cache: cachestat(2), or
 * before Linux 6.5 whether a read that may not wait finds its first page. */
static int cached_pages(int fd, uint64_t off, uint64_t len, uint64_t page, uint64_t *pages)
{
	struct cachestat_range_ r = { off, len };
	struct cachestat_ cs = { 0 };
	uint8_t buf[ENGINE_ALIGN];
	struct iovec iov = { buf, sizeof(buf) };

	if (syscall(__NR_cachestat, fd, &r, &cs, 0) == 0) {
		*pages = MIN(cs.nr_cache, (len + page - 1) / page);
		return 0;
	}
	if (errno != ENOSYS)
		return -errno;
	if (preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT) >= 0) {
		*pages = (len + page - 1) / page;
		return 0;
	}
	*pages = 0;
	return errno == EAGAIN ? 0 : -errno;
}

/* How much of the snapshot's chunks the page cache holds, in percent of the
 * pages of up to ENGINE_CACHE_SAMPLE distinct chunks spread over the work
 * list; -1 when none could be looked at.  O_DIRECT reads go to the disk even
 * when the page cache holds the chunk (a start right after a prewarm, or a
 * snapshot evicted from the tier and wanted again): on the development VM
 * they read nearly the whole snapshot from the disk although its chunks were
 * all cached (bench/LOG.md, Engine), at the speed of a virtio disk shared with
 * other VMs instead of the page cache's.  Half
 * cached or more: the buffered reads of the rest still go to the disk, with
 * readahead. */
int eng_cached_percent(struct eng *e)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), total = 0, cached = 0;
	size_t n = MIN(e->nunits, (size_t)ENGINE_CACHE_SAMPLE);
	char path[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		const struct unit *u = &e->units[i * e->nunits / n];
		uint64_t pages = 0;
		int fd;

		if (eng_unit_path(e, u, path, sizeof(path)))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* a missing chunk is reported by the read */
		if (cached_pages(fd, u->off, u->stored, page, &pages) == 0) {
			total += (u->stored + page - 1) / page;
			cached += pages;
		}
		close(fd);
	}
	return total ? (int)(cached * 100 / total) : -1;
}
