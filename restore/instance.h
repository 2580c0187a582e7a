/* SPDX-License-Identifier: Apache-2.0 */
/* instance.h — a running instance restored from a snapshot.
 *
 * instance_start: lease the snapshot in the RAM tier, make a network namespace
 * and a bundle, runc restore (own work dir), CUDA restore + unlock of each CUDA
 * process (after checking free GPU memory), readiness, and an endpoint on the
 * host (127.0.0.1:PORT) that reaches the function's port in its namespace.
 * Every instance is recorded in <data_dir>/instances/<id>.json, so another
 * process (thaw stop, a restarted thawd) can find and stop it.
 */
#ifndef THAW_RESTORE_INSTANCE_H
#define THAW_RESTORE_INSTANCE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/config.h"
#include "common/fault.h"
#include "restore/gpu_restore.h"
#include "restore/tier.h"
#include "store/store.h"

struct instance_timings {
	double materialize, criu_restore, gpu_restore, ready, total; /* ms */
	double gpu_copy; /* of gpu_restore: libthaw-cuda's copy back of device memory */
	double load;     /* reading and checking the snapshot's manifest and spec */
	double setup;    /* directory, record, network namespace, bundle */
	double endpoint; /* the shim that gives the instance its host address */
	double lazy_done; /* lazy: ms from the start until the daemon had served every
			   * page; 0 while it has not (yet) */
	double lazy_wait; /* lazy GPU start under lazy_gpu_after_fill: ms waited
			   * for that before the CUDA restore */
	double resume;    /* a CPU standby taken: runc resume (the cgroup freezer) */
	double image;     /* a snapshot made on an image: finding that image in this
			   * host's cache, or bringing it there (image_get_digest) */
	double boot, warmup; /* a booted instance (instance_boot): runc run, the
			      * spec's warm-up calls */
};

/* How the pages come back.  Mapped (restore/mapped.h): runc restore of the
 * tier entry's mapped image; the process maps the snapshot's memory files
 * (one page-cache copy for every instance) and the instance holds a lease on
 * the tier entry until its first process exits (a detached holder process).
 * Eager: runc restore puts every page in before
 * the process runs.  Lazy: runc restore --lazy-pages; the process runs at
 * once and a CRIU lazy-pages daemon of its own serves its anonymous memory
 * from the image in the RAM tier through userfaultfd, on demand and in the
 * background.  If that daemon ends before it has served every page, the
 * instance is killed and listed as "failed" with the reason. */
enum instance_mode {
	INSTANCE_MODE_AUTO, /* the snapshot's spec "lazy" if set, else mapped where
			     * the tier entry has a mapped image (and THAW_MAPPED
			     * is not 0), else the config's lazy */
	INSTANCE_EAGER,
	INSTANCE_LAZY,
	INSTANCE_MAPPED,    /* mapped, else (with the reason) AUTO's choice */
};

struct instance {
	char id[64];
	char function[64];
	char snapshot[CHUNK_ID_LEN];
	char endpoint[64]; /* "127.0.0.1:PORT" */
	pid_t pid;         /* host pid of the container's first process */
	bool tier_hit;     /* "ram" if true, else "disk" */
	bool lazy;         /* restored lazily */
	const char *pages; /* "mapped", "lazy" or "eager" (a static string) */
	char pages_why[256]; /* not mapped: why */
	/* A GPU function: who carried its device memory, "thaw" (libthaw-cuda)
	 * or "driver" (the CUDA driver's checkpoint: gpu_memory_why says why);
	 * NULL for a CPU function. */
	const char *gpu_memory;
	char gpu_memory_why[256];
	bool standby;      /* made by instance_make_standby (and taken, if running) */
	/* A GPU standby that holds its contexts ("standby_gpu": "context"):
	 * the driver's restore done when it was made, on gpus[0]; and the GPU
	 * memory that cost, as NVML's free figure fell meanwhile. */
	bool standby_context;
	uint64_t standby_gpu_bytes;
	char image[80];    /* a snapshot made on an image: its digest; else "" */
	bool image_copied; /* that image was not in this host's cache: this start brought it */
	/* A start that failed: the step it failed at (fault.step), its -errno,
	 * and what the step gave to decide on (the damaged chunk of
	 * FAULT_MATERIALIZE); else FAULT_NONE. */
	struct fault fault;
	struct instance_timings t;
	/* Booted cold from its spec rather than restored (instance_boot), and
	 * why: the restore's failure, or the difference of the host. */
	bool booted;
	char boot_why[768];
	/* Its user namespace: container uid 0 is host uid userns_uid, of a
	 * range of userns_size (function/userns.h); size 0: the host's uid 0. */
	uint32_t userns_uid, userns_size;
	/* A GPU function's GPUs, where its CUDA state was restored (none for a
	 * standby not taken yet). */
	size_t ngpus;
	struct instance_gpu {
		int index;
		char uuid[48];
		char name[96];
	} gpus[GPU_MAX];
};

/* A snapshot of a function on an image (images/image.h) records the image
 * in its meta ("image": the spec's "reference", the manifest's "digest")
 * and restores onto this host's copy of that very image: a start, or the
 * making of a standby, of a snapshot that another host made brings it into
 * this host's image cache first (image_get_digest; its timing "image"), and
 * holds it there against the cache's gc until the instance ends. */

/* Start an instance of snapshot_id.  On failure nothing is left behind, and
 * out->fault names the step that failed and its facts (the rest of
 * out untouched). */
int instance_start(const struct thaw_config *c, struct store *s, struct tier *t,
		   const char *snapshot_id, enum instance_mode mode, struct instance *out);
/* The same onto the GPUs of gp (gpu_place: chosen, and held, by the
 * caller; released here once the CUDA state is restored).  gp NULL, or one
 * that holds nothing: the start places its GPUs itself, before anything is
 * restored (-EAGAIN or -ENODEV, the reason set, when none has room).  The
 * container may open only those GPUs (common/oci.h, gpu_minors). */
int instance_start_on(const struct thaw_config *c, struct store *s, struct tier *t,
		      const char *snapshot_id, enum instance_mode mode, struct gpu_placement *gp,
		      struct instance *out);
/* A standby instance of snapshot_id: instance_start up to the endpoint, then,
 * for a CPU function, its container frozen (runc pause); a GPU function's
 * CUDA state stays checkpointed and locked, holding no GPU memory, unless
 * gpu_context: then the driver restores its contexts now, onto a GPU with
 * room for all of its memory, and the device memory thaw carries stays
 * unmapped, its CUDA calls held, until the take fills it (where that cannot
 * apply, the log says why and it holds nothing).  Its record's state is
 * "standby"; it takes no traffic until activated.  The timings are its own
 * making's.  On failure nothing is left behind. */
int instance_make_standby(const struct thaw_config *c, struct store *s, struct tier *t,
			  const char *snapshot_id, bool gpu_context, struct instance *out);
/* Bring standby id to life: runc resume, or CUDA restore and unlock (the
 * free-memory check first); readiness; its record says "running".  out: the
 * instance, standby true, timed from the call (resume or gpu_restore, ready,
 * total).  -EBUSY if id is not a standby (another took it).  On any other
 * failure the standby is stopped and removed. */
int instance_activate(const struct thaw_config *c, const char *id, struct instance *out);
/* The same onto the GPUs of gp (as instance_start_on).  A standby's
 * container may open every GPU of the host: its GPUs are chosen here.  A
 * standby that holds its contexts goes on its own GPU whatever gp says (gp
 * is given back): its take fills the device memory there, with no driver
 * restore, and fails (-EAGAIN) when that GPU has no room for it. */
int instance_activate_on(const struct thaw_config *c, const char *id, struct gpu_placement *gp,
			 struct instance *out);
/* An instance booted cold from its spec instead of restored from a snapshot
 * (docs/DESIGN.md, "Restore or boot"), as the snapshot job boots it: its
 * own directory, record, network namespace and bundle (function/bundle.h,
 * restore false), runc run, the endpoint, readiness and the spec's warm-up
 * calls; a GPU function onto its spec's number of GPUs, those with the most
 * free memory.  It is then an instance like any other (instance_list,
 * instance_stop, lifetimes), its answer "restored": false with why. */
struct instance_boot {
	const struct func_spec *spec; /* runnable: an image's applied, bundle its rootfs */
	char *const *argv;            /* NULL: the spec's command */
	const char *snapshot;         /* the snapshot it stands in for; NULL or "": none */
	const char *why;              /* why it was booted rather than restored */
	const char *image;            /* its image's digest; NULL or "": none */
	bool standby;                 /* a CPU function's standby: frozen once warm */
};
/* Boot b->spec as instance *out.  On failure nothing is left behind and the
 * error says which step failed (the function's log ending it). */
int instance_boot(const struct thaw_config *c, const struct instance_boot *b,
		  struct instance *out);

/* The first half of a stop, quick: instance id's record says "stopping"
 * with "stop": {"requested_ms", "why"}, its endpoint is closed (the shim
 * drains its output still) and "unreachable_ms" is added once its port
 * refuses connections.  instance_end (or instance_stop) does the rest; a
 * thawd restart finishes a stop begun (server/recover.c).  0 or -errno
 * (-ENOENT: no record). */
int instance_stop_begin(const struct thaw_config *c, const char *id, const char *why);
/* Stop instance id (locking its CUDA processes first) and remove its
 * container, namespace, work directory and record. */
int instance_stop(const struct thaw_config *c, const char *id);
/* The same, but the container's first process gets SIGTERM and grace_ms to
 * exit before it is killed (after a GPU function's CUDA processes are
 * locked); 0: killed at once. */
int instance_stop_graceful(const struct thaw_config *c, const char *id, int grace_ms);
/* The same, keeping what ended (restore/instance_ended.h): the record with
 * how it ended (end) and its output, under <data>/ended.  end NULL: as
 * instance_stop_graceful. */
struct instance_end;
int instance_end(const struct thaw_config *c, const char *id, int grace_ms,
		 const struct instance_end *end);
/* Whether instance id still has a record: its record goes last in a stop,
 * once its container, namespace and directory are gone. */
bool instance_recorded(const struct thaw_config *c, const char *id);
/* The shim's activity file of instance id (restore/shim.h): the
 * CLOCK_REALTIME ms of its endpoint's last use, the connections open.
 * -ENOENT when it has none (an instance of an older thaw). */
int instance_activity(const struct thaw_config *c, const char *id, uint64_t *last_ms,
		      unsigned *open_conns);
/* Record when thawd stops instance id by itself (0: never) and the grace of
 * its stops, from now on; instance_list then shows "last_activity_ms",
 * "open_connections", "stop_at_ms" and "stop_why" (idle, lifetime).
 * routed: it serves requests routed through thawd (/function/<id>/...),
 * recorded as "routed": true, so that a thawd that adopts it routes to it
 * again. */
int instance_set_limits(const struct thaw_config *c, const char *id, double idle_s,
			double max_lifetime_s, double stop_grace_s, bool routed);
/* Instances recorded under the data directory, as a JSON array; "state" is
 * starting, running, exited, abandoned, or failed (with "error": why, e.g.
 * its lazy-pages daemon died before it had served every page). */
int instance_list(const struct thaw_config *c, json_t **out);
/* The answer of POST /functions/<id>/start for in. */
json_t *instance_to_json(const struct instance *in);

#endif
