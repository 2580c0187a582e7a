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

/* The versions of what made the snapshot into v, its strings in the
 * buffers given (kernel: utsname's release). */
static void versions(const struct thaw_config *c, struct snapshot_versions *v,
		     struct utsname *u, char *runc, char *criu, size_t len)
{
	int dv;

	if (uname(u) == 0)
		v->kernel = u->release;
	host_record_version(c->runc, runc, len);
	/* "runc version 1.1.5+ds1" */
	v->runc = strncmp(runc, "runc version ", 13) ? runc : runc + 13;
	host_record_version(c->criu, criu, len);
	/* "Version: 4.2.1" */
	v->criu = strncmp(criu, "Version: ", 9) ? criu : criu + 9;
	if (cuda_available() && cuda_driver_version(&dv) == 0)
		v->driver = dv;
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
	char mapped_src[PATH_MAX + 320], visible[64 * GPU_BOOT_MAX], image_root[PATH_MAX];
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
	/* An image's rootfs in a user namespace: idmapped to its range. */
	image_root[0] = '\0';
	if (!ret && j->on_image && j->userns.size)
		ret = image_idmap(j->c, spec->bundle, &j->userns, image_root, sizeof(image_root));
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
						   .image = j->on_image,
						   .image_root = image_root[0] ? image_root : NULL,
						   .userns = &j->userns },
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
	/* runc made its network namespace: thaw reaches it by the same path. */
	if (j->userns.size) {
		ret = netns_adopt(j->netns, j->pid);
		if (ret)
			return ret;
	}
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
	free(j->cuda_procs);
	free(j->gpu);
	if (msg[0])
		log_set_error("%s", msg);
	else
		log_clear_error();
}

/* One snapshot: what its steps share, and what the end releases whatever
 * step it stopped at. */
struct snap {
	struct job j;
	struct store *s;
	const struct prewarm_opts *o;
	const struct func_spec *asked; /* the spec as given (j.spec: the one booted) */
	struct image im;
	struct func_spec *run_spec; /* image_apply's, when the spec names an image */
	struct criu_elide_stats est;
	uint64_t t0, image_bytes, bytes_before;
	json_t *timings, *meta, *host;
	struct snapshot_meta sm; /* what meta is written from; its strings: */
	struct utsname uts;
	char runc[256], criu[256], created[32];
	struct snapshot_result *out;
};

/* runc and CRIU there, and a GPU function's GPUs chosen: nothing is made
 * before what it needs is known to be there. */
static int check_tools(struct snap *n)
{
	const struct thaw_config *c = n->j.c;
	int ret;

	if (!executable(c->runc)) {
		pr_err("runc not found: %s (install runc, or set THAW_RUNC)", c->runc);
		return -ENOENT;
	}
	if (!executable(c->criu)) {
		pr_err("criu not found: %s (run 'make deps' for the CRIU 4.2 wrapper, or set THAW_CRIU)",
		       c->criu);
		return -ENOENT;
	}
	if (!n->j.spec->gpu)
		return 0;
	ret = cuda_init();
	if (ret) {
		pr_err("%s: GPU function needs a CUDA driver (%s)", n->j.spec->id,
		       ret == -ENODEV ? "none on this host" : strerror(-ret));
		return ret;
	}
	return prewarm_choose_gpus(&n->j);
}

/* The spec's image, ready in the cache, and the spec to boot from it: first,
 * as a pull that fails costs no boot. */
static int use_image(struct snap *n)
{
	const struct func_spec *spec = n->asked;
	char err[512];
	int ret;

	if (!spec->image)
		return 0;
	ret = image_get(n->j.c, spec->image, n->j.c->registry_auth, n->o->progress,
			n->o->progress_arg, &n->im);
	if (ret)
		return ret;
	json_object_set_new(n->timings, "image_pull", json_real(n->im.pull_ms));
	json_object_set_new(n->timings, "image_unpack", json_real(n->im.unpack_ms));
	ret = image_apply(&n->im, spec, &n->run_spec, err, sizeof(err));
	if (ret) {
		log_set_error("%s (%s): %s", spec->image, n->im.digest, err);
		return ret;
	}
	n->j.spec = n->run_spec;
	n->j.on_image = true;
	return 0;
}

/* The work directory and the names in it. */
static int make_work(struct snap *n)
{
	static atomic_uint seq;
	struct job *j = &n->j;
	const struct thaw_config *c = j->c;
	unsigned k = atomic_fetch_add(&seq, 1);
	int ret;

	snprintf(j->state_dir, sizeof(j->state_dir), "%s/runc", c->data_dir);
	j->r.runc = c->runc;
	j->r.criu = c->criu;
	j->r.state_dir = j->state_dir;
	snprintf(j->cid, sizeof(j->cid), "snap-%s-%d-%u", j->spec->id, (int)getpid(), k);
	snprintf(j->netns, sizeof(j->netns), "%s/work", c->data_dir);
	ret = mkdir_p(j->netns, 0700);
	if (ret)
		return ret;
	snprintf(j->work, sizeof(j->work), "%s/work/%s-%d-%u", c->data_dir, j->spec->id,
		 (int)getpid(), k);
	if (mkdir(j->work, 0700) < 0) {
		ret = -errno;
		pr_perror("mkdir %s", j->work);
		j->work[0] = '\0'; /* not ours to remove */
		return ret;
	}
	snprintf(j->netns, sizeof(j->netns), "%s/netns", j->work);
	snprintf(j->bundle, sizeof(j->bundle), "%s/bundle", j->work);
	snprintf(j->image, sizeof(j->image), "%s/image", j->work);
	snprintf(j->criu_work, sizeof(j->criu_work), "%s/criu", j->work);
	if (n->o->log_path)
		snprintf(j->log, sizeof(j->log), "%s", n->o->log_path);
	else
		snprintf(j->log, sizeof(j->log), "%s/function.log", j->work);
	snprintf(j->runc_log, sizeof(j->runc_log), "%s/runc-run.log", j->work);
	j->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (j->stop_fd < 0) {
		ret = -errno;
		pr_perror("eventfd");
		return ret;
	}
	return 0;
}

/* A function in a user namespace: its range, taken now if it has none. */
static int take_userns(struct snap *n)
{
	char why[PATH_MAX + 128];

	if (!function_userns_why(n->j.c, n->j.spec, why, sizeof(why))) {
		pr_info("%s runs as the host's uid 0, in no user namespace: %s", n->j.spec->id, why);
		return 0;
	}
	return userns_range_of(n->j.c, n->j.spec->id, &n->j.userns);
}

static int make_netns(struct snap *n)
{
	int ret = n->j.userns.size ? netns_reserve(n->j.netns) : netns_create(n->j.netns);

	n->j.netns_made = !ret;
	return ret;
}

static int make_bundle(struct snap *n)
{
	return write_bundle(&n->j);
}

static int boot_container(struct snap *n)
{
	return boot(&n->j);
}

static int ready(struct snap *n)
{
	return wait_ready(&n->j);
}

static int warm_up(struct snap *n)
{
	const struct func_spec *spec = n->j.spec;

	for (size_t i = 0; i < spec->nwarmup; i++) {
		char what[32];
		int ret;

		snprintf(what, sizeof(what), "warmup[%zu]", i);
		ret = call(&n->j, &spec->warmup[i], what);
		if (ret)
			return ret;
	}
	return 0;
}

static int prepare(struct snap *n)
{
	return n->j.spec->prepare ? call(&n->j, n->j.spec->prepare, "prepare") : 0;
}

static int checkpoint_cuda(struct snap *n)
{
	uint64_t t = now_ns();
	int ret;

	if (!n->j.spec->gpu)
		return 0;
	ret = prewarm_cuda_checkpoint(&n->j);
	if (ret)
		return ret;
	/* The driver's own part, and libthaw-cuda's save before it. */
	json_object_set_new(n->timings, "gpu_memory_save", json_real(n->j.gpumem_save_ms));
	json_object_set_new(n->timings, "driver_checkpoint",
			    json_real(ms_since(t) - n->j.gpumem_save_ms));
	return 0;
}

static int criu_dump(struct snap *n)
{
	return runner_checkpoint(&n->j.r, n->j.cid, n->j.image, n->j.criu_work);
}

/* libthaw-cuda's saved device memory into the image; and the image's size
 * before the zero pages go. */
static int gpu_memory(struct snap *n)
{
	if (n->j.gpumem) {
		int ret = prewarm_gpumem_into_image(&n->j);

		if (ret)
			return ret;
	}
	return dir_bytes(n->j.image, &n->bytes_before);
}

/* Zero pages of private anonymous memory read back as zero without being
 * stored; dropping them here saves the store, the tiers and every restore. */
static int elide(struct snap *n)
{
	int ret;

	if (n->j.spec->elide_zero) {
		ret = criu_elide_zero_pages(n->j.image, &n->est);
		if (ret)
			return ret;
	}
	ret = dir_bytes(n->j.image, &n->image_bytes);
	if (ret)
		return ret;
	pr_info("%s: %llu zero pages elided, image %llu -> %llu bytes", n->j.spec->id,
		(unsigned long long)n->est.pages_elided, (unsigned long long)n->bytes_before,
		(unsigned long long)n->image_bytes);
	return 0;
}

/* The manifest's meta (function/snapshot_meta.h): the snapshot's own, the
 * image it was made on (what a start and image_gc read), what its restore
 * depends on (compared before each start tries it, host_record.h), and the
 * caller's tag.  image_bytes is the image as stored (after elision). */
static int make_meta(struct snap *n)
{
	struct snapshot_meta *sm = &n->sm;
	struct job *j = &n->j;
	time_t now = time(NULL);
	struct tm tm;
	int ret;

	gmtime_r(&now, &tm);
	strftime(n->created, sizeof(n->created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	*sm = (struct snapshot_meta){ .function = j->spec->id, .spec = j->spec,
				      .timings_ms = n->timings, .image_bytes = n->image_bytes,
				      .image_bytes_before_elision = n->bytes_before,
				      .zero_pages_elided = n->est.pages_elided,
				      .created = n->created, .mapped_mount = OCI_MAPPED_DEST,
				      .confined = true, .userns_base = j->userns.base,
				      .userns_size = j->userns.size };
	versions(j->c, &sm->versions, &n->uts, n->runc, n->criu, sizeof(n->runc));
	ret = prewarm_gpu_meta(j, sm);
	if (ret)
		return ret;
	if (n->im.digest[0])
		sm->image = (struct snapshot_image){ .reference = n->asked->image,
						     .digest = n->im.digest,
						     .bundle = n->im.bundle };
	n->host = host_record_here(j->c);
	sm->host = host_record_snapshot(n->host, j->gpu, j->ngpu, n->im.digest);
	if (n->o->thawd)
		sm->thawd = *n->o->thawd;
	n->meta = sm->host ? snapshot_meta_to_json(sm) : NULL;
	return n->meta ? 0 : -ENOMEM;
}

static int ingest(struct snap *n)
{
	struct store_put_stats st = { 0 };
	const char *paths[1] = { n->j.image };
	int ret;

	ret = store_put(n->s, n->j.spec->id, paths, 1, n->meta, false, n->out->snapshot_id, &st);
	if (ret)
		return ret;
	n->out->stored_bytes = st.new_stored;
	return 0;
}

/* A step that ends the phase before it and begins none: its time is in no
 * timing. */
#define UNTIMED ""

/* The snapshot path, in order.  name: what a failure is called ("boot:
 * ..."); phase: the progress phase and the timing it begins (the time up to
 * the next phase is its), UNTIMED, or NULL to go on with the one before. */
static const struct snap_step {
	const char *name;
	const char *phase;
	int (*fn)(struct snap *);
} snap_steps[] = {
	{ "tools", NULL, check_tools },
	{ "image", NULL, use_image },
	{ "work directory", NULL, make_work },
	{ "user namespace", NULL, take_userns },
	{ "network namespace", "boot", make_netns },
	{ "bundle", NULL, make_bundle },
	{ "boot", NULL, boot_container },
	{ "ready", "ready", ready },
	{ "warmup", "warmup", warm_up },
	{ "prepare", "prepare", prepare },
	{ "cuda checkpoint", "cuda_checkpoint", checkpoint_cuda },
	{ "criu dump", "criu_dump", criu_dump },
	{ "gpu memory", UNTIMED, gpu_memory },
	{ "zero elision", "elide", elide },
	{ "meta", "ingest", make_meta },
	{ "ingest", NULL, ingest },
};

/* The end of a snapshot, whatever step it stopped at: everything made is
 * undone (cleanup), the image the manifest names released only now (held
 * until then: image_gc), and a failure named with the function. */
static int snap_end(struct snap *n, int ret)
{
	cleanup(&n->j);
	image_release(&n->im);
	json_decref(n->meta);
	json_decref(n->host);
	json_decref((json_t *)n->sm.host);
	free((void *)n->sm.gpus);
	json_decref(n->timings);
	if (ret) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", log_last_error());
		log_set_error("snapshot of %s failed: %s", n->asked->id, msg);
		memset(n->out, 0, sizeof(*n->out));
	}
	spec_free(n->run_spec);
	return ret;
}

int prewarm_snapshot_opts(const struct thaw_config *c, struct store *s,
			  const struct func_spec *spec, const struct prewarm_opts *o,
			  struct snapshot_result *out)
{
	struct snap n = { .j = { .c = c, .spec = spec, .out = { .fd = -1 }, .stop_fd = -1,
				 .stdio = { -1, -1 } },
			  .s = s, .o = o, .asked = spec, .im = { .lock_fd = -1 }, .out = out,
			  .t0 = now_ns() };
	const char *phase = NULL;
	uint64_t t = 0;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	n.timings = json_object();
	if (!n.timings)
		return snap_end(&n, -ENOMEM);
	for (size_t i = 0; i < ARRAY_SIZE(snap_steps); i++) {
		const struct snap_step *st = &snap_steps[i];

		if (st->phase) {
			if (phase)
				json_object_set_new(n.timings, phase, json_real(ms_since(t)));
			phase = st->phase[0] ? st->phase : NULL;
			t = now_ns();
			if (phase && o->progress)
				o->progress(o->progress_arg, phase, 0, 0);
		}
		ret = st->fn(&n);
		if (ret)
			return snap_end(&n, phase_failed(st->name, ret));
	}
	if (phase)
		json_object_set_new(n.timings, phase, json_real(ms_since(t)));
	json_object_set_new(n.timings, "total", json_real(ms_since(n.t0)));
	out->timings_ms = json_incref(n.timings);
	out->image_bytes = n.image_bytes;
	pr_info("%s: snapshot %s, %llu bytes of image, %llu newly stored, %.0f ms", n.j.spec->id,
		out->snapshot_id, (unsigned long long)n.image_bytes,
		(unsigned long long)out->stored_bytes, ms_since(n.t0));
	snprintf(out->image_digest, sizeof(out->image_digest), "%s", n.im.digest);
	return snap_end(&n, 0);
}

void snapshot_result_release(struct snapshot_result *r)
{
	if (!r)
		return;
	json_decref(r->timings_ms);
	r->timings_ms = NULL;
}
