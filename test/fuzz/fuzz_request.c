/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_request.c — thawd's request parsing on arbitrary input.
 *
 * The input is a request in three parts separated by newlines: method, path
 * (with an optional ?query), body.  It goes through what thawd does with a
 * request before any I/O: route_parse (path → route and id), method checks,
 * query_bool, body_parse_object and function_body_parse (JSON → spec through
 * spec_parse and spec_to_json), and listen_addr_parse on the path.
 *
 * Whatever the input: nothing crashes or reads past it; an accepted id is a
 * valid id (no '/', never "." or "..", so never a path outside the data
 * directory); a path with '%' never yields an id; an accepted spec is
 * normalised for good (parsing what spec_to_json wrote gives it back).
 *
 * spec_parse logs every refusal with pr_err; stderr is closed for the target
 * (libFuzzer's -close_fd_mask=2 keeps its own and the sanitizers' reports)
 * unless THAW_LOG is set.
 */
#include "common/util.h"
#include "server/route.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_request"
#include "test/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_quiet_stderr(argc, argv);
}

/* The next newline-terminated part of [*p, end) as a new NUL-terminated string. */
static char *part(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
	size_t n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
	char *s = malloc(n + 1);

	if (!s)
		return NULL;
	memcpy(s, *p, n);
	s[n] = '\0';
	*p += n + (nl ? 1 : 0);
	return s;
}

static void check_route(const char *path)
{
	struct route r;
	char err[256];
	int ret = route_parse(path, &r, err, sizeof(err));

	FUZZ_ASSERT(ret == 0 || ret == -ENOENT || ret == -EINVAL);
	if (ret == -EINVAL)
		FUZZ_ASSERT(err[0] != '\0');
	if (ret)
		return;
	FUZZ_ASSERT(r.kind != ROUTE_NONE);
	FUZZ_ASSERT(route_methods(r.kind) != 0);
	FUZZ_ASSERT(strlen(path) <= ROUTE_PATH_MAX);
	FUZZ_ASSERT(path[0] == '/');
	switch (r.kind) {
	case ROUTE_FUNCTION:
	case ROUTE_FUNCTION_SNAPSHOT:
	case ROUTE_FUNCTION_START:
	case ROUTE_INSTANCE:
	case ROUTE_JOB:
	case ROUTE_INSTANCE_LOGS:
	case ROUTE_JOB_LOGS:
	case ROUTE_FUNCTION_PUSH:
	case ROUTE_FUNCTION_PULL:
		FUZZ_ASSERT(id_valid(r.id));
		FUZZ_ASSERT(!strchr(r.id, '/') && strcmp(r.id, ".") && strcmp(r.id, ".."));
		FUZZ_ASSERT(!strchr(path, '%'));
		/* The id is a segment of the path, as it came. */
		FUZZ_ASSERT(strstr(path, r.id) != NULL);
		break;
	case ROUTE_FUNCTION_PROXY:
		/* /function/<id>/<anything>: the id is checked like any other,
		 * the rest is the function's own path, passed on as it came. */
		FUZZ_ASSERT(id_valid(r.id));
		FUZZ_ASSERT(!strchr(r.id, '/') && strcmp(r.id, ".") && strcmp(r.id, ".."));
		FUZZ_ASSERT(!strncmp(path, "/function/", 10) &&
			    !strncmp(path + 10, r.id, strlen(r.id)));
		break;
	default:
		FUZZ_ASSERT(r.id[0] == '\0');
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;
	char *method = NULL, *target = NULL, *query, err[512], host[128], port[8];
	json_t *j = NULL, *spec = NULL, *spec2 = NULL;
	char *text = NULL;
	bool b;

	if (size > (1u << 20))
		return 0;
	method = part(&p, end);
	target = part(&p, end);
	if (!method || !target)
		goto out;

	enum http_method m = method_parse(method);
	FUZZ_ASSERT(m == METHOD_OTHER || m == METHOD_GET || m == METHOD_PUT || m == METHOD_POST ||
		    m == METHOD_DELETE);
	query = strchr(target, '?');
	if (query) {
		*query++ = '\0';
		if (query_bool(query, &b) == 0 && query[0])
			FUZZ_ASSERT(b == (strcmp(query, "0") && strcmp(query, "false")));
	}
	check_route(target);
	if (listen_addr_parse(target, host, sizeof(host), port, sizeof(port)) == 0)
		FUZZ_ASSERT(host[0] && atol(port) <= 65535);

	/* The body: as JSON, and as a function spec for an id. */
	size_t blen = (size_t)(end - p);
	if (body_parse_object((const char *)p, blen, &j, err, sizeof(err)) == 0)
		FUZZ_ASSERT(json_is_object(j));
	else
		FUZZ_ASSERT(j == NULL && err[0]);
	if (function_body_parse("fuzz-fn", (const char *)p, blen, &spec, err, sizeof(err)) == 0) {
		FUZZ_ASSERT(json_is_object(spec));
		text = json_dumps(spec, JSON_COMPACT);
		FUZZ_ASSERT(text);
		FUZZ_ASSERT(function_body_parse("fuzz-fn", text, strlen(text), &spec2, err,
						sizeof(err)) == 0);
		FUZZ_ASSERT(json_equal(spec, spec2));
	} else {
		FUZZ_ASSERT(spec == NULL);
	}
out:
	free(text);
	json_decref(spec2);
	json_decref(spec);
	json_decref(j);
	free(method);
	free(target);
	return 0;
}
