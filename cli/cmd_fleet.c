/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_fleet.c — thaw push, thaw pull and thaw gc: a thawd's functions and its
 * remote tier (server/remote_sync.h), asked of the running thawd over its
 * HTTP API, with a progress line on a terminal.  (`thaw remote` works on a
 * store directly, without thawd.) */
#include "cli/cli.h"
#include "common/log.h"
#include "common/util.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 200

struct client {
	const char *cmd;
	char url[512];
	char auth[600]; /* "Authorization: Bearer …", or "" */
};

struct body {
	char *p;
	size_t len;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct body *b = arg;
	size_t n = size * nmemb;
	char *p = realloc(b->p, b->len + n + 1);

	if (!p)
		return 0;
	memcpy(p + b->len, data, n);
	b->p = p;
	b->len += n;
	p[b->len] = '\0';
	return n;
}

/* One request: 0 and *status, *json (the parsed answer, or NULL), or -1
 * with the transport's error printed. */
static int call(const struct client *c, const char *method, const char *path, long *status,
		json_t **json)
{
	struct curl_slist *hdrs = NULL;
	struct body b = { 0 };
	char url[1024];
	CURLcode res;
	CURL *h = curl_easy_init();

	*json = NULL;
	if (!h)
		return -1;
	snprintf(url, sizeof(url), "%s%s", c->url, path);
	if (c->auth[0])
		hdrs = curl_slist_append(hdrs, c->auth);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (!strcmp(method, "POST"))
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	res = curl_easy_perform(h);
	if (res == CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
		*json = b.p ? json_loads(b.p, 0, NULL) : NULL;
	} else {
		fprintf(stderr, "thaw %s: %s: %s (is thawd running there? --url, THAW_URL)\n",
			c->cmd, url, curl_easy_strerror(res));
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	free(b.p);
	return res == CURLE_OK ? 0 : -1;
}

/* thawd's error answer in words. */
static void print_error(const struct client *c, long status, const json_t *j)
{
	const json_t *e = json_object_get(j, "error");

	fprintf(stderr, "thaw %s: %ld %s: %s\n", c->cmd, status,
		json_string_value(json_object_get(e, "code")) ?: "?",
		json_string_value(json_object_get(e, "message")) ?: "(no message)");
}

static void usage(FILE *f, const char *cmd)
{
	if (!strcmp(cmd, "gc")) {
		fprintf(f, "usage: thaw gc [--remote [URL]] [--grace S] [--dry-run]\n\n"
			   "Without --remote: the local store's gc (thaw store gc).  With it: the\n"
			   "remote tier's (thaw remote gc): delete what no function's ref reaches, once\n"
			   "two runs at least S seconds apart (default 3600) agree; see docs/DESIGN.md,\n"
			   "\"The remote tier\".  URL: --remote's, else THAW_REMOTE.\n");
		return;
	}
	fprintf(f,
		"usage: thaw %s [--url URL] [--token-file FILE] [--no-wait] FUNCTION\n\n"
		"%s\n\n"
		"  --url URL          thawd (THAW_URL; default http://127.0.0.1:8080)\n"
		"  --token-file FILE  its bearer token (THAW_TOKEN_FILE)\n"
		"  --no-wait          ask and return; the work goes on in thawd\n"
		"Progress is drawn on a terminal (THAW_NO_PROGRESS=1: never).  Exit 0 done,\n"
		"1 failed (thawd's error printed), 2 bad usage.\n",
		cmd,
		!strcmp(cmd, "push") ?
			"Upload FUNCTION's spec and current snapshot to thawd's remote tier\n"
			"(thawd --remote): only the chunks the remote lacks, the function's ref last.\n"
			"thawd pushes every new snapshot by itself; this pushes now and waits." :
			"Register FUNCTION from thawd's remote tier with its current snapshot, without\n"
			"booting it: its spec, and every chunk of the snapshot the local store lacks,\n"
			"each checked against its hash.  Then it starts here like any other.");
}

static int client_init(struct client *c, const char *url, const char *token_file)
{
	char *tok = NULL;
	size_t len = 0;

	url = url ? url : getenv("THAW_URL");
	snprintf(c->url, sizeof(c->url), "%s", url && *url ? url : "http://127.0.0.1:8080");
	while (c->url[0] && c->url[strlen(c->url) - 1] == '/')
		c->url[strlen(c->url) - 1] = '\0';
	token_file = token_file ? token_file : getenv("THAW_TOKEN_FILE");
	if (token_file && *token_file) {
		if (read_file(token_file, &tok, &len, 4096) < 0) {
			fprintf(stderr, "thaw %s: cannot read the token file %s\n", c->cmd,
				token_file);
			return -1;
		}
		tok[strcspn(tok, "\r\n")] = '\0';
		snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s", tok);
		free(tok);
	}
	return 0;
}

/* One look at what is followed: draw its progress into p; true once it has
 * ended, with *rc 0 (done: its summary printed) or 1 (failed: why printed). */
typedef bool (*follow_fn)(const json_t *j, const char *fn, struct progress *p, int *rc);

/* GET path until look says the work has ended. */
static int follow(const struct client *c, const char *path, const char *label, const char *fn,
		  follow_fn look)
{
	struct progress p;
	int rc = 1;

	progress_init(&p, label, 0);
	for (;;) {
		json_t *j = NULL;
		long status = 0;
		bool ended;

		if (call(c, "GET", path, &status, &j))
			break;
		if (status != 200) {
			print_error(c, status, j);
			json_decref(j);
			break;
		}
		ended = look(j, fn, &p, &rc);
		json_decref(j);
		if (ended)
			break;
		usleep(POLL_MS * 1000);
	}
	progress_done(&p);
	return rc;
}

/* A push, in GET /functions/<id>'s "push". */
static bool look_push(const json_t *j, const char *fn, struct progress *p, int *rc)
{
	const json_t *push = json_object_get(j, "push");
	const char *st = json_string_value(json_object_get(push, "state")) ?: "";

	p->total = (uint64_t)json_integer_value(json_object_get(push, "bytes_total"));
	progress_update(p, (uint64_t)json_integer_value(json_object_get(push, "bytes_done")));
	if (strcmp(st, "done") && strcmp(st, "failed"))
		return false;
	progress_done(p);
	if (!strcmp(st, "done")) {
		printf("pushed %s: %s, %lld of %lld chunks sent, %lld bytes, %.1f s\n", fn,
		       json_string_value(json_object_get(push, "manifest")) ?: "?",
		       json_integer_value(json_object_get(push, "chunks_sent")),
		       json_integer_value(json_object_get(push, "chunks")),
		       json_integer_value(json_object_get(push, "bytes_sent")),
		       json_number_value(json_object_get(push, "seconds")));
		*rc = 0;
	} else {
		fprintf(stderr, "thaw push: push of %s failed: %s\n", fn,
			json_string_value(json_object_get(push, "error")) ?: "?");
	}
	return true;
}

/* A pull job, GET /jobs/<jid>, with its "progress". */
static bool look_pull(const json_t *j, const char *fn, struct progress *p, int *rc)
{
	const json_t *prog = json_object_get(j, "progress"), *res = json_object_get(j, "result");
	const char *st = json_string_value(json_object_get(j, "state")) ?: "";

	if (json_is_object(prog)) {
		p->total = (uint64_t)json_integer_value(json_object_get(prog, "total"));
		progress_update(p, (uint64_t)json_integer_value(json_object_get(prog, "done")));
	}
	if (!strcmp(st, "running"))
		return false;
	progress_done(p);
	if (!strcmp(st, "done")) {
		printf("pulled %s: %s, %lld of %lld chunks fetched, %lld bytes\n", fn,
		       json_string_value(json_object_get(res, "snapshot")) ?: "?",
		       json_integer_value(json_object_get(res, "chunks_fetched")),
		       json_integer_value(json_object_get(res, "chunks")),
		       json_integer_value(json_object_get(res, "bytes_fetched")));
		*rc = 0;
	} else {
		fprintf(stderr, "thaw pull: pull of %s failed: %s\n", fn,
			json_string_value(json_object_get(json_object_get(j, "error"), "message")) ?:
				"?");
	}
	return true;
}

static int push_or_pull(int argc, char **argv)
{
	struct client c = { .cmd = argv[0] };
	const char *url = NULL, *token = NULL, *fn = NULL;
	bool wait = true, push = !strcmp(argv[0], "push");
	char path[256];
	long status = 0;
	json_t *j = NULL;
	int i, rc = 1;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout, c.cmd);
			return 0;
		} else if (!strcmp(a, "--url") && i + 1 < argc) {
			url = argv[++i];
		} else if (!strcmp(a, "--token-file") && i + 1 < argc) {
			token = argv[++i];
		} else if (!strcmp(a, "--no-wait")) {
			wait = false;
		} else if (a[0] != '-' && !fn) {
			fn = a;
		} else {
			usage(stderr, c.cmd);
			return 2;
		}
	}
	if (!fn || !id_valid(fn)) {
		fprintf(stderr, "thaw %s: a function id is needed ([a-z0-9][a-z0-9._-]{0,62})\n",
			c.cmd);
		return 2;
	}
	if (client_init(&c, url, token))
		return 1;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	snprintf(path, sizeof(path), "/functions/%s/%s", fn, c.cmd);
	if (call(&c, "POST", path, &status, &j))
		goto out;
	if (status != 200 && status != 202) {
		print_error(&c, status, j);
		goto out;
	}
	if (!wait) {
		printf("%s of %s begun\n", c.cmd, fn);
		rc = 0;
	} else if (push) {
		snprintf(path, sizeof(path), "/functions/%s", fn);
		rc = follow(&c, path, "push", fn, look_push);
	} else {
		snprintf(path, sizeof(path), "/jobs/%s",
			 json_string_value(json_object_get(json_object_get(j, "job"), "id")) ?: "");
		rc = follow(&c, path, "pull", fn, look_pull);
	}
out:
	json_decref(j);
	curl_global_cleanup();
	return rc;
}

int cmd_push(int argc, char **argv)
{
	return push_or_pull(argc, argv);
}

int cmd_pull(int argc, char **argv)
{
	return push_or_pull(argc, argv);
}

int cmd_gc(int argc, char **argv)
{
	char *args[16] = { NULL };
	int n = 0, i;
	bool remote = false;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout, "gc");
			return 0;
		}
		if (!strcmp(argv[i], "--remote"))
			remote = true;
	}
	if (argc > 12) {
		usage(stderr, "gc");
		return 2;
	}
	/* thaw gc [--remote [URL]] ...: thaw remote [--remote URL] gc ..., or
	 * thaw store gc. */
	args[n++] = remote ? "remote" : "store";
	for (i = 1; remote && i < argc; i++) {
		if (!strcmp(argv[i], "--remote")) {
			if (i + 1 < argc && argv[i + 1][0] != '-') {
				args[n++] = "--remote";
				args[n++] = argv[++i];
			}
		}
	}
	args[n++] = "gc";
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--remote")) {
			if (i + 1 < argc && argv[i + 1][0] != '-')
				i++;
			continue;
		}
		if (!remote) {
			usage(stderr, "gc");
			return 2;
		}
		args[n++] = argv[i];
	}
	return remote ? cmd_remote(n, args) : cmd_store(n, args);
}
