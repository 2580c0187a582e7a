/* SPDX-License-Identifier: Apache-2.0 */
/* snapshots.h — thawd's snapshot jobs: a function's snapshot made on a job's
 * thread (prewarm_snapshot_opts, its output in the job's log), recorded in
 * the registry as the function's snapshot, pushed to the remote (if any),
 * and the snapshot it replaced dropped.  POST /functions/<id>/snapshot
 * (server/api_functions.c) and a re-snapshot (server/fallback.c, through
 * api_snapshot_launch in internal.h) launch them.
 */
#ifndef THAW_SERVER_SNAPSHOTS_H
#define THAW_SERVER_SNAPSHOTS_H

struct server;

/* Where snapshots_launch failed. */
enum snapshots_step { SNAPSHOTS_RESERVE, SNAPSHOTS_BEGIN, SNAPSHOTS_RUN };

/* A snapshot job of fn, reserved (--max-snapshots), begun in the registry
 * (its state "building") and running on its thread; its id in jid.  0, or
 * -errno and *step: at SNAPSHOTS_RESERVE -EAGAIN (the jobs are full) or
 * -ESHUTDOWN; at SNAPSHOTS_BEGIN -ENOENT (no such function), -EBUSY (one is
 * building) or the registry's write error; at SNAPSHOTS_RUN the thread's. */
int snapshots_launch(struct server *s, const char *fn, char jid[32], enum snapshots_step *step);

/* Drop snapshot snap (a manifest id; "" is nothing) that nobody points at
 * any more, and wake the collector: its chunks go in the background, off
 * the request's path.  A failure is logged. */
void snapshots_forget(struct server *s, const char *snap);

/* The collector: a thread that runs the store's gc (store_gc) each time
 * snapshots_forget dropped a snapshot, once for any number of drops that
 * came while it ran.  gc is safe beside snapshots and starts (it takes the
 * store lock exclusively: a put in progress finishes first, a start's lease
 * keeps its chunks).  0, or -errno (thawd then collects only at start-up). */
int snapshots_collector_start(struct server *s);
/* Stop it (a gc in progress finishes first); NULL-safe, and safe when it
 * never started. */
void snapshots_collector_stop(struct server *s);

#endif
