/* SPDX-License-Identifier: Apache-2.0 */
/* snapshot_meta.h — what a snapshot records about its function: the
 * manifest's "meta" (store/manifest.h keeps it as free-form JSON), parsed
 * once into struct snapshot_meta, and written from one.
 *
 * prewarm writes it (snapshot_meta_to_json); the start, a standby's take,
 * the host comparison, the routed pool, recovery, the image cache's gc and
 * thaw doctor read it (snapshot_meta_parse).  Nothing else reads the JSON
 * by key.  Each field has one name.  The names older thaws wrote, or that
 * readers accepted, are read here at load and never written:
 *
 *   a GPU of "gpus" as a bare UUID string (the first snapshots);
 *   a GPU's "used_bytes" as "memory_used_bytes", "gpu_bytes" or "used";
 *   "gpu_used_bytes" as "gpu_bytes" or "gpu_memory_bytes";
 *   "cuda_processes" as the lists "cuda_pids" and "cuda_ns_pids", which are
 *   still written beside it for thaws that read only those.
 *
 * The JSON, each member absent where it was not recorded:
 *
 *	{"meta_version": 1,                   (SNAPSHOT_META_VERSION; absent before it)
 *	 "function": "id", "spec": {…},      (function/spec.h: the spec as booted)
 *	 "versions": {"kernel","runc","criu","driver"},
 *	 "gpus": [{"uuid","name","index","total_bytes","used_bytes"}],
 *	 "gpu_used_bytes": N,                (all GPUs at once; only older records)
 *	 "cuda_processes": [{"pid","ns_pid","gpus":[i…]}], "cuda_pids", "cuda_ns_pids",
 *	 "gpu_memory": {"mode":"thaw"|"driver","why","mount","bytes","allocs",
 *	                "left_bytes","ns_pids":[…]},
 *	 "image": {"reference","digest","bundle"},
 *	 "host": {…},                        (prewarm/host_record.h)
 *	 "timings_ms": {"phase": ms…}, "image_bytes", "image_bytes_before_elision",
 *	 "zero_pages_elided", "created",
 *	 "mapped_mount": "/.thaw", "confined": true,
 *	 "userns": {"uid", "size"},          (its user namespace's host range; absent: none)
 *	 "booted": true,                     (a booted standby's record, instance_boot.c)
 *	 "thawd": {"registry","function","job"}}   (server/registry.h's tag)
 *
 * A member present with the wrong type is an error that names it; so is a
 * meta_version newer than this thaw's.  A meta of meta_version 1 or later
 * must name its function and hold its spec; an older one may lack any
 * member (a manifest `thaw store put` made has none of them).
 */
#ifndef THAW_FUNCTION_SNAPSHOT_META_H
#define THAW_FUNCTION_SNAPSHOT_META_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "function/spec.h"

#define SNAPSHOT_META_VERSION 1

/* A GPU the function was given when it was snapshotted. */
struct snapshot_gpu {
	const char *uuid;     /* "GPU-…"; NULL: not recorded */
	const char *name;     /* its model; NULL: not recorded (a bare UUID) */
	int index;            /* its ordinal on the snapshot's host; -1: not recorded */
	uint64_t total_bytes; /* its memory; 0: not recorded */
	uint64_t used_bytes;  /* what the function held on it (what a restore
			       * needs free there); 0: unknown */
};

/* A CUDA process of the function when it was snapshotted. */
struct snapshot_cuda_process {
	pid_t pid;     /* on the snapshot's host */
	pid_t ns_pid;  /* in the container; 0: not recorded */
	uint64_t gpus; /* bit i: it held gpus[i] (0: not told) */
};

/* Who carries a GPU snapshot's device memory (docs/DESIGN.md, "GPU memory"). */
struct snapshot_gpu_memory {
	bool recorded;        /* false: made before libthaw-cuda, or a CPU function */
	bool thaw;            /* libthaw-cuda saved it into the image; else the
			       * driver's checkpoint carries it */
	const char *why;      /* !thaw: why the library saved none ("" or NULL: not said) */
	bool mount;           /* the container binds libthaw-cuda's directories */
	uint64_t bytes;       /* what the library saved (what a restore fills) */
	uint64_t allocs;      /* in that many allocations */
	uint64_t left_bytes;  /* what it left to the driver */
	const pid_t *ns_pids; /* the processes (in the container) that saved theirs */
	size_t nns_pids;
};

/* The OCI image a snapshot was made on (images/image.h). */
struct snapshot_image {
	const char *reference; /* as the spec named it; NULL: made on no image */
	const char *digest;    /* "sha256:<hex>" of its manifest */
	const char *bundle;    /* the rootfs it ran on, on the snapshot's host; may be NULL */
};

/* The tag thawd puts on the snapshots it makes (server/registry.h). */
struct snapshot_tag {
	const char *registry; /* NULL: no tag */
	const char *function;
	const char *job;
};

struct snapshot_versions {
	const char *kernel, *runc, *criu; /* NULL: not recorded */
	long long driver;                 /* the CUDA driver API's (13000); 0: none */
};

struct snapshot_meta {
	int version; /* meta_version; 0: written before it */
	const char *function;
	/* The function's spec, parsed (spec_parse); NULL with spec_err: -ENOENT
	 * none recorded, -EINVAL this thaw refuses it (spec_why says why; an
	 * older thaw accepted it), -ENOMEM. */
	const struct func_spec *spec;
	int spec_err;
	char spec_why[256];
	bool gpu; /* a GPU function's snapshot (its spec's "gpu") */
	struct snapshot_versions versions;
	const struct snapshot_gpu *gpus;
	size_t ngpus;
	uint64_t gpu_used_bytes; /* all GPUs' usage at once, where gpus has no figure */
	const struct snapshot_cuda_process *cuda_processes;
	size_t ncuda_processes;
	struct snapshot_gpu_memory gpu_memory;
	struct snapshot_image image;
	const json_t *host;       /* prewarm/host_record.h's record; NULL: none */
	const json_t *timings_ms; /* {"phase": milliseconds}; NULL: none */
	uint64_t image_bytes, image_bytes_before_elision, zero_pages_elided;
	const char *created;      /* "2026-01-02T03:04:05Z" */
	const char *mapped_mount; /* where an empty directory was bound (OCI_MAPPED_DEST),
				   * for a mapped restore to bind its memory files at;
				   * NULL: a snapshot from before mapped restores */
	bool confined;            /* made confined (function/bundle.h legacy_sandbox) */
	/* Made in a user namespace whose ids 0.. are these host ids (CRIU
	 * restores it as dumped: every restore runs there); size 0: none. */
	uint32_t userns_base, userns_size;
	bool booted;              /* a booted standby's record, not a snapshot */
	struct snapshot_tag thawd;

	/* What snapshot_meta_parse made, for snapshot_meta_release. */
	json_t *json_;
	bool owned_;
};

/* Parse meta (a manifest's meta, or a standby record's copy of one) into
 * *sm.  Its strings and JSON members point into meta, which sm holds a
 * reference to: they live until snapshot_meta_release.  0; -EBADMSG with
 * why naming the member (the wrong type, a required one missing, a newer
 * meta_version; sm is then empty); -ENOMEM.  A spec this thaw refuses is
 * not a failure here: spec is NULL and spec_err says why. */
int snapshot_meta_parse(const json_t *meta, struct snapshot_meta *sm, char *why, size_t len);

/* What snapshot_meta_parse made, released; sm is empty after.  On a struct
 * its caller filled (for snapshot_meta_to_json), or one released already:
 * nothing. */
void snapshot_meta_release(struct snapshot_meta *sm);

/* The parsed spec, now the caller's (spec_free it); sm->spec is NULL after.
 * NULL where there is none (spec_err). */
struct func_spec *snapshot_meta_take_spec(struct snapshot_meta *sm);

/* The JSON of sm, with meta_version SNAPSHOT_META_VERSION: a new object, or
 * NULL out of memory.  The old names are not written, but for
 * "cuda_pids" and "cuda_ns_pids" (see above). */
json_t *snapshot_meta_to_json(const struct snapshot_meta *sm);

#endif
