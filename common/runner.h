/* SPDX-License-Identifier: Apache-2.0 */
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
	bool lazy_pages;       /* restore with --lazy-pages: a daemon of lazy_watch_start
				* (restore/lazy_watch.h) must be serving work_dir */
	const char *lazy_daemon; /* lazy_watch_start runs `lazy_daemon lazy-pages ...` (the
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
/* runc kill id KILL; runc delete -f id.  A missing container is fine. */
int runner_delete(const struct runner *r, const char *id);
/* runc kill id SIGNAL (e.g. "TERM") to the container's first process. */
int runner_kill(const struct runner *r, const char *id, const char *signal_name);
/* runc pause id (every process frozen by the cgroup freezer), runc resume id. */
int runner_pause(const struct runner *r, const char *id);
int runner_resume(const struct runner *r, const char *id);
/* The pids of every process in container id (runc ps), host pids. */
int runner_pids(const struct runner *r, const char *id, pid_t **pids, size_t *n);

/* The last lines of a log file (CRIU's "Error" lines where it has any),
 * joined with " | " into buf for an error message; "" if there is none.
 * At most RUNNER_LOG_TAIL_MAX bytes with its NUL (it must fit in the 1 KiB
 * error message of common/log.h with the words around it). */
#define RUNNER_LOG_TAIL_MAX 760
void runner_log_tail(const char *path, char *buf, size_t len);

#endif
