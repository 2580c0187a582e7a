/* SPDX-License-Identifier: Apache-2.0 */
/* test_logfile.c — common/logfile: the bound and the rotation (never more
 * than 2x the bound on disk, lines cut at newlines where they fit), and the
 * tail across the two files, against a model of everything written. */
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/test_logfile.XXXXXX";

static uint64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static char *tail(const char *path, unsigned lines, size_t *len)
{
	char *out = NULL;

	CHECK_EQ(logfile_tail(path, lines, &out, len), 0);
	return out;
}

/* The last n lines of text (len bytes), as tail(1) gives them. */
static const char *model_tail(const char *text, size_t len, unsigned n)
{
	const char *p = text + len;

	if (!n)
		return text + len;
	if (p > text && p[-1] == '\n')
		p--;
	while (p > text) {
		if (p[-1] == '\n' && --n == 0)
			break;
		p--;
	}
	return p;
}

static void test_parse(void)
{
	unsigned n = 7;

	CHECK_EQ(logfile_parse_tail(NULL, &n), 0);
	CHECK_EQ(n, LOGFILE_TAIL_DEFAULT);
	CHECK_EQ(logfile_parse_tail("0", &n), 0);
	CHECK_EQ(n, 0);
	CHECK_EQ(logfile_parse_tail("5", &n), 0);
	CHECK_EQ(n, 5);
	CHECK_EQ(logfile_parse_tail("10000", &n), 0);
	CHECK_EQ(n, 10000);
	CHECK_EQ(logfile_parse_tail("007", &n), 0);
	CHECK_EQ(n, 7);
	const char *bad[] = { "", "-1", "+1", "abc", "1x", " 1", "1 ", "10001", "100000",
			      "99999999999999999999", "0x10", "1.5" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		CASE("tail \"%s\"", bad[i]);
		CHECK_EQ(logfile_parse_tail(bad[i], &n), -EINVAL);
	}
	CASE_END();
}

/* Lines of varying length through a small bound: each file stays within it,
 * and every tail equals the model's over what the two files still hold. */
static void test_rotation(void)
{
	const uint64_t max = 4096;
	char path[300], old[310], line[512], *all = NULL, *t;
	size_t alen = 0, acap = 1 << 20, len;
	struct logfile lf;
	unsigned rot0;

	snprintf(path, sizeof(path), "%s/function.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	REQUIRE(logfile_open(&lf, path, max, true) == 0);
	all = malloc(acap);
	REQUIRE(all);
	rot0 = lf.rotations;
	for (unsigned i = 1; i <= 2000; i++) {
		int n = snprintf(line, sizeof(line), "line %u %.*s\n", i, (int)(i * 7919 % 300),
				 "................................................................"
				 "................................................................"
				 "................................................................"
				 "................................................................"
				 "............................................................");

		REQUIRE(alen + (size_t)n < acap);
		memcpy(all + alen, line, (size_t)n);
		alen += (size_t)n;
		CHECK_EQ(logfile_write(&lf, line, (size_t)n), 0);
		CHECK(file_size(path) <= max);
		CHECK(file_size(old) <= max);
	}
	CHECK(lf.rotations > rot0 + 10);
	/* Cut at newlines: both files end with one, .1 begins a line. */
	size_t olen, clen;
	char *ot = NULL, *ct = NULL;
	REQUIRE(read_file(old, &ot, &olen, 1 << 20) == 0);
	REQUIRE(read_file(path, &ct, &clen, 1 << 20) == 0);
	CHECK(olen > 0 && ot[olen - 1] == '\n');
	CHECK(!strncmp(ot, "line ", 5));
	CHECK(clen == 0 || ct[clen - 1] == '\n');
	/* What is kept is the end of everything written. */
	CHECK(olen + clen <= alen);
	CHECK(!memcmp(all + alen - clen, ct, clen));
	CHECK(!memcmp(all + alen - clen - olen, ot, olen));

	const unsigned asks[] = { 0, 1, 5, 20, 100, 10000 };
	for (size_t k = 0; k < ARRAY_SIZE(asks); k++) {
		const char *kept = all + alen - clen - olen;
		const char *want = model_tail(kept, clen + olen, asks[k]);

		CASE("the last %u lines", asks[k]);
		t = tail(path, asks[k], &len);
		REQUIRE(t);
		CHECK_EQ(len, strlen(want));
		CHECK(!strcmp(t, want));
		free(t);
	}
	CASE_END();
	/* The last 5 lines are whole lines, the last one 2000. */
	t = tail(path, 5, &len);
	CHECK(strstr(t, "line 1996 ") == t);
	CHECK(strstr(t, "line 2000 ") != NULL);
	free(t);
	free(ot);
	free(ct);
	logfile_close(&lf);

	/* Opened again to append (the shim's way): the size is known, the
	 * bound still holds. */
	REQUIRE(logfile_open(&lf, path, max, false) == 0);
	CHECK_EQ(lf.size, file_size(path));
	for (int i = 0; i < 200; i++)
		CHECK_EQ(logfile_write(&lf, "0123456789abcdef\n", 17), 0);
	CHECK(file_size(path) <= max && file_size(old) <= max);
	logfile_close(&lf);

	/* Truncate: a new log, the old rotation gone too. */
	REQUIRE(logfile_open(&lf, path, max, true) == 0);
	CHECK_EQ(file_size(path), 0);
	CHECK(access(old, F_OK) != 0);
	logfile_close(&lf);
	free(all);
}

/* One line longer than the bound is cut at it; a tail of it stays within
 * what is kept. */
static void test_long_line(void)
{
	char path[300], old[310], *big, *t;
	struct logfile lf;
	size_t len;

	snprintf(path, sizeof(path), "%s/long.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	big = malloc(20000);
	REQUIRE(big);
	memset(big, 'x', 20000);
	big[19999] = '\n';
	REQUIRE(logfile_open(&lf, path, 4096, true) == 0);
	CHECK_EQ(logfile_write(&lf, "before\n", 7), 0);
	CHECK_EQ(logfile_write(&lf, big, 20000), 0);
	CHECK(file_size(path) <= 4096 && file_size(old) <= 4096);
	logfile_close(&lf);
	t = tail(path, 1, &len);
	CHECK(len > 0 && len <= 8192);
	CHECK(t[len - 1] == '\n');
	free(t);
	free(big);
}

/* No bound: one file, never rotated. */
static void test_unbounded(void)
{
	char path[300], old[310], *t;
	struct logfile lf;
	size_t len;

	snprintf(path, sizeof(path), "%s/free.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	REQUIRE(logfile_open(&lf, path, 0, true) == 0);
	for (int i = 0; i < 1000; i++)
		CHECK_EQ(logfile_write(&lf, "a line of text\n", 15), 0);
	logfile_close(&lf);
	CHECK_EQ(file_size(path), 15000);
	CHECK(access(old, F_OK) != 0);
	t = tail(path, 2, &len);
	CHECK_STR(t, "a line of text\na line of text\n");
	free(t);
	/* A last line without its newline counts. */
	REQUIRE(write_file_atomic(path, "a\nb\nc", 5, 0644) == 0);
	t = tail(path, 2, &len);
	CHECK_STR(t, "b\nc");
	free(t);
	t = tail(path, 3, &len);
	CHECK_STR(t, "a\nb\nc");
	free(t);
	/* A log that was never written: empty. */
	snprintf(path, sizeof(path), "%s/none.log", dir);
	t = tail(path, 10, &len);
	CHECK_EQ(len, 0);
	CHECK_STR(t, "");
	free(t);
	/* Only the rotated file (between a rename and the new file). */
	REQUIRE(write_file_atomic(old, "x\ny\n", 4, 0644) == 0);
	snprintf(path, sizeof(path), "%s/free.log", dir);
	unlink(path);
	t = tail(path, 1, &len);
	CHECK_STR(t, "y\n");
	free(t);
	CHECK_EQ(logfile_remove(path), 0);
	CHECK(access(old, F_OK) != 0);
	CHECK_EQ(logfile_remove(path), 0); /* gone already: fine */
}

/* More than LOGFILE_TAIL_MAX_BYTES of lines asked for: the answer is capped,
 * and begins at a line. */
static void test_cap(void)
{
	char path[300], line[2100], *t;
	struct logfile lf;
	size_t len;

	snprintf(path, sizeof(path), "%s/cap.log", dir);
	REQUIRE(logfile_open(&lf, path, 0, true) == 0);
	memset(line, 'z', sizeof(line));
	for (int i = 0; i < 6000; i++) {
		int n = snprintf(line, 16, "%05d ", i);

		line[n] = 'z';
		line[2047] = '\n';
		CHECK_EQ(logfile_write(&lf, line, 2048), 0);
	}
	logfile_close(&lf);
	t = tail(path, 10000, &len);
	REQUIRE(t);
	CHECK(len <= LOGFILE_TAIL_MAX_BYTES);
	CHECK(len > LOGFILE_TAIL_MAX_BYTES - 4096);
	CHECK_EQ(len % 2048, 0);
	CHECK(!strncmp(t + len - 2048, "05999 ", 6));
	free(t);
}

int main(void)
{
	log_set_level(LOG_ERR);
	REQUIRE(mkdtemp(dir));
	test_parse();
	test_rotation();
	test_long_line();
	test_unbounded();
	test_cap();
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
