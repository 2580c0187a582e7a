/* SPDX-License-Identifier: Apache-2.0 */
/* test_s3_rgw.c — the S3 client (remote/s3.h) against a real S3 server: put,
 * get, ranged get, head, list (paged), delete, multipart from memory and from
 * a file, many ranges with a retry asked for, and the errors of wrong keys,
 * a missing bucket, no keys, a bad endpoint and a server that is not there.
 *
 * The server is a single-node Ceph cluster that test/lib/ceph_rgw.sh starts:
 * run without THAW_TEST_S3_BUCKET, the program runs itself again under it.
 * With THAW_TEST_S3_BUCKET (and AWS_* set), it uses that bucket, under the
 * prefix test-s3/.  Exit 77 where the Ceph packages cannot be installed.
 */
#include "check.h"
#include "remote/s3.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static const char *bucket;

static void fill_random(uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = getrandom(p, n, 0);
		REQUIRE(r > 0);
		p += r;
		n -= (size_t)r;
	}
}

static struct s3 *open_or_die(void)
{
	struct s3 *c = NULL;

	REQUIRE(s3_open(bucket, NULL, &c) == 0);
	return c;
}

static void test_small_objects(struct s3 *c)
{
	const char *text = "hello, rgw";
	struct s3_source src = { .buf = text, .fd = -1, .len = strlen(text) };
	struct s3_object o;
	uint8_t *got = NULL;
	size_t len = 0, n = 0;
	char part[8];

	CHECK_EQ(s3_put(c, "test-s3/a b+c.txt", &src), 0); /* a key needing encoding */
	CHECK_EQ(s3_get(c, "test-s3/a b+c.txt", 1024, &got, &len), 0);
	CHECK_EQ(len, strlen(text));
	CHECK(got && !memcmp(got, text, len));
	free(got);
	CHECK_EQ(s3_get(c, "test-s3/a b+c.txt", 4, &got, &len), -EFBIG);
	CHECK_EQ(s3_head(c, "test-s3/a b+c.txt", &o), 0);
	CHECK_EQ(o.size, strlen(text));
	CHECK(o.mtime_ms > 0 && llabs((long long)(o.mtime_ms - s3_server_time_ms(c))) < 60000);
	CHECK_EQ(s3_get_range(c, "test-s3/a b+c.txt", 7, 3, part, &n), 0);
	CHECK_EQ(n, 3);
	CHECK(!memcmp(part, "rgw", 3));
	/* A range past the end gives what there is. */
	CHECK_EQ(s3_get_range(c, "test-s3/a b+c.txt", 7, 8, part, &n), 0);
	CHECK_EQ(n, 3);
	CHECK_EQ(s3_get(c, "test-s3/no-such-key", 1024, &got, &len), -ENOENT);
	CHECK(strstr(log_last_error(), "404"));
	CHECK_EQ(s3_head(c, "test-s3/no-such-key", NULL), -ENOENT);
	CHECK_EQ(s3_delete(c, "test-s3/a b+c.txt"), 0);
	CHECK_EQ(s3_head(c, "test-s3/a b+c.txt", NULL), -ENOENT);
	CHECK_EQ(s3_delete(c, "test-s3/a b+c.txt"), 0); /* gone already: fine */
}

struct listing {
	int n;
	char last[S3_KEY_MAX + 1];
	bool ordered;
	uint64_t bytes;
};

static int count(const struct s3_object *o, void *arg)
{
	struct listing *l = arg;

	if (l->n && strcmp(l->last, o->key) >= 0)
		l->ordered = false;
	snprintf(l->last, sizeof(l->last), "%s", o->key);
	l->n++;
	l->bytes += o->size;
	return 0;
}

static void test_list(struct s3 *c)
{
	struct listing l = { .ordered = true };
	char key[64], body[16];

	for (int i = 0; i < 25; i++) {
		snprintf(key, sizeof(key), "test-s3/list/%03d", i);
		snprintf(body, sizeof(body), "%d", i);
		struct s3_source src = { .buf = body, .fd = -1, .len = strlen(body) };
		CHECK_EQ(s3_put(c, key, &src), 0);
	}
	s3_set_list_page(c, 7); /* 4 pages */
	CHECK_EQ(s3_list(c, "test-s3/list/", count, &l), 0);
	CHECK_EQ(l.n, 25);
	CHECK(l.ordered);
	CHECK_STR(l.last, "test-s3/list/024");
	memset(&l, 0, sizeof(l));
	CHECK_EQ(s3_list(c, "test-s3/list/01", count, &l), 0);
	CHECK_EQ(l.n, 10);
	memset(&l, 0, sizeof(l));
	CHECK_EQ(s3_list(c, "test-s3/nothing-here/", count, &l), 0);
	CHECK_EQ(l.n, 0);
	s3_set_list_page(c, 1000);
	for (int i = 0; i < 25; i++) {
		snprintf(key, sizeof(key), "test-s3/list/%03d", i);
		CHECK_EQ(s3_delete(c, key), 0);
	}
}

static uint64_t progressed;
static void on_progress(void *arg, uint64_t bytes)
{
	progressed += bytes;
}

static void test_multipart(struct s3 *c)
{
	size_t len = 96u << 20;
	uint8_t *buf = malloc(len), *back = NULL;
	size_t got = 0;
	char path[] = "/tmp/test_s3_rgw.XXXXXX";
	int fd;

	REQUIRE(buf);
	fill_random(buf, len);
	struct s3_source src = { .buf = buf, .fd = -1, .len = len };
	uint64_t t0 = now_ns();
	CHECK_EQ(s3_put_multipart(c, "test-s3/big", &src, 8u << 20, 4, on_progress, NULL), 0);
	double up = ms_since(t0);
	CHECK_EQ(progressed, len);
	t0 = now_ns();
	CHECK_EQ(s3_get(c, "test-s3/big", len, &back, &got), 0);
	double down = ms_since(t0);
	CHECK_EQ(got, len);
	CHECK(back && !memcmp(back, buf, len));
	printf("multipart: %zu MiB up in %.0f ms (%.0f MB/s, 8 MiB parts, 4 in flight), "
	       "down in %.0f ms (%.0f MB/s, one GET)\n",
	       len >> 20, up, len / up / 1e3, down, len / down / 1e3);
	free(back);

	/* From a file range, the last part short. */
	fd = mkstemp(path);
	REQUIRE(fd >= 0);
	unlink(path);
	REQUIRE(write_all(fd, buf, len) == 0);
	struct s3_source fsrc = { .fd = fd, .off = 4096, .len = (20u << 20) + 123 };
	CHECK_EQ(s3_put_multipart(c, "test-s3/from-file", &fsrc, 5u << 20, 3, NULL, NULL), 0);
	CHECK_EQ(s3_get(c, "test-s3/from-file", len, &back, &got), 0);
	CHECK_EQ(got, fsrc.len);
	CHECK(back && !memcmp(back, buf + 4096, fsrc.len));
	free(back);
	/* The same file range in one PUT (s3_upload's choice below the threshold). */
	fsrc.len = 1u << 20;
	CHECK_EQ(s3_upload(c, "test-s3/from-file-small", &fsrc, NULL, NULL), 0);
	CHECK_EQ(s3_get(c, "test-s3/from-file-small", len, &back, &got), 0);
	CHECK(got == fsrc.len && back && !memcmp(back, buf + 4096, fsrc.len));
	free(back);
	close(fd);
	free(buf);
	CHECK_EQ(s3_delete(c, "test-s3/from-file"), 0);
	CHECK_EQ(s3_delete(c, "test-s3/from-file-small"), 0);
}

struct rcheck {
	const uint8_t *want;
	int again_left; /* ranges to ask again once */
	int done;
};

static int range_check(struct s3_range *r, int err, void *arg)
{
	struct rcheck *k = arg;

	if (err)
		return err;
	if (k->again_left > 0 && r->attempt == 1) {
		k->again_left--;
		memset(r->buf, 0, r->len);
		return S3_AGAIN;
	}
	CHECK_EQ(r->got, r->len);
	CHECK(!memcmp(r->buf, k->want + r->off, r->len));
	k->done++;
	return 0;
}

static void test_ranges(struct s3 *c)
{
	enum { N = 200 };
	size_t len = 96u << 20;
	uint8_t *want = NULL, *buf = malloc(len);
	size_t got;
	struct s3_range v[N];
	struct rcheck k = { .again_left = 5 };

	REQUIRE(buf);
	CHECK_EQ(s3_get(c, "test-s3/big", len, &want, &got), 0);
	REQUIRE(want && got == len);
	k.want = want;
	size_t each = len / N;
	for (int i = 0; i < N; i++)
		v[i] = (struct s3_range){ .key = "test-s3/big", .off = (uint64_t)i * each,
					  .len = each, .buf = buf + (size_t)i * each };
	uint64_t t0 = now_ns();
	CHECK_EQ(s3_get_ranges(c, v, N, 16, range_check, &k), 0);
	double ms = ms_since(t0);
	CHECK_EQ(k.done, N);
	printf("ranges: %d ranged GETs of %zu KiB, 16 in flight, 5 asked again: %.0f ms "
	       "(%.0f MB/s)\n",
	       N, each >> 10, ms, (double)(N + 5) * each / ms / 1e3);
	/* A range of a key that is not there fails the call with -ENOENT. */
	v[3].key = "test-s3/not-there";
	CHECK_EQ(s3_get_ranges(c, v, N, 16, NULL, NULL), -ENOENT);
	free(want);
	free(buf);
	CHECK_EQ(s3_delete(c, "test-s3/big"), 0);
}

static void test_errors(void)
{
	const char *secret = getenv("AWS_SECRET_ACCESS_KEY");
	char *saved = strdup(secret), wrong[128];
	struct s3 *c = NULL;
	uint8_t *got;
	size_t len;

	/* Wrong secret: refused, and the message never holds either secret. */
	snprintf(wrong, sizeof(wrong), "%sWRONG", saved);
	setenv("AWS_SECRET_ACCESS_KEY", wrong, 1);
	REQUIRE(s3_open(bucket, NULL, &c) == 0);
	CHECK(!strstr(s3_describe(c), wrong));
	CHECK_EQ(s3_get(c, "test-s3/x", 1024, &got, &len), -EACCES);
	printf("wrong secret: %s\n", log_last_error());
	CHECK(strstr(log_last_error(), "403"));
	CHECK(strstr(log_last_error(), "SignatureDoesNotMatch"));
	CHECK(!strstr(log_last_error(), wrong) && !strstr(log_last_error(), saved));
	s3_close(c);
	setenv("AWS_SECRET_ACCESS_KEY", saved, 1);

	/* A bucket that is not there. */
	REQUIRE(s3_open("no-such-bucket-here", NULL, &c) == 0);
	CHECK_EQ(s3_get(c, "x", 1024, &got, &len), -ENOENT);
	CHECK(strstr(log_last_error(), "NoSuchBucket"));
	s3_close(c);

	/* No keys anywhere. */
	char *id = strdup(getenv("AWS_ACCESS_KEY_ID"));
	unsetenv("AWS_ACCESS_KEY_ID");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	CHECK_EQ(s3_open(bucket, NULL, &c), -ENOKEY);
	CHECK(strstr(log_last_error(), "/nonexistent/credentials"));
	/* A profile in a credentials file. */
	char path[] = "/tmp/test_s3_creds.XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	dprintf(fd, "[default]\naws_access_key_id = nope\naws_secret_access_key = nope\n\n"
		    "[thaw-test]\n aws_access_key_id = %s\naws_secret_access_key=%s \n",
		id, saved);
	close(fd);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_PROFILE", "thaw-test", 1);
	REQUIRE(s3_open(bucket, NULL, &c) == 0);
	CHECK(strstr(s3_describe(c), "profile thaw-test"));
	struct s3_source src = { .buf = "p", .fd = -1, .len = 1 };
	CHECK_EQ(s3_put(c, "test-s3/profile", &src), 0);
	CHECK_EQ(s3_delete(c, "test-s3/profile"), 0);
	s3_close(c);
	unlink(path);
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	setenv("AWS_ACCESS_KEY_ID", id, 1);

	/* Bad settings. */
	CHECK_EQ(s3_open(bucket, "ftp://x", &c), -EINVAL);
	CHECK_EQ(s3_open("A_Bad_Bucket", NULL, &c), -EINVAL);
	/* Nobody listening: refused after the retries. */
	REQUIRE(s3_open(bucket, "http://127.0.0.1:1", &c) == 0);
	uint64_t t0 = now_ns();
	CHECK_EQ(s3_head(c, "x", NULL), -ECONNREFUSED);
	printf("no server: %s (%.0f ms)\n", log_last_error(), ms_since(t0));
	CHECK(strstr(log_last_error(), "127.0.0.1:1"));
	s3_close(c);
	free(id);
	free(saved);
}

int main(int argc, char **argv)
{
	struct s3 *c;
	char enc[64];
	int64_t ms;

	/* No server needed for these. */
	CHECK_EQ(s3_uri_encode("a b/c+d~e", true, enc, sizeof(enc)), 0);
	CHECK_STR(enc, "a%20b/c%2Bd~e");
	CHECK_EQ(s3_uri_encode("a/b", false, enc, sizeof(enc)), 0);
	CHECK_STR(enc, "a%2Fb");
	CHECK_EQ(s3_parse_time("1970-01-01T00:00:01.5Z", &ms), 0);
	CHECK_EQ(ms, 1500);
	CHECK_EQ(s3_parse_time("2026-11-25T15:47:53.123Z", &ms), 0);
	CHECK_EQ(ms % 1000, 123);
	CHECK_EQ(s3_parse_time("yesterday", &ms), -EINVAL);

	bucket = getenv("THAW_TEST_S3_BUCKET");
	if (!bucket) {
		const char *root = getenv("THAW_ROOT") ? getenv("THAW_ROOT") : ".";
		char lib[4096];
		snprintf(lib, sizeof(lib), "%s/test/lib/ceph_rgw.sh", root);
		fflush(stdout);
		execlp("bash", "bash", lib, "run", argv[0], (char *)NULL);
		SKIP("cannot run bash for test/lib/ceph_rgw.sh");
	}
	(void)argc;
	c = open_or_die();
	printf("server: %s\n", s3_describe(c));
	test_small_objects(c);
	test_list(c);
	test_multipart(c);
	test_ranges(c);
	s3_close(c);
	test_errors();
	if (!check_failures)
		printf("ok\n");
	return check_failures ? 1 : 0;
}
