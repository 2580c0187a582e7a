/* SPDX-License-Identifier: Apache-2.0 */
/* visible.c — see visible.h. */
#include "function/visible.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINKS 40 /* as the kernel's limit on links followed in one lookup */

/* Does the mount at destination dst hold path (dst itself or under it)?
 * The length of dst, else 0. */
static size_t holds(const char *dst, const char *path)
{
	size_t n = strlen(dst);

	if (!strcmp(dst, "/"))
		return 1;
	return !strncmp(path, dst, n) && (path[n] == '\0' || path[n] == '/') ? n : 0;
}

/* The mount of config holding path, the deepest: NULL for the root. */
static const json_t *mount_of(const json_t *mounts, const char *path)
{
	const json_t *best = NULL, *m;
	size_t i, len = 0, n;

	json_array_foreach((json_t *)mounts, i, m)
	{
		const char *dst = json_string_value(json_object_get(m, "destination"));

		if (dst && (n = holds(dst, path)) > len) {
			best = m;
			len = n;
		}
	}
	return best;
}

/* Whether the container sees path: through the mount that holds it (a bind:
 * its source has it; the kernel's own filesystems: taken as there; a tmpfs:
 * only its mount point), else in the root, whose symlinks are followed the
 * way the container would follow them. */
static bool seen(const char *root, const json_t *mounts, const char *path)
{
	char cur[PATH_MAX], host[2 * PATH_MAX + 2], link[PATH_MAX], next[2 * PATH_MAX + 2];
	struct stat st;
	int links = 0;

	snprintf(cur, sizeof(cur), "%s", path);
	for (;;) {
		const json_t *m = mount_of(mounts, cur);
		const char *type = json_string_value(json_object_get(m, "type"));
		size_t at;
		ssize_t k;

		if (m) {
			const char *dst = json_string_value(json_object_get(m, "destination"));
			const char *src = json_string_value(json_object_get(m, "source"));

			if (!type || strcmp(type, "bind"))
				return !strcmp(type ? type : "", "tmpfs") ? !strcmp(dst, cur) : true;
			snprintf(host, sizeof(host), "%s%s", src ? src : "", cur + strlen(dst));
			return stat(host, &st) == 0;
		}
		/* In the root: find the first component that is a symlink. */
		for (at = 1;; at++) {
			if (cur[at] != '/' && cur[at] != '\0')
				continue;
			snprintf(host, sizeof(host), "%s%.*s", root, (int)at, cur);
			if (lstat(host, &st))
				return false;
			if (S_ISLNK(st.st_mode))
				break;
			if (cur[at] == '\0')
				return true;
		}
		if (++links > MAX_LINKS)
			return false;
		k = readlink(host, link, sizeof(link) - 1);
		if (k <= 0)
			return false;
		link[k] = '\0';
		if (link[0] == '/') {
			snprintf(next, sizeof(next), "%s%s", link, cur + at);
		} else {
			size_t dir = at;

			while (dir > 0 && cur[dir - 1] != '/')
				dir--;
			snprintf(next, sizeof(next), "%.*s%s%s", (int)dir, cur, link, cur + at);
		}
		if (strlen(next) >= sizeof(cur))
			return false;
		snprintf(cur, sizeof(cur), "%s", next);
	}
}

struct found {
	char *out;
	size_t len, used;
	int n;
};

/* path (named by what) if the host has it and the container does not. */
static void consider(struct found *f, const char *root, const json_t *mounts, const char *path,
		     size_t plen, const char *what)
{
	char p[PATH_MAX];
	struct stat st;
	int k;

	if (plen < 2 || plen >= sizeof(p) || path[0] != '/')
		return;
	snprintf(p, sizeof(p), "%.*s", (int)plen, path);
	if (stat(p, &st) || seen(root, mounts, p))
		return;
	if (f->used < f->len) {
		k = snprintf(f->out + f->used, f->len - f->used, "%s%s (%s)", f->n ? ", " : "", p,
			     what);
		f->used += k > 0 ? (size_t)k : 0;
		if (f->used >= f->len)
			f->used = f->len - 1;
	}
	f->n++;
}

int function_invisible_paths(const struct func_spec *spec, const char *bundle_dir, char *out,
			     size_t len)
{
	struct found f = { .out = out, .len = len };
	char cfgpath[PATH_MAX + 16], root[PATH_MAX], what[96];
	const char *rp;
	json_error_t jerr;
	json_t *cfg, *mounts;

	if (len)
		out[0] = '\0';
	snprintf(cfgpath, sizeof(cfgpath), "%s/config.json", bundle_dir);
	cfg = json_load_file(cfgpath, 0, &jerr);
	rp = json_string_value(json_object_get(json_object_get(cfg, "root"), "path"));
	if (!rp) {
		json_decref(cfg);
		return 0;
	}
	if (rp[0] == '/')
		snprintf(root, sizeof(root), "%s", rp);
	else
		snprintf(root, sizeof(root), "%s/%s", bundle_dir, rp);
	mounts = json_object_get(cfg, "mounts");
	for (size_t i = 0; spec->command && spec->command[i]; i++) {
		snprintf(what, sizeof(what), "command[%zu]", i);
		consider(&f, root, mounts, spec->command[i], strlen(spec->command[i]), what);
	}
	for (size_t i = 0; spec->env && spec->env[i]; i++) {
		const char *eq = strchr(spec->env[i], '='), *v, *end;

		if (!eq)
			continue;
		snprintf(what, sizeof(what), "env %.*s", (int)MIN((size_t)(eq - spec->env[i]), 64),
			 spec->env[i]);
		for (v = eq + 1; *v; v = *end ? end + 1 : end) {
			end = strchr(v, ':');
			if (!end)
				end = v + strlen(v);
			consider(&f, root, mounts, v, (size_t)(end - v), what);
		}
	}
	if (spec->cwd)
		consider(&f, root, mounts, spec->cwd, strlen(spec->cwd), "cwd");
	json_decref(cfg);
	return f.n;
}
