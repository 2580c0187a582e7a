/* SPDX-License-Identifier: Apache-2.0 */
/* ready.c — see ready.h. */
#define LOG_PREFIX "ready: "
#include "function/ready.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ANSWER (4u << 20)

void http_answer_release(struct http_answer *a)
{
	free(a->body);
	a->body = NULL;
	a->len = 0;
}

static int wait_fd(int fd, short ev, uint64_t deadline_ns)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	for (;;) {
		uint64_t now = now_ns();

		if (now >= deadline_ns)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline_ns - now) / 1000000 + 1));
		if (r > 0)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, const char *buf, size_t len, uint64_t deadline)
{
	while (len) {
		int ret = wait_fd(fd, POLLOUT, deadline);
		ssize_t w;

		if (ret)
			return ret;
		w = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		buf += w;
		len -= w;
	}
	return 0;
}

/* Parse a complete-enough answer: status line, headers, and the body so far.
 * Returns 1 when the whole body is there (Content-Length reached, or eof),
 * 0 when more is needed, -EPROTO if it is not HTTP. */
static int parse_answer(char *buf, size_t len, bool eof, struct http_answer *ans)
{
	char *hdr_end = memmem(buf, len, "\r\n\r\n", 4);
	long clen = -1;
	size_t body_off;
	int major, minor, status;

	if (!hdr_end)
		return eof ? -EPROTO : 0;
	*hdr_end = '\0';
	if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &status) != 3 || status < 100 ||
	    status > 999) {
		*hdr_end = '\r';
		return -EPROTO;
	}
	for (char *l = strstr(buf, "\r\n"); l; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, "Content-Length:", 15))
			clen = strtol(l + 17, NULL, 10);
	*hdr_end = '\r';
	body_off = hdr_end + 4 - buf;
	if (!eof && (clen < 0 || len - body_off < (size_t)clen))
		return 0;
	ans->status = status;
	ans->len = clen >= 0 ? MIN((size_t)clen, len - body_off) : len - body_off;
	ans->body = malloc(ans->len + 1);
	if (!ans->body)
		return -ENOMEM;
	memcpy(ans->body, buf + body_off, ans->len);
	ans->body[ans->len] = '\0';
	return 1;
}

int ready_http(const char *netns, uint16_t port, const char *method, const char *path,
	       const char *body, int timeout_ms, struct http_answer *ans)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000;
	char *req = NULL, *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = -1, ret, n;

	memset(ans, 0, sizeof(*ans));
	fd = netns_connect(netns, port, timeout_ms);
	if (fd < 0)
		return fd;
	n = asprintf(&req,
		     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n"
		     "User-Agent: thaw\r\nContent-Length: %zu\r\n%s\r\n%s",
		     method, path, port, body ? strlen(body) : 0,
		     body ? "Content-Type: application/json\r\n" : "", body ? body : "");
	if (n < 0) {
		req = NULL;
		ret = -ENOMEM;
		goto out;
	}
	ret = send_all(fd, req, n, deadline);
	if (ret)
		goto out;
	for (;;) {
		ssize_t r;

		if (cap - len < 4096) {
			char *nb;

			if (cap >= MAX_ANSWER) {
				pr_err("%s %s: answer larger than %u bytes", method, path, MAX_ANSWER);
				ret = -EFBIG;
				goto out;
			}
			cap = cap ? cap * 2 : 16384;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				ret = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		ret = wait_fd(fd, POLLIN, deadline);
		if (ret)
			goto out;
		r = recv(fd, buf + len, cap - len, MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			ret = -errno;
			goto out;
		}
		len += r;
		ret = parse_answer(buf, len, r == 0, ans);
		if (ret == 1) {
			ret = 0;
			break;
		}
		if (ret < 0) {
			if (ret == -EPROTO)
				pr_err("%s %s: the answer is not HTTP", method, path);
			goto out;
		}
		if (r == 0) { /* eof before anything usable */
			ret = -ECONNRESET;
			goto out;
		}
	}
out:
	free(req);
	free(buf);
	if (fd >= 0)
		close(fd);
	return ret;
}

bool ready_pid_alive(pid_t pid)
{
	char path[64], buf[1024], *rp;
	ssize_t n;
	int fd;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	/* read_file() trusts st_size, which is 0 for /proc files: read it here. */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "pid (comm) S ...": the state follows the last ')'. */
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

int ready_wait(const char *netns, uint16_t port, enum ready_kind kind, const char *path,
	       double timeout_s, pid_t pid, char *why, size_t whylen)
{
	uint64_t start = now_ns();
	int delay_ms = 20, ret = -ETIMEDOUT;
	char last[256] = "nothing tried yet";

	for (;;) {
		double left_ms = timeout_s * 1000.0 - ms_since(start);
		int probe_ms = (int)MIN(MAX(left_ms, 1.0), 5000.0);

		if (pid > 0 && !ready_pid_alive(pid)) {
			ret = -ESRCH;
			snprintf(last, sizeof(last), "the function exited");
			break;
		}
		if (kind == READY_TCP) {
			int fd = netns_connect(netns, port, probe_ms);

			if (fd >= 0) {
				close(fd);
				return 0;
			}
			snprintf(last, sizeof(last), "connect to port %u: %s", port, strerror(-fd));
		} else {
			struct http_answer a;
			int r = ready_http(netns, port, "GET", path, NULL, probe_ms, &a);

			if (r == 0 && a.status >= 200 && a.status < 300) {
				http_answer_release(&a);
				return 0;
			}
			if (r == 0)
				snprintf(last, sizeof(last), "GET %s answered %d", path, a.status);
			else
				snprintf(last, sizeof(last), "GET %s on port %u: %s", path, port,
					 strerror(-r));
			http_answer_release(&a);
		}
		left_ms = timeout_s * 1000.0 - ms_since(start);
		if (left_ms <= 0)
			break;
		usleep((useconds_t)MIN((double)delay_ms, left_ms) * 1000);
		delay_ms = MIN(delay_ms * 2, 200);
	}
	if (why && whylen)
		snprintf(why, whylen, "%s", last);
	return ret;
}
