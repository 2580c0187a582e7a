/* SPDX-License-Identifier: Apache-2.0 */
/* plot.c — see plot.h. */
#define LOG_PREFIX "plot: "
#include "common/plot.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 800
#define H 480 /* without the legend, which goes below the x axis */
#define ML 80 /* margins: room for tick labels and axis titles */
#define MR 30
#define MT 44
#define MB 64
#define PW (W - ML - MR)
#define PH (H - MT - MB)

static const char *const colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
				      "#9467bd", "#8c564b", "#e377c2", "#7f7f7f" };

struct xaxis {
	bool log;
	double lo, hi; /* linear: data range shown; log: log10 of it */
};

static void put_escaped(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			/* Control characters are not allowed in XML 1.0. */
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, f);
		}
	}
}

/* 1, 2 or 5 times a power of ten, the smallest such >= x. */
static double nice_step(double x)
{
	double p = pow(10, floor(log10(x))), m = x / p;

	if (m <= 1)
		return p;
	if (m <= 2)
		return 2 * p;
	if (m <= 5)
		return 5 * p;
	return 10 * p;
}

static double px_x(const struct xaxis *ax, double x)
{
	double v = ax->log ? log10(x) : x;

	return ML + (v - ax->lo) / (ax->hi - ax->lo) * PW;
}

static double px_y(double y)
{
	return MT + (1 - y) * PH;
}

static void grid_x(FILE *f, const struct xaxis *ax, double x)
{
	double px = px_x(ax, x);

	fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", px,
		MT, px, MT + PH);
	fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#000\"/>\n", px,
		MT + PH, px, MT + PH + 5);
	fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", px,
		MT + PH + 19, x);
}

static void draw_x_ticks(FILE *f, const struct xaxis *ax)
{
	if (ax->log) {
		for (int e = (int)floor(ax->lo); e <= (int)ceil(ax->hi); e++) {
			static const double m[] = { 1, 2, 5 };

			for (size_t i = 0; i < ARRAY_SIZE(m); i++) {
				double x = m[i] * pow(10, e), l = log10(x);

				if (l >= ax->lo - 1e-9 && l <= ax->hi + 1e-9)
					grid_x(f, ax, x);
			}
		}
	} else {
		double step = nice_step((ax->hi - ax->lo) / 8);

		/* An integer count: adding step up in a double drifts. */
		for (int i = 0; i * step <= ax->hi + step * 1e-6; i++)
			grid_x(f, ax, i * step);
	}
}

static void draw_series(FILE *f, const struct xaxis *ax, const struct plot_series *s,
			const char *color)
{
	double prev_y = 0;

	if (!s->n)
		return;
	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
	/* A step function: flat until the next sample, then up by its share. */
	fprintf(f, "%.1f,%.1f", px_x(ax, s->pts[0].x), px_y(0));
	for (size_t i = 0; i < s->n; i++) {
		double x = px_x(ax, s->pts[i].x);

		fprintf(f, " %.1f,%.1f %.1f,%.1f", x, px_y(prev_y), x, px_y(s->pts[i].y));
		prev_y = s->pts[i].y;
	}
	fputs("\"/>\n", f);
}

static int legend_height(size_t nseries)
{
	return nseries ? 12 + 18 * (int)nseries : 0;
}

static void draw_legend(FILE *f, const struct plot_series *series, size_t nseries)
{
	/* Below the plot, so that it never hides a line. */
	int x0 = ML, y0 = H - 4;

	if (!nseries)
		return;
	fprintf(f,
		"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
		"stroke=\"#999\"/>\n",
		x0, y0, PW, legend_height(nseries) - 4);
	for (size_t i = 0; i < nseries; i++) {
		int y = y0 + 17 + 18 * (int)i;

		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
			"stroke-width=\"3\"/>\n",
			x0 + 8, y - 4, x0 + 32, y - 4, colors[i % ARRAY_SIZE(colors)]);
		fprintf(f, "<text x=\"%d\" y=\"%d\">", x0 + 40, y);
		put_escaped(f, series[i].name);
		if (series[i].n && series[i].samples)
			fprintf(f, " (n=%zu)", series[i].samples);
		else if (!series[i].n)
			fputs(" (no data)", f);
		fputs("</text>\n", f);
	}
}

static void choose_x(struct xaxis *ax, const struct plot_series *series, size_t nseries)
{
	double lo = INFINITY, hi = -INFINITY;

	for (size_t i = 0; i < nseries; i++) {
		for (size_t k = 0; k < series[i].n; k++) {
			lo = MIN(lo, series[i].pts[k].x);
			hi = MAX(hi, series[i].pts[k].x);
		}
	}
	if (!isfinite(lo)) { /* no data at all: an empty 0..1 frame */
		lo = 0;
		hi = 1;
	}
	ax->log = lo > 0 && hi / lo > 20;
	if (ax->log) {
		ax->lo = floor(log10(lo));
		ax->hi = ceil(log10(hi));
		if (ax->hi <= ax->lo)
			ax->hi = ax->lo + 1;
	} else {
		double step = nice_step(MAX(hi, 1e-9) / 8);

		ax->lo = 0;
		ax->hi = ceil(hi / step) * step;
		if (ax->hi <= 0)
			ax->hi = 1;
	}
}

char *plot_cdf_svg(const char *title, const char *xlabel, const struct plot_series *series,
		   size_t nseries)
{
	int height = H + legend_height(nseries);
	struct xaxis ax;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	choose_x(&ax, series, nseries);
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
		"font-size=\"12\">\n"
		"<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
		W, height, W, height, W, height);
	fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">",
		ML + PW / 2);
	put_escaped(f, title);
	fputs("</text>\n", f);

	/* y grid, ticks and labels: 0 .. 1 by 0.1. */
	for (int i = 0; i <= 10; i++) {
		double y = px_y(i / 10.0);

		fprintf(f,
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\"/>\n"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n",
			ML, y, ML + PW, y, ML - 5, y, ML, y, ML - 8, y + 4, i / 10.0);
	}
	draw_x_ticks(f, &ax);
	fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
		   "stroke=\"#000\"/>\n",
		ML, MT, PW, PH);
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + PW / 2, H - 18);
	put_escaped(f, xlabel);
	if (ax.log)
		fputs(" (log scale)", f);
	fputs("</text>\n", f);
	fprintf(f,
		"<text x=\"20\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">"
		"fraction of samples &#8804; x</text>\n",
		MT + PH / 2, MT + PH / 2);

	for (size_t i = 0; i < nseries; i++)
		draw_series(f, &ax, &series[i], colors[i % ARRAY_SIZE(colors)]);
	draw_legend(f, series, nseries);
	fputs("</svg>\n", f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int plot_cdf_svg_write(const char *path, const char *title, const char *xlabel,
		       const struct plot_series *series, size_t nseries)
{
	char *svg = plot_cdf_svg(title, xlabel, series, nseries);
	int ret;

	if (!svg) {
		pr_err("out of memory drawing %s", path);
		return -ENOMEM;
	}
	ret = write_file_atomic(path, svg, strlen(svg), 0644);
	free(svg);
	return ret;
}
