/* SPDX-License-Identifier: Apache-2.0 */
/* exits.c — see exits.h. */
#define LOG_PREFIX "exits: "
#include "server/exits.h"
#include "common/log.h"
#include "restore/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the keeper sends for each process it reaps: one write, well under
 * PIPE_BUF, so never split. */
struct exit_msg {
	int32_t pid;
	int32_t status;
	uint64_t start;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int from_keeper = -1;
static pid_t keeper_pid;
static struct exit_msg kept[EXITS_KEPT];
static size_t nkept, next_slot;

static const int passed_on[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
/* Signals whose default would end the keeper, and the server with it (its
 * instances left running), that mean nothing to thawd: taken and dropped. */
static const int ignored[] = { SIGUSR1, SIGUSR2, SIGALRM };

/* The keeper's end: reap every child that has exited; the server last of
 * all, whose end is the keeper's. */
static void reap(pid_t server, int to_server)
{
	for (;;) {
		siginfo_t si = { 0 };
		struct exit_msg m = { 0 };
		unsigned long long start = 0;
		int status;

		/* Look before reaping: a zombie's start time is still there to
		 * tell it from a later process given the same pid. */
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
			return;
		proc_start_time(si.si_pid, &start);
		if (waitpid(si.si_pid, &status, 0) < 0)
			continue;
		if (si.si_pid == server) {
			if (WIFEXITED(status))
				_exit(WEXITSTATUS(status));
			signal(WTERMSIG(status), SIG_DFL);
			sigset_t all;
			sigfillset(&all);
			sigprocmask(SIG_UNBLOCK, &all, NULL);
			raise(WTERMSIG(status));
			_exit(128 + WTERMSIG(status));
		}
		m = (struct exit_msg){ .pid = si.si_pid, .status = status, .start = start };
		/* Non-blocking: a server too busy to read loses a status (its
		 * instance then ends with "status unknown"), never the keeper. */
		if (write(to_server, &m, sizeof(m)) < 0 && errno != EAGAIN)
			continue;
	}
}

static void __attribute__((noreturn)) keep(pid_t server, int to_server, const sigset_t *set)
{
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		int sig = sigwaitinfo(set, NULL);

		bool drop = false;

		for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
			drop |= sig == ignored[i];
		if (sig == SIGCHLD)
			reap(server, to_server);
		else if (sig > 0 && !drop)
			kill(server, sig);
	}
}

int exits_start_keeper(void)
{
	sigset_t set, old;
	pid_t keeper = getpid(), server;
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		int err = -errno;

		pr_warn("cannot become a child subreaper (%s): instances' exit statuses will "
			"be unknown", strerror(errno));
		close(p[0]);
		close(p[1]);
		return err;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; i < sizeof(passed_on) / sizeof(passed_on[0]); i++)
		sigaddset(&set, passed_on[i]);
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		sigaddset(&set, ignored[i]);
	sigprocmask(SIG_BLOCK, &set, &old);
	server = fork();
	if (server < 0) {
		int err = -errno;

		sigprocmask(SIG_SETMASK, &old, NULL);
		prctl(PR_SET_CHILD_SUBREAPER, 0);
		close(p[0]);
		close(p[1]);
		pr_warn("cannot fork the server from its keeper (%s): instances' exit statuses "
			"will be unknown", strerror(-err));
		return err;
	}
	if (server > 0) {
		close(p[0]);
		fcntl(p[1], F_SETFL, O_NONBLOCK);
		keep(server, p[1], &set);
	}
	/* The server. */
	sigprocmask(SIG_SETMASK, &old, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != keeper) /* the keeper died before the line above */
		_exit(1);
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	from_keeper = p[0];
	keeper_pid = keeper;
	return 0;
}

pid_t exits_keeper_pid(void)
{
	return keeper_pid;
}

/* Take in what the keeper has sent; lock held. */
static void drain(void)
{
	struct exit_msg m[64];
	ssize_t n;

	if (from_keeper < 0)
		return;
	while ((n = read(from_keeper, m, sizeof(m))) > 0) {
		for (size_t i = 0; i < (size_t)n / sizeof(m[0]); i++) {
			kept[next_slot] = m[i];
			next_slot = (next_slot + 1) % EXITS_KEPT;
			if (nkept < EXITS_KEPT)
				nkept++;
		}
	}
}

void exits_drain(void)
{
	pthread_mutex_lock(&lock);
	drain();
	pthread_mutex_unlock(&lock);
}

bool exits_lookup(pid_t pid, unsigned long long start, int *status)
{
	bool found = false;

	pthread_mutex_lock(&lock);
	drain();
	/* Newest first: a pid reused since is the later entry. */
	for (size_t k = 0; k < nkept && !found; k++) {
		const struct exit_msg *m = &kept[(next_slot + EXITS_KEPT - 1 - k) % EXITS_KEPT];

		if (m->pid == pid && (!start || !m->start || m->start == start)) {
			*status = m->status;
			found = true;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}
