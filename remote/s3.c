/* SPDX-License-Identifier: Apache-2.0 */
/* s3.c — the S3 client (s3.h): its settings and credentials, opening and
 * closing, and the encodings its requests and answers use (URI encoding,
 * times, XML text).  Requests are curl transfers (s3_xfer.c): the object
 * calls are in s3_object.c, listings in s3_list.c. */
#define LOG_PREFIX "s3: "
#include "remote/s3_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- settings and credentials ---- */

int s3_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(out, fmt, ap);
	va_end(ap);
	if (n < 0)
		*out = NULL;
	return n;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* A bucket name as S3 allows it: 3-63 of [a-z0-9.-], starting and ending
 * with a letter or digit. */
static bool bucket_valid(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!islower((unsigned char)b[i]) && !isdigit((unsigned char)b[i]) && b[i] != '.' &&
		    b[i] != '-')
			return false;
	return true;
}

char *s3_trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

struct creds {
	char *id, *secret, *token;
	char source[PATH_MAX + 64];
};

static void creds_release(struct creds *k)
{
	if (k->secret)
		explicit_bzero(k->secret, strlen(k->secret));
	if (k->token)
		explicit_bzero(k->token, strlen(k->token));
	free(k->id);
	free(k->secret);
	free(k->token);
}

/* The keys of [profile] in the shared credentials file at path (an INI
 * file); 0 if it has both keys, -ENOKEY otherwise. */
static int creds_from_file(const char *path, const char *profile, struct creds *k)
{
	char *buf = NULL, *line, *save = NULL;
	size_t len;
	bool in = false;
	int ret;

	ret = read_file(path, &buf, &len, 1u << 20);
	if (ret < 0)
		return -ENOKEY;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *l = s3_trim(line), *eq;
		if (*l == '#' || *l == ';' || !*l)
			continue;
		if (*l == '[') {
			char *end = strchr(l, ']');
			if (end)
				*end = '\0';
			in = !strcmp(s3_trim(l + 1), profile);
			continue;
		}
		eq = strchr(l, '=');
		if (!in || !eq)
			continue;
		*eq = '\0';
		char *name = s3_trim(l), *val = s3_trim(eq + 1);
		char **dst = !strcmp(name, "aws_access_key_id")       ? &k->id
			     : !strcmp(name, "aws_secret_access_key") ? &k->secret
			     : !strcmp(name, "aws_session_token")     ? &k->token
								      : NULL;
		if (dst) {
			free(*dst);
			*dst = strdup(val);
		}
	}
	explicit_bzero(buf, len);
	free(buf);
	if (!k->id || !k->secret)
		return -ENOKEY;
	snprintf(k->source, sizeof(k->source), "profile %s of %s", profile, path);
	return 0;
}

static int creds_find(struct creds *k)
{
	const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
	const char *profile = env("AWS_PROFILE"), *file = env("AWS_SHARED_CREDENTIALS_FILE");
	char path[PATH_MAX];

	memset(k, 0, sizeof(*k));
	if (id && secret) {
		k->id = strdup(id);
		k->secret = strdup(secret);
		if (env("AWS_SESSION_TOKEN"))
			k->token = strdup(env("AWS_SESSION_TOKEN"));
		snprintf(k->source, sizeof(k->source), "the environment");
		return k->id && k->secret ? 0 : -ENOMEM;
	}
	if (!profile)
		profile = "default";
	if (file)
		snprintf(path, sizeof(path), "%s", file);
	else
		snprintf(path, sizeof(path), "%s/.aws/credentials", env("HOME") ? env("HOME") : "/");
	if (creds_from_file(path, profile, k) == 0)
		return 0;
	creds_release(k);
	memset(k, 0, sizeof(*k));
	pr_err("no S3 credentials: neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
	       "environment nor profile '%s' with aws_access_key_id and aws_secret_access_key in "
	       "%s",
	       profile, path);
	return -ENOKEY;
}

static int endpoint_make(const char *given, const char *bucket, const char *region,
			 char **endpoint, char **base)
{
	size_t n;

	if (given) {
		if (strncmp(given, "http://", 7) && strncmp(given, "https://", 8)) {
			pr_err("bad S3 endpoint '%s': not an http:// or https:// URL", given);
			return -EINVAL;
		}
		if (strchr(given, '?') || strchr(given, '#') || strchr(given, '@')) {
			pr_err("bad S3 endpoint '%s': a query, fragment or user in it", given);
			return -EINVAL;
		}
		*endpoint = strdup(given);
		if (!*endpoint)
			return -ENOMEM;
		n = strlen(*endpoint);
		while (n > 8 && (*endpoint)[n - 1] == '/')
			(*endpoint)[--n] = '\0';
		/* Path-style: every S3-compatible server takes it. */
		if (s3_asprintf(base, "%s/%s/", *endpoint, bucket) < 0)
			return -ENOMEM;
		return 0;
	}
	if (s3_asprintf(endpoint, "https://s3.%s.amazonaws.com", region) < 0)
		return -ENOMEM;
	/* AWS itself: virtual-hosted, unless a dot in the bucket's name would
	 * not match the certificate's wildcard. */
	if (strchr(bucket, '.')) {
		if (s3_asprintf(base, "%s/%s/", *endpoint, bucket) < 0)
			return -ENOMEM;
	} else if (s3_asprintf(base, "https://%s.s3.%s.amazonaws.com/", bucket, region) < 0) {
		return -ENOMEM;
	}
	return 0;
}

int s3_open(const char *bucket, const char *endpoint, struct s3 **out)
{
	struct s3 *c = NULL;
	struct creds k;
	const char *region = env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION");
	int ret;

	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (!bucket || !bucket_valid(bucket)) {
		pr_err("bad S3 bucket name '%s' (3-63 of a-z, 0-9, '.', '-')", bucket ? bucket : "");
		return -EINVAL;
	}
	if (!endpoint)
		endpoint = env("AWS_ENDPOINT_URL");
	if (!region)
		region = "us-east-1";
	for (const char *p = region; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-') {
			pr_err("bad AWS region '%s'", region);
			return -EINVAL;
		}
	ret = creds_find(&k);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c) {
		ret = -ENOMEM;
		goto out;
	}
	c->bucket = strdup(bucket);
	c->region = strdup(region);
	if (!c->bucket || !c->region || s3_asprintf(&c->sigv4, "aws:amz:%s:s3", region) < 0 ||
	    s3_asprintf(&c->userpwd, "%s:%s", k.id, k.secret) < 0 ||
	    (k.token && s3_asprintf(&c->token_hdr, "x-amz-security-token: %s", k.token) < 0)) {
		ret = -ENOMEM;
		goto out;
	}
	ret = endpoint_make(endpoint, bucket, region, &c->endpoint, &c->base);
	if (ret)
		goto out;
	c->list_page = 1000;
	snprintf(c->describe, sizeof(c->describe), "bucket %s at %s (region %s, keys from %s)",
		 bucket, c->endpoint, region, k.source);
	*out = c;
	c = NULL;
out:
	if (ret == -ENOMEM)
		pr_err("out of memory");
	creds_release(&k);
	s3_close(c);
	return ret;
}

void s3_close(struct s3 *c)
{
	if (!c)
		return;
	if (c->userpwd)
		explicit_bzero(c->userpwd, strlen(c->userpwd));
	if (c->token_hdr)
		explicit_bzero(c->token_hdr, strlen(c->token_hdr));
	free(c->bucket);
	free(c->region);
	free(c->endpoint);
	free(c->base);
	free(c->sigv4);
	free(c->userpwd);
	free(c->token_hdr);
	free(c);
}

const char *s3_describe(const struct s3 *c)
{
	return c->describe;
}

int64_t s3_server_time_ms(struct s3 *c)
{
	return atomic_load(&c->server_ms);
}

/* ---- encoding ---- */

int s3_uri_encode(const char *s, bool keep_slash, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		bool plain = isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
			     (keep_slash && ch == '/');
		if (o + (plain ? 1 : 3) >= cap)
			return -ENAMETOOLONG;
		if (plain) {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = '\0';
	return 0;
}

int s3_parse_time(const char *s, int64_t *ms)
{
	struct tm tm = { 0 };
	int frac = 0, n = 0;

	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
		return -EINVAL;
	s += n;
	if (*s == '.') {
		int digits = 0;
		for (s++; isdigit((unsigned char)*s); s++, digits++)
			if (digits < 3)
				frac = frac * 10 + (*s - '0');
		for (; digits < 3; digits++)
			frac *= 10;
	}
	if (*s != 'Z')
		return -EINVAL;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*ms = (int64_t)timegm(&tm) * 1000 + frac;
	return 0;
}

/* The text of the first <tag>…</tag> at or after xml, entities undone, into
 * out; returns where the element ends, or NULL if there is none (or it does
 * not fit). */
const char *s3_xml_tag(const char *xml, const char *tag, char *out, size_t cap)
{
	char open[64], close[64];
	const char *a, *b;
	size_t o = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(xml, open);
	if (!a)
		return NULL;
	a += strlen(open);
	b = strstr(a, close);
	if (!b)
		return NULL;
	static const struct {
		const char *ent;
		char ch;
	} ents[] = { { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' },
		     { "&apos;", '\'' } };
	while (a < b) {
		char ch = *a++;
		if (ch == '&')
			for (size_t i = 0; i < ARRAY_SIZE(ents); i++)
				if (!strncmp(a - 1, ents[i].ent, strlen(ents[i].ent))) {
					ch = ents[i].ch;
					a += strlen(ents[i].ent) - 1;
					break;
				}
		if (o + 1 >= cap)
			return NULL;
		out[o++] = ch;
	}
	out[o] = '\0';
	return b + strlen(close);
}
