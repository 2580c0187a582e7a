/* SPDX-License-Identifier: Apache-2.0 */
/* tier.c — the RAM tier; see tier.h.
 *
 * On disk, under the tier directory:
 *	<hex>/                 a complete snapshot's image files, and where
 *	                       mapping applies its mapped variant in <hex>/.mapped/
 *	                       (restore/mapped.h), else why not in <hex>/.mapped-why;
 *	                       the checksums of its files in <hex>/.sums (tier_sums.h)
 *	<hex>.meta             {"id","logical_bytes","bytes","files","paths":[[path,size]…]}: written last,
 *	                       it is what makes <hex>/ an entry; its mtime is the LRU stamp
 *	.build-<hex>-<pid>-<n>/  a materialisation in progress
 *	.resv-<hex>-<pid>-<n>  bytes reserved for it in the budget
 *	.bad-<hex>-<pid>-<n>/  an entry found damaged, being removed
 *	.locks/<hex>           flock LOCK_SH while leased; eviction takes LOCK_EX|LOCK_NB
 *	.locks/<hex>.build     flock LOCK_EX while materialising: one build per snapshot
 *	.locks/tier            flock LOCK_EX while reserving and evicting
 *
 * Every lock is taken on a descriptor opened for that one use, so the same
 * flock()s order threads of one process and separate processes alike.  Lock
 * order: a lease, then the build lock, then the tier lock; holding the tier
 * lock, only non-blocking locks are tried.  The budget counts the bytes an
 * entry really holds in RAM: its files' sizes less their holes.
 */
#define LOG_PREFIX "tier: "
#include "restore/tier.h"
#include "restore/tier_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "restore/mapped.h"
#include "restore/tier_sums.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct tier_entry {
	char hex[HEX_LEN + 1];
	uint64_t bytes;
	struct timespec stamp;
};

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Open .locks/<name> and flock it; the fd, or -errno (-EWOULDBLOCK with LOCK_NB). */
int tier_lock(struct tier *t, const char *name, int how)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/.locks/%s", t->dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	return lock_path(path, how, 0600);
}

static void lock_drop(int fd)
{
	if (fd >= 0)
		close(fd); /* the flock goes with the last descriptor */
}

/* Is a build of hex in progress?  Takes and drops its build lock. */
static bool build_live(struct tier *t, const char *hex)
{
	char name[HEX_LEN + 16];
	int fd;

	snprintf(name, sizeof(name), "%.*s.build", HEX_LEN, hex);
	fd = tier_lock(t, name, LOCK_EX | LOCK_NB);
	if (fd < 0)
		return fd == -EWOULDBLOCK;
	lock_drop(fd);
	return false;
}

static void entry_paths(struct tier *t, const char *hex, char *dir, char *meta)
{
	if (dir)
		snprintf(dir, PATH_MAX, "%s/%s", t->dir, hex);
	if (meta)
		snprintf(meta, PATH_MAX, "%s/%s.meta", t->dir, hex);
}

static bool entry_complete(struct tier *t, const char *hex)
{
	char dir[PATH_MAX], meta[PATH_MAX];
	struct stat st;

	entry_paths(t, hex, dir, meta);
	return stat(meta, &st) == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Read <hex>.meta: bytes in RAM, logical bytes, files.  -errno if absent or bad. */
static int meta_read(struct tier *t, const char *hex, uint64_t *bytes, uint64_t *logical,
		     uint64_t *files, struct timespec *stamp)
{
	char path[PATH_MAX];
	char *buf = NULL;
	size_t len;
	json_t *j = NULL;
	json_error_t jerr;
	struct stat st;
	int ret;

	entry_paths(t, hex, NULL, path);
	ret = read_file(path, &buf, &len, 1 << 16);
	if (ret)
		return ret;
	j = json_loadb(buf, len, 0, &jerr);
	ret = -EINVAL;
	if (!j || !json_is_integer(json_object_get(j, "bytes")) ||
	    !json_is_integer(json_object_get(j, "logical_bytes")) ||
	    !json_is_integer(json_object_get(j, "files")))
		goto out;
	*bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
	if (logical)
		*logical = (uint64_t)json_integer_value(json_object_get(j, "logical_bytes"));
	if (files)
		*files = (uint64_t)json_integer_value(json_object_get(j, "files"));
	if (stamp) {
		if (stat(path, &st) < 0) {
			ret = -errno;
			goto out;
		}
		*stamp = st.st_mtim;
	}
	ret = 0;
out:
	json_decref(j);
	free(buf);
	return ret;
}

/* The metadata names every file with its size: a restart checks those, and
 * ignores what else is in the directory (CRIU writes its stats-restore into
 * the image directory it restores from).  The pages files lay wrote through
 * windows (lay may be NULL) are not in the entry and not named. */
static int meta_write(struct tier *t, const char *hex, const char *id, uint64_t bytes,
		      const struct manifest *m, const struct tier_layout *lay)
{
	char path[PATH_MAX];
	json_t *j, *files = json_array();
	uint64_t logical = 0, nfiles = 0;
	char *s = NULL;
	int ret = -ENOMEM;

	entry_paths(t, hex, NULL, path);
	for (size_t i = 0; files && i < m->nfiles; i++) {
		if (lay && lay->windows && lay->wins[i])
			continue; /* not in the entry: listed in its .elided */
		logical += m->files[i].size;
		nfiles++;
		if (json_array_append_new(files, json_pack("[s, I]", m->files[i].path,
							   (json_int_t)m->files[i].size))) {
			json_decref(files);
			files = NULL;
		}
	}
	if (!files)
		return -ENOMEM;
	j = json_pack("{s:s, s:I, s:I, s:I, s:o}", "id", id, "bytes", (json_int_t)bytes,
		      "logical_bytes", (json_int_t)logical, "files", (json_int_t)nfiles,
		      "paths", files);
	if (j)
		s = json_dumps(j, JSON_COMPACT);
	if (s)
		ret = write_file_atomic(path, s, strlen(s), 0600);
	free(s);
	json_decref(j);
	return ret;
}

/* An entry left by an earlier run is kept only if its metadata is there and
 * names files that are all there with their sizes. */
static bool entry_valid(struct tier *t, const char *hex)
{
	char path[PATH_MAX], *buf = NULL;
	size_t len, i;
	json_t *j, *paths, *f;
	uint64_t sum = 0;
	bool ok = false;

	entry_paths(t, hex, NULL, path);
	if (read_file(path, &buf, &len, 64 << 20))
		return false;
	j = json_loadb(buf, len, 0, NULL);
	free(buf);
	paths = json_object_get(j, "paths");
	if (!json_is_array(paths) || json_array_size(paths) !=
	    (size_t)json_integer_value(json_object_get(j, "files")))
		goto out;
	json_array_foreach(paths, i, f) {
		const char *name = json_string_value(json_array_get(f, 0));
		json_int_t size = json_integer_value(json_array_get(f, 1));
		struct stat st;

		/* The names come from disk: no way out of the entry. */
		if (!name || !*name || name[0] == '/' || strstr(name, "..") ||
		    snprintf(path, sizeof(path), "%s/%s/%s", t->dir, hex, name) >= (int)sizeof(path) ||
		    lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_size != size)
			goto out;
		sum += (uint64_t)size;
	}
	ok = sum == (uint64_t)json_integer_value(json_object_get(j, "logical_bytes"));
	/* Pages files left out are in the mapped image: it must be there. */
	snprintf(path, sizeof(path), "%s/%s/" TIER_ELIDED, t->dir, hex);
	if (ok && access(path, F_OK) == 0) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s/.mapped/image", t->dir, hex);
		ok = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
	}
out:
	json_decref(j);
	return ok;
}

static void remove_entry(struct tier *t, const char *hex)
{
	char dir[PATH_MAX], meta[PATH_MAX];

	entry_paths(t, hex, dir, meta);
	/* The metadata first: without it the directory is no entry any more. */
	if (unlink(meta) < 0 && errno != ENOENT)
		pr_perror("unlink %s", meta);
	rm_rf(dir);
}

/* An entry an older thaw made has no checksums: removed where nobody leases
 * it (its next start materialises it again, with them), else kept, and
 * checked by nobody.  true: removed. */
static bool drop_unsummed(struct tier *t, const char *hex)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s/" TIER_SUMS, t->dir, hex);
	if (access(path, F_OK) == 0 || (fd = tier_lock(t, hex, LOCK_EX | LOCK_NB)) < 0)
		return false;
	pr_info("removing entry %s, made without checksums (by an older thaw): its next start "
		"materialises it again", hex);
	remove_entry(t, hex);
	lock_drop(fd);
	return true;
}

/* Clear what an earlier run left: partial builds, reservations of dead builds,
 * entries that are not complete.  Names that are not ours are left alone (the
 * tier directory may have been pointed somewhere shared by mistake). */
static int tier_scan(struct tier *t)
{
	DIR *d = opendir(t->dir);
	struct dirent *de;
	char path[PATH_MAX];
	int kept = 0, removed = 0;

	if (!d) {
		int ret = -errno;
		pr_perror("open %s", t->dir);
		return ret;
	}
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		size_t len = strlen(n);

		if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, ".locks"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", t->dir, n);
		if (!strncmp(n, ".bad-", 5)) {
			pr_info("removing %s, a damaged entry whose removal was interrupted", path);
			rm_rf(path);
			removed++;
		} else if (!strncmp(n, ".build-", 7) || !strncmp(n, ".resv-", 6)) {
			const char *hex = n + (n[1] == 'b' ? 7 : 6);
			if (strlen(hex) < HEX_LEN || !is_hex(hex, HEX_LEN)) {
				pr_warn("leaving %s alone: not a name the tier makes", path);
				continue;
			}
			if (build_live(t, hex))
				continue;
			pr_info("removing %s, left by an interrupted materialisation", path);
			rm_rf(path);
			removed++;
		} else if (len >= HEX_LEN && is_hex(n, HEX_LEN) &&
			   (len == HEX_LEN || !strcmp(n + HEX_LEN, ".meta") ||
			    !strncmp(n + HEX_LEN, ".meta.tmp.", 10))) {
			char hex[HEX_LEN + 1];

			memcpy(hex, n, HEX_LEN);
			hex[HEX_LEN] = '\0';
			if (len > HEX_LEN && strcmp(n + HEX_LEN, ".meta")) {
				if (!build_live(t, hex))
					unlink(path);
				continue;
			}
			if (len > HEX_LEN && entry_complete(t, hex))
				continue; /* judged with its directory */
			if (entry_valid(t, hex)) {
				if (drop_unsummed(t, hex))
					removed++;
				else
					kept++;
				continue;
			}
			if (build_live(t, hex))
				continue; /* being renamed into place right now */
			pr_info("removing incomplete entry %s", hex);
			remove_entry(t, hex);
			removed++;
		} else {
			pr_warn("leaving %s alone: not a name the tier makes", path);
		}
	}
	closedir(d);
	pr_info("%s: %d entries kept, %d leftovers removed", t->dir, kept, removed);
	return 0;
}

struct tier *tier_open(const char *dir, uint64_t budget_bytes, struct store *s,
		       const struct engine_opts *opts)
{
	struct tier *t = NULL;
	char path[PATH_MAX];
	int lock = -1;

	t = calloc(1, sizeof(*t));
	if (!t) {
		pr_err("out of memory");
		return NULL;
	}
	if (snprintf(t->dir, sizeof(t->dir), "%s", dir) >= (int)sizeof(t->dir) ||
	    snprintf(path, sizeof(path), "%s/.locks", dir) >= (int)sizeof(path)) {
		pr_err("tier path too long: %s", dir);
		goto err;
	}
	t->budget = budget_bytes;
	t->mapped_min = MAPPED_MIN_BYTES_DEFAULT;
	t->s = s;
	if (opts)
		t->opts = *opts;
	else
		engine_opts_default(&t->opts);
	pthread_mutex_init(&t->mu, NULL);
	if (dir_make_private(path))
		goto err;
	lock = tier_lock(t, "tier", LOCK_EX);
	if (lock < 0)
		goto err;
	if (tier_scan(t))
		goto err;
	lock_drop(lock);
	return t;
err:
	lock_drop(lock);
	free(t);
	return NULL;
}

void tier_close(struct tier *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	free(t);
}

/* Complete entries, and the bytes reserved by builds in progress. */
static int list_entries(struct tier *t, struct tier_entry **out, size_t *n, uint64_t *reserved)
{
	DIR *d = opendir(t->dir);
	struct dirent *de;
	struct tier_entry *v = NULL;
	size_t cap = 0;
	int ret = 0;

	*n = 0;
	if (reserved)
		*reserved = 0;
	if (!d) {
		ret = -errno;
		pr_perror("open %s", t->dir);
		return ret;
	}
	while ((de = readdir(d))) {
		const char *nm = de->d_name;
		size_t len = strlen(nm);

		if (reserved && !strncmp(nm, ".resv-", 6) && len > 6 + HEX_LEN) {
			char path[PATH_MAX], *buf = NULL;
			size_t blen;

			snprintf(path, sizeof(path), "%s/%s", t->dir, nm);
			if (!build_live(t, nm + 6)) {
				unlink(path); /* its build died */
				continue;
			}
			if (read_file(path, &buf, &blen, 64) == 0)
				*reserved += strtoull(buf, NULL, 10);
			free(buf);
			continue;
		}
		if (len != HEX_LEN + 5 || strcmp(nm + HEX_LEN, ".meta") || !is_hex(nm, HEX_LEN))
			continue;
		if (ARRAY_GROW(v, cap, *n + 1, 16)) {
			ret = -ENOMEM;
			break;
		}
		memcpy(v[*n].hex, nm, HEX_LEN);
		v[*n].hex[HEX_LEN] = '\0';
		if (meta_read(t, v[*n].hex, &v[*n].bytes, NULL, NULL, &v[*n].stamp) == 0)
			(*n)++;
	}
	closedir(d);
	if (ret) {
		free(v);
		return ret;
	}
	*out = v;
	return 0;
}

uint64_t tier_used_bytes(struct tier *t)
{
	struct tier_entry *v = NULL;
	uint64_t used = 0;
	size_t n = 0;

	if (list_entries(t, &v, &n, NULL))
		return 0;
	for (size_t i = 0; i < n; i++)
		used += v[i].bytes;
	free(v);
	return used;
}

uint64_t tier_budget_bytes(struct tier *t)
{
	return t->budget;
}

void tier_get_stats(struct tier *t, struct tier_stats *st)
{
	pthread_mutex_lock(&t->mu);
	*st = t->st;
	pthread_mutex_unlock(&t->mu);
}

static int cmp_stamp(const void *a, const void *b)
{
	const struct timespec *x = &((const struct tier_entry *)a)->stamp;
	const struct timespec *y = &((const struct tier_entry *)b)->stamp;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Make room for need bytes and reserve them (resv: the reservation's path).
 * Least recently used entries nobody leases go first. */
int tier_reserve(struct tier *t, const char *hex, uint64_t need, const char *resv)
{
	struct tier_entry *v = NULL;
	uint64_t used = 0, reserved = 0, leased = 0;
	size_t n = 0, i;
	char a[32], b[32], c[32], d[32], e[32], num[32];
	int lock, ret;

	lock = tier_lock(t, "tier", LOCK_EX);
	if (lock < 0)
		return lock;
	ret = list_entries(t, &v, &n, &reserved);
	if (ret)
		goto out;
	for (i = 0; i < n; i++)
		used += v[i].bytes;
	used += reserved;
	if (n)
		qsort(v, n, sizeof(*v), cmp_stamp);
	for (i = 0; i < n && used + need > t->budget; i++) {
		int fd = tier_lock(t, v[i].hex, LOCK_EX | LOCK_NB);

		if (fd < 0) {
			leased += v[i].bytes;
			continue;
		}
		pr_info("evicting %s (%s) to make room for %s", v[i].hex, fmt_bytes(v[i].bytes, a), hex);
		remove_entry(t, v[i].hex);
		lock_drop(fd);
		used -= v[i].bytes;
		pthread_mutex_lock(&t->mu);
		t->st.evictions++;
		t->st.evicted_bytes += v[i].bytes;
		pthread_mutex_unlock(&t->mu);
	}
	if (used + need > t->budget) {
		pr_err("RAM tier %s is full: snapshot sha256:%s needs %s, the budget is %s, and %s "
		       "of it is held by snapshots in use (%s) or being materialised (%s)",
		       t->dir, hex, fmt_bytes(need, a), fmt_bytes(t->budget, b),
		       fmt_bytes(used, c), fmt_bytes(leased, d), fmt_bytes(reserved, e));
		ret = -ENOSPC;
		goto out;
	}
	snprintf(num, sizeof(num), "%llu\n", (unsigned long long)need);
	ret = write_file_atomic(resv, num, strlen(num), 0600);
out:
	free(v);
	lock_drop(lock);
	return ret;
}

void tier_record_unmapped(const char *bdir, const char *why)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/.mapped-why", bdir);
	if (write_file_atomic(path, why, strlen(why), 0600))
		pr_warn("could not record why %s has no mapped image: %s", bdir, why);
}

/* Remove the mapped image in bdir, recording why. */
static void drop_mapped(const char *bdir, const char *why)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/.mapped", bdir);
	rm_rf(path);
	pr_warn("%s: %s", bdir, why);
	tier_record_unmapped(bdir, why);
}

/* The mapped variant of the image in bdir (restore/mapped.h), or why there
 * is none in bdir/.mapped-why: a start that cannot map says why.  A failed
 * build costs the entry nothing but that.  Returns the bytes it added. */
static uint64_t build_mapped(struct tier *t, const char *bdir)
{
	char out[PATH_MAX + 16];
	struct mapped_result res;
	uint64_t t0 = now_ns();

	snprintf(out, sizeof(out), "%s/.mapped", bdir);
	if (!t->mapped_min) {
		snprintf(res.why, sizeof(res.why), "THAW_MAPPED=0 when it was materialised");
		res.vmas = 0;
	} else if (mapped_build(bdir, out, t->mapped_min, &res) == 0 && res.vmas) {
		pr_info("mapped image: %u VMAs, %.1f MiB in memory files, %.1f MiB copied at "
			"restore, built in %.1f ms", res.vmas, res.mapped_bytes / 1048576.0,
			res.kept_bytes / 1048576.0, ms_since(t0));
		return res.new_bytes;
	}
	tier_record_unmapped(bdir, res.why);
	return 0;
}

struct store *tier_store(struct tier *t)
{
	return t->s;
}

const struct engine_opts *tier_engine_opts(struct tier *t)
{
	return &t->opts;
}

uint64_t tier_mapped_min(struct tier *t)
{
	return t->mapped_min;
}

/* A build's directory and its reservation's file: the process and a
 * sequence number tell builds of one snapshot apart (tier_scan removes
 * those no live build holds). */
static void build_paths(struct tier *t, const char *hex, char bdir[PATH_MAX], char resv[PATH_MAX])
{
	unsigned n = atomic_fetch_add(&t->seq, 1);

	snprintf(bdir, PATH_MAX, "%s/.build-%s-%d-%u", t->dir, hex, getpid(), n);
	snprintf(resv, PATH_MAX, "%s/.resv-%s-%d-%u", t->dir, hex, getpid(), n);
}

/* A materialisation of hex done: the tier's figures (tier_get_stats); one
 * that replaces an entry dropped as damaged is counted as such. */
static void count_build(struct tier *t, const char *hex, uint64_t read_bytes,
			uint64_t written_bytes)
{
	pthread_mutex_lock(&t->mu);
	t->st.materializations++;
	t->st.read_bytes += read_bytes;
	t->st.written_bytes += written_bytes;
	pthread_mutex_unlock(&t->mu);
	tier_redo_done(t, hex);
}

/* A filled build directory bdir (bytes reserved in resv) becomes the entry
 * of hex: its mapped image (unless lay made it), renamed into place, the
 * metadata last. */
static int publish(struct tier *t, const char *hex, const char *full, const struct manifest *m,
		   const char *bdir, const char *resv, uint64_t bytes, const struct tier_layout *lay)
{
	char dir[PATH_MAX];
	uint64_t added, summed = 0, t0;
	int ret;

	entry_paths(t, hex, dir, NULL);
	added = lay->decided ? 0 : build_mapped(t, bdir);
	if (added) {
		/* The mapped image's room, now that its size is known: where
		 * the budget has none (leases hold the rest), the entry goes
		 * without it and its starts copy. */
		unlink(resv);
		if (tier_reserve(t, hex, bytes + added, resv) == 0) {
			bytes += added;
		} else {
			drop_mapped(bdir, "the RAM tier had no room for a mapped image");
			ret = tier_reserve(t, hex, bytes, resv);
			if (ret)
				return ret;
		}
	}
	/* Its checksums, of what it holds now (tier_sums.h). */
	t0 = now_ns();
	ret = tier_sums_make(bdir, &summed);
	if (ret)
		return ret;
	pr_info("%s: checksums of %.1f MiB made in %.1f ms", bdir, summed / 1048576.0,
		ms_since(t0));
	/* A directory without metadata is a leftover of a crash: ours to replace. */
	rm_rf(dir);
	if (rename(bdir, dir) < 0) {
		ret = -errno;
		pr_perror("rename %s to %s", bdir, dir);
		return ret;
	}
	ret = meta_write(t, hex, full, bytes, m, lay);
	if (ret)
		rm_rf(dir);
	return ret;
}

/* Write m's files into bdir from the store: every file but the pages files,
 * then the layout (tier_layout.c), then the pages files, through windows
 * where it has them.  *bytes: what the entry holds in RAM. */
static int fill_from_store(struct tier *t, const struct manifest *m, const char *bdir,
			   struct tier_layout *lay, uint64_t *bytes, struct engine_stats *st)
{
	struct tier_part rest = { 0 }, pages = { 0 };
	struct engine_stats part;
	uint64_t t0 = now_ns(), t1 = 0, t2 = 0, t3 = 0;
	int *fds, ret;

	memset(st, 0, sizeof(*st));
	fds = malloc(MAX(m->nfiles, (size_t)1) * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	ret = engine_create_files(m, bdir, fds);
	if (ret) {
		free(fds);
		return ret;
	}
	ret = tier_part_view(m, false, &rest);
	if (!ret)
		ret = tier_part_view(m, true, &pages);
	if (!ret)
		ret = tier_part_materialize(t, &rest, bdir, fds, NULL, false, NULL, &part);
	if (!ret) {
		tier_stats_add(st, &part);
		t1 = now_ns();
		ret = tier_layout_begin(t, bdir, m, lay);
	}
	if (!ret) {
		t2 = now_ns();
		ret = tier_part_materialize(t, &pages, bdir, fds, lay, false, NULL, &part);
	}
	if (!ret)
		tier_stats_add(st, &part);
	t3 = now_ns();
	for (size_t i = 0; i < m->nfiles; i++)
		if (close(fds[i]) < 0 && !ret) {
			ret = -errno;
			pr_perror("close %s/%s", bdir, m->files[i].path);
		}
	if (!ret)
		ret = tier_layout_finish(lay, bdir, m, bytes);
	if (!ret)
		pr_info("%s: filled in %.1f ms: the other files %.1f, the layout %.1f, the pages "
			"files %.1f, closing %.1f", bdir, ms_since(t0), (t1 - t0) / 1e6,
			(t2 - t1) / 1e6, (t3 - t2) / 1e6, ms_since(t3));
	tier_part_release(&rest);
	tier_part_release(&pages);
	free(fds);
	return ret;
}

/* Materialise hex under the build lock: reserve, read from the store into a
 * build directory, publish it. */
static int build(struct tier *t, const char *hex, const char *id)
{
	struct manifest *m = NULL;
	struct manifest_totals tot;
	struct store_lease *sl = NULL;
	struct engine_stats st;
	struct tier_layout lay = { 0 };
	char full[CHUNK_ID_LEN], bdir[PATH_MAX], resv[PATH_MAX];
	bool reserved = false;
	uint64_t bytes;
	int ret;

	build_paths(t, hex, bdir, resv);

	/* The lease first: gc must not take the chunks between load and read. */
	sl = store_lease_take(t->s, id);
	if (!sl) {
		ret = -ENOENT;
		goto out;
	}
	ret = store_manifest_load(t->s, id, &m, full);
	if (ret)
		goto out;
	manifest_totals(m, &tot);
	bytes = tot.logical_bytes - tot.zero_bytes;
	ret = tier_reserve(t, hex, bytes, resv);
	if (ret)
		goto out;
	reserved = true;

	ret = fill_from_store(t, m, bdir, &lay, &bytes, &st);
	if (!ret)
		ret = publish(t, hex, full, m, bdir, resv, bytes, &lay);
	if (ret)
		goto out;
	count_build(t, hex, st.read_bytes, st.written_bytes);
	pr_info("materialised %s: %llu bytes in %.3f s (%.2f GB/s; %llu bytes read, %s, setup "
		"%.3f s, %u threads)", full, (unsigned long long)st.logical_bytes, st.seconds,
		st.seconds > 0 ? (double)st.logical_bytes / st.seconds / 1e9 : 0.0,
		(unsigned long long)st.read_bytes, st.direct ? "O_DIRECT" : "buffered",
		st.setup_seconds, st.threads);
out:
	if (ret)
		rm_rf(bdir);
	if (reserved)
		unlink(resv);
	tier_layout_release(&lay);
	store_lease_release(sl);
	manifest_free(m);
	return ret;
}

/* build, with the chunks the store lacks fetched from r as it goes
 * (tier_fetch.c).  The fetch holds the store's lock shared until its
 * manifest is in: gc waits. */
static int build_fetching(struct tier *t, const char *hex, const char *full, struct remote *r,
			  struct remote_fetch_stats *fst)
{
	char bdir[PATH_MAX], resv[PATH_MAX];
	struct tier_fill fill;
	uint64_t t0 = now_ns();
	int ret;

	build_paths(t, hex, bdir, resv);
	ret = tier_fill_fetching(t, hex, full, bdir, resv, r, &fill);
	if (!ret)
		ret = publish(t, hex, full, fill.m, bdir, resv, fill.bytes, &fill.lay);
	if (fst)
		*fst = fill.fst;
	if (!ret) {
		double s = ms_since(t0) / 1e3;

		count_build(t, hex, fill.est.read_bytes,
			    fill.est.written_bytes + fill.fetched_written);
		pr_info("materialised %s as it was fetched: %llu of %llu chunks fetched (%llu "
			"bytes), %llu read from the store, in %.3f s", full,
			(unsigned long long)fill.fst.chunks_fetched,
			(unsigned long long)fill.fst.chunks,
			(unsigned long long)fill.fst.bytes_fetched,
			(unsigned long long)(fill.est.unique_chunks - fill.est.skipped_chunks), s);
	} else {
		rm_rf(bdir);
	}
	unlink(resv);
	tier_layout_release(&fill.lay);
	manifest_free(fill.m);
	return ret;
}

/* The hex of a snapshot id: a full "sha256:<hex>" as it is, a prefix through the store. */
static int resolve(struct tier *t, const char *id, char hex[HEX_LEN + 1], char full[CHUNK_ID_LEN])
{
	uint8_t hash[CHUNK_HASH_LEN];
	struct manifest *m = NULL;
	int ret;

	if (chunk_id_parse(id, hash) == 0 && strlen(id) == CHUNK_ID_LEN - 1) {
		snprintf(full, CHUNK_ID_LEN, "%s", id);
	} else {
		ret = store_manifest_load(t->s, id, &m, full);
		manifest_free(m);
		if (ret)
			return ret;
	}
	memcpy(hex, full + 7, HEX_LEN);
	hex[HEX_LEN] = '\0';
	return 0;
}

static void touch(struct tier *t, const char *hex)
{
	char meta[PATH_MAX];

	entry_paths(t, hex, NULL, meta);
	utimensat(AT_FDCWD, meta, NULL, 0); /* the LRU stamp; a failure only ages it */
}

/* Whether the leased entry has a mapped image, or why not. */
static void lease_mapped(struct tier_lease *l)
{
	char why[PATH_MAX + 16], *text = NULL;
	struct stat st;
	size_t len;

	snprintf(l->mapped_path, sizeof(l->mapped_path), "%s/.mapped", l->path);
	if (stat(l->mapped_path, &st) == 0 && S_ISDIR(st.st_mode)) {
		l->mapped = true;
		return;
	}
	snprintf(why, sizeof(why), "%s/.mapped-why", l->path);
	if (read_file(why, &text, &len, sizeof(l->mapped_why) - 1) == 0) {
		snprintf(l->mapped_why, sizeof(l->mapped_why), "%.*s", (int)len, text);
		free(text);
	} else {
		snprintf(l->mapped_why, sizeof(l->mapped_why),
			 "its RAM tier entry was materialised without a mapped image");
	}
}

void tier_set_mapped(struct tier *t, uint64_t min_bytes)
{
	t->mapped_min = min_bytes;
}

const char *tier_lease_mapped(const struct tier_lease *l)
{
	return l->mapped ? l->mapped_path : NULL;
}

const char *tier_lease_mapped_why(const struct tier_lease *l)
{
	return l->mapped ? "" : l->mapped_why;
}

int tier_acquire(struct tier *t, const char *snapshot_id, struct tier_lease **out)
{
	return tier_acquire_fetching(t, snapshot_id, NULL, NULL, out);
}

int tier_acquire_fetching(struct tier *t, const char *snapshot_id, struct remote *r,
			  struct remote_fetch_stats *fst, struct tier_lease **out)
{
	struct tier_lease *l = NULL;
	char hex[HEX_LEN + 1], full[CHUNK_ID_LEN], name[HEX_LEN + 16];
	uint64_t start = now_ns();
	struct stat st;
	int bfd = -1, ret;

	*out = NULL;
	ret = resolve(t, snapshot_id, hex, full);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l) {
		pr_err("out of memory");
		return -ENOMEM;
	}
	memcpy(l->hex, hex, sizeof(l->hex));
	entry_paths(t, hex, l->path, NULL);
	/* Leased before looking: an eviction cannot take it from under us. */
	l->fd = tier_lock(t, hex, LOCK_SH);
	if (l->fd < 0) {
		ret = l->fd;
		goto out;
	}
	if (entry_complete(t, hex) && !tier_drop_reported(t, hex, false)) {
		l->hit = true;
		pthread_mutex_lock(&t->mu);
		t->st.hits++;
		pthread_mutex_unlock(&t->mu);
		goto done;
	}
	snprintf(name, sizeof(name), "%s.build", hex);
	bfd = tier_lock(t, name, LOCK_EX);
	if (bfd < 0) {
		ret = bfd;
		goto out;
	}
	tier_drop_reported(t, hex, true); /* a reader found it damaged: made again */
	if (entry_complete(t, hex)) { /* someone built it while we waited */
		pthread_mutex_lock(&t->mu);
		t->st.waits++;
		pthread_mutex_unlock(&t->mu);
		goto done;
	}
	ret = r ? build_fetching(t, hex, full, r, fst) : build(t, hex, full);
	if (ret)
		goto out;
done:
	touch(t, hex);
	lease_mapped(l);
	if (stat(l->path, &st) == 0) {
		l->dev = st.st_dev;
		l->ino = st.st_ino;
	}
	l->ms = ms_since(start);
	*out = l;
	l = NULL;
out:
	lock_drop(bfd);
	if (l) {
		lock_drop(l->fd);
		free(l);
	}
	return ret;
}

/* The elided pages files of entry dir that are not there (yet), as a part
 * of m for the engine. */
static int missing_pages(const struct manifest *m, const char *dir, struct tier_part *p,
			 uint64_t *bytes)
{
	int ret = tier_part_view(m, true, p);
	size_t n = 0;

	*bytes = 0;
	for (size_t k = 0; !ret && k < p->view.nfiles; k++) {
		char path[PATH_MAX + 256];

		snprintf(path, sizeof(path), "%s/%s", dir, p->view.files[k].path);
		if (access(path, F_OK) == 0)
			continue;
		p->idx[n] = p->idx[k];
		p->view.files[n++] = p->view.files[k];
		*bytes += p->view.files[k].size;
	}
	p->view.nfiles = n;
	return ret;
}

int tier_lease_whole(struct tier *t, struct tier_lease *l)
{
	char elided[PATH_MAX + 16], name[HEX_LEN + 16], full[CHUNK_ID_LEN];
	char bdir[PATH_MAX], resv[PATH_MAX];
	struct store_lease *sl = NULL;
	struct manifest *m = NULL;
	struct tier_part part = { 0 };
	struct engine_stats st;
	uint64_t bytes = 0, need = 0, t0 = now_ns();
	bool reserved = false;
	int bfd, ret = 0;

	if (!tier_lease_partial(l))
		return 0;
	snprintf(name, sizeof(name), "%s.build", l->hex);
	bfd = tier_lock(t, name, LOCK_EX);
	if (bfd < 0)
		return bfd;
	if (!tier_lease_partial(l)) /* another start wrote them meanwhile */
		goto out;
	snprintf(elided, sizeof(elided), "%s/" TIER_ELIDED, l->path);
	snprintf(full, sizeof(full), "sha256:%s", l->hex);
	build_paths(t, l->hex, bdir, resv);
	sl = store_lease_take(t->s, full);
	ret = sl ? store_manifest_load(t->s, full, &m, NULL) : -ENOENT;
	if (ret) {
		pr_err("sha256:%s: its pages files are needed and the store no longer has the "
		       "snapshot: %s", l->hex, strerror(-ret));
		goto out;
	}
	ret = meta_read(t, l->hex, &bytes, NULL, NULL, NULL);
	if (!ret)
		ret = missing_pages(m, l->path, &part, &need);
	if (!ret && need) {
		ret = tier_reserve(t, l->hex, need, resv);
		reserved = !ret;
	}
	if (!ret && need)
		ret = engine_materialize(t->s, &part.view, bdir, &t->opts, &st);
	for (size_t k = 0; !ret && k < part.view.nfiles; k++) {
		char from[PATH_MAX + 256], to[PATH_MAX + 256];

		snprintf(from, sizeof(from), "%s/%s", bdir, part.view.files[k].path);
		snprintf(to, sizeof(to), "%s/%s", l->path, part.view.files[k].path);
		if (rename(from, to) < 0) {
			ret = -errno;
			pr_perror("rename %s to %s", from, to);
		}
	}
	/* The metadata names them (and their room) before .elided goes. */
	if (!ret)
		ret = meta_write(t, l->hex, full, bytes + need, m, NULL);
	if (!ret && unlink(elided) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", elided);
	}
	if (!ret)
		pr_info("sha256:%s: its %zu pages files (%llu bytes) written for a start that "
			"does not map, in %.1f ms", l->hex, part.view.nfiles,
			(unsigned long long)need, ms_since(t0));
	rm_rf(bdir);
out:
	if (reserved)
		unlink(resv);
	tier_part_release(&part);
	manifest_free(m);
	store_lease_release(sl);
	lock_drop(bfd);
	return ret;
}

bool tier_lease_partial(const struct tier_lease *l)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/" TIER_ELIDED, l->path);
	return access(path, F_OK) == 0;
}

const char *tier_lease_path(const struct tier_lease *l)
{
	return l->path;
}

bool tier_lease_hit(const struct tier_lease *l)
{
	return l->hit;
}

int tier_lease_fd(const struct tier_lease *l)
{
	return l->fd;
}

double tier_lease_materialize_ms(const struct tier_lease *l)
{
	return l->ms;
}

void tier_release(struct tier_lease *l)
{
	if (!l)
		return;
	lock_drop(l->fd);
	free(l);
}
