/* SPDX-License-Identifier: Apache-2.0 */
/* prewarm.c — see prewarm.h.
 *
 * One snapshot works in <data>/work/<id>-<pid>-<n>/: netns (the function's
 * network namespace), bundle/ (its OCI bundle), function.log (its stdout and
 * stderr, drained by a thread: runc hands the container pipes, never files;
 * rotated at the configured bound, common/logfile.h), image/ (the CRIU image)
 * and criu/ (CRIU's work dir and logs).  Everything there, the container and
 * the namespace are removed at the end, on success and on failure alike; a
 * log the caller placed elsewhere stays.  Its GPU part: prewarm_gpu.c.
 */
#define LOG_PREFIX "prewarm: "
#include "prewarm/prewarm.h"
#include "common/cuda.h"
#include "common/log.h"
#include "common/logfile.h"
#include "common/netns.h"
#include "common/oci.h"
#include "common/runner.h"
#include "common/util.h"
#include "criu/criu_elide.h"
#include "function/bundle.h"
#include "function/ready.h"
#include "function/visible.h"
#include "images/image.h"
#include "prewarm/host_record.h"
#include "prewarm/prewarm_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GPU_BOOT_MAX SPEC_MAX_GPUS
#define CALL_TIMEOUT_MS	     300000 /* a warm-up call may run a first inference */
#define LOG_TAIL_LINES	     12
#define LOG_TAIL_BYTES	     600

/* ---- the function's log ---------------------------------------------- */

static void *drain_thread(void *p)
{
	struct job *j = p;
	struct pollfd fds[3] = {
		{ .fd = j->stdio.out_r, .events = POLLIN },
		{ .fd = j->stdio.err_r, .events = POLLIN },
		{ .fd = j->stop_fd, .events = POLLIN },
	};
	char buf[16384];
	bool stopping = false;

	for (;;) {
		int open = 0, r;

		for (int i = 0; i < 2; i++)
			open += fds[i].fd >= 0;
		if (!open)
			break;
		/* Once told to stop, take what is already in the pipes and go. */
		r = poll(fds, 3, stopping ? 0 : -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (fds[2].revents) {
			stopping = true;
			fds[2].fd = -1;
		}
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			n = read(fds[i].fd, buf, sizeof(buf));
			if (n > 0)
				logfile_write(&j->out, buf, (size_t)n);
			else if (n == 0 || (errno != EINTR && errno != EAGAIN))
				fds[i].fd = -1;
		}
	}
	return NULL;
}

static void drain_stop(struct job *j)
{
	uint64_t one = 1;

	if (!j->drain_started)
		return;
	if (write(j->stop_fd, &one, sizeof(one)) < 0)
		pr_perror("eventfd");
	pthread_join(j->drain, NULL);
	j->drain_started = false;
}

/* The end of function.log on one line, for an error message. */
static void log_tail(const char *path, char *buf, size_t len)
{
	char text[LOG_TAIL_BYTES * 4 + 1], *p;
	size_t n = 0, cap = MIN(len, (size_t)LOG_TAIL_BYTES);
	int lines = 0, fd;
	struct stat st;
	ssize_t r;

	buf[0] = '\0';
	/* Only the end of the log: a chatty function may have written a lot. */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(text) - 1)
		r = pread(fd, text, sizeof(text) - 1, st.st_size - (off_t)(sizeof(text) - 1));
	else
		r = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	if (r <= 0)
		return;
	n = (size_t)r;
	text[n] = '\0';
	while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		text[--n] = '\0';
	/* Walk back over the last lines that fit. */
	p = text + n;
	while (p > text && lines < LOG_TAIL_LINES && (size_t)(text + n - p) < cap) {
		p--;
		if (*p == '\n')
			lines++;
	}
	if (*p == '\n')
		p++;
	if ((size_t)(text + n - p) >= cap)
		p = text + n - (cap - 1);
	size_t o = 0;
	for (; *p && o + 4 < len; p++) {
		if (*p == '\n') {
			memcpy(buf + o, " | ", 3);
			o += 3;
		} else if (*p != '\r') {
			buf[o++] = *p;
		}
	}
	buf[o] = '\0';
}

/* ---- facts for the manifest -------------------------------------------- */

static json_t *versions(const struct thaw_config *c)
{
	struct utsname u;
	char runc[256], criu[256];
	const char *v;
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (uname(&u) == 0)
		json_object_set_new(o, "kernel", json_string(u.release));
	host_record_version(c->runc, runc, sizeof(runc));
	/* "runc version 1.1.5+ds1" */
	v = strncmp(runc, "runc version ", 13) ? runc : runc + 13;
	json_object_set_new(o, "runc", json_string(v));
	host_record_version(c->criu, criu, sizeof(criu));
	/* "Version: 4.2.1" */
	v = strncmp(criu, "Version: ", 9) ? criu : criu + 9;
	json_object_set_new(o, "criu", json_string(v));
	if (cuda_available()) {
		int dv;

		if (cuda_driver_version(&dv) == 0)
			json_object_set_new(o, "driver", json_integer(dv));
	}
	return o;
}

static int dir_bytes(const char *dir, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		ret = -errno;
		pr_perror("opendir %s", dir);
		return ret;
	}
	while ((de = readdir(d))) {
		char p[PATH_MAX + 256];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode))
			ret = dir_bytes(p, bytes);
		else if (S_ISREG(st.st_mode))
			*bytes += st.st_size;
		if (ret)
			break;
	}
	closedir(d);
	return ret;
}

/* ---- the phases ------------------------------------------------------- */

/* Is prog (a path, or a name on $PATH) an executable?  Checked before the
 * function boots, so that a missing runc or criu costs no cold start. */
static bool executable(const char *prog)
{
	const char *path = getenv("PATH");
	char cand[PATH_MAX];

	if (strchr(prog, '/'))
		return access(prog, X_OK) == 0;
	for (const char *p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin"; *p;) {
		size_t len = strcspn(p, ":");

		if (len && snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, p, prog) <
				   (int)sizeof(cand) &&
		    access(cand, X_OK) == 0)
			return true;
		p += len;
		if (*p)
			p++;
	}
	return false;
}

/* Record "phase: message" as the error, keeping the message of the place
 * where it went wrong (already logged there). */
static int phase_failed(const char *phase, int ret)
{
	char msg[1024];

	snprintf(msg, sizeof(msg), "%s", log_last_error());
	if (!msg[0])
		snprintf(msg, sizeof(msg), "%s", strerror(-ret));
	log_set_error("%s: %s", phase, msg);
	return ret;
}

static int write_bundle(struct job *j)
{
	const struct func_spec *spec = j->spec;
	char **argv = spec->command, **own_argv = NULL;
	char mapped_src[PATH_MAX + 320], visible[64 * GPU_BOOT_MAX];
	char *defaults[3] = { NULL };
	int minors[GPU_BOOT_MAX], ret;
	bool minors_known = true;
	size_t nd = 0;

	visible[0] = '\0';
	if (spec->bundle && !argv)
		argv = own_argv = function_bundle_args(spec->bundle);
	if (!argv || !argv[0]) {
		pr_err("no command to run (the spec has none, nor has %s/config.json)",
		       spec->bundle ? spec->bundle : "a bundle");
		function_argv_free(own_argv);
		return -EINVAL;
	}
	/* The mount a mapped restore puts the snapshot's memory files at: it
	 * must be in the image already (restore/mapped.c).  Empty now. */
	snprintf(mapped_src, sizeof(mapped_src), "%s.mapped", j->bundle);
	ret = mkdir_p(mapped_src, 0700);
	/* A GPU function opens only its own GPUs; where the host has others,
	 * CUDA is told which (by UUID: a restore onto other GPUs maps them),
	 * and NCCL leaves NVLink SHARP alone, whose state the driver's
	 * checkpoint does not capture. */
	for (size_t i = 0; i < j->ngpu && i < GPU_BOOT_MAX; i++) {
		minors[i] = j->gpu[i].minor;
		if (minors[i] < 0)
			minors_known = false;
		snprintf(visible + strlen(visible), sizeof(visible) - strlen(visible), "%s%s",
			 i ? "," : "CUDA_VISIBLE_DEVICES=", j->gpu[i].uuid);
	}
	if (j->ngpu && j->nhost_gpus > j->ngpu)
		defaults[nd++] = visible;
	if (j->ngpu > 1)
		defaults[nd++] = "NCCL_NVLS_ENABLE=0";
	if (!ret && spec->gpu)
		ret = prewarm_gpumem_prepare(j);
	if (!ret)
		ret = function_bundle_write(
			&(struct function_bundle){ .spec = spec, .netns = j->netns,
						   .container_id = j->cid,
						   .mapped_src = mapped_src, .argv = argv,
						   .gpu_minors = j->ngpu && minors_known ? minors : NULL,
						   .ngpu_minors = j->ngpu, .env_defaults = defaults,
						   .gpumem_in = j->gpumem ? j->gpumem_in : NULL,
						   .gpumem_out = j->gpumem ? j->gpumem_out : NULL,
						   .gpumem_preload = j->gpumem, .allow = j->c,
						   .image = j->on_image },
			j->bundle, &j->held);
	function_argv_free(own_argv);
	return ret;
}

static int boot(struct job *j)
{
	int ret;

	ret = logfile_open(&j->out, j->log, j->c->log_bytes, true);
	if (ret)
		return ret;
	ret = runner_run(&j->r, j->bundle, j->cid, j->runc_log, &j->stdio, &j->pid);
	if (ret)
		return ret;
	j->container_made = true;
	ret = pthread_create(&j->drain, NULL, drain_thread, j);
	if (ret) {
		errno = ret;
		pr_perror("pthread_create");
		return -ret;
	}
	j->drain_started = true;
	return 0;
}

static int wait_ready(struct job *j)
{
	const struct func_spec *spec = j->spec;
	char why[256], tail[LOG_TAIL_BYTES + 64], hidden[400];
	int ret;

	ret = ready_wait(j->netns, spec->port, spec->ready, spec->ready_path,
			 spec->ready_timeout_s, j->pid, why, sizeof(why));
	if (!ret)
		return 0;
	/* Let the last words of a dying function reach the log. */
	usleep(100000);
	log_tail(j->log, tail, sizeof(tail));
	if (ret == -ESRCH && function_invisible_paths(spec, j->bundle, hidden, sizeof(hidden)))
		pr_err("the function exited before it was ready; its spec names paths its sandbox "
		       "does not have, though the host does: %s (bind them with \"mounts\"); its "
		       "log ends: %s",
		       hidden, tail[0] ? tail : "(empty)");
	else if (ret == -ESRCH)
		pr_err("the function exited before it was ready; its log ends: %s",
		       tail[0] ? tail : "(empty)");
	else
		pr_err("not ready after %g s (%s); its log ends: %s", spec->ready_timeout_s, why,
		       tail[0] ? tail : "(empty)");
	return ret;
}

static int call(struct job *j, const struct http_call *hc, const char *what)
{
	struct http_answer a;
	char tail[LOG_TAIL_BYTES + 64];
	int ret;

	ret = ready_http(j->netns, j->spec->port, hc->method, hc->path, hc->body, CALL_TIMEOUT_MS,
			 &a);
	if (ret) {
		log_tail(j->log, tail, sizeof(tail));
		pr_err("%s %s %s: %s; the function's log ends: %s", what, hc->method, hc->path,
		       strerror(-ret), tail[0] ? tail : "(empty)");
		return ret;
	}
	if (a.status < 200 || a.status > 299) {
		size_t blen = a.body ? strlen(a.body) : 0;

		while (blen && (a.body[blen - 1] == '\n' || a.body[blen - 1] == '\r'))
			blen--;
		pr_err("%s %s %s answered %d: %.*s", what, hc->method, hc->path, a.status,
		       (int)MIN(blen, (size_t)200), a.body ? a.body : "");
		ret = -EIO;
	}
	http_answer_release(&a);
	return ret;
}

/* image_bytes is the image as stored (after elision); before, the dump's.
 * extra: the caller's members (prewarm_snapshot_with), or NULL. */
static json_t *snapshot_meta(struct job *j, json_t *timings, uint64_t image_bytes,
			     uint64_t bytes_before, uint64_t pages_elided, const json_t *extra)
{
	char created[32];
	time_t now = time(NULL);
	struct tm tm;
	json_t *meta;

	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	meta = json_pack("{s:s, s:o, s:o, s:o, s:O, s:O, s:O, s:I, s:I, s:I, s:s, s:s, s:b}",
			 "function",
			 j->spec->id, "spec", spec_to_json(j->spec), "versions", versions(j->c),
			 "gpus", prewarm_gpus_json(j), "cuda_pids", j->cuda_pids, "cuda_ns_pids", j->cuda_ns_pids,
			 "timings_ms", timings, "image_bytes", (json_int_t)image_bytes,
			 "image_bytes_before_elision", (json_int_t)bytes_before,
			 "zero_pages_elided", (json_int_t)pages_elided, "created", created,
			 "mapped_mount", OCI_MAPPED_DEST, "confined", 1);
	if (meta && j->spec->gpu && json_object_set_new(meta, "gpu_memory", prewarm_gpumem_meta(j))) {
		json_decref(meta);
		return NULL;
	}
	/* Which process held which of "gpus" (indices), where it could be told. */
	if (meta && j->spec->gpu && json_array_size(j->cuda_procs))
		json_object_set(meta, "cuda_processes", j->cuda_procs);
	if (meta && extra && json_object_update_missing(meta, (json_t *)extra)) {
		json_decref(meta);
		return NULL;
	}
	return meta;
}

/* Undo whatever was made, in reverse order; says what is left if a step fails. */
static void cleanup(struct job *j)
{
	char msg[1024];

	/* Keep the error of the failure, not of the cleanup. */
	snprintf(msg, sizeof(msg), "%s", log_last_error());
	if (j->container_made && runner_delete(&j->r, j->cid))
		pr_warn("container %s may be left behind (runc --root %s)", j->cid, j->state_dir);
	drain_stop(j);
	if (j->stdio.out_r >= 0)
		close(j->stdio.out_r);
	if (j->stdio.err_r >= 0)
		close(j->stdio.err_r);
	logfile_close(&j->out);
	function_host_paths_close(&j->held);
	if (j->stop_fd >= 0)
		close(j->stop_fd);
	if (j->netns_made && netns_remove(j->netns))
		pr_warn("network namespace %s is left behind", j->netns);
	/* Where mounts propagate, netns_create made the work dir a private
	 * mount of itself: unmount it, or rm_rf stops there. */
	if (j->netns_made && umount2(j->work, MNT_DETACH) < 0 && errno != EINVAL &&
	    errno != ENOENT)
		pr_warn("umount %s: %s", j->work, strerror(errno));
	if (j->work[0] && rm_rf(j->work))
		pr_warn("work directory %s is left behind", j->work);
	json_decref(j->cuda_pids);
	json_decref(j->cuda_ns_pids);
	json_decref(j->cuda_procs);
	free(j->gpu);
	if (msg[0])
		log_set_error("%s", msg);
	else
		log_clear_error();
}

int prewarm_snapshot(const struct thaw_config *c, struct store *s, const struct func_spec *spec,
		     struct snapshot_result *out)
{
	return prewarm_snapshot_with(c, s, spec, NULL, NULL, out);
}

int prewarm_snapshot_with(const struct thaw_config *c, struct store *s,
			  const struct func_spec *spec, const json_t *extra_meta,
			  const char *log_path, struct snapshot_result *out)
{
	const struct prewarm_opts o = { .extra_meta = extra_meta, .log_path = log_path };

	return prewarm_snapshot_opts(c, s, spec, &o, out);
}

/* Say which phase the snapshot is in (a job's "progress"). */
static void phase_begins(const struct prewarm_opts *o, const char *phase)
{
	if (o->progress)
		o->progress(o->progress_arg, phase, 0, 0);
}

/* The spec's image, ready in the cache, and the spec to boot from it. */
static int use_image(const struct thaw_config *c, const struct func_spec *spec,
		     const struct prewarm_opts *o, struct image *im, struct func_spec **run,
		     json_t *timings)
{
	char err[512];
	int ret;

	ret = image_get(c, spec->image, c->registry_auth, o->progress, o->progress_arg, im);
	if (ret)
		return phase_failed("image", ret);
	json_object_set_new(timings, "image_pull", json_real(im->pull_ms));
	json_object_set_new(timings, "image_unpack", json_real(im->unpack_ms));
	ret = image_apply(im, spec, run, err, sizeof(err));
	if (ret) {
		log_set_error("%s (%s): %s", spec->image, im->digest, err);
		return phase_failed("image", ret);
	}
	return 0;
}

int prewarm_snapshot_opts(const struct thaw_config *c, struct store *s,
			  const struct func_spec *spec, const struct prewarm_opts *o,
			  struct snapshot_result *out)
{
	static atomic_uint seq;
	const struct func_spec *asked = spec;
	const json_t *extra_meta = o->extra_meta;
	const char *log_path = o->log_path;
	struct image im = { .lock_fd = -1 };
	struct func_spec *run_spec = NULL;
	struct job j = { .c = c, .spec = spec, .out = { .fd = -1 }, .stop_fd = -1,
			 .stdio = { -1, -1 } };
	struct store_put_stats st = { 0 };
	uint64_t t0 = now_ns(), t, image_bytes = 0, bytes_before = 0;
	struct criu_elide_stats est = { 0 };
	json_t *timings = json_object(), *meta = NULL, *host = NULL;
	const char *paths[1];
	unsigned n = atomic_fetch_add(&seq, 1);
	int ret;

	memset(out, 0, sizeof(*out));
	j.cuda_pids = json_array();
	j.cuda_ns_pids = json_array();
	j.cuda_procs = json_array();
	if (!timings || !j.cuda_pids || !j.cuda_ns_pids || !j.cuda_procs) {
		ret = -ENOMEM;
		goto out;
	}
	if (!executable(c->runc)) {
		ret = -ENOENT;
		pr_err("runc not found: %s (install runc, or set THAW_RUNC)", c->runc);
		goto out;
	}
	if (!executable(c->criu)) {
		ret = -ENOENT;
		pr_err("criu not found: %s (run 'make deps' for the CRIU 4.2 wrapper, or set THAW_CRIU)",
		       c->criu);
		goto out;
	}
	if (spec->gpu) {
		ret = cuda_init();
		if (ret) {
			pr_err("%s: GPU function needs a CUDA driver (%s)", spec->id,
			       ret == -ENODEV ? "none on this host" : strerror(-ret));
			goto out;
		}
		ret = prewarm_choose_gpus(&j);
		if (ret)
			goto out;
	}

	/* The image first: a pull that fails costs no boot. */
	if (spec->image) {
		ret = use_image(c, spec, o, &im, &run_spec, timings);
		if (ret)
			goto out;
		j.spec = spec = run_spec;
		j.on_image = true;
	}

	snprintf(j.state_dir, sizeof(j.state_dir), "%s/runc", c->data_dir);
	j.r.runc = c->runc;
	j.r.criu = c->criu;
	j.r.state_dir = j.state_dir;
	snprintf(j.cid, sizeof(j.cid), "snap-%s-%d-%u", spec->id, (int)getpid(), n);
	snprintf(j.netns, sizeof(j.netns), "%s/work", c->data_dir);
	ret = mkdir_p(j.netns, 0700);
	if (ret)
		goto out;
	snprintf(j.work, sizeof(j.work), "%s/work/%s-%d-%u", c->data_dir, spec->id, (int)getpid(),
		 n);
	if (mkdir(j.work, 0700) < 0) {
		ret = -errno;
		pr_perror("mkdir %s", j.work);
		j.work[0] = '\0'; /* not ours to remove */
		goto out;
	}
	snprintf(j.netns, sizeof(j.netns), "%s/netns", j.work);
	snprintf(j.bundle, sizeof(j.bundle), "%s/bundle", j.work);
	snprintf(j.image, sizeof(j.image), "%s/image", j.work);
	snprintf(j.criu_work, sizeof(j.criu_work), "%s/criu", j.work);
	if (log_path)
		snprintf(j.log, sizeof(j.log), "%s", log_path);
	else
		snprintf(j.log, sizeof(j.log), "%s/function.log", j.work);
	snprintf(j.runc_log, sizeof(j.runc_log), "%s/runc-run.log", j.work);
	j.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (j.stop_fd < 0) {
		ret = -errno;
		pr_perror("eventfd");
		goto out;
	}

	phase_begins(o, "boot");
	t = now_ns();
	ret = netns_create(j.netns);
	if (ret) {
		phase_failed("network namespace", ret);
		goto out;
	}
	j.netns_made = true;
	ret = write_bundle(&j);
	if (ret) {
		phase_failed("bundle", ret);
		goto out;
	}
	ret = boot(&j);
	if (ret) {
		phase_failed("boot", ret);
		goto out;
	}
	json_object_set_new(timings, "boot", json_real(ms_since(t)));

	phase_begins(o, "ready");
	t = now_ns();
	ret = wait_ready(&j);
	if (ret) {
		phase_failed("ready", ret);
		goto out;
	}
	json_object_set_new(timings, "ready", json_real(ms_since(t)));

	phase_begins(o, "warmup");
	t = now_ns();
	for (size_t i = 0; i < spec->nwarmup; i++) {
		char what[32];

		snprintf(what, sizeof(what), "warmup[%zu]", i);
		ret = call(&j, &spec->warmup[i], what);
		if (ret) {
			phase_failed("warmup", ret);
			goto out;
		}
	}
	json_object_set_new(timings, "warmup", json_real(ms_since(t)));

	phase_begins(o, "prepare");
	t = now_ns();
	if (spec->prepare) {
		ret = call(&j, spec->prepare, "prepare");
		if (ret) {
			phase_failed("prepare", ret);
			goto out;
		}
	}
	json_object_set_new(timings, "prepare", json_real(ms_since(t)));

	phase_begins(o, "cuda_checkpoint");
	t = now_ns();
	if (spec->gpu) {
		ret = prewarm_cuda_checkpoint(&j);
		if (ret) {
			phase_failed("cuda checkpoint", ret);
			goto out;
		}
		/* The driver's own part, and libthaw-cuda's save before it. */
		json_object_set_new(timings, "gpu_memory_save", json_real(j.gpumem_save_ms));
		json_object_set_new(timings, "driver_checkpoint",
				    json_real(ms_since(t) - j.gpumem_save_ms));
	}
	json_object_set_new(timings, "cuda_checkpoint", json_real(ms_since(t)));

	phase_begins(o, "criu_dump");
	t = now_ns();
	ret = runner_checkpoint(&j.r, j.cid, j.image, j.criu_work);
	if (ret) {
		phase_failed("criu dump", ret);
		goto out;
	}
	json_object_set_new(timings, "criu_dump", json_real(ms_since(t)));
	if (j.gpumem) {
		ret = prewarm_gpumem_into_image(&j);
		if (ret) {
			phase_failed("gpu memory", ret);
			goto out;
		}
	}
	ret = dir_bytes(j.image, &bytes_before);
	if (ret)
		goto out;

	/* Zero pages of private anonymous memory read back as zero without being
	 * stored; dropping them here saves the store, the tiers and every restore. */
	phase_begins(o, "elide");
	t = now_ns();
	if (spec->elide_zero) {
		ret = criu_elide_zero_pages(j.image, &est);
		if (ret) {
			phase_failed("zero elision", ret);
			goto out;
		}
	}
	json_object_set_new(timings, "elide", json_real(ms_since(t)));
	ret = dir_bytes(j.image, &image_bytes);
	if (ret)
		goto out;
	pr_info("%s: %llu zero pages elided, image %llu -> %llu bytes", spec->id,
		(unsigned long long)est.pages_elided, (unsigned long long)bytes_before,
		(unsigned long long)image_bytes);

	phase_begins(o, "ingest");
	t = now_ns();
	meta = snapshot_meta(&j, timings, image_bytes, bytes_before, est.pages_elided, extra_meta);
	/* What a start and image_gc read: the very image it was made on. */
	if (meta && im.digest[0] &&
	    json_object_set_new(meta, "image",
				json_pack("{s:s, s:s, s:s}", "reference", asked->image,
					  "digest", im.digest, "bundle", im.bundle))) {
		json_decref(meta);
		meta = NULL;
	}
	/* What its restore depends on, compared before each start tries it
	 * (host_record.h). */
	if (meta && json_object_set_new(meta, "host",
					host_record_snapshot(host = host_record_here(c), j.gpu,
							     j.ngpu, im.digest))) {
		json_decref(meta);
		meta = NULL;
	}
	if (!meta) {
		ret = -ENOMEM;
		goto out;
	}
	paths[0] = j.image;
	ret = store_put(s, spec->id, paths, 1, meta, false, out->snapshot_id, &st);
	if (ret) {
		phase_failed("ingest", ret);
		goto out;
	}
	json_object_set_new(timings, "ingest", json_real(ms_since(t)));
	json_object_set_new(timings, "total", json_real(ms_since(t0)));
	out->timings_ms = json_incref(timings);
	out->image_bytes = image_bytes;
	out->stored_bytes = st.new_stored;
	pr_info("%s: snapshot %s, %llu bytes of image, %llu newly stored, %.0f ms", spec->id,
		out->snapshot_id, (unsigned long long)image_bytes,
		(unsigned long long)st.new_stored, ms_since(t0));
	snprintf(out->image_digest, sizeof(out->image_digest), "%s", im.digest);
out:
	cleanup(&j);
	/* Held until the manifest that names the image is written: image_gc. */
	image_release(&im);
	json_decref(meta);
	json_decref(host);
	json_decref(timings);
	if (ret) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", log_last_error());
		log_set_error("snapshot of %s failed: %s", spec->id, msg);
		memset(out, 0, sizeof(*out));
	}
	spec_free(run_spec);
	return ret;
}

void snapshot_result_release(struct snapshot_result *r)
{
	if (!r)
		return;
	json_decref(r->timings_ms);
	r->timings_ms = NULL;
}
