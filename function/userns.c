/* SPDX-License-Identifier: Apache-2.0 */
/* userns.c — see userns.h. */
#define LOG_PREFIX "userns: "
#include "function/userns.h"
#include "function/spec.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Our own uid map covers [base, base + count)?  (In the host's user
 * namespace it is "0 0 4294967295".) */
static bool map_covers(uint32_t base, uint32_t count)
{
	unsigned long long inside, outside, n, end = (unsigned long long)base + count;
	FILE *f = fopen("/proc/self/uid_map", "re");
	bool ok = false;

	if (!f)
		return false;
	while (!ok && fscanf(f, "%llu %llu %llu", &inside, &outside, &n) == 3)
		ok = inside <= base && inside + n >= end;
	fclose(f);
	return ok;
}

bool userns_supported(const struct thaw_config *c, char *why, size_t why_len)
{
	long max = 0;
	FILE *f = fopen("/proc/sys/user/max_user_namespaces", "re");
	int status = 0;
	pid_t pid;

	if (f) {
		if (fscanf(f, "%ld", &max) != 1)
			max = 0;
		fclose(f);
	}
	if (max <= 0) {
		snprintf(why, why_len, "user namespaces are off (/proc/sys/user/max_user_namespaces)");
		return false;
	}
	if (!map_covers(c->userns_base, c->userns_count)) {
		snprintf(why, why_len,
			 "thaw's own uid map does not hold the pool %u:%u (it runs in a user "
			 "namespace of its own?)",
			 c->userns_base, c->userns_count);
		return false;
	}
	/* What runc will do: a user namespace, and a network namespace in it. */
	pid = fork();
	if (pid < 0) {
		snprintf(why, why_len, "fork: %s", strerror(errno));
		return false;
	}
	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER) || unshare(CLONE_NEWNET) ? 1 : 0);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		snprintf(why, why_len, "the kernel refuses a network namespace in a user namespace");
		return false;
	}
	snprintf(why, why_len, "pool %u:%u, %u ranges of %u", c->userns_base, c->userns_count,
		 c->userns_count / USERNS_RANGE_SIZE, USERNS_RANGE_SIZE);
	return true;
}

bool userns_unsearchable(const char *path, bool itself, char *out, size_t len)
{
	char p[PATH_MAX];
	struct stat st;

	if (!realpath(path, p) && snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return false;
	for (char *s = strchr(p + 1, '/');; s = strchr(s + 1, '/')) {
		if (s)
			*s = '\0';
		else if (!itself)
			break;
		if (stat(p, &st) == 0 && !(st.st_mode & S_IXOTH)) {
			snprintf(out, len, "%s", p);
			return true;
		}
		if (!s)
			break;
		*s = '/';
	}
	return false;
}

bool userns_host_default(const struct thaw_config *c, char *why, size_t why_len)
{
	if (!c->userns_default) {
		snprintf(why, why_len, USERNS_DEFAULT_OFF);
		return false;
	}
	return userns_supported(c, why, why_len) && userns_host_dirs(c, why, why_len);
}

bool userns_host_dirs(const struct thaw_config *c, char *why, size_t why_len)
{
	char dir[PATH_MAX];

	if (userns_unsearchable(c->data_dir, false, dir, sizeof(dir)) ||
	    userns_unsearchable(c->ram_tier_dir, false, dir, sizeof(dir))) {
		snprintf(why, why_len,
			 "%s, above the data directory or the RAM tier, is not searchable by other "
			 "users (chmod o+x %s)",
			 dir, dir);
		return false;
	}
	return true;
}

/* The host's answer, asked once a process (it forks a child): the kernel,
 * the pool and the data directory's place do not change while it runs. */
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static const struct thaw_config *host_config;
static bool host_ok;
static char host_why[256];

static void ask_host(void)
{
	host_ok = userns_host_default(host_config, host_why, sizeof(host_why));
}

bool function_userns_why(const struct thaw_config *c, const struct func_spec *s, char *why,
			 size_t why_len)
{
	char dir[PATH_MAX];

	if (s->userns_given) {
		snprintf(why, why_len, "its spec says \"userns\": %s",
			 s->sandbox.userns ? "true" : "false");
		return s->sandbox.userns;
	}
	if (s->image) {
		/* Its rootfs would need an idmapped mount (images/idmap.c),
		 * which the data directory's filesystem may lack and nothing
		 * checks before the first snapshot: asked for, never assumed. */
		snprintf(why, why_len, "a function from an image runs in one where its spec asks");
		return false;
	}
	if (s->gpus > 1) {
		/* Measured on two H200s: in a user namespace the device memory
		 * a function's processes share (NCCL's P2P buffers) is not
		 * paired for libthaw-cuda to carry, and the driver refuses the
		 * restore; outside one it restores.  Asked for, it is tried. */
		snprintf(why, why_len,
			 "a function of several GPUs runs in one where its spec asks (memory its "
			 "processes share is not carried in a user namespace yet)");
		return false;
	}
	host_config = c;
	pthread_once(&host_once, ask_host);
	if (!host_ok) {
		snprintf(why, why_len, "%s", host_why);
		return false;
	}
	/* Its own directories reachable by the range: a function the
	 * default would make unable to reach its files keeps running as it
	 * did (an explicit "userns": true is refused there instead, naming
	 * the directory). */
	if (s->cwd && userns_unsearchable(s->cwd, true, dir, sizeof(dir))) {
		snprintf(why, why_len, "%s, on the way to its cwd, is not searchable by other users", dir);
		return false;
	}
	for (size_t i = 0; i < s->nmounts; i++)
		if (userns_unsearchable(s->mounts[i].source, true, dir, sizeof(dir))) {
			snprintf(why, why_len,
				 "%s, on the way to its mount %s, is not searchable by other users", dir,
				 s->mounts[i].source);
			return false;
		}
	snprintf(why, why_len, "thaw's default where the host supports it");
	return true;
}

bool function_userns(const struct thaw_config *c, const struct func_spec *s)
{
	char why[PATH_MAX + 128];

	return function_userns_why(c, s, why, sizeof(why));
}

/* <data>/userns: root's alone. */
static int ranges_dir(const struct thaw_config *c, char *dir, size_t len)
{
	if ((size_t)snprintf(dir, len, "%s/userns", c->data_dir) >= len)
		return -ENAMETOOLONG;
	return mkdir_p(dir, 0700);
}

/* The function a range file names, into id (len bytes): 0 or -errno. */
static int read_owner(int dfd, const char *name, char *id, size_t len)
{
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, id, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	id[n] = '\0';
	return 0;
}

/* The index of the range function id has in dir, or -ENOENT. */
static long find(const char *dir, const char *id)
{
	char owner[256], *end;
	struct dirent *de;
	long found = -ENOENT;
	DIR *d = opendir(dir);

	if (!d)
		return -errno;
	while (found < 0 && (de = readdir(d))) {
		long k = strtol(de->d_name, &end, 10);

		if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end)
			continue;
		if (!read_owner(dirfd(d), de->d_name, owner, sizeof(owner)) && !strcmp(owner, id))
			found = k;
	}
	closedir(d);
	return found;
}

/* Take range i for id: its file is written whole under a name of its own,
 * then linked to the range's (link does not replace: EEXIST when the range
 * is another's), so no range file is ever seen, or left by a crash,
 * without its owner.  0, -EEXIST, or -errno logged. */
static int take(int dfd, const char *dir, uint32_t i, const char *id)
{
	char tmp[64], name[16];
	size_t len = strlen(id);
	int fd, ret = 0;

	snprintf(tmp, sizeof(tmp), ".take-%d", (int)getpid());
	snprintf(name, sizeof(name), "%u", i);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		ret = -errno;
		pr_perror("take %s/%s", dir, tmp);
		return ret;
	}
	if (write(fd, id, len) != (ssize_t)len || fsync(fd) < 0) {
		ret = errno ? -errno : -EIO;
		pr_perror("write %s/%s", dir, tmp);
	}
	close(fd);
	if (!ret && linkat(dfd, tmp, dfd, name, 0) < 0) {
		ret = -errno;
		if (ret != -EEXIST)
			pr_perror("take %s/%s", dir, name);
	}
	unlinkat(dfd, tmp, 0);
	return ret;
}

/* The ranges directory opened and locked (flock: every thread and process
 * that takes or gives back a range, thawd's and `thaw snapshot`'s, one at a
 * time, so that one function never gets two).  The fd, or -errno. */
static int lock_ranges(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0) {
		int ret = -errno;

		if (ret != -ENOENT) /* none: the caller's to judge */
			pr_perror("open %s", dir);
		return ret;
	}
	while (flock(dfd, LOCK_EX) < 0) {
		int ret = -errno;

		if (ret == -EINTR)
			continue;
		pr_perror("lock %s", dir);
		close(dfd);
		return ret;
	}
	return dfd;
}

int userns_range_of(const struct thaw_config *c, const char *id, struct userns_range *out)
{
	uint32_t nranges = c->userns_count / USERNS_RANGE_SIZE;
	char dir[PATH_MAX + 16];
	int ret, dfd;
	long k;

	ret = ranges_dir(c, dir, sizeof(dir));
	if (ret)
		return ret;
	dfd = lock_ranges(dir);
	if (dfd < 0)
		return dfd;
	k = find(dir, id);
	for (uint32_t i = 0; k == -ENOENT && i < nranges; i++) {
		ret = take(dfd, dir, i, id);
		if (ret == -EEXIST)
			continue;
		if (ret) {
			close(dfd); /* and its lock */
			return ret;
		}
		k = i;
		pr_info("%s: host uids %u+%u", id, c->userns_base + i * USERNS_RANGE_SIZE,
			USERNS_RANGE_SIZE);
	}
	close(dfd);
	if (k < 0) {
		ret = k == -ENOENT ? -ENOSPC : (int)k;
		pr_err("%s: no user namespace range left in the pool %u:%u (%u ranges)", id,
		       c->userns_base, c->userns_count, nranges);
		return ret;
	}
	if ((uint32_t)k >= nranges) {
		/* The pool shrank under a range taken before: not one to use. */
		pr_err("%s: its range %ld is outside the pool %u:%u now", id, k, c->userns_base,
		       c->userns_count);
		return -ERANGE;
	}
	out->base = c->userns_base + (uint32_t)k * USERNS_RANGE_SIZE;
	out->size = USERNS_RANGE_SIZE;
	return 0;
}

int userns_release(const struct thaw_config *c, const char *id)
{
	char dir[PATH_MAX + 16], p[PATH_MAX + 48];
	int ret = 0, dfd;
	long k;

	snprintf(dir, sizeof(dir), "%s/userns", c->data_dir);
	dfd = lock_ranges(dir);
	if (dfd == -ENOENT)
		return 0; /* no range was ever taken here */
	if (dfd < 0)
		return dfd;
	k = find(dir, id);
	if (k >= 0) {
		snprintf(p, sizeof(p), "%s/%ld", dir, k);
		if (unlink(p) < 0 && errno != ENOENT) {
			ret = -errno;
			pr_perror("release %s", p);
		}
	} else if (k != -ENOENT) {
		ret = (int)k;
	}
	close(dfd);
	return ret;
}

/* Can r's uid 0 (host base, gid base) search a directory of st? */
static bool searchable(const struct stat *st, const struct userns_range *r)
{
	if (st->st_uid == r->base)
		return st->st_mode & S_IXUSR;
	if (st->st_gid == r->base)
		return st->st_mode & S_IXGRP;
	return st->st_mode & S_IXOTH;
}

/* Whether path is dir or lies under it. */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static int open_to_group(const char *path, const struct stat *st, const struct userns_range *r,
			 mode_t add)
{
	if (st->st_gid != r->base && chown(path, (uid_t)-1, r->base) < 0)
		return -errno;
	/* chown cleared nothing on a directory; the mode only grows. */
	if ((st->st_mode & add) != add && chmod(path, (st->st_mode & 07777) | add) < 0)
		return -errno;
	return 0;
}

int userns_reach(const struct thaw_config *c, const char *root, const char *own,
		 const struct userns_range *r)
{
	char path[PATH_MAX], data[PATH_MAX], tier[PATH_MAX], own_parent[PATH_MAX], *slash;
	struct stat st;
	size_t n;
	int ret = 0;

	if (!realpath(root, path)) {
		ret = -errno;
		pr_perror("%s", root);
		return ret;
	}
	if (!realpath(c->data_dir, data))
		snprintf(data, sizeof(data), "%s", c->data_dir);
	if (!realpath(c->ram_tier_dir, tier))
		snprintf(tier, sizeof(tier), "%s", c->ram_tier_dir);
	own_parent[0] = '\0';
	if (own && realpath(own, own_parent)) {
		slash = strrchr(own_parent, '/');
		if (slash && slash != own_parent)
			*slash = '\0';
	}
	n = strlen(path);
	/* Each directory from the top: "/", "/a", "/a/b"… the root itself last. */
	for (size_t i = 1; i <= n; i++) {
		if (i < n && path[i] != '/')
			continue;
		char save = path[i];

		path[i] = '\0';
		if (stat(i == 1 && save == '/' ? "/" : path, &st) < 0) {
			ret = -errno;
			pr_perror("%s", path);
			path[i] = save;
			return ret;
		}
		if (!searchable(&st, r)) {
			char real_own[PATH_MAX];

			if (own && realpath(own, real_own) &&
			    (!strcmp(path, real_own) || !strcmp(path, own_parent)))
				ret = open_to_group(path, &st, r, S_IXGRP);
			else if (under(path, data) || under(path, tier))
				ret = chmod(path, (st.st_mode & 07777) | S_IXOTH) < 0 ? -errno : 0;
			else
				ret = -EACCES;
			if (ret == -EACCES)
				pr_err("the function's user namespace (host uid %u) cannot reach its "
				       "root %s: %s is not searchable by it (mode %04o, owner %u:%u)",
				       r->base, root, path, (unsigned)(st.st_mode & 07777),
				       (unsigned)st.st_uid, (unsigned)st.st_gid);
			else if (ret)
				pr_err("open %s to host uid %u: %s", path, r->base, strerror(-ret));
		}
		path[i] = save;
		if (ret)
			return ret;
	}
	return 0;
}

int userns_share(const char *dir, const struct userns_range *r)
{
	struct dirent *de;
	struct stat st;
	DIR *d = NULL;
	int ret;

	if (lstat(dir, &st) < 0) {
		ret = -errno;
		pr_perror("%s", dir);
		return ret;
	}
	ret = open_to_group(dir, &st, r, S_IRGRP | S_IXGRP);
	if (ret)
		goto out;
	d = opendir(dir);
	if (!d) {
		ret = -errno;
		goto out;
	}
	while (!ret && (de = readdir(d))) {
		char p[PATH_MAX];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, de->d_name) >= sizeof(p)) {
			ret = -ENAMETOOLONG;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = errno == ENOENT ? 0 : -errno;
			continue;
		}
		if (S_ISDIR(st.st_mode))
			ret = userns_share(p, r);
		else if (S_ISREG(st.st_mode))
			ret = open_to_group(p, &st, r, S_IRGRP);
	}
out:
	if (d)
		closedir(d);
	if (ret)
		pr_err("open %s to host gid %u: %s", dir, r->base, strerror(-ret));
	return ret;
}

int userns_give(const char *dir, const struct userns_range *r)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int ret = 0;

	if (!d) {
		ret = -errno;
		pr_perror("%s", dir);
		return ret;
	}
	if (fchown(dirfd(d), r->base, r->base) < 0)
		ret = -errno;
	while (!ret && (de = readdir(d)))
		if (strcmp(de->d_name, "..") &&
		    fchownat(dirfd(d), de->d_name, r->base, r->base, AT_SYMLINK_NOFOLLOW) < 0)
			ret = -errno;
	closedir(d);
	if (ret)
		pr_err("give %s to host uid %u: %s", dir, r->base, strerror(-ret));
	return ret;
}
