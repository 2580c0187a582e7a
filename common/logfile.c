/* SPDX-License-Identifier: Apache-2.0 */
/* logfile.c — see logfile.h. */
#define LOG_PREFIX "logfile: "
#include "common/logfile.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAIL_BLOCK (64 * 1024)

static int old_path(const char *path, char *out, size_t len)
{
	if ((size_t)snprintf(out, len, "%s.1", path) >= len) {
		pr_err("path too long: %s", path);
		return -ENAMETOOLONG;
	}
	return 0;
}

int logfile_open(struct logfile *lf, const char *path, uint64_t max, bool truncate)
{
	char old[PATH_MAX + 4];
	struct stat st;
	int ret;

	lf->fd = -1;
	lf->size = 0;
	lf->max = max;
	lf->rotations = 0;
	if ((size_t)snprintf(lf->path, sizeof(lf->path), "%s", path) >= sizeof(lf->path)) {
		pr_err("path too long: %s", path);
		return -ENAMETOOLONG;
	}
	ret = old_path(path, old, sizeof(old));
	if (ret)
		return ret;
	if (truncate && unlink(old) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", old);
		return ret;
	}
	lf->fd =
	    open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0600);
	if (lf->fd < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
	if (fstat(lf->fd, &st) == 0)
		lf->size = (uint64_t)st.st_size;
	return 0;
}

/* path becomes path.1 and a new path is begun.  Where that cannot be done,
 * the current file is emptied instead: what was in it is lost, but the
 * bound holds.  Either way size is 0 afterwards. */
static int rotate(struct logfile *lf)
{
	char old[PATH_MAX + 4];
	int fd, ret = old_path(lf->path, old, sizeof(old));

	if (!ret && rename(lf->path, old) < 0)
		ret = -errno;
	if (!ret) {
		fd = open(lf->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_TRUNC, 0600);
		if (fd >= 0) {
			close(lf->fd);
			lf->fd = fd;
			lf->size = 0;
			lf->rotations++;
			return 0;
		}
		ret = -errno;
	}
	if (ftruncate(lf->fd, 0) < 0 && !ret)
		ret = -errno;
	lf->size = 0;
	return ret;
}

int logfile_write(struct logfile *lf, const void *buf, size_t len)
{
	const char *p = buf;
	int ret = 0;

	if (lf->fd < 0)
		return -EBADF;
	while (len) {
		size_t n = len;

		if (lf->max && n > lf->max - MIN(lf->size, lf->max)) {
			uint64_t room = lf->max - MIN(lf->size, lf->max);
			const char *nl = room ? memrchr(p, '\n', (size_t)room) : NULL;

			if (nl) {
				n = (size_t)(nl - p) + 1; /* the lines that fit */
			} else if (lf->size) {
				rotate(lf); /* the rest begins the next file */
				continue;
			} else {
				n = (size_t)room; /* one line longer than the bound: cut */
			}
		}
		ret = write_all(lf->fd, p, n);
		if (ret)
			return ret;
		lf->size += n;
		p += n;
		len -= n;
	}
	return 0;
}

void logfile_close(struct logfile *lf)
{
	if (lf->fd >= 0)
		close(lf->fd);
	lf->fd = -1;
}

int logfile_remove(const char *path)
{
	char old[PATH_MAX + 4];
	int ret = old_path(path, old, sizeof(old));

	if (ret)
		return ret;
	if (unlink(old) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", old);
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", path);
	}
	return ret;
}

/* The two files of a log as one stream: src[0] (path.1), then src[1] (path). */
struct src {
	int fd;
	uint64_t size;
};

/* Bytes [off, off + n) of the stream into buf: how many were read (fewer
 * only if a file shrank under us), or -errno. */
static ssize_t read_stream(const struct src s[2], uint64_t off, char *buf, size_t n)
{
	size_t done = 0;

	while (done < n) {
		int i = off < s[0].size ? 0 : 1;
		uint64_t o = i ? off - s[0].size : off;
		ssize_t k;

		if (o >= s[i].size)
			break;
		k = pread(s[i].fd, buf + done, MIN(n - done, (size_t)(s[i].size - o)), (off_t)o);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		done += (size_t)k;
		off += (uint64_t)k;
	}
	return (ssize_t)done;
}

/* Open path for reading into *s: a missing file is an empty one. */
static int open_src(const char *path, struct src *s)
{
	struct stat st;
	int ret;

	s->fd = -1;
	s->size = 0;
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0) {
		if (errno == ENOENT)
			return 0;
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
	if (fstat(s->fd, &st) < 0) {
		ret = -errno;
		pr_perror("stat %s", path);
		return ret;
	}
	s->size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	return 0;
}

/* Where the last lines lines of the stream's [0, end) begin (never before
 * limit: then at the first line that begins after it, if any). */
static int tail_start(const struct src s[2], uint64_t end, uint64_t limit, unsigned lines,
		      uint64_t *start)
{
	char *block = malloc(TAIL_BLOCK);
	uint64_t pos = end, lowest_nl = UINT64_MAX;
	int ret = 0;

	if (!block)
		return -ENOMEM;
	*start = limit;
	while (pos > limit) {
		size_t n = (size_t)MIN((uint64_t)TAIL_BLOCK, pos - limit);
		ssize_t r;

		pos -= n;
		r = read_stream(s, pos, block, n);
		if (r < 0) {
			ret = (int)r;
			pr_perror("read");
			goto out;
		}
		if ((size_t)r != n) {
			ret = -EIO;
			pr_err("a log shrank while it was read");
			goto out;
		}
		for (size_t i = n; i-- > 0;) {
			uint64_t at = pos + i;

			if (block[i] != '\n' || at == end - 1) /* the last line's own newline */
				continue;
			lowest_nl = at;
			if (--lines == 0) {
				*start = at + 1;
				goto out;
			}
		}
	}
	/* Fewer lines than asked: all of them, or, capped, from the first
	 * line that begins inside the cap. */
	if (limit && lowest_nl != UINT64_MAX)
		*start = lowest_nl + 1;
out:
	free(block);
	return ret;
}

int logfile_tail(const char *path, unsigned lines, char **out, size_t *len)
{
	struct src s[2] = { { -1, 0 }, { -1, 0 } };
	char old[PATH_MAX + 4], *buf = NULL;
	uint64_t end, start = 0;
	struct stat a, b;
	ssize_t r;
	int ret;

	*out = NULL;
	*len = 0;
	ret = old_path(path, old, sizeof(old));
	/* The current file first: should it be rotated between the two opens,
	 * path.1 is then the file already open, and is left out, so that what
	 * is read is always one stretch of the output, never a part twice. */
	if (!ret)
		ret = open_src(path, &s[1]);
	if (!ret)
		ret = open_src(old, &s[0]);
	if (ret)
		goto out;
	if (s[0].fd >= 0 && s[1].fd >= 0 && fstat(s[0].fd, &a) == 0 && fstat(s[1].fd, &b) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		s[0].size = 0;
	end = s[0].size + s[1].size;
	if (lines && end) {
		ret = tail_start(s, end,
				 end > LOGFILE_TAIL_MAX_BYTES ? end - LOGFILE_TAIL_MAX_BYTES : 0,
				 lines, &start);
		if (ret)
			goto out;
	} else {
		start = end;
	}
	buf = malloc((size_t)(end - start) + 1);
	if (!buf) {
		ret = -ENOMEM;
		pr_err("out of memory for %llu bytes of %s", (unsigned long long)(end - start),
		       path);
		goto out;
	}
	r = read_stream(s, start, buf, (size_t)(end - start));
	if (r < 0) {
		ret = (int)r;
		pr_perror("read %s", path);
		goto out;
	}
	buf[r] = '\0';
	*out = buf;
	*len = (size_t)r;
	buf = NULL;
out:
	free(buf);
	for (int i = 0; i < 2; i++)
		if (s[i].fd >= 0)
			close(s[i].fd);
	return ret;
}

int logfile_parse_tail(const char *s, unsigned *out)
{
	unsigned n = 0;

	if (!s) {
		*out = LOGFILE_TAIL_DEFAULT;
		return 0;
	}
	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		n = n * 10 + (unsigned)(*s - '0');
		if (n > LOGFILE_TAIL_MAX)
			return -EINVAL;
	}
	*out = n;
	return 0;
}
