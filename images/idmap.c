/* SPDX-License-Identifier: Apache-2.0 */
/* idmap.c — an image's rootfs as a user namespace's range sees it
 * (image_idmap, image_idmap_prune).
 *
 * A function from an image in a user namespace runs as uid 0 of a range of
 * host uids (function/userns.h), but the image's files belong to host uids
 * 0..N: seen from the range they would all be nobody's, root's 0600 files
 * unreadable.  So the container's root is an idmapped mount of the cached
 * rootfs (mount_setattr(MOUNT_ATTR_IDMAP) with the range's mapping): host
 * uid k on disk is the range's base + k through it, so inside the
 * container every file has the owner the image gave it.  It is made read-only
 * in thawd's own mount namespace, so the flag is locked in every container's
 * copy: the range, which owns what it sees there, cannot remount it
 * writable, and the files on disk stay host root's, shared by every function
 * on the image, out of its reach.
 *
 * Not a shifted copy of the rootfs per range (a chown of every entry by
 * +base): that costs the image's size in disk and a full copy per function,
 * where the mount costs neither; CRIU 4.2 knows nothing of idmapped mounts
 * (it ignores the "idmapped" option in mountinfo) and needs not: it dumps
 * the container's root as the bind it is, and runc's restore binds the
 * root it is given, this mount, whose bind keeps the mapping
 * (test/e2e_userns_image.sh snapshots and restores it, mapped restores
 * too).
 *
 *	<data>/images/idmap/             a private bind mount of itself: nothing
 *	                                 mounted in it propagates anywhere
 *	<data>/images/idmap/<hex>-<base> image <hex>'s rootfs, idmapped to the
 *	                                 range whose first host uid is <base>
 *
 * A mount is made detached and attached whole (move_mount): a crash leaves
 * at most an empty directory, which the next use mounts on.  It lasts in
 * the mount namespace until the range or the image goes (image_idmap_prune,
 * at a function's DELETE and at image_gc), a reboot (the next use makes it
 * again), or thawd's mount namespace ends.
 */
#define LOG_PREFIX "image: "
#include "images/image.h"
#include "common/log.h"
#include "common/util.h"
#include "function/userns.h"
#include "images/image_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* dir is the root of a mount (STATX_ATTR_MOUNT_ROOT).  A directory that
 * cannot be read is none. */
static bool mount_root(const char *dir)
{
	struct statx sx;

	if (statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) < 0)
		return false;
	return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	       (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* <data>/images/idmap, a private mount of itself (made so again after a
 * reboot), into dir.  0 or -errno (logged). */
static int idmap_dir(const struct image_cache *k, char *dir, size_t len)
{
	int ret = image_cache_path(k, dir, len, "idmap", NULL);

	if (ret)
		return ret;
	ret = mkdir_p(dir, 0700);
	if (ret)
		return ret;
	if (mount_root(dir))
		return 0;
	if (mount(dir, dir, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, dir, NULL, MS_PRIVATE, NULL) < 0) {
		ret = -errno;
		pr_perror("make %s a private mount", dir);
	}
	return ret;
}

/* map written to a /proc/<pid>/[ug]id_map, in one write as the kernel
 * wants it.  0 or -errno. */
static int write_map(const char *path, const char *map)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, map, strlen(map)) != (ssize_t)strlen(map))
		ret = errno ? -errno : -EIO;
	close(fd);
	return ret;
}

/* A user namespace whose uids and gids 0..size-1 are host base onward,
 * its fd in *fd: a child made it and waits, its maps written from here,
 * until the fd is open.  What the mount takes from it is the mapping; the
 * namespace goes with the child.  0 or -errno (logged). */
static int make_userns(uint32_t base, uint32_t size, int *fd)
{
	char p[64], map[64];
	int sync[2] = { -1, -1 }, go[2] = { -1, -1 }, ret = 0, status;
	pid_t pid = -1;
	char c = 0;

	*fd = -1;
	if (pipe2(sync, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
		ret = -errno;
		pr_perror("pipe");
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		pr_perror("fork");
		goto out;
	}
	if (pid == 0) {
		/* Only async-signal-safe calls: thawd has threads.  The
		 * ends it does not use closed, or go never reads EOF. */
		close(sync[0]);
		close(go[1]);
		c = unshare(CLONE_NEWUSER) ? 1 : 0;
		if (write(sync[1], &c, 1) != 1 || c)
			_exit(1);
		(void)!read(go[0], &c, 1);
		_exit(0);
	}
	close(sync[1]);
	sync[1] = -1;
	close(go[0]);
	go[0] = -1;
	if (read(sync[0], &c, 1) != 1 || c) {
		pr_err("the kernel refuses a user namespace for the image's idmapped mount");
		ret = -EPERM;
		goto out;
	}
	snprintf(map, sizeof(map), "0 %u %u\n", base, size);
	for (int i = 0; i < 2 && !ret; i++) {
		snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
		ret = write_map(p, map);
		if (ret)
			pr_err("write %s: %s", p, strerror(-ret));
	}
	if (ret)
		goto out;
	snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)pid);
	*fd = open(p, O_RDONLY | O_CLOEXEC);
	if (*fd < 0) {
		ret = -errno;
		pr_perror("open %s", p);
	}
out:
	for (int i = 0; i < 2; i++) {
		if (sync[i] >= 0)
			close(sync[i]);
		if (go[i] >= 0)
			close(go[i]); /* the child's cue to go */
	}
	if (pid > 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	return ret;
}

/* The mount at at is rootfs idmapped to base: the same directory, its
 * owner shifted by base. */
static bool is_ours(const char *at, const char *rootfs, uint32_t base)
{
	struct stat a, r;

	if (!mount_root(at) || stat(at, &a) < 0 || stat(rootfs, &r) < 0)
		return false;
	return a.st_dev == r.st_dev && a.st_ino == r.st_ino &&
	       (uint64_t)a.st_uid == (uint64_t)r.st_uid + base &&
	       (uint64_t)a.st_gid == (uint64_t)r.st_gid + base;
}

/* Mount the directory rootfs_fd holds at at, idmapped to [base, base+size),
 * read-only: made detached, then attached whole.  0 or -errno (logged). */
static int mount_idmapped(int rootfs_fd, const char *at, uint32_t base, uint32_t size)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY };
	int tree = -1, ns = -1, ret;

	ret = make_userns(base, size, &ns);
	if (ret)
		return ret;
	attr.userns_fd = (uint64_t)ns;
	tree = (int)syscall(SYS_open_tree, rootfs_fd, "",
			    AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0) {
		ret = -errno;
		pr_perror("open_tree %s", at);
		goto out;
	}
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
		ret = -errno;
		/* EINVAL: this filesystem has no idmapped mounts (ext4, xfs,
		 * btrfs and tmpfs have them; overlayfs only from 5.19). */
		pr_perror("idmap the image's rootfs for host uids %u+%u (mount_setattr%s)", base,
			  size, ret == -EINVAL ? ": the data directory's filesystem has no "
						 "idmapped mounts?" : "");
		goto out;
	}
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		ret = -errno;
		pr_perror("move_mount onto %s", at);
	}
out:
	if (tree >= 0)
		close(tree);
	close(ns);
	return ret;
}

/* bundle is <base>/rootfs/<hex> of the cache k (links resolved): its
 * rootfs, resolved, into rootfs, and its hex. */
static int rootfs_of(const struct image_cache *k, const char *bundle, char *rootfs, size_t len,
		     char hex[65])
{
	char dir[PATH_MAX], real[PATH_MAX], b[PATH_MAX];
	size_t n;

	if (image_cache_path(k, dir, sizeof(dir), "rootfs", NULL))
		return -ENAMETOOLONG;
	if (!realpath(dir, real) || !realpath(bundle, b))
		return -errno;
	n = strlen(real);
	if (strncmp(b, real, n) || b[n] != '/' || strlen(b + n + 1) != 64)
		return -EINVAL;
	memcpy(hex, b + n + 1, 65);
	if (!image_hex64(hex))
		return -EINVAL;
	if ((size_t)snprintf(rootfs, len, "%s/rootfs", b) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int image_idmap(const struct thaw_config *c, const char *bundle, const struct userns_range *r,
		char *out, size_t len)
{
	char dir[PATH_MAX], rootfs[PATH_MAX], hex[65];
	struct image_cache k;
	int lk = -1, fd = -1, ret;

	if (snprintf(k.base, sizeof(k.base), "%s/images", c->data_dir) >= (int)sizeof(k.base))
		return -ENAMETOOLONG;
	ret = rootfs_of(&k, bundle, rootfs, sizeof(rootfs), hex);
	if (ret) {
		pr_err("%s is not an image's bundle in thaw's cache", bundle);
		return ret == -ENAMETOOLONG ? ret : -EINVAL;
	}
	/* The cache is thaw's alone: no link to follow in it. */
	fd = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		pr_perror("%s", rootfs);
		return ret;
	}
	/* One maker at a time, and none while gc prunes. */
	lk = image_cache_lock(&k);
	if (lk < 0) {
		close(fd);
		return lk;
	}
	ret = idmap_dir(&k, dir, sizeof(dir));
	if (ret)
		goto out;
	if ((size_t)snprintf(out, len, "%s/%s-%u", dir, hex, r->base) >= len) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (is_ours(out, rootfs, r->base))
		goto out; /* made by an earlier start: reused */
	/* Something else there (a mount of an older mapping): gone first. */
	while (mount_root(out) && umount2(out, MNT_DETACH) == 0)
		;
	if (mkdir(out, 0700) < 0 && errno != EEXIST) {
		ret = -errno;
		pr_perror("mkdir %s", out);
		goto out;
	}
	ret = mount_idmapped(fd, out, r->base, r->size);
	if (!ret)
		pr_info("image sha256:%s: its rootfs idmapped to host uids %u+%u at %s", hex,
			r->base, r->size, out);
out:
	close(lk);
	close(fd);
	return ret;
}

/* Whether the range whose first host uid is base is still a function's. */
static bool range_taken(const struct thaw_config *c, uint32_t base)
{
	char p[PATH_MAX];

	if (base < c->userns_base || (base - c->userns_base) % USERNS_RANGE_SIZE)
		return false;
	if ((size_t)snprintf(p, sizeof(p), "%s/userns/%u", c->data_dir,
			     (base - c->userns_base) / USERNS_RANGE_SIZE) >= sizeof(p))
		return true; /* cannot tell: kept */
	return access(p, F_OK) == 0;
}

int image_idmap_prune_locked(const struct thaw_config *c, const struct image_cache *k)
{
	char dir[PATH_MAX], p[PATH_MAX], rootfs[PATH_MAX], hex[65];
	struct dirent *de;
	int ret = 0;
	DIR *d;

	if (image_cache_path(k, dir, sizeof(dir), "idmap", NULL))
		return -ENAMETOOLONG;
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		const char *dash = strchr(de->d_name, '-');
		char *end;
		unsigned long base;

		if (!dash || dash - de->d_name != 64)
			continue;
		memcpy(hex, de->d_name, 64);
		hex[64] = '\0';
		base = strtoul(dash + 1, &end, 10);
		if (image_cache_path(k, rootfs, sizeof(rootfs), "rootfs", hex))
			continue;
		if (image_hex64(hex) && !*end && base <= UINT32_MAX && image_is_dir(rootfs) &&
		    range_taken(c, (uint32_t)base))
			continue;
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, de->d_name) >= sizeof(p))
			continue;
		/* Detached: an instance still running keeps its own copy. */
		while (mount_root(p) && umount2(p, MNT_DETACH) == 0)
			;
		if (rmdir(p) < 0 && errno != ENOENT) {
			ret = -errno;
			pr_perror("gc: %s is left behind", p);
		} else {
			pr_info("gc: %s unmounted: its range or its image is gone", p);
		}
	}
	closedir(d);
	return ret;
}

int image_idmap_prune(const struct thaw_config *c)
{
	struct image_cache k;
	int lk, ret;

	if (snprintf(k.base, sizeof(k.base), "%s/images", c->data_dir) >= (int)sizeof(k.base))
		return -ENAMETOOLONG;
	if (!image_is_dir(k.base))
		return 0;
	lk = image_cache_lock(&k);
	if (lk < 0)
		return lk;
	ret = image_idmap_prune_locked(c, &k);
	close(lk);
	return ret;
}
