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
 * any more: its chunks go at the next gc.  A failure is logged. */
void snapshots_forget(struct server *s, const char *snap);

#endif
