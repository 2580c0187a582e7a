/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpumem_gpu.c — libthaw-cuda on a real GPU, without containers: a
 * PyTorch process (test/fixtures/gpumem_torch.py) with the library
 * preloaded is saved (SAVE), checkpointed and restored by the driver, and
 * copied back (RESTORE); its tensors must checksum as before and its
 * worker thread must go on.  The same process without the library is the
 * baseline, in the same run: the driver carries all of its memory.
 * Cases: the default allocator, expandable segments, a background thread
 * launching work throughout, and (THAW_GPUMEM_GIB, default 16) a large one.
 * Prints "figure:" lines.  Exit 77 without a GPU or without torch.
 */
#include "common/cuda.h"
#include "common/gpumem.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct proc {
	pid_t pid;
	FILE *in, *out;
};

/* On tmpfs, as the RAM tier is: the copy back reads its page cache. */
static char dir[] = "/dev/shm/thaw-gpumem-gpu.XXXXXX", lib[1024], script[1024];

static int spawn(struct proc *p, bool preload, const char *alloc_conf, double gib, bool worker)
{
	int to[2], from[2];
	char line[256], g[32];

	REQUIRE(pipe(to) == 0 && pipe(from) == 0);
	p->pid = fork();
	REQUIRE(p->pid >= 0);
	if (p->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		if (preload)
			setenv("LD_PRELOAD", lib, 1);
		setenv(GPUMEM_ENV_OUT, dir, 1);
		setenv(GPUMEM_ENV_IN, dir, 1);
		if (alloc_conf)
			setenv("PYTORCH_CUDA_ALLOC_CONF", alloc_conf, 1);
		snprintf(g, sizeof(g), "%g", gib);
		if (worker)
			execlp("python3", "python3", script, "--gib", g, "--worker", (char *)NULL);
		else
			execlp("python3", "python3", script, "--gib", g, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	p->in = fdopen(to[1], "w");
	p->out = fdopen(from[0], "r");
	if (!fgets(line, sizeof(line), p->out) || strcmp(line, "ready\n"))
		return -1;
	return 0;
}

static void ask(struct proc *p, const char *cmd, char *ans, size_t len)
{
	fprintf(p->in, "%s\n", cmd);
	fflush(p->in);
	ans[0] = '\0';
	if (fgets(ans, (int)len, p->out))
		ans[strcspn(ans, "\n")] = '\0';
}

static void end(struct proc *p)
{
	int st;

	fprintf(p->in, "quit\n");
	fclose(p->in);
	fclose(p->out);
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
}

/* One case: with the library (thaw) or without (driver). */
static void run_case(const char *name, const char *alloc_conf, double gib, bool worker, bool thaw)
{
	struct gpumem_status st = { 0 }, rs = { 0 };
	char before[256], after[256], c1[64], c2[64], why[512];
	double save_ms = 0, lock_ms, ckpt_ms, restore_ms, unlock_ms, copy_ms = 0;
	size_t moved = 0;
	uint64_t t;
	struct proc p;

	if (spawn(&p, thaw, alloc_conf, gib, worker)) {
		fprintf(stderr, "%s: the PyTorch process did not start\n", name);
		check_failures++;
		return;
	}
	ask(&p, "sum", before, sizeof(before));
	if (thaw) {
		CHECK(gpumem_loaded(p.pid));
		t = now_ns();
		CHECK_EQ(gpumem_save_all(&p.pid, &p.pid, 1, dir, 600000, &st, &moved, why,
					 sizeof(why)),
			 0);
		save_ms = ms_since(t);
		CHECK_EQ(moved, 1);
		if (!moved)
			fprintf(stderr, "%s: nothing moved: %s\n", name, why);
	}
	t = now_ns();
	CHECK_EQ(cuda_lock(p.pid, 30000), 0);
	lock_ms = ms_since(t);
	t = now_ns();
	CHECK_EQ(cuda_checkpoint(p.pid), 0);
	ckpt_ms = ms_since(t);
	t = now_ns();
	CHECK_EQ(cuda_restore(p.pid, NULL, 0), 0);
	restore_ms = ms_since(t);
	t = now_ns();
	CHECK_EQ(cuda_unlock(p.pid), 0);
	unlock_ms = ms_since(t);
	if (thaw && moved) {
		t = now_ns();
		CHECK_EQ(gpumem_request(&p.pid, &p.pid, 1, GPUMEM_OP_RESTORE, dir, 600000, &rs), 0);
		copy_ms = ms_since(t);
		CHECK(rs.ok);
		if (!rs.ok)
			fprintf(stderr, "%s: restore: %s\n", name, rs.error);
		gpumem_release(&p.pid, 1);
	}
	ask(&p, "sum", after, sizeof(after));
	CHECK_STR(after, before);
	if (worker) {
		ask(&p, "count", c1, sizeof(c1));
		usleep(300000);
		ask(&p, "count", c2, sizeof(c2));
		CHECK(atol(c2) > atol(c1));
	}
	printf("%s %s: sum %s -> %s\n", name, thaw ? "thaw" : "driver", before, after);
	printf("figure: gpumem %s %s moved_bytes %llu left_bytes %llu save_ms %.1f lock_ms %.1f "
	       "driver_checkpoint_ms %.1f driver_restore_ms %.1f unlock_ms %.1f copy_ms %.1f "
	       "gpu_back_ms %.1f copy_threads %d pinned %d register_error %s lib_copy_ms %.1f "
	       "lib_map_ms %.1f GBps %.1f populate_ms %.1f register_ms %.1f\n",
	       name, thaw ? "thaw" : "driver", (unsigned long long)st.bytes,
	       (unsigned long long)st.left_bytes, save_ms, lock_ms, ckpt_ms, restore_ms, unlock_ms,
	       copy_ms, restore_ms + unlock_ms + copy_ms, rs.copy_threads, rs.pinned_slices,
	       rs.register_error[0] ? rs.register_error : "-", rs.copy_ms, rs.map_ms,
	       rs.copy_ms > 0 ? rs.bytes / rs.copy_ms / 1e6 : 0.0, rs.populate_ms, rs.register_ms);
	fflush(stdout);
	end(&p);
}

int main(void)
{
	const char *root = getenv("THAW_ROOT"), *build = getenv("THAW_BUILD");
	const char *big = getenv("THAW_GPUMEM_GIB");
	double gib = big && *big ? atof(big) : 16;

	root = root && *root ? root : ".";
	snprintf(lib, sizeof(lib), "%s/libthaw-cuda.so", build && *build ? build : "build");
	snprintf(script, sizeof(script), "%s/test/fixtures/gpumem_torch.py", root);
	if (cuda_init() || !cuda_checkpoint_supported())
		SKIP("no GPU with the checkpoint API");
	if (system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'"
		   " 2>/dev/null"))
		SKIP("no PyTorch with CUDA");
	if (access(lib, R_OK))
		SKIP("no libthaw-cuda.so built");
	REQUIRE(mkdtemp(dir));
	run_case("default", NULL, 2, false, true);
	run_case("expandable", "expandable_segments:True", 2, false, true);
	run_case("worker", NULL, 2, true, true);
	run_case("worker-expandable", "expandable_segments:True", 2, true, true);
	if (gib > 0) {
		run_case("large", NULL, gib, false, true);
		/* As in a container, where the tier is bound read-only. */
		setenv("THAW_GPUMEM_READ_ONLY", "1", 1);
		run_case("large-ro", NULL, gib, false, true);
		unsetenv("THAW_GPUMEM_READ_ONLY");
		run_case("large", NULL, gib, false, false);
	}
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
