/* SPDX-License-Identifier: Apache-2.0 */
/* apply.c — the spec an image gives (image_apply): the spec completed from
 * the image's config, and its user checked against the image's own
 * /etc/passwd and /etc/group.
 */
#define LOG_PREFIX "image: "
#include "images/image.h"
#include "common/log.h"
#include "common/util.h"
#include "images/image_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define USER_FILE_MAX (1u << 20)

/* A file of the rootfs, symlinks resolved inside it (an image's /etc/passwd
 * may be a link anywhere); NULL if there is none. */
static char *read_in_root(const char *bundle, const char *rel)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	char root[PATH_MAX + 16], *text = NULL;
	int rfd, fd;
	size_t len = 0;
	ssize_t n;

	snprintf(root, sizeof(root), "%s/rootfs", bundle);
	rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return NULL;
	fd = (int)syscall(SYS_openat2, rfd, rel, &how, sizeof(how));
	close(rfd);
	if (fd < 0)
		return NULL;
	text = malloc(USER_FILE_MAX + 1);
	while (text && len < USER_FILE_MAX && (n = read(fd, text + len, USER_FILE_MAX - len)) > 0)
		len += (size_t)n;
	close(fd);
	if (text)
		text[len] = '\0';
	return text;
}

/* In a passwd or group file, the line whose field 0 is name (or, numeric,
 * whose field 2 is): its fields 2 and 3 as numbers.  false if none. */
static bool lookup(const char *text, const char *name, long *f2, long *f3)
{
	bool by_id = image_all_digits(name);

	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n'), *f[4] = { l, NULL, NULL, NULL };
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);
		char line[1024];

		if (ll < sizeof(line)) {
			memcpy(line, l, ll);
			line[ll] = '\0';
			char *save = NULL, *tok = strtok_r(line, ":", &save);
			int i = 0;

			for (; tok && i < 4; tok = strtok_r(NULL, ":", &save))
				f[i++] = tok;
			if (i >= 3 && (by_id ? !strcmp(f[2], name) : !strcmp(f[0], name))) {
				*f2 = strtol(f[2], NULL, 10);
				*f3 = i >= 4 && image_all_digits(f[3]) ? strtol(f[3], NULL, 10) : 0;
				return true;
			}
		}
		l = nl ? nl + 1 : NULL;
	}
	return false;
}

/* user[:group], names looked up in the image's /etc/passwd and /etc/group,
 * into uid and gid.  -EINVAL with why. */
static int resolve_user(const char *bundle, const char *user, long *uid, long *gid, char *err,
			size_t errlen)
{
	char u[128], *g;
	char *passwd = NULL, *group = NULL;
	long x;
	int ret = 0;

	snprintf(u, sizeof(u), "%s", user);
	g = strchr(u, ':');
	if (g)
		*g++ = '\0';
	*uid = *gid = 0;
	if (!*u || !strcmp(u, "root"))
		u[0] = '0', u[1] = '\0';
	passwd = read_in_root(bundle, "etc/passwd");
	if (image_all_digits(u)) {
		*uid = strtol(u, NULL, 10);
		if (passwd)
			(void)lookup(passwd, u, &x, gid);
	} else if (!passwd || !lookup(passwd, u, uid, gid)) {
		snprintf(err, errlen, "user: \"%s\" is not in the image's /etc/passwd", u);
		ret = -EINVAL;
		goto out;
	}
	if (g && image_all_digits(g)) {
		*gid = strtol(g, NULL, 10);
	} else if (g) {
		group = read_in_root(bundle, "etc/group");
		if (!strcmp(g, "root"))
			*gid = 0;
		else if (!group || !lookup(group, g, gid, &x)) {
			snprintf(err, errlen, "user: group \"%s\" is not in the image's /etc/group", g);
			ret = -EINVAL;
		}
	}
out:
	free(passwd);
	free(group);
	return ret;
}

int image_apply(const struct image *im, const struct func_spec *spec, struct func_spec **out,
		char *err, size_t errlen)
{
	const json_t *cfg = im->config;
	json_t *j = spec_to_json(spec), *v, *env;
	const char *user = spec->user, *key;
	long uid = 0, gid = 0;
	size_t i;
	int ret = -EINVAL;

	*out = NULL;
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	json_object_del(j, "image");
	json_object_del(j, "user");
	json_object_set_new(j, "bundle", json_string(im->bundle));

	/* command: the spec's, else Entrypoint followed by Cmd. */
	if (!spec->command) {
		json_t *cmd = json_array();

		for (int k = 0; k < 2; k++) {
			json_array_foreach(json_object_get(cfg, k ? "Cmd" : "Entrypoint"), i, v)
			{
				json_array_append(cmd, v);
			}
		}
		if (!json_array_size(cmd)) {
			json_decref(cmd);
			snprintf(err, errlen, "command: the spec gives none, and the image %s has no "
					      "Entrypoint or Cmd", im->digest);
			goto out;
		}
		json_object_set_new(j, "command", cmd);
	}
	/* env: the image's, with the spec's on top. */
	env = json_object_get(j, "env");
	json_array_foreach(json_object_get(cfg, "Env"), i, v)
	{
		const char *kv = json_string_value(v), *eq = kv ? strchr(kv, '=') : NULL;
		char name[256];

		if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
		if (!json_object_get(env, name))
			json_object_set_new(env, name, json_string(eq + 1));
	}
	/* cwd: the spec's, else WorkingDir. */
	v = json_object_get(cfg, "WorkingDir");
	if (!spec->cwd && json_is_string(v) && json_string_value(v)[0] == '/')
		json_object_set_new(j, "cwd", json_string(json_string_value(v)));
	/* port: the spec's, else the first exposed TCP port. */
	if (!spec->port) {
		long port = 0;

		json_object_foreach(json_object_get(cfg, "ExposedPorts"), key, v)
		{
			char *end;
			long p = strtol(key, &end, 10);

			if (!port && p > 0 && p < 65536 && (!*end || !strcmp(end, "/tcp")))
				port = p;
		}
		if (!port) {
			snprintf(err, errlen, "port: the spec gives none, and the image %s exposes no "
					      "TCP port", im->digest);
			goto out;
		}
		json_object_set_new(j, "port", json_integer(port));
	}
	/* user: the spec's, else the image's; only uid 0 can be dumped. */
	if (!user)
		user = json_string_value(json_object_get(cfg, "User"));
	ret = resolve_user(im->bundle, user ? user : "", &uid, &gid, err, errlen);
	if (ret)
		goto out;
	if (uid || gid) {
		snprintf(err, errlen,
			 "user: the %s runs as \"%s\" (uid %ld, gid %ld), but thaw runs a function "
			 "as uid 0 without capabilities: CRIU cannot checkpoint another uid's "
			 "process without CAP_SYS_RESOURCE (docs/DESIGN.md, \"Confinement\"); "
			 "give \"user\": \"root\" to run it as uid 0",
			 spec->user ? "spec" : "image", user, uid, gid);
		ret = -EINVAL;
		goto out;
	}
	ret = spec_parse(j, spec->id, out, err, errlen);
out:
	json_decref(j);
	return ret;
}
