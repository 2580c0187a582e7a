/* SPDX-License-Identifier: Apache-2.0 */
/* tool.c — running skopeo and umoci (image_internal.h).
 *
 * They are run as programs (Debian's packages): skopeo reads every
 * transport users ship images in and checks every blob against its digest;
 * umoci unpacks an OCI layout's layers in order, whiteouts included.  What
 * they print on failure is kept (its end) and turned into the reason.
 */
#define LOG_PREFIX "image: "
#include "images/image_internal.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RAW_MAX (4u << 20) /* a manifest (list) printed by skopeo inspect --raw */
#define TICK_MS 500

extern char **environ;

static void tail_add(struct image_tool *t, const char *buf, size_t n)
{
	if (n >= IMAGE_TOOL_TAIL) {
		buf += n - (IMAGE_TOOL_TAIL - 1);
		n = IMAGE_TOOL_TAIL - 1;
	}
	if (t->tail_len + n >= IMAGE_TOOL_TAIL) {
		size_t drop = t->tail_len + n - (IMAGE_TOOL_TAIL - 1);

		memmove(t->tail, t->tail + drop, t->tail_len - drop);
		t->tail_len -= drop;
	}
	memcpy(t->tail + t->tail_len, buf, n);
	t->tail_len += n;
	t->tail[t->tail_len] = '\0';
}

static void lines_add(struct image_tool *t, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\n') {
			t->line[t->line_len] = '\0';
			if (t->on_line)
				t->on_line(t->arg, t->line);
			t->line_len = 0;
		} else if (t->line_len + 1 < sizeof(t->line)) {
			t->line[t->line_len++] = buf[i];
		}
	}
}

static int out_add(struct image_tool *t, const char *buf, size_t n)
{
	char *p;

	if (t->out_len + n > RAW_MAX)
		return -EFBIG;
	p = realloc(t->out, t->out_len + n + 1);
	if (!p)
		return -ENOMEM;
	t->out = p;
	memcpy(t->out + t->out_len, buf, n);
	t->out_len += n;
	t->out[t->out_len] = '\0';
	return 0;
}

/* environ with TMPDIR replaced (built before the fork: the child of a
 * threaded process may only make async-signal-safe calls). */
static char **child_env(const char *tmpdir)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(char *));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!tmpdir || strncmp(environ[i], "TMPDIR=", 7))
			env[k++] = environ[i];
	if (tmpdir && asprintf(&env[k], "TMPDIR=%s", tmpdir) < 0) {
		free(env);
		return NULL;
	}
	return env;
}

int image_tool_run(struct image_tool *t)
{
	char **env = child_env(t->tmpdir), buf[8192];
	uint64_t last_tick = now_ns();
	struct spawn sp = SPAWN_INIT;
	struct pollfd fds[2];
	int status = 0, ret;

	t->tail_len = 0;
	t->tail[0] = '\0';
	if (!env)
		return -ENOMEM;
	sp.argv = t->argv;
	sp.env = env;
	sp.out = sp.err = SPAWN_PIPE;
	ret = spawn_start(&sp);
	if (ret)
		goto out;
	fds[0] = (struct pollfd){ .fd = sp.pipe_out, .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = sp.pipe_err, .events = POLLIN };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		int r = poll(fds, 2, TICK_MS);

		if (r < 0 && errno != EINTR) {
			ret = -errno;
			pr_perror("poll");
			break;
		}
		for (int i = 0; r > 0 && i < 2; i++) {
			ssize_t n;

			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			n = read(fds[i].fd, buf, sizeof(buf));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				fds[i].fd = -1;
				continue;
			}
			if (i == 0 && t->keep_out) {
				int e = out_add(t, buf, (size_t)n);

				if (e && !ret) {
					ret = e;
					pr_err("%s printed more than %u bytes", t->argv[0], RAW_MAX);
				}
			} else {
				tail_add(t, buf, (size_t)n);
				lines_add(t, buf, (size_t)n);
			}
		}
		if (t->on_tick && now_ns() - last_tick >= TICK_MS * 1000000ull) {
			last_tick = now_ns();
			t->on_tick(t->arg);
		}
	}
	close(sp.pipe_out);
	close(sp.pipe_err);
	spawn_wait(&sp, -1, &status);
	if (!ret && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		ret = -ENOENT;
		pr_err("%s cannot be run (not installed? make deps installs it)", t->argv[0]);
	} else if (!ret && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		ret = -EIO;
	}
out:
	if (t->tmpdir) {
		for (size_t i = 0; env[i]; i++)
			if (!strncmp(env[i], "TMPDIR=", 7))
				free(env[i]);
	}
	free(env);
	return ret;
}

void image_tool_words(const struct image_tool *t, char *buf, size_t len)
{
	const char *m = NULL, *p = t->tail;
	size_t o = 0;

	while ((p = strstr(p, "msg=\""))) {
		m = p + 5;
		p = m;
	}
	if (!m) {
		const char *end = t->tail + t->tail_len;

		while (end > t->tail && (end[-1] == '\n' || end[-1] == ' '))
			end--;
		m = end;
		while (m > t->tail && m[-1] != '\n')
			m--;
		snprintf(buf, len, "%.*s", (int)(end - m), m);
		return;
	}
	for (; *m && *m != '\n' && o + 1 < len; m++) {
		if (m[0] == '\\' && m[1]) {
			m++;
		} else if (*m == '"') {
			break;
		}
		buf[o++] = *m;
	}
	buf[o] = '\0';
	/* skopeo puts every failure to open a source under this heading. */
	if (!strncmp(buf, "Error parsing image name \"", 26)) {
		const char *rest = strstr(buf + 26, "\": ");

		if (rest)
			memmove(buf, rest + 3, strlen(rest + 3) + 1);
	}
}

static bool has(const char *s, const char *what)
{
	return strcasestr(s, what) != NULL;
}

int image_skopeo_failed(const char *ref, const char *step, const struct image_tool *t)
{
	char words[1024];
	const char *what;
	int ret;

	image_tool_words(t, words, sizeof(words));
	if (has(words, "invalid reference format") || has(words, "invalid image name") ||
	    has(words, "invalid transport")) {
		ret = -EINVAL;
		what = "bad reference";
	} else if (has(words, "unauthorized") || has(words, "authentication required") ||
		   has(words, "access denied") || has(words, "denied:") ||
		   has(words, "requested access to the resource is denied")) {
		ret = -EACCES;
		what = "unauthorised (the registry refused; thawd --registry-auth names the "
		       "credentials)";
	} else if (has(words, "dial tcp") || has(words, "no such host") ||
		   has(words, "connection refused") || has(words, "network is unreachable") ||
		   has(words, "i/o timeout") || has(words, "handshake timeout") ||
		   has(words, "name resolution") || has(words, "connection reset")) {
		ret = -ENETUNREACH;
		what = "no network (the registry cannot be reached)";
	} else if (has(words, "digest did not match") || has(words, "digest mismatch") ||
		   has(words, "does not match") || has(words, "unexpected eof") ||
		   has(words, "invalid tar") || has(words, "gzip: invalid")) {
		ret = -EIO;
		what = "its data is damaged (a digest does not match)";
	} else if (has(words, "manifest unknown") || has(words, "not found") ||
		   has(words, "no such file or directory") || has(words, "does not exist") ||
		   has(words, "no descriptor found") || has(words, "name unknown")) {
		ret = -ENOENT;
		what = "not found";
	} else {
		ret = -EIO;
		what = "failed";
	}
	pr_err("%s: %s: %s (skopeo %s)", ref, what, words[0] ? words : "no message",
	       step);
	return ret;
}
