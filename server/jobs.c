/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.c — see jobs.h. */
#define LOG_PREFIX "jobs: "
#include "server/jobs.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/util.h"
#include "server/errors.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum job_state { JOB_RESERVED, JOB_RUNNING, JOB_DONE, JOB_FAILED };

struct job {
	struct jobs *js;
	char id[32];
	char kind[16];
	char function[64];
	char created[32]; /* RFC 3339 */
	enum job_state state;
	uint64_t start_ns;
	double duration_ms;
	json_t *result;
	int err;
	char *message;
	job_fn fn;
	void *arg;
	void (*free_arg)(void *);
	pthread_t thread;
	bool joinable;
	/* Progress of long work, when the job reports it (jobs_progress). */
	char phase[32];
	uint64_t done, total;
	uint64_t progress_ns; /* when it last moved; 0: never reported */
};

struct jobs {
	pthread_mutex_t lock;
	pthread_cond_t done;
	unsigned max_running, active;
	bool draining;
	uint64_t next_id;
	struct job **j; /* oldest first */
	size_t n, cap;
	char log_dir[PATH_MAX]; /* "": jobs keep no logs */
};

struct jobs *jobs_new(unsigned max_running)
{
	struct jobs *js = calloc(1, sizeof(*js));

	if (!js)
		return NULL;
	pthread_mutex_init(&js->lock, NULL);
	pthread_cond_init(&js->done, NULL);
	js->max_running = max_running;
	js->next_id = 1;
	return js;
}

static int log_path(const struct jobs *js, const char *id, char *buf, size_t len)
{
	if (!js->log_dir[0])
		return -ENOENT;
	if ((size_t)snprintf(buf, len, "%s/%s.log", js->log_dir, id) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* j's record goes, and its log with it. */
static void job_free(struct job *j)
{
	char path[PATH_MAX + 64];

	if (!j)
		return;
	if (j->js && log_path(j->js, j->id, path, sizeof(path)) == 0)
		logfile_remove(path);
	json_decref(j->result);
	free(j->message);
	free(j);
}

/* Forget the oldest finished jobs beyond JOBS_KEEP.  Lock held. */
static void trim(struct jobs *js)
{
	size_t finished = 0;

	for (size_t i = 0; i < js->n; i++)
		finished += js->j[i]->state >= JOB_DONE;
	for (size_t i = 0; i < js->n && finished > JOBS_KEEP;) {
		struct job *j = js->j[i];

		if (j->state < JOB_DONE || j->joinable) {
			i++;
			continue;
		}
		memmove(&js->j[i], &js->j[i + 1], (js->n - i - 1) * sizeof(*js->j));
		js->n--;
		finished--;
		job_free(j);
	}
}

static void now_rfc3339(char out[32])
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void reap(struct jobs *js);

struct job *jobs_reserve(struct jobs *js, const char *kind, const char *function, int *err)
{
	struct job *j = NULL;

	pthread_mutex_lock(&js->lock);
	/* Finished jobs beyond JOBS_KEEP go (and their logs) even if nobody
	 * asks for the list. */
	reap(js);
	if (js->draining) {
		*err = -ESHUTDOWN;
		goto out;
	}
	if (js->active >= js->max_running) {
		*err = -EAGAIN;
		goto out;
	}
	if (ARRAY_GROW(js->j, js->cap, js->n + 1, 32)) {
		*err = -ENOMEM;
		goto out;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		*err = -ENOMEM;
		goto out;
	}
	j->js = js;
	snprintf(j->id, sizeof(j->id), "job-%llu", (unsigned long long)js->next_id++);
	snprintf(j->kind, sizeof(j->kind), "%s", kind);
	snprintf(j->function, sizeof(j->function), "%s", function);
	now_rfc3339(j->created);
	j->state = JOB_RESERVED;
	js->j[js->n++] = j;
	js->active++;
out:
	pthread_mutex_unlock(&js->lock);
	return j;
}

const char *job_id(const struct job *j)
{
	return j->id;
}

int jobs_set_log_dir(struct jobs *js, const char *dir)
{
	int ret;

	if (snprintf(js->log_dir, sizeof(js->log_dir), "%s", dir) >= (int)sizeof(js->log_dir)) {
		js->log_dir[0] = '\0';
		pr_err("path too long: %s", dir);
		return -ENAMETOOLONG;
	}
	ret = rm_rf(dir);
	if (!ret)
		ret = mkdir_p(dir, 0700);
	if (ret) {
		pr_err("cannot empty the job log directory %s: %s", dir, strerror(-ret));
		js->log_dir[0] = '\0';
	}
	return ret;
}

void jobs_unreserve(struct jobs *js, struct job *j)
{
	pthread_mutex_lock(&js->lock);
	for (size_t i = 0; i < js->n; i++) {
		if (js->j[i] == j) {
			memmove(&js->j[i], &js->j[i + 1], (js->n - i - 1) * sizeof(*js->j));
			js->n--;
			break;
		}
	}
	js->active--;
	pthread_cond_broadcast(&js->done);
	pthread_mutex_unlock(&js->lock);
	job_free(j);
}

static void *job_thread(void *p)
{
	struct job *j = p;
	struct jobs *js = j->js;
	json_t *result = NULL;
	char msg[1024] = "";
	int ret;

	ret = j->fn(j->arg, &result, msg, sizeof(msg));
	if (j->free_arg)
		j->free_arg(j->arg);

	pthread_mutex_lock(&js->lock);
	j->duration_ms = ms_since(j->start_ns);
	j->result = result;
	if (ret) {
		j->state = JOB_FAILED;
		j->err = ret;
		j->message = strdup(msg[0] ? msg : strerror(-ret));
	} else {
		j->state = JOB_DONE;
	}
	js->active--;
	pthread_cond_broadcast(&js->done);
	pthread_mutex_unlock(&js->lock);
	return NULL;
}

int jobs_run(struct jobs *js, struct job *j, job_fn fn, void *arg, void (*free_arg)(void *))
{
	int ret;

	pthread_mutex_lock(&js->lock);
	j->fn = fn;
	j->arg = arg;
	j->free_arg = free_arg;
	j->state = JOB_RUNNING;
	j->start_ns = now_ns();
	ret = -pthread_create(&j->thread, NULL, job_thread, j);
	if (!ret)
		j->joinable = true;
	pthread_mutex_unlock(&js->lock);
	if (ret) {
		pr_err("cannot start a thread for %s of %s: %s", j->kind, j->function,
		       strerror(-ret));
		if (free_arg)
			free_arg(arg);
		jobs_unreserve(js, j);
	}
	return ret;
}

static struct job *find(struct jobs *js, const char *id)
{
	for (size_t i = 0; i < js->n; i++) {
		if (!strcmp(js->j[i]->id, id))
			return js->j[i];
	}
	return NULL;
}

int jobs_log_path(struct jobs *js, const char *id, char *buf, size_t len)
{
	int ret;

	pthread_mutex_lock(&js->lock);
	ret = find(js, id) ? log_path(js, id, buf, len) : -ENOENT;
	pthread_mutex_unlock(&js->lock);
	return ret;
}

/* Join the threads of finished jobs, so that none lingers.  Lock held;
 * joining a finished thread does not block for long. */
static void reap(struct jobs *js)
{
	for (size_t i = 0; i < js->n; i++) {
		struct job *j = js->j[i];

		if (j->joinable && j->state >= JOB_DONE) {
			pthread_join(j->thread, NULL);
			j->joinable = false;
		}
	}
	trim(js);
}

int jobs_wait(struct jobs *js, const char *id)
{
	struct job *j;
	int ret = 0;

	pthread_mutex_lock(&js->lock);
	for (;;) {
		j = find(js, id);
		if (!j) {
			ret = -ENOENT;
			break;
		}
		if (j->state >= JOB_DONE)
			break;
		pthread_cond_wait(&js->done, &js->lock);
	}
	pthread_mutex_unlock(&js->lock);
	return ret;
}

static const char *const state_names[] = { "queued", "running", "done", "failed" };

static json_t *job_json(const struct job *j)
{
	json_t *error = json_null(), *result;

	if (j->state == JOB_FAILED) {
		struct api_err e = api_err_from_errno(j->err);

		error = json_pack("{s:s, s:s}", "code", e.code, "message",
				  j->message ? j->message : "failed");
	}
	result = j->result ? json_deep_copy(j->result) : json_null();
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:o, s:o, s:o}", "id", j->id, "kind",
			 j->kind, "function", j->function, "state", state_names[j->state],
			 "created", j->created, "duration_ms",
			 j->state >= JOB_DONE ? j->duration_ms
					      : (j->start_ns ? ms_since(j->start_ns) : 0.0),
			 "result", result, "error", error, "progress",
			 j->progress_ns ? json_pack("{s:s, s:I, s:I}", "phase", j->phase, "done",
						    (json_int_t)j->done, "total",
						    (json_int_t)j->total)
					: json_null());
}

void jobs_progress(struct jobs *js, const char *id, const char *phase, uint64_t done,
		   uint64_t total)
{
	struct job *j;

	pthread_mutex_lock(&js->lock);
	j = find(js, id);
	if (j) {
		snprintf(j->phase, sizeof(j->phase), "%s", phase);
		j->done = done;
		j->total = total;
		j->progress_ns = now_ns();
	}
	pthread_mutex_unlock(&js->lock);
}

int jobs_get_json(struct jobs *js, const char *id, json_t **out, int *err_out)
{
	struct job *j;
	int ret = 0;

	*out = NULL;
	pthread_mutex_lock(&js->lock);
	reap(js);
	j = find(js, id);
	if (!j) {
		ret = -ENOENT;
	} else {
		*out = job_json(j);
		if (!*out)
			ret = -ENOMEM;
		if (err_out)
			*err_out = j->state == JOB_FAILED ? j->err : 0;
	}
	pthread_mutex_unlock(&js->lock);
	return ret;
}

int jobs_list_json(struct jobs *js, json_t **out)
{
	json_t *arr = json_array();
	int ret = 0;

	*out = NULL;
	if (!arr)
		return -ENOMEM;
	pthread_mutex_lock(&js->lock);
	reap(js);
	for (size_t i = 0; i < js->n && !ret; i++) {
		if (json_array_append_new(arr, job_json(js->j[i])))
			ret = -ENOMEM;
	}
	pthread_mutex_unlock(&js->lock);
	if (ret) {
		json_decref(arr);
		return ret;
	}
	*out = arr;
	return 0;
}

unsigned jobs_active(struct jobs *js)
{
	unsigned n;

	pthread_mutex_lock(&js->lock);
	n = js->active;
	pthread_mutex_unlock(&js->lock);
	return n;
}

void jobs_drain(struct jobs *js)
{
	pthread_mutex_lock(&js->lock);
	js->draining = true;
	if (js->active)
		pr_info("waiting for %u job(s) to finish", js->active);
	while (js->active)
		pthread_cond_wait(&js->done, &js->lock);
	reap(js);
	pthread_mutex_unlock(&js->lock);
}

void jobs_free(struct jobs *js)
{
	if (!js)
		return;
	jobs_drain(js);
	for (size_t i = 0; i < js->n; i++)
		job_free(js->j[i]);
	free(js->j);
	pthread_cond_destroy(&js->done);
	pthread_mutex_destroy(&js->lock);
	free(js);
}
