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

struct api_err {
	unsigned status;
	const char *code;
};

/* start: the error of a start (-ENOENT there means the snapshot vanished:
 * 409); otherwise that of a snapshot or another action. */
struct api_err api_err_from_errno(int err, int start);

#endif
