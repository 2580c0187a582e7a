/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_store.c — `thaw store`: put, get, ls, stat, verify, gc, rm on a chunk store. */
#include "cli/cli.h"
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sub {
	const char *name;
	int (*run)(struct store *s, int argc, char **argv);
	const char *usage;
	const char *help;
	bool creates; /* may create the store; the others need one that exists */
};

static const struct sub *current;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "thaw store %s: ", current->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: thaw store [--store DIR] %s %s\n", current->name, current->usage);
	return 2;
}

static int fail(const char *what)
{
	const char *why = log_last_error();

	fprintf(stderr, "thaw store %s: %s%s%s\n", current->name, what, *why ? ": " : "", why);
	return 1;
}

/* Options of a subcommand: --json, or one taking a value; returns the index of
 * the first operand, or -1 after printing a usage error. */
static int parse_opts(int argc, char **argv, bool *json, const char **name, const char **meta)
{
	int i = 1;

	for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (json && !strcmp(argv[i], "--json")) {
			*json = true;
		} else if (name && !strcmp(argv[i], "--name") && i + 1 < argc) {
			*name = argv[++i];
		} else if (meta && !strcmp(argv[i], "--meta") && i + 1 < argc) {
			*meta = argv[++i];
		} else {
			usage_error("unknown option or missing value: %s", argv[i]);
			return -1;
		}
	}
	return i;
}

static int do_put(struct store *s, int argc, char **argv)
{
	const char *name = NULL, *meta_s = NULL;
	struct store_put_stats st;
	char id[CHUNK_ID_LEN], a[32], b[32], c[32], d[32], e[32];
	json_t *meta = NULL;
	json_error_t jerr;
	int i = parse_opts(argc, argv, NULL, &name, &meta_s), ret;

	if (i < 0)
		return 2;
	if (!name)
		return usage_error("%s", "--name NAME is required");
	if (i >= argc)
		return usage_error("%s", "no FILE given");
	if (meta_s) {
		meta = json_loads(meta_s, 0, &jerr);
		if (!json_is_object(meta)) {
			json_decref(meta);
			return usage_error("--meta is not a JSON object: %s",
					   meta ? "another JSON value" : jerr.text);
		}
	}
	uint64_t t0 = now_ns();
	ret = store_put(s, name, (const char *const *)argv + i, (size_t)(argc - i), meta, true, id,
			&st);
	json_decref(meta);
	if (ret < 0)
		return fail("put failed");
	double ms = ms_since(t0);
	printf("%s\n", id);
	fprintf(stderr,
		"put %s: %s in %llu chunks, %s in holes; %s new (%s on disk), %s already "
		"stored; %.0f ms, %.0f MB/s\n",
		name, fmt_bytes(st.logical_bytes, a), (unsigned long long)st.chunks,
		fmt_bytes(st.zero_bytes, b), fmt_bytes(st.new_bytes, c),
		fmt_bytes(st.new_stored, d), fmt_bytes(st.dup_bytes, e), ms,
		ms > 0 ? (double)st.logical_bytes / ms / 1e3 : 0);
	return 0;
}

static int do_get(struct store *s, int argc, char **argv)
{
	int i = parse_opts(argc, argv, NULL, NULL, NULL);

	if (i < 0)
		return 2;
	if (argc - i != 2)
		return usage_error("%s", "expected ID OUTDIR");
	if (store_get(s, argv[i], argv[i + 1], true) < 0)
		return fail("get failed");
	return 0;
}

static int do_ls(struct store *s, int argc, char **argv)
{
	bool json = false;
	json_t *list = NULL, *e;
	size_t k;
	int i = parse_opts(argc, argv, &json, NULL, NULL);

	if (i < 0)
		return 2;
	if (i != argc)
		return usage_error("unexpected argument %s", argv[i]);
	if (store_list(s, &list) < 0)
		return fail("cannot list manifests");
	if (json) {
		char *out = json_dumps(list, JSON_INDENT(2));
		printf("%s\n", out ? out : "[]");
		free(out);
	} else {
		printf("%-19s  %-20s  %-24s  %5s  %10s\n", "ID", "CREATED", "NAME", "FILES",
		       "SIZE");
		json_array_foreach(list, k, e)
		{
			char b[32];
			printf("%.19s  %-20s  %-24s  %5lld  %10s\n",
			       json_string_value(json_object_get(e, "id")) + 7,
			       json_string_value(json_object_get(e, "created")),
			       json_string_value(json_object_get(e, "name")),
			       (long long)json_integer_value(json_object_get(e, "files")),
			       fmt_bytes((uint64_t)json_integer_value(
					     json_object_get(e, "logical_bytes")),
					 b));
		}
	}
	json_decref(list);
	return 0;
}

static int do_stat(struct store *s, int argc, char **argv)
{
	struct store_stats st;
	bool json = false;
	char a[32];
	int i = parse_opts(argc, argv, &json, NULL, NULL);

	if (i < 0)
		return 2;
	if (i != argc)
		return usage_error("unexpected argument %s", argv[i]);
	if (store_stat(s, &st) < 0)
		return fail("cannot read the store");
	if (json) {
		printf("{\"logical_bytes\":%llu,\"unique_bytes\":%llu,\"stored_bytes\":%llu,"
		       "\"zero_bytes\":%llu,\"chunks\":%llu}\n",
		       (unsigned long long)st.logical_bytes, (unsigned long long)st.unique_bytes,
		       (unsigned long long)st.stored_bytes, (unsigned long long)st.zero_bytes,
		       (unsigned long long)st.chunks);
		return 0;
	}
	printf("store          %s\n", store_path(s));
	printf("manifests      %llu\n", (unsigned long long)st.manifests);
	printf("chunks         %llu\n", (unsigned long long)st.chunks);
	printf("logical bytes  %-12s (the files of every manifest)\n",
	       fmt_bytes(st.logical_bytes, a));
	printf("zero bytes     %-12s (holes, never stored)\n", fmt_bytes(st.zero_bytes, a));
	printf("unique bytes   %-12s (distinct chunks, uncompressed)\n",
	       fmt_bytes(st.unique_bytes, a));
	printf("stored bytes   %-12s (chunk objects on disk)\n", fmt_bytes(st.stored_bytes, a));
	if (st.stored_bytes)
		printf("saving         %.2fx (logical / stored)\n",
		       (double)st.logical_bytes / (double)st.stored_bytes);
	return 0;
}

static void print_bad(const char *id, const char *why, void *arg)
{
	printf("%s\t%s\n", id, why);
	fflush(stdout);
}

/* Whether store_dir is <data dir>/store, the same directory. */
static bool is_data_dir_store(const char *store_dir)
{
	char own[PATH_MAX + 8];
	struct stat a, b;

	snprintf(own, sizeof(own), "%s/store", cli_data_dir());
	return stat(store_dir, &a) == 0 && stat(own, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* The snapshot id ("sha256:<64 hex>") function file path names, in id;
 * false where it names none (none yet, or not a function file). */
static bool function_snapshot(const char *path, char *id, size_t len)
{
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
	const char *v = json_string_value(json_object_get(json_object_get(j, "snapshot"), "id"));
	bool ok = v && !strncmp(v, "sha256:", 7) && strlen(v) == 7 + 64 &&
		  strspn(v + 7, "0123456789abcdef") == 64;

	if (ok)
		snprintf(id, len, "%s", v);
	json_decref(j);
	return ok;
}

int cli_verify_functions(const char *store_dir,
			 void (*bad)(const char *what, const char *why, void *arg), void *arg)
{
	char dir[PATH_MAX], path[PATH_MAX + 300], id[80], what[300], why[PATH_MAX + 200];
	struct dirent *de;
	int n = 0;
	DIR *d;

	if (!is_data_dir_store(store_dir))
		return 0;
	snprintf(dir, sizeof(dir), "%s/functions", cli_data_dir());
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (de->d_name[0] == '.' || len <= 5 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!function_snapshot(path, id, sizeof(id)))
			continue;
		snprintf(path, sizeof(path), "%s/manifests/%s", store_dir, id + 7);
		if (access(path, F_OK) == 0 || errno != ENOENT)
			continue;
		snprintf(what, sizeof(what), "function %.*s", (int)(len - 5), de->d_name);
		snprintf(why, sizeof(why),
			 "its snapshot %s has no manifest in %s: it cannot be restored (thawd "
			 "boots it, or fetches it where a remote has it; snapshot it again)",
			 id, store_dir);
		if (bad)
			bad(what, why, arg);
		n++;
	}
	closedir(d);
	return n;
}

static int do_verify(struct store *s, int argc, char **argv)
{
	int i = parse_opts(argc, argv, NULL, NULL, NULL), n, f;

	if (i < 0)
		return 2;
	if (i != argc)
		return usage_error("unexpected argument %s", argv[i]);
	/* Each bad object goes to stdout, "ID<tab>why"; the log on stderr has the details. */
	n = store_verify(s, print_bad, NULL);
	if (n < 0)
		return fail("cannot verify");
	f = cli_verify_functions(store_path(s), print_bad, NULL);
	if (f < 0)
		return fail("cannot read the functions");
	n += f;
	if (n > 0) {
		fprintf(stderr, "thaw store verify: %d bad object%s\n", n, n == 1 ? "" : "s");
		return 1;
	}
	fprintf(stderr, "thaw store verify: every chunk and manifest is sound, and every "
			"function's snapshot is there\n");
	return 0;
}

static int do_gc(struct store *s, int argc, char **argv)
{
	uint64_t chunks = 0, bytes = 0;
	char b[32];
	int i = parse_opts(argc, argv, NULL, NULL, NULL);

	if (i < 0)
		return 2;
	if (i != argc)
		return usage_error("unexpected argument %s", argv[i]);
	if (store_gc(s, &chunks, &bytes) < 0)
		return fail("gc failed");
	printf("freed %llu chunks, %s\n", (unsigned long long)chunks, fmt_bytes(bytes, b));
	return 0;
}

static int do_rm(struct store *s, int argc, char **argv)
{
	int i = parse_opts(argc, argv, NULL, NULL, NULL);

	if (i < 0)
		return 2;
	if (i == argc)
		return usage_error("%s", "no ID given");
	for (; i < argc; i++)
		if (store_manifest_delete(s, argv[i]) < 0)
			return fail("rm failed");
	return 0;
}

static const struct sub subs[] = {
    {"put", do_put, "--name NAME [--meta JSON] FILE|DIR...",
     "store files (a directory: its regular files, recursively) as a new manifest;\n"
     "prints the manifest id.  --meta adds a JSON object to the manifest.",
     true},
    {"get", do_get, "ID OUTDIR",
     "write the files of manifest ID (or a unique prefix of >= 12 hex digits) into\n"
     "OUTDIR, holes as holes; a file appears only once it is complete, and a bad\n"
     "chunk fails the whole get, naming the chunk, leaving no file behind.",
     false},
    {"ls", do_ls, "[--json]", "list the manifests, oldest first.", false},
    {"stat", do_stat, "[--json]",
     "totals: logical, zero (holes), unique (distinct chunks) and stored bytes, chunks.\n"
     "--json prints "
     "{\"logical_bytes\",\"unique_bytes\",\"stored_bytes\",\"zero_bytes\",\"chunks\"}.",
     false},
    {"verify", do_verify, "",
     "read and check every chunk and manifest, and (on the data directory's own\n"
     "store) that every function's snapshot has its manifest; prints each bad one's\n"
     "id (or \"function ID\") and why on stdout and exits 1 if there is any.",
     false},
    {"gc", do_gc, "",
     "delete chunks that no manifest and no live lease uses, stale leases and temp\n"
     "files.",
     false},
    {"rm", do_rm, "ID...", "delete manifests (their chunks go at the next gc).", false},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: thaw store [--store DIR] COMMAND [ARGS]\n\n"
		   "The content-addressed chunk store: chunks named by SHA-256, zstd or raw,\n"
		   "many to a pack file, all-zero runs kept as holes, snapshots as manifests.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++)
		fprintf(f, "  %-7s %s\n", subs[i].name, subs[i].usage);
	fprintf(f,
		"\noptions:\n"
		"  --store DIR  the store (default $THAW_STORE, else <data dir>/store: %s)\n"
		"  -h, --help   this help; 'thaw store COMMAND --help' for a command's\n"
		"\nenvironment:\n"
		"  THAW_STORE_LAYOUT pack|loose  new chunks into pack files (default) or a\n"
		"                               file each (the layout before packs)\n"
		"  THAW_STORE_DIRECT 1|0         packs written with O_DIRECT (default 1)\n"
		"  THAW_STORE_MAP 1|0            put maps input files of 8 MiB and more\n"
		"                               (default 1) or reads them with read()\n",
		cli_store_dir());
}

int cmd_store(int argc, char **argv)
{
	struct store *s = NULL;
	struct stat sb;
	int i = 1, ret;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--store") && i + 1 < argc) {
			cli_set_store_dir(argv[++i]);
		} else {
			fprintf(stderr, "thaw store: unknown option or missing value: %s\n",
				argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t k = 0; k < ARRAY_SIZE(subs); k++)
		if (!strcmp(argv[i], subs[k].name))
			current = &subs[k];
	if (!current) {
		fprintf(stderr, "thaw store: unknown command '%s'\n", argv[i]);
		usage(stderr);
		return 2;
	}
	argc -= i;
	argv += i;
	for (int k = 1; k < argc && strcmp(argv[k], "--"); k++) {
		if (!strcmp(argv[k], "-h") || !strcmp(argv[k], "--help")) {
			printf("usage: thaw store [--store DIR] %s %s\n\n%s\n", current->name,
			       current->usage, current->help);
			return 0;
		}
	}
	const char *dir = cli_store_dir();
	if (!current->creates && stat(dir, &sb) < 0) {
		fprintf(stderr, "thaw store %s: no store at %s (--store DIR, or $THAW_STORE)\n",
			current->name, dir);
		return 1;
	}
	s = store_open(dir);
	if (!s)
		return fail("cannot open the store");
	ret = current->run(s, argc, argv);
	store_close(s);
	return ret;
}
