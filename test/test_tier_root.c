/* SPDX-License-Identifier: Apache-2.0 */
/* test_tier_root.c — the RAM tier's root on a huge-page tmpfs: mounted once
 * (also when several processes prepare it at once), found and reused after a
 * "restart" with what it holds, resized to a new budget; a plain directory
 * when huge pages are off, when the root is not the default one under auto,
 * or when the directory holds files already (an error with THAW_TIER_HUGE=1);
 * a mount someone else made is used as it is and never unmounted by thaw. */
#include "common/log.h"
#include "common/util.h"
#include "restore/tier.h"
#include "test/check.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[PATH_MAX - 64], dir[PATH_MAX];

/* How many mounts sit at path, and the options of the topmost. */
static int mounts_at(const char *path, char *opts, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int n = 0;

	REQUIRE(f);
	while (fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX], fs[64], src[256], o[1024];
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 ||
		    sscanf(dash + 3, "%63s %255s %1023s", fs, src, o) != 3 || strcmp(mp, path))
			continue;
		n++;
		if (opts)
			snprintf(opts, len, "%s %s %s", fs, src, o);
	}
	fclose(f);
	return n;
}

static void cleanup(void)
{
	while (mounts_at(dir, NULL, 0) > 0 && umount2(dir, MNT_DETACH) == 0)
		;
	rm_rf(base);
}

static void write_small(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	REQUIRE(fd >= 0);
	CHECK_EQ(write(fd, "x", 1), 1);
	close(fd);
}

/* Several processes preparing one root at once: one mount. */
static void test_concurrent(void)
{
	pid_t pids[4];
	int st, ok = 0;

	for (int i = 0; i < 4; i++) {
		pids[i] = fork();
		REQUIRE(pids[i] >= 0);
		if (!pids[i])
			_exit(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_ON, NULL) ? 1 : 0);
	}
	for (int i = 0; i < 4; i++)
		if (waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) && !WEXITSTATUS(st))
			ok++;
	CHECK_EQ(ok, 4);
	CHECK_EQ(mounts_at(dir, NULL, 0), 1);
	CHECK_EQ(tier_root_unmount(dir), 0);
	CHECK_EQ(mounts_at(dir, NULL, 0), 0);
}

int main(void)
{
	char opts[2048], path[PATH_MAX + 32], why[1024];
	enum tier_root_kind kind;
	int ret;

	if (geteuid() != 0) {
		printf("skip: not root, cannot mount\n");
		return 77;
	}
	if (access("/sys/kernel/mm/transparent_hugepage/shmem_enabled", F_OK) < 0) {
		printf("skip: no huge pages for tmpfs in this kernel\n");
		return 77;
	}
	snprintf(base, sizeof(base), "/dev/shm/thaw-test-tier-root-%d", getpid());
	snprintf(dir, sizeof(dir), "%s/tier", base);
	atexit(cleanup);
	REQUIRE(mkdir_p(dir, 0700) == 0);
	/* Where mounting a tmpfs is refused (a container without CAP_SYS_ADMIN), skip. */
	if (mount("thaw-test", dir, "tmpfs", 0, "size=1m") < 0) {
		printf("skip: cannot mount a tmpfs here: %s\n", strerror(errno));
		return 77;
	}
	REQUIRE(umount2(dir, 0) == 0);

	/* Off, and auto on a root that is not the default: plain, no mount. */
	CHECK_EQ(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_OFF, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_PLAIN);
	CHECK_EQ(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_AUTO, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_PLAIN);
	CHECK_EQ(mounts_at(dir, NULL, 0), 0);
	CHECK_EQ(tier_root_probe(dir, CONFIG_HUGE_ON, &kind, why, sizeof(why)), 0);
	CHECK_EQ(kind, TIER_ROOT_WOULD_MOUNT);
	CHECK_EQ(mounts_at(dir, NULL, 0), 0); /* a probe mounts nothing */

	/* On: mounted, with huge pages and a size above the budget. */
	CHECK_EQ(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_ON, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_MOUNTED);
	CHECK_EQ(mounts_at(dir, opts, sizeof(opts)), 1);
	printf("mounted: %s\n", opts);
	CHECK(strstr(opts, "tmpfs thaw-tier ") == opts);
	CHECK(strstr(opts, "huge=within_size"));
	CHECK(strstr(opts, "size=139264k")); /* 64 MiB + 1/8 + 64 MiB, in KiB */
	/* A restart: found, reused, what it holds kept, resized to a new budget. */
	snprintf(path, sizeof(path), "%s/kept", dir);
	write_small(path);
	CHECK_EQ(tier_root_prepare(dir, 128ull << 20, CONFIG_HUGE_ON, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_REUSED);
	CHECK_EQ(mounts_at(dir, opts, sizeof(opts)), 1);
	CHECK(strstr(opts, "size=212992k"));
	CHECK(access(path, F_OK) == 0);
	/* Huge pages off now: the mount thaw made is still what is there. */
	CHECK_EQ(tier_root_prepare(dir, 128ull << 20, CONFIG_HUGE_OFF, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_REUSED);
	/* The tier works on it. */
	struct tier *t = tier_open(dir, 64ull << 20, NULL, NULL);
	CHECK(t);
	tier_close(t);
	CHECK_EQ(tier_root_unmount(dir), 0);
	CHECK_EQ(mounts_at(dir, NULL, 0), 0);
	CHECK_EQ(tier_root_unmount(dir), -ENOENT);

	/* A directory holding files (a tier used without huge pages before):
	 * never mounted over, which would hide them and the RAM they hold. */
	write_small(path);
	CHECK_EQ(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_ON, &kind), -EOPNOTSUPP);
	CHECK_EQ(mounts_at(dir, NULL, 0), 0);
	rm_rf(dir);
	REQUIRE(mkdir_p(dir, 0700) == 0);

	/* Someone else's mount: used as it is, never unmounted by thaw. */
	REQUIRE(mount("someone", dir, "tmpfs", 0, "size=2m") == 0);
	CHECK_EQ(tier_root_prepare(dir, 64ull << 20, CONFIG_HUGE_ON, &kind), 0);
	CHECK_EQ(kind, TIER_ROOT_USER);
	CHECK_EQ(tier_root_unmount(dir), -ENOENT);
	CHECK_EQ(mounts_at(dir, opts, sizeof(opts)), 1);
	CHECK(strstr(opts, "tmpfs someone ") == opts);
	REQUIRE(umount2(dir, 0) == 0);

	test_concurrent();
	ret = check_failures ? 1 : 0;
	return ret;
}
