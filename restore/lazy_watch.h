/* SPDX-License-Identifier: Apache-2.0 */
/* lazy_watch.h — start a lazy restore's lazy-pages daemon under a watcher,
 * and read what the watcher said of it.
 *
 * The daemon is thaw's own (`thaw lazy-pages`, restore/lazy_pages.c) or
 * CRIU's (`criu lazy-pages`), as struct runner's lazy_daemon says; runc
 * restore --lazy-pages (common/runner.h) then connects to it.
 */
#ifndef THAW_RESTORE_LAZY_WATCH_H
#define THAW_RESTORE_LAZY_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/runner.h"

/* A CRIU lazy-pages daemon that serves one lazy restore its pages, under a
 * watcher.  The watcher is detached (its own session, not our child: it
 * outlives a `thaw start`), is the daemon's parent and so learns how the
 * daemon ended, and holds keep_fd (a tier lease) until then: the image
 * directory must stay until the last page is served, not only until runc
 * restore returns. */
struct lazy_watch {
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
int lazy_watch_start(const struct runner *r, const char *id, const char *image_dir,
		     const char *work_dir, const char *log_path, const char *status_path,
		     int keep_fd, uint64_t t0_ns, struct lazy_watch *out);
/* What the watcher wrote in status_path: 1 the daemon served every page
 * (*done_ms, may be NULL), -1 it failed (why, without "failed "), 0 no word
 * yet (still serving, or no such file). */
int lazy_watch_status(const char *status_path, double *done_ms, char *why, size_t len);

#endif
