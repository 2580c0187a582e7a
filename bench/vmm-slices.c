/* SPDX-License-Identifier: Apache-2.0 */
/* vmm-slices — can a fill hand a process its memory as slices of fewer,
 * larger allocations, and what would that save?  A fill now makes one
 * exportable allocation for each of the process's (the GPU example: 115),
 * three driver calls each (create, export, map), and the library imports
 * and maps each: beside a burst of the driver's restores every one of those
 * calls waits its turn in the driver.
 *
 *   vmm-slices [GPU] [N] [MIB] [THREADS]     (defaults 0, 115, 20, 8)
 *
 * First whether the driver maps a slice of an allocation at an offset
 * (cuMemMap's offset), of an imported one too, byte for byte, and keeps a
 * slice's memory once the handles are released and other slices unmapped.
 * Then the time to make N allocations of MIB each as a fill does (created,
 * exported, mapped into one range, access set once) three ways: one
 * allocation each; runs of up to 256 MiB, each mapped whole; one allocation
 * for all.  And the importer's side: N imports and N maps, against one
 * import per run and N maps at offsets.  Each from one thread, then from
 * THREADS threads at once (the fills of a burst); best of 3 rounds.
 * Prints "figure:" lines.
 */
#include "common/cuda.h"
#include "common/util.h"
#include "restore/gpu_prefill_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define GRAN (2 * MIB)
#define MAX_FILLS 64

/* The fill's own entry points are prefill_cu's (restore/gpu_prefill_cuda.h);
 * these only an importer and this probe's checks call. */
static struct {
	cu_fn_cuMemImportFromShareableHandle *import_fd;
	cu_fn_cuMemcpyHtoD_v2 *htod;
	cu_fn_cuMemcpyDtoH_v2 *dtoh;
} more;
static int ordinal;

static cu_mem_prop prop(void)
{
	return (cu_mem_prop){ .type = CU_ALLOC_PINNED, .requestedHandleTypes = CU_HANDLE_POSIX_FD,
			      .location = { CU_LOC_DEVICE, ordinal } };
}

static int access_rw(cu_ptr va, size_t len)
{
	cu_access_desc acc = { .location = { CU_LOC_DEVICE, ordinal }, .flags = CU_ACCESS_RW };

	return prefill_cu.set_access(va, len, &acc, 1);
}

/* Does the driver map slices of an (imported) allocation at offsets?  32
 * slices of 2 MiB of one 64 MiB allocation, each at a place of its own;
 * then the handles released and slice 0 unmapped, the rest read again.
 * 0 yes, 2 a slice refused (driver 580.159.04 refuses even one at offset 0:
 * CUDA_ERROR_NOT_SUPPORTED), 1 anything else wrong. */
static int check_offsets(void)
{
	const size_t len = 64 * MIB, nslice = len / GRAN;
	cu_mem_prop p = prop();
	cu_handle h = 0, hi = 0;
	cu_ptr a = 0, b = 0;
	uint32_t *buf = malloc(len), *back = malloc(len);
	int fd = -1, r, bad = 0;

	if (!buf || !back)
		return 1;
	for (size_t i = 0; i < len / 4; i++)
		buf[i] = (uint32_t)(i * 4 / GRAN) + 0x1000;
	if ((r = prefill_cu.create(&h, len, &p, 0)) || (r = prefill_cu.export_fd(&fd, h, CU_HANDLE_POSIX_FD, 0)) ||
	    (r = more.import_fd(&hi, (void *)(intptr_t)fd, CU_HANDLE_POSIX_FD)) ||
	    (r = prefill_cu.reserve(&a, len, GRAN, 0, 0)) || (r = prefill_cu.map(a, len, 0, h, 0)) ||
	    (r = access_rw(a, len)) || (r = more.htod(a, buf, len)) ||
	    (r = prefill_cu.reserve(&b, len, GRAN, 0, 0))) {
		printf("figure: offsets: setup failed (CUresult %d)\n", r);
		return 1;
	}
	for (size_t i = 0; i < nslice; i++) {
		size_t off = (i * 7 % nslice) * GRAN;

		if ((r = prefill_cu.map(b + i * GRAN, GRAN, off, hi, 0))) {
			printf("figure: offsets: a slice at offset %zu MiB refused (CUresult %d)\n",
			       off / MIB, r);
			return 2;
		}
	}
	if ((r = access_rw(b, len)) || (r = more.dtoh(back, b, len))) {
		printf("figure: offsets: reading the slices failed (CUresult %d)\n", r);
		return 1;
	}
	for (size_t i = 0; i < nslice; i++)
		bad += back[i * GRAN / 4] != (uint32_t)(i * 7 % nslice) + 0x1000 ||
		       back[(i + 1) * GRAN / 4 - 1] != (uint32_t)(i * 7 % nslice) + 0x1000;
	/* Released and partly unmapped: what is still mapped keeps its bytes. */
	prefill_cu.release(hi);
	prefill_cu.release(h);
	prefill_cu.unmap(a, len);
	close(fd);
	prefill_cu.unmap(b, GRAN);
	memset(back, 0, len);
	if ((r = more.dtoh(back + GRAN / 4, b + GRAN, len - GRAN))) {
		printf("figure: offsets: reading after release failed (CUresult %d)\n", r);
		return 1;
	}
	for (size_t i = 1; i < nslice; i++)
		bad += back[i * GRAN / 4] != (uint32_t)(i * 7 % nslice) + 0x1000;
	prefill_cu.unmap(b + GRAN, len - GRAN);
	prefill_cu.addr_free(a, len);
	prefill_cu.addr_free(b, len);
	printf("figure: offsets: %zu slices of an imported allocation mapped at offsets: %s\n",
	       nslice, bad ? "WRONG BYTES" : "byte for byte, also after release");
	free(buf);
	free(back);
	return bad != 0;
}

/* One fill's allocations: n of size each, made as handles of up to cap
 * bytes (cap 0: one handle each). */
struct fill {
	size_t n, size, cap;
	cu_ptr va;
	size_t nh;
	cu_handle h[512];
	int fd[512];
	size_t hlen[512];
	double make_ms, import_ms;
	int err;
	pthread_barrier_t *go;
};

static size_t per_handle(const struct fill *f)
{
	size_t k = f->cap ? f->cap / f->size : 1;

	return k ? k : 1;
}

/* Made as a fill makes them: created, exported, mapped into one range. */
static void make(struct fill *f)
{
	size_t k = per_handle(f), len = f->n * f->size;
	cu_mem_prop p = prop();
	uint64_t t0 = now_ns();

	f->nh = 0;
	f->err = prefill_cu.reserve(&f->va, len, GRAN, 0, 0);
	for (size_t i = 0; i < f->n && !f->err; i += k, f->nh++) {
		size_t m = f->n - i < k ? f->n - i : k, j = f->nh;

		f->hlen[j] = m * f->size;
		f->err = prefill_cu.create(&f->h[j], f->hlen[j], &p, 0) ||
			 prefill_cu.export_fd(&f->fd[j], f->h[j], CU_HANDLE_POSIX_FD, 0) ||
			 prefill_cu.map(f->va + i * f->size, f->hlen[j], 0, f->h[j], 0);
	}
	f->err = f->err || access_rw(f->va, len);
	f->make_ms = ms_since(t0);
}

/* The importer's side: each handle imported once, each allocation mapped
 * on its own at its offset in its handle. */
static void import(struct fill *f)
{
	size_t k = per_handle(f), len = f->n * f->size;
	cu_handle hi[512];
	cu_ptr va = 0;
	uint64_t t0 = now_ns();
	int err = prefill_cu.reserve(&va, len, GRAN, 0, 0);

	for (size_t j = 0; j < f->nh && !err; j++)
		err = more.import_fd(&hi[j], (void *)(intptr_t)f->fd[j], CU_HANDLE_POSIX_FD);
	for (size_t i = 0; i < f->n && !err; i++)
		err = prefill_cu.map(va + i * f->size, f->size, (i % k) * f->size, hi[i / k], 0);
	err = err || access_rw(va, len);
	f->import_ms = ms_since(t0);
	f->err = f->err || err;
	for (size_t i = 0; i < f->n; i++)
		prefill_cu.unmap(va + i * f->size, f->size);
	for (size_t j = 0; j < f->nh; j++)
		prefill_cu.release(hi[j]);
	prefill_cu.addr_free(va, len);
}

static void unmake(struct fill *f)
{
	for (size_t j = 0, i = 0; j < f->nh; i += f->hlen[j] / f->size, j++) {
		prefill_cu.unmap(f->va + i * f->size, f->hlen[j]);
		close(f->fd[j]);
		prefill_cu.release(f->h[j]);
	}
	prefill_cu.addr_free(f->va, f->n * f->size);
}

static void *fill_thread(void *arg)
{
	struct fill *f = arg;

	prefill_use_device(ordinal);
	pthread_barrier_wait(f->go);
	make(f);
	if (!f->err)
		import(f);
	return NULL;
}

/* threads fills at once, cap as in struct fill: the slowest's make and
 * import times, best of 3 rounds. */
static int rounds(int threads, size_t n, size_t size, size_t cap, double *make_ms,
		  double *import_ms)
{
	static struct fill f[MAX_FILLS];
	pthread_t th[MAX_FILLS];
	pthread_barrier_t go;

	*make_ms = *import_ms = 1e12;
	for (int r = 0; r < 3; r++) {
		double mk = 0, im = 0;
		int err = 0;

		pthread_barrier_init(&go, NULL, (unsigned)threads);
		for (int t = 0; t < threads; t++) {
			f[t] = (struct fill){ .n = n, .size = size, .cap = cap, .go = &go };
			pthread_create(&th[t], NULL, fill_thread, &f[t]);
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(th[t], NULL);
			err |= f[t].err;
			mk = f[t].make_ms > mk ? f[t].make_ms : mk;
			im = f[t].import_ms > im ? f[t].import_ms : im;
			unmake(&f[t]);
		}
		pthread_barrier_destroy(&go);
		if (err)
			return 1;
		*make_ms = mk < *make_ms ? mk : *make_ms;
		*import_ms = im < *import_ms ? im : *import_ms;
	}
	return 0;
}

int main(int argc, char **argv)
{
	size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 115;
	size_t size = (argc > 3 ? strtoul(argv[3], NULL, 10) : 20) * MIB;
	int threads = argc > 4 ? atoi(argv[4]) : 8, bad = 0, slices;
	const struct {
		const char *name;
		size_t cap;
	} modes[] = { { "one allocation each", 0 }, { "runs of up to 256 MiB", 256 * MIB },
		      { "one allocation for all", (size_t)-1 / 2 } };

	ordinal = argc > 1 ? atoi(argv[1]) : 0;
	if (!n || n > 512 || !size || size % GRAN || threads < 1 || threads > MAX_FILLS) {
		fprintf(stderr, "usage: vmm-slices [GPU] [N<=512] [MIB, even] [THREADS<=64]\n");
		return 2;
	}
	if (cuda_init()) {
		fprintf(stderr, "vmm-slices: no CUDA driver: %s\n", cuda_unavailable_reason());
		return 1;
	}
#define SYM(f, name) (more.f = (__typeof__(more.f))cuda_sym(name))
	if (!prefill_driver_load() || !(SYM(import_fd, "cuMemImportFromShareableHandle") &&
					SYM(htod, "cuMemcpyHtoD_v2") && SYM(dtoh, "cuMemcpyDtoH_v2"))) {
		fprintf(stderr, "vmm-slices: the driver lacks a VMM entry point\n");
		return 1;
	}
#undef SYM
	if (prefill_use_device(ordinal)) {
		fprintf(stderr, "vmm-slices: no context on GPU %d\n", ordinal);
		return 1;
	}
	slices = check_offsets();
	bad |= slices == 1;
	printf("%zu allocations of %zu MiB (%.2f GiB), made as a fill makes them:\n", n, size / MIB,
	       (double)(n * size) / (1 << 30));
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		int ts[2] = { 1, threads };

		/* Slices the driver does not map: only one allocation each. */
		if (modes[m].cap && slices)
			continue;
		for (int k = 0; k < 2; k++) {
			double mk, im;

			if (rounds(ts[k], n, size, modes[m].cap, &mk, &im)) {
				printf("figure: %s, %d thread(s): FAILED\n", modes[m].name, ts[k]);
				bad = 1;
				continue;
			}
			printf("figure: %s, %d thread(s) at once: made %.1f ms, imported and mapped "
			       "%.1f ms (the slowest thread, best of 3)\n",
			       modes[m].name, ts[k], mk, im);
		}
	}
	return bad;
}
