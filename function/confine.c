/* SPDX-License-Identifier: Apache-2.0 */
/* confine.c — see confine.h. */
#define LOG_PREFIX "confine: "
#include "function/confine.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The root a container of bundle gets, as function/bundle.c gives it to runc:
 * <bundle>/rootfs when that is a directory (through a link or not), else
 * bundle itself. */
static void rootfs_of(const char *bundle, char *out, size_t len)
{
	struct stat st;

	snprintf(out, len, "%s/rootfs", bundle);
	if (stat(out, &st) || !S_ISDIR(st.st_mode))
		snprintf(out, len, "%s", bundle);
}

/* Whether path, resolved into r (as written if it cannot be), lies under
 * c's allowed roots; when not, why says so, naming the resolved path too
 * when it differs (a link is what hides it). */
static bool allowed(const struct thaw_config *c, const char *path, char r[PATH_MAX], char *why,
		    size_t why_len)
{
	char w[1024];

	if (!realpath(path, r))
		snprintf(r, PATH_MAX, "%s", path);
	if (config_path_allowed(c, r, w, sizeof(w)))
		return true;
	if (why && why_len && strcmp(r, path))
		snprintf(why, why_len, "%s resolves to %s: %s", path, r, w);
	else if (why && why_len)
		snprintf(why, why_len, "%s", w);
	return false;
}

const char *function_paths_forbidden(const struct thaw_config *c, const char *bundle,
				     const char *cwd, bool image, char *why, size_t why_len)
{
	char rootfs[PATH_MAX + 16], r[PATH_MAX];

	if (bundle) {
		/* The bundle (its config.json is read) and the root it
		 * gives: a "rootfs" inside it may be a link to anywhere. */
		if (!allowed(c, bundle, r, why, why_len))
			return "bundle";
		rootfs_of(bundle, rootfs, sizeof(rootfs));
		if (strcmp(rootfs, bundle) && !allowed(c, rootfs, r, why, why_len))
			return "bundle";
	}
	/* An image's function has its cwd in the image. */
	if (cwd && !image && !allowed(c, cwd, r, why, why_len))
		return "cwd";
	return NULL;
}

/* Resolve path (the spec's key names it) into out, which must exist, and
 * check it against c (NULL: not checked).  0 or -errno (logged). */
static int resolve(const struct thaw_config *c, const char *key, const char *path,
		   char out[PATH_MAX])
{
	char why[1536];
	int err;

	if (!realpath(path, out)) {
		err = -errno;
		pr_err("%s %s: %s", key, path, strerror(-err));
		return err;
	}
	if (c && !allowed(c, path, out, why, sizeof(why))) {
		pr_err("%s: %s", key, why);
		return -EACCES;
	}
	return 0;
}

int function_host_paths(const struct thaw_config *c, const struct func_spec *spec,
			struct function_host_paths *hp)
{
	char rootfs[PATH_MAX + 16];
	int ret = 0;

	hp->rootfs[0] = hp->cwd[0] = '\0';
	if (spec->bundle) {
		/* What the container gets as its root, not the bundle: runc
		 * reads nothing else of it. */
		rootfs_of(spec->bundle, rootfs, sizeof(rootfs));
		ret = resolve(c, "the bundle's rootfs", rootfs, hp->rootfs);
	} else if (!spec->image && spec->cwd && strcmp(spec->cwd, "/")) {
		/* Without a rootfs of its own the function's directory is
		 * bound from the host (with one, its cwd is a path in it,
		 * which runc resolves inside it). */
		ret = resolve(c, "cwd", spec->cwd, hp->cwd);
	}
	return ret;
}

const char *function_mounts_forbidden(const struct thaw_config *c, const json_t *mounts,
				      char *key, size_t key_len, char *why, size_t why_len)
{
	char r[PATH_MAX];

	for (size_t i = 0; i < json_array_size(mounts); i++) {
		const char *src =
		    json_string_value(json_object_get(json_array_get(mounts, i), "source"));

		if (src && !allowed(c, src, r, why, why_len)) {
			snprintf(key, key_len, "mounts[%zu].source", i);
			return key;
		}
	}
	return NULL;
}

int function_mount_source(const struct thaw_config *c, const struct spec_mount *m,
			  char out[PATH_MAX])
{
	struct stat st;
	int ret = resolve(c, "mounts: source", m->source, out);

	if (ret)
		return ret;
	if (stat(out, &st) || !S_ISDIR(st.st_mode)) {
		pr_err("mounts: source %s (for %s) is not a directory", m->source, m->destination);
		return -ENOTDIR;
	}
	return 0;
}
