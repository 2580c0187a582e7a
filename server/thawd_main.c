/* SPDX-License-Identifier: Apache-2.0 */
/* thawd_main.c — the thawd program: options, signals, the server. */
#define LOG_PREFIX "thawd: "
#include "common/config.h"
#include "common/log.h"
#include "server/exits.h"
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: thawd [OPTIONS]\n"
		"\n"
		"thawd serves thaw's HTTP API (see docs/API.md): register functions, snapshot\n"
		"them, start instances restored from their snapshots.\n"
		"\n"
		"options (each also read from the environment variable shown):\n"
		"  --listen HOST:PORT     address to listen on (THAW_LISTEN; default %s;\n"
		"                         port 0 picks a free one, see --port-file)\n"
		"  --data-dir DIR         functions/, store/, instances/ live here\n"
		"                         (THAW_DATA_DIR; default /var/lib/thaw)\n"
		"  --ram-tier DIR         RAM tier of materialised snapshots\n"
		"                         (THAW_RAM_TIER; default /dev/shm/thaw, made its own\n"
		"                         huge-page tmpfs where possible: THAW_TIER_HUGE=auto|1|0)\n"
		"  --ram-tier-bytes N     its byte budget; K, M, G, T suffixes are binary\n"
		"                         (THAW_RAM_TIER_BYTES; default half of /dev/shm)\n"
		"  --token-file FILE      ask every request but GET /healthz for\n"
		"                         \"Authorization: Bearer <the file's first line>\"\n"
		"                         (THAW_TOKEN_FILE; default: no token). Without any\n"
		"                         token thawd listens only on loopback (127.0.0.0/8,\n"
		"                         ::1, localhost) and refuses a Host header that is\n"
		"                         not a loopback name (403)\n"
		"  --control-token-file FILE\n"
		"                         a token for functions, snapshots and jobs only\n"
		"                         (THAW_CONTROL_TOKEN_FILE)\n"
		"  --data-token-file FILE a token for starts and instances only, e.g. for a\n"
		"                         gateway; on another route it gets 403\n"
		"                         (THAW_DATA_TOKEN_FILE). /metrics takes any token\n"
		"  --tls-cert FILE        serve HTTPS (libmicrohttpd's TLS, GnuTLS) with the PEM\n"
		"                         certificate in FILE, the server's first, then any\n"
		"                         intermediates (THAW_TLS_CERT; default: plain HTTP)\n"
		"  --tls-key FILE         its PEM private key, unencrypted (THAW_TLS_KEY); a\n"
		"                         key file every user can read is warned about.\n"
		"                         Both or neither (else exit 2); a file that cannot\n"
		"                         be read, is not PEM, or a key that is not the\n"
		"                         certificate's makes thawd exit 1 before it touches\n"
		"                         the data directory. Plain HTTP to the port fails.\n"
		"                         TLS is no token: off loopback one is still needed\n"
		"  --remote s3://BUCKET[/PREFIX]\n"
		"                         share snapshots with a fleet through an S3-compatible\n"
		"                         object store (THAW_REMOTE): each snapshot is pushed\n"
		"                         in the background (only the chunks it lacks);\n"
		"                         POST /functions/<id>/pull registers one from it.\n"
		"                         Keys as the AWS tools find them: AWS_ACCESS_KEY_ID,\n"
		"                         AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else\n"
		"                         AWS_PROFILE in ~/.aws/credentials; AWS_REGION\n"
		"  --s3-endpoint URL      an S3-compatible server other than AWS (Ceph RGW,\n"
		"                         MinIO, R2...), addressed path-style\n"
		"                         (AWS_ENDPOINT_URL)\n"
		"  --runc PATH            runc binary (THAW_RUNC; default runc on PATH)\n"
		"  --registry-auth FILE   a containers auth file (auth.json: docker login,\n"
		"                         podman login) with the credentials a spec's \"image\"\n"
		"                         is pulled with (THAW_REGISTRY_AUTH; skopeo --authfile)\n"
		"  --criu PATH            criu >= 4.2 for runc --criu (THAW_CRIU; default the\n"
		"                         .deps/criu-wrapper of the tree, else criu on PATH)\n"
		"  THAW_MAPPED=1|0        restore by mapping (default 1): an instance maps its\n"
		"                         snapshot's memory files in the RAM tier, one copy\n"
		"                         for every instance, instead of copying the pages in;\n"
		"                         mappings under THAW_MAPPED_MIN_KIB (default 1024) of\n"
		"                         pages are copied; where mapping does not apply (memory\n"
		"                         a forked child shares, a snapshot from before it, a\n"
		"                         spec's \"lazy\"), the start's answer says why in\n"
		"                         \"pages_why\" and --lazy/--no-lazy decide\n"
		"  --allow-root DIR       a function's \"bundle\" and \"cwd\" may lie under DIR\n"
		"                         (repeatable; THAW_ALLOW_ROOTS=DIR:DIR); always allowed:\n"
		"                         the data directory and the tree's bench/functions;\n"
		"                         a spec naming any other directory is 403 forbidden\n"
		"  --lazy, --no-lazy      where mapping does not apply: restore pages on demand\n"
		"                         (a lazy-pages daemon serves them from the RAM tier) or\n"
		"                         all before the start answers, for functions whose\n"
		"                         spec has no \"lazy\"\n"
		"                         (THAW_LAZY=1|0|auto; default auto: lazily, but a GPU\n"
		"                         function eagerly when THAW_LAZY_DAEMON=criu, whose\n"
		"                         single-threaded daemon makes the CUDA restore slower,\n"
		"                         or in a burst, when more than THAW_LAZY_MAX_GPU_STARTS\n"
		"                         GPU starts, this one included, are in flight (default\n"
		"                         1; 0: GPU functions always eagerly; -1: no limit);\n"
		"                         THAW_LAZY_GPU_AFTER_FILL=1: a lazy GPU start waits\n"
		"                         until every page is in before the CUDA restore)\n"
		"  --max-starts N         concurrent starts; more answer 503 with Retry-After\n"
		"                         (THAW_MAX_STARTS; default %u; 0 refuses every start)\n"
		"  --max-snapshots N      concurrent snapshots, likewise (THAW_MAX_SNAPSHOTS;\n"
		"                         default %u)\n"
		"  --idle-s S             stop an instance after S seconds with no request\n"
		"                         through its endpoint, unless its function's spec\n"
		"                         says otherwise (\"idle_s\"; THAW_IDLE_S; default 0: never)\n"
		"  --gpu-mem-reserve BYTES\n"
		"                         a GPU function's start that would leave its GPU less\n"
		"                         free memory than this (NVML's figure, less the\n"
		"                         snapshot's recorded GPU usage) answers 503\n"
		"                         no_gpu_memory before restoring anything\n"
		"                         (THAW_GPU_MEM_RESERVE; default 0: only a start whose\n"
		"                         GPU state does not fit at all)\n"
		"  --keep-ended S         an instance that ended (stopped, idle, exited) stays\n"
		"                         listed (GET /instances/<id>, ?all=1) with how it ended,\n"
		"                         and its output readable, for S seconds\n"
		"                         (THAW_KEEP_ENDED_S; default %u; 0: removed at once)\n"
		"  --mem-reserve BYTES    a start that could leave the host less available memory\n"
		"                         (MemAvailable, less its snapshot's image size) answers\n"
		"                         503 before restoring anything (THAW_MEM_RESERVE;\n"
		"                         default 0: no check)\n"
		"  --max-standby N        standby instances (a spec's \"standby\") of all\n"
		"                         functions together (THAW_MAX_STANDBY; default %u;\n"
		"                         0: none)\n"
		"  --max-body BYTES       larger request bodies answer 413 (THAW_MAX_BODY;\n"
		"                         default %u)\n"
		"  --log-bytes BYTES      an instance's function.log (its stdout and stderr)\n"
		"                         and a snapshot's boot output are rotated at this size:\n"
		"                         at most twice as much is kept; K, M, G suffixes\n"
		"                         (THAW_LOG_BYTES, also for thaw start; default 1M,\n"
		"                         at least 4K)\n"
		"  --max-connections N    concurrent connections (THAW_MAX_CONNECTIONS;\n"
		"                         default %u)\n"
		"  --max-connections-per-ip N\n"
		"                         concurrent connections from one client address;\n"
		"                         more are closed at once (THAW_MAX_CONNECTIONS_PER_IP;\n"
		"                         default %u; 0: no limit, e.g. behind a proxy that\n"
		"                         limits its clients itself)\n"
		"  --request-timeout S    seconds a connection has to send a whole request,\n"
		"                         head and body, from its opening or from its previous\n"
		"                         answer; a slower one is closed, however steadily it\n"
		"                         sends (THAW_REQUEST_TIMEOUT; default %u, 1 to 86400).\n"
		"                         The request's processing (a start, a snapshot with\n"
		"                         ?wait=1) does not count\n"
		"  --port-file FILE       write the port listened on into FILE once listening\n"
		"                         (with TLS, a second line: https)\n"
		"                         (another program listening on the address, a second\n"
		"                         thawd included, makes thawd exit 1: no port sharing)\n"
		"  -v, --verbose          debug logging (THAW_LOG=debug|info|warn|err)\n"
		"  -q, --quiet            warnings and errors only (no line per request)\n"
		"  -h, --help             this help\n"
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
		"server does; killing it kills the server too.\n"
		"\n"
		"Stopping: on SIGTERM or SIGINT thawd stops accepting connections, answers\n"
		"503 to new work on open ones, waits for the starts and snapshots that are\n"
		"running to finish, then stops every instance it started and exits 0.  A\n"
		"second signal ends it at once; so does kill -9.  Either way, the next thawd\n"
		"on the same data directory reports the instances it finds recorded as lost\n"
		"and stops them, marks snapshots that were building as failed (\"thawd\n"
		"restarted during the snapshot\"), removes what they left (container,\n"
		"namespace, work directory) and garbage-collects the store.\n",
		SERVER_DEFAULT_LISTEN, SERVER_DEFAULT_MAX_STARTS, SERVER_DEFAULT_MAX_SNAPSHOTS,
		SERVER_DEFAULT_KEEP_ENDED_S, SERVER_DEFAULT_MAX_STANDBY, SERVER_DEFAULT_MAX_BODY, SERVER_DEFAULT_MAX_CONNS, SERVER_DEFAULT_MAX_CONNS_PER_IP,
		SERVER_DEFAULT_REQUEST_TIMEOUT);
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

enum {
	OPT_LISTEN = 256,
	OPT_DATA_DIR,
	OPT_RAM_TIER,
	OPT_RAM_TIER_BYTES,
	OPT_TOKEN_FILE,
	OPT_CONTROL_TOKEN_FILE,
	OPT_DATA_TOKEN_FILE,
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_RUNC,
	OPT_REGISTRY_AUTH,
	OPT_CRIU,
	OPT_MAX_STARTS,
	OPT_MAX_STANDBY,
	OPT_IDLE_S,
	OPT_MEM_RESERVE,
	OPT_KEEP_ENDED,
	OPT_GPU_MEM_RESERVE,
	OPT_REMOTE,
	OPT_S3_ENDPOINT,
	OPT_MAX_SNAPSHOTS,
	OPT_MAX_BODY,
	OPT_LOG_BYTES,
	OPT_MAX_CONNS,
	OPT_MAX_CONNS_PER_IP,
	OPT_REQUEST_TIMEOUT,
	OPT_PORT_FILE,
	OPT_LAZY,
	OPT_NO_LAZY,
	OPT_ALLOW_ROOT,
};

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

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "data-dir", required_argument, NULL, OPT_DATA_DIR },
		{ "ram-tier", required_argument, NULL, OPT_RAM_TIER },
		{ "ram-tier-bytes", required_argument, NULL, OPT_RAM_TIER_BYTES },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "control-token-file", required_argument, NULL, OPT_CONTROL_TOKEN_FILE },
		{ "data-token-file", required_argument, NULL, OPT_DATA_TOKEN_FILE },
		{ "tls-cert", required_argument, NULL, OPT_TLS_CERT },
		{ "tls-key", required_argument, NULL, OPT_TLS_KEY },
		{ "runc", required_argument, NULL, OPT_RUNC },
		{ "registry-auth", required_argument, NULL, OPT_REGISTRY_AUTH },
		{ "criu", required_argument, NULL, OPT_CRIU },
		{ "max-starts", required_argument, NULL, OPT_MAX_STARTS },
		{ "max-standby", required_argument, NULL, OPT_MAX_STANDBY },
		{ "idle-s", required_argument, NULL, OPT_IDLE_S },
		{ "mem-reserve", required_argument, NULL, OPT_MEM_RESERVE },
		{ "keep-ended", required_argument, NULL, OPT_KEEP_ENDED },
		{ "gpu-mem-reserve", required_argument, NULL, OPT_GPU_MEM_RESERVE },
		{ "remote", required_argument, NULL, OPT_REMOTE },
		{ "s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },
		{ "max-snapshots", required_argument, NULL, OPT_MAX_SNAPSHOTS },
		{ "max-body", required_argument, NULL, OPT_MAX_BODY },
		{ "log-bytes", required_argument, NULL, OPT_LOG_BYTES },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONNS },
		{ "max-connections-per-ip", required_argument, NULL, OPT_MAX_CONNS_PER_IP },
		{ "request-timeout", required_argument, NULL, OPT_REQUEST_TIMEOUT },
		{ "port-file", required_argument, NULL, OPT_PORT_FILE },
		{ "lazy", no_argument, NULL, OPT_LAZY },
		{ "allow-root", required_argument, NULL, OPT_ALLOW_ROOT },
		{ "no-lazy", no_argument, NULL, OPT_NO_LAZY },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *data_dir = NULL, *ram_tier = NULL, *ram_bytes = NULL, *runc = NULL;
	const char *criu = NULL, *max_starts = NULL, *max_snaps = NULL, *max_body = NULL;
	const char *max_conns = NULL, *listen_addr = NULL, *max_per_ip = NULL;
	const char *log_bytes = NULL;
	const char *req_timeout = NULL, *max_standby = NULL, *idle_s = NULL, *mem_reserve = NULL;
	const char *keep_ended = NULL, *gpu_mem_reserve = NULL, *registry_auth = NULL;
	struct server_opts o;
	struct thaw_config c;
	struct server *s = NULL;
	unsigned long long n;
	char modes[256];
	sigset_t sigs;
	int opt, sig, level = -1, lazy = -1;
	const char *allow[CONFIG_MAX_ROOTS];
	size_t nallow = 0;

	server_opts_default(&o);
	while ((opt = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_LISTEN: listen_addr = optarg; break;
		case OPT_ALLOW_ROOT:
			if (nallow == CONFIG_MAX_ROOTS) {
				fprintf(stderr, "thawd: more than %d --allow-root\n", CONFIG_MAX_ROOTS);
				return 2;
			}
			allow[nallow++] = optarg;
			break;
		case OPT_DATA_DIR: data_dir = optarg; break;
		case OPT_RAM_TIER: ram_tier = optarg; break;
		case OPT_RAM_TIER_BYTES: ram_bytes = optarg; break;
		case OPT_TOKEN_FILE: o.token_file = optarg; break;
		case OPT_CONTROL_TOKEN_FILE: o.control_token_file = optarg; break;
		case OPT_DATA_TOKEN_FILE: o.data_token_file = optarg; break;
		case OPT_TLS_CERT: o.tls_cert_file = optarg; break;
		case OPT_TLS_KEY: o.tls_key_file = optarg; break;
		case OPT_RUNC: runc = optarg; break;
		case OPT_REGISTRY_AUTH: registry_auth = optarg; break;
		case OPT_CRIU: criu = optarg; break;
		case OPT_MAX_STARTS: max_starts = optarg; break;
		case OPT_MAX_STANDBY: max_standby = optarg; break;
		case OPT_IDLE_S: idle_s = optarg; break;
		case OPT_MEM_RESERVE: mem_reserve = optarg; break;
		case OPT_KEEP_ENDED: keep_ended = optarg; break;
		case OPT_GPU_MEM_RESERVE: gpu_mem_reserve = optarg; break;
		case OPT_REMOTE: o.remote_url = optarg; break;
		case OPT_S3_ENDPOINT: o.s3_endpoint = optarg; break;
		case OPT_MAX_SNAPSHOTS: max_snaps = optarg; break;
		case OPT_MAX_BODY: max_body = optarg; break;
		case OPT_LOG_BYTES: log_bytes = optarg; break;
		case OPT_MAX_CONNS: max_conns = optarg; break;
		case OPT_MAX_CONNS_PER_IP: max_per_ip = optarg; break;
		case OPT_REQUEST_TIMEOUT: req_timeout = optarg; break;
		case OPT_PORT_FILE: o.port_file = optarg; break;
		case OPT_LAZY: lazy = 1; break;
		case OPT_NO_LAZY: lazy = 0; break;
		case 'v': level = LOG_DEBUG; break;
		case 'q': level = LOG_WARN; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "thawd: unexpected argument %s\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	/* A daemon that logs one line per request: info unless told otherwise. */
	if (level >= 0)
		log_set_level((enum log_level)level);
	else if (!env("THAW_LOG"))
		log_set_level(LOG_INFO);

	/* Flags win over the environment, which wins over the defaults. */
	if (!listen_addr)
		listen_addr = env("THAW_LISTEN") ? env("THAW_LISTEN") : SERVER_DEFAULT_LISTEN;
	o.listen = listen_addr;
	if (!o.token_file)
		o.token_file = env("THAW_TOKEN_FILE");
	if (!o.control_token_file)
		o.control_token_file = env("THAW_CONTROL_TOKEN_FILE");
	if (!o.data_token_file)
		o.data_token_file = env("THAW_DATA_TOKEN_FILE");
	if (!o.tls_cert_file)
		o.tls_cert_file = env("THAW_TLS_CERT");
	if (!o.tls_key_file)
		o.tls_key_file = env("THAW_TLS_KEY");
	if (!o.tls_cert_file != !o.tls_key_file) {
		fprintf(stderr, "thawd: %s without %s: TLS needs both, or neither for plain HTTP\n",
			o.tls_cert_file ? "--tls-cert (THAW_TLS_CERT)" : "--tls-key (THAW_TLS_KEY)",
			o.tls_cert_file ? "--tls-key (THAW_TLS_KEY)" : "--tls-cert (THAW_TLS_CERT)");
		return 2;
	}
	if (!max_starts)
		max_starts = env("THAW_MAX_STARTS");
	if (!max_snaps)
		max_snaps = env("THAW_MAX_SNAPSHOTS");
	if (!max_standby)
		max_standby = env("THAW_MAX_STANDBY");
	if (!idle_s)
		idle_s = env("THAW_IDLE_S");
	if (!mem_reserve)
		mem_reserve = env("THAW_MEM_RESERVE");
	if (!keep_ended)
		keep_ended = env("THAW_KEEP_ENDED_S");
	if (!gpu_mem_reserve)
		gpu_mem_reserve = env("THAW_GPU_MEM_RESERVE");
	if (!o.remote_url)
		o.remote_url = env("THAW_REMOTE");
	if (!max_body)
		max_body = env("THAW_MAX_BODY");
	if (!max_conns)
		max_conns = env("THAW_MAX_CONNECTIONS");
	if (!max_per_ip)
		max_per_ip = env("THAW_MAX_CONNECTIONS_PER_IP");
	if (!req_timeout)
		req_timeout = env("THAW_REQUEST_TIMEOUT");

	if (config_init(&c, data_dir)) {
		fprintf(stderr, "thawd: %s\n", log_last_error());
		return 1;
	}
	if (ram_tier && set_path(c.ram_tier_dir, ram_tier, "--ram-tier"))
		return 2;
	if (runc && set_path(c.runc, runc, "--runc"))
		return 2;
	if (criu && set_path(c.criu, criu, "--criu"))
		return 2;
	if (registry_auth && set_path(c.registry_auth, registry_auth, "--registry-auth"))
		return 2;
	if (check_registry_auth(c.registry_auth))
		return 1;
	if (lazy >= 0)
		c.lazy = lazy ? CONFIG_LAZY_ON : CONFIG_LAZY_OFF;
	for (size_t i = 0; i < nallow; i++)
		if (config_allow_root(&c, allow[i])) {
			fprintf(stderr, "thawd: --allow-root %s: %s\n", allow[i], log_last_error());
			return 2;
		}
	if (ram_bytes) {
		if (parse_num("--ram-tier-bytes", ram_bytes, true, UINT64_MAX, &n) || !n)
			return 2;
		c.ram_tier_bytes = n;
	}
	if (max_starts) {
		if (parse_num("--max-starts", max_starts, false, 100000, &n))
			return 2;
		o.max_starts = (unsigned)n;
	}
	if (mem_reserve) {
		if (parse_num("--mem-reserve", mem_reserve, true, 1ull << 50, &n))
			return 2;
		o.mem_reserve = n;
	}
	if (idle_s) {
		if (parse_num("--idle-s", idle_s, false, 365ull * 86400, &n))
			return 2;
		o.idle_s = (double)n;
	}
	if (gpu_mem_reserve) {
		if (parse_num("--gpu-mem-reserve", gpu_mem_reserve, true, 1ull << 50, &n))
			return 2;
		o.gpu_mem_reserve = n;
	}
	if (keep_ended) {
		if (parse_num("--keep-ended", keep_ended, false, 30 * 86400, &n))
			return 2;
		o.keep_ended_s = (unsigned)n;
	}
	if (max_standby) {
		if (parse_num("--max-standby", max_standby, false, 4096, &n))
			return 2;
		o.max_standby = (unsigned)n;
	}
	if (max_snaps) {
		if (parse_num("--max-snapshots", max_snaps, false, 1000, &n))
			return 2;
		o.max_snapshots = (unsigned)n;
	}
	if (max_body) {
		if (parse_num("--max-body", max_body, true, 1ull << 30, &n) || !n)
			return 2;
		o.max_body = (size_t)n;
	}
	/* THAW_LOG_BYTES is config_init's, as thaw start reads it too. */
	if (log_bytes && config_parse_bytes(log_bytes, CONFIG_LOG_BYTES_MIN, CONFIG_LOG_BYTES_MAX,
					    &c.log_bytes)) {
		fprintf(stderr, "thawd: --log-bytes: \"%s\" is not a size from 4K to 1T\n",
			log_bytes);
		return 2;
	}
	if (max_conns) {
		if (parse_num("--max-connections", max_conns, false, 65536, &n) || !n)
			return 2;
		o.max_conns = (unsigned)n;
	}
	if (max_per_ip) {
		if (parse_num("--max-connections-per-ip", max_per_ip, false, 65536, &n))
			return 2;
		o.max_conns_per_ip = (unsigned)n;
	}
	if (req_timeout) {
		if (parse_num("--request-timeout", req_timeout, false, 86400, &n) || !n)
			return 2;
		o.request_timeout = (unsigned)n;
	}

	/* Before any thread exists: from here on this is the server, and the
	 * process started waits for it and reaps what it leaves (exits.h). */
	exits_start_keeper();

	/* Signals are taken by sigwait() below: blocked here, before any
	 * thread exists, so that every thread inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
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
	pr_info("ready: runc %s, criu %s, RAM tier %s (%llu bytes), max %u starts, %u snapshots, "
		"%s restores by default", c.runc, c.criu, c.ram_tier_dir,
		(unsigned long long)c.ram_tier_bytes, o.max_starts, o.max_snapshots,
		default_modes(&c, modes, sizeof(modes)));

	if (sigwait(&sigs, &sig) == 0)
		pr_info("%s: stopping", strsignal(sig));
	/* A second signal ends thawd at once. */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);

	server_shutdown(s);
	server_free(s);
	pr_info("stopped");
	return 0;
}
