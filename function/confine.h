/* SPDX-License-Identifier: Apache-2.0 */
/* confine.h — where a function's container reaches on the host, and whether
 * it may.
 *
 * A function runs as uid 0 in its container, so the host directories it
 * reaches must lie under the operator's allowed roots (common/config.h,
 * config_path_allowed): its rootfs, which is "<bundle>/rootfs" when that is
 * a directory (a link there is refused) and "<bundle>" otherwise; for a
 * function without a bundle or an image, its cwd, bound read-only at the
 * same path; and its mounts' sources.  None of them may be, lie in or hold
 * thaw's own state (the data directory, the store, the RAM tier, the
 * registry credentials), whatever the roots: a function that reached it
 * could read other functions' specs and snapshots' memory, or write runc's
 * state of its container, whose hooks thawd's `runc delete` runs as root.
 * A directory a function may write (a read-write mount, a writable root)
 * holds, and lies in, no other path a function reaches, its own or
 * another's: no function can then change what another path leads to, nor
 * write what another function runs.
 *
 * Checked twice (docs/DESIGN.md, "Confinement"): when a spec is registered
 * (PUT, pull, thaw snapshot), to refuse it early; and where the paths are
 * used (the bundle written for a snapshot, a restore or a standby,
 * function/bundle.h), because a path may change in between, and a spec
 * an older thawd registered, or a snapshot it made, was held to fewer
 * rules (its overlaps with other functions kept).  There each
 * directory is opened once, from its allowed root down with no link
 * followed, checked where the kernel says it is, and held open: runc (and
 * CRIU at a restore, through runc's external bind mounts) bind that very
 * directory through /proc/<thawd>/fd/N, so a link swapped in after the
 * check leads nowhere.
 */
#ifndef THAW_FUNCTION_CONFINE_H
#define THAW_FUNCTION_CONFINE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/config.h"
#include "function/spec.h"

/* The host directories a container of a spec reaches, opened and checked,
 * as runc is given them: its root by the path the kernel gives the opened
 * directory (runc refuses a link there), and the directories it binds
 * (its cwd, its mounts' sources) each bound, from the opened directory, at
 * <stage>/cwd and <stage>/<i> (i: the index in spec->mounts), which runc
 * then binds into the container. */
struct function_host_paths {
	char rootfs[PATH_MAX];        /* its root, where it is; "" without a bundle */
	char stage[PATH_MAX];         /* <dir>/binds; "" when nothing is bound */
	bool cwd;                     /* its cwd is bound, from <stage>/cwd */
	bool stage_mounted;
	int fds[SPEC_MAX_MOUNTS + 2]; /* the directories opened */
	size_t nfds;
};

/* Open where a container of spec reaches (above) into *hp, staging its
 * binds under dir (the bundle's directory), and, with c, check it as
 * function_spec_check does, against the functions registered too, where
 * they are now (c NULL: opened only, for the benchmark's baselines, which
 * run what the operator hands them).  image: spec->bundle is thaw's image
 * cache's, put there from the spec's image, the one path under the data
 * directory allowed (read-only), and only as that exact path.  0 and *hp,
 * to be closed with function_host_paths_close once runc has returned (its
 * binds are the container's own then); or
 * -EACCES (a path not allowed, or changed under the check), -ENOTDIR or
 * -ENOENT, logged naming the spec's key, with nothing held. */
int function_host_paths(const struct thaw_config *c, const struct func_spec *spec, bool image,
			const char *dir, struct function_host_paths *hp);
/* Undo what a process killed between function_host_paths and its close
 * left staged under dir: before dir is removed.  Nothing staged: nothing. */
void function_host_paths_unstage(const char *dir);
/* An empty *hp, which function_host_paths_close may be given. */
void function_host_paths_init(struct function_host_paths *hp);
/* Undo the binds of hp's stage and close what hp holds; again, or on an
 * empty one, does nothing. */
void function_host_paths_close(struct function_host_paths *hp);

/* The registration's check of spec (a spec's JSON, function id: PUT, a
 * pull, thaw snapshot), against c: its allowed roots, and the functions
 * registered (c->registered; id's own registration skipped).  A path that
 * does not exist yet is taken as written, but a mount's source must be a
 * directory now.  0; -EACCES (403) when a path (a local image's too) is
 * not allowed, is thaw's or clashes with another (this function's or another function's, named);
 * -EINVAL (400) when a mount's source is missing or not a directory;
 * -ENOMEM, or c->registered's -errno.  On failure key names the spec's key
 * at fault and why says why. */
int function_spec_check(const struct thaw_config *c, const char *id, const json_t *spec,
			char *key, size_t key_len, char *why, size_t why_len);

#endif
