/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_shift.c — content-defined cuts survive a shift: a 256 MiB random
 * file and the same file with 4 KiB inserted near its start share >= 95% of
 * their bytes in the store.  Also prints the put's ingest rate. */
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[64];

int main(void)
{
	const size_t size = 256u << 20, ins = 4096, at = 3 * 4096 + 40960;
	char dir[PATH_MAX], a[PATH_MAX], b[PATH_MAX], ida[CHUNK_ID_LEN], idb[CHUNK_ID_LEN];
	uint8_t *buf = malloc(size + ins);
	struct store_put_stats pa, pb;
	struct store_stats st;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	REQUIRE(buf);
	/* /dev/shm when there is room: this measures the store, not the disk. */
	snprintf(root, sizeof(root), "%s/thaw-test-store-shift-XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	REQUIRE(mkdtemp(root));
	for (size_t i = 0; i < size + ins; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
	snprintf(a, sizeof(a), "%s/a.img", root);
	snprintf(b, sizeof(b), "%s/b.img", root);
	REQUIRE(write_file_atomic(a, buf + ins, size, 0644) == 0);
	/* b: the first `at` bytes of a, 4 KiB of new bytes, then the rest of a. */
	memmove(buf, buf + ins, at);
	REQUIRE(write_file_atomic(b, buf, size + ins, 0644) == 0);

	snprintf(dir, sizeof(dir), "%s/store", root);
	struct store *s = store_open(dir);
	REQUIRE(s);
	const char *p1[] = {a}, *p2[] = {b};
	uint64_t t0 = now_ns();
	REQUIRE(store_put(s, "a", p1, 1, NULL, false, ida, &pa) == 0);
	double ms = ms_since(t0);
	t0 = now_ns();
	REQUIRE(store_put(s, "b", p2, 1, NULL, false, idb, &pb) == 0);
	double ms2 = ms_since(t0);
	REQUIRE(store_stat(s, &st) == 0);
	printf("put of %zu MiB random: %.0f ms, %.0f MB/s (%llu chunks); shifted copy: %.0f ms, "
	       "%llu new bytes\n",
	       size >> 20, ms, size / ms / 1e3, (unsigned long long)pa.chunks, ms2,
	       (unsigned long long)pb.new_bytes);
	printf("unique %llu of logical %llu bytes: the two share %.2f%%\n",
	       (unsigned long long)st.unique_bytes, (unsigned long long)st.logical_bytes,
	       100.0 * (double)(2 * size + ins - st.unique_bytes) / (double)(size + ins));
	CHECK_EQ(pa.new_bytes, size);
	/* Shared >= 95%: at most 5% of b is new. */
	CHECK(pb.new_bytes <= (size + ins) / 20);
	CHECK(st.unique_bytes <= size + (size + ins) / 20);
	CHECK_EQ(pb.new_bytes + pb.dup_bytes, size + ins);
	/* And b is really b. */
	char out[PATH_MAX], got[2 * PATH_MAX];
	char *back = NULL;
	size_t len = 0;
	snprintf(out, sizeof(out), "%s/out", root);
	CHECK_EQ(store_get(s, idb, out, false), 0);
	snprintf(got, sizeof(got), "%s/b.img", out);
	CHECK(read_file(got, &back, &len, 1u << 30) == 0 && len == size + ins &&
	      !memcmp(back, buf, len));
	free(back);
	store_close(s);
	rm_rf(root);
	free(buf);
	return check_failures ? 1 : 0;
}
