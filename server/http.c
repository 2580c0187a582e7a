/* SPDX-License-Identifier: Apache-2.0 */
/* http.c — thawd's HTTP transport over libmicrohttpd (http.h): the daemon,
 * the connections and their deadlines, the request life cycle (target,
 * framing, route, token, body), one log line per request.  What a request
 * does is its handler's, found through the route table (route_table.h);
 * a routed request (/function/<id>/…) streams through proxy.h.  Those are
 * its only calls into the server: thawd.c builds the components and starts
 * and stops this transport, and the handlers answer through reply.c.
 *
 * What a client can hold: at most --max-connections connections, at most
 * --max-connections-per-ip of them from one address (libmicrohttpd refuses
 * more at once), and each of them only as long as it takes to send a whole
 * request, head and body, within --request-timeout seconds of its opening
 * or of its previous answer: a reaper thread closes one that is late,
 * however steadily it trickles bytes in (libmicrohttpd's own timeout only
 * counts idle time).  A request's processing is not counted: a start or a
 * snapshot with ?wait=1 takes what it takes.  Nor is, for a routed request,
 * the time thawd takes between reading the parts of its body (a wait for a
 * slot, an instance taking a part): the rest of its head and body is, and a
 * body trickled a byte at a time is cut like any other.
 *
 * Request targets are checked raw: libmicrohttpd hands the URL on as a C
 * string, so "DELETE /functions/f\0/start" would arrive as "DELETE
 * /functions/f".  The URI log callback sees the target before it is parsed,
 * and the access handler knows where it ended (the version string follows
 * it in the same buffer): a NUL or any other control byte in it is a 400.
 *
 * With --tls-cert and --tls-key, libmicrohttpd speaks TLS (GnuTLS) on every
 * connection: one that does not (plain HTTP) fails its handshake and is
 * closed by its own thread, and one that never finishes it is closed by the
 * reaper like any other that sends no whole request in time.
 */
#define LOG_PREFIX "thawd: "
#include "server/http.h"
#include "common/log.h"
#include "common/util.h"
#include "server/internal.h"
#include "server/proxy.h"
#include "server/route_table.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- connections and their deadlines ---- */

/* One open connection.  deadline: when it must have sent its whole request
 * (0 while a request of it is being processed or answered). */
struct conn_track {
	struct conn_track *prev, *next;
	int fd;
	uint64_t deadline;
	bool cut; /* shut down by the reaper */
};

/* The deadline of a request that may start now; 0 (none) without a timeout. */
static uint64_t next_deadline(const struct server *s)
{
	if (!s->opts.request_timeout)
		return 0;
	return now_ns() + (uint64_t)s->opts.request_timeout * 1000000000ull;
}

/* Under conn_lock. */
static void conn_set_deadline(struct server *s, struct conn_track *c, uint64_t deadline)
{
	c->deadline = deadline;
	if (deadline && s->reaper_idle)
		pthread_cond_signal(&s->conn_cv);
}

/* libmicrohttpd: a connection accepted (within the limits) or closed.  It
 * calls "closed" before it closes the socket, so the reaper never shuts
 * down a descriptor that has been reused. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	struct conn_track *c = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

		if (!ci || !(c = calloc(1, sizeof(*c))))
			return; /* not tracked: only its idle timeout applies */
		c->fd = ci->connect_fd;
		pthread_mutex_lock(&s->conn_lock);
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		conn_set_deadline(s, c, next_deadline(s));
		pthread_mutex_unlock(&s->conn_lock);
		*socket_context = c;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_CLOSED || !c)
		return;
	pthread_mutex_lock(&s->conn_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&s->conn_lock);
	free(c);
	*socket_context = NULL;
}

#define REAPER_SLACK_NS (250 * 1000000ull)

/* Close the connections that are past their deadline: shutdown() wakes
 * their thread, which sees the end of the stream and closes them. */
static void *reaper_main(void *arg)
{
	struct server *s = arg;
	unsigned timeout = s->opts.request_timeout;

	pthread_mutex_lock(&s->conn_lock);
	while (!s->reaper_stop) {
		uint64_t now = now_ns(), next = 0;
		unsigned cut = 0;

		for (struct conn_track *c = s->conns; c; c = c->next) {
			if (!c->deadline || c->cut)
				continue;
			if (c->deadline <= now) {
				shutdown(c->fd, SHUT_RDWR);
				c->cut = true;
				cut++;
			} else if (!next || c->deadline < next) {
				next = c->deadline;
			}
		}
		if (cut)
			pr_warn("closed %u connection(s) that sent no whole request within %u s",
				cut, timeout);
		s->reaper_idle = !next;
		if (!next) {
			pthread_cond_wait(&s->conn_cv, &s->conn_lock);
		} else {
			/* A little late, so that the connections of a burst are
			 * closed (and logged) together. */
			next += REAPER_SLACK_NS;
			struct timespec ts = mono_timespec(next);

			pthread_cond_timedwait(&s->conn_cv, &s->conn_lock, &ts);
		}
		s->reaper_idle = false;
	}
	pthread_mutex_unlock(&s->conn_lock);
	return NULL;
}

static int reaper_start(struct server *s)
{
	int ret = pthread_create(&s->reaper, NULL, reaper_main, s);

	if (ret) {
		pr_err("cannot start the connection reaper: %s", strerror(ret));
		return -ret;
	}
	s->reaper_started = true;
	return 0;
}

/* After libmicrohttpd has stopped: no connection is left. */
static void reaper_stop(struct server *s)
{
	if (!s->reaper_started)
		return;
	pthread_mutex_lock(&s->conn_lock);
	s->reaper_stop = true;
	pthread_cond_signal(&s->conn_cv);
	pthread_mutex_unlock(&s->conn_lock);
	pthread_join(s->reaper, NULL);
	s->reaper_started = false;
}

/* The request is all in: its processing does not count against the
 * deadline.  false if the reaper already closed the connection or the
 * deadline has passed (then nothing is to be done for it). */
static bool conn_request_in(struct req *q)
{
	struct server *s = q->srv;
	bool ok = true;

	if (!q->ct)
		return true;
	pthread_mutex_lock(&s->conn_lock);
	if (q->ct->cut || (q->ct->deadline && q->ct->deadline <= now_ns()))
		ok = false;
	else
		q->ct->deadline = 0;
	pthread_mutex_unlock(&s->conn_lock);
	return ok;
}

/* A routed request's time in thawd (waiting for a slot, or for the
 * instance to take a part of its body) is not its client's: its deadline
 * stops meanwhile.  false if the reaper already closed the connection or
 * the deadline has passed; else *left holds what is left of it (0: none). */
static bool conn_hold(struct req *q, uint64_t *left)
{
	struct server *s = q->srv;
	uint64_t now = now_ns();
	bool ok = true;

	*left = 0;
	if (!q->ct)
		return true;
	pthread_mutex_lock(&s->conn_lock);
	if (q->ct->cut || (q->ct->deadline && q->ct->deadline <= now)) {
		ok = false;
	} else if (q->ct->deadline) {
		*left = q->ct->deadline - now;
		q->ct->deadline = 0;
	}
	pthread_mutex_unlock(&s->conn_lock);
	return ok;
}

/* The client is read again: its deadline goes on with what was left. */
static void conn_resume(struct req *q, uint64_t left)
{
	struct server *s = q->srv;

	if (!q->ct || !left)
		return;
	pthread_mutex_lock(&s->conn_lock);
	if (!q->ct->cut)
		conn_set_deadline(s, q->ct, now_ns() + left);
	pthread_mutex_unlock(&s->conn_lock);
}

/* ---- the request life cycle ---- */

/* The path for the log: printable characters only, truncated. */
static void copy_for_log(char *dst, size_t n, const char *src)
{
	size_t i = 0;

	for (; src && *src && i + 1 < n; src++)
		dst[i++] = (*src > ' ' && *src <= '~') ? *src : '?';
	dst[i] = '\0';
}

/* libmicrohttpd: the request target, before it parses it (splits off the
 * query, unescapes).  The struct req made here is the request's *con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct req *q = calloc(1, sizeof(*q));

	(void)conn;
	if (!q)
		return NULL; /* the access handler makes it, without the raw check */
	q->srv = cls;
	q->target = uri;
	q->target_ctl = -1;
	if (uri) {
		q->target_len = strlen(uri);
		/* A routed request goes on with its query as it came: parsing
		 * splits the target in place. */
		if (!strncmp(uri, "/function/", 10))
			q->raw_target = strdup(uri);
		for (size_t i = 0; i < q->target_len; i++) {
			unsigned char c = (unsigned char)uri[i];

			if (c < 0x20 || c == 0x7f) {
				q->target_ctl = (long)i;
				break;
			}
		}
	}
	return q;
}

/* The offset of the first control byte of the raw request target, or -1.
 * A NUL cuts the C string that on_uri() saw: the target's real end is the
 * byte before the version string, which libmicrohttpd leaves right after
 * it in the request line ("<target>\0HTTP/1.1", the space overwritten), with
 * url pointing at the target's start.  Where that does not hold (another
 * libmicrohttpd), only the bytes before a NUL are checked. */
static long target_bad_byte(struct req *q, const char *url, const char *version)
{
	static atomic_bool warned;
	uintptr_t t = (uintptr_t)q->target, v = (uintptr_t)version;

	if (!q->target)
		return -1;
	if (q->target_ctl >= 0)
		return q->target_ctl;
	if (url == q->target && version && v > t && v - t - 1 >= q->target_len &&
	    v - t - 1 <= 1u << 20 && version[-1] == '\0' && !strncmp(version, "HTTP/", 5)) {
		size_t len = v - t - 1, i = 0;

		if (len == q->target_len)
			return -1;
		/* A NUL: the log shows the whole target, not the part
		 * before it (a query's "?", "&", "=" are NULs by now too). */
		for (; i < len && i + 1 < sizeof(q->path); i++)
			q->path[i] = (q->target[i] > ' ' && q->target[i] <= '~') ? q->target[i] : '?';
		q->path[i] = '\0';
		return (long)q->target_len;
	}
	if (!atomic_exchange(&warned, true))
		pr_warn("this libmicrohttpd does not show where a request target ends: a NUL "
			"in one is not detected");
	return -1;
}

/* The header lines that say where a request ends and whom it is for,
 * counted: libmicrohttpd keeps every line, but answers a lookup with the
 * first of a name. */
struct framing {
	unsigned content_length, transfer_encoding, host;
	bool bad_length, not_chunked;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct framing *f = cls;

	(void)kind;
	if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
		f->content_length++;
		f->bad_length |= !value || !*value || value[strspn(value, "0123456789")];
	} else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
		f->transfer_encoding++;
		f->not_chunked |= !value || strcasecmp(value, "chunked");
	} else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
		f->host++;
	}
	return MHD_YES;
}

/* Why the request's framing is one that two readers could take apart (a
 * proxy before thawd, and libmicrohttpd, which is lenient with each: it
 * took Content-Length: 0 with Transfer-Encoding: chunked, the first of two
 * Content-Lengths, two Hosts), or a request of HTTP/1.1 with no Host (whom
 * it is for is then a guess), into why; false if it is sound.  Each is a
 * 400 with the connection closed (RFC 9112, 6.3 and 3.2), whatever
 * libmicrohttpd's version: what would follow on the connection is the
 * smuggled request. */
static bool framing_bad(struct req *q, const char *version, char *why, size_t len)
{
	struct framing f = { 0 };

	MHD_get_connection_values(q->conn, MHD_HEADER_KIND, count_framing, &f);
	if (f.transfer_encoding && f.content_length)
		snprintf(why, len, "both Transfer-Encoding and Content-Length: the body's end is "
				   "ambiguous");
	else if (f.content_length > 1)
		snprintf(why, len, "%u Content-Length headers: the body's end is ambiguous",
			 f.content_length);
	else if (f.bad_length)
		snprintf(why, len, "Content-Length is not a number of bytes");
	else if (f.transfer_encoding > 1 || f.not_chunked)
		snprintf(why, len, "a Transfer-Encoding other than one \"chunked\"");
	else if (f.host > 1)
		snprintf(why, len, "%u Host headers", f.host);
	else if (!f.host && version && strcmp(version, MHD_HTTP_VERSION_1_0))
		snprintf(why, len, "an HTTP/1.1 request without Host (RFC 9112, 3.2)");
	else
		return false;
	return true;
}

/* The header fields, each as another reader of the same bytes would take
 * it: libmicrohttpd (0.9.75) passes on a bare CR inside a value ("X-A:
 * a\rContent-Length: 0", which python's http.server reads as two fields),
 * keeps whitespace before a colon in the name ("Transfer-Encoding :"),
 * cuts a value at a NUL, joins a folded line onto the name ("X-A: one\r\n
 * two" arrives as "X-Atwo: one") and ends a line at a bare LF.  A request
 * whose head two readers would split differently is refused (RFC 9110,
 * 5.5; RFC 9112, 5.1 and 5.2), whatever the route: a routed one goes on
 * to a function's own parser.
 *
 * Names and values are checked as they arrived.  The rest is seen from
 * where libmicrohttpd left them: it parses the head in place, each line's
 * CRLF made two NULs and each name's colon one, so a sound head is the
 * request line, then per field its name, a NUL, spaces or tabs, its value
 * and two NULs, and after the last one two more NULs (the empty line),
 * ending header_size bytes after the method.  A folded field's name was
 * moved; a NUL in a value or a bare LF leaves a gap that is not two NULs. */
struct fields {
	const char *end;             /* the head's end; NULL: its layout is unknown */
	const char *line_end;        /* the previous line's last byte but its CRLF */
	char why[200];
};

#define TOKEN_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"
#define OWS_MAX     256

/* The line ending at p (the previous line's end) is followed by CRLF, then
 * by next. */
static bool crlf_then(const char *p, const char *next)
{
	return next == p + 2 && p[0] == '\0' && p[1] == '\0';
}

static enum MHD_Result check_field(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct fields *f = cls;
	char name[64];
	size_t kl, vl;

	(void)kind;
	if (!key || !value)
		return MHD_YES;
	kl = strlen(key);
	vl = strlen(value);
	copy_for_log(name, sizeof(name), key);
	if (!kl || key[strspn(key, TOKEN_CHARS)]) {
		snprintf(f->why, sizeof(f->why),
			 "the header name \"%s\" is not a token (whitespace before its colon?)",
			 name);
		return MHD_NO;
	}
	for (size_t i = 0; i < vl; i++) {
		unsigned char c = (unsigned char)value[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f) {
			snprintf(f->why, sizeof(f->why),
				 "header %s has a control byte (0x%02x) in its value", name, c);
			return MHD_NO;
		}
	}
	if (!f->end)
		return MHD_YES;
	if (f->line_end && !crlf_then(f->line_end, key)) {
		snprintf(f->why, sizeof(f->why),
			 "the line before header %s does not end in CRLF (a bare LF, a NUL in a "
			 "value, or a folded line)",
			 name);
		return MHD_NO;
	}
	if (value <= key + kl || value - (key + kl) > OWS_MAX ||
	    strspn(key + kl + 1, " \t") < (size_t)(value - (key + kl) - 1)) {
		snprintf(f->why, sizeof(f->why),
			 "header %s is not one line of \"name: value\" (a folded line?)", name);
		return MHD_NO;
	}
	f->line_end = value + vl;
	return MHD_YES;
}

/* Why the request's header fields are not sound, into why; false if they
 * are.  method and version: the access handler's. */
static bool fields_bad(struct req *q, const char *method, const char *version, char *why,
		       size_t len)
{
	static atomic_bool warned;
	struct fields f = { .why = "" };
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	bool layout = MHD_VERSION < 0x01000000 && ci && method && version;

	/* The request line ends in its version; a version libmicrohttpd does
	 * not keep in place leaves the layout unknown. */
	if (layout && version > method && version < method + ci->header_size) {
		f.end = method + ci->header_size;
		f.line_end = version + strlen(version);
	} else if (!atomic_exchange(&warned, true)) {
		pr_warn("this libmicrohttpd does not show how a request head was laid out: a "
			"folded header line, a NUL in a value or a bare LF is not detected");
	}
	if (MHD_get_connection_values(q->conn, MHD_HEADER_KIND, check_field, &f) < 0 || f.why[0])
		goto bad;
	if (f.end && f.line_end && !(f.end == f.line_end + 4 && !memcmp(f.line_end, "\0\0\0", 4))) {
		snprintf(f.why, sizeof(f.why),
			 "the head's last line does not end in CRLF (a bare LF, a NUL in a value, "
			 "or a folded line)");
		goto bad;
	}
	return false;
bad:
	snprintf(why, len, "%s", f.why[0] ? f.why : "the header fields cannot be read");
	return true;
}

/* What can be decided from the request line and headers alone.  0 to go on
 * reading the body, or 1 when an answer was queued. */
static int early(struct req *q, const char *url, const char *method, const char *version)
{
	struct server *s = q->srv;
	char err[256];
	const char *v;
	long bad;
	int ret;

	/* Before the token and the route: a target that cannot be read the
	 * same way by everyone is refused whoever sends it. */
	bad = target_bad_byte(q, url, version);
	if (bad >= 0) {
		reply_error(q, 400, "bad_request",
			    "the request target has a control byte (0x%02x) at offset %ld: "
			    "targets are printable",
			    bad == (long)q->target_len ? 0 : (unsigned char)q->target[bad], bad);
		return 1;
	}
	if (fields_bad(q, method, version, err, sizeof(err)) ||
	    framing_bad(q, version, err, sizeof(err))) {
		reply_error_hdr(q, 400, "Connection", "close", "bad_request",
				"%s: refused, and the connection closed", err);
		return 1;
	}
	/* Without a token, only loopback clients reach thawd, but a browser's
	 * page can be made to: a DNS name rebound to 127.0.0.1 sends its own
	 * name as Host.  A Host that is not a loopback one is refused. */
	if (!s->auth.enabled) {
		v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
		if (v && !host_header_is_loopback(v)) {
			char host[80];

			copy_for_log(host, sizeof(host), v);
			reply_error(q, 403, "forbidden",
				    "Host \"%s\" is not a loopback name: without a token thawd "
				    "answers only localhost, 127.x.y.z and [::1]",
				    host);
			return 1;
		}
	}
	ret = route_parse(url, &q->route, err, sizeof(err));
	if (route_scope(q->route.kind) != AUTH_SCOPE_NONE) {
		unsigned have = auth_scopes(&s->auth, MHD_lookup_connection_value(
								 q->conn, MHD_HEADER_KIND,
								 MHD_HTTP_HEADER_AUTHORIZATION));

		if (!have) {
			reply_error_hdr(q, 401, "WWW-Authenticate", "Bearer realm=\"thaw\"",
					"unauthorized",
					"a valid \"Authorization: Bearer <token>\" is needed");
			return 1;
		}
		if (ret == 0 && !(have & route_scope(q->route.kind))) {
			reply_error(q, 403, "forbidden", "this token does not open %s (a %s route)",
				    q->path,
				    route_scope(q->route.kind) == AUTH_SCOPE_DATA ? "data-plane"
										  : "control-plane");
			return 1;
		}
	}
	if (ret == -EINVAL) {
		reply_error(q, 400, "invalid_id", "%s", err);
		return 1;
	}
	if (ret) {
		reply_error(q, 404, "not_found", "no such path: %s", q->path);
		return 1;
	}
	/* A routed request's method and body are its function's business: the
	 * body streams through to the instance, never held here. */
	if (q->route.kind == ROUTE_FUNCTION_PROXY)
		return 0;
	if (!(route_methods(q->route.kind) & q->method)) {
		reply_error_hdr(q, 405, "Allow", route_allow(q->route.kind), "method_not_allowed",
				"%s is not allowed on %s (allowed: %s)", q->method_str, q->path,
				route_allow(q->route.kind));
		return 1;
	}
	v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (v) {
		char *end;
		unsigned long long n;

		errno = 0;
		n = strtoull(v, &end, 10);
		if (errno || end == v || *end || n > s->opts.max_body) {
			reply_error(q, 413, "too_large", "the body is larger than %zu bytes",
				    s->opts.max_body);
			return 1;
		}
	}
	return 0;
}

static int append_body(struct req *q, const char *data, size_t n)
{
	size_t max = q->srv->opts.max_body;

	if (q->too_big)
		return 0;
	if (q->len + n > max) {
		/* Chunked bodies have no Content-Length: refused when they
		 * grow too large; what is left is read and dropped. */
		q->too_big = true;
		free(q->body);
		q->body = NULL;
		q->len = q->cap = 0;
		return 0;
	}
	if (ARRAY_GROW(q->body, q->cap, q->len + n + 1, 4096))
		return -ENOMEM;
	memcpy(q->body + q->len, data, n);
	q->len += n;
	q->body[q->len] = '\0';
	return 0;
}

/* A step of a routed request (server/proxy.h): its head in, a part of its
 * body, its end.  Its head and body must come within --request-timeout, as
 * any request's (a client trickling its body a byte at a time would hold an
 * instance's slot for as long as it likes), but not the time thawd itself
 * takes between reading them: that stops the clock (conn_hold).  After the
 * last step the request is all in, and its processing is not counted. */
static enum MHD_Result proxy_step(struct req *q, const char *method, const char *data,
				  size_t *size)
{
	bool last = size && !*size;
	uint64_t left;
	int ret;

	if (!conn_hold(q, &left)) {
		pr_warn("%s %s: the request took more than %u s to arrive: connection closed",
			q->method_str, q->path, q->srv->opts.request_timeout);
		return MHD_NO;
	}
	ret = proxy_request(q, method, data, size);
	if (!ret && !last)
		conn_resume(q, left);
	return ret ? MHD_NO : MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	struct req *q = *con_cls;

	if (!q || !q->conn) {
		const union MHD_ConnectionInfo *ci;

		if (!q) {
			q = calloc(1, sizeof(*q));
			if (!q)
				return MHD_NO;
			*con_cls = q;
			q->srv = s;
		}
		q->conn = conn;
		q->start_ns = now_ns();
		ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		q->ct = ci ? ci->socket_context : NULL;
		q->method = method_parse(method);
		copy_for_log(q->method_str, sizeof(q->method_str), method);
		copy_for_log(q->path, sizeof(q->path), url);
		if (early(q, url, method, version) || q->answered)
			return MHD_YES;
		if (q->route.kind == ROUTE_FUNCTION_PROXY)
			return proxy_step(q, method, NULL, NULL);
		return MHD_YES;
	}
	if (q->answered) {
		/* Answered early: whatever body follows is dropped. */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (q->route.kind == ROUTE_FUNCTION_PROXY)
		return proxy_step(q, method, upload_data, upload_data_size);
	if (*upload_data_size) {
		if (append_body(q, upload_data, *upload_data_size)) {
			*upload_data_size = 0;
			return reply_error(q, 500, "internal", "out of memory reading the body")
				       ? MHD_NO
				       : MHD_YES;
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!conn_request_in(q)) {
		/* Sent too slowly: nothing is done for it, and the connection
		 * is closed (by the reaper, or here if it has not come yet). */
		pr_warn("%s %s: the request took more than %u s to arrive: refused, connection "
			"closed",
			q->method_str, q->path, s->opts.request_timeout);
		return MHD_NO;
	}
	if (q->too_big)
		return reply_error(q, 413, "too_large", "the body is larger than %zu bytes",
				   s->opts.max_body)
			       ? MHD_NO
			       : MHD_YES;
	{
		char err[256];

		if (content_type_check(q->method,
				       MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND,
								   MHD_HTTP_HEADER_CONTENT_TYPE),
				       q->body, q->len, err, sizeof(err)))
			return reply_error(q, 415, "unsupported_media_type", "%s", err) ? MHD_NO
											  : MHD_YES;
	}
	route_table_dispatch(q);
	if (!q->answered && reply_error(q, 500, "internal", "no answer was made"))
		return MHD_NO;
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct server *s = cls;
	struct req *q = *con_cls;
	const union MHD_ConnectionInfo *ci;

	/* The next request on this connection has its own time to arrive. */
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci && ci->socket_context) {
		pthread_mutex_lock(&s->conn_lock);
		conn_set_deadline(s, ci->socket_context, next_deadline(s));
		pthread_mutex_unlock(&s->conn_lock);
	}
	if (!q)
		return;
	if (!q->conn) {
		/* Refused by libmicrohttpd before it reached the access handler
		 * (malformed headers): libmicrohttpd answered it. */
		free(q->raw_target);
		free(q);
		*con_cls = NULL;
		return;
	}
	proxy_request_done(q);
	/* Sent (or its client gone): the drain it asked for may begin. */
	if (q->drain_after && s->drain_hook)
		s->drain_hook();
	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		pr_info("%s %s %u %.1f ms%s", q->method_str, q->path, q->status,
			ms_since(q->start_ns), q->note);
	else
		pr_info("%s %s %u %.1f ms%s (connection ended early: %d)", q->method_str, q->path,
			q->status, ms_since(q->start_ns), q->note, (int)toe);
	free(q->raw_target);
	free(q->body);
	free(q);
	*con_cls = NULL;
}

/* Paths are routed as they came: no unescaping, so that "%2e%2e" stays what
 * it is and is refused, never decoded into something else. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	return strlen(s);
}

/* libmicrohttpd's messages, at most MHD_LOG_PER_S a second: a client can
 * make it write one per connection it opens (over the limits), and the log
 * must not grow at the client's pace. */
#define MHD_LOG_PER_S 20

__attribute__((format(printf, 2, 0)))
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t window;
	static unsigned logged, dropped;
	uint64_t sec = now_ns() / 1000000000ull;
	unsigned was_dropped = 0;
	bool drop;
	char msg[512];
	size_t n;

	(void)cls;
	pthread_mutex_lock(&lock);
	if (sec != window) {
		was_dropped = dropped;
		window = sec;
		logged = dropped = 0;
	}
	drop = logged >= MHD_LOG_PER_S;
	if (drop)
		dropped++;
	else
		logged++;
	pthread_mutex_unlock(&lock);
	if (was_dropped)
		pr_warn("libmicrohttpd: %u more message(s) not logged (more than %d a second)",
			was_dropped, MHD_LOG_PER_S);
	if (drop)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	/* What it says of any TLS handshake that failed. */
	if (strstr(msg, "handshake message out of context"))
		pr_warn("libmicrohttpd: %s (a TLS handshake failed: plain HTTP to this HTTPS "
			"port, or a client that does not trust the certificate)",
			msg);
	else
		pr_warn("libmicrohttpd: %s", msg);
}

/* ---- the daemon ---- */

void http_init(struct server *s)
{
	pthread_mutex_init(&s->conn_lock, NULL);
	cond_init_monotonic(&s->conn_cv);
}

void http_release(struct server *s)
{
	pthread_cond_destroy(&s->conn_cv);
	pthread_mutex_destroy(&s->conn_lock);
}

void http_quiesce(struct server *s)
{
	MHD_socket fd;

	if (!s->mhd)
		return;
	fd = MHD_quiesce_daemon(s->mhd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

void http_stop(struct server *s)
{
	if (s->mhd) {
		MHD_stop_daemon(s->mhd);
		s->mhd = NULL;
	}
	reaper_stop(s);
}

/* Why the address cannot be listened on: bind a socket of our own to it, as
 * libmicrohttpd does (SO_REUSEADDR, which lets no two sockets listen on one
 * address), and return its errno (0 if that works). */
static int listen_errno(const struct addrinfo *ai)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, err = 0;

	if (fd < 0)
		return errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1) < 0)
		err = errno;
	close(fd);
	return err;
}

int http_listen_precheck(const char *listen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
	char host[128], port[8];
	int err;

	/* What cannot be parsed or resolved is server_start's to say. */
	if (listen_addr_parse(listen, host, sizeof(host), port, sizeof(port)) ||
	    getaddrinfo(host, port, &hints, &ai))
		return 0;
	err = listen_errno(ai);
	freeaddrinfo(ai);
	if (err == EADDRINUSE)
		pr_err("cannot listen on %s: the address is in use (another thawd, or another "
		       "program, listens there)",
		       listen);
	else if (err == EADDRNOTAVAIL)
		pr_err("cannot listen on %s: not an address of this host", listen);
	else
		return 0; /* anything else: server_start tries, and says */
	return -err;
}

int http_start(struct server *s)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
	char host[128], port[8];
	const union MHD_DaemonInfo *info;
	struct MHD_OptionItem tls_opts[3] = { { MHD_OPTION_END, 0, NULL } };
	unsigned flags;
	int ret;

	if (listen_addr_parse(s->listen, host, sizeof(host), port, sizeof(port))) {
		pr_err("--listen %s: expected HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)",
		       s->listen);
		return -EINVAL;
	}
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret) {
		pr_err("--listen %s: %s", s->listen, gai_strerror(ret));
		return -EINVAL;
	}
	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
		MHD_USE_ITC | MHD_USE_ERROR_LOG;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (s->tls.cert) {
		flags |= MHD_USE_TLS;
		tls_opts[0] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls.cert };
		tls_opts[1] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls.key };
		tls_opts[2] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	}
	ret = reaper_start(s);
	if (ret) {
		freeaddrinfo(ai);
		return ret;
	}
	/* No MHD_OPTION_LISTENING_ADDRESS_REUSE (SO_REUSEPORT): a second
	 * thawd, or anything else, must fail to listen on thawd's address, not
	 * share its connections. */
	s->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK,
		on_uri, s, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, s,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->opts.max_conns,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->opts.max_conns_per_ip,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_ARRAY, tls_opts,
		MHD_OPTION_END);
	if (!s->mhd) {
		int err = listen_errno(ai);

		freeaddrinfo(ai);
		reaper_stop(s);
		if (err == EADDRINUSE)
			pr_err("cannot listen on %s: the address is in use (another thawd, or "
			       "another program, listens there)",
			       s->listen);
		else if (err == EADDRNOTAVAIL)
			pr_err("cannot listen on %s: not an address of this host", s->listen);
		else if (err)
			pr_err("cannot listen on %s: %s", s->listen, strerror(err));
		else
			pr_err("cannot listen on %s (libmicrohttpd could not start)", s->listen);
		return err ? -err : -EIO;
	}
	freeaddrinfo(ai);
	info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : (uint16_t)atoi(port);
	pr_info("listening on %s://%s%s%s:%u, data in %s", s->tls.cert ? "https" : "http",
		strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", s->port,
		s->cfg.data_dir);
	return 0;
}

