/* SPDX-License-Identifier: Apache-2.0 */
/* store.c — store ingest throughput and dedup, against baselines in the same run.
 *
 *	build/bench/store [--random-mib N] [--image DIR | --image-mib N] [--repeat N]
 *	                  [--work DIR]
 *
 * (a) N MiB (default 1024) of pseudo-random, incompressible bytes, written to a
 *     file in the work directory (default /dev/shm, so that neither the input
 *     nor the store waits on a disk): store_put into a fresh store, then the
 *     same put again (every chunk already stored: hashing and lookups only),
 *     then into fresh stores with the input read() instead of mapped, with
 *     packs written through the page cache instead of O_DIRECT, and in the
 *     loose layout (a file per chunk, the
 *     layout before packs) as the baseline.
 * (b) A real CRIU image: DIR/dump1 and DIR/dump2 as bench/make_criu_image.sh
 *     makes them (without --image that script is run into the work directory,
 *     --image-mib MiB, default 300): dump1 into a fresh store, then dump2 into
 *     the same store.  Dedup is the share of dump2's non-zero bytes that were
 *     already stored, dup_bytes / (logical - zero), next to the share of its
 *     non-zero 4 KiB pages found anywhere in dump1 (the ceiling for any chunker
 *     that cuts on page boundaries).
 * Baselines over the same bytes: `zstd -1 -T1 -c FILES > /dev/null` and
 * `sha256sum FILES` (the CLIs, timed from fork to exit), and single-threaded
 * SHA-256 through OpenSSL in this process over the bytes in memory (the
 * floor: the store must hash every byte).  Each row is the best of --repeat
 * runs (default 2), since the machine is shared.  GB/s is 1e9 bytes a second
 * of wall time; GB/cpu-s divides by the CPU time used (user + system, all
 * threads), i.e. throughput per busy core.
 */
#define LOG_PREFIX "bench-store: "
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define MAX_FILES 64

struct files {
	size_t n;
	char *path[MAX_FILES];
	uint64_t bytes;
};

struct row {
	char what[48];
	uint64_t bytes;
	double wall_s; /* best of the repeats */
	double cpu_s;  /* of that best run */
	uint64_t stored;
	bool has_stored;
	double reader_cpu_s, workers_cpu_s; /* a put's, of its best run */
	int rc;
};

static struct row rows[32];
static size_t nrows;
static int repeat = 2;

static double cpu_seconds(const struct rusage *ru)
{
	return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 +
	       (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
}

static double self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return cpu_seconds(&ru);
}

static struct row *row_new(const char *what, uint64_t bytes)
{
	struct row *r = &rows[nrows++];

	snprintf(r->what, sizeof(r->what), "%s", what);
	r->bytes = bytes;
	r->wall_s = -1;
	return r;
}

static void row_take(struct row *r, double wall_s, double cpu_s)
{
	if (r->wall_s < 0 || wall_s < r->wall_s) {
		r->wall_s = wall_s;
		r->cpu_s = cpu_s;
	}
}

/* Run argv (files appended) with stdout to /dev/null; wall and CPU time of the child. */
static int run_timed(const char *const *argv, const struct files *f, double *wall_s, double *cpu_s)
{
	const char *args[MAX_FILES + 16];
	struct rusage ru;
	size_t n = 0;
	int status;
	uint64_t t0;
	pid_t pid;

	while (argv[n]) {
		args[n] = argv[n];
		n++;
	}
	for (size_t i = 0; i < f->n; i++)
		args[n++] = f->path[i];
	args[n] = NULL;

	fflush(NULL);
	t0 = now_ns();
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(127);
		execvp(args[0], (char *const *)args);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) < 0)
		return -errno;
	*wall_s = (double)(now_ns() - t0) / 1e9;
	*cpu_s = cpu_seconds(&ru);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		pr_err("%s exited with status %#x", args[0], status);
		return -EIO;
	}
	return 0;
}

static void bench_cli(const char *what, const char *const *argv, const struct files *f)
{
	struct row *r = row_new(what, f->bytes);

	for (int i = 0; i < repeat; i++) {
		double w, c;

		r->rc = run_timed(argv, f, &w, &c);
		if (r->rc < 0)
			return;
		row_take(r, w, c);
	}
}

/* Single-threaded SHA-256 over the bytes in memory, in 1 MiB updates. */
static void bench_sha256(const char *what, uint8_t *const *bufs, const size_t *lens, size_t n)
{
	struct row *r;
	uint64_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += lens[i];
	r = row_new(what, total);
	for (int k = 0; k < repeat; k++) {
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int mdlen;
		double c0 = self_cpu();
		uint64_t t0 = now_ns();

		if (!ctx) {
			r->rc = -ENOMEM;
			return;
		}
		for (size_t i = 0; i < n; i++) {
			/* A digest per file, as sha256sum does. */
			EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
			for (size_t off = 0; off < lens[i]; off += MiB)
				EVP_DigestUpdate(ctx, bufs[i] + off, MIN(MiB, lens[i] - off));
			EVP_DigestFinal_ex(ctx, md, &mdlen);
		}
		row_take(r, (double)(now_ns() - t0) / 1e9, self_cpu() - c0);
		EVP_MD_CTX_free(ctx);
	}
}

/* One store_put of f into the store at dir, new chunks written in the
 * layout given; fresh: remove the store first. */
/* How a put stores: its layout, packs with O_DIRECT or not, input mapped or read. */
struct put_how {
	enum store_layout layout;
	bool direct, map;
};
static const struct put_how put_default = {STORE_LAYOUT_PACK, true, true};
static const struct put_how put_read = {STORE_LAYOUT_PACK, true, false};
static const struct put_how put_buffered = {STORE_LAYOUT_PACK, false, true};
static const struct put_how put_loose = {STORE_LAYOUT_LOOSE, false, true};

static int put_layout(const char *dir, bool fresh, const char *name, const struct files *f,
		      struct row *r, struct store_put_stats *st, const struct put_how *how)
{
	struct store *s;
	char id[CHUNK_ID_LEN];
	double c0;
	uint64_t t0;
	int ret;

	if (fresh && rm_rf(dir) < 0)
		return -EIO;
	s = store_open(dir);
	if (!s)
		return -EIO;
	store_set_layout(s, how->layout);
	store_set_pack_direct(s, how->direct);
	store_set_input_map(s, how->map);
	c0 = self_cpu();
	t0 = now_ns();
	ret = store_put(s, name, (const char *const *)f->path, f->n, NULL, false, id, st);
	if (ret == 0) {
		double wall = (double)(now_ns() - t0) / 1e9;
		if (r->wall_s < 0 || wall < r->wall_s) {
			r->reader_cpu_s = st->reader_cpu_s;
			r->workers_cpu_s = st->workers_cpu_s;
		}
		row_take(r, wall, self_cpu() - c0);
	} else {
		pr_err("store_put %s: %s", name, log_last_error());
	}
	store_close(s);
	return ret;
}

static int put_once(const char *dir, bool fresh, const char *name, const struct files *f,
		    struct row *r, struct store_put_stats *st)
{
	return put_layout(dir, fresh, name, f, r, st, &put_default);
}

static void set_stored(struct row *r, const struct store_put_stats *st);

/* A row of --repeat puts of f (len bytes) into the store at dir. */
static int put_row(const char *what, uint64_t len, const char *dir, bool fresh,
		   const struct files *f, const struct put_how *how)
{
	struct store_put_stats st = { 0 };
	struct row *r = row_new(what, len);
	int ret = 0;

	for (int i = 0; i < repeat && ret == 0; i++)
		ret = put_layout(dir, fresh, "random", f, r, &st, how);
	r->rc = ret;
	if (ret == 0)
		set_stored(r, &st);
	return ret;
}

static void set_stored(struct row *r, const struct store_put_stats *st)
{
	r->stored = st->new_stored;
	r->has_stored = true;
}

/* The regular files of dir, sorted by name. */
static int list_files(const char *dir, struct files *f)
{
	struct dirent **de = NULL;
	int n = scandir(dir, &de, NULL, alphasort), ret = 0;

	if (n < 0) {
		ret = -errno;
		pr_perror("cannot list %s", dir);
		return ret;
	}
	for (int i = 0; i < n; i++) {
		char p[PATH_MAX];
		struct stat st;

		snprintf(p, sizeof(p), "%s/%s", dir, de[i]->d_name);
		if (ret == 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
			if (f->n == MAX_FILES) {
				pr_err("%s: more than %d files", dir, MAX_FILES);
				ret = -E2BIG;
			} else {
				f->path[f->n++] = strdup(p);
				f->bytes += (uint64_t)st.st_size;
			}
		}
		free(de[i]);
	}
	free(de);
	return ret;
}

static void files_release(struct files *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->path[i]);
	memset(f, 0, sizeof(*f));
}

/* Read every file of f into memory (for the in-process hash). */
static int load_files(const struct files *f, uint8_t **bufs, size_t *lens)
{
	for (size_t i = 0; i < f->n; i++) {
		char *b;
		int ret = read_file(f->path[i], &b, &lens[i], 64ull << 30);

		if (ret < 0)
			return ret;
		bufs[i] = (uint8_t *)b;
	}
	return 0;
}

static void fill_random(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		uint64_t v = x * 2685821657736338717ull;
		memcpy(buf + i, &v, 8);
	}
}

static void print_table(size_t from, size_t to)
{
	printf("    %-30s %12s %8s %7s %7s %9s %10s\n", "", "bytes", "s", "GB/s", "cpu-s",
	       "GB/cpu-s", "written");
	for (size_t i = from; i < to; i++) {
		const struct row *r = &rows[i];

		if (r->rc < 0 || r->wall_s <= 0) {
			printf("    %-30s %12llu   failed: %s\n", r->what,
			       (unsigned long long)r->bytes, strerror(-r->rc));
			continue;
		}
		printf("    %-30s %12llu %8.3f %7.2f %7.2f %9.2f", r->what,
		       (unsigned long long)r->bytes, r->wall_s, r->bytes / r->wall_s / 1e9,
		       r->cpu_s, r->cpu_s > 0 ? r->bytes / r->cpu_s / 1e9 : 0.0);
		if (r->has_stored)
			printf(" %10llu", (unsigned long long)r->stored);
		if (r->reader_cpu_s > 0 || r->workers_cpu_s > 0)
			printf("  reader %.2f, workers %.2f cpu-s", r->reader_cpu_s,
			       r->workers_cpu_s);
		printf("\n");
	}
}

static const char *const zstd_argv[] = { "zstd", "-1", "-T1", "-q", "-c", NULL };
static const char *const sha_argv[] = { "sha256sum", NULL };

static int bench_random(const char *work, uint64_t mib)
{
	char file[PATH_MAX], dir[PATH_MAX];
	struct files f = { 0 };
	size_t len = mib * MiB;
	uint8_t *buf = malloc(len);
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	snprintf(file, sizeof(file), "%s/random.bin", work);
	snprintf(dir, sizeof(dir), "%s/store-random", work);
	fill_random(buf, len, 1);
	ret = write_file_atomic(file, buf, len, 0644);
	if (ret < 0)
		goto out;
	f.n = 1;
	f.path[0] = file;
	f.bytes = len;

	printf("(a) %llu MiB of random bytes\n", (unsigned long long)mib);
	ret = put_row("store_put, new store", len, dir, true, &f, &put_default);
	if (ret == 0)
		ret = put_row("store_put again (all stored)", len, dir, false, &f, &put_default);
	/* The input read() instead of mapped; packs through the page cache
	 * (warm for the first restore); and the layout before packs, a file per
	 * chunk, as the baseline. */
	if (ret == 0)
		ret = put_row("store_put, new store, input read()", len, dir, true, &f,
			      &put_read);
	if (ret == 0)
		ret = put_row("store_put, new store, buffered packs", len, dir, true, &f,
			      &put_buffered);
	if (ret == 0)
		ret = put_row("store_put, new store, loose", len, dir, true, &f, &put_loose);
	bench_sha256("SHA-256 in-process, 1 thread", &buf, &len, 1);
	bench_cli("sha256sum", sha_argv, &f);
	bench_cli("zstd -1 -T1", zstd_argv, &f);
out:
	rm_rf(dir);
	unlink(file);
	free(buf);
	return ret;
}

/* Share of dump2's non-zero pages whose content appears somewhere in dump1. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t page_key(const uint8_t *p, size_t n, bool *zero)
{
	uint8_t h[CHUNK_HASH_LEN];
	uint64_t k;

	*zero = true;
	for (size_t i = 0; i < n; i++)
		if (p[i]) {
			*zero = false;
			break;
		}
	chunk_hash(p, n, h);
	memcpy(&k, h, sizeof(k)); /* 64 bits of SHA-256: no collision among ~1e6 pages */
	return k;
}

static double page_share(uint8_t **b1, size_t *l1, size_t n1, uint8_t **b2, size_t *l2, size_t n2)
{
	size_t cap = 0, n = 0;
	uint64_t *keys, shared = 0, nonzero = 0;
	bool zero;

	for (size_t i = 0; i < n1; i++)
		cap += (l1[i] + 4095) / 4096;
	keys = malloc((cap ? cap : 1) * sizeof(*keys));
	if (!keys)
		return -1;
	for (size_t i = 0; i < n1; i++)
		for (size_t o = 0; o < l1[i]; o += 4096)
			keys[n++] = page_key(b1[i] + o, MIN(4096, l1[i] - o), &zero);
	qsort(keys, n, sizeof(*keys), cmp_u64);
	for (size_t i = 0; i < n2; i++) {
		for (size_t o = 0; o < l2[i]; o += 4096) {
			uint64_t k = page_key(b2[i] + o, MIN(4096, l2[i] - o), &zero);

			if (zero)
				continue;
			nonzero++;
			shared += bsearch(&k, keys, n, sizeof(*keys), cmp_u64) != NULL;
		}
	}
	free(keys);
	return nonzero ? 100.0 * (double)shared / (double)nonzero : 0;
}

static int bench_image(const char *work, const char *image, uint64_t image_mib)
{
	char d1[PATH_MAX], d2[PATH_MAX], dir[PATH_MAX], made[PATH_MAX] = "";
	struct files f1 = { 0 }, f2 = { 0 }, both = { 0 };
	uint8_t *b1[MAX_FILES] = { 0 }, *b2[MAX_FILES] = { 0 }, *ball[2 * MAX_FILES];
	size_t l1[MAX_FILES], l2[MAX_FILES], lall[2 * MAX_FILES];
	struct store_put_stats st1 = { 0 }, st2 = { 0 };
	size_t mark = nrows;
	struct row *r;
	int ret;

	if (!image) {
		char cmd[PATH_MAX * 2];
		const char *root = getenv("THAW_ROOT");

		snprintf(made, sizeof(made), "%s/criu-image", work);
		snprintf(cmd, sizeof(cmd), "bash %s/bench/make_criu_image.sh %s %llu >&2",
			 root ? root : ".", made, (unsigned long long)image_mib);
		fflush(stdout);
		fprintf(stderr, "making the CRIU image: %s\n", cmd);
		if (system(cmd) != 0) {
			pr_err("make_criu_image.sh failed");
			return -EIO;
		}
		image = made;
	}
	snprintf(d1, sizeof(d1), "%s/dump1", image);
	snprintf(d2, sizeof(d2), "%s/dump2", image);
	snprintf(dir, sizeof(dir), "%s/store-image", work);
	ret = list_files(d1, &f1);
	if (ret == 0)
		ret = list_files(d2, &f2);
	if (ret == 0)
		ret = load_files(&f1, b1, l1);
	if (ret == 0)
		ret = load_files(&f2, b2, l2);
	if (ret < 0)
		goto out;

	printf("(b) CRIU image %s: dump1 %.1f MiB in %zu files, dump2 %.1f MiB in %zu files\n",
	       image, f1.bytes / (double)MiB, f1.n, f2.bytes / (double)MiB, f2.n);
	/* dump1 into a fresh store, then dump2 beside it; the pair is repeated. */
	struct row *r1 = row_new("store_put dump1, new store", f1.bytes);
	struct row *r2 = row_new("store_put dump2, after dump1", f2.bytes);
	for (int i = 0; i < repeat && ret == 0; i++) {
		ret = put_once(dir, true, "dump1", &f1, r1, &st1);
		if (ret == 0)
			ret = put_once(dir, false, "dump2", &f2, r2, &st2);
	}
	r1->rc = r2->rc = ret;
	if (ret == 0) {
		set_stored(r1, &st1);
		set_stored(r2, &st2);
	}

	/* The baselines see both dumps, as the two puts did. */
	for (size_t i = 0; i < f1.n; i++) {
		both.path[both.n] = f1.path[i];
		ball[both.n] = b1[i];
		lall[both.n++] = l1[i];
	}
	for (size_t i = 0; i < f2.n; i++) {
		both.path[both.n] = f2.path[i];
		ball[both.n] = b2[i];
		lall[both.n++] = l2[i];
	}
	both.bytes = f1.bytes + f2.bytes;
	r = row_new("both puts", both.bytes);
	if (r1->wall_s > 0 && r2->wall_s > 0) {
		row_take(r, r1->wall_s + r2->wall_s, r1->cpu_s + r2->cpu_s);
		r->stored = st1.new_stored + st2.new_stored;
		r->has_stored = true;
	} else {
		r->rc = -EIO;
	}
	bench_sha256("SHA-256 in-process, 1 thread", ball, lall, both.n);
	bench_cli("sha256sum", sha_argv, &both);
	bench_cli("zstd -1 -T1", zstd_argv, &both);
	print_table(mark, nrows);

	if (ret == 0) {
		uint64_t nz2 = st2.logical_bytes - st2.zero_bytes;

		printf("\n    dump1: %llu bytes, %llu zero (holes), %llu new, %llu stored; "
		       "%llu chunks\n",
		       (unsigned long long)st1.logical_bytes, (unsigned long long)st1.zero_bytes,
		       (unsigned long long)st1.new_bytes, (unsigned long long)st1.new_stored,
		       (unsigned long long)st1.chunks);
		printf("    dump2: %llu bytes, %llu zero (holes), %llu new, %llu already stored; "
		       "%llu chunks\n",
		       (unsigned long long)st2.logical_bytes, (unsigned long long)st2.zero_bytes,
		       (unsigned long long)st2.new_bytes, (unsigned long long)st2.dup_bytes,
		       (unsigned long long)st2.chunks);
		printf("    dedup: %.2f%% of dump2's non-zero bytes were already stored "
		       "(dup_bytes / (logical - zero))\n",
		       nz2 ? 100.0 * (double)st2.dup_bytes / (double)nz2 : 0.0);
		printf("    page ceiling: %.2f%% of dump2's non-zero 4 KiB pages occur in dump1\n",
		       page_share(b1, l1, f1.n, b2, l2, f2.n));
		printf("    compression: dump1's non-zero bytes stored in %.1f%% of their size\n",
		       st1.new_bytes ? 100.0 * (double)st1.new_stored / (double)st1.new_bytes
				     : 0.0);
	}
out:
	for (size_t i = 0; i < f1.n; i++)
		free(b1[i]);
	for (size_t i = 0; i < f2.n; i++)
		free(b2[i]);
	files_release(&f1);
	files_release(&f2);
	rm_rf(dir);
	if (made[0])
		rm_rf(made);
	return ret;
}

/* "model name" of /proc/cpuinfo. */
static const char *cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(buf, len, "unknown CPU");
	while (f && fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !v)
			continue;
		v += 1 + strspn(v + 1, " \t");
		v[strcspn(v, "\n")] = '\0';
		snprintf(buf, len, "%s", v);
		break;
	}
	if (f)
		fclose(f);
	return buf;
}

static char work[1024]; /* short, so that paths built on it always fit */

static void on_signal(int sig)
{
	/* Interrupted (or its reader gone): leave no gigabytes behind in /dev/shm. */
	if (work[0])
		rm_rf(work);
	_exit(128 + sig);
}

static void usage(void)
{
	fprintf(stderr, "usage: store [--random-mib N] [--image DIR | --image-mib N] [--repeat N] "
			"[--work DIR]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "random-mib", required_argument, NULL, 'r' },
		{ "image", required_argument, NULL, 'i' },
		{ "image-mib", required_argument, NULL, 'm' },
		{ "repeat", required_argument, NULL, 'n' },
		{ "work", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t random_mib = 1024, image_mib = 300;
	const char *image = NULL, *work_parent = "/dev/shm";
	struct sigaction sa = { .sa_handler = on_signal };
	char model[128];
	size_t mark;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': random_mib = strtoull(optarg, NULL, 0); break;
		case 'i': image = optarg; break;
		case 'm': image_mib = strtoull(optarg, NULL, 0); break;
		case 'n': repeat = atoi(optarg); break;
		case 'w': work_parent = optarg; break;
		default: usage(); return c == 'h' ? 0 : 2;
		}
	}
	if (repeat < 1 || optind != argc) {
		usage();
		return 2;
	}
	if (snprintf(work, sizeof(work), "%s/thaw-bench-store-XXXXXX", work_parent) >=
	    (int)sizeof(work)) {
		fprintf(stderr, "store: --work path too long\n");
		return 2;
	}
	if (!mkdtemp(work)) {
		perror("mkdtemp");
		work[0] = '\0';
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);

	printf("store benchmark: %ld CPUs online (%s), best of %d runs per row, work in %s\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), cpu_model(model, sizeof(model)), repeat, work_parent);
	mark = nrows;
	ret = random_mib ? bench_random(work, random_mib) : 0;
	if (random_mib)
		print_table(mark, nrows);
	printf("\n");
	if (ret == 0)
		ret = bench_image(work, image, image_mib);
	rm_rf(work);
	return ret == 0 ? 0 : 1;
}
