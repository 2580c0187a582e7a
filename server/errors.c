/* SPDX-License-Identifier: Apache-2.0 */
/* errors.c — see errors.h. */
#include "server/errors.h"
#include "common/log.h"

#include <errno.h>
#include <string.h>

const char *api_why(int err)
{
	const char *m = log_last_error();

	return m && *m ? m : strerror(err < 0 ? -err : err);
}

struct api_err api_err_from_errno(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case ETIMEDOUT:
		return (struct api_err){ 504, "timeout" };
	case ENOSPC:
	case EDQUOT:
		/* A disk, the RAM tier or a quota is full: the same word
		 * wherever it happens (dump, ingest, materialisation). */
		return (struct api_err){ 507, "no_space" };
	case EBADMSG:
		/* Stored data failed its check (a chunk, a pack index, a
		 * manifest): not the client's fault, and not a retry's cure. */
		return (struct api_err){ 500, "damaged" };
	case EAGAIN:
	case EBUSY:
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		/* Out of something that frees up: the caller may retry. */
		return (struct api_err){ 503, "no_capacity" };
	case EACCES:
		/* Where the function would reach is not allowed (any more):
		 * its rootfs or directory, checked where used
		 * (function/confine.h), or a local image's file. */
		return (struct api_err){ 403, "forbidden" };
	case ENOSYS:
	case EOPNOTSUPP:
	case ENODEV:
		/* A part of thaw or of the host (a GPU driver) is missing. */
		return (struct api_err){ 503, "unavailable" };
	default:
		/* ENOENT among them: what is missing decides what it means (a
		 * start judges it itself: api.c, start_lost). */
		return (struct api_err){ 500, "internal" };
	}
}
