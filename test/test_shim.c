/* SPDX-License-Identifier: Apache-2.0 */
/* test_shim.c — restore/shim: an echo server listens in a fresh network
 * namespace; clients on the host reach it through the shim's endpoint.
 * Concurrent connections, a large transfer, half-close, the log drain and
 * the shim's exit when the container's pipes close, and SIGTERM; the log
 * bounded and rotated. */
#include "common/logfile.h"
#include "common/netns.h"
#include "common/util.h"
#include "restore/shim.h"
#include "test/check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TRAILER "[eof]"

static char dir[] = "/tmp/test_shim.XXXXXX";
static char ns_path[256];

/* Echo everything; after the client's EOF send TRAILER and close: the
 * trailer arriving proves that the shim passed the EOF on (half-close) and
 * kept the other direction open. */
static void *echo_conn(void *p)
{
	int fd = (int)(intptr_t)p;
	char buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write_all(fd, buf, (size_t)n))
			break;
	if (n == 0)
		write_all(fd, TRAILER, strlen(TRAILER));
	close(fd);
	return NULL;
}

struct server {
	int lfd;
	uint16_t port;
	pthread_t t;
};

static void *serve(void *p)
{
	struct server *s = p;
	int fd;

	while ((fd = accept(s->lfd, NULL, NULL)) >= 0) {
		pthread_t t;

		if (pthread_create(&t, NULL, echo_conn, (void *)(intptr_t)fd))
			close(fd);
		else
			pthread_detach(t);
	}
	return NULL;
}

/* Listen in the namespace from a thread that joined it. */
static void *listen_in_ns(void *p)
{
	struct server *s = p;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int nsfd = open(ns_path, O_RDONLY | O_CLOEXEC);

	s->lfd = -1;
	if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0)
		return NULL;
	close(nsfd);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(s->lfd, 256) || getsockname(s->lfd, (struct sockaddr *)&sa, &len)) {
		s->lfd = -1;
		return NULL;
	}
	s->port = ntohs(sa.sin_port);
	return NULL;
}

static int host_connect(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	struct timeval tv = { .tv_sec = 20 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Whether something in the host's namespace listens on 127.0.0.1:port: a
 * bind with SO_REUSEADDR fails only then (a TIME_WAIT socket does not
 * count).  Tests run side by side, so a port this test once saw free may be
 * another test's listener now: checks that a port is unreachable skip it
 * when it is taken by someone else. */
static bool port_listened_on(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	bool taken;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	taken = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == EADDRINUSE;
	close(fd);
	return taken;
}

/* Read until EOF (or max); returns the byte count, -1 on error/timeout. */
static ssize_t read_to_eof(int fd, char *buf, size_t max)
{
	size_t got = 0;

	for (;;) {
		ssize_t n = read(fd, buf + got, max - got);

		if (n == 0)
			return (ssize_t)got;
		if (n < 0)
			return -1;
		got += (size_t)n;
		if (got == max)
			return (ssize_t)got;
	}
}

static void test_echo_and_half_close(uint16_t port)
{
	char buf[64];
	int fd = host_connect(port);

	REQUIRE(fd >= 0);
	CHECK_EQ(write(fd, "hello", 5), 5);
	CHECK_EQ(read(fd, buf, 5), 5);
	CHECK(!memcmp(buf, "hello", 5));
	/* Half-close: our EOF reaches the server, its answer still reaches us. */
	CHECK_EQ(write(fd, "abc", 3), 3);
	CHECK_EQ(shutdown(fd, SHUT_WR), 0);
	ssize_t n = read_to_eof(fd, buf, sizeof(buf) - 1);
	CHECK_EQ(n, 3 + (ssize_t)strlen(TRAILER));
	if (n > 0) {
		buf[n] = '\0';
		CHECK_STR(buf, "abc" TRAILER);
	}
	close(fd);
}

#define NCONC 64

static void test_concurrent(uint16_t port)
{
	int fds[NCONC];
	char msg[64], buf[64];

	for (int i = 0; i < NCONC; i++) {
		fds[i] = host_connect(port);
		REQUIRE(fds[i] >= 0);
	}
	for (int i = 0; i < NCONC; i++) {
		int len = snprintf(msg, sizeof(msg), "connection %d", i);
		CHECK_EQ(write(fds[i], msg, len), len);
		CHECK_EQ(shutdown(fds[i], SHUT_WR), 0);
	}
	for (int i = NCONC - 1; i >= 0; i--) {
		int len = snprintf(msg, sizeof(msg), "connection %d" TRAILER, i);
		ssize_t n = read_to_eof(fds[i], buf, sizeof(buf) - 1);

		CHECK_EQ(n, len);
		if (n >= 0) {
			buf[n] = '\0';
			CHECK_STR(buf, msg);
		}
		close(fds[i]);
	}
}

#define BIG (48u << 20)

static uint8_t pattern(size_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static void *big_writer(void *p)
{
	int fd = (int)(intptr_t)p;
	static uint8_t chunk[1 << 20];

	for (size_t off = 0; off < BIG; off += sizeof(chunk)) {
		for (size_t i = 0; i < sizeof(chunk); i++)
			chunk[i] = pattern(off + i);
		if (write_all(fd, chunk, sizeof(chunk)))
			break;
	}
	shutdown(fd, SHUT_WR);
	return NULL;
}

static void test_large(uint16_t port)
{
	size_t max = BIG + 64;
	char *buf = malloc(max);
	pthread_t t;
	int fd = host_connect(port);
	uint64_t t0 = now_ns();

	REQUIRE(buf && fd >= 0);
	REQUIRE(pthread_create(&t, NULL, big_writer, (void *)(intptr_t)fd) == 0);
	ssize_t n = read_to_eof(fd, buf, max);
	pthread_join(t, NULL);
	CHECK_EQ(n, BIG + strlen(TRAILER));
	if (n == (ssize_t)(BIG + strlen(TRAILER))) {
		size_t bad = 0;

		for (size_t i = 0; i < BIG; i++)
			bad += (uint8_t)buf[i] != pattern(i);
		CHECK_EQ(bad, 0);
		CHECK(!memcmp(buf + BIG, TRAILER, strlen(TRAILER)));
	}
	printf("large: %u MiB echoed through the shim in %.0f ms\n", BIG >> 20, ms_since(t0));
	close(fd);
	free(buf);
}

/* Nothing listens on the function's port: the client is closed, not left hanging. */
static void test_refused(const char *log)
{
	struct shim_opts o = { .netns_path = ns_path, .port = 1, .out_fd = -1, .err_fd = -1,
			       .log_path = log };
	pid_t pid;
	uint16_t port;
	char c;

	REQUIRE(shim_start(&o, &pid, &port) == 0);
	int fd = host_connect(port);
	REQUIRE(fd >= 0);
	CHECK(read(fd, &c, 1) <= 0);
	close(fd);
	CHECK_EQ(shim_stop(pid, 0, 2000), 0);
	CHECK(!proc_alive(pid, 0));
	/* The endpoint is gone with it: nothing listens on its port (unless
	 * another test running beside this one took the port since). */
	if (port_listened_on(port))
		printf("port %u: taken again by another process, not checked\n", port);
	else
		CHECK(host_connect(port) < 0);
}

/* The container's output lands in the log; when its pipes close the shim leaves. */
static void test_log_drain(uint16_t fn_port, const char *log)
{
	int out[2], err[2], status = 0;
	struct shim_opts o = { .netns_path = ns_path, .port = fn_port, .log_path = log };
	pid_t pid;
	uint16_t port;
	unsigned long long start;
	char *text = NULL;
	size_t len;

	REQUIRE(pipe(out) == 0 && pipe(err) == 0);
	o.out_fd = out[0];
	o.err_fd = err[0];
	REQUIRE(shim_start(&o, &pid, &port) == 0);
	close(out[0]);
	close(err[0]);
	CHECK_EQ(proc_start_time(pid, &start), 0);
	CHECK(proc_alive(pid, start));
	CHECK(!proc_alive(pid, start + 1));

	/* While a connection is open the shim stays, even with the pipes closed. */
	int fd = host_connect(port);
	REQUIRE(fd >= 0);
	CHECK_EQ(write(out[1], "to stdout\n", 10), 10);
	CHECK_EQ(write(err[1], "to stderr\n", 10), 10);
	close(out[1]);
	close(err[1]);
	usleep(200 * 1000);
	CHECK_EQ(waitpid(pid, &status, WNOHANG), 0);
	CHECK_EQ(write(fd, "x", 1), 1);
	char c[8];
	CHECK_EQ(read(fd, c, 1), 1);
	close(fd);

	/* Now nothing holds it: it exits by itself. */
	uint64_t t0 = now_ns();
	pid_t r;
	while ((r = waitpid(pid, &status, WNOHANG)) == 0 && ms_since(t0) < 5000)
		usleep(10000);
	CHECK_EQ(r, pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (r != pid)
		shim_stop(pid, 0, 1000);

	REQUIRE(read_file(log, &text, &len, 1 << 20) == 0);
	CHECK(strstr(text, "to stdout\n") != NULL);
	CHECK(strstr(text, "to stderr\n") != NULL);
	free(text);
}

static uint64_t size_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Far more output than the bound: the log is rotated once it is reached, so
 * that never more than twice the bound is on disk, and its tail is the end of
 * the output. */
static void test_log_rotation(uint16_t fn_port, const char *log)
{
	struct shim_opts o = { .netns_path = ns_path, .port = fn_port, .log_path = log,
			       .max_log_bytes = 4096, .err_fd = -1 };
	char old[320], line[64], *text = NULL;
	int out[2];
	size_t len;
	pid_t pid;
	uint16_t port;

	snprintf(old, sizeof(old), "%s.1", log);
	REQUIRE(pipe(out) == 0);
	o.out_fd = out[0];
	REQUIRE(shim_start(&o, &pid, &port) == 0);
	close(out[0]);
	for (int i = 1; i <= 5000; i++) {
		int n = snprintf(line, sizeof(line), "line %d of the function\n", i);

		CHECK_EQ(write(out[1], line, (size_t)n), n);
		if (i % 500 == 0) {
			usleep(20 * 1000);
			CHECK(size_of(log) <= 4096);
			CHECK(size_of(old) <= 4096);
		}
	}
	close(out[1]);
	uint64_t t0 = now_ns();
	while (waitpid(pid, NULL, WNOHANG) == 0 && ms_since(t0) < 5000)
		usleep(10000);
	CHECK(!proc_alive(pid, 0));
	CHECK(size_of(log) <= 4096 && size_of(old) <= 4096);
	CHECK(size_of(old) > 2048);
	CHECK_EQ(logfile_tail(log, 3, &text, &len), 0);
	CHECK_STR(text, "line 4998 of the function\nline 4999 of the function\n"
			"line 5000 of the function\n");
	free(text);
}

int main(void)
{
	struct server srv = { .lfd = -1 };
	struct shim_opts o = { .out_fd = -1, .err_fd = -1 };
	char log[300], log2[300];
	pthread_t t;
	pid_t pid = -1;
	uint16_t port = 0;

	if (geteuid() != 0)
		SKIP("network namespaces need root");
	REQUIRE(mkdtemp(dir));
	snprintf(ns_path, sizeof(ns_path), "%s/netns", dir);
	snprintf(log, sizeof(log), "%s/function.log", dir);
	snprintf(log2, sizeof(log2), "%s/function2.log", dir);
	signal(SIGPIPE, SIG_IGN);
	if (netns_create(ns_path)) {
		rm_rf(dir);
		REQUIRE(!"netns_create");
	}
	pthread_create(&t, NULL, listen_in_ns, &srv);
	pthread_join(t, NULL);
	if (srv.lfd < 0)
		goto out;
	pthread_create(&t, NULL, serve, &srv);
	pthread_detach(t);

	/* The server is not reachable from the host namespace directly (its
	 * port, chosen in its namespace, may be another test's on the host). */
	if (port_listened_on(srv.port)) {
		printf("port %u: listened on in the host too, not checked\n", srv.port);
	} else {
		int direct = host_connect(srv.port);

		CHECK(direct < 0);
		if (direct >= 0)
			close(direct);
	}

	o.netns_path = ns_path;
	o.port = srv.port;
	o.log_path = log;
	CHECK_EQ(shim_start(&o, &pid, &port), 0);
	if (pid > 0) {
		CHECK(port != 0 && port != srv.port);
		test_echo_and_half_close(port);
		test_concurrent(port);
		test_large(port);
		CHECK_EQ(shim_stop(pid, 0, 2000), 0);
		CHECK(!proc_alive(pid, 0));
		CHECK_EQ(waitpid(pid, NULL, WNOHANG), -1); /* reaped by shim_stop */
	}
	test_refused(log);
	test_log_drain(srv.port, log2);
	snprintf(log2, sizeof(log2), "%s/rotated.log", dir);
	test_log_rotation(srv.port, log2);

	/* A bad namespace path fails cleanly. */
	o.netns_path = "/nonexistent/netns";
	CHECK(shim_start(&o, &pid, &port) < 0);
out:
	CHECK(srv.lfd >= 0);
	netns_remove(ns_path);
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
