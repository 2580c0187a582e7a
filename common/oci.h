/* SPDX-License-Identifier: Apache-2.0 */
/* oci.h — write an OCI bundle (config.json + rootfs/) for one container.
 *
 * The rootfs is either the user's, or an empty directory tree over which the
 * host's /usr, /etc, /opt (and /usr/local/nvidia for GPU functions, a
 * submount bound on its own) are bound read-only, non-recursively (in a user
 * namespace one with submounts from its staging mount: host_stage), with the
 * merged-/usr symlinks (/bin, /lib, /lib64, /sbin) and /tmp as a tmpfs.
 * Confined by default (struct oci_sandbox): a read-only root, no capability,
 * no_new_privileges, the OCI runtimes' default seccomp profile
 * (common/oci_seccomp.c), no host /root, the host's /etc/shadow and
 * /etc/gshadow masked.  The process is uid 0 of the host's user namespace,
 * without capabilities: docs/DESIGN.md ("Confinement") says why not a user
 * namespace or another uid.
 * Namespaces: pid, ipc, uts, mount, and network joined by path.  GPU functions
 * get every /dev/nvidia* character device, and may open those of their own
 * GPUs only (gpu_minors).  The org.criu.config annotation
 * names a CRIU config file (written beside config.json) holding
 * "network-lock skip", since the network namespace is external to CRIU, and
 * for a restore bundle "manage-cgroups=ignore": runc has made the cgroups.
 */
#ifndef THAW_OCI_H
#define THAW_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where every function's container has the snapshot's memory files (a
 * read-only bind mount): at snapshot time of an empty directory, at a mapped
 * restore of the snapshot's tier entry (restore/mapped.c says why a bind). */
#define OCI_MAPPED_DEST "/.thaw"
/* A container's /dev/shm where its spec gives no size: the OCI runtimes'
 * and Docker's. */
#define OCI_DEFAULT_SHM_BYTES (64ull << 20)

/* The mount flags a bind carries besides nosuid (and ro where not
 * writable).  CRIU restores a bind with the flags it dumped, and in a user
 * namespace the kernel refuses a remount that drops a flag its source has
 * locked (nodev, noexec, the atime ones): a bind whose source at a restore
 * is the RAM tier (thawd's tmpfs is nosuid,nodev) must carry nodev from
 * the snapshot on, whatever its source was then. */
enum oci_bind_flags {
	OCI_BIND_AS_SOURCE, /* in a user namespace, its source's locked flags */
	OCI_BIND_INERT,     /* nodev, noexec: the mapped image's memory files */
	OCI_BIND_NODEV,     /* nodev: libthaw-cuda, mapped executable from the tier */
};

struct oci_bind {
	const char *src; /* host path */
	const char *dst; /* path in the container */
	bool writable;
	enum oci_bind_flags flags;
};

/* How a container is confined.  All false (zero) is the confined default;
 * each field but userns loosens one thing, explicitly, for one function. */
struct oci_sandbox {
	bool writable_root;  /* the root filesystem writable (else read-only; /tmp is a tmpfs) */
	bool no_seccomp;     /* no seccomp filter (else the default profile) */
	bool new_privileges; /* no_new_privileges off (setuid binaries work) */
	bool host_home;      /* the host's /root bound read-only (host-rooted only); else
			      * HOME=/tmp unless the env sets it */
	char *const *capabilities; /* NULL-terminated names (oci_capability_known); NULL: none */
	/* Not a loosening: the spec's "userns", the container in a user
	 * namespace of its own (function/userns.h; the range is oci_spec's). */
	bool userns;
};

/* Whether name is a capability a function may be given: those of the OCI
 * runtimes' default set (Docker's, runc spec's), no more. */
bool oci_capability_known(const char *name);
/* The capabilities a container had before it was confined (for restoring a
 * snapshot made then), NULL-terminated. */
extern char *const oci_legacy_capabilities[];

struct oci_spec {
	const char *rootfs;        /* NULL: host directories bound read-only */
	/* The same tree as rootfs where that is one runc cannot write (an
	 * image's, idmapped read-only for a user namespace): the mount points
	 * and the cwd runc would make in rootfs are made here first.  NULL:
	 * runc makes them. */
	const char *mountpoints_in;
	char *const *argv;         /* the process */
	char *const *env;          /* "K=V", NULL-terminated; without PATH (and LD_LIBRARY_PATH)
				    * a host-rooted container gets thaw's own, else a default PATH */
	const char *cwd;           /* default "/" */
	const char *netns_path;    /* network namespace to join (nsfs bind mount) */
	const struct oci_bind *binds; /* extra binds (e.g. the function's directory) */
	size_t nbinds;
	bool gpu;                  /* NVIDIA devices and driver directory */
	/* A GPU function's GPUs: every /dev/nvidiaN node is in the container
	 * (a restore may go to another GPU, and CRIU restores /dev as it
	 * was dumped), but the device cgroup lets it open only those of
	 * these minors, besides the driver's other nodes.  NULL: every GPU. */
	const int *gpu_minors;
	size_t ngpu_minors;
	char *const *env_defaults; /* "K=V", NULL-terminated: added unless env sets K */
	const char *hostname;
	const char *cgroups_path;  /* e.g. "thaw/<id>" so thaw's containers are grouped; NULL: runc's default */
	bool restore;              /* for runc restore: CRIU leaves the cgroups to runc */
	struct oci_sandbox sandbox;
	/* A user namespace: container uids and gids 0 to userns_size - 1 are
	 * the host's userns_base onward; userns_size 0: none (the host's
	 * uid 0).  runc then makes the network namespace (netns_path must be
	 * NULL): CRIU dumps a container only with namespaces its user
	 * namespace owns. */
	uint32_t userns_base, userns_size;
	/* Where host directories with submounts are staged for a container
	 * in a user namespace (common/host_stage.h), and bound from; NULL:
	 * each is bound from itself. */
	const char *host_stage;
	/* The size of the container's /dev/shm tmpfs in bytes; 0:
	 * OCI_DEFAULT_SHM_BYTES.  CRIU dumps its contents and mounts it
	 * again with the size it had, whatever a restore bundle says. */
	uint64_t shm_bytes;
};

/* Create dir (if needed) and write dir/config.json, dir/rootfs/ and
 * dir/criu.conf.  0 or -errno; on failure dir holds nothing valid. */
int oci_bundle_write(const char *dir, const struct oci_spec *spec);

#endif
