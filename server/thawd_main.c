/* SPDX-License-Identifier: Apache-2.0 */
/* thawd_main.c — the thawd program: options, signals, the server.
 *
 * Every option is one row of opts[] below (as Redis's configs are rows of
 * one table): its name, its argument, the environment variable read when
 * it is not given, where its value goes and how it is checked, and its
 * --help lines.  getopt's options, the parsing and --help are all made
 * from that table.
 */
#define LOG_PREFIX "thawd: "
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "server/exits.h"
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* How an option's value is taken, and where it goes. */
enum opt_kind {
	OPT_STR,        /* a string of struct server_opts, as given */
	OPT_PATH,       /* a path into a char[PATH_MAX] of struct thaw_config */
	OPT_UNSIGNED,   /* numbers: an unsigned of struct server_opts, */
	OPT_SIZE,       /* a size_t of it, */
	OPT_U64,        /* a uint64_t of it, */
	OPT_SECONDS,    /* a double of it (whole seconds), */
	OPT_CFG_U64,    /* a uint64_t of struct thaw_config */
	OPT_DATA_DIR,   /* config_init's data directory */
	OPT_LOG_BYTES,  /* config_parse_bytes into thaw_config's log_bytes */
	OPT_ALLOW_ROOT, /* repeatable: config_allow_root */
	OPT_USERNS_POOL, /* config_userns_pool */
	OPT_LAZY,
	OPT_NO_LAZY,
	OPT_USERNS,
	OPT_NO_USERNS,
	OPT_VERBOSE,
	OPT_QUIET,
	OPT_HELP,
	OPT_ENV_ONLY,   /* no option: an environment variable --help tells of */
};

#define NUM_BYTES   1u /* K, M, G, T suffixes (binary) */
#define NUM_NONZERO 2u /* 0 is refused */

#define OPTS(field) offsetof(struct server_opts, field)
#define CFG(field)  offsetof(struct thaw_config, field)

struct thawd_opt {
	const char *name;        /* --name; NULL for OPT_ENV_ONLY */
	const char *arg;         /* its argument's name in --help; NULL: it takes none */
	const char *env;         /* read here when the option is not given (others are
				  * config_init's, named in the help) */
	const char *label;       /* help's left column, if not "--name ARG" */
	const char *help;        /* its lines; NULL: told with the row before */
	const char *dflt_str;    /* a string's default: "@" in help */
	unsigned long long dflt; /* a number's default: "@" in help */
	unsigned long long max;  /* a number's largest */
	size_t off;              /* OPTS() or CFG() */
	enum opt_kind kind;
	unsigned flags;          /* NUM_* */
	char short_name;         /* -c too, or 0 */
};

static const struct thawd_opt opts[] = {
	{ .name = "listen", .arg = "HOST:PORT", .env = "THAW_LISTEN", .kind = OPT_STR,
	  .off = OPTS(listen), .dflt_str = SERVER_DEFAULT_LISTEN,
	  .help = "address to listen on (THAW_LISTEN; default @;\n"
		"port 0 picks a free one, see --port-file)" },
	{ .name = "data-dir", .arg = "DIR", .kind = OPT_DATA_DIR,
	  .help = "functions/, store/, instances/ live here\n"
		"(THAW_DATA_DIR; default /var/lib/thaw)" },
	{ .name = "ram-tier", .arg = "DIR", .kind = OPT_PATH, .off = CFG(ram_tier_dir),
	  .help = "RAM tier of materialised snapshots\n"
		"(THAW_RAM_TIER; default /dev/shm/thaw, made its own\n"
		"huge-page tmpfs where possible: THAW_TIER_HUGE=auto|1|0)" },
	{ .name = "ram-tier-bytes", .arg = "N", .kind = OPT_CFG_U64, .off = CFG(ram_tier_bytes),
	  .max = UINT64_MAX, .flags = NUM_BYTES | NUM_NONZERO,
	  .help = "its byte budget; K, M, G, T suffixes are binary\n"
		"(THAW_RAM_TIER_BYTES; default half of /dev/shm)" },
	{ .name = "token-file", .arg = "FILE", .env = "THAW_TOKEN_FILE", .kind = OPT_STR,
	  .off = OPTS(token_file),
	  .help = "ask every request but GET /healthz for\n"
		"\"Authorization: Bearer <the file's first line>\"\n"
		"(THAW_TOKEN_FILE; default: no token). Without any\n"
		"token thawd listens only on loopback (127.0.0.0/8,\n"
		"::1, localhost) and refuses a Host header that is\n"
		"not a loopback name (403)" },
	{ .name = "control-token-file", .arg = "FILE", .env = "THAW_CONTROL_TOKEN_FILE",
	  .kind = OPT_STR, .off = OPTS(control_token_file),
	  .help = "a token for functions, snapshots and jobs only\n"
		"(THAW_CONTROL_TOKEN_FILE)" },
	{ .name = "data-token-file", .arg = "FILE", .env = "THAW_DATA_TOKEN_FILE", .kind = OPT_STR,
	  .off = OPTS(data_token_file),
	  .help = "a token for starts and instances only, e.g. for a\n"
		"gateway; on another route it gets 403\n"
		"(THAW_DATA_TOKEN_FILE). /metrics takes any token" },
	{ .name = "tls-cert", .arg = "FILE", .env = "THAW_TLS_CERT", .kind = OPT_STR,
	  .off = OPTS(tls_cert_file),
	  .help = "serve HTTPS (libmicrohttpd's TLS, GnuTLS) with the PEM\n"
		"certificate in FILE, the server's first, then any\n"
		"intermediates (THAW_TLS_CERT; default: plain HTTP)" },
	{ .name = "tls-key", .arg = "FILE", .env = "THAW_TLS_KEY", .kind = OPT_STR,
	  .off = OPTS(tls_key_file),
	  .help = "its PEM private key, unencrypted (THAW_TLS_KEY); a\n"
		"key file every user can read is warned about.\n"
		"Both or neither (else exit 2); a file that cannot\n"
		"be read, is not PEM, or a key that is not the\n"
		"certificate's makes thawd exit 1 before it touches\n"
		"the data directory. Plain HTTP to the port fails.\n"
		"TLS is no token: off loopback one is still needed" },
	{ .name = "remote", .arg = "s3://BUCKET[/PREFIX]", .env = "THAW_REMOTE", .kind = OPT_STR,
	  .off = OPTS(remote_url),
	  .help = "share snapshots with a fleet through an S3-compatible\n"
		"object store (THAW_REMOTE): each snapshot is pushed\n"
		"in the background (only the chunks it lacks);\n"
		"POST /functions/<id>/pull registers one from it.\n"
		"Keys as the AWS tools find them: AWS_ACCESS_KEY_ID,\n"
		"AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else\n"
		"AWS_PROFILE in ~/.aws/credentials; AWS_REGION" },
	{ .name = "s3-endpoint", .arg = "URL", .kind = OPT_STR, .off = OPTS(s3_endpoint),
	  .help = "an S3-compatible server other than AWS (Ceph RGW,\n"
		"MinIO, R2...), addressed path-style\n"
		"(AWS_ENDPOINT_URL)" },
	{ .name = "runc", .arg = "PATH", .kind = OPT_PATH, .off = CFG(runc),
	  .help = "runc binary (THAW_RUNC; default runc on PATH)" },
	{ .name = "registry-auth", .arg = "FILE", .kind = OPT_PATH, .off = CFG(registry_auth),
	  .help = "a containers auth file (auth.json: docker login,\n"
		"podman login) with the credentials a spec's \"image\"\n"
		"is pulled with (THAW_REGISTRY_AUTH; skopeo --authfile)" },
	{ .name = "criu", .arg = "PATH", .kind = OPT_PATH, .off = CFG(criu),
	  .help = "criu >= 4.2 for runc --criu (THAW_CRIU; default the\n"
		".deps/criu-wrapper of the tree, else criu on PATH)" },
	{ .kind = OPT_ENV_ONLY, .label = "THAW_MAPPED=1|0",
	  .help = "restore by mapping (default 1): an instance maps its\n"
		"snapshot's memory files in the RAM tier, one copy\n"
		"for every instance, instead of copying the pages in;\n"
		"mappings under THAW_MAPPED_MIN_KIB (default 1024) of\n"
		"pages are copied; where mapping does not apply (memory\n"
		"a forked child shares, a snapshot from before it, a\n"
		"spec's \"lazy\"), the start's answer says why in\n"
		"\"pages_why\" and --lazy/--no-lazy decide" },
	{ .name = "allow-root", .arg = "DIR", .kind = OPT_ALLOW_ROOT,
	  .help = "a function's \"bundle\", \"cwd\" and mounts may lie\n"
		"under DIR (repeatable; THAW_ALLOW_ROOTS=DIR:DIR); always\n"
		"allowed: the tree's bench/functions; never the data\n"
		"directory, store or RAM tier, nor a directory holding one;\n"
		"a spec naming any other directory is 403 forbidden" },
	{ .name = "userns-pool", .arg = "START:COUNT|FILE", .kind = OPT_USERNS_POOL,
	  .help = "the host uids (and gids) functions in a user namespace\n"
		"(a spec's \"sandbox\": {\"userns\": true}) are mapped to,\n"
		"65536 per function: START:COUNT, or a file in\n"
		"/etc/subuid's form whose \"thaw\" line says it\n"
		"(THAW_USERNS_POOL; default 2147483648:268435456)" },
	{ .name = "userns", .kind = OPT_USERNS, .label = "--userns, --no-userns",
	  .help = "whether a function whose spec does not say\n"
		"\"sandbox\": {\"userns\": …} runs in a user namespace:\n"
		"where the host supports it (thaw doctor's userns line)\n"
		"and the range can reach the function's directories; not\n"
		"one from an image; a snapshot keeps what it was made\n"
		"with (THAW_USERNS_DEFAULT=1|0; default 1)" },
	{ .name = "no-userns", .kind = OPT_NO_USERNS }, /* told with --userns */
	{ .name = "lazy", .kind = OPT_LAZY, .label = "--lazy, --no-lazy",
	  .help = "where mapping does not apply: restore pages on demand\n"
		"(a lazy-pages daemon serves them from the RAM tier) or\n"
		"all before the start answers, for functions whose\n"
		"spec has no \"lazy\"\n"
		"(THAW_LAZY=1|0|auto; default auto: lazily, but a GPU\n"
		"function eagerly when THAW_LAZY_DAEMON=criu, whose\n"
		"single-threaded daemon makes the CUDA restore slower,\n"
		"or in a burst, when more than THAW_LAZY_MAX_GPU_STARTS\n"
		"GPU starts, this one included, are in flight (default\n"
		"1; 0: GPU functions always eagerly; -1: no limit);\n"
		"THAW_LAZY_GPU_AFTER_FILL=1: a lazy GPU start waits\n"
		"until every page is in before the CUDA restore)" },
	{ .name = "no-lazy", .kind = OPT_NO_LAZY }, /* told with --lazy */
	{ .name = "max-starts", .arg = "N", .env = "THAW_MAX_STARTS", .kind = OPT_UNSIGNED,
	  .off = OPTS(max_starts), .max = 100000, .dflt = SERVER_DEFAULT_MAX_STARTS,
	  .help = "concurrent starts; more answer 503 with Retry-After\n"
		"(THAW_MAX_STARTS; default @; 0 refuses every start)" },
	{ .name = "max-snapshots", .arg = "N", .env = "THAW_MAX_SNAPSHOTS", .kind = OPT_UNSIGNED,
	  .off = OPTS(max_snapshots), .max = 1000, .dflt = SERVER_DEFAULT_MAX_SNAPSHOTS,
	  .help = "concurrent snapshots, likewise (THAW_MAX_SNAPSHOTS;\n"
		"default @)" },
	{ .name = "idle-s", .arg = "S", .env = "THAW_IDLE_S", .kind = OPT_SECONDS,
	  .off = OPTS(idle_s), .max = 365ull * 86400,
	  .help = "stop an instance after S seconds unused (no bytes or\n"
		"connection through its endpoint; a routed one: from\n"
		"the end of its last routed request), unless its\n"
		"function's spec says otherwise (\"idle_s\"; THAW_IDLE_S;\n"
		"default 0: never)" },
	{ .name = "gpu-mem-reserve", .arg = "BYTES", .env = "THAW_GPU_MEM_RESERVE", .kind = OPT_U64,
	  .off = OPTS(gpu_mem_reserve), .max = 1ull << 50, .flags = NUM_BYTES,
	  .help = "a GPU function's start that would leave its GPU less\n"
		"free memory than this (NVML's figure, less the\n"
		"snapshot's recorded GPU usage) answers 503\n"
		"no_gpu_memory before restoring anything\n"
		"(THAW_GPU_MEM_RESERVE; default 0: only a start whose\n"
		"GPU state does not fit at all)" },
	{ .name = "tier-scrub-rate", .arg = "BYTES", .env = "THAW_TIER_SCRUB_RATE", .kind = OPT_U64,
	  .off = OPTS(tier_scrub_rate), .max = 1ull << 50, .flags = NUM_BYTES,
	  .help = "bytes a second at most that a background scrub\n"
		"reads the RAM tier's entries again at, each file\n"
		"checked against the checksums made when it was\n"
		"materialised; an entry found damaged is dropped and\n"
		"materialised again from the store (log, /metrics)\n"
		"(THAW_TIER_SCRUB_RATE; default 64M; 0: no scrub)" },
	{ .name = "keep-ended", .arg = "S", .env = "THAW_KEEP_ENDED_S", .kind = OPT_UNSIGNED,
	  .off = OPTS(keep_ended_s), .max = 30 * 86400, .dflt = SERVER_DEFAULT_KEEP_ENDED_S,
	  .help = "an instance that ended (stopped, idle, exited) stays\n"
		"listed (GET /instances/<id>, ?all=1) with how it ended,\n"
		"and its output readable, for S seconds\n"
		"(THAW_KEEP_ENDED_S; default @; 0: removed at once)" },
	{ .name = "mem-reserve", .arg = "BYTES", .env = "THAW_MEM_RESERVE", .kind = OPT_U64,
	  .off = OPTS(mem_reserve), .max = 1ull << 50, .flags = NUM_BYTES,
	  .help = "a start that could leave the host less available memory\n"
		"(MemAvailable, less its snapshot's image size) answers\n"
		"503 before restoring anything (THAW_MEM_RESERVE;\n"
		"default 0: no check)" },
	{ .name = "max-standby", .arg = "N", .env = "THAW_MAX_STANDBY", .kind = OPT_UNSIGNED,
	  .off = OPTS(max_standby), .max = 4096, .dflt = SERVER_DEFAULT_MAX_STANDBY,
	  .help = "standby instances (a spec's \"standby\") of all\n"
		"functions together (THAW_MAX_STANDBY; default @;\n"
		"0: none)" },
	{ .name = "max-body", .arg = "BYTES", .env = "THAW_MAX_BODY", .kind = OPT_SIZE,
	  .off = OPTS(max_body), .max = 1ull << 30, .flags = NUM_BYTES | NUM_NONZERO,
	  .dflt = SERVER_DEFAULT_MAX_BODY,
	  .help = "larger request bodies answer 413 (THAW_MAX_BODY;\n"
		"default @)" },
	{ .name = "log-bytes", .arg = "BYTES", .kind = OPT_LOG_BYTES,
	  .help = "an instance's function.log (its stdout and stderr)\n"
		"and a snapshot's boot output are rotated at this size:\n"
		"at most twice as much is kept; K, M, G, T suffixes\n"
		"(THAW_LOG_BYTES, also for thaw start; default 1M,\n"
		"at least 4K)" },
	{ .name = "max-connections", .arg = "N", .env = "THAW_MAX_CONNECTIONS",
	  .kind = OPT_UNSIGNED, .off = OPTS(max_conns), .max = 65536, .flags = NUM_NONZERO,
	  .dflt = SERVER_DEFAULT_MAX_CONNS,
	  .help = "concurrent connections (THAW_MAX_CONNECTIONS;\n"
		"default @)" },
	{ .name = "max-connections-per-ip", .arg = "N", .env = "THAW_MAX_CONNECTIONS_PER_IP",
	  .kind = OPT_UNSIGNED, .off = OPTS(max_conns_per_ip), .max = 65536,
	  .dflt = SERVER_DEFAULT_MAX_CONNS_PER_IP,
	  .help = "concurrent connections from one client address;\n"
		"more are closed at once (THAW_MAX_CONNECTIONS_PER_IP;\n"
		"default @; 0: no limit, e.g. behind a proxy that\n"
		"limits its clients itself)" },
	{ .name = "request-timeout", .arg = "S", .env = "THAW_REQUEST_TIMEOUT",
	  .kind = OPT_UNSIGNED, .off = OPTS(request_timeout), .max = 86400, .flags = NUM_NONZERO,
	  .dflt = SERVER_DEFAULT_REQUEST_TIMEOUT,
	  .help = "seconds a connection has to send a whole request,\n"
		"head and body, from its opening or from its previous\n"
		"answer; a slower one is closed, however steadily it\n"
		"sends (THAW_REQUEST_TIMEOUT; default @, 1 to 86400).\n"
		"The request's processing (a start, a snapshot with\n"
		"?wait=1) does not count" },
	{ .name = "remote-poll", .arg = "S", .env = "THAW_REMOTE_POLL",
	  .kind = OPT_UNSIGNED, .off = OPTS(remote_poll_s), .max = 86400,
	  .dflt = SERVER_DEFAULT_REMOTE_POLL_S,
	  .help = "with --remote, seconds between two listings of\n"
		"the remote's functions: a function deleted or\n"
		"snapshotted again on another host follows here\n"
		"(THAW_REMOTE_POLL; default @, 0: never)" },
	{ .name = "drain-timeout", .arg = "S", .env = "THAW_DRAIN_TIMEOUT",
	  .kind = OPT_UNSIGNED, .off = OPTS(drain_timeout), .max = 86400,
	  .dflt = SERVER_DEFAULT_DRAIN_TIMEOUT,
	  .help = "on SIGTERM or POST /drain, seconds thawd goes on\n"
		"listening (GET /readyz 503, new work 503) while the\n"
		"routed requests and starts in flight finish, before\n"
		"it stops (THAW_DRAIN_TIMEOUT; default @, 0 to 86400)" },
	{ .name = "port-file", .arg = "FILE", .kind = OPT_STR, .off = OPTS(port_file),
	  .help = "write the port listened on into FILE once listening\n"
		"(with TLS, a second line: https)\n"
		"(another program listening on the address, a second\n"
		"thawd included, makes thawd exit 1: no port sharing)" },
	{ .name = "verbose", .short_name = 'v', .kind = OPT_VERBOSE,
	  .help = "debug logging (THAW_LOG=debug|info|warn|err)" },
	{ .name = "quiet", .short_name = 'q', .kind = OPT_QUIET,
	  .help = "warnings and errors only (no line per request)" },
	{ .name = "help", .short_name = 'h', .kind = OPT_HELP,
	  .help = "this help" },

};

#define HELP_COLUMN 25

static const char usage_head[] =
	"usage: thawd [OPTIONS]\n"
	"\n"
	"thawd serves thaw's HTTP API (see docs/API.md): register functions, snapshot\n"
	"them, start instances restored from their snapshots.\n"
	"\n"
	"options (each also read from the environment variable shown):\n";

static const char usage_tail[] =
	"\n"
	"thawd logs one line per request at info level, on stderr.\n"
	"\n"
	"One thawd per data directory: thawd holds DIR/thawd.lock (flock, with its pid\n"
	"in it) while it runs; a second thawd on the same directory exits 1 before\n"
	"touching anything in it.\n"
	"\n"
	"Two processes: the one started keeps the server (a child it forks) and\n"
	"reaps what the server leaves behind, so that an instance's exit status is\n"
	"known; it passes SIGTERM, SIGINT, SIGHUP and SIGQUIT on and exits as the\n"
	"server does; killing it kills the server too.  SIGUSR1, SIGUSR2 and SIGALRM\n"
	"are ignored.\n"
	"\n"
	"Stopping: on SIGTERM, SIGINT, SIGHUP or POST /drain thawd first drains: it goes\n"
	"on listening, GET /readyz answers 503 and new work 503 with Retry-After, while\n"
	"the routed requests and starts in flight finish (--drain-timeout).  It then\n"
	"stops accepting connections, answers 503 to new work on open ones, waits for\n"
	"the starts and snapshots that are running to finish, then stops every instance it holds (adopted ones too)\n"
	"and exits 0.  A second signal ends it at once; so does kill -9.  Either\n"
	"way, the next thawd on the same data directory adopts the instances\n"
	"recorded there whose process and endpoint are alive (they go on serving)\n"
	"and stops the others, marks snapshots that were building as failed\n"
	"(\"thawd restarted during the snapshot\"), removes what they left\n"
	"(container, namespace, work directory) and garbage-collects the store.\n";

/* One row's help: its left column ("--name ARG"), then its lines from
 * HELP_COLUMN, the first beside it if it fits, "@" standing for its default. */
static void usage_row(FILE *f, const struct thawd_opt *o)
{
	char left[64];
	const char *h;

	if (o->label)
		snprintf(left, sizeof(left), "  %s", o->label);
	else if (o->short_name)
		snprintf(left, sizeof(left), "  -%c, --%s", o->short_name, o->name);
	else
		snprintf(left, sizeof(left), "  --%s%s%s", o->name, o->arg ? " " : "",
			 o->arg ? o->arg : "");
	if (strlen(left) < HELP_COLUMN)
		fprintf(f, "%-*s", HELP_COLUMN, left);
	else
		fprintf(f, "%s\n%*s", left, HELP_COLUMN, "");
	for (h = o->help; *h; h++) {
		if (*h == '@' && o->dflt_str)
			fputs(o->dflt_str, f);
		else if (*h == '@')
			fprintf(f, "%llu", o->dflt);
		else
			fputc(*h, f);
		if (*h == '\n')
			fprintf(f, "%*s", HELP_COLUMN, "");
	}
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fputs(usage_head, f);
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].help)
			usage_row(f, &opts[i]);
	fputs(usage_tail, f);
}

/* A count or a byte size: digits with an optional binary suffix (bytes only). */
static int parse_num(const char *what, const char *v, bool suffix, unsigned long long max,
		     unsigned long long *out)
{
	unsigned long long n, mul = 1;
	char *end;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v || v[0] == '-')
		goto bad;
	if (suffix && *end) {
		switch (*end) {
		case 'K': case 'k': mul = 1ull << 10; break;
		case 'M': case 'm': mul = 1ull << 20; break;
		case 'G': case 'g': mul = 1ull << 30; break;
		case 'T': case 't': mul = 1ull << 40; break;
		default: goto bad;
		}
		end++;
		if (*end == 'i' || *end == 'B')
			end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	}
	if (*end || n > max / mul)
		goto bad;
	*out = n * mul;
	return 0;
bad:
	fprintf(stderr, "thawd: %s: \"%s\" is not a valid number\n", what, v);
	return -EINVAL;
}

static int set_path(char *dst, const char *v, const char *what)
{
	if (snprintf(dst, PATH_MAX, "%s", v) >= PATH_MAX) {
		fprintf(stderr, "thawd: %s: path too long\n", what);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* The registry auth file, if one is named, must be readable now: a pull
 * that fails for it later would fail a snapshot.  One every user can read
 * is warned about: it holds credentials. */
static int check_registry_auth(const char *path)
{
	struct stat st;
	int fd;

	if (!path[0])
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "thawd: --registry-auth (THAW_REGISTRY_AUTH) %s: %s\n", path,
			fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	close(fd);
	if (st.st_mode & S_IROTH)
		fprintf(stderr, "thawd: warning: the registry auth file %s is readable by every "
				"user (chmod 600 it)\n", path);
	return 0;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}


/* What the command line, then the environment, gave: a value per row of
 * opts[] (NULL: neither), and what the rows without one set. */
struct given {
	const char *val[ARRAY_SIZE(opts)];
	const char *allow[CONFIG_MAX_ROOTS];
	size_t nallow;
	int level, lazy, userns; /* -1: not given */
};

/* getopt_long's val of row i (above any short option's character). */
#define ROW_KEY(i) (256 + (int)(i))

/* getopt_long's options, one per row with a name, into lo (room for every
 * row and the end). */
static void make_longopts(struct option *lo)
{
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].name)
			lo[n++] = (struct option){ opts[i].name,
						   opts[i].arg ? required_argument : no_argument,
						   NULL, ROW_KEY(i) };
	lo[n] = (struct option){ NULL, 0, NULL, 0 };
}

/* The row getopt_long's opt names, or -1 (an unknown option). */
static long row_of(int opt)
{
	if (opt >= ROW_KEY(0) && opt < ROW_KEY(ARRAY_SIZE(opts)))
		return opt - ROW_KEY(0);
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].short_name && opts[i].short_name == opt)
			return (long)i;
	return -1;
}

/* Take row i given with value v into g: -1 to go on, else thawd's exit
 * status (0 after --help). */
static int take(size_t i, const char *v, struct given *g)
{
	switch (opts[i].kind) {
	case OPT_ALLOW_ROOT:
		if (g->nallow == CONFIG_MAX_ROOTS) {
			fprintf(stderr, "thawd: more than %d --allow-root\n", CONFIG_MAX_ROOTS);
			return 2;
		}
		g->allow[g->nallow++] = v;
		return -1;
	case OPT_LAZY:
		g->lazy = 1;
		return -1;
	case OPT_NO_LAZY:
		g->lazy = 0;
		return -1;
	case OPT_USERNS:
		g->userns = 1;
		return -1;
	case OPT_NO_USERNS:
		g->userns = 0;
		return -1;
	case OPT_VERBOSE:
		g->level = LOG_DEBUG;
		return -1;
	case OPT_QUIET:
		g->level = LOG_WARN;
		return -1;
	case OPT_HELP:
		usage(stdout);
		return 0;
	default:
		g->val[i] = v;
		return -1;
	}
}

/* The command line into g, then the environment where it said nothing
 * (flags win over the environment, which wins over the defaults): -1 to
 * go on, else thawd's exit status. */
static int parse_args(int argc, char **argv, struct given *g)
{
	struct option lo[ARRAY_SIZE(opts) + 1];
	int opt, ret;
	long row;

	*g = (struct given){ .level = -1, .lazy = -1, .userns = -1 };
	make_longopts(lo);
	while ((opt = getopt_long(argc, argv, "vqh", lo, NULL)) != -1) {
		row = row_of(opt);
		if (row < 0) {
			usage(stderr);
			return 2;
		}
		ret = take((size_t)row, optarg, g);
		if (ret >= 0)
			return ret;
	}
	if (optind < argc) {
		fprintf(stderr, "thawd: unexpected argument %s\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (!g->val[i] && opts[i].env)
			g->val[i] = env(opts[i].env);
	return -1;
}

/* The value of the row of kind k (a row of its own: the data directory). */
static const char *given_kind(const struct given *g, enum opt_kind k)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].kind == k)
			return g->val[i];
	return NULL;
}

/* size bytes of v into the field at off of the struct at base. */
static void store(void *base, size_t off, const void *v, size_t size)
{
	memcpy((char *)base + off, v, size);
}

/* The strings given into o. */
static void apply_strings(const struct given *g, struct server_opts *o)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].kind == OPT_STR && g->val[i])
			store(o, opts[i].off, &g->val[i], sizeof(const char *));
}

/* The paths, the registry auth file's check, --lazy and --allow-root into
 * c: 0, or thawd's exit status. */
static int apply_config(const struct given *g, struct thaw_config *c)
{
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(opts); i++) {
		if (opts[i].kind != OPT_PATH || !g->val[i])
			continue;
		snprintf(what, sizeof(what), "--%s", opts[i].name);
		if (set_path((char *)c + opts[i].off, g->val[i], what))
			return 2;
	}
	if (check_registry_auth(c->registry_auth))
		return 1;
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].kind == OPT_USERNS_POOL && g->val[i] &&
		    config_userns_pool(c, g->val[i])) {
			fprintf(stderr, "thawd: --userns-pool: %s\n", log_last_error());
			return 2;
		}
	if (g->lazy >= 0)
		c->lazy = g->lazy ? CONFIG_LAZY_ON : CONFIG_LAZY_OFF;
	if (g->userns >= 0)
		c->userns_default = g->userns;
	for (size_t i = 0; i < g->nallow; i++)
		if (config_allow_root(c, g->allow[i])) {
			fprintf(stderr, "thawd: --allow-root %s: %s\n", g->allow[i],
				log_last_error());
			return 2;
		}
	return 0;
}

/* Row i's number, checked, into o or c: 0, or -EINVAL (said). */
static int apply_number(size_t i, const char *v, struct server_opts *o, struct thaw_config *c)
{
	const struct thawd_opt *r = &opts[i];
	unsigned long long n;
	char what[64];

	snprintf(what, sizeof(what), "--%s", r->name);
	if (r->kind == OPT_LOG_BYTES) {
		/* THAW_LOG_BYTES is config_init's, as thaw start reads it too. */
		if (!config_parse_bytes(v, CONFIG_LOG_BYTES_MIN, CONFIG_LOG_BYTES_MAX,
					&c->log_bytes))
			return 0;
		fprintf(stderr, "thawd: --log-bytes: \"%s\" is not a size from 4K to 1T\n", v);
		return -EINVAL;
	}
	if (parse_num(what, v, r->flags & NUM_BYTES, r->max, &n) ||
	    ((r->flags & NUM_NONZERO) && !n))
		return -EINVAL;
	switch (r->kind) {
	case OPT_UNSIGNED:
		store(o, r->off, &(unsigned){ (unsigned)n }, sizeof(unsigned));
		break;
	case OPT_SIZE:
		store(o, r->off, &(size_t){ (size_t)n }, sizeof(size_t));
		break;
	case OPT_U64:
		store(o, r->off, &(uint64_t){ n }, sizeof(uint64_t));
		break;
	case OPT_SECONDS:
		store(o, r->off, &(double){ (double)n }, sizeof(double));
		break;
	case OPT_CFG_U64:
		store(c, r->off, &(uint64_t){ n }, sizeof(uint64_t));
		break;
	default:
		break;
	}
	return 0;
}

static bool is_number(enum opt_kind k)
{
	return k == OPT_UNSIGNED || k == OPT_SIZE || k == OPT_U64 || k == OPT_SECONDS ||
	       k == OPT_CFG_U64 || k == OPT_LOG_BYTES;
}

/* How thawd restores by default under c, in words for its ready line. */
static const char *default_modes(const struct thaw_config *c, char *buf, size_t len)
{
	bool cpu = config_restores_lazily(c, false, 0, NULL, 0);
	bool gpu_alone = config_restores_lazily(c, true, 1, NULL, 0);
	bool gpu_burst = config_restores_lazily(c, true, UINT_MAX, NULL, 0);
	const char *mapped = c->mapped_min ? "mapped where it applies, else " : "";
	char rest[128];

	if (!cpu)
		snprintf(rest, sizeof(rest), "eager");
	else if (gpu_burst)
		snprintf(rest, sizeof(rest), "lazy");
	else if (!gpu_alone)
		snprintf(rest, sizeof(rest), "lazy (CPU) and eager (GPU)");
	else
		snprintf(rest, sizeof(rest),
			 "lazy (CPU; GPU while at most %d GPU start%s in flight, eager beyond)",
			 c->lazy_max_gpu_starts, c->lazy_max_gpu_starts == 1 ? " is" : "s are");
	snprintf(buf, len, "%s%s", mapped, rest);
	return buf;
}

/* The soft limit on file descriptors up to the hard one.  The default soft
 * limit (1024) is far below what a server holding one descriptor per
 * connection, more per routed request and per start needs; what thawd then
 * takes on is bounded by the limit it has (server_new: connections, routed
 * transfers and starts), so that running out never fails a start half-way
 * or passes for an instance's failure. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		pr_warn("cannot raise the file descriptor limit to %llu: %s",
			(unsigned long long)rl.rlim_max, strerror(errno));
}

/* POST /drain: drain as SIGTERM does, on the one path that takes it. */
static void drain_by_signal(void)
{
	kill(getpid(), SIGTERM);
}

int main(int argc, char **argv)
{
	struct server_opts o;
	struct thaw_config c;
	struct server *s = NULL;
	struct given g;
	char modes[256];
	sigset_t sigs;
	int sig, ret;

	/* What thawd writes (specs with their env, snapshots' memory, logs)
	 * is its own, whatever umask it was started under: every file it or
	 * its children (runc, CRIU, the shim) create is private unless it is
	 * made otherwise on purpose (docs/DESIGN.md, "Where the data lives"). */
	umask(077);
	ret = parse_args(argc, argv, &g);
	if (ret >= 0)
		return ret;
	/* A daemon that logs one line per request: info unless told otherwise. */
	if (g.level >= 0)
		log_set_level((enum log_level)g.level);
	else if (!env("THAW_LOG"))
		log_set_level(LOG_INFO);

	server_opts_default(&o);
	apply_strings(&g, &o);
	if (!o.tls_cert_file != !o.tls_key_file) {
		fprintf(stderr, "thawd: %s without %s: TLS needs both, or neither for plain HTTP\n",
			o.tls_cert_file ? "--tls-cert (THAW_TLS_CERT)" : "--tls-key (THAW_TLS_KEY)",
			o.tls_cert_file ? "--tls-key (THAW_TLS_KEY)" : "--tls-cert (THAW_TLS_CERT)");
		return 2;
	}
	if (config_init(&c, given_kind(&g, OPT_DATA_DIR))) {
		fprintf(stderr, "thawd: %s\n", log_last_error());
		return 1;
	}
	ret = apply_config(&g, &c);
	if (ret)
		return ret;
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (is_number(opts[i].kind) && g.val[i] && apply_number(i, g.val[i], &o, &c))
			return 2;

	raise_fd_limit();
	/* Before any thread exists: from here on this is the server, and the
	 * process started waits for it and reaps what it leaves (exits.h). */
	exits_start_keeper();

	/* Signals are taken by sigwait() below: blocked here, before any
	 * thread exists, so that every thread inherits the mask.  SIGHUP
	 * stops thawd as SIGTERM does (its default would end it at once,
	 * its instances left running); SIGUSR1, SIGUSR2 and SIGALRM mean
	 * nothing to thawd and are dropped, for the same reason. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGUSR2);
	sigaddset(&sigs, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	s = server_new(&c, &o);
	if (!s) {
		fprintf(stderr, "thawd: cannot start: %s\n", log_last_error());
		return 1;
	}
	if (server_start(s)) {
		fprintf(stderr, "thawd: cannot start: %s\n", log_last_error());
		server_free(s);
		return 1;
	}
	server_set_drain_hook(s, drain_by_signal);
	pr_info("ready: runc %s, criu %s, RAM tier %s (%llu bytes), max %u starts, %u snapshots, "
		"%s restores by default", c.runc, c.criu, c.ram_tier_dir,
		(unsigned long long)c.ram_tier_bytes, server_max_starts(s), o.max_snapshots,
		default_modes(&c, modes, sizeof(modes)));

	for (;;) {
		if (sigwait(&sigs, &sig))
			sig = SIGTERM;
		if (sig != SIGUSR1 && sig != SIGUSR2 && sig != SIGALRM)
			break;
		pr_info("%s: ignored", strsignal(sig));
	}
	server_drain_begin(s);
	pr_info("%s: stopping", strsignal(sig));
	/* A second signal ends thawd at once. */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	sigdelset(&sigs, SIGUSR1);
	sigdelset(&sigs, SIGUSR2);
	sigdelset(&sigs, SIGALRM);
	pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);

	server_drain(s);
	server_shutdown(s);
	server_free(s);
	pr_info("stopped");
	return 0;
}
