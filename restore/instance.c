/* SPDX-License-Identifier: Apache-2.0 */
/* instance.c — see instance.h.
 *
 * An instance lives in <data>/instances/<id>/ (its bundle, its network
 * namespace file, CRIU's work directory, function.log; a lazy one also
 * lazy-pages.log and lazy.status, the watcher's word on how its lazy-pages
 * daemon ended) and is described by
 * <data>/instances/<id>.json, written as soon as the work directory exists
 * ("state":"starting") and again once it runs, so that whatever a start
 * killed half-way left behind can still be found and removed by stop.
 * Containers live in thaw's own runc root, <data>/runc.
 */
#define LOG_PREFIX "instance: "
#include "restore/instance.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/oci.h"
#include "common/runner.h"
#include "common/spawn.h"
#include "common/util.h"
#include "function/bundle.h"
#include "function/ready.h"
#include "function/spec.h"
#include "images/image.h"
#include "restore/gpu_restore.h"
#include "restore/instance_ended.h"
#include "restore/instance_internal.h"
#include "restore/lazy_watch.h"
#include "restore/prefault.h"
#include "restore/shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHIM_STOP_MS 3000
#define LAZY_STOP_MS 3000
#define RECORD_MAX   (1 << 20)

/* GPU starts of this process between deciding how they restore and
 * returning (thawd runs many at once): what THAW_LAZY=auto weighs, since a
 * burst of lazy GPU starts is slower than the same burst eager. */
static atomic_uint gpu_starts_in_flight;

/* A path into buf; -ENAMETOOLONG (logged) if it does not fit. */
static int __attribute__((format(printf, 3, 4))) pathf(char *buf, size_t len, const char *fmt, ...)
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
	return pathf(buf, len, "%s/instances", c->data_dir);
}

static int record_path(const struct thaw_config *c, const char *id, char *buf, size_t len)
{
	return pathf(buf, len, "%s/instances/%s.json", c->data_dir, id);
}

static int runc_root(const struct thaw_config *c, char *buf, size_t len)
{
	return pathf(buf, len, "%s/runc", c->data_dir);
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

static json_t *timings_json(const struct instance *in)
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
			      timings_json(in));

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
	/* Restored, or booted cold: why (docs/DESIGN.md, "Restore or boot"). */
	if (j && (json_object_set_new(j, "restored", json_boolean(!in->booted)) ||
		  (in->booted &&
		   json_object_set_new(j, "restore_failure", json_string(in->boot_why))))) {
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

/* Who carries a GPU snapshot's device memory, from its meta. */
static void set_gpu_memory(struct instance *in, const json_t *meta)
{
	const json_t *gm = json_object_get(meta, "gpu_memory");
	const char *mode = json_string_value(json_object_get(gm, "mode"));

	in->gpu_memory = mode && !strcmp(mode, "thaw") ? "thaw" : "driver";
	snprintf(in->gpu_memory_why, sizeof(in->gpu_memory_why), "%s",
		 !gm ? "the snapshot was made without libthaw-cuda" :
		       json_string_value(json_object_get(gm, "why")) ?: "");
}

/* The GPUs of in: those of placement p. */
static void set_gpus(struct instance *in, const struct gpu_placement *p)
{
	in->ngpus = p->n < GPU_MAX ? p->n : GPU_MAX;
	for (size_t i = 0; i < in->ngpus; i++) {
		in->gpus[i].index = p->dev[i].ordinal;
		snprintf(in->gpus[i].uuid, sizeof(in->gpus[i].uuid), "%s", p->dev[i].uuid);
		snprintf(in->gpus[i].name, sizeof(in->gpus[i].name), "%s", p->dev[i].name);
	}
}

/* The record: what instance_to_json says, and what stop needs. */
static int write_record(struct start_ctx *x, const struct instance *in, const char *state)
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
	     json_object_set_new(j, "snapshot_meta", json_deep_copy(x->standby_meta))))
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
	ret = write_file_atomic(x->record, text, strlen(text), 0644);
out:
	if (ret == -ENOMEM)
		pr_err("out of memory writing %s", x->record);
	free(text);
	json_decref(cuda);
	json_decref(j);
	return ret;
}

static int load_record(const char *path, json_t **out)
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
 * with what is left named. */
static int teardown(struct start_ctx *x, const char *id)
{
	bool oom = false;
	int ret = 0, r;

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
			gpu_quiesce(x->cuda_pids, x->ncuda);
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
		x->shim_pid = 0;
	}
	if (x->have_netns) {
		r = netns_remove(x->netns);
		if (r && !ret)
			ret = r;
		x->have_netns = false;
	}
	if (x->have_dir) {
		umount_dir(x->dir);
		if (x->end)
			instance_ended_keep_logs(x->c, id, x->dir);
		r = rm_rf(x->dir);
		if (r) {
			pr_err("could not remove %s: %s", x->dir, strerror(-r));
			if (!ret)
				ret = r;
		}
		x->have_dir = false;
	}
	if (!ret && unlink(x->record) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", x->record);
	}
	if (!ret && x->end)
		instance_ended_write(x->c, id, x->end_rec, x->end, oom);
	return ret;
}

/* Fail phase with the error that caused it (CRIU's lines included, where the
 * runner put them there): one message that says where the start broke. */
static void phase_failed(const char *snapshot, const char *phase, int err)
{
	char why[1024];

	snprintf(why, sizeof(why), "%s", log_last_error()[0] ? log_last_error() : strerror(-err));
	pr_err("start of %.24s failed at %s: %s", snapshot, phase, why);
}

/* The bundle of the snapshot's own container, rebuilt from its spec as
 * prewarm wrote it (function/bundle.h): the same mounts, or CRIU cannot put
 * the processes back; mapped_src at OCI_MAPPED_DEST. */
static int write_bundle(struct start_ctx *x, const struct func_spec *spec, const char *id,
			const char *mapped_src, const struct manifest *m,
			const struct gpu_placement *gp)
{
	bool confined = json_is_true(json_object_get(m->meta, "confined"));
	int minors[GPU_MAX];
	size_t n = 0;

	/* The GPUs it is restored onto, where their /dev/nvidiaN is known;
	 * else (a standby, whose GPUs are chosen when it is taken) every GPU. */
	for (size_t i = 0; gp && gp->held && i < gp->n; i++) {
		if (gp->dev[i].minor < 0) {
			n = 0;
			break;
		}
		minors[n++] = gp->dev[i].minor;
	}
	return function_bundle_write(&(struct function_bundle){ .spec = spec, .netns = x->netns,
								.container_id = id,
								.mapped_src = mapped_src,
								.gpumem_in = x->gpumem_in,
								.gpumem_out = x->gpumem_in ?
										      x->gpumem_out :
										      NULL,
								.restore = true,
								.legacy_sandbox = !confined,
								.gpu_minors = n ? minors : NULL,
								.ngpu_minors = n,
								.allow = x->c },
				     x->bundle);
}

/* Where a start's copy of its image is, in the log: each phase as it
 * begins, then every few seconds. */
struct image_progress {
	const char *digest;
	const char *phase;
	uint64_t last_ns;
};

static void image_progress_log(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct image_progress *p = arg;
	char a[32];

	if (p->phase && !strcmp(p->phase, phase) && now_ns() - p->last_ns < 2000000000ull)
		return;
	p->phase = phase;
	p->last_ns = now_ns();
	if (!strcmp(phase, "pull"))
		pr_info("start: image %s: copying, %s so far", p->digest, fmt_bytes(done, a));
	else
		pr_info("start: image %s: %s, %llu of %llu layers", p->digest, phase,
			(unsigned long long)done, (unsigned long long)total);
}

/* A snapshot made on an image (its meta's "image"; none: 0, nothing to
 * do): the spec's bundle made this host's copy of that image, brought into
 * the image cache if it is not there, and held against the cache's gc in
 * *lock_fd until the start ends.  The bundle the snapshot ran on may be
 * another host's path: CRIU restores the container's root at whatever path
 * runc gives it, and checks the files it reopens (size, ELF build-id), which
 * the very image has alike. */
static int use_image(const struct thaw_config *c, const struct manifest *m,
		     struct func_spec *spec, struct instance *in, int *lock_fd)
{
	const json_t *meta = json_object_get(m->meta, "image");
	const char *ref = json_string_value(json_object_get(meta, "reference"));
	const char *digest = json_string_value(json_object_get(meta, "digest"));
	struct image_progress p = { .digest = digest };
	struct image im;
	char *bundle;
	int ret;

	if (!meta)
		return 0;
	if (!ref || !digest || strlen(digest) >= sizeof(in->image) || !spec->bundle) {
		pr_err("snapshot %s: its meta's \"image\" is incomplete", in->snapshot);
		return -EINVAL;
	}
	snprintf(in->image, sizeof(in->image), "%s", digest);
	ret = image_get_digest(c, ref, digest, c->registry_auth, image_progress_log, &p, &im);
	if (ret)
		return ret;
	bundle = strdup(im.bundle);
	if (!bundle) {
		image_release(&im);
		pr_err("out of memory");
		return -ENOMEM;
	}
	free(spec->bundle);
	spec->bundle = bundle;
	in->image_copied = !im.cached;
	*lock_fd = im.lock_fd;
	im.lock_fd = -1;
	image_release(&im);
	return 0;
}

static int parse_spec(const struct manifest *m, const char *snapshot, struct func_spec **spec)
{
	char err[256];
	json_t *j = json_object_get(m->meta, "spec");
	int ret;

	if (!json_is_object(j)) {
		pr_err("snapshot %s has no function spec in its meta: not a thaw snapshot?",
		       snapshot);
		return -EINVAL;
	}
	ret = spec_parse(j, NULL, spec, err, sizeof(err));
	if (ret)
		pr_err("snapshot %s: its function spec is unusable: %s", snapshot, err);
	return ret;
}

/* The holder: a detached process that keeps a duplicate of the tier lease
 * (a flock lasts while any descriptor of it is open) until the instance's
 * first process has exited, so that no eviction removes the files it maps
 * while it runs, whatever happens to thawd.  Its pid is recorded; a stop
 * kills it after the container. */
static void lease_holder(void *arg)
{
	/* Detached, holding nothing of the starter's but the pidfd (3) and
	 * the lease (4); it tells its pid on the pipe (5). */
	struct pollfd pf = { .fd = 3, .events = POLLIN };
	pid_t me;

	prctl(PR_SET_NAME, "thaw-lease", 0, 0, 0);
	me = getpid();
	if (write(5, &me, sizeof(me)) != sizeof(me))
		_exit(1);
	close(5);
	while (poll(&pf, 1, -1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* Start the holder of lease_fd for the instance whose first process is
 * pid.  0, or -errno (logged). */
static int hold_lease(struct start_ctx *x, int lease_fd, pid_t pid)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0), p[2] = { -1, -1 }, keep[3], ret = 0;
	pid_t holder = 0;

	if (pidfd < 0 || pipe2(p, O_CLOEXEC) < 0) {
		ret = -errno;
		pr_perror("tier lease holder: %s", pidfd < 0 ? "pidfd_open" : "pipe");
		goto out;
	}
	keep[0] = pidfd;
	keep[1] = lease_fd;
	keep[2] = p[1];
	ret = spawn_detached(keep, 3, lease_holder, NULL);
	if (ret)
		goto out;
	close(p[1]);
	p[1] = -1;
	if (read(p[0], &holder, sizeof(holder)) != sizeof(holder) || holder <= 0) {
		pr_err("the tier lease holder did not start");
		ret = -EIO;
		goto out;
	}
	x->holder = holder;
	proc_start_time(holder, &x->holder_start);
out:
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
	if (pidfd >= 0)
		close(pidfd);
	return ret;
}

/* Whether this start maps (x->mapped), else why not in in->pages_why.  What
 * the image allows (its /.thaw mount, its VMAs) the tier judged when it
 * built the entry, and tier_lease_mapped_why says. */
static void choose_mapped(struct start_ctx *x, struct instance *in, struct tier_lease *lease,
			  bool want, const char *why_mode)
{
	x->mapped = false;
	if (!want)
		snprintf(in->pages_why, sizeof(in->pages_why), "%s", why_mode);
	else if (!x->c->mapped_min)
		snprintf(in->pages_why, sizeof(in->pages_why), "THAW_MAPPED=0");
	else if (!tier_lease_mapped(lease))
		snprintf(in->pages_why, sizeof(in->pages_why), "%s", tier_lease_mapped_why(lease));
	else
		x->mapped = true;
	if (x->mapped) {
		in->pages_why[0] = '\0';
		x->lazy = in->lazy = false;
		in->pages = "mapped";
	} else {
		in->pages = in->lazy ? "lazy" : "eager";
	}
}

/* Start the lazy-pages daemon for x (its pages from image_dir), record it so
 * that a stop finds it, and have the restore look for it. */
static int lazy_start(struct start_ctx *x, struct instance *in, const char *image_dir,
		      int lease_fd, uint64_t t0)
{
	int ret;

	ret = lazy_watch_start(&x->r, in->id, image_dir, x->work, x->lazy_log, x->lazy_status,
			       lease_fd, t0, &x->lz);
	if (ret)
		return ret;
	proc_start_time(x->lz.watcher, &x->lz_watcher_start);
	proc_start_time(x->lz.daemon, &x->lz_daemon_start);
	x->r.lazy_pages = true;
	return write_record(x, in, "starting");
}

/* After runc restore and after readiness: has the daemon failed meanwhile?
 * 0 (and in->t.lazy_done if it has finished), or -EIO with the reason set. */
static int lazy_check(struct start_ctx *x, struct instance *in)
{
	char why[512];

	if (!x->lazy)
		return 0;
	if (lazy_watch_status(x->lazy_status, &in->t.lazy_done, why, sizeof(why)) >= 0)
		return 0;
	log_set_error("page source lost: %s", why);
	return -EIO;
}

/* Lazy: wait until the daemon has served every page (0), or failed, or
 * timeout_ms passed (-EIO, the reason set). */
static int lazy_wait_fill(struct start_ctx *x, struct instance *in, int timeout_ms)
{
	uint64_t t0 = now_ns();

	for (;;) {
		int ret = lazy_check(x, in);

		if (ret || in->t.lazy_done > 0)
			return ret;
		if (ms_since(t0) > timeout_ms) {
			log_set_error("the lazy-pages daemon had not served every page after %d ms",
				      timeout_ms);
			return -EIO;
		}
		usleep(1000);
	}
}

/* The spec's readiness check of in, timed into in->t.ready; on failure the
 * error says why, with the end of the function's log (who: "the restored
 * function", "the standby"). */
static int await_ready(struct start_ctx *x, const struct func_spec *spec, struct instance *in,
		       const char *who)
{
	char why[512] = "", tail[512];
	uint64_t tp = now_ns();
	int ret = ready_wait(x->netns, spec->port, spec->ready, spec->ready_path,
			     spec->ready_timeout_s > 0 ? spec->ready_timeout_s : 60, in->pid, why,
			     sizeof(why));

	in->t.ready = ms_since(tp);
	if (!ret)
		return 0;
	runner_log_tail(x->log, tail, sizeof(tail));
	log_set_error("%s %s after %.0f ms (%s)%s%s", who,
		      ret == -ESRCH ? "exited" : "was not ready", in->t.ready,
		      why[0] ? why : strerror(-ret), tail[0] ? "; its log: " : "", tail);
	return ret;
}

static int start(const struct thaw_config *c, struct store *s, struct tier *t,
		 const char *snapshot_id, enum instance_mode mode, bool standby,
		 struct gpu_placement *asked, struct instance *out)
{
	struct start_ctx x = { .c = c, .stdio = { -1, -1 } };
	struct gpu_placement own = { 0 }, *gp = asked;
	struct manifest *m = NULL;
	struct func_spec *spec = NULL;
	struct tier_lease *lease = NULL;
	struct manifest *m2 = NULL; /* the manifest again, when the tier found data missing */
	struct instance in = { 0 };
	struct shim_opts so;
	char dir[PATH_MAX], why_mode[160], mapped_src[PATH_MAX + 16], image[PATH_MAX + 16];
	uint64_t t0 = now_ns(), tp;
	const char *phase = "load";
	unsigned gpu_starts = 0;
	bool counted = false, want_mapped;
	int image_lock = -1, ret;

	ret = store_manifest_load(s, snapshot_id, &m, in.snapshot);
	if (ret) {
		if (ret == -ENOENT)
			pr_err("no snapshot %s in the store %s", snapshot_id, store_path(s));
		goto fail;
	}
	ret = parse_spec(m, in.snapshot, &spec);
	if (ret)
		goto fail;
	snprintf(in.function, sizeof(in.function), "%s", spec->id[0] ? spec->id : m->name);
	x.gpu = spec->gpu;
	if (spec->gpu)
		set_gpu_memory(&in, m->meta);
	/* Every GPU start counts, whatever decides its mode: each one loads the
	 * machine.  Counted once here, uncounted once at out:. */
	if (spec->gpu) {
		gpu_starts = atomic_fetch_add(&gpu_starts_in_flight, 1) + 1;
		counted = true;
	}
	/* Mapped wherever it applies, unless the start or the function asks
	 * for a way (then its word is the reason).  Where it does not apply,
	 * the rest decides between lazy and eager. */
	want_mapped = mode == INSTANCE_MAPPED ||
		      (mode == INSTANCE_MODE_AUTO && spec->lazy != SPEC_LAZY && spec->lazy != SPEC_EAGER);
	if (mode == INSTANCE_MAPPED)
		mode = INSTANCE_MODE_AUTO;
	/* The start's word, else the function's, else thawd's setting (whose
	 * default, config.h says why, is lazy but for GPU functions under
	 * CRIU's daemon or in a burst of GPU starts). */
	if (mode != INSTANCE_MODE_AUTO) {
		snprintf(why_mode, sizeof(why_mode), "the start asked");
	} else if (spec->lazy == SPEC_LAZY || spec->lazy == SPEC_EAGER) {
		mode = spec->lazy == SPEC_LAZY ? INSTANCE_LAZY : INSTANCE_EAGER;
		snprintf(why_mode, sizeof(why_mode), "the function's spec");
	} else {
		bool lazy =
		    config_restores_lazily(c, spec->gpu, gpu_starts, why_mode, sizeof(why_mode));

		mode = lazy ? INSTANCE_LAZY : INSTANCE_EAGER;
	}
	x.lazy = in.lazy = mode == INSTANCE_LAZY;
	pr_debug("%s: %s (%s)", in.function, in.lazy ? "lazy" : "eager", why_mode);
	/* Its GPUs, before anything is made: a GPU that cannot take it is a
	 * refusal, not a half-started instance.  A standby's wait. */
	if (spec->gpu && !standby && (!gp || !gp->held)) {
		char why[512];

		gp = &own;
		ret = gpu_place(m->meta, NULL, 0, gp, why, sizeof(why));
		if (ret) {
			log_set_error("%s", why);
			pr_err("%s", why);
			goto fail;
		}
	}
	if (standby)
		gp = NULL;

	in.t.load = ms_since(t0);

	phase = "image";
	tp = now_ns();
	ret = use_image(c, m, spec, &in, &image_lock);
	if (ret)
		goto fail;
	in.t.image = ms_since(tp);

	phase = "materialize";
	tp = now_ns();
	ret = tier_acquire(t, in.snapshot, &lease);
	/* Data the manifest names is missing (a chunk, a pack, a pack's index)
	 * while the manifest is there: the store is damaged, not the snapshot gone. */
	if (ret == -ENOENT && store_manifest_load(s, in.snapshot, &m2, NULL) == 0)
		ret = -EBADMSG;
	if (ret)
		goto fail;
	in.tier_hit = tier_lease_hit(lease);
	choose_mapped(&x, &in, lease, want_mapped, why_mode);
	if (!x.mapped) {
		ret = tier_lease_whole(t, lease);
		if (ret)
			goto fail;
	}
	in.t.materialize = ms_since(tp);

	phase = "setup";
	tp = now_ns();
	ret = instances_dir(c, dir, sizeof(dir));
	if (!ret)
		ret = runc_root(c, x.runc_root, sizeof(x.runc_root));
	if (!ret)
		ret = mkdir_p(dir, 0755);
	if (ret)
		goto fail;
	for (int tries = 0;; tries++) {
		make_id(in.function, in.id);
		ret = pathf(x.dir, sizeof(x.dir), "%s/%s", dir, in.id);
		if (ret)
			goto fail;
		if (mkdir(x.dir, 0700) == 0)
			break;
		if (errno != EEXIST || tries == 8) {
			ret = -errno;
			pr_perror("mkdir %s", x.dir);
			goto fail;
		}
	}
	x.have_dir = true;
	record_path(c, in.id, x.record, sizeof(x.record)); /* shorter than x.dir + ".json" */
	x.r = (struct runner){ .runc = c->runc, .criu = c->criu, .state_dir = x.runc_root,
			       .lazy_daemon = c->lazy_daemon };
	snprintf(x.netns, sizeof(x.netns), "%s/netns", x.dir);
	snprintf(x.bundle, sizeof(x.bundle), "%s/bundle", x.dir);
	snprintf(x.work, sizeof(x.work), "%s/criu", x.dir);
	snprintf(x.log, sizeof(x.log), "%s/function.log", x.dir);
	snprintf(x.lazy_log, sizeof(x.lazy_log), "%s/lazy-pages.log", x.dir);
	snprintf(x.lazy_status, sizeof(x.lazy_status), "%s/lazy.status", x.dir);
	snprintf(x.activity, sizeof(x.activity), "%s/activity", x.dir);
	/* From here on a killed start leaves a record that stop can act on. */
	ret = write_record(&x, &in, "starting");
	if (ret)
		goto fail;
	ret = netns_create(x.netns);
	if (ret)
		goto fail;
	x.have_netns = true;
	mapped_src[0] = '\0';
	if (x.mapped) {
		ret = pathf(mapped_src, sizeof(mapped_src), "%s/mem", tier_lease_mapped(lease));
	} else if (json_is_string(json_object_get(m->meta, "mapped_mount"))) {
		snprintf(x.mapped_empty, sizeof(x.mapped_empty), "%s/mapped-empty", x.dir);
		ret = mkdir_p(x.mapped_empty, 0755);
		snprintf(mapped_src, sizeof(mapped_src), "%s", x.mapped_empty);
	}
	if (!ret && json_is_true(json_object_get(json_object_get(m->meta, "gpu_memory"), "mount"))) {
		x.gpumem_in = tier_lease_path(lease);
		ret = pathf(x.gpumem_out, sizeof(x.gpumem_out), "%s/gpu-out", x.dir);
		if (!ret)
			ret = mkdir_p(x.gpumem_out, 0755);
	}
	if (!ret)
		ret = write_bundle(&x, spec, in.id, mapped_src[0] ? mapped_src : NULL, m, gp);
	if (ret)
		goto fail;
	in.t.setup = ms_since(tp);

	phase = "criu_restore";
	tp = now_ns();
	if (x.lazy) {
		/* The daemon holds a duplicate of the lease: the image stays in
		 * the tier until it has served the last page. */
		ret = lazy_start(&x, &in, tier_lease_path(lease), tier_lease_fd(lease), t0);
		if (ret)
			goto fail;
	}
	x.have_container = true; /* runner_restore deletes it when it fails; harmless twice */
	snprintf(image, sizeof(image), "%s/image", x.mapped ? tier_lease_mapped(lease) : "");
	ret = runner_restore(&x.r, x.bundle, in.id, x.mapped ? image : tier_lease_path(lease), x.work,
			     &x.stdio, &in.pid);
	in.t.criu_restore = ms_since(tp);
	if (!ret)
		ret = lazy_check(&x, &in);
	if (ret)
		goto fail;
	proc_start_time(in.pid, &x.pid_start);
	if (x.mapped) {
		ret = hold_lease(&x, tier_lease_fd(lease), in.pid);
		if (!ret)
			ret = write_record(&x, &in, "starting");
		if (ret)
			goto fail;
	}

	/* The shim first: it drains the function's output while we wait. */
	phase = "endpoint";
	tp = now_ns();
	so = (struct shim_opts){ .netns_path = x.netns, .port = spec->port,
				 .activity_path = x.activity,
				 .out_fd = x.stdio.out_r, .err_fd = x.stdio.err_r,
				 .log_path = x.log, .max_log_bytes = c->log_bytes };
	ret = shim_start(&so, &x.shim_pid, &x.port);
	if (ret)
		goto fail;
	proc_start_time(x.shim_pid, &x.shim_start);
	close(x.stdio.out_r);
	close(x.stdio.err_r);
	x.stdio.out_r = x.stdio.err_r = -1;
	snprintf(in.endpoint, sizeof(in.endpoint), "127.0.0.1:%u", x.port);
	in.t.endpoint = ms_since(tp);

	if (standby) {
		uint64_t faulted = 0;

		/* Everything but the part that needs the GPU (or the CPU):
		 * a CPU function waits frozen; a GPU function's CUDA state
		 * is still checkpointed and locked, so it does nothing. */
		phase = "standby";
		if (!spec->gpu)
			ret = runner_pause(&x.r, in.id);
		if (ret)
			goto fail;
		tp = now_ns();
		if (x.mapped)
			prefault_mapped(in.pid, &faulted);
		/* Its device memory is copied from the tier entry when it is
		 * taken: the entry stays until the instance ends. */
		if (x.gpumem_in && !x.mapped) {
			ret = hold_lease(&x, tier_lease_fd(lease), in.pid);
			if (ret)
				goto fail;
		}
		tier_release(lease);
		lease = NULL;
		in.standby = true;
		in.t.total = ms_since(t0);
		x.standby_meta = m->meta;
		ret = write_record(&x, &in, "standby");
		if (ret)
			goto fail;
		pr_info("standby %s of %s: pid %d, %s, made in %.1f ms (%.1f MiB of mapped pages "
			"faulted in, %.1f ms)", in.id, in.function, (int)in.pid, in.pages, in.t.total,
			faulted / 1048576.0, ms_since(tp));
		*out = in;
		goto out;
	}
	if (spec->gpu && x.lazy && c->lazy_gpu_after_fill) {
		phase = "lazy_wait";
		tp = now_ns();
		ret = lazy_wait_fill(&x, &in, 60000);
		in.t.lazy_wait = ms_since(tp);
		if (ret)
			goto fail;
	}
	if (spec->gpu) {
		phase = "gpu_restore";
		tp = now_ns();
		ret = gpu_restore_container(&x.r, in.id, in.pid, m->meta, gp, &x.cuda_pids,
					    &x.ncuda);
		if (!ret)
			ret = gpu_memory_restore(m->meta, x.cuda_pids, x.ncuda,
						 x.gpumem_in ? x.gpumem_out : NULL, &in.t.gpu_copy);
		in.t.gpu_restore = ms_since(tp);
		if (ret)
			goto fail;
		if (gp)
			set_gpus(&in, gp);
	}

	phase = "ready";
	ret = await_ready(&x, spec, &in, "the restored function");
	if (ret)
		goto fail;
	ret = lazy_check(&x, &in);
	if (ret)
		goto fail;

	tier_release(lease);
	lease = NULL;
	in.t.total = ms_since(t0);
	phase = "record";
	ret = write_record(&x, &in, "running");
	if (ret)
		goto fail;
	/* Its device memory is back and the start has its answer: unpin the
	 * RAM tier's copy the library copied it from. */
	gpumem_release(x.cuda_pids, x.ncuda);
	pr_info("instance %s of %s: %s, pid %d, %s (%s), %.1f ms (materialize %.1f, "
		"criu_restore %.1f, gpu_restore %.1f, ready %.1f)", in.id, in.function, in.endpoint,
		(int)in.pid, in.pages, x.mapped ? "it applies" : in.pages_why, in.t.total,
		in.t.materialize,
		in.t.criu_restore, in.t.gpu_restore, in.t.ready);
	*out = in;
	goto out;
fail:
	phase_failed(in.snapshot[0] ? in.snapshot : snapshot_id, phase, ret);
	out->failed = phase;
	{
		char msg[1024];

		/* teardown may log on its own; the start's error is the one to tell. */
		snprintf(msg, sizeof(msg), "%s", log_last_error());
		teardown(&x, in.id);
		log_set_error("%s", msg);
	}
	tier_release(lease);
out:
	/* The image was used until here: a running container holds its
	 * rootfs as its root, which the cache's gc respects. */
	if (image_lock >= 0)
		close(image_lock);
	gpu_release(&own);
	if (counted)
		atomic_fetch_sub(&gpu_starts_in_flight, 1);
	free(x.cuda_pids);
	spec_free(spec);
	manifest_free(m2);
	manifest_free(m);
	return ret;
}

int instance_start(const struct thaw_config *c, struct store *s, struct tier *t,
		   const char *snapshot_id, enum instance_mode mode, struct instance *out)
{
	return start(c, s, t, snapshot_id, mode, false, NULL, out);
}

int instance_start_on(const struct thaw_config *c, struct store *s, struct tier *t,
		      const char *snapshot_id, enum instance_mode mode, struct gpu_placement *gp,
		      struct instance *out)
{
	return start(c, s, t, snapshot_id, mode, false, gp, out);
}

int instance_make_standby(const struct thaw_config *c, struct store *s, struct tier *t,
			  const char *snapshot_id, struct instance *out)
{
	return start(c, s, t, snapshot_id, INSTANCE_MODE_AUTO, true, NULL, out);
}

static bool num_field(const json_t *rec, const char *key, long long *v)
{
	json_t *j = json_object_get(rec, key);

	if (!json_is_integer(j))
		return false;
	*v = json_integer_value(j);
	return true;
}

int instance_stop(const struct thaw_config *c, const char *id)
{
	return instance_stop_graceful(c, id, 0);
}

int instance_stop_graceful(const struct thaw_config *c, const char *id, int grace_ms)
{
	return instance_end(c, id, grace_ms, NULL);
}

int instance_end(const struct thaw_config *c, const char *id, int grace_ms,
		 const struct instance_end *end)
{
	struct start_ctx x = { .c = c, .stdio = { -1, -1 }, .grace_ms = grace_ms, .end = end };
	json_t *rec = NULL, *cuda;
	const char *s;
	long long v, v2;
	size_t i;
	int ret;

	if (!id_valid(id)) {
		pr_err("'%s' is not an instance id", id);
		return -EINVAL;
	}
	ret = record_path(c, id, x.record, sizeof(x.record));
	if (ret)
		return ret;
	ret = load_record(x.record, &rec);
	if (ret == -ENOENT) {
		pr_err("no instance %s (no record in %s/instances)", id, c->data_dir);
		return ret;
	}
	if (ret)
		return ret;
	/* The paths are ours whatever the record says: a damaged record
	 * must not point the rm_rf elsewhere. */
	ret = pathf(x.dir, sizeof(x.dir), "%s/instances/%s", c->data_dir, id);
	if (ret)
		goto out;
	snprintf(x.netns, sizeof(x.netns), "%s/netns", x.dir);
	s = json_string_value(json_object_get(rec, "runc_root"));
	if (s)
		ret = pathf(x.runc_root, sizeof(x.runc_root), "%s", s);
	else
		ret = runc_root(c, x.runc_root, sizeof(x.runc_root));
	if (ret)
		goto out;
	x.r = (struct runner){ .runc = c->runc, .criu = c->criu, .state_dir = x.runc_root,
			       .lazy_daemon = c->lazy_daemon };
	if (num_field(rec, "shim_pid", &v) && v > 0) {
		x.shim_pid = (pid_t)v;
		x.shim_start = num_field(rec, "shim_start", &v) ? (unsigned long long)v : 0;
		/* Without a start time to tell it from a reused pid, leave it be. */
		if (!x.shim_start)
			x.shim_pid = 0;
	}
	if (num_field(rec, "lazy_watcher_pid", &v) && v > 0) {
		x.lz.watcher = (pid_t)v;
		x.lz_watcher_start = num_field(rec, "lazy_watcher_start", &v) ? (unsigned long long)v : 0;
	}
	if (num_field(rec, "lease_holder_pid", &v) && v > 0) {
		x.holder = (pid_t)v;
		x.holder_start = num_field(rec, "lease_holder_start", &v) ? (unsigned long long)v : 0;
	}
	if (num_field(rec, "lazy_daemon_pid", &v) && v > 0) {
		x.lz.daemon = (pid_t)v;
		x.lz_daemon_start = num_field(rec, "lazy_daemon_start", &v) ? (unsigned long long)v : 0;
	}
	x.gpu = json_is_true(json_object_get(rec, "gpu"));
	if (num_field(rec, "pid", &v) && v > 0 && num_field(rec, "pid_start", &v2) && v2 > 0) {
		x.init = (pid_t)v;
		x.pid_start = (unsigned long long)v2;
	}
	cuda = json_object_get(rec, "cuda_pids");
	if (x.gpu && json_array_size(cuda)) {
		x.cuda_pids = calloc(json_array_size(cuda), sizeof(pid_t));
		if (x.cuda_pids)
			for (i = 0; i < json_array_size(cuda); i++)
				if (json_is_integer(json_array_get(cuda, i)))
					x.cuda_pids[x.ncuda++] =
						(pid_t)json_integer_value(json_array_get(cuda, i));
	}
	x.have_container = x.have_netns = x.have_dir = true;
	x.end_rec = rec;
	ret = teardown(&x, id);
out:
	free(x.cuda_pids);
	json_decref(rec);
	return ret;
}

/* The instance a standby's record describes (what instance_to_json wrote). */
static void instance_from_record(const json_t *rec, struct instance *in)
{
	static const char *const pages[] = { "mapped", "lazy", "eager" };
	const char *p = json_string_value(json_object_get(rec, "pages"));
	long long v = 0;

	memset(in, 0, sizeof(*in));
	snprintf(in->id, sizeof(in->id), "%s", json_string_value(json_object_get(rec, "instance")) ?: "");
	snprintf(in->function, sizeof(in->function), "%s",
		 json_string_value(json_object_get(rec, "function")) ?: "");
	snprintf(in->snapshot, sizeof(in->snapshot), "%s",
		 json_string_value(json_object_get(rec, "snapshot")) ?: "");
	snprintf(in->endpoint, sizeof(in->endpoint), "%s",
		 json_string_value(json_object_get(rec, "endpoint")) ?: "");
	snprintf(in->pages_why, sizeof(in->pages_why), "%s",
		 json_string_value(json_object_get(rec, "pages_why")) ?: "");
	in->pid = num_field(rec, "pid", &v) ? (pid_t)v : 0;
	in->tier_hit = !strcmp(json_string_value(json_object_get(rec, "tier")) ?: "", "ram");
	in->lazy = json_is_true(json_object_get(rec, "lazy"));
	for (size_t i = 0; p && i < ARRAY_SIZE(pages); i++)
		if (!strcmp(p, pages[i]))
			in->pages = pages[i];
	p = json_string_value(json_object_get(rec, "gpu_memory"));
	if (p)
		in->gpu_memory = !strcmp(p, "thaw") ? "thaw" : "driver";
	snprintf(in->gpu_memory_why, sizeof(in->gpu_memory_why), "%s",
		 json_string_value(json_object_get(rec, "gpu_memory_why")) ?: "");
	in->booted = json_is_false(json_object_get(rec, "restored"));
	snprintf(in->boot_why, sizeof(in->boot_why), "%s",
		 json_string_value(json_object_get(rec, "restore_failure")) ?: "");
	in->standby = true;
}


/* Wake the standby's processes: the CPU function's container thawed, or
 * the GPU function's CUDA state restored (to a GPU with room: the same
 * mapping and free-memory check as a start's). */
static int wake(struct start_ctx *x, struct instance *in, const json_t *meta,
		struct gpu_placement *gp)
{
	struct gpu_placement own = { 0 };
	char why[512];
	uint64_t tp = now_ns();
	int ret;

	if (!x->gpu) {
		ret = runner_resume(&x->r, in->id);
		in->t.resume = ms_since(tp);
		return ret;
	}
	if (!gp || !gp->held) {
		gp = &own;
		ret = gpu_place(meta, NULL, 0, gp, why, sizeof(why));
		if (ret) {
			log_set_error("%s", why);
			pr_err("%s", why);
			return ret;
		}
	}
	ret = gpu_restore_container(&x->r, in->id, in->pid, meta, gp, &x->cuda_pids, &x->ncuda);
	if (!ret && json_is_true(json_object_get(json_object_get(meta, "gpu_memory"), "mount"))) {
		ret = pathf(x->gpumem_out, sizeof(x->gpumem_out), "%s/instances/%s/gpu-out",
			    x->c->data_dir, in->id);
		if (!ret)
			ret = gpu_memory_restore(meta, x->cuda_pids, x->ncuda, x->gpumem_out,
						 &in->t.gpu_copy);
	}
	in->t.gpu_restore = ms_since(tp);
	if (!ret)
		set_gpus(in, gp);
	gpu_release(&own);
	return ret;
}

int instance_activate(const struct thaw_config *c, const char *id, struct instance *out)
{
	return instance_activate_on(c, id, NULL, out);
}

int instance_activate_on(const struct thaw_config *c, const char *id, struct gpu_placement *gp,
			 struct instance *out)
{
	struct start_ctx x = { .c = c, .stdio = { -1, -1 } };
	struct func_spec *spec = NULL;
	struct instance in;
	json_t *rec = NULL, *meta, *cuda = NULL;
	char err[256], *text = NULL;
	uint64_t t0 = now_ns();
	const char *s;
	int ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = record_path(c, id, x.record, sizeof(x.record));
	if (!ret)
		ret = load_record(x.record, &rec);
	if (ret)
		return ret;
	s = json_string_value(json_object_get(rec, "state"));
	meta = json_object_get(rec, "snapshot_meta");
	if (!s || strcmp(s, "standby") || !json_is_object(meta)) {
		json_decref(rec);
		return -EBUSY;
	}
	instance_from_record(rec, &in);
	x.gpu = json_is_true(json_object_get(rec, "gpu"));
	s = json_string_value(json_object_get(rec, "runc_root"));
	ret = s ? pathf(x.runc_root, sizeof(x.runc_root), "%s", s)
		: runc_root(c, x.runc_root, sizeof(x.runc_root));
	if (!ret)
		ret = pathf(x.netns, sizeof(x.netns), "%s/instances/%s/netns", c->data_dir, id);
	if (!ret)
		ret = pathf(x.log, sizeof(x.log), "%s/instances/%s/function.log", c->data_dir, id);
	if (!ret && spec_parse(json_object_get(meta, "spec"), NULL, &spec, err, sizeof(err))) {
		pr_err("standby %s: its snapshot's spec: %s", id, err);
		ret = -EINVAL;
	}
	if (ret)
		goto fail;
	x.r = (struct runner){ .runc = c->runc, .criu = c->criu, .state_dir = x.runc_root,
			       .lazy_daemon = c->lazy_daemon };
	ret = wake(&x, &in, meta, gp);
	if (ret)
		goto fail;
	ret = await_ready(&x, spec, &in, "the standby");
	if (ret)
		goto fail;
	in.t.total = ms_since(t0);
	/* The record is a running instance's now (stop quiesces its CUDA
	 * processes), keeping what the standby's making recorded. */
	cuda = json_array();
	for (size_t i = 0; cuda && i < x.ncuda; i++)
		json_array_append_new(cuda, json_integer(x.cuda_pids[i]));
	json_object_del(rec, "snapshot_meta");
	if (in.ngpus) {
		json_t *now = instance_to_json(&in);

		if (!now || json_object_set(rec, "gpus", json_object_get(now, "gpus")))
			ret = -ENOMEM;
		json_decref(now);
		if (ret)
			goto fail;
	}
	if (!cuda || json_object_set_new(rec, "state", json_string("running")) ||
	    json_object_set_new(rec, "standby", json_true()) ||
	    json_object_set_new(rec, "timings_ms", timings_json(&in)) ||
	    json_object_set(rec, "cuda_pids", cuda) ||
	    !(text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)))) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = write_file_atomic(x.record, text, strlen(text), 0644);
	if (ret)
		goto fail;
	gpumem_release(x.cuda_pids, x.ncuda);
	pr_info("standby %s of %s taken: %s, %.1f ms (resume %.1f, gpu_restore %.1f, ready %.1f)",
		in.id, in.function, in.endpoint, in.t.total, in.t.resume, in.t.gpu_restore,
		in.t.ready);
	*out = in;
	goto out;
fail:
	{
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", log_last_error());
		pr_err("standby %s could not be taken: %s", id, msg);
		instance_stop(c, id);
		log_set_error("%s", msg);
	}
out:
	free(text);
	free(x.cuda_pids);
	json_decref(cuda);
	json_decref(rec);
	spec_free(spec);
	return ret;
}

int instance_activity(const struct thaw_config *c, const char *id, uint64_t *last_ms,
		      unsigned *open_conns)
{
	char path[PATH_MAX + 128];
	uint64_t v[2];
	int fd, ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = pathf(path, sizeof(path), "%s/instances/%s/activity", c->data_dir, id);
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
			double max_lifetime_s, double stop_grace_s)
{
	char path[PATH_MAX + 16], *text = NULL;
	json_t *rec = NULL;
	int ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = record_path(c, id, path, sizeof(path));
	if (!ret)
		ret = load_record(path, &rec);
	if (ret)
		return ret;
	if (json_object_set_new(rec, "idle_s", json_real(idle_s)) ||
	    json_object_set_new(rec, "max_lifetime_s", json_real(max_lifetime_s)) ||
	    json_object_set_new(rec, "stop_grace_s", json_real(stop_grace_s)) ||
	    json_object_set_new(rec, "started_ms", json_integer((json_int_t)realtime_ms())) ||
	    !(text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10))))
		ret = -ENOMEM;
	if (!ret)
		ret = write_file_atomic(path, text, strlen(text), 0644);
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
	num_field(rec, "started_ms", &started);
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
	    pathf(path, sizeof(path), "%s/instances/%s/lazy.status", c->data_dir, id))
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
		num_field(rec, "starter_pid", &pid);
		num_field(rec, "starter_start", &start);
		return pid > 0 && proc_alive((pid_t)pid, (unsigned long long)start) ? "starting"
										  : "abandoned";
	}
	num_field(rec, "pid", &pid);
	num_field(rec, "pid_start", &start);
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
		if (load_record(path, &rec))
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

/* ---- for instance_boot.c (instance_internal.h) ---- */

int instance_ctx_dir(struct start_ctx *x, struct instance *in)
{
	char dir[PATH_MAX];
	int ret;

	ret = instances_dir(x->c, dir, sizeof(dir));
	if (!ret)
		ret = runc_root(x->c, x->runc_root, sizeof(x->runc_root));
	if (!ret)
		ret = mkdir_p(dir, 0755);
	if (ret)
		return ret;
	for (int tries = 0;; tries++) {
		make_id(in->function, in->id);
		ret = pathf(x->dir, sizeof(x->dir), "%s/%s", dir, in->id);
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
	record_path(x->c, in->id, x->record, sizeof(x->record));
	x->r = (struct runner){ .runc = x->c->runc, .criu = x->c->criu, .state_dir = x->runc_root,
				.lazy_daemon = x->c->lazy_daemon };
	snprintf(x->netns, sizeof(x->netns), "%s/netns", x->dir);
	snprintf(x->bundle, sizeof(x->bundle), "%s/bundle", x->dir);
	snprintf(x->work, sizeof(x->work), "%s/criu", x->dir);
	snprintf(x->log, sizeof(x->log), "%s/function.log", x->dir);
	snprintf(x->activity, sizeof(x->activity), "%s/activity", x->dir);
	return 0;
}

int instance_ctx_record(struct start_ctx *x, const struct instance *in, const char *state)
{
	return write_record(x, in, state);
}

int instance_ctx_ready(struct start_ctx *x, const struct func_spec *spec, struct instance *in,
		       const char *who)
{
	return await_ready(x, spec, in, who);
}

int instance_ctx_teardown(struct start_ctx *x, const char *id)
{
	return teardown(x, id);
}
