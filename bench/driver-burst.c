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
 */
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_restore.h"

#include <errno.h>
#include <pthread.h>
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
static int burst(const pid_t *pids, size_t n, bool unlock, struct call *calls, double *wall)
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
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	*wall = ms_since(t0);
	pthread_barrier_destroy(&go);
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

int main(int argc, char **argv)
{
	pid_t pids[MAX_PROCS];
	struct call calls[MAX_PROCS], unlocked[MAX_PROCS];
	double one, one_unlock, serial = 0, parallel = 0, parallel_unlock = 0, worst;
	pid_t failed = 0;
	size_t n = 0;
	uint64_t t0;
	int ret = 0;

	if (argc < 2 || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: driver-burst PID... (first processes of containers whose "
				"CUDA processes are checkpointed)\n");
		return argc < 2 ? 2 : 0;
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
	if (burst(pids, n, false, calls, &parallel))
		ret = 1;
	worst = worst_of(calls, n, false);
	if (checkpoint_back(pids, n))
		return 1;
	printf("%zu CUDA processes: one restore %.1f ms; one after another %.1f ms; "
	       "all at once from %zu threads %.1f ms (each call:", n, one, serial, n, parallel);
	for (size_t i = 0; i < n; i++)
		printf(" %.0f", calls[i].ms);
	printf(")\n");
	if (burst(pids, n, true, unlocked, &parallel_unlock))
		ret = 1;
	checkpoint_back(pids, n);
	printf("one restored and unlocked %.1f ms; %zu restored and unlocked from %zu threads "
	       "%.1f ms (each call, restore+unlock:", one_unlock, n, n, parallel_unlock);
	for (size_t i = 0; i < n; i++)
		printf(" %.0f+%.0f", unlocked[i].restore_ms, unlocked[i].ms - unlocked[i].restore_ms);
	printf(")\n");
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
