/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_materialize.c — thaw materialize: a snapshot's image files out of the
 * store, into a directory or (by default) into the RAM tier. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "restore/tier.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: thaw materialize [--store DIR] [--out DIR] [--whole] [--threads N]\n"
		   "                        [--qd N] [--arena MiB] [--direct auto|on|off]\n"
		   "                        [--write auto|pwrite|mmap] [--take N]\n"
		   "                        [--order auto|shares|stream] ID\n\n"
		   "Write the image files of snapshot ID (a manifest id or a unique prefix of\n"
		   "12+ hex digits) out of the store.  With --out, into DIR (which must not\n"
		   "exist yet); without, into the RAM tier ($THAW_RAM_TIER or /dev/shm/thaw,\n"
		   "budget $THAW_RAM_TIER_BYTES or half of /dev/shm), and print its path.\n"
		   "There, a snapshot whose memory is mapped at restore has the pages of its\n"
		   "large mappings written once, into the memory files of PATH/.mapped, and\n"
		   "not into PATH's pages files; --whole writes those too (what a start with\n"
		   "lazy or eager pages has written first).\n"
		   "--threads (default: the CPUs), --qd (reads in flight, default %u) and --arena\n"
		   "(MiB, default %llu) set the engine's size; --take N makes each worker take\n"
		   "runs of N chunks (default: up to %u, ~2 MiB); --order shares starts each\n"
		   "worker in its own part of the snapshot, --order stream has all of them take\n"
		   "from one cursor in store order (auto: shares where it writes with pwrite).\n",
		(unsigned)ENGINE_DEFAULT_QD, ENGINE_DEFAULT_ARENA >> 20, (unsigned)ENGINE_UNITS_PER_TAKE);
}

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
	struct progress *p = arg;

	p->total = total;
	progress_update(p, done);
}

static void summary(const char *what, const struct engine_stats *st)
{
	char a[32], b[32], c[32], cached[48] = "";

	if (st->cached_percent >= 0)
		snprintf(cached, sizeof(cached), " (%d%% of a sample cached)", st->cached_percent);
	fprintf(stderr,
		"%s %s in %.3f s, %.2f GB/s; %llu chunks (%llu read, %s from the store), "
		"%llu holes (%s); %s reads%s, %s writes, %s, %u threads, queue depth %u, "
		"setup %.3f s\n",
		what, fmt_bytes(st->logical_bytes, a), st->seconds,
		st->seconds > 0 ? (double)st->logical_bytes / st->seconds / 1e9 : 0.0,
		(unsigned long long)st->chunks, (unsigned long long)st->unique_chunks,
		fmt_bytes(st->read_bytes, b), (unsigned long long)st->holes,
		fmt_bytes(st->hole_bytes, c), st->direct ? "O_DIRECT" : "buffered", cached,
		st->mapped ? "mmap" : "pwrite", st->shares ? "shares" : "one stream", st->threads,
		st->queue_depth, st->setup_seconds);
}

static int to_dir(struct store *s, const char *id, const char *out, struct engine_opts *o)
{
	struct manifest *m = NULL;
	struct engine_stats st;
	char full[CHUNK_ID_LEN];
	struct stat sb;
	int ret;

	if (lstat(out, &sb) == 0) {
		fprintf(stderr, "thaw materialize: %s exists; give a new directory\n", out);
		return 1;
	}
	ret = store_manifest_load(s, id, &m, full);
	if (ret) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		return 1;
	}
	ret = engine_materialize(s, m, out, o, &st);
	progress_done(o->progress_arg);
	if (ret) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		rm_rf(out); /* it did not exist: nothing of the user's is in it */
	} else {
		summary("materialized", &st);
		printf("%s\n", out);
	}
	manifest_free(m);
	return ret ? 1 : 0;
}

static int to_tier(struct store *s, const char *id, struct engine_opts *o, bool whole)
{
	struct thaw_config c;
	struct tier *t = NULL;
	struct tier_lease *l = NULL;
	struct tier_stats ts;
	char a[32];
	int ret;

	ret = config_init(&c, cli_data_dir());
	if (ret) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		return 1;
	}
	if (tier_root_prepare(c.ram_tier_dir, c.ram_tier_bytes, c.tier_huge, NULL) == 0)
		t = tier_open(c.ram_tier_dir, c.ram_tier_bytes, s, o);
	if (!t) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		return 1;
	}
	tier_set_mapped(t, c.mapped_min);
	ret = tier_acquire(t, id, &l);
	progress_done(o->progress_arg);
	if (ret) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		goto out;
	}
	tier_get_stats(t, &ts);
	if (tier_lease_hit(l)) {
		fprintf(stderr, "already in the RAM tier\n");
	} else {
		double secs = tier_lease_materialize_ms(l) / 1e3;
		fprintf(stderr, "materialized %s into the RAM tier in %.3f s, %.2f GB/s (%s read)\n",
			fmt_bytes(ts.written_bytes, a), secs,
			secs > 0 ? (double)ts.written_bytes / secs / 1e9 : 0.0,
			ts.materializations ? "store" : "another process");
	}
	if (whole) {
		ret = tier_lease_whole(t, l);
		if (ret) {
			fprintf(stderr, "thaw materialize: %s\n", log_last_error());
			goto out;
		}
	} else if (tier_lease_partial(l)) {
		fprintf(stderr, "its mapped image: %s (pages files of mapped processes only there; "
			"--whole writes them)\n", tier_lease_mapped(l));
	}
	printf("%s\n", tier_lease_path(l));
out:
	/* The entry stays in the tier; only the lease goes. */
	tier_release(l);
	tier_close(t);
	return ret ? 1 : 0;
}

int cmd_materialize(int argc, char **argv)
{
	const char *out = NULL, *id = NULL;
	bool whole = false;
	struct engine_opts o;
	struct progress prog;
	struct store *s = NULL;
	unsigned long long v;
	int ret;

	engine_opts_default(&o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		/* argv[i] below argc is never NULL (the analyzer, having seen val
		 * tested on an earlier pass, thinks it may be).
		 * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--store") && val) {
			cli_set_store_dir(val);
		} else if (!strcmp(a, "--out") && val) {
			out = val;
		} else if (!strcmp(a, "--whole")) {
			whole = true;
			continue; /* no value */
		} else if (!strcmp(a, "--threads") && val && !cli_parse_count(val, 1024, &v)) {
			o.threads = (unsigned)v;
		} else if (!strcmp(a, "--qd") && val && !cli_parse_count(val, 4096, &v)) {
			o.queue_depth = (unsigned)v;
		} else if (!strcmp(a, "--take") && val && !cli_parse_count(val, 1 << 20, &v)) {
			o.units_per_take = (unsigned)v;
		} else if (!strcmp(a, "--arena") && val && !cli_parse_count(val, 1 << 20, &v)) {
			o.arena_bytes = v << 20;
		} else if (!strcmp(a, "--direct") && val &&
			   (!strcmp(val, "auto") || !strcmp(val, "on") || !strcmp(val, "off"))) {
			o.direct = !strcmp(val, "on")    ? ENGINE_DIRECT_ON
				   : !strcmp(val, "off") ? ENGINE_DIRECT_OFF
							 : ENGINE_DIRECT_AUTO;
		} else if (!strcmp(a, "--write") && val &&
			   (!strcmp(val, "auto") || !strcmp(val, "pwrite") || !strcmp(val, "mmap"))) {
			o.write = !strcmp(val, "pwrite") ? ENGINE_WRITE_PWRITE
				  : !strcmp(val, "mmap") ? ENGINE_WRITE_MMAP
							 : ENGINE_WRITE_AUTO;
		} else if (!strcmp(a, "--order") && val &&
			   (!strcmp(val, "auto") || !strcmp(val, "shares") || !strcmp(val, "stream"))) {
			o.order = !strcmp(val, "shares")   ? ENGINE_ORDER_SHARES
				  : !strcmp(val, "stream") ? ENGINE_ORDER_STREAM
							   : ENGINE_ORDER_AUTO;
		} else if (a[0] != '-' && !id) {
			id = a;
			continue;
		} else {
			fprintf(stderr, "thaw materialize: bad argument %s\n", a);
			usage(stderr);
			return 2;
		}
		i++; /* the option's value */
	}
	if (!id) {
		usage(stderr);
		return 2;
	}
	s = store_open(cli_store_dir());
	if (!s) {
		fprintf(stderr, "thaw materialize: %s\n", log_last_error());
		return 1;
	}
	progress_init(&prog, "materialize", 0);
	o.progress = on_progress;
	o.progress_arg = &prog;
	ret = out ? to_dir(s, id, out, &o) : to_tier(s, id, &o, whole);
	store_close(s);
	return ret;
}
