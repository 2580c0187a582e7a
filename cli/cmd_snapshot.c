/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_snapshot.c — thaw snapshot: boot a function from its spec file, warm it,
 * snapshot it into the store, and print what was made. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "prewarm/prewarm.h"
#include "function/confine.h"
#include "function/spec.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: thaw [--data-dir DIR] snapshot [--data-dir DIR] [--id ID] SPEC.json\n\n"
		"Boot the function described by SPEC.json as a runc container, wait until it\n"
		"is ready, warm it up, call its prepare hook, checkpoint it (CUDA, then CRIU)\n"
		"and store the image in the chunk store.  Prints JSON:\n"
		"  {\"snapshot\": ID, \"timings_ms\": {...}, \"image_bytes\": N, \"stored_bytes\": N}\n\n"
		"SPEC.json is the body of PUT /functions/<id> (command, env, cwd, port, ready,\n"
		"warmup, prepare, gpu, image).  An \"image\" is pulled and unpacked first\n"
		"(a progress line on a terminal).  A relative \"cwd\" is taken relative to the spec\n"
		"file's directory (and defaults to it), so a spec beside its code works from\n"
		"anywhere.  The function id is --id, else the spec's \"id\", else the file's\n"
		"name without .json ('_' becoming '-').\n\n"
		"options:\n"
		"  --data-dir DIR  data directory (default $THAW_DATA_DIR or /var/lib/thaw)\n"
		"  --id ID         the function's id\n"
		"environment: THAW_CRIU (criu for runc --criu), THAW_RUNC, THAW_LOG=debug\n");
}

/* The id from the file name: "cpu_example.json" -> "cpu-example". */
static void id_from_path(const char *path, char *id, size_t len)
{
	char buf[PATH_MAX], *base, *dot;

	snprintf(buf, sizeof(buf), "%s", path);
	base = basename(buf);
	dot = strrchr(base, '.');
	if (dot && dot != base)
		*dot = '\0';
	snprintf(id, len, "%s", base);
	for (char *p = id; *p; p++) {
		if (*p == '_')
			*p = '-';
		else if (*p >= 'A' && *p <= 'Z')
			*p = *p - 'A' + 'a';
	}
}

/* A relative (or missing) cwd becomes absolute, against the spec's directory. */
static int resolve_cwd(json_t *j, const char *spec_path)
{
	char buf[PATH_MAX], dir[PATH_MAX], joined[2 * PATH_MAX + 2], real[PATH_MAX];
	json_t *cwd = json_object_get(j, "cwd");
	const char *rel;

	if (cwd && (!json_is_string(cwd) || json_string_value(cwd)[0] == '/'))
		return 0; /* spec_parse judges it */
	if (!cwd && (json_object_get(j, "bundle") || json_object_get(j, "image")))
		return 0; /* a user's rootfs or image: its own working directory */
	rel = cwd ? json_string_value(cwd) : ".";
	snprintf(buf, sizeof(buf), "%s", spec_path);
	if (!realpath(dirname(buf), dir)) {
		fprintf(stderr, "thaw snapshot: %s: %s\n", spec_path, strerror(errno));
		return -errno;
	}
	snprintf(joined, sizeof(joined), "%s/%s", dir, rel);
	if (!realpath(joined, real)) {
		fprintf(stderr, "thaw snapshot: cwd %s: %s\n", joined, strerror(errno));
		return -errno;
	}
	json_object_set_new(j, "cwd", json_string(real));
	return 0;
}

/* An image's pull (bytes) and unpack (layers) on a terminal. */
struct pull_progress {
	struct progress bar;
	const char *phase;
};

static void pull_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct pull_progress *pp = arg;
	const char *shown = !strcmp(phase, "pull") ? "pull" : !strcmp(phase, "unpack") ? "unpack" : NULL;

	if (pp->phase != shown) {
		if (pp->phase)
			progress_done(&pp->bar);
		pp->phase = shown;
		if (shown)
			progress_init(&pp->bar, shown, shown[0] == 'p' ? total : 0);
	}
	if (!shown || !pp->bar.enabled)
		return;
	if (shown[0] == 'p')
		progress_update(&pp->bar, done);
	else
		fprintf(stderr, "\r\033[Kunpack  layer %llu of %llu",
			(unsigned long long)(done < total ? done + 1 : total),
			(unsigned long long)total);
	pp->bar.last_draw_ns = now_ns(); /* so that progress_done clears it */
}

/* The functions registered in the data directory (dir: its functions/),
 * as thawd's registry has them (server/registry.h: one file each,
 * {"spec": …}; one being deleted is gone), read as they are now: a
 * thaw_config's "registered" (common/config.h: each id to its spec), so
 * that a snapshot made here is held to the rule a PUT is, against the same
 * functions.  0 (an empty object where there are none) or -errno. */
static int registered_specs(void *dir, json_t **out)
{
	char path[PATH_MAX + 300], id[64];
	json_t *all = json_object(), *j, *spec;
	struct dirent *de;
	DIR *d;
	int ret = 0;

	*out = NULL;
	if (!all)
		return -ENOMEM;
	d = opendir(dir);
	if (!d && errno != ENOENT) {
		ret = -errno;
		fprintf(stderr, "thaw snapshot: %s: %s\n", (const char *)dir, strerror(-ret));
	}
	while (d && !ret && (de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (len <= 5 || len - 5 >= sizeof(id) || strcmp(de->d_name + len - 5, ".json"))
			continue;
		memcpy(id, de->d_name, len - 5);
		id[len - 5] = '\0';
		if (!id_valid(id)) /* as thawd's registry passes it over */
			continue;
		snprintf(path, sizeof(path), "%s/%s", (const char *)dir, de->d_name);
		j = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
		spec = json_object_get(j, "spec");
		if (json_is_object(spec) && !json_is_true(json_object_get(j, "deleting")) &&
		    json_object_set(all, id, spec))
			ret = -ENOMEM;
		json_decref(j);
	}
	if (d)
		closedir(d);
	if (ret)
		json_decref(all);
	else
		*out = all;
	return ret;
}

int cmd_snapshot(int argc, char **argv)
{
	const char *spec_path = NULL, *id = NULL, *data_dir = NULL;
	char err[1024], fid[64], mkey[48], fdir[PATH_MAX + 16];
	struct thaw_config c;
	struct func_spec *spec = NULL;
	struct snapshot_result res = { 0 };
	struct pull_progress pp = { .phase = NULL };
	struct store *s = NULL;
	json_error_t jerr;
	json_t *j = NULL, *outj = NULL;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc) {
			data_dir = argv[++i];
		} else if (!strcmp(argv[i], "--id") && i + 1 < argc) {
			id = argv[++i];
		} else if (argv[i][0] == '-' || spec_path) {
			fprintf(stderr, "thaw snapshot: unexpected argument %s\n", argv[i]);
			usage(stderr);
			return 2;
		} else {
			spec_path = argv[i];
		}
	}
	if (!spec_path) {
		usage(stderr);
		return 2;
	}
	if (data_dir)
		cli_set_data_dir(data_dir);

	j = json_load_file(spec_path, 0, &jerr);
	if (!j) {
		fprintf(stderr, "thaw snapshot: %s:%d: %s\n", spec_path, jerr.line, jerr.text);
		goto out;
	}
	if (json_is_object(j) && resolve_cwd(j, spec_path))
		goto out;
	if (!id && !json_object_get(j, "id")) {
		id_from_path(spec_path, fid, sizeof(fid));
		id = fid;
	}
	if (spec_parse(j, id, &spec, err, sizeof(err))) {
		fprintf(stderr, "thaw snapshot: %s: %s\n", spec_path, err);
		rc = 2;
		goto out;
	}
	if (config_init(&c, cli_data_dir())) {
		fprintf(stderr, "thaw snapshot: %s\n", log_last_error());
		goto out;
	}
	snprintf(fdir, sizeof(fdir), "%s/functions", c.data_dir);
	c.registered = registered_specs;
	c.registered_arg = fdir;
	/* As thawd's PUT: a function's paths (and a local image) only where
	 * allowed, and none a registered function's that one of the two may
	 * write (and again where they are used, function/confine.h). */
	if (function_spec_check(&c, spec->id, j, mkey, sizeof(mkey), err, sizeof(err))) {
		fprintf(stderr, "thaw snapshot: %s: %s: %s\n", spec_path, mkey, err);
		rc = 2;
		goto out;
	}
	s = store_open_with(cli_store_dir(), &c.store);
	if (!s) {
		fprintf(stderr, "thaw snapshot: store %s: %s\n", cli_store_dir(), log_last_error());
		goto out;
	}
	if (prewarm_snapshot_opts(&c, s, spec,
				  &(struct prewarm_opts){ .progress = pull_progress, .progress_arg = &pp },
				  &res)) {
		if (pp.phase)
			progress_done(&pp.bar);
		fprintf(stderr, "thaw snapshot: %s\n", log_last_error());
		goto out;
	}
	outj = json_pack("{s:s, s:s, s:O, s:I, s:I}", "function", spec->id, "snapshot",
			 res.snapshot_id, "timings_ms", res.timings_ms, "image_bytes",
			 (json_int_t)res.image_bytes, "stored_bytes", (json_int_t)res.stored_bytes);
	if (!outj || json_dumpf(outj, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) < 0) {
		fprintf(stderr, "thaw snapshot: cannot print the result\n");
		goto out;
	}
	printf("\n");
	rc = 0;
out:
	json_decref(outj);
	snapshot_result_release(&res);
	store_close(s);
	spec_free(spec);
	json_decref(j);
	return rc;
}
