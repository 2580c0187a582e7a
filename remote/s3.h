/* SPDX-License-Identifier: Apache-2.0 */
/* s3.h — a small client of the S3 API on libcurl: objects put (whole or in
 * parts, several in flight), got (whole, a range, or many ranges in flight),
 * headed, deleted and listed, in one bucket.
 *
 * Signing is curl's own SigV4 (CURLOPT_AWS_SIGV4), the maintained
 * implementation every curl user shares; this client (s3_xfer.c) adds what
 * curl 7.88 leaves to its caller: the x-amz-content-sha256 header (the body's
 * SHA-256 where the body is in memory, else UNSIGNED-PAYLOAD; without it RGW
 * answers SignatureDoesNotMatch), query strings sorted and percent-encoded
 * (curl signs them as given), and bodies of a known length (RGW answers a
 * chunked upload 411).
 *
 * Settings, the way the AWS tools find them:
 *	endpoint   the argument, else $AWS_ENDPOINT_URL, else
 *	           https://s3.<region>.amazonaws.com (virtual-hosted addressing,
 *	           bucket.s3.<region>...); any endpoint given is addressed
 *	           path-style (<endpoint>/<bucket>/<key>), which every
 *	           S3-compatible server takes
 *	region     $AWS_REGION, else $AWS_DEFAULT_REGION, else us-east-1
 *	keys       $AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY (+ $AWS_SESSION_TOKEN),
 *	           else profile $AWS_PROFILE (default "default") of the shared
 *	           credentials file ($AWS_SHARED_CREDENTIALS_FILE, else
 *	           ~/.aws/credentials)
 * The keys never appear in a log line, an error message or s3_describe().
 *
 * Errors: functions return 0 or -errno and log the reason with the HTTP
 * status and the S3 error code and message (log_last_error() tells it):
 * -ENOENT no such key or bucket (404; not printed, only recorded, since
 * callers often expect it), -EACCES refused (401/403: bad keys, a clock off,
 * no permission), -EINVAL a request the server calls bad (other 4xx),
 * -EIO a server error that outlived the retries, -ECONNREFUSED /
 * -ETIMEDOUT / -EHOSTUNREACH a server that cannot be reached, -EBADMSG an
 * answer that makes no sense.  Connection errors, timeouts, stalls
 * (S3_STALL_S without a byte), 5xx and 429 are retried S3_ATTEMPTS times in
 * all, with exponential backoff and jitter.
 *
 * An s3 object is read-only once open: any number of threads may use one at
 * once (each call makes its own curl handles).
 */
#ifndef THAW_REMOTE_S3_H
#define THAW_REMOTE_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3_ATTEMPTS	   5	       /* tries of one request, the first included */
#define S3_BACKOFF_MS	   100	       /* before the second try; doubled each time */
#define S3_STALL_S	   30	       /* a transfer that moves no byte this long is retried */
#define S3_CONNECT_S	   10	       /* connection timeout */
#define S3_PART_BYTES	   (16u << 20) /* multipart: bytes a part (the last may be less) */
#define S3_MULTIPART_MIN   (32u << 20) /* s3_upload: objects this large go in parts */
#define S3_PARALLEL	   8	       /* requests in flight, by default */
#define S3_MAX_PARTS	   10000       /* the API's limit */
#define S3_KEY_MAX	   1024

struct s3;

/* One object of a listing, or what a head tells. */
struct s3_object {
	char key[S3_KEY_MAX + 1]; /* the full key (a listing's prefix included) */
	uint64_t size;
	int64_t mtime_ms; /* LastModified, ms since the epoch (HEAD: whole seconds) */
	char etag[80];	  /* quotes removed */
};

/* Open a client of bucket at endpoint (NULL: the environment's or AWS's),
 * with the region and keys of the environment.  0 and *out (s3_close() it);
 * -EINVAL a bad endpoint or bucket name, -ENOKEY no keys found (logged,
 * saying where it looked). */
int s3_open(const char *bucket, const char *endpoint, struct s3 **out);
void s3_close(struct s3 *c); /* NULL is fine */
/* "bucket at endpoint (region R, keys from SOURCE)", for logs; no secret. */
const char *s3_describe(const struct s3 *c);
/* The server's clock, ms since the epoch, at its last answer to any request
 * of this client (its Date header); 0 before any. */
int64_t s3_server_time_ms(struct s3 *c);

/* A request's body: len bytes at buf, or (buf NULL) of the file fd from off. */
struct s3_source {
	const void *buf;
	int fd;
	uint64_t off;
	uint64_t len;
};

/* Bytes newly sent or received; called on the calling thread. */
typedef void (*s3_progress_fn)(void *arg, uint64_t bytes);

/* PUT the object key (replacing any), from src, in one request. */
int s3_put(struct s3 *c, const char *key, const struct s3_source *src);
/* PUT key in parts of part_bytes (0: S3_PART_BYTES), parallel of them in
 * flight (0: S3_PARALLEL): create, parts, complete; an upload that fails is
 * aborted, so that the server keeps none of its parts.  progress (may be
 * NULL) gets each part's bytes as it lands. */
int s3_put_multipart(struct s3 *c, const char *key, const struct s3_source *src,
		     size_t part_bytes, int parallel, s3_progress_fn progress, void *arg);
/* s3_put, or s3_put_multipart from S3_MULTIPART_MIN bytes up. */
int s3_upload(struct s3 *c, const char *key, const struct s3_source *src, s3_progress_fn progress,
	      void *arg);

/* GET key whole into a malloc'd buffer (*out, you own it; *len its size);
 * an object larger than max bytes fails with -EFBIG. */
int s3_get(struct s3 *c, const char *key, size_t max, uint8_t **out, size_t *len);
/* GET len bytes of key from off into buf: 0 and *got (less than len only
 * where the object ends first). */
int s3_get_range(struct s3 *c, const char *key, uint64_t off, uint64_t len, void *buf,
		 size_t *got);

/* Many ranged GETs, parallel in flight.  Each range's bytes land in its buf;
 * done() is called on the calling thread as each one ends: err 0 and got
 * bytes (fewer than len: the object ended first, or the answer was cut), or
 * err < 0 once the retries are spent or the error is not one to retry.
 * done() returns 0 (finished with it), S3_AGAIN (fetch it again, after a
 * backoff: a corrupt answer; range->attempt says how many tries were made,
 * and a range that asks again after S3_ATTEMPTS fails the call with -EIO) or
 * a negative errno, which stops every transfer and is returned. */
#define S3_AGAIN 1
struct s3_range {
	const char *key;
	uint64_t off, len;
	void *buf;   /* len bytes */
	size_t got;  /* filled in */
	int attempt; /* filled in: tries so far, this one included */
	void *arg;   /* the caller's */
};
typedef int (*s3_range_done_fn)(struct s3_range *r, int err, void *arg);
int s3_get_ranges(struct s3 *c, struct s3_range *v, size_t n, int parallel, s3_range_done_fn done,
		  void *arg);

/* HEAD key: 0 and *info (may be NULL), or -ENOENT. */
int s3_head(struct s3 *c, const char *key, struct s3_object *info);
/* DELETE key; a key that is not there is not an error (S3's own rule). */
int s3_delete(struct s3 *c, const char *key);

/* Call fn for each object whose key starts with prefix, in key order, a
 * page of up to 1000 at a time (ListObjectsV2).  A non-zero return of fn
 * stops the listing and is returned. */
typedef int (*s3_list_fn)(const struct s3_object *o, void *arg);
int s3_list(struct s3 *c, const char *prefix, s3_list_fn fn, void *arg);
/* Objects a listing page asks for (1 to 1000; the default 1000): tests make
 * it small to see pagination work. */
void s3_set_list_page(struct s3 *c, int max_keys);

/* For tests and tools: percent-encode s as SigV4 wants (unreserved
 * characters kept, and '/' too if keep_slash) into out; -ENAMETOOLONG if
 * it does not fit. */
int s3_uri_encode(const char *s, bool keep_slash, char *out, size_t cap);
/* Parse "YYYY-MM-DDTHH:MM:SS[.mmm]Z" into ms since the epoch; -EINVAL. */
int s3_parse_time(const char *s, int64_t *ms);

#endif
