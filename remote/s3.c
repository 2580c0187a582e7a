/* SPDX-License-Identifier: Apache-2.0 */
/* s3.c — the S3 client (s3.h): requests as curl transfers driven by one
 * curl multi handle per call, retried with backoff, signed by curl. */
#define LOG_PREFIX "s3: "
#include "remote/s3.h"
#include "store/chunk.h"
#include "common/log.h"
#include "common/util.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define LIST_PAGE_MAX	 (16u << 20) /* a listing page larger than this is refused */
#define SMALL_ANSWER_MAX (1u << 20)  /* the XML of a create/complete answer */

struct s3 {
	char *bucket;
	char *region;
	char *endpoint; /* as given or made, no trailing '/' */
	char *base;	/* what an object's encoded key is appended to, ending in '/' */
	char *sigv4;	/* "aws:amz:<region>:s3" */
	char *userpwd;	/* "<key id>:<secret>": secret, never logged */
	char *token_hdr; /* "x-amz-security-token: ..." or NULL: secret, never logged */
	char describe[PATH_MAX + 1024];
	atomic_int_fast64_t server_ms; /* Date of the last answer */
	int list_page; /* max-keys of a listing page */
};

/* ---- settings and credentials ---- */

/* xasprintf() that leaves *out NULL when it fails (asprintf leaves it undefined). */
static int xasprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int xasprintf(char **out, const char *fmt, ...)
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

static char *trim(char *s)
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
		char *l = trim(line), *eq;
		if (*l == '#' || *l == ';' || !*l)
			continue;
		if (*l == '[') {
			char *end = strchr(l, ']');
			if (end)
				*end = '\0';
			in = !strcmp(trim(l + 1), profile);
			continue;
		}
		eq = strchr(l, '=');
		if (!in || !eq)
			continue;
		*eq = '\0';
		char *name = trim(l), *val = trim(eq + 1);
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
		if (xasprintf(base, "%s/%s/", *endpoint, bucket) < 0)
			return -ENOMEM;
		return 0;
	}
	if (xasprintf(endpoint, "https://s3.%s.amazonaws.com", region) < 0)
		return -ENOMEM;
	/* AWS itself: virtual-hosted, unless a dot in the bucket's name would
	 * not match the certificate's wildcard. */
	if (strchr(bucket, '.')) {
		if (xasprintf(base, "%s/%s/", *endpoint, bucket) < 0)
			return -ENOMEM;
	} else if (xasprintf(base, "https://%s.s3.%s.amazonaws.com/", bucket, region) < 0) {
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
	if (!c->bucket || !c->region || xasprintf(&c->sigv4, "aws:amz:%s:s3", region) < 0 ||
	    xasprintf(&c->userpwd, "%s:%s", k.id, k.secret) < 0 ||
	    (k.token && xasprintf(&c->token_hdr, "x-amz-security-token: %s", k.token) < 0)) {
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
static const char *xml_tag(const char *xml, const char *tag, char *out, size_t cap)
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

/* ---- transfers ---- */

/* One request, retried as a whole. */
struct xfer {
	struct s3 *c;
	CURL *h;
	const char *method; /* GET PUT HEAD DELETE POST */
	char *url;
	char what[S3_KEY_MAX + 64]; /* "GET key", for messages */
	struct curl_slist *hdrs;
	/* the body sent */
	struct s3_source src;
	uint64_t sent;
	char payload_hash[65];
	/* the answer: into dst (dst_cap bytes), growing up to grow_max if grow */
	uint8_t *dst;
	size_t dst_cap, got, grow_max;
	bool grow, too_big;
	/* the range asked for (len 0: none) */
	uint64_t range_off, range_len;
	long status;
	char errbuf[CURL_ERROR_SIZE];
	char etag[80];
	int attempt;
	uint64_t not_before_ns;
	bool active;
	void *user;
};

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = size * nmemb;

	if (x->got + n > x->dst_cap) {
		if (!x->grow || x->got + n > x->grow_max) {
			/* An error answer is kept in part; a body that overflows
			 * what was asked for is an error of its own. */
			x->too_big = true;
			n = x->dst_cap > x->got ? x->dst_cap - x->got : 0;
			memcpy(x->dst + x->got, p, n);
			x->got += n;
			return 0;
		}
		size_t cap = MAX(x->dst_cap * 2, x->got + n + 1);
		uint8_t *d = realloc(x->dst, MIN(cap, x->grow_max + 1));
		if (!d)
			return 0;
		x->dst = d;
		x->dst_cap = MIN(cap, x->grow_max + 1);
	}
	memcpy(x->dst + x->got, p, n);
	x->got += n;
	return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = MIN(size * nmemb, x->src.len - x->sent);

	if (!n)
		return 0;
	if (x->src.buf) {
		memcpy(p, (const uint8_t *)x->src.buf + x->sent, n);
	} else {
		ssize_t r;
		do
			r = pread(x->src.fd, p, n, (off_t)(x->src.off + x->sent));
		while (r < 0 && errno == EINTR);
		if (r <= 0)
			return CURL_READFUNC_ABORT;
		n = (size_t)r;
	}
	x->sent += n;
	return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = size * nmemb;
	char line[256];

	if (n >= sizeof(line))
		return n;
	memcpy(line, p, n);
	line[n] = '\0';
	if (!strncasecmp(line, "ETag:", 5)) {
		char *v = trim(line + 5);
		size_t l = strlen(v);
		if (l >= 2 && v[0] == '"' && v[l - 1] == '"') {
			v[l - 1] = '\0';
			v++;
		}
		snprintf(x->etag, sizeof(x->etag), "%s", v);
	} else if (!strncasecmp(line, "Date:", 5)) {
		time_t t = curl_getdate(trim(line + 5), NULL);
		if (t > 0)
			atomic_store(&x->c->server_ms, (int_fast64_t)t * 1000);
	}
	return n;
}

static void xfer_free(struct xfer *x)
{
	if (!x)
		return;
	if (x->h)
		curl_easy_cleanup(x->h);
	curl_slist_free_all(x->hdrs);
	free(x->url);
	if (x->grow)
		free(x->dst);
	free(x);
}

/* A transfer of method on key (NULL: the bucket) with query (sorted and
 * encoded already, may be NULL). */
static struct xfer *xfer_new(struct s3 *c, const char *method, const char *key, const char *query)
{
	struct xfer *x = calloc(1, sizeof(*x));
	char enc[3 * S3_KEY_MAX + 1];

	if (!x)
		goto oom;
	x->c = c;
	x->method = method;
	x->src.fd = -1;
	if (key && s3_uri_encode(key, true, enc, sizeof(enc))) {
		pr_err("S3 key too long: %.64s...", key);
		free(x);
		return NULL;
	}
	if (xasprintf(&x->url, "%s%s%s%s", c->base, key ? enc : "", query ? "?" : "",
		     query ? query : "") < 0) {
		x->url = NULL;
		goto oom;
	}
	snprintf(x->what, sizeof(x->what), "%s s3://%s/%s%s%s", method, c->bucket, key ? key : "",
		 query && !key ? "?" : "", query && !key ? query : "");
	snprintf(x->payload_hash, sizeof(x->payload_hash), "%s", UNSIGNED_PAYLOAD);
	return x;
oom:
	pr_err("out of memory");
	xfer_free(x);
	return NULL;
}

/* The answer goes into buf (cap bytes; a longer one is an error). */
static void xfer_into(struct xfer *x, void *buf, size_t cap)
{
	x->dst = buf;
	x->dst_cap = cap;
	x->grow = false;
}

/* The answer goes into a buffer of its own, up to max bytes. */
static int xfer_grow(struct xfer *x, size_t max)
{
	x->dst_cap = MIN((size_t)64 << 10, max + 1);
	x->dst = malloc(x->dst_cap);
	x->grow = true;
	x->grow_max = max;
	return x->dst ? 0 : -ENOMEM;
}

/* The body: src, with its SHA-256 signed where it is in memory. */
static void xfer_body(struct xfer *x, const struct s3_source *src)
{
	x->src = *src;
	if (src->buf) {
		uint8_t h[CHUNK_HASH_LEN];
		chunk_hash(src->buf, src->len, h);
		hex_encode(h, sizeof(h), x->payload_hash);
	}
}

/* (Re)build the curl handle for the next try. */
static int xfer_setup(struct xfer *x)
{
	struct s3 *c = x->c;
	char hdr[128];

	if (x->h)
		curl_easy_reset(x->h);
	else if (!(x->h = curl_easy_init()))
		return -ENOMEM;
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	x->got = 0;
	x->sent = 0;
	x->too_big = false;
	x->status = 0;
	x->errbuf[0] = '\0';
	x->etag[0] = '\0';
	snprintf(hdr, sizeof(hdr), "x-amz-content-sha256: %s", x->payload_hash);
	struct curl_slist *l = curl_slist_append(NULL, hdr);
	if (l && x->range_len) {
		snprintf(hdr, sizeof(hdr), "Range: bytes=%llu-%llu",
			 (unsigned long long)x->range_off,
			 (unsigned long long)(x->range_off + x->range_len - 1));
		l = curl_slist_append(l, hdr) ? l : NULL;
	}
	if (l && c->token_hdr)
		l = curl_slist_append(l, c->token_hdr) ? l : NULL;
	/* Not "Expect:" (to save the 100-continue round trip): curl 7.88 signs
	 * the empty header it then does not send, and the signature fails. */
	if (!l)
		return -ENOMEM;
	x->hdrs = l;

	CURL *h = x->h;
	curl_easy_setopt(h, CURLOPT_URL, x->url);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, c->sigv4);
	curl_easy_setopt(h, CURLOPT_USERPWD, c->userpwd);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)S3_CONNECT_S);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)S3_STALL_S);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (!strcmp(x->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
	} else if (!strcmp(x->method, "PUT") || !strcmp(x->method, "POST")) {
		if (!strcmp(x->method, "PUT"))
			curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		else
			curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, x);
		/* A known length: RGW refuses chunked uploads (411). */
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->src.len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->src.len);
	} else if (strcmp(x->method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
	}
	return 0;
}

static bool curl_retryable(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

static int curl_errno(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_ABORTED_BY_CALLBACK:
	case CURLE_READ_ERROR:
		return -EIO;
	default:
		return -EIO;
	}
}

static int http_errno(long status)
{
	if (status == 404)
		return -ENOENT;
	if (status == 401 || status == 403)
		return -EACCES;
	if (status == 412)
		return -EEXIST;
	if (status >= 400 && status < 500)
		return -EINVAL;
	return -EIO;
}

/* The reason an answer failed, with the S3 error's code and message (an
 * answer to HEAD has no body: its status says it all). */
static void xfer_describe_error(struct xfer *x, CURLcode cc, char *msg, size_t cap)
{
	char code[128] = "", text[256] = "";

	if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && x->too_big)) {
		snprintf(msg, cap, "%s: %s (%s)", x->what,
			 x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc), x->c->endpoint);
		return;
	}
	if (x->dst && x->got) {
		char *body = malloc(x->got + 1);
		if (body) {
			memcpy(body, x->dst, x->got);
			body[x->got] = '\0';
			xml_tag(body, "Code", code, sizeof(code));
			xml_tag(body, "Message", text, sizeof(text));
			free(body);
		}
	}
	if (x->status >= 200 && x->status < 300) {
		snprintf(msg, cap, "%s: HTTP %ld, an answer longer than asked for", x->what,
			 x->status);
		return;
	}
	snprintf(msg, cap, "%s: HTTP %ld%s%s%s%s%s", x->what, x->status, code[0] ? " " : "", code,
		 text[0] ? " (" : "", text, text[0] ? ")" : "");
	if (x->status == 403 && !strcmp(code, "RequestTimeTooSkewed"))
		snprintf(msg + strlen(msg), cap - strlen(msg), "; is this host's clock right?");
}

/* Whether an answer is one to try again: the network, a stall, 5xx, 429. */
static bool xfer_retryable(const struct xfer *x, CURLcode cc)
{
	if (cc != CURLE_OK)
		return curl_retryable(cc);
	return x->status >= 500 || x->status == 429;
}

static uint64_t backoff_ns(int attempt)
{
	uint64_t ms = (uint64_t)S3_BACKOFF_MS << MIN(attempt - 1, 10);
	uint32_t r = 0;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = 0;
	return (ms / 2 + r % (ms / 2 + 1)) * 1000000ull; /* jitter: 50-100% */
}

/* done() of a transfer: err 0 or -errno; returns 0, S3_AGAIN or -errno. */
typedef int (*xfer_done_fn)(struct xfer *x, int err, void *arg);

/* Run transfers v[0..n), parallel at a time, each tried up to S3_ATTEMPTS
 * times.  The first failure that done() does not take stops the rest. */
static int xfers_run(struct xfer **v, size_t n, int parallel, xfer_done_fn done, void *arg)
{
	CURLM *m = curl_multi_init();
	size_t next = 0, running = 0, left = n;
	int ret = 0;

	if (!m)
		return -ENOMEM;
	if (parallel <= 0)
		parallel = S3_PARALLEL;
	curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)parallel);
	for (size_t i = 0; i < n; i++) {
		v[i]->attempt = 0;
		v[i]->not_before_ns = 0;
		v[i]->active = false;
	}
	while (left && !ret) {
		uint64_t now = now_ns(), wake = 0;
		/* Start what may start: new ones in order, retries when due. */
		for (size_t i = 0; i < next && running < (size_t)parallel; i++) {
			struct xfer *x = v[i];
			if (x->active || x->attempt == 0 || x->attempt < 0)
				continue;
			if (x->not_before_ns > now) {
				wake = !wake || x->not_before_ns < wake ? x->not_before_ns : wake;
				continue;
			}
			if ((ret = xfer_setup(x)) || curl_multi_add_handle(m, x->h) != CURLM_OK) {
				ret = ret ? ret : -ENOMEM;
				break;
			}
			x->attempt++;
			x->active = true;
			running++;
		}
		while (!ret && next < n && running < (size_t)parallel) {
			struct xfer *x = v[next++];
			if ((ret = xfer_setup(x)) || curl_multi_add_handle(m, x->h) != CURLM_OK) {
				ret = ret ? ret : -ENOMEM;
				break;
			}
			x->attempt = 1;
			x->active = true;
			running++;
		}
		if (ret)
			break;
		int still = 0, numfds = 0;
		curl_multi_perform(m, &still);
		CURLMsg *msg;
		int q;
		while ((msg = curl_multi_info_read(m, &q))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			struct xfer *x = NULL;
			CURLcode cc = msg->data.result;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
			curl_multi_remove_handle(m, x->h);
			x->active = false;
			running--;
			int err = 0;
			char why[S3_KEY_MAX + 512];
			bool ok = cc == CURLE_OK && x->status >= 200 && x->status < 300 && !x->too_big;
			if (!ok) {
				xfer_describe_error(x, cc, why, sizeof(why));
				if (xfer_retryable(x, cc) && x->attempt < S3_ATTEMPTS) {
					pr_warn("%s; trying again (%d of %d)", why, x->attempt + 1,
						S3_ATTEMPTS);
					x->not_before_ns = now_ns() + backoff_ns(x->attempt);
					continue;
				}
				err = cc != CURLE_OK && !x->too_big ? curl_errno(cc)
				      : x->too_big && x->status < 300 ? -EBADMSG
									: http_errno(x->status);
				if (err == -ENOENT)
					log_set_error("%s", why);
				else
					pr_err("%s%s", why,
					       x->attempt > 1 ? " (the last of its tries)" : "");
			}
			int r = done ? done(x, err, arg) : err;
			if (r == S3_AGAIN && x->attempt < S3_ATTEMPTS) {
				x->not_before_ns = now_ns() + backoff_ns(x->attempt);
				continue;
			}
			if (r == S3_AGAIN) {
				pr_err("%s: still wrong after %d tries", x->what, x->attempt);
				r = -EIO;
			}
			x->attempt = -1; /* finished */
			left--;
			if (r < 0 && !ret)
				ret = r;
		}
		if (ret || !left)
			break;
		long ms = 100;
		if (!running && wake) {
			uint64_t t = now_ns();
			ms = wake > t ? (long)((wake - t) / 1000000) + 1 : 0;
		} else if (wake) {
			uint64_t t = now_ns();
			ms = MIN(ms, wake > t ? (long)((wake - t) / 1000000) + 1 : 0);
		}
		curl_multi_poll(m, NULL, 0, (int)ms, &numfds);
	}
	for (size_t i = 0; i < next; i++)
		if (v[i]->active) {
			curl_multi_remove_handle(m, v[i]->h);
			v[i]->active = false;
		}
	curl_multi_cleanup(m);
	return ret;
}

static int run_one(struct xfer *x)
{
	return xfers_run(&x, 1, 1, NULL, NULL);
}

/* ---- the calls ---- */

int s3_put(struct s3 *c, const char *key, const struct s3_source *src)
{
	struct xfer *x = xfer_new(c, "PUT", key, NULL);
	uint8_t answer[4096];
	int ret;

	if (!x)
		return -ENOMEM;
	xfer_body(x, src);
	xfer_into(x, answer, sizeof(answer));
	ret = run_one(x);
	xfer_free(x);
	return ret;
}

struct parts {
	s3_progress_fn progress;
	void *arg;
};

static int part_done(struct xfer *x, int err, void *arg)
{
	struct parts *p = arg;

	if (err)
		return err;
	if (!x->etag[0]) {
		pr_err("%s: no ETag in the answer", x->what);
		return -EBADMSG;
	}
	if (p->progress)
		p->progress(p->arg, x->src.len);
	return 0;
}

static int multipart_create(struct s3 *c, const char *key, char *upload_id, size_t cap)
{
	struct xfer *x = xfer_new(c, "POST", key, "uploads=");
	struct s3_source none = { .fd = -1 };
	int ret;

	if (!x)
		return -ENOMEM;
	xfer_body(x, &none);
	ret = xfer_grow(x, SMALL_ANSWER_MAX);
	if (!ret)
		ret = run_one(x);
	if (!ret) {
		x->dst[x->got] = '\0';
		if (!xml_tag((char *)x->dst, "UploadId", upload_id, cap)) {
			pr_err("%s: no UploadId in the answer", x->what);
			ret = -EBADMSG;
		}
	}
	xfer_free(x);
	return ret;
}

static void multipart_abort(struct s3 *c, const char *key, const char *query)
{
	struct xfer *x = xfer_new(c, "DELETE", key, query);
	uint8_t answer[4096];

	if (!x)
		return;
	xfer_into(x, answer, sizeof(answer));
	if (run_one(x))
		pr_warn("the parts of an upload of %s may stay on the server until its lifecycle "
			"rules remove them",
			key);
	xfer_free(x);
}

static int multipart_complete(struct s3 *c, const char *key, const char *query,
			      struct xfer **parts, size_t n)
{
	size_t cap = 128 + n * 160, len = 0;
	char *body = malloc(cap);
	struct xfer *x = NULL;
	int ret;

	if (!body)
		return -ENOMEM;
	len += (size_t)snprintf(body, cap, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(body + len, cap - len,
					"<Part><PartNumber>%zu</PartNumber><ETag>\"%s\"</ETag></Part>",
					i + 1, parts[i]->etag);
	len += (size_t)snprintf(body + len, cap - len, "</CompleteMultipartUpload>");
	x = xfer_new(c, "POST", key, query);
	if (!x) {
		free(body);
		return -ENOMEM;
	}
	struct s3_source src = { .buf = body, .fd = -1, .len = len };
	xfer_body(x, &src);
	ret = xfer_grow(x, SMALL_ANSWER_MAX);
	if (!ret)
		ret = run_one(x);
	/* The API may answer 200 and put the error in the body. */
	if (!ret) {
		char code[128], msg[256];
		x->dst[x->got] = '\0';
		if (xml_tag((char *)x->dst, "Code", code, sizeof(code)) &&
		    strstr((char *)x->dst, "<Error>")) {
			if (!xml_tag((char *)x->dst, "Message", msg, sizeof(msg)))
				msg[0] = '\0';
			pr_err("%s: %s (%s)", x->what, code, msg);
			ret = -EIO;
		}
	}
	xfer_free(x);
	free(body);
	return ret;
}

int s3_put_multipart(struct s3 *c, const char *key, const struct s3_source *src,
		     size_t part_bytes, int parallel, s3_progress_fn progress, void *arg)
{
	char upload_id[512], enc[3 * sizeof(upload_id)], query[sizeof(enc) + 64];
	struct xfer **v = NULL;
	size_t n;
	int ret;

	if (!part_bytes)
		part_bytes = S3_PART_BYTES;
	n = src->len ? (size_t)((src->len + part_bytes - 1) / part_bytes) : 1;
	if (n > S3_MAX_PARTS) {
		pr_err("%s: %llu bytes need more than %d parts of %zu", key,
		       (unsigned long long)src->len, S3_MAX_PARTS, part_bytes);
		return -EFBIG;
	}
	ret = multipart_create(c, key, upload_id, sizeof(upload_id));
	if (ret)
		return ret;
	if (s3_uri_encode(upload_id, false, enc, sizeof(enc))) {
		ret = -EBADMSG;
		goto out;
	}
	v = calloc(n, sizeof(*v));
	if (!v) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct s3_source s = *src;
		uint64_t off = (uint64_t)i * part_bytes;
		/* Sorted, as curl signs the query as given. */
		snprintf(query, sizeof(query), "partNumber=%zu&uploadId=%s", i + 1, enc);
		v[i] = xfer_new(c, "PUT", key, query);
		if (!v[i]) {
			ret = -ENOMEM;
			goto out;
		}
		s.len = MIN((uint64_t)part_bytes, src->len - off);
		if (s.buf)
			s.buf = (const uint8_t *)src->buf + off;
		else
			s.off = src->off + off;
		xfer_body(v[i], &s);
		if ((ret = xfer_grow(v[i], SMALL_ANSWER_MAX)))
			goto out;
	}
	struct parts p = { progress, arg };
	ret = xfers_run(v, n, parallel, part_done, &p);
	if (ret)
		goto out;
	snprintf(query, sizeof(query), "uploadId=%s", enc);
	ret = multipart_complete(c, key, query, v, n);
out:
	if (ret) {
		snprintf(query, sizeof(query), "uploadId=%s", enc);
		multipart_abort(c, key, query);
	}
	for (size_t i = 0; v && i < n; i++)
		xfer_free(v[i]);
	free(v);
	return ret;
}

int s3_upload(struct s3 *c, const char *key, const struct s3_source *src, s3_progress_fn progress,
	      void *arg)
{
	int ret;

	if (src->len >= S3_MULTIPART_MIN)
		return s3_put_multipart(c, key, src, 0, 0, progress, arg);
	ret = s3_put(c, key, src);
	if (!ret && progress)
		progress(arg, src->len);
	return ret;
}

int s3_get(struct s3 *c, const char *key, size_t max, uint8_t **out, size_t *len)
{
	struct xfer *x = xfer_new(c, "GET", key, NULL);
	int ret;

	*out = NULL;
	*len = 0;
	if (!x)
		return -ENOMEM;
	ret = xfer_grow(x, max);
	if (!ret)
		ret = run_one(x);
	if (ret == -EBADMSG && x->too_big) {
		pr_err("%s: larger than %zu bytes", x->what, max);
		ret = -EFBIG;
	}
	if (!ret) {
		/* Room for a NUL: callers parse text. */
		uint8_t *d = realloc(x->dst, x->got + 1);
		if (d) {
			d[x->got] = '\0';
			*out = d;
			*len = x->got;
			x->dst = NULL;
		} else {
			ret = -ENOMEM;
		}
	}
	xfer_free(x);
	return ret;
}

int s3_get_range(struct s3 *c, const char *key, uint64_t off, uint64_t len, void *buf,
		 size_t *got)
{
	struct s3_range r = { .key = key, .off = off, .len = len, .buf = buf };
	int ret = s3_get_ranges(c, &r, 1, 1, NULL, NULL);

	*got = r.got;
	return ret;
}

struct ranges {
	s3_range_done_fn done;
	void *arg;
};

static int range_done(struct xfer *x, int err, void *arg)
{
	struct ranges *rs = arg;
	struct s3_range *r = x->user;

	r->got = x->got;
	r->attempt = x->attempt;
	/* A server that ignores Range answers 200 with the whole object. */
	if (!err && x->status == 200 && r->off) {
		pr_err("%s: the server ignored the range asked for", x->what);
		err = -EBADMSG;
	}
	return rs->done ? rs->done(r, err, rs->arg) : err;
}

int s3_get_ranges(struct s3 *c, struct s3_range *v, size_t n, int parallel, s3_range_done_fn done,
		  void *arg)
{
	struct xfer **x = calloc(n ? n : 1, sizeof(*x));
	struct ranges rs = { done, arg };
	int ret = 0;

	if (!x)
		return -ENOMEM;
	for (size_t i = 0; i < n && !ret; i++) {
		x[i] = xfer_new(c, "GET", v[i].key, NULL);
		if (!x[i]) {
			ret = -ENOMEM;
			break;
		}
		x[i]->range_off = v[i].off;
		x[i]->range_len = v[i].len;
		x[i]->user = &v[i];
		xfer_into(x[i], v[i].buf, v[i].len);
	}
	if (!ret)
		ret = xfers_run(x, n, parallel, range_done, &rs);
	for (size_t i = 0; i < n; i++)
		xfer_free(x[i]);
	free(x);
	return ret;
}

int s3_head(struct s3 *c, const char *key, struct s3_object *info)
{
	struct xfer *x = xfer_new(c, "HEAD", key, NULL);
	int ret;

	if (!x)
		return -ENOMEM;
	xfer_into(x, NULL, 0);
	ret = run_one(x);
	if (!ret && info) {
		curl_off_t size = 0, t = 0;
		memset(info, 0, sizeof(*info));
		snprintf(info->key, sizeof(info->key), "%s", key);
		curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &size);
		curl_easy_getinfo(x->h, CURLINFO_FILETIME_T, &t);
		info->size = size > 0 ? (uint64_t)size : 0;
		info->mtime_ms = t > 0 ? (int64_t)t * 1000 : 0;
		snprintf(info->etag, sizeof(info->etag), "%s", x->etag);
	}
	xfer_free(x);
	return ret;
}

int s3_delete(struct s3 *c, const char *key)
{
	struct xfer *x = xfer_new(c, "DELETE", key, NULL);
	uint8_t answer[4096];
	int ret;

	if (!x)
		return -ENOMEM;
	xfer_into(x, answer, sizeof(answer));
	ret = run_one(x);
	xfer_free(x);
	return ret == -ENOENT ? 0 : ret;
}

/* One <Contents> element of a listing into o; -EBADMSG if it lacks a part. */
static int parse_contents(const char *el, struct s3_object *o)
{
	char size[32], mtime[64];

	memset(o, 0, sizeof(*o));
	if (!xml_tag(el, "Key", o->key, sizeof(o->key)) ||
	    !xml_tag(el, "Size", size, sizeof(size)) ||
	    !xml_tag(el, "LastModified", mtime, sizeof(mtime)) ||
	    s3_parse_time(mtime, &o->mtime_ms))
		return -EBADMSG;
	o->size = strtoull(size, NULL, 10);
	if (xml_tag(el, "ETag", o->etag, sizeof(o->etag))) {
		size_t l = strlen(o->etag);
		if (l >= 2 && o->etag[0] == '"' && o->etag[l - 1] == '"') {
			memmove(o->etag, o->etag + 1, l - 2);
			o->etag[l - 2] = '\0';
		}
	}
	return 0;
}

/* One page of a listing: fn for each object; *token the next page's
 * continuation token, or "" after the last. */
static int list_page(struct s3 *c, const char *prefix, char *token, size_t token_cap,
		     s3_list_fn fn, void *arg)
{
	char q[3 * S3_KEY_MAX + 8192], ep[3 * S3_KEY_MAX + 1], et[4096], truncated[16] = "";
	struct xfer *x = NULL;
	struct s3_object *o = NULL;
	int ret;

	if (s3_uri_encode(prefix, false, ep, sizeof(ep)) ||
	    s3_uri_encode(token, false, et, sizeof(et)))
		return -ENAMETOOLONG;
	/* Sorted: continuation-token, list-type, max-keys, prefix. */
	snprintf(q, sizeof(q), "%s%s%slist-type=2&max-keys=%d&prefix=%s",
		 token[0] ? "continuation-token=" : "", token[0] ? et : "", token[0] ? "&" : "",
		 c->list_page, ep);
	x = xfer_new(c, "GET", NULL, q);
	o = malloc(sizeof(*o));
	if (!x || !o) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = xfer_grow(x, LIST_PAGE_MAX)) || (ret = run_one(x)))
		goto out;
	x->dst[x->got] = '\0';
	const char *p = (const char *)x->dst;
	xml_tag(p, "IsTruncated", truncated, sizeof(truncated));
	token[0] = '\0';
	if (!strcmp(truncated, "true") &&
	    !xml_tag(p, "NextContinuationToken", token, token_cap)) {
		pr_err("%s: a truncated listing with no continuation token", x->what);
		ret = -EBADMSG;
		goto out;
	}
	while ((p = strstr(p, "<Contents>"))) {
		const char *end = strstr(p, "</Contents>");
		if (!end || parse_contents(p, o)) {
			pr_err("%s: a listing entry that cannot be read", x->what);
			ret = -EBADMSG;
			goto out;
		}
		if ((ret = fn(o, arg)))
			goto out;
		p = end;
	}
out:
	free(o);
	xfer_free(x);
	return ret;
}

void s3_set_list_page(struct s3 *c, int max_keys)
{
	c->list_page = max_keys < 1 ? 1 : max_keys > 1000 ? 1000 : max_keys;
}

int s3_list(struct s3 *c, const char *prefix, s3_list_fn fn, void *arg)
{
	char token[1024] = "";
	int ret;

	do
		ret = list_page(c, prefix, token, sizeof(token), fn, arg);
	while (!ret && token[0]);
	return ret;
}
