/* SPDX-License-Identifier: Apache-2.0 */
/* shim.h — the per-instance shim: the instance's endpoint and its log drain.
 *
 * One small process per instance, forked from the starter and detached into
 * its own session, so that it outlives a `thaw start` that made it (started by
 * thawd it stays thawd's child: shim_stop reaps it).  It
 *  - listens on 127.0.0.1:<ephemeral port> in the host's network namespace
 *    (the instance's endpoint) and relays every connection, both ways and with
 *    half-close, to 127.0.0.1:<port> inside the instance's namespace;
 *  - appends the container's stdout and stderr to a log file, rotated to
 *    <log>.1 when it reaches max_log_bytes (common/logfile.h).
 * It exits on SIGTERM, or once the container's pipes have closed (the
 * container is gone) and no connection remains.  On SHIM_CLOSE_SIGNAL it
 * closes the endpoint (the listening socket and every connection) and goes
 * on draining the log: a function that is being stopped can no longer be
 * reached, and what it prints while it leaves is kept.  Its comm is
 * "thaw-shim".
 */
#ifndef THAW_RESTORE_SHIM_H
#define THAW_RESTORE_SHIM_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SHIM_COMM "thaw-shim"
#define SHIM_CLOSE_SIGNAL SIGUSR1

struct shim_opts {
	const char *netns_path; /* the instance's network namespace (nsfs bind mount) */
	uint16_t port;          /* the function's port inside it */
	/* NULL, or a file the shim keeps mapped: two uint64 in host order, the
	 * CLOCK_REALTIME ms of the endpoint's last use (bytes moved, a
	 * connection opened or closed) and the connections open now.  Whoever
	 * reads it learns when the instance was last used (idle stops). */
	const char *activity_path;
	int out_fd;             /* read end of the container's stdout, or -1 */
	int err_fd;             /* read end of its stderr, or -1 */
	const char *log_path;   /* where stdout/stderr (and the shim's own errors) go */
	uint64_t max_log_bytes; /* its bound (0: none) */
};

/* Fork the shim.  On success *pid is its pid and *port the host port it
 * listens on (it is accepting when this returns).  The caller keeps its own
 * copies of out_fd/err_fd and should close them. */
int shim_start(const struct shim_opts *o, pid_t *pid, uint16_t *port);

/* The start time of process pid (field 22 of /proc/<pid>/stat, clock ticks
 * since boot): with the pid, it names one process for good, so that a
 * recorded pid that was reused is never signalled.  0 or -errno (-ESRCH if
 * there is no such process). */
int proc_start_time(pid_t pid, unsigned long long *start);
/* Is pid alive and still the process that had start time start (0: any)?
 * When /proc cannot be read for want of descriptors or memory, alive if
 * kill(2) finds it: a local error never says that a process has exited. */
bool proc_alive(pid_t pid, unsigned long long start);

/* Close the endpoint of shim pid (if it is still the process with that start
 * time) and wait until 127.0.0.1:port refuses connections, up to timeout_ms;
 * a shim that does not close it by then is stopped (shim_stop).  A shim
 * already gone is fine: 0, or -errno. */
int shim_close_endpoint(pid_t pid, unsigned long long start, uint16_t port, int timeout_ms);

/* SIGTERM the shim pid (if it is still the process with that start time, 0:
 * don't check), wait up to timeout_ms for it to go (reaping it if it is our
 * child), then SIGKILL.  A shim already gone is fine. */
int shim_stop(pid_t pid, unsigned long long start, int timeout_ms);

#endif
