/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench: the starts (start, infer, delete) on libcurl's multi interface,
 * their arrivals, and the cold RAM tier between rounds. */
#include "internal.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	/* A body is JSON; a POST without one sends no type at all, not the
	 * form type libcurl would add (thawd refuses form posts: 415). */
	t->hdrs = curl_slist_append(t->hdrs, body ? "Content-Type: application/json"
						  : "Content-Type:");
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
			if (b->idle_stop_s > 0 && idle_watch(b, t->iid) < 0)
				pr_warn("instance %s: not watched (out of memory)", t->iid);
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
int bench_get(const struct bench *b, const char *path, long *status, char **body,
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

/* Run the user's command for option opt: 0, or -EIO (logged). */
static int run_cmd(const char *opt, const char *cmd)
{
	int rc = system(cmd);

	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
		pr_err("%s failed (%s): %s", opt, rc == -1 ? "not run" : "non-zero exit", cmd);
		return -EIO;
	}
	return 0;
}

/* Empty the RAM tier the way the user told us (--cold-cmd: e.g. restart thawd
 * on an empty --ram-tier directory), then wait until thawd answers again. */
static int make_tier_cold(struct bench *b)
{
	uint64_t t0 = now_ns();
	long status = 0;

	if (run_cmd("--cold-cmd", b->cold_cmd))
		return -EIO;
	while (ms_since(t0) < 60000) {
		if (bench_get(b, "/healthz", &status, NULL, 2) == 0 && status == 200)
			return 0;
		usleep(100 * 1000);
	}
	pr_err("thawd at %s did not answer /healthz within 60 s after --cold-cmd", b->url);
	return -ETIMEDOUT;
}

/* ---- the measured run -------------------------------------------------- */

int run_thaw(struct bench *b)
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
			if (b->round_cmd && (ret = run_cmd("--round-cmd", b->round_cmd)) < 0)
				goto out;
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
	if (ret >= 0 && b->idle_stop_s > 0)
		ret = idle_check(b);
	return ret;
}
