/* SPDX-License-Identifier: Apache-2.0 */
/* lifetimes.h — instances thawd stops by itself, and stops one at a time.
 *
 * A thread looks at this thawd's instances (server/insts.h) every
 * LIFETIMES_TICK_MS: one whose first process has died is cleaned up at once
 * ("exited", with its wait status from thawd's keeper, server/exits.h); one with "idle_s" whose endpoint has moved no bytes and has had
 * no connection open for that long (restore/shim.h, the activity file) is
 * stopped ("idle"); one older than "max_lifetime_s" likewise ("lifetime").
 * Those stops are graceful (instance_stop_graceful, the instance's
 * stop_grace_s) and run on threads of their own, so that one function's
 * grace holds up no other.  /metrics counts them by reason.  What ended is
 * kept for --keep-ended seconds (restore/instance_ended.h), then removed by
 * the same thread.
 */
#ifndef THAW_SERVER_LIFETIMES_H
#define THAW_SERVER_LIFETIMES_H

#include <stdbool.h>

struct server;

#define LIFETIMES_TICK_MS 250
/* How often the records of ended instances past their time are removed. */
#define LIFETIMES_EXPIRE_MS 5000

/* Start the thread; 0 or -errno (logged). */
int lifetimes_start(struct server *s);
/* Stop it (waiting for stops it began).  Safe if never started. */
void lifetimes_finish(struct server *s);
/* Stop instance id once (concurrent stops of one instance: -EALREADY),
 * giving its first process grace_ms after SIGTERM; drops it from the table
 * once it is gone (0, or -ENOENT: no record): one whose stop failed stays
 * tracked, counted against its max_instances, and is stopped again.  end: how it ended, kept
 * with its record and output for --keep-ended (restore/instance_ended.h);
 * NULL keeps nothing. */
struct instance_end;
int lifetimes_stop_instance(struct server *s, const char *id, int grace_ms,
			    const struct instance_end *end);
/* The same, answering sooner: the instance is unreachable when this
 * returns (its record "stopping", its endpoint closed, no routed request
 * sent to it: instance_stop_begin), and the rest of the stop (the grace,
 * the kill, the teardown) runs on a thread of its own, counted in /metrics
 * under label when it is done.  0, or what stop_begin or (with no thread)
 * the stop gave: -EALREADY, -ENOENT. */
int lifetimes_stop_background(struct server *s, const char *id, int grace_ms,
			      const struct instance_end *end, const char *label);
/* Stop instance id now (no grace), as a function's delete or a start whose
 * client left does, unless another is stopping it: 0, -EALREADY (another
 * is: it will be gone when that one is done), or instance_stop's error
 * (-ENOENT: no record, already stopped).  Counted in /metrics under label;
 * why is kept with its ended record. */
int lifetimes_stop_now(struct server *s, const char *id, const char *label, const char *why);

#endif
