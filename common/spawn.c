/* SPDX-License-Identifier: Apache-2.0 */
/* spawn.c — run a program as a child, its stdio wired, and await its end.
 *
 * thawd forks from many threads: between fork and exec the child makes only
 * async-signal-safe calls (open, fcntl, dup2, close_range, sigaction), and
 * every descriptor thaw opens is O_CLOEXEC, so the child starts with its
 * three and nothing of another thread's. */
#include "common/spawn.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: fds[] are the descriptors for 0, 1 and 2 (SPAWN_NULL for
 * /dev/null, SPAWN_OUT for stderr where stdout goes).  Never returns. */
static void child(const struct spawn *sp, int fds[3])
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	int moved[3];

	if (sp->new_pgrp)
		setpgid(0, 0);
	if (fds[2] == SPAWN_OUT)
		fds[2] = fds[1];
	for (int i = 0; i < 3; i++)
		if (fds[i] == SPAWN_NULL)
			fds[i] = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* Above 2 first, so that a dup2 cannot overwrite one still needed. */
	for (int i = 0; i < 3; i++)
		moved[i] = fds[i] < 0 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
	for (int i = 0; i < 3; i++)
		if (moved[i] < 0 || dup2(moved[i], i) < 0)
			_exit(126);
	syscall(SYS_close_range, 3u, ~0u, 0u);
	sigaction(SIGPIPE, &dfl, NULL);
	if (sp->env)
		execvpe(sp->argv[0], (char *const *)sp->argv, sp->env);
	else
		execvp(sp->argv[0], (char *const *)sp->argv);
	_exit(127);
}

static void close_pair(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0) {
			close(p[i]);
			p[i] = -1;
		}
}

int spawn_start(struct spawn *sp)
{
	/* pipes[i]: the pipe for fd i, [0] its read end, [1] its write end */
	int pipes[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	int fds[3] = { sp->in, sp->out, sp->err }, ret = 0;
	pid_t pid;

	sp->pid = -1;
	sp->pipe_in = sp->pipe_out = sp->pipe_err = -1;
	for (int i = 0; i < 3; i++) {
		if (fds[i] != SPAWN_PIPE)
			continue;
		if (pipe2(pipes[i], O_CLOEXEC) < 0) {
			ret = -errno;
			pr_perror("pipe");
			goto out;
		}
		fds[i] = pipes[i][i == 0 ? 0 : 1]; /* the child reads 0, writes 1 and 2 */
	}
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		pr_perror("fork");
		goto out;
	}
	if (pid == 0)
		child(sp, fds);
	sp->pid = pid;
	/* Keep thaw's ends, close the child's. */
	if (pipes[0][1] >= 0) {
		sp->pipe_in = pipes[0][1];
		pipes[0][1] = -1;
	}
	if (pipes[1][0] >= 0) {
		sp->pipe_out = pipes[1][0];
		pipes[1][0] = -1;
	}
	if (pipes[2][0] >= 0) {
		sp->pipe_err = pipes[2][0];
		pipes[2][0] = -1;
	}
out:
	for (int i = 0; i < 3; i++)
		close_pair(pipes[i]);
	return ret;
}

/* Whether the child ended within timeout_ms: a pidfd polled, or where there
 * is none (an old kernel), waitpid(WNOHANG) every 5 ms; *reaped where that
 * reaped it already, with *status. */
static bool ended_in_time(pid_t pid, int timeout_ms, bool *reaped, int *status)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	uint64_t start = now_ns();

	*reaped = false;
	if (pidfd >= 0) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		int pr;

		do
			pr = poll(&p, 1, timeout_ms);
		while (pr < 0 && errno == EINTR);
		close(pidfd);
		return pr != 0;
	}
	while (waitpid(pid, status, WNOHANG) == 0) {
		if (ms_since(start) > timeout_ms)
			return false;
		usleep(5000);
	}
	*reaped = true;
	return true;
}

int spawn_wait(struct spawn *sp, int timeout_ms, int *status)
{
	bool reaped = false;
	int st = 0, ret = 0;

	if (sp->pid <= 0)
		return -ECHILD;
	if (timeout_ms >= 0 && !ended_in_time(sp->pid, timeout_ms, &reaped, &st)) {
		if (sp->new_pgrp)
			kill(-sp->pid, SIGKILL);
		kill(sp->pid, SIGKILL);
		ret = -ETIMEDOUT;
	}
	if (!reaped)
		while (waitpid(sp->pid, &st, 0) < 0 && errno == EINTR)
			;
	sp->pid = -1;
	if (!ret && status)
		*status = st;
	return ret;
}

int spawn_run(struct spawn *sp, int timeout_ms, int *status)
{
	int ret = spawn_start(sp);

	return ret ? ret : spawn_wait(sp, timeout_ms, status);
}

int spawn_detached(const int *keep, size_t n, void (*fn)(void *arg), void *arg)
{
	pid_t mid = fork();
	int st;

	if (mid < 0) {
		int ret = -errno;

		pr_perror("fork");
		return ret;
	}
	if (mid == 0) {
		detach_child(keep, n);
		fn(arg);
		_exit(0);
	}
	while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
		;
	return 0;
}
