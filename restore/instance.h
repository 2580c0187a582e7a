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
#include <sys/types.h>

#include "common/config.h"
#include "restore/tier.h"
#include "store/store.h"

struct instance_timings {
	double materialize, criu_restore, gpu_restore, ready, total; /* ms */
};

struct instance {
	char id[64];
	char function[64];
	char snapshot[CHUNK_ID_LEN];
	char endpoint[64]; /* "127.0.0.1:PORT" */
	pid_t pid;         /* host pid of the container's first process */
	bool tier_hit;     /* "ram" if true, else "disk" */
	struct instance_timings t;
};

/* Start an instance of snapshot_id.  On failure nothing is left behind. */
int instance_start(const struct thaw_config *c, struct store *s, struct tier *t,
		   const char *snapshot_id, struct instance *out);
/* Stop instance id (locking and checkpointing its CUDA processes first) and
 * remove its container, namespace, work directory and record. */
int instance_stop(const struct thaw_config *c, const char *id);
/* Instances recorded under the data directory, as a JSON array. */
int instance_list(const struct thaw_config *c, json_t **out);
/* The answer of POST /functions/<id>/start for in. */
json_t *instance_to_json(const struct instance *in);

#endif
