/* SPDX-License-Identifier: Apache-2.0 */
/* tier_test.h — what test_tier and test_tier_sums share: a store and a RAM
 * tier of the test's own (the store under /var/tmp, the tier in /dev/shm
 * as thawd keeps it), removed when the test exits; the same random bytes
 * at every run; files compared byte for byte.  Static functions: each test
 * includes it once.
 */
#ifndef THAW_TEST_TIER_TEST_H
#define THAW_TEST_TIER_TEST_H

#include "common/util.h"
#include "test/check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ull << 20)

/* The test's directory, its tier's, and its store's (in root). */
static char root[256], tdir[256], sdir[300];

static void tier_test_cleanup(void)
{
	if (tdir[0])
		rm_rf(tdir);
	if (root[0])
		rm_rf(root);
}

/* root, tdir and sdir named for the test (name) and root made; all are
 * removed at exit. */
static void __attribute__((unused)) tier_test_dirs(const char *name)
{
	snprintf(root, sizeof(root), "/var/tmp/thaw-test-%s-XXXXXX", name);
	REQUIRE(mkdtemp(root));
	snprintf(tdir, sizeof(tdir), "/dev/shm/thaw-test-%s-%d", name, getpid());
	atexit(tier_test_cleanup);
	snprintf(sdir, sizeof(sdir), "%s/store", root);
}

/* n random bytes into p: xorshift64, from the same seed at every run. */
static void __attribute__((unused)) fill_random(uint8_t *p, size_t n)
{
	static uint64_t rng = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < n; i += 8) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		memcpy(p + i, &rng, MIN((size_t)8, n - i));
	}
}

/* Are the files a and b the same bytes? */
static bool __attribute__((unused)) same_bytes(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t lx = 0, ly = 0;
	bool same = !read_file(a, &x, &lx, 1ull << 31) && !read_file(b, &y, &ly, 1ull << 31) &&
		    lx == ly && !memcmp(x, y, lx);

	free(x);
	free(y);
	return same;
}

#endif
