/* SPDX-License-Identifier: Apache-2.0 */
/* engine.c — the restore engine against its baselines, in one run.
 *
 *	bench/engine [--dir DIR] [--mib N] [--criu-mib N] [--threads N] [--qd N]
 *	             [--arena MiB] [--write auto|pwrite|mmap] [--runs N] [--out DIR] [--fresh] [--clean]
 *
 * Builds (or reuses, in DIR) a snapshot of N MiB (default 2048) in a store on
 * a disk filesystem: a real CRIU image of a python process (made by
 * bench/make_criu_image.sh; a synthetic image of the same mix where CRIU is
 * missing) plus random data, like GPU weights.  Then materialises it into
 * tmpfs with a warm page cache and a cold one, with
 *	- the io_uring engine (O_DIRECT where the store's filesystem takes it, and buffered),
 *	- the naive engine (one thread: pread, decode, check, pwrite, chunk after chunk),
 *	- the copy floor: a sequential copy of the uncompressed image files into
 *	  tmpfs with 8 MiB buffers,
 *	- a parallel copy with the engine's threads, each pread()ing 8 MiB pieces of
 *	  the uncompressed image straight into the target files' mappings (no
 *	  hashing, no decoding): what this machine allows an engine that writes
 *	  the tier the engine's way, the ceiling its scaling is judged against,
 * and prints GB/s of image (logical) bytes and the ratios as a table.
 * The snapshot stays in DIR for the next run (--fresh rebuilds it, --clean
 * removes it at the end; --runs 0 only makes it); outputs go to /dev/shm (--out)
 * and are removed.
 */
#define LOG_PREFIX "bench: "
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "restore/tier.h"
#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[PATH_MAX - 64] = "build/bench-engine";
static char outbase[PATH_MAX - 64];
static unsigned mib = 2048, criu_mib = 512, runs = 3;
static bool fresh, clean;
static bool drop_ok = true;

static uint64_t rng = 0x853c49e6748fea9bull;

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		memcpy(p + i, &rng, MIN((size_t)8, n - i));
	}
}

static int write_random(const char *path, uint64_t bytes)
{
	size_t bs = 8 << 20;
	uint8_t *buf = malloc(bs);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), ret = 0;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	for (uint64_t done = 0; done < bytes && !ret; done += bs) {
		size_t n = (size_t)MIN((uint64_t)bs, bytes - done);
		fill_random(buf, n);
		ret = write_all(fd, buf, n);
	}
	close(fd);
	free(buf);
	return ret;
}

/* Where CRIU cannot run: the same mix make_criu_image.sh builds in a process
 * (60% random, 25% text records, 15% zero pages). */
static int write_heap_like(const char *path, uint64_t bytes)
{
	size_t bs = 4 << 20;
	uint8_t *buf = malloc(bs);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), ret = 0;
	static const char *w[] = { "alpha", "bravo", "charlie", "delta", "echo", "foxtrot" };

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	for (uint64_t done = 0, i = 0; done < bytes && !ret; done += bs, i++) {
		size_t n = (size_t)MIN((uint64_t)bs, bytes - done);
		unsigned kind = (unsigned)(i % 20);
		if (kind < 12) {
			fill_random(buf, n);
		} else if (kind < 17) {
			size_t k = 0;
			for (unsigned r = 0; k < n; r++) {
				int m = snprintf((char *)buf + k, n - k, "rec %08u %s=%u %s\n", r,
						 w[rng % 6], (unsigned)(rng >> 20) % 1000, w[(rng >> 8) % 6]);
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				k += (size_t)MIN((size_t)m, n - k);
			}
		} else {
			memset(buf, 0, n);
		}
		ret = write_all(fd, buf, n);
	}
	close(fd);
	free(buf);
	return ret;
}

static int make_image(const char *src)
{
	char cmd[3 * PATH_MAX], path[PATH_MAX + 64];
	const char *root = getenv("THAW_ROOT");
	uint64_t rest;
	struct stat st;
	int ret;

	if (mkdir_p(src, 0755))
		return -EIO;
	snprintf(cmd, sizeof(cmd), "%s/bench/make_criu_image.sh '%s/criu' %u >'%s/criu.log' 2>&1",
		 root ? root : ".", dir, criu_mib, dir);
	printf("making a CRIU image of %u MiB (bench/make_criu_image.sh)...\n", criu_mib);
	fflush(stdout);
	snprintf(path, sizeof(path), "%s/criu/dump1", dir);
	if (system(cmd) == 0 && stat(path, &st) == 0) {
		snprintf(cmd, sizeof(cmd), "cp -r '%s/criu/dump1' '%s/criu-dump'", dir, src);
		if (system(cmd) != 0)
			return -EIO;
		snprintf(cmd, sizeof(cmd), "du -sb --apparent-size '%s/criu-dump' | cut -f1 >'%s/criu.bytes'", src, dir);
		if (system(cmd) != 0)
			return -EIO;
	} else {
		printf("no CRIU image (see %s/criu.log): a synthetic heap-like image instead\n", dir);
		snprintf(path, sizeof(path), "%s/heap.img", src);
		ret = write_heap_like(path, (uint64_t)criu_mib << 20);
		if (ret)
			return ret;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/criu'", dir);
	if (system(cmd) != 0)
		pr_warn("cannot remove %s/criu", dir);
	/* The rest in random files of 256 MiB, like GPU weights. */
	snprintf(cmd, sizeof(cmd), "du -sb --apparent-size '%s' | cut -f1", src);
	FILE *p = popen(cmd, "r");
	unsigned long long have = 0;
	if (!p || fscanf(p, "%llu", &have) != 1)
		have = 0;
	if (p)
		pclose(p);
	rest = ((uint64_t)mib << 20) > have ? ((uint64_t)mib << 20) - have : 0;
	for (int i = 0; rest > 0; i++) {
		uint64_t n = MIN(rest, 256ull << 20);
		snprintf(path, sizeof(path), "%s/pages-weights-%d.img", src, i);
		ret = write_random(path, n);
		if (ret)
			return ret;
		rest -= n;
	}
	return 0;
}

/* Drop the page cache: all of it as root, else the files we read. */
static void drop_caches(void)
{
	char store[PATH_MAX], src[PATH_MAX];
	const char *trees[] = { store, src };
	bool all;

	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(src, sizeof(src), "%s/src", dir);
	all = page_cache_drop(3, trees, 2);
	if (!all && drop_ok)
		printf("cannot write /proc/sys/vm/drop_caches: using posix_fadvise(DONTNEED) on every file\n");
	drop_ok = drop_ok && all;
}

/* Read every file under path (warms the page cache); returns bytes. */
static uint64_t read_tree(const char *path, uint8_t *buf, size_t bs)
{
	DIR *d = opendir(path);
	struct dirent *de;
	uint64_t total = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%.2000s/%.255s", path, de->d_name);
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			total += read_tree(p, buf, bs);
		} else if (S_ISREG(st.st_mode)) {
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			ssize_t n;
			while (fd >= 0 && (n = read(fd, buf, bs)) > 0)
				total += (uint64_t)n;
			if (fd >= 0)
				close(fd);
		}
	}
	closedir(d);
	return total;
}

/* Call fn for every regular file under from (recursively) with its twin's
 * path under to, whose directories are made; stops at fn's first error. */
typedef int (*file_fn)(const char *from, const char *to, const struct stat *st, void *arg);

static int walk_files(const char *from, const char *to, file_fn fn, void *arg)
{
	DIR *d = opendir(from);
	struct dirent *de;
	int ret = 0;

	if (!d || mkdir_p(to, 0755)) {
		if (d)
			closedir(d);
		return -EIO;
	}
	while (!ret && (de = readdir(d))) {
		char p[PATH_MAX], q[PATH_MAX];
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%.2000s/%.255s", from, de->d_name);
		snprintf(q, sizeof(q), "%.2000s/%.255s", to, de->d_name);
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode))
			ret = walk_files(p, q, fn, arg);
		else if (S_ISREG(st.st_mode))
			ret = fn(p, q, &st, arg);
	}
	closedir(d);
	return ret;
}

struct copy_job {
	uint8_t *buf;
	size_t bs;
	uint64_t *bytes;
};

static int copy_one(const char *p, const char *q, const struct stat *st, void *arg)
{
	struct copy_job *j = arg;
	int in = open(p, O_RDONLY | O_CLOEXEC);
	int out = open(q, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ssize_t n;
	int ret = 0;

	if (in < 0 || out < 0)
		ret = -EIO;
	while (!ret && (n = read(in, j->buf, j->bs)) > 0) {
		ret = write_all(out, j->buf, (size_t)n);
		*j->bytes += (uint64_t)n;
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return ret;
}

/* The copy floor: each image file read sequentially and written into tmpfs. */
static int copy_tree(const char *from, const char *to, uint8_t *buf, size_t bs, uint64_t *bytes)
{
	struct copy_job j = { buf, bs, bytes };

	return walk_files(from, to, copy_one, &j);
}

#define PCOPY_PIECE (8u << 20)
#define PCOPY_MAX_FILES 256

/* The parallel copy: the files of a flat image directory, cut in pieces. */
struct pcopy {
	size_t nfiles;
	int in[PCOPY_MAX_FILES];
	uint8_t *map[PCOPY_MAX_FILES];
	uint64_t size[PCOPY_MAX_FILES];
	uint64_t first_piece[PCOPY_MAX_FILES + 1]; /* prefix sums of pieces */
	_Atomic uint64_t next;
	atomic_int err;
	uint64_t bytes;
};

static void *pcopy_worker(void *arg)
{
	struct pcopy *pc = arg;

	for (;;) {
		uint64_t k = atomic_fetch_add(&pc->next, 1);
		size_t f = 0;

		if (k >= pc->first_piece[pc->nfiles] || atomic_load(&pc->err))
			return NULL;
		while (k >= pc->first_piece[f + 1])
			f++;
		uint64_t off = (k - pc->first_piece[f]) * PCOPY_PIECE;
		size_t len = (size_t)MIN((uint64_t)PCOPY_PIECE, pc->size[f] - off);
		uint8_t *dst = pc->map[f] + off;

		madvise(dst, ALIGN_UP(len, 4096), MADV_POPULATE_WRITE);
		for (size_t got = 0; got < len;) {
			ssize_t n = pread(pc->in[f], dst + got, len - got, (off_t)(off + got));
			if (n <= 0) {
				atomic_store(&pc->err, n < 0 ? -errno : -EIO);
				return NULL;
			}
			got += (size_t)n;
		}
	}
}

/* Open one regular file of the image, its twin created, sized and mapped. */
static int pcopy_add(const char *p, const char *q, const struct stat *st, void *arg)
{
	struct pcopy *pc = arg;
	size_t i = pc->nfiles;
	int out, ret = 0;

	if (!st->st_size) { /* nothing to copy: only the file */
		out = open(q, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (out >= 0)
			close(out);
		return out < 0 ? -EIO : 0;
	}
	if (i == PCOPY_MAX_FILES)
		return -E2BIG;
	out = open(q, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	pc->in[i] = open(p, O_RDONLY | O_CLOEXEC);
	pc->size[i] = (uint64_t)st->st_size;
	pc->map[i] = NULL;
	if (out >= 0 && pc->in[i] >= 0 && ftruncate(out, st->st_size) == 0) {
		void *m = mmap(NULL, (size_t)st->st_size, PROT_READ | PROT_WRITE, MAP_SHARED, out, 0);
		if (m != MAP_FAILED)
			pc->map[i] = m;
	}
	if (!pc->map[i])
		ret = -EIO;
	if (out >= 0)
		close(out);
	pc->nfiles++;
	pc->first_piece[pc->nfiles] = pc->first_piece[i] + (pc->size[i] + PCOPY_PIECE - 1) / PCOPY_PIECE;
	pc->bytes += pc->size[i];
	return ret;
}

static int pcopy_tree(const char *from, const char *to, unsigned threads, uint64_t *bytes)
{
	struct pcopy *pc = calloc(1, sizeof(*pc));
	pthread_t tids[256];
	unsigned n = 0;
	int ret;

	if (!pc)
		return -ENOMEM;
	ret = walk_files(from, to, pcopy_add, pc);
	*bytes += pc->bytes;
	for (n = 0; !ret && n < MIN(threads, 256u); n++)
		if (pthread_create(&tids[n], NULL, pcopy_worker, pc))
			break;
	for (unsigned i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	if (!ret)
		ret = atomic_load(&pc->err);
	for (size_t i = 0; i < pc->nfiles; i++) {
		if (pc->map[i])
			munmap(pc->map[i], pc->size[i]);
		if (pc->in[i] >= 0)
			close(pc->in[i]);
	}
	free(pc);
	return ret;
}

/* What is measured, into which tmpfs.  The naive engine and the copy floor
 * run into both plain tmpfs (/dev/shm, where the engine's aims were first set) and the same
 * huge-page tmpfs thaw's tier gets, so that a ratio never compares targets
 * that differ. */
enum kind { K_ENGINE, K_NAIVE, K_COPY, K_PCOPY };
enum target { T_TIER, T_SHM };

/* again: timed a second time right after the first's output was removed, so
 * that it writes memory just freed, which a VM with free page reporting has
 * not yet given back to its host (see tier_root.c). */
static const struct method {
	enum kind kind;
	enum target target;
	enum engine_direct direct;
	bool again;
	const char *name;
} methods[] = {
	{ K_ENGINE, T_TIER, ENGINE_DIRECT_AUTO, false, "engine (auto reads)" },
	{ K_ENGINE, T_SHM, ENGINE_DIRECT_AUTO, false, "engine (auto reads)" },
	{ K_ENGINE, T_TIER, ENGINE_DIRECT_AUTO, true, "engine (auto reads), memory just freed" },
	{ K_ENGINE, T_SHM, ENGINE_DIRECT_AUTO, true, "engine (auto reads), memory just freed" },
	{ K_ENGINE, T_SHM, ENGINE_DIRECT_ON, false, "engine, O_DIRECT forced" },
	{ K_NAIVE, T_SHM, 0, false, "naive: 1 thread, pread/decode/pwrite" },
	{ K_NAIVE, T_TIER, 0, false, "naive: 1 thread, pread/decode/pwrite" },
	{ K_COPY, T_SHM, 0, false, "copy floor: sequential copy of the raw image" },
	{ K_COPY, T_TIER, 0, false, "copy floor: sequential copy of the raw image" },
	{ K_PCOPY, T_TIER, 0, false, "parallel copy: engine's threads, pread into mappings" },
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))
enum { M_NAIVE_SHM = 5, M_NAIVE_TIER, M_COPY_SHM, M_COPY_TIER };

struct row {
	char how[96]; /* the engine's reads, as it chose them */
	double secs, cpu; /* of the best round: wall, and CPU (user + system, all threads) */
	bool ok;
};

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* thaw's tier as thawd sets it up (tier_root_prepare), on a directory of
 * this run's: a huge-page tmpfs where the machine allows, else plain. */
static char tierdir[PATH_MAX - 64];
static bool tier_huge;

static void tier_cleanup(void)
{
	if (tier_huge)
		tier_root_unmount(tierdir);
	rm_rf(tierdir);
}

static void setup_tier(uint64_t image_bytes)
{
	enum tier_root_kind kind = TIER_ROOT_PLAIN;

	snprintf(tierdir, sizeof(tierdir), "/dev/shm/thaw-bench-tier-%d", getpid());
	rm_rf(tierdir);
	if (tier_root_prepare(tierdir, 2 * image_bytes, CONFIG_HUGE_ON, &kind))
		printf("no huge-page tmpfs here (%s): the tier rows go into plain /dev/shm too\n",
		       log_last_error());
	tier_huge = kind == TIER_ROOT_MOUNTED;
	atexit(tier_cleanup);
}

static int run_one(const struct method *mt, struct store *s, const struct manifest *m,
		   const struct engine_opts *o, const char *src, const char *out, uint8_t *buf,
		   size_t bs, struct row *r, struct engine_stats *est)
{
	struct engine_opts oo = *o;
	uint64_t bytes = 0;
	int ret;

	switch (mt->kind) {
	case K_ENGINE:
		oo.direct = mt->direct;
		ret = engine_materialize(s, m, out, &oo, est);
		{
			char cached[24] = "";

			if (est->cached_percent >= 0)
				snprintf(cached, sizeof(cached), ", %d%% cached", est->cached_percent);
			snprintf(r->how, sizeof(r->how), "%s%s, %s, %s, setup %.0f ms",
				 est->direct ? "O_DIRECT" : "buffered", cached,
				 est->mapped ? "mmap" : "pwrite", est->shares ? "shares" : "one stream",
				 est->setup_seconds * 1e3);
		}
		return ret;
	case K_NAIVE:
		return engine_materialize_naive(s, m, out, NULL, est);
	case K_PCOPY:
		snprintf(r->how, sizeof(r->how), "%u threads", o->threads);
		return pcopy_tree(src, out, o->threads, &bytes);
	default:
		return copy_tree(src, out, buf, bs, &bytes);
	}
}

static void print_table(const char *cache, const struct row *rows, uint64_t logical)
{
	const char *into[] = { tier_huge ? "huge tmpfs" : "/dev/shm (no huge tmpfs)", "/dev/shm" };

	printf("\n| cache | method | into | s | GB/s | x naive shm | x naive huge | x copy shm "
	       "| x copy huge | cpu-s | GB/cpu-s |\n");
	printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t i = 0; i < NMETHODS; i++) {
		const struct row *r = &rows[i];
		char name[160];

		snprintf(name, sizeof(name), "%s%s%s%s", methods[i].name, r->how[0] ? " [" : "",
			 r->how, r->how[0] ? "]" : "");
		printf("| %s | %s | %s | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
		       cache, name, into[methods[i].target], r->secs,
		       r->ok ? (double)logical / r->secs / 1e9 : 0.0,
		       rows[M_NAIVE_SHM].secs / r->secs, rows[M_NAIVE_TIER].secs / r->secs,
		       rows[M_COPY_SHM].secs / r->secs, rows[M_COPY_TIER].secs / r->secs, r->cpu,
		       r->cpu > 0 ? (double)logical / r->cpu / 1e9 : 0.0);
	}
}

int main(int argc, char **argv)
{
	struct engine_opts o;
	unsigned long ncpu = (unsigned long)sysconf(_SC_NPROCESSORS_ONLN);
	char src[PATH_MAX], sdir[PATH_MAX], idpath[PATH_MAX], out[PATH_MAX];
	char id[CHUNK_ID_LEN] = "", *idbuf = NULL, a[32], b[32], c[32];
	struct store *s = NULL;
	struct manifest *m = NULL;
	struct manifest_totals tot;
	size_t len;

	engine_opts_default(&o);
	snprintf(outbase, sizeof(outbase), "/dev/shm/thaw-bench-engine-%d", getpid());
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--dir") && v)
			snprintf(dir, sizeof(dir), "%s", argv[++i]);
		else if (!strcmp(argv[i], "--out") && v)
			snprintf(outbase, sizeof(outbase), "%s/thaw-bench-engine-%d", argv[++i], getpid());
		else if (!strcmp(argv[i], "--mib") && v)
			mib = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--criu-mib") && v)
			criu_mib = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && v)
			o.threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--qd") && v)
			o.queue_depth = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--arena") && v)
			o.arena_bytes = (uint64_t)atoi(argv[++i]) << 20;
		else if (!strcmp(argv[i], "--write") && v) {
			i++;
			o.write = !strcmp(argv[i], "mmap")     ? ENGINE_WRITE_MMAP
				  : !strcmp(argv[i], "pwrite") ? ENGINE_WRITE_PWRITE
							       : ENGINE_WRITE_AUTO;
		} else if (!strcmp(argv[i], "--runs") && v)
			runs = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fresh"))
			fresh = true;
		else if (!strcmp(argv[i], "--clean"))
			clean = true;
		else {
			fprintf(stderr, "usage: %s [--dir DIR] [--mib N] [--criu-mib N] [--threads N] "
					"[--qd N] [--arena MiB] [--write auto|pwrite|mmap] [--runs N] [--out TMPFS_DIR] [--fresh] [--clean]\n",
				argv[0]);
			return 2;
		}
	}
	if (!mib || criu_mib > mib || !o.threads || !o.queue_depth || !o.arena_bytes) {
		fprintf(stderr, "bad sizes\n");
		return 2;
	}
	snprintf(src, sizeof(src), "%s/src", dir);
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	snprintf(idpath, sizeof(idpath), "%s/id", dir);
	if (fresh)
		rm_rf(dir);
	if (read_file(idpath, &idbuf, &len, 200) == 0 && len >= CHUNK_ID_LEN - 1) {
		snprintf(id, sizeof(id), "%.*s", CHUNK_ID_LEN - 1, idbuf);
		printf("reusing the snapshot in %s (--fresh to rebuild)\n", dir);
	} else {
		struct store_put_stats ps;
		const char *paths[1] = { src };
		uint64_t t0;

		rm_rf(dir);
		if (make_image(src)) {
			fprintf(stderr, "cannot build the image under %s\n", src);
			return 1;
		}
		s = store_open(sdir);
		if (!s)
			return 1;
		t0 = now_ns();
		if (store_put(s, "bench-engine", paths, 1, NULL, false, id, &ps))
			return 1;
		printf("store put: %s in %.1f s\n", fmt_bytes(ps.logical_bytes, a), ms_since(t0) / 1e3);
		write_file_atomic(idpath, id, strlen(id), 0644);
	}
	free(idbuf);
	if (!s)
		s = store_open(sdir);
	if (!s || store_manifest_load(s, id, &m, NULL)) {
		fprintf(stderr, "cannot load %s: %s\n", id, log_last_error());
		return 1;
	}
	manifest_totals(m, &tot);
	char cb[64] = "";
	{
		char p[PATH_MAX + 16], *t = NULL;
		snprintf(p, sizeof(p), "%s/criu.bytes", dir);
		if (read_file(p, &t, &len, 64) == 0)
			snprintf(cb, sizeof(cb), "%s", fmt_bytes(strtoull(t, NULL, 10), c));
		free(t);
	}
	printf("snapshot %s: %s of image in %zu files (%s in holes), %llu chunks, %s stored; "
	       "CRIU part %s\n",
	       id, fmt_bytes(tot.logical_bytes, a), m->nfiles, fmt_bytes(tot.zero_bytes, b),
	       (unsigned long long)tot.chunks, fmt_bytes(tot.stored_bytes, c),
	       cb[0] ? cb : "none (synthetic heap)");
	printf("machine: %lu CPUs online; engine: %u threads, queue depth %u, arena %s\n", ncpu,
	       o.threads, o.queue_depth, fmt_bytes(o.arena_bytes, a));
	if (!runs) { /* --runs 0: the snapshot is made (or kept), for bench/engine-ab-run.sh */
		manifest_free(m);
		store_close(s);
		return 0;
	}

	size_t bs = 8 << 20;
	uint8_t *buf = malloc(bs);
	if (!buf)
		return 1;
	setup_tier(tot.logical_bytes);
	printf("free page reporting (virtio_balloon): %s; THAW_TIER_HUGE=auto %s\n",
	       tier_root_page_reporting() ? "on" : "off",
	       tier_root_page_reporting() ? "leaves the tier plain here (the engine rows into /dev/shm)"
					  : "mounts the huge tmpfs here (the engine rows into the tier)");
	/* Rounds interleave the methods, so that the machine's noise falls on all
	 * of them alike; each method's best round is reported. */
	struct row rows[2][NMETHODS];
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < NMETHODS; i++)
			rows[k][i] = (struct row){ "", 1e30, 0, true };
	for (unsigned round = 0; round < runs; round++) {
		for (int cold = 0; cold < 2; cold++) {
			for (size_t i = 0; i < NMETHODS; i++) {
				const struct method *mt = &methods[i];
				struct row *r = &rows[cold][i];
				struct engine_stats st;
				uint64_t t0;
				int ret;

				if (mt->target == T_TIER)
					snprintf(out, sizeof(out), "%s/out", tierdir);
				else
					snprintf(out, sizeof(out), "%s", outbase);
				rm_rf(out);
				if (cold) {
					drop_caches();
				} else {
					read_tree(sdir, buf, bs);
					read_tree(src, buf, bs);
				}
				if (mt->again) {
					if (run_one(mt, s, m, &o, src, out, buf, bs, r, &st))
						r->ok = false;
					rm_rf(out);
					if (cold)
						drop_caches();
				}
				double c0 = cpu_seconds();
				t0 = now_ns();
				ret = run_one(mt, s, m, &o, src, out, buf, bs, r, &st);
				double secs = (double)(now_ns() - t0) / 1e9, cpu = cpu_seconds() - c0;
				if (secs < r->secs) {
					r->secs = secs;
					r->cpu = cpu;
				}
				r->ok = r->ok && ret == 0;
				printf("  round %u %s %-50s %-9s %6.3f s %6.2f cpu-s %s %s\n", round + 1,
				       cold ? "cold" : "warm", mt->name,
				       mt->target == T_TIER ? "huge" : "/dev/shm", secs, cpu, r->how,
				       ret ? log_last_error() : "");
				fflush(stdout);
				rm_rf(out);
			}
		}
	}

	printf("\nbest of %u rounds; GB = 1e9 bytes of image (logical, holes included); "
	       "x naive/copy: that baseline's time over this row's, into plain /dev/shm (shm) or "
	       "into the same huge-page tmpfs as the tier (huge):\n", runs);
	print_table("warm", rows[0], tot.logical_bytes);
	print_table("cold", rows[1], tot.logical_bytes);
	printf("\ntier: %s (%s); cold cache by %s; %lu CPUs, %u engine threads\n", tierdir,
	       tier_huge ? "tmpfs mounted by tier_root_prepare, huge=within_size" : "plain /dev/shm",
	       drop_ok ? "echo 3 > /proc/sys/vm/drop_caches" : "posix_fadvise(DONTNEED) on every file",
	       ncpu, o.threads);
	free(buf);
	manifest_free(m);
	store_close(s);
	if (clean)
		rm_rf(dir);
	else
		printf("(snapshot kept in %s for the next run; --clean removes it)\n", dir);
	return 0;
}
