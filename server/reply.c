/* SPDX-License-Identifier: Apache-2.0 */
/* reply.c — what a handler may ask of its request (internal.h): its query,
 * whether its client is still there, and its answers: JSON bodies, the
 * error shape of docs/API.md ({"error":{"code","message"}}), empty and text
 * answers, each with the headers it needs, queued on the request's
 * connection.  It calls nothing of the server's but the error body
 * (errors.h): the transport (http.c) and the handlers (api.h) both use
 * it. */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "function/spec.h"
#include "server/errors.h"
#include "server/internal.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *req_query(struct req *q, const char *key)
{
	/* A request not on a connection (none yet) has no query. */
	return q->conn ? MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, key) : NULL;
}

int req_query_seconds(struct req *q, const char *key, double *out, char *why, size_t len)
{
	const char *v = req_query(q, key);

	if (v && query_seconds_parse(v, SPEC_MAX_SECONDS, out)) {
		snprintf(why, len, "%s: must be a number of seconds from 0 to %.0f (decimal digits)",
			 key, SPEC_MAX_SECONDS);
		return -EINVAL;
	}
	return 0;
}

bool req_client_gone(struct req *q)
{
	const union MHD_ConnectionInfo *ci =
		q->conn ? MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD)
			: NULL;
	struct pollfd p;

	if (!ci)
		return false;
	p = (struct pollfd){ .fd = ci->connect_fd, .events = POLLRDHUP };
	/* An HTTP client does not shut down its sending side while it waits
	 * for the answer: RDHUP or HUP means it closed the connection. */
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int queue(struct req *q, unsigned status, struct MHD_Response *r, const char *ctype,
		 const char *hname, const char *hvalue)
{
	enum MHD_Result ok;

	if (!q->conn) {
		/* No connection: there is nobody to send it to. */
		if (r)
			MHD_destroy_response(r);
		q->answered = true;
		q->status = status;
		return 0;
	}
	if (!r) {
		pr_err("cannot make a response: out of memory");
		return -ENOMEM;
	}
	if ((ctype && MHD_add_response_header(r, "Content-Type", ctype) != MHD_YES) ||
	    (hname && MHD_add_response_header(r, hname, hvalue) != MHD_YES)) {
		MHD_destroy_response(r);
		return -ENOMEM;
	}
	ok = MHD_queue_response(q->conn, status, r);
	MHD_destroy_response(r);
	if (ok != MHD_YES) {
		pr_warn("%s %s: cannot queue the answer", q->method_str, q->path);
		return -EIO;
	}
	q->answered = true;
	q->status = status;
	return 0;
}

int reply_text(struct req *q, unsigned status, const char *ctype, char *body, size_t len)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);

	if (!r)
		free(body);
	return queue(q, status, r, ctype, NULL, NULL);
}

int reply_empty(struct req *q, unsigned status)
{
	return queue(q, status, MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT),
		     NULL, NULL, NULL);
}

/* When even the error could not be written (no memory): a fixed answer. */
static int reply_oom(struct req *q)
{
	static const char body[] =
		"{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";

	return queue(q, 500,
		     MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body,
						     MHD_RESPMEM_PERSISTENT),
		     "application/json", NULL, NULL);
}

int reply_json_hdr(struct req *q, unsigned status, json_t *body, const char *hname,
		   const char *hvalue)
{
	char *text;
	struct MHD_Response *r;
	size_t len;

	/* Ten significant digits: timings in ms read 1234.567891, not 1234.5678910000001. */
	text = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(10))
		    : NULL;
	json_decref(body);
	if (!text)
		return reply_oom(q);
	/* A newline, so that curl output reads well in a terminal. */
	len = strlen(text);
	char *t2 = realloc(text, len + 2);
	if (!t2) {
		free(text);
		return reply_oom(q);
	}
	t2[len++] = '\n';
	t2[len] = '\0';
	r = MHD_create_response_from_buffer(len, t2, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(t2);
		return reply_oom(q);
	}
	return queue(q, status, r, "application/json", hname, hvalue);
}

int reply_json(struct req *q, unsigned status, json_t *body)
{
	return reply_json_hdr(q, status, body, NULL, NULL);
}

static __attribute__((format(printf, 6, 0))) int
reply_verror(struct req *q, unsigned status, const char *hname, const char *hvalue,
	     const char *code, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	return reply_json_hdr(q, status, api_error_json(code, msg), hname, hvalue);
}

int reply_error(struct req *q, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = reply_verror(q, status, NULL, NULL, code, fmt, ap);
	va_end(ap);
	return ret;
}

int reply_error_hdr(struct req *q, unsigned status, const char *hname, const char *hvalue,
		    const char *code, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = reply_verror(q, status, hname, hvalue, code, fmt, ap);
	va_end(ap);
	return ret;
}
