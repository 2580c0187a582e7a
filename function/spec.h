/* SPDX-License-Identifier: Apache-2.0 */
/* spec.h — a function: how to run it, when it is ready, how to warm it.
 * The JSON of the PUT /functions/<id> body (plus "id"; docs/API.md).
 */
#ifndef THAW_FUNCTION_SPEC_H
#define THAW_FUNCTION_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/oci.h"

enum ready_kind { READY_HTTP, READY_TCP };

#define SPEC_MAX_STANDBY 64
#define SPEC_DEFAULT_STOP_GRACE_S 10.0
#define SPEC_MAX_GPUS 8
#define SPEC_MAX_SECONDS (365.0 * 86400)
/* Routed requests (server/pool.h): a GPU instance answers one request's batch
 * at a time, so a second request is better served by a second instance (up to
 * "max_instances"); a CPU function's server usually overlaps a few. */
#define SPEC_DEFAULT_CONCURRENCY_GPU 1
#define SPEC_DEFAULT_CONCURRENCY_CPU 8
#define SPEC_MAX_CONCURRENCY 10000
#define SPEC_DEFAULT_QUEUE 100
#define SPEC_MAX_QUEUE 100000
/* Longer than a start from a snapshot takes, GPU ones included. */
#define SPEC_DEFAULT_QUEUE_TIMEOUT_S 60.0
/* "mounts": host directories bound into the container (function/spec_mounts.h). */
#define SPEC_MAX_MOUNTS 16
/* "shm_bytes": the size of the container's /dev/shm (a tmpfs: a limit, not
 * memory taken: its pages exist once written).  The least catches a size
 * meant in MiB and given in bytes ("shm_bytes": 64); the most, a size no
 * host has the memory for (a unit or digits too many). */
#define SPEC_DEFAULT_SHM_BYTES OCI_DEFAULT_SHM_BYTES
#define SPEC_MIN_SHM_BYTES (1ull << 20)
#define SPEC_MAX_SHM_BYTES (1ull << 40)
/* "lazy": absent (thawd's or the start's choice), false, true. */
enum spec_lazy { SPEC_LAZY_UNSET, SPEC_EAGER, SPEC_LAZY };

struct http_call {
	char *method; /* "GET", "POST", … */
	char *path;   /* "/health" */
	char *body;   /* may be NULL */
};

/* The transports of an image reference, skopeo's syntax. */
enum image_transport {
	IMAGE_DOCKER,         /* docker://[host[:port]/]name[:tag][@sha256:<hex>] */
	IMAGE_OCI,            /* oci:/path[:tag]: an OCI layout directory */
	IMAGE_DOCKER_ARCHIVE, /* docker-archive:/path.tar[:name:tag]: what docker save writes */
	IMAGE_OCI_ARCHIVE,    /* oci-archive:/path.tar[:tag]: an OCI layout as a tar */
};

struct spec_mount {
	char *source;      /* a host directory */
	char *destination; /* where the container sees it */
	bool readonly;     /* "readonly", default true */
};

struct func_spec {
	char id[64];          /* [a-z0-9][a-z0-9._-]{0,62} */
	char **command;       /* argv, NULL-terminated; required unless bundle or image names one */
	char **env;           /* "KEY=VALUE", NULL-terminated; may be empty */
	char *cwd;            /* working directory; bound read-only into the container */
	char *bundle;         /* optional: a user's OCI bundle or rootfs directory */
	/* optional, instead of bundle: an image reference (spec_image_ref);
	 * its config gives command, env, cwd, port and user where the spec
	 * says nothing (images/image.h). */
	char *image;
	char *user;           /* optional, with image: its user instead of the image's */
	uint16_t port;        /* the port the function listens on in its namespace;
			       * 0 only with image: the image's first exposed port */
	enum ready_kind ready;
	char *ready_path;     /* for READY_HTTP */
	double ready_timeout_s;
	struct http_call *warmup; /* requests made after ready, before the snapshot */
	size_t nwarmup;
	struct http_call *prepare; /* optional hook called just before the snapshot */
	bool gpu;
	/* "gpus": how many GPUs a GPU function's container is given (1 to
	 * SPEC_MAX_GPUS, default 1; "gpus" alone implies "gpu": true). */
	unsigned gpus;
	/* Drop the image's all-zero private anonymous pages before storing it
	 * (criu/criu_elide.h); "elide_zero", default true. */
	bool elide_zero;
	/* "gpu_memory": "thaw" (default: libthaw-cuda carries the device
	 * memory it can move, docs/DESIGN.md "GPU memory") or "driver" (all
	 * of it in the CUDA driver's checkpoint). */
	bool gpu_memory_driver;
	enum spec_lazy lazy;  /* restore with CRIU lazy-pages (pages on demand) */
	/* Lifetimes (seconds; 0: none): "idle_s", stop an instance after that
	 * long with no bytes through its endpoint and no connection open;
	 * "max_lifetime_s", stop it that long after its start; "stop_grace_s"
	 * (default 10), how long a stop waits after SIGTERM before SIGKILL.
	 * "max_instances" (0: no limit): starts beyond it answer 429. */
	double idle_s, max_lifetime_s, stop_grace_s;
	unsigned max_instances;
	/* "standby": how many instances thawd keeps restored ahead of the
	 * requests (server/standby.h); 0 to SPEC_MAX_STANDBY. */
	unsigned standby;
	/* "standby_gpu": "context" (the default where it applies:
	 * spec_standby_gpu_default), a GPU function's standbys hold their
	 * contexts on a GPU (the driver's restore done ahead); "none": nothing. */
	bool standby_gpu_context;
	/* Requests routed through thawd (/function/<id>/…, server/pool.h):
	 * "concurrency", how many one instance serves at once (1 to
	 * SPEC_MAX_CONCURRENCY; default SPEC_DEFAULT_CONCURRENCY_GPU or _CPU);
	 * "queue", how many may wait beyond the slots of the instances being
	 * started (0 to SPEC_MAX_QUEUE, default SPEC_DEFAULT_QUEUE);
	 * "queue_timeout_s", how long one may wait for a slot (default
	 * SPEC_DEFAULT_QUEUE_TIMEOUT_S). */
	unsigned concurrency, queue;
	double queue_timeout_s;
	/* "sandbox": what is loosened for this function (all false: confined;
	 * sandbox.capabilities is owned here). */
	struct oci_sandbox sandbox;
	/* Whether "sandbox" says "userns" (sandbox.userns is then its value);
	 * else thawd's default decides (function_userns, function/userns.h). */
	bool userns_given;
	/* "mounts" (function/spec_mounts.h). */
	struct spec_mount *mounts;
	size_t nmounts;
	/* "shm_bytes": the size of the container's /dev/shm, from
	 * SPEC_MIN_SHM_BYTES to SPEC_MAX_SHM_BYTES (default
	 * SPEC_DEFAULT_SHM_BYTES); NCCL's shared-memory transport takes tens
	 * of MiB of it a rank. */
	uint64_t shm_bytes;
	/* "on_restore_failure": "boot" (default: a start whose restore fails
	 * for a reason of the snapshot or the host boots the function cold,
	 * docs/DESIGN.md "Restore or boot") or "fail" (the start fails). */
	bool restore_failure_fails;
};

/* Parse and check a spec; id (may be NULL) overrides/sets "id".  0 and *out
 * (you own it), or -EINVAL with a message in err that names the bad field. */
int spec_parse(const json_t *j, const char *id, struct func_spec **out, char *err, size_t errlen);
/* Check an image reference (skopeo's transport syntax, enum
 * image_transport; local paths absolute).  0, *t and, for the local
 * transports, the file or directory in path (path may be NULL); or -EINVAL
 * with why in err. */
int spec_image_ref(const char *ref, enum image_transport *t, char *path, size_t pathlen,
		   char *err, size_t errlen);
/* The spec as JSON (a new reference). */
json_t *spec_to_json(const struct func_spec *s);
void spec_free(struct func_spec *s); /* NULL is fine */

/* "standby_gpu"'s default for s: "context" (true) for a GPU function whose
 * device memory thaw carries, else "none". */
bool spec_standby_gpu_default(const struct func_spec *s);

#endif
