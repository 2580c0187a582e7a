/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench — load test of thawd's start path, with baselines in the same run.
 *
 * Each start: POST /functions/<id>/start, then one inference request to the
 * endpoint of the answer, checked for a correct answer, then DELETE
 * /instances/<iid>.  Start latency = the start request's arrival time → the
 * instance's first correct inference answer.  Arrivals are open loop: in
 * --rate mode the clock starts at the scheduled arrival, so a harness that
 * falls behind shows up in the latency rather than hiding it.  The starts run
 * on one thread through libcurl's multi interface; the baselines (runc run /
 * runc restore of the same function, without thawd) run after them, one at a
 * time.
 *
 * See bench/README.md for how to drive it.
 */
#include "internal.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const phase_names[NPHASES] = { "load",	    "materialize", "setup",
						  "criu_restore", "endpoint",	   "lazy_wait",
						  "gpu_restore",  "ready",	   "total" };

/* SIGINT/SIGTERM: no new starts or baseline runs; what is running finishes
 * (every request has a timeout) and everything made is cleaned up. */
volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	stop_requested = sig;
}


/* ---- failure counters -------------------------------------------------- */

void kinds_add(struct kinds *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++) {
		if (!strcmp(k->name[i], name)) {
			k->count[i]++;
			return;
		}
	}
	if (k->n == MAX_KINDS_N) {
		name = "other";
		for (size_t i = 0; i < k->n; i++) {
			if (!strcmp(k->name[i], name)) {
				k->count[i]++;
				return;
			}
		}
		k->n--; /* reuse the last slot for "other" */
	}
	snprintf(k->name[k->n], sizeof(k->name[0]), "%s", name);
	k->count[k->n++] = 1;
}

/* ---- options ----------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: thaw-bench --url URL --function ID [--token-file F] MODE\n"
		"                  --infer \"METHOD PATH [BODY]\" [--expect S | --expect-file F]\n"
		"                  [--json FILE] [--svg FILE]\n"
		"                  [--baseline-cold SPEC.json] [--baseline-plain IMAGE_DIR]\n"
		"modes:\n"
		"  --burst N [--repeat K]         N concurrent starts (K rounds, one after the other)\n"
		"  --rate R --duration S          open-loop arrivals at R/s for S seconds\n"
		"      [--arrivals poisson|fixed] [--seed N]   (default poisson, seed 1)\n"
		"  --cold-tier --cold-cmd CMD     empty the RAM tier before each round (burst)\n"
		"                                 or before the run (rate): CMD must do it, e.g.\n"
		"                                 restart thawd on an empty --ram-tier directory\n"
		"  --round-cmd CMD                run CMD (untimed) before each burst round, e.g.\n"
		"                                 wait until a standby instance is ready\n"
		"timeouts (seconds): --start-timeout 120 --infer-timeout 30 --delete-timeout 60\n"
		"  --keep        leave instances running (no DELETE)\n"
		"  --idle-stop S the scale-to-zero scenario: keep the instances (no DELETE), then\n"
		"                wait for thawd to stop each for being idle; each must end\n"
		"                \"stopped: idle\" S to S+2 s after its last use and none may be\n"
		"                left running (S: the function's idle_s; failures: exit 3)\n"
		"  --max-failures N    failed starts the run may have and still exit 0 (default 0)\n"
		"  --baseline-runs N   runs of each baseline (default 3)\n"
		"  --runc-root DIR     runc state of the baselines' containers (/run/thaw-bench);\n"
		"                      their bundles go under $TMPDIR (default /tmp)\n"
		"Start latency: arrival of the start request -> first correct inference answer.\n"
		"Exit status: 0 the run was made with at most --max-failures failed starts, 3 it\n"
		"was made with more (all reported), 1 error or interrupted (SIGINT/SIGTERM:\n"
		"what ran is reported and cleaned up).\n");
}

/* "GET /infer?x=7" or "POST /generate {json}". */
static int parse_infer(struct bench *b, const char *spec)
{
	const char *sp = strchr(spec, ' '), *path, *end;
	size_t ml = sp ? (size_t)(sp - spec) : 0;

	if (!sp || ml == 0 || ml >= sizeof(b->infer_method))
		goto bad;
	memcpy(b->infer_method, spec, ml);
	b->infer_method[ml] = '\0';
	for (size_t i = 0; i < ml; i++) {
		if (b->infer_method[i] < 'A' || b->infer_method[i] > 'Z')
			goto bad;
	}
	path = sp + 1;
	if (*path != '/')
		goto bad;
	end = strchr(path, ' ');
	b->infer_path = end ? strndup(path, (size_t)(end - path)) : strdup(path);
	b->infer_body = end && end[1] ? strdup(end + 1) : NULL;
	if (!b->infer_path || (end && end[1] && !b->infer_body))
		return -ENOMEM;
	return 0;
bad:
	pr_err("--infer wants \"METHOD /path [body]\", got \"%s\"", spec);
	return -EINVAL;
}

static int read_token(struct bench *b, const char *path)
{
	char *tok = NULL;
	size_t len = 0;
	int ret;

	ret = read_file(path, &tok, &len, 4096);
	if (ret < 0) {
		pr_err("cannot read --token-file %s: %s", path, strerror(-ret));
		return ret;
	}
	while (len && (tok[len - 1] == '\n' || tok[len - 1] == '\r' || tok[len - 1] == ' '))
		tok[--len] = '\0';
	if (!len || strpbrk(tok, "\r\n")) {
		pr_err("--token-file %s holds no single-line token", path);
		free(tok);
		return -EINVAL;
	}
	snprintf(b->auth_header, sizeof(b->auth_header), "Authorization: Bearer %s", tok);
	free(tok);
	return 0;
}

static int parse_double(const char *s, const char *opt, double *out, double min)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !isfinite(v) || v < min) {
		pr_err("%s: bad value \"%s\"", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_long(const char *s, const char *opt, long *out, long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < min) {
		pr_err("%s: bad value \"%s\" (a whole number >= %ld)", opt, s, min);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_args(struct bench *b, int argc, char **argv)
{
	enum { O_URL = 256, O_FN, O_TOKEN, O_BURST, O_REPEAT, O_RATE, O_DUR, O_ARR, O_SEED,
	       O_COLD, O_COLDCMD, O_INFER, O_EXPECT, O_EXPECTF, O_JSON, O_SVG, O_BCOLD,
	       O_BPLAIN, O_BRUNS, O_STO, O_ITO, O_DTO, O_KEEP, O_RROOT, O_HELP,
	       O_MAXF, O_ROUNDCMD, O_IDLE };
	static const struct option opts[] = {
		{ "url", 1, NULL, O_URL },	     { "function", 1, NULL, O_FN },
		{ "token-file", 1, NULL, O_TOKEN },  { "burst", 1, NULL, O_BURST },
		{ "repeat", 1, NULL, O_REPEAT },     { "rate", 1, NULL, O_RATE },
		{ "duration", 1, NULL, O_DUR },	     { "arrivals", 1, NULL, O_ARR },
		{ "seed", 1, NULL, O_SEED },	     { "cold-tier", 0, NULL, O_COLD },
		{ "cold-cmd", 1, NULL, O_COLDCMD },  { "infer", 1, NULL, O_INFER },
		{ "expect", 1, NULL, O_EXPECT },     { "expect-file", 1, NULL, O_EXPECTF },
		{ "json", 1, NULL, O_JSON },	     { "svg", 1, NULL, O_SVG },
		{ "baseline-cold", 1, NULL, O_BCOLD }, { "baseline-plain", 1, NULL, O_BPLAIN },
		{ "baseline-runs", 1, NULL, O_BRUNS }, { "start-timeout", 1, NULL, O_STO },
		{ "infer-timeout", 1, NULL, O_ITO }, { "delete-timeout", 1, NULL, O_DTO },
		{ "keep", 0, NULL, O_KEEP },	     { "max-failures", 1, NULL, O_MAXF },	     { "help", 0, NULL, O_HELP },
		{ "runc-root", 1, NULL, O_RROOT },   { "round-cmd", 1, NULL, O_ROUNDCMD },
		{ "idle-stop", 1, NULL, O_IDLE },
		{ NULL, 0, NULL, 0 },
	};
	const char *infer = NULL;
	long seed = 0;
	size_t len;
	int c, ret;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		ret = 0;
		switch (c) {
		case O_URL: b->url = optarg; break;
		case O_FN: b->function = optarg; break;
		case O_TOKEN: ret = read_token(b, optarg); break;
		case O_BURST: ret = parse_long(optarg, "--burst", &b->burst, 1); break;
		case O_REPEAT: ret = parse_long(optarg, "--repeat", &b->repeat, 1); break;
		case O_RATE: ret = parse_double(optarg, "--rate", &b->rate, 1e-6); break;
		case O_DUR: ret = parse_double(optarg, "--duration", &b->duration_s, 1e-3); break;
		case O_ARR:
			if (!strcmp(optarg, "poisson") || !strcmp(optarg, "fixed")) {
				b->poisson = !strcmp(optarg, "poisson");
			} else {
				pr_err("--arrivals is poisson or fixed");
				ret = -EINVAL;
			}
			break;
		case O_SEED:
			ret = parse_long(optarg, "--seed", &seed, 0);
			b->seed = (uint64_t)seed;
			break;
		case O_COLD: b->cold_tier = true; break;
		case O_COLDCMD: b->cold_cmd = optarg; break;
		case O_ROUNDCMD: b->round_cmd = optarg; break;
		case O_INFER: infer = optarg; break;
		case O_EXPECT:
			free(b->expect);
			b->expect = strdup(optarg);
			b->expect_len = strlen(optarg);
			break;
		case O_EXPECTF:
			free(b->expect);
			b->expect = NULL;
			ret = read_file(optarg, &b->expect, &len, 1 << 20);
			if (ret < 0) {
				pr_err("cannot read --expect-file %s: %s", optarg, strerror(-ret));
				break;
			}
			/* A trailing newline of the file is not part of the answer. */
			while (len && (b->expect[len - 1] == '\n' || b->expect[len - 1] == '\r'))
				b->expect[--len] = '\0';
			b->expect_len = len;
			break;
		case O_JSON: b->json_path = optarg; break;
		case O_SVG: b->svg_path = optarg; break;
		case O_BCOLD: b->baseline_cold_spec = optarg; break;
		case O_BPLAIN: b->baseline_plain_image = optarg; break;
		case O_BRUNS: ret = parse_long(optarg, "--baseline-runs", &b->baseline_runs, 1); break;
		case O_MAXF: ret = parse_long(optarg, "--max-failures", &b->max_failures, 0); break;
		case O_STO: ret = parse_double(optarg, "--start-timeout", &b->start_timeout_s, 0.001); break;
		case O_ITO: ret = parse_double(optarg, "--infer-timeout", &b->infer_timeout_s, 0.001); break;
		case O_DTO: ret = parse_double(optarg, "--delete-timeout", &b->delete_timeout_s, 0.001); break;
		case O_KEEP: b->keep_instances = true; break;
		case O_IDLE:
			ret = parse_double(optarg, "--idle-stop", &b->idle_stop_s, 0.001);
			b->keep_instances = true;
			break;
		case O_RROOT: b->runc_root = optarg; break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
		if (ret < 0)
			return ret;
	}
	if (optind < argc) {
		pr_err("unexpected argument \"%s\"", argv[optind]);
		return -EINVAL;
	}
	if (!b->function || !id_valid(b->function)) {
		pr_err("--function ID is required ([a-z0-9][a-z0-9._-]{0,62})");
		return -EINVAL;
	}
	if (strncmp(b->url, "http://", 7) && strncmp(b->url, "https://", 8)) {
		pr_err("--url must start with http:// or https://");
		return -EINVAL;
	}
	if ((b->burst > 0) == (b->rate > 0)) {
		pr_err("choose one mode: --burst N, or --rate R --duration S");
		return -EINVAL;
	}
	if (b->rate > 0 && !(b->duration_s > 0)) {
		pr_err("--rate needs --duration S");
		return -EINVAL;
	}
	if (b->cold_tier && !b->cold_cmd) {
		pr_err("--cold-tier needs --cold-cmd CMD to empty the RAM tier (thawd has no "
		       "endpoint for it): see bench/README.md");
		return -EINVAL;
	}
	if (!infer) {
		pr_err("--infer \"METHOD /path [body]\" is required: a start counts once the "
		       "instance answers it");
		return -EINVAL;
	}
	if (b->expect && !b->expect_len) {
		pr_err("--expect: an empty answer cannot tell right from wrong");
		return -EINVAL;
	}
	b->cold.requested = b->baseline_cold_spec != NULL;
	b->plain.requested = b->baseline_plain_image != NULL;
	return parse_infer(b, infer);
}

int main(int argc, char **argv)
{
	struct bench b = {
		.url = "http://127.0.0.1:8080",
		.start_timeout_s = 120,
		.infer_timeout_s = 30,
		.delete_timeout_s = 60,
		.repeat = 1,
		.poisson = true,
		.seed = 1,
		.baseline_runs = 3,
		.runc_root = "/run/thaw-bench",
		.cold = { .name = "baseline: cold boot" },
		.plain = { .name = "baseline: plain restore" },
	};
	size_t ul;
	int ret, rc = 1;

	stats_init(&b.latency);
	stats_init(&b.answer);
	stats_init(&b.cold.lat);
	stats_init(&b.plain.lat);
	for (int i = 0; i < NPHASES; i++)
		stats_init(&b.phase[i]);
	if (parse_args(&b, argc, argv) < 0)
		goto out_free;
	/* "http://host:8080/" and "http://host:8080" mean the same. */
	ul = strlen(b.url);
	while (ul > 8 && b.url[ul - 1] == '/')
		ul--;
	b.url = strndup(b.url, ul);
	if (!b.url)
		goto out_free;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		pr_err("curl_global_init failed");
		goto out_free;
	}
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	b.multi = curl_multi_init();
	if (!b.multi) {
		pr_err("curl_multi_init failed");
		goto out_curl;
	}
	ret = run_thaw(&b);
	if (ret < 0) {
		fprintf(stderr, "thaw-bench: the run stopped: %s\n",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		goto out_multi;
	}
	run_baselines(&b);
	print_table(&b);
	if (b.json_path && write_json(&b) < 0) {
		fprintf(stderr, "thaw-bench: cannot write %s\n", b.json_path);
		goto out_multi;
	}
	if (b.svg_path && write_svg(&b) < 0) {
		fprintf(stderr, "thaw-bench: cannot write %s\n", b.svg_path);
		goto out_multi;
	}
	if (stop_requested) {
		fprintf(stderr, "thaw-bench: interrupted by signal %d; the report covers what ran\n",
			(int)stop_requested);
		goto out_multi;
	}
	if ((long)(b.attempts - b.ok) > b.max_failures) {
		fprintf(stderr, "thaw-bench: %llu of %llu starts failed (--max-failures %ld)\n",
			(unsigned long long)(b.attempts - b.ok), (unsigned long long)b.attempts,
			b.max_failures);
		rc = 3;
		goto out_multi;
	}
	if (b.idle_stop_s > 0 && (b.idle_failures.n || b.idle_left)) {
		fprintf(stderr, "thaw-bench: %zu of %zu instance(s) not stopped on time for being "
			"idle, %ld left running\n", b.nidle - (size_t)b.idle_on_time, b.nidle,
			b.idle_left);
		rc = 3;
		goto out_multi;
	}
	rc = 0;
out_multi:
	curl_multi_cleanup(b.multi);
out_curl:
	curl_global_cleanup();
	free((char *)b.url);
	b.url = NULL;
out_free:
	stats_release(&b.latency);
	stats_release(&b.answer);
	stats_release(&b.idle_lateness);
	free(b.idle);
	stats_release(&b.cold.lat);
	stats_release(&b.plain.lat);
	for (int i = 0; i < NPHASES; i++)
		stats_release(&b.phase[i]);
	free(b.infer_path);
	free(b.infer_body);
	free(b.expect);
	return rc;
}
