/* SPDX-License-Identifier: Apache-2.0 */
/* stats.h — samples, percentiles, histograms and CDFs of latencies.
 *
 * struct stats keeps every sample (a load test has thousands, not billions),
 * so percentiles are exact.  Percentiles use the NEAREST-RANK method: the
 * p-th percentile of n sorted samples is the sample of rank ceil(p/100 * n)
 * (1-based, at least 1), so every reported figure is a latency that really
 * happened; p0 is the minimum, p100 the maximum.
 *
 * struct stats_hist counts samples into fixed buckets, Prometheus style: bucket
 * i counts the samples x <= bounds[i] that fell in no earlier bucket, and one
 * more bucket (+Inf) takes the rest.  Nothing here locks: a caller that shares
 * one between threads holds its own lock.
 */
#ifndef THAW_STATS_H
#define THAW_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct stats {
	double *v;
	size_t n, cap;
	bool sorted;
};

/* A summary of a sample set; n == 0 means no samples (the rest is 0). */
struct stats_summary {
	size_t n;
	double min, mean, p50, p90, p99, max;
};

/* One point of an empirical CDF: a fraction y of the samples are <= x. */
struct stats_point {
	double x, y;
};

void stats_init(struct stats *s);
void stats_release(struct stats *s); /* frees the samples; s may be reused after stats_init */
/* Add one sample; -ENOMEM, or -EINVAL for NaN. */
int stats_add(struct stats *s, double x);
size_t stats_count(const struct stats *s);
/* Nearest-rank percentile, 0 <= p <= 100, into *out.  -EINVAL if there are no
 * samples or p is out of range. */
int stats_percentile(struct stats *s, double p, double *out);
/* Arithmetic mean; -EINVAL if there are no samples. */
int stats_mean(const struct stats *s, double *out);
/* n, min, mean, p50, p90, p99, max; -EINVAL (and a zeroed *out) if empty. */
int stats_summarize(struct stats *s, struct stats_summary *out);
/* The empirical CDF: one point per distinct sample value x, with y the fraction
 * of samples <= x, x ascending, the last y exactly 1.  *pts is yours to free.
 * -EINVAL if there are no samples, -ENOMEM. */
int stats_cdf(struct stats *s, struct stats_point **pts, size_t *npts);

struct stats_hist {
	double *bounds;    /* nbounds upper bounds, strictly ascending */
	uint64_t *counts;  /* nbounds + 1 buckets, the last one is +Inf */
	size_t nbounds;
	uint64_t total;
	double sum;
};

/* Buckets with the given upper bounds (copied).  -EINVAL unless n >= 1 and the
 * bounds are finite and strictly ascending; -ENOMEM. */
int stats_hist_init(struct stats_hist *h, const double *bounds, size_t n);
/* n exponential bounds first, first*factor, first*factor^2, ...  (factor > 1). */
int stats_hist_init_exp(struct stats_hist *h, double first, double factor, size_t n);
void stats_hist_release(struct stats_hist *h);
void stats_hist_add(struct stats_hist *h, double x);
/* The number of samples <= bounds[i] (i == nbounds: all of them). */
uint64_t stats_hist_cumulative(const struct stats_hist *h, size_t i);
/* The histogram in Prometheus text format: name_bucket{labels,le="..."},
 * name_sum, name_count.  labels is "" or 'k="v",...'.  0 or -EIO. */
int stats_hist_write_prom(FILE *f, const char *name, const char *labels,
			  const struct stats_hist *h);

#endif
