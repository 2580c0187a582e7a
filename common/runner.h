/* runner.h — run runc (and through it CRIU) and keep each operation's log.
 *
 * Every operation writes runc's output to a log file; runc checkpoint/restore
 * also leave CRIU's log in the work directory.  On failure the error
 * (log_last_error()) carries the last lines of CRIU's log, or of runc's.
 */
#ifndef THAW_RUNNER_H
#define THAW_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct runner {
	const char *runc;      /* runc binary */
	const char *criu;      /* passed as runc --criu */
	const char *state_dir; /* runc --root: thaw's containers live apart from others */
	bool lazy_pages;       /* restore with --lazy-pages: a daemon of runner_lazy_start
				* must be serving work_dir */
	const char *lazy_daemon; /* runner_lazy_start runs `lazy_daemon lazy-pages ...` (the
				  * thaw binary: thaw's own daemon); NULL or "": criu's */
};

/* The container's stdio: pipes the caller drains (the write ends go to runc). */
struct runner_stdio {
	int out_r; /* read end of the container's stdout, or -1 */
	int err_r; /* read end of its stderr, or -1 */
};

/* runc run -d -b bundle --pid-file: start container id; *pid is its init's host pid. */
int runner_run(const struct runner *r, const char *bundle, const char *id, const char *log_path,
	       struct runner_stdio *stdio, pid_t *pid);
/* runc checkpoint --image-path image_dir --work-path work_dir id (the container stops). */
int runner_checkpoint(const struct runner *r, const char *id, const char *image_dir,
		      const char *work_dir);
/* runc restore -d -b bundle --image-path --work-path --pid-file id. */
int runner_restore(const struct runner *r, const char *bundle, const char *id,
		   const char *image_dir, const char *work_dir, struct runner_stdio *stdio,
		   pid_t *pid);
/* A CRIU lazy-pages daemon that serves one lazy restore its pages, under a
 * watcher.  The watcher is detached (its own session, not our child: it
 * outlives a `thaw start`), is the daemon's parent and so learns how the
 * daemon ended, and holds keep_fd (a tier lease) until then: the image
 * directory must stay until the last page is served, not only until runc
 * restore returns. */
struct runner_lazy {
	pid_t watcher; /* host pids, 0 if none */
	pid_t daemon;
};

/* Start `criu lazy-pages --images-dir image_dir --work-dir work_dir` (its
 * log in log_path), or the same arguments to `thaw lazy-pages` where
 * r->lazy_daemon names the thaw binary, for container id and wait until its socket
 * (work_dir/lazy-pages.socket, where the restore looks for it) is
 * listening.  When the daemon ends the watcher writes status_path:
 * "done <ms>\n" if it exited 0, having served every page (<ms>: since
 * t0_ns, CLOCK_MONOTONIC), or "failed <why>\n" otherwise, and then runs
 * `runc kill id KILL`: once its page source is gone the restored process
 * would read zeros where its data was, so it must not run on.
 * 0 and *out, or -errno (logged; nothing left running). */
int runner_lazy_start(const struct runner *r, const char *id, const char *image_dir,
		      const char *work_dir, const char *log_path, const char *status_path,
		      int keep_fd, uint64_t t0_ns, struct runner_lazy *out);
/* What the watcher wrote in status_path: 1 the daemon served every page
 * (*done_ms, may be NULL), -1 it failed (why, without "failed "), 0 no word
 * yet (still serving, or no such file). */
int runner_lazy_status(const char *status_path, double *done_ms, char *why, size_t len);

/* runc kill id KILL; runc delete -f id.  A missing container is fine. */
int runner_delete(const struct runner *r, const char *id);
/* The pids of every process in container id (runc ps), host pids. */
int runner_pids(const struct runner *r, const char *id, pid_t **pids, size_t *n);

/* The last lines of a log file (CRIU's "Error" lines where it has any),
 * joined with " | " into buf for an error message; "" if there is none. */
void runner_log_tail(const char *path, char *buf, size_t len);

#endif
