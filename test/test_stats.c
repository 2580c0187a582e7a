/* SPDX-License-Identifier: Apache-2.0 */
/* test_stats.c — common/stats: nearest-rank percentiles, histograms, CDFs.
 * Expected values are worked out by hand in the comments: nearest rank of the
 * p-th percentile of n sorted samples is ceil(p/100 * n). */
#include "common/stats.h"
#include "test/check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_NEAR(a, b)                                                             \
	do {                                                                         \
		double _a = (a), _b = (b);                                           \
		if (fabs(_a - _b) > 1e-9)                                            \
			CHECK_FAILED("%s == %s failed: %g != %g", #a, #b, _a, _b);   \
	} while (0)

static double pct(struct stats *s, double p)
{
	double v = NAN;

	CHECK_EQ(stats_percentile(s, p, &v), 0);
	return v;
}

static void fill(struct stats *s, const double *v, size_t n)
{
	stats_init(s);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(stats_add(s, v[i]), 0);
}

static void test_empty(void)
{
	struct stats s;
	struct stats_summary sum;
	struct stats_point *pts = (void *)1;
	size_t n = 7;
	double v = 42;

	stats_init(&s);
	CHECK_EQ(stats_percentile(&s, 50, &v), -EINVAL);
	CHECK_NEAR(v, 42); /* untouched */
	CHECK_EQ(stats_mean(&s, &v), -EINVAL);
	CHECK_EQ(stats_summarize(&s, &sum), -EINVAL);
	CHECK_EQ(sum.n, 0);
	CHECK_EQ(stats_cdf(&s, &pts, &n), -EINVAL);
	CHECK(pts == NULL);
	CHECK_EQ(n, 0);
	CHECK_EQ(stats_add(&s, NAN), -EINVAL);
	CHECK_EQ(stats_count(&s), 0);
	stats_release(&s);
}

static void test_one(void)
{
	struct stats s;
	double one[] = { 3.5 };

	fill(&s, one, 1);
	CHECK_NEAR(pct(&s, 0), 3.5);
	CHECK_NEAR(pct(&s, 50), 3.5);
	CHECK_NEAR(pct(&s, 99), 3.5);
	CHECK_NEAR(pct(&s, 100), 3.5);
	CHECK_EQ(stats_percentile(&s, 101, &one[0]), -EINVAL);
	CHECK_EQ(stats_percentile(&s, -1, &one[0]), -EINVAL);
	CHECK_EQ(stats_percentile(&s, NAN, &one[0]), -EINVAL);
	stats_release(&s);
}

static void test_odd(void)
{
	/* Unsorted on purpose; sorted: 1 2 3 4 5. */
	double v[] = { 5, 1, 4, 2, 3 };
	struct stats s;
	struct stats_summary sum;

	fill(&s, v, 5);
	CHECK_NEAR(pct(&s, 50), 3);  /* ceil(2.5) = 3rd */
	CHECK_NEAR(pct(&s, 20), 1);  /* ceil(1.0) = 1st */
	CHECK_NEAR(pct(&s, 21), 2);  /* ceil(1.05) = 2nd */
	CHECK_NEAR(pct(&s, 90), 5);  /* ceil(4.5) = 5th */
	CHECK_NEAR(pct(&s, 80), 4);  /* ceil(4.0) = 4th */
	CHECK_NEAR(pct(&s, 0), 1);
	CHECK_EQ(stats_summarize(&s, &sum), 0);
	CHECK_EQ(sum.n, 5);
	CHECK_NEAR(sum.min, 1);
	CHECK_NEAR(sum.max, 5);
	CHECK_NEAR(sum.mean, 3);
	CHECK_NEAR(sum.p50, 3);
	CHECK_NEAR(sum.p90, 5);
	CHECK_NEAR(sum.p99, 5);
	stats_release(&s);
}

static void test_even(void)
{
	/* 10 20 30 40: the median by nearest rank is the 2nd, 20 (interpolation
	 * would say 25). */
	double v[] = { 40, 10, 30, 20 };
	struct stats s;

	fill(&s, v, 4);
	CHECK_NEAR(pct(&s, 50), 20);
	CHECK_NEAR(pct(&s, 51), 30); /* ceil(2.04) = 3rd */
	CHECK_NEAR(pct(&s, 75), 30); /* ceil(3.0) = 3rd */
	CHECK_NEAR(pct(&s, 76), 40);
	CHECK_NEAR(pct(&s, 25), 10);
	stats_release(&s);

	/* 1..100: pN is N exactly, p99.5 rounds up to the 100th. */
	stats_init(&s);
	for (int i = 100; i >= 1; i--)
		CHECK_EQ(stats_add(&s, i), 0);
	CHECK_NEAR(pct(&s, 50), 50);
	CHECK_NEAR(pct(&s, 90), 90);
	CHECK_NEAR(pct(&s, 99), 99);
	CHECK_NEAR(pct(&s, 99.5), 100);
	CHECK_NEAR(pct(&s, 1), 1);
	stats_release(&s);

	/* 10 samples: p90 is the 9th (900/100 must not round to the 10th). */
	stats_init(&s);
	for (int i = 1; i <= 10; i++)
		CHECK_EQ(stats_add(&s, i * 1.5), 0);
	CHECK_NEAR(pct(&s, 90), 13.5);
	CHECK_NEAR(pct(&s, 99), 15);
	stats_release(&s);
}

static void test_duplicates(void)
{
	/* sorted: 1 2 2 2 7 7 */
	double v[] = { 2, 7, 1, 2, 7, 2 };
	struct stats s;
	struct stats_point *p = NULL;
	size_t n = 0;
	double mean;

	fill(&s, v, 6);
	CHECK_NEAR(pct(&s, 50), 2);  /* 3rd */
	CHECK_NEAR(pct(&s, 67), 7);  /* ceil(4.02) = 5th */
	CHECK_NEAR(pct(&s, 66), 2);  /* ceil(3.96) = 4th */
	CHECK_EQ(stats_mean(&s, &mean), 0);
	CHECK_NEAR(mean, 21.0 / 6);
	/* CDF: one point per distinct value: (1,1/6) (2,4/6) (7,1). */
	CHECK_EQ(stats_cdf(&s, &p, &n), 0);
	REQUIRE(n == 3);
	CHECK_NEAR(p[0].x, 1);
	CHECK_NEAR(p[0].y, 1.0 / 6);
	CHECK_NEAR(p[1].x, 2);
	CHECK_NEAR(p[1].y, 4.0 / 6);
	CHECK_NEAR(p[2].x, 7);
	CHECK_NEAR(p[2].y, 1);
	free(p);
	/* Adding after a sort keeps the answers right. */
	CHECK_EQ(stats_add(&s, 0), 0);
	CHECK_NEAR(pct(&s, 0), 0);
	CHECK_EQ(stats_cdf(&s, &p, &n), 0);
	REQUIRE(n == 4);
	CHECK_NEAR(p[0].x, 0);
	CHECK_NEAR(p[0].y, 1.0 / 7);
	CHECK_NEAR(p[3].y, 1);
	free(p);
	stats_release(&s);
}

static void test_hist(void)
{
	double bounds[] = { 1, 5, 10 }, bad[] = { 1, 1 }, bad2[] = { 2, 1 };
	struct stats_hist h;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	CHECK_EQ(stats_hist_init(&h, bad, 2), -EINVAL);
	CHECK_EQ(stats_hist_init(&h, bad2, 2), -EINVAL);
	CHECK_EQ(stats_hist_init(&h, bounds, 0), -EINVAL);
	CHECK_EQ(stats_hist_init(&h, bounds, 3), 0);
	/* <= 1: 0.5 1 ; (1,5]: 1.01 5 ; (5,10]: 7 ; +Inf: 11 100 */
	double xs[] = { 0.5, 1, 1.01, 5, 7, 11, 100 };
	for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++)
		stats_hist_add(&h, xs[i]);
	CHECK_EQ(h.counts[0], 2);
	CHECK_EQ(h.counts[1], 2);
	CHECK_EQ(h.counts[2], 1);
	CHECK_EQ(h.counts[3], 2);
	CHECK_EQ(h.total, 7);
	CHECK_NEAR(h.sum, 125.51);
	CHECK_EQ(stats_hist_cumulative(&h, 0), 2);
	CHECK_EQ(stats_hist_cumulative(&h, 1), 4);
	CHECK_EQ(stats_hist_cumulative(&h, 2), 5);
	CHECK_EQ(stats_hist_cumulative(&h, 3), 7);

	f = open_memstream(&text, &len);
	REQUIRE(f);
	CHECK_EQ(stats_hist_write_prom(f, "thaw_x_ms", "fn=\"a\"", &h), 0);
	fclose(f);
	CHECK(strstr(text, "thaw_x_ms_bucket{fn=\"a\",le=\"5\"} 4\n") != NULL);
	CHECK(strstr(text, "thaw_x_ms_bucket{fn=\"a\",le=\"+Inf\"} 7\n") != NULL);
	CHECK(strstr(text, "thaw_x_ms_count{fn=\"a\"} 7\n") != NULL);
	free(text);
	stats_hist_release(&h);

	/* Exponential: 1 2 4 8. */
	CHECK_EQ(stats_hist_init_exp(&h, 1, 2, 4), 0);
	CHECK_NEAR(h.bounds[3], 8);
	stats_hist_add(&h, 3);
	stats_hist_add(&h, 8);
	stats_hist_add(&h, 9);
	CHECK_EQ(h.counts[2], 1);
	CHECK_EQ(h.counts[3], 1);
	CHECK_EQ(h.counts[4], 1);
	stats_hist_release(&h);
	CHECK_EQ(stats_hist_init_exp(&h, 1, 1, 4), -EINVAL);
}

int main(void)
{
	test_empty();
	test_one();
	test_odd();
	test_even();
	test_duplicates();
	test_hist();
	return check_failures ? 1 : 0;
}
