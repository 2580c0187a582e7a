/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.h — long work (snapshots) on worker threads, at most N at once.
 *
 * A job is reserved first (which checks the limit and names it), then run on
 * its own thread; its record stays (the last JOBS_KEEP finished ones) so that
 * GET /jobs/<id> can tell how it ended.  Job ids are "job-<n>", valid ids.
 * A job may keep a log (the function's output during a snapshot) in the log
 * directory, removed when its record goes.
 *
 *	struct job *j = jobs_reserve(js, "snapshot", "fn-a", &err);   (-EAGAIN: full)
 *	… record job_id(j) somewhere …
 *	jobs_run(js, j, fn, arg, free_arg);    or jobs_unreserve(js, j)
 */
#ifndef THAW_SERVER_JOBS_H
#define THAW_SERVER_JOBS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JOBS_KEEP 256

struct jobs;
struct job;

/* The work: 0 and *result (a new reference, may stay NULL), or -errno with a
 * message in err. */
typedef int (*job_fn)(void *arg, json_t **result, char *err, size_t errlen);

/* NULL on allocation failure. */
struct jobs *jobs_new(unsigned max_running);
/* Joins every job thread first (see jobs_drain). NULL is fine. */
void jobs_free(struct jobs *js);

/* Reserve a place for a job of kind for function.  NULL and *err: -EAGAIN when
 * max_running jobs are reserved or running, -ESHUTDOWN once draining,
 * -ENOMEM. */
struct job *jobs_reserve(struct jobs *js, const char *kind, const char *function, int *err);
const char *job_id(const struct job *j);
/* Keep the jobs' logs in dir (made if missing): job id's is <dir>/<id>.log
 * (jobs_log_path), removed, with its rotated <id>.log.1, when the job's
 * record is.  What dir held is removed first: ids start again at job-1 with
 * every thawd, so an earlier run's logs would be taken for new jobs'.  0 or
 * -errno (logged). */
int jobs_set_log_dir(struct jobs *js, const char *dir);
/* Where job id keeps its log (the file need not exist yet).  0, -ENOENT when
 * there is no such job (any more) or no log directory, -ENAMETOOLONG. */
int jobs_log_path(struct jobs *js, const char *id, char *buf, size_t len);
/* Give a reservation back without running it. */
void jobs_unreserve(struct jobs *js, struct job *j);
/* Run fn(arg) on a new thread; free_arg(arg) (may be NULL) when it is done.
 * On failure (-errno) the reservation is given back and free_arg called. */
int jobs_run(struct jobs *js, struct job *j, job_fn fn, void *arg, void (*free_arg)(void *));

/* Wait until job id has finished.  -ENOENT if there is no such job. */
int jobs_wait(struct jobs *js, const char *id);
/* Job id as JSON: {"id","kind","function","state":"running|done|failed",
 * "created","duration_ms","result","error":{"code","message"}|null,
 * "progress":{"phase","done","total"}|null};
 * -ENOENT.  *err_out (may be NULL): the job's -errno, 0 if it did not fail. */
int jobs_get_json(struct jobs *js, const char *id, json_t **out, int *err_out);
int jobs_list_json(struct jobs *js, json_t **out);
/* Job id's progress, for long work: phase ("fetch", "unpack", …), done of
 * total (bytes, or items).  Shown as "progress" in its JSON (null until
 * reported).  Thread-safe; an unknown id is ignored. */
void jobs_progress(struct jobs *js, const char *id, const char *phase, uint64_t done,
		   uint64_t total);
/* Jobs reserved or running. */
unsigned jobs_active(struct jobs *js);

/* Refuse new jobs and wait for the running ones to finish. */
void jobs_drain(struct jobs *js);

#endif
