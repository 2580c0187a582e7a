/* SPDX-License-Identifier: Apache-2.0 */
/* logs.c — see logs.h. */
#define LOG_PREFIX "logs: "
#include "server/logs.h"
#include "common/log.h"
#include "common/logfile.h"
#include "restore/instance_log.h"
#include "server/errors.h"
#include "server/internal.h"
#include "server/jobs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#define TEXT_PLAIN "text/plain; charset=utf-8"

static int bad_tail(struct req *q)
{
	return reply_error(q, 400, "bad_request", "tail must be a number of lines from 0 to %u",
			   LOGFILE_TAIL_MAX);
}

static int reply_failed(struct req *q, const char *what, int err)
{
	struct api_err e = api_err_from_errno(err);
	const char *m = log_last_error();

	return reply_error(q, e.status, e.code, "cannot read the log of %s: %s", what,
			   m && *m ? m : strerror(-err));
}

/* What a log's reader found of its instance or job. */
enum log_owner { LOG_OWNER_THERE, LOG_OWNER_GONE, LOG_OWNER_BAD_ID };

/* A log's reader: the last lines of q->route.id's log into *text, *len:
 * 0, or -errno with *owner saying whether that is because its owner is
 * not there (404) or its id is not one (400). */
typedef int (*log_tail_fn)(struct req *q, unsigned lines, char **text, size_t *len,
			   enum log_owner *owner);

/* GET of the log of q->route.id, a what ("instance", "job"), read by tail. */
static int get_log(struct req *q, const char *what, log_tail_fn tail)
{
	const char *id = q->route.id;
	enum log_owner owner = LOG_OWNER_THERE;
	unsigned lines;
	char *text = NULL;
	size_t len = 0;
	int ret;

	if (logfile_parse_tail(req_query(q, "tail"), &lines))
		return bad_tail(q);
	log_clear_error();
	ret = tail(q, lines, &text, &len, &owner);
	if (ret && owner == LOG_OWNER_GONE)
		return reply_error(q, 404, "not_found", "no %s %s", what, id);
	if (ret && owner == LOG_OWNER_BAD_ID)
		return reply_error(q, 400, "invalid_id", "invalid id \"%s\"", id);
	if (ret)
		return reply_failed(q, id, ret);
	return reply_text(q, 200, TEXT_PLAIN, text, len);
}

static int instance_tail(struct req *q, unsigned lines, char **text, size_t *len,
			 enum log_owner *owner)
{
	int ret = instance_log_tail(&q->srv->cfg, q->route.id, lines, text, len);

	*owner = ret == -ENOENT ? LOG_OWNER_GONE : ret == -EINVAL ? LOG_OWNER_BAD_ID
								  : LOG_OWNER_THERE;
	return ret;
}

static int job_tail(struct req *q, unsigned lines, char **text, size_t *len,
		    enum log_owner *owner)
{
	char path[PATH_MAX];
	int ret = jobs_log_path(q->srv->jobs, q->route.id, path, sizeof(path));

	if (ret) {
		*owner = ret == -ENOENT ? LOG_OWNER_GONE : LOG_OWNER_THERE;
		return ret;
	}
	return logfile_tail(path, lines, text, len);
}

int logs_get_instance(struct req *q)
{
	return get_log(q, "instance", instance_tail);
}

int logs_get_job(struct req *q)
{
	return get_log(q, "job", job_tail);
}
