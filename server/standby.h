/* SPDX-License-Identifier: Apache-2.0 */
/* standby.h — pools of standby instances, one per function whose spec asks
 * for "standby": N (restore/instance.h: instance_make_standby).
 *
 * A thread keeps each pool at N standbys of the function's current snapshot,
 * within --max-standby for the whole server.  It makes one at a time, and
 * only while no start is in flight: a refill never competes with a start.  It
 * retires (stops) the standbys of an older snapshot, of a function deleted or
 * asking for fewer, and those whose record is gone (DELETE /instances/<iid>
 * of a standby).  A start takes one with standby_take and activates it
 * (instance_activate); the pool then refills in the background.  A snapshot
 * whose manifest the store lacks (a function pulled with ?fetch=0) is fetched
 * from the remote first (remote_sync_fetch), under the same conditions.  A
 * fetch or restore that fails is logged once and tried again after 1 s, then
 * twice as long each time up to a minute (at once when a start has fetched
 * the snapshot meanwhile).
 * Thread-safe.
 */
#ifndef THAW_SERVER_STANDBY_H
#define THAW_SERVER_STANDBY_H

#include <jansson.h>
#include <stdbool.h>

struct server;
struct standby;

/* The pools of s, and their thread (started here).  NULL when out of memory
 * or the thread cannot start (logged): thawd then runs without standbys. */
struct standby *standby_new(struct server *s);
/* Stop the thread and every standby.  NULL is fine. */
void standby_free(struct standby *p);
/* A standby of function fn's snapshot snap, taken out of its pool (its id in
 * id): true, or false when the pool has none. */
bool standby_take(struct standby *p, const char *fn, const char *snap, char id[64]);
/* Wake the thread now (a function or its snapshot changed, a start ended). */
void standby_kick(struct standby *p);
/* Stop function fn's standbys now (the function is being deleted). */
void standby_retire_function(struct standby *p, const char *fn);
/* {"<function>": waiting standbys, ...}: a new object, for /metrics. */
json_t *standby_pool_sizes(struct standby *p);

#endif
