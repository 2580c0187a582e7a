/* SPDX-License-Identifier: Apache-2.0 */
/* test_span_record.c — common/span_record: a refusal written and read back
 * word for word, a later success replacing it, a start's refused restore
 * with its step and hint and the doctor's line for it, a record from before
 * steps, no record, a damaged one. */
#include "common/log.h"
#include "common/util.h"
#include "common/span_record.h"
#include "test/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char dir[] = "/tmp/test_span_record.XXXXXX", path[128], line[1400];
	struct span_record w = { .refused = true, .processes = 2, .gpus = 2 }, r;

	REQUIRE(mkdtemp(dir));
	CHECK_EQ(span_record_read(dir, &r), -ENOENT);

	snprintf(w.driver, sizeof(w.driver), "580.159.04");
	snprintf(w.function, sizeof(w.function), "gpu-tp");
	snprintf(w.error, sizeof(w.error), "cuCheckpointProcessLock(1106): CUDA_ERROR_NOT_READY");
	CHECK_EQ(span_record_write(dir, &w), 0);
	CHECK_EQ(strlen(w.at), 20);
	CHECK_EQ(span_record_read(dir, &r), 0);
	CHECK(r.refused);
	CHECK_STR(r.driver, "580.159.04");
	CHECK_STR(r.function, "gpu-tp");
	CHECK_STR(r.error, w.error);
	CHECK_STR(r.at, w.at);
	CHECK_EQ(r.processes, 2);
	CHECK_EQ(r.gpus, 2);

	/* the last outcome wins */
	w.refused = false;
	w.error[0] = 0;
	w.processes = 1;
	CHECK_EQ(span_record_write(dir, &w), 0);
	CHECK_EQ(span_record_read(dir, &r), 0);
	CHECK(!r.refused);
	CHECK_STR(r.error, "");
	CHECK_EQ(r.processes, 1);

	/* A start's refused restore: the step and the hint kept, and the
	 * doctor's line says both. */
	w.refused = true;
	w.processes = 2;
	snprintf(w.step, sizeof(w.step), "%s", cuda_step_name(CUDA_STEP_RESTORE));
	snprintf(w.error, sizeof(w.error), "cuCheckpointProcessRestore(7): CUDA_ERROR_NOT_SUPPORTED");
	snprintf(w.hint, sizeof(w.hint), "%s", span_refusal_hint(CUDA_STEP_RESTORE, -EOPNOTSUPP));
	CHECK_EQ(span_record_write(dir, &w), 0);
	CHECK_EQ(span_record_read(dir, &r), 0);
	CHECK_STR(r.step, "restore");
	CHECK_STR(r.hint, w.hint);
	CHECK(strstr(r.hint, "NCCL_NVLS_ENABLE=0") != NULL);
	CHECK(span_record_describe(&r, "580.159.04", line, sizeof(line)));
	CHECK(strstr(line, "driver 580.159.04 refused to restore gpu-tp (2 CUDA processes, 2 GPUs) "
		     "at ") != NULL);
	CHECK(strstr(line, ": cuCheckpointProcessRestore(7): CUDA_ERROR_NOT_SUPPORTED; most likely "
		     "memory shared") != NULL);
	CHECK(strstr(line, "; starts of such functions fail on this driver") != NULL);
	printf("%s\n", line);
	/* Another driver now: not tried on it. */
	CHECK(!span_record_describe(&r, "590.1", line, sizeof(line)));
	CHECK(strstr(line, "driver 590.1 since gpu-tp's start") != NULL);
	CHECK(strstr(line, "under driver 580.159.04 (refused): not tried") != NULL);

	/* A snapshot refused at the lock, with the lock's hint; at the
	 * checkpoint, without one where nothing is known. */
	snprintf(w.step, sizeof(w.step), "%s", cuda_step_name(CUDA_STEP_LOCK));
	snprintf(w.error, sizeof(w.error), "cuCheckpointProcessLock(1106): CUDA_ERROR_NOT_READY");
	snprintf(w.hint, sizeof(w.hint), "%s", span_refusal_hint(CUDA_STEP_LOCK, -EIO));
	CHECK(strstr(w.hint, "NCCL collective") != NULL);
	CHECK(span_record_describe(&w, "580.159.04", line, sizeof(line)));
	CHECK(strstr(line, "refused to checkpoint gpu-tp (2 CUDA processes, 2 GPUs) (at its lock) "
		     "at ") != NULL);
	CHECK(strstr(line, "; snapshots of such functions fail") != NULL);
	CHECK_STR(span_refusal_hint(CUDA_STEP_CHECKPOINT, -ENOMEM), "");
	CHECK_STR(span_refusal_hint(CUDA_STEP_RESTORE, -ENOMEM), "");
	CHECK(strstr(span_refusal_hint(CUDA_STEP_RESTORE, -EINVAL), "legacy CUDA IPC") != NULL);

	snprintf(path, sizeof(path), "%s/%s", dir, SPAN_RECORD_FILE);
	/* A record from before steps and hints: read, both "". */
	CHECK_EQ(write_file_atomic(path, "{\"driver\": \"580\", \"function\": \"f\", \"at\": \"t\", "
				   "\"refused\": true, \"error\": \"e\", \"processes\": 2, "
				   "\"gpus\": 2}", 103, 0644), 0);
	CHECK_EQ(span_record_read(dir, &r), 0);
	CHECK(r.refused);
	CHECK_STR(r.step, "");
	CHECK_STR(r.hint, "");
	CHECK(span_record_describe(&r, "580", line, sizeof(line)));
	CHECK(strstr(line, "driver 580 refused to checkpoint f (2 CUDA processes, 2 GPUs) at t: e; "
		     "snapshots of such functions fail") != NULL);

	CHECK_EQ(write_file_atomic(path, "{\"refused\": 1}", 14, 0644), 0);
	CHECK_EQ(span_record_read(dir, &r), -EINVAL);
	CHECK_EQ(write_file_atomic(path, "not json", 8, 0644), 0);
	CHECK_EQ(span_record_read(dir, &r), -EINVAL);

	unlink(path);
	rmdir(dir);
	return check_failures ? 1 : 0;
}
