/* SPDX-License-Identifier: Apache-2.0 */
/* remote.c — the remote tier (remote.h): opening a remote and what its
 * parts share (internal.h).  The jobs are in remote_index.c (the remote's
 * packs), remote_push.c, remote_fetch.c, remote_refs.c and remote_gc.c. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_url(const char *url, char **bucket, char **prefix)
{
	const char *b, *slash;
	size_t n;

	*bucket = *prefix = NULL;
	if (!url || strncmp(url, "s3://", 5)) {
		pr_err("bad remote '%s': expected s3://BUCKET or s3://BUCKET/PREFIX",
		       url ? url : "");
		return -EINVAL;
	}
	b = url + 5;
	slash = strchr(b, '/');
	n = slash ? (size_t)(slash - b) : strlen(b);
	*bucket = strndup(b, n);
	if (!*bucket)
		return -ENOMEM;
	const char *p = slash ? slash + 1 : "";
	while (*p == '/')
		p++;
	n = strlen(p);
	while (n && p[n - 1] == '/')
		n--;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == '\\' ||
		    (p[i] == '.' && (i == 0 || p[i - 1] == '/') &&
		     (i + 1 == n || p[i + 1] == '/' || (p[i + 1] == '.' && (i + 2 == n || p[i + 2] == '/'))))) {
			pr_err("bad remote '%s': the prefix has a '.', '..' or control character", url);
			free(*bucket);
			*bucket = NULL;
			return -EINVAL;
		}
	if (n > 512) {
		pr_err("bad remote '%s': the prefix is longer than 512 bytes", url);
		free(*bucket);
		*bucket = NULL;
		return -EINVAL;
	}
	if (asprintf(prefix, "%.*s%s", (int)n, p, n ? "/" : "") < 0) {
		*prefix = NULL;
		return -ENOMEM;
	}
	return 0;
}

int remote_open(const char *url, const char *endpoint, struct remote **out)
{
	struct remote *r = calloc(1, sizeof(*r));
	char *bucket = NULL;
	uint8_t h[CHUNK_HASH_LEN];
	char hex[2 * CHUNK_HASH_LEN + 1], *tag = NULL;
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	if (!url)
		url = getenv("THAW_REMOTE");
	if (!url || !*url) {
		pr_err("no remote: give --remote s3://BUCKET/PREFIX or set THAW_REMOTE");
		ret = -EINVAL;
		goto out;
	}
	ret = parse_url(url, &bucket, &r->prefix);
	if (ret)
		goto out;
	ret = s3_open(bucket, endpoint, &r->s3);
	if (ret)
		goto out;
	r->url = strdup(url);
	if (!r->url) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(r->describe, sizeof(r->describe), "s3://%s/%s: %s", bucket, r->prefix,
		 s3_describe(r->s3));
	/* The cache is per remote and endpoint: two servers may have the same
	 * bucket name. */
	if (asprintf(&tag, "%s/%s %s", bucket, r->prefix, s3_describe(r->s3)) < 0) {
		tag = NULL;
		ret = -ENOMEM;
		goto out;
	}
	chunk_hash(tag, strlen(tag), h);
	hex_encode(h, 8, hex);
	memcpy(r->cache_tag, hex, 16);
	r->cache_tag[16] = '\0';
	*out = r;
	r = NULL;
out:
	free(tag);
	free(bucket);
	remote_close(r);
	return ret;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	s3_close(r->s3);
	free(r->url);
	free(r->prefix);
	free(r);
}

const char *remote_describe(const struct remote *r)
{
	return r->describe;
}

const char *remote_key(const struct remote *r, char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	size_t n = (size_t)snprintf(buf, cap, "%s", r->prefix);

	va_start(ap, fmt);
	vsnprintf(buf + n, cap - n, fmt, ap);
	va_end(ap);
	return buf;
}

