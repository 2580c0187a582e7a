/* SPDX-License-Identifier: Apache-2.0 */
/* s3_xfer.c — the S3 client's transfers (s3_internal.h): one request as a
 * curl transfer signed by curl (SigV4), run with others on one curl multi
 * handle per call, retried with backoff; errors turned into -errno. */
#define LOG_PREFIX "s3: "
#include "remote/s3_internal.h"
#include "store/chunk.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
		char *v = s3_trim(line + 5);
		size_t l = strlen(v);
		if (l >= 2 && v[0] == '"' && v[l - 1] == '"') {
			v[l - 1] = '\0';
			v++;
		}
		snprintf(x->etag, sizeof(x->etag), "%s", v);
	} else if (!strncasecmp(line, "Date:", 5)) {
		time_t t = curl_getdate(s3_trim(line + 5), NULL);
		if (t > 0)
			atomic_store(&x->c->server_ms, (int_fast64_t)t * 1000);
	}
	return n;
}

void s3_xfer_free(struct xfer *x)
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
struct xfer *s3_xfer_new(struct s3 *c, const char *method, const char *key, const char *query)
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
	if (s3_asprintf(&x->url, "%s%s%s%s", c->base, key ? enc : "", query ? "?" : "",
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
	s3_xfer_free(x);
	return NULL;
}

/* The answer goes into buf (cap bytes; a longer one is an error). */
void s3_xfer_into(struct xfer *x, void *buf, size_t cap)
{
	x->dst = buf;
	x->dst_cap = cap;
	x->grow = false;
}

/* The answer goes into a buffer of its own, up to max bytes. */
int s3_xfer_grow(struct xfer *x, size_t max)
{
	x->dst_cap = MIN((size_t)64 << 10, max + 1);
	x->dst = malloc(x->dst_cap);
	x->grow = true;
	x->grow_max = max;
	return x->dst ? 0 : -ENOMEM;
}

/* The body: src, with its SHA-256 signed where it is in memory. */
void s3_xfer_body(struct xfer *x, const struct s3_source *src)
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
			s3_xml_tag(body, "Code", code, sizeof(code));
			s3_xml_tag(body, "Message", text, sizeof(text));
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

/* Run transfers v[0..n), parallel at a time, each tried up to S3_ATTEMPTS
 * times.  The first failure that done() does not take stops the rest. */
int s3_xfers_run(struct xfer **v, size_t n, int parallel, s3_xfer_done_fn done, void *arg)
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

int s3_xfer_run_one(struct xfer *x)
{
	return s3_xfers_run(&x, 1, 1, NULL, NULL);
}
