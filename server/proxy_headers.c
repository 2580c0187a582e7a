/* SPDX-License-Identifier: Apache-2.0 */
/* proxy_headers.c — see proxy_headers.h. */
#include "server/proxy_headers.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* Hop-by-hop headers (RFC 9110, 7.6.1), and those libcurl or
 * libmicrohttpd write themselves (the framing). */
bool proxy_hop_by_hop(const char *name, size_t len)
{
	static const char *const hop[] = { "connection",	 "keep-alive", "proxy-connection",
					   "proxy-authenticate", "proxy-authorization",
					   "te",		 "trailer",    "transfer-encoding",
					   "upgrade",		 "content-length" };

	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (strlen(hop[i]) == len && !strncasecmp(name, hop[i], len))
			return true;
	return false;
}

/* Add the names a Connection header's value lists to set (",a,b,",
 * lowercase): they are hop-by-hop too (RFC 9110, 7.6.1).  false when set
 * is full: the message then cannot be passed on faithfully. */
bool proxy_conn_names_add(char *set, size_t size, const char *v, size_t vl)
{
	size_t n = strlen(set);

	if (!n && size > 1)
		set[n++] = ',', set[n] = '\0';
	for (size_t i = 0; i < vl;) {
		size_t j = i, k;

		while (j < vl && v[j] != ',')
			j++;
		k = j;
		while (i < k && (v[i] == ' ' || v[i] == '\t'))
			i++;
		while (k > i && (v[k - 1] == ' ' || v[k - 1] == '\t'))
			k--;
		if (k > i) {
			if (n + (k - i) + 2 > size)
				return false;
			for (size_t m = i; m < k; m++)
				set[n++] = (char)tolower((unsigned char)v[m]);
			set[n++] = ',';
			set[n] = '\0';
		}
		i = j + 1;
	}
	return true;
}

/* Whether set (conn_names_add's) lists the name of len bytes. */
bool proxy_conn_named(const char *set, const char *name, size_t len)
{
	for (const char *p = set; p && *p; p = strchr(p + 1, ',')) {
		if (p[0] == ',' && !strncasecmp(p + 1, name, len) && p[1 + len] == ',')
			return true;
	}
	return false;
}

/* The forwarding headers thawd writes itself: a client's own are dropped,
 * so that the function can trust what it reads there. */
static bool forwarding(const char *name)
{
	return !strncasecmp(name, "x-forwarded-", 12) || !strcasecmp(name, "forwarded") ||
	       !strcasecmp(name, "x-real-ip");
}

struct head_walk {
	struct curl_slist **hdrs;
	bool drop_authorization;
	char conn_names[PROXY_CONN_NAMES_MAX]; /* what the client's Connection names */
	bool accept, failed;
};

static enum MHD_Result collect_connection(void *cls, enum MHD_ValueKind kind, const char *key,
					  const char *value)
{
	struct head_walk *w = cls;

	if (key && value && !strcasecmp(key, "connection") &&
	    !proxy_conn_names_add(w->conn_names, sizeof(w->conn_names), value, strlen(value)))
		w->failed = true;
	return MHD_YES;
}

static bool append_raw(struct curl_slist **hdrs, const char *line)
{
	struct curl_slist *l = curl_slist_append(*hdrs, line);

	if (l)
		*hdrs = l;
	return l != NULL;
}

static void add_line(struct head_walk *w, const char *name, const char *value)
{
	char *line = NULL;

	/* "Name:" alone would make libcurl drop the header: "Name;" sends it
	 * empty. */
	if ((*value ? asprintf(&line, "%s: %s", name, value) : asprintf(&line, "%s;", name)) < 0) {
		w->failed = true;
		return;
	}
	if (!append_raw(w->hdrs, line))
		w->failed = true;
	free(line);
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
				  const char *value)
{
	struct head_walk *w = cls;

	if (!key || !value || proxy_hop_by_hop(key, strlen(key)) || !strcasecmp(key, "expect") ||
	    proxy_conn_named(w->conn_names, key, strlen(key)) || forwarding(key))
		return MHD_YES;
	/* Behind a token, Authorization is thawd's: never the function's. */
	if (w->drop_authorization && !strcasecmp(key, "authorization"))
		return MHD_YES;
	if (!strcasecmp(key, "accept"))
		w->accept = true;
	add_line(w, key, value);
	return MHD_YES;
}

int proxy_request_headers(struct MHD_Connection *conn, bool drop_authorization, const char *proto,
			  struct curl_slist **hdrs)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct head_walk w = { .hdrs = hdrs, .drop_authorization = drop_authorization };
	char ip[INET6_ADDRSTRLEN] = "";

	MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_connection, &w);
	if (w.failed)
		return -EINVAL;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, &w);
	if (ci && ci->client_addr)
		getnameinfo(ci->client_addr,
			    ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								   : sizeof(struct sockaddr_in),
			    ip, sizeof(ip), NULL, 0, NI_NUMERICHOST);
	if (ip[0])
		add_line(&w, "X-Forwarded-For", ip);
	add_line(&w, "X-Forwarded-Proto", proto);
	/* "Name:" drops what libcurl would add of its own: an Accept the client
	 * did not send, and Expect: 100-continue (the body is on its way). */
	if (!w.failed && !w.accept && !append_raw(hdrs, "Accept:"))
		w.failed = true;
	if (!w.failed && !append_raw(hdrs, "Expect:"))
		w.failed = true;
	return w.failed ? -ENOMEM : 0;
}
