/* SPDX-License-Identifier: Apache-2.0 */
/* prewarm.h — boot a function as a runc container, warm it, snapshot it.
 *
 * Phases (each timed): image (a spec's image pulled and unpacked, or found in
 * the cache), boot (runc run), ready (readiness probe), warmup,
 * prepare, cuda_checkpoint (lock + checkpoint of every CUDA process),
 * criu_dump (runc checkpoint), ingest (into the store).  The manifest's meta
 * (function/snapshot_meta.h) records the spec, versions (kernel, runc, criu,
 * driver), GPUs, CUDA processes and the timings, which is all that restore
 * needs.
 */
#ifndef THAW_PREWARM_H
#define THAW_PREWARM_H

#include <jansson.h>

#include "common/config.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "store/store.h"

struct snapshot_result {
	char snapshot_id[CHUNK_ID_LEN];
	char image_digest[80]; /* "sha256:<hex>" of the spec's image; "" without one */
	json_t *timings_ms;    /* {"boot","ready","warmup","prepare","cuda_checkpoint","criu_dump","ingest","total"} */
	uint64_t image_bytes;  /* bytes of the CRIU image */
	uint64_t stored_bytes; /* bytes newly written to the store */
};

/* Progress of the long work before the boot, a spec's image being pulled and
 * unpacked (images/image.h): phase "pull" (bytes) or "unpack" (layers),
 * done of total (0: unknown). */
typedef void (*prewarm_progress_fn)(void *arg, const char *phase, uint64_t done, uint64_t total);

struct prewarm_opts {
	/* The tag thawd puts on the snapshots it makes (the meta's "thawd",
	 * function/snapshot_meta.h); NULL: none. */
	const struct snapshot_tag *thawd;
	/* Where the function's stdout and stderr go while it boots and warms
	 * up, rotated at c->log_bytes (common/logfile.h) and left there at the
	 * end, so that a failed snapshot can be looked into; NULL: only the
	 * work directory's, removed at the end. */
	const char *log_path;
	prewarm_progress_fn progress; /* may be NULL */
	void *progress_arg;
};

/* Snapshot spec into s, step by step (prewarm.c's snap_steps, the phases
 * above).  On failure every process, container, namespace and temporary
 * directory is gone, and the error (log_last_error()) says which step
 * failed, with the end of the function's or CRIU's log.  A spec with an
 * "image" is booted from the image's rootfs, with the defaults its config
 * gives (image_apply): the manifest's meta holds that spec and "image":
 * {"reference", "digest", "bundle"}, so that a start uses the very rootfs it
 * was made on and never pulls.  Its timings add "image_pull" and
 * "image_unpack" (0 when cached). */
int prewarm_snapshot_opts(const struct thaw_config *c, struct store *s,
			  const struct func_spec *spec, const struct prewarm_opts *o,
			  struct snapshot_result *out);
void snapshot_result_release(struct snapshot_result *r);

#endif
