/* SPDX-License-Identifier: Apache-2.0 */
/* runner.c — see runner.h.
 *
 * Every runc call runs under a time limit (runc or CRIU can hang on a stuck
 * process; it is killed with its process group when the limit passes) with
 * only the descriptors we mean it to have: a stray pipe of another instance
 * inherited by a container would be an external file to CRIU and fail its dump.
 */
#define LOG_PREFIX "runner: "
#include "common/runner.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S	     120
#define CHECKPOINT_TIMEOUT_S 900
#define RESTORE_TIMEOUT_S    600
#define SHORT_TIMEOUT_S	     30
/* The error message of log.h holds 1 KiB: the tail of a log we quote must fit. */
#define TAIL_BYTES RUNNER_LOG_TAIL_MAX
#define TAIL_LINES 15

struct runc_call {
	const char *log_path; /* runc --log, or NULL */
	int fd[3];	      /* the child's stdio; -1: a memfd that we read afterwards */
	int timeout_s;
	/* Results. */
	int status;	      /* wait status; -1 if it was killed for the time limit */
	char *out, *err;      /* captured stdout/stderr when fd[1]/fd[2] were -1 */
};

/* The last lines of text (at most TAIL_LINES and TAIL_BYTES) into buf, one
 * line joined by " | " so that the error reads on one line.  CRIU's
 * "Error (…)" lines are what explains a failure: when there are any, they
 * are quoted instead of the plain tail. */
static void tail_text(const char *text, char *buf, size_t len)
{
	const char *lines[TAIL_LINES];
	size_t n = 0, nerr = 0, used = 0;
	const char *errs[TAIL_LINES];
	const char *p = text;

	buf[0] = '\0';
	if (!text)
		return;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);

		if (l) {
			if (n == TAIL_LINES)
				memmove(lines, lines + 1, sizeof(lines[0]) * --n);
			lines[n++] = p;
			/* CRIU cannot raise its own RLIMIT_NOFILE without
			 * CAP_SYS_RESOURCE, says so as an Error and goes on fine. */
			if (strstr(p, "Error") && (size_t)(strstr(p, "Error") - p) < l &&
			    !(strstr(p, "RLIMIT_NOFILE") && (size_t)(strstr(p, "RLIMIT_NOFILE") - p) < l)) {
				if (nerr == TAIL_LINES)
					memmove(errs, errs + 1, sizeof(errs[0]) * --nerr);
				errs[nerr++] = p;
			}
		}
		p = nl ? nl + 1 : p + l;
	}
	const char **pick = nerr ? errs : lines;
	size_t np = nerr ? nerr : n, first = 0;
	size_t cap = MIN(len, (size_t)TAIL_BYTES);

	/* Keep the newest lines that fit. */
	for (size_t i = np, total = 0; i-- > 0;) {
		size_t l = strcspn(pick[i], "\n") + 3;

		if (total + l >= cap && i + 1 < np) {
			first = i + 1;
			break;
		}
		total += l;
	}
	for (size_t i = first; i < np && used + 4 < cap; i++) {
		size_t l = strcspn(pick[i], "\n");
		int w = snprintf(buf + used, cap - used, "%s%.*s", used ? " | " : "", (int)l, pick[i]);

		if (w < 0)
			break;
		used += MIN((size_t)w, cap - used - 1);
	}
}

void runner_log_tail(const char *path, char *buf, size_t len)
{
	char *text = NULL;
	size_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	buf[0] = '\0';
	if (fd < 0)
		return;
	/* Only the end of a long log matters. */
	if (fstat(fd, &st) == 0 && st.st_size > 256 * 1024)
		lseek(fd, st.st_size - 256 * 1024, SEEK_SET);
	text = malloc(256 * 1024 + 1);
	if (text) {
		ssize_t r = read(fd, text, 256 * 1024);

		n = r > 0 ? (size_t)r : 0;
		text[n] = '\0';
		tail_text(text, buf, len);
	}
	free(text);
	close(fd);
}

static char *read_memfd(int fd)
{
	struct stat st;
	char *buf;
	ssize_t r;

	if (fstat(fd, &st) < 0 || st.st_size > 16 << 20)
		return NULL;
	buf = malloc(st.st_size + 1);
	if (!buf)
		return NULL;
	r = pread(fd, buf, st.st_size, 0);
	buf[r > 0 ? r : 0] = '\0';
	return buf;
}

/* Run runc with its global options and then args; fills call->status (and
 * out/err).  0 if runc ran (whatever its exit), -errno if it could not be run. */
static int runc_exec(const struct runner *r, const char *const *args, struct runc_call *call)
{
	const char *argv[48];
	int memfd[3] = { -1, -1, -1 }, ret = 0, n = 0, status;
	struct spawn sp = SPAWN_INIT;

	argv[n++] = r->runc;
	argv[n++] = "--root";
	argv[n++] = r->state_dir;
	if (r->criu && *r->criu) {
		argv[n++] = "--criu";
		argv[n++] = r->criu;
	}
	if (call->log_path) {
		argv[n++] = "--log";
		argv[n++] = call->log_path;
		argv[n++] = "--log-format";
		argv[n++] = "text";
	}
	for (size_t i = 0; args[i] && n < (int)ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	call->status = -1;
	call->out = call->err = NULL;
	for (int i = 1; i < 3; i++) {
		if (call->fd[i] >= 0)
			continue;
		memfd[i] = memfd_create(i == 1 ? "runc-out" : "runc-err", MFD_CLOEXEC);
		if (memfd[i] < 0) {
			ret = -errno;
			pr_perror("memfd_create");
			goto out;
		}
	}
	ret = mkdir_p(r->state_dir, 0700);
	if (ret)
		goto out;

	sp.argv = argv;
	sp.in = call->fd[0] >= 0 ? call->fd[0] : SPAWN_NULL;
	sp.out = call->fd[1] >= 0 ? call->fd[1] : memfd[1];
	sp.err = call->fd[2] >= 0 ? call->fd[2] : memfd[2];
	sp.new_pgrp = true; /* so that a hung runc dies with its CRIU */
	ret = spawn_start(&sp);
	if (ret)
		goto out;
	ret = spawn_wait(&sp, call->timeout_s * 1000, &status);
	if (ret == -ETIMEDOUT)
		pr_err("runc %s timed out after %d s; killed", args[0], call->timeout_s);
	else
		call->status = status;
	if (memfd[1] >= 0)
		call->out = read_memfd(memfd[1]);
	if (memfd[2] >= 0)
		call->err = read_memfd(memfd[2]);
out:
	for (int i = 1; i < 3; i++)
		if (memfd[i] >= 0)
			close(memfd[i]);
	return ret;
}

static bool call_ok(const struct runc_call *call)
{
	return call->status >= 0 && WIFEXITED(call->status) && WEXITSTATUS(call->status) == 0;
}

static void call_release(struct runc_call *call)
{
	free(call->out);
	free(call->err);
	call->out = call->err = NULL;
}

static void describe_exit(const struct runc_call *call, char *buf, size_t len)
{
	if (call->status < 0)
		snprintf(buf, len, "timed out");
	else if (WIFEXITED(call->status) && WEXITSTATUS(call->status) == 127)
		snprintf(buf, len, "could not be executed");
	else if (WIFEXITED(call->status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(call->status));
	else
		snprintf(buf, len, "killed by signal %d", WTERMSIG(call->status));
}

/* Log a failed call once, with the best explanation we have: CRIU's errors
 * (crit_log, when given), else runc's log or captured stderr.  Returns what
 * that says went wrong: -ENOSPC or -EDQUOT for a full disk or quota (CRIU's
 * own words for its image writes), so that a caller can tell it from any
 * other failure of the call (-EIO). */
static int report_failure(const char *what, const char *id, const struct runc_call *call,
			  const char *crit_log)
{
	char tail[TAIL_BYTES + 1] = "", how[48];

	describe_exit(call, how, sizeof(how));
	if (crit_log)
		runner_log_tail(crit_log, tail, sizeof(tail));
	if (!tail[0] && call->log_path)
		runner_log_tail(call->log_path, tail, sizeof(tail));
	if (!tail[0] && call->err)
		tail_text(call->err, tail, sizeof(tail));
	if (!tail[0] && call->out)
		tail_text(call->out, tail, sizeof(tail));
	pr_err("runc %s %s failed (%s): %s", what, id, how, tail[0] ? tail : "no log");
	if (strstr(tail, "No space left on device"))
		return -ENOSPC;
	if (strstr(tail, "Disk quota exceeded"))
		return -EDQUOT;
	return -EIO;
}

static int read_pid_file(const char *path, pid_t *pid)
{
	char *buf = NULL;
	size_t len;
	long v;
	int ret = read_file(path, &buf, &len, 64);

	if (ret)
		return ret;
	v = strtol(buf, NULL, 10);
	free(buf);
	if (v <= 0) {
		pr_err("bad pid in %s", path);
		return -EINVAL;
	}
	*pid = (pid_t)v;
	return 0;
}

/* Pipes for the container's stdio: stdin reads EOF at once; the caller gets
 * the read ends of stdout and stderr.  fds[] are the ends that go to runc. */
static int make_stdio(int fds[3], struct runner_stdio *stdio)
{
	int in[2] = { -1, -1 }, o[2] = { -1, -1 }, e[2] = { -1, -1 };

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0) {
		int err = -errno;

		pr_perror("pipe");
		for (int i = 0; i < 2; i++) {
			if (in[i] >= 0)
				close(in[i]);
			if (o[i] >= 0)
				close(o[i]);
			if (e[i] >= 0)
				close(e[i]);
		}
		return err;
	}
	/* A pipe, not /dev/null: CRIU cannot dump a file of the host's /dev,
	 * outside the container's mounts, while runc re-wires pipes on restore. */
	close(in[1]);
	fds[0] = in[0];
	fds[1] = o[1];
	fds[2] = e[1];
	stdio->out_r = o[0];
	stdio->err_r = e[0];
	return 0;
}

static void close_fds(int fds[3])
{
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

static void stdio_close(struct runner_stdio *stdio)
{
	if (stdio->out_r >= 0)
		close(stdio->out_r);
	if (stdio->err_r >= 0)
		close(stdio->err_r);
	stdio->out_r = stdio->err_r = -1;
}

/* Run runc's what (run, restore: args and call) that starts container id
 * detached: its stdio into sio (closed here on failure, or when owned: the
 * caller keeps none), its pid read from pidfile (removed).  On failure the
 * container is deleted: runc may have created it before failing.  crit:
 * CRIU's log, for the failure's words (NULL: none). */
static int start_detached(const struct runner *r, const char *const *args,
			  struct runc_call *call, const char *what, const char *id,
			  const char *crit, const char *pidfile, struct runner_stdio *sio,
			  bool owned, pid_t *pid)
{
	int ret = make_stdio(call->fd, sio);

	if (ret)
		return ret;
	ret = runc_exec(r, args, call);
	close_fds(call->fd);
	if (ret)
		goto out;
	if (!call_ok(call)) {
		ret = report_failure(what, id, call, crit);
		goto out;
	}
	ret = read_pid_file(pidfile, pid);
out:
	unlink(pidfile);
	call_release(call);
	if (ret || owned)
		stdio_close(sio);
	if (ret)
		runner_delete(r, id);
	return ret;
}

int runner_run(const struct runner *r, const char *bundle, const char *id, const char *log_path,
	       struct runner_stdio *stdio, pid_t *pid)
{
	char pidfile[PATH_MAX];
	struct runner_stdio own = { -1, -1 }, *sio = stdio ? stdio : &own;
	struct runc_call call = { .log_path = log_path, .fd = { -1, -1, -1 },
				  .timeout_s = RUN_TIMEOUT_S };
	const char *args[] = { "run", "-d", "-b", bundle, "--pid-file", pidfile, id, NULL };

	sio->out_r = sio->err_r = -1;
	if (snprintf(pidfile, sizeof(pidfile), "%s/%s.pid", bundle, id) >= (int)sizeof(pidfile))
		return -ENAMETOOLONG;
	unlink(pidfile);
	return start_detached(r, args, &call, "run", id, NULL, pidfile, sio, sio == &own, pid);
}

int runner_checkpoint(const struct runner *r, const char *id, const char *image_dir,
		      const char *work_dir)
{
	char log_path[PATH_MAX], crit[PATH_MAX];
	struct runc_call call = { .log_path = log_path, .fd = { -1, -1, -1 },
				  .timeout_s = CHECKPOINT_TIMEOUT_S };
	const char *args[] = { "checkpoint", "--image-path", image_dir, "--work-path", work_dir,
			       id, NULL };
	int ret;

	ret = mkdir_p(image_dir, 0700);
	if (!ret)
		ret = mkdir_p(work_dir, 0700);
	if (ret)
		return ret;
	snprintf(log_path, sizeof(log_path), "%s/runc-checkpoint.log", work_dir);
	snprintf(crit, sizeof(crit), "%s/dump.log", work_dir);
	ret = runc_exec(r, args, &call);
	if (!ret && !call_ok(&call)) {
		ret = report_failure("checkpoint", id, &call, crit);
	}
	call_release(&call);
	return ret;
}

/* The seconds CRIU's log at path spans: the stamp "(SS.uuuuuu)" of its last
 * line (CRIU stamps each line with the time since it began); -1 if none. */
static double criu_log_span_s(const char *path)
{
	char tail[4096];
	ssize_t n;
	off_t size;
	double s = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	size = lseek(fd, 0, SEEK_END);
	n = size < 0 ? -1 : pread_upto(fd, tail, sizeof(tail) - 1,
				      size > (off_t)sizeof(tail) - 1 ? size - (off_t)sizeof(tail) + 1 : 0);
	close(fd);
	if (n <= 0)
		return -1;
	tail[n] = '\0';
	for (char *p = tail; (p = strchr(p, '(')); p++)
		if (p == tail || p[-1] == '\n') {
			char *end;
			double v = strtod(p + 1, &end);

			if (end != p + 1 && *end == ')')
				s = v;
		}
	return s;
}

int runner_restore(const struct runner *r, const char *bundle, const char *id,
		   const char *image_dir, const char *work_dir, struct runner_stdio *stdio,
		   pid_t *pid)
{
	char log_path[PATH_MAX], crit[PATH_MAX], pidfile[PATH_MAX];
	struct runner_stdio own = { -1, -1 }, *sio = stdio ? stdio : &own;
	struct runc_call call = { .log_path = log_path, .fd = { -1, -1, -1 },
				  .timeout_s = RESTORE_TIMEOUT_S };
	const char *args[16] = { "restore", "-d", "-b", bundle, "--image-path", image_dir,
				 "--work-path", work_dir, "--pid-file", pidfile };
	uint64_t t0;
	int ret, n = 10;

	sio->out_r = sio->err_r = -1;
	ret = mkdir_p(work_dir, 0700);
	if (ret)
		return ret;
	snprintf(log_path, sizeof(log_path), "%s/runc-restore.log", work_dir);
	snprintf(crit, sizeof(crit), "%s/restore.log", work_dir);
	snprintf(pidfile, sizeof(pidfile), "%s/%s.pid", work_dir, id);
	unlink(pidfile);
	/* CRIU then hands the memory to the daemon listening in work_dir. */
	if (r->lazy_pages)
		args[n++] = "--lazy-pages";
	args[n++] = id;
	args[n] = NULL;
	t0 = now_ns();
	ret = start_detached(r, args, &call, "restore", id, crit, pidfile, sio, sio == &own, pid);
	/* Of a restore's time, how much was CRIU's own and how much runc's
	 * around it: what a start's criu_restore phase is made of. */
	if (!ret)
		pr_info("runc restore of %s: %.1f ms, CRIU's own %.1f ms", id,
			(double)(now_ns() - t0) / 1e6, criu_log_span_s(crit) * 1e3);
	return ret;
}

/* Does runc know container id?  (runc state fails for a missing one.) */
static bool container_exists(const struct runner *r, const char *id)
{
	struct runc_call call = { .fd = { -1, -1, -1 }, .timeout_s = SHORT_TIMEOUT_S };
	const char *args[] = { "state", id, NULL };
	bool exists;

	if (runc_exec(r, args, &call))
		return true; /* could not tell: assume it is there */
	exists = call_ok(&call) || !(call.err && strstr(call.err, "does not exist"));
	call_release(&call);
	return exists;
}

int runner_delete(const struct runner *r, const char *id)
{
	struct runc_call call = { .fd = { -1, -1, -1 }, .timeout_s = SHORT_TIMEOUT_S };
	const char *kill_args[] = { "kill", id, "KILL", NULL };
	const char *del_args[] = { "delete", "-f", id, NULL };
	int ret;

	if (!container_exists(r, id))
		return 0;
	/* delete -f kills too; the explicit kill first is harmless and makes
	 * a container whose init ignores SIGTERM go at once. */
	if (runc_exec(r, kill_args, &call) == 0)
		call_release(&call);
	ret = runc_exec(r, del_args, &call);
	if (ret)
		goto out;
	if (!call_ok(&call)) {
		if (!container_exists(r, id))
			goto out;
		ret = report_failure("delete", id, &call, NULL);
	}
out:
	call_release(&call);
	return ret;
}

/* runc pause|resume id: what, the word runc takes. */
static int freezer_call(const struct runner *r, const char *what, const char *id)
{
	struct runc_call call = { .fd = { -1, -1, -1 }, .timeout_s = SHORT_TIMEOUT_S };
	const char *args[] = { what, id, NULL };
	int ret = runc_exec(r, args, &call);

	if (!ret && !call_ok(&call))
		ret = report_failure(what, id, &call, NULL);
	call_release(&call);
	return ret;
}

int runner_kill(const struct runner *r, const char *id, const char *signal_name)
{
	struct runc_call call = { .fd = { -1, -1, -1 }, .timeout_s = SHORT_TIMEOUT_S };
	const char *args[] = { "kill", id, signal_name, NULL };
	int ret = runc_exec(r, args, &call);

	if (!ret && !call_ok(&call))
		ret = report_failure("kill", id, &call, NULL);
	call_release(&call);
	return ret;
}

int runner_pause(const struct runner *r, const char *id)
{
	return freezer_call(r, "pause", id);
}

/* A container's state as runc keeps it: a few kB of JSON, its spec included. */
#define STATE_MAX (4u << 20)

/* The file that freezes container id, from runc's record of it
 * (<root>/<id>/state.json, "cgroup_paths"): cgroup v1's freezer.state, or on
 * a cgroup v2 host its cgroup's cgroup.freeze (*v2).  0; -ENOENT: no such
 * container; -ENOTSUP: no freezer recorded; or -errno. */
static int freezer_file(const struct runner *r, const char *id, char *path, size_t len, bool *v2)
{
	char state[PATH_MAX], *text = NULL;
	const char *dir;
	json_t *st = NULL, *cg;
	size_t n;
	int ret;

	if ((size_t)snprintf(state, sizeof(state), "%s/%s/state.json", r->state_dir, id) >=
	    sizeof(state))
		return -ENAMETOOLONG;
	ret = read_file(state, &text, &n, STATE_MAX);
	if (ret)
		return ret;
	st = json_loadb(text, n, 0, NULL);
	cg = json_object_get(st, "cgroup_paths");
	/* A v1 or hybrid host has a freezer hierarchy; on v2 the freezer is
	 * the unified hierarchy's ("" is runc's key for it). */
	dir = json_string_value(json_object_get(cg, "freezer"));
	*v2 = !dir;
	if (!dir)
		dir = json_string_value(json_object_get(cg, ""));
	if (!dir || dir[0] != '/' || strstr(dir, "/../"))
		ret = -ENOTSUP;
	else if ((size_t)snprintf(path, len, "%s/%s", dir,
				  *v2 ? "cgroup.freeze" : "freezer.state") >= len)
		ret = -ENAMETOOLONG;
	json_decref(st);
	free(text);
	return ret;
}

/* runc resume, done here: a runc resume is a fork of thawd, an exec of runc
 * (a Go program, whose runtime starts threads of its own) and its reading of
 * the container's state, all to write one cgroup file; a standby's take
 * waited 12-43 ms for it (bench/LOG.md).  runc keeps no paused state of its
 * own (it reads the freezer), so it sees the container running after this. */
int runner_resume(const struct runner *r, const char *id)
{
	const char *want;
	char path[PATH_MAX], got[16] = "";
	bool v2 = false;
	int fd = -1, ret;

	ret = freezer_file(r, id, path, sizeof(path), &v2);
	if (ret == -ENOTSUP)
		return freezer_call(r, "resume", id); /* runc's own way, or its word why not */
	if (ret) {
		pr_err("runc resume %s: its state: %s", id, strerror(-ret));
		log_set_error("runc resume %s: its state: %s", id, strerror(-ret));
		return ret;
	}
	want = v2 ? "0" : "THAWED";
	fd = open(path, O_RDWR | O_CLOEXEC);
	ret = fd < 0 ? -errno : write_all(fd, want, strlen(want));
	/* Thawing is done when the write returns (v1) or soon after (v2: the
	 * tasks are woken, as runc's own resume leaves them): read it back as
	 * runc does, so that a cgroup that stayed frozen is an error. */
	if (!ret && pread(fd, got, sizeof(got) - 1, 0) < 0)
		ret = -errno;
	if (!ret && strncmp(got, want, strlen(want)))
		ret = -EBUSY;
	if (ret) {
		pr_err("resume %s: %s: %s%s%.*s", id, path, strerror(-ret), got[0] ? ", it says " : "",
		       (int)strcspn(got, "\n"), got);
		log_set_error("resume %s: %s: %s", id, path, strerror(-ret));
	}
	if (fd >= 0)
		close(fd);
	return ret;
}

int runner_pids(const struct runner *r, const char *id, pid_t **pids, size_t *n)
{
	struct runc_call call = { .fd = { -1, -1, -1 }, .timeout_s = SHORT_TIMEOUT_S };
	const char *args[] = { "ps", "--format", "json", id, NULL };
	json_error_t jerr;
	json_t *arr = NULL;
	pid_t *v = NULL;
	int ret;

	*pids = NULL;
	*n = 0;
	ret = runc_exec(r, args, &call);
	if (ret)
		return ret;
	if (!call_ok(&call)) {
		ret = report_failure("ps", id, &call, NULL);
		goto out;
	}
	arr = json_loads(call.out ? call.out : "", 0, &jerr);
	if (!json_is_array(arr)) {
		pr_err("runc ps %s: not a JSON array: %s", id, jerr.text);
		ret = -EPROTO;
		goto out;
	}
	v = calloc(json_array_size(arr) + 1, sizeof(*v));
	if (!v) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *e = json_array_get(arr, i);

		if (!json_is_integer(e) || json_integer_value(e) <= 0) {
			pr_err("runc ps %s: bad pid in its answer", id);
			ret = -EPROTO;
			goto out;
		}
		v[i] = (pid_t)json_integer_value(e);
	}
	*n = json_array_size(arr);
	*pids = v;
	v = NULL;
out:
	free(v);
	json_decref(arr);
	call_release(&call);
	return ret;
}
