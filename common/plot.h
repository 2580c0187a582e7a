/* SPDX-License-Identifier: Apache-2.0 */
/* plot.h — a latency CDF as a hand-written SVG.
 *
 * One step line per series (the empirical CDF of common/stats.h), x axis in
 * the series' unit (linear from 0, or logarithmic when the values span more
 * than a factor of 20, as a thaw start and a cold boot do), y axis the
 * fraction of samples 0..1, ticks and grid on both, axis labels, a title and a
 * legend.  The file is self-contained SVG 1.1 (no scripts, no external fonts).
 */
#ifndef THAW_PLOT_H
#define THAW_PLOT_H

#include <stddef.h>

#include "common/stats.h"

struct plot_series {
	const char *name;
	const struct stats_point *pts; /* ascending x, from stats_cdf(); may be NULL */
	size_t n;                      /* 0: listed in the legend as "no data" */
	size_t samples;                /* shown as "(n=...)" in the legend if > 0 */
};

/* The SVG as a new NUL-terminated string (you own it); NULL on -ENOMEM. */
char *plot_cdf_svg(const char *title, const char *xlabel, const struct plot_series *series,
		   size_t nseries);
/* The same, written to path (atomically).  0 or -errno. */
int plot_cdf_svg_write(const char *path, const char *title, const char *xlabel,
		       const struct plot_series *series, size_t nseries);

#endif
