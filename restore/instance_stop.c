/* SPDX-License-Identifier: Apache-2.0 */
/* instance_stop.c — an instance stopped and its remains reaped: whatever
 * its record (or a failed start) names undone, newest first (instance.h,
 * instance_internal.h).
 */
#define LOG_PREFIX "instance: "
#include "restore/instance.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "restore/gpu_restore.h"
#include "restore/instance_ended.h"
#include "restore/instance_internal.h"
#include "restore/shim.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHIM_STOP_MS 3000
#define LAZY_STOP_MS 3000
/* How long a teardown that failed for want of descriptors or memory goes on
 * trying, and how long it waits between tries. */
#define TEARDOWN_RETRY_MS 30000
#define TEARDOWN_RETRY_WAIT_MS 50

/* netns_create makes the directory that holds the namespace file a private
 * mount where mounts propagate; unmount that too, or rm_rf stops at it. */
static void umount_dir(const char *dir)
{
	if (umount2(dir, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		pr_warn("umount %s: %s", dir, strerror(errno));
}

/* SIGKILL a helper of ours (pid with its start time, so that a reused pid is
 * left alone) and wait until it is gone.  0, or -EBUSY (logged). */
static int kill_helper(const char *what, pid_t pid, unsigned long long start)
{
	uint64_t t0 = now_ns();

	if (pid <= 0 || !start || !proc_alive(pid, start))
		return 0;
	kill(pid, SIGKILL);
	while (proc_alive(pid, start)) {
		waitpid(pid, NULL, WNOHANG); /* not ours (detached), but harmless */
		if (ms_since(t0) > LAZY_STOP_MS) {
			pr_err("%s %d is still alive after SIGKILL", what, (int)pid);
			return -EBUSY;
		}
		usleep(2000);
	}
	return 0;
}

/* Note when step of a stop happened in the record's "stop" object (of a
 * stop that began with instance_stop_begin), for the ended record. */
static void note_stop(const json_t *rec, const char *step)
{
	json_t *stop = json_object_get(rec, "stop");

	if (json_is_object(stop))
		json_object_set_new(stop, step, json_integer((json_int_t)realtime_ms()));
}

/* Has process pid a handler for SIGTERM (SigCgt of /proc/<pid>/status)? */
static bool catches_sigterm(pid_t pid)
{
	char path[64], line[256];
	unsigned long long mask = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "SigCgt: %llx", &mask) == 1;
	fclose(f);
	return found && (mask & (1ull << (SIGTERM - 1)));
}

/* SIGTERM the container's first process and wait up to x->grace_ms for it
 * to exit (a function that finishes its requests and leaves); what is left
 * then is killed by runner_delete. */
static void ask_to_exit(struct start_ctx *x, const char *id)
{
	uint64_t t0 = now_ns();

	if (x->init <= 0 || !proc_alive(x->init, x->pid_start))
		return;
	/* The first process is its PID namespace's init: the kernel gives it
	 * only the signals it has a handler for.  Without one for SIGTERM
	 * (Python's default) waiting would only delay the kill. */
	if (!catches_sigterm(x->init)) {
		pr_debug("instance %s has no SIGTERM handler: killed at once", id);
		return;
	}
	if (runner_kill(&x->r, id, "TERM"))
		return;
	while (ms_since(t0) < x->grace_ms && proc_alive(x->init, x->pid_start))
		usleep(20 * 1000);
	if (proc_alive(x->init, x->pid_start))
		pr_info("instance %s did not exit within %d ms of SIGTERM: killed", id, x->grace_ms);
}

/* Undo whatever x holds, newest first.  0, or the first error (logged)
 * with what is left named; what was undone is marked so in x, so that a
 * second call goes on with what is left. */
static int teardown_once(struct start_ctx *x, const char *id)
{
	bool oom = false;
	int ret = 0, r;

	function_host_paths_close(&x->held);
	for (int i = 0; i < 2; i++) {
		int *fd = i ? &x->stdio.err_r : &x->stdio.out_r;

		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	/* The watcher before the container: killing the container may end
	 * the daemon, and a watcher still there would take that for a lost
	 * page source and write into a directory that is being removed. */
	r = kill_helper("lazy-pages watcher", x->lz.watcher, x->lz_watcher_start);
	if (r)
		return r;
	x->lz.watcher = 0;
	if (x->have_container) {
		if (x->gpu)
			gpu_lock_for_kill(x->cuda_pids, x->ncuda);
		if (x->grace_ms > 0)
			ask_to_exit(x, id);
		/* Before runc delete takes its cgroup with it. */
		if (x->end && x->end->exited)
			oom = instance_ended_oom(x->runc_root, id);
		r = runner_delete(&x->r, id);
		if (r) {
			/* The container may still be in the namespace: keep the
			 * namespace, the directory and the record for a later stop. */
			pr_err("container %s could not be deleted (left in runc root %s, with "
			       "%s): %s", id, x->runc_root, x->dir, log_last_error());
			return r;
		}
		x->have_container = false;
		/* Its processes are reaped: the driver has freed their GPU
		 * memory (measured on the H200: NVML's free figure has it back
		 * when the process is reaped). */
		if (x->gpu)
			note_stop(x->end_rec, "gpu_released_ms");
	}
	/* The daemon after the container: its pages are no longer wanted. */
	r = kill_helper("lazy-pages daemon", x->lz.daemon, x->lz_daemon_start);
	if (r)
		return r;
	x->lz.daemon = 0;
	/* The lease after the container: nothing maps the tier's files now. */
	r = kill_helper("tier lease holder", x->holder, x->holder_start);
	if (r)
		return r;
	x->holder = 0;
	/* The endpoint after the container: a client sees its connection
	 * close rather than refused while the function still runs. */
	if (x->shim_pid > 0) {
		r = shim_stop(x->shim_pid, x->shim_start, SHIM_STOP_MS);
		if (r && !ret)
			ret = r;
		if (!r)
			x->shim_pid = 0;
	}
	if (x->have_netns) {
		r = netns_remove(x->netns);
		if (r && !ret)
			ret = r;
		if (!r)
			x->have_netns = false;
	}
	if (x->have_dir) {
		char bundle[PATH_MAX + 16];

		/* A start killed while runc bound the spec's directories left
		 * them staged in its bundle (function/confine.h); x->bundle
		 * is not set for an instance of an earlier run. */
		snprintf(bundle, sizeof(bundle), "%s/bundle", x->dir);
		function_host_paths_unstage(bundle);
		umount_dir(x->dir);
	}
	/* The logs, then the ended record, then the directory, then the live
	 * record: a reader that finds no ended record after reading the live
	 * log read it whole (instance_log_tail), and one that finds neither
	 * record is asking for an instance that is not there. */
	if (!ret && x->end) {
		if (x->have_dir)
			instance_ended_keep_logs(x->c, id, x->dir);
		instance_ended_write(x->c, id, x->end_rec, x->end, oom);
	}
	if (x->have_dir) {
		r = rm_rf(x->dir);
		if (r) {
			pr_err("could not remove %s: %s", x->dir, strerror(-r));
			if (!ret)
				ret = r;
		} else {
			x->have_dir = false;
		}
	}
	if (!ret && unlink(x->record) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", x->record);
	}
	return ret;
}

/* Is err the want of this process's own resources (descriptors, memory),
 * which passes as other work gives them back? */
static bool transient(int err)
{
	return errno_own_want(-err) || err == -EAGAIN;
}

int instance_ctx_teardown(struct start_ctx *x, const char *id)
{
	bool keep = x->keep_output && !x->end && x->have_dir;
	json_t *rec = NULL;
	uint64_t t0 = now_ns();
	int ret;

	/* A start that failed its readiness check ends as an instance that
	 * thawd stopped, its record and output kept (instance_ended.h) for the
	 * operator, and named by the start's error instead of the output. */
	if (keep) {
		struct instance_end *e = &x->failed_start_end;

		*e = (struct instance_end){ .exited = false };
		snprintf(e->why, sizeof(e->why), "its start failed: not ready");
		if (instance_record_load(x->record, &rec) == 0) {
			x->end = e;
			x->end_rec = rec;
		}
	}
	/* A teardown cut short by the want of descriptors would leave a
	 * record "starting" (or running) that nothing ever removes, and a
	 * directory, namespace or container with it: it goes on with what is
	 * left once they come back, for a while. */
	while (transient(ret = teardown_once(x, id)) && ms_since(t0) < TEARDOWN_RETRY_MS) {
		x->grace_ms = 0; /* asked once already */
		usleep(TEARDOWN_RETRY_WAIT_MS * 1000);
	}
	if (keep) {
		x->end = NULL;
		x->end_rec = NULL;
		json_decref(rec);
	}
	return ret;
}

/* rec written to path whole (a temporary file renamed). */
static int record_save(const char *path, const json_t *rec)
{
	char *text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
	int ret = text ? write_file_atomic(path, text, strlen(text), 0600) : -ENOMEM;

	free(text);
	return ret;
}

int instance_stop_begin(const struct thaw_config *c, const char *id, const char *why)
{
	char path[PATH_MAX + 16];
	json_t *rec = NULL, *stop;
	long long shim = 0, shim_start = 0;
	const char *ep, *colon;
	int ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = instance_record_path(c, id, path, sizeof(path));
	if (!ret)
		ret = instance_record_load(path, &rec);
	if (ret)
		return ret;
	/* First in the record: a thawd killed from here on finds the stop to
	 * finish at its restart (server/recover.c), with its why. */
	stop = json_pack("{s:I, s:s}", "requested_ms", (json_int_t)realtime_ms(), "why", why);
	if (!stop || json_object_set_new(rec, "stop", stop) ||
	    json_object_set_new(rec, "state", json_string("stopping"))) {
		ret = -ENOMEM;
		goto out;
	}
	ret = record_save(path, rec);
	if (ret) {
		pr_err("cannot mark instance %s stopping: %s", id, strerror(-ret));
		goto out;
	}
	ep = json_string_value(json_object_get(rec, "endpoint"));
	colon = ep ? strrchr(ep, ':') : NULL;
	if (instance_record_num(rec, "shim_pid", &shim) && shim > 0 &&
	    instance_record_num(rec, "shim_start", &shim_start) && shim_start > 0) {
		ret = shim_close_endpoint((pid_t)shim, (unsigned long long)shim_start,
					  colon ? (uint16_t)atoi(colon + 1) : 0, SHIM_STOP_MS);
		if (ret)
			goto out;
	}
	note_stop(rec, "unreachable_ms");
	ret = record_save(path, rec);
out:
	json_decref(rec);
	return ret;
}

int instance_stop(const struct thaw_config *c, const char *id)
{
	return instance_stop_graceful(c, id, 0);
}

int instance_stop_graceful(const struct thaw_config *c, const char *id, int grace_ms)
{
	return instance_end(c, id, grace_ms, NULL);
}

/* A helper process the record names (NAME_pid, NAME_start) into *pid and
 * *start; both left as they are if it names none. */
static void helper_from_record(const json_t *rec, const char *name, pid_t *pid,
			       unsigned long long *start)
{
	char key[64];
	long long v;

	snprintf(key, sizeof(key), "%s_pid", name);
	if (!instance_record_num(rec, key, &v) || v <= 0)
		return;
	*pid = (pid_t)v;
	snprintf(key, sizeof(key), "%s_start", name);
	*start = instance_record_num(rec, key, &v) ? (unsigned long long)v : 0;
}

/* The processes a stop ends, as the record names them. */
static void processes_from_record(struct start_ctx *x, const json_t *rec)
{
	long long v, v2;

	helper_from_record(rec, "shim", &x->shim_pid, &x->shim_start);
	/* Without a start time to tell it from a reused pid, leave it be. */
	if (!x->shim_start)
		x->shim_pid = 0;
	helper_from_record(rec, "lazy_watcher", &x->lz.watcher, &x->lz_watcher_start);
	helper_from_record(rec, "lease_holder", &x->holder, &x->holder_start);
	helper_from_record(rec, "lazy_daemon", &x->lz.daemon, &x->lz_daemon_start);
	x->gpu = json_is_true(json_object_get(rec, "gpu"));
	if (instance_record_num(rec, "pid", &v) && v > 0 &&
	    instance_record_num(rec, "pid_start", &v2) && v2 > 0) {
		x->init = (pid_t)v;
		x->pid_start = (unsigned long long)v2;
	}
	/* Out of memory: no CUDA process is locked before the kill. */
	if (x->gpu && instance_record_cuda_pids(rec, &x->cuda_pids, &x->ncuda))
		pr_warn("out of memory reading the CUDA processes of %s",
			json_string_value(json_object_get(rec, "instance")) ?: "an instance");
}

int instance_end(const struct thaw_config *c, const char *id, int grace_ms,
		 const struct instance_end *end)
{
	struct start_ctx x = { .c = c, .stdio = { -1, -1 }, .grace_ms = grace_ms, .end = end };
	json_t *rec = NULL;
	const char *s;
	int ret;

	if (!id_valid(id)) {
		pr_err("'%s' is not an instance id", id);
		return -EINVAL;
	}
	ret = instance_record_path(c, id, x.record, sizeof(x.record));
	if (ret)
		return ret;
	ret = instance_record_load(x.record, &rec);
	if (ret == -ENOENT) {
		pr_err("no instance %s (no record in %s/instances)", id, c->data_dir);
		return ret;
	}
	if (ret)
		return ret;
	/* The paths are ours whatever the record says: a damaged record
	 * must not point the rm_rf elsewhere. */
	ret = instance_path(x.dir, sizeof(x.dir), "%s/instances/%s", c->data_dir, id);
	if (ret)
		goto out;
	snprintf(x.netns, sizeof(x.netns), "%s/netns", x.dir);
	s = json_string_value(json_object_get(rec, "runc_root"));
	if (s)
		ret = instance_path(x.runc_root, sizeof(x.runc_root), "%s", s);
	else
		ret = instance_runc_root(c, x.runc_root, sizeof(x.runc_root));
	if (ret)
		goto out;
	instance_ctx_runner(&x);
	processes_from_record(&x, rec);
	x.have_container = x.have_netns = x.have_dir = true;
	x.end_rec = rec;
	ret = instance_ctx_teardown(&x, id);
out:
	free(x.cuda_pids);
	json_decref(rec);
	return ret;
}
