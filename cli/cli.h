/* SPDX-License-Identifier: Apache-2.0 */
/* cli.h — the thaw command line: one file per command group, this table joins them.
 *
 * Each command is int cmd_NAME(int argc, char **argv) with argv[0] the command's
 * name; it returns the process exit status (0 ok, 1 failure, 2 bad usage) and
 * prints its errors as "thaw NAME: message" on stderr.
 */
#ifndef THAW_CLI_H
#define THAW_CLI_H

#include <stdio.h>

/* The data directory: --data-dir, else $THAW_DATA_DIR, else /var/lib/thaw. */
const char *cli_data_dir(void);
/* The store directory: --store, else $THAW_STORE, else <data dir>/store. */
const char *cli_store_dir(void);
void cli_set_data_dir(const char *dir);
void cli_set_store_dir(const char *dir);
/* A count from an option or the environment: decimal digits only, 1 to max.
 * 0 or -EINVAL; *out holds what the digits read as either way. */
int cli_parse_count(const char *s, unsigned long long max, unsigned long long *out);
/* The functions of the data directory (<data dir>/functions/<id>.json) whose
 * snapshot's manifest is not in the store at store_dir: each through
 * bad("function <id>", why, arg).  Only where store_dir is the data
 * directory's own store (the one thawd keeps their snapshots in); elsewhere
 * none.  How many, or -errno. */
int cli_verify_functions(const char *store_dir,
			 void (*bad)(const char *what, const char *why, void *arg), void *arg);

int cmd_store(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_materialize(int argc, char **argv);
int cmd_start(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_lazy_pages(int argc, char **argv);
int cmd_remote(int argc, char **argv);
int cmd_push(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_gc(int argc, char **argv);

#endif
