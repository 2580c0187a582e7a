/* SPDX-License-Identifier: Apache-2.0 */
/* logfile.h — a function's output kept in a size-bounded file, and its tail.
 *
 * A writer appends to PATH.  When PATH has reached max bytes, it is renamed
 * to PATH.1 (replacing an older PATH.1) and a new PATH begun, so that at most
 * 2 * max bytes are kept, and PATH.1 followed by PATH is always the end of
 * everything written.  A cut falls after a line's newline where a line fits,
 * else at the bound.  One writer per PATH; readers need no lock with it.
 *
 *	struct logfile lf;
 *	logfile_open(&lf, "<dir>/function.log", 1 << 20, false);
 *	logfile_write(&lf, buf, n);           … as often as output comes
 *	logfile_close(&lf);
 *
 *	logfile_tail("<dir>/function.log", 100, &text, &len);   the last 100 lines
 */
#ifndef THAW_LOGFILE_H
#define THAW_LOGFILE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOGFILE_TAIL_DEFAULT   100u       /* lines, when a request names none */
#define LOGFILE_TAIL_MAX       10000u     /* lines a request may ask for */
#define LOGFILE_TAIL_MAX_BYTES (8u << 20) /* the most a tail answers, whatever its lines */

struct logfile {
	int fd;             /* the current PATH, O_APPEND; -1 when closed */
	uint64_t size;      /* its bytes */
	uint64_t max;       /* the bound; 0: none, never rotated */
	unsigned rotations; /* how many times PATH was rotated: fd changed */
	char path[PATH_MAX];
};

/* Open path for appending (created 0600; emptied first with truncate, and
 * path.1 removed then too), bounded by max bytes (0: no bound).  0, or
 * -errno (logged), lf->fd then -1. */
int logfile_open(struct logfile *lf, const char *path, uint64_t max, bool truncate);
/* Append len bytes, rotating as the header says.  0, or the -errno of a
 * write that failed (not logged: a writer's errors may go to this very file).
 * A rotation that cannot rename starts path over in place instead: the
 * bound holds either way. */
int logfile_write(struct logfile *lf, const void *buf, size_t len);
/* Close lf's file; a closed one is fine. */
void logfile_close(struct logfile *lf);

/* The last lines lines of what was written to path (path.1, then path), at
 * most LOGFILE_TAIL_MAX_BYTES of them (then from the first line's start
 * inside that much).  A last line without its newline counts as a line.  0
 * and *out (a new buffer of *len bytes, NUL-terminated: you own it; empty
 * when neither file exists or lines is 0), -errno (logged). */
int logfile_tail(const char *path, unsigned lines, char **out, size_t *len);
/* Remove path and path.1; missing ones are fine.  0 or -errno (logged). */
int logfile_remove(const char *path);

/* A tail's line count as text: decimal digits only (no sign, no space), at
 * most LOGFILE_TAIL_MAX; NULL is LOGFILE_TAIL_DEFAULT.  0 and *out, or
 * -EINVAL. */
int logfile_parse_tail(const char *s, unsigned *out);

#endif
