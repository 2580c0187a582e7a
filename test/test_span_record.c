/* SPDX-License-Identifier: Apache-2.0 */
/* test_span_record.c — prewarm/span_record: a refusal written and read back
 * word for word, a later success replacing it, no record, a damaged one. */
#include "common/log.h"
#include "common/util.h"
#include "prewarm/span_record.h"
#include "test/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char dir[] = "/tmp/test_span_record.XXXXXX", path[128];
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

	snprintf(path, sizeof(path), "%s/%s", dir, SPAN_RECORD_FILE);
	CHECK_EQ(write_file_atomic(path, "{\"refused\": 1}", 14, 0644), 0);
	CHECK_EQ(span_record_read(dir, &r), -EINVAL);
	CHECK_EQ(write_file_atomic(path, "not json", 8, 0644), 0);
	CHECK_EQ(span_record_read(dir, &r), -EINVAL);

	unlink(path);
	rmdir(dir);
	return check_failures ? 1 : 0;
}
