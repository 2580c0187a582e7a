/* SPDX-License-Identifier: Apache-2.0 */
/* netns.c — see netns.h. */
#define LOG_PREFIX "netns: "
#include "common/netns.h"
#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child, after unshare: loopback up.  Only async-signal-safe calls
 * (the parent may be multi-threaded).  0 or an errno value. */
static int lo_up(void)
{
	struct ifreq ifr;
	int fd, err = 0;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		err = errno;
		goto out;
	}
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		err = errno;
out:
	close(fd);
	return err;
}

/* Is the mount that holds dir shared (it propagates to other mount namespaces)?
 * The longest mount point that is a prefix of dir is the one. */
static bool mount_is_shared(const char *dir, bool *is_mountpoint)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], best_opts[1024] = "", mp[PATH_MAX];
	size_t best = 0, dlen = strlen(dir);

	*is_mountpoint = false;
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		char *opt_start, *sep;
		size_t len;

		/* id parent maj:min root mountpoint options [optional…] - … */
		if (sscanf(line, "%*d %*d %*s %*s %4095s", mp) != 1)
			continue;
		len = strlen(mp);
		if (strncmp(dir, mp, len) ||
		    (len > 1 && dir[len] != '\0' && dir[len] != '/'))
			continue;
		if (len < best)
			continue;
		best = len;
		*is_mountpoint = len == dlen;
		opt_start = line;
		for (int i = 0; i < 6 && opt_start; i++) {
			opt_start = strchr(opt_start, ' ');
			if (opt_start)
				opt_start++;
		}
		sep = opt_start ? strstr(opt_start, " - ") : NULL;
		snprintf(best_opts, sizeof(best_opts), "%.*s",
			 sep ? (int)(sep - opt_start) : 0, opt_start ? opt_start : "");
	}
	fclose(f);
	return strstr(best_opts, "shared:") != NULL;
}

/* Where mounts propagate (systemd hosts make / shared), a namespace file
 * bound under a shared mount would be copied into every mount namespace made
 * after it (runc's containers among them), keeping the namespace alive there
 * and showing CRIU an nsfs mount it cannot dump.  As `ip netns` does for
 * /run/netns, bind the directory onto itself and make it private. */
static int make_dir_private(const char *dir)
{
	bool mnt;

	if (!mount_is_shared(dir, &mnt))
		return 0;
	if (!mnt && mount(dir, dir, NULL, MS_BIND, NULL) < 0) {
		pr_perror("bind %s onto itself", dir);
		return -errno;
	}
	if (mount(NULL, dir, NULL, MS_PRIVATE, NULL) < 0) {
		int err = -errno;

		pr_perror("make %s private", dir);
		if (!mnt)
			umount2(dir, MNT_DETACH);
		return err;
	}
	pr_info("%s is now a private mount", dir);
	return 0;
}

/* The file a namespace is bound on: made new, in a directory made private
 * where mounts propagate.  0 or -errno. */
static int reserve(const char *path)
{
	char dir[PATH_MAX], real[PATH_MAX];
	int fd, ret;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	else
		snprintf(dir, sizeof(dir), "%s", slash ? "/" : ".");
	ret = mkdir_p(dir, 0755);
	if (ret)
		return ret;
	if (realpath(dir, real)) {
		ret = make_dir_private(real);
		if (ret)
			return ret;
	}
	fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
	if (fd < 0) {
		ret = -errno;
		pr_perror("create %s", path);
		return ret;
	}
	close(fd);
	return 0;
}

int netns_reserve(const char *path)
{
	return reserve(path);
}

struct adopt_arg {
	int nsfd;
	int err; /* an errno value */
};

/* On a thread of its own: only it moves into the namespace. */
static void *lo_up_thread(void *p)
{
	struct adopt_arg *a = p;

	a->err = setns(a->nsfd, CLONE_NEWNET) < 0 ? errno : lo_up();
	return NULL;
}

int netns_adopt(const char *path, pid_t pid)
{
	struct adopt_arg a = { .nsfd = -1 };
	char src[64];
	pthread_t t;
	int ret;

	snprintf(src, sizeof(src), "/proc/%d/ns/net", (int)pid);
	if (mount(src, path, NULL, MS_BIND, NULL) < 0) {
		ret = -errno;
		pr_perror("bind %s onto %s", src, path);
		return ret;
	}
	/* Bound first, then opened from the bind: the namespace brought up is
	 * the one every later reader of path joins, whatever pid became. */
	a.nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (a.nsfd < 0) {
		ret = -errno;
		pr_perror("open %s", path);
		goto out;
	}
	ret = pthread_create(&t, NULL, lo_up_thread, &a);
	if (ret) {
		errno = ret;
		pr_perror("pthread_create");
		ret = -ret;
		goto out;
	}
	pthread_join(t, NULL);
	ret = -a.err;
	if (ret) {
		errno = a.err;
		pr_perror("loopback up in the network namespace of %d", (int)pid);
	}
out:
	if (a.nsfd >= 0)
		close(a.nsfd);
	if (ret)
		umount2(path, MNT_DETACH);
	return ret;
}

int netns_create(const char *path)
{
	char src[64];
	int go[2] = { -1, -1 }, done[2] = { -1, -1 }, ret, status, child_err = 0;
	pid_t pid = -1;
	bool created = false;

	ret = reserve(path);
	if (ret)
		return ret;
	created = true;

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) {
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
		/* Child: new namespace, loopback up, report, wait for the bind. */
		int err = 0;
		char c;

		close(go[1]); /* or the read below never sees EOF */
		close(done[0]);
		if (unshare(CLONE_NEWNET) < 0)
			err = errno;
		else
			err = lo_up();
		if (write(done[1], &err, sizeof(err)) != sizeof(err))
			_exit(1);
		while (read(go[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(done[1]);
	done[1] = -1;
	close(go[0]);
	go[0] = -1;
	if (read(done[0], &child_err, sizeof(child_err)) != sizeof(child_err)) {
		ret = -EIO;
		pr_err("namespace helper died before reporting");
		goto out;
	}
	if (child_err) {
		ret = -child_err;
		errno = child_err;
		pr_perror("unshare(CLONE_NEWNET) / loopback up");
		goto out;
	}
	snprintf(src, sizeof(src), "/proc/%d/ns/net", (int)pid);
	if (mount(src, path, NULL, MS_BIND, NULL) < 0) {
		ret = -errno;
		pr_perror("bind %s onto %s", src, path);
		goto out;
	}
	ret = 0;
out:
	if (go[1] >= 0) {
		/* A byte, not only EOF, lets the child exit: a helper forked at the
		 * same time by another thread holds a copy of this write end, so
		 * EOF alone never comes and both helpers wait for good. */
		if (write(go[1], "x", 1) < 0)
			pr_perror("wake the namespace helper");
		close(go[1]);
	}
	if (pid > 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	if (go[0] >= 0)
		close(go[0]);
	for (int i = 0; i < 2; i++)
		if (done[i] >= 0)
			close(done[i]);
	if (ret && created)
		unlink(path);
	return ret;
}

int netns_remove(const char *path)
{
	int ret = 0;

	if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) {
		ret = -errno;
		pr_perror("umount %s", path);
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		if (!ret)
			ret = -errno;
		pr_perror("unlink %s", path);
	}
	return ret;
}

struct connect_arg {
	const char *path;
	uint16_t port;
	int timeout_ms;
	int ret; /* fd or -errno */
};

static int connect_timeout(int fd, uint16_t port, int timeout_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int flags = fcntl(fd, F_GETFL), err = 0, r;
	socklen_t elen = sizeof(err);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		goto done;
	if (errno != EINPROGRESS)
		return -errno;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		return -errno;
	if (err)
		return -err;
done:
	if (fcntl(fd, F_SETFL, flags) < 0)
		return -errno;
	return 0;
}

static void *connect_thread(void *p)
{
	struct connect_arg *a = p;
	int nsfd = -1, fd = -1, ret;

	nsfd = open(a->path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0) {
		ret = -errno;
		pr_perror("open %s", a->path);
		goto out;
	}
	/* Only this thread moves; a socket keeps the namespace it was made in. */
	if (setns(nsfd, CLONE_NEWNET) < 0) {
		ret = -errno;
		pr_perror("setns %s", a->path);
		goto out;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		pr_perror("socket");
		goto out;
	}
	ret = connect_timeout(fd, a->port, a->timeout_ms);
	if (ret == 0) {
		ret = fd;
		fd = -1;
	}
out:
	if (fd >= 0)
		close(fd);
	if (nsfd >= 0)
		close(nsfd);
	a->ret = ret;
	return NULL;
}

int netns_connect(const char *path, uint16_t port, int timeout_ms)
{
	struct connect_arg a = { .path = path, .port = port, .timeout_ms = timeout_ms };
	pthread_t t;
	int err;

	err = pthread_create(&t, NULL, connect_thread, &a);
	if (err) {
		errno = err;
		pr_perror("pthread_create");
		return -err;
	}
	pthread_join(t, NULL);
	return a.ret;
}
