/* SPDX-License-Identifier: Apache-2.0 */
/* shim.c — see shim.h.  A poll() loop over the listening socket, the
 * container's two pipes and two sockets per relayed connection, each
 * direction through its own buffer.  poll, not epoll: an instance has a
 * handful of connections and the loop stays obvious. */
#define LOG_PREFIX "shim: "
#include "restore/shim.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHIM_BUF (64 * 1024)

struct relay_buf {
	size_t off, len;
	char data[SHIM_BUF];
};

/* fd[0] is the client (host side), fd[1] the function (namespace side).
 * b[d] holds bytes read from fd[d] and not yet written to fd[1 - d];
 * eof[d]: fd[d] said EOF; shut[d]: we shut fd[d]'s write side. */
struct conn {
	int fd[2];
	bool connecting;
	bool eof[2], shut[2];
	struct relay_buf b[2];
};

struct shim {
	int lfd, pipes[2];
	struct logfile log; /* the container's stdout and stderr, and our errors */
	/* The activity file, mapped shared (shim.h): [0] the last time bytes
	 * moved or a connection opened, in CLOCK_REALTIME ms; [1] the
	 * connections open.  NULL: none kept. */
	volatile uint64_t *act;
	bool had_pipes;
	uint16_t port;
	struct conn **conns;
	size_t nconns, cap;
};

static volatile sig_atomic_t stop_requested, close_requested;

static void on_term(int sig)
{
	stop_requested = 1;
}

/* SHIM_CLOSE_SIGNAL: the instance is being stopped. */
static void on_close(int sig)
{
	close_requested = 1;
}

static void conn_free(struct conn *c)
{
	for (int i = 0; i < 2; i++)
		if (c->fd[i] >= 0)
			close(c->fd[i]);
	free(c);
}

/* The relay writes what it reads as it reads it: with Nagle on, the
 * second small write of an answer (headers, then body) waited for the
 * client's delayed ACK, ~40 ms per answer on a kept connection. */
static void no_delay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* A socket in our (the instance's) namespace, connecting to the function. */
static int upstream_connect(uint16_t port, bool *in_progress)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd;

	*in_progress = false;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	no_delay(fd);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS) {
			int err = -errno;

			close(fd);
			return err;
		}
		*in_progress = true;
	}
	return fd;
}

static void accept_all(struct shim *s)
{
	for (;;) {
		struct conn *c;
		int cfd, ufd;
		bool busy;

		cfd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				pr_perror("accept");
			return;
		}
		no_delay(cfd);
		ufd = upstream_connect(s->port, &busy);
		if (ufd < 0) {
			errno = -ufd;
			pr_perror("connect to the function on port %u", s->port);
			close(cfd);
			continue;
		}
		if (ARRAY_GROW(s->conns, s->cap, s->nconns + 1, 16)) {
			pr_err("out of memory: connection refused");
			close(cfd);
			close(ufd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			pr_err("out of memory: connection refused");
			close(cfd);
			close(ufd);
			continue;
		}
		c->fd[0] = cfd;
		c->fd[1] = ufd;
		c->connecting = busy;
		s->conns[s->nconns++] = c;
	}
}

/* Which events conn c wants on fd[i]. */
static short conn_events(const struct conn *c, int i)
{
	short ev = 0;

	if (c->connecting)
		return i == 1 ? POLLOUT : 0;
	if (c->b[i].len == 0 && !c->eof[i])
		ev |= POLLIN; /* room to read more from fd[i] */
	if (c->b[1 - i].len > 0)
		ev |= POLLOUT; /* bytes waiting to go to fd[i] */
	return ev;
}

/* Move bytes for conn c given the poll results; false when it is finished. */
static bool conn_step(struct conn *c, const short rev[2], const short ev[2])
{
	if (c->connecting) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(rev[1] & (POLLOUT | POLLERR | POLLHUP)))
			return true;
		if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			errno = err;
			pr_perror("connect to the function");
			return false;
		}
		c->connecting = false;
		return true;
	}
	for (int d = 0; d < 2; d++) {
		struct relay_buf *b = &c->b[d];
		int src = c->fd[d], dst = c->fd[1 - d];

		if ((ev[d] & POLLIN) && (rev[d] & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(src, b->data, sizeof(b->data));

			if (n > 0) {
				b->off = 0;
				b->len = (size_t)n;
			} else if (n == 0) {
				c->eof[d] = true;
			} else if (errno != EAGAIN && errno != EINTR) {
				return false; /* reset: drop both sides */
			}
		}
		/* Try the write at once: usually the peer has room. */
		while (b->len > 0) {
			ssize_t n = send(dst, b->data + b->off, b->len, MSG_NOSIGNAL);

			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					break;
				return false;
			}
			b->off += (size_t)n;
			b->len -= (size_t)n;
		}
		if (c->eof[d] && b->len == 0 && !c->shut[1 - d]) {
			/* Half-close: pass the EOF on, keep the other way open. */
			shutdown(dst, SHUT_WR);
			c->shut[1 - d] = true;
		}
	}
	return !(c->shut[0] && c->shut[1]);
}

static void drain_pipe(struct shim *s, int i)
{
	char buf[16384];
	ssize_t n = read(s->pipes[i], buf, sizeof(buf));

	if (n > 0) {
		unsigned rotations = s->log.rotations;

		logfile_write(&s->log, buf, (size_t)n);
		/* Our own errors (stderr) follow the log into its new file. */
		if (s->log.rotations != rotations && s->log.fd >= 0)
			dup2(s->log.fd, 2);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	close(s->pipes[i]);
	s->pipes[i] = -1;
}

/* Any connection fd ready (bytes, a close) or a connection accepted counts
 * as use of the endpoint. */
static void note_activity(struct shim *s, const struct pollfd *conn_fds, size_t n, bool accepted)
{
	bool used = accepted;

	for (size_t i = 0; i < n && !used; i++)
		used = conn_fds[i].fd >= 0 && conn_fds[i].revents;
	if (!s->act)
		return;
	if (used)
		s->act[0] = realtime_ms();
	s->act[1] = s->nconns;
}

/* Map the activity file (created, 16 bytes), its time now. */
static void map_activity(struct shim *s, const char *path)
{
	int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
	void *m;

	if (fd < 0)
		return;
	if (ftruncate(fd, 2 * sizeof(uint64_t)) == 0) {
		m = mmap(NULL, 2 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m != MAP_FAILED) {
			s->act = m;
			s->act[0] = realtime_ms();
			s->act[1] = 0;
		}
	}
	close(fd);
}

/* The endpoint closed at once, while the log drain goes on (shim.h,
 * SHIM_CLOSE_SIGNAL): the listening socket (connections not yet accepted
 * are refused with it) and every connection.  Once the container's pipes
 * close too, the loop ends. */
static void close_endpoint(struct shim *s)
{
	if (!close_requested || s->lfd < 0)
		return;
	close(s->lfd);
	s->lfd = -1;
	for (size_t i = 0; i < s->nconns; i++)
		conn_free(s->conns[i]);
	s->nconns = 0;
	if (s->act)
		s->act[1] = 0;
	/* A shim that drains nothing has nothing left to do. */
	if (!s->had_pipes)
		stop_requested = 1;
}

static int shim_loop(struct shim *s)
{
	struct pollfd *pfd = NULL;
	short *ev = NULL;
	size_t cap = 0;
	sigset_t empty;

	sigemptyset(&empty);
	while (!stop_requested) {
		size_t n;

		close_endpoint(s);
		n = 3 + 2 * s->nconns;

		if (s->had_pipes && s->pipes[0] < 0 && s->pipes[1] < 0 && s->nconns == 0)
			break; /* the container is gone and nobody is talking */
		if (!pfd || n > cap) {
			struct pollfd *np = realloc(pfd, n * sizeof(*pfd));
			short *ne = np ? realloc(ev, n * sizeof(*ev)) : NULL;

			if (np)
				pfd = np;
			if (ne)
				ev = ne;
			if (!np || !ne) {
				pr_err("out of memory");
				break;
			}
			cap = n;
		}
		pfd[0] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = s->pipes[0], .events = POLLIN };
		pfd[2] = (struct pollfd){ .fd = s->pipes[1], .events = POLLIN };
		for (size_t i = 0; i < s->nconns; i++)
			for (int k = 0; k < 2; k++) {
				struct pollfd *p = &pfd[3 + 2 * i + k];

				ev[3 + 2 * i + k] = conn_events(s->conns[i], k);
				/* An fd we want nothing from is left out, so that a
				 * peer's hangup cannot make poll spin. */
				p->fd = ev[3 + 2 * i + k] ? s->conns[i]->fd[k] : -1;
				p->events = ev[3 + 2 * i + k];
				p->revents = 0;
			}
		if (ppoll(pfd, n, NULL, &empty) < 0) {
			if (errno == EINTR)
				continue;
			pr_perror("poll");
			break;
		}
		/* Not one more connection once the endpoint is to close. */
		if (close_requested && s->lfd >= 0)
			continue;
		for (int i = 0; i < 2; i++)
			if (pfd[1 + i].fd >= 0 && pfd[1 + i].revents)
				drain_pipe(s, i);
		/* Connections first: accept_all may move s->conns. */
		size_t j = 0;

		for (size_t i = 0; i < (n - 3) / 2; i++) {
			short rev[2] = { pfd[3 + 2 * i].revents, pfd[4 + 2 * i].revents };
			short want[2] = { ev[3 + 2 * i], ev[4 + 2 * i] };
			struct conn *c = s->conns[i];

			if (conn_step(c, rev, want))
				s->conns[j++] = c;
			else
				conn_free(c);
		}
		s->nconns = j;
		if (pfd[0].revents & POLLIN)
			accept_all(s);
		note_activity(s, pfd + 3, n - 3, pfd[0].revents & POLLIN);
	}
	free(pfd);
	free(ev);
	return 0;
}

/* Close every fd but those in keep (sorted ascending, n entries). */
static void close_others(const int *keep, size_t n)
{
	unsigned int from = 3;

	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned int)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned int)keep[i] - 1, 0);
		from = (unsigned int)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0);
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* The child: never returns. */
static void shim_child(const struct shim_opts *o, int report)
{
	struct shim s = { .lfd = -1, .pipes = { o->out_fd, o->err_fd }, .log = { .fd = -1 },
			  .port = o->port };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t salen = sizeof(sa);
	struct sigaction act = { .sa_handler = on_term };
	int nsfd = -1, null_fd, keep[6], nkeep = 0, msg;
	sigset_t set;

	setsid();
	prctl(PR_SET_NAME, SHIM_COMM, 0, 0, 0);
	/* The starter's handlers and mask mean nothing here. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SHIM_CLOSE_SIGNAL);
	sigprocmask(SIG_SETMASK, &set, NULL);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	sigaction(SHIM_CLOSE_SIGNAL, &(struct sigaction){ .sa_handler = on_close }, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);

	/* stdio must not hold the starter's terminal or pipes: a caller that
	 * reads `thaw start`'s output to its end would wait for us forever. */
	logfile_open(&s.log, o->log_path, o->max_log_bytes, false);
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0) {
		dup2(null_fd, 0);
		dup2(null_fd, 1);
		dup2(s.log.fd >= 0 ? s.log.fd : null_fd, 2);
		close(null_fd);
	}

	s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s.lfd < 0 || bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(s.lfd, 512) < 0 || getsockname(s.lfd, (struct sockaddr *)&sa, &salen) < 0) {
		msg = -errno;
		pr_perror("listen on 127.0.0.1");
		goto fail;
	}
	/* The listening socket stays in the host's namespace; every socket
	 * made from here on is in the instance's. */
	nsfd = open(o->netns_path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0) {
		msg = -errno;
		pr_perror("join %s", o->netns_path);
		goto fail;
	}
	close(nsfd);

	map_activity(&s, o->activity_path);
	keep[nkeep++] = report;
	keep[nkeep++] = s.lfd;
	if (s.log.fd >= 0)
		keep[nkeep++] = s.log.fd;
	for (int i = 0; i < 2; i++)
		if (s.pipes[i] >= 0) {
			keep[nkeep++] = s.pipes[i];
			fcntl(s.pipes[i], F_SETFL, fcntl(s.pipes[i], F_GETFL) | O_NONBLOCK);
			s.had_pipes = true;
		}
	qsort(keep, nkeep, sizeof(keep[0]), cmp_int);
	/* Whatever else the starter had open (thawd's listening socket, another
	 * instance's pipes) must not be held open by us. */
	close_others(keep, nkeep);

	msg = ntohs(sa.sin_port);
	if (write(report, &msg, sizeof(msg)) != sizeof(msg))
		_exit(1);
	close(report);
	shim_loop(&s);
	_exit(0);
fail:
	if (write(report, &msg, sizeof(msg)) != sizeof(msg))
		_exit(1);
	_exit(1);
}

int shim_start(const struct shim_opts *o, pid_t *pid, uint16_t *port)
{
	int p[2] = { -1, -1 }, msg = 0, ret, status;
	ssize_t n;
	pid_t child;

	if (pipe2(p, O_CLOEXEC) < 0) {
		ret = -errno;
		pr_perror("pipe");
		return ret;
	}
	child = fork();
	if (child < 0) {
		ret = -errno;
		pr_perror("fork");
		goto out;
	}
	if (child == 0) {
		close(p[0]);
		shim_child(o, p[1]);
	}
	close(p[1]);
	p[1] = -1;
	do
		n = read(p[0], &msg, sizeof(msg));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(msg) || msg <= 0) {
		ret = n != sizeof(msg) ? -EIO : msg;
		if (n != sizeof(msg))
			pr_err("the shim died before it listened");
		else
			pr_err("the shim could not start: %s (see %s)", strerror(-msg), o->log_path);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			;
		goto out;
	}
	*pid = child;
	*port = (uint16_t)msg;
	ret = 0;
out:
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
	return ret;
}

/* /proc/<pid>/stat, from after the comm field (which may hold spaces and
 * parentheses) on: " S ppid …".  /proc files have no size: read_file can't. */
static int read_stat(pid_t pid, char *buf, size_t size, char **rest)
{
	char path[64];
	ssize_t n;
	int fd, ret;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, size - 1);
	ret = n < 0 ? -errno : 0;
	close(fd);
	if (ret)
		return ret == -ENOENT ? -ESRCH : ret;
	buf[n] = '\0';
	*rest = strrchr(buf, ')');
	return *rest && (*rest)[1] == ' ' && (*rest)[2] ? 0 : -EINVAL;
}

int proc_start_time(pid_t pid, unsigned long long *start)
{
	char buf[1024], *p;
	int ret = read_stat(pid, buf, sizeof(buf), &p), field = 2;

	if (ret)
		return ret;
	/* p is at the ')' closing field 2; the start time is field 22.  (read_stat
	 * sets p when it returns 0; the analyzer takes a failed open's errno for 0.)
	 * NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign) */
	for (p++; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22 || sscanf(p, "%llu", start) != 1)
		return -EINVAL;
	return 0;
}

bool proc_alive(pid_t pid, unsigned long long start)
{
	unsigned long long now;
	char buf[1024], *p;
	int ret;

	if (pid <= 0)
		return false;
	ret = proc_start_time(pid, &now);
	/* /proc not read for want of our own descriptors or memory says
	 * nothing of the process: one that kill(2) still finds counts as
	 * alive, never as exited (its instance is then not torn down). */
	if (ret && ret != -ESRCH && ret != -EINVAL)
		return kill(pid, 0) == 0 || errno == EPERM;
	if (ret)
		return false;
	if (start && now != start)
		return false;
	ret = read_stat(pid, buf, sizeof(buf), &p);
	if (ret && ret != -ESRCH && ret != -EINVAL)
		return kill(pid, 0) == 0 || errno == EPERM;
	if (ret)
		return false;
	/* A zombie is gone but for its parent's wait.  (p is set: see above.)
	 * NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
	return p[2] != 'Z' && p[2] != 'X';
}

static bool wait_gone(pid_t pid, unsigned long long start, int timeout_ms)
{
	uint64_t t0 = now_ns();

	for (;;) {
		/* Reap it if it is ours (thawd); if not, init does. */
		waitpid(pid, NULL, WNOHANG);
		if (!proc_alive(pid, start))
			return true;
		if (ms_since(t0) >= timeout_ms)
			return false;
		usleep(5000);
	}
}

/* Does 127.0.0.1:port refuse a connection now? */
static bool port_refuses(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool refused;

	if (fd < 0)
		return false;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	refused = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == ECONNREFUSED;
	close(fd);
	return refused;
}

int shim_close_endpoint(pid_t pid, unsigned long long start, uint16_t port, int timeout_ms)
{
	uint64_t t0 = now_ns();

	if (pid <= 0 || !proc_alive(pid, start))
		return 0;
	if (kill(pid, SHIM_CLOSE_SIGNAL) < 0 && errno != ESRCH) {
		int err = -errno;

		pr_perror("kill %d", (int)pid);
		return err;
	}
	/* The listening socket is closed by the time a connection to its port
	 * is refused: no other word comes back from the shim. */
	while (port && !port_refuses(port) && proc_alive(pid, start)) {
		if (ms_since(t0) >= timeout_ms) {
			pr_warn("shim %d still accepts on port %u after %d ms: stopping it", (int)pid,
				port, timeout_ms);
			return shim_stop(pid, start, timeout_ms);
		}
		usleep(2000);
	}
	return 0;
}

int shim_stop(pid_t pid, unsigned long long start, int timeout_ms)
{
	if (pid <= 0)
		return 0;
	if (!proc_alive(pid, start)) {
		waitpid(pid, NULL, WNOHANG); /* a zombie child of ours */
		return 0;
	}
	if (kill(pid, SIGTERM) < 0 && errno != ESRCH) {
		int err = -errno;

		pr_perror("kill %d", (int)pid);
		return err;
	}
	if (wait_gone(pid, start, timeout_ms))
		return 0;
	pr_warn("shim %d did not stop in %d ms: killing it", (int)pid, timeout_ms);
	kill(pid, SIGKILL);
	if (wait_gone(pid, start, 2000))
		return 0;
	pr_err("shim %d is still alive after SIGKILL", (int)pid);
	return -EBUSY;
}
