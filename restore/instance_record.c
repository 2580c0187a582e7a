/* SPDX-License-Identifier: Apache-2.0 */
/* instance_record.c — an instance's directory, id and record
 * (<data>/instances/<id>.json): written, read, listed (instance.h,
 * instance_internal.h).
 */
#define LOG_PREFIX "instance: "
#include "restore/instance.h"
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "restore/instance_internal.h"
#include "restore/shim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECORD_MAX (1 << 20)

/* A path into buf; -ENAMETOOLONG (logged) if it does not fit. */
int instance_path(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len) {
		pr_err("path too long: %s…", buf);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int instances_dir(const struct thaw_config *c, char *buf, size_t len)
{
	return instance_path(buf, len, "%s/instances", c->data_dir);
}

int instance_record_path(const struct thaw_config *c, const char *id, char *buf, size_t len)
{
	return instance_path(buf, len, "%s/instances/%s.json", c->data_dir, id);
}

int instance_runc_root(const struct thaw_config *c, char *buf, size_t len)
{
	return instance_path(buf, len, "%s/runc", c->data_dir);
}

/* An id for a new instance: the function's id and 6 random hex digits. */
static void make_id(const char *function, char out[64])
{
	uint8_t rnd[3];
	char hex[7];

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint64_t t = now_ns();

		memcpy(rnd, &t, sizeof(rnd));
	}
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(out, 64, "%.56s-%s", id_valid(function) ? function : "fn", hex);
}

/* Milliseconds to the microsecond: more digits would only be noise. */
static double ms3(double ms)
{
	return round(ms * 1000.0) / 1000.0;
}

json_t *instance_timings_json(const struct instance *in)
{
	const struct instance_timings *t = &in->t;
	json_t *j;

	if (in->booted)
		return instance_boot_timings(in);
	j = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "load", ms3(t->load),
		    "materialize", ms3(t->materialize), "setup", ms3(t->setup),
		    "criu_restore", ms3(t->criu_restore), "endpoint", ms3(t->endpoint),
		    "gpu_restore", ms3(t->gpu_restore), "ready", ms3(t->ready), "total",
		    ms3(t->total));
	if (j && t->gpu_copy > 0 &&
	    json_object_set_new(j, "gpu_memory_copy", json_real(ms3(t->gpu_copy)))) {
		json_decref(j);
		return NULL;
	}
	if (j && t->resume > 0 && json_object_set_new(j, "resume", json_real(ms3(t->resume)))) {
		json_decref(j);
		return NULL;
	}
	if (j && in->image[0] && json_object_set_new(j, "image", json_real(ms3(t->image)))) {
		json_decref(j);
		return NULL;
	}
	/* lazy_done: null until the daemon has served every page. */
	if (j && in->lazy &&
	    (json_object_set_new(j, "lazy_done",
				 t->lazy_done > 0 ? json_real(ms3(t->lazy_done)) : json_null()) ||
	     (t->lazy_wait > 0 && json_object_set_new(j, "lazy_wait", json_real(ms3(t->lazy_wait)))))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

json_t *instance_to_json(const struct instance *in)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:s,s:b,s:b,s:o*}", "instance", in->id,
			      "function", in->function, "snapshot", in->snapshot, "endpoint",
			      in->endpoint, "pid", (json_int_t)in->pid, "tier",
			      in->tier_hit ? "ram" : "disk", "pages", in->pages ? in->pages : "eager",
			      "lazy", in->lazy, "standby", in->standby, "timings_ms",
			      instance_timings_json(in));

	if (j && in->ngpus) {
		json_t *g = json_array();

		for (size_t i = 0; g && i < in->ngpus; i++)
			json_array_append_new(g, json_pack("{s:i, s:s, s:s}", "index",
							   in->gpus[i].index, "uuid",
							   in->gpus[i].uuid, "name",
							   in->gpus[i].name));
		if (!g || json_object_set_new(j, "gpus", g)) {
			json_decref(j);
			return NULL;
		}
	}
	/* The image it runs on, and whether this start brought it. */
	if (j && in->image[0] &&
	    json_object_set_new(j, "image", json_pack("{s:s, s:b}", "digest", in->image, "copied",
						      in->image_copied))) {
		json_decref(j);
		return NULL;
	}
	/* A GPU function's device memory: who carried it, and why not thaw. */
	if (j && in->gpu_memory &&
	    (json_object_set_new(j, "gpu_memory", json_string(in->gpu_memory)) ||
	     (in->gpu_memory_why[0] &&
	      json_object_set_new(j, "gpu_memory_why", json_string(in->gpu_memory_why))))) {
		json_decref(j);
		return NULL;
	}
	/* A standby holding its contexts: what that holds on its GPU. */
	if (j && in->standby_context &&
	    (json_object_set_new(j, "standby_gpu", json_string("context")) ||
	     json_object_set_new(j, "standby_gpu_bytes", json_integer((json_int_t)in->standby_gpu_bytes)))) {
		json_decref(j);
		return NULL;
	}
	/* Restored, or booted cold: why (docs/DESIGN.md, "Restore or boot"). */
	if (j && (json_object_set_new(j, "restored", json_boolean(!in->booted)) ||
		  (in->booted &&
		   json_object_set_new(j, "restore_failure", json_string(in->boot_why))))) {
		json_decref(j);
		return NULL;
	}
	/* Which confinement applies: a user namespace (its host uid 0), or
	 * the host's uid 0 without capabilities. */
	if (j && (json_object_set_new(j, "userns", json_boolean(in->userns_size)) ||
		  (in->userns_size &&
		   json_object_set_new(j, "userns_uid", json_integer(in->userns_uid))))) {
		json_decref(j);
		return NULL;
	}
	/* Not mapped: why, so that a user can tell a fallback from a choice. */
	if (j && in->pages_why[0] &&
	    json_object_set_new(j, "pages_why", json_string(in->pages_why))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* The GPUs of in: those of placement p. */
void instance_set_gpus(struct instance *in, const struct gpu_placement *p)
{
	in->ngpus = p->n < GPU_MAX ? p->n : GPU_MAX;
	for (size_t i = 0; i < in->ngpus; i++) {
		in->gpus[i].index = p->dev[i].ordinal;
		snprintf(in->gpus[i].uuid, sizeof(in->gpus[i].uuid), "%s", p->dev[i].uuid);
		snprintf(in->gpus[i].name, sizeof(in->gpus[i].name), "%s", p->dev[i].name);
	}
}

/* The record: what instance_to_json says, and what stop needs. */
int instance_ctx_record(struct start_ctx *x, const struct instance *in, const char *state)
{
	json_t *j = instance_to_json(in), *cuda = json_array();
	char *text = NULL;
	int ret = -ENOMEM;

	if (!j || !cuda)
		goto out;
	for (size_t i = 0; i < x->ncuda; i++)
		json_array_append_new(cuda, json_integer(x->cuda_pids[i]));
	if (json_object_set_new(j, "state", json_string(state)) ||
	    json_object_set_new(j, "container", json_string(in->id)) ||
	    json_object_set_new(j, "runc_root", json_string(x->runc_root)) ||
	    json_object_set_new(j, "dir", json_string(x->dir)) ||
	    json_object_set_new(j, "netns", json_string(x->netns)) ||
	    json_object_set_new(j, "log", json_string(x->log)) ||
	    json_object_set_new(j, "pid_start", json_integer((json_int_t)x->pid_start)) ||
	    json_object_set_new(j, "shim_pid", json_integer(x->shim_pid)) ||
	    json_object_set_new(j, "shim_start", json_integer((json_int_t)x->shim_start)) ||
	    json_object_set_new(j, "gpu", json_boolean(x->gpu)) ||
	    json_object_set_new(j, "lazy_watcher_pid", json_integer(x->lz.watcher)) ||
	    json_object_set_new(j, "lazy_watcher_start",
				json_integer((json_int_t)x->lz_watcher_start)) ||
	    json_object_set_new(j, "lazy_daemon_pid", json_integer(x->lz.daemon)) ||
	    json_object_set_new(j, "lazy_daemon_start",
				json_integer((json_int_t)x->lz_daemon_start)) ||
	    json_object_set_new(j, "lease_holder_pid", json_integer(x->holder)) ||
	    json_object_set_new(j, "lease_holder_start",
				json_integer((json_int_t)x->holder_start)) ||
	    json_object_set(j, "cuda_pids", cuda) ||
	    json_object_set_new(j, "created", json_integer((json_int_t)time(NULL))) ||
	    (x->standby_meta &&
	     json_object_set_new(j, "snapshot_meta", snapshot_meta_to_json(x->standby_meta))))
		goto out;
	if (!strcmp(state, "starting")) {
		/* Who is starting it: list tells a start that died half-way. */
		unsigned long long me = 0;

		proc_start_time(getpid(), &me);
		if (json_object_set_new(j, "starter_pid", json_integer(getpid())) ||
		    json_object_set_new(j, "starter_start", json_integer((json_int_t)me)))
			goto out;
	}
	text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
	if (!text)
		goto out;
	ret = write_file_atomic(x->record, text, strlen(text), 0600);
out:
	if (ret == -ENOMEM)
		pr_err("out of memory writing %s", x->record);
	free(text);
	json_decref(cuda);
	json_decref(j);
	return ret;
}

int instance_record_load(const char *path, json_t **out)
{
	json_error_t jerr;
	char *text = NULL;
	size_t len;
	int ret = read_file(path, &text, &len, RECORD_MAX);

	if (ret)
		return ret;
	*out = json_loadb(text, len, 0, &jerr);
	free(text);
	if (!json_is_object(*out)) {
		pr_err("%s: not an instance record: %s", path, jerr.text);
		json_decref(*out);
		*out = NULL;
		return -EINVAL;
	}
	return 0;
}

bool instance_record_num(const json_t *rec, const char *key, long long *v)
{
	json_t *j = json_object_get(rec, key);

	if (!json_is_integer(j))
		return false;
	*v = json_integer_value(j);
	return true;
}

int instance_record_cuda_pids(const json_t *rec, pid_t **pids, size_t *n)
{
	const json_t *a = json_object_get(rec, "cuda_pids"), *v;
	size_t i;

	*pids = NULL;
	*n = 0;
	if (!json_array_size(a))
		return 0;
	*pids = calloc(json_array_size(a), sizeof(pid_t));
	if (!*pids)
		return -ENOMEM;
	json_array_foreach(a, i, v)
		if (json_is_integer(v) && json_integer_value(v) > 0)
			(*pids)[(*n)++] = (pid_t)json_integer_value(v);
	return 0;
}

bool instance_recorded(const struct thaw_config *c, const char *id)
{
	char path[PATH_MAX];

	return id_valid(id) && !instance_record_path(c, id, path, sizeof(path)) &&
	       access(path, F_OK) == 0;
}

int instance_activity(const struct thaw_config *c, const char *id, uint64_t *last_ms,
		      unsigned *open_conns)
{
	char path[PATH_MAX + 128];
	uint64_t v[2];
	int fd, ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = instance_path(path, sizeof(path), "%s/instances/%s/activity", c->data_dir, id);
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = pread(fd, v, sizeof(v), 0) == (ssize_t)sizeof(v) ? 0 : -EIO;
	close(fd);
	if (!ret) {
		*last_ms = v[0];
		*open_conns = (unsigned)v[1];
	}
	return ret;
}

int instance_set_limits(const struct thaw_config *c, const char *id, double idle_s,
			double max_lifetime_s, double stop_grace_s, bool routed)
{
	char path[PATH_MAX + 16], *text = NULL;
	json_t *rec = NULL;
	int ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = instance_record_path(c, id, path, sizeof(path));
	if (!ret)
		ret = instance_record_load(path, &rec);
	if (ret)
		return ret;
	if (json_object_set_new(rec, "idle_s", json_real(idle_s)) ||
	    json_object_set_new(rec, "max_lifetime_s", json_real(max_lifetime_s)) ||
	    json_object_set_new(rec, "stop_grace_s", json_real(stop_grace_s)) ||
	    json_object_set_new(rec, "started_ms", json_integer((json_int_t)realtime_ms())) ||
	    (routed && json_object_set_new(rec, "routed", json_true())) ||
	    !(text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10))))
		ret = -ENOMEM;
	if (!ret)
		ret = write_file_atomic(path, text, strlen(text), 0600);
	free(text);
	json_decref(rec);
	return ret;
}

/* A running instance's use and when thawd stops it by itself: its shim's
 * activity file, and the limits instance_set_limits recorded. */
static void activity_word(const struct thaw_config *c, json_t *rec)
{
	const char *id = json_string_value(json_object_get(rec, "instance"));
	double idle = json_number_value(json_object_get(rec, "idle_s"));
	double life = json_number_value(json_object_get(rec, "max_lifetime_s"));
	long long started = 0;
	uint64_t last = 0, at = 0;
	unsigned open_conns = 0;
	const char *why = NULL;

	if (!id || instance_activity(c, id, &last, &open_conns))
		return;
	json_object_set_new(rec, "last_activity_ms", json_integer((json_int_t)last));
	json_object_set_new(rec, "open_connections", json_integer(open_conns));
	instance_record_num(rec, "started_ms", &started);
	if (idle > 0 && !open_conns) {
		at = last + (uint64_t)(idle * 1000);
		why = "idle";
	}
	if (life > 0 && started > 0 && (!at || (uint64_t)started + (uint64_t)(life * 1000) < at)) {
		at = (uint64_t)started + (uint64_t)(life * 1000);
		why = "lifetime";
	}
	if (why) {
		json_object_set_new(rec, "stop_at_ms", json_integer((json_int_t)at));
		json_object_set_new(rec, "stop_why", json_string(why));
	}
}

/* A lazy instance whose daemon has finished or failed: lazy_done into its
 * timings, or "failed" with the reason (the watcher has killed it). */
static bool lazy_word(const struct thaw_config *c, json_t *rec)
{
	char path[PATH_MAX + 300], why[512];
	const char *id = json_string_value(json_object_get(rec, "instance"));
	double done = 0;
	int st;

	if (!json_is_true(json_object_get(rec, "lazy")) || !id || !id_valid(id) ||
	    instance_path(path, sizeof(path), "%s/instances/%s/lazy.status", c->data_dir, id))
		return false;
	st = lazy_watch_status(path, &done, why, sizeof(why));
	if (st > 0) {
		json_t *tm = json_object_get(rec, "timings_ms");

		if (json_is_object(tm))
			json_object_set_new(tm, "lazy_done", json_real(ms3(done)));
		return false;
	}
	if (st < 0) {
		char msg[640];

		snprintf(msg, sizeof(msg), "page source lost: %s; the instance was killed", why);
		json_object_set_new(rec, "state", json_string("failed"));
		json_object_set_new(rec, "error", json_string(msg));
		return true;
	}
	return false;
}

/* Is the recorded instance running: its container's first process alive? */
static const char *record_state(const json_t *rec)
{
	const char *st = json_string_value(json_object_get(rec, "state"));
	long long pid = 0, start = 0;

	if (st && !strcmp(st, "starting")) {
		/* A start still going on, or one killed half-way ('thaw stop'
		 * removes what it left). */
		instance_record_num(rec, "starter_pid", &pid);
		instance_record_num(rec, "starter_start", &start);
		return pid > 0 && proc_alive((pid_t)pid, (unsigned long long)start) ? "starting"
										  : "abandoned";
	}
	/* Being stopped (instance_stop_begin), its process alive or not. */
	if (st && !strcmp(st, "stopping"))
		return "stopping";
	instance_record_num(rec, "pid", &pid);
	instance_record_num(rec, "pid_start", &start);
	if (!(pid > 0 && proc_alive((pid_t)pid, (unsigned long long)start)))
		return "exited";
	return st && !strcmp(st, "standby") ? "standby" : "running";
}

int instance_list(const struct thaw_config *c, json_t **out)
{
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *de;
	json_t *arr = json_array();
	DIR *d;

	*out = NULL;
	if (!arr)
		return -ENOMEM;
	if (instances_dir(c, dir, sizeof(dir))) {
		json_decref(arr);
		return -ENAMETOOLONG;
	}
	d = opendir(dir);
	if (!d) {
		if (errno == ENOENT) {
			*out = arr;
			return 0;
		}
		int err = -errno;
		pr_perror("open %s", dir);
		json_decref(arr);
		return err;
	}
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		json_t *rec = NULL;

		if (len < 6 || strcmp(de->d_name + len - 5, ".json") || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (instance_record_load(path, &rec))
			continue; /* vanished (stopped meanwhile) or damaged: logged */
		json_object_set_new(rec, "state", json_string(record_state(rec)));
		lazy_word(c, rec);
		if (!strcmp(json_string_value(json_object_get(rec, "state")) ?: "", "running"))
			activity_word(c, rec);
		json_array_append_new(arr, rec);
	}
	closedir(d);
	*out = arr;
	return 0;
}

int instance_ctx_dir(struct start_ctx *x, struct instance *in)
{
	char dir[PATH_MAX];
	int ret;

	ret = instances_dir(x->c, dir, sizeof(dir));
	if (!ret)
		ret = instance_runc_root(x->c, x->runc_root, sizeof(x->runc_root));
	if (!ret)
		ret = mkdir_p(dir, 0700);
	if (ret)
		return ret;
	for (int tries = 0;; tries++) {
		make_id(in->function, in->id);
		ret = instance_path(x->dir, sizeof(x->dir), "%s/%s", dir, in->id);
		if (ret)
			return ret;
		if (mkdir(x->dir, 0700) == 0)
			break;
		if (errno != EEXIST || tries == 8) {
			ret = -errno;
			pr_perror("mkdir %s", x->dir);
			return ret;
		}
	}
	x->have_dir = true;
	instance_record_path(x->c, in->id, x->record, sizeof(x->record));
	instance_ctx_runner(x);
	snprintf(x->netns, sizeof(x->netns), "%s/netns", x->dir);
	snprintf(x->bundle, sizeof(x->bundle), "%s/bundle", x->dir);
	snprintf(x->work, sizeof(x->work), "%s/criu", x->dir);
	snprintf(x->log, sizeof(x->log), "%s/function.log", x->dir);
	snprintf(x->activity, sizeof(x->activity), "%s/activity", x->dir);
	return 0;
}

void instance_ctx_runner(struct start_ctx *x)
{
	x->r = (struct runner){ .runc = x->c->runc, .criu = x->c->criu, .state_dir = x->runc_root,
				.lazy_daemon = x->c->lazy_daemon };
}
