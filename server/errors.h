/* SPDX-License-Identifier: Apache-2.0 */
/* errors.h — how a failed action is answered over HTTP.
 *
 * An error answer is {"error":{"code":"not_found","message":"..."}} with a
 * status that fits; this maps the -errno of a start or a snapshot (the
 * message being log_last_error(), the words of the place that failed) to the
 * status and the code.
 */
#ifndef THAW_SERVER_ERRORS_H
#define THAW_SERVER_ERRORS_H

#include <stdbool.h>

#include <jansson.h>

struct api_err {
	unsigned status;
	const char *code;
};

/* The status and code of a failed start, snapshot or stop (err: -errno or
 * errno).  One meaning per code: ETIMEDOUT 504 timeout; ENOSPC, EDQUOT 507
 * no_space; EBADMSG 500 damaged; EACCES 403 forbidden; EAGAIN, EBUSY,
 * ENOMEM, EMFILE, ENFILE 503 no_capacity; ENOSYS, EOPNOTSUPP, ENODEV 503
 * unavailable; anything else (ENOENT included) 500 internal. */
struct api_err api_err_from_errno(int err);
/* Is err (-errno or errno) a part of thaw or of the host missing (ENOSYS,
 * EOPNOTSUPP, ENODEV: a GPU driver gone or refusing): 503 unavailable. */
bool errno_part_missing(int err);
/* The words of a failure: log_last_error(), the place that failed, else
 * strerror of err (-errno or errno). */
const char *api_why(int err);
/* An error answer of another's (a start's, passed on to the routed
 * requests that waited for it) as thawd's own: its status, and the code
 * that goes with it in docs/API.md's table, a static string.  A code that
 * is not one of the table's, or that another status goes with, is replaced
 * by the status's first code (status 500 "internal" for one that has
 * none): the two always agree. */
struct api_err api_err_known(unsigned status, const char *code);
/* The error answer's body, {"error":{"code","message"}}: msg (at most 1023
 * bytes of it), each byte that is not UTF-8 made '?', so that a refusal
 * that echoes what a client sent stays what it is.  NULL out of memory. */
json_t *api_error_json(const char *code, const char *msg);

#endif
