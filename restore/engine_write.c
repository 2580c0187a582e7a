/* SPDX-License-Identifier: Apache-2.0 */
/* engine_write.c — the engine's output side (engine_internal.h): a chunk
 * that has been read is checked against its hash (decoded first where it is
 * compressed) and written to every place in the image it occurs, straight
 * into the file's shared mapping where mapping pays, else with pwrite (or
 * the caller's writer).  A chunk is checked before any of its bytes can be
 * used; one that fails leaves the whole output to be thrown away.
 */
#define LOG_PREFIX "engine: "
#include "restore/engine_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Where occurrence o goes in its file's mapping, its pages prefaulted in one
 * call rather than one fault each; NULL: write it with pwrite.  A page is
 * only touched once populating it worked, so a full tmpfs means ENOSPC from
 * pwrite, never a SIGBUS. */
uint8_t *eng_map_dest(struct eng *e, uint32_t o)
{
	const struct manifest_chunk *c = eng_occ_chunk(e, o);
	uint8_t *map = e->maps[e->occ[o].file];
	int ret;

	if (!map || !atomic_load(&e->populate))
		return NULL;
	ret = populate_write(map + c->off, c->len);
	if (ret == 0)
		return map + c->off;
	if (ret == -EINVAL)
		atomic_store(&e->populate, false); /* before Linux 5.14: pwrite only */
	return NULL;
}

/* The writer of occurrence o's file, or NULL: its descriptor. */
static const struct engine_writer *writer_of(const struct eng *e, uint32_t o)
{
	const struct engine_writer *w = e->writers ? &e->writers[e->occ[o].file] : NULL;

	return w && w->pwrite ? w : NULL;
}

/* Write occurrence o's bytes with pwrite, into its file or through its writer. */
static int pwrite_occ(const struct eng *e, uint32_t o, const void *src, size_t len, uint64_t off)
{
	const struct engine_writer *w = writer_of(e, o);

	if (w)
		return w->pwrite(w->arg, src, len, off);
	return pwrite_all(e->files[e->occ[o].file], src, len, (off_t)off);
}

/* Check unit u's object, its obj_len bytes at obj (with dest: its payload
 * read straight into the file there), and write it to every place it
 * occurs.  False on an error (set for everyone). */
bool eng_process_unit(struct worker *w, const struct unit *u, const uint8_t *obj,
		      size_t obj_len, uint8_t *dest)
{
	struct eng *e = w->e;
	uint32_t o0 = e->order[u->first];
	const struct manifest_chunk *c = eng_occ_chunk(e, o0);
	/* Where the checked bytes end up (src), and whether that is already
	 * occurrence 0's place in its file. */
	const uint8_t *src;
	bool in_file;
	uint8_t *map0;
	int ret;

	if (dest) {
		ret = chunk_check_raw(obj, obj_len, c->hash, dest, c->len);
		if (!ret)
			atomic_fetch_add(&e->read_into_files, c->len);
		src = dest;
		in_file = true;
	} else if (!(map0 = eng_map_dest(e, o0)) && u->stored == CHUNK_HEADER_SIZE + c->len) {
		/* Raw, written with pwrite: checked where it was read, no copy. */
		ret = chunk_check_raw(obj, obj_len, c->hash, obj + CHUNK_HEADER_SIZE, c->len);
		src = obj + CHUNK_HEADER_SIZE;
		in_file = false;
	} else if (!map0 && chunk_is_bare(u->stored, c->len)) {
		/* Bare, written with pwrite: the same, with no header to check. */
		ret = obj_len < c->len ? -EBADMSG : chunk_check_hash(obj, c->len, c->hash);
		src = obj;
		in_file = false;
	} else {
		/* Decoded in place, in the file: one copy.  A chunk that fails its
		 * check may leave bytes there; the whole output is thrown away then. */
		ret = chunk_decode(w->codec, obj, obj_len, c->hash, map0 ? map0 : w->raw, c->len);
		src = map0 ? map0 : w->raw;
		in_file = map0 != NULL;
	}
	if (ret) {
		eng_chunk_failed(e, c, o0, ret,
				 u->pack != NO_PACK && obj_len < u->stored ? "cut short in its pack"
									    : log_last_error());
		return false;
	}
	for (uint32_t k = 0; k < u->count && !atomic_load(&e->stop); k++) {
		uint32_t o = e->order[u->first + k];
		const struct manifest_chunk *d = eng_occ_chunk(e, o);
		uint8_t *p = k == 0 ? (in_file ? (uint8_t *)src : NULL) : eng_map_dest(e, o);

		if (p && p != src) {
			memcpy(p, src, d->len);
		} else if (!p) {
			ret = pwrite_occ(e, o, src, d->len, d->off);
			if (ret) {
				eng_chunk_failed(e, d, o, ret, strerror(-ret));
				return false;
			}
		}
		atomic_fetch_add(&e->written, d->len);
	}
	return true;
}

/* Whether writing file fd through a mapping beats pwrite.  A mapping saves a
 * copy (a raw chunk's payload is read straight into it, through the page
 * cache) and the inode lock that many pwrite()ing workers queue on; it costs a
 * page-table entry per page.  With 4 KiB pages that costs more than the copy
 * it saves, with 2 MiB pages (tmpfs huge=, which says so in st_blksize) far
 * less (bench/LOG.md, Engine). */
static bool map_pays(const struct eng *e, const struct engine_opts *o, int fd)
{
	struct stat sb;

	if (o->write != ENGINE_WRITE_AUTO)
		return o->write == ENGINE_WRITE_MMAP;
	if (o->threads > ENGINE_PWRITE_MAX_THREADS)
		return true;
	return !atomic_load(&e->direct) && fstat(fd, &sb) == 0 && sb.st_blksize >= (2 << 20);
}

int eng_map_files(struct eng *e, const struct engine_opts *o)
{
	e->maps = calloc(MAX(e->m->nfiles, (size_t)1), sizeof(*e->maps));
	if (!e->maps)
		return -ENOMEM;
	atomic_store(&e->populate, true);
	e->writers = o->writers;
	for (size_t i = 0; i < e->m->nfiles; i++) {
		const struct engine_writer *w = e->writers ? &e->writers[i] : NULL;
		void *p;

		if (!e->m->files[i].size || !map_pays(e, o, e->files[i]))
			continue;
		if (w && w->map) {
			e->maps[i] = w->map;
			e->mapped = true;
			continue;
		}
		if (w && w->pwrite)
			continue; /* never the descriptor's mapping: not where its bytes go */
		p = mmap(NULL, e->m->files[i].size, PROT_READ | PROT_WRITE, MAP_SHARED, e->files[i], 0);
		if (p == MAP_FAILED) {
			pr_debug("cannot map %s/%s (%s): writing it with pwrite", e->outdir,
				 e->m->files[i].path, strerror(errno));
			continue;
		}
		e->maps[i] = p;
		e->mapped = true;
	}
	return 0;
}

void eng_unmap_files(struct eng *e)
{
	if (!e->maps)
		return;
	for (size_t i = 0; i < e->m->nfiles; i++)
		if (e->maps[i] && !(e->writers && e->writers[i].map))
			munmap(e->maps[i], e->m->files[i].size);
	free(e->maps);
	e->maps = NULL;
}
