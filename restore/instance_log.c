/* SPDX-License-Identifier: Apache-2.0 */
/* instance_log.c — see instance_log.h. */
#define LOG_PREFIX "instance: "
#include "restore/instance_log.h"
#include "restore/instance_ended.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
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

/* The output of ended instance id, if it has an ended record: 0 (and *out),
 * -ENOENT when it has none, another -errno. */
static int ended_log_tail(const struct thaw_config *c, const char *id, unsigned lines,
			  char **out, size_t *len)
{
	char rec[PATH_MAX], log[PATH_MAX];
	struct stat st;

	if (instance_ended_path(c, id, ".json", rec, sizeof(rec)) ||
	    instance_ended_path(c, id, ".log", log, sizeof(log)))
		return -ENAMETOOLONG;
	if (stat(rec, &st) < 0)
		return -errno;
	return logfile_tail(log, lines, out, len);
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
	/* A stop links the logs into ended/, writes the ended record, then
	 * removes the directory and the live record (teardown_once).
	 * So: an ended record means its logs are whole there; a live log read
	 * before any ended record appeared was read before its directory went. */
	ret = ended_log_tail(c, id, lines, out, len);
	if (ret != -ENOENT)
		return ret;
	if (stat(rec, &st) < 0) {
		ret = -errno;
		if (ret == -ENOENT) {
			/* Ended between the two looks? */
			ret = ended_log_tail(c, id, lines, out, len);
			if (ret == -ENOENT)
				pr_err("no instance %s (no record in %s/instances)", id,
				       c->data_dir);
		} else {
			pr_perror("stat %s", rec);
		}
		return ret;
	}
	ret = logfile_tail(log, lines, out, len);
	if (ret)
		return ret;
	/* An ended record now: the stop may have removed the directory during
	 * the read, and the ended copy is whole.  None: it was there all
	 * through the read. */
	char *live = *out;
	size_t live_len = *len;

	ret = ended_log_tail(c, id, lines, out, len);
	if (ret != -ENOENT) {
		free(live);
		return ret;
	}
	*out = live;
	*len = live_len;
	return 0;
}
