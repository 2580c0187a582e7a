/* SPDX-License-Identifier: Apache-2.0 */
/* instance_ended.h — what is kept of an instance after it ends.
 *
 * An instance that thawd stops (idle, lifetime, DELETE) or whose process
 * exits by itself is torn down at once: container, namespace, shim, lease,
 * tier hold.  What an operator needs afterwards stays for a while: its record
 * with how it ended ("stopped: idle 300 s", "exited 137: OOM-killed") in
 * <data>/ended/<id>.json, and its output, kept as <data>/ended/<id>.log
 * (and .log.1).  instance_ended_expire removes them after their time.
 */
#ifndef THAW_RESTORE_INSTANCE_ENDED_H
#define THAW_RESTORE_INSTANCE_ENDED_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"

/* How an instance ended, from whoever ends it. */
struct instance_end {
	bool exited;      /* its process ended by itself; else thawd stopped it */
	bool have_status; /* wait_status is known (server/exits.h) */
	int wait_status;
	/* A stop: why, in words ("idle 3 s", "DELETE"); an exit: how, when
	 * the status is unknown ("status unknown: ..."). */
	char why[128];
};

/* <data>/ended/<id>.json and its log into buf. */
int instance_ended_path(const struct thaw_config *c, const char *id, const char *suffix,
			char *buf, size_t len);

/* Before instance id's ended record is written and its directory goes: link
 * its function.log (and .1) in dir as <data>/ended/<id>.log (and .log.1).  A
 * shim still writing keeps writing into the same inode.  Failures are logged:
 * the logs are then lost. */
void instance_ended_keep_logs(const struct thaw_config *c, const char *id, const char *dir);

/* Did the container whose runc state is under runc_root/id have a process
 * OOM-killed (its memory cgroup's oom_kill count)?  Read before runc delete
 * removes the cgroup. */
bool instance_ended_oom(const char *runc_root, const char *id);

/* Write <data>/ended/<id>.json: rec (the live record) with "state"
 * ("stopped" or "exited"), "reason", "ended_ms", and "exit_code",
 * "signal", "oom_killed" where known.  0 or -errno (logged). */
int instance_ended_write(const struct thaw_config *c, const char *id, const json_t *rec,
			 const struct instance_end *e, bool oom);

/* The record of ended instance id (you own *out): 0, -ENOENT, -EINVAL. */
int instance_ended_get(const struct thaw_config *c, const char *id, json_t **out);
/* Append every ended instance's record to arr. */
int instance_ended_list(const struct thaw_config *c, json_t *arr);
/* Remove the records and logs of instances that ended more than keep_ms
 * ago; how many. */
unsigned instance_ended_expire(const struct thaw_config *c, uint64_t keep_ms);

#endif
