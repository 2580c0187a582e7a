/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_watch.c — see lazy_watch.h. */
#define LOG_PREFIX "lazy-watch: "
#include "restore/lazy_watch.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAZY_READY_TIMEOUT_MS 30000

/* Everything the watcher needs, built before the fork: after a fork from
 * a threaded thawd the watcher keeps to plain system calls. */
struct lazy_plan {
	const char *criu_argv[16];
	const char *kill_argv[8];
	const char *status_path;
	char status_tmp[PATH_MAX];
	uint64_t t0_ns;
};

/* Write the status file whole (temp file, rename): a reader never sees half. */
static void lazy_write_status(const struct lazy_plan *p, const char *text)
{
	int fd = open(p->status_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		return;
	if (write(fd, text, strlen(text)) == (ssize_t)strlen(text))
		rename(p->status_tmp, p->status_path);
	close(fd);
}

/* The watcher: fds 3 ready (write end, handed to the daemon as its
 * --status-fd), 4 info (our pid and the daemon's to the starter), 5 the
 * lease, 0-2 /dev/null; arg the lazy_plan.  Never returns. */
static void lazy_watcher(void *arg)
{
	const struct lazy_plan *p = arg;
	pid_t pids[2] = { getpid(), 0 }, d;
	struct spawn kill_sp = SPAWN_INIT;
	char text[256];
	int st;

	d = fork();
	if (d == 0) {
		/* The daemon: the ready pipe only; not the lease, not the info pipe. */
		syscall(SYS_close_range, 4, ~0U, 0);
		execvp(p->criu_argv[0], (char *const *)p->criu_argv);
		_exit(127);
	}
	close(3);
	pids[1] = d > 0 ? d : 0;
	if (write(4, pids, sizeof(pids)) != sizeof(pids) || d < 0)
		_exit(1); /* the starter sees the pipe close without a ready byte */
	close(4);
	while (waitpid(d, &st, 0) < 0)
		if (errno != EINTR)
			_exit(1);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		snprintf(text, sizeof(text), "done %.3f\n", ms_since(p->t0_ns));
		lazy_write_status(p, text);
		_exit(0);
	}
	if (WIFEXITED(st))
		snprintf(text, sizeof(text),
			 "failed the lazy-pages daemon (pid %d) exited with status %d before it "
			 "had served every page\n", (int)d, WEXITSTATUS(st));
	else
		snprintf(text, sizeof(text),
			 "failed the lazy-pages daemon (pid %d) was killed by signal %d before it "
			 "had served every page\n", (int)d, WTERMSIG(st));
	/* The status first, then the kill: a starter that reads no status
	 * after runc restore returned has a container this kill reaches. */
	lazy_write_status(p, text);
	kill_sp.argv = p->kill_argv;
	spawn_run(&kill_sp, -1, NULL);
	_exit(0);
}

int lazy_watch_status(const char *status_path, double *done_ms, char *why, size_t len)
{
	char *text = NULL;
	size_t n;
	int ret = 0;

	if (why && len)
		why[0] = '\0';
	if (read_file(status_path, &text, &n, 4096))
		return 0;
	text[strcspn(text, "\n")] = '\0';
	if (!strncmp(text, "done ", 5)) {
		if (done_ms)
			*done_ms = strtod(text + 5, NULL);
		ret = 1;
	} else {
		if (why && len)
			snprintf(why, len, "%s", !strncmp(text, "failed ", 7) ? text + 7 : text);
		ret = -1;
	}
	free(text);
	return ret;
}

int lazy_watch_start(const struct runner *r, const char *id, const char *image_dir,
		     const char *work_dir, const char *log_path, const char *status_path,
		     int keep_fd, uint64_t t0_ns, struct lazy_watch *out)
{
	struct lazy_plan p = { .status_path = status_path, .t0_ns = t0_ns };
	int ready[2] = { -1, -1 }, info[2] = { -1, -1 }, fds[3], ret = 0, n = 0;
	pid_t pids[2] = { 0, 0 };
	struct pollfd pfd;
	char byte, tail[RUNNER_LOG_TAIL_MAX + 1];
	ssize_t got;

	*out = (struct lazy_watch){ 0 };
	if (snprintf(p.status_tmp, sizeof(p.status_tmp), "%s.tmp", status_path) >=
	    (int)sizeof(p.status_tmp))
		return -ENAMETOOLONG;
	ret = mkdir_p(work_dir, 0700);
	if (ret)
		return ret;
	unlink(status_path);
	if (r->lazy_daemon && *r->lazy_daemon)
		p.criu_argv[n++] = r->lazy_daemon; /* `thaw lazy-pages`: the same arguments */
	else
		p.criu_argv[n++] = r->criu && *r->criu ? r->criu : "criu";
	p.criu_argv[n++] = "lazy-pages";
	p.criu_argv[n++] = "--images-dir";
	p.criu_argv[n++] = image_dir;
	p.criu_argv[n++] = "--work-dir";
	p.criu_argv[n++] = work_dir;
	p.criu_argv[n++] = "--status-fd";
	p.criu_argv[n++] = "3";
	p.criu_argv[n++] = "--log-file";
	p.criu_argv[n++] = log_path;
	p.criu_argv[n++] = "-v4";
	p.criu_argv[n] = NULL;
	n = 0;
	p.kill_argv[n++] = r->runc;
	p.kill_argv[n++] = "--root";
	p.kill_argv[n++] = r->state_dir;
	p.kill_argv[n++] = "kill";
	p.kill_argv[n++] = id;
	p.kill_argv[n++] = "KILL";
	p.kill_argv[n] = NULL;

	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(info, O_CLOEXEC) < 0) {
		ret = -errno;
		pr_perror("lazy-pages daemon: pipe");
		goto out;
	}
	/* Detached, so that a `thaw start` that exits or a thawd that never
	 * waits for it leaves neither it nor a zombie. */
	fds[0] = ready[1];
	fds[1] = info[1];
	fds[2] = keep_fd;
	ret = spawn_detached(fds, 3, lazy_watcher, &p);
	if (ret)
		goto out;
	close(ready[1]);
	close(info[1]);
	ready[1] = info[1] = -1;
	got = read(info[0], pids, sizeof(pids));
	if (got == (ssize_t)sizeof(pids)) {
		out->watcher = pids[0];
		out->daemon = pids[1];
	}
	pfd = (struct pollfd){ .fd = ready[0], .events = POLLIN };
	do
		ret = poll(&pfd, 1, LAZY_READY_TIMEOUT_MS);
	while (ret < 0 && errno == EINTR);
	if (ret > 0 && read(ready[0], &byte, 1) == 1 && byte == '\0') {
		ret = 0;
		goto out;
	}
	/* No ready byte: it died (its status says how) or hangs. */
	if (ret == 0 && out->watcher > 0) {
		kill(out->watcher, SIGKILL);
		if (out->daemon > 0)
			kill(out->daemon, SIGKILL);
	}
	/* How it ended, in the watcher's words (it writes them as soon as
	 * it has reaped the daemon), else the end of the daemon's log. */
	tail[0] = '\0';
	for (int i = 0; ret != 0 && i < 100; i++) {
		if (lazy_watch_status(status_path, NULL, tail, sizeof(tail)) != 0)
			break;
		usleep(5000);
	}
	if (!tail[0])
		runner_log_tail(log_path, tail, sizeof(tail));
	pr_err("%s lazy-pages for %s did not get ready%s: %s",
	       r->lazy_daemon && *r->lazy_daemon ? "thaw" : "criu", id,
	       ret == 0 ? " in time (killed)" : "", tail[0] ? tail : "no log");
	*out = (struct lazy_watch){ 0 };
	ret = -EIO;
out:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (info[i] >= 0)
			close(info[i]);
	}
	return ret;
}
