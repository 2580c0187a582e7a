/* SPDX-License-Identifier: Apache-2.0 */
/* oci.h — write an OCI bundle (config.json + rootfs/) for one container.
 *
 * The rootfs is either the user's, or an empty directory tree over which the
 * host's /usr, /etc, /opt, /root (and /usr/local/nvidia for GPU functions, a
 * submount bound on its own) are bound read-only, non-recursively, with the
 * merged-/usr symlinks (/bin, /lib, /lib64, /sbin) and /tmp as a tmpfs.
 * Namespaces: pid, ipc, uts, mount, and network joined by path.  GPU functions
 * get every /dev/nvidia* character device.  The org.criu.config annotation
 * names a CRIU config file (written beside config.json) holding
 * "network-lock skip", since the network namespace is external to CRIU, and
 * for a restore bundle "manage-cgroups=ignore": runc has made the cgroups.
 */
#ifndef THAW_OCI_H
#define THAW_OCI_H

#include <stdbool.h>
#include <stddef.h>

/* Where every function's container has the snapshot's memory files (a
 * read-only bind mount): at snapshot time of an empty directory, at a mapped
 * restore of the snapshot's tier entry (restore/mapped.c says why a bind). */
#define OCI_MAPPED_DEST "/.thaw"

struct oci_bind {
	const char *src; /* host path */
	const char *dst; /* path in the container */
	bool writable;
};

struct oci_spec {
	const char *rootfs;        /* NULL: host directories bound read-only */
	char *const *argv;         /* the process */
	char *const *env;          /* "K=V", NULL-terminated; without PATH (and LD_LIBRARY_PATH)
				    * a host-rooted container gets thaw's own, else a default PATH */
	const char *cwd;           /* default "/" */
	const char *netns_path;    /* network namespace to join (nsfs bind mount) */
	const struct oci_bind *binds; /* extra binds (e.g. the function's directory) */
	size_t nbinds;
	bool gpu;                  /* NVIDIA devices and driver directory */
	const char *hostname;
	const char *cgroups_path;  /* e.g. "thaw/<id>" so thaw's containers are grouped; NULL: runc's default */
	bool restore;              /* for runc restore: CRIU leaves the cgroups to runc */
};

/* Create dir (if needed) and write dir/config.json, dir/rootfs/ and
 * dir/criu.conf.  0 or -errno; on failure dir holds nothing valid. */
int oci_bundle_write(const char *dir, const struct oci_spec *spec);

#endif
