/* SPDX-License-Identifier: Apache-2.0 */
/* spec.c — see spec.h. */
#define LOG_PREFIX "spec: "
#include "function/spec.h"
#include "function/spec_internal.h"
#include "function/spec_mounts.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_READY_TIMEOUT_S 60.0
#define MAX_ARGS 4096

static const char *const sandbox_keys[] = { "writable_root", "seccomp", "no_new_privileges",
					    "host_home", "capabilities", "userns" };

int spec_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static void free_strv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static void call_release(struct http_call *c)
{
	free(c->method);
	free(c->path);
	free(c->body);
	memset(c, 0, sizeof(*c));
}

void spec_free(struct func_spec *s)
{
	if (!s)
		return;
	free_strv(s->command);
	free_strv(s->env);
	free(s->cwd);
	free(s->bundle);
	free(s->image);
	free(s->user);
	free(s->ready_path);
	for (size_t i = 0; i < s->nwarmup; i++)
		call_release(&s->warmup[i]);
	free(s->warmup);
	if (s->prepare)
		call_release(s->prepare);
	free(s->prepare);
	free_strv((char **)s->sandbox.capabilities);
	spec_mounts_free(s);
	free(s);
}

/* A path in a request line: starts with '/', no spaces or control characters. */
static bool http_path_ok(const char *p)
{
	if (p[0] != '/')
		return false;
	for (; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return false;
	return true;
}

static bool method_ok(const char *m)
{
	if (!*m || strlen(m) > 16)
		return false;
	for (; *m; m++)
		if (*m < 'A' || *m > 'Z')
			return false;
	return true;
}

static int parse_call(const json_t *j, const char *field, struct http_call *c, char *err,
		      size_t errlen)
{
	const char *key;
	json_t *v;

	if (!json_is_object(j))
		return spec_fail(err, errlen, "%s: must be an object {method, path, body}", field);
	json_object_foreach((json_t *)j, key, v) {
		if (strcmp(key, "method") && strcmp(key, "path") && strcmp(key, "body"))
			return spec_fail(err, errlen, "%s: unknown key \"%s\"", field, key);
	}
	v = json_object_get(j, "method");
	if (v && (!json_is_string(v) || !method_ok(json_string_value(v))))
		return spec_fail(err, errlen, "%s.method: must be an HTTP method such as \"GET\"",
				 field);
	c->method = strdup(v ? json_string_value(v) : "GET");
	v = json_object_get(j, "path");
	if (!json_is_string(v) || !http_path_ok(json_string_value(v)))
		return spec_fail(err, errlen,
				 "%s.path: must be a string starting with '/', no spaces", field);
	c->path = strdup(json_string_value(v));
	v = json_object_get(j, "body");
	if (json_is_string(v))
		c->body = strdup(json_string_value(v));
	else if (v && !json_is_null(v))
		/* A JSON body given as JSON: sent as its text. */
		c->body = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!c->method || !c->path || (v && !json_is_null(v) && !c->body))
		return spec_fail(err, errlen, "%s: out of memory", field);
	return 0;
}

static int parse_command(const json_t *v, struct func_spec *s, char *err, size_t errlen)
{
	size_t n = json_array_size(v);

	if (!json_is_array(v) || n == 0 || n > MAX_ARGS)
		return spec_fail(err, errlen, "command: must be a non-empty array of strings");
	s->command = calloc(n + 1, sizeof(char *));
	if (!s->command)
		return spec_fail(err, errlen, "command: out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(v, i);

		if (!json_is_string(a))
			return spec_fail(err, errlen, "command[%zu]: must be a string", i);
		if (i == 0 && !*json_string_value(a))
			return spec_fail(err, errlen, "command[0]: must not be empty");
		s->command[i] = strdup(json_string_value(a));
		if (!s->command[i])
			return spec_fail(err, errlen, "command: out of memory");
	}
	return 0;
}

static int parse_env(const json_t *v, struct func_spec *s, char *err, size_t errlen)
{
	const char *key;
	json_t *val;
	size_t i = 0;

	if (!json_is_object(v))
		return spec_fail(err, errlen, "env: must be an object of strings");
	s->env = calloc(json_object_size(v) + 1, sizeof(char *));
	if (!s->env)
		return spec_fail(err, errlen, "env: out of memory");
	json_object_foreach((json_t *)v, key, val) {
		if (!*key || strchr(key, '='))
			return spec_fail(err, errlen, "env: bad variable name \"%s\"", key);
		if (!json_is_string(val))
			return spec_fail(err, errlen, "env.%s: must be a string", key);
		if (asprintf(&s->env[i], "%s=%s", key, json_string_value(val)) < 0) {
			s->env[i] = NULL;
			return spec_fail(err, errlen, "env: out of memory");
		}
		i++;
	}
	return 0;
}

static int parse_ready(const json_t *v, struct func_spec *s, char *err, size_t errlen)
{
	json_t *http = json_object_get(v, "http"), *tcp = json_object_get(v, "tcp");
	json_t *t = json_object_get(v, "timeout_s");
	const char *key;
	json_t *val;

	if (!json_is_object(v))
		return spec_fail(err, errlen,
				 "ready: must be {\"http\":\"/path\"} or {\"tcp\":true}");
	json_object_foreach((json_t *)v, key, val) {
		if (strcmp(key, "http") && strcmp(key, "tcp") && strcmp(key, "timeout_s"))
			return spec_fail(err, errlen, "ready: unknown key \"%s\"", key);
	}
	if (http && tcp)
		return spec_fail(err, errlen, "ready: give either http or tcp, not both");
	if (http) {
		if (!json_is_string(http) || !http_path_ok(json_string_value(http)))
			return spec_fail(err, errlen,
				    "ready.http: must be a path starting with '/', no spaces");
		s->ready = READY_HTTP;
		s->ready_path = strdup(json_string_value(http));
		if (!s->ready_path)
			return spec_fail(err, errlen, "ready: out of memory");
	} else if (tcp) {
		if (!json_is_true(tcp))
			return spec_fail(err, errlen, "ready.tcp: must be true");
		s->ready = READY_TCP;
	} else {
		return spec_fail(err, errlen, "ready: give http (a path) or tcp (true)");
	}
	if (t) {
		if (!json_is_number(t) || json_number_value(t) <= 0 ||
		    json_number_value(t) > 24 * 3600)
			return spec_fail(err, errlen,
					 "ready.timeout_s: must be a number of seconds > 0");
		s->ready_timeout_s = json_number_value(t);
	}
	return 0;
}

static int parse_abs_path(const json_t *v, const char *field, char **out, char *err,
			  size_t errlen)
{
	if (!json_is_string(v) || json_string_value(v)[0] != '/')
		return spec_fail(err, errlen, "%s: must be an absolute path", field);
	*out = strdup(json_string_value(v));
	return *out ? 0 : spec_fail(err, errlen, "%s: out of memory", field);
}

/* v, the value of key: a number of seconds, 0 to a year, or absent (def). */
static int parse_seconds(const json_t *v, const char *key, double def, double *out, char *err,
			 size_t errlen)
{
	*out = def;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || json_number_value(v) < 0 ||
	    json_number_value(v) > SPEC_MAX_SECONDS)
		return spec_fail(err, errlen, "%s: must be a number of seconds from 0 to %.0f", key,
			    SPEC_MAX_SECONDS);
	*out = json_number_value(v);
	return 0;
}

static int parse_capabilities(const json_t *v, struct oci_sandbox *sb, char *err, size_t errlen)
{
	char **caps;

	if (!json_is_array(v))
		return spec_fail(err, errlen, "sandbox.capabilities: must be an array of names");
	caps = calloc(json_array_size(v) + 1, sizeof(char *));
	if (!caps)
		return spec_fail(err, errlen, "sandbox.capabilities: out of memory");
	sb->capabilities = caps;
	for (size_t i = 0; i < json_array_size(v); i++) {
		const char *name = json_string_value(json_array_get(v, i));

		if (!name || !oci_capability_known(name))
			return spec_fail(err, errlen,
				    "sandbox.capabilities[%zu]: not one of the default set "
				    "(CAP_CHOWN, CAP_NET_BIND_SERVICE, ...; docs/API.md)", i);
		caps[i] = strdup(name);
		if (!caps[i])
			return spec_fail(err, errlen, "sandbox.capabilities: out of memory");
	}
	return 0;
}

/* One boolean of "sandbox"; *loosened is set when it differs from the
 * confined default. */
static int sandbox_flag(const json_t *sb, const char *key, bool confined, bool *loosened,
			char *err, size_t errlen)
{
	const json_t *v = json_object_get(sb, key);

	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return spec_fail(err, errlen, "sandbox.%s: must be true or false", key);
	*loosened = json_is_true(v) != confined;
	return 0;
}

static int parse_sandbox(const json_t *v, struct oci_sandbox *sb, char *err, size_t errlen)
{
	const char *key;
	json_t *val;
	int ret;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return spec_fail(err, errlen, "sandbox: must be an object");
	json_object_foreach((json_t *)v, key, val) {
		bool known = false;

		for (size_t i = 0; i < ARRAY_SIZE(sandbox_keys); i++)
			known |= !strcmp(key, sandbox_keys[i]);
		if (!known)
			return spec_fail(err, errlen, "sandbox: unknown key \"%s\"", key);
	}
	if ((ret = sandbox_flag(v, "writable_root", false, &sb->writable_root, err, errlen)) ||
	    (ret = sandbox_flag(v, "seccomp", true, &sb->no_seccomp, err, errlen)) ||
	    (ret = sandbox_flag(v, "no_new_privileges", true, &sb->new_privileges, err, errlen)) ||
	    (ret = sandbox_flag(v, "host_home", false, &sb->host_home, err, errlen)) ||
	    (ret = sandbox_flag(v, "userns", false, &sb->userns, err, errlen)))
		return ret;
	val = json_object_get(v, "capabilities");
	return val ? parse_capabilities(val, sb, err, errlen) : 0;
}

/* ---- image references ---- */

#define IMAGE_REF_MAX 1024

static bool lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A path component of a repository name: [a-z0-9]+ joined by ".", "_",
 * "__" or "-"+ (the distribution project's grammar). */
static bool repo_component_ok(const char *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t run = 0;

		while (i < n && lower_alnum(p[i])) {
			i++;
			run++;
		}
		if (!run)
			return false;
		if (i == n)
			return true;
		if (p[i] == '.' || (p[i] == '_' && (i + 1 >= n || p[i + 1] != '_')))
			i++;
		else if (p[i] == '_')
			i += 2;
		else if (p[i] == '-')
			while (i < n && p[i] == '-')
				i++;
		else
			return false;
		if (i == n)
			return false;
	}
	return n > 0;
}

/* A registry host: [A-Za-z0-9.-]+ with an optional :port. */
static bool domain_ok(const char *p, size_t n)
{
	size_t i = 0;

	for (; i < n && p[i] != ':'; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9') || p[i] == '.' || p[i] == '-'))
			return false;
	if (i == 0)
		return false;
	if (i == n)
		return true;
	if (++i == n || n - i > 5)
		return false;
	for (; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	return true;
}

/* docker://[host[:port]/]name[:tag][@sha256:<64 hex>] */
static int docker_ref_ok(const char *r, char *err, size_t errlen)
{
	const char *at = strchr(r, '@'), *end = at ? at : r + strlen(r), *slash, *p, *colon;

	if (at) {
		const char *h = at + 1;

		if (strncmp(h, "sha256:", 7) || strlen(h + 7) != 64)
			return spec_fail(err, errlen,
					 "image: the digest must be @sha256:<64 hex digits>");
		for (h += 7; *h; h++)
			if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
				return spec_fail(err, errlen,
						 "image: the digest must be lowercase hex");
	}
	/* The tag: after the last ':' that follows the last '/'. */
	slash = NULL;
	for (p = r; p < end; p++)
		if (*p == '/')
			slash = p;
	colon = NULL;
	for (p = slash ? slash : r; p < end; p++)
		if (*p == ':')
			colon = p;
	if (colon) {
		size_t n = (size_t)(end - colon - 1);

		if (!n || n > 128)
			return spec_fail(err, errlen, "image: a tag is 1 to 128 characters");
		for (p = colon + 1; p < end; p++)
			if (!(lower_alnum(*p) || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
			      (p > colon + 1 && (*p == '.' || *p == '-'))))
				return spec_fail(err, errlen, "image: bad tag \"%.*s\"", (int)n,
						 colon + 1);
		end = colon;
	}
	if (end == r)
		return spec_fail(err, errlen,
				 "image: docker:// needs a name, e.g. docker://registry/name:tag");
	/* The first component is a registry host if it looks like one. */
	p = r;
	slash = memchr(r, '/', (size_t)(end - r));
	if (slash) {
		size_t n = (size_t)(slash - r);

		if (memchr(r, '.', n) || memchr(r, ':', n) ||
		    (n == 9 && !strncmp(r, "localhost", 9))) {
			if (!domain_ok(r, n))
				return spec_fail(err, errlen, "image: bad registry host \"%.*s\"",
						 (int)n, r);
			p = slash + 1;
		}
	}
	while (p <= end) {
		const char *e = memchr(p, '/', (size_t)(end - p));

		if (!e)
			e = end;
		if (!repo_component_ok(p, (size_t)(e - p)))
			return spec_fail(
			    err, errlen,
			    "image: bad repository name \"%.*s\" (lowercase letters, digits "
			    "and . _ - between them)",
			    (int)(end - r), r);
		p = e + 1;
	}
	return 0;
}

int spec_image_ref(const char *ref, enum image_transport *t, char *path, size_t pathlen,
		   char *err, size_t errlen)
{
	static const struct {
		const char *prefix;
		enum image_transport t;
	} transports[] = { { "docker://", IMAGE_DOCKER },
			   { "oci:", IMAGE_OCI },
			   { "docker-archive:", IMAGE_DOCKER_ARCHIVE },
			   { "oci-archive:", IMAGE_OCI_ARCHIVE } };
	const char *rest = NULL, *p;
	size_t n;

	if (!ref || !*ref || strlen(ref) > IMAGE_REF_MAX)
		return spec_fail(err, errlen, "image: must be a reference of 1 to %d characters",
			    IMAGE_REF_MAX);
	for (p = ref; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return spec_fail(err, errlen, "image: no spaces or control characters");
	for (size_t i = 0; i < ARRAY_SIZE(transports); i++) {
		if (!strncmp(ref, transports[i].prefix, strlen(transports[i].prefix))) {
			*t = transports[i].t;
			rest = ref + strlen(transports[i].prefix);
			break;
		}
	}
	if (!rest)
		return spec_fail(err, errlen,
			    "image: \"%.64s\" has no transport: give docker://registry/name:tag, "
			    "oci:/layout[:tag], docker-archive:/file.tar or oci-archive:/file.tar",
			    ref);
	if (*t == IMAGE_DOCKER)
		return docker_ref_ok(rest, err, errlen);
	/* A local image: an absolute path up to the first ':' (skopeo's split). */
	n = strcspn(rest, ":");
	if (rest[0] != '/' || n < 2)
		return spec_fail(err, errlen, "image: the path of a local image must be absolute");
	if (strstr(rest, "/../") || (n >= 3 && !strncmp(rest + n - 3, "/..", 3)))
		return spec_fail(err, errlen, "image: the path must not contain \"..\"");
	if (rest[n] == ':' && !rest[n + 1])
		return spec_fail(err, errlen, "image: an empty name after the path");
	if (path && pathlen) {
		if (n >= pathlen)
			return spec_fail(err, errlen, "image: the path is too long");
		memcpy(path, rest, n);
		path[n] = '\0';
	}
	return 0;
}

/* ---- the spec ---- */

/* The parser of one key's value: v is the spec's value of it, NULL where
 * the spec does not give it (then the default is set); j the whole spec. */
typedef int (*spec_key_fn)(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			   size_t errlen);

static int key_bundle(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		      size_t errlen)
{
	return v ? parse_abs_path(v, "bundle", &s->bundle, err, errlen) : 0;
}

static int key_image(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		     size_t errlen)
{
	enum image_transport t;
	int ret;

	if (!v)
		return 0;
	if (s->bundle)
		return spec_fail(err, errlen, "image: give an image or a bundle, not both");
	if (!json_is_string(v))
		return spec_fail(err, errlen, "image: must be a string such as "
					 "\"docker://registry/name:tag\"");
	if ((ret = spec_image_ref(json_string_value(v), &t, NULL, 0, err, errlen)))
		return ret;
	if (!(s->image = strdup(json_string_value(v))))
		return spec_fail(err, errlen, "image: out of memory");
	return 0;
}

static int key_user(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		    size_t errlen)
{
	const char *u = json_string_value(v);

	if (!v)
		return 0;
	if (!s->image)
		return spec_fail(err, errlen,
				 "user: only with \"image\" (it replaces the image's user)");
	if (!u || !*u || strlen(u) > 64 || strpbrk(u, " \t\n\r/"))
		return spec_fail(err, errlen,
				 "user: must be a user name or uid[:gid], e.g. \"root\"");
	if (!(s->user = strdup(u)))
		return spec_fail(err, errlen, "user: out of memory");
	return 0;
}

static int key_command(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		       size_t errlen)
{
	if (v)
		return parse_command(v, s, err, errlen);
	if (!s->bundle && !s->image)
		return spec_fail(
		    err, errlen,
		    "command: missing (an array of strings, e.g. [\"python3\", \"app.py\"])");
	return 0;
}

static int key_env(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		   size_t errlen)
{
	if (v)
		return parse_env(v, s, err, errlen);
	if (!(s->env = calloc(1, sizeof(char *))))
		return spec_fail(err, errlen, "env: out of memory");
	return 0;
}

static int key_cwd(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		   size_t errlen)
{
	return v ? parse_abs_path(v, "cwd", &s->cwd, err, errlen) : 0;
}

static int key_port(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		    size_t errlen)
{
	if (!v && !s->image)
		return spec_fail(err, errlen, "port: missing (the port the function listens on)");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
		  json_integer_value(v) > 65535))
		return spec_fail(err, errlen, "port: must be an integer in 1..65535");
	s->port = v ? (uint16_t)json_integer_value(v) : 0;
	return 0;
}

static int key_ready(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		     size_t errlen)
{
	s->ready = READY_TCP;
	s->ready_timeout_s = DEFAULT_READY_TIMEOUT_S;
	return v ? parse_ready(v, s, err, errlen) : 0;
}

static int key_warmup(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		      size_t errlen)
{
	int ret;

	if (!v)
		return 0;
	if (!json_is_array(v) || json_array_size(v) > 1000)
		return spec_fail(err, errlen, "warmup: must be an array of {method, path, body}");
	s->warmup = calloc(json_array_size(v) + 1, sizeof(*s->warmup));
	if (!s->warmup)
		return spec_fail(err, errlen, "warmup: out of memory");
	for (size_t i = 0; i < json_array_size(v); i++) {
		char field[32];

		snprintf(field, sizeof(field), "warmup[%zu]", i);
		s->nwarmup = i + 1;
		if ((ret = parse_call(json_array_get(v, i), field, &s->warmup[i], err, errlen)))
			return ret;
	}
	return 0;
}

static int key_prepare(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		       size_t errlen)
{
	if (!v || json_is_null(v))
		return 0;
	s->prepare = calloc(1, sizeof(*s->prepare));
	if (!s->prepare)
		return spec_fail(err, errlen, "prepare: out of memory");
	return parse_call(v, "prepare", s->prepare, err, errlen);
}

static int key_gpu(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		   size_t errlen)
{
	if (v && !json_is_boolean(v))
		return spec_fail(err, errlen, "gpu: must be true or false");
	s->gpu = json_is_true(v);
	s->gpus = s->gpu ? 1 : 0;
	return 0;
}

static int key_gpus(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		    size_t errlen)
{
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > SPEC_MAX_GPUS)
		return spec_fail(err, errlen, "gpus: must be a whole number from 1 to %d",
				 SPEC_MAX_GPUS);
	if (json_is_false(json_object_get(j, "gpu")))
		return spec_fail(err, errlen, "gpus: a function with \"gpu\": false has none");
	s->gpu = true;
	s->gpus = (unsigned)json_integer_value(v);
	return 0;
}

static int key_elide_zero(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			  size_t errlen)
{
	if (v && !json_is_boolean(v))
		return spec_fail(err, errlen, "elide_zero: must be true or false");
	s->elide_zero = !v || json_is_true(v);
	return 0;
}

static int key_gpu_memory(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			  size_t errlen)
{
	if (v && (!json_is_string(v) || (strcmp(json_string_value(v), "thaw") &&
					 strcmp(json_string_value(v), "driver"))))
		return spec_fail(err, errlen, "gpu_memory: must be \"thaw\" or \"driver\"");
	s->gpu_memory_driver = v && !strcmp(json_string_value(v), "driver");
	return 0;
}

static int key_lazy(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		    size_t errlen)
{
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return spec_fail(err, errlen, "lazy: must be true or false");
	s->lazy = !v || json_is_null(v) ? SPEC_LAZY_UNSET
		  : json_is_true(v)	? SPEC_LAZY
					: SPEC_EAGER;
	return 0;
}

static int key_idle_s(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		      size_t errlen)
{
	return parse_seconds(v, "idle_s", 0, &s->idle_s, err, errlen);
}

static int key_max_lifetime_s(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			      size_t errlen)
{
	return parse_seconds(v, "max_lifetime_s", 0, &s->max_lifetime_s, err, errlen);
}

static int key_stop_grace_s(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			    size_t errlen)
{
	return parse_seconds(v, "stop_grace_s", SPEC_DEFAULT_STOP_GRACE_S, &s->stop_grace_s, err,
			     errlen);
}

static int key_max_instances(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			     size_t errlen)
{
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > 100000))
		return spec_fail(err, errlen,
				 "max_instances: must be an integer from 0 (no limit) to 100000");
	s->max_instances = v ? (unsigned)json_integer_value(v) : 0;
	return 0;
}

static int key_standby(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		       size_t errlen)
{
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > SPEC_MAX_STANDBY))
		return spec_fail(err, errlen, "standby: must be an integer from 0 to %d",
				 SPEC_MAX_STANDBY);
	s->standby = v ? (unsigned)json_integer_value(v) : 0;
	return 0;
}

/* "standby_gpu": what a GPU function's standby holds on the GPU while it
 * waits: "context" (the driver's restore done, its contexts on one GPU, none
 * of the device memory thaw carries: a take is the fill alone) or "none"
 * (its CUDA state checkpointed: no GPU memory, bound to no GPU).  "context"
 * by default where it applies: a GPU function whose memory thaw carries
 * (docs/DESIGN.md, "Standby instances", says why). */
bool spec_standby_gpu_default(const struct func_spec *s)
{
	return s->gpu && !s->gpu_memory_driver;
}

static int key_standby_gpu(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			   size_t errlen)
{
	const char *w = json_string_value(v);

	if (v && (!w || (strcmp(w, "none") && strcmp(w, "context"))))
		return spec_fail(err, errlen, "standby_gpu: must be \"none\" or \"context\"");
	/* "gpu" and "gpu_memory" are parsed before (spec_keys' order). */
	if (w && !strcmp(w, "context") && !s->gpu)
		return spec_fail(err, errlen, "standby_gpu: \"context\" is for a GPU function "
				 "(\"gpu\": true)");
	if (w && !strcmp(w, "context") && s->gpu_memory_driver)
		return spec_fail(err, errlen, "standby_gpu: \"context\" needs the device memory "
				 "carried by thaw (\"gpu_memory\": \"thaw\"): the driver's "
				 "restore would bring all of it back");
	s->standby_gpu_context = w ? !strcmp(w, "context") : spec_standby_gpu_default(s);
	return 0;
}

static int key_concurrency(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			   size_t errlen)
{
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
		  json_integer_value(v) > SPEC_MAX_CONCURRENCY))
		return spec_fail(err, errlen, "concurrency: must be an integer from 1 to %d",
			    SPEC_MAX_CONCURRENCY);
	s->concurrency = v ? (unsigned)json_integer_value(v)
			   : s->gpu ? SPEC_DEFAULT_CONCURRENCY_GPU : SPEC_DEFAULT_CONCURRENCY_CPU;
	return 0;
}

static int key_queue(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		     size_t errlen)
{
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > SPEC_MAX_QUEUE))
		return spec_fail(err, errlen, "queue: must be an integer from 0 to %d",
				 SPEC_MAX_QUEUE);
	s->queue = v ? (unsigned)json_integer_value(v) : SPEC_DEFAULT_QUEUE;
	return 0;
}

static int key_queue_timeout_s(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			       size_t errlen)
{
	return parse_seconds(v, "queue_timeout_s", SPEC_DEFAULT_QUEUE_TIMEOUT_S,
			     &s->queue_timeout_s, err, errlen);
}

static int key_on_restore_failure(const json_t *j, const json_t *v, struct func_spec *s,
				  char *err, size_t errlen)
{
	if (v && (!json_is_string(v) || (strcmp(json_string_value(v), "boot") &&
					 strcmp(json_string_value(v), "fail"))))
		return spec_fail(err, errlen, "on_restore_failure: must be \"boot\" or \"fail\"");
	s->restore_failure_fails = v && !strcmp(json_string_value(v), "fail");
	return 0;
}

static int key_mounts(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		      size_t errlen)
{
	return spec_mounts_parse(v, s, err, errlen);
}

/* "shm_bytes": a whole number of bytes, or a size string as thawd's byte
 * options take ("256M", "1GiB": config_parse_bytes), so that a spec can say
 * what Docker's --shm-size says. */
static int key_shm_bytes(const json_t *j, const json_t *v, struct func_spec *s, char *err,
			 size_t errlen)
{
	json_int_t n;

	s->shm_bytes = SPEC_DEFAULT_SHM_BYTES;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		if (!config_parse_bytes(json_string_value(v), SPEC_MIN_SHM_BYTES,
					SPEC_MAX_SHM_BYTES, &s->shm_bytes))
			return 0;
	} else if (json_is_integer(v)) {
		n = json_integer_value(v);
		if (n >= (json_int_t)SPEC_MIN_SHM_BYTES && n <= (json_int_t)SPEC_MAX_SHM_BYTES) {
			s->shm_bytes = (uint64_t)n;
			return 0;
		}
	}
	s->shm_bytes = SPEC_DEFAULT_SHM_BYTES;
	return spec_fail(err, errlen,
			 "shm_bytes: must be a size from 1M to 1T: a whole number of bytes, or "
			 "a string with a K, M, G or T suffix (binary) such as \"256M\"");
}

static int key_sandbox(const json_t *j, const json_t *v, struct func_spec *s, char *err,
		       size_t errlen)
{
	int ret = parse_sandbox(v, &s->sandbox, err, errlen);

	s->userns_given = !ret && json_is_object(v) && json_object_get(v, "userns");

	/* One unpacked image is every function's on it: none may write to it. */
	if (!ret && s->image && s->sandbox.writable_root)
		return spec_fail(err, errlen,
				 "sandbox.writable_root: not with an image (its rootfs is "
				 "shared by every function on it; write under /tmp)");
	return ret;
}

/* Every key a spec may give, in the order they are parsed (a key's parser
 * may read what an earlier one set: "image" the bundle, "port" the image,
 * "concurrency" the GPU).  "id" is parse_fields' own. */
static const struct {
	const char *name;
	spec_key_fn parse;
} spec_keys[] = {
	{ "id", NULL },
	{ "bundle", key_bundle },
	{ "image", key_image },
	{ "user", key_user },
	{ "command", key_command },
	{ "env", key_env },
	{ "cwd", key_cwd },
	{ "port", key_port },
	{ "ready", key_ready },
	{ "warmup", key_warmup },
	{ "prepare", key_prepare },
	{ "gpu", key_gpu },
	{ "gpus", key_gpus },
	{ "elide_zero", key_elide_zero },
	{ "gpu_memory", key_gpu_memory },
	{ "lazy", key_lazy },
	{ "idle_s", key_idle_s },
	{ "max_lifetime_s", key_max_lifetime_s },
	{ "stop_grace_s", key_stop_grace_s },
	{ "max_instances", key_max_instances },
	{ "standby", key_standby },
	{ "standby_gpu", key_standby_gpu },
	{ "concurrency", key_concurrency },
	{ "queue", key_queue },
	{ "queue_timeout_s", key_queue_timeout_s },
	{ "on_restore_failure", key_on_restore_failure },
	{ "mounts", key_mounts },
	{ "shm_bytes", key_shm_bytes },
	{ "sandbox", key_sandbox },
};

static bool spec_key_known(const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(spec_keys); i++)
		if (!strcmp(key, spec_keys[i].name))
			return true;
	return false;
}

/* The function's id: the caller's (id), else the spec's "id". */
static int parse_id(const json_t *j, const char *id, struct func_spec *s, char *err,
		    size_t errlen)
{
	const json_t *v = json_object_get(j, "id");

	if (v && !json_is_string(v))
		return spec_fail(err, errlen, "id: must be a string");
	if (!id)
		id = v ? json_string_value(v) : NULL;
	if (!id)
		return spec_fail(err, errlen, "id: missing");
	if (!id_valid(id))
		return spec_fail(err, errlen, "id: \"%.64s\" is not [a-z0-9][a-z0-9._-]{0,62}", id);
	snprintf(s->id, sizeof(s->id), "%s", id);
	return 0;
}

static int parse_fields(const json_t *j, const char *id, struct func_spec *s, char *err,
			size_t errlen)
{
	const char *key;
	json_t *v;
	int ret;

	if (!json_is_object(j))
		return spec_fail(err, errlen, "the function must be a JSON object");
	json_object_foreach((json_t *)j, key, v) {
		if (!spec_key_known(key))
			return spec_fail(err, errlen, "unknown key \"%s\"", key);
	}
	ret = parse_id(j, id, s, err, errlen);
	for (size_t i = 0; !ret && i < ARRAY_SIZE(spec_keys); i++)
		if (spec_keys[i].parse)
			ret = spec_keys[i].parse(j, json_object_get(j, spec_keys[i].name), s, err,
						 errlen);
	return ret;
}

int spec_parse(const json_t *j, const char *id, struct func_spec **out, char *err, size_t errlen)
{
	struct func_spec *s = calloc(1, sizeof(*s));
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (!s)
		return spec_fail(err, errlen, "out of memory");
	ret = parse_fields(j, id, s, err, errlen);
	if (ret) {
		spec_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

static json_t *call_to_json(const struct http_call *c)
{
	json_t *o = json_pack("{s:s, s:s}", "method", c->method, "path", c->path);

	if (o && c->body)
		json_object_set_new(o, "body", json_string(c->body));
	return o;
}

static bool sandbox_loosened(const struct oci_sandbox *sb)
{
	return sb->writable_root || sb->no_seccomp || sb->new_privileges ||
	       sb->host_home || (sb->capabilities && sb->capabilities[0]) || sb->userns;
}

/* Every key, so that a stored spec says what its function may do. */
static json_t *sandbox_to_json(const struct oci_sandbox *sb, bool userns_given)
{
	json_t *caps = json_array();

	for (size_t i = 0; caps && sb->capabilities && sb->capabilities[i]; i++)
		json_array_append_new(caps, json_string(sb->capabilities[i]));
	json_t *o = json_pack("{s:b, s:b, s:b, s:b, s:o}", "writable_root", sb->writable_root,
			      "seccomp", !sb->no_seccomp, "no_new_privileges", !sb->new_privileges,
			      "host_home", sb->host_home, "capabilities", caps);

	/* Only when the spec gave it: a thaw before user namespaces refuses
	 * the key, and without it thawd's default decides. */
	if (o && userns_given)
		json_object_set_new(o, "userns", json_boolean(sb->userns));
	return o;
}

json_t *spec_to_json(const struct func_spec *s)
{
	json_t *j = json_object(), *cmd = json_array(), *env = json_object(), *ready, *warm;

	if (!j || !cmd || !env)
		goto fail;
	for (size_t i = 0; s->command && s->command[i]; i++)
		json_array_append_new(cmd, json_string(s->command[i]));
	for (size_t i = 0; s->env && s->env[i]; i++) {
		const char *eq = strchr(s->env[i], '=');
		char *k = eq ? strndup(s->env[i], eq - s->env[i]) : NULL;

		if (k)
			json_object_set_new(env, k, json_string(eq + 1));
		free(k);
	}
	json_object_set_new(j, "id", json_string(s->id));
	if (s->command) {
		json_object_set_new(j, "command", cmd);
		cmd = NULL;
	}
	json_object_set_new(j, "env", env);
	env = NULL;
	if (s->cwd)
		json_object_set_new(j, "cwd", json_string(s->cwd));
	if (s->bundle)
		json_object_set_new(j, "bundle", json_string(s->bundle));
	if (s->image)
		json_object_set_new(j, "image", json_string(s->image));
	if (s->user)
		json_object_set_new(j, "user", json_string(s->user));
	if (s->port)
		json_object_set_new(j, "port", json_integer(s->port));
	if (s->ready == READY_HTTP)
		ready = json_pack("{s:s, s:f}", "http", s->ready_path ? s->ready_path : "/",
				  "timeout_s", s->ready_timeout_s);
	else
		ready = json_pack("{s:b, s:f}", "tcp", 1, "timeout_s", s->ready_timeout_s);
	json_object_set_new(j, "ready", ready);
	warm = json_array();
	for (size_t i = 0; warm && i < s->nwarmup; i++)
		json_array_append_new(warm, call_to_json(&s->warmup[i]));
	json_object_set_new(j, "warmup", warm);
	if (s->prepare)
		json_object_set_new(j, "prepare", call_to_json(s->prepare));
	json_object_set_new(j, "gpu", json_boolean(s->gpu));
	/* Only beyond the default: a spec's JSON (and what is compared to it)
	 * stays what it was for one GPU. */
	if (s->gpus > 1)
		json_object_set_new(j, "gpus", json_integer(s->gpus));
	json_object_set_new(j, "elide_zero", json_boolean(s->elide_zero));
	if (s->gpu_memory_driver)
		json_object_set_new(j, "gpu_memory", json_string("driver"));
	if (s->lazy != SPEC_LAZY_UNSET)
		json_object_set_new(j, "lazy", json_boolean(s->lazy == SPEC_LAZY));
	if (s->standby)
		json_object_set_new(j, "standby", json_integer(s->standby));
	/* Only where it differs from the default. */
	if (s->standby_gpu_context != spec_standby_gpu_default(s))
		json_object_set_new(j, "standby_gpu",
				    json_string(s->standby_gpu_context ? "context" : "none"));
	if (s->idle_s > 0)
		json_object_set_new(j, "idle_s", json_real(s->idle_s));
	if (s->max_lifetime_s > 0)
		json_object_set_new(j, "max_lifetime_s", json_real(s->max_lifetime_s));
	if (s->stop_grace_s != SPEC_DEFAULT_STOP_GRACE_S)
		json_object_set_new(j, "stop_grace_s", json_real(s->stop_grace_s));
	if (s->max_instances)
		json_object_set_new(j, "max_instances", json_integer(s->max_instances));
	/* Only where they differ from the defaults, as stop_grace_s. */
	if (s->concurrency !=
	    (s->gpu ? SPEC_DEFAULT_CONCURRENCY_GPU : SPEC_DEFAULT_CONCURRENCY_CPU))
		json_object_set_new(j, "concurrency", json_integer(s->concurrency));
	if (s->queue != SPEC_DEFAULT_QUEUE)
		json_object_set_new(j, "queue", json_integer(s->queue));
	if (s->queue_timeout_s != SPEC_DEFAULT_QUEUE_TIMEOUT_S)
		json_object_set_new(j, "queue_timeout_s", json_real(s->queue_timeout_s));
	if (sandbox_loosened(&s->sandbox) || s->userns_given)
		json_object_set_new(j, "sandbox", sandbox_to_json(&s->sandbox, s->userns_given));
	if (s->nmounts)
		json_object_set_new(j, "mounts", spec_mounts_to_json(s));
	if (s->restore_failure_fails)
		json_object_set_new(j, "on_restore_failure", json_string("fail"));
	/* Only beyond the default, as a number: a spec that leaves it out
	 * is written as it was, and one an older thaw reads (it refuses
	 * the key). */
	if (s->shm_bytes != SPEC_DEFAULT_SHM_BYTES)
		json_object_set_new(j, "shm_bytes", json_integer((json_int_t)s->shm_bytes));
	json_decref(cmd);
	return j;
fail:
	json_decref(j);
	json_decref(cmd);
	json_decref(env);
	return NULL;
}
