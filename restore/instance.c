/* SPDX-License-Identifier: Apache-2.0 */
/* instance.c — see instance.h: an instance started, step by step
 * (docs/DESIGN.md, "The start path, step by step").
 *
 * An instance lives in <data>/instances/<id>/ (its bundle, its network
 * namespace file, CRIU's work directory, function.log; a lazy one also
 * lazy-pages.log and lazy.status, the watcher's word on how its lazy-pages
 * daemon ended) and is described by
 * <data>/instances/<id>.json, written as soon as the work directory exists
 * ("state":"starting") and again once it runs, so that whatever a start
 * killed half-way left behind can still be found and removed by stop
 * (instance_stop.c).  Containers live in thaw's own runc root, <data>/runc.
 * The record and the listing: instance_record.c; a standby taken:
 * instance_standby.c; an instance booted cold: instance_boot.c.
 */
#define LOG_PREFIX "instance: "
#include "restore/instance.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/spawn.h"
#include "common/util.h"
#include "function/bundle.h"
#include "function/ready.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "images/image.h"
#include "restore/gpu_order.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "restore/instance_internal.h"
#include "restore/lazy_watch.h"
#include "restore/prefault.h"
#include "restore/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* GPU starts of this process between deciding how they restore and
 * returning (thawd runs many at once): what THAW_LAZY=auto weighs, since a
 * burst of lazy GPU starts is slower than the same burst eager. */
static atomic_uint gpu_starts_in_flight;

/* Who carries a GPU snapshot's device memory, from its meta. */
static void set_gpu_memory(struct instance *in, const struct snapshot_meta *sm)
{
	const struct snapshot_gpu_memory *gm = &sm->gpu_memory;

	in->gpu_memory = gm->thaw ? "thaw" : "driver";
	snprintf(in->gpu_memory_why, sizeof(in->gpu_memory_why), "%s",
		 !gm->recorded ? "the snapshot was made without libthaw-cuda" : gm->why ?: "");
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
			const char *mapped_src, const struct snapshot_meta *sm,
			const struct gpu_placement *gp)
{
	char image_root[PATH_MAX] = "";
	int minors[GPU_MAX], ret;
	size_t n = 0;

	/* An image's rootfs in a user namespace: idmapped to its range, as
	 * at the snapshot (the mount made then is reused). */
	if (sm->image.reference && x->userns.size) {
		ret = image_idmap(x->c, spec->bundle, &x->userns, image_root, sizeof(image_root));
		if (ret)
			return ret;
	}
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
								.legacy_sandbox = !sm->confined,
								.gpu_minors = n ? minors : NULL,
								.ngpu_minors = n,
								.allow = x->c,
								.image = sm->image.reference != NULL,
								.image_root = image_root[0] ?
										      image_root :
										      NULL,
								.userns = &x->userns },
				     x->bundle, &x->held);
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

/* A snapshot made on an image (its meta's image; none: 0, nothing to
 * do): the spec's bundle made this host's copy of that image, brought into
 * the image cache if it is not there, and held against the cache's gc in
 * *lock_fd until the start ends.  The bundle the snapshot ran on may be
 * another host's path: CRIU restores the container's root at whatever path
 * runc gives it, and checks the files it reopens (size, ELF build-id), which
 * the very image has alike. */
static int use_image(const struct thaw_config *c, const struct snapshot_meta *sm,
		     struct func_spec *spec, struct instance *in, int *lock_fd)
{
	const char *ref = sm->image.reference, *digest = sm->image.digest;
	struct image_progress p = { .digest = digest };
	struct image im;
	char *bundle;
	int ret;

	if (!ref)
		return 0;
	if (strlen(digest) >= sizeof(in->image) || !spec->bundle) {
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

/* The snapshot's meta, parsed (sm), and its spec, taken from it. */
static int parse_meta(const struct manifest *m, const char *snapshot, struct snapshot_meta *sm,
		      struct func_spec **spec)
{
	char why[256];
	int ret = snapshot_meta_parse(m->meta, sm, why, sizeof(why));

	if (ret) {
		/* What the snapshot records cannot be read: it cannot be
		 * restored as it was made (-EBADMSG: damaged). */
		pr_err("snapshot %s: its meta: %s", snapshot, why);
		return ret;
	}
	ret = sm->spec_err;
	*spec = snapshot_meta_take_spec(sm);
	if (ret == -ENOENT) {
		pr_err("snapshot %s has no function spec in its meta: not a thaw snapshot?",
		       snapshot);
		return -EINVAL;
	}
	if (ret == -EINVAL) {
		/* It parsed when the snapshot was made: an older thaw let in
		 * what this one refuses (a mount where thaw binds its own, say).
		 * Restored, it would run as that thaw ran it, not as this one
		 * confines it; a new snapshot of a spec put again does not. */
		pr_err("snapshot %s was made from a spec this thaw refuses (%s): PUT the "
		       "function again with a spec it accepts, and snapshot it again",
		       snapshot, sm->spec_why);
		return -ENOEXEC;
	}
	if (ret)
		pr_err("snapshot %s: its function spec is unusable: %s", snapshot, sm->spec_why);
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
	return instance_ctx_record(x, in, "starting");
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
 * error says why, and where the function's output is kept (see
 * instance_internal.h). */
int instance_ctx_ready(struct start_ctx *x, const struct func_spec *spec, struct instance *in,
		       const char *who)
{
	char why[512] = "";
	uint64_t tp = now_ns();
	int ret = ready_wait(x->netns, spec->port, spec->ready, spec->ready_path,
			     spec->ready_timeout_s > 0 ? spec->ready_timeout_s : 60, in->pid, why,
			     sizeof(why));

	in->t.ready = ms_since(tp);
	if (!ret)
		return 0;
	/* The output goes to the ended instance's log, which the control
	 * plane reads; the error names it only. */
	x->keep_output = true;
	log_set_error("%s %s after %.0f ms (%s); its output is kept as instance %s's: GET "
		      "/instances/%s/logs",
		      who, ret == -ESRCH ? "exited" : "was not ready", in->t.ready,
		      why[0] ? why : strerror(-ret), in->id, in->id);
	return ret;
}

/* One start: what its steps share, and what start_end releases whatever
 * step it stopped at. */
struct start {
	const struct thaw_config *c;
	struct store *s;
	struct tier *t;
	const char *snapshot_id;
	enum instance_mode mode;
	bool standby;            /* made to wait for a request (instance_make_standby) */
	bool gpu_context;        /* a GPU standby that holds its contexts */
	struct start_ctx x;      /* what is built, for instance_ctx_teardown */
	struct gpu_placement own; /* GPUs this start placed itself */
	struct gpu_placement *gp; /* the GPUs it restores onto; NULL: none yet (a standby) */
	struct manifest *m;
	struct manifest *m2;     /* the manifest again, when the tier found data missing */
	struct snapshot_meta meta; /* m's, parsed (its spec taken into spec) */
	struct func_spec *spec;
	struct tier_lease *lease;
	struct instance in;
	char why_mode[160];      /* why mapped, lazy or eager */
	bool want_mapped;
	bool counted;            /* in gpu_starts_in_flight */
	unsigned gpu_starts;     /* GPU starts in flight, this one included, when it began */
	int image_lock;          /* the image's lock, held until the start ends */
	uint64_t t0;
	enum fault_step phase;   /* the step it is at: out->fault.step on failure */
};

/* The manifest and its spec, loaded; a GPU start counted in
 * gpu_starts_in_flight. */
static int load_snapshot(struct start *st)
{
	struct instance *in = &st->in;
	int ret;

	ret = store_manifest_load(st->s, st->snapshot_id, &st->m, in->snapshot);
	if (ret) {
		if (ret == -ENOENT)
			pr_err("no snapshot %s in the store %s", st->snapshot_id,
			       store_path(st->s));
		return ret;
	}
	ret = parse_meta(st->m, in->snapshot, &st->meta, &st->spec);
	if (ret)
		return ret;
	snprintf(in->function, sizeof(in->function), "%s",
		 st->spec->id[0] ? st->spec->id : st->m->name);
	st->x.gpu = st->spec->gpu;
	if (st->spec->gpu)
		set_gpu_memory(in, &st->meta);
	/* Every GPU start counts, whatever decides its mode: each one loads the
	 * machine.  Counted once here, uncounted once in start_end. */
	if (st->spec->gpu) {
		st->gpu_starts = atomic_fetch_add(&gpu_starts_in_flight, 1) + 1;
		st->counted = true;
	}
	return 0;
}

/* How its pages come back, as far as it is known before the tier entry:
 * mapped where it applies (st->want_mapped), else lazy or eager. */
/* Whether a process without CAP_SYS_PTRACE in the host's user namespace
 * may open a userfaultfd (CRIU's lazy restore opens one in the restored
 * task: in a user namespace, without that capability). */
static bool userfaultfd_unprivileged(void)
{
	FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "re");
	int v = 0;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v == 1;
}

static void choose_mode(struct start *st)
{
	const struct func_spec *spec = st->spec;
	enum instance_mode mode = st->mode;

	/* Mapped wherever it applies, unless the start or the function asks
	 * for a way (then its word is the reason).  Where it does not apply,
	 * the rest decides between lazy and eager. */
	st->want_mapped = mode == INSTANCE_MAPPED ||
			  (mode == INSTANCE_MODE_AUTO && spec->lazy != SPEC_LAZY &&
			   spec->lazy != SPEC_EAGER);
	if (mode == INSTANCE_MAPPED)
		mode = INSTANCE_MODE_AUTO;
	/* The start's word, else the function's, else thawd's setting (whose
	 * default, config.h says why, is lazy but for GPU functions under
	 * CRIU's daemon or in a burst of GPU starts). */
	if (mode != INSTANCE_MODE_AUTO) {
		snprintf(st->why_mode, sizeof(st->why_mode), "the start asked");
	} else if (spec->lazy == SPEC_LAZY || spec->lazy == SPEC_EAGER) {
		mode = spec->lazy == SPEC_LAZY ? INSTANCE_LAZY : INSTANCE_EAGER;
		snprintf(st->why_mode, sizeof(st->why_mode), "the function's spec");
	} else {
		bool lazy = config_restores_lazily(st->c, spec->gpu, st->gpu_starts, st->why_mode,
						   sizeof(st->why_mode));

		mode = lazy ? INSTANCE_LAZY : INSTANCE_EAGER;
	}
	if (mode == INSTANCE_LAZY && st->meta.userns_size && !userfaultfd_unprivileged()) {
		mode = INSTANCE_EAGER;
		snprintf(st->why_mode, sizeof(st->why_mode),
			 "in a user namespace a restored process may not open a userfaultfd "
			 "(vm.unprivileged_userfaultfd is 0)");
	}
	st->x.lazy = st->in.lazy = mode == INSTANCE_LAZY;
	pr_debug("%s: %s (%s)", st->in.function, st->in.lazy ? "lazy" : "eager", st->why_mode);
}

/* Its GPUs, before anything is made: a GPU that cannot take it is a
 * refusal, not a half-started instance.  A standby's wait until it is
 * taken. */
static int place_gpus(struct start *st)
{
	char why[512];
	int ret;

	if (st->standby) {
		st->gp = NULL;
		return 0;
	}
	if (!st->spec->gpu || (st->gp && st->gp->held))
		return 0;
	st->gp = &st->own;
	ret = gpu_place(&st->meta, NULL, 0, st->gp, why, sizeof(why));
	if (ret) {
		log_set_error("%s", why);
		pr_err("%s", why);
	}
	return ret;
}

/* Step "load": the snapshot, how it restores, its GPUs. */
static int load(struct start *st)
{
	int ret = load_snapshot(st);

	if (!ret) {
		choose_mode(st);
		ret = place_gpus(st);
	}
	st->in.t.load = ms_since(st->t0);
	return ret;
}

/* Step "image": the image a snapshot on one restores onto, this host's. */
static int take_image(struct start *st)
{
	uint64_t tp = now_ns();
	int ret = use_image(st->c, &st->meta, st->spec, &st->in, &st->image_lock);

	st->in.t.image = ms_since(tp);
	return ret;
}

/* Step "materialize": the snapshot leased in the RAM tier (built there if
 * it is not), and whether this start maps it. */
static int materialize(struct start *st)
{
	uint64_t tp = now_ns();
	int ret;

	ret = tier_acquire(st->t, st->in.snapshot, &st->lease);
	/* Data the manifest names is missing (a chunk, a pack, a pack's index)
	 * while the manifest is there: the store is damaged, not the snapshot gone. */
	if (ret == -ENOENT && store_manifest_load(st->s, st->in.snapshot, &st->m2, NULL) == 0)
		ret = -EBADMSG;
	if (ret)
		return ret;
	st->in.tier_hit = tier_lease_hit(st->lease);
	choose_mapped(&st->x, &st->in, st->lease, st->want_mapped, st->why_mode);
	if (!st->x.mapped) {
		ret = tier_lease_whole(st->t, st->lease);
		if (ret)
			return ret;
	}
	st->in.t.materialize = ms_since(tp);
	return 0;
}

/* What the bundle mounts at OCI_MAPPED_DEST into src ("": nothing), and
 * libthaw-cuda's directories where the snapshot's device memory is read
 * from the tier entry. */
static int mounts_for_bundle(struct start *st, char *src, size_t len)
{
	struct start_ctx *x = &st->x;
	int ret = 0;

	src[0] = '\0';
	if (x->mapped) {
		ret = instance_path(src, len, "%s/mem", tier_lease_mapped(st->lease));
		/* CRIU binds it, and maps its files, from inside the snapshot's
		 * user namespace. */
		if (!ret && x->userns.size)
			ret = userns_reach(x->c, src, NULL, &x->userns);
		if (!ret && x->userns.size)
			ret = userns_give(src, &x->userns);
	} else if (st->meta.mapped_mount) {
		snprintf(x->mapped_empty, sizeof(x->mapped_empty), "%s/mapped-empty", x->dir);
		ret = mkdir_p(x->mapped_empty, 0700);
		snprintf(src, len, "%s", x->mapped_empty);
	}
	if (!ret && st->meta.gpu_memory.mount) {
		x->gpumem_in = tier_lease_path(st->lease);
		ret = instance_path(x->gpumem_out, sizeof(x->gpumem_out), "%s/gpu-out", x->dir);
		if (!ret)
			ret = mkdir_p(x->gpumem_out, 0700);
	}
	return ret;
}

/* Step "setup": the instance's directory and record, its network
 * namespace and its bundle. */
static int set_up(struct start *st)
{
	struct start_ctx *x = &st->x;
	char mapped_src[PATH_MAX + 16];
	uint64_t tp = now_ns();
	int ret;

	ret = instance_ctx_dir(x, &st->in);
	if (ret)
		return ret;
	snprintf(x->lazy_log, sizeof(x->lazy_log), "%s/lazy-pages.log", x->dir);
	snprintf(x->lazy_status, sizeof(x->lazy_status), "%s/lazy.status", x->dir);
	/* From here on a killed start leaves a record that stop can act on. */
	ret = instance_ctx_record(x, &st->in, "starting");
	if (ret)
		return ret;
	x->userns = (struct userns_range){ st->meta.userns_base, st->meta.userns_size };
	st->in.userns_uid = x->userns.base;
	st->in.userns_size = x->userns.size;
	ret = x->userns.size ? netns_reserve(x->netns) : netns_create(x->netns);
	if (ret)
		return ret;
	x->have_netns = true;
	ret = mounts_for_bundle(st, mapped_src, sizeof(mapped_src));
	/* CRIU reads the images, and the instance maps its memory files,
	 * from inside the snapshot's user namespace. */
	if (!ret && x->userns.size) {
		char image[PATH_MAX + 16];

		snprintf(image, sizeof(image), "%s/image", x->mapped ? tier_lease_mapped(st->lease) : "");
		ret = userns_share(x->mapped ? image : tier_lease_path(st->lease), &x->userns);
	}
	if (!ret)
		ret = write_bundle(x, st->spec, st->in.id, mapped_src[0] ? mapped_src : NULL,
				   &st->meta, st->gp);
	if (ret)
		return ret;
	/* The device memory is filled while CRIU and the driver restore. */
	if (x->gpumem_in && !st->standby)
		x->prefill = gpu_prefill_start(&st->meta, x->gpumem_in, x->gpumem_out, st->gp);
	st->in.t.setup = ms_since(tp);
	return 0;
}

/* Step "criu_restore": runc restore of the mapped image or of the image (a
 * lazy start's daemon first), and a mapped instance's lease holder. */
static int criu_restore(struct start *st)
{
	struct start_ctx *x = &st->x;
	struct instance *in = &st->in;
	char image[PATH_MAX + 16];
	uint64_t tp = now_ns();
	int ret;

	if (x->lazy) {
		/* The daemon holds a duplicate of the lease: the image stays in
		 * the tier until it has served the last page. */
		ret = lazy_start(x, in, tier_lease_path(st->lease), tier_lease_fd(st->lease),
				 st->t0);
		if (ret)
			return ret;
	}
	x->have_container = true; /* runner_restore deletes it when it fails; harmless twice */
	snprintf(image, sizeof(image), "%s/image", x->mapped ? tier_lease_mapped(st->lease) : "");
	ret = runner_restore(&x->r, x->bundle, in->id,
			     x->mapped ? image : tier_lease_path(st->lease), x->work, &x->stdio,
			     &in->pid);
	/* CRIU has bound the spec's host directories: no longer held. */
	function_host_paths_close(&x->held);
	/* CRIU restored the network namespace too, its loopback down. */
	if (!ret && x->userns.size)
		ret = netns_adopt(x->netns, in->pid);
	in->t.criu_restore = ms_since(tp);
	if (!ret)
		ret = lazy_check(x, in);
	if (ret)
		return ret;
	proc_start_time(in->pid, &x->pid_start);
	if (x->mapped) {
		ret = hold_lease(x, tier_lease_fd(st->lease), in->pid);
		if (!ret)
			ret = instance_ctx_record(x, in, "starting");
	}
	return ret;
}

/* Step "endpoint": the shim first, which drains the function's output
 * while the start waits. */
static int open_endpoint(struct start *st)
{
	return instance_ctx_endpoint(&st->x, st->spec, &st->in);
}

static int check_ready(struct start *st);

/* Why a standby asked to hold its contexts cannot ("": it can). */
static const char *no_context_why(const struct start *st)
{
	if (!st->x.gpumem_in || strcmp(st->in.gpu_memory ?: "", "thaw"))
		return "libthaw-cuda saved none of its device memory (gpu_memory_why)";
	if (st->meta.ngpus != 1)
		return "its snapshot spans several GPUs";
	return "";
}

/* A GPU standby that holds its contexts: the driver's restore and unlock
 * now, onto a GPU with room for all of the snapshot's memory (the take
 * fills it there); the device memory thaw carries stays unmapped and the
 * function's CUDA calls held at the library's gate until then.  The tier's
 * files of that memory are kept pinned for the take. */
static int hold_contexts(struct start *st)
{
	struct start_ctx *x = &st->x;
	struct instance *in = &st->in;
	const struct snapshot_meta *meta = &st->meta;
	const char *no = no_context_why(st);
	uint64_t before, after;
	char why[512];
	int ret;

	if (no[0]) {
		pr_info("standby %s of %s holds no GPU context: %s", in->id, in->function, no);
		return 0;
	}
	st->gp = &st->own;
	ret = gpu_place(meta, NULL, 0, st->gp, why, sizeof(why));
	if (ret) {
		log_set_error("%s", why);
		pr_err("%s", why);
		return ret;
	}
	before = gpu_free_bytes(st->gp->dev[0].ordinal);
	ret = gpu_restore_container(&x->r, in->id, in->pid, meta, st->gp, &x->cuda_pids,
				    &x->ncuda);
	if (ret)
		return ret;
	after = gpu_free_bytes(st->gp->dev[0].ordinal);
	in->standby_context = true;
	in->standby_gpu_bytes = before > after ? before - after : 0;
	instance_set_gpus(in, st->gp);
	gpu_prefill_keep(in->pid, meta, x->gpumem_in, st->gp->dev[0].ordinal);
	return 0;
}

/* Step "standby": everything but the part that needs the GPU (or the
 * CPU): a CPU function waits frozen; a GPU function's CUDA state is still
 * checkpointed and locked, so it does nothing, or holds its contexts
 * (hold_contexts). */
static int park_standby(struct start *st)
{
	struct start_ctx *x = &st->x;
	struct instance *in = &st->in;
	struct snapshot_meta meta;
	uint64_t faulted = 0, tp;
	int ret = 0;

	/* A CPU function answers its readiness check before it is frozen: its
	 * first answer after a restore is its slowest (each page of the
	 * snapshot it writes is a copy-on-write fault: the CPU example's took
	 * ~330 of them, 30-100 ms on the dev VM), and a take should not pay for
	 * that.  A GPU function cannot answer before its CUDA restore. */
	if (!st->spec->gpu) {
		ret = check_ready(st);
		if (!ret)
			ret = runner_pause(&x->r, in->id);
	} else if (st->gpu_context) {
		ret = hold_contexts(st);
	}
	if (ret)
		return ret;
	tp = now_ns();
	if (x->mapped)
		prefault_mapped(in->pid, &faulted);
	/* Its device memory is copied from the tier entry when it is
	 * taken: the entry stays until the instance ends. */
	if (x->gpumem_in && !x->mapped) {
		ret = hold_lease(x, tier_lease_fd(st->lease), in->pid);
		if (ret)
			return ret;
	}
	tier_release(st->lease);
	st->lease = NULL;
	in->standby = true;
	in->t.total = ms_since(st->t0);
	/* Its meta as parsed, the spec (taken out of it) put back. */
	meta = st->meta;
	meta.spec = st->spec;
	x->standby_meta = &meta;
	ret = instance_ctx_record(x, in, "standby");
	x->standby_meta = NULL;
	if (ret)
		return ret;
	pr_info("standby %s of %s: pid %d, %s, made in %.1f ms (%.1f MiB of mapped pages "
		"faulted in, %.1f ms)%s", in->id, in->function, (int)in->pid, in->pages, in->t.total,
		faulted / 1048576.0, ms_since(tp), in->standby_context ? ", holding its contexts" : "");
	if (in->standby_context)
		pr_info("standby %s of %s holds %.1f MiB on GPU %d (NVML's free figure fell that "
			"much over the driver's restore)", in->id, in->function,
			in->standby_gpu_bytes / 1048576.0, in->gpus[0].index);
	return 0;
}

/* Step "lazy_wait": a lazy GPU start under lazy_gpu_after_fill waits for
 * every page before the CUDA restore. */
static int lazy_wait(struct start *st)
{
	uint64_t tp = now_ns();
	int ret;

	if (!st->spec->gpu || !st->x.lazy || !st->c->lazy_gpu_after_fill)
		return 0;
	ret = lazy_wait_fill(&st->x, &st->in, 60000);
	st->in.t.lazy_wait = ms_since(tp);
	return ret;
}

/* A mapped GPU start's snapshot pages faulted in (prefault_mapped) on a
 * thread of their own while the driver restores: otherwise the function's
 * first request faults them in one by one (~0.2 s of the GPU example's
 * first answer on the H200), and the driver's restore leaves the CPU idle. */
struct prefault_job {
	pid_t pid;
	uint64_t bytes;
	double ms;
	pthread_t thread;
	bool started;
};

/* THAW_GPU_PREFAULT=0: no faulting beside the driver's restore (the pages
 * come in as they are touched), to measure what it costs a burst. */
static bool prefault_beside_gpu(void)
{
	const char *env = getenv("THAW_GPU_PREFAULT");

	return !(env && !strcmp(env, "0"));
}

static void *prefault_main(void *arg)
{
	struct prefault_job *j = arg;
	uint64_t t0 = now_ns();

	prefault_mapped(j->pid, &j->bytes);
	j->ms = ms_since(t0);
	return NULL;
}

/* Step "gpu_restore": the CUDA processes restored and unlocked onto the
 * GPUs, their device memory copied back. */
static int gpu_restore(struct start *st)
{
	struct start_ctx *x = &st->x;
	struct instance *in = &st->in;
	struct prefault_job pj = { .pid = in->pid };
	uint64_t tp = now_ns();
	double waited;
	int ret;

	if (!st->spec->gpu)
		return 0;
	if (x->mapped && prefault_beside_gpu())
		pj.started = pthread_create(&pj.thread, NULL, prefault_main, &pj) == 0;
	/* The allocations fills are making now (its own too) made first:
	 * beside the driver's restores each call would wait (gpu_order.h). */
	waited = gpu_order_restore_begin(gpu_prefill_making(x->prefill));
	if (waited >= 1.0)
		pr_info("%s: its driver restore waited %.1f ms for fills' allocations", in->id,
			waited);
	ret = gpu_restore_container(&x->r, in->id, in->pid, &st->meta, st->gp, &x->cuda_pids,
				    &x->ncuda);
	/* A function of several processes or GPUs: for thaw doctor. */
	gpu_span_record(x->c->data_dir, in->function, &st->meta, ret);
	if (!ret) {
		/* Ends the fill either way; a failed start ends it in start_end. */
		ret = gpu_prefill_restore(x->prefill, &st->meta, x->cuda_pids, x->ncuda,
					  x->gpumem_in ? x->gpumem_out : NULL, in->id, &in->t.gpu_copy);
		x->prefill = NULL;
	}
	gpu_order_restored();
	in->t.gpu_restore = ms_since(tp);
	if (pj.started) {
		pthread_join(pj.thread, NULL);
		pr_debug("%s: %.1f MiB of mapped pages faulted in beside the GPU restore, %.1f ms "
			 "(%.1f ms after it)", in->id, pj.bytes / 1048576.0, pj.ms, ms_since(tp) -
			 in->t.gpu_restore);
	}
	if (!ret && st->gp)
		instance_set_gpus(in, st->gp);
	return ret;
}

/* Step "ready": the spec's readiness check, and the daemon of a lazy
 * start still serving. */
static int check_ready(struct start *st)
{
	int ret = instance_ctx_ready(&st->x, st->spec, &st->in, "the restored function");

	return ret ? ret : lazy_check(&st->x, &st->in);
}

/* Step "record": the tier lease let go (a mapped instance's holder keeps
 * it), the record marked running. */
static int record_running(struct start *st)
{
	struct instance *in = &st->in;
	int ret;

	tier_release(st->lease);
	st->lease = NULL;
	in->t.total = ms_since(st->t0);
	ret = instance_ctx_record(&st->x, in, "running");
	if (ret)
		return ret;
	/* Its device memory is back and the start has its answer: unpin the
	 * RAM tier's copy the library copied it from. */
	gpumem_release(st->x.cuda_pids, st->x.ncuda);
	pr_info("instance %s of %s: %s, pid %d, %s (%s), %.1f ms (materialize %.1f, "
		"criu_restore %.1f, gpu_restore %.1f, ready %.1f)", in->id, in->function,
		in->endpoint, (int)in->pid, in->pages, st->x.mapped ? "it applies" : in->pages_why,
		in->t.total, in->t.materialize, in->t.criu_restore, in->t.gpu_restore, in->t.ready);
	return 0;
}

/* Run step of st: st->phase names it, for the failure's message. */
static int step(struct start *st, enum fault_step step, int (*fn)(struct start *))
{
	st->phase = step;
	return fn(st);
}

/* A failed start: the message says where it broke, and whatever it had
 * made is undone. */
static void start_failed(struct start *st, int ret, struct instance *out)
{
	char msg[1024];

	phase_failed(st->in.snapshot[0] ? st->in.snapshot : st->snapshot_id,
		     fault_step_name(st->phase), ret);
	fault_take(&out->fault); /* the engine's, a damaged chunk (common/fault.h) */
	out->fault.step = st->phase;
	out->fault.err = ret;
	/* teardown may log on its own; the start's error is the one to tell. */
	snprintf(msg, sizeof(msg), "%s", log_last_error());
	instance_ctx_teardown(&st->x, st->in.id);
	log_set_error("%s", msg);
	tier_release(st->lease);
	st->lease = NULL;
}

/* What a start holds whatever its end. */
static void start_end(struct start *st)
{
	/* The image was used until here: a running container holds its
	 * rootfs as its root, which the cache's gc respects. */
	if (st->image_lock >= 0)
		close(st->image_lock);
	gpu_prefill_end(st->x.prefill, NULL, 0);
	gpu_release(&st->own);
	if (st->counted)
		atomic_fetch_sub(&gpu_starts_in_flight, 1);
	free(st->x.cuda_pids);
	spec_free(st->spec);
	snapshot_meta_release(&st->meta);
	manifest_free(st->m2);
	manifest_free(st->m);
}

/* The start path (docs/DESIGN.md, "The start path, step by step"). */
static int start_once(const struct thaw_config *c, struct store *s, struct tier *t,
		      const char *snapshot_id, enum instance_mode mode, bool standby,
		      bool gpu_context, struct gpu_placement *asked, struct instance *out)
{
	struct start st = { .c = c, .s = s, .t = t, .snapshot_id = snapshot_id, .mode = mode,
			    .standby = standby, .gpu_context = gpu_context, .x = { .c = c, .stdio = { -1, -1 } }, .gp = asked,
			    .image_lock = -1, .t0 = now_ns(), .phase = FAULT_LOAD };
	int ret;

	fault_clear(); /* a thread's earlier start's */
	if ((ret = step(&st, FAULT_LOAD, load)) || (ret = step(&st, FAULT_IMAGE, take_image)) ||
	    (ret = step(&st, FAULT_MATERIALIZE, materialize)) ||
	    (ret = step(&st, FAULT_SETUP, set_up)) ||
	    (ret = step(&st, FAULT_CRIU_RESTORE, criu_restore)) ||
	    (ret = step(&st, FAULT_ENDPOINT, open_endpoint)))
		goto fail;
	if (standby) {
		ret = step(&st, FAULT_STANDBY, park_standby);
	} else {
		if (!(ret = step(&st, FAULT_LAZY_WAIT, lazy_wait)) &&
		    !(ret = step(&st, FAULT_GPU_RESTORE, gpu_restore)) &&
		    !(ret = step(&st, FAULT_READY, check_ready)))
			ret = step(&st, FAULT_RECORD, record_running);
	}
	if (ret)
		goto fail;
	*out = st.in;
	goto out;
fail:
	start_failed(&st, ret, out);
out:
	start_end(&st);
	return ret;
}

/* start_once, and once more where its RAM tier entry was found damaged
 * (-EUCLEAN: the fill of its device memory checks what it copies; its
 * instance ended before it answered): the entry was reported, and the
 * second start's materialise step makes it again from the store. */
static int start(const struct thaw_config *c, struct store *s, struct tier *t,
		 const char *snapshot_id, enum instance_mode mode, bool standby,
		 bool gpu_context, struct gpu_placement *asked, struct instance *out)
{
	int ret = start_once(c, s, t, snapshot_id, mode, standby, gpu_context, asked, out);

	if (ret != -EUCLEAN)
		return ret;
	pr_warn("start of %.24s: its RAM tier entry was damaged: restoring again, from the "
		"entry made again from the store", snapshot_id);
	log_clear_error();
	return start_once(c, s, t, snapshot_id, mode, standby, gpu_context, asked, out);
}

int instance_start(const struct thaw_config *c, struct store *s, struct tier *t,
		   const char *snapshot_id, enum instance_mode mode, struct instance *out)
{
	return start(c, s, t, snapshot_id, mode, false, false, NULL, out);
}

int instance_start_on(const struct thaw_config *c, struct store *s, struct tier *t,
		      const char *snapshot_id, enum instance_mode mode, struct gpu_placement *gp,
		      struct instance *out)
{
	return start(c, s, t, snapshot_id, mode, false, false, gp, out);
}

int instance_make_standby(const struct thaw_config *c, struct store *s, struct tier *t,
			  const char *snapshot_id, bool gpu_context, struct instance *out)
{
	return start(c, s, t, snapshot_id, INSTANCE_MODE_AUTO, true, gpu_context, NULL, out);
}

int instance_ctx_endpoint(struct start_ctx *x, const struct func_spec *spec, struct instance *in)
{
	struct shim_opts so = { .netns_path = x->netns, .port = spec->port,
				.activity_path = x->activity, .out_fd = x->stdio.out_r,
				.err_fd = x->stdio.err_r, .log_path = x->log,
				.max_log_bytes = x->c->log_bytes };
	uint64_t tp = now_ns();
	int ret;

	ret = shim_start(&so, &x->shim_pid, &x->port);
	if (ret)
		return ret;
	proc_start_time(x->shim_pid, &x->shim_start);
	close(x->stdio.out_r);
	close(x->stdio.err_r);
	x->stdio.out_r = x->stdio.err_r = -1;
	snprintf(in->endpoint, sizeof(in->endpoint), "127.0.0.1:%u", x->port);
	in->t.endpoint = ms_since(tp);
	return 0;
}
