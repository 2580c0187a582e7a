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
#include "restore/gpu_prefill_cuda.h"
#include "restore/gpu_restore.h"

#include <errno.h>
#include <pthread.h>
#include <poll.h>
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
 * GPU 0 on COPY_THREADS streams in 64 MiB pieces, as a fill copies, over
 * and over until told to stop: each round makes its streams (as a fill's
 * threads do) and copies.  In this process or in a child of its own (made
 * before this process touches the driver). */
#define COPY_PIECE (64ull << 20)
#define COPY_THREADS 16
#define COPY_ROUNDS 512

/* The fill's entry points (restore/gpu_prefill_cuda.h), and the one
 * allocation this bench makes for itself. */
static cu_fn_cuMemAlloc_v2 *mem_alloc;

/* What a run of rounds measured. */
struct copy_figures {
	int rounds;
	double worst_ms, median_ms; /* a round: streams made and the copy */
	double worst_streams_ms;    /* of which making the streams */
	int err;
};

struct copier {
	cu_ctx ctx;
	char *host;
	cu_ptr dev;
	size_t len;
	pthread_t thread; /* the in-process copier beside a burst */
	_Atomic int stop;
	struct copy_figures f;
};

struct copy_slice {
	struct copier *c;
	size_t i;
	double streams_ms;
	int err;
};

static void *copy_slice(void *arg)
{
	struct copy_slice *s = arg;
	struct copier *c = s->c;
	size_t per = (c->len / COPY_THREADS + COPY_PIECE - 1) / COPY_PIECE * COPY_PIECE;
	size_t begin = s->i * per, end = begin + per < c->len ? begin + per : c->len;
	uint64_t t0 = now_ns();
	cu_stream st = NULL;

	if (prefill_cu.ctx_set_current(c->ctx) || prefill_cu.stream_create(&st, 1)) {
		s->err = 1;
		return NULL;
	}
	s->streams_ms = ms_since(t0);
	for (size_t off = begin; off < end; off += COPY_PIECE) {
		size_t n = end - off < COPY_PIECE ? end - off : COPY_PIECE;

		s->err |= prefill_cu.copy(c->dev + off, c->host + off, n, st) != 0;
	}
	s->err |= prefill_cu.stream_sync(st) != 0;
	prefill_cu.stream_destroy(st);
	return NULL;
}

/* One round: *streams_ms the slowest thread's stream making.  Its time, or
 * -1. */
static double copy_round(struct copier *c, double *streams_ms)
{
	struct copy_slice s[COPY_THREADS];
	pthread_t th[COPY_THREADS];
	uint64_t t0 = now_ns();
	int err = 0;

	*streams_ms = 0;
	for (size_t i = 0; i < COPY_THREADS; i++) {
		s[i] = (struct copy_slice){ c, i, 0, 0 };
		if (pthread_create(&th[i], NULL, copy_slice, &s[i])) {
			for (size_t k = 0; k < i; k++)
				pthread_join(th[k], NULL);
			return -1;
		}
	}
	for (size_t i = 0; i < COPY_THREADS; i++) {
		pthread_join(th[i], NULL);
		err |= s[i].err;
		*streams_ms = s[i].streams_ms > *streams_ms ? s[i].streams_ms : *streams_ms;
	}
	return err ? -1 : ms_since(t0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Rounds until stop() says so (at least one); figures into f. */
static void copy_rounds(struct copier *c, bool (*stop)(void *), void *arg, struct copy_figures *f)
{
	static double ms[COPY_ROUNDS];
	double streams;

	*f = (struct copy_figures){ 0 };
	do {
		double r = copy_round(c, &streams);

		if (r < 0) {
			f->err = 1;
			return;
		}
		ms[f->rounds++] = r;
		f->worst_ms = r > f->worst_ms ? r : f->worst_ms;
		f->worst_streams_ms = streams > f->worst_streams_ms ? streams : f->worst_streams_ms;
	} while (f->rounds < COPY_ROUNDS && !stop(arg));
	qsort(ms, (size_t)f->rounds, sizeof(ms[0]), cmp_double);
	f->median_ms = ms[(f->rounds - 1) / 2];
}

static bool stop_once(void *arg)
{
	return true;
}

static bool stop_flag(void *arg)
{
	return ((struct copier *)arg)->stop != 0;
}

static void *copy_beside(void *arg)
{
	struct copier *c = arg;

	copy_rounds(c, stop_flag, c, &c->f);
	return NULL;
}

static int copier_setup(struct copier *c, size_t len)
{
	struct copy_figures f;
	int dev;

	mem_alloc = (cu_fn_cuMemAlloc_v2 *)cuda_sym("cuMemAlloc_v2");
	if (!prefill_driver_load() || !mem_alloc)
		return -ENOSYS;
	c->len = len;
	c->host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);
	if (c->host == MAP_FAILED || prefill_cu.device_get(&dev, 0) || prefill_cu.primary_retain(&c->ctx, dev) ||
	    prefill_cu.ctx_set_current(c->ctx) || mem_alloc(&c->dev, len))
		return -ENOMEM;
	memset(c->host, 0x5a, len);
	for (size_t off = 0; off < len; off += COPY_PIECE)
		if (prefill_cu.host_register(c->host + off, len - off < COPY_PIECE ? len - off : COPY_PIECE,
				     0))
			return -EIO;
	copy_rounds(c, stop_once, NULL, &f); /* warm: what the driver maps lazily */
	return f.err ? -EIO : 0;
}

/* The child copier: a byte on cmd starts rounds, the next byte stops them
 * (or, sent at once, makes one round); the figures come back on ans.  End of
 * file ends it. */
static bool stop_on_byte(void *arg)
{
	struct pollfd p = { .fd = *(int *)arg, .events = POLLIN };
	char b;

	return poll(&p, 1, 0) > 0 && read(p.fd, &b, 1) == 1;
}

static void copier_child(int cmd, int ans, size_t len)
{
	struct copier c = { 0 };
	struct copy_figures f = { .err = cuda_init() || copier_setup(&c, len) };
	char b;

	if (write(ans, &f, sizeof(f)) != sizeof(f) || f.err)
		_exit(1);
	while (read(cmd, &b, 1) == 1) {
		copy_rounds(&c, stop_on_byte, &cmd, &f);
		if (write(ans, &f, sizeof(f)) != sizeof(f))
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
	struct copy_figures f = { .err = 1 };
	int c[2], a[2];

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
	return read(k->ans, &f, sizeof(f)) == sizeof(f) && !f.err ? 0 : -EIO;
}

static struct copy_figures child_figures(struct child_copier *k)
{
	struct copy_figures f = { .err = 1 };

	if (read(k->ans, &f, sizeof(f)) != sizeof(f))
		f.err = 1;
	return f;
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
	struct copy_figures f;	   /* its rounds while the burst ran */
};

static int burst(const pid_t *pids, size_t n, bool unlock, struct call *calls, double *wall,
		 struct beside *b)
{
	pthread_t th[MAX_PROCS];
	pthread_barrier_t go;
	uint64_t t0;
	int bad = 0;

	pthread_barrier_init(&go, NULL, (unsigned)n + 1);
	for (size_t i = 0; i < n; i++) {
		calls[i] = (struct call){ .pid = pids[i], .unlock = unlock, .go = &go };
		if (pthread_create(&th[i], NULL, restore_one, &calls[i])) {
			fprintf(stderr, "no thread\n");
			exit(1); /* the others wait at the barrier: nothing to join */
		}
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	if (b && b->thread) {
		b->thread->stop = 0;
		if (pthread_create(&b->thread->thread, NULL, copy_beside, b->thread))
			b->thread = NULL;
	}
	if (b && b->child && write(b->child->cmd, "c", 1) != 1)
		b->child = NULL;
	for (size_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	*wall = ms_since(t0);
	pthread_barrier_destroy(&go);
	if (b && b->thread) {
		b->thread->stop = 1;
		pthread_join(b->thread->thread, NULL);
		b->f = b->thread->f;
	} else if (b && b->child) {
		b->f = write(b->child->cmd, "s", 1) == 1 ? child_figures(b->child) :
							    (struct copy_figures){ .err = 1 };
	} else if (b) {
		b->f = (struct copy_figures){ .err = 1 };
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

/* --copy: copies alone, beside the burst from a thread of this process,
 * beside it from a process of its own; the restores' wall time each time. */
static void print_copies(const char *what, const struct copy_figures *f)
{
	printf("%s: %d round(s), median %.1f ms, worst %.1f ms (making streams at worst %.1f ms)%s\n",
	       what, f->rounds, f->median_ms, f->worst_ms, f->worst_streams_ms,
	       f->err ? ", FAILED" : "");
}

static int copies_beside(const pid_t *pids, size_t n, struct child_copier *child, size_t len)
{
	struct call calls[MAX_PROCS];
	struct copier in = { 0 };
	struct beside b = { 0 };
	struct copy_figures alone, alone_child = { .err = 1 }, f_in, f_child;
	double wall_in, wall_child;
	char b1 = 'c', b2 = 's';

	if (copier_setup(&in, len)) {
		fprintf(stderr, "no copier in this process\n");
		return 1;
	}
	copy_rounds(&in, stop_once, NULL, &alone);
	if (write(child->cmd, &b1, 1) == 1 && write(child->cmd, &b2, 1) == 1)
		alone_child = child_figures(child);
	b.thread = &in;
	if (burst(pids, n, true, calls, &wall_in, &b))
		return 1;
	f_in = b.f;
	checkpoint_back(pids, n);
	b = (struct beside){ .child = child };
	if (burst(pids, n, true, calls, &wall_child, &b))
		return 1;
	f_child = b.f;
	checkpoint_back(pids, n);
	close(child->cmd);
	waitpid(child->pid, NULL, 0);
	printf("copies of %.2f GiB, streams made each round as a fill makes them:\n",
	       len / 1073741824.0);
	print_copies("  alone, this process", &alone);
	print_copies("  alone, a process of its own", &alone_child);
	print_copies("  beside 8 restores and unlocks, this process", &f_in);
	printf("    (the restores and unlocks took %.1f ms)\n", wall_in);
	print_copies("  beside 8 restores and unlocks, a process of its own", &f_child);
	printf("    (the restores and unlocks took %.1f ms)\n", wall_child);
	printf("figure: driver_burst copy_alone_ms %.1f copy_alone_child_ms %.1f\n", alone.median_ms,
	       alone_child.median_ms);
	printf("figure: driver_burst copy_beside_in_worst_ms %.1f copy_beside_in_median_ms %.1f "
	       "streams_in_worst_ms %.1f restores_in_ms %.1f\n", f_in.worst_ms, f_in.median_ms,
	       f_in.worst_streams_ms, wall_in);
	printf("figure: driver_burst copy_beside_child_worst_ms %.1f copy_beside_child_median_ms "
	       "%.1f streams_child_worst_ms %.1f restores_child_ms %.1f\n", f_child.worst_ms,
	       f_child.median_ms, f_child.worst_streams_ms, wall_child);
	return f_in.err || f_child.err;
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
