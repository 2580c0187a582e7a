/* SPDX-License-Identifier: Apache-2.0 */
/* confine.c — see confine.h. */
#define LOG_PREFIX "confine: "
#include "function/confine.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Whether path is dir or lies under it ("/" holds everything). */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static bool overlap(const char *a, const char *b)
{
	return under(a, b) || under(b, a);
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

/* snprintf into why (why_len bytes, NULL: nothing), cut where it must be. */
#define say(why, why_len, ...)                                                                 \
	do {                                                                                   \
		if ((why) && (why_len) &&                                                      \
		    snprintf((why), (why_len), __VA_ARGS__) >= (int)(why_len))                  \
			(why)[(why_len) - 1] = '\0';                                           \
	} while (0)

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
		if (!overlap(r, d))
			continue;
		say(why, why_len,
		    "%s %s %s (%s): a function may never reach thaw's own state "
		    "(other functions' specs, snapshots' memory, runc's state)",
		    r, !strcmp(r, d) ? "is" : under(r, d) ? "lies in" : "holds", own[i].what, d);
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
 * <bundle>/rootfs when that is a directory, else bundle itself.  A "rootfs"
 * that is a link is refused (-ELOOP, why naming where it leads), not
 * followed: a function whose bundle is its writable root could make one
 * for its next start, to any directory. */
static int rootfs_of(const char *bundle, char *out, size_t len, char *why, size_t why_len)
{
	char to[PATH_MAX];
	struct stat st;
	ssize_t n;

	snprintf(out, len, "%s/rootfs", bundle);
	if (lstat(out, &st) == 0 && S_ISLNK(st.st_mode)) {
		n = readlink(out, to, sizeof(to) - 1);
		to[n < 0 ? 0 : n] = '\0';
		say(why, why_len,
		    "%s is a link (to %s): a bundle's rootfs must be a directory, "
		    "or give the directory as the bundle",
		    out, to);
		return -ELOOP;
	}
	if (lstat(out, &st) || !S_ISDIR(st.st_mode))
		snprintf(out, len, "%s", bundle);
	return 0;
}

/* Whether path, resolved into r (as written if it cannot be), lies under
 * c's allowed roots and away from thaw's own places; when not, why says
 * so, naming the resolved path too when it differs (a link is what hides
 * it). */
static bool allowed(const struct thaw_config *c, const char *path, char r[PATH_MAX], char *why,
		    size_t why_len)
{
	char w[1024];

	absolute(path, r);
	if (config_path_allowed(c, r, w, sizeof(w)) && !thaws_own(c, r, w, sizeof(w)))
		return true;
	if (strcmp(r, path))
		say(why, why_len, "%s resolves to %s: %s", path, r, w);
	else
		say(why, why_len, "%s", w);
	return false;
}

/* ---- the registration's check ---- */

/* A host directory a spec's container reaches. */
struct reach {
	char path[PATH_MAX]; /* resolved (as written where it does not exist) */
	char key[40];        /* the spec's key: "bundle", "cwd", "mounts[i].source" */
	bool rw;             /* the container may write it */
};

/* The host directories spec (a spec's JSON) reaches, into r[] (room for
 * SPEC_MAX_MOUNTS + 1): its rootfs (writable with sandbox.writable_root),
 * or without a bundle or an image its cwd (read-only), and its mounts'
 * sources; with rw_only, only those it may write (each path is resolved,
 * and a start compares every registered function's: those that cannot
 * clash are not looked up).  Their number. */
static size_t reaches(const json_t *spec, bool rw_only, struct reach *r)
{
	const char *bundle = json_string_value(json_object_get(spec, "bundle"));
	const char *cwd = json_string_value(json_object_get(spec, "cwd"));
	const json_t *mounts = json_object_get(spec, "mounts");
	bool wr = json_is_true(json_object_get(json_object_get(spec, "sandbox"), "writable_root"));
	char p[PATH_MAX + 16];
	size_t n = 0;

	if (bundle && (wr || !rw_only) && !rootfs_of(bundle, p, sizeof(p), NULL, 0)) {
		absolute(p, r[n].path);
		snprintf(r[n].key, sizeof(r[n].key), "bundle");
		r[n++].rw = wr;
	} else if (!bundle && !rw_only && cwd && !json_object_get(spec, "image") &&
		   strcmp(cwd, "/")) {
		absolute(cwd, r[n].path);
		snprintf(r[n].key, sizeof(r[n].key), "cwd");
		r[n++].rw = false;
	}
	for (size_t i = 0; i < json_array_size(mounts) && i < SPEC_MAX_MOUNTS; i++) {
		const json_t *m = json_array_get(mounts, i);
		const char *src = json_string_value(json_object_get(m, "source"));
		bool rw = json_is_false(json_object_get(m, "readonly"));

		if (!src || (rw_only && !rw))
			continue;
		absolute(src, r[n].path);
		snprintf(r[n].key, sizeof(r[n].key), "mounts[%zu].source", i);
		r[n++].rw = rw;
	}
	return n;
}

/* Whether a and b may not both be reached: one is writable and one holds
 * the other.  A directory a function writes is then reached by nothing
 * else, so that no function can change, under a check, what another path
 * (its own or another function's) leads to, nor write what another runs. */
static bool clash(const struct reach *a, const struct reach *b)
{
	return (a->rw || b->rw) && overlap(a->path, b->path);
}

/* Whether a path of the n that mine holds (a function id's, whose
 * registration is not looked at) clashes with one of another function
 * registered in c (c->registered): -EACCES, with key naming mine's key and
 * why saying whose path it clashes with; 0 when none does, or there are
 * none to compare with; -ENOMEM, or c->registered's -errno (why says so):
 * a function compared with nothing is not let through. */
static int clash_registered(const struct thaw_config *c, const char *id, const struct reach *mine,
			    size_t n, char *key, size_t key_len, char *why, size_t why_len)
{
	struct reach *theirs = NULL;
	json_t *others = NULL, *o;
	const char *oid;
	bool writes = false;
	size_t k;
	int ret;

	if (!c->registered)
		return 0;
	for (size_t i = 0; i < n; i++)
		writes |= mine[i].rw;
	ret = c->registered(c->registered_arg, &others);
	theirs = calloc(SPEC_MAX_MOUNTS + 1, sizeof(*theirs));
	if (ret || !theirs) {
		ret = ret ? ret : -ENOMEM;
		snprintf(key, key_len, "spec");
		say(why, why_len, "cannot compare it with the functions registered: %s",
		    strerror(-ret));
		goto out;
	}
	json_object_foreach(others, oid, o) {
		if (id && !strcmp(oid, id))
			continue;
		k = reaches(o, !writes, theirs); /* read-only meets read-only freely */
		for (size_t i = 0; i < n; i++)
			for (size_t j = 0; j < k; j++)
				if (clash(&mine[i], &theirs[j])) {
					snprintf(key, key_len, "%s", mine[i].key);
					say(why, why_len,
					    "%s overlaps function %s's %s (%s), and one of them is "
					    "writable: a directory a function may write is "
					    "reached by no other function",
					    mine[i].path, oid, theirs[j].key, theirs[j].path);
					ret = -EACCES;
					goto out;
				}
	}
out:
	free(theirs);
	json_decref(others);
	return ret;
}

int function_spec_check(const struct thaw_config *c, const char *id, const json_t *spec,
			char *key, size_t key_len, char *why, size_t why_len)
{
	const char *bundle = json_string_value(json_object_get(spec, "bundle"));
	const char *cwd = json_string_value(json_object_get(spec, "cwd"));
	const char *image = json_string_value(json_object_get(spec, "image"));
	const json_t *mounts = json_object_get(spec, "mounts");
	enum image_transport t;
	struct reach *mine = NULL;
	char p[PATH_MAX + 16], r[PATH_MAX];
	size_t n;
	int ret = -EACCES;

	mine = calloc(SPEC_MAX_MOUNTS + 1, sizeof(*mine));
	if (!mine) {
		snprintf(key, key_len, "spec");
		say(why, why_len, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	/* A local image (oci:, docker-archive:, oci-archive:) is read from
	 * where a bundle may be. */
	snprintf(key, key_len, "image");
	if (image && !spec_image_ref(image, &t, p, sizeof(p), NULL, 0) && t != IMAGE_DOCKER &&
	    !config_path_allowed(c, p, why, why_len))
		goto out;
	if (bundle) {
		/* The bundle (its config.json is read) and the root it
		 * gives. */
		snprintf(key, key_len, "bundle");
		if (!allowed(c, bundle, r, why, why_len))
			goto out;
		if (rootfs_of(bundle, p, sizeof(p), why, why_len) ||
		    (strcmp(p, bundle) && !allowed(c, p, r, why, why_len)))
			goto out;
	}
	/* An image's function has its cwd in the image, a bundle's in its
	 * root. */
	snprintf(key, key_len, "cwd");
	if (cwd && !bundle && !json_object_get(spec, "image") && !allowed(c, cwd, r, why, why_len))
		goto out;
	for (size_t i = 0; i < json_array_size(mounts); i++) {
		const char *src =
		    json_string_value(json_object_get(json_array_get(mounts, i), "source"));
		struct stat st;

		snprintf(key, key_len, "mounts[%zu].source", i);
		if (!src)
			continue;
		if (!allowed(c, src, r, why, why_len))
			goto out;
		/* Bound as a directory at every start: anything else is the
		 * spec's mistake, said now rather than at the snapshot. */
		if (stat(r, &st) || !S_ISDIR(st.st_mode)) {
			say(why, why_len, "%s %s", src,
			    access(r, F_OK) ? "does not exist" : "is not a directory");
			ret = -EINVAL;
			goto out;
		}
	}

	n = reaches(spec, false, mine);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (clash(&mine[i], &mine[j])) {
				snprintf(key, key_len, "%s", mine[j].key);
				say(why, why_len,
				    "%s overlaps %s (%s); a directory a function may write "
				    "must not hold, or lie in, any other it reaches",
				    mine[j].path, mine[i].key, mine[i].path);
				goto out;
			}
	ret = clash_registered(c, id, mine, n, key, key_len, why, why_len);
out:
	free(mine);
	return ret;
}

/* ---- where the bundle is written ---- */

/* openat2 of a directory, O_PATH: an fd or -errno. */
static int open_dir(int dirfd, const char *path, unsigned long long resolve)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = resolve };
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* The longest of c's allowed roots (resolved) that holds r into root. */
static bool root_of(const struct thaw_config *c, const char *r, char root[PATH_MAX])
{
	char a[PATH_MAX];
	bool found = false;

	for (size_t i = 0; i < c->nallow_roots; i++) {
		absolute(c->allow_roots[i], a);
		if (under(r, a) && (!found || strlen(a) > strlen(root))) {
			memcpy(root, a, strlen(a) + 1);
			found = true;
		}
	}
	return found;
}

/* Open path (the spec's key names it), a directory, into *fdp, and where it
 * is into real: resolved, checked against c (NULL: not checked), then
 * opened from its allowed root down with no link followed, and checked
 * again where the kernel says the opened directory is.  What runc is given
 * is that directory (function_host_paths), not the path walked again: a
 * link swapped in since the check fails the open instead of leading
 * elsewhere.  0 or -errno (logged): -EACCES (not allowed, or changed under
 * the check), -ENOTDIR, -ENOENT. */
static int open_checked(const struct thaw_config *c, const char *key, const char *path, int *fdp,
			char real[PATH_MAX])
{
	const unsigned long long strict = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
	char r[PATH_MAX], root[PATH_MAX], proc[64], why[1536];
	int rootfd = -1, fd = -1, ret;
	const char *rel;
	ssize_t n;

	*fdp = -1;
	if (!realpath(path, r)) {
		ret = -errno;
		pr_err("%s %s: %s", key, path, strerror(-ret));
		return ret;
	}
	if (c && !allowed(c, path, r, why, sizeof(why))) {
		pr_err("%s: %s", key, why);
		return -EACCES;
	}
	if (c && root_of(c, r, root)) {
		rel = r + strlen(root);
		while (*rel == '/')
			rel++;
		rootfd = open_dir(AT_FDCWD, root, strict);
		fd = rootfd < 0 ? rootfd : open_dir(rootfd, *rel ? rel : ".", strict | RESOLVE_BENEATH);
	} else {
		fd = open_dir(AT_FDCWD, r, strict);
	}
	if (fd < 0) {
		ret = fd;
		if (ret == -ELOOP || ret == -EXDEV || ret == -EAGAIN) {
			pr_err("%s %s: changed while it was checked (a link now): refused", key,
			       path);
			ret = -EACCES;
		} else {
			pr_err("%s %s: %s", key, path,
			       ret == -ENOTDIR ? "not a directory" : strerror(-ret));
		}
		goto out;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, real, PATH_MAX - 1);
	if (n < 0) {
		ret = -errno;
		pr_perror("%s %s: readlink %s", key, path, proc);
		goto out;
	}
	real[n] = '\0';
	if (c && !allowed(c, real, r, why, sizeof(why))) {
		pr_err("%s: %s", key, why);
		ret = -EACCES;
		goto out;
	}
	*fdp = fd;
	fd = -1;
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rootfd >= 0)
		close(rootfd);
	return ret;
}

/* Bind the directory fd holds at hp->stage/name (made here), so that runc
 * binds it from there: runc's init cannot bind from the fd itself, whose
 * mount is not in the container's new mount namespace (the kernel refuses
 * that, EINVAL), but the namespace is a copy of thawd's, stage included.
 * Made through the fd's magic link, in thawd's own namespace: the very
 * directory checked.  0 or -errno (logged). */
static int stage(struct function_host_paths *hp, const char *name, int fd)
{
	char at[PATH_MAX + 32], src[64];

	snprintf(at, sizeof(at), "%s/%s", hp->stage, name);
	snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
	if ((mkdir(at, 0700) && errno != EEXIST) || mount(src, at, NULL, MS_BIND, NULL)) {
		int err = -errno;

		pr_perror("bind %s for the container", at);
		return err;
	}
	return 0;
}

/* hp->stage, <dir>/binds, made a private mount of itself: what is bound in
 * it propagates nowhere, and one detach at the end takes it all away. */
static int stage_open(struct function_host_paths *hp, const char *dir)
{
	int err;

	snprintf(hp->stage, sizeof(hp->stage), "%s/binds", dir);
	/* One a killed thawd left: what it holds is detached with it. */
	umount2(hp->stage, MNT_DETACH);
	err = mkdir_p(dir, 0700);
	if (err) {
		hp->stage[0] = '\0';
		return err;
	}
	if ((mkdir(hp->stage, 0700) && errno != EEXIST) ||
	    mount(hp->stage, hp->stage, NULL, MS_BIND, NULL)) {
		err = -errno;
		pr_perror("%s", hp->stage);
		hp->stage[0] = '\0';
		return err;
	}
	hp->stage_mounted = true;
	if (mount(NULL, hp->stage, NULL, MS_PRIVATE, NULL)) {
		err = -errno;
		pr_perror("make %s private", hp->stage);
		return err;
	}
	return 0;
}

void function_host_paths_unstage(const char *dir)
{
	char at[PATH_MAX + 16];

	snprintf(at, sizeof(at), "%s/binds", dir);
	if (umount2(at, MNT_DETACH) && errno != EINVAL && errno != ENOENT)
		pr_perror("%s is left mounted", at);
}

void function_host_paths_init(struct function_host_paths *hp)
{
	memset(hp, 0, sizeof(*hp));
}

void function_host_paths_close(struct function_host_paths *hp)
{
	char at[PATH_MAX + 32];

	if (hp->stage_mounted && umount2(hp->stage, MNT_DETACH))
		pr_perror("%s is left mounted", hp->stage);
	hp->stage_mounted = false;
	if (hp->stage[0]) {
		snprintf(at, sizeof(at), "%s/cwd", hp->stage);
		rmdir(at);
		for (size_t i = 0; i < SPEC_MAX_MOUNTS; i++) {
			snprintf(at, sizeof(at), "%s/%zu", hp->stage, i);
			if (rmdir(at) && errno == ENOENT)
				break;
		}
		rmdir(hp->stage);
		hp->stage[0] = '\0';
	}
	for (size_t i = 0; i < hp->nfds; i++)
		close(hp->fds[i]);
	hp->nfds = 0;
}

int function_host_paths(const struct thaw_config *c, const struct func_spec *spec, bool image,
			const char *dir, struct function_host_paths *hp)
{
	struct reach *r = NULL;
	char rootfs[PATH_MAX + 16], why[1024];
	size_t n = 0;
	int fd, ret = 0;

	function_host_paths_init(hp);
	r = calloc(SPEC_MAX_MOUNTS + 1, sizeof(*r));
	if (!r) {
		pr_err("out of memory");
		return -ENOMEM;
	}
	if (spec->bundle) {
		/* What the container gets as its root, not the bundle: runc
		 * reads nothing else of it. */
		ret = rootfs_of(spec->bundle, rootfs, sizeof(rootfs), why, sizeof(why));
		if (ret) {
			pr_err("bundle: %s", why);
			ret = -EACCES;
			goto out;
		}
		if (image && c && !image_bundle(c, spec->bundle)) {
			pr_err("the image's bundle %s is not in thaw's image cache", spec->bundle);
			ret = -EACCES;
			goto out;
		}
		/* An image's rootfs is thaw's own, under the data directory
		 * that no function may otherwise reach, and read-only.  runc
		 * refuses a link as a root, so it is given the path the kernel
		 * says the checked directory is at: no function can rename
		 * what leads there, since a directory one may write holds no
		 * other's paths (function_spec_check). */
		ret = open_checked(image ? NULL : c, "the bundle's rootfs", rootfs, &fd, hp->rootfs);
		if (ret)
			goto out;
		hp->fds[hp->nfds++] = fd;
		snprintf(r[n].path, sizeof(r[n].path), "%s", hp->rootfs);
		snprintf(r[n].key, sizeof(r[n].key), "bundle");
		r[n++].rw = spec->sandbox.writable_root;
	} else if (!spec->image && spec->cwd && strcmp(spec->cwd, "/")) {
		/* Without a rootfs of its own the function's directory is
		 * bound from the host (with one, its cwd is a path in it,
		 * which runc resolves inside it). */
		ret = open_checked(c, "cwd", spec->cwd, &fd, r[n].path);
		if (ret)
			goto out;
		hp->fds[hp->nfds++] = fd;
		ret = stage_open(hp, dir);
		if (!ret)
			ret = stage(hp, "cwd", fd);
		if (ret)
			goto out;
		hp->cwd = true;
		snprintf(r[n].key, sizeof(r[n].key), "cwd");
		r[n++].rw = false;
	}
	for (size_t i = 0; i < spec->nmounts; i++) {
		char k[40];

		snprintf(k, sizeof(k), "mounts[%zu].source", i);
		ret = open_checked(c, k, spec->mounts[i].source, &fd, r[n].path);
		if (ret)
			goto out;
		hp->fds[hp->nfds++] = fd;
		snprintf(k, sizeof(k), "%zu", i);
		ret = hp->stage[0] ? 0 : stage_open(hp, dir);
		if (!ret)
			ret = stage(hp, k, fd);
		if (ret)
			goto out;
		snprintf(k, sizeof(k), "mounts[%zu].source", i);
		snprintf(r[n].key, sizeof(r[n].key), "%s", k);
		r[n++].rw = !spec->mounts[i].readonly;
	}
	/* As at the registration: a source the function writes holds none
	 * of its other paths, nor another function's, now that they may have
	 * moved, and whatever an older thawd let in. */
	for (size_t i = 0; c && i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (clash(&r[i], &r[j])) {
				pr_err("%s: %s overlaps %s (%s), and one of them is writable",
				       r[j].key, r[j].path, r[i].key, r[i].path);
				ret = -EACCES;
				goto out;
			}
	if (c) {
		char key[48];

		ret = clash_registered(c, spec->id, r, n, key, sizeof(key), why, sizeof(why));
		if (ret == -EACCES)
			pr_err("%s: %s; PUT one of the two again with paths apart, or "
			       "DELETE one (a spec registered before thaw checked this keeps "
			       "what it was let in with)",
			       key, why);
		else if (ret)
			pr_err("%s", why);
		if (ret)
			goto out;
	}
out:
	if (ret)
		function_host_paths_close(hp);
	free(r);
	return ret;
}
