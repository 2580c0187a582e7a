/* SPDX-License-Identifier: Apache-2.0 */
/* s3_object.c — the S3 client's object calls (s3.h): put (whole or in
 * parts), get (whole, a range, many ranges), head, delete. */
#define LOG_PREFIX "s3: "
#include "remote/s3_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int s3_put(struct s3 *c, const char *key, const struct s3_source *src)
{
	struct xfer *x = s3_xfer_new(c, "PUT", key, NULL);
	uint8_t answer[4096];
	int ret;

	if (!x)
		return -ENOMEM;
	s3_xfer_body(x, src);
	s3_xfer_into(x, answer, sizeof(answer));
	ret = s3_xfer_run_one(x);
	s3_xfer_free(x);
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
	struct xfer *x = s3_xfer_new(c, "POST", key, "uploads=");
	struct s3_source none = { .fd = -1 };
	int ret;

	if (!x)
		return -ENOMEM;
	s3_xfer_body(x, &none);
	ret = s3_xfer_grow(x, SMALL_ANSWER_MAX);
	if (!ret)
		ret = s3_xfer_run_one(x);
	if (!ret) {
		x->dst[x->got] = '\0';
		if (!s3_xml_tag((char *)x->dst, "UploadId", upload_id, cap)) {
			pr_err("%s: no UploadId in the answer", x->what);
			ret = -EBADMSG;
		}
	}
	s3_xfer_free(x);
	return ret;
}

static void multipart_abort(struct s3 *c, const char *key, const char *query)
{
	struct xfer *x = s3_xfer_new(c, "DELETE", key, query);
	uint8_t answer[4096];

	if (!x)
		return;
	s3_xfer_into(x, answer, sizeof(answer));
	if (s3_xfer_run_one(x))
		pr_warn("the parts of an upload of %s may stay on the server until its lifecycle "
			"rules remove them",
			key);
	s3_xfer_free(x);
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
	x = s3_xfer_new(c, "POST", key, query);
	if (!x) {
		free(body);
		return -ENOMEM;
	}
	struct s3_source src = { .buf = body, .fd = -1, .len = len };
	s3_xfer_body(x, &src);
	ret = s3_xfer_grow(x, SMALL_ANSWER_MAX);
	if (!ret)
		ret = s3_xfer_run_one(x);
	/* The API may answer 200 and put the error in the body. */
	if (!ret) {
		char code[128], msg[256];
		x->dst[x->got] = '\0';
		if (s3_xml_tag((char *)x->dst, "Code", code, sizeof(code)) &&
		    strstr((char *)x->dst, "<Error>")) {
			if (!s3_xml_tag((char *)x->dst, "Message", msg, sizeof(msg)))
				msg[0] = '\0';
			pr_err("%s: %s (%s)", x->what, code, msg);
			ret = -EIO;
		}
	}
	s3_xfer_free(x);
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
		v[i] = s3_xfer_new(c, "PUT", key, query);
		if (!v[i]) {
			ret = -ENOMEM;
			goto out;
		}
		s.len = MIN((uint64_t)part_bytes, src->len - off);
		if (s.buf)
			s.buf = (const uint8_t *)src->buf + off;
		else
			s.off = src->off + off;
		s3_xfer_body(v[i], &s);
		if ((ret = s3_xfer_grow(v[i], SMALL_ANSWER_MAX)))
			goto out;
	}
	struct parts p = { progress, arg };
	ret = s3_xfers_run(v, n, parallel, part_done, &p);
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
		s3_xfer_free(v[i]);
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
	struct xfer *x = s3_xfer_new(c, "GET", key, NULL);
	int ret;

	*out = NULL;
	*len = 0;
	if (!x)
		return -ENOMEM;
	ret = s3_xfer_grow(x, max);
	if (!ret)
		ret = s3_xfer_run_one(x);
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
	s3_xfer_free(x);
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
		x[i] = s3_xfer_new(c, "GET", v[i].key, NULL);
		if (!x[i]) {
			ret = -ENOMEM;
			break;
		}
		x[i]->range_off = v[i].off;
		x[i]->range_len = v[i].len;
		x[i]->user = &v[i];
		s3_xfer_into(x[i], v[i].buf, v[i].len);
	}
	if (!ret)
		ret = s3_xfers_run(x, n, parallel, range_done, &rs);
	for (size_t i = 0; i < n; i++)
		s3_xfer_free(x[i]);
	free(x);
	return ret;
}

int s3_head(struct s3 *c, const char *key, struct s3_object *info)
{
	struct xfer *x = s3_xfer_new(c, "HEAD", key, NULL);
	int ret;

	if (!x)
		return -ENOMEM;
	s3_xfer_into(x, NULL, 0);
	ret = s3_xfer_run_one(x);
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
	s3_xfer_free(x);
	return ret;
}

int s3_delete(struct s3 *c, const char *key)
{
	struct xfer *x = s3_xfer_new(c, "DELETE", key, NULL);
	uint8_t answer[4096];
	int ret;

	if (!x)
		return -ENOMEM;
	s3_xfer_into(x, answer, sizeof(answer));
	ret = s3_xfer_run_one(x);
	s3_xfer_free(x);
	return ret == -ENOENT ? 0 : ret;
}

