/* SPDX-License-Identifier: Apache-2.0 */
/* util.c — see util.h. */
#define LOG_PREFIX "util: "
#include "common/util.h"
#include "common/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double ms_since(uint64_t start_ns)
{
	return (double)(now_ns() - start_ns) / 1e6;
}

int cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	int r = pthread_condattr_init(&ca);

	if (r)
		return r;
	r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!r)
		r = pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
	return r;
}

struct timespec mono_timespec(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000ull),
				  .tv_nsec = (long)(ns % 1000000000ull) };
}

struct timespec mono_after_ms(uint64_t ms)
{
	return mono_timespec(now_ns() + ms * 1000000ull);
}

uint64_t realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Every regular file under path written back and advised out of the
 * page cache (symbolic links not followed). */
static void fadvise_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char p[PATH_MAX];
		struct stat st;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%.3000s/%.255s", path, de->d_name);
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			fadvise_tree(p);
		} else if (S_ISREG(st.st_mode) && (fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
			fdatasync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
	if (d)
		closedir(d);
}

bool page_cache_drop(int level, const char *const *trees, size_t ntrees)
{
	char text[4];
	int fd, n = snprintf(text, sizeof(text), "%d\n", level);
	bool all;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	all = fd >= 0 && write(fd, text, (size_t)n) == n;
	if (fd >= 0)
		close(fd);
	for (size_t i = 0; !all && i < ntrees; i++)
		fadvise_tree(trees[i]);
	return all;
}

/* mkdir with exactly mode, whatever the process's umask: a container's
 * rootfs skeleton is its root directory, whose mode CRIU records at the dump
 * and checks at the restore ("File . has bad mode 040755 (expect 040700)"),
 * so a snapshot taken under one umask must restore under another.  The
 * directory is reopened without following a link to set it.  0, or -errno
 * (logged, but for EEXIST). */
static int mkdir_mode(const char *path, mode_t mode)
{
	int fd, err;

	if (mkdir(path, mode) < 0) {
		err = -errno;
		if (err != -EEXIST)
			pr_perror("mkdir %s", path);
		return err;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, mode) < 0) {
		err = -errno;
		pr_perror("chmod %s to %04o", path, (unsigned)mode);
		if (fd >= 0)
			close(fd);
		return err;
	}
	close(fd);
	return 0;
}

int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	int ret;

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		ret = mkdir_mode(buf, mode);
		if (ret && ret != -EEXIST)
			return ret;
		*p = '/';
	}
	ret = mkdir_mode(buf, mode);
	return ret == -EEXIST ? 0 : ret;
}

int dir_make_private(const char *path)
{
	struct stat st;
	int fd = -1, ret;

	ret = mkdir_p(path, 0700);
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		goto out;
	}
	if ((st.st_mode & 07777) == 0700)
		goto out;
	if (st.st_uid != geteuid()) {
		pr_warn("%s is mode %04o and owned by uid %u, not this process's: left as it is",
			path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		goto out;
	}
	if (fchmod(fd, 0700) < 0) {
		ret = -errno;
		pr_perror("chmod %s to 0700", path);
		goto out;
	}
	pr_info("%s was mode %04o: made 0700 (it holds secrets)", path,
		(unsigned)(st.st_mode & 07777));
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

static int rm_rf_at(int dirfd, const char *name, dev_t dev)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		struct statx stx;

		if (st.st_dev != dev)
			return -EXDEV; /* a mount point: never delete into it */
		/* A bind mount of the same filesystem (a function's directory
		 * staged for runc, function/confine.h) has the same st_dev:
		 * below the top, never delete into one either. */
		if (dirfd != AT_FDCWD && statx(dirfd, name, AT_SYMLINK_NOFOLLOW, 0, &stx) == 0 &&
		    (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
		    (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
			return -EXDEV;
		int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		DIR *d = fdopendir(fd);
		if (!d) {
			close(fd);
			return -ENOMEM;
		}
		struct dirent *de;
		int ret = 0;
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			int r = rm_rf_at(fd, de->d_name, dev);
			if (r < 0 && ret == 0)
				ret = r;
		}
		closedir(d);
		if (ret < 0)
			return ret;
		return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
	}
	return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
}

int array_grow(void **items, size_t *cap, size_t need, size_t size, size_t first)
{
	size_t ncap = *cap ? *cap : MAX(first, 1), bytes;
	void *p;

	if (need <= *cap)
		return 0;
	if (*cap && __builtin_mul_overflow(ncap, 2, &ncap))
		return -ENOMEM;
	while (ncap < need)
		if (__builtin_mul_overflow(ncap, 2, &ncap))
			return -ENOMEM;
	if (__builtin_mul_overflow(ncap, size, &bytes))
		return -ENOMEM;
	p = realloc(*items, bytes);
	if (!p)
		return -ENOMEM;
	*items = p;
	*cap = ncap;
	return 0;
}

int lock_path(const char *path, int how, mode_t mode)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, mode), ret;

	if (fd < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
	while (flock(fd, how) < 0) {
		if (errno == EINTR)
			continue;
		ret = -errno;
		if (ret != -EWOULDBLOCK)
			pr_perror("flock %s", path);
		close(fd);
		return ret;
	}
	return fd;
}

int rm_rf(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	int ret = rm_rf_at(AT_FDCWD, path, st.st_dev);
	if (ret < 0)
		pr_err("cannot remove %s: %s", path, strerror(-ret));
	return ret;
}

int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		int err = -errno;
		pr_perror("open %s", dir);
		return err;
	}
	int ret = fsync(fd) < 0 && errno != EINVAL ? -errno : 0;
	close(fd);
	return ret;
}

int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void *alloc_huge(size_t len)
{
	void *p;

	if (posix_memalign(&p, 2u << 20, len))
		return NULL;
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}

int populate_write(void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = ALIGN_UP((uintptr_t)p + len, 4096);

	return madvise((void *)a, b - a, MADV_POPULATE_WRITE) < 0 ? -errno : 0;
}

int pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t pread_upto(int fd, void *buf, size_t len, off_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	int fd = -1, ret;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0) {
		ret = -errno;
		pr_perror("create %s", tmp);
		return ret;
	}
	ret = write_all(fd, buf, len);
	if (ret == 0 && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret == 0 && rename(tmp, path) < 0)
		ret = -errno;
	if (ret < 0) {
		pr_err("cannot write %s: %s", path, strerror(-ret));
		unlink(tmp);
		return ret;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		return fsync_dir(slash == dir ? "/" : dir);
	}
	return fsync_dir(".");
}

/* Open path to read it whole: *fd and *size, or -EFBIG where it is larger
 * than max (nothing left open), or -errno. */
static int open_sized(const char *path, size_t max, int *fd, size_t *size)
{
	struct stat st;
	int ret;

	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return -errno;
	if (fstat(*fd, &st) < 0) {
		ret = -errno;
		goto fail;
	}
	if ((uint64_t)st.st_size > max) {
		ret = -EFBIG;
		goto fail;
	}
	*size = (size_t)st.st_size;
	return 0;
fail:
	close(*fd);
	*fd = -1;
	return ret;
}

int read_file(const char *path, char **buf, size_t *len, size_t max)
{
	char *data = NULL;
	size_t size = 0;
	ssize_t got;
	int fd, ret;

	*buf = NULL;
	if ((ret = open_sized(path, max, &fd, &size)))
		return ret;
	data = malloc(size + 1);
	if (!data) {
		ret = -ENOMEM;
		goto out;
	}
	got = pread_upto(fd, data, size, 0);
	if (got < 0) {
		ret = (int)got;
		goto out;
	}
	data[got] = '\0';
	*buf = data;
	data = NULL;
	if (len)
		*len = (size_t)got;
out:
	free(data);
	close(fd);
	return ret;
}

int read_file_into(const char *path, void *buf, size_t cap, size_t *len)
{
	size_t size = 0;
	ssize_t got;
	int fd, ret;

	if ((ret = open_sized(path, cap, &fd, &size)))
		return ret;
	got = pread_upto(fd, buf, size, 0);
	close(fd);
	if (got < 0)
		return (int)got;
	*len = (size_t)got;
	return 0;
}

bool id_valid(const char *id)
{
	size_t n = 0;

	if (!id || !((id[0] >= 'a' && id[0] <= 'z') || (id[0] >= '0' && id[0] <= '9')))
		return false;
	for (const char *p = id; *p; p++, n++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return n <= 63;
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int hex_decode(const char *in, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hex_value(in[2 * i]);
		int lo = hi < 0 ? -1 : hex_value(in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return in[2 * n] == '\0' ? 0 : -EINVAL;
}

const char *fmt_bytes(uint64_t bytes, char buf[32])
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, 32, "%.2f %s", v, units[u]);
	return buf;
}

void progress_init(struct progress *p, const char *label, uint64_t total)
{
	p->label = label;
	p->total = total;
	p->start_ns = now_ns();
	p->last_draw_ns = 0;
	p->enabled = isatty(STDERR_FILENO) && !getenv("THAW_NO_PROGRESS");
}

void progress_update(struct progress *p, uint64_t done)
{
	char a[32], b[32];
	uint64_t now;

	if (!p->enabled)
		return;
	now = now_ns();
	if (now - p->last_draw_ns < 100000000ull)
		return;
	p->last_draw_ns = now;
	double secs = (double)(now - p->start_ns) / 1e9;
	double rate = secs > 0 ? (double)done / secs / 1e6 : 0;
	if (p->total)
		fprintf(stderr, "\r\033[K%s  %s / %s  %3.0f%%  %.0f MB/s", p->label,
			fmt_bytes(done, a), fmt_bytes(p->total, b), 100.0 * (double)done / (double)p->total,
			rate);
	else
		fprintf(stderr, "\r\033[K%s  %s  %.0f MB/s", p->label, fmt_bytes(done, a), rate);
	fflush(stderr);
}

void progress_done(struct progress *p)
{
	if (p->enabled && p->last_draw_ns) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
	}
}

void detach_child(const int *keep, size_t n)
{
	int moved[8], base = 3 + (int)n, null_fd;
	sigset_t none;

	if (n > 8)
		_exit(127);
	setsid();
	if (fork() != 0)
		_exit(0);
	/* A daemon's handlers and mask (thawd blocks what it sigwait()s for)
	 * mean nothing here, and SIGCHLD at its default or waitpid sees no child. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
	signal(SIGHUP, SIG_IGN);
	null_fd = open("/dev/null", O_RDWR);
	/* Above 3+n first, then into place: no dup2 overwrites one still needed. */
	for (size_t i = 0; i < n; i++)
		moved[i] = keep[i] >= 0 ? fcntl(keep[i], F_DUPFD, base) : -1;
	if (null_fd >= 0 && null_fd < base)
		null_fd = fcntl(null_fd, F_DUPFD, base);
	for (size_t i = 0; i < n; i++) {
		if (moved[i] >= 0)
			dup2(moved[i], 3 + (int)i);
		else
			close(3 + (int)i);
	}
	for (int i = 0; null_fd >= 0 && i < 3; i++)
		dup2(null_fd, i);
	syscall(SYS_close_range, (unsigned int)base, ~0U, 0);
}

bool errno_own_want(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS;
}

/* See util.h. */
void mountinfo_unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}
