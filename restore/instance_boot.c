/* SPDX-License-Identifier: Apache-2.0 */
/* instance_boot.c — an instance booted cold from its spec (instance.h,
 * instance_boot): what a start answers with when its snapshot cannot be
 * restored (docs/DESIGN.md, "Restore or boot").
 *
 * It is made as a restored instance is (instance.c, whose steps it shares
 * through instance_internal.h: the same directory, record, network
 * namespace, endpoint shim and teardown), so that everything that lists,
 * stops, idles or adopts instances handles it unchanged; only its container
 * comes from `runc run` of the spec, as the snapshot job boots it, instead
 * of `runc restore` of an image.
 */
#define LOG_PREFIX "instance: "
#include "common/cuda.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "function/bundle.h"
#include "function/ready.h"
#include "function/snapshot_meta.h"
#include "images/image.h"
#include "restore/instance.h"
#include "restore/instance_internal.h"
#include "restore/shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALL_TIMEOUT_MS 300000 /* a warm-up call may run a first inference */
#define GPUS_MAX	SPEC_MAX_GPUS

static double ms3(double ms)
{
	return (double)(long long)(ms * 1000.0 + 0.5) / 1000.0;
}

json_t *instance_boot_timings(const struct instance *in)
{
	const struct instance_timings *t = &in->t;
	json_t *j = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "setup", ms3(t->setup), "boot",
			      ms3(t->boot), "endpoint", ms3(t->endpoint), "ready", ms3(t->ready),
			      "warmup", ms3(t->warmup), "total", ms3(t->total));

	/* A booted standby taken: its thaw (runc resume), as a restored one's. */
	if (j && t->resume > 0 && json_object_set_new(j, "resume", json_real(ms3(t->resume)))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* The GPUs a GPU function boots on: its spec's number of them, those with
 * the most free memory (as the snapshot job chooses), into in->gpus, their
 * /dev/nvidiaN minors and, where the host has more, CUDA_VISIBLE_DEVICES
 * by UUID into visible ("" otherwise). */
static int choose_gpus(const struct func_spec *spec, struct instance *in, int *minors,
		       bool *minors_known, char *visible, size_t vlen)
{
	struct cuda_device *d = NULL;
	size_t n = 0, want = spec->gpus ? spec->gpus : 1;
	int ret = cuda_devices(&d, &n);

	visible[0] = '\0';
	if (ret) {
		log_set_error("a GPU function needs the GPU driver: %s",
			      cuda_unavailable_reason()[0] ? cuda_unavailable_reason()
							   : strerror(-ret));
		return ret;
	}
	if (n < want || want > GPUS_MAX || want > GPU_MAX) {
		log_set_error("%s asks for %zu GPU(s); this host has %zu", spec->id, want, n);
		free(d);
		return -ENODEV;
	}
	*minors_known = true;
	for (size_t k = 0; k < want; k++) {
		size_t best = n;

		for (size_t i = 0; i < n; i++)
			if (d[i].ordinal >= 0 && (best == n || d[i].free_bytes > d[best].free_bytes))
				best = i;
		minors[k] = d[best].minor;
		*minors_known &= d[best].minor >= 0;
		in->gpus[k].index = d[best].ordinal;
		snprintf(in->gpus[k].uuid, sizeof(in->gpus[k].uuid), "%s", d[best].uuid);
		snprintf(in->gpus[k].name, sizeof(in->gpus[k].name), "%s", d[best].name);
		if (n > want)
			snprintf(visible + strlen(visible), vlen - strlen(visible), "%s%s",
				 k ? "," : "CUDA_VISIBLE_DEVICES=", d[best].uuid);
		d[best].ordinal = -1; /* taken */
	}
	in->ngpus = want;
	free(d);
	return 0;
}

/* The spec's warm-up calls, in order; each must answer 2xx. */
static int warm_up(struct start_ctx *x, const struct func_spec *spec)
{
	for (size_t i = 0; i < spec->nwarmup; i++) {
		const struct http_call *hc = &spec->warmup[i];
		struct http_answer a;
		int ret = ready_http(x->netns, spec->port, hc->method, hc->path, hc->body,
				     CALL_TIMEOUT_MS, &a);

		if (ret) {
			log_set_error("warmup[%zu] %s %s: %s", i, hc->method, hc->path,
				      strerror(-ret));
			return ret;
		}
		ret = a.status >= 200 && a.status <= 299 ? 0 : -EIO;
		if (ret)
			log_set_error("warmup[%zu] %s %s answered %d", i, hc->method, hc->path,
				      a.status);
		http_answer_release(&a);
		if (ret)
			return ret;
	}
	return 0;
}

int instance_boot(const struct thaw_config *c, const struct instance_boot *b,
		  struct instance *out)
{
	const struct func_spec *spec = b->spec;
	/* A booted standby's record: taking it needs its spec (instance_activate
	 * reads it from the record). */
	struct snapshot_meta booted = { .function = spec->id, .spec = spec, .booted = true };
	struct start_ctx x = { .c = c, .stdio = { -1, -1 } };
	struct instance in = { 0 };
	char visible[64 * GPUS_MAX + 32], runc_log[PATH_MAX + 32], image_root[PATH_MAX] = "";
	char *defaults[3] = { NULL };
	int minors[GPUS_MAX];
	bool minors_known = false;
	enum fault_step phase = FAULT_SETUP;
	uint64_t t0 = now_ns(), tp = t0;
	size_t nd = 0;
	int ret;

	snprintf(in.function, sizeof(in.function), "%s", spec->id);
	snprintf(in.snapshot, sizeof(in.snapshot), "%s", b->snapshot ? b->snapshot : "");
	snprintf(in.image, sizeof(in.image), "%s", b->image ? b->image : "");
	snprintf(in.boot_why, sizeof(in.boot_why), "%s", b->why ? b->why : "");
	in.booted = true;
	in.pages = "eager";
	x.gpu = spec->gpu;
	if (spec->gpu) {
		ret = choose_gpus(spec, &in, minors, &minors_known, visible, sizeof(visible));
		if (ret)
			goto fail;
		if (visible[0])
			defaults[nd++] = visible;
		if (in.ngpus > 1)
			defaults[nd++] = "NCCL_NVLS_ENABLE=0";
	}
	ret = instance_ctx_dir(&x, &in);
	if (ret)
		goto fail;
	/* From here on a killed start leaves a record that stop can act on. */
	ret = instance_ctx_record(&x, &in, "starting");
	if (ret)
		goto fail;
	if (function_userns(c, spec)) {
		ret = userns_range_of(c, spec->id, &x.userns);
		if (ret)
			goto fail;
		in.userns_uid = x.userns.base;
		in.userns_size = x.userns.size;
		booted.userns_base = x.userns.base;
		booted.userns_size = x.userns.size;
	}
	ret = x.userns.size ? netns_reserve(x.netns) : netns_create(x.netns);
	if (ret)
		goto fail;
	x.have_netns = true;
	/* An image's rootfs in a user namespace: idmapped to its range. */
	if (b->image && b->image[0] && x.userns.size) {
		ret = image_idmap(c, spec->bundle, &x.userns, image_root, sizeof(image_root));
		if (ret)
			goto fail;
	}
	ret = function_bundle_write(
		&(struct function_bundle){ .spec = spec, .netns = x.netns, .container_id = in.id,
					   .argv = b->argv,
					   .gpu_minors = spec->gpu && minors_known ? minors : NULL,
					   .ngpu_minors = in.ngpus, .env_defaults = defaults,
					   .allow = c, .image = b->image && b->image[0],
					   .image_root = image_root[0] ? image_root : NULL,
					   .userns = &x.userns },
		x.bundle, &x.held);
	if (ret)
		goto fail;
	in.t.setup = ms_since(tp);

	phase = FAULT_BOOT;
	tp = now_ns();
	snprintf(runc_log, sizeof(runc_log), "%s/runc-run.log", x.dir);
	x.have_container = true; /* a failed run leaves nothing; runc delete is harmless */
	ret = runner_run(&x.r, x.bundle, in.id, runc_log, &x.stdio, &in.pid);
	function_host_paths_close(&x.held); /* runc has bound them */
	if (!ret && x.userns.size)
		ret = netns_adopt(x.netns, in.pid);
	if (ret)
		goto fail;
	proc_start_time(in.pid, &x.pid_start);
	in.t.boot = ms_since(tp);

	/* The shim first: it drains the function's output while we wait. */
	phase = FAULT_ENDPOINT;
	ret = instance_ctx_endpoint(&x, spec, &in);
	if (ret)
		goto fail;
	ret = instance_ctx_record(&x, &in, "starting");
	if (ret)
		goto fail;

	phase = FAULT_READY;
	ret = instance_ctx_ready(&x, spec, &in, "the booted function");
	if (ret)
		goto fail;
	phase = FAULT_WARMUP;
	tp = now_ns();
	ret = warm_up(&x, spec);
	in.t.warmup = ms_since(tp);
	if (ret)
		goto fail;

	in.t.total = ms_since(t0);
	if (b->standby) {
		/* Frozen until taken, as a restored CPU standby waits. */
		phase = FAULT_STANDBY;
		ret = runner_pause(&x.r, in.id);
		if (ret)
			goto fail;
		in.standby = true;
	}
	phase = FAULT_RECORD;
	x.standby_meta = b->standby ? &booted : NULL;
	ret = instance_ctx_record(&x, &in, b->standby ? "standby" : "running");
	x.standby_meta = NULL;
	if (ret)
		goto fail;
	pr_info("instance %s of %s booted, not restored (%s): %s, pid %d, %.1f ms (boot %.1f, "
		"ready %.1f, warmup %.1f)",
		in.id, in.function, in.boot_why, in.endpoint, (int)in.pid, in.t.total, in.t.boot,
		in.t.ready, in.t.warmup);
	*out = in;
	goto out;
fail:
	{
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", log_last_error()[0] ? log_last_error()
								 : strerror(-ret));
		pr_err("boot of %s failed at %s: %s", spec->id, fault_step_name(phase), msg);
		if (x.have_dir)
			instance_ctx_teardown(&x, in.id);
		log_set_error("boot of %s failed at %s: %s", spec->id, fault_step_name(phase),
			      msg);
		out->fault = (struct fault){ .step = phase, .err = ret };
	}
out:
	return ret;
}
