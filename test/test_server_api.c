/* SPDX-License-Identifier: Apache-2.0 */
/* test_server_api.c — thawd over real sockets: every endpoint and every error
 * status that needs no working restore (those are test/e2e_server.sh's).
 *
 * Starts build/thawd on a free port with a temporary data directory and a
 * token, then talks to it with libcurl: 200/201/202/204, 400 (malformed
 * JSON, bad ids, percent-encoded ids), 401 (no token, wrong token), 404, 405
 * with Allow, 409 (start without a snapshot, snapshot while one builds), 413
 * (a body over 1 MiB), 503 with Retry-After (--max-starts 0,
 * --max-snapshots 0), the persistence of functions across a restart and the
 * recovery of a snapshot left "building", the metrics, and a clean exit on
 * SIGTERM.
 */
#include "common/util.h"
#include "server/registry.h"
#include "test/check.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "t0ken-for-tests"

static char tmp[] = "/tmp/test_server_api.XXXXXX";
static char thawd_bin[PATH_MAX];
static pid_t thawd_pid = -1;
static unsigned port;

struct resp {
	long status;
	char *body;
	size_t len;
	char allow[128];
	char retry_after[32];
	char location[128];
	json_t *j; /* body parsed, if JSON */
};

static void resp_free(struct resp *r)
{
	free(r->body);
	json_decref(r->j);
	memset(r, 0, sizeof(*r));
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
	struct resp *r = arg;
	char *b = realloc(r->body, r->len + sz * n + 1);

	if (!b)
		return 0;
	memcpy(b + r->len, p, sz * n);
	r->body = b;
	r->len += sz * n;
	b[r->len] = '\0';
	return sz * n;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
	size_t l = strlen(name);

	if (n > l + 1 && !strncasecmp(line, name, l) && line[l] == ':') {
		const char *v = line + l + 1;
		size_t vl = n - l - 1;

		while (vl && (*v == ' '))
			v++, vl--;
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
			vl--;
		snprintf(out, outlen, "%.*s", (int)vl, v);
	}
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
	struct resp *r = arg;

	header_value(p, sz * n, "Allow", r->allow, sizeof(r->allow));
	header_value(p, sz * n, "Retry-After", r->retry_after, sizeof(r->retry_after));
	header_value(p, sz * n, "Location", r->location, sizeof(r->location));
	return sz * n;
}

/* One request; token NULL sends none, ctype NULL no Content-Type. */
static struct resp req_ct(const char *method, const char *path, const char *body, size_t blen,
			  const char *token, const char *ctype)
{
	struct resp r = { 0 };
	struct curl_slist *h = NULL;
	char url[2048], auth[256], ct[128];
	CURL *c = curl_easy_init();

	REQUIRE(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)blen);
	}
	if (token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		h = curl_slist_append(h, auth);
	}
	/* libcurl's default for a body is a form's type: none, or ctype. */
	snprintf(ct, sizeof(ct), "Content-Type:%s%s", ctype ? " " : "", ctype ? ctype : "");
	h = curl_slist_append(h, ct);
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	CURLcode cr = curl_easy_perform(c);
	if (cr != CURLE_OK) {
		fprintf(stderr, "%s %s: %s\n", method, path, curl_easy_strerror(cr));
		r.status = -1;
	} else {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	}
	if (r.body)
		r.j = json_loadb(r.body, r.len, 0, NULL);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return r;
}

/* A well-behaved client: a body goes as application/json. */
static struct resp req(const char *method, const char *path, const char *body, size_t blen,
		       const char *token)
{
	return req_ct(method, path, body, blen, token, body ? "application/json" : NULL);
}

static struct resp call(const char *method, const char *path, const char *body)
{
	return req(method, path, body, body ? strlen(body) : 0, TOKEN);
}

/* The error answer's code, or "" when the body is not docs/API.md's error shape. */
static const char *err_code(const struct resp *r)
{
	json_t *e = json_object_get(r->j, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));

	return code && msg && *msg ? code : "";
}

static const char *err_msg(const struct resp *r)
{
	const char *m = json_string_value(json_object_get(json_object_get(r->j, "error"), "message"));

	return m ? m : "";
}

#define EXPECT(r, st, code)                                                                   \
	do {                                                                                  \
		if ((r).status != (st) || strcmp(err_code(&(r)), (code)))                     \
			fprintf(stderr, "%s:%d: got %ld %s\n", __FILE__, __LINE__, (r).status, \
				(r).body ? (r).body : "");                                    \
		CHECK_EQ((r).status, (st));                                                   \
		CHECK_STR(err_code(&(r)), (code));                                            \
	} while (0)

static void start_thawd(const char *extra1, const char *extra2)
{
	char data[PATH_MAX], tier[PATH_MAX], token[PATH_MAX], portf[PATH_MAX], log[PATH_MAX];
	char *buf = NULL;

	snprintf(data, sizeof(data), "%s/data", tmp);
	snprintf(tier, sizeof(tier), "%s/tier", tmp);
	snprintf(token, sizeof(token), "%s/token", tmp);
	snprintf(portf, sizeof(portf), "%s/port", tmp);
	snprintf(log, sizeof(log), "%s/thawd.log", tmp);
	unlink(portf);
	thawd_pid = fork();
	REQUIRE(thawd_pid >= 0);
	if (thawd_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		execl(thawd_bin, thawd_bin, "--listen", "127.0.0.1:0", "--port-file", portf,
		      "--data-dir", data, "--ram-tier", tier, "--ram-tier-bytes", "64M",
		      "--token-file", token, extra1 ? extra1 : NULL, extra2, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		if (read_file(portf, &buf, NULL, 64) == 0 && atoi(buf) > 0)
			break;
		free(buf);
		buf = NULL;
		if (waitpid(thawd_pid, NULL, WNOHANG) == thawd_pid) {
			thawd_pid = -1;
			fprintf(stderr, "thawd exited; its log:\n");
			{ char cmd[PATH_MAX + 32]; snprintf(cmd, sizeof(cmd), "cat %s/thawd.log >&2", tmp); system(cmd); }
			REQUIRE(!"thawd started");
		}
		usleep(50 * 1000);
	}
	REQUIRE(buf);
	port = (unsigned)atoi(buf);
	free(buf);
}

/* SIGTERM; 0 if thawd exited 0 within 10 s. */
static int stop_thawd(void)
{
	int status = -1;

	if (thawd_pid <= 0)
		return 0;
	kill(thawd_pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(thawd_pid, &status, WNOHANG) == thawd_pid) {
			thawd_pid = -1;
			return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
		}
		usleep(50 * 1000);
	}
	kill(thawd_pid, SIGKILL);
	waitpid(thawd_pid, NULL, 0);
	thawd_pid = -1;
	return -1;
}

static void cleanup(void)
{
	if (thawd_pid > 0) {
		kill(thawd_pid, SIGKILL);
		waitpid(thawd_pid, NULL, 0);
	}
	rm_rf(tmp);
}

/* A function file as an earlier thawd left it: a snapshot in state, with
 * snapshot id snap (ready) or none. */
static void plant_function(const char *id, const char *state, const char *snap)
{
	char path[PATH_MAX + 80], dir[PATH_MAX];
	json_t *j = json_pack("{s:i, s:{s:[s], s:i}, s:{s:s, s:s?, s:s, s:I, s:I}}", "version", 1,
			      "spec", "command", "/bin/true", "port", 8000, "snapshot", "state",
			      state, "id", snap, "job", "job-7", "image_bytes", (json_int_t)0,
			      "stored_bytes", (json_int_t)0);
	char *text = json_dumps(j, 0);

	snprintf(dir, sizeof(dir), "%s/data/functions", tmp);
	REQUIRE(mkdir_p(dir, 0755) == 0);
	snprintf(path, sizeof(path), "%s/%s.json", dir, id);
	REQUIRE(write_file_atomic(path, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(j);
}

static const char SPEC[] = "{\"command\":[\"/nonexistent/function\"],\"port\":8000,"
			   "\"ready\":{\"tcp\":true,\"timeout_s\":2}}";

static void test_auth_and_paths(void)
{
	struct resp r;

	r = req("GET", "/healthz", NULL, 0, NULL);
	CHECK_EQ(r.status, 200);
	CHECK_STR(json_string_value(json_object_get(r.j, "status")), "ok");
	resp_free(&r);

	r = req("GET", "/functions", NULL, 0, NULL);
	EXPECT(r, 401, "unauthorized");
	resp_free(&r);
	r = req("GET", "/functions", NULL, 0, "wrong-token");
	EXPECT(r, 401, "unauthorized");
	resp_free(&r);
	r = req("GET", "/metrics", NULL, 0, TOKEN "x");
	EXPECT(r, 401, "unauthorized");
	resp_free(&r);
	/* Without the token, even a path that names nothing says 401. */
	r = req("GET", "/nothing-here", NULL, 0, NULL);
	EXPECT(r, 401, "unauthorized");
	resp_free(&r);

	r = call("GET", "/functions", NULL);
	CHECK_EQ(r.status, 200);
	CHECK(json_is_array(json_object_get(r.j, "functions")));
	resp_free(&r);

	r = call("GET", "/nothing-here", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("GET", "/functions/", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("GET", "/functions/a/b/c", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("GET", "/functions/..", NULL);
	EXPECT(r, 400, "invalid_id");
	resp_free(&r);
	r = call("GET", "/functions/%2e%2e", NULL);
	EXPECT(r, 400, "invalid_id");
	resp_free(&r);
	r = call("PUT", "/functions/..%2f..%2fetc", SPEC);
	EXPECT(r, 400, "invalid_id");
	resp_free(&r);
	r = call("PUT", "/functions/Upper", SPEC);
	EXPECT(r, 400, "invalid_id");
	resp_free(&r);

	r = call("POST", "/healthz", NULL);
	EXPECT(r, 405, "method_not_allowed");
	CHECK_STR(r.allow, "GET");
	resp_free(&r);
	r = call("PATCH", "/functions/a", "{}");
	EXPECT(r, 405, "method_not_allowed");
	CHECK_STR(r.allow, "GET, PUT, DELETE");
	resp_free(&r);
	r = call("GET", "/functions/a/start", NULL);
	EXPECT(r, 405, "method_not_allowed");
	CHECK_STR(r.allow, "POST");
	resp_free(&r);
	r = call("DELETE", "/instances", NULL);
	EXPECT(r, 405, "method_not_allowed");
	resp_free(&r);
}

static void test_bodies(void)
{
	struct resp r;
	char *big;

	r = call("PUT", "/functions/fn-a", "{\"command\": [\"x\"],\n \"port\": }");
	EXPECT(r, 400, "bad_request");
	CHECK(strstr(err_msg(&r), "line 2") != NULL);
	CHECK(strstr(err_msg(&r), "column") != NULL);
	resp_free(&r);
	r = call("PUT", "/functions/fn-a", "[1,2]");
	EXPECT(r, 400, "bad_request");
	resp_free(&r);
	r = call("PUT", "/functions/fn-a", "");
	EXPECT(r, 400, "bad_request");
	resp_free(&r);
	r = call("PUT", "/functions/fn-a", "{\"port\":8000}");
	EXPECT(r, 400, "bad_request"); /* no command: spec_parse names the field */
	resp_free(&r);
	r = call("PUT", "/functions/fn-a", "{\"id\":\"fn-b\",\"command\":[\"x\"],\"port\":1}");
	EXPECT(r, 400, "bad_request");
	resp_free(&r);

	/* 1 MiB + 1 byte: 413, whether the body is read or not. */
	big = malloc((1u << 20) + 2);
	REQUIRE(big);
	memset(big, ' ', (1u << 20) + 1);
	big[0] = '{';
	big[1u << 20] = '}';
	r = req("PUT", "/functions/fn-a", big, (1u << 20) + 1, TOKEN);
	EXPECT(r, 413, "too_large");
	resp_free(&r);
	free(big);
	/* thawd is still fine. */
	r = req("GET", "/healthz", NULL, 0, NULL);
	CHECK_EQ(r.status, 200);
	resp_free(&r);
}

/* Content-Type from the attack side: what a cross-site form (or fetch()
 * without a preflight) can send is refused with 415 and does nothing; what
 * curl -X PUT -d @spec.json sends (a form's type, a JSON body) is taken. */
static void test_content_types(void)
{
	static const char form[] = "application/x-www-form-urlencoded";
	struct resp r;

	r = req_ct("PUT", "/functions/ct-a", SPEC, strlen(SPEC), TOKEN, "text/plain");
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("PUT", "/functions/ct-a", SPEC, strlen(SPEC), TOKEN, "multipart/form-data");
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("PUT", "/functions/ct-a", SPEC, strlen(SPEC), TOKEN, NULL);
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("PUT", "/functions/ct-a", "command=x&port=1", 16, TOKEN, form);
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = call("GET", "/functions/ct-a", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	/* curl's default type with a JSON body, and a charset parameter. */
	r = req_ct("PUT", "/functions/ct-a", SPEC, strlen(SPEC), TOKEN, form);
	CHECK_EQ(r.status, 201);
	resp_free(&r);
	r = req_ct("PUT", "/functions/ct-a", SPEC, strlen(SPEC), TOKEN,
		   "Application/JSON; charset=utf-8");
	CHECK_EQ(r.status, 200);
	resp_free(&r);

	/* POST and DELETE: a form's type, with a body or without, is 415. */
	r = req_ct("POST", "/functions/ct-a/snapshot", "", 0, TOKEN, form);
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("POST", "/functions/ct-a/snapshot", "a=b", 3, TOKEN, form);
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("POST", "/functions/ct-a/start", "{}", 2, TOKEN, "text/plain;charset=UTF-8");
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("POST", "/functions/ct-a/start", "{}", 2, TOKEN, NULL);
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("DELETE", "/functions/ct-a", "x", 1, TOKEN, "text/plain");
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = req_ct("DELETE", "/functions/ct-a", "", 0, TOKEN, "multipart/form-data; boundary=x");
	EXPECT(r, 415, "unsupported_media_type");
	resp_free(&r);
	r = call("GET", "/functions/ct-a", NULL);
	CHECK_EQ(r.status, 200);
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.j, "snapshot"), "state")),
		  "none");
	resp_free(&r);
	r = call("DELETE", "/functions/ct-a", NULL);
	CHECK_EQ(r.status, 204);
	resp_free(&r);
}

static void test_functions(void)
{
	struct resp r;
	json_t *snap;

	r = call("PUT", "/functions/fn-a", SPEC);
	CHECK_EQ(r.status, 201);
	CHECK_STR(json_string_value(json_object_get(r.j, "id")), "fn-a");
	CHECK_STR(r.location, "/functions/fn-a");
	snap = json_object_get(r.j, "snapshot");
	CHECK_STR(json_string_value(json_object_get(snap, "state")), "none");
	resp_free(&r);
	r = call("PUT", "/functions/fn-a", SPEC);
	CHECK_EQ(r.status, 200);
	resp_free(&r);
	r = call("GET", "/functions/fn-a", NULL);
	CHECK_EQ(r.status, 200);
	CHECK_EQ(json_integer_value(json_object_get(r.j, "port")), 8000);
	CHECK(json_is_array(json_object_get(r.j, "command")));
	resp_free(&r);
	r = call("GET", "/functions", NULL);
	CHECK_EQ(json_array_size(json_object_get(r.j, "functions")), 1);
	resp_free(&r);
	r = call("GET", "/functions/nope", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);

	/* Starts and snapshots of what is not there. */
	r = call("POST", "/functions/nope/start", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("POST", "/functions/nope/snapshot", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("POST", "/functions/fn-a/start", NULL);
	EXPECT(r, 409, "no_snapshot");
	resp_free(&r);
	r = call("POST", "/functions/fn-a/snapshot?wait=maybe", NULL);
	EXPECT(r, 400, "bad_request");
	resp_free(&r);

	/* A snapshot of a function that cannot run fails cleanly, with a
	 * message, as an error answer (?wait=1) and in the function. */
	r = call("POST", "/functions/fn-a/snapshot?wait=1", NULL);
	CHECK(r.status >= 500 && r.status <= 504);
	CHECK(err_code(&r)[0] != '\0');
	fprintf(stderr, "snapshot of a function that cannot run: %ld %s", r.status, r.body);
	resp_free(&r);
	r = call("GET", "/functions/fn-a", NULL);
	snap = json_object_get(r.j, "snapshot");
	CHECK_STR(json_string_value(json_object_get(snap, "state")), "failed");
	CHECK(json_string_length(json_object_get(snap, "error")) > 0);
	CHECK(json_is_string(json_object_get(snap, "job")));
	resp_free(&r);

	/* Asynchronous: 202 and the job, which ends failed. */
	r = call("POST", "/functions/fn-a/snapshot", NULL);
	CHECK_EQ(r.status, 202);
	json_t *job = json_object_get(r.j, "job");
	const char *jid = json_string_value(json_object_get(job, "id"));
	REQUIRE(jid);
	char path[128], jid_copy[64];
	snprintf(jid_copy, sizeof(jid_copy), "%s", jid);
	snprintf(path, sizeof(path), "/jobs/%s", jid_copy);
	CHECK_STR(r.location, path);
	CHECK_STR(json_string_value(json_object_get(job, "function")), "fn-a");
	resp_free(&r);
	const char *state = NULL;
	for (int i = 0; i < 600; i++) {
		r = call("GET", path, NULL);
		CHECK_EQ(r.status, 200);
		state = json_string_value(json_object_get(r.j, "state"));
		if (state && (!strcmp(state, "done") || !strcmp(state, "failed"))) {
			CHECK_STR(state, "failed");
			CHECK(json_is_object(json_object_get(r.j, "error")));
			resp_free(&r);
			break;
		}
		resp_free(&r);
		usleep(100 * 1000);
	}
	r = call("GET", "/jobs", NULL);
	CHECK_EQ(r.status, 200);
	CHECK(json_array_size(json_object_get(r.j, "jobs")) >= 2);
	resp_free(&r);
	r = call("GET", "/jobs/job-99999", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);

	r = call("GET", "/instances", NULL);
	CHECK_EQ(r.status, 200);
	CHECK(json_is_array(json_object_get(r.j, "instances")));
	resp_free(&r);
	r = call("GET", "/instances/nope", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("DELETE", "/instances/nope", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
}

/* The value of the metrics line that starts with prefix, or -1. */
static double metric(const char *text, const char *prefix)
{
	size_t l = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, prefix, l) && p[l] == ' ')
			return atof(p + l + 1);
	}
	return -1;
}

static void test_limits_and_recovery(void)
{
	struct resp r;
	char path[PATH_MAX];

	/* As an earlier thawd left things: fn-ready with a snapshot, fn-built
	 * with one building when it died. */
	plant_function("fn-ready", "ready",
		       "sha256:00000000000000000000000000000000000000000000000000000000000000aa");
	plant_function("fn-built", "building", NULL);
	start_thawd("--max-starts=0", "--max-snapshots=0");

	/* Functions survive the restart. */
	r = call("GET", "/functions/fn-a", NULL);
	CHECK_EQ(r.status, 200);
	resp_free(&r);
	r = call("GET", "/functions/fn-built", NULL);
	CHECK_EQ(r.status, 200);
	json_t *snap = json_object_get(r.j, "snapshot");
	CHECK_STR(json_string_value(json_object_get(snap, "state")), "failed");
	CHECK_STR(json_string_value(json_object_get(snap, "error")), REGISTRY_RESTART_REASON);
	resp_free(&r);

	r = call("POST", "/functions/fn-ready/start", NULL);
	EXPECT(r, 503, "no_capacity");
	CHECK(atoi(r.retry_after) >= 1);
	resp_free(&r);
	r = call("POST", "/functions/fn-a/snapshot", NULL);
	EXPECT(r, 503, "no_capacity");
	CHECK(atoi(r.retry_after) >= 1);
	resp_free(&r);
	r = call("GET", "/functions/fn-a", NULL);
	/* A refused snapshot changes nothing. */
	CHECK_STR(json_string_value(json_object_get(json_object_get(r.j, "snapshot"), "state")),
		  "failed");
	resp_free(&r);

	r = call("GET", "/metrics", NULL);
	CHECK_EQ(r.status, 200);
	REQUIRE(r.body);
	CHECK_EQ(metric(r.body, "thaw_starts_total{function=\"fn-ready\"}"), 1);
	CHECK_EQ(metric(r.body,
			"thaw_start_failures_total{function=\"fn-ready\",code=\"no_capacity\"}"),
		 1);
	CHECK(metric(r.body, "thaw_store_bytes{kind=\"logical\"}") >= 0);
	CHECK(metric(r.body, "thaw_instances_running") == 0);
	CHECK(strstr(r.body, "# TYPE thaw_restore_phase_seconds histogram") != NULL);
	resp_free(&r);
	CHECK_EQ(stop_thawd(), 0);

	/* With room for starts: a snapshot that is not in the store is a
	 * clean error, never a crash. */
	start_thawd("--max-starts=4", NULL);
	r = call("POST", "/functions/fn-ready/start", NULL);
	CHECK(r.status == 409 || r.status == 503 || r.status == 500);
	CHECK(err_code(&r)[0] != '\0');
	fprintf(stderr, "start of a snapshot missing from the store: %ld %s", r.status, r.body);
	resp_free(&r);
	r = req("GET", "/healthz", NULL, 0, NULL);
	CHECK_EQ(r.status, 200);
	resp_free(&r);

	r = call("DELETE", "/functions/fn-a", NULL);
	CHECK_EQ(r.status, 204);
	resp_free(&r);
	r = call("DELETE", "/functions/fn-a", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	r = call("GET", "/functions/fn-a", NULL);
	EXPECT(r, 404, "not_found");
	resp_free(&r);
	snprintf(path, sizeof(path), "%s/data/functions/fn-a.json", tmp);
	CHECK(access(path, F_OK) != 0);
	CHECK_EQ(stop_thawd(), 0);
}

int main(void)
{
	const char *b = getenv("THAW_BUILD");
	char token[PATH_MAX];

	snprintf(thawd_bin, sizeof(thawd_bin), "%s/thawd", b && *b ? b : "build");
	if (access(thawd_bin, X_OK))
		SKIP("thawd is not built");
	REQUIRE(mkdtemp(tmp));
	atexit(cleanup);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	snprintf(token, sizeof(token), "%s/token", tmp);
	REQUIRE(write_file_atomic(token, TOKEN "\n", strlen(TOKEN) + 1, 0600) == 0);

	start_thawd(NULL, NULL);
	test_auth_and_paths();
	test_bodies();
	test_content_types();
	test_functions();
	CHECK_EQ(stop_thawd(), 0);
	test_limits_and_recovery();

	if (check_failures) {
		fprintf(stderr, "thawd's log:\n");
		snprintf(token, sizeof(token), "tail -n 60 %s/thawd.log >&2", tmp);
		system(token);
	}
	curl_global_cleanup();
	return check_failures ? 1 : 0;
}
