/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_prefill.c — see gpu_prefill.h.
 *
 * thawd keeps one primary context per GPU it has filled memory on (made at
 * the first fill: ~0.2 s and some GPU memory, once).  A fill makes each
 * allocation exportable (POSIX file descriptor), maps them all into one
 * address range of thawd's, and copies the tier's file into it on several
 * threads, each pinning its slice of the file a piece at a time (as the
 * library's copy back does), then unmaps them again: only the handles and
 * their descriptors are kept until the library has taken them.
 *
 * Each thread checks each piece against the RAM tier entry's checksums
 * (tier_sums.h) while the link copies it.  A piece unlike its checksum
 * fails the fill with -EUCLEAN, which is not the fill's usual failure (the
 * library would copy the same damaged file itself): the start's GPU
 * restore fails, with the function's calls still held, and the entry is
 * reported (tier_damage_report) to be materialised again.  Where no fill
 * applies but the entry has checksums, a fill is only a check: its thread
 * reads the files whole while CRIU restores, and the library copies them
 * after only if they are sound.
 */
#define LOG_PREFIX "gpu: "
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "restore/tier.h"
#include "restore/tier_sums.h"
#include "common/cuda.h"
#include "common/cuda_abi.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define PIECE (64ull << 20)
#define SLICE_MIN (256ull << 20)
#define MAX_THREADS 16
#define ALIGN_2M(x) (((x) + (2ull << 20) - 1) & ~((2ull << 20) - 1))
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
/* How long an offer waits for the library to connect after it is ready. */
#define SERVE_TIMEOUT_MS 60000

static struct {
	cu_fn_cuDeviceGet *device_get;
	cu_fn_cuDevicePrimaryCtxRetain *primary_retain;
	cu_fn_cuCtxSetCurrent *ctx_set_current;
	cu_fn_cuMemCreate *create;
	cu_fn_cuMemRelease *release;
	cu_fn_cuMemAddressReserve *reserve;
	cu_fn_cuMemAddressFree *addr_free;
	cu_fn_cuMemMap *map;
	cu_fn_cuMemUnmap *unmap;
	cu_fn_cuMemSetAccess *set_access;
	cu_fn_cuMemExportToShareableHandle *export_fd;
	cu_fn_cuMemHostRegister_v2 *host_register;
	cu_fn_cuMemHostUnregister *host_unregister;
	cu_fn_cuMemcpyHtoDAsync_v2 *copy;
	cu_fn_cuStreamCreate *stream_create;
	cu_fn_cuStreamSynchronize *stream_sync;
	cu_fn_cuStreamDestroy_v2 *stream_destroy;
	bool ok;
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_ctx ctxs[CUDA_MAX_DEVICES];

static void load_driver(void)
{
#define SYM(f, name) (cu.f = (__typeof__(cu.f))cuda_sym(name))
	cu.ok = SYM(device_get, "cuDeviceGet") && SYM(primary_retain, "cuDevicePrimaryCtxRetain") &&
		SYM(ctx_set_current, "cuCtxSetCurrent") && SYM(create, "cuMemCreate") &&
		SYM(release, "cuMemRelease") && SYM(reserve, "cuMemAddressReserve") &&
		SYM(addr_free, "cuMemAddressFree") && SYM(map, "cuMemMap") &&
		SYM(unmap, "cuMemUnmap") && SYM(set_access, "cuMemSetAccess") &&
		SYM(export_fd, "cuMemExportToShareableHandle") &&
		SYM(host_register, "cuMemHostRegister_v2") &&
		SYM(host_unregister, "cuMemHostUnregister") &&
		SYM(copy, "cuMemcpyHtoDAsync_v2") && SYM(stream_create, "cuStreamCreate") &&
		SYM(stream_sync, "cuStreamSynchronize") && SYM(stream_destroy, "cuStreamDestroy_v2");
#undef SYM
}

/* thawd's context on device ordinal, current on this thread. */
struct pinned_file;
static void pin_put(struct pinned_file *f);

static int use_device(int ordinal)
{
	int dev, r = 0;

	if (ordinal < 0 || ordinal >= CUDA_MAX_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&ctx_lock);
	if (!ctxs[ordinal]) {
		r = cu.device_get(&dev, ordinal);
		if (!r)
			r = cu.primary_retain(&ctxs[ordinal], dev);
	}
	pthread_mutex_unlock(&ctx_lock);
	if (!r)
		r = cu.ctx_set_current(ctxs[ordinal]);
	return r ? -EIO : 0;
}

struct pf_alloc {
	uint64_t off, size;
	cu_handle h; /* 0: could not be made, not offered */
	int fd;      /* its export, -1 none */
	bool mapped; /* in thawd's range, for the copy */
};

struct pf_proc {
	int ns_pid;
	struct pf_alloc *a;
	size_t n;
	uint64_t len; /* the file's bytes the allocations span */
	char *base;   /* the file, mapped (the pin cache's mapping) */
	const struct tier_sum_file *sum; /* its checksums; NULL: not checked */
	struct pinned_file *pin;
	int listen_fd;
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	bool served;
};

struct gpu_prefill {
	int ordinal;
	struct gpu_placement *placement; /* whose claim the fill takes its bytes from */
	char tier_dir[PATH_MAX], out_dir[PATH_MAX];
	struct pf_proc *p;
	size_t np;
	pthread_t thread;
	bool started;
	int wake[2]; /* gpu_prefill_end writes: stop serving */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0 filling, 1 offered, <0 -errno */
	struct gpu_prefill *queue_next; /* in its GPU's fill queue, while queued */
	bool queued, copying;
	uint64_t queued_ns, copy_begin_ns, copy_end_ns; /* now_ns(); 0: not yet */
	char why[200]; /* the first failure, for the log */
	uint64_t bytes, offered_allocs;
	double fill_ms;
	struct tier_sums *sums; /* the entry's checksums; NULL: none, or not checked */
	uint64_t verify_ns;	/* the threads' time spent checking, summed */
	bool unverified;	/* the entry has no checksums (an older thaw made it) */
	bool check_only;	/* no fill applies: the files are only checked */
};

/* Read dir/gpu-<ns>.layout into p. */
static int read_layout(const char *dir, struct pf_proc *p)
{
	char path[PATH_MAX + 64], line[256];
	size_t cap = 0;
	FILE *f;
	int ret = 0, dev0 = -1;

	snprintf(path, sizeof(path), "%s/" GPUMEM_LAYOUT_FMT, dir, p->ns_pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f) || strncmp(line, GPUMEM_LAYOUT_MAGIC, strlen(GPUMEM_LAYOUT_MAGIC))) {
		fclose(f);
		return -EINVAL;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long off, size;
		unsigned c, rdma, usage;
		int dev;

		if (sscanf(line, "%llu %llu %d %u %u %u", &off, &size, &dev, &c, &rdma, &usage) != 6 ||
		    !size || size > (1ull << 48) || off > (1ull << 48) || off % (2ull << 20) ||
		    (dev0 >= 0 && dev != dev0) || c) {
			/* Not what a fill handles (several devices, compressed
			 * memory) or not a layout (sizes beyond any GPU's, which
			 * would overflow): the library copies it all. */
			ret = -EINVAL;
			break;
		}
		dev0 = dev;
		if (ARRAY_GROW(p->a, cap, p->n + 1, 64)) {
			ret = -ENOMEM;
			break;
		}
		p->a[p->n++] = (struct pf_alloc){ .off = off, .size = size, .fd = -1 };
		if (off + size > p->len)
			p->len = off + size;
	}
	fclose(f);
	return ret;
}

/* The allocations made, exportable, on the device, and mapped into one
 * range of thawd's at their file offsets.  *va, the range. */
static int make_allocs(struct gpu_prefill *pf, struct pf_proc *p, cu_ptr *va)
{
	cu_mem_prop prop = { .type = CU_ALLOC_PINNED, .requestedHandleTypes = CU_HANDLE_POSIX_FD,
			     .location = { CU_LOC_DEVICE, pf->ordinal } };
	cu_access_desc acc = { .location = { CU_LOC_DEVICE, pf->ordinal }, .flags = CU_ACCESS_RW };

	if (cu.reserve(va, ALIGN_2M(p->len), 2ull << 20, 0, 0))
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];

		if (cu.create(&a->h, a->size, &prop, 0)) {
			a->h = 0;
			continue;
		}
		if (cu.map(*va + a->off, a->size, 0, a->h, 0))
			continue;
		a->mapped = true;
		if (cu.set_access(*va + a->off, a->size, &acc, 1)) {
			cu.unmap(*va + a->off, a->size);
			a->mapped = false;
		}
	}
	return 0;
}

/* The threads for len bytes of the file: one per SLICE_MIN, 1 to
 * MAX_THREADS. */
static int threads_for(uint64_t len)
{
	uint64_t n = (len + SLICE_MIN - 1) / SLICE_MIN;

	return n > MAX_THREADS ? MAX_THREADS : n < 1 ? 1 : (int)n;
}

/* fn on each of the n jobs (size bytes apart from jobs) on a thread of its
 * own, or here where a thread cannot start; returns when all have ended. */
static void run_jobs(void *(*fn)(void *), void *jobs, size_t size, int n)
{
	pthread_t th[MAX_THREADS];
	bool started[MAX_THREADS];

	for (int i = 0; i < n && i < MAX_THREADS; i++) {
		started[i] = pthread_create(&th[i], NULL, fn, (char *)jobs + i * size) == 0;
		if (!started[i])
			fn((char *)jobs + i * size);
	}
	for (int i = 0; i < n && i < MAX_THREADS; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

/* Pin [p, p + n) of the file's mapping read-only, its pages populated
 * first by this thread (in parallel with the others': the driver then
 * only pins, under its own lock). */
static bool pin_piece(char *p, size_t n, unsigned flags)
{
	madvise(p, n, MADV_POPULATE_READ);
	return cu.host_register(p, n, CU_HOSTREG_READ_ONLY | flags) == 0;
}

/* The tier's files, mapped and pinned once for every fill that copies
 * from them: pinning is most of a fill (~25 ms a GiB, under the driver's
 * own lock), and a burst of starts of one function would pin the same
 * pages once each, one after another.  The pages are the tier's page
 * cache: pinning them costs no memory while the file lives.  An entry no
 * fill has used for PIN_IDLE_S, or whose file is gone or replaced, is let
 * go by the reaper (so that a deleted file's pages are not held). */
#define PIN_IDLE_S 30
struct pinned_file {
	char path[PATH_MAX + 64];
	dev_t dev;
	ino_t ino;
	struct timespec mtime; /* a file rewritten in place is another file */
	size_t len;
	char *base;
	bool *pinned; /* per PIECE */
	size_t npieces;
	int ordinal; /* the device whose context pinned it */
	int users;
	int state; /* 0 pinning, 1 done (pinned, or failed) */
	bool failed;
	uint64_t last_used;
	struct pinned_file *next;
};
static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pin_cv = PTHREAD_COND_INITIALIZER;
static struct pinned_file *pins;
static bool reaper_started;

/* Files kept pinned for a context standby (gpu_prefill_keep) while the
 * process holder lives: a use each, so the reaper leaves them. */
struct pin_keep {
	pid_t holder;
	struct pinned_file *f;
	struct pin_keep *next;
};
static struct pin_keep *keeps;
static void pin_put(struct pinned_file *f);

struct pin_job {
	struct pinned_file *f;
	size_t first, last; /* pieces */
	int ordinal;
};

static void *pin_pieces(void *arg)
{
	struct pin_job *j = arg;
	struct pinned_file *f = j->f;

	if (use_device(j->ordinal))
		return NULL;
	/* For every context (portable): a fill onto another GPU copies
	 * from the same pages. */
	for (size_t k = j->first; k < j->last; k++) {
		size_t a = k * PIECE, n = f->len - a < PIECE ? f->len - a : PIECE;

		f->pinned[k] = pin_piece(f->base + a, n, CU_HOSTREG_PORTABLE);
	}
	return NULL;
}

/* Map and pin f's file on up to MAX_THREADS threads. */
static int pin_file(struct pinned_file *f, int fd, int ordinal)
{
	struct pin_job jobs[MAX_THREADS];
	size_t per;
	int n;

	f->base = mmap(NULL, f->len, PROT_READ, MAP_SHARED, fd, 0);
	if (f->base == MAP_FAILED) {
		f->base = NULL;
		return -errno;
	}
	f->npieces = (f->len + PIECE - 1) / PIECE;
	f->pinned = calloc(f->npieces, sizeof(bool));
	if (!f->pinned)
		return -ENOMEM;
	n = threads_for(f->len);
	per = (f->npieces + (size_t)n - 1) / (size_t)n;
	for (int i = 0; i < n; i++) {
		jobs[i] = (struct pin_job){ f, i * per, (i + 1) * per, ordinal };
		if (jobs[i].last > f->npieces)
			jobs[i].last = f->npieces;
	}
	run_jobs(pin_pieces, jobs, sizeof(jobs[0]), n);
	return 0;
}

static void pin_free(struct pinned_file *f)
{
	for (size_t k = 0; f->pinned && k < f->npieces; k++)
		if (f->pinned[k])
			cu.host_unregister(f->base + k * PIECE);
	if (f->base)
		munmap(f->base, f->len);
	free(f->pinned);
	free(f);
}

static bool same_file(const struct pinned_file *f, const struct stat *sb)
{
	return sb->st_dev == f->dev && sb->st_ino == f->ino && (size_t)sb->st_size == f->len &&
	       sb->st_mtim.tv_sec == f->mtime.tv_sec && sb->st_mtim.tv_nsec == f->mtime.tv_nsec;
}

/* Is f's file still the one it mapped? */
static bool pin_current(const struct pinned_file *f)
{
	struct stat sb;

	return !stat(f->path, &sb) && same_file(f, &sb);
}

static void *pin_reaper(void *arg)
{
	(void)arg;
	for (;;) {
		struct pinned_file *gone = NULL, **pp;

		sleep(5);
		pthread_mutex_lock(&pin_mu);
		/* A standby stopped without its take (its holder is gone). */
		for (struct pin_keep **kp = &keeps; *kp;) {
			struct pin_keep *k = *kp;

			if (kill(k->holder, 0) == 0 || errno != ESRCH) {
				kp = &k->next;
				continue;
			}
			*kp = k->next;
			k->f->users--;
			k->f->last_used = now_ns();
			free(k);
		}
		for (pp = &pins; *pp;) {
			struct pinned_file *f = *pp;

			if (f->users || f->state != 1 ||
			    (!f->failed && now_ns() - f->last_used < PIN_IDLE_S * 1000000000ull &&
			     pin_current(f))) {
				pp = &f->next;
				continue;
			}
			*pp = f->next;
			f->next = gone;
			gone = f;
		}
		pthread_mutex_unlock(&pin_mu);
		while (gone) {
			struct pinned_file *f = gone;

			gone = f->next;
			/* Unpinned in a context of the device that pinned it. */
			use_device(f->ordinal);
			pin_free(f);
		}
	}
	return NULL;
}

/* The pinned mapping of path (at least len bytes), made if none; NULL when
 * it cannot be mapped.  pin_put when done. */
static struct pinned_file *pin_get(const char *path, int ordinal)
{
	struct pinned_file *f;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) < 0 || !sb.st_size) {
		close(fd);
		return NULL;
	}
	pthread_mutex_lock(&pin_mu);
	if (!reaper_started) {
		pthread_t t;

		reaper_started = pthread_create(&t, NULL, pin_reaper, NULL) == 0;
		if (reaper_started)
			pthread_detach(t);
	}
	for (f = pins; f; f = f->next)
		if (!f->failed && same_file(f, &sb))
			break;
	if (f) {
		f->users++;
		while (f->state == 0)
			pthread_cond_wait(&pin_cv, &pin_mu);
		if (f->failed) {
			f->users--;
			f = NULL;
		}
		pthread_mutex_unlock(&pin_mu);
		close(fd);
		return f;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&pin_mu);
		close(fd);
		return NULL;
	}
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->dev = sb.st_dev;
	f->ino = sb.st_ino;
	f->mtime = sb.st_mtim;
	f->len = (size_t)sb.st_size;
	f->ordinal = ordinal;
	f->users = 1;
	f->next = pins;
	pins = f;
	pthread_mutex_unlock(&pin_mu);
	ret = pin_file(f, fd, ordinal);
	close(fd);
	pthread_mutex_lock(&pin_mu);
	f->state = 1;
	/* A failed entry is found by no one from now on; the reaper frees
	 * it once those who waited for it have gone. */
	f->failed = ret || !f->base;
	f->last_used = now_ns();
	if (f->failed)
		f->users--;
	pthread_cond_broadcast(&pin_cv);
	pthread_mutex_unlock(&pin_mu);
	return f->failed ? NULL : f;
}

static void pin_put(struct pinned_file *f)
{
	pthread_mutex_lock(&pin_mu);
	f->users--;
	f->last_used = now_ns();
	pthread_mutex_unlock(&pin_mu);
}

struct slice {
	struct pf_proc *p;
	cu_ptr va;
	uint64_t off, len;
	int ordinal, err;
	int cr; /* the driver's error */
	uint64_t bad;	    /* -EUCLEAN: the first damaged byte */
	uint64_t verify_ns; /* spent checking */
};

/* Piece k of s: bytes [*a, *b) of the file. */
static void piece_bounds(const struct slice *s, int k, uint64_t *a, uint64_t *b)
{
	*a = s->off + (uint64_t)k * PIECE;
	*b = *a + PIECE < s->off + s->len ? *a + PIECE : s->off + s->len;
}

/* Check piece k of s against its checksums (none: nothing to do). */
static void check_piece(struct slice *s, int k)
{
	uint64_t a, b, t0 = now_ns();

	if (s->err || !s->p->sum)
		return;
	piece_bounds(s, k, &a, &b);
	s->err = tier_sums_check_mapped(s->p->sum, s->p->base, s->p->pin->len, a, b - a, &s->bad);
	s->verify_ns += now_ns() - t0;
}

/* Copy the file's bytes of [s->off, s->off + s->len) into the allocations
 * that lie there, a piece at a time.  A piece the cache could not pin is
 * pinned here, so that its copy runs while the next is pinned, and
 * unpinned once all have landed.  Each piece is checked against its
 * checksums while the link copies: the thread queues piece k's copy and
 * then hashes piece k-1, so that the stream always has a copy queued
 * behind the one it runs (hashing a piece takes nearly as long as a
 * stream's share of the link copies it: checked right after its own copy
 * was queued, the stream idled whenever the hash ran slower). */
static void *copy_slice(void *arg)
{
	struct slice *s = arg;
	int npieces = (int)((s->len + PIECE - 1) / PIECE), k;
	bool *pinned = calloc((size_t)npieces + 1, sizeof(bool));
	cu_stream st = NULL;

	if (!pinned || use_device(s->ordinal) || cu.stream_create(&st, CU_STREAM_NONBLOCKING)) {
		s->err = -EIO;
		free(pinned);
		return NULL;
	}
	for (k = 0; k < npieces && !s->err; k++) {
		uint64_t a, b;

		piece_bounds(s, k, &a, &b);
		/* Pieces are PIECE-aligned in the file, as the cache's are. */
		if (!s->p->pin->pinned[a / PIECE])
			pinned[k] = pin_piece(s->p->base + a, b - a, 0);
		for (size_t i = 0; i < s->p->n; i++) {
			const struct pf_alloc *al = &s->p->a[i];
			uint64_t x = al->off > a ? al->off : a;
			uint64_t y = al->off + al->size < b ? al->off + al->size : b;

			if (!al->mapped || x >= y)
				continue;
			if ((s->cr = cu.copy(s->va + x, s->p->base + x, y - x, st)))
				s->err = -EIO;
		}
		if (k > 0)
			check_piece(s, k - 1);
	}
	if (k == npieces && npieces > 0)
		check_piece(s, npieces - 1);
	if (cu.stream_sync(st))
		s->err = -EIO;
	cu.stream_destroy(st);
	for (k = 0; k < npieces; k++)
		if (pinned[k])
			cu.host_unregister(s->p->base + s->off + (uint64_t)k * PIECE);
	free(pinned);
	return NULL;
}

/* The tier's file copied into p's allocations. */
static int copy_file(struct gpu_prefill *pf, struct pf_proc *p, cu_ptr va)
{
	struct slice s[MAX_THREADS];
	uint64_t slice;
	int n = threads_for(p->len), made = 0, ret = 0;

	/* Whole pieces, as the cache pinned them: a copy that straddled two
	 * pinned ranges is refused by the driver. */
	slice = (p->len + (uint64_t)n - 1) / (uint64_t)n;
	slice = (slice + PIECE - 1) / PIECE * PIECE;
	for (uint64_t off = 0; off < p->len && made < MAX_THREADS; off += slice, made++)
		s[made] = (struct slice){ .p = p, .va = va, .off = off, .ordinal = pf->ordinal,
					  .len = off + slice > p->len ? p->len - off : slice };
	run_jobs(copy_slice, s, sizeof(s[0]), made);
	for (int i = 0; i < made; i++) {
		pf->verify_ns += s[i].verify_ns;
		if (s[i].err == -EUCLEAN && ret != -EUCLEAN) {
			ret = -EUCLEAN;
			snprintf(pf->why, sizeof(pf->why), "%s unlike its checksum: block %llu "
				 "(bytes %llu-%llu)", p->sum->path,
				 (unsigned long long)(s[i].bad / TIER_SUM_BLOCK),
				 (unsigned long long)s[i].bad,
				 (unsigned long long)(s[i].bad + TIER_SUM_BLOCK - 1));
		} else if (s[i].err && !ret) {
			ret = s[i].err;
			snprintf(pf->why, sizeof(pf->why), "copying: CUDA error %d", s[i].cr);
		}
	}
	return ret;
}

/* The fills of one GPU copy one at a time, in the order their starts asked
 * (gpu_prefill_start): one fill alone runs at the link's speed (16 threads,
 * a stream each), and fills side by side share it so that every start of a
 * burst would finish last.  In turn, the first start gets its bytes after
 * its own bytes' time, the k-th after k of them.  Pinning and making the
 * allocations run outside the turn. */
static pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cv = PTHREAD_COND_INITIALIZER;
static struct gpu_prefill *queue_head[CUDA_MAX_DEVICES];

static void queue_join(struct gpu_prefill *pf)
{
	struct gpu_prefill **pp;

	pthread_mutex_lock(&queue_mu);
	for (pp = &queue_head[pf->ordinal]; *pp; pp = &(*pp)->queue_next)
		;
	*pp = pf;
	pf->queue_next = NULL;
	pf->queued = true;
	pf->queued_ns = now_ns();
	pthread_mutex_unlock(&queue_mu);
}

/* Wait until pf is the first of its GPU's queue. */
static void queue_wait_turn(struct gpu_prefill *pf)
{
	pthread_mutex_lock(&queue_mu);
	while (pf->queued && queue_head[pf->ordinal] != pf)
		pthread_cond_wait(&queue_cv, &queue_mu);
	pthread_mutex_unlock(&queue_mu);
	pf->copying = true;
	pf->copy_begin_ns = now_ns();
}

/* pf leaves its queue (done, failed or never copied): the next goes. */
static void queue_leave(struct gpu_prefill *pf)
{
	struct gpu_prefill **pp;

	pthread_mutex_lock(&queue_mu);
	for (pp = &queue_head[pf->ordinal]; pf->queued && *pp; pp = &(*pp)->queue_next)
		if (*pp == pf) {
			*pp = pf->queue_next;
			break;
		}
	pf->queued = false;
	pthread_cond_broadcast(&queue_cv);
	pthread_mutex_unlock(&queue_mu);
}

static int offer(struct gpu_prefill *pf, struct pf_proc *p);

/* Fill one process's allocations; on success each filled one has its
 * export descriptor and is offered on its socket. */
static int fill_proc(struct gpu_prefill *pf, struct pf_proc *p)
{
	char path[PATH_MAX + 64];
	cu_ptr va = 0;
	int ret;

	snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, pf->tier_dir, p->ns_pid);
	p->pin = pin_get(path, pf->ordinal);
	if (!p->pin || p->pin->len < p->len) {
		snprintf(pf->why, sizeof(pf->why), "cannot map %.100s whole", path);
		return -EIO;
	}
	p->base = p->pin->base;
	ret = make_allocs(pf, p, &va);
	if (!ret) {
		uint64_t made = 0;

		for (size_t i = 0; i < p->n; i++)
			made += p->a[i].h ? p->a[i].size : 0;
		/* On the GPU now: the placement no longer holds them back. */
		gpu_claim_taken(pf->placement, 0, made);
	}
	if (ret)
		snprintf(pf->why, sizeof(pf->why), "no address range of %llu bytes",
			 (unsigned long long)p->len);
	if (!ret && !pf->copying)
		queue_wait_turn(pf);
	if (!ret)
		ret = copy_file(pf, p, va);
	for (size_t i = 0; va && i < p->n; i++)
		if (p->a[i].mapped) {
			cu.unmap(va + p->a[i].off, p->a[i].size);
			p->a[i].mapped = false;
		} else if (p->a[i].h) {
			/* Made but not mapped: never filled, not offered. */
			cu.release(p->a[i].h);
			p->a[i].h = 0;
		}
	if (va)
		cu.addr_free(va, ALIGN_2M(p->len));
	if (ret)
		return ret;
	for (size_t i = 0; i < p->n; i++) {
		struct pf_alloc *a = &p->a[i];

		if (a->h && cu.export_fd(&a->fd, a->h, CU_HANDLE_POSIX_FD, 0)) {
			a->fd = -1;
			cu.release(a->h);
			a->h = 0;
		}
		if (a->fd >= 0) {
			/* Never into a child (spawn closes them too). */
			fcntl(a->fd, F_SETFD, FD_CLOEXEC);
			pf->bytes += a->size;
			pf->offered_allocs++;
		}
	}
	return offer(pf, p);
}

/* p's socket, listening at out_dir/<ns pid>.prefill: the library takes
 * what it finds there.  The out directory is the function's to write, so
 * the socket is made and given its mode in thawd's own directory above
 * it, and only then renamed into place (a rename replaces whatever the
 * function put at that name, and follows no link). */
static int offer(struct gpu_prefill *pf, struct pf_proc *p)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char own[sizeof(sa.sun_path)];
	const char *slash = strrchr(pf->out_dir, '/');
	int n;

	if (snprintf(p->sock, sizeof(p->sock), "%s/" GPUMEM_PREFILL_FMT, pf->out_dir, p->ns_pid) >=
		    (int)sizeof(p->sock) || !slash ||
	    (n = snprintf(own, sizeof(own), "%.*s/.prefill-%d.sock", (int)(slash - pf->out_dir),
			  pf->out_dir, p->ns_pid)) < 0 || (size_t)n >= sizeof(own)) {
		p->sock[0] = '\0';
		snprintf(pf->why, sizeof(pf->why), "the socket's path is too long");
		return -ENAMETOOLONG; /* a socket's path is short: the library copies */
	}
	memcpy(sa.sun_path, own, sizeof(own));
	unlink(own);
	p->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(own, 0666) || listen(p->listen_fd, 4) || rename(own, p->sock)) {
		snprintf(pf->why, sizeof(pf->why), "socket %.100s: %s", p->sock, strerror(errno));
		unlink(own);
		return -errno;
	}
	return 0;
}

/* Send p's allocations to the library that connected on c. */
static void serve_one(struct pf_proc *p, int c)
{
	struct gpumem_prefill_msg msg;
	size_t i = 0;

	do {
		char ctl[CMSG_SPACE(sizeof(int) * GPUMEM_PREFILL_BATCH)];
		struct iovec iov = { &msg, sizeof(msg) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		int fds[GPUMEM_PREFILL_BATCH];

		memset(&msg, 0, sizeof(msg));
		memset(ctl, 0, sizeof(ctl));
		for (; i < p->n && msg.n < GPUMEM_PREFILL_BATCH; i++)
			if (p->a[i].fd >= 0) {
				msg.e[msg.n].file_off = p->a[i].off;
				msg.e[msg.n].size = p->a[i].size;
				fds[msg.n++] = p->a[i].fd;
			}
		if (msg.n) {
			struct cmsghdr *cm;

			mh.msg_control = ctl;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * msg.n);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * msg.n);
			memcpy(CMSG_DATA(cm), fds, sizeof(int) * msg.n);
		}
		if (sendmsg(c, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
			break;
	} while (msg.n);
}

/* Until each process was served, or gpu_prefill_end. */
static void serve(struct gpu_prefill *pf)
{
	struct pollfd *pfd = calloc(pf->np + 1, sizeof(*pfd));
	size_t left = 0;

	if (!pfd)
		return;
	for (;;) {
		left = 0;
		pfd[0] = (struct pollfd){ .fd = pf->wake[0], .events = POLLIN };
		for (size_t i = 0; i < pf->np; i++) {
			pfd[i + 1] = (struct pollfd){ .fd = -1 };
			if (!pf->p[i].served && pf->p[i].listen_fd >= 0) {
				pfd[i + 1].fd = pf->p[i].listen_fd;
				pfd[i + 1].events = POLLIN;
				left++;
			}
		}
		if (!left || poll(pfd, pf->np + 1, SERVE_TIMEOUT_MS) <= 0 || pfd[0].revents)
			break;
		for (size_t i = 0; i < pf->np; i++) {
			int c;

			if (!(pfd[i + 1].revents & POLLIN))
				continue;
			c = accept4(pf->p[i].listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			serve_one(&pf->p[i], c);
			close(c);
			pf->p[i].served = true;
		}
	}
	free(pfd);
}

static void set_state(struct gpu_prefill *pf, int state)
{
	pthread_mutex_lock(&pf->mu);
	pf->state = state;
	pthread_cond_broadcast(&pf->cv);
	pthread_mutex_unlock(&pf->mu);
}

/* The RAM tier entry's checksums of each process's file (none with
 * THAW_GPU_VERIFY=0).  An entry without any (an older thaw made it) is
 * filled unchecked; one whose checksums are damaged or lack the file is
 * damaged (-EUCLEAN). */
static int load_sums(struct gpu_prefill *pf)
{
	const char *env = getenv("THAW_GPU_VERIFY");
	int ret;

	if (env && !strcmp(env, "0"))
		return 0;
	ret = tier_sums_load(pf->tier_dir, &pf->sums);
	if (ret == -ENOENT) {
		pf->unverified = true;
		return 0;
	}
	if (ret) {
		snprintf(pf->why, sizeof(pf->why), "its checksums (" TIER_SUMS "): %s",
			 ret == -EUCLEAN ? "damaged" : strerror(-ret));
		return ret;
	}
	for (size_t i = 0; i < pf->np; i++) {
		char name[64];

		snprintf(name, sizeof(name), GPUMEM_FILE_FMT, pf->p[i].ns_pid);
		pf->p[i].sum = tier_sums_find(pf->sums, name);
		if (!pf->p[i].sum) {
			snprintf(pf->why, sizeof(pf->why), "%s without a checksum", name);
			return -EUCLEAN;
		}
	}
	return 0;
}

/* A check-only fill's work: each process's file read whole and checked. */
static int check_files(struct gpu_prefill *pf)
{
	const struct tier_sum_file **f = calloc(pf->np + 1, sizeof(*f));
	uint64_t bad = 0, t0 = now_ns();
	size_t bi = 0;
	int ret = f ? load_sums(pf) : -ENOMEM;

	for (size_t i = 0; !ret && i < pf->np; i++)
		f[i] = pf->p[i].sum;
	if (!ret && pf->sums)
		ret = tier_sums_check_files(pf->tier_dir, f, pf->np, &bi, &bad);
	pf->verify_ns = now_ns() - t0;
	if (ret == -EUCLEAN && bad == UINT64_MAX)
		snprintf(pf->why, sizeof(pf->why), "%s of another size than it was made", f[bi]->path);
	else if (ret == -EUCLEAN && f && f[bi])
		snprintf(pf->why, sizeof(pf->why), "%s unlike its checksum: block %llu (bytes "
			 "%llu-%llu)", f[bi]->path, (unsigned long long)(bad / TIER_SUM_BLOCK),
			 (unsigned long long)bad, (unsigned long long)(bad + TIER_SUM_BLOCK - 1));
	else if (ret == -ENOENT && f && f[bi]) {
		snprintf(pf->why, sizeof(pf->why), "%s missing", f[bi]->path);
		ret = -EUCLEAN;
	} else if (ret && !pf->why[0])
		snprintf(pf->why, sizeof(pf->why), "checking: %s", strerror(-ret));
	free(f);
	return ret;
}

static void *prefill_main(void *arg)
{
	struct gpu_prefill *pf = arg;
	uint64_t t0 = now_ns();
	int ret = pf->check_only ? check_files(pf) : use_device(pf->ordinal);

	if (pf->check_only) {
		if (ret == -EUCLEAN) {
			pr_err("the device memory in RAM tier entry %s is damaged: %s", pf->tier_dir,
			       pf->why);
			tier_damage_report(pf->tier_dir, TIER_FOUND_FILL, pf->why);
		}
		pf->fill_ms = ms_since(t0);
		set_state(pf, ret ? ret : 1);
		return NULL;
	}
	if (ret)
		snprintf(pf->why, sizeof(pf->why), "no CUDA context on GPU %d", pf->ordinal);
	if (!ret)
		ret = load_sums(pf);
	for (size_t i = 0; !ret && i < pf->np; i++)
		ret = fill_proc(pf, &pf->p[i]);
	if (ret == -EUCLEAN) {
		pr_err("the device memory in RAM tier entry %s is damaged: %s", pf->tier_dir,
		       pf->why);
		tier_damage_report(pf->tier_dir, TIER_FOUND_FILL, pf->why);
	}
	if (pf->copying)
		pf->copy_end_ns = now_ns();
	queue_leave(pf);
	/* All or nothing: a library that found a socket no one serves would
	 * wait for it. */
	for (size_t i = 0; ret && i < pf->np; i++)
		if (pf->p[i].listen_fd >= 0) {
			close(pf->p[i].listen_fd);
			pf->p[i].listen_fd = -1;
			unlink(pf->p[i].sock);
		}
	pf->fill_ms = ms_since(t0);
	set_state(pf, ret ? ret : 1);
	if (!ret)
		serve(pf);
	return NULL;
}

struct gpu_prefill *gpu_prefill_start(const struct snapshot_meta *sm, const char *tier_dir,
				      const char *out_dir, struct gpu_placement *placement)
{
	const struct snapshot_gpu_memory *gm = &sm->gpu_memory;
	const char *env = getenv("THAW_GPU_PREFILL"), *verify = getenv("THAW_GPU_VERIFY");
	bool fill = !(env && !strcmp(env, "0")) && out_dir && placement && placement->n == 1 &&
		    placement->dev[0].ordinal >= 0 && placement->dev[0].ordinal < CUDA_MAX_DEVICES &&
		    sm->ngpus == 1 && !cuda_init();
	char sums[PATH_MAX + 16];
	struct gpu_prefill *pf;

	if (!tier_dir || !gm->nns_pids)
		return NULL;
	if (fill) {
		pthread_once(&cu_once, load_driver);
		fill = cu.ok;
	}
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return NULL;
	pf->wake[0] = pf->wake[1] = -1;
	snprintf(pf->tier_dir, sizeof(pf->tier_dir), "%s", tier_dir);
	snprintf(pf->out_dir, sizeof(pf->out_dir), "%s", out_dir);
	pthread_mutex_init(&pf->mu, NULL);
	pthread_cond_init(&pf->cv, NULL);
	pf->p = calloc(gm->nns_pids, sizeof(*pf->p));
	if (!pf->p || pipe2(pf->wake, O_CLOEXEC))
		goto fail;
	for (size_t i = 0; i < gm->nns_pids; i++) {
		struct pf_proc *p = &pf->p[pf->np++];

		p->ns_pid = gm->ns_pids[i];
		p->listen_fd = -1;
		/* A snapshot whose library wrote no layout (an older one)
		 * copies as it did. */
		if (fill && read_layout(tier_dir, p))
			fill = false;
	}
	/* No fill: only a check, where there is one to make. */
	snprintf(sums, sizeof(sums), "%s/" TIER_SUMS, tier_dir);
	if (!fill && ((verify && !strcmp(verify, "0")) || access(sums, F_OK)))
		goto fail;
	pf->check_only = !fill;
	if (fill) {
		pf->ordinal = placement->dev[0].ordinal;
		pf->placement = placement;
		queue_join(pf);
	}
	if (pthread_create(&pf->thread, NULL, prefill_main, pf)) {
		queue_leave(pf);
		goto fail;
	}
	pf->started = true;
	return pf;
fail:
	pf->state = -EINVAL;
	gpu_prefill_end(pf, NULL, 0);
	return NULL;
}

void gpu_prefill_copy_span(const struct gpu_prefill *p, uint64_t *begin, uint64_t *end)
{
	*begin = p ? p->copy_begin_ns : 0;
	*end = p ? p->copy_end_ns : 0;
}

int gpu_prefill_ready(struct gpu_prefill *p)
{
	int st;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	while (!p->state)
		pthread_cond_wait(&p->cv, &p->mu);
	st = p->state;
	pthread_mutex_unlock(&p->mu);
	return st < 0 ? st : 0;
}

void gpu_prefill_end(struct gpu_prefill *pf, char *summary, size_t len)
{
	if (!pf)
		return;
	if (pf->started) {
		if (write(pf->wake[1], "x", 1) < 0)
			pr_debug("waking the prefill thread: %s", strerror(errno));
		pthread_join(pf->thread, NULL);
	}
	if (summary && len && pf->check_only) {
		snprintf(summary, len, "thaw checked the device memory in %.1f ms, the library "
			 "copies it%s%s%s", pf->fill_ms, pf->state < 0 ? " (failed: " : "",
			 pf->state < 0 ? pf->why : "", pf->state < 0 ? ")" : "");
	} else if (summary && len) {
		char b[32];

		snprintf(summary, len, "thaw filled %llu allocation(s), %s, in %.1f ms (its GPU's "
			 "turn after %.1f ms, the copy %.1f ms, %s %.1f ms of its threads)%s%s%s",
			 (unsigned long long)pf->offered_allocs, fmt_bytes(pf->bytes, b), pf->fill_ms,
			 pf->copy_begin_ns ? (pf->copy_begin_ns - pf->queued_ns) / 1e6 : 0.0,
			 pf->copy_end_ns ? (pf->copy_end_ns - pf->copy_begin_ns) / 1e6 : 0.0,
			 pf->unverified ? "not checked: no checksums; checking" : "checked in",
			 pf->verify_ns / 1e6, pf->state < 0 ? " (failed: " : "",
			 pf->state < 0 ? pf->why : "",
			 pf->state == -EUCLEAN ? ")" : pf->state < 0 ? "; the library copied)" : "");
	}
	for (size_t i = 0; pf->p && i < pf->np; i++) {
		struct pf_proc *p = &pf->p[i];

		if (p->pin)
			pin_put(p->pin);
		if (p->listen_fd >= 0)
			close(p->listen_fd);
		if (p->sock[0])
			unlink(p->sock);
		/* The processes that mapped the memory hold it now. */
		for (size_t k = 0; k < p->n; k++) {
			if (p->a[k].fd >= 0)
				close(p->a[k].fd);
			if (p->a[k].h)
				cu.release(p->a[k].h);
		}
		free(p->a);
	}
	free(pf->p);
	tier_sums_free(pf->sums);
	for (int k = 0; k < 2; k++)
		if (pf->wake[k] >= 0)
			close(pf->wake[k]);
	pthread_mutex_destroy(&pf->mu);
	pthread_cond_destroy(&pf->cv);
	free(pf);
}

int gpu_prefill_restore(struct gpu_prefill *pf, const struct snapshot_meta *sm, const pid_t *pids,
			size_t n, const char *out_dir, const char *id, double *copy_ms)
{
	uint64_t t0 = now_ns();
	char line[300];
	double waited;
	int ret;

	if (!pf)
		return gpu_memory_restore(&sm->gpu_memory, pids, n, out_dir, copy_ms);
	/* Filled by now, or nearly: offered before RESTORE is asked.  A
	 * failed fill offers nothing and the library copies; but not from a
	 * damaged file: the start fails, the function's calls still held. */
	ret = gpu_prefill_ready(pf);
	if (ret == -EUCLEAN) {
		log_set_error("%s: the device memory in its RAM tier entry is damaged (%s): the "
			      "entry is dropped and materialised again", id, pf->why);
		gpu_prefill_end(pf, NULL, 0);
		return ret;
	}
	if (ret)
		pr_warn("thawd could not %s the device memory of %s (%s): the library copies it",
			pf->check_only ? "check" : "fill", id, pf->why);
	waited = ms_since(t0);
	ret = gpu_memory_restore(&sm->gpu_memory, pids, n, out_dir, copy_ms);
	gpu_prefill_end(pf, line, sizeof(line));
	pr_info("%s: %s; the start waited %.1f ms for it", id, line, waited);
	return ret;
}

void gpu_prefill_keep(pid_t holder, const struct snapshot_meta *sm, const char *tier_dir,
		      int ordinal)
{
	const struct snapshot_gpu_memory *gm = &sm->gpu_memory;

	if (!tier_dir || !gm->nns_pids || ordinal < 0 || ordinal >= CUDA_MAX_DEVICES ||
	    cuda_init())
		return;
	pthread_once(&cu_once, load_driver);
	if (!cu.ok)
		return;
	for (size_t i = 0; i < gm->nns_pids; i++) {
		char path[PATH_MAX + 64];
		struct pinned_file *f;
		struct pin_keep *k;

		snprintf(path, sizeof(path), "%s/" GPUMEM_FILE_FMT, tier_dir, (int)gm->ns_pids[i]);
		f = pin_get(path, ordinal);
		k = f ? calloc(1, sizeof(*k)) : NULL;
		if (!k) {
			if (f)
				pin_put(f);
			continue; /* the take pins it, as a start does */
		}
		k->holder = holder;
		k->f = f;
		pthread_mutex_lock(&pin_mu);
		k->next = keeps;
		keeps = k;
		pthread_mutex_unlock(&pin_mu);
	}
}

void gpu_prefill_unkeep(pid_t holder)
{
	pthread_mutex_lock(&pin_mu);
	for (struct pin_keep **kp = &keeps; *kp;) {
		struct pin_keep *k = *kp;

		if (k->holder != holder) {
			kp = &k->next;
			continue;
		}
		*kp = k->next;
		k->f->users--;
		k->f->last_used = now_ns();
		free(k);
	}
	pthread_mutex_unlock(&pin_mu);
}

int gpu_context_take(const struct snapshot_meta *sm, int ordinal, const char *uuid,
		     const pid_t *pids, size_t n, const char *tier_dir, const char *out_dir,
		     const char *id, double *copy_ms)
{
	uint64_t need = sm->gpu_memory.bytes;
	struct gpu_placement own = { 0 };
	char why[512];
	int ret;

	*copy_ms = 0;
	ret = gpu_place_on(ordinal, uuid, need, 0, &own, why, sizeof(why));
	if (ret) {
		log_set_error("%s", why);
		pr_err("%s: %s", id, why);
		return ret;
	}
	ret = gpu_prefill_restore(gpu_prefill_start(sm, tier_dir, out_dir, &own), sm, pids, n,
				  out_dir, id, copy_ms);
	gpu_release(&own);
	return ret;
}
