/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpumem_faults.c — libthaw-cuda (interpose/) where things fail, on the
 * fake driver (test/cuda_mock.c), with test/fixtures/gpumem_app.c as the
 * function and this program as thawd (test/gpumem_test.h).  Each case is a
 * fault the library had, and what it must do instead:
 *   calloc_fails   a copy back whose bookkeeping cannot be allocated still
 *                  copies every byte (it skipped the copy and said ok);
 *   signal_env     a function whose environment has THAW_GPUMEM_SIGNAL is
 *                  saved like any other (the library took its signal from
 *                  it, thawd did not: thawd's signal killed the function);
 *   handler_errno  the library's signal handler leaves errno as it found
 *                  it (its answer's failed open changed it under the
 *                  function's feet);
 *   access_many    a mapping given access for more locations than the
 *                  library records comes back with all of them, or is left
 *                  to the driver (past 8, they were dropped silently);
 *   retain_twice   a VMM handle the function retained holds its memory by
 *                  two references: a save gives both back, a copy back
 *                  takes both again, and the function's two releases reach
 *                  the driver's handle (the second reached it with the
 *                  function's stale value);
 *   rollback       a save that fails halfway maps back what it unmapped and
 *                  lets the function go on; where that fails too, the
 *                  function stays held and thawd is told (the rollback
 *                  ignored its own failures and let the function run on
 *                  unmapped memory).
 */
#include "common/gpumem.h"
#include "common/util.h"
#include "test/check.h"
#include "test/gpumem_test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char app[512];

static void touch(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	REQUIRE(f != NULL);
	fputs(text, f);
	fclose(f);
}

/* The app's allocations all hold their patterns: "ok" (the app prints a
 * line for each one that does not, then "bad"). */
static bool verified(struct app *a)
{
	char s[256];

	ask(a, "verify", s, sizeof(s));
	while (strcmp(s, "ok") && strcmp(s, "bad") && s[0]) {
		fprintf(stderr, "app: %s\n", s);
		if (!fgets(s, sizeof(s), a->out))
			break;
		s[strcspn(s, "\n")] = '\0';
	}
	return !strcmp(s, "ok");
}

static int save(struct app *a, struct gpumem_status *st)
{
	char why[512];
	size_t moved;

	return gpumem_save_all(&a->pid, &a->pid, 1, outdir, 30000, st, &moved, why, sizeof(why));
}

static int restore(struct app *a, struct gpumem_status *st)
{
	return gpumem_request(&a->pid, &a->pid, 1, GPUMEM_OP_RESTORE, outdir, 30000, st);
}

/* The slices' record of what they pinned cannot be allocated: nothing is
 * pinned (nothing could be unpinned), every byte is copied all the same. */
static void calloc_fails(void)
{
	char preload[2200], armed[600], env_armed[700];
	const char *env[] = { env_armed, NULL };
	struct gpumem_status st;
	struct app a;

	snprintf(armed, sizeof(armed), "%s/failalloc.on", dir);
	snprintf(env_armed, sizeof(env_armed), "FAILALLOC_FILE=%s", armed);
	snprintf(preload, sizeof(preload), "%s/failalloc.so:%s", dir, lib);
	app_start_with(&a, app, NULL, preload, env);
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 6);
	touch(armed, "");
	CHECK_EQ(restore(&a, &st), 0);
	unlink(armed);
	CHECK(st.ok);
	CHECK_EQ(st.allocs, 6);
	CHECK(st.copy_threads >= 1 && st.pinned_slices == 0);
	CHECK(verified(&a));
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* THAW_GPUMEM_SIGNAL in the function's environment changes nothing. */
static void signal_env(void)
{
	const char *env[] = { "THAW_GPUMEM_SIGNAL=50", NULL };
	struct gpumem_status st;
	struct app a;

	app_start_with(&a, app, NULL, lib, env);
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 6);
	CHECK_EQ(restore(&a, &st), 0);
	CHECK(st.ok);
	CHECK(verified(&a));
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* Whether signal sig is pending for pid (its thread or the process). */
static bool pending(pid_t pid, int sig)
{
	char path[64], line[256];
	bool is = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "SigPnd:", 7) || !strncmp(line, "ShdPnd:", 7))
			is |= (strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1;
	if (f)
		fclose(f);
	return is;
}

/* thaw's signal comes while the function's errno holds a value, and the
 * handler's own answer fails (its directory is not there). */
static void handler_errno(void)
{
	char gone[600], env_out[700], env_in[700], s[64];
	const char *env[] = { env_out, env_in, NULL };
	union sigval v = { .sival_int = GPUMEM_VALUE(GPUMEM_OP_SAVE, 1) };
	struct app a;

	snprintf(gone, sizeof(gone), "%s/no-such-dir", dir);
	snprintf(env_out, sizeof(env_out), GPUMEM_ENV_OUT "=%s", gone);
	snprintf(env_in, sizeof(env_in), GPUMEM_ENV_IN "=%s", gone);
	app_start_with(&a, app, "nocuda", lib, env);
	ask(&a, "errno", s, sizeof(s));
	REQUIRE(!strcmp(s, "spinning"));
	REQUIRE(sigqueue(a.pid, GPUMEM_SIGNAL, v) == 0);
	/* Handled once it is no longer pending (generous: a loaded host). */
	for (int i = 0; i < 3000 && pending(a.pid, GPUMEM_SIGNAL); i++)
		usleep(10000);
	CHECK(!pending(a.pid, GPUMEM_SIGNAL));
	kill(a.pid, SIGUSR1);
	REQUIRE(fgets(s, sizeof(s), a.out));
	s[strcspn(s, "\n")] = '\0';
	CHECK_STR(s, "kept");
	app_end(&a);
}

/* The locations the app's access allocation has access for. */
static int access_count(struct app *a)
{
	char s[64];

	ask(a, "access-count", s, sizeof(s));
	return atoi(s);
}

/* Access for 9 locations (as many devices as a host has, and a peer of
 * each), then for more than any host has GPUs. */
static void access_many(void)
{
	struct gpumem_status st;
	char s[64];
	struct app a;

	app_start(&a, app, NULL, true);
	ask(&a, "access 9", s, sizeof(s));
	REQUIRE(!strcmp(s, "ok"));
	CHECK_EQ(access_count(&a), 9);
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 7);
	CHECK_EQ(restore(&a, &st), 0);
	CHECK(st.ok && st.allocs == 7);
	CHECK_EQ(access_count(&a), 9);
	CHECK(verified(&a));
	gpumem_release(&a.pid, 1);

	/* 40 locations: more than the library keeps; it leaves the
	 * mapping where it is, to the driver's checkpoint. */
	ask(&a, "access 40", s, sizeof(s));
	REQUIRE(!strcmp(s, "ok"));
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 7 && st.left_allocs == 3);
	CHECK_EQ(access_count(&a), 40);
	CHECK_EQ(restore(&a, &st), 0);
	CHECK(st.ok);
	CHECK_EQ(access_count(&a), 40);
	CHECK(verified(&a));
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

static void retain_twice(void)
{
	unsigned long long phys, phys0, plain, mapped;
	struct gpumem_status st;
	char s[64];
	struct app a;

	app_start(&a, app, NULL, true);
	mem(&a, &phys0, &plain, &mapped);
	ask(&a, "retain", s, sizeof(s));
	REQUIRE(!strcmp(s, "ok"));
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 7);
	/* Saved: no device memory left, the retained one's included. */
	mem(&a, &phys, &plain, &mapped);
	CHECK_EQ(phys, 0);
	CHECK_EQ(restore(&a, &st), 0);
	CHECK(st.ok && st.allocs == 7);
	CHECK(verified(&a));
	/* Released twice, unmapped: both reach the driver's handle, and the
	 * memory is gone. */
	ask(&a, "retain-free", s, sizeof(s));
	CHECK_STR(s, "ok");
	mem(&a, &phys, &plain, &mapped);
	CHECK_EQ(phys, phys0);
	/* The library forgot it: the next save moves what it moved first. */
	CHECK_EQ(save(&a, &st), 0);
	CHECK(st.ok && st.allocs == 6);
	CHECK_EQ(restore(&a, &st), 0);
	CHECK(verified(&a));
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

static void rollback(void)
{
	char fails[600], env_fail[700], s[64];
	const char *env[] = { env_fail, NULL };
	struct gpumem_status st;
	unsigned long c1;
	struct app a;

	snprintf(fails, sizeof(fails), "%s/fail", dir);
	snprintf(env_fail, sizeof(env_fail), "MOCK_CUDA_FAIL_FILE=%s", fails);
	app_start_with(&a, app, NULL, lib, env);

	/* The second unmap fails: the first is mapped back from the file,
	 * and the function goes on with all of its memory. */
	touch(fails, "cuMemUnmap 1\n");
	CHECK_EQ(save(&a, &st), 0);
	unlink(fails);
	CHECK(!st.ok && !st.held);
	CHECK(strstr(st.error, "cuMemUnmap") != NULL);
	c1 = count(&a);
	for (int i = 0; i < 1000 && count(&a) == c1; i++)
		usleep(10000);
	CHECK(count(&a) > c1);
	CHECK(verified(&a));

	/* And the mapping back fails too: the function stays held (its
	 * memory is partly gone), thawd is told so and the snapshot fails. */
	touch(fails, "cuMemUnmap 1\ncuMemCreate 0\n");
	CHECK(save(&a, &st) != 0);
	unlink(fails);
	CHECK(!st.ok && st.held);
	CHECK(strstr(st.error, "cuMemUnmap") != NULL);
	CHECK(strstr(st.error, "held") != NULL);
	if (!strstr(st.error, "held"))
		fprintf(stderr, "the library said: %s\n", st.error);
	c1 = count(&a);
	usleep(300000);
	CHECK_EQ(count(&a), c1);
	ask(&a, "mem", s, sizeof(s));
	CHECK(s[0] != '\0');
	app_end(&a);
}

int main(void)
{
	const char *root = getenv("THAW_ROOT");
	char c[4096];

	signal(SIGPIPE, SIG_IGN);
	gpumem_test_setup(app, sizeof(app));
	snprintf(c, sizeof(c), "${CC:-cc} -shared -fPIC -O1 -o %s/failalloc.so %s/test/fixtures/failalloc.c -ldl",
		 dir, root && *root ? root : ".");
	REQUIRE(system(c) == 0);
	calloc_fails();
	signal_env();
	handler_errno();
	access_many();
	retain_twice();
	rollback();
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
