/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpumem.c — libthaw-cuda.so (interpose/) and thawd's side of it
 * (common/gpumem.c), on the fake driver (test/cuda_mock.c).
 *
 * test/fixtures/gpumem_app.c is built against the fake libcuda.so.1 and run
 * with the library preloaded; this program plays thawd: it asks for a SAVE,
 * checks what moved and what was left to the driver, that the fake
 * driver's device memory was given back and that the program's CUDA calls
 * are held, then asks for a RESTORE (the copy back slowed down) and checks
 * the calls are held until it ends, that every allocation holds its bytes
 * again and that the handle the program kept still works.  Then the ways
 * the library does not apply, each with its reason: a program that never
 * used CUDA, a statically linked one.  Two programs that share memory (one
 * exports, the other imports): saved once, unmapped in both, handed over
 * again at the restore; an importer that ends before it takes it, a
 * creator that ends before it hands it over; an importer that cannot let
 * go of it.
 */
#include "common/gpumem.h"
#include "common/log.h"
#include "restore/gpu_order.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "common/util.h"
#include "interpose/exports.h"
#include "test/check.h"
#include "test/gpumem_test.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The mock's GPUs (test/cuda_mock.c), as NVML names them. */
#define MOCK_GPU0 "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
#define MOCK_GPU1 "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"

struct restore_call {
	pid_t pid;
	struct gpumem_status st;
	int ret;
};

static void *do_restore(void *arg)
{
	struct restore_call *c = arg;

	c->ret = gpumem_request(&c->pid, &c->pid, 1, GPUMEM_OP_RESTORE, outdir, 30000, &c->st);
	return NULL;
}

/* The program's memory saved, held, copied back, byte for byte. */
static void save_and_restore(const char *app_path)
{
	struct gpumem_status st;
	struct restore_call rc = { 0 };
	unsigned long long phys, plain, mapped;
	unsigned long c1, c2, c3;
	char s[256], file[512], why[512];
	size_t moved = 0;
	struct stat sb;
	pthread_t t;
	struct app a;

	app_start(&a, app_path, NULL, true);
	CHECK(gpumem_loaded(a.pid));
	ask(&a, "mem", s, sizeof(s));
	REQUIRE(sscanf(s, "%llu %llu %llu", &phys, &plain, &mapped) == 3);
	/* A 8, B 6 (8), C 4+4, D 4, G 2 MiB movable; E 64 KiB and F 4 MiB not. */
	CHECK_EQ(phys, 30 * MIB);
	CHECK_EQ(plain, 4 * MIB + (64 << 10));

	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK(st.ok);
	CHECK_EQ(moved, 1);
	CHECK_STR(why, "");
	CHECK_EQ(st.allocs, 6);
	CHECK_EQ(st.bytes, 30 * MIB);
	CHECK_EQ(st.dev_bytes[0], 30 * MIB);
	CHECK_EQ(st.left_allocs, 2);
	CHECK_EQ(st.left_bytes, 4 * MIB + (64 << 10));
	/* The device memory is given back; what was left stays. */
	ask(&a, "mem", s, sizeof(s));
	REQUIRE(sscanf(s, "%llu %llu %llu", &phys, &plain, &mapped) == 3);
	CHECK_EQ(phys, 0);
	CHECK_EQ(mapped, 0);
	CHECK_EQ(plain, 4 * MIB + (64 << 10));
	snprintf(file, sizeof(file), "%s/" GPUMEM_FILE_FMT, outdir, (int)a.pid);
	CHECK(stat(file, &sb) == 0 && sb.st_size >= (off_t)(30 * MIB));
	/* Held: the background thread's calls wait. */
	c1 = count(&a);
	usleep(300000);
	c2 = count(&a);
	CHECK_EQ(c1, c2);

	/* The copy back takes 100 ms a copy (6 of them): still held midway. */
	rc.pid = a.pid;
	REQUIRE(pthread_create(&t, NULL, do_restore, &rc) == 0);
	usleep(250000);
	c3 = count(&a);
	CHECK_EQ(c3, c1);
	pthread_join(t, NULL);
	CHECK_EQ(rc.ret, 0);
	CHECK(rc.st.ok);
	if (!rc.st.ok)
		fprintf(stderr, "restore: %s\n", rc.st.error);
	CHECK_EQ(rc.st.allocs, 6);
	CHECK_EQ(rc.st.bytes, 30 * MIB);
	CHECK_EQ(rc.st.dev_bytes[0], 30 * MIB);
	/* The copy took 100 ms a piece: the record's times came through. */
	CHECK(rc.st.copy_ms >= 100 && rc.st.total_ms >= rc.st.copy_ms);
	CHECK(rc.st.copy_threads >= 1);
	/* What the driver kept is what it kept before, no more. */
	CHECK_EQ(rc.st.left_allocs, 2);
	CHECK_EQ(rc.st.left_bytes, 4 * MIB + (64 << 10));
	ask(&a, "mem", s, sizeof(s));
	REQUIRE(sscanf(s, "%llu %llu %llu", &phys, &plain, &mapped) == 3);
	CHECK_EQ(phys, 30 * MIB);
	/* Let go, and byte for byte. */
	for (int i = 0; i < 200 && count(&a) == c1; i++)
		usleep(10000);
	CHECK(count(&a) > c1);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	/* Copied back, the memory is as movable as it was: a second save
	 * moves all of it again. */
	gpumem_release(&a.pid, 1);
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(st.allocs, 6);
	CHECK_EQ(st.bytes, 30 * MIB);
	CHECK_EQ(st.left_allocs, 2);
	do_restore(&rc);
	CHECK_EQ(rc.ret, 0);
	CHECK(rc.st.ok);
	if (!rc.st.ok)
		fprintf(stderr, "second restore: %s\n", rc.st.error);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	/* The handle the program kept names the new memory. */
	ask(&a, "free", s, sizeof(s));
	CHECK_STR(s, "ok");
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* Two apps: c exports S, i imports it (over a socket of the test's); i
 * with importer_env (NULL: as c). */
static void share_pair_start_with(struct app *c, struct app *i, const char *app_path,
				  const char **importer_env)
{
	/* No slow copies here: the order of things is what is looked at. */
	const char *fast[] = { "MOCK_CUDA_HTOD_DELAY_MS=0", NULL };
	char s[64], cmd[700];

	app_start_with(c, app_path, NULL, lib, fast);
	app_start_with(i, app_path, NULL, lib, importer_env ? importer_env : fast);
	snprintf(cmd, sizeof(cmd), "export %s/s-%d.sock", dir, (int)c->pid);
	ask(c, cmd, s, sizeof(s));
	CHECK_STR(s, "ok");
	snprintf(cmd, sizeof(cmd), "import %s/s-%d.sock", dir, (int)c->pid);
	ask(i, cmd, s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(c, "swrite 1", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(i, "sread 1", s, sizeof(s));
	CHECK_STR(s, "ok");
}

static void share_pair_start(struct app *c, struct app *i, const char *app_path)
{
	share_pair_start_with(c, i, app_path, NULL);
}

/* Memory two processes share: its creator saves it (with its own), both
 * unmap it and the driver holds none of it; after the restore the importer
 * maps it again at its address, byte for byte, and both read and write the
 * same bytes; the importer's handle value still names it. */
static void shared(const char *app_path)
{
	struct gpumem_status st[2];
	unsigned long long phys, plain, mapped;
	char s[256], why[512];
	size_t moved = 0;
	struct app c, i;
	pid_t pids[2];

	share_pair_start(&c, &i, app_path);
	pids[0] = c.pid;
	pids[1] = i.pid;
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[0].ok && st[1].ok);
	CHECK_EQ(moved, 2);
	/* The creator saved its 30 MiB and S; the importer its 30 MiB. */
	CHECK_EQ(st[0].allocs, 7);
	CHECK_EQ(st[0].bytes, 34 * MIB);
	CHECK_EQ(st[0].shared_allocs, 1);
	CHECK_EQ(st[1].allocs, 6);
	CHECK_EQ(st[1].bytes, 30 * MIB);
	CHECK_EQ(st[1].shared_allocs, 1);
	CHECK_EQ(st[1].shared_bytes, 4 * MIB);
	CHECK_EQ(st[0].left_allocs, 2);
	CHECK_EQ(st[1].left_allocs, 2);
	mem(&c, &phys, &plain, &mapped);
	CHECK(phys == 0 && mapped == 0);
	mem(&i, &phys, &plain, &mapped);
	CHECK(phys == 0 && mapped == 0);

	CHECK_EQ(gpumem_request(pids, pids, 2, GPUMEM_OP_RESTORE, outdir, 30000, st), 0);
	for (int k = 0; k < 2; k++) {
		CHECK(st[k].ok);
		if (!st[k].ok)
			fprintf(stderr, "restore of %d: %s\n", (int)pids[k], st[k].error);
		CHECK_EQ(st[k].shared_allocs, 1);
	}
	mem(&i, &phys, &plain, &mapped);
	CHECK_EQ(phys, 34 * MIB);
	ask(&i, "sread 1", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&i, "swrite 2", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&c, "sread 2", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&c, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&i, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	/* Carried again by a second save: the pairing follows the new
	 * descriptors. */
	gpumem_release(pids, 2);
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[0].shared_allocs == 1 && st[1].shared_allocs == 1);
	CHECK_EQ(gpumem_request(pids, pids, 2, GPUMEM_OP_RESTORE, outdir, 30000, st), 0);
	CHECK(st[0].ok && st[1].ok);
	ask(&c, "sread 2", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&i, "sfree", s, sizeof(s));
	CHECK_STR(s, "ok");
	gpumem_release(pids, 2);
	app_end(&i);
	app_end(&c);
}

/* One side of a shared pair killed after the save (the importer, or the
 * creator): the other's restore fails at once, held, and says why. */
static void shared_one_ends(const char *app_path, bool importer_ends, const char *why_want)
{
	struct gpumem_status st[2];
	char why[512];
	size_t moved = 0;
	struct app c, i, *gone, *left;
	pid_t pids[2];
	int k;

	share_pair_start(&c, &i, app_path);
	pids[0] = c.pid;
	pids[1] = i.pid;
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK_EQ(moved, 2);
	gone = importer_ends ? &i : &c;
	left = importer_ends ? &c : &i;
	k = importer_ends ? 0 : 1;
	kill(gone->pid, SIGKILL);
	REQUIRE(waitpid(gone->pid, NULL, 0) == gone->pid);
	fclose(gone->in);
	fclose(gone->out);
	CHECK_EQ(gpumem_request(pids, pids, 2, GPUMEM_OP_RESTORE, outdir, 30000, st), -ESRCH);
	CHECK(st[k].answered && !st[k].ok && st[k].held);
	CHECK(strstr(st[k].error, why_want) != NULL);
	if (!strstr(st[k].error, why_want))
		fprintf(stderr, "the restore of the one left: %s\n", st[k].error);
	kill(left->pid, SIGKILL);
	waitpid(left->pid, NULL, 0);
	fclose(left->in);
	fclose(left->out);
}

/* An importer that ends before it takes the memory: its creator's restore
 * fails at once rather than wait for it. */
static void shared_importer_ends(const char *app_path)
{
	shared_one_ends(app_path, true, "ended before it took it");
}

/* A creator that ends before it hands its memory over: the importer's
 * restore fails at once, with why. */
static void shared_creator_ends(const char *app_path)
{
	shared_one_ends(app_path, false, "ended before it handed it over");
}

/* One of two importers fails its own restore (the mock fails its
 * allocations) and abandons its import: the creator fails too, but still
 * answers the other importer at once, which maps the memory.  (The
 * creator's server used to stop at the first abandon: the other importer
 * then waited out its timeouts, as the tensor-parallel ranks did on two
 * H200s, 30 s an import.) */
static void shared_importer_fails(const char *app_path)
{
	const char *fast[] = { "MOCK_CUDA_HTOD_DELAY_MS=0", NULL };
	char fail_env[640], fail_file[600], s[64], cmd[700], why[512];
	const char *failing[] = { "MOCK_CUDA_HTOD_DELAY_MS=0", fail_env, NULL };
	struct gpumem_status st[3];
	struct app c, i1, i2;
	size_t moved = 0;
	pid_t pids[3];
	uint64_t t0;
	FILE *f;

	snprintf(fail_file, sizeof(fail_file), "%s/i1.fail", dir);
	unlink(fail_file);
	snprintf(fail_env, sizeof(fail_env), "MOCK_CUDA_FAIL_FILE=%s", fail_file);
	app_start_with(&c, app_path, NULL, lib, fast);
	app_start_with(&i1, app_path, NULL, lib, failing);
	app_start_with(&i2, app_path, NULL, lib, fast);
	snprintf(cmd, sizeof(cmd), "export %s/s3-%d.sock 2", dir, (int)c.pid);
	ask(&c, cmd, s, sizeof(s));
	CHECK_STR(s, "ok");
	snprintf(cmd, sizeof(cmd), "import %s/s3-%d.sock", dir, (int)c.pid);
	ask(&i1, cmd, s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&i2, cmd, s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(&c, "swrite 5", s, sizeof(s));
	pids[0] = c.pid;
	pids[1] = i1.pid;
	pids[2] = i2.pid;
	CHECK_EQ(gpumem_save_all(pids, pids, 3, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[1].shared_allocs == 1 && st[2].shared_allocs == 1);
	/* i1's restore fails at its first allocation. */
	f = fopen(fail_file, "w");
	REQUIRE(f != NULL);
	fputs("cuMemCreate 0\n", f);
	fclose(f);
	t0 = now_ns();
	/* Every process answers (the request's 0), two of them failed. */
	CHECK_EQ(gpumem_request(pids, pids, 3, GPUMEM_OP_RESTORE, outdir, 30000, st), 0);
	CHECK(ms_since(t0) < 20000.0);
	unlink(fail_file);
	CHECK(st[1].answered && !st[1].ok);
	CHECK(st[0].answered && !st[0].ok && strstr(st[0].error, "could not restore"));
	CHECK(st[2].answered && st[2].ok);
	if (!st[2].ok)
		fprintf(stderr, "the other importer's restore: %s\n", st[2].error);
	ask(&i2, "sread 5", s, sizeof(s));
	CHECK_STR(s, "ok");
	app_end(&i2);
	app_end(&i1);
	app_end(&c);
}

/* Shared memory that cannot be carried stays the driver's, and shared:
 * where one of the function's CUDA processes has no library (its imports
 * cannot be told), and where an importer cannot let go of the memory (it
 * maps it twice: the processes agree to leave it). */
static void shared_kept(const char *app_path)
{
	struct gpumem_status st[3];
	unsigned long long phys, plain, mapped;
	char s[64], why[512];
	size_t moved = 0;
	struct app c, i, x;
	pid_t pids[3];

	share_pair_start(&c, &i, app_path);
	app_start(&x, app_path, "nocuda", false);
	pids[0] = c.pid;
	pids[1] = i.pid;
	pids[2] = x.pid;
	CHECK_EQ(gpumem_save_all(pids, pids, 3, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[0].ok && st[1].ok);
	CHECK(st[0].shared_allocs == 0 && st[1].shared_allocs == 0);
	CHECK_EQ(st[0].left_allocs, 3);
	/* Left to the driver, and no descriptor kept for it through the
	 * checkpoint: CRIU cannot dump an open of the driver's device. */
	for (int k = 0; k < 2; k++) {
		char fds[4096];

		snprintf(fds, sizeof(fds), "%s/" GPUMEM_SHARE_FDS_FMT, outdir, (int)pids[k]);
		CHECK(access(fds, F_OK) != 0);
	}
	CHECK_EQ(gpumem_request(pids, pids, 2, GPUMEM_OP_RESTORE, outdir, 30000, st), 0);
	CHECK(st[0].ok && st[1].ok);
	app_end(&x);

	ask(&i, "smap2", s, sizeof(s));
	CHECK_STR(s, "ok");
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[0].ok && st[1].ok);
	CHECK(st[0].shared_allocs == 0 && st[1].shared_allocs == 0);
	CHECK_EQ(st[0].allocs, 6);
	CHECK_EQ(st[0].left_allocs, 3);
	mem(&c, &phys, &plain, &mapped);
	CHECK_EQ(phys, 4 * MIB);
	CHECK_EQ(gpumem_request(pids, pids, 2, GPUMEM_OP_RESTORE, outdir, 30000, st), 0);
	CHECK(st[0].ok && st[1].ok);
	ask(&c, "swrite 3", s, sizeof(s));
	ask(&i, "sread 3", s, sizeof(s));
	CHECK_STR(s, "ok");
	gpumem_release(pids, 2);
	app_end(&i);
	app_end(&c);
}

/* thawd fills the device memory itself (restore/gpu_prefill.c) and the
 * library maps it instead of copying; where thawd cannot, the library
 * copies.  Run in a child of ours that has the fake driver on its library
 * path: thawd's side (common/cuda.c) opens libcuda.so.1 by name. */
/* Lines in the file at path (0 if there is none). */
static int count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int n = 0, c;

	while (f && (c = fgetc(f)) != EOF)
		n += c == '\n';
	if (f)
		fclose(f);
	return n;
}

/* The app started with the library, its snapshot's meta on mock GPU 0
 * (m), and saved: where the fill cases begin. */
static void start_saved(struct app *a, const char *app_path, struct mock_snapshot *m)
{
	struct gpumem_status st;
	char why[512];
	size_t moved = 0;

	app_start(a, app_path, NULL, true);
	mock_snapshot_init(m, MOCK_GPU0, a->pid);
	CHECK_EQ(gpumem_save_all(&a->pid, &a->pid, 1, outdir, 30000, &st, &moved, why,
				 sizeof(why)), 0);
}

/* Lines of path that begin with pid (MOCK_CUDA_ACCESS_LOG's). */
static int count_pid_lines(const char *path, pid_t pid)
{
	FILE *f = fopen(path, "r");
	char line[128];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += atoi(line) == (int)pid;
	if (f)
		fclose(f);
	return n;
}

static void prefill(const char *app_path)
{
	struct mock_snapshot m;
	struct gpumem_status st;
	struct restore_call rc = { 0 };
	unsigned long long phys, plain, mapped;
	char s[256], why[512], line[256], sock[600], layout[600], target[600];
	struct gpu_prefill *pf;
	/* The GPU the start placed it on, holding back its memory. */
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 40 * MIB } };
	struct stat sb;
	size_t moved = 0;
	FILE *f;
	struct app a;
	char unmaps[600], access_log[600], app_log[640];
	const char *app_env[] = { app_log, NULL };
	int lines = 0;

	/* The app's mock refuses access over a range not mapped whole, as
	 * the driver: the library's access for what thawd filled is set in
	 * runs of adjacent mappings (gm_access_pending). */
	snprintf(access_log, sizeof(access_log), "%s/access.log", dir);
	snprintf(app_log, sizeof(app_log), "MOCK_CUDA_ACCESS_LOG=%s", access_log);
	app_start_with(&a, app_path, NULL, lib, app_env);
	mock_snapshot_init(&m, MOCK_GPU0, a.pid);
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(st.allocs, 6);
	/* The layout of what was saved, one line per allocation. */
	snprintf(layout, sizeof(layout), "%s/" GPUMEM_LAYOUT_FMT, outdir, (int)a.pid);
	f = fopen(layout, "r");
	CHECK(f != NULL);
	while (f && fgets(line, sizeof(line), f))
		lines++;
	if (f)
		fclose(f);
	CHECK_EQ(lines, 1 + 6);

	/* The out directory is the function's to write: a link it left at
	 * the socket's name is replaced, and what it points to untouched. */
	snprintf(sock, sizeof(sock), "%s/" GPUMEM_PREFILL_FMT, outdir, (int)a.pid);
	snprintf(target, sizeof(target), "%s/not-thawds", dir);
	f = fopen(target, "w");
	REQUIRE(f != NULL);
	fclose(f);
	REQUIRE(chmod(target, 0600) == 0 && symlink(target, sock) == 0);

	/* Filled and offered, then taken: nothing copied by the library.
	 * Offered before thawd let go of any of its own mappings (the
	 * driver's calls that wait behind a burst of restores), and let go of
	 * them all once the fill ended. */
	snprintf(unmaps, sizeof(unmaps), "%s/unmaps.log", dir);
	unlink(unmaps);
	setenv("MOCK_CUDA_UNMAP_LOG", unmaps, 1);
	/* Access for the copy set in one call over the 6 allocations, which
	 * lie next to each other (the mock refuses a range not mapped
	 * whole, as the driver does). */
	unlink(access_log);
	setenv("MOCK_CUDA_ACCESS_LOG", access_log, 1);
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	unsetenv("MOCK_CUDA_ACCESS_LOG");
	CHECK_EQ(count_pid_lines(access_log, getpid()), 1);
	CHECK_EQ(count_lines(unmaps), 0);
	CHECK(lstat(sock, &sb) == 0 && S_ISSOCK(sb.st_mode));
	/* What it made is on the GPU: no longer held back as well. */
	CHECK_EQ(place.claim[0], 10 * MIB);
	CHECK(stat(target, &sb) == 0 && (sb.st_mode & 0777) == 0600);
	rc.pid = a.pid;
	do_restore(&rc);
	CHECK_EQ(rc.ret, 0);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.allocs, 6);
	CHECK_EQ(rc.st.bytes, 30 * MIB);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	CHECK_EQ(rc.st.prefilled_bytes, 30 * MIB);
	CHECK_EQ(rc.st.copy_threads, 0);
	gpu_prefill_end(pf, line, sizeof(line));
	CHECK(strstr(line, "filled 6 allocation(s)") != NULL);
	CHECK(access(sock, F_OK) != 0);
	for (int i = 0; i < 3000 && count_lines(unmaps) < 6; i++)
		usleep(10 * 1000);
	CHECK_EQ(count_lines(unmaps), 6);
	unsetenv("MOCK_CUDA_UNMAP_LOG");
	/* thawd gave its handles back: the memory is the program's alone,
	 * byte for byte, and as movable as before. */
	ask(&a, "mem", s, sizeof(s));
	REQUIRE(sscanf(s, "%llu %llu %llu", &phys, &plain, &mapped) == 3);
	CHECK_EQ(phys, 30 * MIB);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(st.allocs, 6);
	/* Saved again (the file rewritten in place): filled again from the
	 * new bytes, not from what an earlier fill had mapped. */
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	gpu_prefill_end(pf, NULL, 0);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);

	/* A layout thawd cannot use: nothing offered, the library copies. */
	f = fopen(layout, "w");
	REQUIRE(f != NULL);
	fputs(GPUMEM_LAYOUT_MAGIC "\n12345 77 0 0 0 0\n", f);
	fclose(f);
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	CHECK(pf && !gpu_prefill_fills(pf));
	gpu_prefill_end(pf, NULL, 0);
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 0);
	CHECK_EQ(rc.st.allocs, 6);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	/* Turned off: the same. */
	setenv("THAW_GPU_PREFILL", "0", 1);
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	CHECK(pf && !gpu_prefill_fills(pf));
	gpu_prefill_end(pf, NULL, 0);
	unsetenv("THAW_GPU_PREFILL");
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

struct take_call {
	const struct snapshot_meta *meta;
	pid_t pid;
	const char *uuid;
	double copy_ms;
	int ret;
};

static void *do_take(void *arg)
{
	struct take_call *c = arg;

	c->ret = gpu_context_take(c->meta, 0, c->uuid, &c->pid, 1, outdir, outdir, "take-test",
				  &c->copy_ms);
	return NULL;
}

/* The take of a standby that holds its contexts (gpu_context_take): no
 * driver restore on its path (the fake driver logs every one), the
 * function's calls held until thawd's fill is mapped, then let go, byte for
 * byte; a GPU without room for the memory, or no longer the standby's, is
 * a refusal that leaves the process held. */
static void context_take(const char *app_path)
{
	struct mock_snapshot m;
	struct take_call tc = { .meta = &m.meta, .uuid = MOCK_GPU0 };
	char s[256], why[512], pairs[600];
	struct gpumem_status st;
	unsigned long c1;
	size_t moved = 0;
	struct stat sb;
	pthread_t t;
	struct app a;

	snprintf(pairs, sizeof(pairs), "%s/restores.log", dir);
	setenv("MOCK_CUDA_PAIRS_LOG", pairs, 1);
	app_start(&a, app_path, NULL, true);
	tc.pid = a.pid;
	mock_snapshot_init(&m, MOCK_GPU0, a.pid);
	m.gpu.name = "Mock GPU";
	m.meta.gpu_memory.bytes = 30 * MIB;
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(st.allocs, 6);
	c1 = count(&a);

	/* No room on its GPU: refused, still held. */
	setenv("MOCK_NVML_FREE_MIB", "20,1000", 1);
	do_take(&tc);
	CHECK_EQ(tc.ret, -EAGAIN);
	/* Its GPU is another one now (the uuid it recorded is not GPU 0's). */
	setenv("MOCK_NVML_FREE_MIB", "1000,1000", 1);
	tc.uuid = "GPU-ffffffff-0405-0607-0809-0a0b0c0d0e0f";
	do_take(&tc);
	CHECK_EQ(tc.ret, -ENODEV);
	CHECK_EQ(count(&a), c1);

	/* Taken: thawd's fill copies slowly (100 ms a copy, 6 of them), and
	 * the calls stay held until the library has mapped it. */
	tc.uuid = MOCK_GPU0;
	setenv("MOCK_CUDA_HTOD_DELAY_MS", "100", 1);
	REQUIRE(pthread_create(&t, NULL, do_take, &tc) == 0);
	usleep(300000);
	CHECK_EQ(count(&a), c1);
	pthread_join(t, NULL);
	unsetenv("MOCK_CUDA_HTOD_DELAY_MS");
	CHECK_EQ(tc.ret, 0);
	for (int i = 0; i < 200 && count(&a) == c1; i++)
		usleep(10000);
	CHECK(count(&a) > c1);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	/* thawd filled it all: the library copied nothing itself. */
	ask(&a, "mem", s, sizeof(s));
	CHECK(!strncmp(s, "31457280 ", 9));
	CHECK(stat(pairs, &sb) != 0 || sb.st_size == 0);
	gpumem_release(&a.pid, 1);
	app_end(&a);
	unsetenv("MOCK_CUDA_PAIRS_LOG");
}

/* Two fills of one GPU copy one after the other, in the order they were
 * started, however the threads run: the first start gets its bytes first. */
static void fill_order(const char *app_path)
{
	struct mock_snapshot m;
	struct gpu_placement pa = { .n = 1, .held = true }, pb = { .n = 1, .held = true };
	uint64_t a0, a1, b0, b1;
	struct gpu_prefill *fa, *fb;
	char out2[600];
	struct app a;

	start_saved(&a, app_path, &m);
	snprintf(out2, sizeof(out2), "%s/out2", dir);
	REQUIRE(mkdir(out2, 0700) == 0 || errno == EEXIST);
	setenv("MOCK_CUDA_HTOD_DELAY_MS", "50", 1);
	fa = gpu_prefill_start(&m.meta, outdir, outdir, &pa);
	fb = gpu_prefill_start(&m.meta, outdir, out2, &pb);
	REQUIRE(fa && fb);
	CHECK_EQ(gpu_prefill_ready(fb), 0);
	CHECK_EQ(gpu_prefill_ready(fa), 0);
	unsetenv("MOCK_CUDA_HTOD_DELAY_MS");
	gpu_prefill_copy_span(fa, &a0, &a1);
	gpu_prefill_copy_span(fb, &b0, &b1);
	CHECK(a0 && a1 && b0 && b1);
	CHECK(a1 <= b0);
	if (a1 > b0)
		fprintf(stderr, "the second fill copied from +%.1f ms, the first until +%.1f ms\n",
			(double)((int64_t)(b0 - a0)) / 1e6, (double)((int64_t)(a1 - a0)) / 1e6);
	gpu_prefill_end(fa, NULL, 0);
	gpu_prefill_end(fb, NULL, 0);
	app_end(&a);
}

struct lib_restore {
	struct gpu_prefill *pf;
	struct mock_snapshot m;
	pid_t pid;
	double copy_ms;
	int ret;
};

static void *do_lib_restore(void *arg)
{
	struct lib_restore *c = arg;

	c->ret = gpu_prefill_restore(c->pf, &c->m.meta, &c->pid, 1, outdir, "lib", &c->copy_ms);
	return NULL;
}

/* Where no fill applies (THAW_GPU_PREFILL=0 here) the libraries of two
 * starts on one GPU copy one after the other, not side by side, as fills
 * do: each copy in the mock (100 ms) logs when it ran, and no copy of one
 * process runs between two of the other's. */
static void library_order(const char *app_path)
{
	struct gpu_placement pa = { .n = 1, .held = true }, pb = { .n = 1, .held = true };
	struct lib_restore c[2] = { 0 };
	long long first[2] = { 0 }, last[2] = { 0 };
	char log[600], why[512], s[64];
	struct gpumem_status st;
	struct app a[2];
	pthread_t t[2];
	size_t moved;
	int pid;
	long long b, e;
	FILE *f;

	snprintf(log, sizeof(log), "%s/htod.log", dir);
	unlink(log);
	setenv("MOCK_CUDA_HTOD_LOG", log, 1);
	for (int i = 0; i < 2; i++)
		app_start(&a[i], app_path, NULL, true);
	unsetenv("MOCK_CUDA_HTOD_LOG");
	setenv("THAW_GPU_PREFILL", "0", 1);
	for (int i = 0; i < 2; i++) {
		c[i].pid = a[i].pid;
		mock_snapshot_init(&c[i].m, MOCK_GPU0, a[i].pid);
		CHECK_EQ(gpumem_save_all(&a[i].pid, &a[i].pid, 1, outdir, 30000, &st, &moved, why,
					 sizeof(why)),
			 0);
		c[i].pf = gpu_prefill_start(&c[i].m.meta, outdir, outdir, i ? &pb : &pa);
		REQUIRE(c[i].pf);
	}
	unsetenv("THAW_GPU_PREFILL");
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&t[i], NULL, do_lib_restore, &c[i]) == 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(c[i].ret, 0);
	}
	f = fopen(log, "r");
	REQUIRE(f);
	while (fscanf(f, "%d %lld %lld %*d", &pid, &b, &e) == 3)
		for (int i = 0; i < 2; i++)
			if (pid == a[i].pid) {
				if (!first[i] || b < first[i])
					first[i] = b;
				if (e > last[i])
					last[i] = e;
			}
	fclose(f);
	CHECK(first[0] && first[1]);
	CHECK(last[0] <= first[1] || last[1] <= first[0]);
	if (!(last[0] <= first[1] || last[1] <= first[0]))
		fprintf(stderr, "the copies overlapped: %d copied over [0, %.1f] ms, %d over "
			"[%.1f, %.1f] ms\n", a[0].pid, (last[0] - first[0]) / 1e6, a[1].pid,
			(first[1] - first[0]) / 1e6, (last[1] - first[0]) / 1e6);
	for (int i = 0; i < 2; i++) {
		ask(&a[i], "verify", s, sizeof(s));
		CHECK_STR(s, "ok");
		gpumem_release(&a[i].pid, 1);
		app_end(&a[i]);
	}
}

/* The pair c (creator) and i (importer) saved, filled by thawd on place's
 * GPUs (ngpus of gpus) and restored: the importer reads what the creator
 * wrote before the save, and the creator's own memory is intact. */
static void fill_shared_pair(struct app *c, struct app *i, struct snapshot_gpu *gpus,
			     size_t ngpus, struct gpu_placement *place, const char *name)
{
	struct gpumem_status st[2];
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	pid_t pids[2] = { c->pid, i->pid };
	char s[64], why[512];
	size_t moved = 0;
	double ms;

	meta = (struct snapshot_meta){ .gpus = gpus, .ngpus = ngpus,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = pids, .nns_pids = 2 } };
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK(st[0].shared_allocs == 1 && st[1].shared_allocs == 1);
	pf = gpu_prefill_start(&meta, outdir, outdir, place);
	REQUIRE(pf != NULL);
	CHECK(gpu_prefill_fills(pf));
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	CHECK_EQ(gpu_prefill_restore(pf, &meta, pids, 2, outdir, name, &ms), 0);
	ask(i, "sread 1", s, sizeof(s));
	CHECK_STR(s, "ok");
	ask(c, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
}

/* Shared memory where thawd fills: the creator's shared allocation is
 * filled like its own memory, mapped from the fill and handed over from
 * there; the importer maps it at its address, byte for byte, and both
 * write and read the same bytes after. */
static void prefill_shared(const char *app_path)
{
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 80 * MIB } };
	struct snapshot_gpu gpu = { .uuid = MOCK_GPU0, .index = -1 };
	struct app c, i;
	pid_t pids[2];
	char s[64];

	share_pair_start(&c, &i, app_path);
	fill_shared_pair(&c, &i, &gpu, 1, &place, "share");
	ask(&i, "swrite 4", s, sizeof(s));
	ask(&c, "sread 4", s, sizeof(s));
	CHECK_STR(s, "ok");
	pids[0] = c.pid;
	pids[1] = i.pid;
	gpumem_release(pids, 2);
	app_end(&i);
	app_end(&c);
}

/* Shared memory across GPUs where thawd fills: the creator on GPU 0, its
 * importer on GPU 1, each process filled on its own GPU's link; the
 * importer maps the creator's shared allocation at its address.  The
 * importer traces its steps (THAW_GPUMEM_TRACE=1): the trace names them. */
static void prefill_shared_2gpu(const char *app_path)
{
	struct snapshot_gpu gpus[2] = { { .uuid = MOCK_GPU0, .index = 0 },
					{ .uuid = MOCK_GPU1, .index = 1 } };
	struct gpu_placement place = { .n = 2, .held = true };
	const char *on_gpu1[] = { "MOCK_CUDA_HTOD_DELAY_MS=0", "MOCK_CUDA_CTX_DEVICE=1",
				  "THAW_GPUMEM_TRACE=1", NULL };
	struct app c, i;
	pid_t pids[2];
	char s[64], trace[600], text[8192] = "";
	size_t got;
	FILE *f;

	place.dev[0].ordinal = 0;
	place.dev[1].ordinal = 1;
	share_pair_start_with(&c, &i, app_path, on_gpu1);
	fill_shared_pair(&c, &i, gpus, 2, &place, "share2");
	ask(&i, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	snprintf(trace, sizeof(trace), "%s/%d.trace", outdir, (int)i.pid);
	f = fopen(trace, "r");
	got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = '\0';
	if (f)
		fclose(f);
	CHECK(strstr(text, "restore: begins") && strstr(text, "share: asking") &&
	      strstr(text, "share: importing and mapping it") && strstr(text, "restore: shared (ok)"));
	snprintf(trace, sizeof(trace), "%s/%d.trace", outdir, (int)c.pid);
	CHECK(access(trace, F_OK) != 0);
	pids[0] = c.pid;
	pids[1] = i.pid;
	gpumem_release(pids, 2);
	app_end(&i);
	app_end(&c);
}

/* Two processes where thawd fills nothing (THAW_GPU_PREFILL=0): the
 * libraries copy.  Run before any fill of the process (a `thaw start` that
 * fills nothing loads no more): ending a start that filled nothing must
 * not call the driver's entry points a fill loads (it crashed `thaw start`
 * of the tensor-parallel function on two H200s). */
static void several_unfilled(const char *app_path)
{
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 80 * MIB } };
	struct snapshot_gpu gpu = { .uuid = MOCK_GPU0, .index = -1 };
	struct gpumem_status st[2];
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	char why[512], s[64];
	size_t moved = 0;
	struct app a[2];
	pid_t pids[2];
	double ms;

	app_start(&a[0], app_path, NULL, true);
	app_start(&a[1], app_path, NULL, true);
	pids[0] = a[0].pid;
	pids[1] = a[1].pid;
	meta = (struct snapshot_meta){ .gpus = &gpu, .ngpus = 1,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = pids, .nns_pids = 2 } };
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	setenv("THAW_GPU_PREFILL", "0", 1);
	pf = gpu_prefill_start(&meta, outdir, outdir, &place);
	unsetenv("THAW_GPU_PREFILL");
	CHECK(pf != NULL && !gpu_prefill_fills(pf));
	CHECK_EQ(gpu_prefill_restore(pf, &meta, pids, 2, outdir, "several", &ms), 0);
	for (int k = 0; k < 2; k++) {
		ask(&a[k], "verify", s, sizeof(s));
		CHECK_STR(s, "ok");
	}
	gpumem_release(pids, 2);
	app_end(&a[1]);
	app_end(&a[0]);
}

/* The latest CLOCK_MONOTONIC ns in path, one a line (0: none). */
static uint64_t last_stamp(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned long long v, last = 0;

	while (f && fscanf(f, "%llu", &v) == 1)
		last = v > last ? v : last;
	if (f)
		fclose(f);
	return last;
}

/* The order of thaw's calls around the driver's restore (gpu_order.h): a
 * start's restore that comes while a fill makes its allocations (the mock
 * makes each slowly) begins once they are made, not beside them, with
 * THAW_GPU_ORDER=1; without it (the default) at once; and with it what a
 * fill lets go of waits until no start restores. */
static void order_around_restore(const char *app_path)
{
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 40 * MIB } };
	struct restore_call rc = { 0 };
	struct mock_snapshot m;
	struct gpumem_status st;
	struct gpu_prefill *pf;
	char why[512], creates[600], unmaps[600];
	size_t moved = 0;
	uint64_t begun;
	double waited;
	struct app a;

	start_saved(&a, app_path, &m);
	snprintf(creates, sizeof(creates), "%s/creates.log", dir);
	snprintf(unmaps, sizeof(unmaps), "%s/order-unmaps.log", dir);
	unlink(creates);
	unlink(unmaps);
	setenv("MOCK_CUDA_CREATE_LOG", creates, 1);
	setenv("MOCK_CUDA_CREATE_DELAY_MS", "25", 1);
	setenv("MOCK_CUDA_UNMAP_LOG", unmaps, 1);
	setenv("THAW_GPU_ORDER", "1", 1);
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	/* The restore comes once the fill is making them (its first made). */
	for (int i = 0; i < 3000 && count_lines(creates) < 1; i++)
		usleep(1000);
	waited = gpu_order_restore_begin(gpu_prefill_making(pf));
	begun = now_ns();
	/* Its 6 allocations, 25 ms each, all made before the restore began. */
	CHECK_EQ(count_lines(creates), 6);
	CHECK(last_stamp(creates) <= begun);
	CHECK(waited >= 50.0);
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	rc.pid = a.pid;
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	gpu_prefill_end(pf, NULL, 0);
	/* thawd's mappings let go of only once no start restores. */
	usleep(200 * 1000);
	CHECK_EQ(count_lines(unmaps), 0);
	gpu_order_restored();
	for (int i = 0; i < 3000 && count_lines(unmaps) < 6; i++)
		usleep(10 * 1000);
	CHECK_EQ(count_lines(unmaps), 6);
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);

	/* Off (the default): the restore begins at once, beside the
	 * allocations. */
	unlink(creates);
	unsetenv("THAW_GPU_ORDER");
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	for (int i = 0; i < 3000 && count_lines(creates) < 1; i++)
		usleep(1000);
	waited = gpu_order_restore_begin(gpu_prefill_making(pf));
	CHECK(waited < 25.0);
	CHECK(count_lines(creates) < 6);
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	do_restore(&rc);
	CHECK(rc.st.ok);
	gpu_prefill_end(pf, NULL, 0);
	gpu_order_restored();
	unsetenv("MOCK_CUDA_CREATE_LOG");
	unsetenv("MOCK_CUDA_CREATE_DELAY_MS");
	unsetenv("MOCK_CUDA_UNMAP_LOG");
	ask(&a, "verify", why, sizeof(why));
	CHECK_STR(why, "ok");
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* The last case of the thawd child: a fill ended just before the process
 * exits, its let-go of thawd's mappings slowed by the mock.  The process
 * waits for it at its exit (a `thaw start` exits right after its start;
 * a let-go still inside the driver as exit tears the driver down crashed
 * it); the parent counts the unmaps once the child has exited. */
static void let_go_at_exit(const char *app_path)
{
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 40 * MIB } };
	struct restore_call rc = { 0 };
	struct mock_snapshot m;
	struct gpu_prefill *pf;
	char log[600];
	struct app a;

	start_saved(&a, app_path, &m);
	snprintf(log, sizeof(log), "%s/exit-unmaps.log", dir);
	unlink(log);
	setenv("MOCK_CUDA_UNMAP_LOG", log, 1);
	setenv("MOCK_CUDA_UNMAP_DELAY_MS", "100", 1);
	pf = gpu_prefill_start(&m.meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	rc.pid = a.pid;
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	gpu_prefill_end(pf, NULL, 0);
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* A process spanning two GPUs (the app's C and D on the mock's GPU 1, the
 * rest on GPU 0): thawd fills each allocation on its own GPU, both GPUs'
 * copies side by side, and the library maps it all.  The mock holds each
 * copy onto one GPU until one onto the other has begun (10 s at most), so
 * that copies side by side overlap in its log and copies one GPU after the
 * other do not, however loaded the machine. */
static void prefill_span(const char *app_path)
{
	struct snapshot_gpu gpus[2] = { { .uuid = MOCK_GPU0, .index = 0 },
					{ .uuid = MOCK_GPU1, .index = 1 } };
	struct gpu_placement place = { .n = 2, .held = true };
	struct restore_call rc = { 0 };
	long long first[2] = { 0 }, last[2] = { 0 }, b, e;
	char log[600], why[512], s[256];
	struct gpumem_status st;
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	size_t moved = 0;
	struct app a;
	int pid, dev;
	FILE *f;

	place.dev[0].ordinal = 0;
	place.dev[1].ordinal = 1;
	app_start(&a, app_path, "span", true);
	meta = (struct snapshot_meta){ .gpus = gpus, .ngpus = 2,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = &a.pid, .nns_pids = 1 } };
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(st.allocs, 6);
	snprintf(log, sizeof(log), "%s/span.log", dir);
	unlink(log);
	setenv("MOCK_CUDA_HTOD_LOG", log, 1);
	setenv("MOCK_CUDA_HTOD_MEET", "1", 1);
	pf = gpu_prefill_start(&meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK(gpu_prefill_fills(pf));
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	unsetenv("MOCK_CUDA_HTOD_MEET");
	unsetenv("MOCK_CUDA_HTOD_LOG");
	rc.pid = a.pid;
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	CHECK_EQ(rc.st.prefilled_bytes, 30 * MIB);
	CHECK_EQ(rc.st.dev_bytes[1], 12 * MIB);
	CHECK_EQ(rc.st.copy_threads, 0);
	gpu_prefill_end(pf, NULL, 0);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	f = fopen(log, "r");
	while (f && fscanf(f, "%d %lld %lld %d", &pid, &b, &e, &dev) == 4)
		if (pid == getpid() && dev >= 0 && dev < 2) {
			if (!first[dev] || b < first[dev])
				first[dev] = b;
			if (e > last[dev])
				last[dev] = e;
		}
	if (f)
		fclose(f);
	CHECK(first[0] && first[1]);
	CHECK(first[0] < last[1] && first[1] < last[0]);
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* The copies onto mock GPU 0 and 1 the HtoD log at path holds, of this
 * process: when the first began and the last ended, per GPU. */
static void htod_spans(const char *path, long long first[2], long long last[2])
{
	long long b, e;
	int pid, dev;
	FILE *f = fopen(path, "r");

	first[0] = first[1] = last[0] = last[1] = 0;
	while (f && fscanf(f, "%d %lld %lld %d", &pid, &b, &e, &dev) == 4)
		if (pid == getpid() && dev >= 0 && dev < 2) {
			if (!first[dev] || b < first[dev])
				first[dev] = b;
			if (e > last[dev])
				last[dev] = e;
		}
	if (f)
		fclose(f);
}

/* The processes of one function on GPUs of their own (tensor parallel:
 * one on mock GPU 0, the other all on GPU 1): thawd fills both at once,
 * each in its own turn on its own GPU's link, rather than one process
 * after the other; the mock holds a copy onto one GPU until one onto the
 * other began, so that only fills side by side overlap.  thawd's log says
 * each GPU's fill: its bytes, its turn's wait, its copy's time and speed. */
static void prefill_tp(const char *app_path)
{
	struct snapshot_gpu gpus[2] = { { .uuid = MOCK_GPU0, .index = 0 },
					{ .uuid = MOCK_GPU1, .index = 1 } };
	struct gpu_placement place = { .n = 2, .held = true };
	const char *on1[] = { "MOCK_CUDA_CTX_DEVICE=1", NULL };
	long long first[2], last[2];
	char log[600], errlog[600], why[512], s[256], text[4096];
	struct gpumem_status st[2];
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	size_t moved = 0, got;
	struct app a[2];
	pid_t pids[2];
	int saved_err;
	double ms;
	FILE *f;

	place.dev[0].ordinal = 0;
	place.dev[1].ordinal = 1;
	app_start(&a[0], app_path, NULL, true);
	app_start_with(&a[1], app_path, "span", lib, on1);
	pids[0] = a[0].pid;
	pids[1] = a[1].pid;
	meta = (struct snapshot_meta){ .gpus = gpus, .ngpus = 2,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = pids, .nns_pids = 2 } };
	CHECK_EQ(gpumem_save_all(pids, pids, 2, outdir, 30000, st, &moved, why, sizeof(why)), 0);
	CHECK_EQ(st[0].dev_bytes[0], 30 * MIB);
	CHECK_EQ(st[1].dev_bytes[1], 30 * MIB);
	CHECK_EQ(st[1].dev_bytes[0], 0);
	snprintf(log, sizeof(log), "%s/tp.log", dir);
	unlink(log);
	setenv("MOCK_CUDA_HTOD_LOG", log, 1);
	setenv("MOCK_CUDA_HTOD_MEET", "tp", 1);
	pf = gpu_prefill_start(&meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK(gpu_prefill_fills(pf));
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	unsetenv("MOCK_CUDA_HTOD_MEET");
	unsetenv("MOCK_CUDA_HTOD_LOG");
	/* The start's restore, thawd's log (stderr) kept. */
	snprintf(errlog, sizeof(errlog), "%s/tp.err", dir);
	fflush(stderr);
	saved_err = dup(2);
	f = fopen(errlog, "w+");
	REQUIRE(f && saved_err >= 0);
	dup2(fileno(f), 2);
	log_set_level(LOG_INFO);
	CHECK_EQ(gpu_prefill_restore(pf, &meta, pids, 2, outdir, "tp", &ms), 0);
	log_set_level(LOG_WARN);
	fflush(stderr);
	dup2(saved_err, 2);
	close(saved_err);
	rewind(f);
	got = fread(text, 1, sizeof(text) - 1, f);
	text[got] = '\0';
	fclose(f);
	CHECK(strstr(text, "tp: thaw filled 12 allocation(s)") != NULL);
	CHECK(strstr(text, "the start waited") != NULL);
	CHECK(strstr(text, "tp: thaw filled GPU 0: 30.00 MiB in ") != NULL);
	CHECK(strstr(text, "tp: thaw filled GPU 1: 30.00 MiB in ") != NULL);
	CHECK(strstr(text, " GB/s (its turn after ") != NULL);
	if (!strstr(text, "tp: thaw filled GPU 1: "))
		fprintf(stderr, "thawd's log:\n%s", text);
	for (int i = 0; i < 2; i++) {
		ask(&a[i], "verify", s, sizeof(s));
		CHECK_STR(s, "ok");
	}
	htod_spans(log, first, last);
	CHECK(first[0] && first[1]);
	CHECK(first[0] < last[1] && first[1] < last[0]);
	if (!(first[0] < last[1] && first[1] < last[0]))
		fprintf(stderr, "the processes' fills did not overlap: GPU 0 [0, %.1f] ms, GPU 1 "
			"[%.1f, %.1f] ms\n", (last[0] - first[0]) / 1e6, (first[1] - first[0]) / 1e6,
			(last[1] - first[0]) / 1e6);
	gpumem_release(pids, 2);
	for (int i = 0; i < 2; i++)
		app_end(&a[i]);
}

/* Strip the layout at path of its UUIDs, as a library before them wrote
 * it (six fields a line). */
static void layout_without_uuids(const char *path)
{
	char text[8192] = "", line[256];
	FILE *f = fopen(path, "r");

	REQUIRE(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		char *u = strstr(line, " GPU-");

		if (u)
			strcpy(u, "\n");
		strncat(text, line, sizeof(text) - strlen(text) - 1);
	}
	fclose(f);
	f = fopen(path, "w");
	REQUIRE(f != NULL);
	fputs(text, f);
	fclose(f);
}

/* A process that saw the GPUs in another order than the host's (its
 * ordinal 0 the mock's GPU 1, as CUDA_VISIBLE_DEVICES=1,0 makes it; "span":
 * C and D on its ordinal 1, the rest on 0): its layout names each
 * ordinal's UUID, and thawd fills each allocation on the GPU of that UUID's
 * placement, wherever the snapshot's GPUs go.  A layout without UUIDs (an
 * older library) is filled only where the snapshot's GPUs are in host
 * order, as before. */
static void prefill_order(const char *app_path)
{
	/* The snapshot's GPUs in the process's order: its GPU 0 is host GPU 1. */
	struct snapshot_gpu gpus[2] = { { .uuid = MOCK_GPU1, .index = 1 },
					{ .uuid = MOCK_GPU0, .index = 0 } };
	const char *seen[] = { "MOCK_CUDA_VISIBLE=1,0", NULL };
	/* Placed on the same GPUs, then each moved to the other. */
	const int onto[2][2] = { { 1, 0 }, { 0, 1 } };
	const char *where[2] = { "1 0", "0 1" };
	char layout[600], why[512], s[256];
	struct restore_call rc = { 0 };
	struct gpumem_status st;
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	size_t moved = 0;
	struct app a;

	app_start_with(&a, app_path, "span", lib, seen);
	ask(&a, "where", s, sizeof(s));
	CHECK_STR(s, "1 0");
	meta = (struct snapshot_meta){ .gpus = gpus, .ngpus = 2,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = &a.pid, .nns_pids = 1 } };
	rc.pid = a.pid;
	for (int r = 0; r < 2; r++) {
		struct gpu_placement place = { .n = 2, .held = true };

		CASE("placed onto GPUs %d,%d", onto[r][0], onto[r][1]);
		place.dev[0].ordinal = onto[r][0];
		place.dev[1].ordinal = onto[r][1];
		CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why,
					 sizeof(why)),
			 0);
		pf = gpu_prefill_start(&meta, outdir, outdir, &place);
		REQUIRE(pf != NULL);
		CHECK(gpu_prefill_fills(pf));
		if (!gpu_prefill_fills(pf)) {
			char cmd[800];

			snprintf(cmd, sizeof(cmd), "cat >&2 %s/" GPUMEM_LAYOUT_FMT, outdir, (int)a.pid);
			if (system(cmd))
				fprintf(stderr, "no layout\n");
		}
		CHECK_EQ(gpu_prefill_ready(pf), 0);
		do_restore(&rc);
		CHECK(rc.st.ok);
		CHECK_EQ(rc.st.prefilled_allocs, 6);
		gpu_prefill_end(pf, NULL, 0);
		/* A (its ordinal 0) and C (its ordinal 1) on the GPUs their
		 * snapshot GPUs were placed on. */
		ask(&a, "where", s, sizeof(s));
		CHECK_STR(s, where[r]);
		ask(&a, "verify", s, sizeof(s));
		CHECK_STR(s, "ok");
		gpumem_release(&a.pid, 1);
	}
	CASE_END();
	/* An older library's layout, the GPUs out of host order: not filled. */
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	snprintf(layout, sizeof(layout), "%s/" GPUMEM_LAYOUT_FMT, outdir, (int)a.pid);
	layout_without_uuids(layout);
	{
		struct gpu_placement place = { .n = 2, .held = true };

		place.dev[0].ordinal = 1;
		place.dev[1].ordinal = 0;
		pf = gpu_prefill_start(&meta, outdir, outdir, &place);
		CHECK(pf && !gpu_prefill_fills(pf));
		gpu_prefill_end(pf, NULL, 0);
	}
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 0);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	gpumem_release(&a.pid, 1);
	app_end(&a);
}

/* thawd's contexts on a start's GPUs made at once, not one GPU after the
 * other (each takes ~0.2 s on a GPU, and a `thaw start` is a new process
 * that makes them for every start): the mock holds a context made on one
 * GPU until one on the other began, and counts a wait in vain.  thawd makes
 * its contexts once a process, so this runs in a process of its own, before
 * any other fill. */
static void contexts_at_once(const char *app_path)
{
	struct snapshot_gpu gpus[2] = { { .uuid = MOCK_GPU0, .index = 0 },
					{ .uuid = MOCK_GPU1, .index = 1 } };
	struct gpu_placement place = { .n = 2, .held = true };
	struct restore_call rc = { 0 };
	struct gpumem_status st;
	struct snapshot_meta meta;
	struct gpu_prefill *pf;
	int (*missed)(void);
	char why[512], s[64];
	size_t moved = 0;
	struct app a;
	void *cu;
	pid_t pid = fork();
	int ws;

	REQUIRE(pid >= 0);
	if (pid) {
		REQUIRE(waitpid(pid, &ws, 0) == pid);
		CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
		return;
	}
	place.dev[0].ordinal = 0;
	place.dev[1].ordinal = 1;
	app_start(&a, app_path, "span", true);
	meta = (struct snapshot_meta){ .gpus = gpus, .ngpus = 2,
				       .gpu_memory = { .recorded = true, .thaw = true,
						       .ns_pids = &a.pid, .nns_pids = 1 } };
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	setenv("MOCK_CUDA_CTX_MEET", "contexts", 1);
	pf = gpu_prefill_start(&meta, outdir, outdir, &place);
	REQUIRE(pf != NULL);
	CHECK(gpu_prefill_fills(pf));
	CHECK_EQ(gpu_prefill_ready(pf), 0);
	unsetenv("MOCK_CUDA_CTX_MEET");
	cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	missed = cu ? (int (*)(void))dlsym(cu, "mock_cuda_meet_missed") : NULL;
	REQUIRE(missed != NULL);
	CHECK_EQ(missed(), 0);
	rc.pid = a.pid;
	do_restore(&rc);
	CHECK(rc.st.ok);
	CHECK_EQ(rc.st.prefilled_allocs, 6);
	gpu_prefill_end(pf, NULL, 0);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	gpumem_release(&a.pid, 1);
	app_end(&a);
	_exit(check_failures ? 1 : 0);
}

/* Where the library does not apply, the reason. */
static void fallbacks(const char *app_path, const char *static_path)
{
	struct gpumem_status st;
	char why[512];
	size_t moved = 9;
	struct app a;

	/* Loaded, but no CUDA went through it. */
	app_start(&a, app_path, "nocuda", true);
	CHECK(gpumem_loaded(a.pid));
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(moved, 0);
	CHECK(!st.ok);
	CHECK(strstr(why, "no CUDA call of this process went through libthaw-cuda") != NULL);
	app_end(&a);

	/* Not preloaded (thaw's signal is never sent to it). */
	app_start(&a, app_path, "nocuda", false);
	CHECK(!gpumem_loaded(a.pid));
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	CHECK_EQ(moved, 0);
	CHECK(strstr(why, "is not loaded in process") != NULL);
	app_end(&a);

	/* Statically linked: LD_PRELOAD has no effect. */
	if (static_path) {
		app_start(&a, static_path, "nocuda", true);
		CHECK(!gpumem_loaded(a.pid));
		CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why,
					 sizeof(why)),
			 0);
		CHECK(strstr(why, "statically linked") != NULL);
		app_end(&a);
	}
}

/* The library exports what exports.h lists, each once, and nothing else. */
#define LISTED_HELD(sym) #sym,
#define LISTED_OWN(sym, fn) #sym,
static const char *const listed[] = { GM_EXPORTS_HELD(LISTED_HELD) GM_EXPORTS_OWN_MEM(LISTED_OWN)
					      GM_EXPORTS_OWN_PROC(LISTED_OWN) "dlsym" };

static void exports(void)
{
	bool seen[ARRAY_SIZE(listed)] = { false };
	char cmd[1200], line[512], name[200];
	size_t n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", lib);
	p = popen(cmd, "r");
	REQUIRE(p != NULL);
	while (fgets(line, sizeof(line), p)) {
		char type;
		size_t i;

		if (sscanf(line, "%*s %c %199s", &type, name) != 2 || (type != 'T' && type != 'W'))
			continue;
		for (i = 0; i < ARRAY_SIZE(listed) && strcmp(listed[i], name); i++)
			;
		CASE("export %s", name);
		CHECK(i < ARRAY_SIZE(listed));
		if (i < ARRAY_SIZE(listed)) {
			CHECK(!seen[i]);
			seen[i] = true;
		}
		n++;
	}
	CASE_END();
	CHECK_EQ(pclose(p), 0);
	for (size_t i = 0; i < ARRAY_SIZE(listed); i++) {
		CASE("listed %s", listed[i]);
		CHECK(seen[i]);
	}
	CASE_END();
	CHECK_EQ(n, ARRAY_SIZE(listed));
}

/* An answer as a library of an older snapshot writes it (a restore talks
 * to the library the image carries): eight figures per device, no key of
 * a newer field.  This process plays the library: a thread takes thaw's
 * signal (blocked everywhere else) and writes the answer. */
static void *old_library(void *arg)
{
	const char *out = arg;
	char path[600], text[1024];
	siginfo_t si;
	sigset_t set;
	FILE *f;

	sigemptyset(&set);
	sigaddset(&set, GPUMEM_SIGNAL);
	if (sigwaitinfo(&set, &si) != GPUMEM_SIGNAL)
		return NULL;
	snprintf(text, sizeof(text),
		 "{\"seq\": %u, \"op\": \"save\", \"ok\": true, \"error\": \"\", "
		 "\"allocs\": 3, \"bytes\": 300, \"left_allocs\": 1, \"left_bytes\": 7, "
		 "\"dev_bytes\": [100, 0, 0, 0, 0, 0, 0, 200], \"ms\": {\"hold\": 1.5, "
		 "\"total\": 9.25}, \"copy_threads\": 2, \"prefill_ms\": 4.5}\n",
		 GPUMEM_VALUE_SEQ(si.si_value.sival_int));
	snprintf(path, sizeof(path), "%s/" GPUMEM_STATUS_FMT ".tmp", out, (int)getpid());
	f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
		snprintf(text, sizeof(text), "%s/" GPUMEM_STATUS_FMT, out, (int)getpid());
		rename(path, text);
	}
	return NULL;
}

static void old_answer(void)
{
	struct gpumem_status st;
	sigset_t set, old;
	pid_t self = getpid();
	pthread_t t;

	sigemptyset(&set);
	sigaddset(&set, GPUMEM_SIGNAL);
	REQUIRE(pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
	REQUIRE(pthread_create(&t, NULL, old_library, outdir) == 0);
	CHECK_EQ(gpumem_request(&self, &self, 1, GPUMEM_OP_SAVE, outdir, 30000, &st), 0);
	pthread_join(t, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	CHECK(st.answered && st.ok);
	CHECK_EQ(st.allocs, 3);
	CHECK_EQ(st.bytes, 300);
	CHECK_EQ(st.left_bytes, 7);
	CHECK_EQ(ARRAY_SIZE(st.dev_bytes), CUDA_MAX_DEVICES);
	CHECK_EQ(st.dev_bytes[0], 100);
	CHECK_EQ(st.dev_bytes[7], 200);
	CHECK_EQ(st.dev_bytes[8], 0);
	CHECK(st.hold_ms == 1.5 && st.total_ms == 9.25 && st.prefill_ms == 4.5);
	CHECK_EQ(st.copy_threads, 2);
	CHECK_EQ(st.prefilled_allocs, 0);
	CHECK_STR(st.register_error, "");
}

int main(int argc, char **argv)
{
	const char *child_app = gpumem_thawd_args(argc, argv, "--prefill");
	char app[512], stat_app[512], c[4096];
	bool have_static;

	signal(SIGPIPE, SIG_IGN);
	if (child_app) {
		/* The fill's cases: thawd's side, on the fake driver. */
		contexts_at_once(child_app);
		several_unfilled(child_app);
		prefill(child_app);
		fill_order(child_app);
		library_order(child_app);
		context_take(child_app);
		prefill_span(child_app);
		prefill_order(child_app);
		order_around_restore(child_app);
		prefill_shared(child_app);
		prefill_tp(child_app);
		prefill_shared_2gpu(child_app);
		let_go_at_exit(child_app);
		return check_failures ? 1 : 0;
	}
	gpumem_test_setup(app, sizeof(app));
	snprintf(stat_app, sizeof(stat_app), "%s/app-static", dir);
	/* The static one never calls the driver: only "nocuda". */
	snprintf(c, sizeof(c),
		 "${CC:-cc} -O1 -static -DGPUMEM_APP_STATIC -o %s -x c - 2>/dev/null <<'E'\n"
		 "#include <stdio.h>\n#include <string.h>\n"
		 "int main(void){char l[64];setvbuf(stdout,0,_IOLBF,0);puts(\"ready\");"
		 "while(fgets(l,64,stdin)&&strncmp(l,\"quit\",4))puts(\"?\");return 0;}\nE",
		 stat_app);
	have_static = system(c) == 0;
	if (!have_static)
		printf("no static libc: the statically linked case is not run\n");
	exports();
	old_answer();
	save_and_restore(app);
	shared(app);
	shared_importer_ends(app);
	shared_creator_ends(app);
	shared_importer_fails(app);
	shared_kept(app);
	gpumem_thawd_child(argv[0], "--prefill", app);
	/* Its last fill's let-go done before it exited (let_go_at_exit). */
	snprintf(c, sizeof(c), "%s/exit-unmaps.log", dir);
	CHECK_EQ(count_lines(c), 6);
	fallbacks(app, have_static ? stat_app : NULL);
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
