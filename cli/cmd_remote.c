/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_remote.c — `thaw remote`: push, pull, fetch, gc, ls between a chunk
 * store and its remote tier on an S3-compatible object store (remote/remote.h). */
#include "cli/cli.h"
#include "common/log.h"
#include "common/util.h"
#include "remote/remote.h"
#include "remote/s3.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct opts {
	const char *remote, *endpoint, *spec, *spec_out;
	int grace_s;
	bool dry_run, json;
};

static const char *cmd = "remote";

static int fail(const char *what)
{
	const char *why = log_last_error();

	fprintf(stderr, "thaw remote %s: %s%s%s\n", cmd, what, *why ? ": " : "", why);
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: thaw remote [OPTIONS] COMMAND [ARGS]\n\n"
		"A store's snapshots on an S3-compatible object store (AWS S3, Ceph RGW, MinIO...),\n"
		"content-addressed as in the store: packs of chunks with their indexes, manifests\n"
		"named by their hash, and a ref per function (its spec and current manifest)\n"
		"written last.\n\n"
		"commands:\n"
		"  push FUNCTION MANIFEST   upload the chunks of MANIFEST the remote lacks, then\n"
		"                           the manifest, then FUNCTION's ref (--spec FILE: the\n"
		"                           function's spec JSON; default {})\n"
		"  pull FUNCTION            read FUNCTION's ref, fetch its manifest and every chunk\n"
		"                           the store lacks; prints the manifest id (--spec-out\n"
		"                           FILE: write the spec there)\n"
		"  fetch MANIFEST           fetch the chunks of MANIFEST the store lacks, then the\n"
		"                           manifest; each chunk checked against its hash\n"
		"  gc [--grace S] [--dry-run]\n"
		"                           mark what no ref reaches; delete what an earlier gc\n"
		"                           marked at least S seconds ago (default %d) and that\n"
		"                           is still unreferenced and unchanged\n"
		"  ls [--json]              the functions on the remote\n\n"
		"options:\n"
		"  --store DIR        the local store (default $THAW_STORE, else <data dir>/store)\n"
		"  --remote URL       s3://BUCKET[/PREFIX] (default $THAW_REMOTE)\n"
		"  --s3-endpoint URL  an S3-compatible server, addressed path-style (default\n"
		"                     $AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com)\n\n"
		"environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else\n"
		"AWS_PROFILE (default \"default\") in AWS_SHARED_CREDENTIALS_FILE (default\n"
		"~/.aws/credentials); AWS_REGION or AWS_DEFAULT_REGION (default us-east-1).\n"
		"Keys are never printed.  push and fetch draw a progress line on a terminal.\n",
		REMOTE_GC_GRACE_S);
}

/* Options anywhere before "--"; the operands are moved to the front of argv.
 * Returns their count, or -1 after a usage error. */
static int parse(int argc, char **argv, struct opts *o)
{
	int n = 0;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (!strcmp(a, "--store") && has)
			cli_set_store_dir(argv[++i]);
		else if (!strcmp(a, "--remote") && has)
			o->remote = argv[++i];
		else if (!strcmp(a, "--s3-endpoint") && has)
			o->endpoint = argv[++i];
		else if (!strcmp(a, "--spec") && has)
			o->spec = argv[++i];
		else if (!strcmp(a, "--spec-out") && has)
			o->spec_out = argv[++i];
		else if (!strcmp(a, "--grace") && has) {
			char *end;
			long v = strtol(argv[++i], &end, 10);
			if (*end || end == argv[i] || v < 0 || v > 100L * 365 * 86400) {
				fprintf(stderr, "thaw remote: bad --grace '%s' (seconds)\n", argv[i]);
				return -1;
			}
			o->grace_s = (int)v;
		} else if (!strcmp(a, "--dry-run"))
			o->dry_run = true;
		else if (!strcmp(a, "--json"))
			o->json = true;
		else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "thaw remote: unknown option or missing value: %s\n", a);
			return -1;
		} else
			argv[n++] = argv[i];
	}
	return n;
}

struct bar {
	struct progress p;
	bool started;
	const char *label;
};

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct bar *b = arg;

	if (!b->started) {
		progress_init(&b->p, b->label, total);
		b->started = true;
	}
	b->p.total = total;
	progress_update(&b->p, done);
}

static void bar_done(struct bar *b)
{
	if (b->started)
		progress_done(&b->p);
}

static struct store *open_store(bool create)
{
	struct stat sb;
	const char *dir = cli_store_dir();

	if (!create && stat(dir, &sb) < 0) {
		fprintf(stderr, "thaw remote %s: no store at %s (--store DIR, or $THAW_STORE)\n", cmd,
			dir);
		return NULL;
	}
	struct store *s = store_open(dir);
	if (!s)
		fail("cannot open the store");
	return s;
}

static int do_push(struct remote *r, struct opts *o, int n, char **args)
{
	struct remote_push_stats st;
	struct bar b = { .label = "push" };
	char *spec = NULL, a[32], c[32];
	size_t len;
	int ret;

	if (n != 2) {
		fprintf(stderr, "usage: thaw remote push [--spec FILE] FUNCTION MANIFEST\n");
		return 2;
	}
	if (o->spec && read_file(o->spec, &spec, &len, 16u << 20) < 0) {
		fprintf(stderr, "thaw remote push: cannot read --spec %s\n", o->spec);
		return 1;
	}
	struct store *s = open_store(false);
	if (!s) {
		free(spec);
		return 1;
	}
	ret = remote_push(r, s, args[0], spec ? spec : "{}", args[1], on_progress, &b, &st);
	bar_done(&b);
	store_close(s);
	free(spec);
	if (ret)
		return fail("push failed");
	fprintf(stderr,
		"push %s: %llu of %llu chunks sent in %llu new packs, %s uploaded (the snapshot's "
		"chunks: %s); %.1f s, %.0f MB/s\n",
		args[0], (unsigned long long)st.chunks_sent, (unsigned long long)st.chunks,
		(unsigned long long)st.packs, fmt_bytes(st.bytes_sent, a),
		fmt_bytes(st.chunk_bytes, c), st.seconds,
		st.seconds > 0 ? (double)st.bytes_sent / st.seconds / 1e6 : 0);
	if (o->json)
		printf("{\"chunks\":%llu,\"chunks_sent\":%llu,\"bytes_sent\":%llu,\"chunk_bytes\":%llu,"
		       "\"packs\":%llu,\"seconds\":%.3f}\n",
		       (unsigned long long)st.chunks, (unsigned long long)st.chunks_sent,
		       (unsigned long long)st.bytes_sent, (unsigned long long)st.chunk_bytes,
		       (unsigned long long)st.packs, st.seconds);
	return 0;
}

static int fetch(struct remote *r, struct store *s, const char *id, struct opts *o)
{
	struct remote_fetch_stats st;
	struct bar b = { .label = "fetch" };
	char a[32];
	int ret = remote_fetch_missing(r, s, id, on_progress, &b, &st);

	bar_done(&b);
	if (ret)
		return fail("fetch failed");
	fprintf(stderr,
		"fetch %s: %llu of %llu chunks fetched, %s received (%llu ranges again); %.1f s, "
		"%.0f MB/s\n",
		id, (unsigned long long)st.chunks_fetched, (unsigned long long)st.chunks,
		fmt_bytes(st.bytes_fetched, a), (unsigned long long)st.retries, st.seconds,
		st.seconds > 0 ? (double)st.bytes_fetched / st.seconds / 1e6 : 0);
	if (o->json)
		printf("{\"chunks\":%llu,\"chunks_fetched\":%llu,\"bytes_fetched\":%llu,"
		       "\"retries\":%llu,\"seconds\":%.3f}\n",
		       (unsigned long long)st.chunks, (unsigned long long)st.chunks_fetched,
		       (unsigned long long)st.bytes_fetched, (unsigned long long)st.retries,
		       st.seconds);
	return 0;
}

static int do_fetch(struct remote *r, struct opts *o, int n, char **args)
{
	if (n != 1) {
		fprintf(stderr, "usage: thaw remote fetch MANIFEST\n");
		return 2;
	}
	struct store *s = open_store(true);
	if (!s)
		return 1;
	int ret = fetch(r, s, args[0], o);
	store_close(s);
	return ret;
}

static int do_pull(struct remote *r, struct opts *o, int n, char **args)
{
	char id[CHUNK_ID_LEN], *spec = NULL;
	int ret;

	if (n != 1) {
		fprintf(stderr, "usage: thaw remote pull [--spec-out FILE] FUNCTION\n");
		return 2;
	}
	if (remote_pull_ref(r, args[0], &spec, id))
		return fail("pull failed");
	struct store *s = open_store(true);
	if (!s) {
		free(spec);
		return 1;
	}
	ret = fetch(r, s, id, o);
	store_close(s);
	if (!ret && o->spec_out && write_file_atomic(o->spec_out, spec, strlen(spec), 0644) < 0)
		ret = fail("cannot write --spec-out");
	if (!ret && !o->json)
		printf("%s\n", id);
	free(spec);
	return ret;
}

static int do_gc(struct remote *r, struct opts *o, int n, char **args)
{
	struct remote_gc_stats st;
	char a[32];

	if (n != 0) {
		fprintf(stderr, "usage: thaw remote gc [--grace S] [--dry-run]\n");
		return 2;
	}
	if (remote_gc(r, o->grace_s, o->dry_run, &st))
		return fail("gc failed");
	printf("gc%s: %llu refs, %llu objects kept, %llu deleted (%s), %llu marked%s",
	       o->dry_run ? " (dry run)" : "", (unsigned long long)st.refs,
	       (unsigned long long)st.kept, (unsigned long long)st.deleted,
	       fmt_bytes(st.deleted_bytes, a), (unsigned long long)st.marked,
	       st.wait_s > 0 ? "" : "\n");
	if (st.wait_s > 0)
		printf(" by an earlier gc: they can go in %lld s\n", (long long)st.wait_s);
	return 0;
}

static int do_ls(struct remote *r, struct opts *o, int n, char **args)
{
	json_t *refs, *e;
	size_t i;

	if (n != 0) {
		fprintf(stderr, "usage: thaw remote ls [--json]\n");
		return 2;
	}
	if (remote_list_refs(r, &refs))
		return fail("cannot list the remote's functions");
	if (o->json) {
		char *out = json_dumps(refs, JSON_INDENT(2));
		printf("%s\n", out ? out : "[]");
		free(out);
	} else {
		json_array_foreach(refs, i, e) {
			json_t *when = json_object_get(e, "pushed");
			printf("%-24s %s  %s\n", json_string_value(json_object_get(e, "function")),
			       json_string_value(json_object_get(e, "manifest")),
			       json_is_string(when) ? json_string_value(when) : "");
		}
	}
	json_decref(refs);
	return 0;
}

static const struct {
	const char *name;
	int (*run)(struct remote *r, struct opts *o, int n, char **args);
} subs[] = {
	{ "push", do_push }, { "pull", do_pull }, { "fetch", do_fetch },
	{ "gc", do_gc },     { "ls", do_ls },
};

int cmd_remote(int argc, char **argv)
{
	struct opts o = { .grace_s = -1 };
	struct remote *r = NULL;
	int n, ret;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
	n = parse(argc - 1, argv + 1, &o);
	if (n < 0) {
		usage(stderr);
		return 2;
	}
	if (n == 0) {
		usage(stderr);
		return 2;
	}
	char **args = argv + 1;
	for (size_t k = 0; k < ARRAY_SIZE(subs); k++) {
		if (strcmp(args[0], subs[k].name))
			continue;
		cmd = subs[k].name;
		if (remote_open(o.remote, o.endpoint, &r))
			return fail("cannot open the remote");
		ret = subs[k].run(r, &o, n - 1, args + 1);
		remote_close(r);
		return ret;
	}
	fprintf(stderr, "thaw remote: unknown command '%s'\n", args[0]);
	usage(stderr);
	return 2;
}
