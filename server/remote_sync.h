/* SPDX-License-Identifier: Apache-2.0 */
/* remote_sync.h — thawd and the remote tier (remote/remote.h): a fleet's
 * functions on an S3-compatible object store (thawd --remote).  A
 * background service: thawd.c starts and stops it, the starts, snapshots,
 * deletes and standbys call it, and its routes are server/api_remote.c.
 *
 *   push   After each snapshot, and on POST /functions/<id>/push, one
 *          background thread uploads the function's spec and current
 *          snapshot (only the chunks the remote lacks), ref last.  GET
 *          /functions/<id> shows the latest push as "push": its state
 *          (queued, uploading, done, failed), bytes done of total, what it
 *          sent, its error.
 *   pull   POST /functions/<id>/pull is a job ("pull", GET /jobs/<jid> with
 *          its progress): read the function's ref, fetch the chunks of its
 *          snapshot the store lacks (checked against their hashes), and
 *          register the function with that snapshot, ready to start,
 *          without booting it.  ?fetch=0 registers it with the manifest
 *          only: its first start fetches the chunks.
 *   start  A start whose snapshot's manifest is not in the store fetches it
 *          with its chunks first (remote_sync_fetch).
 *
 *   learn  A start or routed request for a function this host does not
 *          have registers it from the remote first (remote_sync_ensure).
 *   poll   Every --remote-poll seconds one listing of the refs (their
 *          ETags): a ref that changed is read, and a function this host
 *          has follows it (pulled again, fetch=0) unless its own newer
 *          snapshot is on its way; a ref gone deletes the function here
 *          when this host still has the snapshot it named.
 *
 * Deleting a function deletes its ref on the remote: the fleet loses it
 * (thaw gc --remote then collects what no ref reaches).
 */
#ifndef THAW_SERVER_REMOTE_SYNC_H
#define THAW_SERVER_REMOTE_SYNC_H

#include <jansson.h>
#include <stdbool.h>

struct server;

/* Open the remote of s->opts (nothing when none is set) and start the push
 * thread.  0, or -errno (logged: a bad URL, no keys). */
int remote_sync_start(struct server *s);
/* Stop the push thread (an upload in progress is finished first; queued
 * ones are dropped) and wake whoever waits for a push.  Safe when never
 * started; call it before the HTTP threads are stopped. */
void remote_sync_quiesce(struct server *s);
/* Free it all and close the remote (after remote_sync_quiesce). */
void remote_sync_finish(struct server *s);

/* Queue a push of function's current snapshot (nothing without a remote). */
void remote_sync_push(struct server *s, const char *function);
/* function was deleted here: delete its ref on the remote too (the fleet
 * loses it; what only it reached goes at the next remote gc runs), and
 * forget its pushes.  A failure is logged: the ref stays. */
void remote_sync_forget(struct server *s, const char *function);
/* Add the latest push of function to its GET /functions/<id> object f. */
void remote_sync_describe(struct server *s, const char *function, json_t *f);

/* Make snapshot snap whole in the store from the remote, if its manifest is
 * not there: 0 (also when there is no remote: the start then reports what
 * is missing), or -errno with log_last_error() naming what failed.  *ms:
 * how long the fetch took (0: none was needed). */
int remote_sync_fetch(struct server *s, const char *snap, double *ms);

/* Register function here from the remote, as POST …/pull?fetch=0 does (a
 * pull job; its chunks come with its first start), once: concurrent calls
 * for it wait for that one pull and share its result.  0, -ENOENT (no
 * remote, or no ref of it), or the pull's -errno. */
int remote_sync_learn(struct server *s, const char *function);
/* For a start or a routed request: function registered here, learned from
 * the remote first if need be.  0 (registered, or the remote lacks it too:
 * the caller answers its own 404), or -errno with *e and msg (503
 * no_capacity, 502 remote_failed, 403 forbidden, 503 shutting_down). */
struct api_err;
int remote_sync_ensure(struct server *s, const char *function, struct api_err *e, char *msg,
		       size_t msglen);

/* What the routes (server/api_remote.c) ask; both need a remote
 * (s->remote_sync not NULL). */
/* Queue a push of function's current snapshot and, with wait, wait until
 * it is done (or thawd stops).  0 and *push (its "push" object, a new
 * reference), -EIO when it was waited for and failed (*push says why), or
 * -ENOMEM. */
int remote_sync_push_now(struct server *s, const char *function, bool wait, json_t **push);
/* A pull job of function (its id in jid), which takes a --max-snapshots
 * place: reads its ref, fetches its snapshot's chunks (or only the
 * manifest, fetch false) and registers it.  0, or -errno with *reserved
 * false when no job could be reserved (-EAGAIN: the jobs are full,
 * -ESHUTDOWN), true when its thread could not be started. */
int remote_sync_pull(struct server *s, const char *function, bool fetch, char jid[32],
		     bool *reserved);

#endif
