/* SPDX-License-Identifier: Apache-2.0 */
/* host_stage.h — a host directory bound alone for a container in a user
 * namespace.
 *
 * A host-rooted container gets the host's /usr, /etc, /opt by
 * non-recursive binds (common/oci.h: CRIU then sees exactly the mounts
 * declared).  In a new user namespace the kernel refuses a non-recursive
 * bind of a mount whose children are locked (EINVAL: `error mounting "/usr"
 * ... invalid argument` where /usr has /usr/local/nvidia mounted in it).
 * So such a directory is first bound non-recursively in thaw's own mount
 * namespace onto a staging directory of its own, made private (nothing
 * mounted under the original later propagates into it) and read-only (an
 * `rm -rf` of the data directory must not reach the host's): it has no
 * children, and the container binds it instead.  The staging mounts live
 * as long as the mount namespace: after a reboot they are made again by
 * the next bundle that needs them.
 */
#ifndef THAW_HOST_STAGE_H
#define THAW_HOST_STAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a mount's mount point lies under dir (/proc/self/mountinfo). */
bool host_stage_has_submounts(const char *dir);

/* The source a container in a user namespace binds for the host directory
 * dir (absolute, e.g. "/usr"), in out (out_len bytes): dir itself where
 * nothing is mounted under it, else root followed by dir, where dir is
 * bound non-recursively, private and read-only, unless that is a mount point
 * already.  0 or -errno, logged. */
int host_stage_source(const char *root, const char *dir, char *out, size_t out_len);

#endif
