/* SPDX-License-Identifier: Apache-2.0 */
/* api.h — the handlers of the HTTP API (docs/API.md), one group per file,
 * each file the routes of one concern.  server/route_table.c maps a routed
 * request to one of them; each is called on the connection's own thread
 * with the request routed, its token checked and its body read
 * (server/http.c), and answers it through server/reply.c.  Every path
 * answers, and every failure is an error answer: nothing here may take the
 * server down.  Each returns what its reply_*() returned: 0, or -ENOMEM
 * when no answer could be queued.
 *
 * Calls run one way: route_table.c → these files → the components
 * (registry, jobs, insts, standby, remote_sync, fallback, …) and reply.c;
 * none of them calls back into http.c or thawd.c.
 */
#ifndef THAW_SERVER_API_H
#define THAW_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct req;
struct server;

/* ---- api_metrics.c: GET /healthz, GET /metrics ---- */

int api_get_healthz(struct req *q);
/* GET /readyz (no token): 200 when this host takes starts now, else 503. */
int api_get_readyz(struct req *q);
/* POST /drain (control): drain (server_drain), then exit. */
int api_post_drain(struct req *q);
/* The counters of server/metrics.h with the gauges of the moment (RAM
 * tier, store, instances, standbys, GPUs, routed pools), as Prometheus text. */
int api_get_metrics(struct req *q);
/* The thread that reads /metrics' slow gauges (api_metrics.c): 0 or -errno
 * (then the scrapes show no store or GPU figures); finish stops it (safe if
 * never started). */
int api_metrics_start(struct server *s);
void api_metrics_finish(struct server *s);

/* ---- api_functions.c: /functions, /functions/<id>, …/snapshot, /jobs ---- */

int api_get_functions(struct req *q);
/* The function's record, with its latest push (server/remote_sync.h). */
int api_get_function(struct req *q);
/* Create or replace the function from its spec: 201 or 200 with its record. */
int api_put_function(struct req *q);
/* Mark it deleting, stop its instances, forget its snapshot, remove it: 204. */
int api_delete_function(struct req *q);
/* Delete function fn here as DELETE /functions/<id> does and, with fleet,
 * its ref on the remote too (the fleet loses it).  0, or -errno with *e and
 * msg (what the DELETE answers). */
struct api_err;
int api_function_delete(struct server *s, const char *fn, bool fleet, struct api_err *e,
			char *msg, size_t msglen);
/* A snapshot job of the function (server/snapshots.h): 202 with the job,
 * or 200 once done with ?wait=1. */
int api_post_snapshot(struct req *q);
int api_get_jobs(struct req *q);
int api_get_job(struct req *q);
/* ---- api.c: POST /functions/<id>/start ---- */

/* A start of the function (server/starts.h) with what the query asks
 * (?gpu=, ?idle_s=, ?max_lifetime_s=): 201 with the instance, or the
 * error of the step that refused or failed it. */
int api_post_start(struct req *q);

/* ---- api_instances.c: /instances, /instances/<iid> ---- */

/* The instances (?all=1: with the ended ones still kept). */
int api_get_instances(struct req *q);
/* One instance's record, running or ended. */
int api_get_instance(struct req *q);
/* Stop it (?grace_s= overrides its stop_grace_s): 204. */
int api_delete_instance(struct req *q);
/* The id an instance record rec names ("instance", else "id"), or NULL. */
const char *api_record_id(json_t *rec);
/* Stop the instances of function (all of them: its standbys, this thawd's,
 * and those on disk that name it), but for those its starts in progress are
 * making.  *stopped: how many were stopped.  0 once none is left (or only
 * one another request is stopping), else the error of the first that could
 * not be stopped, or of the listing; what failed, in words, into failed. */
int api_stop_function_instances(struct server *s, const char *function, size_t *stopped,
				char failed[128]);

/* ---- api_remote.c: POST /functions/<id>/push, POST /functions/<id>/pull ---- */

/* Queue a push of the function to the remote (server/remote_sync.h): 202
 * with the push, or 200 once it is done with ?wait=1; 409 without a remote. */
int api_post_push(struct req *q);
/* A pull job of the function from the remote: 202 with the job, or 200
 * once done with ?wait=1; 409 without a remote. */
int api_post_pull(struct req *q);

/* ---- logs.c: GET /instances/<iid>/logs, GET /jobs/<jid>/logs (server/logs.h) ---- */

#endif
