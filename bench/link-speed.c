/* SPDX-License-Identifier: Apache-2.0 */
/* link-speed — the host-to-GPU floor a fill is judged by: pinned host
 * memory copied into device memory the way thawd's fill copies
 * (restore/gpu_prefill.c: 64 MiB pieces, a stream per thread, up to 16
 * threads), on one thread and on 16.
 *
 *   link-speed [GPU] [GIB] [ROUNDS]      (defaults 0, 4, 3)
 *
 * Prints each setting's best round in GB/s (10^9 bytes a second) and
 * "figure:" lines.
 */
#include "common/cuda.h"
#include "common/util.h"
#include "restore/gpu_prefill_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* PIECE and MAX_THREADS: the fill's (restore/gpu_prefill_cuda.h). */

/* The fill's entry points (restore/gpu_prefill_cuda.h), and the one
 * allocation this bench makes for itself. */
static cu_fn_cuMemAlloc_v2 *mem_alloc;
static cu_ctx ctx;

struct slice {
	char *host;
	cu_ptr dev;
	size_t len;
	int err;
};

static void *copy_slice(void *arg)
{
	struct slice *s = arg;
	cu_stream st = NULL;

	if (prefill_cu.ctx_set_current(ctx) || prefill_cu.stream_create(&st, 1)) {
		s->err = 1;
		return NULL;
	}
	for (size_t off = 0; off < s->len; off += PIECE) {
		size_t n = s->len - off < PIECE ? s->len - off : PIECE;

		s->err |= prefill_cu.copy(s->dev + off, s->host + off, n, st) != 0;
	}
	s->err |= prefill_cu.stream_sync(st) != 0;
	return NULL;
}

/* GB/s of one round copying len bytes on n threads. */
static double round_gbs(char *host, cu_ptr dev, size_t len, int n)
{
	struct slice s[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	size_t per = (len / (size_t)n + PIECE - 1) / PIECE * PIECE;
	uint64_t t0 = now_ns();
	int made = 0, err = 0;

	for (size_t off = 0; off < len && made < n; off += per, made++) {
		s[made] = (struct slice){ host + off, dev + off, len - off < per ? len - off : per, 0 };
		if (pthread_create(&th[made], NULL, copy_slice, &s[made]))
			return 0;
	}
	for (int i = 0; i < made; i++) {
		pthread_join(th[i], NULL);
		err |= s[i].err;
	}
	return err ? 0 : len / (ms_since(t0) * 1e6);
}

int main(int argc, char **argv)
{
	int gpu = argc > 1 ? atoi(argv[1]) : 0, rounds = argc > 3 ? atoi(argv[3]) : 3, dev;
	size_t len = (argc > 2 ? strtoull(argv[2], NULL, 10) : 4) << 30;
	double best1 = 0, best16 = 0;
	cu_ptr d = 0;
	char *host;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		printf("usage: link-speed [GPU] [GIB] [ROUNDS]\n");
		return 0;
	}
	if (cuda_init()) {
		fprintf(stderr, "no CUDA driver: %s\n", cuda_unavailable_reason());
		return 77;
	}
	mem_alloc = (cu_fn_cuMemAlloc_v2 *)cuda_sym("cuMemAlloc_v2");
	if (!prefill_driver_load() || !mem_alloc) {
		fprintf(stderr, "the driver lacks an entry point\n");
		return 1;
	}
	host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		    -1, 0);
	if (host == MAP_FAILED || prefill_cu.device_get(&dev, gpu) || prefill_cu.primary_retain(&ctx, dev) ||
	    prefill_cu.ctx_set_current(ctx) || mem_alloc(&d, len)) {
		fprintf(stderr, "cannot set up %zu bytes on GPU %d\n", len, gpu);
		return 1;
	}
	memset(host, 0x5a, len);
	/* Pinned in pieces, as the fill pins the tier's file. */
	for (size_t off = 0; off < len; off += PIECE)
		if (prefill_cu.host_register(host + off, len - off < PIECE ? len - off : PIECE, 0)) {
			fprintf(stderr, "cannot pin\n");
			return 1;
		}
	for (int r = 0; r < rounds; r++) {
		double a = round_gbs(host, d, len, 1), b = round_gbs(host, d, len, MAX_THREADS);

		best1 = a > best1 ? a : best1;
		best16 = b > best16 ? b : best16;
		printf("round %d: 1 thread %.1f GB/s, %d threads %.1f GB/s\n", r + 1, a, MAX_THREADS, b);
	}
	printf("figure: link_speed gpu %d bytes %zu one_thread_gbs %.1f threads16_gbs %.1f\n", gpu,
	       len, best1, best16);
	return best16 > 0 ? 0 : 1;
}
