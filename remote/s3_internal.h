/* SPDX-License-Identifier: Apache-2.0 */
/* s3_internal.h — what the S3 client's own files share (s3.c: settings,
 * credentials and encodings; s3_xfer.c: transfers; s3_object.c: the object
 * calls; s3_list.c: listings); not for other files. */
#ifndef THAW_REMOTE_S3_INTERNAL_H
#define THAW_REMOTE_S3_INTERNAL_H

#include "remote/s3.h"

#include <curl/curl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* ---- settings and encodings (s3.c) ---- */

/* asprintf() that leaves *out NULL when it fails (asprintf leaves it
 * undefined): the length, or -1. */
int s3_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s without its leading and trailing white space (cut in place). */
char *s3_trim(char *s);
/* The text of the first <tag>…</tag> at or after xml, entities undone, into
 * out; returns where the element ends, or NULL if there is none (or it does
 * not fit). */
const char *s3_xml_tag(const char *xml, const char *tag, char *out, size_t cap);

/* ---- transfers (s3_xfer.c) ---- */

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

/* done() of a transfer: err 0 or -errno; returns 0, S3_AGAIN or -errno. */
typedef int (*s3_xfer_done_fn)(struct xfer *x, int err, void *arg);

/* A transfer of method on key (NULL: the bucket) with query (sorted and
 * encoded already, may be NULL); NULL when out of memory or the key is too
 * long (logged). */
struct xfer *s3_xfer_new(struct s3 *c, const char *method, const char *key, const char *query);
void s3_xfer_free(struct xfer *x); /* NULL is fine */
/* The answer goes into buf (cap bytes; a longer one is an error). */
void s3_xfer_into(struct xfer *x, void *buf, size_t cap);
/* The answer goes into a buffer of its own (x->dst, freed with x), up to
 * max bytes and one more for a '\0'; 0 or -ENOMEM. */
int s3_xfer_grow(struct xfer *x, size_t max);
/* The body: src, with its SHA-256 signed where it is in memory. */
void s3_xfer_body(struct xfer *x, const struct s3_source *src);
/* Run transfers v[0..n), parallel at a time (<= 0: S3_PARALLEL), each tried
 * up to S3_ATTEMPTS times, done (may be NULL) called as each ends.  The
 * first failure that done() does not take stops the rest: 0 or -errno. */
int s3_xfers_run(struct xfer **v, size_t n, int parallel, s3_xfer_done_fn done, void *arg);
/* s3_xfers_run of x alone. */
int s3_xfer_run_one(struct xfer *x);

#endif
