/* SPDX-License-Identifier: Apache-2.0 */
/* proxy.c — see proxy.h.
 *
 * One transfer per request, driven from the connection's thread through a
 * curl multi handle of its own (a "link": the multi and its easy handle,
 * which keep a connection to one instance for the next request there), so
 * that the body can be handed over piece by piece as libmicrohttpd reads it,
 * and the answer pulled as libmicrohttpd sends it.  The request's slot is let
 * go as soon as the instance has answered in full, before the client has
 * read the end of it: the client's next request finds the slot free.
 */
#define LOG_PREFIX "proxy: "
#include "server/proxy.h"
#include "server/proxy_headers.h"
#include "common/log.h"
#include "common/util.h"
#include "restore/shim.h"
#include "server/internal.h"
#include "server/errors.h"
#include "server/pool.h"
#include "server/remote_sync.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define PREFIX "/function/"
/* How often a wait looks whether the client left or thawd stops. */
#define POLL_MS 100
/* Bytes of an answer held for a slow client before the instance is made
 * to wait (its connection is no longer read). */
#define ANSWER_HELD_MAX (256 * 1024)
#define ANSWER_BLOCK    (32 * 1024)
#define HEADERS_MAX     128
/* An instance's answer head: a longer line, or more in all, is no answer
 * (502), not something to pass on cut. */
#define HEAD_LINE_MAX   (16 * 1024)
#define HEAD_MAX        (64 * 1024)
#define RETRY_AFTER     "1"
#define CONNECT_TIMEOUT_MS 10000L

struct link {
	struct server *srv; /* counted in its links (server_fd_budget) */
	CURLM *multi;
	CURL *easy;
	char err[CURL_ERROR_SIZE];
};

/* How far a transfer is driven before the thread goes back to
 * libmicrohttpd. */
enum until {
	UNTIL_BODY_WANTED, /* the instance asks for the body (the request went out) */
	UNTIL_BODY_TAKEN,  /* this part of the body is handed over */
	UNTIL_HEADERS,     /* the answer's head is in */
	UNTIL_DATA,        /* some of the answer's body is here */
};

struct proxy_call {
	struct server *srv;
	struct req *q;        /* NULL once the request is over */
	char *target;         /* path and query, for the instance */
	struct curl_slist *hdrs;
	curl_off_t body_len;  /* the request's body: -1 chunked */
	/* The slot and the transfer. */
	struct pool_slot slot;
	struct link *link;
	double wait_ms;
	/* The request's body, as libmicrohttpd hands it over. */
	const char *in;
	size_t in_len;
	/* The answer. */
	long status;
	curl_off_t answer_len; /* -1: not known */
	char **names, **values; /* its headers, less the hop-by-hop ones */
	size_t nh;
	size_t head_bytes;
	long long answer_cl; /* its Content-Length, -1: none */
	bool answer_chunked;
	char conn_names[PROXY_CONN_NAMES_MAX]; /* what its Connection header names */
	char *buf;
	size_t off, len, cap;
	atomic_int refs; /* the request's, and its answer's while libmicrohttpd has it */
	int client_fd;
	unsigned timeout_was; /* libmicrohttpd's idle timeout of the connection */
	int attempts;
	CURLcode result;
	char fn[64];
	char method[32];
	char instance[64];
	char err[CURL_ERROR_SIZE];
	bool head;
	bool has_body;
	bool zero_length;     /* Content-Length: 0, to pass on as such */
	bool watch_client;
	bool timeout_set;
	bool have_slot;
	bool learned; /* asked the remote for its function (remote_sync_ensure) */
	bool active;          /* in the link's multi */
	bool sent;            /* a request went out on a connection */
	bool done;
	bool cut;             /* ended by thawd: the client left, or thawd stops */
	bool gone;            /* the client left */
	bool stuck;           /* this thread is left in an instance's network namespace */
	bool local;           /* failed for want of thawd's own resources (descriptors,
			       * memory, ports): not the instance's failure */
	bool in_eof, read_paused;
	bool headers_done, write_paused;
	/* Whether the connection may take another request after this one: the
	 * answer's end was given by its framing (Content-Length or chunked, or
	 * no body), and it came after the whole request had gone. */
	bool answer_framed;
	bool answered_early;
};

/* ---- this host's network namespace, and libcurl ---- */

static int home_netns = -1;
static pthread_once_t home_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t home_lock = PTHREAD_MUTEX_INITIALIZER;

static void curl_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* thawd's own namespace is its main thread's: no thread of thawd but one
 * making a socket below ever leaves it.  Opened by the first routed
 * request, or by a later one where that failed: a failure for want of
 * descriptors passes, and must not end routing for good. */
static int home_open(void)
{
	int fd;

	pthread_once(&home_once, curl_init);
	pthread_mutex_lock(&home_lock);
	if (home_netns < 0) {
		fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			pr_perror("open /proc/self/ns/net: this routed request answers 503");
		home_netns = fd;
	}
	fd = home_netns;
	pthread_mutex_unlock(&home_lock);
	return fd;
}

/* ---- links ---- */

/* Is err thawd's own want (of descriptors, memory, buffers, local ports),
 * which says nothing of the instance? */
static bool local_errno(int err)
{
	return errno_own_want(err) || err == EADDRNOTAVAIL;
}

/* A new link, counted against srv's links_max: NULL with errno EAGAIN when
 * that many are open already, ENOMEM when out of memory (or descriptors). */
static struct link *link_new(struct server *srv)
{
	struct link *l;

	if (atomic_fetch_add(&srv->links, 1) >= srv->links_max) {
		atomic_fetch_sub(&srv->links, 1);
		errno = EAGAIN;
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		atomic_fetch_sub(&srv->links, 1);
		errno = ENOMEM;
		return NULL;
	}
	l->srv = srv;
	l->multi = curl_multi_init();
	l->easy = curl_easy_init();
	if (!l->multi || !l->easy) {
		proxy_link_free(l);
		errno = ENOMEM;
		return NULL;
	}
	return l;
}

void proxy_link_free(void *p)
{
	struct link *l = p;

	if (!l)
		return;
	if (l->easy)
		curl_easy_cleanup(l->easy);
	if (l->multi)
		curl_multi_cleanup(l->multi);
	atomic_fetch_sub(&l->srv->links, 1);
	free(l);
}

/* ---- calls ---- */

static void headers_clear(struct proxy_call *c)
{
	for (size_t i = 0; i < c->nh; i++) {
		free(c->names[i]);
		free(c->values[i]);
	}
	c->nh = 0;
}

static void call_put(struct proxy_call *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	headers_clear(c);
	free(c->names);
	free(c->values);
	curl_slist_free_all(c->hdrs);
	proxy_link_free(c->link);
	free(c->target);
	free(c->buf);
	free(c);
}

/* A method as HTTP writes it: a token of at most 31 characters. */
static bool method_ok(const char *m)
{
	size_t n = strlen(m);

	return n && n < 32 && strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					"0123456789!#$%&'*+-.^_`|~") == n;
}

/* The instance's path and query: what follows /function/<id> in the raw
 * request target, "/" for nothing. */
static char *target_of(const struct req *q)
{
	const char *rest;
	char *t = NULL;

	if (!q->raw_target || strncmp(q->raw_target, PREFIX, strlen(PREFIX)))
		return NULL;
	rest = q->raw_target + strlen(PREFIX) + strlen(q->route.id);
	if (asprintf(&t, "%s%s", *rest == '/' ? "" : "/", rest) < 0)
		return NULL;
	return t;
}

/* The call for request q: 0 and *out, -EINVAL (a Connection header that
 * lists too much to be filtered) or -ENOMEM. */
static int call_new(struct req *q, const char *method, struct proxy_call **out)
{
	struct proxy_call *c = calloc(1, sizeof(*c));
	const union MHD_ConnectionInfo *ci;
	const char *cl, *te;
	int ret;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	atomic_init(&c->refs, 1);
	c->srv = q->srv;
	c->q = q;
	c->client_fd = -1;
	c->answer_len = -1;
	snprintf(c->fn, sizeof(c->fn), "%s", q->route.id);
	snprintf(c->method, sizeof(c->method), "%s", method);
	c->head = !strcmp(method, "HEAD");
	c->target = target_of(q);
	cl = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	te = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND,
					 MHD_HTTP_HEADER_TRANSFER_ENCODING);
	/* The framing was checked (http.c): one Content-Length of digits, or
	 * chunked. */
	if (te) {
		c->has_body = true;
		c->body_len = -1;
	} else if (cl) {
		c->body_len = (curl_off_t)strtoull(cl, NULL, 10);
		c->has_body = c->body_len > 0;
		c->zero_length = !c->has_body;
	}
	ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		c->client_fd = ci->connect_fd;
	ret = c->target ? proxy_request_headers(q->conn, c->srv->auth.enabled,
						  c->srv->tls.cert ? "https" : "http", &c->hdrs)
			: -ENOMEM;
	if (ret) {
		call_put(c);
		return ret;
	}
	*out = c;
	return 0;
}

/* ---- libcurl's callbacks ---- */

/* The socket is made in the instance's network namespace (a socket stays
 * in the one it was made in), by this thread, which goes back at once. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct proxy_call *c = arg;
	int fd, err;

	if (setns(c->slot.netns_fd, CLONE_NEWNET)) {
		c->local = local_errno(errno);
		snprintf(c->err, sizeof(c->err), "cannot enter the network namespace of instance %s: %s",
			 c->instance, strerror(errno));
		return CURL_SOCKET_BAD;
	}
	fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	err = errno;
	for (int k = 0; setns(home_netns, CLONE_NEWNET); k++) {
		if (k == 3) {
			/* No socket this thread makes from now on may be
			 * trusted: its connection is closed without an answer,
			 * and the thread ends with it. */
			pr_err("cannot go back to thawd's network namespace: %s; the connection "
			       "is closed", strerror(errno));
			c->stuck = true;
			if (fd >= 0)
				close(fd);
			return CURL_SOCKET_BAD;
		}
		usleep(1000);
	}
	if (fd < 0) {
		c->local = local_errno(err);
		snprintf(c->err, sizeof(c->err), "socket: %s", strerror(err));
		return CURL_SOCKET_BAD;
	}
	return fd;
}

/* Connected (or a kept connection taken): the request goes out now. */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port,
		     int local_port)
{
	((struct proxy_call *)arg)->sent = true;
	return CURL_PREREQFUNC_OK;
}

static size_t on_read(char *buf, size_t size, size_t n, void *arg)
{
	struct proxy_call *c = arg;
	size_t k = MIN(size * n, c->in_len);

	if (k) {
		memcpy(buf, c->in, k);
		c->in += k;
		c->in_len -= k;
		return k;
	}
	if (c->in_eof)
		return 0;
	c->read_paused = true;
	return CURL_READFUNC_PAUSE;
}

/* The answer cannot be passed on as the instance wrote it: the transfer
 * fails (502 before the answer began). */
static size_t head_refused(struct proxy_call *c, const char *why, size_t n)
{
	snprintf(c->err, sizeof(c->err), "its answer's head %s (%zu)", why, n);
	return 0;
}

/* libcurl hands over the answer's head a line at a time: the status line,
 * the fields, the empty line; after the body, the trailers, which are
 * dropped (never made headers: a trailer is what the instance could not
 * vouch for before the body). */
static size_t on_header(char *b, size_t size, size_t n, void *arg)
{
	struct proxy_call *c = arg;
	size_t len = size * n, nl, vl;
	const char *colon, *v, *end = b + len;
	char **names, **values;

	if (c->headers_done)
		return len; /* a trailer */
	c->head_bytes += len;
	if (len > HEAD_LINE_MAX)
		return head_refused(c, "has a line longer than 16 KiB", len);
	if (c->head_bytes > HEAD_MAX)
		return head_refused(c, "is longer than 64 KiB", c->head_bytes);
	if (len >= 5 && !memcmp(b, "HTTP/", 5)) {
		/* A status line: a new head (after a 100 Continue, say). */
		headers_clear(c);
		c->conn_names[0] = '\0';
		c->answer_framed = c->answer_chunked = false;
		c->answer_cl = -1;
		return len;
	}
	if (len && (b[0] == '\r' || b[0] == '\n')) {
		long code = 0;

		curl_easy_getinfo(c->link->easy, CURLINFO_RESPONSE_CODE, &code);
		if (code >= 200) {
			c->status = code;
			c->headers_done = true;
			if (c->head || code == 204 || code == 304)
				c->answer_framed = true;
			if (c->has_body && !c->in_eof)
				c->answered_early = true;
			c->answer_len = c->answer_chunked ? -1 : c->answer_cl;
		}
		return len;
	}
	colon = memchr(b, ':', len);
	if (!colon || colon == b || b[0] == ' ' || b[0] == '\t')
		return len;
	if (c->nh >= HEADERS_MAX)
		return head_refused(c, "has more than 128 fields", c->nh + 1);
	nl = (size_t)(colon - b);
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	for (vl = (size_t)(end - v); vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' ||
					    v[vl - 1] == ' ' || v[vl - 1] == '\t');
	     vl--)
		;
	/* Where the body ends, read here rather than from libcurl (which knows
	 * a Content-Length only once the head is over). */
	if (nl == 14 && !strncasecmp(b, "content-length", nl)) {
		char num[24];
		char *e;
		long long cl;

		snprintf(num, sizeof(num), "%.*s", (int)MIN(vl, sizeof(num) - 1), v);
		errno = 0;
		cl = strtoll(num, &e, 10);
		if (!vl || vl >= sizeof(num) || *e || errno || cl < 0 ||
		    (c->answer_cl >= 0 && c->answer_cl != cl))
			return head_refused(c, "has a Content-Length that is not one number", vl);
		c->answer_cl = cl;
		c->answer_framed = true;
	} else if (nl == 17 && !strncasecmp(b, "transfer-encoding", nl)) {
		/* libcurl reads chunked, and refuses what it cannot frame. */
		c->answer_chunked = c->answer_framed = true;
	} else if (nl == 10 && !strncasecmp(b, "connection", nl) &&
		   !proxy_conn_names_add(c->conn_names, sizeof(c->conn_names), v, vl)) {
		return head_refused(c, "has a Connection header that lists too much", vl);
	}
	if (proxy_hop_by_hop(b, nl))
		return len;
	names = realloc(c->names, (c->nh + 1) * sizeof(*names));
	if (names)
		c->names = names;
	values = realloc(c->values, (c->nh + 1) * sizeof(*values));
	if (values)
		c->values = values;
	if (!names || !values)
		return 0; /* out of memory: the transfer fails */
	c->names[c->nh] = strndup(b, nl);
	c->values[c->nh] = strndup(v, vl);
	if (!c->names[c->nh] || !c->values[c->nh]) {
		free(c->names[c->nh]);
		free(c->values[c->nh]);
		return 0;
	}
	c->nh++;
	return len;
}

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
	struct proxy_call *c = arg;
	size_t len = size * n;

	if (c->len - c->off >= ANSWER_HELD_MAX) {
		c->write_paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (c->off) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (ARRAY_GROW(c->buf, c->cap, c->len + len, 16384))
		return 0; /* out of memory: the transfer fails */
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	return len;
}

/* ---- transfers ---- */

/* 0, -EAGAIN (links_max links are open), or -ENOMEM. */
static int transfer_begin(struct proxy_call *c)
{
	struct link *l = c->slot.link ? c->slot.link : link_new(c->srv);
	char url[64];
	CURL *e;
	CURLcode rc = CURLE_OK;

	c->slot.link = NULL;
	if (!l)
		return errno == EAGAIN ? -EAGAIN : -ENOMEM;
	c->link = l;
	e = l->easy;
	l->err[0] = '\0';
	curl_easy_reset(e);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", c->slot.port);
	c->sent = c->done = c->headers_done = c->read_paused = c->write_paused = false;
	c->answer_framed = c->answered_early = c->answer_chunked = false;
	c->local = false;
	c->answer_cl = -1;
	c->head_bytes = 0;
	c->conn_names[0] = '\0';
	c->result = CURLE_OK;
	c->status = 0;
	c->answer_len = -1;
	c->off = c->len = 0;
	headers_clear(c);
	c->attempts++;
	/* Each option's failure is out of memory: the first one is kept. */
#define SET(opt, val)                                   \
	do {                                            \
		if (rc == CURLE_OK)                     \
			rc = curl_easy_setopt(e, opt, val); \
	} while (0)
	{
		char *full = NULL;

		if (asprintf(&full, "%s%s", url, c->target) < 0)
			return -ENOMEM;
		SET(CURLOPT_URL, full);
		free(full); /* libcurl keeps its own copy */
	}
	SET(CURLOPT_PATH_AS_IS, 1L);
	SET(CURLOPT_PROXY, "");
	SET(CURLOPT_PROTOCOLS_STR, "http");
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	SET(CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	SET(CURLOPT_TCP_NODELAY, 1L);
	SET(CURLOPT_ERRORBUFFER, l->err);
	SET(CURLOPT_HTTPHEADER, c->hdrs);
	SET(CURLOPT_OPENSOCKETFUNCTION, open_socket);
	SET(CURLOPT_OPENSOCKETDATA, c);
	SET(CURLOPT_PREREQFUNCTION, on_prereq);
	SET(CURLOPT_PREREQDATA, c);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, c);
	SET(CURLOPT_WRITEFUNCTION, on_write);
	SET(CURLOPT_WRITEDATA, c);
	/* The method by name whenever there is a body: libcurl's upload is a
	 * PUT, which a GET with a body would become. */
	if (c->head)
		SET(CURLOPT_NOBODY, 1L);
	else if (strcmp(c->method, "GET") || c->has_body || c->zero_length)
		SET(CURLOPT_CUSTOMREQUEST, c->method);
	if (!c->head && (c->has_body || c->zero_length)) {
		SET(CURLOPT_UPLOAD, 1L);
		SET(CURLOPT_INFILESIZE_LARGE, c->has_body ? c->body_len : (curl_off_t)0);
		SET(CURLOPT_READFUNCTION, on_read);
		SET(CURLOPT_READDATA, c);
	}
#undef SET
	if (rc != CURLE_OK || curl_multi_add_handle(l->multi, e) != CURLM_OK)
		return -ENOMEM;
	c->active = true;
	return 0;
}

/* Whether the link's connection may carry another request: only after an
 * exchange whose every byte is accounted for.  Anything else (a failure, a
 * transfer cut, an answer that ends only with the connection, an answer
 * that came before the whole body had gone, which the function may not
 * have read) leaves bytes on it that the next request would be read with:
 * the next client's request would be parsed as the end of this one, and
 * this one's tail as the next (request smuggling). */
static bool link_reusable(const struct proxy_call *c)
{
	return c->done && c->result == CURLE_OK && !c->cut && c->answer_framed &&
	       !c->answered_early;
}

/* The transfer is over, or given up: out of the multi; the slot, and the
 * link with it if its connection is sound, go back (broken: the instance
 * could not be reached). */
static void transfer_end(struct proxy_call *c, bool broken)
{
	if (c->active) {
		curl_multi_remove_handle(c->link->multi, c->link->easy);
		c->active = false;
	}
	if (c->link && c->link->err[0] && !c->err[0])
		snprintf(c->err, sizeof(c->err), "%s", c->link->err);
	/* A connection is kept for a later request only while half the links
	 * are free: the others are for requests now. */
	if (c->link && atomic_load(&c->srv->links) > c->srv->links_max / 2) {
		proxy_link_free(c->link);
		c->link = NULL;
	}
	if (c->have_slot) {
		struct link *keep = link_reusable(c) ? c->link : NULL;

		if (!keep)
			proxy_link_free(c->link); /* its connection closes with it */
		pool_release(c->srv->pool, &c->slot, keep, broken);
		c->have_slot = false;
		c->link = NULL;
	}
}

static void cut(struct proxy_call *c, const char *why)
{
	c->cut = c->done = true;
	c->result = CURLE_ABORTED_BY_CALLBACK;
	snprintf(c->err, sizeof(c->err), "%s", why);
	transfer_end(c, false);
}

static bool reached(const struct proxy_call *c, enum until u)
{
	if (c->done)
		return true;
	switch (u) {
	case UNTIL_BODY_WANTED:
		return c->read_paused || c->headers_done;
	case UNTIL_BODY_TAKEN:
		return !c->in_len;
	case UNTIL_HEADERS:
		return c->headers_done;
	case UNTIL_DATA:
		return c->len > c->off;
	}
	return true;
}

static void unpause(struct proxy_call *c)
{
	int how = (c->write_paused ? CURLPAUSE_RECV : 0) | (c->read_paused ? CURLPAUSE_SEND : 0);

	curl_easy_pause(c->link->easy, how);
}

/* Move the transfer on until u, the transfer's end, or the client's. */
static void drive(struct proxy_call *c, enum until u)
{
	while (c->active && !reached(c, u)) {
		struct curl_waitfd w = { .fd = c->client_fd, .events = CURL_WAIT_POLLIN };
		struct link *l = c->link;
		CURLMcode mc;
		CURLMsg *m;
		int running, left, n = 0;

		mc = curl_multi_perform(l->multi, &running);
		while ((m = curl_multi_info_read(l->multi, &left)))
			if (m->msg == CURLMSG_DONE) {
				c->done = true;
				c->result = m->data.result;
			}
		if (mc != CURLM_OK && !c->done) {
			c->done = true;
			c->result = CURLE_OUT_OF_MEMORY;
			snprintf(c->err, sizeof(c->err), "%s", curl_multi_strerror(mc));
		}
		if (c->done) {
			long os_err = 0;

			/* thawd's own want (descriptors, memory, local ports) is no
			 * failure of the instance's. */
			if (c->result == CURLE_OUT_OF_MEMORY ||
			    (c->result != CURLE_OK && !c->sent &&
			     curl_easy_getinfo(l->easy, CURLINFO_OS_ERRNO, &os_err) == CURLE_OK &&
			     local_errno((int)os_err)))
				c->local = true;
			/* Nothing went to the instance: it could not be reached. */
			transfer_end(c, c->result != CURLE_OK && !c->sent && !c->local);
			break;
		}
		if (reached(c, u))
			break;
		curl_multi_poll(l->multi, c->watch_client ? &w : NULL, c->watch_client ? 1 : 0,
				POLL_MS, &n);
		if (c->watch_client && (w.revents & CURL_WAIT_POLLIN)) {
			/* Bytes of a next request, or the end of the stream. */
			if (c->q && req_client_gone(c->q)) {
				c->gone = true;
				cut(c, "the client went away");
				break;
			}
			c->watch_client = false;
		}
		if (pool_stopping(c->srv->pool)) {
			cut(c, "thawd is stopping");
			break;
		}
	}
}

static bool client_gone(void *arg)
{
	return req_client_gone(arg);
}

static int answer_refusal(struct req *q, const struct pool_refusal *why)
{
	return reply_error_hdr(q, why->status, why->retry_after ? "Retry-After" : NULL,
			       why->retry_after ? RETRY_AFTER : NULL, why->code, "%s", why->msg);
}

/* A slot for the call (waiting for one if need be).  0; 1 when the
 * request was answered (refused); -errno when its connection is to be
 * closed (the client left). */
static int take_slot(struct proxy_call *c)
{
	struct pool_refusal why;
	int ret;

	if (c->have_slot)
		return 0;
	/* With --remote, any function of the fleet: one this host lacks is
	 * learned from the remote first (once, whoever else asks meanwhile). */
	if (!c->learned) {
		struct api_err e;
		char msg[512];

		c->learned = true;
		if (remote_sync_ensure(c->srv, c->fn, &e, msg, sizeof(msg)))
			return reply_error_hdr(c->q, e.status, e.status == 503 ? "Retry-After" : NULL,
					       e.status == 503 ? RETRY_AFTER : NULL, e.code, "%s", msg)
				       ? -EIO
				       : 1;
	}
	ret = pool_acquire(c->srv->pool, c->fn, client_gone, c->q, &c->slot, &why);
	if (ret == -ECONNABORTED) {
		c->gone = true;
		return ret;
	}
	if (ret)
		return answer_refusal(c->q, &why) ? -EIO : 1;
	c->have_slot = true;
	c->wait_ms += c->slot.wait_ms;
	snprintf(c->instance, sizeof(c->instance), "%s", c->slot.instance);
	return 0;
}

/* Forward the request until u, on another instance once if this one could
 * not be reached before any of it went there.  0, 1 (answered), -errno
 * (close the connection). */
static int forward(struct proxy_call *c, enum until u)
{
	int ret;

	for (;;) {
		if (!c->active && !c->done) {
			ret = take_slot(c);
			if (ret)
				return ret;
			ret = transfer_begin(c);
			if (ret) {
				transfer_end(c, false);
				return reply_error_hdr(c->q, 503, "Retry-After", RETRY_AFTER,
						       "no_capacity", "%s",
						       ret == -EAGAIN ? "thawd has as many connections to "
								"instances open as its file "
								"descriptor limit allows"
								      : "out of memory")
					       ? -EIO
					       : 1;
			}
		}
		drive(c, u);
		if (!c->done || c->result == CURLE_OK || c->sent || c->cut || c->stuck ||
		    c->local || c->attempts >= 2)
			return 0;
		pr_warn("%s %s: instance %s could not be reached (%s): the request goes to "
			"another",
			c->method, c->fn, c->instance, c->err);
		c->done = false;
		c->err[0] = '\0';
	}
}

/* The instance failed the request before its answer began. */
static int answer_failure(struct proxy_call *c)
{
	struct req *q = c->q;
	char how[96] = "";

	if (c->gone || c->stuck)
		return -ECONNRESET;
	if (c->cut)
		return reply_error(q, 503, "shutting_down", "thawd is stopping") ? -EIO : 1;
	if (c->local)
		return reply_error_hdr(q, 503, "Retry-After", RETRY_AFTER, "no_capacity",
				       "thawd could not reach instance %s of %s for want of its own "
				       "resources: %s",
				       c->instance, c->fn,
				       c->err[0] ? c->err : curl_easy_strerror(c->result))
			       ? -EIO
			       : 1;
	if (c->slot.pid > 0 && !proc_alive(c->slot.pid, c->slot.pid_start))
		snprintf(how, sizeof(how), " (its process has exited)");
	if (!c->sent)
		return reply_error(q, 502, "instance_failed",
				   "no instance of %s could be reached: %s (instance %s%s)", c->fn,
				   c->err[0] ? c->err : curl_easy_strerror(c->result), c->instance,
				   how)
			       ? -EIO
			       : 1;
	/* libcurl tries a kept connection that died once more on a new one:
	 * refused, that says the instance stopped serving meanwhile. */
	if (c->result == CURLE_COULDNT_CONNECT)
		return reply_error(q, 502, "instance_failed",
				   "instance %s of %s closed the connection without answering, "
				   "then refused a new one%s",
				   c->instance, c->fn, how)
			       ? -EIO
			       : 1;
	return reply_error(q, 502, "instance_failed",
			   "instance %s of %s failed the request before answering: %s%s",
			   c->instance, c->fn, c->err[0] ? c->err : curl_easy_strerror(c->result),
			   how)
		       ? -EIO
		       : 1;
}

/* libmicrohttpd asks for more of the answer. */
static ssize_t read_answer(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct proxy_call *c = cls;
	size_t n;

	if (c->len == c->off && !c->done) {
		if (c->write_paused) {
			c->write_paused = false;
			unpause(c);
		}
		drive(c, UNTIL_DATA);
	}
	if (c->len > c->off) {
		n = MIN(max, c->len - c->off);
		memcpy(buf, c->buf + c->off, n);
		c->off += n;
		return (ssize_t)n;
	}
	if (c->done && c->result == CURLE_OK)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Cut short: the client sees the connection close. */
	if (!c->cut)
		pr_warn("%s %s: instance %s failed during its answer: %s", c->method, c->fn,
			c->instance, c->err[0] ? c->err : curl_easy_strerror(c->result));
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void answer_free(void *cls)
{
	call_put(cls);
}

/* The instance's answer, its head in: sent as it is, its body streamed (or
 * all at once when it is all here already). */
static int answer_stream(struct proxy_call *c)
{
	struct req *q = c->q;
	struct MHD_Response *r;
	bool empty = !c->head && (c->status == 204 || c->status == 304);
	bool whole = !c->head && c->done && c->result == CURLE_OK;

	if (empty)
		r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	else if (whole)
		r = MHD_create_response_from_buffer(c->len - c->off, c->buf + c->off,
						    MHD_RESPMEM_MUST_COPY);
	else
		r = MHD_create_response_from_callback(c->answer_len >= 0 ? (uint64_t)c->answer_len
									: MHD_SIZE_UNKNOWN,
						      ANSWER_BLOCK, read_answer, c, answer_free);
	if (!r)
		return reply_error(q, 503, "no_capacity", "out of memory") ? -EIO : 1;
	if (!empty && !whole)
		atomic_fetch_add(&c->refs, 1); /* answer_free's */
	for (size_t i = 0; i < c->nh; i++) {
		/* Those its Connection names are hop-by-hop too. */
		if (proxy_conn_named(c->conn_names, c->names[i], strlen(c->names[i])))
			continue;
		if (MHD_add_response_header(r, c->names[i], c->values[i]) != MHD_YES)
			pr_debug("%s %s: header %s not passed on", c->method, c->fn, c->names[i]);
	}
	if (MHD_queue_response(q->conn, (unsigned)c->status, r) != MHD_YES) {
		MHD_destroy_response(r);
		return -EIO;
	}
	MHD_destroy_response(r);
	q->answered = true;
	q->status = (unsigned)c->status;
	return 0;
}

/* ---- the access handler's calls ---- */

static int begin(struct req *q, const char *method)
{
	struct proxy_call *c;
	const union MHD_ConnectionInfo *ci;
	int ret;

	if (!method_ok(method) || !strcmp(method, "CONNECT"))
		return reply_error_hdr(q, 405, "Allow", "any method but CONNECT",
				       "method_not_allowed", "%s is not forwarded", q->method_str)
			       ? -EIO
			       : 0;
	/* A draining host takes no new request: the balancer sends it to
	 * another host (503 with Retry-After is what it retries on). */
	if (server_refusing(q->srv))
		return reply_error_hdr(q, 503, "Retry-After", RETRY_AFTER, "shutting_down",
				       "thawd is %s: send it to another host",
				       atomic_load(&q->srv->stopping) ? "stopping" : "draining")
			       ? -EIO
			       : 0;
	if (home_open() < 0 || !q->srv->pool)
		return reply_error_hdr(q, 503, "Retry-After", RETRY_AFTER, "unavailable",
				       "thawd cannot route requests (see its log)")
			       ? -EIO
			       : 0;
	ret = call_new(q, method, &c);
	if (ret == -EINVAL)
		return reply_error(q, 400, "bad_request",
				   "the Connection header lists more than %d bytes of names",
				   PROXY_CONN_NAMES_MAX - 2)
			       ? -EIO
			       : 0;
	if (ret)
		return reply_error_hdr(q, 503, "Retry-After", RETRY_AFTER, "no_capacity",
				       "out of memory")
			       ? -EIO
			       : 0;
	q->proxy = c;
	atomic_fetch_add(&q->srv->routed_open, 1);
	/* Waiting for a slot or for the instance's answer is not idleness:
	 * libmicrohttpd would close the connection on return from a long one.
	 * thawd's own deadline (http.c) keeps watching idle connections. */
	ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_TIMEOUT);
	if (ci) {
		c->timeout_was = ci->connection_timeout;
		c->timeout_set = MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT,
							   0u) == MHD_YES;
	}
	ret = take_slot(c);
	if (ret)
		return ret < 0 ? ret : 0;
	/* A body goes to the instance as it arrives: the request's head goes
	 * now, so that an instance that cannot be reached is known before any
	 * of the body is read. */
	if (c->has_body && !c->head) {
		ret = forward(c, UNTIL_BODY_WANTED);
		if (ret)
			return ret < 0 ? ret : 0;
		if (c->done && !c->headers_done) {
			ret = answer_failure(c);
			return ret < 0 ? ret : 0;
		}
	}
	return 0;
}

static void feed(struct proxy_call *c, const char *data, size_t n)
{
	if (!c->active)
		return; /* the transfer is over: the rest of the body is dropped */
	c->in = data;
	c->in_len = n;
	if (c->read_paused) {
		c->read_paused = false;
		unpause(c);
	}
	drive(c, UNTIL_BODY_TAKEN);
	c->in = NULL;
	c->in_len = 0;
}

static int finish(struct proxy_call *c)
{
	int ret;

	c->in_eof = true;
	c->watch_client = c->client_fd >= 0;
	if (c->active && c->read_paused) {
		c->read_paused = false;
		unpause(c);
	}
	ret = forward(c, UNTIL_HEADERS);
	if (ret)
		return ret < 0 ? ret : 0;
	/* An answer that failed before any of it went to the client (cut
	 * short: shorter than its Content-Length, say) is no answer: 502,
	 * never a head that promises what will not come. */
	if (c->headers_done && !(c->done && c->result != CURLE_OK))
		ret = answer_stream(c);
	else
		ret = answer_failure(c);
	return ret < 0 ? ret : 0;
}

int proxy_request(struct req *q, const char *method, const char *data, size_t *size)
{
	struct proxy_call *c = q->proxy;
	int ret = 0;

	if (!size)
		ret = begin(q, method);
	else if (!c || q->answered)
		; /* answered already: the rest of the body is dropped */
	else if (*size)
		feed(c, data, *size);
	else
		ret = finish(c);
	if (size)
		*size = 0;
	c = q->proxy;
	if (c && c->gone)
		q->status = 499; /* for the log: nobody receives it */
	return ret;
}

void proxy_request_done(struct req *q)
{
	struct proxy_call *c = q->proxy;

	if (!c)
		return;
	if (c->active || c->have_slot) {
		if (!c->done)
			c->cut = c->gone = true;
		transfer_end(c, false);
	}
	pool_count(c->srv->pool, c->fn, q->status ? q->status : 499, ms_since(q->start_ns),
		   c->wait_ms);
	if (c->instance[0])
		snprintf(q->note, sizeof(q->note), " instance %s waited %.1f ms%s", c->instance,
			 c->wait_ms, c->attempts > 1 ? " (sent again)" : "");
	else
		snprintf(q->note, sizeof(q->note), " waited %.1f ms", c->wait_ms);
	if (c->timeout_set)
		MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT, c->timeout_was);
	c->q = NULL;
	q->proxy = NULL;
	call_put(c);
	atomic_fetch_sub(&q->srv->routed_open, 1);
}

void proxy_drain(struct server *s, unsigned ms)
{
	uint64_t until = now_ns() + (uint64_t)ms * 1000000ull;
	unsigned n = atomic_load(&s->routed_open);

	if (!n)
		return;
	pr_info("waiting for %u routed answer(s) to reach their clients", n);
	while ((n = atomic_load(&s->routed_open)) && now_ns() < until)
		usleep(10 * 1000);
	if (n)
		pr_info("%u routed answer(s) still being sent after %u ms: cut", n, ms);
}
