/* SPDX-License-Identifier: Apache-2.0 */
/* driver-burst — the CUDA driver's own floor for a burst of restores: how
 * long cuCheckpointProcessRestore takes for checkpointed processes one
 * alone, one after another, and all at once from a thread each.
 *
 *   driver-burst PID...
 *
 * Each PID is the first process of a container whose CUDA processes are
 * checkpointed (a GPU standby of thaw that holds nothing: its CUDA state
 * checkpointed and locked).  Its CUDA processes are those of its PID
 * namespace that hold CUDA state.  Each round restores them and checkpoints
 * them back (untimed), so that the containers are standbys again after it
 * and stop as standbys do.  Prints one line per round and "figure:" lines:
 * the single restore (the first container's processes), the serial total,
 * the parallel total and each parallel call.  Then the same from a thread
 * each with the unlock a start makes after its restore (cuda_restore_group,
 * as thawd calls it), and the processes locked and checkpointed back
 * (untimed): a start's whole part of the driver, the floor a burst of
 * starts is judged against.  A standby's process waits for a request and
 * runs nothing on the GPU while unlocked.
 *
 *   driver-burst --copy GIB PID...
 *
 * also copies GIB of pinned host memory to the GPU (as a fill copies: 64 MiB
 * pieces on 16 streams) alone, then beside the burst of restores from a
 * thread of this process (as thawd fills beside the restores it calls), then
 * from a process of its own: how much the restores slow a copy, and whether
 * it is the calling process's driver or the GPU that does.
 */
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_restore.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROCS 64

struct call {
	pid_t pid;
	bool unlock;	   /* restored and unlocked, as a start does */
	double ms;	   /* the call's whole time */
	double restore_ms; /* of which its restore */
	int ret;
	pthread_barrier_t *go;
};

static void *restore_one(void *arg)
{
	struct call *c = arg;
	pid_t failed = 0;
	uint64_t t0;

	pthread_barrier_wait(c->go);
	t0 = now_ns();
	if (c->unlock) {
		c->ret = cuda_restore_group(&c->pid, 1, NULL, 0, &failed, &c->restore_ms);
	} else {
		c->ret = cuda_restore(c->pid, NULL, 0);
		c->restore_ms = ms_since(t0);
	}
	c->ms = ms_since(t0);
	return NULL;
}

/* A copier: len bytes of pinned host memory copied into device memory of
 * GPU 0, on COPY_THREADS streams in 64 MiB pieces, in this process or in a
 * child of its own (made before this process touches the driver). */
#define COPY_PIECE (64ull << 20)
#define COPY_THREADS 16

typedef unsigned long long cu_ptr;
static struct {
	int (*device_get)(int *, int);
	int (*primary_retain)(void **, int);
	int (*ctx_set_current)(void *);
	int (*alloc)(cu_ptr *, size_t);
	int (*host_register)(void *, size_t, unsigned);
	int (*copy)(cu_ptr, const void *, size_t, void *);
	int (*stream_create)(void **, unsigned);
	int (*stream_sync)(void *);
} cu;

struct copier {
	void *ctx;
	char *host;
	cu_ptr dev;
	size_t len;
	void *streams[COPY_THREADS];
	pthread_t thread; /* the in-process copy beside a burst */
	double ms;
	int err;
};

struct copy_slice {
	struct copier *c;
	size_t i;
	int err;
};

static void *copy_slice(void *arg)
{
	struct copy_slice *s = arg;
	struct copier *c = s->c;
	size_t per = (c->len / COPY_THREADS + COPY_PIECE - 1) / COPY_PIECE * COPY_PIECE;
	size_t begin = s->i * per, end = begin + per < c->len ? begin + per : c->len;

	if (cu.ctx_set_current(c->ctx)) {
		s->err = 1;
		return NULL;
	}
	for (size_t off = begin; off < end; off += COPY_PIECE) {
		size_t n = end - off < COPY_PIECE ? end - off : COPY_PIECE;

		s->err |= cu.copy(c->dev + off, c->host + off, n, c->streams[s->i]) != 0;
	}
	s->err |= cu.stream_sync(c->streams[s->i]) != 0;
	return NULL;
}

/* One copy of the whole buffer; c->ms its time. */
static void *copy_once(void *arg)
{
	struct copier *c = arg;
	struct copy_slice s[COPY_THREADS];
	pthread_t th[COPY_THREADS];
	uint64_t t0 = now_ns();

	c->err = 0;
	for (size_t i = 0; i < COPY_THREADS; i++) {
		s[i] = (struct copy_slice){ c, i, 0 };
		if (pthread_create(&th[i], NULL, copy_slice, &s[i])) {
			c->err = 1;
			for (size_t k = 0; k < i; k++)
				pthread_join(th[k], NULL);
			return NULL;
		}
	}
	for (size_t i = 0; i < COPY_THREADS; i++) {
		pthread_join(th[i], NULL);
		c->err |= s[i].err;
	}
	c->ms = ms_since(t0);
	return NULL;
}

static int copier_setup(struct copier *c, size_t len)
{
	int dev;

#define SYM(f, name) (cu.f = (__typeof__(cu.f))cuda_sym(name))
	if (!SYM(device_get, "cuDeviceGet") || !SYM(primary_retain, "cuDevicePrimaryCtxRetain") ||
	    !SYM(ctx_set_current, "cuCtxSetCurrent") || !SYM(alloc, "cuMemAlloc_v2") ||
	    !SYM(host_register, "cuMemHostRegister_v2") || !SYM(copy, "cuMemcpyHtoDAsync_v2") ||
	    !SYM(stream_create, "cuStreamCreate") || !SYM(stream_sync, "cuStreamSynchronize"))
		return -ENOSYS;
#undef SYM
	c->len = len;
	c->host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);
	if (c->host == MAP_FAILED || cu.device_get(&dev, 0) || cu.primary_retain(&c->ctx, dev) ||
	    cu.ctx_set_current(c->ctx) || cu.alloc(&c->dev, len))
		return -ENOMEM;
	memset(c->host, 0x5a, len);
	for (size_t off = 0; off < len; off += COPY_PIECE)
		if (cu.host_register(c->host + off, len - off < COPY_PIECE ? len - off : COPY_PIECE,
				     0))
			return -EIO;
	for (size_t i = 0; i < COPY_THREADS; i++)
		if (cu.stream_create(&c->streams[i], 1))
			return -EIO;
	copy_once(c); /* warm: the first copy maps what the driver maps lazily */
	return c->err ? -EIO : 0;
}

/* The child copier: a byte on cmd copies once and answers its ms (a
 * negative one on failure) on ans; end of file ends it. */
static void copier_child(int cmd, int ans, size_t len)
{
	struct copier c = { 0 };
	double ms = cuda_init() || copier_setup(&c, len) ? -1 : 0;
	char b;

	if (write(ans, &ms, sizeof(ms)) != sizeof(ms) || ms < 0)
		_exit(1);
	while (read(cmd, &b, 1) == 1) {
		copy_once(&c);
		ms = c.err ? -1 : c.ms;
		if (write(ans, &ms, sizeof(ms)) != sizeof(ms))
			_exit(1);
	}
	_exit(0);
}

struct child_copier {
	pid_t pid;
	int cmd, ans;
};

static int child_start(struct child_copier *k, size_t len)
{
	int c[2], a[2];
	double ms;

	if (pipe(c) || pipe(a))
		return -errno;
	k->pid = fork();
	if (k->pid < 0)
		return -errno;
	if (k->pid == 0) {
		close(c[1]);
		close(a[0]);
		copier_child(c[0], a[1], len);
	}
	close(c[0]);
	close(a[1]);
	k->cmd = c[1];
	k->ans = a[0];
	return read(k->ans, &ms, sizeof(ms)) == sizeof(ms) && ms >= 0 ? 0 : -EIO;
}

static double child_copy_wait(struct child_copier *k)
{
	double ms = -1;

	if (read(k->ans, &ms, sizeof(ms)) != sizeof(ms))
		return -1;
	return ms;
}

/* Back to checkpointed (untimed): the next round, and the stop, find them
 * as they were.  An unlocked process is locked first. */
static int checkpoint_back(const pid_t *pids, size_t n)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		enum cuda_proc_state st;

		if (!cuda_process_state(pids[i], &st) && st == CUDA_PROC_RUNNING &&
		    cuda_lock(pids[i], 10000)) {
			fprintf(stderr, "cannot lock %d back: %s\n", (int)pids[i], log_last_error());
			bad = 1;
			continue;
		}
		if (cuda_checkpoint(pids[i])) {
			fprintf(stderr, "cannot checkpoint %d back: %s\n", (int)pids[i],
				log_last_error());
			bad = 1;
		}
	}
	return bad;
}

/* All n at once, a thread each, released together: calls[] gets each
 * call's times; the round's wall time in *wall.  0, or 1 when a call
 * failed. */
/* What copies beside a burst (driver-burst --copy). */
struct beside {
	struct copier *thread;	   /* a thread of this process copies, or */
	struct child_copier *child; /* a process of its own does */
	double copy_ms;		   /* how long the copy took */
};

static int burst(const pid_t *pids, size_t n, bool unlock, struct call *calls, double *wall,
		 struct beside *b)
{
	pthread_t th[MAX_PROCS];
	pthread_barrier_t go;
	size_t started = 0;
	uint64_t t0;
	int bad = 0;

	pthread_barrier_init(&go, NULL, (unsigned)n + 1);
	for (size_t i = 0; i < n; i++) {
		calls[i] = (struct call){ .pid = pids[i], .unlock = unlock, .go = &go };
		if (pthread_create(&th[i], NULL, restore_one, &calls[i])) {
			fprintf(stderr, "no thread\n");
			exit(1); /* the others wait at the barrier: nothing to join */
		}
		started++;
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	if (b && b->thread && pthread_create(&b->thread->thread, NULL, copy_once, b->thread))
		b->thread = NULL;
	if (b && b->child && write(b->child->cmd, "c", 1) != 1)
		b->child = NULL;
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	*wall = ms_since(t0);
	pthread_barrier_destroy(&go);
	if (b && b->thread) {
		pthread_join(b->thread->thread, NULL);
		b->copy_ms = b->thread->err ? -1 : b->thread->ms;
	} else if (b && b->child) {
		b->copy_ms = child_copy_wait(b->child);
	} else if (b) {
		b->copy_ms = -1;
	}
	for (size_t i = 0; i < n; i++)
		if (calls[i].ret) {
			fprintf(stderr, "parallel restore of %d failed: %s\n", (int)calls[i].pid,
				strerror(-calls[i].ret));
			bad = 1;
		}
	return bad;
}

static double worst_of(const struct call *calls, size_t n, bool restore_only)
{
	double w = 0;

	for (size_t i = 0; i < n; i++) {
		double v = restore_only ? calls[i].restore_ms : calls[i].ms;

		if (v > w)
			w = v;
	}
	return w;
}

/* --copy: a copy alone, beside the burst from a thread of this process,
 * beside it from a process of its own; the restores' wall time each time. */
static int copies_beside(const pid_t *pids, size_t n, struct child_copier *child, size_t len)
{
	struct call calls[MAX_PROCS];
	struct copier in = { 0 };
	struct beside b = { 0 };
	double alone_in, alone_child, wall_in, wall_child, copy_in, copy_child;

	if (copier_setup(&in, len)) {
		fprintf(stderr, "no copier in this process\n");
		return 1;
	}
	copy_once(&in);
	alone_in = in.err ? -1 : in.ms;
	alone_child = write(child->cmd, "c", 1) == 1 ? child_copy_wait(child) : -1;
	b.thread = &in;
	if (burst(pids, n, true, calls, &wall_in, &b))
		return 1;
	copy_in = b.copy_ms;
	checkpoint_back(pids, n);
	b = (struct beside){ .child = child };
	if (burst(pids, n, true, calls, &wall_child, &b))
		return 1;
	copy_child = b.copy_ms;
	checkpoint_back(pids, n);
	close(child->cmd);
	waitpid(child->pid, NULL, 0);
	printf("a copy of %.2f GiB alone: %.1f ms (this process), %.1f ms (a process of its own); "
	       "beside %zu restores and unlocks: %.1f ms from this process (restores %.1f ms), "
	       "%.1f ms from its own (restores %.1f ms)\n", len / 1073741824.0, alone_in,
	       alone_child, n, copy_in, wall_in, copy_child, wall_child);
	printf("figure: driver_burst copy_alone_ms %.1f copy_alone_child_ms %.1f\n", alone_in,
	       alone_child);
	printf("figure: driver_burst copy_beside_in_ms %.1f restores_in_ms %.1f\n", copy_in,
	       wall_in);
	printf("figure: driver_burst copy_beside_child_ms %.1f restores_child_ms %.1f\n",
	       copy_child, wall_child);
	return copy_in < 0 || copy_child < 0;
}

int main(int argc, char **argv)
{
	pid_t pids[MAX_PROCS];
	struct call calls[MAX_PROCS], unlocked[MAX_PROCS];
	double one, one_unlock, serial = 0, parallel = 0, parallel_unlock = 0, worst;
	pid_t failed = 0;
	struct child_copier child = { .pid = -1 };
	size_t n = 0, copy_len = 0;
	uint64_t t0;
	int ret = 0;

	if (argc < 2 || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: driver-burst [--copy GIB] PID... (first processes of "
				"containers whose CUDA processes are checkpointed)\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--copy") && argc > 3) {
		copy_len = strtoull(argv[2], NULL, 10) << 30;
		argv += 2;
		argc -= 2;
		/* Before this process touches the driver: a child of a CUDA
		 * process cannot use CUDA. */
		if (!copy_len || child_start(&child, copy_len)) {
			fprintf(stderr, "no copier process\n");
			return 1;
		}
	}
	if (cuda_init()) {
		fprintf(stderr, "no CUDA driver: %s\n", cuda_unavailable_reason());
		return 77;
	}
	for (int a = 1; a < argc; a++) {
		pid_t *members = NULL, *cuda = NULL;
		size_t nm = 0, nc = 0;

		if (pidns_members((pid_t)atoi(argv[a]), &members, &nm) ||
		    cuda_filter_processes(members, nm, &cuda, &nc)) {
			fprintf(stderr, "no CUDA processes for %s\n", argv[a]);
			free(members);
			return 1;
		}
		for (size_t i = 0; i < nc && n < MAX_PROCS; i++) {
			enum cuda_proc_state st;

			if (!cuda_process_state(cuda[i], &st) && st == CUDA_PROC_CHECKPOINTED)
				pids[n++] = cuda[i];
		}
		free(members);
		free(cuda);
	}
	if (!n) {
		fprintf(stderr, "no checkpointed CUDA process among them\n");
		return 1;
	}
	/* One alone. */
	t0 = now_ns();
	if (cuda_restore(pids[0], NULL, 0)) {
		fprintf(stderr, "restore of %d: %s\n", (int)pids[0], log_last_error());
		return 1;
	}
	one = ms_since(t0);
	if (checkpoint_back(pids, 1))
		return 1;
	/* One alone, restored and unlocked as a start does. */
	t0 = now_ns();
	if (cuda_restore_group(pids, 1, NULL, 0, &failed, NULL)) {
		fprintf(stderr, "restore and unlock of %d: %s\n", (int)pids[0], log_last_error());
		return 1;
	}
	one_unlock = ms_since(t0);
	if (checkpoint_back(pids, 1))
		return 1;
	/* One after another. */
	for (size_t i = 0; i < n; i++) {
		t0 = now_ns();
		if (cuda_restore(pids[i], NULL, 0)) {
			fprintf(stderr, "restore of %d: %s\n", (int)pids[i], log_last_error());
			checkpoint_back(pids, i);
			return 1;
		}
		serial += ms_since(t0);
	}
	if (checkpoint_back(pids, n))
		return 1;
	/* All at once, a thread each, released together: the restores alone,
	 * then each restored and unlocked as a start does. */
	if (burst(pids, n, false, calls, &parallel, NULL))
		ret = 1;
	worst = worst_of(calls, n, false);
	if (checkpoint_back(pids, n))
		return 1;
	printf("%zu CUDA processes: one restore %.1f ms; one after another %.1f ms; "
	       "all at once from %zu threads %.1f ms (each call:", n, one, serial, n, parallel);
	for (size_t i = 0; i < n; i++)
		printf(" %.0f", calls[i].ms);
	printf(")\n");
	if (burst(pids, n, true, unlocked, &parallel_unlock, NULL))
		ret = 1;
	checkpoint_back(pids, n);
	printf("one restored and unlocked %.1f ms; %zu restored and unlocked from %zu threads "
	       "%.1f ms (each call, restore+unlock:", one_unlock, n, n, parallel_unlock);
	for (size_t i = 0; i < n; i++)
		printf(" %.0f+%.0f", unlocked[i].restore_ms, unlocked[i].ms - unlocked[i].restore_ms);
	printf(")\n");
	if (copy_len)
		ret |= copies_beside(pids, n, &child, copy_len);
	printf("figure: driver_burst processes %zu\n", n);
	printf("figure: driver_burst one_ms %.1f\n", one);
	printf("figure: driver_burst serial_ms %.1f\n", serial);
	printf("figure: driver_burst parallel_ms %.1f\n", parallel);
	printf("figure: driver_burst parallel_worst_call_ms %.1f\n", worst);
	printf("figure: driver_burst one_unlock_ms %.1f\n", one_unlock);
	printf("figure: driver_burst parallel_unlock_ms %.1f\n", parallel_unlock);
	printf("figure: driver_burst parallel_unlock_worst_restore_ms %.1f\n",
	       worst_of(unlocked, n, true));
	return ret;
}
