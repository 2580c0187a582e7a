/* SPDX-License-Identifier: Apache-2.0 */
/* instance_log.c — see instance_log.h. */
#define LOG_PREFIX "instance: "
#include "restore/instance_log.h"
#include "restore/instance_ended.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"

#include <stdio.h>
#include <sys/stat.h>

int instance_log_path(const struct thaw_config *c, const char *id, char *buf, size_t len)
{
	if (!id || !id_valid(id))
		return -EINVAL;
	if ((size_t)snprintf(buf, len, "%s/instances/%s/function.log", c->data_dir, id) >= len) {
		pr_err("path too long: %s/instances/%s/function.log", c->data_dir, id);
		return -ENAMETOOLONG;
	}
	return 0;
}

int instance_log_tail(const struct thaw_config *c, const char *id, unsigned lines, char **out,
		      size_t *len)
{
	char log[PATH_MAX], rec[PATH_MAX];
	struct stat st;
	int ret;

	*out = NULL;
	*len = 0;
	ret = instance_log_path(c, id, log, sizeof(log));
	if (ret)
		return ret;
	/* The record makes an instance exist, as for instance_stop. */
	if ((size_t)snprintf(rec, sizeof(rec), "%s/instances/%s.json", c->data_dir, id) >=
	    sizeof(rec)) {
		pr_err("path too long: %s/instances/%s.json", c->data_dir, id);
		return -ENAMETOOLONG;
	}
	if (stat(rec, &st) < 0) {
		ret = -errno;
		/* An ended instance's output stays while its record does. */
		if (ret == -ENOENT && !instance_ended_path(c, id, ".json", rec, sizeof(rec)) &&
		    stat(rec, &st) == 0 && !instance_ended_path(c, id, ".log", log, sizeof(log)))
			return logfile_tail(log, lines, out, len);
		if (ret == -ENOENT)
			pr_err("no instance %s (no record in %s/instances)", id, c->data_dir);
		else
			pr_perror("stat %s", rec);
		return ret;
	}
	return logfile_tail(log, lines, out, len);
}
