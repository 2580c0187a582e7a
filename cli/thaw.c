/* SPDX-License-Identifier: Apache-2.0 */
/* thaw.c — the thaw command: global options, then one command from the table. */
#include "cli/cli.h"
#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *data_dir_opt;
static const char *store_dir_opt;
static char store_dir_buf[PATH_MAX];

const char *cli_data_dir(void)
{
	const char *env = getenv("THAW_DATA_DIR");

	if (data_dir_opt)
		return data_dir_opt;
	return env && *env ? env : "/var/lib/thaw";
}

const char *cli_store_dir(void)
{
	const char *env = getenv("THAW_STORE");

	if (store_dir_opt)
		return store_dir_opt;
	if (env && *env)
		return env;
	snprintf(store_dir_buf, sizeof(store_dir_buf), "%s/store", cli_data_dir());
	return store_dir_buf;
}

void cli_set_data_dir(const char *dir)
{
	data_dir_opt = dir;
}

void cli_set_store_dir(const char *dir)
{
	store_dir_opt = dir;
}

int cli_parse_count(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || end == s || *end || *out == 0 || *out > max ? -EINVAL : 0;
}

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *help;
} commands[] = {
	{ "doctor", cmd_doctor, "check that this host can snapshot and restore" },
	{ "snapshot", cmd_snapshot, "boot, warm and snapshot a function from its spec file" },
	{ "store", cmd_store, "the chunk store: put, get, ls, stat, verify, gc" },
	{ "remote", cmd_remote, "push, pull, fetch, gc, ls: snapshots on an S3-compatible store" },
	{ "push", cmd_push, "have thawd upload a function's snapshot to its remote tier" },
	{ "pull", cmd_pull, "have thawd register a function from its remote tier, fetched" },
	{ "gc", cmd_gc, "garbage-collect the store, or with --remote the remote tier" },
	{ "materialize", cmd_materialize, "write a snapshot's image files out of the store (RAM tier)" },
	{ "start", cmd_start, "restore a running instance of a snapshot; prints its endpoint" },
	{ "stop", cmd_stop, "stop instances and remove everything they used" },
	{ "ps", cmd_ps, "list instances and their state" },
	{ "logs", cmd_logs, "print the end of an instance's output (stdout and stderr)" },
	{ "lazy-pages", cmd_lazy_pages,
	  "serve one lazy restore its pages (drop-in for criu lazy-pages; thaw start runs it)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: thaw [--data-dir DIR] [-v] COMMAND [ARGS]\n\n"
		   "thaw snapshots warm inference functions and restores them fast.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\noptions:\n"
		   "  --data-dir DIR  data directory (default $THAW_DATA_DIR or /var/lib/thaw)\n"
		   "  -v, --verbose   log more (repeat for debug); THAW_LOG=debug does the same\n"
		   "  -h, --help      this help; 'thaw COMMAND --help' for a command's\n");
}

int main(int argc, char **argv)
{
	int i = 1;

	/* As thawd: what thaw writes into a data directory is private
	 * whatever the umask (docs/DESIGN.md, "Where the data lives"). */
	umask(077);
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
			log_set_level(log_get_level() < LOG_INFO ? LOG_INFO : LOG_DEBUG);
		} else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc) {
			cli_set_data_dir(argv[++i]);
		} else {
			fprintf(stderr, "thaw: unknown option %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
		if (!strcmp(argv[i], commands[c].name))
			return commands[c].run(argc - i, argv + i);
	fprintf(stderr, "thaw: unknown command '%s'\n", argv[i]);
	usage(stderr);
	return 2;
}
