/* SPDX-License-Identifier: Apache-2.0 */
/* tier_sums.c — see tier_sums.h.
 *
 * dir/.sums, little-endian (thaw is x86-64 only):
 *	"THAWSUM1", u32 block size, u32 files
 *	per file: u32 path length, u64 size, u64 covered, the path (no NUL),
 *	          u64 sum of each block
 *	u64 XXH3-64 of everything before it
 */
#define LOG_PREFIX "tier: "
#include "restore/tier_sums.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole of xxHash in this file, nothing to link (the static build for
 * the GPU machine included). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define SUMS_MAGIC "THAWSUM1"
#define SUMS_MAX_FILES 1000000u
#define SUMS_MAX_BYTES (256u << 20)
#define MAKE_THREADS 16
#define JOB_BLOCKS 32 /* a job: 64 MiB of a file */

uint64_t tier_sum(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

/* The sum of n zero bytes (n <= TIER_SUM_BLOCK): a block in a hole. */
static const uint8_t zeros[TIER_SUM_BLOCK];
static uint64_t zero_block_sum;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void zero_init(void)
{
	zero_block_sum = tier_sum(zeros, sizeof(zeros));
}

static uint64_t zero_sum(uint64_t n)
{
	pthread_once(&zero_once, zero_init);
	return n == TIER_SUM_BLOCK ? zero_block_sum : tier_sum(zeros, n);
}

static uint64_t block_len(const struct tier_sum_file *f, uint64_t k)
{
	uint64_t a = k * TIER_SUM_BLOCK;

	return f->covered - a < TIER_SUM_BLOCK ? f->covered - a : TIER_SUM_BLOCK;
}

static void files_free(struct tier_sum_file *f, size_t n)
{
	for (size_t i = 0; f && i < n; i++) {
		free(f[i].path);
		free(f[i].sum);
	}
	free(f);
}

void tier_sums_free(struct tier_sums *s)
{
	if (!s)
		return;
	files_free(s->f, s->n);
	free(s);
}

/* Work over files' blocks, JOB_BLOCKS of one file at a time, taken in turn
 * by the threads of tier_sums_make and tier_sums_check_files. */
struct jobs {
	pthread_mutex_t mu;
	const struct tier_sum_file *const *f;
	size_t n, file;
	uint64_t block;
	bool stop;
};

/* The next job: false when none is left, or the work stopped. */
static bool next_job(struct jobs *j, size_t *file, uint64_t *first, uint64_t *last)
{
	bool got = false;

	pthread_mutex_lock(&j->mu);
	while (!j->stop && j->file < j->n && j->block >= j->f[j->file]->nblocks) {
		j->file++;
		j->block = 0;
	}
	if (!j->stop && j->file < j->n) {
		*file = j->file;
		*first = j->block;
		*last = *first + JOB_BLOCKS;
		if (*last > j->f[*file]->nblocks)
			*last = j->f[*file]->nblocks;
		j->block = *last;
		got = true;
	}
	pthread_mutex_unlock(&j->mu);
	return got;
}

/* fn(arg) on up to MAKE_THREADS threads, one per CPU and per JOB_BLOCKS
 * of the bytes, here where none starts; returns once all have ended. */
static void run_threads(void *(*fn)(void *), void *arg, uint64_t bytes)
{
	pthread_t th[MAKE_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t jobs = bytes / (JOB_BLOCKS * TIER_SUM_BLOCK) + 1;
	int n = cpus < 1 ? 1 : cpus > MAKE_THREADS ? MAKE_THREADS : (int)cpus, started = 0;

	if ((uint64_t)n > jobs)
		n = (int)jobs;
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[started], NULL, fn, arg) == 0)
			started++;
	if (!started)
		fn(arg);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* --- making them ------------------------------------------------------- */

/* A file being summed: open, and its inode (a hard link is summed once). */
struct make_file {
	int fd;
	dev_t dev;
	ino_t ino;
};

struct make {
	const char *dir;
	struct tier_sum_file *f;
	struct make_file *mf;
	size_t n, cap, mcap;
	struct jobs jobs;
	atomic_int err;
};

/* Where the file's data ends, rounded up to a block, at most its size. */
static int data_end(int fd, uint64_t size, uint64_t *covered)
{
	off_t pos = 0, end = 0;

	for (;;) {
		off_t d = lseek(fd, pos, SEEK_DATA), h;

		if (d < 0) {
			if (errno == ENXIO)
				break;
			return -errno;
		}
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -errno;
		end = h;
		pos = h;
	}
	*covered = ((uint64_t)end + TIER_SUM_BLOCK - 1) / TIER_SUM_BLOCK * TIER_SUM_BLOCK;
	if (*covered > size)
		*covered = size;
	return 0;
}

static int add_file(struct make *mk, const char *rel, const struct stat *st)
{
	char path[PATH_MAX];
	struct tier_sum_file *f;
	int fd, ret;

	for (size_t i = 0; i < mk->n; i++)
		if (mk->mf[i].dev == st->st_dev && mk->mf[i].ino == st->st_ino)
			return 0;
	if (ARRAY_GROW(mk->f, mk->cap, mk->n + 1, 64) ||
	    ARRAY_GROW(mk->mf, mk->mcap, mk->n + 1, 64))
		return -ENOMEM;
	if (snprintf(path, sizeof(path), "%s/%s", mk->dir, rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
	f = &mk->f[mk->n];
	memset(f, 0, sizeof(*f));
	f->size = (uint64_t)st->st_size;
	ret = data_end(fd, f->size, &f->covered);
	f->nblocks = (f->covered + TIER_SUM_BLOCK - 1) / TIER_SUM_BLOCK;
	f->path = strdup(rel);
	f->sum = calloc(f->nblocks ? f->nblocks : 1, sizeof(*f->sum));
	if (!ret && (!f->path || !f->sum))
		ret = -ENOMEM;
	if (ret) {
		free(f->path);
		free(f->sum);
		close(fd);
		if (ret != -ENOMEM)
			pr_err("%s: cannot find its data: %s", path, strerror(-ret));
		return ret;
	}
	mk->mf[mk->n] = (struct make_file){ fd, st->st_dev, st->st_ino };
	mk->n++;
	return 0;
}

/* The regular files under dir/rel (rel "" for the top), into mk: a
 * directory's files before its subdirectories, so that a file linked at
 * the top and into the mapped image (restore/mapped.c links the image's
 * files there) is summed under its name at the top, the one the fill
 * looks up (gpu-<pid>.mem), whatever order readdir gives. */
static int walk(struct make *mk, const char *rel)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int ret = 0;
	bool dirs = false; /* the second pass */

	if (snprintf(path, sizeof(path), "%s%s%s", mk->dir, *rel ? "/" : "", rel) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	d = opendir(path);
	if (!d) {
		ret = -errno;
		pr_perror("open %s", path);
		return ret;
	}
again:
	while (!ret && (de = readdir(d))) {
		char sub[PATH_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		/* At the top, the dot files say how the entry was built; of
		 * them, only the mapped image holds the snapshot's bytes. */
		if (!*rel && de->d_name[0] == '.' && strcmp(de->d_name, ".mapped"))
			continue;
		if (snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
		    (int)sizeof(sub) - 256) {
			ret = -ENAMETOOLONG;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = -errno;
			pr_perror("stat %s/%s", path, de->d_name);
		} else if (S_ISDIR(st.st_mode)) {
			if (dirs)
				ret = walk(mk, sub);
		} else if (S_ISREG(st.st_mode)) {
			if (!dirs)
				ret = add_file(mk, sub, &st);
		}
	}
	if (!ret && !dirs) {
		dirs = true;
		rewinddir(d);
		goto again;
	}
	closedir(d);
	return ret;
}

/* Read block k of f (descriptor fd, bl bytes) into buf and sum it; a block
 * with no data is a hole, summed without reading.  0 or -errno. */
static int sum_block(int fd, const struct tier_sum_file *f, uint64_t k, uint8_t *buf,
		     uint64_t *sum, uint64_t *read_bytes)
{
	uint64_t a = k * TIER_SUM_BLOCK, bl = block_len(f, k), got = 0;
	off_t d = lseek(fd, (off_t)a, SEEK_DATA);

	if ((d < 0 && errno == ENXIO) || (d >= 0 && (uint64_t)d >= a + bl)) {
		*sum = zero_sum(bl);
		return 0;
	}
	while (got < bl) {
		ssize_t r = pread(fd, buf + got, bl - got, (off_t)(a + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ENODATA; /* shorter than it was */
		got += (uint64_t)r;
	}
	*sum = tier_sum(buf, bl);
	if (read_bytes)
		*read_bytes += bl;
	return 0;
}

static void *make_thread(void *arg)
{
	struct make *mk = arg;
	uint8_t *buf = malloc(TIER_SUM_BLOCK);
	uint64_t first, last;
	size_t i;

	if (!buf) {
		atomic_store(&mk->err, -ENOMEM);
		return NULL;
	}
	while (!atomic_load(&mk->err) && next_job(&mk->jobs, &i, &first, &last))
		for (uint64_t k = first; k < last; k++) {
			int ret = sum_block(mk->mf[i].fd, &mk->f[i], k, buf, &mk->f[i].sum[k], NULL);

			if (ret) {
				pr_err("%s/%s: reading block %llu: %s", mk->dir, mk->f[i].path,
				       (unsigned long long)k, strerror(-ret));
				atomic_store(&mk->err, ret);
				break;
			}
		}
	free(buf);
	return NULL;
}

/* The .sums file of mk's files, whole, into *out. */
static int encode(const struct make *mk, char **out, size_t *len)
{
	size_t n = 8 + 4 + 4 + 8, off = 0;
	char *b;

	for (size_t i = 0; i < mk->n; i++)
		n += 4 + 8 + 8 + strlen(mk->f[i].path) + mk->f[i].nblocks * 8;
	b = malloc(n);
	if (!b)
		return -ENOMEM;
#define PUT(p, sz) (memcpy(b + off, (p), (sz)), off += (sz))
	{
		uint32_t block = (uint32_t)TIER_SUM_BLOCK, files = (uint32_t)mk->n;

		PUT(SUMS_MAGIC, 8);
		PUT(&block, 4);
		PUT(&files, 4);
	}
	for (size_t i = 0; i < mk->n; i++) {
		const struct tier_sum_file *f = &mk->f[i];
		uint32_t pl = (uint32_t)strlen(f->path);

		PUT(&pl, 4);
		PUT(&f->size, 8);
		PUT(&f->covered, 8);
		PUT(f->path, pl);
		PUT(f->sum, f->nblocks * 8);
	}
	{
		uint64_t h = tier_sum(b, off);

		PUT(&h, 8);
	}
#undef PUT
	*out = b;
	*len = off;
	return 0;
}

int tier_sums_make(const char *dir, uint64_t *bytes)
{
	struct make mk = { .dir = dir, .jobs = { .mu = PTHREAD_MUTEX_INITIALIZER } };
	const struct tier_sum_file **fp = NULL;
	char path[PATH_MAX], *buf = NULL;
	uint64_t total = 0, t0 = now_ns();
	size_t len = 0;
	int ret;

	ret = walk(&mk, "");
	fp = ret ? NULL : calloc(mk.n + 1, sizeof(*fp));
	if (!ret && !fp)
		ret = -ENOMEM;
	for (size_t i = 0; !ret && i < mk.n; i++) {
		fp[i] = &mk.f[i];
		total += mk.f[i].covered;
	}
	mk.jobs.f = fp;
	mk.jobs.n = mk.n;
	if (!ret)
		run_threads(make_thread, &mk, total);
	if (!ret)
		ret = atomic_load(&mk.err);
	if (!ret)
		ret = encode(&mk, &buf, &len);
	if (!ret && snprintf(path, sizeof(path), "%s/" TIER_SUMS, dir) >= (int)sizeof(path))
		ret = -ENAMETOOLONG;
	if (!ret)
		ret = write_file_atomic(path, buf, len, 0600);
	if (!ret) {
		pr_debug("%s: %zu files summed, %llu bytes, in %.1f ms", dir, mk.n,
			 (unsigned long long)total, ms_since(t0));
		if (bytes)
			*bytes = total;
	} else {
		pr_err("%s: cannot make its checksums: %s", dir, strerror(-ret));
	}
	for (size_t i = 0; i < mk.n; i++)
		close(mk.mf[i].fd);
	free(buf);
	free(fp);
	free(mk.mf);
	files_free(mk.f, mk.n);
	pthread_mutex_destroy(&mk.jobs.mu);
	return ret;
}

/* --- reading them ------------------------------------------------------ */

/* Take sz bytes at *off of b (len bytes) into p: false past the end. */
static bool take(const char *b, size_t len, size_t *off, void *p, size_t sz)
{
	if (sz > len - *off)
		return false;
	memcpy(p, b + *off, sz);
	*off += sz;
	return true;
}

static bool path_ok(const char *p)
{
	return *p && p[0] != '/' && !strstr(p, "..");
}

/* The files of a .sums file that passed its own check. */
static int decode(const char *b, size_t len, struct tier_sums *s)
{
	size_t off = 8;
	uint32_t block, files;

	if (!take(b, len, &off, &block, 4) || !take(b, len, &off, &files, 4) ||
	    block != TIER_SUM_BLOCK || files > SUMS_MAX_FILES)
		return -EUCLEAN;
	s->f = calloc(files ? files : 1, sizeof(*s->f));
	if (!s->f)
		return -ENOMEM;
	for (uint32_t i = 0; i < files; i++) {
		struct tier_sum_file *f = &s->f[s->n];
		uint32_t pl;

		if (!take(b, len, &off, &pl, 4) || !take(b, len, &off, &f->size, 8) ||
		    !take(b, len, &off, &f->covered, 8) || pl == 0 || pl >= PATH_MAX ||
		    f->covered > f->size || pl > len - off)
			return -EUCLEAN;
		f->path = strndup(b + off, pl);
		if (!f->path)
			return -ENOMEM;
		s->n++;
		off += pl;
		f->nblocks = (f->covered + TIER_SUM_BLOCK - 1) / TIER_SUM_BLOCK;
		if (!path_ok(f->path) || strlen(f->path) != pl || f->nblocks > (len - off) / 8)
			return -EUCLEAN;
		f->sum = malloc(f->nblocks ? f->nblocks * 8 : 1);
		if (!f->sum)
			return -ENOMEM;
		take(b, len, &off, f->sum, f->nblocks * 8);
		s->covered += f->covered;
	}
	return off == len - 8 ? 0 : -EUCLEAN;
}

int tier_sums_load(const char *dir, struct tier_sums **out)
{
	char path[PATH_MAX], *b = NULL;
	struct tier_sums *s = NULL;
	uint64_t h;
	size_t len = 0;
	int ret;

	*out = NULL;
	if (snprintf(path, sizeof(path), "%s/" TIER_SUMS, dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	ret = read_file(path, &b, &len, SUMS_MAX_BYTES);
	if (ret)
		return ret;
	ret = -EUCLEAN;
	if (len < 8 + 8 + 8 || memcmp(b, SUMS_MAGIC, 8))
		goto out;
	memcpy(&h, b + len - 8, 8);
	if (h != tier_sum(b, len - 8))
		goto out;
	s = calloc(1, sizeof(*s));
	if (!s) {
		ret = -ENOMEM;
		goto out;
	}
	ret = decode(b, len, s);
	if (!ret) {
		*out = s;
		s = NULL;
	}
out:
	if (ret == -EUCLEAN)
		pr_err("%s: damaged (its own checksum, or what it says, does not hold)", path);
	tier_sums_free(s);
	free(b);
	return ret;
}

const struct tier_sum_file *tier_sums_find(const struct tier_sums *s, const char *path)
{
	for (size_t i = 0; s && i < s->n; i++)
		if (!strcmp(s->f[i].path, path))
			return &s->f[i];
	return NULL;
}

/* --- checking ---------------------------------------------------------- */

/* The offset of the first non-zero byte of [p, p + n), or n. */
static uint64_t first_nonzero(const uint8_t *p, uint64_t n)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		if (w)
			break;
	}
	for (; i < n; i++)
		if (p[i])
			return i;
	return n;
}

int tier_sums_check_mapped(const struct tier_sum_file *f, const void *base, uint64_t map_len,
			   uint64_t off, uint64_t len, uint64_t *bad)
{
	const uint8_t *p = base;
	uint64_t end = off + len, k;

	if (map_len != f->size || end > map_len) {
		*bad = map_len < f->size ? map_len : f->size;
		return -EUCLEAN;
	}
	for (k = off / TIER_SUM_BLOCK; k < f->nblocks && k * TIER_SUM_BLOCK < end; k++)
		if (tier_sum(p + k * TIER_SUM_BLOCK, block_len(f, k)) != f->sum[k]) {
			*bad = k * TIER_SUM_BLOCK;
			return -EUCLEAN;
		}
	if (end > f->covered) {
		uint64_t a = off > f->covered ? off : f->covered;
		uint64_t z = first_nonzero(p + a, end - a);

		if (z < end - a) {
			*bad = a + z;
			return -EUCLEAN;
		}
	}
	return 0;
}

/* Past covered the file reads zero: a hole, or pages a reader's fault put
 * there (a private mapping's read fault on a tmpfs hole allocates a page
 * of zeros). */
static int check_tail(int fd, const struct tier_sum_file *f, uint8_t *buf, tier_sums_pace_fn pace,
		      void *arg, uint64_t *bad, uint64_t *read_bytes)
{
	uint64_t pos = f->covered;

	while (pos < f->size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;

		if (d < 0)
			return errno == ENXIO ? 0 : -errno;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -errno;
		for (pos = (uint64_t)d; pos < (uint64_t)h;) {
			uint64_t n = (uint64_t)h - pos < TIER_SUM_BLOCK ? (uint64_t)h - pos
									: TIER_SUM_BLOCK, z;
			ssize_t r;
			int ret;

			if (pace && (ret = pace(n, arg)))
				return ret;
			r = pread(fd, buf, n, (off_t)pos);
			if (r <= 0)
				return r < 0 ? -errno : -EUCLEAN;
			if (read_bytes)
				*read_bytes += (uint64_t)r;
			z = first_nonzero(buf, (uint64_t)r);
			if (z < (uint64_t)r) {
				*bad = pos + z;
				return -EUCLEAN;
			}
			pos += (uint64_t)r;
		}
	}
	return 0;
}

int tier_sums_check_file(const char *dir, const struct tier_sum_file *f, tier_sums_pace_fn pace,
			 void *arg, uint64_t *bad, uint64_t *read_bytes)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	struct stat st;
	int fd, ret = 0;

	*bad = 0;
	if (snprintf(path, sizeof(path), "%s/%s", dir, f->path) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size) {
		*bad = UINT64_MAX;
		ret = -EUCLEAN;
		goto out;
	}
	buf = malloc(TIER_SUM_BLOCK);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t k = 0; !ret && k < f->nblocks; k++) {
		uint64_t sum = 0;

		if (pace && (ret = pace(block_len(f, k), arg)))
			break;
		ret = sum_block(fd, f, k, buf, &sum, read_bytes);
		if (ret == -ENODATA)
			ret = -EUCLEAN;
		if (!ret && sum != f->sum[k]) {
			*bad = k * TIER_SUM_BLOCK;
			ret = -EUCLEAN;
		}
	}
	if (!ret)
		ret = check_tail(fd, f, buf, pace, arg, bad, read_bytes);
out:
	free(buf);
	close(fd);
	return ret;
}

/* tier_sums_check_files' work: the first failure is kept. */
struct check {
	struct jobs jobs;
	const int *fds;
	int err;	/* under jobs.mu */
	size_t bad_file;
	uint64_t bad;
};

static void check_failed(struct check *c, size_t i, int err, uint64_t bad)
{
	pthread_mutex_lock(&c->jobs.mu);
	if (!c->err) {
		c->err = err;
		c->bad_file = i;
		c->bad = bad;
	}
	c->jobs.stop = true;
	pthread_mutex_unlock(&c->jobs.mu);
}

static void *check_thread(void *arg)
{
	struct check *c = arg;
	uint8_t *buf = malloc(TIER_SUM_BLOCK);
	uint64_t first, last;
	size_t i;

	if (!buf) {
		check_failed(c, 0, -ENOMEM, 0);
		return NULL;
	}
	while (next_job(&c->jobs, &i, &first, &last))
		for (uint64_t k = first; k < last; k++) {
			uint64_t sum = 0;
			int ret = sum_block(c->fds[i], c->jobs.f[i], k, buf, &sum, NULL);

			if (ret || sum != c->jobs.f[i]->sum[k]) {
				check_failed(c, i, ret && ret != -ENODATA ? ret : -EUCLEAN,
					     k * TIER_SUM_BLOCK);
				break;
			}
		}
	free(buf);
	return NULL;
}

int tier_sums_check_files(const char *dir, const struct tier_sum_file *const *f, size_t n,
			  size_t *bad_file, uint64_t *bad)
{
	struct check c = { .jobs = { .mu = PTHREAD_MUTEX_INITIALIZER, .f = f, .n = n } };
	int *fds = calloc(n + 1, sizeof(*fds));
	uint8_t *buf = NULL;
	uint64_t total = 0;
	size_t opened = 0;

	if (!fds)
		return -ENOMEM;
	for (; !c.err && opened < n; opened++) {
		char path[PATH_MAX];
		struct stat st;

		total += f[opened]->covered;
		snprintf(path, sizeof(path), "%s/%s", dir, f[opened]->path);
		fds[opened] = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fds[opened] < 0)
			check_failed(&c, opened, -errno, 0);
		else if (fstat(fds[opened], &st) < 0 || (uint64_t)st.st_size != f[opened]->size)
			check_failed(&c, opened, -EUCLEAN, UINT64_MAX);
		if (fds[opened] < 0)
			break;
	}
	c.fds = fds;
	if (!c.err)
		run_threads(check_thread, &c, total);
	buf = c.err ? NULL : malloc(TIER_SUM_BLOCK);
	if (!c.err && !buf)
		c.err = -ENOMEM;
	for (size_t i = 0; !c.err && i < n; i++) {
		uint64_t b = 0;
		int ret = check_tail(fds[i], f[i], buf, NULL, NULL, &b, NULL);

		if (ret)
			check_failed(&c, i, ret, b);
	}
	for (size_t i = 0; i < opened; i++)
		close(fds[i]);
	free(buf);
	free(fds);
	pthread_mutex_destroy(&c.jobs.mu);
	*bad_file = c.bad_file;
	*bad = c.bad;
	return c.err;
}
