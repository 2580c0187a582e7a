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
#include <unistd.h>

/* Whether path is dir or lies under it ("/" holds everything). */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/* path absolute, its links resolved, into out; as written (made absolute)
 * when it does not exist. */
static void absolute(const char *path, char out[PATH_MAX])
{
	char cwd[PATH_MAX];

	if (realpath(path, out))
		return;
	if (path[0] != '/' && getcwd(cwd, sizeof(cwd)) &&
	    snprintf(out, PATH_MAX, "%s/%s", cwd, path) < PATH_MAX)
		return;
	snprintf(out, PATH_MAX, "%s", path);
}

/* Whether r (resolved) is, lies in or holds one of the places thawd keeps
 * its state: a function that reached one could read every other function's
 * spec and every snapshot's memory, or write runc's state of its own
 * container and have thawd's `runc delete` run a hook on the host as root.
 * Whatever the allowed roots say; why says which. */
static bool thaws_own(const struct thaw_config *c, const char *r, char *why, size_t why_len)
{
	const struct {
		const char *what, *path;
	} own[] = {
		{ "thawd's data directory", c->data_dir },
		{ "thawd's store", c->store_dir },
		{ "thawd's RAM tier", c->ram_tier_dir },
		{ "the registry credentials", c->registry_auth },
	};
	char d[PATH_MAX];

	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		if (!own[i].path[0])
			continue;
		absolute(own[i].path, d);
		if (!under(r, d) && !under(d, r))
			continue;
		if (why && why_len &&
		    snprintf(why, why_len,
			     "%s %s %s (%s): a function may never reach thaw's own state "
			     "(other functions' specs, snapshots' memory, runc's state)",
			     r, !strcmp(r, d) ? "is" : under(r, d) ? "lies in" : "holds", own[i].what, d) >= (int)why_len)
			why[why_len - 1] = '\0';
		return true;
	}
	return false;
}

/* Whether bundle is a rootfs of thaw's image cache, <data>/images/rootfs/<hex>
 * (images/image.h): the one place under the data directory a container may
 * have as its root, read-only, when thaw itself put it there from an image. */
static bool image_bundle(const struct thaw_config *c, const char *bundle)
{
	char d[PATH_MAX], r[PATH_MAX];
	size_t n;

	absolute(c->data_dir, d);
	absolute(bundle, r);
	n = strlen(d);
	if (strncmp(r, d, n) || strncmp(r + n, "/images/rootfs/", 15))
		return false;
	n += 15;
	return strlen(r + n) == 64 && strspn(r + n, "0123456789abcdef") == 64;
}

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

	absolute(path, r);
	if (config_path_allowed(c, r, w, sizeof(w)) && !thaws_own(c, r, w, sizeof(w)))
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

int function_host_paths(const struct thaw_config *c, const struct func_spec *spec, bool image,
			struct function_host_paths *hp)
{
	char rootfs[PATH_MAX + 16];
	int ret = 0;

	hp->rootfs[0] = hp->cwd[0] = '\0';
	if (spec->bundle) {
		/* What the container gets as its root, not the bundle: runc
		 * reads nothing else of it. */
		rootfs_of(spec->bundle, rootfs, sizeof(rootfs));
		if (image && c && !image_bundle(c, spec->bundle)) {
			pr_err("the image's bundle %s is not in thaw's image cache", spec->bundle);
			return -EACCES;
		}
		/* An image's rootfs is thaw's own, under the data directory
		 * that no function may otherwise reach, and read-only. */
		ret = resolve(image ? NULL : c, "the bundle's rootfs", rootfs, hp->rootfs);
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
