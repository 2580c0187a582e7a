/* SPDX-License-Identifier: Apache-2.0 */
/* tier_layout.c — a RAM tier entry's pages written once, where they end up.
 *
 * A snapshot's memory is most of its image, and a start maps it from the
 * entry's mapped image (restore/mapped.h).  Built from the pages files, the
 * mapped image was a second copy of the memory: the engine (or the fetch)
 * wrote the pages files, then mapped_build copied their pages into the
 * memory files, and the entry held both.  Here a build writes every file
 * but the pages files first, plans the mapped image from them (the small
 * files say where each page goes), and then writes the pages files' chunks
 * through windows (mapped_build_windows) straight into the memory files.
 * The pages files of processes with mapped VMAs are then left out of the
 * entry ("elided", listed in <entry>/.elided); a start that does not map
 * (lazy or eager pages) has them written from the store first
 * (tier_lease_whole).
 *
 * Where windows do not apply (THAW_MAPPED=0, no VMA worth mapping, too many
 * pieces, a kernel that cannot populate mappings) the pages files are
 * written as they are and publish() builds the mapped image by copying, as
 * before.
 */
#define LOG_PREFIX "tier: "
#include "restore/tier_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool tier_is_pages_file(const char *path)
{
	unsigned id;
	int end = 0;

	return sscanf(path, "pages-%u.img%n", &id, &end) == 1 && end > 0 && !path[end];
}

int tier_part_view(const struct manifest *m, bool pages, struct tier_part *p)
{
	memset(p, 0, sizeof(*p));
	p->pages = pages;
	p->view = *m;
	p->view.nfiles = 0;
	p->view.files = malloc(MAX(m->nfiles, (size_t)1) * sizeof(*p->view.files));
	p->idx = malloc(MAX(m->nfiles, (size_t)1) * sizeof(*p->idx));
	p->fds = malloc(MAX(m->nfiles, (size_t)1) * sizeof(*p->fds));
	p->writers = calloc(MAX(m->nfiles, (size_t)1), sizeof(*p->writers));
	if (!p->view.files || !p->idx || !p->fds || !p->writers) {
		tier_part_release(p);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->nfiles; i++)
		if (tier_is_pages_file(m->files[i].path) == pages) {
			p->idx[p->view.nfiles] = i;
			p->view.files[p->view.nfiles++] = m->files[i];
		}
	return 0;
}

void tier_part_release(struct tier_part *p)
{
	free(p->view.files);
	free(p->idx);
	free(p->fds);
	free(p->writers);
	memset(p, 0, sizeof(*p));
}

static int window_pwrite(void *arg, const void *buf, size_t len, uint64_t off)
{
	return mapped_window_pwrite(arg, buf, len, off);
}

int tier_part_materialize(struct tier *t, struct tier_part *p, const char *bdir, const int *fds,
			  const struct tier_layout *lay, bool skip_missing, atomic_bool *cancel,
			  struct engine_stats *st)
{
	struct engine_opts o = *tier_engine_opts(t);
	bool any = false;

	for (size_t k = 0; k < p->view.nfiles; k++) {
		const struct mapped_window *w = lay && lay->wins ? lay->wins[p->idx[k]] : NULL;

		p->fds[k] = fds[p->idx[k]];
		p->writers[k] = w ? (struct engine_writer){ w->addr, window_pwrite, (void *)w }
				  : (struct engine_writer){ 0 };
		any |= w != NULL;
	}
	o.files = p->fds;
	o.writers = any ? p->writers : NULL;
	o.skip_missing = skip_missing;
	if (cancel)
		o.cancel = cancel;
	if (!p->pages || skip_missing)
		o.progress = NULL; /* thaw materialize's bar: the bulk, from the store */
	return engine_materialize(tier_store(t), &p->view, bdir, &o, st);
}

void tier_stats_add(struct engine_stats *sum, const struct engine_stats *part)
{
	sum->logical_bytes += part->logical_bytes;
	sum->written_bytes += part->written_bytes;
	sum->read_bytes += part->read_bytes;
	sum->unique_chunks += part->unique_chunks;
	sum->skipped_chunks += part->skipped_chunks;
	sum->seconds += part->seconds;
	sum->setup_seconds += part->setup_seconds;
	if (part->threads) { /* the part that did the reading says how */
		sum->direct = part->direct;
		sum->threads = part->threads;
	}
}

int tier_layout_begin(struct tier *t, const char *bdir, const struct manifest *m,
		      struct tier_layout *lay)
{
	char out[PATH_MAX + 16];
	uint64_t t0 = now_ns();
	int ret;

	memset(lay, 0, sizeof(*lay));
	lay->wins = calloc(MAX(m->nfiles, (size_t)1), sizeof(*lay->wins));
	if (!lay->wins)
		return -ENOMEM;
	if (!tier_mapped_min(t))
		return 0; /* publish() records why */
	snprintf(out, sizeof(out), "%s/.mapped", bdir);
	ret = mapped_build_windows(bdir, out, tier_mapped_min(t), &lay->res, &lay->win);
	if (ret) {
		/* Not fatal: the pages files are written, and copied after. */
		pr_warn("%s: no windows for the mapped image (%s): its pages are copied after",
			bdir, lay->res.why[0] ? lay->res.why : strerror(-ret));
		return 0;
	}
	lay->decided = true;
	if (!lay->res.vmas) {
		tier_record_unmapped(bdir, lay->res.why);
		return 0;
	}
	for (size_t i = 0; i < m->nfiles; i++)
		lay->wins[i] = mapped_window_of(&lay->win, m->files[i].path);
	lay->windows = true;
	lay->plan_ms = ms_since(t0);
	return 0;
}

/* <bdir>/.elided: [[path, size], ...] of the pages files left out. */
static int write_elided(const char *bdir, const struct manifest *m, const struct tier_layout *lay)
{
	json_t *list = json_array();
	char path[PATH_MAX + 16], *s = NULL;
	int ret = -ENOMEM;

	for (size_t i = 0; list && i < m->nfiles; i++)
		if (lay->wins[i] && json_array_append_new(list, json_pack("[s, I]", m->files[i].path,
							 (json_int_t)m->files[i].size))) {
			json_decref(list);
			list = NULL;
		}
	if (list)
		s = json_dumps(list, JSON_COMPACT);
	snprintf(path, sizeof(path), "%s/" TIER_ELIDED, bdir);
	if (s)
		ret = write_file_atomic(path, s, strlen(s), 0600);
	free(s);
	json_decref(list);
	return ret;
}

int tier_layout_finish(struct tier_layout *lay, const char *bdir, const struct manifest *m,
		       uint64_t *bytes)
{
	uint64_t elided = 0;
	int ret;

	if (!lay->windows)
		return 0;
	mapped_windows_release(&lay->win);
	ret = write_elided(bdir, m, lay);
	for (size_t i = 0; !ret && i < m->nfiles; i++) {
		char path[PATH_MAX + 256];

		if (!lay->wins[i])
			continue;
		snprintf(path, sizeof(path), "%s/%s", bdir, m->files[i].path);
		if (unlink(path) < 0) {
			ret = -errno;
			pr_perror("unlink %s", path);
		}
		elided += m->files[i].size;
	}
	if (ret)
		return ret;
	/* The pages now in the memory files and the new pages files take
	 * the room the pages files had; the rewritten small files (files.img,
	 * a pagemap and an mm per process) are new. */
	*bytes = *bytes - MIN(*bytes, elided) + lay->res.new_bytes;
	pr_info("mapped image: %u VMAs, %.1f MiB written straight into memory files, %.1f MiB "
		"copied at restore, planned in %.1f ms", lay->res.vmas,
		lay->res.mapped_bytes / 1048576.0, lay->res.kept_bytes / 1048576.0, lay->plan_ms);
	return 0;
}

void tier_layout_release(struct tier_layout *lay)
{
	mapped_windows_release(&lay->win);
	free(lay->wins);
	lay->wins = NULL;
}
