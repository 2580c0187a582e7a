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

int logs_get_instance(struct req *q)
{
	const char *id = q->route.id;
	unsigned lines;
	char *text = NULL;
	size_t len = 0;
	int ret;

	if (logfile_parse_tail(req_query(q, "tail"), &lines))
		return bad_tail(q);
	log_clear_error();
	ret = instance_log_tail(&q->srv->cfg, id, lines, &text, &len);
	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no instance %s", id);
	if (ret == -EINVAL)
		return reply_error(q, 400, "invalid_id", "invalid id \"%s\"", id);
	if (ret)
		return reply_failed(q, id, ret);
	return reply_text(q, 200, TEXT_PLAIN, text, len);
}

int logs_get_job(struct req *q)
{
	const char *id = q->route.id;
	char path[PATH_MAX];
	unsigned lines;
	char *text = NULL;
	size_t len = 0;
	int ret;

	if (logfile_parse_tail(req_query(q, "tail"), &lines))
		return bad_tail(q);
	log_clear_error();
	ret = jobs_log_path(q->srv->jobs, id, path, sizeof(path));
	if (ret == -ENOENT)
		return reply_error(q, 404, "not_found", "no job %s", id);
	if (!ret)
		ret = logfile_tail(path, lines, &text, &len);
	if (ret)
		return reply_failed(q, id, ret);
	return reply_text(q, 200, TEXT_PLAIN, text, len);
}
