/* SPDX-License-Identifier: Apache-2.0 */
/* test_engine_cli.c — thaw materialize: into a directory and into the RAM
 * tier (a miss, then a hit), exit statuses, and a bad chunk that fails with
 * its id named and leaves no output. */
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"
#include "test/store_damage.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[256], tier[256];

/* Run a shell command; its stdout and stderr into *out (you free it). */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
	char cmd[4 * PATH_MAX], log[300];
	size_t len;
	va_list ap;
	int st;

	snprintf(log, sizeof(log), "%s/cmd.log", root);
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - PATH_MAX, fmt, ap);
	va_end(ap);
	snprintf(cmd + strlen(cmd), 400, " >%s 2>&1", log);
	st = system(cmd);
	*out = NULL;
	if (read_file(log, out, &len, 1 << 20))
		*out = strdup("");
	fprintf(stderr, "$ %s\n%s", cmd, *out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t lx = 0, ly = 0;
	bool same = !read_file(a, &x, &lx, 64 << 20) && !read_file(b, &y, &ly, 64 << 20) &&
		    lx == ly && !memcmp(x, y, lx);

	free(x);
	free(y);
	return same;
}

static void cleanup(void)
{
	if (tier[0])
		rm_rf(tier);
	if (root[0])
		rm_rf(root);
}

int main(void)
{
	const char *build = getenv("THAW_BUILD");
	char thaw[PATH_MAX], src[300], sdir[300], out[300], a[PATH_MAX], b[PATH_MAX];
	char id[CHUNK_ID_LEN], cid[CHUNK_ID_LEN], *o = NULL;
	const char *paths[1] = { src };
	struct store *s;
	struct manifest *m = NULL;
	struct stat st;
	uint8_t *buf;
	size_t n = 5 << 20;

	snprintf(thaw, sizeof(thaw), "%s/thaw", build ? build : "build");
	if (access(thaw, X_OK))
		SKIP("no thaw binary (set THAW_BUILD)");
	snprintf(root, sizeof(root), "/var/tmp/thaw-test-engine-cli-XXXXXX");
	REQUIRE(mkdtemp(root));
	snprintf(tier, sizeof(tier), "/dev/shm/thaw-test-engine-cli-%d", getpid());
	atexit(cleanup);
	snprintf(src, sizeof(src), "%s/src", root);
	snprintf(sdir, sizeof(sdir), "%s/store", root);
	snprintf(out, sizeof(out), "%s/out", root);
	REQUIRE(mkdir_p(src, 0755) == 0);
	buf = malloc(n);
	REQUIRE(buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	memset(buf + (1 << 20), 0, 1 << 20);
	snprintf(a, sizeof(a), "%s/pages-1.img", src);
	REQUIRE(write_file_atomic(a, buf, n, 0600) == 0);
	free(buf);
	s = store_open(sdir);
	REQUIRE(s);
	REQUIRE(store_put(s, "cli", paths, 1, NULL, false, id, NULL) == 0);

	/* into a directory */
	CHECK_EQ(run(&o, "THAW_NO_PROGRESS=1 %s materialize --store %s --out %s --threads 3 --qd 8 %s",
		     thaw, sdir, out, id), 0);
	CHECK(strstr(o, out) != NULL);
	CHECK(strstr(o, "materialized") != NULL);
	free(o);
	snprintf(b, sizeof(b), "%s/pages-1.img", out);
	CHECK(same_file(a, b));
	/* an existing output is refused */
	CHECK_EQ(run(&o, "%s materialize --store %s --out %s %s", thaw, sdir, out, id), 1);
	free(o);
	CHECK_EQ(run(&o, "%s materialize --store %s --bogus %s", thaw, sdir, id), 2);
	free(o);
	/* the work order: each name is taken and said in the summary, a bad one refused */
	for (int k = 0; k < 2; k++) {
		static const char *const order[] = {"shares", "stream"};
		static const char *const said[] = {", shares,", ", one stream,"};

		rm_rf(out);
		CHECK_EQ(run(&o, "THAW_NO_PROGRESS=1 %s materialize --store %s --out %s --threads 2 "
			     "--write pwrite --order %s %s", thaw, sdir, out, order[k], id), 0);
		CHECK(strstr(o, said[k]) != NULL);
		free(o);
		CHECK(same_file(a, b));
	}
	CHECK_EQ(run(&o, "%s materialize --store %s --order sideways %s", thaw, sdir, id), 2);
	free(o);

	/* into the RAM tier, by a 16-digit prefix: a miss, then a hit */
	CHECK_EQ(run(&o, "THAW_RAM_TIER=%s THAW_RAM_TIER_BYTES=%u %s materialize --store %s %.23s",
		     tier, 64u << 20, thaw, sdir, id), 0);
	CHECK(strstr(o, id + 7) != NULL);
	CHECK(strstr(o, "into the RAM tier") != NULL);
	free(o);
	snprintf(b, sizeof(b), "%s/%s/pages-1.img", tier, id + 7);
	CHECK(same_file(a, b));
	CHECK_EQ(run(&o, "THAW_RAM_TIER=%s %s materialize --store %s %s", tier, thaw, sdir, id), 0);
	CHECK(strstr(o, "already in the RAM tier") != NULL);
	free(o);

	/* a corrupt chunk: exit 1, its id named, no output left */
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	const struct manifest_chunk *c = &m->files[0].chunks[0];
	REQUIRE(!c->zero);
	chunk_id_format(c->hash, cid);
	chunk_flip(s, c->hash, CHUNK_HEADER_SIZE + 64);
	snprintf(out, sizeof(out), "%s/out2", root);
	CHECK_EQ(run(&o, "%s materialize --store %s --out %s %s", thaw, sdir, out, id), 1);
	CHECK(strstr(o, cid) != NULL);
	free(o);
	CHECK(stat(out, &st) < 0);

	manifest_free(m);
	store_close(s);
	return check_failures ? 1 : 0;
}
