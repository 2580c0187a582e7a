/* SPDX-License-Identifier: Apache-2.0 */
/* test_server_units.c — thawd's parts that need no socket: routes and ids,
 * query and body parsing, listen addresses, metrics text, the bearer token,
 * the registry's persistence and recovery, jobs and their limit, error codes.
 */
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "function/spec.h"
#include "server/auth.h"
#include "server/errors.h"
#include "server/fallback.h"
#include "server/insts.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/route.h"
#include "test/check.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/test_server_units.XXXXXX";

static int route_of(const char *path, struct route *r)
{
	char err[256];

	return route_parse(path, r, err, sizeof(err));
}

static void test_routes(void)
{
	struct route r;
	char err[256], long_id[80];

	CHECK_EQ(route_of("/healthz", &r), 0);
	CHECK_EQ(r.kind, ROUTE_HEALTHZ);
	CHECK_EQ(route_of("/metrics", &r), 0);
	CHECK_EQ(r.kind, ROUTE_METRICS);
	CHECK_EQ(route_of("/functions", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTIONS);
	CHECK_EQ(route_of("/functions/fn-a.1_b", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTION);
	CHECK_STR(r.id, "fn-a.1_b");
	CHECK_EQ(route_of("/functions/x/snapshot", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTION_SNAPSHOT);
	CHECK_EQ(route_of("/functions/x/start", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTION_START);
	CHECK_EQ(route_of("/instances", &r), 0);
	CHECK_EQ(r.kind, ROUTE_INSTANCES);
	CHECK_EQ(route_of("/instances/i-1", &r), 0);
	CHECK_EQ(r.kind, ROUTE_INSTANCE);
	CHECK_EQ(route_of("/jobs/job-3", &r), 0);
	CHECK_EQ(r.kind, ROUTE_JOB);
	CHECK_EQ(route_of("/instances/i-1/logs", &r), 0);
	CHECK_EQ(r.kind, ROUTE_INSTANCE_LOGS);
	CHECK_STR(r.id, "i-1");
	CHECK_EQ(route_of("/jobs/job-3/logs", &r), 0);
	CHECK_EQ(r.kind, ROUTE_JOB_LOGS);
	CHECK_STR(r.id, "job-3");
	CHECK_EQ(route_methods(ROUTE_INSTANCE_LOGS), METHOD_GET);
	CHECK_EQ(route_methods(ROUTE_JOB_LOGS), METHOD_GET);

	/* Names nothing: 404. */
	const char *missing[] = { "",
				  "/",
				  "healthz",
				  "//healthz",
				  "/healthz/",
				  "/healthz/x",
				  "/functions/",
				  "/functions//start",
				  "/functions/a/",
				  "/functions/a/stop",
				  "/functions/a/start/",
				  "/functions/a/start/x",
				  "/instances/a/start",
				  "/instances/a/logs/",
				  "/instances/a/logs/x",
				  "/instances/a/log",
				  "/jobs/a/logs/x",
				  "/functions/a/logs",
				  "/Functions/a",
				  "/functions/a/b/c/d/e",
				  "/jobs/../x" };
	for (size_t i = 0; i < ARRAY_SIZE(missing); i++) {
		int ret = route_of(missing[i], &r);

		if (ret != -ENOENT)
			fprintf(stderr, "path \"%s\": %d\n", missing[i], ret);
		CHECK_EQ(ret, -ENOENT);
	}
	CHECK_EQ(route_parse(NULL, &r, err, sizeof(err)), -ENOENT);

	/* Bad ids: 400, never a path outside the data directory. */
	const char *bad[] = { "/functions/..",       "/functions/.",     "/functions/%2e%2e",
			      "/functions/a%2Fb",    "/functions/A",     "/functions/-a",
			      "/functions/a b",      "/instances/..",    "/functions/%2e%2e/start",
			      "/functions/a\\b",     "/jobs/..",         "/functions/.hidden",
			      "/instances/../logs",  "/instances/%2e%2e/logs", "/jobs/../logs" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int ret = route_parse(bad[i], &r, err, sizeof(err));

		if (ret != -EINVAL)
			fprintf(stderr, "path \"%s\": %d\n", bad[i], ret);
		CHECK_EQ(ret, -EINVAL);
		CHECK(err[0] != '\0');
		CHECK_STR(r.id, "");
	}
	route_parse("/functions/%2e%2e", &r, err, sizeof(err));
	CHECK(strstr(err, "percent") != NULL);
	/* A byte that is not UTF-8 is echoed as text a JSON answer can hold. */
	CHECK_EQ(route_parse("/functions/a\xff\x80", &r, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "\"a\\xff\\x80\"") != NULL);
	for (const char *c = err; *c; c++)
		CHECK(*c >= ' ' && *c <= '~');
	memset(long_id, 'a', 64);
	strcpy(long_id + 64, "");
	char p[128];
	snprintf(p, sizeof(p), "/functions/%s", long_id);
	CHECK_EQ(route_of(p, &r), -EINVAL);
	long_id[63] = '\0';
	snprintf(p, sizeof(p), "/functions/%s", long_id);
	CHECK_EQ(route_of(p, &r), 0);

	/* Methods. */
	CHECK_EQ(method_parse("GET"), METHOD_GET);
	CHECK_EQ(method_parse("get"), METHOD_OTHER);
	CHECK_EQ(method_parse("PATCH"), METHOD_OTHER);
	CHECK(route_methods(ROUTE_FUNCTION) & METHOD_PUT);
	CHECK(!(route_methods(ROUTE_FUNCTION) & METHOD_POST));
	CHECK(route_methods(ROUTE_FUNCTION_START) == METHOD_POST);

	/* Routed requests: /function/<id> and anything under it, any depth;
	 * only the id is checked. */
	CHECK_EQ(route_of("/function/echo", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTION_PROXY);
	CHECK_STR(r.id, "echo");
	CHECK_EQ(route_of("/function/echo/a/b/c/d/e/f", &r), 0);
	CHECK_EQ(r.kind, ROUTE_FUNCTION_PROXY);
	CHECK_STR(r.id, "echo");
	CHECK_EQ(route_of("/function/echo/", &r), 0);
	CHECK_EQ(route_of("/function/echo//x/%41", &r), 0);
	CHECK_EQ(route_of("/function/", &r), -ENOENT);
	CHECK_EQ(route_of("/function", &r), -ENOENT);
	CHECK_EQ(route_of("/function//x", &r), -ENOENT);
	CHECK_EQ(route_of("/function/..", &r), -EINVAL);
	CHECK_EQ(route_of("/function/%2e%2e/x", &r), -EINVAL);
	CHECK_EQ(route_of("/function/A/x", &r), -EINVAL);
	CHECK_EQ(route_scope(ROUTE_FUNCTION_PROXY), AUTH_SCOPE_DATA);
	CHECK_STR(route_allow(ROUTE_FUNCTION), "GET, PUT, DELETE");
	CHECK_STR(route_allow(ROUTE_INSTANCE), "GET, DELETE");
}

static void test_query_body(void)
{
	bool b = true;
	json_t *j = NULL;
	char err[256];

	CHECK_EQ(query_bool(NULL, &b), 0);
	CHECK(!b);
	CHECK_EQ(query_bool("1", &b), 0);
	CHECK(b);
	CHECK_EQ(query_bool("0", &b), 0);
	CHECK(!b);
	CHECK_EQ(query_bool("", &b), 0);
	CHECK(b);
	CHECK_EQ(query_bool("yes please", &b), -EINVAL);
	{
		/* Seconds are decimal: strtod would take 0x1p3 as 8. */
		static const char *const bad[] = { "0x1p3", "1e3", "inf", "nan", " 8", "8 ", "+8",
						   "-1", "", ".", "1.2.3", "0x10" };
		double d = -1;

		CHECK_EQ(query_seconds_parse("8", 100, &d), 0);
		CHECK(d == 8);
		CHECK_EQ(query_seconds_parse("2.5", 100, &d), 0);
		CHECK(d == 2.5);
		CHECK_EQ(query_seconds_parse(".25", 100, &d), 0);
		CHECK_EQ(query_seconds_parse("3.", 100, &d), 0);
		CHECK_EQ(query_seconds_parse("0", 100, &d), 0);
		CHECK_EQ(query_seconds_parse("101", 100, &d), -EINVAL);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			CHECK_EQ(query_seconds_parse(bad[i], 100, &d), -EINVAL);
	}

	CHECK_EQ(body_parse_object("{\"a\":1}", 7, &j, err, sizeof(err)), 0);
	CHECK(json_is_object(j));
	json_decref(j);
	CHECK_EQ(body_parse_object("{\"a\":1,\n \"b\":}", 14, &j, err, sizeof(err)), -EINVAL);
	CHECK(j == NULL);
	CHECK(strstr(err, "line 2") != NULL);
	CHECK(strstr(err, "column") != NULL);
	CHECK_EQ(body_parse_object("[1]", 3, &j, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "object") != NULL);
	CHECK_EQ(body_parse_object("", 0, &j, err, sizeof(err)), -EINVAL);
	CHECK_EQ(body_parse_object("{\"a\":1,\"a\":2}", 13, &j, err, sizeof(err)), -EINVAL);
	/* Not NUL-terminated: only len bytes are read. */
	CHECK_EQ(body_parse_object("{}garbage", 2, &j, err, sizeof(err)), 0);
	json_decref(j);

	char h[64], port[8];
	CHECK_EQ(listen_addr_parse("127.0.0.1:8080", h, sizeof(h), port, sizeof(port)), 0);
	CHECK_STR(h, "127.0.0.1");
	CHECK_STR(port, "8080");
	CHECK_EQ(listen_addr_parse("[::1]:0", h, sizeof(h), port, sizeof(port)), 0);
	CHECK_STR(h, "::1");
	CHECK_STR(port, "0");
	CHECK_EQ(listen_addr_parse("localhost:80", h, sizeof(h), port, sizeof(port)), 0);
	CHECK_EQ(listen_addr_parse("8080", h, sizeof(h), port, sizeof(port)), -EINVAL);
	CHECK_EQ(listen_addr_parse(":8080", h, sizeof(h), port, sizeof(port)), -EINVAL);
	CHECK_EQ(listen_addr_parse("a:", h, sizeof(h), port, sizeof(port)), -EINVAL);
	CHECK_EQ(listen_addr_parse("a:99999", h, sizeof(h), port, sizeof(port)), -EINVAL);
	CHECK_EQ(listen_addr_parse("a:8x", h, sizeof(h), port, sizeof(port)), -EINVAL);
	CHECK_EQ(listen_addr_parse("::1:80", h, sizeof(h), port, sizeof(port)), -EINVAL);
}

/* The value of the first line of text that starts with prefix, or -1. */
static double metric(const char *text, const char *prefix)
{
	size_t l = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, prefix, l) && p[l] == ' ')
			return atof(p + l + 1);
	}
	return -1;
}

static size_t occurrences(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_metrics(void)
{
	struct metrics *m = metrics_new();
	struct metrics_gauges g = { .have_tier = true,
				    .ram_tier_bytes = 100,
				    .ram_tier_budget_bytes = 1000,
				    .have_store = true,
				    .store_logical = 7,
				    .store_unique = 6,
				    .store_stored = 5,
				    .instances_running = 3 };
	char *text = NULL, esc[32];
	size_t len;

	REQUIRE(m);
	CHECK_EQ(metrics_start(m, "fn-a"), 0);
	CHECK_EQ(metrics_start(m, "fn-a"), 0);
	CHECK_EQ(metrics_start(m, "fn-b"), 0);
	CHECK_EQ(metrics_start_failed(m, "fn-a", "timeout"), 0);
	CHECK_EQ(metrics_snapshot(m, "ok"), 0);
	CHECK_EQ(metrics_snapshot(m, "failed"), 0);
	CHECK_EQ(metrics_snapshot(m, "failed"), 0);
	/* 3 ms, 0.5 s, 45 s and 100 s (beyond the last bound) of "total". */
	metrics_restore_phases(m, (double[PHASE_COUNT]){ 1, 2, 0, 3, 3 });
	metrics_restore_phases(m, (double[PHASE_COUNT]){ 1, 2, 0, 3, 500 });
	metrics_restore_phases(m, (double[PHASE_COUNT]){ 1, 2, 0, 3, 45000 });
	metrics_restore_phases(m, (double[PHASE_COUNT]){ 1, 2, 0, 3, 100000 });
	CHECK_EQ(metrics_render(m, &g, &text, &len), 0);
	REQUIRE(text);
	CHECK_EQ(strlen(text), len);
	CHECK_EQ(metric(text, "thaw_starts_total{function=\"fn-a\"}"), 2);
	CHECK_EQ(metric(text, "thaw_starts_total{function=\"fn-b\"}"), 1);
	CHECK_EQ(metric(text, "thaw_start_failures_total{function=\"fn-a\",code=\"timeout\"}"), 1);
	CHECK_EQ(metric(text, "thaw_snapshots_total{result=\"failed\"}"), 2);
	CHECK_EQ(metric(text, "thaw_snapshots_total{result=\"ok\"}"), 1);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"0.0025\"}"), 0);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"0.005\"}"), 1);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"0.5\"}"), 2);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"30\"}"), 2);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"60\"}"), 3);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"total\",le=\"+Inf\"}"), 4);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_count{phase=\"gpu_restore\"}"), 4);
	CHECK(metric(text, "thaw_restore_phase_seconds_sum{phase=\"total\"}") > 145.5);
	CHECK(metric(text, "thaw_restore_phase_seconds_sum{phase=\"total\"}") < 145.51);
	CHECK_EQ(metric(text, "thaw_restore_phase_seconds_bucket{phase=\"materialize\",le=\"0.001\"}"),
		 4);
	CHECK_EQ(metric(text, "thaw_ram_tier_bytes"), 100);
	CHECK_EQ(metric(text, "thaw_ram_tier_budget_bytes"), 1000);
	CHECK_EQ(metric(text, "thaw_store_bytes{kind=\"logical\"}"), 7);
	CHECK_EQ(metric(text, "thaw_store_bytes{kind=\"unique\"}"), 6);
	CHECK_EQ(metric(text, "thaw_store_bytes{kind=\"stored\"}"), 5);
	CHECK_EQ(metric(text, "thaw_instances_running"), 3);
	/* Prometheus refuses a second TYPE line for one metric. */
	CHECK_EQ(occurrences(text, "# TYPE thaw_restore_phase_seconds "), 1);
	CHECK_EQ(occurrences(text, "# TYPE thaw_starts_total "), 1);
	/* Every sample line is NAME[{labels}] VALUE. */
	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');

		REQUIRE(nl);
		*nl = '\0';
		if (line[0] != '#') {
			char *sp = strrchr(line, ' ');

			CHECK(sp && sp[1]);
			CHECK(line[0] == 't');
		}
		line = nl + 1;
	}
	free(text);

	CHECK(metrics_escape_label("a\"b\\c\nd", esc, sizeof(esc)));
	CHECK_STR(esc, "a\\\"b\\\\c\\nd");
	CHECK(!metrics_escape_label("0123456789", esc, 5));
	metrics_free(m);
	metrics_free(NULL);
}

static void test_auth(void)
{
	struct auth a;
	char path[256];

	memset(&a, 0, sizeof(a));
	CHECK(auth_check(&a, NULL)); /* no token configured */
	snprintf(path, sizeof(path), "%s/token", tmpdir);
	REQUIRE(write_file_atomic(path, "s3cret-T0ken\n", 13, 0600) == 0);
	CHECK_EQ(auth_load(&a, path), 0);
	CHECK(auth_check(&a, "Bearer s3cret-T0ken"));
	CHECK(!auth_check(&a, "Bearer s3cret-T0ke"));
	CHECK(!auth_check(&a, "Bearer s3cret-T0ken2"));
	CHECK(!auth_check(&a, "Bearer s3cret-T0ken\n"));
	CHECK(auth_check(&a, "bearer s3cret-T0ken")); /* the scheme is case-insensitive */
	CHECK(!auth_check(&a, "Basic s3cret-T0ken"));
	CHECK(!auth_check(&a, "s3cret-T0ken"));
	CHECK(!auth_check(&a, ""));
	CHECK(!auth_check(&a, NULL));
	REQUIRE(write_file_atomic(path, "\n", 1, 0600) == 0);
	CHECK_EQ(auth_load(&a, path), -EINVAL);
	REQUIRE(write_file_atomic(path, "a b\n", 4, 0600) == 0);
	CHECK_EQ(auth_load(&a, path), -EINVAL);
	snprintf(path, sizeof(path), "%s/no-such-token", tmpdir);
	CHECK_EQ(auth_load(&a, path), -ENOENT);
}

/* Three tokens, each opening its own scope; a token of one kind never opens
 * another's routes. */
static void test_auth_scopes(void)
{
	struct auth a;
	char full[256], ctl[256], data[256];

	memset(&a, 0, sizeof(a));
	CHECK_EQ(auth_scopes(&a, NULL), (unsigned)AUTH_SCOPE_ALL);
	snprintf(full, sizeof(full), "%s/full", tmpdir);
	snprintf(ctl, sizeof(ctl), "%s/ctl", tmpdir);
	snprintf(data, sizeof(data), "%s/data", tmpdir);
	REQUIRE(write_file_atomic(full, "full-tok\n", 9, 0600) == 0);
	REQUIRE(write_file_atomic(ctl, "ctl-tok\n", 8, 0600) == 0);
	REQUIRE(write_file_atomic(data, "data-tok\n", 9, 0600) == 0);
	/* Only a data token: control routes open to nobody. */
	CHECK_EQ(auth_load_kind(&a, AUTH_DATA, data), 0);
	CHECK(a.enabled);
	CHECK_EQ(auth_scopes(&a, "Bearer data-tok"), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(auth_scopes(&a, NULL), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(auth_scopes(&a, "Bearer full-tok"), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(auth_load_kind(&a, AUTH_CONTROL, ctl), 0);
	CHECK_EQ(auth_load_kind(&a, AUTH_FULL, full), 0);
	CHECK_EQ(auth_scopes(&a, "Bearer full-tok"), (unsigned)AUTH_SCOPE_ALL);
	CHECK_EQ(auth_scopes(&a, "Bearer ctl-tok"), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(auth_scopes(&a, "Bearer data-tok"), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(auth_scopes(&a, "Bearer data-to"), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(auth_scopes(&a, "Bearer "), (unsigned)AUTH_SCOPE_NONE);
	/* The scheme in any case, one space or more; the token exactly. */
	CHECK_EQ(auth_scopes(&a, "bearer data-tok"), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(auth_scopes(&a, "BEARER  data-tok"), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(auth_scopes(&a, "Bearer DATA-TOK"), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(auth_scopes(&a, "Bearerdata-tok"), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(auth_scopes(&a, "Basic data-tok"), (unsigned)AUTH_SCOPE_NONE);
	CHECK(!auth_check(&a, "Bearer nope"));
	CHECK(auth_check(&a, "Bearer data-tok"));
	CHECK_EQ(auth_load_kind(&a, AUTH_KINDS, full), -EINVAL);

	CHECK_EQ(route_scope(ROUTE_HEALTHZ), (unsigned)AUTH_SCOPE_NONE);
	CHECK_EQ(route_scope(ROUTE_METRICS), (unsigned)AUTH_SCOPE_ALL);
	CHECK_EQ(route_scope(ROUTE_FUNCTION_START), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(route_scope(ROUTE_INSTANCES), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(route_scope(ROUTE_INSTANCE), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(route_scope(ROUTE_FUNCTIONS), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(route_scope(ROUTE_FUNCTION), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(route_scope(ROUTE_FUNCTION_SNAPSHOT), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(route_scope(ROUTE_JOBS), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(route_scope(ROUTE_JOB), (unsigned)AUTH_SCOPE_CONTROL);
	CHECK_EQ(route_scope(ROUTE_INSTANCE_LOGS), (unsigned)AUTH_SCOPE_DATA);
	CHECK_EQ(route_scope(ROUTE_JOB_LOGS), (unsigned)AUTH_SCOPE_CONTROL);
}

/* Loopback listen addresses and Host headers, from the attack side: names
 * that merely start like a loopback one are not loopback. */
static void test_loopback_hosts(void)
{
	static const char *yes[] = { "localhost", "LocalHost", "127.0.0.1", "127.1.2.3",
				     "127.255.255.254", "::1", "0:0:0:0:0:0:0:1" };
	static const char *no[] = { "0.0.0.0", "::", "", "128.0.0.1", "10.0.0.1", "localhost.",
				    "localhost.evil.example", "127.0.0.1.evil.example", "::2",
				    "::ffff:10.0.0.1", "evil.example" };
	static const char *hdr_yes[] = { "localhost", "localhost:8080", "127.0.0.1",
					 "127.0.0.1:1", "127.9.9.9:65535", "[::1]", "[::1]:8080",
					 "LOCALHOST:80" };
	static const char *hdr_no[] = { "evil.example", "evil.example:8080", "127.0.0.1.nip.io",
					"localhost.evil.example:80", "127.0.0.1:", "127.0.0.1:x",
					"127.0.0.1:8080:1", "[::1", "[::1]x", "[127.0.0.1]", "::1",
					"[::2]:80", "0.0.0.0", "", "127.0.0.1:123456",
					"localhost@evil.example", "127.0.0.1 evil" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		CHECK(host_is_loopback(yes[i]));
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		CHECK(!host_is_loopback(no[i]));
	CHECK(!host_is_loopback(NULL));
	for (size_t i = 0; i < sizeof(hdr_yes) / sizeof(hdr_yes[0]); i++)
		CHECK(host_header_is_loopback(hdr_yes[i]));
	for (size_t i = 0; i < sizeof(hdr_no) / sizeof(hdr_no[0]); i++) {
		if (host_header_is_loopback(hdr_no[i]))
			fprintf(stderr, "Host \"%s\" taken for loopback\n", hdr_no[i]);
		CHECK(!host_header_is_loopback(hdr_no[i]));
	}
	CHECK(!host_header_is_loopback(NULL));
}

static void test_content_type_rule(void)
{
	static const char form[] = "application/x-www-form-urlencoded";
	char err[256];

	CHECK_EQ(content_type_check(METHOD_GET, "text/plain", "x", 1, err, sizeof(err)), 0);
	CHECK_EQ(content_type_check(METHOD_POST, NULL, "", 0, err, sizeof(err)), 0);
	CHECK_EQ(content_type_check(METHOD_POST, "application/json", "", 0, err, sizeof(err)), 0);
	CHECK_EQ(content_type_check(METHOD_POST, form, "", 0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "form") != NULL);
	CHECK_EQ(content_type_check(METHOD_POST, " TEXT/PLAIN ; charset=UTF-8", "", 0, err,
				    sizeof(err)),
		 -EINVAL);
	CHECK_EQ(content_type_check(METHOD_POST, "multipart/form-data; boundary=b", "", 0, err,
				    sizeof(err)),
		 -EINVAL);
	CHECK_EQ(content_type_check(METHOD_POST, form, "{}", 2, err, sizeof(err)), -EINVAL);
	CHECK_EQ(content_type_check(METHOD_POST, NULL, "{}", 2, err, sizeof(err)), -EINVAL);
	CHECK_EQ(content_type_check(METHOD_POST, "application/jsonx", "{}", 2, err, sizeof(err)),
		 -EINVAL);
	CHECK_EQ(content_type_check(METHOD_POST, "application/json;charset=utf-8", "{}", 2, err,
				    sizeof(err)),
		 0);
	CHECK_EQ(content_type_check(METHOD_DELETE, "text/plain", "{}", 2, err, sizeof(err)),
		 -EINVAL);
	/* curl -X PUT -d @spec.json: a form's type, a JSON body. */
	CHECK_EQ(content_type_check(METHOD_PUT, form, "{\"a\":1}", 7, err, sizeof(err)), 0);
	CHECK_EQ(content_type_check(METHOD_PUT, form, "a=1", 3, err, sizeof(err)), -EINVAL);
	CHECK_EQ(content_type_check(METHOD_PUT, "text/plain", "{}", 2, err, sizeof(err)), -EINVAL);
	CHECK_EQ(content_type_check(METHOD_PUT, NULL, "{}", 2, err, sizeof(err)), -EINVAL);
	CHECK_EQ(content_type_check(METHOD_PUT, "application/json", "{", 1, err, sizeof(err)), 0);
}

static const char SNAP1[] = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char SNAP2[] = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

static void test_registry(void)
{
	char dir[256], path[512];
	struct registry *r;
	json_t *spec = json_pack("{s:[s,s], s:i}", "command", "python3", "x.py", "port", 8000);
	json_t *spec2 = json_pack("{s:[s], s:i}", "command", "other", "port", 8001);
	json_t *j, *sp = NULL;
	char snap[CHUNK_ID_LEN];
	enum snap_state st;
	bool created;

	snprintf(dir, sizeof(dir), "%s/functions", tmpdir);
	r = registry_open(dir);
	REQUIRE(r);
	CHECK_EQ(registry_put(r, "fn-a", spec, &created, NULL), 0);
	CHECK(created);
	CHECK_EQ(registry_put(r, "fn-a", spec, &created, NULL), 0);
	CHECK(!created);
	CHECK_EQ(registry_put(r, "fn-b", spec2, &created, NULL), 0);
	CHECK_EQ(registry_get_json(r, "nope", &j), -ENOENT);
	CHECK_EQ(registry_get_json(r, "fn-a", &j), 0);
	CHECK_STR(json_string_value(json_object_get(j, "id")), "fn-a");
	CHECK_EQ(json_integer_value(json_object_get(j, "port")), 8000);
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "snapshot"), "state")),
		  "none");
	json_decref(j);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), -ENODATA);
	CHECK_EQ(st, SNAP_NONE);
	CHECK_EQ(registry_ready_snapshot(r, "nope", snap, &st), -ENOENT);

	/* A snapshot: building, then ready. */
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-1", &sp), 0);
	CHECK(json_equal(sp, spec));
	json_decref(sp);
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-2", &sp), -EBUSY);
	CHECK_EQ(registry_put(r, "fn-a", spec2, &created, NULL), -EBUSY);
	CHECK_EQ(registry_snapshot_begin(r, "nope", "job-2", &sp), -ENOENT);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-9", SNAP1, 1, 2, NULL, NULL, NULL), -ENOENT);
	json_t *tm = json_pack("{s:f}", "total", 12.5);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-1", SNAP1, 1000, 200, tm, NULL, NULL), 0);
	json_decref(tm);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP1);
	/* The same spec again keeps the snapshot. */
	CHECK_EQ(registry_put(r, "fn-a", spec, &created, NULL), 0);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);

	/* fn-b's snapshot fails. */
	CHECK_EQ(registry_snapshot_begin(r, "fn-b", "job-3", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_snapshot_end(r, "fn-b", "job-3", NULL, 0, 0, NULL, "it broke", NULL), 0);
	CHECK_EQ(registry_ready_snapshot(r, "fn-b", snap, &st), -ENODATA);
	CHECK_EQ(st, SNAP_FAILED);

	/* fn-c is left building, as by a thawd killed during its snapshot. */
	CHECK_EQ(registry_put(r, "fn-c", spec, &created, NULL), 0);
	CHECK_EQ(registry_snapshot_begin(r, "fn-c", "job-4", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_list_json(r, &j), 0);
	CHECK_EQ(json_array_size(j), 3);
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 0), "id")), "fn-a");
	json_decref(j);
	registry_free(r);

	/* Debris: a damaged file and an interrupted write. */
	snprintf(path, sizeof(path), "%s/fn-d.json", dir);
	REQUIRE(write_file_atomic(path, "{not json", 9, 0644) == 0);
	snprintf(path, sizeof(path), "%s/fn-a.json.tmp.999", dir);
	REQUIRE(write_file_atomic(path, "x", 1, 0644) == 0);

	r = registry_open(dir);
	REQUIRE(r);
	CHECK(access(path, F_OK) != 0);
	CHECK(!registry_exists(r, "fn-d"));
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP1);
	CHECK_EQ(registry_get_json(r, "fn-a", &j), 0);
	json_t *s = json_object_get(j, "snapshot");
	CHECK_EQ(json_integer_value(json_object_get(s, "image_bytes")), 1000);
	CHECK_EQ(json_integer_value(json_object_get(s, "stored_bytes")), 200);
	CHECK(json_real_value(json_object_get(json_object_get(s, "timings_ms"), "total")) == 12.5);
	json_decref(j);
	CHECK_EQ(registry_get_json(r, "fn-b", &j), 0);
	s = json_object_get(j, "snapshot");
	CHECK_STR(json_string_value(json_object_get(s, "state")), "failed");
	CHECK_STR(json_string_value(json_object_get(s, "error")), "it broke");
	json_decref(j);
	CHECK_EQ(registry_get_json(r, "fn-c", &j), 0);
	s = json_object_get(j, "snapshot");
	CHECK_STR(json_string_value(json_object_get(s, "state")), "failed");
	CHECK_STR(json_string_value(json_object_get(s, "error")), REGISTRY_RESTART_REASON);
	json_decref(j);

	/* A different spec forgets the snapshot, and says which. */
	char forgot[CHUNK_ID_LEN] = "x";
	CHECK_EQ(registry_put(r, "fn-a", spec, &created, forgot), 0);
	CHECK_STR(forgot, "");
	CHECK_EQ(registry_put(r, "fn-a", spec2, &created, forgot), 0);
	CHECK_STR(forgot, SNAP1);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), -ENODATA);
	CHECK_EQ(st, SNAP_NONE);

	/* A re-snapshot: the ready one stays current while the new one builds
	 * and after it fails; a complete one replaces it, and says which. */
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-6", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-6", SNAP1, 1, 1, NULL, NULL, forgot), 0);
	CHECK_STR(forgot, "");
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-7", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP1);
	CHECK_EQ(st, SNAP_BUILDING);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-7", NULL, 0, 0, NULL, "it broke", forgot), 0);
	CHECK_STR(forgot, "");
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP1);
	CHECK_EQ(st, SNAP_FAILED);
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-8", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-8", SNAP2, 1, 1, NULL, NULL, forgot), 0);
	CHECK_STR(forgot, SNAP1);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP2);
	/* Left building by a killed thawd: after a restart the last one serves. */
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-9", &sp), 0);
	json_decref(sp);
	registry_free(r);
	r = registry_open(dir);
	REQUIRE(r);
	CHECK_EQ(registry_ready_snapshot(r, "fn-a", snap, &st), 0);
	CHECK_STR(snap, SNAP2);
	CHECK_EQ(st, SNAP_FAILED);

	/* Delete: the file goes, and a snapshot ending after it is dropped. */
	CHECK_EQ(registry_snapshot_begin(r, "fn-b", "job-5", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_delete(r, "fn-b", forgot), 0);
	CHECK_STR(forgot, ""); /* it was building */
	CHECK_EQ(registry_delete(r, "fn-b", NULL), -ENOENT);
	snprintf(path, sizeof(path), "%s/fn-b.json", dir);
	CHECK(access(path, F_OK) != 0);
	CHECK_EQ(registry_snapshot_end(r, "fn-b", "job-5", SNAP1, 1, 1, NULL, NULL, NULL), -ENOENT);
	CHECK(!registry_exists(r, "fn-b"));
	CHECK_EQ(registry_snapshot_begin(r, "fn-a", "job-10", &sp), 0);
	json_decref(sp);
	CHECK_EQ(registry_snapshot_end(r, "fn-a", "job-10", SNAP1, 1, 1, NULL, NULL, forgot), 0);
	CHECK_STR(forgot, SNAP2);
	CHECK_EQ(registry_delete(r, "fn-a", forgot), 0);
	CHECK_STR(forgot, SNAP1); /* ready: the caller drops it from the store */
	registry_free(r);

	json_decref(spec);
	json_decref(spec2);
}

static atomic_bool release_job;

static int slow_job(void *arg, json_t **result, char *err, size_t errlen)
{
	while (!atomic_load(&release_job))
		usleep(1000);
	*result = json_pack("{s:s}", "arg", (const char *)arg);
	return 0;
}

static int failing_job(void *arg, json_t **result, char *err, size_t errlen)
{
	snprintf(err, errlen, "phase ready: the function exited");
	return -ETIMEDOUT;
}

static int freed;
static void count_free(void *arg)
{
	freed++;
}

static void test_jobs(void)
{
	struct jobs *js = jobs_new(1);
	struct job *j1, *j2;
	json_t *j;
	int err = 0;
	char id1[32];

	REQUIRE(js);
	j1 = jobs_reserve(js, "snapshot", "fn-a", &err);
	REQUIRE(j1);
	snprintf(id1, sizeof(id1), "%s", job_id(j1));
	CHECK(id_valid(id1));
	j2 = jobs_reserve(js, "snapshot", "fn-b", &err);
	CHECK(j2 == NULL);
	CHECK_EQ(err, -EAGAIN);
	CHECK_EQ(jobs_run(js, j1, slow_job, "hello", count_free), 0);
	CHECK_EQ(jobs_active(js), 1);
	CHECK_EQ(jobs_get_json(js, id1, &j, &err), 0);
	CHECK_STR(json_string_value(json_object_get(j, "state")), "running");
	CHECK_STR(json_string_value(json_object_get(j, "function")), "fn-a");
	json_decref(j);
	atomic_store(&release_job, true);
	CHECK_EQ(jobs_wait(js, id1), 0);
	CHECK_EQ(jobs_active(js), 0);
	CHECK_EQ(freed, 1);
	CHECK_EQ(jobs_get_json(js, id1, &j, &err), 0);
	CHECK_EQ(err, 0);
	CHECK_STR(json_string_value(json_object_get(j, "state")), "done");
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "result"), "arg")), "hello");
	json_decref(j);

	/* A reservation given back frees the place. */
	j2 = jobs_reserve(js, "snapshot", "fn-b", &err);
	REQUIRE(j2);
	jobs_unreserve(js, j2);
	j2 = jobs_reserve(js, "snapshot", "fn-b", &err);
	REQUIRE(j2);
	char id2[32];
	snprintf(id2, sizeof(id2), "%s", job_id(j2));
	CHECK(strcmp(id1, id2) != 0);
	CHECK_EQ(jobs_run(js, j2, failing_job, NULL, NULL), 0);
	CHECK_EQ(jobs_wait(js, id2), 0);
	CHECK_EQ(jobs_get_json(js, id2, &j, &err), 0);
	CHECK_EQ(err, -ETIMEDOUT);
	CHECK_STR(json_string_value(json_object_get(j, "state")), "failed");
	json_t *e = json_object_get(j, "error");
	CHECK_STR(json_string_value(json_object_get(e, "code")), "timeout");
	CHECK_STR(json_string_value(json_object_get(e, "message")),
		  "phase ready: the function exited");
	json_decref(j);
	CHECK_EQ(jobs_wait(js, "job-999"), -ENOENT);
	CHECK_EQ(jobs_get_json(js, "job-999", &j, NULL), -ENOENT);
	CHECK_EQ(jobs_list_json(js, &j), 0);
	CHECK_EQ(json_array_size(j), 2);
	json_decref(j);

	jobs_drain(js);
	CHECK(jobs_reserve(js, "snapshot", "fn-c", &err) == NULL);
	CHECK_EQ(err, -ESHUTDOWN);
	jobs_free(js);

	/* max 0: nothing may run. */
	js = jobs_new(0);
	REQUIRE(js);
	CHECK(jobs_reserve(js, "snapshot", "fn-c", &err) == NULL);
	CHECK_EQ(err, -EAGAIN);
	jobs_free(js);
}

static int quick_job(void *arg, json_t **result, char *err, size_t errlen)
{
	return 0;
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* A job's log lives as long as its record; an earlier thawd's are removed. */
static void test_job_logs(void)
{
	char dir[256], stale[300], path[512], first[512];
	struct jobs *js = jobs_new(1);
	struct job *jb;
	int err = 0;

	REQUIRE(js);
	snprintf(dir, sizeof(dir), "%s/jobs", tmpdir);
	REQUIRE(mkdir_p(dir, 0755) == 0);
	snprintf(stale, sizeof(stale), "%s/job-1.log", dir);
	REQUIRE(write_file_atomic(stale, "old\n", 4, 0644) == 0);
	/* No log directory yet: no job keeps a log. */
	jb = jobs_reserve(js, "snapshot", "fn-a", &err);
	REQUIRE(jb);
	CHECK_EQ(jobs_log_path(js, job_id(jb), path, sizeof(path)), -ENOENT);
	jobs_unreserve(js, jb);

	CHECK_EQ(jobs_set_log_dir(js, dir), 0);
	CHECK(!exists(stale));
	CHECK_EQ(jobs_log_path(js, "job-999", path, sizeof(path)), -ENOENT);

	/* Given back: its log goes with it. */
	jb = jobs_reserve(js, "snapshot", "fn-a", &err);
	REQUIRE(jb);
	CHECK_EQ(jobs_log_path(js, job_id(jb), path, sizeof(path)), 0);
	CHECK(strncmp(path, dir, strlen(dir)) == 0);
	CHECK(strstr(path, job_id(jb)) != NULL);
	REQUIRE(write_file_atomic(path, "x\n", 2, 0644) == 0);
	jobs_unreserve(js, jb);
	CHECK(!exists(path));

	/* Beyond JOBS_KEEP finished jobs, the oldest go, logs and all. */
	first[0] = '\0';
	for (int i = 0; i < JOBS_KEEP + 4; i++) {
		char id[32], p2[600];

		jb = jobs_reserve(js, "snapshot", "fn-a", &err);
		REQUIRE(jb);
		snprintf(id, sizeof(id), "%s", job_id(jb));
		REQUIRE(jobs_log_path(js, id, path, sizeof(path)) == 0);
		REQUIRE(write_file_atomic(path, "x\n", 2, 0644) == 0);
		snprintf(p2, sizeof(p2), "%s.1", path);
		REQUIRE(write_file_atomic(p2, "y\n", 2, 0644) == 0);
		if (!first[0])
			snprintf(first, sizeof(first), "%s", path);
		REQUIRE(jobs_run(js, jb, quick_job, NULL, NULL) == 0);
		jobs_wait(js, id);
	}
	json_t *list;
	CHECK_EQ(jobs_list_json(js, &list), 0);
	CHECK_EQ(json_array_size(list), JOBS_KEEP);
	json_decref(list);
	CHECK(!exists(first));
	CHECK(exists(path));
	jobs_free(js);
	CHECK(!exists(path));
}

static void test_errors(void)
{
	CHECK_EQ(api_err_from_errno(-ETIMEDOUT).status, 504);
	/* No space is 507 wherever it happens; damaged data has its own code. */
	CHECK_EQ(api_err_from_errno(-ENOSPC).status, 507);
	CHECK_STR(api_err_from_errno(ENOSPC).code, "no_space");
	CHECK_EQ(api_err_from_errno(-EDQUOT).status, 507);
	CHECK_EQ(api_err_from_errno(-EBADMSG).status, 500);
	CHECK_STR(api_err_from_errno(-EBADMSG).code, "damaged");
	CHECK_STR(api_err_from_errno(-EAGAIN).code, "no_capacity");
	CHECK_EQ(api_err_from_errno(-EBUSY).status, 503);
	CHECK_STR(api_err_from_errno(-ENOSYS).code, "unavailable");
	CHECK_EQ(api_err_from_errno(-ENOSYS).status, 503);
	/* A path not allowed where it is used (function/confine.h). */
	CHECK_EQ(api_err_from_errno(-EACCES).status, 403);
	CHECK_STR(api_err_from_errno(-EACCES).code, "forbidden");
	/* ENOENT means nothing by itself: a start judges what was missing. */
	CHECK_EQ(api_err_from_errno(-ENOENT).status, 500);
	CHECK_STR(api_err_from_errno(-ENOENT).code, "internal");
	CHECK_EQ(api_err_from_errno(-EIO).status, 500);
	CHECK_STR(api_err_from_errno(-EIO).code, "internal");
}

/* One stop at a time per instance. */
static void test_insts_claim(void)
{
	struct insts *t = insts_new();

	REQUIRE(t);
	CHECK_EQ(insts_claim(t, "fn-1"), 0);
	CHECK_EQ(insts_claim(t, "fn-1"), -EALREADY);
	CHECK_EQ(insts_claim(t, "fn-2"), 0);
	insts_release(t, "fn-1");
	CHECK_EQ(insts_claim(t, "fn-1"), 0);
	CHECK_EQ(insts_claim(t, "fn-2"), -EALREADY);
	for (int i = 0; i < 40; i++) { /* beyond the first allocation */
		char id[16];

		snprintf(id, sizeof(id), "x-%d", i);
		CHECK_EQ(insts_claim(t, id), 0);
	}
	insts_release(t, "fn-2");
	insts_release(t, "fn-2"); /* not held: nothing happens */
	CHECK_EQ(insts_claim(t, "fn-2"), 0);
	CHECK_EQ(insts_claim(t, "x-39"), -EALREADY);
	insts_free(t);
}

/* The mark of a damaged snapshot: set for the current snapshot only,
 * kept across a restart and a failed re-snapshot, cleared by a new
 * snapshot or a new spec. */
static void test_registry_damaged(void)
{
	char dir[256], snap[CHUNK_ID_LEN];
	json_t *spec = json_pack("{s:[s], s:i}", "command", "x", "port", 8000);
	json_t *spec2 = json_pack("{s:[s], s:i}", "command", "y", "port", 8000);
	json_t *j, *d, *sp = NULL;
	struct registry *r;
	enum snap_state st;
	bool created;

	snprintf(dir, sizeof(dir), "%s/functions-damaged", tmpdir);
	r = registry_open(dir);
	REQUIRE(r);
	REQUIRE(registry_put(r, "fn", spec, &created, NULL) == 0);
	CHECK_EQ(registry_snapshot_damaged(r, "fn", SNAP1, "chunk x"), -ENOENT); /* none yet */
	CHECK_EQ(registry_snapshot_damaged(r, "nope", SNAP1, "chunk x"), -ENOENT);
	REQUIRE(registry_snapshot_begin(r, "fn", "job-1", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-1", SNAP1, 1, 1, NULL, NULL, NULL) == 0);
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	CHECK(json_is_null(json_object_get(json_object_get(j, "snapshot"), "damaged")));
	json_decref(j);
	CHECK_EQ(registry_snapshot_damaged(r, "fn", SNAP2, "chunk x"), -ENOENT); /* not current */
	CHECK_EQ(registry_snapshot_damaged(r, "fn", SNAP1, "chunk sha256:ab is corrupt"), 0);
	registry_free(r);

	r = registry_open(dir);
	REQUIRE(r);
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	d = json_object_get(json_object_get(j, "snapshot"), "damaged");
	CHECK_STR(json_string_value(json_object_get(d, "what")), "chunk sha256:ab is corrupt");
	CHECK(json_is_string(json_object_get(d, "at")) &&
	      strlen(json_string_value(json_object_get(d, "at"))) == 20);
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "snapshot"), "state")),
		  "ready");
	json_decref(j);
	/* The snapshot still serves starts: a tier may hold a sound copy. */
	CHECK_EQ(registry_ready_snapshot(r, "fn", snap, &st), 0);
	/* A failed re-snapshot leaves the damaged one current, and marked. */
	REQUIRE(registry_snapshot_begin(r, "fn", "job-2", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-2", NULL, 0, 0, NULL, "it broke", NULL) == 0);
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	CHECK(json_is_object(json_object_get(json_object_get(j, "snapshot"), "damaged")));
	json_decref(j);
	/* A new snapshot clears it. */
	REQUIRE(registry_snapshot_begin(r, "fn", "job-3", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-3", SNAP2, 1, 1, NULL, NULL, NULL) == 0);
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	CHECK(json_is_null(json_object_get(json_object_get(j, "snapshot"), "damaged")));
	json_decref(j);
	/* So does a new spec (the snapshot goes with it). */
	CHECK_EQ(registry_snapshot_damaged(r, "fn", SNAP2, "manifest gone"), 0);
	REQUIRE(registry_put(r, "fn", spec2, &created, NULL) == 0);
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	CHECK(json_is_null(json_object_get(json_object_get(j, "snapshot"), "damaged")));
	json_decref(j);
	registry_free(r);
	json_decref(spec);
	json_decref(spec2);
}

/* The unrestorable mark (server/fallback.h): only on the current snapshot,
 * its first reason kept, persisted, kept by a failed re-snapshot and by a
 * change of a serving key ("on_restore_failure" among them), cleared by a
 * new snapshot or a new spec; and the chunk a start's words name. */
static void test_registry_unrestorable(void)
{
	char dir[256], why[256];
	json_t *spec = json_pack("{s:[s], s:i}", "command", "x", "port", 8000);
	json_t *spec_fail = json_pack("{s:[s], s:i, s:s}", "command", "x", "port", 8000,
				      "on_restore_failure", "fail");
	json_t *spec2 = json_pack("{s:[s], s:i}", "command", "y", "port", 8000);
	json_t *j, *u, *sp = NULL;
	struct registry *r;
	bool created;

	snprintf(dir, sizeof(dir), "%s/functions-unrestorable", tmpdir);
	r = registry_open(dir);
	REQUIRE(r);
	REQUIRE(registry_put(r, "fn", spec, &created, NULL) == 0);
	CHECK_EQ(registry_snapshot_unrestorable(r, "fn", SNAP1, "x"), -ENOENT); /* none yet */
	REQUIRE(registry_snapshot_begin(r, "fn", "job-1", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-1", SNAP1, 1, 1, NULL, NULL, NULL) == 0);
	CHECK(!registry_unrestorable(r, "fn", SNAP1, why, sizeof(why)));
	CHECK_EQ(registry_snapshot_unrestorable(r, "fn", SNAP2, "x"), -ENOENT); /* not current */
	CHECK_EQ(registry_snapshot_unrestorable(r, "fn", SNAP1, "CRIU 4.1 here is older"), 0);
	CHECK_EQ(registry_snapshot_unrestorable(r, "fn", SNAP1, "a second reason"), 0);
	registry_free(r);

	r = registry_open(dir);
	REQUIRE(r);
	CHECK(registry_unrestorable(r, "fn", SNAP1, why, sizeof(why)));
	CHECK_STR(why, "CRIU 4.1 here is older");
	CHECK(!registry_unrestorable(r, "fn", SNAP2, NULL, 0));
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	u = json_object_get(json_object_get(j, "snapshot"), "unrestorable");
	CHECK_STR(json_string_value(json_object_get(u, "why")), "CRIU 4.1 here is older");
	CHECK(json_is_string(json_object_get(u, "at")));
	json_decref(j);
	/* A failed re-snapshot keeps it; so does a serving key's change. */
	REQUIRE(registry_snapshot_begin(r, "fn", "job-2", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-2", NULL, 0, 0, NULL, "it broke", NULL) == 0);
	REQUIRE(registry_put(r, "fn", spec_fail, &created, NULL) == 0);
	CHECK(registry_unrestorable(r, "fn", SNAP1, NULL, 0));
	/* A new snapshot clears it. */
	REQUIRE(registry_snapshot_begin(r, "fn", "job-3", &sp) == 0);
	json_decref(sp);
	REQUIRE(registry_snapshot_end(r, "fn", "job-3", SNAP2, 1, 1, NULL, NULL, NULL) == 0);
	CHECK(!registry_unrestorable(r, "fn", SNAP2, NULL, 0));
	CHECK_EQ(registry_get_json(r, "fn", &j), 0);
	CHECK(json_is_null(json_object_get(json_object_get(j, "snapshot"), "unrestorable")));
	json_decref(j);
	/* So does a new spec. */
	CHECK_EQ(registry_snapshot_unrestorable(r, "fn", SNAP2, "x"), 0);
	REQUIRE(registry_put(r, "fn", spec2, &created, NULL) == 0);
	CHECK(!registry_unrestorable(r, "fn", SNAP2, NULL, 0));
	registry_free(r);
	json_decref(spec);
	json_decref(spec_fail);
	json_decref(spec2);

/* What the fallback decides the store's damage on: the restore's fault,
	 * a chunk that failed its check or is missing; never its words. */
	struct fault f = { .step = FAULT_MATERIALIZE, .err = -EBADMSG, .has_chunk = true };

	CHECK(fallback_fault_damaged(&f));
	f.err = -ENOENT;
	CHECK(fallback_fault_damaged(&f));
	f.err = -ENOSPC; /* writing it into the tier: not the store's damage */
	CHECK(!fallback_fault_damaged(&f));
	f = (struct fault){ .step = FAULT_MATERIALIZE, .err = -EBADMSG };
	CHECK(!fallback_fault_damaged(&f));
	CHECK(!fallback_fault_damaged(NULL));
}

/* registry_admit: two admissions whose paths clash (a read-write mount
 * holding the other's source), the first held in its check after it has
 * listed the functions, the second begun meanwhile: one at a time, so
 * exactly one is let in, the other refused naming it.  Without the one at
 * a time, the second checks against the same empty list, and both are
 * recorded (what a pull racing a PUT could do). */
static struct {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool a_listed, b_checking;
} admit_probe = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false };

/* The first's "registered": its list, then it waits (2 s at most) for the
 * second to be in its own check, which one at a time never lets happen. */
static int admit_held(void *r, json_t **out)
{
	struct timespec until;
	int ret = registry_specs(r, out);

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&admit_probe.m);
	admit_probe.a_listed = true;
	pthread_cond_broadcast(&admit_probe.cv);
	while (!admit_probe.b_checking &&
	       pthread_cond_timedwait(&admit_probe.cv, &admit_probe.m, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&admit_probe.m);
	return ret;
}

static int admit_seen(void *r, json_t **out)
{
	pthread_mutex_lock(&admit_probe.m);
	admit_probe.b_checking = true;
	pthread_cond_broadcast(&admit_probe.cv);
	pthread_mutex_unlock(&admit_probe.m);
	return registry_specs(r, out);
}

struct admission {
	struct registry *r;
	struct thaw_config c;
	const char *id;
	json_t *spec;
	char key[48], why[1024];
	int ret;
};

static void *admit_main(void *arg)
{
	struct admission *a = arg;
	bool created;

	a->ret = registry_admit(a->r, &a->c, a->id, a->spec, &created, NULL, NULL, a->key,
				sizeof(a->key), a->why, sizeof(a->why));
	return NULL;
}

static void test_registry_admit(void)
{
	struct admission a = { .id = "writer" }, b = { .id = "reader" };
	char dir[256], src[300];
	pthread_t ta, tb;
	json_t *list = NULL;

	snprintf(dir, sizeof(dir), "%s/admit", tmpdir);
	snprintf(src, sizeof(src), "%s/shared/sub", dir);
	REQUIRE(mkdir_p(src, 0700) == 0);
	/* Its data directory beside the functions' sources, not holding them. */
	snprintf(src, sizeof(src), "%s/data", dir);
	REQUIRE(config_init(&a.c, src) == 0 && config_allow_root(&a.c, dir) == 0);
	b.c = a.c;
	snprintf(src, sizeof(src), "%s/data/functions", dir);
	a.r = b.r = registry_open(src);
	REQUIRE(a.r);
	a.c.registered = admit_held;
	b.c.registered = admit_seen;
	a.c.registered_arg = b.c.registered_arg = a.r;
	snprintf(src, sizeof(src), "%s/shared", dir);
	a.spec = json_pack("{s:[s], s:i, s:[{s:s, s:s, s:b}]}", "command", "true", "port", 8000,
			   "mounts", "source", src, "destination", "/m", "readonly", 0);
	snprintf(src, sizeof(src), "%s/shared/sub", dir);
	b.spec = json_pack("{s:[s], s:i, s:[{s:s, s:s, s:b}]}", "command", "true", "port", 8000,
			   "mounts", "source", src, "destination", "/s", "readonly", 1);
	REQUIRE(a.spec && b.spec);

	REQUIRE(pthread_create(&ta, NULL, admit_main, &a) == 0);
	pthread_mutex_lock(&admit_probe.m);
	while (!admit_probe.a_listed)
		pthread_cond_wait(&admit_probe.cv, &admit_probe.m);
	pthread_mutex_unlock(&admit_probe.m);
	REQUIRE(pthread_create(&tb, NULL, admit_main, &b) == 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	CHECK_EQ(a.ret, 0);
	CHECK_EQ(b.ret, -EACCES);
	CHECK(strstr(b.why, "function writer") != NULL);
	CHECK_STR(b.key, "mounts[0].source");
	CHECK_EQ(registry_specs(a.r, &list), 0);
	CHECK_EQ(json_object_size(list), 1);
	json_decref(list);
	json_decref(a.spec);
	json_decref(b.spec);
	registry_free(a.r);
}

/* A PUT's body, stored as a PUT stores it (function_body_parse). */
static void put_body(struct registry *r, const char *id, const char *body)
{
	char err[256];
	json_t *spec = NULL;
	bool created;

	REQUIRE(function_body_parse(id, body, strlen(body), &spec, err, sizeof(err)) == 0);
	CHECK_EQ(registry_put(r, id, spec, &created, NULL), 0);
	json_decref(spec);
}

/* registry_get_spec: the settings the server decides on, with the defaults
 * it had when it read them from the JSON by key. */
static void test_registry_spec(void)
{
	struct func_spec *f = NULL;
	struct registry_fn *fns;
	struct registry_snap snap;
	struct registry *r;
	char dir[256];
	json_t *j = NULL;
	bool created;
	size_t n;

	snprintf(dir, sizeof(dir), "%s/functions-spec", tmpdir);
	r = registry_open(dir);
	REQUIRE(r);
	put_body(r, "cpu", "{\"command\":[\"x\"],\"port\":8000}");
	put_body(r, "gpu", "{\"command\":[\"x\"],\"port\":8000,\"gpu\":true}");
	put_body(r, "drv", "{\"command\":[\"x\"],\"port\":8000,\"gpu\":true,"
			   "\"gpu_memory\":\"driver\"}");
	put_body(r, "set", "{\"command\":[\"x\"],\"port\":8000,\"gpu\":true,\"concurrency\":3,"
			   "\"queue\":0,\"queue_timeout_s\":2.5,\"max_instances\":4,\"idle_s\":7,"
			   "\"max_lifetime_s\":9,\"stop_grace_s\":0,\"standby\":2,"
			   "\"standby_gpu\":\"none\",\"on_restore_failure\":\"fail\"}");
	CHECK_EQ(registry_get_spec(r, "nope", &f, &snap), -ENOENT);
	CHECK(!f);

	REQUIRE(registry_get_spec(r, "cpu", &f, &snap) == 0);
	CHECK_EQ(f->concurrency, SPEC_DEFAULT_CONCURRENCY_CPU);
	CHECK_EQ(f->queue, SPEC_DEFAULT_QUEUE);
	CHECK(f->queue_timeout_s == SPEC_DEFAULT_QUEUE_TIMEOUT_S);
	CHECK(f->stop_grace_s == SPEC_DEFAULT_STOP_GRACE_S);
	CHECK(f->idle_s == 0 && f->max_lifetime_s == 0);
	CHECK(!f->gpu && !f->standby_gpu_context && !f->restore_failure_fails);
	CHECK_EQ(f->max_instances + f->standby, 0);
	CHECK_EQ(snap.state, SNAP_NONE);
	CHECK_STR(snap.id, "");
	spec_free(f);
	REQUIRE(registry_get_spec(r, "gpu", &f, NULL) == 0);
	CHECK_EQ(f->concurrency, SPEC_DEFAULT_CONCURRENCY_GPU);
	CHECK(f->gpu && f->standby_gpu_context);
	spec_free(f);
	REQUIRE(registry_get_spec(r, "drv", &f, NULL) == 0);
	CHECK(f->gpu && !f->standby_gpu_context);
	spec_free(f);
	REQUIRE(registry_get_spec(r, "set", &f, &snap) == 0);
	CHECK_EQ(f->concurrency, 3);
	CHECK_EQ(f->queue, 0);
	CHECK(f->queue_timeout_s == 2.5 && f->idle_s == 7 && f->max_lifetime_s == 9);
	CHECK(f->stop_grace_s == 0);
	CHECK_EQ(f->max_instances, 4);
	CHECK_EQ(f->standby, 2);
	CHECK(!f->standby_gpu_context && f->restore_failure_fails);
	spec_free(f);

	/* The snapshot's state: the current one's id and size. */
	CHECK_EQ(registry_snapshot_begin(r, "set", "job-1", &j), 0);
	json_decref(j);
	CHECK_EQ(registry_snapshot_end(r, "set", "job-1", SNAP1, 1000, 200, NULL, NULL, NULL), 0);
	REQUIRE(registry_get_spec(r, "set", &f, &snap) == 0);
	CHECK_EQ(snap.state, SNAP_READY);
	CHECK_STR(snap.id, SNAP1);
	CHECK_EQ(snap.image_bytes, 1000);
	spec_free(f);

	/* A stored spec that no longer parses is an error, not defaults. */
	j = json_pack("{s:s}", "command", "not an array");
	CHECK_EQ(registry_put(r, "bad", j, &created, NULL), 0);
	json_decref(j);
	CHECK_EQ(registry_get_spec(r, "bad", &f, &snap), -EINVAL);
	CHECK(!f);

	/* The ids, without the one being deleted. */
	CHECK_EQ(registry_delete_begin(r, "drv", NULL), 0);
	CHECK_EQ(registry_list_ids(r, &j), 0);
	CHECK_EQ(json_array_size(j), 4);
	CHECK_STR(json_string_value(json_array_get(j, 0)), "bad");
	CHECK_STR(json_string_value(json_array_get(j, 1)), "cpu");
	json_decref(j);

	/* The same as records, each with its current snapshot; the one being
	 * deleted listed apart. */
	REQUIRE(registry_functions(r, false, &fns, &n) == 0);
	CHECK_EQ(n, 4);
	CHECK_STR(fns[0].id, "bad");
	CHECK_STR(fns[0].snap, "");
	CHECK_STR(fns[3].id, "set");
	CHECK_STR(fns[3].snap, SNAP1);
	free(fns);
	REQUIRE(registry_functions(r, true, &fns, &n) == 0);
	CHECK_EQ(n, 1);
	CHECK_STR(fns[0].id, "drv");
	free(fns);
	registry_free(r);
}

int main(void)
{
	log_set_level(LOG_ERR);
	REQUIRE(mkdtemp(tmpdir));
	test_routes();
	test_query_body();
	test_metrics();
	test_auth();
	test_auth_scopes();
	test_loopback_hosts();
	test_content_type_rule();
	test_registry();
	test_jobs();
	test_job_logs();
	test_errors();
	test_insts_claim();
	test_registry_damaged();
	test_registry_unrestorable();
	test_registry_admit();
	test_registry_spec();
	rm_rf(tmpdir);
	return check_failures ? 1 : 0;
}
