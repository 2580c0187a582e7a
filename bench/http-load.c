/* SPDX-License-Identifier: Apache-2.0 */
/* http-load.c — a closed-loop HTTP load: N requests of one URL, C at a time,
 * each request's latency to the microsecond.
 *
 *	bench/http-load [-n N] [-c C] [--expect TEXT] URL
 *
 * C transfers are kept in flight from one thread (libcurl's multi interface,
 * which keeps connections for the next request); each answer must be a 200
 * whose body holds TEXT (if given).  Prints one line: the requests, how many
 * were right, p50, p90, p99 and max of their latencies (ms, nearest rank:
 * each a latency that happened; common/stats.h) and requests per second over
 * the run.  Exit 0 when every request was right, 1 otherwise, 2 on a usage
 * error.  hey (bench/routed-run.sh's other tool) reports to 0.1 ms only:
 * what routing adds is below that.
 */
#define LOG_PREFIX "http-load: "
#include "common/log.h"
#include "common/stats.h"
#include "common/util.h"

#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BODY (1u << 20)

struct xfer {
	CURL *h;
	char *body;
	size_t len;
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t k = size * n;
	char *b;

	if (x->len + k > MAX_BODY)
		return 0;
	b = realloc(x->body, x->len + k + 1);
	if (!b)
		return 0;
	memcpy(b + x->len, data, k);
	x->body = b;
	x->len += k;
	b[x->len] = '\0';
	return k;
}

static int usage(void)
{
	fprintf(stderr, "usage: http-load [-n N] [-c C] [--expect TEXT] URL\n");
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "expect", required_argument, NULL, 'e' },
					      { NULL, 0, NULL, 0 } };
	long n = 1000, c = 1, sent = 0, done = 0, right = 0;
	const char *expect = NULL, *url;
	struct xfer *x = NULL;
	struct stats lat;
	struct stats_summary sum;
	CURLM *m = NULL;
	uint64_t t0;
	double wall_s;
	int opt, ret = 1;

	while ((opt = getopt_long(argc, argv, "n:c:", opts, NULL)) != -1) {
		if (opt == 'n')
			n = atol(optarg);
		else if (opt == 'c')
			c = atol(optarg);
		else if (opt == 'e')
			expect = optarg;
		else
			return usage();
	}
	if (optind != argc - 1 || n < 1 || c < 1 || c > 4096)
		return usage();
	url = argv[optind];
	if (c > n)
		c = n;
	stats_init(&lat);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	m = curl_multi_init();
	x = calloc((size_t)c, sizeof(*x));
	if (!m || !x) {
		pr_err("out of memory");
		goto out;
	}
	for (long i = 0; i < c; i++) {
		x[i].h = curl_easy_init();
		if (!x[i].h) {
			pr_err("out of memory");
			goto out;
		}
		curl_easy_setopt(x[i].h, CURLOPT_URL, url);
		curl_easy_setopt(x[i].h, CURLOPT_PROXY, "");
		curl_easy_setopt(x[i].h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(x[i].h, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(x[i].h, CURLOPT_WRITEDATA, &x[i]);
		curl_easy_setopt(x[i].h, CURLOPT_PRIVATE, &x[i]);
		curl_easy_setopt(x[i].h, CURLOPT_TIMEOUT, 120L);
	}
	t0 = now_ns();
	for (; sent < c; sent++)
		curl_multi_add_handle(m, x[sent].h);
	while (done < n) {
		CURLMsg *msg;
		int running, left;

		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left))) {
			struct xfer *t = NULL;
			curl_off_t us = 0;
			long code = 0;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
			curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &code);
			curl_easy_getinfo(t->h, CURLINFO_TOTAL_TIME_T, &us);
			if (msg->data.result == CURLE_OK && code == 200 &&
			    (!expect || (t->body && strstr(t->body, expect))))
				right++;
			else if (done - right < 3)
				pr_warn("request %ld: %s, status %ld, body %.80s", done,
					curl_easy_strerror(msg->data.result), code,
					t->body ? t->body : "");
			stats_add(&lat, (double)us / 1000.0);
			done++;
			t->len = 0;
			curl_multi_remove_handle(m, t->h);
			if (sent < n) {
				curl_multi_add_handle(m, t->h);
				sent++;
			}
		}
		if (done < n)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	}
	wall_s = ms_since(t0) / 1000.0;
	stats_summarize(&lat, &sum);
	printf("requests %ld right %ld p50 %.3f p90 %.3f p99 %.3f max %.3f ms, %.0f requests/s\n",
	       n, right, sum.p50, sum.p90, sum.p99, sum.max, (double)n / wall_s);
	ret = right == n ? 0 : 1;
out:
	for (long i = 0; x && i < c; i++) {
		curl_easy_cleanup(x[i].h);
		free(x[i].body);
	}
	free(x);
	curl_multi_cleanup(m);
	stats_release(&lat);
	return ret;
}
