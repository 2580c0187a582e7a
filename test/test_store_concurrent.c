/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_concurrent.c — two processes putting overlapping data into one
 * store at once: verify finds it clean and both manifests come back right. */
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[] = "/tmp/thaw-test-store-cc-XXXXXX";

static int same(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t lx = 0, ly = 0;
	int r = read_file(a, &x, &lx, 1u << 28) == 0 && read_file(b, &y, &ly, 1u << 28) == 0 &&
		lx == ly && !memcmp(x, y, lx);
	free(x);
	free(y);
	return r;
}

int main(void)
{
	const size_t size = 32u << 20;
	char dir[PATH_MAX], f[2][PATH_MAX], idf[2][PATH_MAX];
	uint8_t *buf = malloc(size);
	uint64_t x = 7;

	REQUIRE(buf && mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/store", root);
	/* Two files sharing their first half, differing in the second. */
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < size; i++) {
			if (i == size / 2)
				x = 1000 + (uint64_t)k;
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			buf[i] = (uint8_t)(x >> 56);
		}
		x = 7;
		snprintf(f[k], sizeof(f[k]), "%s/in%d.img", root, k);
		REQUIRE(write_file_atomic(f[k], buf, size, 0644) == 0);
		snprintf(idf[k], sizeof(idf[k]), "%s/id%d", root, k);
	}
	pid_t pids[2];
	for (int k = 0; k < 2; k++) {
		pids[k] = fork();
		REQUIRE(pids[k] >= 0);
		if (pids[k] == 0) {
			struct store *s = store_open(dir);
			char id[CHUNK_ID_LEN];
			const char *p[] = {f[k]};
			if (!s || store_put(s, k ? "one" : "zero", p, 1, NULL, false, id, NULL))
				_exit(1);
			_exit(write_file_atomic(idf[k], id, strlen(id), 0644) ? 1 : 0);
		}
	}
	for (int k = 0; k < 2; k++) {
		int st = 0;
		REQUIRE(waitpid(pids[k], &st, 0) == pids[k]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	struct store *s = store_open(dir);
	REQUIRE(s);
	CHECK_EQ(store_verify(s, NULL, NULL), 0);
	for (int k = 0; k < 2; k++) {
		char *id = NULL, out[PATH_MAX], got[2 * PATH_MAX];
		REQUIRE(read_file(idf[k], &id, NULL, 100) == 0);
		snprintf(out, sizeof(out), "%s/out%d", root, k);
		CHECK_EQ(store_get(s, id, out, false), 0);
		snprintf(got, sizeof(got), "%s/in%d.img", out, k);
		CHECK(same(f[k], got));
		free(id);
	}
	/* The shared half is stored once. */
	struct store_stats st;
	REQUIRE(store_stat(s, &st) == 0);
	CHECK(st.unique_bytes < size + size / 2 + size / 8);
	CHECK(st.unique_bytes >= size + size / 2 - (256 << 10));
	store_close(s);
	rm_rf(root);
	free(buf);
	return check_failures ? 1 : 0;
}
