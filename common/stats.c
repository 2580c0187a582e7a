/* SPDX-License-Identifier: Apache-2.0 */
/* stats.c — see stats.h. */
#define LOG_PREFIX "stats: "
#include "common/stats.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void stats_init(struct stats *s)
{
	memset(s, 0, sizeof(*s));
	s->sorted = true;
}

void stats_release(struct stats *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

int stats_add(struct stats *s, double x)
{
	if (isnan(x))
		return -EINVAL;
	if (ARRAY_GROW(s->v, s->cap, s->n + 1, 64))
		return -ENOMEM;
	if (s->n && x < s->v[s->n - 1])
		s->sorted = false;
	s->v[s->n++] = x;
	return 0;
}

size_t stats_count(const struct stats *s)
{
	return s->n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void stats_sort(struct stats *s)
{
	if (!s->sorted) {
		qsort(s->v, s->n, sizeof(*s->v), cmp_double);
		s->sorted = true;
	}
}

int stats_percentile(struct stats *s, double p, double *out)
{
	size_t rank;

	if (!s->n || !(p >= 0 && p <= 100))
		return -EINVAL;
	stats_sort(s);
	/* ceil(p/100 * n) computed in integers where it matters: p * n / 100
	 * with p a whole number is exact in doubles for any realistic n, and a
	 * tiny epsilon keeps 90 * 10 / 100 from landing at 9.000000001. */
	rank = (size_t)ceil(p * (double)s->n / 100.0 - 1e-9);
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	*out = s->v[rank - 1];
	return 0;
}

int stats_mean(const struct stats *s, double *out)
{
	double sum = 0;

	if (!s->n)
		return -EINVAL;
	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	*out = sum / (double)s->n;
	return 0;
}

int stats_summarize(struct stats *s, struct stats_summary *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->n)
		return -EINVAL;
	stats_sort(s);
	out->n = s->n;
	out->min = s->v[0];
	out->max = s->v[s->n - 1];
	stats_mean(s, &out->mean);
	stats_percentile(s, 50, &out->p50);
	stats_percentile(s, 90, &out->p90);
	stats_percentile(s, 99, &out->p99);
	return 0;
}

int stats_cdf(struct stats *s, struct stats_point **pts, size_t *npts)
{
	struct stats_point *p;
	size_t k = 0;

	*pts = NULL;
	*npts = 0;
	if (!s->n)
		return -EINVAL;
	stats_sort(s);
	p = calloc(s->n, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++) {
		/* Only the last of a run of equal values makes a point. */
		if (i + 1 < s->n && s->v[i + 1] == s->v[i])
			continue;
		p[k].x = s->v[i];
		p[k].y = (double)(i + 1) / (double)s->n;
		k++;
	}
	*pts = p;
	*npts = k;
	return 0;
}

int stats_hist_init(struct stats_hist *h, const double *bounds, size_t n)
{
	memset(h, 0, sizeof(*h));
	if (n < 1)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1])) {
			pr_err("histogram bounds must be finite and strictly ascending");
			return -EINVAL;
		}
	}
	h->bounds = malloc(n * sizeof(*h->bounds));
	h->counts = calloc(n + 1, sizeof(*h->counts));
	if (!h->bounds || !h->counts) {
		stats_hist_release(h);
		return -ENOMEM;
	}
	memcpy(h->bounds, bounds, n * sizeof(*bounds));
	h->nbounds = n;
	return 0;
}

int stats_hist_init_exp(struct stats_hist *h, double first, double factor, size_t n)
{
	double *b;
	int ret;

	memset(h, 0, sizeof(*h));
	if (n < 1 || !(first > 0) || !(factor > 1))
		return -EINVAL;
	b = malloc(n * sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		b[i] = i ? b[i - 1] * factor : first;
	ret = stats_hist_init(h, b, n);
	free(b);
	return ret;
}

void stats_hist_release(struct stats_hist *h)
{
	free(h->bounds);
	free(h->counts);
	memset(h, 0, sizeof(*h));
}

void stats_hist_add(struct stats_hist *h, double x)
{
	size_t lo = 0, hi = h->nbounds;

	if (isnan(x))
		return;
	/* The first bound >= x; hi == nbounds is the +Inf bucket. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (h->bounds[mid] >= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	h->counts[lo]++;
	h->total++;
	h->sum += x;
}

uint64_t stats_hist_cumulative(const struct stats_hist *h, size_t i)
{
	uint64_t c = 0;

	if (i > h->nbounds)
		i = h->nbounds;
	for (size_t k = 0; k <= i; k++)
		c += h->counts[k];
	return c;
}

int stats_hist_write_prom(FILE *f, const char *name, const char *labels,
			  const struct stats_hist *h)
{
	const char *sep = labels && *labels ? "," : "";
	uint64_t c = 0;

	if (!labels)
		labels = "";
	fprintf(f, "# TYPE %s histogram\n", name);
	for (size_t i = 0; i <= h->nbounds; i++) {
		c += h->counts[i];
		if (i < h->nbounds)
			fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
				h->bounds[i], (unsigned long long)c);
		else
			fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
				(unsigned long long)c);
	}
	if (*labels) {
		fprintf(f, "%s_sum{%s} %.17g\n", name, labels, h->sum);
		fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->total);
	} else {
		fprintf(f, "%s_sum %.17g\n", name, h->sum);
		fprintf(f, "%s_count %llu\n", name, (unsigned long long)h->total);
	}
	return ferror(f) ? -EIO : 0;
}
