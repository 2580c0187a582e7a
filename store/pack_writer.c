/* SPDX-License-Identifier: Apache-2.0 */
/* pack_writer.c — the writer that appends a put's new chunk objects to
 * packs and publishes each pack with its index (pack.h). */
#define LOG_PREFIX "store: "
#include "store/pack.h"
#include "store/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

/* The most pieces one write gathers: headed objects in buf, bare payloads
 * in their callers' memory. */
#define PACK_MAX_IOV 256

struct pack_writer {
	struct store *s;
	int fd;		/* the pack being written (unnamed until finished), or -1 */
	char tmp[64];	/* where the filesystem has no O_TMPFILE: its name in tmp/ */
	bool direct;	/* fd is O_DIRECT */
	uint8_t *buf;	/* PACK_WRITE_BYTES, aligned: headed objects not yet written */
	size_t fill;	/* bytes in buf, a multiple of PACK_ALIGN */
	uint64_t flushed; /* bytes of the pack written before what is pending */
	/* The next write, in pack order: pieces of buf and bare payloads. */
	struct iovec iov[PACK_MAX_IOV];
	int niov;
	uint64_t pending; /* bytes in iov */
	/* The callers' tokens for the bare payloads in iov, given back to
	 * release() once they are written (or dropped). */
	void *held[PACK_MAX_IOV];
	int nheld;
	void (*release)(void *arg, void *token);
	void *release_arg;
	struct pack_entry *e;
	size_t n, cap;
};

struct pack_writer *pack_writer_new(struct store *s)
{
	struct pack_writer *w = calloc(1, sizeof(*w));

	if (!w || !(w->buf = alloc_huge(PACK_WRITE_BYTES))) {
		pr_err("out of memory for a pack writer");
		free(w);
		return NULL;
	}
	w->s = s;
	w->fd = -1;
	return w;
}

/* Open fd as a new unnamed file in dir (or named tmp where the filesystem
 * has no O_TMPFILE), O_DIRECT if direct and the filesystem takes it. */
static int open_new(struct pack_writer *w, const char *dir, int flags)
{
	static atomic_ulong counter;

	w->tmp[0] = '\0';
	w->fd = open(dir, O_TMPFILE | flags, 0400);
	if (w->fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return w->fd;
	snprintf(w->tmp, sizeof(w->tmp), "tmp/pack.%d.%d.%lu", getpid(), gettid(),
		 atomic_fetch_add(&counter, 1));
	w->fd = openat(w->s->dirfd, w->tmp, O_CREAT | O_EXCL | flags, 0400);
	if (w->fd < 0)
		w->tmp[0] = '\0';
	return w->fd;
}

static int open_pack(struct pack_writer *w)
{
	char dir[PATH_MAX];
	int flags = O_WRONLY | O_CLOEXEC;

	snprintf(dir, sizeof(dir), "%s/packs", w->s->dir);
	w->direct = w->s->direct;
	if (open_new(w, dir, flags | (w->direct ? O_DIRECT : 0)) < 0 && w->direct &&
	    errno == EINVAL) {
		w->direct = false;
		open_new(w, dir, flags);
	}
	if (w->fd < 0) {
		int ret = -errno;
		pr_perror("cannot create a pack in %s", dir);
		return ret;
	}
	w->flushed = 0;
	w->n = 0;
	return 0;
}

/* Nothing pending any more: the callers' bare payloads go back to them,
 * written or no longer wanted. */
static void clear_pending(struct pack_writer *w)
{
	for (int i = 0; i < w->nheld; i++)
		w->release(w->release_arg, w->held[i]);
	w->nheld = 0;
	w->fill = 0;
	w->niov = 0;
	w->pending = 0;
}

/* Write what is pending at w->flushed, in one pwritev() where it can. */
static int write_pending(struct pack_writer *w)
{
	struct iovec *v = w->iov;
	int cnt = w->niov;
	uint64_t left = w->pending, off = w->flushed;

	while (left) {
		ssize_t r = pwritev(w->fd, v, cnt, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EINVAL && w->direct) {
			/* A filesystem that opened O_DIRECT but wants another
			 * alignment: go on through the page cache. */
			int fl = fcntl(w->fd, F_GETFL);
			if (fl >= 0 && fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
				w->direct = false;
				continue;
			}
		}
		if (r < 0 && errno == EFAULT) {
			/* A bare payload's pages went away: its input file shrank. */
			pr_err("cannot write a pack in %s/packs: an input file changed while being "
			       "read",
			       w->s->dir);
			return -EFAULT;
		}
		if (r <= 0) {
			int ret = r < 0 ? -errno : -EIO;
			pr_err("cannot write a pack in %s/packs: %s", w->s->dir, strerror(-ret));
			return ret;
		}
		off += (uint64_t)r;
		left -= (uint64_t)r;
		while (cnt && (size_t)r >= v->iov_len) {
			r -= (ssize_t)v->iov_len;
			v++;
			cnt--;
		}
		if (cnt) {
			v->iov_base = (uint8_t *)v->iov_base + r;
			v->iov_len -= (size_t)r;
		}
	}
	return 0;
}

static int flush(struct pack_writer *w)
{
	int ret = write_pending(w);

	if (!ret)
		w->flushed += w->pending;
	clear_pending(w);
	return ret;
}

static int random_name(char name[PACK_NAME_LEN + 1])
{
	uint8_t r[PACK_NAME_LEN / 2];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -errno ? -errno : -EIO;
	hex_encode(r, sizeof(r), name);
	return 0;
}

/* Link the complete, synced pack as packs/<name>.pack, then its index. */
static int publish(struct pack_writer *w)
{
	char name[PACK_NAME_LEN + 1], proc[64], path[PATH_MAX], dir[PATH_MAX];
	uint8_t *idx = NULL;
	size_t idx_len;
	int ret, r;

	if (fdatasync(w->fd) < 0) {
		ret = -errno;
		pr_perror("cannot sync a pack in %s/packs", w->s->dir);
		return ret;
	}
	for (int tries = 0;; tries++) {
		ret = random_name(name);
		if (ret)
			return ret;
		snprintf(path, sizeof(path), "%s/packs/%s.pack", w->s->dir, name);
		if (w->tmp[0]) {
			r = renameat2(w->s->dirfd, w->tmp, AT_FDCWD, path, RENAME_NOREPLACE);
			if (r == 0)
				w->tmp[0] = '\0';
		} else {
			/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd does not. */
			r = linkat(w->fd, "", AT_FDCWD, path, AT_EMPTY_PATH);
			if (r < 0 && (errno == EPERM || errno == ENOENT)) {
				snprintf(proc, sizeof(proc), "/proc/self/fd/%d", w->fd);
				r = linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
			}
		}
		if (r == 0)
			break;
		if (errno != EEXIST || tries > 8) {
			ret = -errno;
			pr_perror("cannot put pack %s in place", path);
			return ret;
		}
	}
	idx = pack_index_encode(w->e, w->n, w->flushed, &idx_len);
	if (!idx)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/packs/%s.idx", w->s->dir, name);
	ret = store_write_object(w->s, path, idx, idx_len, true, false);
	free(idx);
	if (ret == 0) {
		pr_err("pack index %s already exists", path);
		ret = -EEXIST;
	}
	if (ret < 0)
		return ret;
	snprintf(dir, sizeof(dir), "%s/packs", w->s->dir);
	ret = fsync_dir(dir);
	if (ret < 0)
		return ret;
	return store_index_add_pack(w->s, name, w->flushed, w->e, w->n);
}

/* Close the pack being written; a named temp not yet published is removed. */
static void drop(struct pack_writer *w)
{
	clear_pending(w);
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp[0])
		unlinkat(w->s->dirfd, w->tmp, 0);
	w->fd = -1;
	w->tmp[0] = '\0';
	w->n = 0;
}

/* Finish the pack being written, if any. */
static int finish_pack(struct pack_writer *w)
{
	int ret = 0;

	if (w->fd < 0)
		return 0;
	if (w->n)
		ret = flush(w);
	if (ret == 0 && w->n)
		ret = publish(w);
	drop(w);
	return ret;
}

/* Queue len bytes at p for the next write, after what is queued. */
static void queue(struct pack_writer *w, const void *p, size_t len)
{
	struct iovec *last = w->niov ? &w->iov[w->niov - 1] : NULL;

	if (last && (const uint8_t *)last->iov_base + last->iov_len == p)
		last->iov_len += len; /* the next object of buf */
	else
		w->iov[w->niov++] = (struct iovec){ (void *)p, len };
	w->pending += len;
}

/* Ready w for one more object: the pack finished first if pack_bytes more
 * would take it past PACK_MAX_BYTES, a pack opened if none is, what is
 * pending written if buf_bytes more would not fit the write buffer, and
 * room for its entry.  0 or -errno. */
static int make_room(struct pack_writer *w, size_t pack_bytes, size_t buf_bytes)
{
	int ret;

	if (w->fd >= 0 && w->flushed + w->pending + pack_bytes > PACK_MAX_BYTES &&
	    (ret = finish_pack(w)))
		return ret;
	if (w->fd < 0 && (ret = open_pack(w)))
		return ret;
	/* buf's objects are part of what is pending, so this bounds buf too. */
	if ((w->pending + buf_bytes > PACK_WRITE_BYTES || w->niov + 2 > PACK_MAX_IOV) &&
	    (ret = flush(w)))
		return ret;
	return ARRAY_GROW(w->e, w->cap, w->n + 1, 1024);
}

/* The entry of the object about to be queued (make_room() made its room). */
static struct pack_entry *new_entry(struct pack_writer *w, const uint8_t hash[CHUNK_HASH_LEN])
{
	struct pack_entry *e = &w->e[w->n++];

	memcpy(e->hash, hash, CHUNK_HASH_LEN);
	e->off = w->flushed + w->pending;
	return e;
}

int pack_writer_add(struct pack_writer *w, struct chunk_codec *codec,
		    const uint8_t hash[CHUNK_HASH_LEN], const void *raw, size_t raw_len,
		    uint32_t *stored, void *hold, bool *held)
{
	size_t bound = chunk_encode_bound(raw_len), room = ALIGN_UP(bound, PACK_ALIGN);
	const void *payload;
	uint8_t *o;
	long n;
	int ret;

	if (held)
		*held = false;
	if ((ret = make_room(w, bound, room)))
		return ret;
	/* Encoded straight into the write buffer: a zstd payload is written
	 * there by zstd, a raw one copied once, or, bare, not at all. */
	o = w->buf + w->fill;
	n = chunk_encode_parts(codec, raw, raw_len, o, bound, &payload);
	if (n < 0) {
		pr_err("cannot encode a chunk of %zu bytes: %s", raw_len, strerror((int)-n));
		return (int)n;
	}
	struct pack_entry *e = new_entry(w, hash);
	e->raw_len = (uint32_t)raw_len;
	if (payload == raw && hold && held && w->release && chunk_is_bare(raw_len, raw_len) &&
	    (uintptr_t)raw % PACK_ALIGN == 0) {
		/* Bare: written from the caller's pages, which it keeps until
		 * release(hold). */
		queue(w, raw, raw_len);
		w->held[w->nheld++] = hold;
		*held = true;
		e->stored = (uint32_t)raw_len;
	} else {
		if (payload == raw)
			memcpy(o + CHUNK_HEADER_SIZE, raw, raw_len);
		size_t padded = ALIGN_UP((size_t)n, PACK_ALIGN);
		memset(o + n, 0, padded - (size_t)n);
		queue(w, o, padded);
		w->fill += padded;
		e->stored = (uint32_t)n;
	}
	*stored = e->stored;
	return 0;
}

int pack_writer_add_object(struct pack_writer *w, const uint8_t hash[CHUNK_HASH_LEN],
			   const void *obj, uint32_t stored, uint32_t raw_len)
{
	size_t room = ALIGN_UP((size_t)stored, PACK_ALIGN);
	int ret;

	if (!chunk_object_size_possible(stored, raw_len) && !chunk_is_bare(stored, raw_len))
		return -EINVAL;
	if ((ret = make_room(w, room, room)))
		return ret;
	uint8_t *o = w->buf + w->fill;
	memcpy(o, obj, stored);
	memset(o + stored, 0, room - stored);
	struct pack_entry *e = new_entry(w, hash);
	e->stored = stored;
	e->raw_len = raw_len;
	queue(w, o, room);
	w->fill += room;
	return 0;
}

void pack_writer_set_release(struct pack_writer *w, void (*release)(void *arg, void *token),
			     void *arg)
{
	w->release = release;
	w->release_arg = arg;
}

int pack_writer_flush(struct pack_writer *w)
{
	return w && w->fd >= 0 && w->niov ? flush(w) : 0;
}

bool pack_writer_holds(const struct pack_writer *w)
{
	return w && w->nheld > 0;
}

int pack_writer_finish(struct pack_writer *w)
{
	return w ? finish_pack(w) : 0;
}

void pack_writer_free(struct pack_writer *w)
{
	if (!w)
		return;
	drop(w);
	free(w->buf);
	free(w->e);
	free(w);
}
