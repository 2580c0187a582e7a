/* SPDX-License-Identifier: Apache-2.0 */
/* gpumem_test.h — what test_gpumem, test_gpumem_faults and test_tier_fill share: the fake
 * driver (test/cuda_mock.c) built as libcuda.so.1 in a directory of the
 * test's own, test/fixtures/gpumem_app.c built against it, the app run
 * with libthaw-cuda.so preloaded and driven a command at a time, thawd's
 * side run in a child that loads the fake driver, and the meta of the
 * app's snapshot.  Static functions: each test includes it once.
 */
#ifndef THAW_TEST_GPUMEM_TEST_H
#define THAW_TEST_GPUMEM_TEST_H

#include "common/gpumem.h"
#include "function/snapshot_meta.h"
#include "test/check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)

struct app {
	pid_t pid;
	FILE *in, *out;
};

/* The test's directory (the fake driver, the app), the library's out
 * directory in it, and the library. */
static char dir[] = "/tmp/thaw-gpumem.XXXXXX", outdir[256], lib[1024];

/* Run prog [arg] with LD_PRELOAD=preload (none if NULL) and each
 * "NAME=VALUE" of env (NULL-terminated, or NULL) on top of the library's
 * usual environment; returns once it said "ready". */
static void __attribute__((unused))
app_start_with(struct app *a, const char *prog, const char *arg, const char *preload,
	       const char *const *env)
{
	int to[2], from[2];
	char line[64];

	REQUIRE(pipe(to) == 0 && pipe(from) == 0);
	a->pid = fork();
	REQUIRE(a->pid >= 0);
	if (a->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		setenv("LD_LIBRARY_PATH", dir, 1);
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		setenv(GPUMEM_ENV_OUT, outdir, 1);
		setenv(GPUMEM_ENV_IN, outdir, 1);
		setenv("MOCK_CUDA_HTOD_DELAY_MS", "100", 1);
		for (size_t i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execl(prog, prog, arg, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	a->in = fdopen(to[1], "w");
	a->out = fdopen(from[0], "r");
	setvbuf(a->in, NULL, _IOLBF, 0);
	REQUIRE(fgets(line, sizeof(line), a->out));
	REQUIRE(!strcmp(line, "ready\n"));
}

static void __attribute__((unused))
app_start(struct app *a, const char *prog, const char *arg, bool preload)
{
	app_start_with(a, prog, arg, preload ? lib : NULL, NULL);
}

static void __attribute__((unused)) ask(struct app *a, const char *cmd, char *answer, size_t len)
{
	fprintf(a->in, "%s\n", cmd);
	fflush(a->in);
	answer[0] = '\0';
	if (fgets(answer, (int)len, a->out))
		answer[strcspn(answer, "\n")] = '\0';
}

/* Calls the app's background thread has finished. */
static unsigned long __attribute__((unused)) count(struct app *a)
{
	char s[64];

	ask(a, "count", s, sizeof(s));
	return strtoul(s, NULL, 10);
}

/* The fake driver's live physical, plain and mapped bytes, in the app. */
static void __attribute__((unused))
mem(struct app *a, unsigned long long *phys, unsigned long long *plain, unsigned long long *mapped)
{
	char s[256];

	ask(a, "mem", s, sizeof(s));
	REQUIRE(sscanf(s, "%llu %llu %llu", phys, plain, mapped) == 3);
}

static void __attribute__((unused)) app_end(struct app *a)
{
	int st;

	fprintf(a->in, "quit\n");
	fclose(a->in);
	fclose(a->out);
	if (waitpid(a->pid, &st, 0) == a->pid)
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The meta of a snapshot of one process (ns, in its container) whose
 * device memory the library saved, on one fake GPU (uuid): m->meta, which
 * points into *m. */
struct mock_snapshot {
	struct snapshot_gpu gpu;
	pid_t ns;
	struct snapshot_meta meta;
};

static void __attribute__((unused))
mock_snapshot_init(struct mock_snapshot *m, const char *uuid, pid_t ns)
{
	memset(m, 0, sizeof(*m));
	m->gpu = (struct snapshot_gpu){ .uuid = uuid, .index = -1 };
	m->ns = ns;
	m->meta = (struct snapshot_meta){ .gpus = &m->gpu, .ngpus = 1,
					  .gpu_memory = { .recorded = true, .thaw = true,
							  .ns_pids = &m->ns, .nns_pids = 1 } };
}

/* thawd's side (common/cuda.c) opens libcuda.so.1 by name: run this test
 * (self) again in a child with the fake driver on its library path, as
 * "self flag <dir> app <lib>" (gpumem_thawd_args reads it), NVML's free
 * memory set for placements; its exit is checked. */
static void __attribute__((unused))
gpumem_thawd_child(const char *self, const char *flag, const char *app)
{
	char ld[1400];
	pid_t pid;
	int st;

	snprintf(ld, sizeof(ld), "%s%s%s", dir, getenv("LD_LIBRARY_PATH") ? ":" : "",
		 getenv("LD_LIBRARY_PATH") ?: "");
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		setenv("LD_LIBRARY_PATH", ld, 1);
		setenv("MOCK_NVML_FREE_MIB", "1000,1000", 1);
		unsetenv("THAW_NO_GPU");
		execl(self, self, flag, dir, app, lib, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* In that child (argv[1] is flag): the test's directories and library as
 * the parent had them; the app's path.  NULL in the parent. */
static __attribute__((unused)) const char *gpumem_thawd_args(int argc, char **argv,
								     const char *flag)
{
	if (argc != 5 || strcmp(argv[1], flag))
		return NULL;
	snprintf(dir, sizeof(dir), "%s", argv[2]);
	snprintf(outdir, sizeof(outdir), "%s/out", dir);
	snprintf(lib, sizeof(lib), "%s", argv[4]);
	return argv[3];
}

/* The test's directory made, the fake driver and the app built into it
 * (app: its path); skips where there is no library or no compiler. */
static void __attribute__((unused)) gpumem_test_setup(char *app, size_t len)
{
	const char *root = getenv("THAW_ROOT"), *build = getenv("THAW_BUILD");
	char c[4096];

	root = root && *root ? root : ".";
	snprintf(lib, sizeof(lib), "%s/libthaw-cuda.so", build && *build ? build : "build");
	if (access(lib, R_OK))
		SKIP("no libthaw-cuda.so built");
	if (system("command -v ${CC:-cc} >/dev/null"))
		SKIP("no compiler for the fake driver");
	REQUIRE(mkdtemp(dir));
	snprintf(outdir, sizeof(outdir), "%s/out", dir);
	REQUIRE(mkdir(outdir, 0755) == 0);
	snprintf(app, len, "%s/app", dir);
	snprintf(c, sizeof(c),
		 "${CC:-cc} -shared -fPIC -O1 -o %s/libcuda.so.1 %s/test/cuda_mock.c && "
		 "ln -s libcuda.so.1 %s/libnvidia-ml.so.1",
		 dir, root, dir);
	REQUIRE(system(c) == 0);
	snprintf(c, sizeof(c),
		 "${CC:-cc} -O1 -o %s %s/test/fixtures/gpumem_app.c -L%s -l:libcuda.so.1 "
		 "-Wl,-rpath,%s -ldl -lpthread",
		 app, root, dir, dir);
	REQUIRE(system(c) == 0);
}

#endif
