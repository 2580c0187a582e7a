/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_lazy_pages.c — thaw lazy-pages: thaw's own lazy-pages daemon, a drop-in
 * for `criu lazy-pages` (the same arguments; see restore/lazy_pages.h). */
#include "cli/cli.h"
#include "common/log.h"
#include "restore/lazy_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: thaw lazy-pages --images-dir DIR --work-dir DIR [--status-fd FD]\n"
		   "                       [--log-file FILE] [--threads N] [--block-kib N]\n"
		   "                       [--copy-slots N] [--zero-hole-mib N]\n"
		   "                       [--prefetch-delay-ms N] [-vN]\n\n"
		   "Serve the pages of one `criu restore --lazy-pages` (CRIU 4.2) in place of\n"
		   "`criu lazy-pages`: listen on lazy-pages.socket in the work directory, write\n"
		   "one '\\0' byte to FD once listening, serve faults first and fill the rest\n"
		   "from DIR's pages files with N copy threads (default $THAW_LAZY_THREADS or\n"
		   "min(8, CPUs)) in blocks of N KiB (default $THAW_LAZY_BLOCK_KIB or 2048).\n"
		   "At most --copy-slots copy threads of all such daemons on this machine copy\n"
		   "at once (default $THAW_LAZY_COPY_SLOTS or CPUs/2; -1: no limit), so that a\n"
		   "burst of lazy starts leaves cores to the restores themselves.\n"
		   "A hole the image leaves between two runs of pages of one mapping (zero\n"
		   "pages elided at snapshot) is mapped to the zero page once the run before it\n"
		   "is in, if it is at most --zero-hole-mib (default $THAW_LAZY_ZERO_HOLE_MIB or\n"
		   "1024; 0: none) and a process's holes so mapped stay within the size of its\n"
		   "data, so that reading them does not fault.\n"
		   "--prefetch-delay-ms (default $THAW_LAZY_PREFETCH_DELAY_MS or 0) holds the\n"
		   "copy threads back after the restore finished (for tests).\n"
		   "Exits 0 once every page is in place, 1 on any error (in the log).\n");
}

static int open_log(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) {
		fprintf(stderr, "thaw lazy-pages: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* A slot count: -1 (no limit) or 1..4096. */
static int parse_slots(const char *s, int *out)
{
	unsigned long long v;

	if (!strcmp(s, "-1")) {
		*out = -1;
		return 0;
	}
	if (cli_parse_count(s, 4096, &v) || v == 0)
		return -1;
	*out = (int)v;
	return 0;
}

/* A size in MiB, 0 (none) to 1 TiB. */
static int parse_mib(const char *s, uint64_t *bytes)
{
	unsigned long long v = 0;

	if (strcmp(s, "0") && cli_parse_count(s, 1 << 20, &v))
		return -1;
	*bytes = (uint64_t)v << 20;
	return 0;
}

int cmd_lazy_pages(int argc, char **argv)
{
	struct lazy_pages_opts o = { .status_fd = -1,
				     .zero_hole_bytes = LAZY_PAGES_DEFAULT_ZERO_HOLE };
	const char *log_file = NULL, *env;
	unsigned long long v;

	env = getenv("THAW_LAZY_THREADS");
	if (env && *env && !cli_parse_count(env, LAZY_PAGES_MAX_THREADS, &v))
		o.threads = (unsigned)v;
	env = getenv("THAW_LAZY_BLOCK_KIB");
	if (env && *env && !cli_parse_count(env, 1ull << 20, &v))
		o.block_bytes = (uint64_t)v << 10;
	env = getenv("THAW_LAZY_COPY_SLOTS");
	if (env && *env && parse_slots(env, &o.copy_slots)) {
		usage(stderr);
		return 2;
	}
	env = getenv("THAW_LAZY_ZERO_HOLE_MIB");
	if (env && *env && parse_mib(env, &o.zero_hole_bytes)) {
		usage(stderr);
		return 2;
	}
	env = getenv("THAW_LAZY_PREFETCH_DELAY_MS");
	if (env && *env && !cli_parse_count(env, 3600000, &v))
		o.prefetch_delay_ms = (unsigned)v;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strncmp(a, "-v", 2)) {
			/* criu's -vN: thaw logs info (the summary) at least, debug at -v4 */
			log_set_level(a[2] == '4' ? LOG_DEBUG : LOG_INFO);
		} else if (!next) {
			break;
		} else if (!strcmp(a, "--images-dir")) {
			o.images_dir = argv[++i];
		} else if (!strcmp(a, "--work-dir")) {
			o.work_dir = argv[++i];
		} else if (!strcmp(a, "--log-file")) {
			log_file = argv[++i];
		} else if (!strcmp(a, "--status-fd")) {
			if (cli_parse_count(argv[++i], 1 << 20, &v) && strcmp(argv[i], "0"))
				goto bad;
			o.status_fd = (int)v;
		} else if (!strcmp(a, "--threads")) {
			if (cli_parse_count(argv[++i], LAZY_PAGES_MAX_THREADS, &v))
				goto bad;
			o.threads = (unsigned)v;
		} else if (!strcmp(a, "--copy-slots")) {
			if (parse_slots(argv[++i], &o.copy_slots))
				goto bad;
		} else if (!strcmp(a, "--prefetch-delay-ms")) {
			if (cli_parse_count(argv[++i], 3600000, &v))
				goto bad;
			o.prefetch_delay_ms = (unsigned)v;
		} else if (!strcmp(a, "--zero-hole-mib")) {
			if (parse_mib(argv[++i], &o.zero_hole_bytes))
				goto bad;
		} else if (!strcmp(a, "--block-kib")) {
			if (cli_parse_count(argv[++i], 1ull << 20, &v) || (v & (v - 1)) || v < 4)
				goto bad;
			o.block_bytes = (uint64_t)v << 10;
		} else {
			goto bad;
		}
	}
	if (!o.images_dir || !o.work_dir)
		goto bad;
	if (log_get_level() < LOG_INFO)
		log_set_level(LOG_INFO);
	if (log_file && open_log(log_file))
		return 1;
	return lazy_pages_run(&o) ? 1 : 0;
bad:
	usage(stderr);
	return 2;
}
