/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench — load test of thawd's start path, with baselines in the same run.
 *
 * Each start: POST /functions/<id>/start, then one inference request to the
 * endpoint of the answer, checked for a correct answer, then DELETE
 * /instances/<iid>.  Start latency = the start request's arrival time → the
 * instance's first correct inference answer.  Arrivals are open loop: in
 * --rate mode the clock starts at the scheduled arrival, so a harness that
 * falls behind shows up in the latency rather than hiding it.  The starts run
 * on one thread through libcurl's multi interface; the baselines (runc run /
 * runc restore of the same function, without thawd) run after them, one at a
 * time.
 *
 * See bench/README.md for how to drive it.
 */
#define LOG_PREFIX "thaw-bench: "
#include "common/config.h"
#include "common/cuda.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/oci.h"
#include "common/plot.h"
#include "common/runner.h"
#include "common/stats.h"
#include "common/util.h"
#include "function/spec.h"
#include "restore/gpu_restore.h"
#include "restore/mapped.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (4u << 20) /* an answer larger than this is a bad response */
#define NPHASES 9
#define MAX_KINDS_N 64

/* Counts by name: failure kinds ("start_http_503"), tiers ("ram"), restore
 * modes ("lazy"). */
struct kinds {
	char name[MAX_KINDS_N][48];
	uint64_t count[MAX_KINDS_N];
	size_t n;
};

/* A baseline series, measured in the same run. */
struct baseline {
	const char *name;
	bool requested;
	bool available;
	char why[512]; /* why it is not available */
	struct stats lat;
	struct kinds failures;
};

struct bench {
	/* what to run */
	const char *url;
	const char *function;
	char auth_header[600];
	char infer_method[16];
	char *infer_path;
	char *infer_body;
	char *expect;
	size_t expect_len;
	double start_timeout_s, infer_timeout_s, delete_timeout_s;
	bool keep_instances;
	long max_failures; /* more failed starts than this: exit 3 */
	long burst, repeat;
	double rate, duration_s;
	bool poisson;
	uint64_t seed;
	bool cold_tier;
	const char *cold_cmd;
	const char *json_path, *svg_path;
	const char *baseline_cold_spec, *baseline_plain_image;
	long baseline_runs;
	const char *runc_root;
	/* while running */
	CURLM *multi;
	int active;
	/* results */
	uint64_t attempts, ok;
	double max_send_lag_ms, wall_s;
	struct stats latency, answer, phase[NPHASES];
	struct kinds failures, delete_failures, tiers, modes;
	struct baseline cold, plain;
};

static const char *const phase_names[NPHASES] = { "load",	    "materialize", "setup",
						  "criu_restore", "endpoint",	   "lazy_wait",
						  "gpu_restore",  "ready",	   "total" };

/* SIGINT/SIGTERM: no new starts or baseline runs; what is running finishes
 * (every request has a timeout) and everything made is cleaned up. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	stop_requested = sig;
}

/* ---- failure counters -------------------------------------------------- */

static void kinds_add(struct kinds *k, const char *name)
{
	for (size_t i = 0; i < k->n; i++) {
		if (!strcmp(k->name[i], name)) {
			k->count[i]++;
			return;
		}
	}
	if (k->n == MAX_KINDS_N) {
		name = "other";
		for (size_t i = 0; i < k->n; i++) {
			if (!strcmp(k->name[i], name)) {
				k->count[i]++;
				return;
			}
		}
		k->n--; /* reuse the last slot for "other" */
	}
	snprintf(k->name[k->n], sizeof(k->name[0]), "%s", name);
	k->count[k->n++] = 1;
}

/* ---- one start --------------------------------------------------------- */

enum trial_phase { T_IDLE, T_START, T_INFER, T_DELETE, T_DONE };

struct trial {
	struct bench *b;
	CURL *h;
	struct curl_slist *hdrs;
	enum trial_phase phase;
	uint64_t t_sched; /* arrival: the clock of its start latency starts here */
	uint64_t t_sent;
	double answer_ms; /* arrival → 201 */
	double latency_ms; /* arrival → first correct inference answer */
	char *body;
	size_t len;
	bool too_big;
	char iid[128];
	char endpoint[128];
	char tier[16];
	const char *mode; /* "mapped", "lazy" or "eager" as the start answered; NULL: not said */
	double tm[NPHASES];
	bool has_tm[NPHASES];
	bool ok;
	char fail[48];
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct trial *t = arg;
	size_t n = size * nmemb;
	char *p;

	if (t->len + n > MAX_BODY) {
		t->too_big = true;
		return 0;
	}
	p = realloc(t->body, t->len + n + 1);
	if (!p)
		return 0;
	memcpy(p + t->len, data, n);
	t->body = p;
	t->len += n;
	t->body[t->len] = '\0';
	return n;
}

static void trial_reset_body(struct trial *t)
{
	free(t->body);
	t->body = NULL;
	t->len = 0;
	t->too_big = false;
	curl_slist_free_all(t->hdrs);
	t->hdrs = NULL;
}

/* Point t's easy handle at a new request.  api: a thawd request (token). */
static int trial_request(struct trial *t, const char *method, const char *url, const char *body,
			 double timeout_s, bool api)
{
	struct bench *b = t->b;
	CURL *h = t->h;
	CURLMcode mc;

	trial_reset_body(t);
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PRIVATE, t);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(MIN(timeout_s, 10.0) * 1000));
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never an http_proxy from the environment */
	/* No "Expect: 100-continue" round trip on larger bodies. */
	t->hdrs = curl_slist_append(t->hdrs, "Expect:");
	if (api && b->auth_header[0])
		t->hdrs = curl_slist_append(t->hdrs, b->auth_header);
	if (body)
		t->hdrs = curl_slist_append(t->hdrs, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, t->hdrs);
	if (!strcmp(method, "GET")) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	} else {
		if (!strcmp(method, "POST") || body) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
		}
		if (strcmp(method, "POST"))
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	}
	mc = curl_multi_add_handle(b->multi, h);
	if (mc != CURLM_OK) {
		pr_err("curl_multi_add_handle: %s", curl_multi_strerror(mc));
		return -ENOMEM;
	}
	b->active++;
	return 0;
}

/* The kind of a failed transfer, by what libcurl says went wrong. */
static const char *curl_kind(CURLcode res)
{
	switch (res) {
	case CURLE_OPERATION_TIMEDOUT:
		return "timeout";
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return "connect";
	case CURLE_WRITE_ERROR:
	case CURLE_WEIRD_SERVER_REPLY:
		return "bad_response";
	default:
		return "error";
	}
}

static void trial_fail(struct trial *t, const char *phase, const char *kind)
{
	snprintf(t->fail, sizeof(t->fail), "%s_%s", phase, kind);
}

static void trial_delete(struct trial *t)
{
	char url[1024];

	if (!t->iid[0] || t->b->keep_instances) {
		t->phase = T_DONE;
		return;
	}
	snprintf(url, sizeof(url), "%s/instances/%s", t->b->url, t->iid);
	t->phase = T_DELETE;
	if (trial_request(t, "DELETE", url, NULL, t->b->delete_timeout_s, true) < 0) {
		kinds_add(&t->b->delete_failures, "error");
		t->phase = T_DONE;
	}
}

/* 201 from thawd: take the instance, its endpoint, tier and timings. */
static int parse_start_answer(struct trial *t)
{
	json_error_t jerr;
	json_t *j, *v, *tm;
	const char *s;
	int ret = -EINVAL;

	j = json_loadb(t->body ? t->body : "", t->len, 0, &jerr);
	if (!j || !json_is_object(j)) {
		pr_debug("start answer is not a JSON object: %s", j ? "" : jerr.text);
		goto out;
	}
	s = json_string_value(json_object_get(j, "instance"));
	if (s && strlen(s) < sizeof(t->iid) && id_valid(s))
		snprintf(t->iid, sizeof(t->iid), "%s", s);
	s = json_string_value(json_object_get(j, "endpoint"));
	/* host:port only: it becomes part of a URL. */
	if (!s || !*s || strlen(s) >= sizeof(t->endpoint) || strpbrk(s, "/ ?#@\\\r\n\t"))
		goto out;
	snprintf(t->endpoint, sizeof(t->endpoint), "%s", s);
	s = json_string_value(json_object_get(j, "tier"));
	if (s)
		snprintf(t->tier, sizeof(t->tier), "%s", s);
	/* "pages" (mapped, lazy or eager); before it, only "lazy" said. */
	s = json_string_value(json_object_get(j, "pages"));
	v = json_object_get(j, "lazy");
	if (s && (!strcmp(s, "mapped") || !strcmp(s, "lazy") || !strcmp(s, "eager")))
		t->mode = !strcmp(s, "mapped") ? "mapped" : !strcmp(s, "lazy") ? "lazy" : "eager";
	else if (json_is_boolean(v))
		t->mode = json_is_true(v) ? "lazy" : "eager";
	tm = json_object_get(j, "timings_ms");
	for (int i = 0; i < NPHASES && json_is_object(tm); i++) {
		v = json_object_get(tm, phase_names[i]);
		if (json_is_number(v)) {
			t->tm[i] = json_number_value(v);
			t->has_tm[i] = true;
		}
	}
	ret = t->iid[0] ? 0 : -EINVAL;
out:
	json_decref(j);
	return ret;
}

static bool answer_correct(const struct bench *b, const struct trial *t)
{
	if (!b->expect)
		return true;
	return t->body && memmem(t->body, t->len, b->expect, b->expect_len);
}

/* A transfer of t finished with res; move t on to its next phase. */
static void trial_step(struct trial *t, CURLcode res)
{
	struct bench *b = t->b;
	long status = 0;
	char url[2048], kind[32];

	curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
	switch (t->phase) {
	case T_START:
		t->answer_ms = ms_since(t->t_sched);
		if (res != CURLE_OK) {
			trial_fail(t, "start", curl_kind(res));
			pr_debug("start %s: %s", t->fail, curl_easy_strerror(res));
			t->phase = T_DONE;
			return;
		}
		if (status < 200 || status > 299) {
			snprintf(kind, sizeof(kind), "http_%ld", status);
			trial_fail(t, "start", kind);
			t->phase = T_DONE;
			return;
		}
		if (parse_start_answer(t) < 0) {
			trial_fail(t, "start", "bad_response");
			trial_delete(t); /* an instance id without an endpoint still runs */
			return;
		}
		snprintf(url, sizeof(url), "http://%s%s", t->endpoint, b->infer_path);
		t->phase = T_INFER;
		if (trial_request(t, b->infer_method, url, b->infer_body, b->infer_timeout_s,
				  false) < 0) {
			trial_fail(t, "infer", "error");
			trial_delete(t);
		}
		return;
	case T_INFER:
		if (res != CURLE_OK) {
			trial_fail(t, "infer", curl_kind(res));
		} else if (status < 200 || status > 299) {
			snprintf(kind, sizeof(kind), "http_%ld", status);
			trial_fail(t, "infer", kind);
		} else if (!answer_correct(b, t)) {
			trial_fail(t, "infer", "wrong_answer");
			pr_debug("wrong answer from %s: %.200s", t->endpoint, t->body ? t->body : "");
		} else {
			t->latency_ms = ms_since(t->t_sched);
			t->ok = true;
		}
		trial_delete(t);
		return;
	case T_DELETE:
		if (res != CURLE_OK) {
			kinds_add(&b->delete_failures, curl_kind(res));
		} else if (status < 200 || status > 299) {
			snprintf(kind, sizeof(kind), "http_%ld", status);
			kinds_add(&b->delete_failures, kind);
		}
		t->phase = T_DONE;
		return;
	default:
		t->phase = T_DONE;
	}
}

static void trial_begin(struct trial *t)
{
	char url[1024];

	snprintf(url, sizeof(url), "%s/functions/%s/start", t->b->url, t->b->function);
	t->phase = T_START;
	t->t_sent = now_ns();
	if (trial_request(t, "POST", url, NULL, t->b->start_timeout_s, true) < 0) {
		trial_fail(t, "start", "error");
		t->phase = T_DONE;
	}
}

/* Fold a finished trial into the results. */
static void trial_account(struct bench *b, struct trial *t)
{
	b->attempts++;
	b->max_send_lag_ms = MAX(b->max_send_lag_ms, (double)(t->t_sent - t->t_sched) / 1e6);
	if (t->tier[0])
		kinds_add(&b->tiers, t->tier);
	if (t->mode)
		kinds_add(&b->modes, t->mode);
	if (!t->ok) {
		kinds_add(&b->failures, t->fail[0] ? t->fail : "unknown");
		return;
	}
	b->ok++;
	stats_add(&b->latency, t->latency_ms);
	stats_add(&b->answer, t->answer_ms);
	for (int i = 0; i < NPHASES; i++) {
		if (t->has_tm[i])
			stats_add(&b->phase[i], t->tm[i]);
	}
}

/* Run n starts, trial i at start + offs_ns[i] (ascending), all to completion. */
static int run_trials(struct bench *b, const uint64_t *offs_ns, size_t n)
{
	struct trial *tr;
	size_t next = 0, total = n;
	uint64_t t0;
	int ret = 0;

	tr = calloc(n ? n : 1, sizeof(*tr));
	if (!tr)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		tr[i].b = b;
		tr[i].h = curl_easy_init();
		if (!tr[i].h) {
			pr_err("curl_easy_init failed");
			ret = -ENOMEM;
			goto out;
		}
	}
	b->active = 0;
	t0 = now_ns();
	while (next < n || b->active > 0) {
		uint64_t now = now_ns();
		int running, left, wait_ms = 100;
		CURLMsg *msg;

		if (stop_requested && next < n) {
			pr_warn("stopping: %zu arrival(s) not sent", n - next);
			n = next;
			continue;
		}
		while (next < n && t0 + offs_ns[next] <= now) {
			tr[next].t_sched = t0 + offs_ns[next];
			trial_begin(&tr[next]);
			next++;
		}
		curl_multi_perform(b->multi, &running);
		while ((msg = curl_multi_info_read(b->multi, &left))) {
			struct trial *t = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
			curl_multi_remove_handle(b->multi, msg->easy_handle);
			b->active--;
			trial_step(t, msg->data.result);
		}
		if (next < n) {
			now = now_ns();
			if (t0 + offs_ns[next] <= now)
				continue;
			wait_ms = (int)MIN((t0 + offs_ns[next] - now + 999999) / 1000000, 100);
		}
		if (b->active > 0 || next < n)
			curl_multi_poll(b->multi, NULL, 0, wait_ms, NULL);
	}
	for (size_t i = 0; i < n; i++)
		trial_account(b, &tr[i]);
out:
	for (size_t i = 0; i < total; i++) {
		trial_reset_body(&tr[i]);
		if (tr[i].h)
			curl_easy_cleanup(tr[i].h);
	}
	free(tr);
	return ret;
}

/* ---- a few blocking requests (health checks, function spec) ------------- */

struct buf {
	char *p;
	size_t len;
};

static size_t on_buf(char *data, size_t size, size_t nmemb, void *arg)
{
	struct buf *b = arg;
	size_t n = size * nmemb;
	char *p;

	if (b->len + n > MAX_BODY)
		return 0;
	p = realloc(b->p, b->len + n + 1);
	if (!p)
		return 0;
	memcpy(p + b->len, data, n);
	p[b->len + n] = '\0';
	b->p = p;
	b->len += n;
	return n;
}

/* GET url; *status the HTTP status (0 if none), *body yours if not NULL. */
static int bench_get(const struct bench *b, const char *path, long *status, char **body,
	      double timeout_s)
{
	struct curl_slist *hdrs = NULL;
	struct buf out = { 0 };
	char url[1024];
	CURLcode res;
	CURL *h;

	*status = 0;
	if (body)
		*body = NULL;
	h = curl_easy_init();
	if (!h)
		return -ENOMEM;
	snprintf(url, sizeof(url), "%s%s", b->url, path);
	if (b->auth_header[0])
		hdrs = curl_slist_append(hdrs, b->auth_header);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_buf);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
	res = curl_easy_perform(h);
	if (res == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
	if (res != CURLE_OK) {
		free(out.p);
		log_set_error("GET %s: %s", url, curl_easy_strerror(res));
		return res == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
	}
	if (body)
		*body = out.p;
	else
		free(out.p);
	return 0;
}

/* ---- arrivals ---------------------------------------------------------- */

/* splitmix64: the same seed gives the same arrivals on every libc. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Arrival offsets in [0, duration) at rate per second; *out yours. */
static int make_arrivals(double rate, double duration_s, bool poisson, uint64_t seed, uint64_t **out,
		  size_t *n)
{
	size_t cap = (size_t)(rate * duration_s * 2 + 16), k = 0;
	uint64_t *v = malloc(cap * sizeof(*v));
	double t = 0;

	if (!v)
		return -ENOMEM;
	for (;;) {
		if (poisson) {
			/* 53 random bits → u in (0, 1]; exponential gap of mean 1/rate. */
			double u = ((double)(rng_next(&seed) >> 11) + 1) / 9007199254740992.0;

			t += -log(u) / rate;
		} else {
			t = (double)k / rate;
		}
		if (t >= duration_s)
			break;
		if (k == cap) {
			uint64_t *p = realloc(v, cap * 2 * sizeof(*v));

			if (!p) {
				free(v);
				return -ENOMEM;
			}
			v = p;
			cap *= 2;
		}
		v[k++] = (uint64_t)(t * 1e9);
	}
	*out = v;
	*n = k;
	return 0;
}

/* ---- cold RAM tier ----------------------------------------------------- */

/* Empty the RAM tier the way the user told us (--cold-cmd: e.g. restart thawd
 * on an empty --ram-tier directory), then wait until thawd answers again. */
static int make_tier_cold(struct bench *b)
{
	uint64_t t0 = now_ns();
	long status = 0;
	int rc;

	rc = system(b->cold_cmd);
	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
		pr_err("--cold-cmd failed (%s): %s", rc == -1 ? "not run" : "non-zero exit",
		       b->cold_cmd);
		return -EIO;
	}
	while (ms_since(t0) < 60000) {
		if (bench_get(b, "/healthz", &status, NULL, 2) == 0 && status == 200)
			return 0;
		usleep(100 * 1000);
	}
	pr_err("thawd at %s did not answer /healthz within 60 s after --cold-cmd", b->url);
	return -ETIMEDOUT;
}

/* ---- the measured run -------------------------------------------------- */

static int run_thaw(struct bench *b)
{
	uint64_t *offs = NULL, t0 = now_ns();
	size_t n = 0;
	int ret = 0;

	if (b->burst > 0) {
		n = (size_t)b->burst;
		offs = calloc(n, sizeof(*offs)); /* all at once */
		if (!offs)
			return -ENOMEM;
		for (long r = 0; r < b->repeat; r++) {
			if (b->cold_tier) {
				ret = make_tier_cold(b);
				if (ret < 0)
					goto out;
			}
			ret = run_trials(b, offs, n);
			if (ret < 0)
				goto out;
		}
	} else {
		ret = make_arrivals(b->rate, b->duration_s, b->poisson, b->seed, &offs, &n);
		if (ret < 0)
			goto out;
		if (b->cold_tier) {
			ret = make_tier_cold(b);
			if (ret < 0)
				goto out;
		}
		t0 = now_ns();
		ret = run_trials(b, offs, n);
	}
out:
	b->wall_s = ms_since(t0) / 1000;
	free(offs);
	return ret;
}

/* ---- baselines --------------------------------------------------------
 *
 * Both run the function as thaw does (a runc container in its own network
 * namespace, the bundle written by common/oci.c from the function's spec) but
 * without thaw's server, store, engine or tier:
 *   cold boot:     runc run → first correct answer;
 *   plain restore: runc restore from an uncompressed image in tmpfs (+ CUDA
 *                  restore and unlock of its CUDA processes) → first correct
 *                  answer.
 * The answer is asked for inside the namespace (netns_connect), the same
 * request as the thaw starts', retried until it is right or time runs out.
 */

/* A relative (or missing) cwd of a spec file is taken against the file's
 * directory, as `thaw snapshot SPEC.json` does. */
static int resolve_cwd(json_t *j, const char *spec_path, char *why, size_t whylen)
{
	char buf[PATH_MAX], dir[PATH_MAX], joined[2 * PATH_MAX + 2], real[PATH_MAX];
	json_t *cwd = json_object_get(j, "cwd");

	if (cwd && (!json_is_string(cwd) || json_string_value(cwd)[0] == '/'))
		return 0;
	if (!cwd && json_object_get(j, "bundle"))
		return 0;
	snprintf(buf, sizeof(buf), "%s", spec_path);
	if (!realpath(dirname(buf), dir))
		goto bad;
	snprintf(joined, sizeof(joined), "%s/%s", dir, cwd ? json_string_value(cwd) : ".");
	if (!realpath(joined, real))
		goto bad;
	json_object_set_new(j, "cwd", json_string(real));
	return 0;
bad:
	snprintf(why, whylen, "cwd of %.200s: %s", spec_path, strerror(errno));
	return -EINVAL;
}

/* The spec: from --baseline-cold's file, else thawd's GET /functions/<id>
 * (less what is not spec: the snapshot state and such). */
static int fn_load(struct bench *b, struct func_spec **spec, char *why, size_t whylen)
{
	static const char *const keys[] = { "id",   "command", "env",	  "cwd",     "bundle",
					    "port", "ready",   "warmup", "prepare", "gpu" };
	json_error_t jerr;
	char *text = NULL, path[96], err[256];
	long status = 0;
	json_t *j = NULL, *v;
	const char *k;
	void *tmp;
	int ret;

	*spec = NULL;
	if (b->baseline_cold_spec) {
		j = json_load_file(b->baseline_cold_spec, 0, &jerr);
		if (!j) {
			snprintf(why, whylen, "cannot read spec %.200s: %.160s",
				 b->baseline_cold_spec, jerr.text);
			return -EINVAL;
		}
		if (json_is_object(j) && resolve_cwd(j, b->baseline_cold_spec, why, whylen) < 0) {
			ret = -EINVAL;
			goto out;
		}
	} else {
		snprintf(path, sizeof(path), "/functions/%s", b->function);
		ret = bench_get(b, path, &status, &text, 10);
		if (ret < 0 || status != 200) {
			snprintf(why, whylen, "no spec: GET %s: %.200s", path,
				 ret < 0 ? log_last_error() : "not 200");
			free(text);
			return ret < 0 ? ret : -ENOENT;
		}
		j = json_loads(text, 0, &jerr);
		free(text);
		if (!j) {
			snprintf(why, whylen, "GET %s: not JSON: %.160s", path, jerr.text);
			return -EINVAL;
		}
		json_object_foreach_safe(j, tmp, k, v) {
			bool known = false;

			for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
				known |= !strcmp(k, keys[i]);
			if (!known)
				json_object_del(j, k);
		}
	}
	ret = spec_parse(j, b->function, spec, err, sizeof(err));
	if (ret < 0)
		snprintf(why, whylen, "bad spec: %s", ret == -EINVAL ? err : strerror(-ret));
	else if (!(*spec)->command || !(*spec)->command[0])
		ret = -EINVAL, snprintf(why, whylen, "the spec has no command");
out:
	json_decref(j);
	return ret;
}

/* The bundle as prewarm writes it (restore/instance.c writes the same
 * mounts): CRIU restores only into the mounts the image was dumped with. */
static int write_fn_bundle(const struct func_spec *spec, const char *dir, const char *ns,
			   const char *cid, const char *mapped_src)
{
	struct oci_bind binds[2];
	char rootfs[PATH_MAX + 16], cgroup[192], port_env[32], **env = NULL;
	struct oci_spec o = { 0 };
	bool has_port = false;
	size_t nenv = 0;
	struct stat st;
	int ret;

	if (spec->bundle) {
		snprintf(rootfs, sizeof(rootfs), "%s/rootfs", spec->bundle);
		o.rootfs = stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode) ? rootfs : spec->bundle;
	}
	for (; spec->env && spec->env[nenv]; nenv++)
		has_port |= !strncmp(spec->env[nenv], "PORT=", 5);
	env = calloc(nenv + 2, sizeof(char *));
	if (!env)
		return -ENOMEM;
	if (nenv)
		memcpy(env, spec->env, nenv * sizeof(char *));
	snprintf(port_env, sizeof(port_env), "PORT=%u", spec->port);
	if (!has_port)
		env[nenv] = port_env;
	snprintf(cgroup, sizeof(cgroup), "thaw/%s", cid);
	o.argv = spec->command;
	o.env = env;
	o.cwd = spec->cwd;
	o.netns_path = ns;
	o.binds = binds;
	if (!o.rootfs && spec->cwd && strcmp(spec->cwd, "/"))
		binds[o.nbinds++] = (struct oci_bind){ spec->cwd, spec->cwd, false };
	/* The mount a snapshot's image has for mapped restore (restore/mapped.h):
	 * the plain restore binds an empty directory there, as an eager start does. */
	if (mapped_src)
		binds[o.nbinds++] = (struct oci_bind){ mapped_src, OCI_MAPPED_DEST, false };
	o.gpu = spec->gpu;
	o.hostname = spec->id;
	o.cgroups_path = cgroup;
	ret = oci_bundle_write(dir, &o);
	free(env);
	return ret;
}

/* The container's stdout and stderr, read until they close: a pipe nobody
 * reads would stall the function once it is full. */
struct drain {
	int fd[2];
	pthread_t thread;
	bool started;
};

static void *drain_thread(void *arg)
{
	struct drain *d = arg;
	struct pollfd p[2];
	char buf[4096];
	int open = 0;

	for (int i = 0; i < 2; i++) {
		p[i].fd = d->fd[i];
		p[i].events = POLLIN;
		open += d->fd[i] >= 0;
	}
	while (open > 0 && poll(p, 2, -1) >= 0) {
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			if (read(p[i].fd, buf, sizeof(buf)) <= 0) {
				p[i].fd = -1;
				open--;
			}
		}
	}
	return NULL;
}

static void drain_start(struct drain *d, struct runner_stdio *sio)
{
	d->fd[0] = sio->out_r;
	d->fd[1] = sio->err_r;
	d->started = !pthread_create(&d->thread, NULL, drain_thread, d);
}

static void drain_stop(struct drain *d)
{
	if (d->started)
		pthread_join(d->thread, NULL);
	for (int i = 0; i < 2; i++) {
		if (d->fd[i] >= 0)
			close(d->fd[i]);
		d->fd[i] = -1;
	}
	d->started = false;
}

/* One HTTP/1.1 request over fd (Connection: close), the whole answer read. */
static int http_on_fd(int fd, const struct bench *b, int timeout_ms, int *status, char **resp,
		      size_t *rlen)
{
	char *req = NULL, *out = NULL;
	size_t len = 0, cap = 0;
	uint64_t t0 = now_ns();
	int n, ret = 0;

	*resp = NULL;
	*rlen = 0;
	n = asprintf(&req,
		     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
		     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		     b->infer_method, b->infer_path, b->infer_body ? strlen(b->infer_body) : 0,
		     b->infer_body ? b->infer_body : "");
	if (n < 0)
		return -ENOMEM;
	ret = write_all(fd, req, (size_t)n);
	free(req);
	if (ret < 0)
		return ret;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = timeout_ms - (int)ms_since(t0);
		ssize_t r;

		if (left <= 0) {
			ret = -ETIMEDOUT;
			goto out;
		}
		if (poll(&p, 1, left) <= 0)
			continue;
		if (len + 4096 + 1 > cap) {
			char *q;

			if (cap >= MAX_BODY) {
				ret = -EFBIG;
				goto out;
			}
			cap = cap ? cap * 2 : 8192;
			q = realloc(out, cap);
			if (!q) {
				ret = -ENOMEM;
				goto out;
			}
			out = q;
		}
		r = read(fd, out + len, 4096);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (!out || len < 12 || strncmp(out, "HTTP/1.", 7)) {
		ret = -EPROTO;
		goto out;
	}
	out[len] = '\0';
	*status = atoi(out + 9);
	*resp = out;
	*rlen = len;
	out = NULL;
out:
	free(out);
	return ret;
}

/* Ask the function in namespace ns until it answers correctly: 0, or the
 * kind of the last failure ("timeout", "wrong_answer", ...) in kind. */
static int wait_correct(const struct bench *b, const char *ns, uint16_t port, double limit_s,
			const char **kind)
{
	uint64_t t0 = now_ns();

	*kind = "timeout";
	while (ms_since(t0) < limit_s * 1000 && !stop_requested) {
		int left = (int)(limit_s * 1000 - ms_since(t0)) + 1;
		int fd = netns_connect(ns, port, MIN(left, 1000));
		char *resp = NULL;
		size_t rlen = 0;
		int status = 0, ret;

		if (fd < 0) {
			*kind = fd == -ECONNREFUSED || fd == -ETIMEDOUT ? "timeout" : "connect";
			if (fd != -ECONNREFUSED && fd != -ETIMEDOUT)
				return fd;
			usleep(5000);
			continue;
		}
		ret = http_on_fd(fd, b, MIN(left, (int)(b->infer_timeout_s * 1000)), &status,
				 &resp, &rlen);
		close(fd);
		if (ret == 0 && status >= 200 && status < 300 &&
		    (!b->expect || memmem(resp, rlen, b->expect, b->expect_len))) {
			free(resp);
			return 0;
		}
		*kind = ret < 0 ? "no_answer" : status >= 200 && status < 300 ? "wrong_answer" :
									      "http_error";
		free(resp);
		usleep(5000);
	}
	return -ETIMEDOUT;
}

/* cp -a --sparse=always src/. dst: the image into our own tmpfs directory,
 * so that CRIU's files written beside the image never touch thaw's tier. */
static int copy_image(const char *src, const char *dst)
{
	char from[PATH_MAX + 100];
	int status;
	pid_t pid;

	snprintf(from, sizeof(from), "%s/.", src);
	pid = fork();
	if (pid < 0) {
		pr_perror("fork");
		return -errno;
	}
	if (pid == 0) {
		execlp("cp", "cp", "-a", "--sparse=always", from, dst, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		pr_err("cp -a %s %s failed", from, dst);
		return -EIO;
	}
	return 0;
}

/* CUDA restore + unlock of every CUDA process of the container whose first
 * process is init: the members of its PID namespace (runc ps answers null on
 * a cgroup v2 host), as restore/gpu_restore.c finds them. */
static int cuda_thaw_container(pid_t init)
{
	pid_t *pids = NULL, *cpids = NULL;
	size_t n = 0, nc = 0;
	int ret;

	ret = pidns_members(init, &pids, &n);
	if (!ret)
		ret = cuda_filter_processes(pids, n, &cpids, &nc);
	for (size_t i = 0; !ret && i < nc; i++) {
		ret = cuda_restore(cpids[i], NULL, 0);
		if (!ret)
			ret = cuda_unlock(cpids[i]);
	}
	free(pids);
	free(cpids);
	return ret;
}

/* Lock + checkpoint CUDA processes before the kill: killing a restored CUDA
 * process has hung hosts on some drivers. */
static void cuda_quiesce_container(pid_t init)
{
	pid_t *pids = NULL;
	size_t n = 0;

	if (init > 0 && pidns_members(init, &pids, &n) == 0)
		gpu_quiesce(pids, n);
	free(pids);
}

/* One baseline run: a container booted (image == NULL) or restored from
 * image, timed to its first correct answer.  0 and *ms, or -errno with the
 * failure's kind counted in bl->failures and its words in bl->why. */
static int baseline_once(struct bench *b, struct baseline *bl, const struct func_spec *f,
			 const struct runner *r, const char *image, int run, double *ms)
{
	char dir[3100], ns[PATH_MAX], bundle[PATH_MAX], work[PATH_MAX], empty[PATH_MAX];
	char log_path[PATH_MAX], cid[64];
	uint32_t mnt_id;
	struct runner_stdio sio = { -1, -1 };
	struct drain d = { .fd = { -1, -1 } };
	const char *kind = "setup";
	bool have_dir = false, have_ns = false, have_ctr = false;
	const char *tmp;
	pid_t init = 0;
	uint64_t t0;
	int ret;

	tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%.3000s/thaw-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		ret = -errno;
		pr_perror("mkdtemp %s", dir);
		goto out;
	}
	have_dir = true;
	snprintf(ns, sizeof(ns), "%s/netns", dir);
	snprintf(bundle, sizeof(bundle), "%s/bundle", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	snprintf(log_path, sizeof(log_path), "%s/runc.log", dir);
	snprintf(cid, sizeof(cid), "thaw-bench-%s-%d-%d", image ? "plain" : "cold", (int)getpid(),
		 run);
	kind = "netns";
	ret = netns_create(ns);
	if (ret < 0)
		goto out;
	have_ns = true;
	kind = "bundle";
	snprintf(empty, sizeof(empty), "%s/mapped-empty", dir);
	ret = mkdir(empty, 0755) < 0 ? -errno : 0;
	if (!ret)
		ret = write_fn_bundle(f, bundle, ns, cid,
				      !image || mapped_mount_id(image, &mnt_id) == 0 ? empty : NULL);
	if (ret < 0)
		goto out;
	t0 = now_ns();
	if (image) {
		kind = "restore";
		ret = runner_restore(r, bundle, cid, image, work, &sio, &init);
	} else {
		kind = "run";
		ret = runner_run(r, bundle, cid, log_path, &sio, &init);
	}
	if (ret < 0)
		goto out;
	have_ctr = true;
	drain_start(&d, &sio);
	if (image && f->gpu) {
		kind = "cuda_restore";
		ret = cuda_thaw_container(init);
		if (ret < 0)
			goto out;
	}
	ret = wait_correct(b, ns, f->port, f->ready_timeout_s + b->infer_timeout_s, &kind);
	if (ret == 0)
		*ms = ms_since(t0);
out:
	if (ret < 0) {
		kinds_add(&bl->failures, kind);
		snprintf(bl->why, sizeof(bl->why), "not available: %s%s: %s", kind,
			 stop_requested ? " (interrupted)" : "",
			 log_last_error()[0] ? log_last_error() : strerror(-ret));
	}
	if (have_ctr) {
		if (f->gpu)
			cuda_quiesce_container(init);
		runner_delete(r, cid);
	}
	drain_stop(&d);
	if (sio.out_r >= 0 && !d.started)
		close(sio.out_r);
	if (sio.err_r >= 0 && !d.started)
		close(sio.err_r);
	if (have_ns) {
		netns_remove(ns);
		/* Where mounts propagate, netns_create bound the directory that
		 * holds the namespace file onto itself, private: rm_rf does not
		 * cross mounts, so undo that first. */
		if (umount2(dir, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
			pr_warn("umount %s: %s", dir, strerror(errno));
	}
	/* Not "the name no longer ends in X": mkdtemp's own letters may. */
	if (have_dir && rm_rf(dir) < 0)
		pr_warn("%s is left behind", dir);
	return ret;
}

static void run_baseline(struct bench *b, struct baseline *bl, const struct func_spec *f,
			 const struct runner *r, const char *image)
{
	for (long i = 0; i < b->baseline_runs && !stop_requested; i++) {
		double ms = 0;

		fprintf(stderr, "thaw-bench: %s, run %ld of %ld\n", bl->name, i + 1,
			b->baseline_runs);
		log_clear_error();
		if (baseline_once(b, bl, f, r, image, (int)i, &ms) == 0)
			stats_add(&bl->lat, ms);
	}
	bl->available = stats_count(&bl->lat) > 0;
}

static void run_baselines(struct bench *b)
{
	char img[] = "/dev/shm/thaw-bench-plain-XXXXXX", why[400], src[PATH_MAX + 80];
	struct thaw_config c;
	struct runner r;
	struct func_spec *f = NULL;
	bool made_img = false; /* the directory, whatever copy_image got into it */

	if (!b->cold.requested && !b->plain.requested)
		return;
	if (fn_load(b, &f, why, sizeof(why)) < 0 || config_init(&c, NULL) < 0) {
		snprintf(b->cold.why, sizeof(b->cold.why), "not available: %s", why);
		snprintf(b->plain.why, sizeof(b->plain.why), "not available: %s", why);
		goto out;
	}
	if (f->gpu && cuda_init() < 0) {
		snprintf(b->cold.why, sizeof(b->cold.why), "not available: a GPU function and no GPU");
		snprintf(b->plain.why, sizeof(b->plain.why), "not available: a GPU function and no GPU");
		goto out;
	}
	r.runc = c.runc;
	r.criu = c.criu;
	r.state_dir = b->runc_root;
	if (b->cold.requested)
		run_baseline(b, &b->cold, f, &r, NULL);
	if (b->plain.requested) {
		/* "sha256:<hex>" names a snapshot in thaw's RAM tier. */
		if (!strncmp(b->baseline_plain_image, "sha256:", 7))
			snprintf(src, sizeof(src), "%s/%s", c.ram_tier_dir,
				 b->baseline_plain_image + 7);
		else
			snprintf(src, sizeof(src), "%.4000s", b->baseline_plain_image);
		made_img = mkdtemp(img) != NULL;
		if (!made_img || copy_image(src, img) < 0) {
			snprintf(b->plain.why, sizeof(b->plain.why),
				 "not available: cannot copy the image %.400s into tmpfs", src);
			goto out;
		}
		run_baseline(b, &b->plain, f, &r, img);
	}
out:
	if (made_img)
		rm_rf(img);
	spec_free(f);
}

/* ---- reporting --------------------------------------------------------- */

static void print_row(const char *name, struct stats *s)
{
	struct stats_summary m;

	if (stats_summarize(s, &m) < 0) {
		printf("%-28s %6d %9s %9s %9s %9s %9s\n", name, 0, "-", "-", "-", "-", "-");
		return;
	}
	printf("%-28s %6zu %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, m.n, m.mean, m.p50, m.p90,
	       m.p99, m.max);
}

static void print_kinds(const char *label, const struct kinds *k)
{
	printf("%s", label);
	if (!k->n)
		printf(" none");
	for (size_t i = 0; i < k->n; i++)
		printf("%s %s %llu", i ? "," : "", k->name[i], (unsigned long long)k->count[i]);
	printf("\n");
}

static void print_mode(const struct bench *b, FILE *f)
{
	if (b->burst > 0)
		fprintf(f, "burst %ld x %ld round%s", b->burst, b->repeat, b->repeat > 1 ? "s" : "");
	else
		fprintf(f, "rate %g/s for %g s (%s arrivals, seed %llu)", b->rate, b->duration_s,
			b->poisson ? "poisson" : "fixed", (unsigned long long)b->seed);
	if (b->cold_tier)
		fprintf(f, ", cold RAM tier");
}

static void print_baseline(struct baseline *bl)
{
	if (!bl->requested)
		return;
	if (bl->available)
		print_row(bl->name, &bl->lat);
	else
		printf("%-28s %s\n", bl->name, bl->why);
	if (bl->available && bl->failures.n)
		print_kinds("  failed runs:", &bl->failures);
}

static void print_table(struct bench *b)
{
	printf("thaw-bench: function %s at %s, ", b->function, b->url);
	print_mode(b, stdout);
	printf(", infer %s %s\n\n", b->infer_method, b->infer_path);
	printf("%-28s %6s %9s %9s %9s %9s %9s\n", "latency (ms)", "n", "mean", "p50", "p90",
	       "p99", "max");
	print_row("thaw start -> first answer", &b->latency);
	print_row("  start answered (201)", &b->answer);
	print_baseline(&b->cold);
	print_baseline(&b->plain);
	printf("\nrestore phases, mean of thawd's timings_ms over %llu good starts (ms):",
	       (unsigned long long)b->ok);
	for (int i = 0; i < NPHASES; i++) {
		double m;

		if (stats_mean(&b->phase[i], &m) == 0)
			printf(" %s %.1f", phase_names[i], m);
		else
			printf(" %s -", phase_names[i]);
	}
	printf("\n");
	print_kinds("tier:", &b->tiers);
	print_kinds("restored:", &b->modes);
	printf("starts: %llu attempted, %llu ok, %llu failed (%.1f s wall, max send lag %.1f ms)\n",
	       (unsigned long long)b->attempts, (unsigned long long)b->ok,
	       (unsigned long long)(b->attempts - b->ok), b->wall_s, b->max_send_lag_ms);
	print_kinds("failures:", &b->failures);
	print_kinds("instance deletes failed:", &b->delete_failures);
}

static json_t *summary_json(struct stats *s)
{
	struct stats_summary m;

	if (stats_summarize(s, &m) < 0)
		return json_pack("{s:i}", "n", 0);
	return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)m.n, "mean", m.mean,
			 "min", m.min, "p50", m.p50, "p90", m.p90, "p99", m.p99, "max", m.max);
}

static json_t *kinds_json(const struct kinds *k)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < k->n; i++)
		json_object_set_new(o, k->name[i], json_integer((json_int_t)k->count[i]));
	return o;
}

static json_t *baseline_json(struct baseline *bl)
{
	json_t *o;

	if (!bl->requested)
		return json_null();
	o = json_pack("{s:b}", "available", bl->available);
	if (!o)
		return NULL;
	if (bl->available) {
		json_object_set_new(o, "latency_ms", summary_json(&bl->lat));
		json_object_set_new(o, "failures", kinds_json(&bl->failures));
	} else {
		json_object_set_new(o, "reason", json_string(bl->why));
	}
	return o;
}

static int write_json(struct bench *b)
{
	json_t *j, *ph, *mode;
	char *text = NULL;
	int ret = -ENOMEM;

	ph = json_object();
	for (int i = 0; ph && i < NPHASES; i++) {
		double m;

		json_object_set_new(ph, phase_names[i],
				    stats_mean(&b->phase[i], &m) == 0 ? json_real(m) : json_null());
	}
	if (b->burst > 0)
		mode = json_pack("{s:s,s:I,s:I,s:b}", "kind", "burst", "burst", (json_int_t)b->burst,
				 "rounds", (json_int_t)b->repeat, "cold_tier", b->cold_tier);
	else
		mode = json_pack("{s:s,s:f,s:f,s:s,s:I,s:b}", "kind", "rate", "rate", b->rate,
				 "duration_s", b->duration_s, "arrivals",
				 b->poisson ? "poisson" : "fixed", "seed", (json_int_t)b->seed,
				 "cold_tier", b->cold_tier);
	j = json_pack("{s:s,s:s,s:o,s:{s:s,s:s},s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:f,s:f,s:{s:o,s:o}}",
		      "url", b->url, "function", b->function, "mode", mode, "infer", "method",
		      b->infer_method, "path", b->infer_path, "attempts", (json_int_t)b->attempts,
		      "ok", (json_int_t)b->ok, "failed", (json_int_t)(b->attempts - b->ok),
		      "start_latency_ms", summary_json(&b->latency), "start_answer_ms",
		      summary_json(&b->answer), "phases_mean_ms", ph, "failures",
		      kinds_json(&b->failures), "delete_failures", kinds_json(&b->delete_failures),
		      "tier", kinds_json(&b->tiers), "restore_mode", kinds_json(&b->modes),
		      "wall_s", b->wall_s, "max_send_lag_ms",
		      b->max_send_lag_ms, "baselines", "cold_boot", baseline_json(&b->cold),
		      "plain_restore", baseline_json(&b->plain));
	if (!j) {
		pr_err("building the JSON report failed");
		goto out;
	}
	text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text)
		goto out;
	ret = write_file_atomic(b->json_path, text, strlen(text), 0644);
out:
	free(text);
	json_decref(j);
	return ret;
}

static int write_svg(struct bench *b)
{
	struct stats *sets[] = { &b->latency, &b->cold.lat, &b->plain.lat };
	const char *names[] = { "thaw start (POST /start to first correct answer)",
				"cold boot (container start to first answer)",
				"plain runc restore from tmpfs" };
	bool shown[] = { true, b->cold.requested, b->plain.requested };
	struct plot_series ser[3];
	char title[256];
	size_t n = 0;
	int ret;

	for (size_t i = 0; i < ARRAY_SIZE(sets); i++) {
		if (!shown[i])
			continue;
		ser[n].name = names[i];
		ser[n].samples = stats_count(sets[i]);
		if (stats_cdf(sets[i], (struct stats_point **)&ser[n].pts, &ser[n].n) < 0) {
			ser[n].pts = NULL;
			ser[n].n = 0;
		}
		n++;
	}
	/* What ran, as the report says it: a burst of 1 is one start at a time. */
	if (b->burst == 1)
		snprintf(title, sizeof(title), "start latency CDF: %s, one start at a time, %ld rounds",
			 b->function, b->repeat);
	else if (b->burst > 1)
		snprintf(title, sizeof(title), "start latency CDF: %s, bursts of %ld, %ld rounds",
			 b->function, b->burst, b->repeat);
	else
		snprintf(title, sizeof(title), "start latency CDF: %s, open-loop arrivals at %.3g/s",
			 b->function, b->rate);
	ret = plot_cdf_svg_write(b->svg_path, title, "start latency (ms)", ser, n);
	for (size_t i = 0; i < n; i++)
		free((void *)ser[i].pts);
	return ret;
}

/* ---- options ----------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: thaw-bench --url URL --function ID [--token-file F] MODE\n"
		"                  --infer \"METHOD PATH [BODY]\" [--expect S | --expect-file F]\n"
		"                  [--json FILE] [--svg FILE]\n"
		"                  [--baseline-cold SPEC.json] [--baseline-plain IMAGE_DIR]\n"
		"modes:\n"
		"  --burst N [--repeat K]         N concurrent starts (K rounds, one after the other)\n"
		"  --rate R --duration S          open-loop arrivals at R/s for S seconds\n"
		"      [--arrivals poisson|fixed] [--seed N]   (default poisson, seed 1)\n"
		"  --cold-tier --cold-cmd CMD     empty the RAM tier before each round (burst)\n"
		"                                 or before the run (rate): CMD must do it, e.g.\n"
		"                                 restart thawd on an empty --ram-tier directory\n"
		"timeouts (seconds): --start-timeout 120 --infer-timeout 30 --delete-timeout 60\n"
		"  --keep        leave instances running (no DELETE)\n"
		"  --max-failures N    failed starts the run may have and still exit 0 (default 0)\n"
		"  --baseline-runs N   runs of each baseline (default 3)\n"
		"  --runc-root DIR     runc state of the baselines' containers (/run/thaw-bench);\n"
		"                      their bundles go under $TMPDIR (default /tmp)\n"
		"Start latency: arrival of the start request -> first correct inference answer.\n"
		"Exit status: 0 the run was made with at most --max-failures failed starts, 3 it\n"
		"was made with more (all reported), 1 error or interrupted (SIGINT/SIGTERM:\n"
		"what ran is reported and cleaned up).\n");
}

/* "GET /infer?x=7" or "POST /generate {json}". */
static int parse_infer(struct bench *b, const char *spec)
{
	const char *sp = strchr(spec, ' '), *path, *end;
	size_t ml = sp ? (size_t)(sp - spec) : 0;

	if (!sp || ml == 0 || ml >= sizeof(b->infer_method))
		goto bad;
	memcpy(b->infer_method, spec, ml);
	b->infer_method[ml] = '\0';
	for (size_t i = 0; i < ml; i++) {
		if (b->infer_method[i] < 'A' || b->infer_method[i] > 'Z')
			goto bad;
	}
	path = sp + 1;
	if (*path != '/')
		goto bad;
	end = strchr(path, ' ');
	b->infer_path = end ? strndup(path, (size_t)(end - path)) : strdup(path);
	b->infer_body = end && end[1] ? strdup(end + 1) : NULL;
	if (!b->infer_path || (end && end[1] && !b->infer_body))
		return -ENOMEM;
	return 0;
bad:
	pr_err("--infer wants \"METHOD /path [body]\", got \"%s\"", spec);
	return -EINVAL;
}

static int read_token(struct bench *b, const char *path)
{
	char *tok = NULL;
	size_t len = 0;
	int ret;

	ret = read_file(path, &tok, &len, 4096);
	if (ret < 0) {
		pr_err("cannot read --token-file %s: %s", path, strerror(-ret));
		return ret;
	}
	while (len && (tok[len - 1] == '\n' || tok[len - 1] == '\r' || tok[len - 1] == ' '))
		tok[--len] = '\0';
	if (!len || strpbrk(tok, "\r\n")) {
		pr_err("--token-file %s holds no single-line token", path);
		free(tok);
		return -EINVAL;
	}
	snprintf(b->auth_header, sizeof(b->auth_header), "Authorization: Bearer %s", tok);
	free(tok);
	return 0;
}

static int parse_double(const char *s, const char *opt, double *out, double min)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !isfinite(v) || v < min) {
		pr_err("%s: bad value \"%s\"", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_long(const char *s, const char *opt, long *out, long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < min) {
		pr_err("%s: bad value \"%s\" (a whole number >= %ld)", opt, s, min);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_args(struct bench *b, int argc, char **argv)
{
	enum { O_URL = 256, O_FN, O_TOKEN, O_BURST, O_REPEAT, O_RATE, O_DUR, O_ARR, O_SEED,
	       O_COLD, O_COLDCMD, O_INFER, O_EXPECT, O_EXPECTF, O_JSON, O_SVG, O_BCOLD,
	       O_BPLAIN, O_BRUNS, O_STO, O_ITO, O_DTO, O_KEEP, O_RROOT, O_HELP,
	       O_MAXF };
	static const struct option opts[] = {
		{ "url", 1, NULL, O_URL },	     { "function", 1, NULL, O_FN },
		{ "token-file", 1, NULL, O_TOKEN },  { "burst", 1, NULL, O_BURST },
		{ "repeat", 1, NULL, O_REPEAT },     { "rate", 1, NULL, O_RATE },
		{ "duration", 1, NULL, O_DUR },	     { "arrivals", 1, NULL, O_ARR },
		{ "seed", 1, NULL, O_SEED },	     { "cold-tier", 0, NULL, O_COLD },
		{ "cold-cmd", 1, NULL, O_COLDCMD },  { "infer", 1, NULL, O_INFER },
		{ "expect", 1, NULL, O_EXPECT },     { "expect-file", 1, NULL, O_EXPECTF },
		{ "json", 1, NULL, O_JSON },	     { "svg", 1, NULL, O_SVG },
		{ "baseline-cold", 1, NULL, O_BCOLD }, { "baseline-plain", 1, NULL, O_BPLAIN },
		{ "baseline-runs", 1, NULL, O_BRUNS }, { "start-timeout", 1, NULL, O_STO },
		{ "infer-timeout", 1, NULL, O_ITO }, { "delete-timeout", 1, NULL, O_DTO },
		{ "keep", 0, NULL, O_KEEP },	     { "max-failures", 1, NULL, O_MAXF },	     { "help", 0, NULL, O_HELP },
		{ "runc-root", 1, NULL, O_RROOT },
		{ NULL, 0, NULL, 0 },
	};
	const char *infer = NULL;
	long seed = 0;
	size_t len;
	int c, ret;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		ret = 0;
		switch (c) {
		case O_URL: b->url = optarg; break;
		case O_FN: b->function = optarg; break;
		case O_TOKEN: ret = read_token(b, optarg); break;
		case O_BURST: ret = parse_long(optarg, "--burst", &b->burst, 1); break;
		case O_REPEAT: ret = parse_long(optarg, "--repeat", &b->repeat, 1); break;
		case O_RATE: ret = parse_double(optarg, "--rate", &b->rate, 1e-6); break;
		case O_DUR: ret = parse_double(optarg, "--duration", &b->duration_s, 1e-3); break;
		case O_ARR:
			if (!strcmp(optarg, "poisson") || !strcmp(optarg, "fixed")) {
				b->poisson = !strcmp(optarg, "poisson");
			} else {
				pr_err("--arrivals is poisson or fixed");
				ret = -EINVAL;
			}
			break;
		case O_SEED:
			ret = parse_long(optarg, "--seed", &seed, 0);
			b->seed = (uint64_t)seed;
			break;
		case O_COLD: b->cold_tier = true; break;
		case O_COLDCMD: b->cold_cmd = optarg; break;
		case O_INFER: infer = optarg; break;
		case O_EXPECT:
			free(b->expect);
			b->expect = strdup(optarg);
			b->expect_len = strlen(optarg);
			break;
		case O_EXPECTF:
			free(b->expect);
			b->expect = NULL;
			ret = read_file(optarg, &b->expect, &len, 1 << 20);
			if (ret < 0) {
				pr_err("cannot read --expect-file %s: %s", optarg, strerror(-ret));
				break;
			}
			/* A trailing newline of the file is not part of the answer. */
			while (len && (b->expect[len - 1] == '\n' || b->expect[len - 1] == '\r'))
				b->expect[--len] = '\0';
			b->expect_len = len;
			break;
		case O_JSON: b->json_path = optarg; break;
		case O_SVG: b->svg_path = optarg; break;
		case O_BCOLD: b->baseline_cold_spec = optarg; break;
		case O_BPLAIN: b->baseline_plain_image = optarg; break;
		case O_BRUNS: ret = parse_long(optarg, "--baseline-runs", &b->baseline_runs, 1); break;
		case O_MAXF: ret = parse_long(optarg, "--max-failures", &b->max_failures, 0); break;
		case O_STO: ret = parse_double(optarg, "--start-timeout", &b->start_timeout_s, 0.001); break;
		case O_ITO: ret = parse_double(optarg, "--infer-timeout", &b->infer_timeout_s, 0.001); break;
		case O_DTO: ret = parse_double(optarg, "--delete-timeout", &b->delete_timeout_s, 0.001); break;
		case O_KEEP: b->keep_instances = true; break;
		case O_RROOT: b->runc_root = optarg; break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
		if (ret < 0)
			return ret;
	}
	if (optind < argc) {
		pr_err("unexpected argument \"%s\"", argv[optind]);
		return -EINVAL;
	}
	if (!b->function || !id_valid(b->function)) {
		pr_err("--function ID is required ([a-z0-9][a-z0-9._-]{0,62})");
		return -EINVAL;
	}
	if (strncmp(b->url, "http://", 7) && strncmp(b->url, "https://", 8)) {
		pr_err("--url must start with http:// or https://");
		return -EINVAL;
	}
	if ((b->burst > 0) == (b->rate > 0)) {
		pr_err("choose one mode: --burst N, or --rate R --duration S");
		return -EINVAL;
	}
	if (b->rate > 0 && !(b->duration_s > 0)) {
		pr_err("--rate needs --duration S");
		return -EINVAL;
	}
	if (b->cold_tier && !b->cold_cmd) {
		pr_err("--cold-tier needs --cold-cmd CMD to empty the RAM tier (thawd has no "
		       "endpoint for it): see bench/README.md");
		return -EINVAL;
	}
	if (!infer) {
		pr_err("--infer \"METHOD /path [body]\" is required: a start counts once the "
		       "instance answers it");
		return -EINVAL;
	}
	if (b->expect && !b->expect_len) {
		pr_err("--expect: an empty answer cannot tell right from wrong");
		return -EINVAL;
	}
	b->cold.requested = b->baseline_cold_spec != NULL;
	b->plain.requested = b->baseline_plain_image != NULL;
	return parse_infer(b, infer);
}

int main(int argc, char **argv)
{
	struct bench b = {
		.url = "http://127.0.0.1:8080",
		.start_timeout_s = 120,
		.infer_timeout_s = 30,
		.delete_timeout_s = 60,
		.repeat = 1,
		.poisson = true,
		.seed = 1,
		.baseline_runs = 3,
		.runc_root = "/run/thaw-bench",
		.cold = { .name = "baseline: cold boot" },
		.plain = { .name = "baseline: plain restore" },
	};
	size_t ul;
	int ret, rc = 1;

	stats_init(&b.latency);
	stats_init(&b.answer);
	stats_init(&b.cold.lat);
	stats_init(&b.plain.lat);
	for (int i = 0; i < NPHASES; i++)
		stats_init(&b.phase[i]);
	if (parse_args(&b, argc, argv) < 0)
		goto out_free;
	/* "http://host:8080/" and "http://host:8080" mean the same. */
	ul = strlen(b.url);
	while (ul > 8 && b.url[ul - 1] == '/')
		ul--;
	b.url = strndup(b.url, ul);
	if (!b.url)
		goto out_free;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		pr_err("curl_global_init failed");
		goto out_free;
	}
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	b.multi = curl_multi_init();
	if (!b.multi) {
		pr_err("curl_multi_init failed");
		goto out_curl;
	}
	ret = run_thaw(&b);
	if (ret < 0) {
		fprintf(stderr, "thaw-bench: the run stopped: %s\n",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		goto out_multi;
	}
	run_baselines(&b);
	print_table(&b);
	if (b.json_path && write_json(&b) < 0) {
		fprintf(stderr, "thaw-bench: cannot write %s\n", b.json_path);
		goto out_multi;
	}
	if (b.svg_path && write_svg(&b) < 0) {
		fprintf(stderr, "thaw-bench: cannot write %s\n", b.svg_path);
		goto out_multi;
	}
	if (stop_requested) {
		fprintf(stderr, "thaw-bench: interrupted by signal %d; the report covers what ran\n",
			(int)stop_requested);
		goto out_multi;
	}
	if ((long)(b.attempts - b.ok) > b.max_failures) {
		fprintf(stderr, "thaw-bench: %llu of %llu starts failed (--max-failures %ld)\n",
			(unsigned long long)(b.attempts - b.ok), (unsigned long long)b.attempts,
			b.max_failures);
		rc = 3;
		goto out_multi;
	}
	rc = 0;
out_multi:
	curl_multi_cleanup(b.multi);
out_curl:
	curl_global_cleanup();
	free((char *)b.url);
	b.url = NULL;
out_free:
	stats_release(&b.latency);
	stats_release(&b.answer);
	stats_release(&b.cold.lat);
	stats_release(&b.plain.lat);
	for (int i = 0; i < NPHASES; i++)
		stats_release(&b.phase[i]);
	free(b.infer_path);
	free(b.infer_body);
	free(b.expect);
	return rc;
}
