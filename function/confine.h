/* SPDX-License-Identifier: Apache-2.0 */
/* confine.h — where a function's container reaches on the host, and whether
 * the operator allows it there.
 *
 * A function runs as uid 0 in its container, so the host directories it
 * reaches must lie under the operator's allowed roots (common/config.h,
 * config_path_allowed): its rootfs, which is "<bundle>/rootfs" when that is
 * a directory and "<bundle>" otherwise, and, for a function without a bundle
 * or an image, its cwd, bound read-only at the same path.  Both are resolved
 * (symlinks followed) the way runc will follow them.  None may be, lie in
 * or hold thaw's own state (the data directory, the store, the RAM tier,
 * the registry credentials), whatever the roots: a function that reached
 * it could read other functions' specs and snapshots' memory, or write
 * runc's state of its container, whose hooks thawd's `runc delete` runs
 * on the host as root.  The one exception is an image's rootfs in thaw's
 * image cache, read-only, given by thaw itself (image below).
 *
 * They are checked twice (docs/DESIGN.md, "Confinement"): when a spec is
 * registered (PUT, pull, thaw snapshot), to refuse it early; and where a
 * path is used (the bundle written for a snapshot, a restore or a standby,
 * function/bundle.h), because a path may change in between: a cwd that did
 * not exist at the PUT may become a link to anywhere, and a thawd restarted
 * without an --allow-root must not run what it no longer allows.  The
 * bundle is then written with the resolved paths, so that runc is given
 * what was checked.
 */
#ifndef THAW_FUNCTION_CONFINE_H
#define THAW_FUNCTION_CONFINE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/config.h"
#include "function/spec.h"

/* The host paths a container of a spec reaches, resolved. */
struct function_host_paths {
	char rootfs[PATH_MAX]; /* its root; "" without a bundle (the host's dirs) */
	char cwd[PATH_MAX];    /* bound read-only at spec->cwd; "": nothing bound */
};

/* Resolve where a container of spec reaches (above) into *hp and, with c,
 * check it against c's allowed roots (c NULL: resolved only, for the
 * benchmark's baselines, which run what the operator hands them).  image:
 * spec->bundle is thaw's image cache's (function_bundle.image), allowed as
 * exactly <data>/images/rootfs/<hex> and not checked further.  0;
 * -EACCES when a path lies outside them; or realpath's -errno (a path that
 * does not exist).  Logged, naming the spec's key ("bundle", "cwd"). */
int function_host_paths(const struct thaw_config *c, const struct func_spec *spec, bool image,
			struct function_host_paths *hp);

/* The registration's check, over a spec's strings: bundle (and its rootfs)
 * and, unless image, cwd (NULL: absent).  A path that does not exist yet is
 * taken as written: it is checked again where it is used.  NULL when
 * allowed; else the key at fault ("bundle" or "cwd"), why saying why. */
const char *function_paths_forbidden(const struct thaw_config *c, const char *bundle,
				     const char *cwd, bool image, char *why, size_t why_len);

/* A spec's "mounts" (function/spec_mounts.h): each source a host directory
 * under c's allowed roots.  At registration, over the spec's JSON array
 * (NULL: none): NULL when allowed; else "mounts[i].source", why saying why.
 * A source that does not exist yet is taken as written. */
const char *function_mounts_forbidden(const struct thaw_config *c, const json_t *mounts,
				      char *key, size_t key_len, char *why, size_t why_len);
/* Where it is used (the bundle's writer): mount m's source resolved into out,
 * which must be a directory, and checked against c (NULL: not checked).
 * 0, -EACCES, -ENOTDIR or realpath's -errno (logged, naming the mount). */
int function_mount_source(const struct thaw_config *c, const struct spec_mount *m,
			  char out[PATH_MAX]);

#endif
