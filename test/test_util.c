/* SPDX-License-Identifier: Apache-2.0 */
/* test_util.c — common/util: ids, hex, atomic writes, rm_rf, monotonic waits. */
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_ids(void)
{
	CHECK(id_valid("a"));
	CHECK(id_valid("fn-1.2_b"));
	CHECK(id_valid("0abc"));
	CHECK(!id_valid(""));
	CHECK(!id_valid("-a"));
	CHECK(!id_valid(".."));
	CHECK(!id_valid("a/b"));
	CHECK(!id_valid("A"));
	CHECK(!id_valid("a b"));
	char long_id[80];
	memset(long_id, 'a', 63);
	long_id[63] = '\0';
	CHECK(id_valid(long_id));
	long_id[63] = 'a';
	long_id[64] = '\0';
	CHECK(!id_valid(long_id));
}

static void test_hex(void)
{
	uint8_t in[4] = { 0x00, 0xab, 0x10, 0xff }, out[4];
	char s[9];

	hex_encode(in, 4, s);
	CHECK_STR(s, "00ab10ff");
	CHECK_EQ(hex_decode(s, out, 4), 0);
	CHECK(!memcmp(in, out, 4));
	CHECK_EQ(hex_decode("00ab10f", out, 4), -EINVAL);
	CHECK_EQ(hex_decode("00ab10fg", out, 4), -EINVAL);
	CHECK_EQ(hex_decode("00ab10ff0", out, 4), -EINVAL);
}

static void test_files(void)
{
	char dir[] = "/tmp/thaw-test-util-XXXXXX", path[256], sub[256];
	char *buf = NULL;
	size_t len = 0;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(sub, sizeof(sub), "%s/a/b/c", dir);
	CHECK_EQ(mkdir_p(sub, 0755), 0);
	CHECK_EQ(mkdir_p(sub, 0755), 0);
	snprintf(path, sizeof(path), "%s/a/b/c/f", dir);
	CHECK_EQ(write_file_atomic(path, "hello", 5, 0644), 0);
	CHECK_EQ(read_file(path, &buf, &len, 100), 0);
	CHECK_EQ(len, 5);
	CHECK_STR(buf, "hello");
	free(buf);
	CHECK_EQ(read_file(path, &buf, &len, 4), -EFBIG);
	CHECK_EQ(rm_rf(dir), 0);
	CHECK(access(dir, F_OK) != 0);
	CHECK_EQ(rm_rf(dir), 0);
}

static void test_array_grow(void)
{
	uint32_t *v = NULL;
	size_t cap = 0;

	CHECK_EQ(ARRAY_GROW(v, cap, 0, 8), 0);
	CHECK(!v && cap == 0);
	CHECK_EQ(ARRAY_GROW(v, cap, 1, 8), 0);
	CHECK(v && cap == 8);
	for (uint32_t i = 0; i < 8; i++)
		v[i] = i;
	CHECK_EQ(ARRAY_GROW(v, cap, 8, 8), 0);
	CHECK_EQ(cap, 8);
	CHECK_EQ(ARRAY_GROW(v, cap, 9, 8), 0);
	CHECK_EQ(cap, 16);
	CHECK_EQ(v[7], 7);
	CHECK_EQ(ARRAY_GROW(v, cap, 100, 8), 0);
	CHECK_EQ(cap, 128);
	CHECK_EQ(ARRAY_GROW(v, cap, SIZE_MAX / 2, 8), -ENOMEM);
	CHECK_EQ(cap, 128);
	CHECK_EQ(v[7], 7);
	free(v);
}

/* A timed wait on a monotonic cv ends at its deadline on now_ns()'s clock:
 * not before it (the only bound a loaded machine cannot break), and the
 * deadline's timespec is the reading's. */
static void test_monotonic_wait(void)
{
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv;
	struct timespec ts;
	uint64_t t0, until;
	int r = 0;

	REQUIRE(cond_init_monotonic(&cv) == 0);
	ts = mono_timespec(1234567890123ull);
	CHECK_EQ((long long)ts.tv_sec, 1234LL);
	CHECK_EQ((long long)ts.tv_nsec, 567890123LL);
	t0 = now_ns();
	ts = mono_after_ms(50);
	until = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	CHECK(until >= t0 + 50 * 1000000ull);
	pthread_mutex_lock(&mu);
	while (r != ETIMEDOUT)
		r = pthread_cond_timedwait(&cv, &mu, &ts);
	pthread_mutex_unlock(&mu);
	CHECK(now_ns() >= until);
	pthread_cond_destroy(&cv);
}

int main(void)
{
	test_ids();
	test_hex();
	test_files();
	test_array_grow();
	test_monotonic_wait();
	return check_failures ? 1 : 0;
}
