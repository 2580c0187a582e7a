/* SPDX-License-Identifier: Apache-2.0 */
/* route.c — see route.h. */
#define LOG_PREFIX "route: "
#include "server/route.h"
#include "common/log.h"
#include "common/util.h"
#include "function/spec.h"
#include "server/auth.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <strings.h>

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Segments of a path: at most 3 are meaningful, a 4th means "too many". */
#define MAX_SEGS 4

static int split(const char *path, const char *seg[MAX_SEGS], size_t len[MAX_SEGS])
{
	const char *p = path + 1;
	int n = 0;

	for (;;) {
		size_t l = strcspn(p, "/");

		if (l == 0)
			return -ENOENT; /* "//", a trailing "/" or "/" alone */
		if (n == MAX_SEGS)
			return -ENOENT;
		seg[n] = p;
		len[n] = l;
		n++;
		p += l;
		if (!*p)
			return n;
		p++;
	}
}

static bool seg_is(const char *seg, size_t len, const char *word)
{
	return len == strlen(word) && !memcmp(seg, word, len);
}

/* Copy segment into r->id if it is a valid id. */
static int take_id(const char *seg, size_t len, struct route *r, char *err, size_t errlen)
{
	if (memchr(seg, '%', len)) {
		snprintf(err, errlen, "percent-encoded characters are not allowed in ids");
		return -EINVAL;
	}
	if (len >= sizeof(r->id)) {
		snprintf(err, errlen, "id is longer than 63 characters");
		return -EINVAL;
	}
	memcpy(r->id, seg, len);
	r->id[len] = '\0';
	if (!id_valid(r->id)) {
		char shown[4 * sizeof(r->id)];
		size_t n = 0;

		/* Echoed as text: a byte that is not printable ASCII (a raw
		 * 0xff, which no JSON string can hold) is shown as \xff. */
		for (size_t i = 0; i < len && n + 5 < sizeof(shown); i++) {
			unsigned char c = (unsigned char)seg[i];

			if (c > ' ' && c < 0x7f)
				shown[n++] = (char)c;
			else
				n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\x%02x", c);
		}
		shown[n] = '\0';
		snprintf(err, errlen, "invalid id \"%s\": ids are [a-z0-9][a-z0-9._-]{0,62}",
			 shown);
		r->id[0] = '\0';
		return -EINVAL;
	}
	return 0;
}

int route_parse(const char *path, struct route *r, char *err, size_t errlen)
{
	const char *seg[MAX_SEGS];
	size_t len[MAX_SEGS];
	int n;

	memset(r, 0, sizeof(*r));
	if (errlen)
		err[0] = '\0';
	if (!path || path[0] != '/' || strnlen(path, ROUTE_PATH_MAX + 1) > ROUTE_PATH_MAX)
		return -ENOENT;
	/* /function/<id> and all under it belong to the function (routed to
	 * its instances): only the id is thawd's. */
	if (!strncmp(path, "/function/", 10)) {
		size_t l = strcspn(path + 10, "/");
		int ret;

		if (!l)
			return -ENOENT;
		ret = take_id(path + 10, l, r, err, errlen);
		if (ret)
			return ret;
		r->kind = ROUTE_FUNCTION_PROXY;
		return 0;
	}
	n = split(path, seg, len);
	if (n < 0)
		return n;

	if (n == 1) {
		if (seg_is(seg[0], len[0], "healthz"))
			r->kind = ROUTE_HEALTHZ;
		else if (seg_is(seg[0], len[0], "readyz"))
			r->kind = ROUTE_READYZ;
		else if (seg_is(seg[0], len[0], "drain"))
			r->kind = ROUTE_DRAIN;
		else if (seg_is(seg[0], len[0], "metrics"))
			r->kind = ROUTE_METRICS;
		else if (seg_is(seg[0], len[0], "functions"))
			r->kind = ROUTE_FUNCTIONS;
		else if (seg_is(seg[0], len[0], "instances"))
			r->kind = ROUTE_INSTANCES;
		else if (seg_is(seg[0], len[0], "jobs"))
			r->kind = ROUTE_JOBS;
		else
			return -ENOENT;
		return 0;
	}

	/* Decide the route from the fixed words first: an unknown path is a
	 * 404 whatever its id looks like. */
	enum route_kind kind = ROUTE_NONE;

	if (seg_is(seg[0], len[0], "functions")) {
		if (n == 2)
			kind = ROUTE_FUNCTION;
		else if (n == 3 && seg_is(seg[2], len[2], "snapshot"))
			kind = ROUTE_FUNCTION_SNAPSHOT;
		else if (n == 3 && seg_is(seg[2], len[2], "start"))
			kind = ROUTE_FUNCTION_START;
		else if (n == 3 && seg_is(seg[2], len[2], "push"))
			kind = ROUTE_FUNCTION_PUSH;
		else if (n == 3 && seg_is(seg[2], len[2], "pull"))
			kind = ROUTE_FUNCTION_PULL;
	} else if (seg_is(seg[0], len[0], "instances")) {
		if (n == 2)
			kind = ROUTE_INSTANCE;
		else if (n == 3 && seg_is(seg[2], len[2], "logs"))
			kind = ROUTE_INSTANCE_LOGS;
	} else if (seg_is(seg[0], len[0], "jobs")) {
		if (n == 2)
			kind = ROUTE_JOB;
		else if (n == 3 && seg_is(seg[2], len[2], "logs"))
			kind = ROUTE_JOB_LOGS;
	}
	if (kind == ROUTE_NONE)
		return -ENOENT;

	int ret = take_id(seg[1], len[1], r, err, errlen);
	if (ret)
		return ret;
	r->kind = kind;
	return 0;
}

enum http_method method_parse(const char *method)
{
	if (!method)
		return METHOD_OTHER;
	if (!strcmp(method, "GET"))
		return METHOD_GET;
	if (!strcmp(method, "PUT"))
		return METHOD_PUT;
	if (!strcmp(method, "POST"))
		return METHOD_POST;
	if (!strcmp(method, "DELETE"))
		return METHOD_DELETE;
	return METHOD_OTHER;
}

static const struct {
	unsigned methods;
	const char *allow;
	const char *name;
} routes[] = {
	[ROUTE_NONE] = { 0, "", "none" },
	[ROUTE_HEALTHZ] = { METHOD_GET, "GET", "healthz" },
	[ROUTE_READYZ] = { METHOD_GET, "GET", "readyz" },
	[ROUTE_DRAIN] = { METHOD_POST, "POST", "drain" },
	[ROUTE_METRICS] = { METHOD_GET, "GET", "metrics" },
	[ROUTE_FUNCTIONS] = { METHOD_GET, "GET", "functions" },
	[ROUTE_FUNCTION] = { METHOD_GET | METHOD_PUT | METHOD_DELETE, "GET, PUT, DELETE",
			     "function" },
	[ROUTE_FUNCTION_SNAPSHOT] = { METHOD_POST, "POST", "snapshot" },
	[ROUTE_FUNCTION_START] = { METHOD_POST, "POST", "start" },
	[ROUTE_INSTANCES] = { METHOD_GET, "GET", "instances" },
	[ROUTE_INSTANCE] = { METHOD_GET | METHOD_DELETE, "GET, DELETE", "instance" },
	[ROUTE_JOBS] = { METHOD_GET, "GET", "jobs" },
	[ROUTE_JOB] = { METHOD_GET, "GET", "job" },
	[ROUTE_INSTANCE_LOGS] = { METHOD_GET, "GET", "instance_logs" },
	[ROUTE_JOB_LOGS] = { METHOD_GET, "GET", "job_logs" },
	[ROUTE_FUNCTION_PUSH] = { METHOD_POST, "POST", "push" },
	[ROUTE_FUNCTION_PULL] = { METHOD_POST, "POST", "pull" },
	/* Any method: http.c does not check it against this mask. */
	[ROUTE_FUNCTION_PROXY] = { METHOD_GET | METHOD_PUT | METHOD_POST | METHOD_DELETE, "any",
				   "proxy" },
};

unsigned route_methods(enum route_kind kind)
{
	return (unsigned)kind < ARRAY_SIZE(routes) ? routes[kind].methods : 0;
}

const char *route_allow(enum route_kind kind)
{
	return (unsigned)kind < ARRAY_SIZE(routes) ? routes[kind].allow : "";
}

int query_bool(const char *value, bool *out)
{
	if (!value || !strcmp(value, "0") || !strcmp(value, "false")) {
		*out = false;
		return 0;
	}
	/* "?wait" alone arrives as an empty value. */
	if (!*value || !strcmp(value, "1") || !strcmp(value, "true")) {
		*out = true;
		return 0;
	}
	return -EINVAL;
}

int query_seconds_parse(const char *value, double max, double *out)
{
	size_t digits = strspn(value, "0123456789"), frac = 0;
	double d;

	if (value[digits] == '.')
		frac = strspn(value + digits + 1, "0123456789") + 1;
	/* What a person writes: "8", "2.5", "0.25", "3."; one digit at least. */
	if (value[digits + frac] || (!digits && frac < 2))
		return -EINVAL;
	errno = 0;
	d = strtod(value, NULL);
	if (errno || !(d >= 0 && d <= max))
		return -EINVAL;
	*out = d;
	return 0;
}

int body_parse_object(const char *buf, size_t len, json_t **out, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *j;

	*out = NULL;
	if (!buf || len == 0) {
		snprintf(err, errlen, "the request needs a JSON object body");
		return -EINVAL;
	}
	j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		snprintf(err, errlen, "malformed JSON at line %d, column %d (byte %d): %s",
			 jerr.line, jerr.column, jerr.position, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(j)) {
		snprintf(err, errlen, "the body must be a JSON object");
		json_decref(j);
		return -EINVAL;
	}
	*out = j;
	return 0;
}

int function_body_parse(const char *id, const char *buf, size_t len, json_t **spec_json, char *err,
			size_t errlen)
{
	struct func_spec *spec = NULL;
	json_t *body = NULL, *idj;
	int ret;

	*spec_json = NULL;
	ret = body_parse_object(buf, len, &body, err, errlen);
	if (ret)
		return ret;
	idj = json_object_get(body, "id");
	if (idj && (!json_is_string(idj) || strcmp(json_string_value(idj), id))) {
		snprintf(err, errlen, "\"id\" in the body differs from the id in the path");
		ret = -EINVAL;
		goto out;
	}
	err[0] = '\0';
	ret = spec_parse(body, id, &spec, err, errlen);
	if (ret) {
		if (!err[0])
			snprintf(err, errlen, "spec_parse: %s", strerror(-ret));
		goto out;
	}
	*spec_json = spec_to_json(spec);
	if (!*spec_json) {
		snprintf(err, errlen, "out of memory writing the spec");
		ret = -ENOMEM;
	}
out:
	spec_free(spec);
	json_decref(body);
	return ret;
}

int listen_addr_parse(const char *s, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon, *h = s;
	size_t hl;

	if (!s || !*s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || strchr(s, ':') != colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= hostlen || strlen(colon + 1) == 0 || strlen(colon + 1) >= portlen)
		return -EINVAL;
	for (const char *p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
	}
	if (atol(colon + 1) > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	snprintf(port, portlen, "%s", colon + 1);
	return 0;
}

unsigned route_scope(enum route_kind kind)
{
	switch (kind) {
	case ROUTE_HEALTHZ:
	case ROUTE_READYZ: return AUTH_SCOPE_NONE;
	case ROUTE_METRICS: return AUTH_SCOPE_ALL;
	case ROUTE_FUNCTION_START:
	case ROUTE_FUNCTION_PROXY:
	case ROUTE_INSTANCES:
	case ROUTE_INSTANCE:
	case ROUTE_INSTANCE_LOGS: return AUTH_SCOPE_DATA;
	case ROUTE_FUNCTIONS:
	case ROUTE_FUNCTION:
	case ROUTE_FUNCTION_SNAPSHOT:
	case ROUTE_FUNCTION_PUSH:
	case ROUTE_FUNCTION_PULL:
	case ROUTE_JOBS:
	case ROUTE_JOB:
	case ROUTE_JOB_LOGS:
	case ROUTE_DRAIN: return AUTH_SCOPE_CONTROL;
	case ROUTE_NONE: break;
	}
	return AUTH_SCOPE_CONTROL;
}

bool host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!host)
		return false;
	if (!strcasecmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

bool host_header_is_loopback(const char *v)
{
	char host[64];
	const char *port = NULL, *end;
	size_t hl;

	if (!v)
		return false;
	if (v[0] == '[') {
		end = strchr(v, ']');
		if (!end)
			return false;
		hl = (size_t)(end - v - 1);
		if (end[1] == ':')
			port = end + 2;
		else if (end[1])
			return false;
		if (hl >= sizeof(host))
			return false;
		memcpy(host, v + 1, hl);
		host[hl] = '\0';
		/* Only an IPv6 address goes in brackets. */
		if (!strchr(host, ':'))
			return false;
	} else {
		end = strchr(v, ':');
		hl = end ? (size_t)(end - v) : strlen(v);
		if (end)
			port = end + 1;
		if (hl >= sizeof(host))
			return false;
		memcpy(host, v, hl);
		host[hl] = '\0';
		if (strchr(host, ':'))
			return false;
	}
	if (port) {
		if (!*port || strlen(port) > 5)
			return false;
		for (const char *p = port; *p; p++)
			if (*p < '0' || *p > '9')
				return false;
	}
	return host_is_loopback(host);
}

/* Whether ctype's media type (before any ";" parameters) is type. */
static bool media_is(const char *ctype, const char *type)
{
	size_t n = strlen(type);

	while (*ctype == ' ' || *ctype == '\t')
		ctype++;
	if (strncasecmp(ctype, type, n))
		return false;
	ctype += n;
	while (*ctype == ' ' || *ctype == '\t')
		ctype++;
	return *ctype == '\0' || *ctype == ';';
}

int content_type_check(enum http_method method, const char *ctype, const char *body, size_t len,
		       char *err, size_t errlen)
{
	/* What an HTML form (or a cross-site fetch() without a preflight) can
	 * send: the types a browser sends to another site without asking. */
	bool form = ctype && (media_is(ctype, "application/x-www-form-urlencoded") ||
			      media_is(ctype, "multipart/form-data") || media_is(ctype, "text/plain"));

	if (errlen)
		err[0] = '\0';
	if (!(method & (METHOD_PUT | METHOD_POST | METHOD_DELETE)))
		return 0;
	if (len == 0) {
		if (!form)
			return 0;
		snprintf(err, errlen, "a %s request with a form's Content-Type (%.60s) is refused: "
				      "send none, or application/json",
			 method == METHOD_POST ? "POST" : method == METHOD_PUT ? "PUT" : "DELETE",
			 ctype);
		return -EINVAL;
	}
	if (ctype && media_is(ctype, "application/json"))
		return 0;
	/* curl -X PUT -d @spec.json sends application/x-www-form-urlencoded:
	 * taken for PUT when the body is JSON all the same.  A browser cannot
	 * send a PUT to another site without a CORS preflight, which thawd
	 * never answers yes to, so this opens nothing to cross-site pages;
	 * POST (what a form sends) gets no such leniency. */
	if (method == METHOD_PUT && ctype && media_is(ctype, "application/x-www-form-urlencoded")) {
		json_t *j = json_loadb(body, len, JSON_DECODE_ANY, NULL);

		if (j) {
			json_decref(j);
			return 0;
		}
	}
	snprintf(err, errlen, "a request body must be sent with Content-Type: application/json "
			      "(not %.60s)",
		 ctype ? ctype : "none");
	return -EINVAL;
}
