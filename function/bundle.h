/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.h — the OCI bundle of a function's container.
 *
 * Written the same way for its boot (prewarm), its restores
 * (restore/instance.c) and the benchmark's baselines, because CRIU restores
 * a container only into the mounts its image was dumped with: the function's
 * rootfs (its bundle's, or the host's directories read-only), its own
 * directory, the mount at OCI_MAPPED_DEST, the NVIDIA devices of a GPU
 * function, the network namespace given, cgroup thaw/<container id>, and
 * $PORT set to the spec's port unless its env sets it.
 */
#ifndef THAW_FUNCTION_BUNDLE_H
#define THAW_FUNCTION_BUNDLE_H

#include <stdbool.h>

#include "function/spec.h"

struct function_bundle {
	const struct func_spec *spec;
	const char *netns;        /* network namespace to join (path) */
	const char *container_id; /* its cgroup is thaw/<container_id> */
	const char *mapped_src;   /* bound read-only at OCI_MAPPED_DEST; NULL: nothing */
	char *const *argv;        /* NULL: the spec's command, else /bin/true (a restore
				   * runs no command, but the bundle must name one) */
	bool restore;             /* for runc restore (oci_spec.restore) */
};

/* Write dir/config.json (and its rootfs skeleton and CRIU config) for b.
 * 0 or -errno (logged). */
int function_bundle_write(const struct function_bundle *b, const char *dir);

#endif
