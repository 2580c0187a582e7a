/* SPDX-License-Identifier: Apache-2.0 */
/* store_lease.c — leases: a restore in progress keeps its manifest's chunks from gc.
 *
 * A lease is a hard link of the manifest in leases/, held with flock(LOCK_SH)
 * by its holder for as long as it lives.  Being a link, it keeps the manifest's
 * bytes (and so its chunk list) even if the manifest is deleted meanwhile; gc
 * reads it like a manifest.  gc tries LOCK_EX|LOCK_NB on each lease: if that
 * succeeds nobody holds it (the holder died) and the lease is stale.  Leases
 * are taken under the store lock (shared), so gc never sees one half made.
 */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct store_lease {
	int fd;
	char *path;
};

struct store_lease *store_lease_take(struct store *s, const char *manifest_id)
{
	static atomic_ulong counter;
	struct store_lease *l = NULL;
	uint8_t hash[CHUNK_HASH_LEN];
	char mpath[PATH_MAX], lpath[PATH_MAX], hex[2 * CHUNK_HASH_LEN + 1];
	int lock = -1, fd = -1;

	lock = store_lock(s, LOCK_SH);
	if (lock < 0)
		return NULL;
	if (store_manifest_resolve(s, manifest_id, hash) < 0)
		goto out;
	store_manifest_path(s, hash, mpath, sizeof(mpath));
	hex_encode(hash, CHUNK_HASH_LEN, hex);
	snprintf(lpath, sizeof(lpath), "%s/leases/%s.%d.%d.%lu", s->dir, hex, getpid(), gettid(),
		 atomic_fetch_add(&counter, 1));
	if (link(mpath, lpath) < 0) {
		if (errno == ENOENT)
			pr_err("no manifest %s in %s", manifest_id, s->dir);
		else
			pr_perror("cannot create lease %s", lpath);
		goto out;
	}
	fd = open(lpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_SH) < 0) {
		pr_perror("cannot hold lease %s", lpath);
		unlink(lpath);
		goto out;
	}
	l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(lpath))) {
		pr_err("out of memory");
		free(l);
		l = NULL;
		unlink(lpath);
		goto out;
	}
	l->fd = fd;
	fd = -1;
	pr_debug("lease %s taken", lpath);
out:
	if (fd >= 0)
		close(fd);
	close(lock);
	return l;
}

void store_lease_release(struct store_lease *l)
{
	if (!l)
		return;
	if (unlink(l->path) < 0)
		pr_warn("cannot remove lease %s: %s (gc will, once it is stale)", l->path,
			strerror(errno));
	close(l->fd);
	free(l->path);
	free(l);
}
