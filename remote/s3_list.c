/* SPDX-License-Identifier: Apache-2.0 */
/* s3_list.c — s3_list (s3.h): a prefix's objects, page by page
 * (ListObjectsV2), each <Contents> element of the XML read into an
 * s3_object. */
#define LOG_PREFIX "s3: "
#include "remote/s3_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One <Contents> element of a listing into o; -EBADMSG if it lacks a part. */
static int parse_contents(const char *el, struct s3_object *o)
{
	char size[32], mtime[64];

	memset(o, 0, sizeof(*o));
	if (!s3_xml_tag(el, "Key", o->key, sizeof(o->key)) ||
	    !s3_xml_tag(el, "Size", size, sizeof(size)) ||
	    !s3_xml_tag(el, "LastModified", mtime, sizeof(mtime)) ||
	    s3_parse_time(mtime, &o->mtime_ms))
		return -EBADMSG;
	o->size = strtoull(size, NULL, 10);
	if (s3_xml_tag(el, "ETag", o->etag, sizeof(o->etag))) {
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
	x = s3_xfer_new(c, "GET", NULL, q);
	o = malloc(sizeof(*o));
	if (!x || !o) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = s3_xfer_grow(x, LIST_PAGE_MAX)) || (ret = s3_xfer_run_one(x)))
		goto out;
	x->dst[x->got] = '\0';
	const char *p = (const char *)x->dst;
	s3_xml_tag(p, "IsTruncated", truncated, sizeof(truncated));
	token[0] = '\0';
	if (!strcmp(truncated, "true") &&
	    !s3_xml_tag(p, "NextContinuationToken", token, token_cap)) {
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
	s3_xfer_free(x);
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

