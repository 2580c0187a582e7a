/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.h — the OCI bundle of a function's container.
 *
 * Written the same way for its boot (prewarm), its restores
 * (restore/instance.c) and the benchmark's baselines, because CRIU restores
 * a container only into the mounts its image was dumped with: the function's
 * rootfs (its bundle's, or the host's directories read-only), its own
 * directory, the mount at OCI_MAPPED_DEST, the NVIDIA devices of a GPU
 * function, the network namespace given, cgroup thaw/<container id>,
 * $PORT set to the spec's port unless its env sets it, and the spec's
 * sandbox (common/oci.h: confined unless the spec loosens it).
 */
#ifndef THAW_FUNCTION_BUNDLE_H
#define THAW_FUNCTION_BUNDLE_H

#include <stdbool.h>

#include "function/confine.h"
#include "function/spec.h"
#include "function/userns.h"

struct thaw_config;

struct function_bundle {
	const struct func_spec *spec;
	const char *netns;        /* network namespace to join (path) */
	const char *container_id; /* its cgroup is thaw/<container_id> */
	const char *mapped_src;   /* bound read-only at OCI_MAPPED_DEST; NULL: nothing */
	/* libthaw-cuda (common/gpumem.h): gpumem_in bound read-only at
	 * GPUMEM_IN_DEST (the library, and at a restore the saved device
	 * memory), gpumem_out writable at GPUMEM_OUT_DEST (what a save writes,
	 * the library's answers).  With gpumem_preload the function's
	 * processes preload the library.  NULL: none of it. */
	const char *gpumem_in, *gpumem_out;
	bool gpumem_preload;
	char *const *argv;        /* NULL: the spec's command, else /bin/true (a restore
				   * runs no command, but the bundle must name one) */
	bool restore;             /* for runc restore (oci_spec.restore) */
	/* A snapshot dumped before functions were confined (its meta has no
	 * "confined"): restored as it ran, as root with the default
	 * capabilities, a writable root, the host's /root and no seccomp,
	 * since CRIU restores only into the mounts and credentials it dumped. */
	bool legacy_sandbox;
	/* A GPU function: the GPUs it may open (oci_spec.gpu_minors; NULL: every
	 * one) and environment defaults for its boot (CUDA_VISIBLE_DEVICES…;
	 * a restore's processes keep the environment they were dumped with). */
	const int *gpu_minors;
	size_t ngpu_minors;
	char *const *env_defaults;
	/* The allowed roots its rootfs and cwd are checked against, here where
	 * they are used (function/confine.h); NULL: resolved, not checked. */
	const struct thaw_config *allow;
	/* spec->bundle is thaw's image cache's, put there from the spec's
	 * image (images/image.h): the one bundle under the data directory
	 * allowed, and only that exact path. */
	bool image;
	/* With image and userns: the image's rootfs as the range sees it
	 * (images/image.h, image_idmap), the container's root. */
	const char *image_root;
	/* Run it in a user namespace of this host range (function/userns.h;
	 * NULL or size 0: as the host's uid 0): runc makes its network
	 * namespace, which the caller binds at netns afterwards (netns_adopt:
	 * netns must be netns_reserve's), and the way to its root is opened
	 * to the range (userns_reach, against allow's data directory). */
	const struct userns_range *userns;
};

/* Write dir/config.json (and its rootfs skeleton and CRIU config) for b.
 * The host directories it binds are opened and checked now and named by
 * their /proc/<pid>/fd/N (function/confine.h): hp holds them, and must be
 * kept until runc run or restore has returned, then closed
 * (function_host_paths_close).  0 or -errno (logged, nothing held):
 * -EACCES when b->allow does not allow where it reaches. */
int function_bundle_write(const struct function_bundle *b, const char *dir,
			  struct function_host_paths *hp);
/* The argv of a user's bundle (its config.json's process.args), for a spec
 * that gives no command: NULL-terminated (free it with function_argv_free),
 * or NULL if it has none or cannot be read. */
char **function_bundle_args(const char *bundle);
/* Free an argv of function_bundle_args; NULL does nothing. */
void function_argv_free(char **argv);

#endif
