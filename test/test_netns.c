/* SPDX-License-Identifier: Apache-2.0 */
/* test_netns: a namespace made by netns_create has loopback up, a listener
 * inside it is reached by netns_connect (and not from the host), removal
 * leaves no mount, and where mounts propagate (a shared /) the namespace
 * file does not leak into mount namespaces made after it (as runc's are). */
#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "test/check.h"

#include <arpa/inet.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/test_netns.XXXXXX";
static char nspath[PATH_MAX];

/* Is there a mount at path in this process's mount namespace (of type fstype, if given)? */
static bool mounted(const char *path, const char *fstype)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], mp[PATH_MAX], type[64];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - ");

		if (sscanf(line, "%*d %*d %*s %*s %4095s", mp) != 1 || !sep ||
		    sscanf(sep + 3, "%63s", type) != 1)
			continue;
		found = !strcmp(mp, path) && (!fstype || !strcmp(type, fstype));
	}
	fclose(f);
	return found;
}

struct listener {
	int fd;
	uint16_t port;
	bool lo_up;
};

/* In the namespace: is lo up, and a listener on an ephemeral port. */
static void *listen_inside(void *p)
{
	struct listener *l = p;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct ifreq ifr = { .ifr_name = "lo" };
	int nsfd = open(nspath, O_RDONLY), s;

	l->fd = -1;
	if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0)
		return NULL;
	close(nsfd);
	s = socket(AF_INET, SOCK_DGRAM, 0);
	l->lo_up = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP);
	close(s);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) || listen(s, 4) ||
	    getsockname(s, (struct sockaddr *)&sa, &len)) {
		close(s);
		return NULL;
	}
	l->fd = s;
	l->port = ntohs(sa.sin_port);
	return NULL;
}

static bool same_netns_as_self(const char *path)
{
	struct stat a, b;

	return stat(path, &a) == 0 && stat("/proc/self/ns/net", &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* In a child: a mount namespace with / shared, a second one made after it
 * (slave, as runc makes a container's); a namespace created afterwards in the
 * first must not appear in the second.  Exit 0 ok, 1 leaked, 2 setup failed. */
static int propagation_child(void)
{
	char path[PATH_MAX + 32], sub[PATH_MAX];
	int go[2], res[2];
	char c = 0;
	pid_t b;

	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_SHARED, NULL))
		return 2;
	snprintf(sub, sizeof(sub), "%s/prop", dir);
	snprintf(path, sizeof(path), "%s/ns", sub);
	if (mkdir_p(sub, 0755) || pipe(go) || pipe(res))
		return 2;
	b = fork();
	if (b == 0) {
		if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
			_exit(2);
		c = 1;
		write(res[1], &c, 1);
		read(go[0], &c, 1);
		_exit(mounted(path, "nsfs") ? 1 : 0);
	}
	if (read(res[0], &c, 1) != 1)
		return 2;
	int ret = netns_create(path);
	write(go[1], &c, 1);
	int st;
	waitpid(b, &st, 0);
	netns_remove(path);
	umount2(sub, MNT_DETACH);
	if (ret)
		return 2;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

int main(void)
{
	struct listener l = { -1, 0, false };
	pthread_t t;
	int fd;

	if (geteuid() != 0)
		SKIP("needs root (mounts, namespaces)");
	REQUIRE(mkdtemp(dir));
	snprintf(nspath, sizeof(nspath), "%s/sub/ns1", dir);

	CHECK_EQ(netns_create(nspath), 0);
	CHECK(mounted(nspath, "nsfs"));
	CHECK(!same_netns_as_self(nspath));
	CHECK(netns_create(nspath) < 0); /* the file exists: refused, first one intact */
	CHECK(mounted(nspath, "nsfs"));

	REQUIRE(pthread_create(&t, NULL, listen_inside, &l) == 0);
	pthread_join(t, NULL);
	CHECK(l.lo_up);
	CHECK(l.fd >= 0);
	if (l.fd >= 0) {
		fd = netns_connect(nspath, l.port, 2000);
		CHECK(fd >= 0);
		if (fd >= 0) {
			/* The connection is really to our listener. */
			int a = accept(l.fd, NULL, NULL);
			CHECK(a >= 0);
			CHECK_EQ(write(fd, "x", 1), 1);
			char c = 0;
			CHECK_EQ(read(a, &c, 1), 1);
			CHECK_EQ(c, 'x');
			close(a);
			close(fd);
		}
		/* The host's namespace is not the function's: nothing there. */
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(l.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int h = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(connect(h, (struct sockaddr *)&sa, sizeof(sa)) < 0);
		close(h);
		close(l.fd);
		/* Nothing listening any more. */
		CHECK_EQ(netns_connect(nspath, l.port, 2000), -ECONNREFUSED);
	}
	CHECK(netns_connect("/nonexistent/ns", 80, 100) < 0);

	CHECK_EQ(netns_remove(nspath), 0);
	CHECK(!mounted(nspath, NULL));
	CHECK(access(nspath, F_OK) < 0);
	CHECK_EQ(netns_remove(nspath), 0); /* a missing one is fine */

	pid_t p = fork();
	if (p == 0)
		_exit(propagation_child());
	int st = 0;
	waitpid(p, &st, 0);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);

	rm_rf(dir);
	return check_failures ? 1 : 0;
}
