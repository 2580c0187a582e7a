/* SPDX-License-Identifier: Apache-2.0 */
/* thaw-bench: the baselines, cold boot (runc run) and plain restore (runc
 * restore) of the same function without thawd, one run at a time. */
#include "internal.h"

#include "common/config.h"
#include "common/cuda.h"
#include "common/gpumem_protocol.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/oci.h"
#include "common/runner.h"
#include "common/util.h"
#include "criu/criu_image.h"
#include "function/bundle.h"
#include "function/ready.h"
#include "function/spec.h"
#include "restore/gpu_restore.h"
#include "restore/tier.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- baselines --------------------------------------------------------
 *
 * Both run the function as thaw does (a runc container in its own network
 * namespace, the bundle written by common/oci.c from the function's spec) but
 * without thaw's server, store, engine or tier:
 *   cold boot:     runc run → first correct answer;
 *   plain restore: runc restore from an uncompressed image in tmpfs (+ CUDA
 *                  restore and unlock of its CUDA processes) → first correct
 *                  answer.
 * The answer is asked for inside the namespace (ready_http), the same
 * request as the thaw starts', retried until it is right or time runs out.
 */

/* A relative (or missing) cwd of a spec file is taken against the file's
 * directory, as `thaw snapshot SPEC.json` does. */
static int resolve_cwd(json_t *j, const char *spec_path, char *why, size_t whylen)
{
	char buf[PATH_MAX], dir[PATH_MAX], joined[2 * PATH_MAX + 2], real[PATH_MAX];
	json_t *cwd = json_object_get(j, "cwd");

	if (cwd && (!json_is_string(cwd) || json_string_value(cwd)[0] == '/'))
		return 0;
	if (!cwd && json_object_get(j, "bundle"))
		return 0;
	snprintf(buf, sizeof(buf), "%s", spec_path);
	if (!realpath(dirname(buf), dir))
		goto bad;
	snprintf(joined, sizeof(joined), "%s/%s", dir, cwd ? json_string_value(cwd) : ".");
	if (!realpath(joined, real))
		goto bad;
	json_object_set_new(j, "cwd", json_string(real));
	return 0;
bad:
	snprintf(why, whylen, "cwd of %.200s: %s", spec_path, strerror(errno));
	return -EINVAL;
}

/* The spec: from --baseline-cold's file, else thawd's GET /functions/<id>
 * (less what is not spec: the snapshot state and such). */
static int fn_load(struct bench *b, struct func_spec **spec, char *why, size_t whylen)
{
	static const char *const keys[] = { "id",   "command", "env",	  "cwd",     "bundle",
					    "port", "ready",   "warmup", "prepare", "gpu" };
	json_error_t jerr;
	char *text = NULL, path[96], err[256];
	long status = 0;
	json_t *j = NULL, *v;
	const char *k;
	void *tmp;
	int ret;

	*spec = NULL;
	if (b->baseline_cold_spec) {
		j = json_load_file(b->baseline_cold_spec, 0, &jerr);
		if (!j) {
			snprintf(why, whylen, "cannot read spec %.200s: %.160s",
				 b->baseline_cold_spec, jerr.text);
			return -EINVAL;
		}
		if (json_is_object(j) && resolve_cwd(j, b->baseline_cold_spec, why, whylen) < 0) {
			ret = -EINVAL;
			goto out;
		}
	} else {
		snprintf(path, sizeof(path), "/functions/%s", b->function);
		ret = bench_get(b, path, &status, &text, 10);
		if (ret < 0 || status != 200) {
			snprintf(why, whylen, "no spec: GET %s: %.200s", path,
				 ret < 0 ? log_last_error() : "not 200");
			free(text);
			return ret < 0 ? ret : -ENOENT;
		}
		j = json_loads(text, 0, &jerr);
		free(text);
		if (!j) {
			snprintf(why, whylen, "GET %s: not JSON: %.160s", path, jerr.text);
			return -EINVAL;
		}
		json_object_foreach_safe(j, tmp, k, v) {
			bool known = false;

			for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
				known |= !strcmp(k, keys[i]);
			if (!known)
				json_object_del(j, k);
		}
	}
	ret = spec_parse(j, b->function, spec, err, sizeof(err));
	if (ret < 0)
		snprintf(why, whylen, "bad spec: %s", ret == -EINVAL ? err : strerror(-ret));
	else if (!(*spec)->command || !(*spec)->command[0])
		ret = -EINVAL, snprintf(why, whylen, "the spec has no command");
out:
	json_decref(j);
	return ret;
}

/* Was the image dumped with a mount at mountpoint (its mountpoints-*.img)? */
static bool image_has_mount(const char *image, const char *mountpoint)
{
	DIR *d = opendir(image);
	struct dirent *de;
	int ret = -ENOENT;

	while (d && ret == -ENOENT && (de = readdir(d))) {
		char path[PATH_MAX + 256];
		uint8_t *buf = NULL;
		uint32_t id;
		size_t len;

		if (strncmp(de->d_name, "mountpoints-", 12))
			continue;
		snprintf(path, sizeof(path), "%s/%s", image, de->d_name);
		ret = criu_img_read_file(path, CRIU_IMG_MAX_FILE, &buf, &len);
		if (!ret)
			ret = criu_img_mount_id(buf, len, de->d_name, mountpoint, &id);
		free(buf);
	}
	if (d)
		closedir(d);
	return ret == 0;
}

/* The bundle as thawd's restore writes it (restore/instance.c), from the
 * mounts the image was dumped with: CRIU restores only into those, and runc
 * names each bind to CRIU as an external mount; one the bundle lacks fails
 * the restore ("mnt: No mapping for N:(null) mountpoint").  So the mapped
 * image's mount gets an empty directory, and libthaw-cuda's (a GPU
 * function's, common/gpumem_protocol.h) the image itself, which holds the
 * library and the saved device memory, and gpumem_out for its answers. */
static int write_fn_bundle(const struct func_spec *spec, const char *dir, const char *ns,
			   const char *cid, const char *image, const char *empty,
			   const char *gpumem_out, struct function_host_paths *held)
{
	bool gpumem = image && image_has_mount(image, GPUMEM_IN_DEST);

	return function_bundle_write(
		&(struct function_bundle){ .spec = spec, .netns = ns, .container_id = cid,
					   .mapped_src = !image || image_has_mount(image, OCI_MAPPED_DEST) ?
								 empty : NULL,
					   .gpumem_in = gpumem ? image : NULL,
					   .gpumem_out = gpumem ? gpumem_out : NULL },
		dir, held);
}

/* After the CUDA restore of the processes of the container whose first
 * process is init: each one whose device memory libthaw-cuda saved into
 * the image (gpu-<pid in the container>.mem) copies it back, and only then
 * are its CUDA calls let through (docs/DESIGN.md, "GPU memory").  0 where
 * the image holds none. */
static int gpumem_copy_back(const char *image, pid_t init, const char *out_dir)
{
	pid_t *pids = NULL, ns[64];
	struct snapshot_gpu_memory gm = { .recorded = true, .thaw = true, .ns_pids = ns };
	struct dirent *de;
	size_t n = 0;
	double ms = 0;
	DIR *d;
	int ret = 0;

	d = opendir(image);
	while (d && (de = readdir(d))) {
		int pid, end = 0;

		if (sscanf(de->d_name, GPUMEM_FILE_FMT "%n", &pid, &end) == 1 && end > 0 &&
		    !de->d_name[end] && gm.nns_pids < ARRAY_SIZE(ns))
			ns[gm.nns_pids++] = pid;
	}
	if (d)
		closedir(d);
	if (gm.nns_pids) {
		ret = pidns_members(init, &pids, &n);
		if (!ret)
			ret = gpu_memory_restore(&gm, pids, n, out_dir, &ms);
	}
	free(pids);
	return ret;
}

/* The container's stdout and stderr, read until they close: a pipe nobody
 * reads would stall the function once it is full. */
struct drain {
	int fd[2];
	pthread_t thread;
	bool started;
};

static void *drain_thread(void *arg)
{
	struct drain *d = arg;
	struct pollfd p[2];
	char buf[4096];
	int open = 0;

	for (int i = 0; i < 2; i++) {
		p[i].fd = d->fd[i];
		p[i].events = POLLIN;
		open += d->fd[i] >= 0;
	}
	while (open > 0 && poll(p, 2, -1) >= 0) {
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			if (read(p[i].fd, buf, sizeof(buf)) <= 0) {
				p[i].fd = -1;
				open--;
			}
		}
	}
	return NULL;
}

static void drain_start(struct drain *d, struct runner_stdio *sio)
{
	d->fd[0] = sio->out_r;
	d->fd[1] = sio->err_r;
	d->started = !pthread_create(&d->thread, NULL, drain_thread, d);
}

static void drain_stop(struct drain *d)
{
	if (d->started)
		pthread_join(d->thread, NULL);
	for (int i = 0; i < 2; i++) {
		if (d->fd[i] >= 0)
			close(d->fd[i]);
		d->fd[i] = -1;
	}
	d->started = false;
}

/* Ask the function in namespace ns until it answers correctly: 0, or the
 * kind of the last failure ("timeout", "wrong_answer", ...) in kind.  Each
 * try is one inference request through ready_http (function/ready.c); the
 * spec's readiness check (ready_wait) is not used: the latency measured is
 * to the first correct inference answer, which the readiness path does not
 * give. */
static int wait_correct(const struct bench *b, const char *ns, uint16_t port, double limit_s,
			const char **kind)
{
	uint64_t t0 = now_ns();

	*kind = "timeout";
	while (ms_since(t0) < limit_s * 1000 && !stop_requested) {
		int left = (int)(limit_s * 1000 - ms_since(t0)) + 1;
		struct http_answer ans;
		int ret;

		ret = ready_http(ns, port, b->infer_method, b->infer_path, b->infer_body,
				 MIN(left, (int)(b->infer_timeout_s * 1000)), &ans);
		if (ret == -ECONNREFUSED) { /* nothing listens yet */
			*kind = "timeout";
			usleep(5000);
			continue;
		}
		if (ret == -ENOENT || ret == -EPERM || ret == -EACCES || ret == -EINVAL ||
		    ret == -EBADF) { /* the namespace itself: no use asking again */
			*kind = "connect";
			return ret;
		}
		if (ret == 0 && ans.status >= 200 && ans.status < 300 &&
		    (!b->expect || memmem(ans.body, ans.len, b->expect, b->expect_len))) {
			http_answer_release(&ans);
			return 0;
		}
		*kind = ret < 0 ? "no_answer" :
		       ans.status >= 200 && ans.status < 300 ? "wrong_answer" : "http_error";
		if (ret == 0)
			http_answer_release(&ans);
		usleep(5000);
	}
	return -ETIMEDOUT;
}

/* cp -a --sparse=always src/. dst: the image into our own tmpfs directory,
 * so that CRIU's files written beside the image never touch thaw's tier. */
static int copy_image(const char *src, const char *dst)
{
	int status;
	pid_t pid;

	pid = fork();
	if (pid < 0) {
		pr_perror("fork");
		return -errno;
	}
	if (pid == 0) {
		/* The image's files only: not a tier entry's mapped image
		 * (.mapped/, restore/mapped.h), which a plain restore never reads. */
		execlp("sh", "sh", "-c", "cp -a --sparse=always -- \"$0\"/[!.]* \"$1\"/", src, dst,
		       (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		pr_err("cp -a %s/* %s failed", src, dst);
		return -EIO;
	}
	return 0;
}

/* CUDA restore + unlock of every CUDA process of the container whose first
 * process is init: the members of its PID namespace (runc ps answers null on
 * a cgroup v2 host), as restore/gpu_restore.c finds them. */
static int cuda_thaw_container(pid_t init)
{
	pid_t *pids = NULL, *cpids = NULL;
	size_t n = 0, nc = 0;
	int ret;

	ret = pidns_members(init, &pids, &n);
	if (!ret)
		ret = cuda_filter_processes(pids, n, &cpids, &nc);
	for (size_t i = 0; !ret && i < nc; i++) {
		ret = cuda_restore(cpids[i], NULL, 0);
		if (!ret)
			ret = cuda_unlock(cpids[i]);
	}
	free(pids);
	free(cpids);
	return ret;
}

/* Lock the CUDA processes before the kill, as thawd's stop does: killing a
 * CUDA process mid-work has hung hosts on some drivers. */
static void cuda_lock_container(pid_t init)
{
	pid_t *pids = NULL;
	size_t n = 0;

	if (init > 0 && pidns_members(init, &pids, &n) == 0)
		gpu_lock_for_kill(pids, n);
	free(pids);
}

/* One baseline run: a container booted (image == NULL) or restored from
 * image, timed to its first correct answer.  0 and *ms, or -errno with the
 * failure's kind counted in bl->failures and its words in bl->why. */
static int baseline_once(struct bench *b, struct baseline *bl, const struct func_spec *f,
			 const struct runner *r, const char *image, int run, double *ms)
{
	char dir[3100], ns[PATH_MAX], bundle[PATH_MAX], work[PATH_MAX], empty[PATH_MAX];
	char log_path[PATH_MAX], cid[64], gpu_out[PATH_MAX];
	struct runner_stdio sio = { -1, -1 };
	struct drain d = { .fd = { -1, -1 } };
	struct function_host_paths held = { .nfds = 0 };
	const char *kind = "setup";
	bool have_dir = false, have_ns = false, have_ctr = false;
	const char *tmp;
	pid_t init = 0;
	uint64_t t0;
	int ret;

	tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%.3000s/thaw-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		ret = -errno;
		pr_perror("mkdtemp %s", dir);
		goto out;
	}
	have_dir = true;
	snprintf(ns, sizeof(ns), "%s/netns", dir);
	snprintf(bundle, sizeof(bundle), "%s/bundle", dir);
	snprintf(work, sizeof(work), "%s/work", dir);
	snprintf(log_path, sizeof(log_path), "%s/runc.log", dir);
	snprintf(cid, sizeof(cid), "thaw-bench-%s-%d-%d", image ? "plain" : "cold", (int)getpid(),
		 run);
	kind = "netns";
	ret = netns_create(ns);
	if (ret < 0)
		goto out;
	have_ns = true;
	kind = "bundle";
	snprintf(empty, sizeof(empty), "%s/mapped-empty", dir);
	snprintf(gpu_out, sizeof(gpu_out), "%s/gpu-out", dir);
	ret = mkdir(empty, 0755) < 0 || mkdir(gpu_out, 0700) < 0 ? -errno : 0;
	if (!ret)
		ret = write_fn_bundle(f, bundle, ns, cid, image, empty, gpu_out, &held);
	if (ret < 0)
		goto out;
	t0 = now_ns();
	if (image) {
		kind = "restore";
		ret = runner_restore(r, bundle, cid, image, work, &sio, &init);
	} else {
		kind = "run";
		ret = runner_run(r, bundle, cid, log_path, &sio, &init);
	}
	function_host_paths_close(&held);
	if (ret < 0)
		goto out;
	have_ctr = true;
	drain_start(&d, &sio);
	if (image && f->gpu) {
		kind = "cuda_restore";
		ret = cuda_thaw_container(init);
		if (ret < 0)
			goto out;
		kind = "gpu_memory";
		ret = gpumem_copy_back(image, init, gpu_out);
		if (ret < 0)
			goto out;
	}
	ret = wait_correct(b, ns, f->port, f->ready_timeout_s + b->infer_timeout_s, &kind);
	if (ret == 0)
		*ms = ms_since(t0);
out:
	if (ret < 0) {
		kinds_add(&bl->failures, kind);
		snprintf(bl->why, sizeof(bl->why), "not available: %s%s: %s", kind,
			 stop_requested ? " (interrupted)" : "",
			 log_last_error()[0] ? log_last_error() : strerror(-ret));
	}
	if (have_ctr) {
		if (f->gpu)
			cuda_lock_container(init);
		runner_delete(r, cid);
	}
	function_host_paths_close(&held);
	drain_stop(&d);
	if (sio.out_r >= 0 && !d.started)
		close(sio.out_r);
	if (sio.err_r >= 0 && !d.started)
		close(sio.err_r);
	if (have_ns) {
		netns_remove(ns);
		/* Where mounts propagate, netns_create bound the directory that
		 * holds the namespace file onto itself, private: rm_rf does not
		 * cross mounts, so undo that first. */
		if (umount2(dir, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
			pr_warn("umount %s: %s", dir, strerror(errno));
	}
	/* Not "the name no longer ends in X": mkdtemp's own letters may. */
	if (have_dir && rm_rf(dir) < 0)
		pr_warn("%s is left behind", dir);
	return ret;
}

static void run_baseline(struct bench *b, struct baseline *bl, const struct func_spec *f,
			 const struct runner *r, const char *image)
{
	for (long i = 0; i < b->baseline_runs && !stop_requested; i++) {
		double ms = 0;

		fprintf(stderr, "thaw-bench: %s, run %ld of %ld\n", bl->name, i + 1,
			b->baseline_runs);
		log_clear_error();
		if (baseline_once(b, bl, f, r, image, (int)i, &ms) == 0)
			stats_add(&bl->lat, ms);
	}
	bl->available = stats_count(&bl->lat) > 0;
}

void run_baselines(struct bench *b)
{
	char img[] = "/dev/shm/thaw-bench-plain-XXXXXX", why[400], src[PATH_MAX + 80], elided[PATH_MAX + 96];
	struct thaw_config c;
	struct runner r;
	struct func_spec *f = NULL;
	bool made_img = false; /* the directory, whatever copy_image got into it */

	if (!b->cold.requested && !b->plain.requested)
		return;
	if (fn_load(b, &f, why, sizeof(why)) < 0 || config_init(&c, NULL) < 0) {
		snprintf(b->cold.why, sizeof(b->cold.why), "not available: %s", why);
		snprintf(b->plain.why, sizeof(b->plain.why), "not available: %s", why);
		goto out;
	}
	if (f->gpu && cuda_init() < 0) {
		snprintf(b->cold.why, sizeof(b->cold.why), "not available: a GPU function and no GPU");
		snprintf(b->plain.why, sizeof(b->plain.why), "not available: a GPU function and no GPU");
		goto out;
	}
	r.runc = c.runc;
	r.criu = c.criu;
	r.state_dir = b->runc_root;
	if (b->cold.requested)
		run_baseline(b, &b->cold, f, &r, NULL);
	if (b->plain.requested) {
		/* "sha256:<hex>" names a snapshot in thaw's RAM tier. */
		if (!strncmp(b->baseline_plain_image, "sha256:", 7))
			snprintf(src, sizeof(src), "%s/%s", c.ram_tier_dir,
				 b->baseline_plain_image + 7);
		else
			snprintf(src, sizeof(src), "%.4000s", b->baseline_plain_image);
		snprintf(elided, sizeof(elided), "%.4000s/" TIER_ELIDED, src);
		if (access(elided, F_OK) == 0) {
			/* restore/tier_layout.c: its pages are in its mapped image only */
			snprintf(b->plain.why, sizeof(b->plain.why),
				 "not available: %.300s holds some pages files only in its mapped image "
				 "(thaw materialize --whole writes them)", src);
			goto out;
		}
		made_img = mkdtemp(img) != NULL;
		if (!made_img || copy_image(src, img) < 0) {
			snprintf(b->plain.why, sizeof(b->plain.why),
				 "not available: cannot copy the image %.400s into tmpfs", src);
			goto out;
		}
		run_baseline(b, &b->plain, f, &r, img);
	}
out:
	if (made_img)
		rm_rf(img);
	spec_free(f);
}
