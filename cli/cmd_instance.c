/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_instance.c — thaw start, thaw stop, thaw ps: instances restored from
 * snapshots, run from the command line (thawd does the same over HTTP). */
#include "cli/cli.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/instance.h"
#include "restore/tier.h"
#include "store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void start_usage(FILE *f)
{
	fprintf(f, "usage: thaw start [--data-dir DIR] [--store DIR] [--mapped|--lazy|--eager] SNAPSHOT\n\n"
		   "Restore a new instance of SNAPSHOT (a snapshot id, a unique prefix of at\n"
		   "least 12 hex digits, or a function id: its newest snapshot) and print it\n"
		   "as JSON once it is ready:\n"
		   "  {\"instance\",\"function\",\"snapshot\",\"endpoint\":\"127.0.0.1:PORT\",\"pid\",\n"
		   "   \"tier\":\"ram\"|\"disk\",\"pages\":\"mapped\"|\"lazy\"|\"eager\",\"pages_why\",\n"
		   "   \"timings_ms\":{load,materialize,setup,criu_restore,endpoint,gpu_restore,\n"
		   "   ready,total[,lazy_done][,gpu_memory_copy]},\"lazy\"\n"
		   "   [,\"gpu_memory\":\"thaw\"|\"driver\",\"gpu_memory_why\"]}\n"
		   "A GPU function's device memory, \"gpu_memory\": \"thaw\" where libthaw-cuda\n"
		   "carried it (copied back from the RAM tier at the link's speed, in\n"
		   "gpu_memory_copy of gpu_restore), else \"driver\" (the CUDA driver's\n"
		   "checkpoint) and gpu_memory_why says why.\n"
		   "How the memory comes back, \"pages\":\n"
		   "  mapped  the default wherever it applies: the instance maps the snapshot's\n"
		   "          memory files in the RAM tier (one copy shared by every instance,\n"
		   "          its writes copy-on-write) and holds that tier entry until it\n"
		   "          exits.  It does not apply (pages_why says why) to a snapshot taken\n"
		   "          before mapped restore, to memory a forked child shares, to\n"
		   "          mappings under THAW_MAPPED_MIN_KIB (default 1024) of pages, or\n"
		   "          under THAW_MAPPED=0; then lazy or eager, as below.\n"
		   "  lazy    (--lazy) pages on demand: a lazy-pages daemon serves them from\n"
		   "          the RAM tier while the instance runs;\n"
		   "  eager   (--eager) every page copied in before it runs.\n"
		   "--mapped asks for mapped and falls back as above.  --lazy/--eager, or the\n"
		   "function's spec \"lazy\", choose that way instead of mapped.  Where mapped\n"
		   "does not apply, THAW_LAZY decides (1, 0,\n"
		   "or auto, the default: lazily, but a GPU function eagerly under\n"
		   "THAW_LAZY_DAEMON=criu or while more than THAW_LAZY_MAX_GPU_STARTS GPU starts\n"
		   "of this process are in flight: default 1, which one start per process, as\n"
		   "here, never passes (thawd runs many); 0: always eagerly; -1: no limit).\n"
		   "A lazy instance whose daemon dies before it has served every page\n"
		   "is killed and listed by 'thaw ps' as failed.\n"
		   "The instance keeps running after thaw exits; 'thaw stop INSTANCE' ends it.\n"
		   "Exit status: 0 started, 1 failed (nothing is left behind), 2 bad usage.\n");
}

static void stop_usage(FILE *f)
{
	fprintf(f, "usage: thaw stop [--data-dir DIR] INSTANCE...\n\n"
		   "Stop instances: their CUDA processes locked first (not checkpointed: their\n"
		   "device memory is freed as they are reaped), then the container, endpoint,\n"
		   "network namespace, work directory and record removed.\n"
		   "Exit status: 0 all stopped, 1 any failed or unknown, 2 bad usage.\n");
}

static void ps_usage(FILE *f)
{
	fprintf(f, "usage: thaw ps [--data-dir DIR] [--json]\n\n"
		   "List the instances recorded in the data directory, with their state\n"
		   "(running; exited: its process is gone; starting; abandoned: a start that\n"
		   "was killed half-way, which 'thaw stop' cleans up; standby: restored ahead\n"
		   "of a request; stopping: a stop has begun; failed: its lazy-pages daemon\n"
		   "ended before every page was in, and it was killed).\n");
}

/* Common options of the three: --data-dir, --store, -h.  Returns the index
 * of the first other argument, -1 after help (exit 0), -2 on bad usage. */
static int parse_common(int argc, char **argv, int *i, void (*usage)(FILE *))
{
	const char *a = argv[*i];

	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		usage(stdout);
		return -1;
	}
	if ((!strcmp(a, "--data-dir") || !strcmp(a, "--store")) && *i + 1 < argc) {
		if (!strcmp(a, "--data-dir"))
			cli_set_data_dir(argv[++*i]);
		else
			cli_set_store_dir(argv[++*i]);
		return 1;
	}
	return 0;
}

static bool looks_like_manifest_id(const char *arg)
{
	size_t n;

	if (!strncmp(arg, "sha256:", 7))
		return true;
	n = strspn(arg, "0123456789abcdef");
	return n >= 12 && !arg[n];
}

/* A snapshot id as given, or a function id naming its newest snapshot. */
static int resolve_snapshot(struct store *s, const char *arg, char *id, size_t len)
{
	struct manifest *m = NULL;
	char full[CHUNK_ID_LEN];
	json_t *list = NULL, *e;
	const char *best_created = "";
	size_t i;
	int ret = -ENOENT;

	if (looks_like_manifest_id(arg)) {
		ret = store_manifest_load(s, arg, &m, full);
		if (ret == 0) {
			manifest_free(m);
			snprintf(id, len, "%s", full);
		}
		return ret;
	}
	if (!id_valid(arg) || store_list(s, &list))
		return ret;
	json_array_foreach(list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *created = json_string_value(json_object_get(e, "created"));
		const char *mid = json_string_value(json_object_get(e, "id"));

		if (!created)
			created = "";
		if (name && mid && !strcmp(name, arg) && strcmp(created, best_created) >= 0) {
			snprintf(id, len, "%s", mid);
			best_created = created;
			ret = 0;
		}
	}
	json_decref(list);
	return ret;
}

int cmd_start(int argc, char **argv)
{
	struct thaw_config c;
	struct store *s = NULL;
	struct tier *t = NULL;
	struct instance in;
	const char *arg = NULL;
	enum instance_mode mode = INSTANCE_MODE_AUTO;
	char id[CHUNK_ID_LEN];
	json_t *j = NULL;
	int ret, rc = 1;

	for (int i = 1; i < argc; i++) {
		int r = parse_common(argc, argv, &i, start_usage);

		if (r == -1)
			return 0;
		if (r)
			continue;
		if (!strcmp(argv[i], "--lazy") || !strcmp(argv[i], "--eager") ||
		    !strcmp(argv[i], "--mapped")) {
			mode = argv[i][2] == 'l' ? INSTANCE_LAZY
			       : argv[i][2] == 'm' ? INSTANCE_MAPPED : INSTANCE_EAGER;
			continue;
		}
		if (argv[i][0] != '-' && !arg) {
			arg = argv[i];
			continue;
		}
		fprintf(stderr, "thaw start: bad argument %s\n", argv[i]);
		start_usage(stderr);
		return 2;
	}
	if (!arg) {
		start_usage(stderr);
		return 2;
	}
	ret = config_init(&c, cli_data_dir());
	if (ret) {
		fprintf(stderr, "thaw start: %s\n", log_last_error());
		return 1;
	}
	s = store_open_with(cli_store_dir(), &c.store);
	if (!s) {
		fprintf(stderr, "thaw start: %s\n", log_last_error());
		return 1;
	}
	ret = resolve_snapshot(s, arg, id, sizeof(id));
	if (ret) {
		if (ret == -ENOENT)
			fprintf(stderr, "thaw start: no snapshot %s in the store %s (neither a "
					"snapshot id nor a function with a snapshot)\n",
				arg, store_path(s));
		else
			fprintf(stderr, "thaw start: %s\n", log_last_error());
		goto out;
	}
	if (tier_root_prepare(c.ram_tier_dir, c.ram_tier_bytes, c.tier_huge, NULL) == 0)
		t = tier_open(c.ram_tier_dir, c.ram_tier_bytes, s, NULL);
	if (!t) {
		fprintf(stderr, "thaw start: RAM tier %s: %s\n", c.ram_tier_dir, log_last_error());
		goto out;
	}
	tier_set_mapped(t, c.mapped_min);
	log_clear_error();
	ret = instance_start(&c, s, t, id, mode, &in);
	if (ret) {
		fprintf(stderr, "thaw start: %s\n",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		goto out;
	}
	j = instance_to_json(&in);
	if (!j) {
		fprintf(stderr, "thaw start: out of memory (instance %s is running)\n", in.id);
		goto out;
	}
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
	printf("\n");
	fflush(stdout);
	rc = 0;
out:
	json_decref(j);
	tier_close(t);
	store_close(s);
	return rc;
}

int cmd_stop(int argc, char **argv)
{
	struct thaw_config c;
	int n = 0, rc = 0, ret;

	for (int i = 1; i < argc; i++) {
		int r = parse_common(argc, argv, &i, stop_usage);

		if (r == -1)
			return 0;
		if (r)
			continue;
		if (argv[i][0] == '-') {
			fprintf(stderr, "thaw stop: bad argument %s\n", argv[i]);
			stop_usage(stderr);
			return 2;
		}
		n++;
	}
	if (!n) {
		stop_usage(stderr);
		return 2;
	}
	ret = config_init(&c, cli_data_dir());
	if (ret) {
		fprintf(stderr, "thaw stop: %s\n", log_last_error());
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--data-dir") || !strcmp(argv[i], "--store")) {
			i++;
			continue;
		}
		log_clear_error();
		ret = instance_stop(&c, argv[i]);
		if (ret) {
			fprintf(stderr, "thaw stop: %s\n",
				log_last_error()[0] ? log_last_error() : strerror(-ret));
			rc = 1;
		} else {
			printf("%s\n", argv[i]);
		}
	}
	return rc;
}

int cmd_ps(int argc, char **argv)
{
	struct thaw_config c;
	bool as_json = false;
	json_t *list = NULL, *e;
	size_t i;
	int ret;

	for (int k = 1; k < argc; k++) {
		int r = parse_common(argc, argv, &k, ps_usage);

		if (r == -1)
			return 0;
		if (r)
			continue;
		if (!strcmp(argv[k], "--json")) {
			as_json = true;
			continue;
		}
		fprintf(stderr, "thaw ps: bad argument %s\n", argv[k]);
		ps_usage(stderr);
		return 2;
	}
	ret = config_init(&c, cli_data_dir());
	/* No data directory is a mistake (a typo, the wrong --data-dir), not
	 * a directory with no instance. */
	if (!ret && access(c.data_dir, F_OK) < 0) {
		fprintf(stderr, "thaw ps: no data directory %s\n", c.data_dir);
		return 1;
	}
	if (!ret)
		ret = instance_list(&c, &list);
	if (ret) {
		fprintf(stderr, "thaw ps: %s\n", log_last_error()[0] ? log_last_error() : strerror(-ret));
		return 1;
	}
	if (as_json) {
		json_dumpf(list, stdout, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
		printf("\n");
	} else {
		printf("%-32s %-20s %-8s %-21s %8s %-5s %-6s %-7s %9s %s\n", "INSTANCE", "FUNCTION",
		       "STATE", "ENDPOINT", "PID", "TIER", "PAGES", "GPU_MEM", "START_MS", "UID0");
		json_array_foreach(list, i, e) {
			const char *v[7] = { "instance", "function", "state", "endpoint", "tier",
					     "pages", "gpu_memory" };
			json_t *tm = json_object_get(json_object_get(e, "timings_ms"), "total");
			const char *gwhy = json_string_value(json_object_get(e, "gpu_memory_why"));

			for (int k = 0; k < 7; k++) {
				v[k] = json_string_value(json_object_get(e, v[k]));
				if (!v[k])
					v[k] = "-";
			}
			json_t *uid0 = json_object_get(e, "userns_uid");
			char who[32] = "host"; /* the host's uid 0, without capabilities */

			if (json_is_integer(uid0))
				snprintf(who, sizeof(who), "%lld", (long long)json_integer_value(uid0));
			printf("%-32s %-20s %-8s %-21s %8lld %-5s %-6s %-7s %9.1f %s\n", v[0], v[1], v[2],
			       v[3], (long long)json_integer_value(json_object_get(e, "pid")), v[4],
			       v[5], v[6], json_number_value(tm), who);
			/* The driver carried a GPU function's memory: why not thaw. */
			if (gwhy && *gwhy)
				printf("  gpu_memory: driver: %s\n", gwhy);
			if (json_is_string(json_object_get(e, "error")))
				printf("  error: %s\n",
				       json_string_value(json_object_get(e, "error")));
		}
	}
	json_decref(list);
	return 0;
}
