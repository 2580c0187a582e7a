/* SPDX-License-Identifier: Apache-2.0 */
/* instance_standby.c — a standby taken (instance_activate): its processes
 * woken, its readiness checked, its record a running instance's.
 */
#define LOG_PREFIX "instance: "
#include "restore/instance.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "restore/gpu_order.h"
#include "restore/gpu_prefill.h"
#include "restore/gpu_restore.h"
#include "restore/instance_internal.h"
#include "function/userns.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The GPUs a record names ([{"index","uuid","name"}]) into in. */
static void gpus_from_record(const json_t *gpus, struct instance *in)
{
	const json_t *g;
	size_t i;

	json_array_foreach(gpus, i, g) {
		struct instance_gpu *d = &in->gpus[in->ngpus];

		if (in->ngpus >= GPU_MAX || !json_is_integer(json_object_get(g, "index")))
			break;
		d->index = (int)json_integer_value(json_object_get(g, "index"));
		snprintf(d->uuid, sizeof(d->uuid), "%s",
			 json_string_value(json_object_get(g, "uuid")) ?: "");
		snprintf(d->name, sizeof(d->name), "%s",
			 json_string_value(json_object_get(g, "name")) ?: "");
		in->ngpus++;
	}
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
	in->pid = instance_record_num(rec, "pid", &v) ? (pid_t)v : 0;
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
	in->standby_context = !strcmp(json_string_value(json_object_get(rec, "standby_gpu")) ?: "",
				      "context");
	in->standby_gpu_bytes = instance_record_num(rec, "standby_gpu_bytes", &v) ? (uint64_t)v : 0;
	gpus_from_record(json_object_get(rec, "gpus"), in);
	in->booted = json_is_false(json_object_get(rec, "restored"));
	if (json_is_true(json_object_get(rec, "userns")) &&
	    instance_record_num(rec, "userns_uid", &v) && v >= 0 && v <= UINT32_MAX) {
		in->userns_uid = (uint32_t)v;
		in->userns_size = USERNS_RANGE_SIZE;
	}
	snprintf(in->boot_why, sizeof(in->boot_why), "%s",
		 json_string_value(json_object_get(rec, "restore_failure")) ?: "");
	in->standby = true;
}

/* Take a standby that holds its contexts: on its own GPU (gp, the start's
 * choice, is given back), room checked for the device memory thaw carries,
 * that memory filled from the tier entry its container sees and mapped by
 * each process, whose calls then go on.  No driver restore: it was done
 * when the standby was made. */
static int take_contexts(struct start_ctx *x, struct instance *in,
			 const struct snapshot_meta *meta, struct gpu_placement *gp)
{
	char tier[64];
	int ret;

	gpu_release(gp);
	if (!in->ngpus || !x->ncuda) {
		log_set_error("the standby's record names no GPU or CUDA process");
		return -EINVAL;
	}
	ret = instance_path(x->gpumem_out, sizeof(x->gpumem_out), "%s/instances/%s/gpu-out",
			    x->c->data_dir, in->id);
	snprintf(tier, sizeof(tier), "/proc/%d/root%s", (int)in->pid, GPUMEM_IN_DEST);
	if (!ret)
		ret = gpu_context_take(meta, in->gpus[0].index, in->gpus[0].uuid, x->cuda_pids,
				       x->ncuda, tier, x->gpumem_out, in->id, &in->t.gpu_copy);
	gpu_prefill_unkeep(in->pid);
	return ret;
}

/* Wake the standby's processes: the CPU function's container thawed, or
 * the GPU function's CUDA state restored (to a GPU with room: the same
 * mapping and free-memory check as a start's), or, holding its contexts,
 * its device memory filled (take_contexts). */
static int wake(struct start_ctx *x, struct instance *in, const struct snapshot_meta *meta,
		struct gpu_placement *gp)
{
	struct gpu_placement own = { 0 };
	bool mem = meta->gpu_memory.mount;
	struct gpu_prefill *pf = NULL;
	char why[512], tier[64];
	uint64_t tp = now_ns();
	int ret = 0;

	if (!x->gpu) {
		ret = runner_resume(&x->r, in->id);
		in->t.resume = ms_since(tp);
		return ret;
	}
	if (in->standby_context) {
		ret = take_contexts(x, in, meta, gp);
		in->t.gpu_restore = ms_since(tp);
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
	if (mem) {
		ret = instance_path(x->gpumem_out, sizeof(x->gpumem_out), "%s/instances/%s/gpu-out",
				    x->c->data_dir, in->id);
		/* Its device memory filled while the driver restores, from
		 * the tier entry its container sees (and its lease holds). */
		snprintf(tier, sizeof(tier), "/proc/%d/root%s", (int)in->pid, GPUMEM_IN_DEST);
		if (!ret)
			pf = gpu_prefill_start(meta, tier, x->gpumem_out, gp);
	}
	/* Fills' allocations before the driver's restore (gpu_order.h). */
	gpu_order_restore_begin(gpu_prefill_making(pf));
	if (!ret)
		ret = gpu_restore_container(&x->r, in->id, in->pid, meta, gp, &x->cuda_pids,
					    &x->ncuda);
	if (!ret && mem) {
		ret = gpu_prefill_restore(pf, meta, x->cuda_pids, x->ncuda, x->gpumem_out, in->id,
					  &in->t.gpu_copy);
		pf = NULL;
	}
	gpu_prefill_end(pf, NULL, 0);
	gpu_order_restored();
	in->t.gpu_restore = ms_since(tp);
	if (!ret)
		instance_set_gpus(in, gp);
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
	struct snapshot_meta meta = { 0 };
	struct instance in;
	json_t *rec = NULL, *cuda = NULL;
	char err[256], *text = NULL;
	uint64_t t0 = now_ns();
	const char *s;
	int ret;

	if (!id_valid(id))
		return -EINVAL;
	ret = instance_record_path(c, id, x.record, sizeof(x.record));
	if (!ret)
		ret = instance_record_load(x.record, &rec);
	if (ret)
		return ret;
	s = json_string_value(json_object_get(rec, "state"));
	if (!s || strcmp(s, "standby") || !json_is_object(json_object_get(rec, "snapshot_meta"))) {
		json_decref(rec);
		return -EBUSY;
	}
	instance_from_record(rec, &in);
	x.gpu = json_is_true(json_object_get(rec, "gpu"));
	s = json_string_value(json_object_get(rec, "runc_root"));
	ret = s ? instance_path(x.runc_root, sizeof(x.runc_root), "%s", s)
		: instance_runc_root(c, x.runc_root, sizeof(x.runc_root));
	if (!ret)
		ret = instance_path(x.netns, sizeof(x.netns), "%s/instances/%s/netns", c->data_dir,
				    id);
	if (!ret)
		ret = instance_path(x.log, sizeof(x.log), "%s/instances/%s/function.log",
				    c->data_dir, id);
	/* Its snapshot's meta, as the standby's making recorded it. */
	if (!ret && snapshot_meta_parse(json_object_get(rec, "snapshot_meta"), &meta, err,
					sizeof(err))) {
		pr_err("standby %s: its snapshot's meta: %s", id, err);
		ret = -EINVAL;
	}
	if (!ret && !meta.spec) {
		pr_err("standby %s: its snapshot's spec: %s", id,
		       meta.spec_err == -ENOENT ? "none" : meta.spec_why);
		ret = -EINVAL;
	}
	if (ret)
		goto fail;
	instance_ctx_runner(&x);
	ret = instance_record_cuda_pids(rec, &x.cuda_pids, &x.ncuda);
	if (!ret)
		ret = wake(&x, &in, &meta, gp);
	if (ret)
		goto fail;
	ret = instance_ctx_ready(&x, meta.spec, &in, "the standby");
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
	    json_object_set_new(rec, "timings_ms", instance_timings_json(&in)) ||
	    json_object_set(rec, "cuda_pids", cuda) ||
	    !(text = json_dumps(rec, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)))) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = write_file_atomic(x.record, text, strlen(text), 0600);
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
	snapshot_meta_release(&meta);
	return ret;
}
