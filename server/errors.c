/* errors.c — see errors.h. */
#include "server/errors.h"

#include <errno.h>

struct api_err api_err_from_errno(int err, int start)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case ETIMEDOUT:
		return (struct api_err){ 504, "timeout" };
	case EAGAIN:
	case EBUSY:
	case ENOSPC:
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		/* Out of something that frees up: the caller may retry. */
		return (struct api_err){ 503, "no_capacity" };
	case ENOSYS:
	case EOPNOTSUPP:
	case ENODEV:
		/* A part of thaw or of the host (a GPU driver) is missing. */
		return (struct api_err){ 503, "unavailable" };
	case ENOENT:
		if (start)
			return (struct api_err){ 409, "no_snapshot" };
		return (struct api_err){ 500, "internal" };
	default:
		return (struct api_err){ 500, "internal" };
	}
}
