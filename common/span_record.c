/* SPDX-License-Identifier: Apache-2.0 */
/* span_record.c — see span_record.h. */
#include "common/span_record.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"

static void record_path(const char *data_dir, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", data_dir, SPAN_RECORD_FILE);
}

int span_record_write(const char *data_dir, struct span_record *r)
{
	char path[PATH_MAX + 32], *text;
	time_t now = time(NULL);
	struct tm tm;
	json_t *o;
	int ret;

	gmtime_r(&now, &tm);
	strftime(r->at, sizeof(r->at), "%Y-%m-%dT%H:%M:%SZ", &tm);
	o = json_pack("{s:s, s:s, s:s, s:b, s:s, s:s, s:s, s:i, s:i}", "driver", r->driver,
		      "function", r->function, "at", r->at, "refused", r->refused, "step", r->step,
		      "error", r->error, "hint", r->hint, "processes", (int)r->processes, "gpus",
		      (int)r->gpus);
	text = o ? json_dumps(o, JSON_SORT_KEYS) : NULL;
	json_decref(o);
	if (!text)
		return -ENOMEM;
	record_path(data_dir, path, sizeof(path));
	ret = write_file_atomic(path, text, strlen(text), 0600);
	if (ret)
		pr_warn("could not record the checkpoint of %s in %s: %s", r->function, path,
			strerror(-ret));
	free(text);
	return ret;
}

static void copy_field(json_t *o, const char *key, char *dst, size_t len)
{
	const char *v = json_string_value(json_object_get(o, key));

	snprintf(dst, len, "%s", v ? v : "");
}

int span_record_read(const char *data_dir, struct span_record *r)
{
	char path[PATH_MAX + 32], *text = NULL;
	json_t *o, *refused, *procs, *gpus;
	size_t len;
	int ret;

	memset(r, 0, sizeof(*r));
	record_path(data_dir, path, sizeof(path));
	ret = read_file(path, &text, &len, 64 << 10);
	if (ret)
		return ret;
	o = json_loadb(text, len, 0, NULL);
	free(text);
	refused = json_object_get(o, "refused");
	procs = json_object_get(o, "processes");
	gpus = json_object_get(o, "gpus");
	if (!json_is_object(o) || !json_is_boolean(refused) || !json_is_integer(procs) ||
	    !json_is_integer(gpus) || !json_is_string(json_object_get(o, "driver"))) {
		json_decref(o);
		pr_err("%s is not a record of a checkpoint", path);
		return -EINVAL;
	}
	copy_field(o, "driver", r->driver, sizeof(r->driver));
	copy_field(o, "function", r->function, sizeof(r->function));
	copy_field(o, "at", r->at, sizeof(r->at));
	copy_field(o, "error", r->error, sizeof(r->error));
	copy_field(o, "step", r->step, sizeof(r->step));
	copy_field(o, "hint", r->hint, sizeof(r->hint));
	r->refused = json_is_true(refused);
	r->processes = (unsigned)json_integer_value(procs);
	r->gpus = (unsigned)json_integer_value(gpus);
	json_decref(o);
	return 0;
}

const char *span_refusal_hint(enum cuda_step step, int err)
{
	if ((step == CUDA_STEP_CHECKPOINT || step == CUDA_STEP_RESTORE) &&
	    (err == -EOPNOTSUPP || err == -EINVAL))
		return "memory shared between the function's processes that libthaw-cuda did not "
		       "carry: legacy CUDA IPC, NCCL_CUMEM_ENABLE=0, or multicast, "
		       "NCCL_NVLS_ENABLE=1; with NCCL, keep NCCL_CUMEM_ENABLE=1 and set "
		       "NCCL_NVLS_ENABLE=0, or NCCL_P2P_DISABLE=1 to share none";
	if (step == CUDA_STEP_LOCK && (err == -EIO || err == -ETIMEDOUT))
		return "the lock waits for the function's GPU work to end, and a process waiting "
		       "for its next request inside an NCCL collective keeps a kernel running: "
		       "have every rank wait for requests on the CPU (a queue, a pipe) and run "
		       "collectives only for a request";
	return "";
}

bool span_record_describe(const struct span_record *r, const char *driver, char *buf,
			  size_t len)
{
	/* A start's refusal is of a restore; a snapshot's (or a record from
	 * before steps) of a checkpoint. */
	bool start = !strcmp(r->step, "restore") || !strcmp(r->step, "unlock");
	const char *what = start ? "restore" : "checkpoint";
	char at[48] = "";

	if (r->refused && r->step[0] && strcmp(r->step, what))
		snprintf(at, sizeof(at), " (at its %s)", r->step);
	if (strcmp(driver, r->driver) != 0) {
		snprintf(buf, len, "driver %s since %s's %s (%u CUDA processes, %u GPUs) at %s "
			 "under driver %s (%s): not tried on this driver yet", driver, r->function,
			 start ? "start" : "snapshot", r->processes, r->gpus, r->at, r->driver,
			 r->refused ? "refused" : "it worked");
		return false;
	}
	if (r->refused) {
		snprintf(buf, len, "driver %s refused to %s %s (%u CUDA processes, %u GPUs)%s at "
			 "%s: %s%s%s; %s of such functions fail on this driver", r->driver, what,
			 r->function, r->processes, r->gpus, at, r->at, r->error,
			 r->hint[0] ? "; most likely " : "", r->hint,
			 start ? "starts" : "snapshots");
		return true;
	}
	snprintf(buf, len, "driver %s %s %s (%u CUDA processes, %u GPUs) at %s", r->driver,
		 start ? "restored" : "checkpointed", r->function, r->processes, r->gpus, r->at);
	return false;
}
