/* SPDX-License-Identifier: Apache-2.0 */
/* store.c — opening a store, its paths, its lock, and crash-safe object writes. */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const store_dirs[] = {"chunks", "packs", "manifests", "leases", "tmp"};

struct store *store_open(const char *dir)
{
	return store_open_with(dir, NULL);
}

struct store *store_open_with(const char *dir, const struct config_store *settings)
{
	struct config_store st;
	struct store *s = calloc(1, sizeof(*s));
	char path[PATH_MAX];
	int fd;

	if (!s) {
		pr_err("out of memory");
		return NULL;
	}
	s->dirfd = -1;
	pthread_mutex_init(&s->cache_mu, NULL);
	pthread_rwlock_init(&s->idx_lock, NULL);
	pthread_mutex_init(&s->drop_mu, NULL);
	hash_set_init(&s->dropped_hashes);
	s->cache_budget = STORE_MANIFEST_CACHE_BYTES;
	s->dir = strdup(dir);
	if (!s->dir)
		goto err;
	if (settings)
		st = *settings;
	else if (config_store_init(&st) < 0)
		goto err;
	s->layout = st.loose ? STORE_LAYOUT_LOOSE : STORE_LAYOUT_PACK;
	s->direct = st.direct;
	s->map_input = st.map_input;
	if (dir_make_private(dir) < 0)
		goto err;
	for (size_t i = 0; i < ARRAY_SIZE(store_dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, store_dirs[i]);
		if (mkdir_p(path, 0700) < 0)
			goto err;
	}
	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		pr_perror("cannot create %s", path);
		goto err;
	}
	close(fd);
	s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		pr_perror("cannot open %s", dir);
		goto err;
	}
	if (store_packs_read(s, true) < 0)
		goto err;
	return s;
err:
	store_close(s);
	return NULL;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	if (s->dirfd >= 0)
		close(s->dirfd);
	for (size_t i = 0; i < STORE_MANIFEST_CACHE; i++)
		manifest_free(s->cache[i].m);
	store_index_release(s);
	hash_set_release(&s->dropped_hashes);
	free(s->dropped);
	pthread_mutex_destroy(&s->drop_mu);
	pthread_rwlock_destroy(&s->idx_lock);
	pthread_mutex_destroy(&s->cache_mu);
	free(s->dir);
	free(s);
}

const char *store_path(const struct store *s)
{
	return s->dir;
}

int store_chunk_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
		     size_t len)
{
	char hex[2 * CHUNK_HASH_LEN + 1];

	hex_encode(hash, CHUNK_HASH_LEN, hex);
	if ((size_t)snprintf(buf, len, "%s/chunks/%.2s/%s", s->dir, hex, hex + 2) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int store_hash_path(const struct store *s, const char *dir, const uint8_t hash[CHUNK_HASH_LEN],
		    char *buf, size_t len)
{
	char hex[2 * CHUNK_HASH_LEN + 1];

	hex_encode(hash, CHUNK_HASH_LEN, hex);
	if ((size_t)snprintf(buf, len, "%s/%s/%s", s->dir, dir, hex) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int store_manifest_path(const struct store *s, const uint8_t hash[CHUNK_HASH_LEN], char *buf,
			size_t len)
{
	return store_hash_path(s, "manifests", hash, buf, len);
}

int store_lock(struct store *s, int how)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/lock", s->dir) >= sizeof(path))
		return -ENAMETOOLONG;
	return lock_path(path, how, 0600);
}

/* Move tmp (relative to the store directory) to name under dfd: rename() over
 * it if replace, else a rename that refuses to replace (EEXIST), falling back
 * to link() where the filesystem has no RENAME_NOREPLACE.  A rename costs a
 * fifth less than link + unlink. */
static int place(struct store *s, const char *tmp, int dfd, const char *name, bool replace)
{
	static atomic_bool no_noreplace;

	if (replace)
		return renameat(s->dirfd, tmp, dfd, name);
	if (!atomic_load(&no_noreplace)) {
		int r = renameat2(s->dirfd, tmp, dfd, name, RENAME_NOREPLACE);
		if (r == 0 || errno != EINVAL)
			return r;
		atomic_store(&no_noreplace, true);
	}
	if (linkat(s->dirfd, tmp, dfd, name, 0) < 0)
		return -1;
	unlinkat(s->dirfd, tmp, 0);
	return 0;
}

static int writev_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* name's directory (under dfd) into dir: the part before its last '/'. */
static void dir_of(const char *name, char dir[PATH_MAX])
{
	const char *slash = strrchr(name, '/');

	snprintf(dir, PATH_MAX, "%.*s", slash ? (int)(slash - name) : 1, slash ? name : ".");
}

/* Make name's directory (under dfd), where a chunk's chunks/xx/ is made on
 * first use: 0, or -errno. */
static int make_dir_of(int dfd, const char *name)
{
	char dir[PATH_MAX];

	dir_of(name, dir);
	return mkdirat(dfd, dir, 0700) < 0 && errno != EEXIST ? -errno : 0;
}

/* An object's bytes into fd: fsynced if sync, else its writeback started now,
 * so that the syncfs() before the manifest finds little to do.  0 or -errno. */
static int write_content(int fd, struct iovec *iov, int iovcnt, bool sync)
{
	int ret = writev_all(fd, iov, iovcnt);

	if (ret == 0 && sync && fsync(fd) < 0)
		ret = -errno;
	if (ret == 0 && !sync)
		sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	return ret;
}

/* Write iov into a file with no name yet, in name's directory (made if
 * missing), and link it there as name: the name appears only with its whole
 * content, and a crash before the link leaves nothing (the kernel frees an
 * unlinked inode).  Each chunk directory is locked only for its own link,
 * where temp names in tmp/ made every create and every rename of all the
 * writers take tmp/'s lock (ext4, 2 writers: a quarter of a put's CPU time
 * spinning on it).  1 written, 0 already there, -errno; -EOPNOTSUPP where
 * the filesystem has no O_TMPFILE (the caller then uses a named temp). */
static int write_unnamed(struct store *s, int dfd, const char *name, struct iovec *iov, int iovcnt,
			 bool sync)
{
	char dir[PATH_MAX], proc[64];
	int fd, ret, r;

	dir_of(name, dir);
	fd = openat(dfd, dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0400);
	if (fd < 0 && errno == ENOENT) {
		ret = make_dir_of(dfd, name);
		if (ret)
			return ret;
		fd = openat(dfd, dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0400);
	}
	if (fd < 0)
		return errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL ? -EOPNOTSUPP : -errno;
	ret = write_content(fd, iov, iovcnt, sync);
	if (ret == 0) {
		/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd does not. */
		r = linkat(fd, "", dfd, name, AT_EMPTY_PATH);
		if (r < 0 && (errno == EPERM || errno == ENOENT)) {
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
			r = linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW);
		}
		ret = r == 0 ? 1 : errno == EEXIST ? 0 : -errno; /* content addressed: the same bytes */
	}
	if (close(fd) < 0 && ret > 0)
		ret = -errno;
	if (ret < 0)
		pr_err("cannot put %s%s%s in place: %s", dfd == AT_FDCWD ? "" : s->dir,
		       dfd == AT_FDCWD ? "" : "/", name, strerror(-ret));
	return ret;
}

/* store_write_object() of the bytes of iov, to name under dfd: unnamed and
 * linked (write_unnamed) unless it replaces an object, else through a named
 * temp in tmp/ and a rename.  Chunk and temp names are resolved from the
 * store's directory fd, not from its path: a walk of two or three components
 * instead of the whole path.  (Not from fds of tmp/ and chunks/: gc replaces
 * tmp/, also from another process, and a held fd would then name a deleted
 * directory.) */
static int write_at(struct store *s, int dfd, const char *name, struct iovec *iov, int iovcnt,
		    bool sync, bool replace)
{
	static atomic_ulong counter;
	static atomic_bool no_tmpfile;
	char tmp[64];
	int fd = -1, ret;

	if (!replace && !atomic_load(&no_tmpfile)) {
		ret = write_unnamed(s, dfd, name, iov, iovcnt, sync);
		if (ret != -EOPNOTSUPP)
			return ret;
		atomic_store(&no_tmpfile, true);
	}
	snprintf(tmp, sizeof(tmp), "tmp/%d.%d.%lu", getpid(), gettid(),
		 atomic_fetch_add(&counter, 1));
	fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
	if (fd < 0) {
		ret = -errno;
		pr_perror("cannot create %s/%s", s->dir, tmp);
		return ret;
	}
	ret = write_content(fd, iov, iovcnt, sync);
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret < 0) {
		pr_err("cannot write %s/%s: %s", s->dir, tmp, strerror(-ret));
		goto out;
	}
	int r = place(s, tmp, dfd, name, replace);
	if (r < 0 && errno == ENOENT && strchr(name, '/')) {
		ret = make_dir_of(dfd, name);
		if (ret) {
			pr_err("cannot create the directory of %s%s%s: %s",
			       dfd == AT_FDCWD ? "" : s->dir, dfd == AT_FDCWD ? "" : "/", name,
			       strerror(-ret));
			goto out;
		}
		r = place(s, tmp, dfd, name, replace);
	}
	if (r == 0)
		return 1; /* the temp name is gone with the rename */
	if (errno == EEXIST) {
		ret = 0; /* content addressed: the same bytes are already there */
	} else {
		ret = -errno;
		pr_perror("cannot put %s%s%s in place", dfd == AT_FDCWD ? "" : s->dir,
			  dfd == AT_FDCWD ? "" : "/", name);
	}
out:
	unlinkat(s->dirfd, tmp, 0);
	return ret;
}

int store_write_object(struct store *s, const char *path, const void *buf, size_t len, bool sync,
		       bool replace)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	return write_at(s, AT_FDCWD, path, &iov, 1, sync, replace);
}

int store_chunk_name(const uint8_t hash[CHUNK_HASH_LEN], char name[STORE_CHUNK_NAME_LEN])
{
	char hex[2 * CHUNK_HASH_LEN + 1];

	hex_encode(hash, CHUNK_HASH_LEN, hex);
	snprintf(name, STORE_CHUNK_NAME_LEN, "chunks/%.2s/%s", hex, hex + 2);
	return 0;
}

int store_write_chunk(struct store *s, const char *name, const void *head, size_t head_len,
		      const void *payload, size_t payload_len, bool replace)
{
	struct iovec iov[2] = {
	    {.iov_base = (void *)head, .iov_len = head_len},
	    {.iov_base = (void *)payload, .iov_len = payload_len},
	};

	return write_at(s, s->dirfd, name, iov, payload_len ? 2 : 1, false, replace);
}

int store_read_object(const char *path, uint8_t *obj, size_t cap, size_t *obj_len)
{
	int ret = read_file_into(path, obj, cap, obj_len);

	return ret == -EFBIG ? -EBADMSG : ret;
}

long store_object_raw_len(const uint8_t *obj, size_t obj_len)
{
	uint32_t v;

	if (obj_len < CHUNK_HEADER_SIZE || memcmp(obj, "THCK", 4))
		return -EBADMSG;
	memcpy(&v, obj + 8, 4);
	v = le32toh(v);
	return v > CHUNK_MAX_RAW ? -EBADMSG : (long)v;
}

/* Call fn for each entry of dir but those whose name starts with '.': its
 * path (an entry whose path does not fit is passed over) and its name.  A
 * dir that does not exist has no entries where missing_ok, else it is an
 * error (logged).  A non-zero return of fn stops the walk and is returned. */
static int foreach_entry(const char *dir, bool missing_ok,
			 int (*fn)(const char *path, const char *name, void *arg), void *arg)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(dir);
	int ret = 0;

	if (!d) {
		if (errno == ENOENT && missing_ok)
			return 0;
		ret = -errno;
		pr_perror("cannot read %s", dir);
		return ret;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		ret = fn(path, de->d_name, arg);
		if (ret)
			break;
	}
	closedir(d);
	return ret;
}

/* A walk of a directory of objects named by their hash. */
struct foreach_walk {
	const char *rel;    /* the directory, relative to the store */
	const char *prefix; /* the hash's hex digits that the directory's name holds */
	store_chunk_fn fn;
	void *arg;
};

/* An object of such a directory: fn with its hash if its name, after
 * prefix, is the rest of one. */
static int foreach_object(const char *path, const char *entry, void *arg)
{
	struct foreach_walk *w = arg;
	char name[PATH_MAX], hex[2 * CHUNK_HASH_LEN + 1];
	uint8_t hash[CHUNK_HASH_LEN];

	if (snprintf(name, sizeof(name), "%s/%s", w->rel, entry) >= (int)sizeof(name))
		return 0;
	bool ok = snprintf(hex, sizeof(hex), "%s%s", w->prefix, entry) == 2 * CHUNK_HASH_LEN &&
		  strspn(hex, "0123456789abcdef") == 2 * CHUNK_HASH_LEN &&
		  hex_decode(hex, hash, CHUNK_HASH_LEN) == 0;
	return w->fn(ok ? hash : NULL, path, name, w->arg);
}

static int foreach_in(const char *dir, const char *rel, store_chunk_fn fn, void *arg,
		      const char *prefix)
{
	struct foreach_walk w = { rel, prefix, fn, arg };

	return foreach_entry(dir, true, foreach_object, &w);
}

/* An entry of chunks/: a fan-out directory (two hex digits) walked in
 * turn, or anything else handed to fn as not a chunk. */
static int foreach_fanout(const char *path, const char *entry, void *arg)
{
	struct foreach_walk *w = arg;
	char rel[64];

	snprintf(rel, sizeof(rel), "chunks/%.8s", entry);
	if (strlen(entry) != 2 || strspn(entry, "0123456789abcdef") != 2)
		return w->fn(NULL, path, rel, w->arg);
	return foreach_in(path, rel, w->fn, w->arg, entry);
}

int store_foreach_chunk(struct store *s, store_chunk_fn fn, void *arg)
{
	char dir[PATH_MAX];
	struct foreach_walk w = { NULL, NULL, fn, arg };

	snprintf(dir, sizeof(dir), "%s/chunks", s->dir);
	return foreach_entry(dir, false, foreach_fanout, &w);
}

int store_foreach_manifest(struct store *s, store_chunk_fn fn, void *arg)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s/manifests", s->dir);
	return foreach_in(dir, "manifests", fn, arg, "");
}

/* hash set: open addressing on the hash's first 8 bytes (already uniform). */

void hash_set_init(struct hash_set *h)
{
	memset(h, 0, sizeof(*h));
}

void hash_set_release(struct hash_set *h)
{
	free(h->slots);
	free(h->used);
	memset(h, 0, sizeof(*h));
}

static size_t slot_of(const struct hash_set *h, const uint8_t hash[CHUNK_HASH_LEN])
{
	uint64_t k;

	memcpy(&k, hash, 8);
	size_t i = (size_t)k & (h->cap - 1);
	while (h->used[i] && memcmp(h->slots[i], hash, CHUNK_HASH_LEN))
		i = (i + 1) & (h->cap - 1);
	return i;
}

static int hash_set_grow(struct hash_set *h)
{
	struct hash_set n = {.cap = h->cap ? h->cap * 2 : 1024};

	n.slots = malloc(n.cap * sizeof(*n.slots));
	n.used = calloc(n.cap, sizeof(*n.used));
	if (!n.slots || !n.used) {
		hash_set_release(&n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < h->cap; i++) {
		if (!h->used[i])
			continue;
		size_t j = slot_of(&n, h->slots[i]);
		memcpy(n.slots[j], h->slots[i], CHUNK_HASH_LEN);
		n.used[j] = true;
		n.n++;
	}
	hash_set_release(h);
	*h = n;
	return 0;
}

int hash_set_add(struct hash_set *h, const uint8_t hash[CHUNK_HASH_LEN])
{
	if ((h->n + 1) * 2 > h->cap && hash_set_grow(h) < 0)
		return -ENOMEM;
	size_t i = slot_of(h, hash);
	if (h->used[i])
		return 0;
	memcpy(h->slots[i], hash, CHUNK_HASH_LEN);
	h->used[i] = true;
	h->n++;
	return 1;
}

bool hash_set_has(const struct hash_set *h, const uint8_t hash[CHUNK_HASH_LEN])
{
	return h->cap && h->used[slot_of(h, hash)];
}
