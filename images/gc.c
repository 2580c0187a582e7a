/* SPDX-License-Identifier: Apache-2.0 */
/* gc.c — the image cache's gc (image_gc): what no manifest names, no
 * snapshot in progress holds and no live process has as its root.
 */
#define LOG_PREFIX "image: "
#include "images/image.h"
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "images/image_internal.h"
#include "store/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct root_ids {
	dev_t *dev;
	ino_t *ino;
	size_t n, cap;
};

/* The root directory of every live process (a container's is its rootfs). */
static void live_roots(struct root_ids *r)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char p[300];
		struct stat st;

		if (!image_all_digits(de->d_name))
			continue;
		snprintf(p, sizeof(p), "/proc/%s/root", de->d_name);
		if (stat(p, &st) < 0)
			continue;
		size_t dev_cap = r->cap; /* dev and ino grow together */

		if (ARRAY_GROW(r->dev, dev_cap, r->n + 1, 256) ||
		    ARRAY_GROW(r->ino, r->cap, r->n + 1, 256))
			break;
		r->dev[r->n] = st.st_dev;
		r->ino[r->n++] = st.st_ino;
	}
	if (d)
		closedir(d);
}

static bool is_live_root(const struct root_ids *r, const char *bundle)
{
	char p[PATH_MAX + 16];
	struct stat st;

	snprintf(p, sizeof(p), "%s/rootfs", bundle);
	if (stat(p, &st) < 0)
		return false;
	for (size_t i = 0; i < r->n; i++)
		if (r->dev[i] == st.st_dev && r->ino[i] == st.st_ino)
			return true;
	return false;
}

/* Digests that the store's manifests name, as a JSON object of hex → true. */
static int used_digests(struct store *s, json_t *used)
{
	json_t *list = NULL, *e;
	size_t i;
	int ret = store_list(s, &list);

	if (ret)
		return ret;
	json_array_foreach(list, i, e)
	{
		const char *id = json_string_value(json_object_get(e, "id"));
		struct manifest *m = NULL;
		struct snapshot_meta sm;
		const char *d;
		char why[256];

		if (!id)
			continue;
		ret = store_manifest_load(s, id, &m, NULL);
		if (ret == -ENOENT)
			continue;
		if (ret) {
			/* A manifest that cannot be read may name any image. */
			pr_warn("gc: manifest %s cannot be read: nothing is removed", id);
			break;
		}
		ret = snapshot_meta_parse(m->meta, &sm, why, sizeof(why));
		manifest_free(m);
		if (ret) {
			pr_warn("gc: manifest %s: its meta: %s: nothing is removed", id, why);
			break;
		}
		d = sm.image.digest;
		if (d && !strncmp(d, "sha256:", 7) && image_hex64(d + 7))
			json_object_set_new(used, d + 7, json_true());
		snapshot_meta_release(&sm);
	}
	json_decref(list);
	return ret;
}

/* Remove digest hex: out of the way first (a rename), so that a crash
 * leaves no half-removed rootfs that looks whole. */
static int remove_image(const struct image_cache *k, const char *hex)
{
	static atomic_uint seq;
	char p[PATH_MAX], q[PATH_MAX], name[128];
	int ret = 0;

	for (int i = 0; i < 2; i++) {
		const char *sub = i ? "layouts" : "rootfs";

		snprintf(name, sizeof(name), "%d-gc-%u", (int)getpid(), atomic_fetch_add(&seq, 1));
		if (image_cache_path(k, p, sizeof(p), sub, hex) ||
		    image_cache_path(k, q, sizeof(q), "tmp", name))
			return -ENAMETOOLONG;
		if (rename(p, q) < 0) {
			if (errno != ENOENT) {
				ret = -errno;
				pr_perror("rename %s", p);
			}
			continue;
		}
		if (rm_rf(q))
			pr_warn("gc: %s is left behind", q);
	}
	return ret;
}

static void remove_sources_of(const struct image_cache *k, const json_t *gone)
{
	char dir[PATH_MAX], hex[65];
	struct dirent *de;
	DIR *d;

	if (image_cache_path(k, dir, sizeof(dir), "sources", NULL) || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (!image_cache_source(k, de->d_name, hex) || json_object_get(gone, hex))
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

/* Work directories whose process is gone. */
static void remove_stale_work(const struct image_cache *k)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct dirent *de;
	DIR *d;

	if (image_cache_path(k, dir, sizeof(dir), "tmp", NULL) || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		long pid = strtol(de->d_name, NULL, 10);

		if (de->d_name[0] == '.' || pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		if (!image_cache_path(k, p, sizeof(p), "tmp", de->d_name) && rm_rf(p))
			pr_warn("gc: %s is left behind", p);
	}
	closedir(d);
}

int image_gc(const struct thaw_config *c, struct store *s, unsigned *removed)
{
	struct root_ids roots = { 0 };
	json_t *used = json_object(), *held = json_object(), *gone = json_object(), *v;
	char dir[PATH_MAX], p[PATH_MAX];
	struct image_cache k;
	struct dirent *de;
	const char *hex;
	DIR *d;
	int lk = -1, ret;

	if (removed)
		*removed = 0;
	if (!used || !held || !gone) {
		ret = -ENOMEM;
		goto out;
	}
	if (snprintf(k.base, sizeof(k.base), "%s/images", c->data_dir) >= (int)sizeof(k.base) ||
	    image_cache_path(&k, dir, sizeof(dir), "rootfs", NULL)) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (!image_is_dir(dir)) {
		ret = 0;
		goto out;
	}
	lk = image_cache_lock(&k);
	if (lk < 0) {
		ret = lk;
		goto out;
	}
	remove_stale_work(&k);
	/* Every image no snapshot in progress holds, locked first: a snapshot
	 * that held one has written its manifest before it let go, so the
	 * listing below, made after, sees it. */
	for (int i = 0; i < 2; i++) {
		if (image_cache_path(&k, dir, sizeof(dir), i ? "layouts" : "rootfs", NULL) ||
		    !(d = opendir(dir)))
			continue;
		while ((de = readdir(d))) {
			int fd;

			if (!image_hex64(de->d_name) || json_object_get(held, de->d_name) ||
			    image_cache_path(&k, p, sizeof(p), "locks", de->d_name))
				continue;
			fd = lock_path(p, LOCK_EX | LOCK_NB, 0600);
			if (fd >= 0)
				json_object_set_new(held, de->d_name, json_integer(fd));
		}
		closedir(d);
		d = NULL;
	}
	ret = used_digests(s, used);
	if (ret)
		goto out;
	live_roots(&roots);
	json_object_foreach(held, hex, v)
	{
		if (json_object_get(used, hex))
			continue;
		if (image_cache_path(&k, p, sizeof(p), "rootfs", hex) || is_live_root(&roots, p))
			continue;
		if (remove_image(&k, hex) == 0) {
			json_object_set_new(gone, hex, json_true());
			pr_info("gc: image sha256:%s removed: no snapshot names it", hex);
			if (removed)
				(*removed)++;
			if (!image_cache_path(&k, p, sizeof(p), "locks", hex))
				unlink(p);
		}
	}
	remove_sources_of(&k, gone);
	/* The idmapped views of the images gone, and of ranges given back. */
	if (image_idmap_prune_locked(c, &k))
		pr_warn("gc: an idmapped rootfs is left mounted");
out:
	json_object_foreach(held, hex, v)
	{
		close((int)json_integer_value(v));
	}
	if (lk >= 0)
		close(lk);
	free(roots.dev);
	free(roots.ino);
	json_decref(used);
	json_decref(held);
	json_decref(gone);
	return ret;
}
