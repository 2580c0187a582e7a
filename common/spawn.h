/* SPDX-License-Identifier: Apache-2.0 */
/* spawn.h — run a program as a child, its stdio wired, and await its end
 * (git's run-command).  The one fork-and-exec of a child thaw waits for:
 *
 *	struct spawn sp = SPAWN_INIT;
 *	const char *argv[] = { "skopeo", "copy", src, dst, NULL };
 *
 *	sp.argv = argv;
 *	sp.out = SPAWN_PIPE;		// read what it prints from sp.pipe_out
 *	sp.err = SPAWN_OUT;		// stderr into the same pipe
 *	if (spawn_start(&sp)) ...
 *	... read sp.pipe_out to EOF, close it ...
 *	ret = spawn_wait(&sp, 30000, &status);
 *
 * A child that must outlive thaw starts through spawn_detached.  One that runs
 * thaw's own code and talks to it on a pipe (the namespace helper, the shim)
 * is forked where it is needed.
 */
#ifndef THAW_SPAWN_H
#define THAW_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* What the child's stdin, stdout or stderr is: one of thaw's fds (>= 0; the
 * child gets a copy, thaw keeps its own), or one of these. */
#define SPAWN_NULL (-1) /* /dev/null */
#define SPAWN_PIPE (-2) /* a pipe: thaw's end is left in pipe_in/pipe_out/pipe_err */
#define SPAWN_OUT  (-3) /* for err only: wherever stdout goes */

struct spawn {
	const char *const *argv; /* argv[0] is looked up in PATH, as execvp does */
	char *const *env;	 /* the child's environment; NULL: thaw's own */
	int in, out, err;	 /* the child's 0, 1 and 2: an fd or SPAWN_* above */
	bool new_pgrp;		 /* a process group of its own, which a timeout kills whole */
	/* Set by spawn_start: */
	pid_t pid;
	/* thaw's ends of the pipes asked for (O_CLOEXEC), else -1: the write
	 * end of the child's stdin, the read ends of its stdout and stderr.
	 * The caller owns them and closes them (before spawn_wait, where the
	 * child could block on a full pipe or wait for EOF on its stdin). */
	int pipe_in, pipe_out, pipe_err;
};

#define SPAWN_INIT                                                                                 \
	{                                                                                          \
		.in = SPAWN_NULL, .out = SPAWN_NULL, .err = SPAWN_NULL, .pid = -1, .pipe_in = -1,  \
		.pipe_out = -1, .pipe_err = -1                                                     \
	}

/* Fork and exec sp->argv.  The child has 0, 1 and 2 as asked and nothing
 * else open, SIGPIPE at its default action; it exits 126 where its stdio
 * could not be set up and 127 where argv[0] could not be run.  0, with
 * sp->pid and the pipe ends set, or -errno (logged; nothing left open). */
int spawn_start(struct spawn *sp);
/* Wait for the child started by spawn_start to end, for at most timeout_ms
 * (< 0: no limit).  0 with *status (may be NULL) as waitpid gives it; or
 * -ETIMEDOUT once the child (its process group too, with new_pgrp) has been
 * killed with SIGKILL and reaped; the caller says what timed out.  The
 * child is reaped either way: sp->pid is -1 after. */
int spawn_wait(struct spawn *sp, int timeout_ms, int *status);
/* spawn_start then spawn_wait, for a child with no pipes. */
int spawn_run(struct spawn *sp, int timeout_ms, int *status);

/* Start a child that must outlive thaw (a lease holder, a lazy-pages
 * watcher): forked, detached by detach_child (util.h: a session of its own,
 * not thaw's child, the n descriptors of keep at 3, 4, …, nothing else
 * open), then fn(arg).  fn runs in a copy of a process that may have other
 * threads: async-signal-safe calls only, until it execs or exits; it should
 * not return (the child exits 0 if it does).  The middle process is reaped
 * before this returns.  0, or -errno (logged). */
int spawn_detached(const int *keep, size_t n, void (*fn)(void *arg), void *arg);

#endif
