/* SPDX-License-Identifier: Apache-2.0 */
/* fill-verify — what checking the RAM tier's checksums costs thawd's fill of
 * device memory (restore/gpu_prefill.c; docs/DESIGN.md, "The RAM tier's
 * checksums"), in one run:
 *
 *	bench/fill-verify [--dir DIR] [--mib N] [--rounds N] [--gpu N] [--link-gbps G]
 *
 * Writes into DIR (default /dev/shm) a tier entry's device memory as a
 * GPU start finds it: gpu-1.mem of N MiB (default 4096) of pseudo-random
 * bytes, its layout (allocations of 512 MiB) and the entry's checksums
 * (tier_sums_make, timed: what a materialisation adds).  Then:
 *	- the hash's rate on this host's cores over the file's pages, pinned
 *	  as the fill pins them (where there is a driver), on 1 thread and on
 *	  16: XXH3 alone, no copy;
 *	- the fill itself (gpu_prefill_start .. ready, as a start runs it, the
 *	  pins kept between rounds as thawd's pin cache keeps them), --rounds
 *	  times (default 5) each way, alternating: checking off
 *	  (THAW_GPU_VERIFY=0) and on; its copy's time (the GPU's turn, the
 *	  copy and the checks) and GB/s, p50 and best, and on's cost over off;
 *	- the floor: the bytes over the link's bandwidth, the unchecked fill's
 *	  best rate in this run, and over --link-gbps where given (the H200's
 *	  PCIe 5 x16: ~55).
 * On a host without a GPU, run it on the fake driver (test/cuda_mock.c as
 * libcuda.so.1 on LD_LIBRARY_PATH): its copy is a memcpy on the CPU, so
 * the cost shows what checking adds where the CPU, not a link, is the
 * bottleneck.  Without any driver only the hash's rate is measured.
 */
#define LOG_PREFIX "bench: "
#include "common/cuda.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "restore/tier_sums.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define ALLOC (512ull << 20)
#define HASH_THREADS 16
#define MAX_ROUNDS 100

static char base[PATH_MAX - 128] = "/dev/shm";
static char dir[PATH_MAX];
static uint64_t mib = 4096;
static unsigned rounds = 5;
static int gpu;
static double link_gbps;

static int write_entry(void)
{
	char path[PATH_MAX + 32];
	uint64_t len = mib * MIB, rng = 0x243f6a8885a308d3ull, *buf;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, dir, 1);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	buf = malloc(64 * MIB);
	if (fd < 0 || !buf)
		return -1;
	for (uint64_t off = 0; off < len; off += 64 * MIB) {
		for (size_t i = 0; i < 64 * MIB / 8; i++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			buf[i] = rng;
		}
		if (pwrite(fd, buf, 64 * MIB, (off_t)off) != (ssize_t)(64 * MIB))
			return -1;
	}
	free(buf);
	close(fd);
	snprintf(path, sizeof(path), "%s/" GPUMEM_LAYOUT_FMT, dir, 1);
	f = fopen(path, "we");
	if (!f)
		return -1;
	fprintf(f, "%s\n", GPUMEM_LAYOUT_MAGIC);
	for (uint64_t off = 0; off < len; off += ALLOC)
		fprintf(f, "%llu %llu %d 0 0 0\n", (unsigned long long)off,
			(unsigned long long)(len - off < ALLOC ? len - off : ALLOC), gpu);
	return fclose(f) ? -1 : 0;
}

/* The hash's rate: each thread its share of the mapped file, 64 MiB at a time. */
struct hash_job {
	const uint8_t *p;
	uint64_t len;
	uint64_t sum;
};

static void *hash_share(void *arg)
{
	struct hash_job *j = arg;

	for (uint64_t off = 0; off < j->len; off += TIER_SUM_BLOCK)
		j->sum ^= tier_sum(j->p + off, j->len - off < TIER_SUM_BLOCK ? j->len - off
									   : TIER_SUM_BLOCK);
	return NULL;
}

static double hash_rate(const uint8_t *p, uint64_t len, int threads)
{
	struct hash_job j[HASH_THREADS];
	pthread_t th[HASH_THREADS];
	bool started[HASH_THREADS];
	uint64_t per = len / (uint64_t)threads / TIER_SUM_BLOCK * TIER_SUM_BLOCK, t0 = now_ns();

	for (int i = 0; i < threads; i++) {
		j[i] = (struct hash_job){ p + i * per, i == threads - 1 ? len - i * per : per, 0 };
		started[i] = pthread_create(&th[i], NULL, hash_share, &j[i]) == 0;
		if (!started[i])
			hash_share(&j[i]);
	}
	for (int i = 0; i < threads; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	return (double)len / ((double)(now_ns() - t0) / 1e9) / 1e9;
}

static void hash_rates(bool pin)
{
	char path[PATH_MAX + 32];
	uint64_t len = mib * MIB;
	int (*reg)(void *, size_t, unsigned) = pin ? (int (*)(void *, size_t, unsigned))
							cuda_sym("cuMemHostRegister_v2") : NULL;
	int (*unreg)(void *) = pin ? (int (*)(void *))cuda_sym("cuMemHostUnregister") : NULL;
	bool pinned = false;
	uint8_t *p;
	int fd;

	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, dir, 1);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	p = fd < 0 ? MAP_FAILED : mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		perror("map the file");
		return;
	}
	pinned = reg && unreg && reg(p, len, 0x08 /* READ_ONLY */) == 0;
	hash_rate(p, len, 1); /* warm */
	printf("hash (XXH3-64, 2 MiB blocks) over the %s file's pages: 1 thread %.2f GB/s, "
	       "%d threads %.2f GB/s\n", pinned ? "pinned" : "mapped", hash_rate(p, len, 1),
	       HASH_THREADS, hash_rate(p, len, HASH_THREADS));
	if (pinned)
		unreg(p);
	munmap(p, len);
}

/* One fill, as a start runs it: its copy's time (ms), 0 if it failed. */
static double fill_once(const struct snapshot_meta *meta, bool verify, char *line, size_t len)
{
	struct gpu_placement place = { .n = 1, .held = true };
	struct gpu_prefill *pf;
	uint64_t a = 0, b = 0;
	int ret;

	setenv("THAW_GPU_VERIFY", verify ? "1" : "0", 1);
	place.dev[0].ordinal = gpu;
	place.claim[0] = mib * MIB;
	pf = gpu_prefill_start(meta, dir, dir, &place);
	if (!pf)
		return 0;
	ret = gpu_prefill_ready(pf);
	gpu_prefill_copy_span(pf, &a, &b);
	gpu_prefill_end(pf, line, len);
	return ret || !b ? 0 : (double)(b - a) / 1e6;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static void fills(void)
{
	static const pid_t ns = 1;
	struct snapshot_gpu g = { .uuid = "GPU-bench", .index = -1 };
	struct snapshot_meta meta = { .gpus = &g, .ngpus = 1,
				      .gpu_memory = { .recorded = true, .thaw = true,
						      .ns_pids = &ns, .nns_pids = 1 } };
	double ms[2][MAX_ROUNDS], p50[2], best[2], gbs = (double)(mib * MIB) / 1e9;
	char line[400] = "";
	const char *name[2] = { "unchecked", "checked" };

	/* A first fill pins the file (thawd's pin cache keeps it): not timed. */
	if (!fill_once(&meta, false, line, sizeof(line))) {
		printf("the fill did not run (no driver, or it failed: %s)\n", line);
		return;
	}
	for (unsigned r = 0; r < rounds; r++)
		for (int v = 0; v < 2; v++) {
			ms[v][r] = fill_once(&meta, v, line, sizeof(line));
			if (!ms[v][r]) {
				printf("a fill failed: %s\n", line);
				return;
			}
			if (r == rounds - 1)
				printf("  last %s fill: %s\n", name[v], line);
		}
	printf("\n%-10s %10s %10s %10s %10s\n", "fill", "p50 ms", "best ms", "p50 GB/s",
	       "best GB/s");
	for (int v = 0; v < 2; v++) {
		qsort(ms[v], rounds, sizeof(double), cmp_double);
		p50[v] = ms[v][rounds / 2];
		best[v] = ms[v][0];
		printf("%-10s %10.1f %10.1f %10.2f %10.2f\n", name[v], p50[v], best[v],
		       gbs / (p50[v] / 1e3), gbs / (best[v] / 1e3));
	}
	printf("\nchecking costs the fill %+.1f%% (p50), %+.1f%% (best)\n",
	       (p50[1] / p50[0] - 1) * 100, (best[1] / best[0] - 1) * 100);
	printf("floor: %.2f GB / %.2f GB/s (the unchecked fill's best here) = %.1f ms",
	       gbs, gbs / (best[0] / 1e3), best[0]);
	if (link_gbps > 0)
		printf("; / %.1f GB/s (the link) = %.1f ms", link_gbps, gbs / link_gbps * 1e3);
	printf("\nfigure: fill_verify unchecked_p50_ms %.1f\nfigure: fill_verify checked_p50_ms "
	       "%.1f\nfigure: fill_verify cost_pct %.1f\n", p50[0], p50[1],
	       (p50[1] / p50[0] - 1) * 100);
}

int main(int argc, char **argv)
{
	uint64_t summed = 0, t0;
	bool driver;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--dir") && v)
			snprintf(base, sizeof(base), "%s", argv[++i]);
		else if (!strcmp(argv[i], "--mib") && v)
			mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rounds") && v)
			rounds = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--gpu") && v)
			gpu = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--link-gbps") && v)
			link_gbps = strtod(argv[++i], NULL);
		else {
			fprintf(stderr, "usage: %s [--dir DIR] [--mib N] [--rounds N] [--gpu N] "
				"[--link-gbps G]\n", argv[0]);
			return 2;
		}
	}
	if (!mib || mib % 2 || !rounds || rounds > MAX_ROUNDS) {
		fprintf(stderr, "--mib: an even number; --rounds: 1 to %d\n", MAX_ROUNDS);
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/thaw-fill-verify-%d", base, getpid());
	if (mkdir_p(dir, 0700) || write_entry()) {
		perror(dir);
		rm_rf(dir);
		return 1;
	}
	t0 = now_ns();
	if (tier_sums_make(dir, &summed)) {
		rm_rf(dir);
		return 1;
	}
	printf("fill-verify: %llu MiB of device memory in %s; its checksums made in %.1f ms "
	       "(%.2f GB/s, as a materialisation makes them)\n", (unsigned long long)mib, dir,
	       ms_since(t0), (double)summed / (ms_since(t0) / 1e3) / 1e9);
	driver = cuda_init() == 0;
	hash_rates(driver);
	if (driver)
		fills();
	else
		printf("no CUDA driver: no fill measured\n");
	rm_rf(dir);
	return 0;
}
