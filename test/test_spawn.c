/* SPDX-License-Identifier: Apache-2.0 */
/* test_spawn: common/spawn runs a program with its stdio wired (pipes,
 * /dev/null, stderr into stdout, a given fd), with nothing else of ours
 * open, and reports its status, a program it cannot run (127) and a
 * timeout (the child and its process group killed); spawn_detached's child
 * is in a session of its own and not ours. */
#include "common/spawn.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* All of fd, to EOF, into buf (NUL-terminated); closes fd. */
static void read_all(int fd, char *buf, size_t len)
{
	size_t n = 0;
	ssize_t r;

	while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	close(fd);
}

static int exit_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_pipes(void)
{
	const char *argv[] = { "sh", "-c", "cat; echo out; echo err >&2; ls /proc/self/fd; exit 3",
			       NULL };
	struct spawn sp = SPAWN_INIT;
	char buf[512];
	int status = 0;

	sp.argv = argv;
	sp.in = sp.out = sp.err = SPAWN_PIPE;
	REQUIRE(spawn_start(&sp) == 0);
	CHECK(sp.pid > 0 && sp.pipe_in >= 0 && sp.pipe_out >= 0 && sp.pipe_err >= 0);
	CHECK_EQ(write(sp.pipe_in, "in\n", 3), 3);
	close(sp.pipe_in);
	read_all(sp.pipe_out, buf, sizeof(buf));
	/* ls's own directory fd (3) is the only one beyond stdio */
	CHECK_STR(buf, "in\nout\n0\n1\n2\n3\n");
	read_all(sp.pipe_err, buf, sizeof(buf));
	CHECK_STR(buf, "err\n");
	CHECK_EQ(spawn_wait(&sp, -1, &status), 0);
	CHECK_EQ(exit_code(status), 3);
	CHECK_EQ(sp.pid, -1);
}

static void test_null_and_merge(void)
{
	const char *argv[] = { "sh", "-c", "cat; echo out; echo err >&2; echo $THAW_SPAWN", NULL };
	char *env[] = { "THAW_SPAWN=env", "PATH=/usr/bin:/bin", NULL };
	struct spawn sp = SPAWN_INIT;
	char buf[256];
	int status = -1;

	sp.argv = argv;
	sp.env = env;
	sp.out = SPAWN_PIPE;
	sp.err = SPAWN_OUT;
	REQUIRE(spawn_start(&sp) == 0);
	CHECK_EQ(sp.pipe_in, -1);
	CHECK_EQ(sp.pipe_err, -1);
	read_all(sp.pipe_out, buf, sizeof(buf));
	CHECK_STR(buf, "out\nerr\nenv\n");
	CHECK_EQ(spawn_wait(&sp, 5000, &status), 0);
	CHECK_EQ(exit_code(status), 0);
}

static void test_given_fd(void)
{
	char path[] = "/tmp/test_spawn.XXXXXX", buf[64];
	const char *argv[] = { "sh", "-c", "echo to-file", NULL };
	struct spawn sp = SPAWN_INIT;
	int fd = mkstemp(path), status = -1;

	REQUIRE(fd >= 0);
	sp.argv = argv;
	sp.out = fd;
	CHECK_EQ(spawn_run(&sp, -1, &status), 0);
	CHECK_EQ(exit_code(status), 0);
	CHECK(fcntl(fd, F_GETFD) >= 0); /* still ours */
	CHECK_EQ(pread(fd, buf, sizeof(buf) - 1, 0), 8);
	buf[8] = '\0';
	CHECK_STR(buf, "to-file\n");
	close(fd);
	unlink(path);
}

static void test_not_run(void)
{
	const char *argv[] = { "/nonexistent/thaw-spawn-test", NULL };
	struct spawn sp = SPAWN_INIT;
	int status = -1;

	sp.argv = argv;
	CHECK_EQ(spawn_run(&sp, -1, &status), 0);
	CHECK_EQ(exit_code(status), 127);
}

/* Gone, or a zombie (reparented to an init that may be slow to reap it). */
static bool dead(pid_t pid)
{
	char path[64], buf[512], *p;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static void test_timeout(void)
{
	/* The shell's own child (sleep) is in its group: the kill reaches it. */
	const char *argv[] = { "sh", "-c", "sleep 30 & echo $!; wait", NULL };
	struct spawn sp = SPAWN_INIT;
	uint64_t t0 = now_ns();
	char buf[64];
	int status = -1;
	pid_t grandchild;

	sp.argv = argv;
	sp.out = SPAWN_PIPE;
	sp.new_pgrp = true;
	REQUIRE(spawn_start(&sp) == 0);
	CHECK_EQ(spawn_wait(&sp, 200, &status), -ETIMEDOUT);
	CHECK(ms_since(t0) < 10000);
	CHECK_EQ(status, -1);
	read_all(sp.pipe_out, buf, sizeof(buf));
	grandchild = (pid_t)atoi(buf);
	CHECK(grandchild > 0);
	for (int i = 0; grandchild > 0 && i < 200 && !dead(grandchild); i++)
		usleep(10000);
	CHECK(grandchild <= 0 || dead(grandchild));
}

/* The detached child: its pid and session on fd 3. */
static void detached_body(void *arg)
{
	pid_t v[2] = { getpid(), getsid(0) };

	(void)arg;
	if (write(3, v, sizeof(v)) != (ssize_t)sizeof(v))
		_exit(1);
	_exit(0);
}

static void test_detached(void)
{
	int p[2] = { -1, -1 };
	pid_t v[2] = { 0, 0 };

	REQUIRE(pipe2(p, O_CLOEXEC) == 0);
	CHECK_EQ(spawn_detached(&p[1], 1, detached_body, NULL), 0);
	close(p[1]);
	CHECK_EQ(read(p[0], v, sizeof(v)), (ssize_t)sizeof(v));
	close(p[0]);
	CHECK(v[0] > 0 && v[1] > 0 && v[1] != getsid(0)); /* a session of its own */
	CHECK(waitpid(v[0], NULL, WNOHANG) < 0 && errno == ECHILD); /* not our child */
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* thawd's way: the child gets it back */
	test_pipes();
	test_null_and_merge();
	test_given_fd();
	test_not_run();
	test_timeout();
	test_detached();
	return check_failures ? 1 : 0;
}
