/* SPDX-License-Identifier: Apache-2.0 */
/* visible.h — which host paths a function's spec names that its container
 * does not see.
 *
 * A function runs in a sandbox of its own (common/oci.h): the host's /usr,
 * /etc and /opt, its own directory and its "mounts", or its rootfs.  A spec
 * written on the host easily names a path outside those (a model directory
 * in the user's home, a script beside the function's directory); the
 * function then fails with its own "file not found", which says nothing of
 * the sandbox.  When a function exits before it is ready, the snapshot's
 * error names those paths (prewarm/prewarm.c).
 */
#ifndef THAW_FUNCTION_VISIBLE_H
#define THAW_FUNCTION_VISIBLE_H

#include <stddef.h>

#include "function/spec.h"

/* The absolute paths spec names (each word of its command, each value of its
 * env and the ':'-separated parts of one, its cwd) that exist on the host but
 * not inside a container of the bundle bundle_dir (its config.json: its root
 * and its mounts, symlinks of the root followed), as "PATH (env NAME), PATH
 * (command[1])" into out ("" when there is none).  Returns how many. */
int function_invisible_paths(const struct func_spec *spec, const char *bundle_dir, char *out,
			     size_t len);

#endif
