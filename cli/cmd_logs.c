/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_logs.c — thaw logs: the end of an instance's output, as thawd's
 * GET /instances/<iid>/logs answers it. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"
#include "restore/instance_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void logs_usage(FILE *f)
{
	fprintf(f,
		"usage: thaw logs [--data-dir DIR] [--tail N] INSTANCE\n\n"
		"Print the last N lines (default %u, at most %u) of what the instance's\n"
		"function wrote to stdout and stderr since its restore: its function.log,\n"
		"and the rotated function.log.1 when that one has fewer lines (THAW_LOG_BYTES,\n"
		"thawd --log-bytes: each is rotated at that size).  An instance whose process\n"
		"has exited has its output while its record stays.\n"
		"Exit status: 0 printed, 1 no such instance or unreadable, 2 bad usage.\n",
		LOGFILE_TAIL_DEFAULT, LOGFILE_TAIL_MAX);
}

int cmd_logs(int argc, char **argv)
{
	const char *id = NULL, *tail = NULL;
	struct thaw_config c;
	unsigned lines;
	char *text = NULL;
	size_t len = 0;
	int ret;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			logs_usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--data-dir") && i + 1 < argc) {
			cli_set_data_dir(argv[++i]);
		} else if ((!strcmp(a, "--tail") || !strcmp(a, "-n")) && i + 1 < argc) {
			tail = argv[++i];
		} else if (a[0] != '-' && !id) {
			id = a;
		} else {
			fprintf(stderr, "thaw logs: bad argument %s\n", a);
			logs_usage(stderr);
			return 2;
		}
	}
	if (!id) {
		logs_usage(stderr);
		return 2;
	}
	if (logfile_parse_tail(tail, &lines)) {
		fprintf(stderr, "thaw logs: --tail %s: a number of lines from 0 to %u\n", tail,
			LOGFILE_TAIL_MAX);
		return 2;
	}
	if (!id_valid(id)) {
		fprintf(stderr, "thaw logs: invalid instance id \"%s\"\n", id);
		return 2;
	}
	if (config_init(&c, cli_data_dir())) {
		fprintf(stderr, "thaw logs: %s\n", log_last_error());
		return 1;
	}
	log_clear_error();
	ret = instance_log_tail(&c, id, lines, &text, &len);
	if (ret) {
		fprintf(stderr, "thaw logs: %s\n",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		return 1;
	}
	ret = len && fwrite(text, 1, len, stdout) != len ? -EIO : 0;
	free(text);
	if (ret || fflush(stdout)) {
		fprintf(stderr, "thaw logs: cannot write the output\n");
		return 1;
	}
	return 0;
}
