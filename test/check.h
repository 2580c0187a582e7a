/* SPDX-License-Identifier: Apache-2.0 */
/* check.h — the assertions of thaw's test programs.
 *
 * A test is a small program: exit 0 pass, 1 fail, 77 skip (see
 * scripts/run-tests.sh).  CHECK* report every failure and go on; main
 * returns check_failures ? 1 : 0.  REQUIRE* stop the test at once.
 *
 * A failure names itself: "file:line: in function(), case NAME: what
 * failed".  A test that runs one set of checks over many cases (a table, a
 * loop over inputs) names each case as it begins, CASE("size %s", in), so
 * that a failure says which input failed, not only the line every case
 * shares; CASE_END() when the cases are done.  Outside any case, the
 * function is the name.
 */
#ifndef THAW_TEST_CHECK_H
#define THAW_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static char check_case[256];

#define CASE(...)	snprintf(check_case, sizeof(check_case), __VA_ARGS__)
#define CASE_END()	(check_case[0] = '\0')

/* Print where a check failed and what (printf-style); stderr. */
__attribute__((format(printf, 4, 5), unused)) static void
check_report(const char *file, int line, const char *func, const char *fmt, ...)
{
	va_list ap;

	if (check_case[0])
		fprintf(stderr, "%s:%d: in %s(), case %s: ", file, line, func, check_case);
	else
		fprintf(stderr, "%s:%d: in %s(): ", file, line, func);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A failed check: reported, counted, and the test goes on. */
#define CHECK_FAILED(...)                                                            \
	do {                                                                         \
		check_report(__FILE__, __LINE__, __func__, __VA_ARGS__);             \
		check_failures++;                                                    \
	} while (0)

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond))                                                         \
			CHECK_FAILED("CHECK(%s) failed", #cond);                     \
	} while (0)

#define CHECK_EQ(a, b)                                                               \
	do {                                                                         \
		long long _a = (long long)(a), _b = (long long)(b);                  \
		if (_a != _b)                                                        \
			CHECK_FAILED("%s == %s failed: %lld != %lld", #a, #b, _a, _b); \
	} while (0)

#define CHECK_STR(a, b)                                                              \
	do {                                                                         \
		const char *_a = (a), *_b = (b);                                     \
		if (!_a || !_b || strcmp(_a, _b))                                    \
			CHECK_FAILED("%s == %s failed: \"%s\" != \"%s\"", #a, #b,     \
				     _a ? _a : "(null)", _b ? _b : "(null)");        \
	} while (0)

#define REQUIRE(cond)                                                                \
	do {                                                                         \
		if (!(cond)) {                                                       \
			check_report(__FILE__, __LINE__, __func__,                   \
				     "REQUIRE(%s) failed", #cond);                   \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

#define SKIP(why)                                                                    \
	do {                                                                         \
		printf("skipped: %s\n", why);                                        \
		exit(77);                                                            \
	} while (0)

#endif
