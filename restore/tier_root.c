/* SPDX-License-Identifier: Apache-2.0 */
/* tier_root.c — the RAM tier's root on its own huge-page tmpfs; see tier.h.
 *
 * Writing 2 GiB into a tmpfs with 4 KiB pages allocates, zeroes, charges and
 * puts on the LRU 524288 pages; with huge pages, 1024.  On the development VM a
 * sequential 2 GiB copy took 0.34-0.57 s into a huge=always tmpfs against
 * 1.0-1.4 s into /dev/shm, and on 16 cores the engine's writes were bound by
 * exactly that page allocation (bench/LOG.md, Engine).
 *
 * The mount is ours when its source is TIER_MOUNT_SOURCE: a restart (or a
 * second thawd) finds it and reuses it, and tier_open's check of what is in
 * it keeps complete entries as on a plain directory.  It is never unmounted
 * by thawd: like the files of a plain tier, it outlives the process.
 */
#define LOG_PREFIX "tier: "
#include "restore/tier.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <unistd.h>

#define TIER_MOUNT_SOURCE "thaw-tier"
#define TIER_SHMEM_THP    "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
/* within_size: huge pages where the file's size covers them.  The engine
 * sizes every file before writing it, so large image files are all huge
 * pages; the many small CRIU files (a few KiB each) keep 4 KiB pages, where
 * huge=always would give each a 2 MiB page. */
#define TIER_HUGE_OPT "within_size"

/* The mount whose mount point is path (the topmost, if stacked): its
 * filesystem type, source and super-block options.  -ENOENT: not a mount point. */
static int find_mount(const char *path, char *fstype, char *source, char *opts, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
		char *save = NULL, *tok, *mp = NULL, *dash;
		int field = 0;

		dash = strstr(line, " - ");
		if (!dash)
			continue;
		*dash = '\0';
		for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			if (++field == 5)
				mp = tok;
		if (!mp)
			continue;
		mountinfo_unescape(mp);
		if (strcmp(mp, path))
			continue;
		char *t = strtok_r(dash + 3, " \n", &save), *src = strtok_r(NULL, " \n", &save);
		char *o = strtok_r(NULL, " \n", &save);
		snprintf(fstype, len, "%s", t ? t : "");
		snprintf(source, len, "%s", src ? src : "");
		snprintf(opts, len, "%s", o ? o : "");
		ret = 0; /* keep going: a later line is a mount on top of it */
	}
	free(line);
	fclose(f);
	return ret;
}

/* Anything in dir but an empty .locks? */
static bool dir_in_use(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool used = false;

	if (!d)
		return false;
	while (!used && (de = readdir(d))) {
		char p[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (strcmp(de->d_name, ".locks")) {
			used = true;
			continue;
		}
		snprintf(p, sizeof(p), "%s/.locks", dir);
		DIR *l = opendir(p);
		struct dirent *le;
		while (l && (le = readdir(l)))
			if (strcmp(le->d_name, ".") && strcmp(le->d_name, ".."))
				used = true;
		if (l)
			closedir(l);
	}
	closedir(d);
	return used;
}

/* A short sysfs file into buf, NUL-terminated. */
static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 0;
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		ret = -errno;
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	return ret;
}

const char *tier_root_kind_name(enum tier_root_kind k)
{
	switch (k) {
	case TIER_ROOT_MOUNTED:
		return "huge-page tmpfs, mounted now";
	case TIER_ROOT_REUSED:
		return "huge-page tmpfs, mounted earlier by thaw";
	case TIER_ROOT_USER:
		return "a mount of its own, used as it is";
	case TIER_ROOT_WOULD_MOUNT:
		return "a huge-page tmpfs is mounted there when thawd starts";
	default:
		return "plain directory";
	}
}

/* Does this VM hand free memory back to its host in blocks the size of a
 * huge page?  virtio_balloon with free page reporting (feature bit 5) reports
 * free blocks of page_reporting_order and up a few seconds after they are
 * freed; a huge page is then allocated from a block the host has taken back,
 * and writing it costs host faults and zeroing.  Measured on the development
 * VM (order 9): 2 GiB written into a huge-page tmpfs in 0.31-0.47 s right
 * after the same memory was freed, 2.6-4.9 s after 4 s idle, against
 * 1.1-1.6 s either way into /dev/shm (4 KiB pages come from fragments too
 * small to be reported). */
bool tier_root_page_reporting(void)
{
	const char *drv = "/sys/bus/virtio/drivers/virtio_balloon";
	char buf[256] = "", path[PATH_MAX];
	DIR *d;
	struct dirent *de;
	bool on = false;

	/* sysfs files say they are 4096 bytes long: read_file() will not do. */
	if (read_small("/sys/module/page_reporting/parameters/page_reporting_order", buf,
		       sizeof(buf)) ||
	    strtol(buf, NULL, 10) > 9) /* above a huge page's order (x86-64, arm64 4K) */
		return false;
	d = opendir(drv);
	if (!d)
		return false;
	while (!on && (de = readdir(d))) {
		if (strncmp(de->d_name, "virtio", 6))
			continue;
		snprintf(path, sizeof(path), "%s/%s/features", drv, de->d_name);
		on = read_small(path, buf, sizeof(buf)) == 0 && strlen(buf) > 5 &&
		     buf[5] == '1'; /* VIRTIO_BALLOON_F_REPORTING */
	}
	closedir(d);
	return on;
}

/* What is at dir (given: as the configuration says it, dir: its real path)
 * and whether a huge-page tmpfs could be mounted there; why:
 * the reason in words when the answer is TIER_ROOT_PLAIN. */
static enum tier_root_kind judge(const char *given, const char *dir, enum config_huge mode,
				 char *why, size_t len)
{
	char fstype[256], source[256], opts[1024];

	if (find_mount(dir, fstype, source, opts, sizeof(opts)) == 0) {
		if (!strcmp(fstype, "tmpfs") && !strcmp(source, TIER_MOUNT_SOURCE))
			return TIER_ROOT_REUSED;
		snprintf(why, len, "%s (%s)", fstype, opts);
		return TIER_ROOT_USER;
	}
	if (mode == CONFIG_HUGE_OFF) {
		snprintf(why, len, "huge pages off (THAW_TIER_HUGE=0)");
		return TIER_ROOT_PLAIN;
	}
	if (mode == CONFIG_HUGE_AUTO && strcmp(given, CONFIG_RAM_TIER_DEFAULT) &&
	    strcmp(dir, CONFIG_RAM_TIER_DEFAULT)) {
		snprintf(why, len, "not the default root " CONFIG_RAM_TIER_DEFAULT
				   " (THAW_TIER_HUGE=1 mounts one here too)");
		return TIER_ROOT_PLAIN;
	}
	if (mode == CONFIG_HUGE_AUTO && tier_root_page_reporting()) {
		snprintf(why, len, "this VM gives free memory back to its host in huge-page blocks "
				   "(virtio_balloon free page reporting): huge pages would be slower "
				   "(THAW_TIER_HUGE=1 mounts one anyway)");
		return TIER_ROOT_PLAIN;
	}
	if (access(TIER_SHMEM_THP, F_OK) < 0) {
		snprintf(why, len, "no huge pages for tmpfs in this kernel (%s)", TIER_SHMEM_THP);
		return TIER_ROOT_PLAIN;
	}
	if (geteuid() != 0) {
		snprintf(why, len, "not root: cannot mount a tmpfs");
		return TIER_ROOT_PLAIN;
	}
	if (dir_in_use(dir)) {
		snprintf(why, len, "it holds files from a run without huge pages (empty it to get them)");
		return TIER_ROOT_PLAIN;
	}
	return TIER_ROOT_WOULD_MOUNT;
}

int tier_root_probe(const char *dir, enum config_huge mode, enum tier_root_kind *kind, char *why,
		    size_t len)
{
	char real[PATH_MAX];

	why[0] = '\0';
	/* A root that does not exist yet would be created under its parent. */
	if (!realpath(dir, real))
		snprintf(real, sizeof(real), "%s", dir);
	*kind = judge(dir, real, mode, why, len);
	return 0;
}

/* Bytes of the mount: the budget, and room for what the budget does not
 * count: the tier's metadata and locks, and the zeroed rest of a huge page
 * that a hole or a file's end leaves partly unwritten. */
static uint64_t mount_size(uint64_t budget)
{
	return ALIGN_UP(budget + budget / 8 + (64ull << 20), 2ull << 20);
}

/* nosuid and nodev, not noexec: a GPU function maps libthaw-cuda
 * executable from its snapshot's tier entry (bound at /.thaw-gpu), and in a
 * user namespace a bind cannot drop a noexec its source has.  What a
 * function may not run from the tier, its bind says (/.thaw is noexec). */
#define TIER_MOUNT_FLAGS (MS_NOSUID | MS_NODEV)

static int do_mount(const char *dir, uint64_t budget, char *why, size_t len)
{
	char opts[128];

	snprintf(opts, sizeof(opts), "size=%llu,huge=" TIER_HUGE_OPT ",mode=0700",
		 (unsigned long long)mount_size(budget));
	if (mount(TIER_MOUNT_SOURCE, dir, "tmpfs", TIER_MOUNT_FLAGS, opts) < 0) {
		int ret = -errno;
		snprintf(why, len, "mount -t tmpfs -o %s failed: %s", opts, strerror(errno));
		return ret;
	}
	return 0;
}

/* Our mount, found again: follow a budget that changed since it was made
 * (a tmpfs cannot shrink below what it holds: then it keeps its size). */
static void resize(const char *dir, uint64_t budget)
{
	char opts[64];

	snprintf(opts, sizeof(opts), "size=%llu", (unsigned long long)mount_size(budget));
	if (mount(NULL, dir, NULL, MS_REMOUNT | TIER_MOUNT_FLAGS, opts) < 0)
		pr_warn("%s: cannot resize the tier's tmpfs to %s: %s", dir, opts, strerror(errno));
}

int tier_root_prepare(const char *dir, uint64_t budget, enum config_huge mode,
		      enum tier_root_kind *kindp)
{
	char real[PATH_MAX], parent[PATH_MAX], why[1024] = "", *slash;
	enum tier_root_kind kind = TIER_ROOT_PLAIN;
	int lock = -1, ret;

	ret = dir_make_private(dir);
	if (ret)
		return ret;
	if (!realpath(dir, real)) {
		ret = -errno;
		pr_perror("realpath %s", dir);
		return ret;
	}
	/* Two thawds starting at once must not stack two mounts (the lower
	 * one's entries would hold RAM, unseen): the check and the mount are
	 * done under a lock on the parent directory. */
	snprintf(parent, sizeof(parent), "%s", real);
	slash = strrchr(parent, '/');
	if (slash)
		*(slash == parent ? slash + 1 : slash) = '\0';
	lock = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lock >= 0 && flock(lock, LOCK_EX) < 0) {
		close(lock);
		lock = -1;
	}
	kind = judge(dir, real, mode, why, sizeof(why));
	if (kind == TIER_ROOT_WOULD_MOUNT) {
		ret = do_mount(real, budget, why, sizeof(why));
		kind = ret ? TIER_ROOT_PLAIN : TIER_ROOT_MOUNTED;
	} else if (kind == TIER_ROOT_REUSED) {
		resize(real, budget);
	}
	ret = 0;
	if (kind == TIER_ROOT_PLAIN && mode == CONFIG_HUGE_ON) {
		pr_err("%s: THAW_TIER_HUGE=1 but no huge-page tmpfs: %s", dir, why);
		ret = -EOPNOTSUPP;
		goto out;
	}
	if (kind == TIER_ROOT_MOUNTED || kind == TIER_ROOT_REUSED)
		pr_info("%s: %s (huge=" TIER_HUGE_OPT ", size %llu MiB)", dir,
			tier_root_kind_name(kind), (unsigned long long)(mount_size(budget) >> 20));
	else
		pr_info("%s: %s: %s", dir, tier_root_kind_name(kind), why);
	if (kindp)
		*kindp = kind;
out:
	if (lock >= 0)
		close(lock);
	return ret;
}

int tier_root_unmount(const char *dir)
{
	char real[PATH_MAX], fstype[256], source[256], opts[1024];

	if (!realpath(dir, real))
		return -errno;
	if (find_mount(real, fstype, source, opts, sizeof(opts)) ||
	    strcmp(source, TIER_MOUNT_SOURCE) || strcmp(fstype, "tmpfs"))
		return -ENOENT; /* not ours: never unmount what someone else made */
	if (umount2(real, MNT_DETACH) < 0) {
		int ret = -errno;
		pr_perror("umount %s", real);
		return ret;
	}
	return 0;
}
