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
 * the parallel total and each parallel call.  No unlock: the restores are
 * what is measured, and a locked process runs nothing on the GPU.
 */
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/gpu_restore.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROCS 64

struct call {
	pid_t pid;
	double ms;
	int ret;
	pthread_barrier_t *go;
};

static void *restore_one(void *arg)
{
	struct call *c = arg;
	uint64_t t0;

	pthread_barrier_wait(c->go);
	t0 = now_ns();
	c->ret = cuda_restore(c->pid, NULL, 0);
	c->ms = ms_since(t0);
	return NULL;
}

/* Back to checkpointed (untimed): the next round, and the stop, find them
 * as they were. */
static int checkpoint_back(const pid_t *pids, size_t n)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++)
		if (cuda_checkpoint(pids[i])) {
			fprintf(stderr, "cannot checkpoint %d back: %s\n", (int)pids[i],
				log_last_error());
			bad = 1;
		}
	return bad;
}

int main(int argc, char **argv)
{
	pid_t pids[MAX_PROCS];
	struct call calls[MAX_PROCS];
	pthread_t th[MAX_PROCS];
	pthread_barrier_t go;
	double one, serial = 0, parallel, worst = 0;
	size_t n = 0;
	uint64_t t0;

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
	/* All at once, a thread each, released together. */
	pthread_barrier_init(&go, NULL, (unsigned)n + 1);
	for (size_t i = 0; i < n; i++) {
		calls[i] = (struct call){ .pid = pids[i], .go = &go };
		if (pthread_create(&th[i], NULL, restore_one, &calls[i])) {
			fprintf(stderr, "no thread\n");
			return 1;
		}
	}
	pthread_barrier_wait(&go);
	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	parallel = ms_since(t0);
	for (size_t i = 0; i < n; i++) {
		if (calls[i].ret)
			fprintf(stderr, "parallel restore of %d failed\n", (int)calls[i].pid);
		if (calls[i].ms > worst)
			worst = calls[i].ms;
	}
	checkpoint_back(pids, n);
	printf("%zu CUDA processes: one restore %.1f ms; one after another %.1f ms; "
	       "all at once from %zu threads %.1f ms (each call:", n, one, serial, n, parallel);
	for (size_t i = 0; i < n; i++)
		printf(" %.0f", calls[i].ms);
	printf(")\n");
	printf("figure: driver_burst processes %zu\n", n);
	printf("figure: driver_burst one_ms %.1f\n", one);
	printf("figure: driver_burst serial_ms %.1f\n", serial);
	printf("figure: driver_burst parallel_ms %.1f\n", parallel);
	printf("figure: driver_burst parallel_worst_call_ms %.1f\n", worst);
	return 0;
}
