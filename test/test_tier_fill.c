/* SPDX-License-Identifier: Apache-2.0 */
/* test_tier_fill.c — a RAM tier entry's device memory damaged is caught by
 * thawd's fill (restore/gpu_prefill.c) on the fake driver (test/cuda_mock.c)
 * and never reaches the program: the fill verifies each slice against the
 * checksums the tier made when it materialised the entry, the start's GPU
 * restore fails with the program's calls still held (the library is not
 * asked to copy the same damaged file instead), and the entry is dropped
 * and materialised again from the store, after which the program gets its
 * bytes back, byte for byte.
 *
 * The program of test/fixtures/gpumem_app.c saves its device memory
 * (gpu-<pid>.mem and its layout); that directory is put into a store as a
 * snapshot and materialised into a tier; 63 blocks of 4 KiB of the entry's
 * gpu-<pid>.mem are overwritten, as a host's memory fault would.  Then
 * the same where no fill applies (THAW_GPU_PREFILL=0): the files are
 * checked before the library is asked to copy them.
 *
 * Last, thawd's shutdown (gpu_prefill_finish): the pin cache's reaper
 * thread ends and every tier file the fills pinned is unmapped; a later
 * pin starts the reaper again and the next stop ends it again.
 */
#include "common/gpumem.h"
#include "common/util.h"
#include "restore/gpu_pin.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "restore/tier.h"
#include "store/store.h"
#include "test/check.h"
#include "test/gpumem_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Does the entry's file equal the program's own save? */
static bool same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t lx = 0, ly = 0;
	bool same = !read_file(a, &x, &lx, 1 << 30) && !read_file(b, &y, &ly, 1 << 30) &&
		    lx == ly && !memcmp(x, y, lx);

	free(x);
	free(y);
	return same;
}

/* 63 blocks of 4 KiB, spread over the file's first 28 MiB, overwritten. */
static void damage(const char *path)
{
	char junk[4096];
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	REQUIRE(fd >= 0);
	memset(junk, 0x5a, sizeof(junk));
	for (int i = 0; i < 63; i++)
		REQUIRE(pwrite(fd, junk, sizeof(junk), (off_t)i * (448 << 10) + 4096) ==
			(ssize_t)sizeof(junk));
	close(fd);
}

/* thawd's fill from the entry at tier_dir, then the library's RESTORE as a
 * start asks for it (gpu_prefill_restore): its return. */
static int fill_and_restore(const struct snapshot_meta *meta, pid_t pid, const char *tier_dir)
{
	struct gpu_placement place = { .n = 1, .held = true, .claim = { 40 * MIB } };
	double ms = 0;

	return gpu_prefill_restore(gpu_prefill_start(meta, tier_dir, outdir, &place), meta, &pid,
				   1, outdir, "tier-fill-test", &ms);
}

static void damaged_entry(const char *app_path)
{
	struct mock_snapshot m;
	char why[512], s[256], sdir[400], tdir[400], saved[600], orig[600], *bytes = NULL;
	char entry_file[PATH_MAX + 64];
	size_t len = 0;
	const char *paths[1] = { outdir };
	char id[CHUNK_ID_LEN];
	struct tier_lease *l = NULL;
	struct gpumem_status st;
	struct tier_stats ts;
	struct store *store;
	struct tier *t;
	size_t moved = 0;
	unsigned long c1;
	struct app a;

	app_start(&a, app_path, NULL, true);
	/* The mock's GPU 0, the UUID the library's layout names. */
	mock_snapshot_init(&m, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f", a.pid);
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	REQUIRE(st.allocs == 6);
	snprintf(orig, sizeof(orig), "%s/" GPUMEM_FILE_FMT, outdir, (int)a.pid);
	/* Kept as it was: a later save writes the file again. */
	snprintf(saved, sizeof(saved), "%s/first.mem", dir);
	REQUIRE(read_file(orig, &bytes, &len, 1 << 30) == 0);
	REQUIRE(write_file_atomic(saved, bytes, len, 0600) == 0);
	free(bytes);

	/* The saved memory as a snapshot, materialised into a tier. */
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	snprintf(tdir, sizeof(tdir), "%s/tier", dir);
	store = store_open(sdir);
	REQUIRE(store);
	REQUIRE(store_put(store, "fill", paths, 1, NULL, false, id, NULL) == 0);
	t = tier_open(tdir, 1ull << 30, store, NULL);
	REQUIRE(t);
	REQUIRE(tier_acquire(t, id, &l) == 0);
	snprintf(entry_file, sizeof(entry_file), "%s/" GPUMEM_FILE_FMT, tier_lease_path(l),
		 (int)a.pid);
	REQUIRE(same_file(entry_file, saved));

	/* Damaged: the start's GPU restore fails, the program still held. */
	damage(entry_file);
	c1 = count(&a);
	CHECK(fill_and_restore(&m.meta, a.pid, tier_lease_path(l)) != 0);
	usleep(200000);
	CHECK_EQ(count(&a), c1);
	tier_release(l);
	l = NULL;

	/* The next acquire materialises it again, from the store. */
	REQUIRE(tier_acquire(t, id, &l) == 0);
	snprintf(entry_file, sizeof(entry_file), "%s/" GPUMEM_FILE_FMT, tier_lease_path(l),
		 (int)a.pid);
	CHECK(same_file(entry_file, saved));
	CHECK(!tier_lease_hit(l));
	tier_get_stats(t, &ts);
	CHECK_EQ(ts.damaged[TIER_FOUND_FILL], 1);
	CHECK_EQ(ts.rematerialized, 1);

	/* Filled from it, the program goes on, byte for byte. */
	CHECK_EQ(fill_and_restore(&m.meta, a.pid, tier_lease_path(l)), 0);
	for (int i = 0; i < 200 && count(&a) == c1; i++)
		usleep(10000);
	CHECK(count(&a) > c1);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	tier_release(l);
	l = NULL;

	/* No fill (THAW_GPU_PREFILL=0): the files are checked all the same
	 * before the library is asked to copy. */
	gpumem_release(&a.pid, 1);
	CHECK_EQ(gpumem_save_all(&a.pid, &a.pid, 1, outdir, 30000, &st, &moved, why, sizeof(why)),
		 0);
	REQUIRE(tier_acquire(t, id, &l) == 0);
	damage(entry_file);
	setenv("THAW_GPU_PREFILL", "0", 1);
	c1 = count(&a);
	CHECK(fill_and_restore(&m.meta, a.pid, tier_lease_path(l)) != 0);
	usleep(200000);
	CHECK_EQ(count(&a), c1);
	tier_release(l);
	REQUIRE(tier_acquire(t, id, &l) == 0);
	CHECK(same_file(entry_file, saved));
	tier_get_stats(t, &ts);
	CHECK_EQ(ts.damaged[TIER_FOUND_FILL], 2);
	CHECK_EQ(ts.rematerialized, 2);
	CHECK_EQ(fill_and_restore(&m.meta, a.pid, tier_lease_path(l)), 0);
	unsetenv("THAW_GPU_PREFILL");
	for (int i = 0; i < 200 && count(&a) == c1; i++)
		usleep(10000);
	ask(&a, "verify", s, sizeof(s));
	CHECK_STR(s, "ok");
	tier_release(l);
	gpumem_release(&a.pid, 1);
	app_end(&a);
	tier_close(t);
	store_close(store);
}

/* Threads of this process named name. */
static int threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	REQUIRE(d);
	while ((e = readdir(d))) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		n += !strcmp(comm, name);
	}
	closedir(d);
	return n;
}

/* Is a file whose path has needle in it mapped in this process? */
static bool mapped(const char *needle)
{
	char line[PATH_MAX + 256];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	REQUIRE(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* thawd's shutdown ends the pin cache's reaper and unmaps what it pinned. */
static void pin_cache_stops(void)
{
	char tier[400], saved[600];
	struct pinned_file *f;

	snprintf(tier, sizeof(tier), "%s/tier/", dir);
	snprintf(saved, sizeof(saved), "%s/first.mem", dir);
	/* The fills above started the reaper (the entry's file they pinned
	 * may be let go already: the tier dropped it). */
	CHECK_EQ(threads_named("thaw-pin-reap"), 1);
	gpu_prefill_finish();
	CHECK_EQ(threads_named("thaw-pin-reap"), 0);
	CHECK(!mapped(tier));

	/* Pinned again after a stop: the reaper again, and the stop again. */
	f = gpu_pin_get(saved, 0);
	REQUIRE(f);
	CHECK_EQ(threads_named("thaw-pin-reap"), 1);
	CHECK(mapped(saved));
	gpu_pin_put(f);
	gpu_prefill_finish();
	CHECK_EQ(threads_named("thaw-pin-reap"), 0);
	CHECK(!mapped(saved));
	/* Nothing pinned, nothing running: a no-op. */
	gpu_prefill_finish();
}

int main(int argc, char **argv)
{
	const char *child_app = gpumem_thawd_args(argc, argv, "--child");
	char app[512];

	signal(SIGPIPE, SIG_IGN);
	if (child_app) {
		damaged_entry(child_app);
		pin_cache_stops();
		return check_failures ? 1 : 0;
	}
	gpumem_test_setup(app, sizeof(app));
	gpumem_thawd_child(argv[0], "--child", app);
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
