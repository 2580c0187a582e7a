/* SPDX-License-Identifier: Apache-2.0 */
/* check.h — the assertions of thaw's test programs.
 *
 * A test is a small program: exit 0 pass, 1 fail, 77 skip (see
 * scripts/run-tests.sh).  CHECK* report every failure with its line and go on;
 * main returns check_failures ? 1 : 0.  REQUIRE* stop the test at once.
 */
#ifndef THAW_TEST_CHECK_H
#define THAW_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
				#cond);                                              \
			check_failures++;                                            \
		}                                                                    \
	} while (0)

#define CHECK_EQ(a, b)                                                               \
	do {                                                                         \
		long long _a = (long long)(a), _b = (long long)(b);                  \
		if (_a != _b) {                                                      \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n",    \
				__FILE__, __LINE__, #a, #b, _a, _b);                 \
			check_failures++;                                            \
		}                                                                    \
	} while (0)

#define CHECK_STR(a, b)                                                              \
	do {                                                                         \
		const char *_a = (a), *_b = (b);                                     \
		if (!_a || !_b || strcmp(_a, _b)) {                                  \
			fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", \
				__FILE__, __LINE__, #a, #b, _a ? _a : "(null)",      \
				_b ? _b : "(null)");                                 \
			check_failures++;                                            \
		}                                                                    \
	} while (0)

#define REQUIRE(cond)                                                                \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: REQUIRE(%s) failed\n", __FILE__,     \
				__LINE__, #cond);                                    \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

#define SKIP(why)                                                                    \
	do {                                                                         \
		printf("skipped: %s\n", why);                                        \
		exit(77);                                                            \
	} while (0)

#endif
