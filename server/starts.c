/* SPDX-License-Identifier: Apache-2.0 */
/* starts.c — see starts.h.  One start, step by step (start_function):
 * admitted, placed, reserved, fetched, run, then answered; one undo
 * (start_release) gives back what the steps took.
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "function/spec.h"
#include "restore/gpu_restore.h"
#include "restore/instance.h"
#include "restore/shim.h"
#include "server/errors.h"
#include "server/fallback.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/lifetimes.h"
#include "server/metrics.h"
#include "server/registry.h"
#include "server/remote_sync.h"
#include "server/standby.h"
#include "server/starts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define START_RETRY_AFTER    "1"

static json_t *start_answer(const struct instance *in)
{
	json_t *j = instance_to_json(in);

	if (!j)
		j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b, s:{s:f, s:f, s:f, s:f, s:f}}",
			      "instance", in->id, "function", in->function, "snapshot",
			      in->snapshot, "endpoint", in->endpoint, "pid", (int)in->pid, "tier",
			      in->tier_hit ? "ram" : "disk", "lazy", in->lazy, "timings_ms",
			      "materialize", in->t.materialize, "criu_restore", in->t.criu_restore,
			      "gpu_restore", in->t.gpu_restore, "ready", in->t.ready, "total",
			      in->t.total);
	else if (!json_object_get(j, "function"))
		json_object_set_new(j, "function", json_string(in->function));
	return j;
}

/* One start as it goes, step by step (start_function): what each step
 * took is recorded here, so that one undo (start_release) gives back
 * whatever the start holds, whichever step it ended at. */
struct start {
	struct server *s;
	const struct start_opts *o;
	/* Its settings and its snapshot's state, read once (registry_get_spec);
	 * all defaults when it is gone. */
	const struct func_spec *spec;
	struct registry_snap rsnap;
	const char *fn;
	char snap[CHUNK_ID_LEN];
	/* "on_restore_failure": "fail" (docs/DESIGN.md, "Restore or boot") */
	bool fails;
	/* Set when its snapshot cannot serve here: it boots, restoring nothing. */
	char boot_why[768];
	const char *boot_reason;
	unsigned max_instances;
	struct inst_limits lim;
	/* Taken: given back by start_release. */
	struct gpu_placement gp;
	bool reserved; /* an instance place of its function (insts_reserve) */
	bool counted;  /* one of s->starts_running (--max-starts) */
	double fetch_ms;
	struct instance in;
	int err; /* the standby's, restore's or boot's result */
	/* A step's refusal: the answer start_refused gives. */
	unsigned status;
	const char *code;
	bool retry; /* with Retry-After */
	char msg[768];
	/* The result (starts_run's): its answer's body and header. */
	struct start_result *r;
};

/* The start's answer: status with body (stolen), and a header (name NULL:
 * none).  Returns status. */
static unsigned answer(struct start *st, unsigned status, json_t *body, const char *name,
		       const char *value)
{
	st->r->status = status;
	st->r->answer = body;
	st->r->hdr.name = name;
	snprintf(st->r->hdr.value, sizeof(st->r->hdr.value), "%s", value ? value : "");
	return status;
}

/* An error answer of status and code, with Retry-After when retry. */
static unsigned answer_error(struct start *st, unsigned status, const char *code, bool retry,
			     const char *msg)
{
	st->r->code = code;
	snprintf(st->r->msg, sizeof(st->r->msg), "%s", msg);
	/* A 429 or 503 with Retry-After is a refusal: nothing was restored. */
	st->r->refused = retry && (status == 429 || status == 503);
	return answer(st, status, api_error_json(code, msg), retry ? "Retry-After" : NULL,
		      START_RETRY_AFTER);
}

/* The start failed or was refused: counted, and answered "start of <fn>:
 * msg". */
static unsigned start_failed(struct start *st, unsigned status, const char *code, bool retry,
			     const char *msg)
{
	char m[1024];

	metrics_start_failed(st->s->metrics, st->fn, code);
	snprintf(m, sizeof(m), "start of %s: %s", st->fn, msg);
	status = answer_error(st, status, code, retry, m);
	if (st->r->refused) /* answer_error's judgement: nothing was restored */
		metrics_start_refused(st->s->metrics, code);
	return status;
}

/* The start of snapshot st->snap failed with err: the answer.  A start that lost
 * a race says what the race left: the function deleted meanwhile (404 for
 * whatever failed), or, where something was missing (ENOENT), its snapshot
 * forgotten (409 no_snapshot) or replaced (409 conflict).  ENOENT with the
 * same snapshot still current is the store's loss: its manifest gone (500
 * damaged), or something else (500 internal).  Damaged data (EBADMSG: a
 * chunk, a pack index, a manifest, or a chunk the manifest names that is
 * nowhere) marks the snapshot damaged in the registry. */
static unsigned start_lost(struct start *st, int err)
{
	struct server *s = st->s;
	const char *fn = st->fn, *snap = st->snap;
	char cur[CHUNK_ID_LEN], msg[1024];
	enum snap_state state = SNAP_NONE;
	struct manifest *m = NULL;
	struct api_err e;
	int ret;

	snprintf(msg, sizeof(msg), "%s", api_why(err));
	pr_warn("start of %s failed: %s", fn, msg);
	ret = registry_ready_snapshot(s->reg, fn, cur, &state);
	if (ret == -ENOENT)
		return start_failed(st, 404, "not_found", false,
				    "the function was deleted during the start");
	if (err == -ENOENT && ret == -ENODATA)
		return start_failed(st, 409, "no_snapshot", false,
				    "the function's snapshot was forgotten during the start (its "
				    "spec changed)");
	if (err == -ENOENT && strcmp(cur, snap))
		return start_failed(st, 409, "conflict", false,
				    "the function's snapshot was replaced during the start; start "
				    "again");
	if (err == -ENOENT) {
		ret = store_manifest_load(s->store, snap, &m, NULL);
		manifest_free(m);
		if (ret == -ENOENT || ret == -EBADMSG) {
			err = -EBADMSG;
			snprintf(msg, sizeof(msg), "snapshot %s: its manifest is %s", snap,
				 ret == -ENOENT ? "missing from the store" : "damaged");
		}
	}
	e = api_err_from_errno(err);
	if (err == -EBADMSG) {
		ret = registry_snapshot_damaged(s->reg, fn, snap, msg);
		if (ret && ret != -ENOENT)
			pr_warn("function %s: cannot mark snapshot %s damaged: %s", fn, snap,
				strerror(-ret));
		/* Out of the index: a new snapshot writes them anew. */
		fallback_heal(s, snap, &st->in.fault);
	}
	return start_failed(st, e.status, e.code, e.status == 503, msg);
}

/* A start whose snapshot's image this host could not have (instance.h,
 * image_get_digest): its source lacks it, refuses, cannot be reached, or
 * holds another image now (409 image_changed: a new snapshot takes that
 * one).  The reason names the image by its digest. */
static unsigned image_lost(struct start *st, int err)
{
	char msg[1024];
	struct api_err e;

	snprintf(msg, sizeof(msg), "%s", api_why(err));
	pr_warn("start of %s failed: %s", st->fn, msg);
	if (err == -ESTALE)
		return start_failed(st, 409, "image_changed", false, msg);
	e = api_err_from_errno(err);
	if (e.status == 500)
		e = (struct api_err){ 502, "image_unavailable" };
	return start_failed(st, e.status, e.code, e.status == 503, msg);
}

/* A start that booted, its snapshot unable to serve (boot_why), and whose
 * boot failed with err: the boot's error, saying both.  A function deleted
 * meanwhile is a 404, as for any start. */
static unsigned boot_lost(struct start *st, int err)
{
	char msg[1024];
	struct api_err e;

	snprintf(msg, sizeof(msg), "its snapshot cannot serve (%.400s), and booting it failed: %s",
		 st->boot_why, api_why(err));
	pr_warn("start of %s failed: %s", st->fn, msg);
	if (!registry_exists(st->s->reg, st->fn))
		return start_failed(st, 404, "not_found", false,
				    "the function was deleted during the start");
	e = api_err_from_errno(err);
	return start_failed(st, e.status, e.code, e.status == 503, msg);
}

/* The start's limits: the function's max_instances, idle_s (else thawd's
 * default), max_lifetime_s and stop_grace_s, with the start's idle_s and
 * lifetime_s (?idle_s=, ?max_lifetime_s=) overriding them for this
 * instance; -EINVAL with why for a query that did not parse. */
static int start_limits(struct server *s, const struct start_opts *o,
			const struct func_spec *f, unsigned *max_instances, struct inst_limits *lim,
			char *why, size_t len)
{
	memset(lim, 0, sizeof(*lim));
	*max_instances = f->max_instances;
	/* A stored spec holds "idle_s" only when it is above 0 (spec_to_json):
	 * 0 is "not set", thawd's default. */
	lim->idle_s = f->idle_s > 0 ? f->idle_s : s->opts.idle_s;
	lim->lifetime_s = f->max_lifetime_s;
	lim->grace_s = f->stop_grace_s;
	if (o->bad_query) {
		snprintf(why, len, "%s", o->bad_query);
		return -EINVAL;
	}
	if (o->idle_s >= 0)
		lim->idle_s = o->idle_s;
	if (o->lifetime_s >= 0)
		lim->lifetime_s = o->lifetime_s;
	return 0;
}

/* The host's MemAvailable in bytes; 0 when it cannot be read. */
static uint64_t mem_available(void)
{
	unsigned long long kib = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kib * 1024;
}

/* Admission by memory (--mem-reserve): would a start of fn, at most its
 * snapshot's image in new memory (a materialisation into the tier, or a
 * copy of every page), leave the host less than the reserve?  Refused
 * before anything is restored, rather than killed by the OOM killer
 * half-way; why says the figures. */
static bool memory_admits(struct server *s, const char *fn, uint64_t need, char *why,
			  size_t len)
{
	uint64_t avail;
	char a[32], b[32], c[32];

	if (!s->opts.mem_reserve)
		return true;
	avail = mem_available();
	if (avail >= need && avail - need >= s->opts.mem_reserve)
		return true;
	snprintf(why, len, "the host has %s of memory available; a start of %s may take %s, "
		 "which would leave less than --mem-reserve %s", fmt_bytes(avail, a), fn,
		 fmt_bytes(need, b), fmt_bytes(s->opts.mem_reserve, c));
	return false;
}

/* Where a GPU start's GPUs go (gpu_place): the ones ?gpu= asks for (an
 * index or a UUID, comma-separated for a function of several), else those
 * with the most free memory once the starts in flight have taken theirs,
 * each keeping --gpu-mem-reserve free.  Held in *gp until the start's CUDA
 * restore.  0 (nothing to place for a CPU function), or the HTTP status of
 * the refusal with code and why: 400 for a request this host cannot meet,
 * 503 when the GPUs have no room (or no driver). */
static unsigned place_gpus(struct start *st, struct gpu_placement *gp, const char **code,
			   char *why, size_t len)
{
	const char *asked = st->o->gpu;
	struct server *s = st->s;
	struct manifest *m = NULL;
	struct snapshot_meta sm;
	int ret;

	memset(gp, 0, sizeof(*gp));
	if (!st->spec->gpu) {
		*code = "bad_request";
		snprintf(why, len, "gpu=%s: %s is not a GPU function", asked ? asked : "",
			 st->fn);
		return asked ? 400 : 0;
	}
	if (store_manifest_load(s->store, st->snap, &m, NULL))
		return 0; /* the start reports a missing manifest itself */
	ret = snapshot_meta_parse(m->meta, &sm, why, len);
	manifest_free(m);
	if (ret) {
		why[0] = '\0';
		return 0; /* the start reports an unreadable meta itself */
	}
	ret = gpu_place(&sm, asked, s->opts.gpu_mem_reserve, gp, why, len);
	snapshot_meta_release(&sm);
	*code = ret == -EINVAL ? "bad_request" : ret == -EAGAIN ? "no_gpu_memory" : "no_gpu";
	return !ret ? 0 : ret == -EINVAL ? 400 : 503;
}

/* A standby of fn's snapshot snap, activated into *in onto gp's GPUs: 0,
 * or non-zero when there was none or it failed (the start then restores as
 * usual).  Counted as a hit or a miss for a function that keeps standbys. */
static int take_standby(struct server *s, const char *fn, const struct func_spec *f,
			const char *snap, struct gpu_placement *gp, struct instance *in)
{
	char id[64];
	int ret = -ENOENT;

	while (standby_take(s->standby, fn, snap, id)) {
		ret = instance_activate_on(&s->cfg, id, gp, in);
		if (ret == 0)
			break;
		pr_warn("standby %s of %s not usable (%s): trying another", id, fn,
			log_last_error()[0] ? log_last_error() : api_why(ret));
		log_clear_error();
	}
	if (ret == 0 || f->standby > 0)
		metrics_standby(s->metrics, fn, ret == 0);
	return ret;
}

/* Restore snap onto gp into *in, or, when that fails for a reason of the
 * snapshot or the host (fallback_applies) and fails is false, boot fn cold
 * instead (*reason says why).  A snapshot whose boot worked is marked, and
 * its re-snapshot launched (fallback_mark), as is a damaged one whether the
 * boot worked or not.  0, or the restore's -errno, its error then saying
 * why the boot did not answer either. */
static int restore_or_boot(struct server *s, const char *fn, const char *snap, bool fails,
			   struct gpu_placement *gp, struct instance *in, const char **reason)
{
	char why[768], msg[1024], boot_err[512];
	struct fault fault;
	int ret, boot;

	ret = instance_start_on(&s->cfg, s->store, s->tier, snap, INSTANCE_MODE_AUTO, gp, in);
	if (!ret || fails || !fallback_applies(s, fn, snap, ret, in, reason, why, sizeof(why)))
		return ret;
	fault = in->fault; /* the restore's: the boot makes *in anew */
	snprintf(msg, sizeof(msg), "%s", log_last_error());
	pr_warn("start of %s: its snapshot did not restore (%s): booting it instead", fn, why);
	/* What is left half-made is gone (instance_start's promise). */
	gpu_release(gp);
	boot = fallback_boot(s, fn, snap, why, false, in);
	/* Before marking the snapshot, which may set an error of its own. */
	snprintf(boot_err, sizeof(boot_err), "%s", log_last_error());
	if (!strcmp(*reason, FALLBACK_DAMAGED) && registry_snapshot_damaged(s->reg, fn, snap, why))
		pr_warn("function %s: cannot mark snapshot %s damaged", fn, snap);
	if (!boot || !strcmp(*reason, FALLBACK_DAMAGED))
		fallback_mark(s, fn, snap, why, &fault);
	if (!boot)
		return 0;
	log_set_error("%s; booting it instead failed too: %.300s", msg, boot_err);
	return ret;
}

/* Refuse the start with status and code (Retry-After with retry), its
 * message already in st->msg: the step that calls it returns what this
 * does, -1. */
static int refused(struct start *st, unsigned status, const char *code, bool retry)
{
	st->status = status;
	st->code = code;
	st->retry = retry;
	return -1;
}

/* refused(), with the message made from fmt. */
__attribute__((format(printf, 5, 6)))
static int refuse(struct start *st, unsigned status, const char *code, bool retry,
		  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
	va_end(ap);
	return refused(st, status, code, retry);
}

/* Place the start's GPUs (a GPU function's, or one asking ?gpu=): 0, or -1
 * refused (a 400 for a bad request, a 503 for no room). */
static int start_place(struct start *st)
{
	unsigned status = place_gpus(st, &st->gp, &st->code, st->msg, sizeof(st->msg));

	return status ? refused(st, status, st->code, status == 503) : 0;
}

/* Whether the start may go on at all (nothing is taken yet): a ready
 * snapshot, thawd not stopping, a RAM tier, its limits and ?query, the
 * memory it needs; a snapshot that cannot serve here boots (boot_why), or
 * with "on_restore_failure": "fail" is refused.  0, or -1 refused. */
static int start_admit(struct start *st, int ready, enum snap_state state)
{
	struct server *s = st->s;

	if (ready)
		return refuse(st, 409, "no_snapshot", false,
			      "no ready snapshot (snapshot state: %s)%s", snap_state_name(state),
			      state == SNAP_BUILDING ? "" : "; POST /functions/<id>/snapshot first");
	if (atomic_load(&s->stopping))
		return refuse(st, 503, "shutting_down", true, "thawd is stopping");
	/* A drain takes no new start; the routed requests it already took
	 * are served, starting what they need. */
	if (atomic_load(&s->draining) && !st->o->routed)
		return refuse(st, 503, "shutting_down", true,
			      "thawd is draining: start elsewhere");
	if (!s->tier)
		return refuse(st, 503, "unavailable", true,
			      "the RAM tier is not open (see thawd's log)");
	if (start_limits(s, st->o, st->spec, &st->max_instances, &st->lim, st->msg,
			 sizeof(st->msg)))
		return refused(st, 400, "bad_request", false);
	if (!memory_admits(s, st->fn, st->rsnap.image_bytes, st->msg, sizeof(st->msg)))
		return refused(st, 503, "no_memory", true);
	/* Its snapshot marked, or made on a host unlike this one: boot (or,
	 * "on_restore_failure": "fail", say why not), restoring nothing. */
	if (fallback_precheck(s, st->fn, st->snap, st->fails, &st->boot_reason, st->boot_why,
			      sizeof(st->boot_why)) &&
	    st->fails)
		return refuse(st, 500, "host_mismatch", false, "%s", st->boot_why);
	return st->boot_why[0] ? 0 : start_place(st);
}

/* Take an instance place of its function (max_instances) and a start
 * place (--max-starts): 0, or -1 refused (429, 503). */
static int start_reserve(struct start *st)
{
	struct server *s = st->s;
	unsigned have, running;

	if (insts_reserve(s->insts, st->fn, st->max_instances, &have))
		return refuse(st, 429, "too_many_instances", true,
			      "function %s has %u instance(s), its max_instances", st->fn, have);
	st->reserved = true;
	running = atomic_fetch_add(&s->starts_running, 1);
	st->counted = true;
	if (running >= s->opts.max_starts)
		return refuse(st, 503, "no_capacity", true,
			      "%u start(s) are running already (--max-starts %u)", running,
			      s->opts.max_starts);
	return 0;
}

/* A function pulled without its chunks (?fetch=0) gets them now: 0, or -1
 * refused (502). */
static int start_fetch(struct start *st)
{
	if (st->boot_why[0] || !remote_sync_fetch(st->s, st->snap, &st->fetch_ms))
		return 0;
	return refuse(st, 502, "remote_failed", false,
		      "its snapshot is not in the store and the remote could not give it: %s",
		      log_last_error());
}

/* The instance: a standby if one waits, else a restore (or a cold boot),
 * its result in st->err.  0, or -1 refused: a standby that failed gave its
 * GPUs back, and they could not be placed again. */
static int start_run(struct start *st)
{
	struct server *s = st->s;
	bool placed = st->gp.held;

	log_clear_error();
	st->err = take_standby(s, st->fn, st->spec, st->snap, &st->gp, &st->in);
	if (st->err && placed && !st->gp.held && start_place(st))
		return -1;
	if (st->err && st->boot_why[0])
		st->err = fallback_boot(s, st->fn, st->snap, st->boot_why, false, &st->in);
	else if (st->err)
		st->err = restore_or_boot(s, st->fn, st->snap, st->fails, &st->gp, &st->in,
					  &st->boot_reason);
	return 0;
}

/* The one undo: give back what the steps took, in reverse. */
static void start_release(struct start *st)
{
	if (st->counted)
		atomic_fetch_sub(&st->s->starts_running, 1);
	if (st->reserved)
		insts_unreserve(st->s->insts, st->fn);
	gpu_release(&st->gp);
	st->counted = st->reserved = false;
}

static unsigned start_refused(struct start *st)
{
	return start_failed(st, st->status, st->code, st->retry, st->msg);
}

/* The instance made: tracked (before its instance place is given back, so
 * that max_instances holds throughout). */
static void start_track(struct start *st)
{
	unsigned long long pid_start = 0;

	snprintf(st->in.function, sizeof(st->in.function), "%s", st->fn);
	proc_start_time(st->in.pid, &pid_start);
	if (insts_add(st->s->insts, st->in.id, st->fn, st->in.pid, pid_start, false))
		pr_warn("instance %s is not tracked (out of memory)", st->in.id);
}

/* The answer to a start whose instance is running: its limits recorded,
 * unless its function was deleted or its client left meanwhile (then it is
 * stopped), its metrics, 201. */
static unsigned start_answer_made(struct start *st)
{
	struct server *s = st->s;
	struct instance *in = &st->in;
	const char *fn = st->fn;
	char loc[128];
	json_t *body;

	st->lim.started_ms = realtime_ms();
	insts_set_limits(s->insts, in->id, &st->lim);
	if (instance_set_limits(&s->cfg, in->id, st->lim.idle_s, st->lim.lifetime_s,
				st->lim.grace_s, st->o->routed))
		pr_warn("instance %s: its limits are not recorded", in->id);
	if (!registry_exists(s->reg, fn)) {
		/* Deleted while we restored: the delete left this start's
		 * instance to it (own_start), or is stopping it now. */
		insts_remove(s->insts, in->id);
		lifetimes_stop_now(s, in->id, "function_deleted",
				   "its function was deleted during its start");
		return start_failed(st, 404, "not_found", false,
				    "the function was deleted during the start; its instance "
				    "is stopped");
	}
	if (st->o->client_gone && st->o->client_gone(st->o->client_arg)) {
		/* The gateway gave up (its timeout): nobody will ever use or
		 * delete this instance, so it must not outlive the request. */
		insts_remove(s->insts, in->id);
		lifetimes_stop_now(s, in->id, "client_gone",
				   "its client gave up waiting for the start");
		pr_warn("start of %s: the client closed the connection before the answer; "
			"instance %s stopped",
			fn, in->id);
		return start_failed(st, 499, "client_gone", false,
				    "the client closed the connection");
	}
	if (in->booted)
		metrics_start_booted(s->metrics, fn,
				     st->boot_reason ? st->boot_reason : FALLBACK_MARKED);
	else
		metrics_restore_phases(s->metrics,
				       (double[PHASE_COUNT]){ in->t.materialize, in->t.criu_restore,
							      in->t.gpu_restore, in->t.ready,
							      in->t.total });
	pr_info("instance %s of %s at %s in %.1f ms (%s, %s)", in->id, fn, in->endpoint,
		in->t.total, in->tier_hit ? "ram" : "disk",
		in->pages ? in->pages : in->lazy ? "lazy" : "eager");
	/* Where the fleet's balancer sent it matters: the RAM tier is warm
	 * where the function ran last (bench/fleet-run.sh counts these). */
	metrics_start_tier(st->s->metrics, fn,
			   st->fetch_ms > 0 ? "remote" : in->tier_hit ? "ram" : "disk");
	snprintf(loc, sizeof(loc), "/instances/%s", in->id);
	body = start_answer(in);
	if (body && st->fetch_ms > 0)
		json_object_set_new(body, "remote_fetch_ms", json_real(st->fetch_ms));
	return answer(st, 201, body, "Location", loc);
}

/* A start of st's function, whose settings (st->spec) give its limits,
 * standbys and GPU use, and st->rsnap its snapshot's size: admitted,
 * placed, reserved, fetched, run; whatever step refuses it, start_release
 * gives back what the others took.  The answer's status. */
static unsigned start_function(struct start *st)
{
	enum snap_state state = SNAP_NONE;
	char msg[1024];
	int ready;

	st->fails = st->spec->restore_failure_fails;
	ready = registry_ready_snapshot(st->s->reg, st->fn, st->snap, &state);
	if (ready == -ENOENT) {
		snprintf(msg, sizeof(msg), "no function %s", st->fn);
		return answer_error(st, 404, "not_found", false, msg);
	}
	metrics_start(st->s->metrics, st->fn);
	if (start_admit(st, ready, state) || start_reserve(st) || start_fetch(st) ||
	    start_run(st)) {
		start_release(st);
		return start_refused(st);
	}
	if (!st->err)
		start_track(st);
	start_release(st);
	standby_kick(st->s->standby); /* a refill waits for no start in flight */
	if (st->err && st->boot_why[0])
		return boot_lost(st, st->err);
	if (st->err && st->in.fault.step == FAULT_IMAGE)
		return image_lost(st, st->err);
	if (st->err)
		return start_lost(st, st->err);
	return start_answer_made(st);
}

unsigned starts_run(struct server *s, const char *fn, const struct start_opts *o,
		    struct start_result *r)
{
	static const struct start_opts none = { .idle_s = -1, .lifetime_s = -1 };
	/* A function gone (or whose stored spec no longer parses) has every
	 * setting at its default: the start then answers for itself. */
	static const struct func_spec gone = { .stop_grace_s = SPEC_DEFAULT_STOP_GRACE_S };
	struct start st = { .s = s, .o = o ? o : &none, .fn = fn, .r = r };
	struct func_spec *spec = NULL;
	struct api_err learn;
	char learn_msg[512];

	memset(r, 0, sizeof(*r));
	/* With --remote, any function of the fleet: one this host lacks is
	 * learned from the remote first. */
	if (remote_sync_ensure(s, fn, &learn, learn_msg, sizeof(learn_msg))) {
		r->status = answer_error(&st, learn.status, learn.code, learn.status == 503,
					 learn_msg);
		goto out;
	}
	/* Read once: the spec's limits, its standbys, its snapshot's size. */
	registry_get_spec(s->reg, fn, &spec, &st.rsnap);
	st.spec = spec ? spec : &gone;
	r->status = start_function(&st);
	spec_free(spec);
	if (r->status == 201)
		r->in = st.in;
out:
	if (!r->answer) {
		/* Out of memory for the answer: a 500, as reply.c makes it. */
		r->hdr.name = NULL;
		r->status = 500;
	}
	return r->status;
}

void start_result_release(struct start_result *r)
{
	json_decref(r->answer);
	r->answer = NULL;
}
