/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpu_restore.c — the GPU half of a start, against the fake driver
 * (test/cuda_mock.c, built here as libcuda.so.1 and libnvidia-ml.so.1): no
 * GPU needed, so it runs on CI.
 *
 * Two fake GPUs and two processes of this test that "hold CUDA state"
 * (sleepers listed in MOCK_CUDA_PIDS, one on each GPU):
 * - the group checkpoint locks both, checkpoints each, and tells which GPU
 *   each held from NVML's free memory;
 * - placement by free memory through cuda_devices (NVML): a start goes to
 *   the GPU with the most free, a burst spreads as the starts in flight
 *   hold their memory, and a start may ask for a GPU;
 * - gpu_restore_container hands the driver the mapping (the fake records
 *   the pairs it was given) and restores every process before it unlocks
 *   any;
 * - all or none: when one process fails to restore, the one restored
 *   before it is checkpointed back, and the error names the process.
 */
#include "common/cuda.h"
#include "common/log.h"
#include "common/span_record.h"
#include "common/util.h"
#include "restore/gpu_restore.h"
#include "test/check.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define UUID0 "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
#define UUID1 "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"

static pid_t kids[2] = { -1, -1 };

static void reap(void)
{
	for (int i = 0; i < 2; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = -1;
		}
}

static int state_of(pid_t pid)
{
	enum cuda_proc_state st;
	int ret = cuda_process_state(pid, &st);

	return ret ? ret : (int)st;
}

/* A snapshot's meta text, read as a start reads it. */
static struct snapshot_meta meta_of(const char *text)
{
	struct snapshot_meta sm;
	char why[256];
	json_t *j = json_loads(text, 0, NULL);

	REQUIRE(j && snapshot_meta_parse(j, &sm, why, sizeof(why)) == 0);
	json_decref(j);
	return sm;
}

/* The pairs log: its whole text, then emptied. */
static void take_log(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
	truncate(path, 0);
}

static int mock_checks(const char *pairs_log)
{
	struct cuda_device *devs = NULL;
	struct gpu_placement p[3];
	struct runner r = { 0 };
	pid_t *got = NULL, order[2], failed = 0, *all = NULL;
	uint32_t held[2];
	uint64_t used[CUDA_MAX_DEVICES];
	size_t n = 0, nall = 0, ngot = 0;
	char list[64], why[512], log[1024], want[256], line[1400];
	char data[] = "/tmp/test_gpu_restore.XXXXXX";
	struct span_record rec;
	struct snapshot_meta meta;
	int ret;

	for (int i = 0; i < 2; i++) {
		kids[i] = fork();
		REQUIRE(kids[i] >= 0);
		if (kids[i] == 0) {
			pause();
			_exit(0);
		}
	}
	atexit(reap);
	snprintf(list, sizeof(list), "%d,%d", (int)kids[0], (int)kids[1]);
	setenv("MOCK_CUDA_PIDS", list, 1); /* kids[0] holds GPU 0, kids[1] GPU 1 */
	setenv("MOCK_NVML_FREE_MIB", "40000,60000", 1);
	setenv("MOCK_CUDA_PROC_MIB", "10000", 1);
	setenv("MOCK_NVML_MINOR_BASE", "4", 1);
	setenv("MOCK_CUDA_PAIRS_LOG", pairs_log, 1);
	REQUIRE(cuda_available());

	/* NVML through the shim: free memory less what the processes hold,
	 * and each GPU's /dev/nvidiaN. */
	REQUIRE(cuda_devices(&devs, &n) == 0 && n == 2);
	CHECK_EQ(devs[0].free_bytes, 30000 * MIB);
	CHECK_EQ(devs[1].free_bytes, 50000 * MIB);
	CHECK_EQ(devs[0].minor, 4);
	CHECK_EQ(devs[1].minor, 5);
	free(devs);

	/* The group checkpoint: both locked, then each checkpointed; which
	 * GPU each held, and what it held there. */
	CHECK_EQ(cuda_checkpoint_group(kids, 2, 5000, held, used, &failed), 0);
	CHECK_EQ(failed, 0);
	CHECK_EQ(held[0], 1u);
	CHECK_EQ(held[1], 2u);
	CHECK_EQ(used[0], 10000 * MIB);
	CHECK_EQ(used[1], 10000 * MIB);
	CHECK_EQ(state_of(kids[0]), CUDA_PROC_CHECKPOINTED);
	CHECK_EQ(state_of(kids[1]), CUDA_PROC_CHECKPOINTED);
	/* A lock that times out: none is left locked. */
	CHECK_EQ(cuda_lock(kids[0], 1), -EIO); /* checkpointed: ILLEGAL_STATE */

	/* A function of one GPU snapshotted on GPU 0 (10000 MiB): GPU 1 has
	 * the most free (60000 vs 40000), so a start goes there; the next
	 * too (50000 left once the first holds its share); the third to GPU
	 * 0 (40000 each, and none in flight there). */
	meta = meta_of("{\"gpus\":[{\"uuid\":\"" UUID0 "\",\"name\":\"Mock GPU\","
		       "\"used_bytes\":10485760000}]}");
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[0], why, sizeof(why)), 0);
	CHECK_EQ(p[0].dev[0].ordinal, 1);
	CHECK(p[0].moved);
	CHECK_EQ(p[0].dev[0].minor, 5);
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[1], why, sizeof(why)), 0);
	CHECK_EQ(p[1].dev[0].ordinal, 1);
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[2], why, sizeof(why)), 0);
	CHECK_EQ(p[2].dev[0].ordinal, 0);
	CHECK(!p[2].moved);
	for (int i = 0; i < 3; i++)
		gpu_release(&p[i]);
	/* Memory a start has made already (thaw's fill) is no longer held
	 * back: the next placement sees GPU 1's whole free figure again. */
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[0], why, sizeof(why)), 0);
	CHECK_EQ(p[0].dev[0].ordinal, 1);
	gpu_claim_taken(&p[0], 0, 4000 * MIB);
	CHECK_EQ(p[0].claim[0], 6000 * MIB);
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[1], why, sizeof(why)), 0);
	CHECK_EQ(p[1].dev[0].free_bytes, 54000 * MIB);
	gpu_release(&p[1]);
	gpu_release(&p[0]);
	gpu_claim_taken(&p[0], 0, 1); /* released: nothing */
	CHECK_EQ(p[0].claim[0], 6000 * MIB);
	/* Asked for: GPU 0 by index, GPU 1 by UUID; a GPU that is not here. */
	CHECK_EQ(gpu_place(&meta, "0", 0, &p[0], why, sizeof(why)), 0);
	CHECK_EQ(p[0].dev[0].ordinal, 0);
	gpu_release(&p[0]);
	CHECK_EQ(gpu_place(&meta, UUID1, 0, &p[0], why, sizeof(why)), 0);
	CHECK_EQ(p[0].dev[0].ordinal, 1);
	gpu_release(&p[0]);
	CHECK_EQ(gpu_place(&meta, "7", 0, &p[0], why, sizeof(why)), -EINVAL);
	/* A reserve that leaves no room on either GPU: refused, with figures. */
	CHECK_EQ(gpu_place(&meta, NULL, 55000 * MIB, &p[0], why, sizeof(why)), -EAGAIN);
	CHECK(strstr(why, "--gpu-mem-reserve") != NULL);
	snapshot_meta_release(&meta);

	/* The function of two GPUs, restored with its GPUs swapped (asked
	 * for: 1,0): every process gets the whole mapping, both restored,
	 * then both unlocked. */
	meta = meta_of("{\"gpus\":[{\"uuid\":\"" UUID0 "\",\"name\":\"Mock GPU\","
		       "\"used_bytes\":10485760000},{\"uuid\":\"" UUID1 "\",\"name\":\"Mock "
		       "GPU\",\"used_bytes\":10485760000}],\"cuda_pids\":[1,2]}");
	REQUIRE(pidns_members(getpid(), &all, &nall) == 0);
	for (size_t i = 0, k = 0; i < nall && k < 2; i++)
		if (all[i] == kids[0] || all[i] == kids[1])
			order[k++] = all[i];
	free(all);
	CHECK_EQ(gpu_place(&meta, "1,0", 0, &p[0], why, sizeof(why)), 0);
	CHECK_EQ(gpu_restore_container(&r, "mock", getpid(), &meta, &p[0], &got, &ngot), 0);
	CHECK(!p[0].held); /* released once the CUDA state is back */
	CHECK_EQ(ngot, 2);
	free(got);
	CHECK_EQ(state_of(kids[0]), CUDA_PROC_RUNNING);
	CHECK_EQ(state_of(kids[1]), CUDA_PROC_RUNNING);
	take_log(pairs_log, log, sizeof(log));
	snprintf(want, sizeof(want), "%d 0>1 1>0\n%d 0>1 1>0\n", (int)order[0], (int)order[1]);
	CHECK_STR(log, want);

	/* GPUs with as much free: each process stays on its own (placed by
	 * the restore itself), and the driver gets no pairs. */
	setenv("MOCK_NVML_FREE_MIB", "50000,50000", 1);
	CHECK_EQ(cuda_checkpoint_group(kids, 2, 5000, NULL, NULL, &failed), 0);
	CHECK_EQ(gpu_restore_container(&r, "mock", getpid(), &meta, NULL, &got, &ngot), 0);
	free(got);
	take_log(pairs_log, log, sizeof(log));
	snprintf(want, sizeof(want), "%d same\n%d same\n", (int)order[0], (int)order[1]);
	CHECK_STR(log, want);

	/* All or none: the second process fails to restore (out of GPU
	 * memory); the first, restored already, is checkpointed back, no
	 * process is unlocked, and the error names the one that failed. */
	CHECK_EQ(cuda_checkpoint_group(kids, 2, 5000, NULL, NULL, &failed), 0);
	snprintf(list, sizeof(list), "%d", (int)order[1]);
	setenv("MOCK_CUDA_RESTORE_FAIL_PID", list, 1);
	log_clear_error();
	CHECK_EQ(gpu_restore_container(&r, "mock", getpid(), &meta, NULL, &got, &ngot), -ENOMEM);
	CHECK(got == NULL && ngot == 0);
	CHECK_EQ(state_of(order[0]), CUDA_PROC_CHECKPOINTED);
	CHECK_EQ(state_of(order[1]), CUDA_PROC_CHECKPOINTED);
	snprintf(want, sizeof(want), "CUDA process %d (of 2) could not be restored", (int)order[1]);
	CHECK(strstr(log_last_error(), want) != NULL);
	CHECK(strstr(log_last_error(), "checkpointed back") != NULL);
	printf("the error: %s\n", log_last_error());
	CHECK(strstr(log_last_error(), "NCCL_") == NULL); /* out of memory: no sharing hint */
	/* Refused as driver 580 refuses processes sharing memory it would
	 * carry (NOT_SUPPORTED): the error says which NCCL settings avoid it.
	 * Both are checkpointed again (the failed start put them back). */
	setenv("MOCK_CUDA_RESTORE_FAIL_RESULT", "801", 1);
	log_clear_error();
	ret = gpu_restore_container(&r, "mock", getpid(), &meta, NULL, &got, &ngot);
	CHECK_EQ(ret, -EOPNOTSUPP);
	CHECK(strstr(log_last_error(), "CUDA_ERROR_NOT_SUPPORTED") != NULL);
	CHECK(strstr(log_last_error(), "NCCL_NVLS_ENABLE=0") != NULL);
	printf("the error: %s\n", log_last_error());
	/* Kept for thaw doctor: the step refused, the driver's words, what
	 * the spec could set; its gpu-span line says them. */
	REQUIRE(mkdtemp(data));
	gpu_span_record(data, "tp", &meta, ret);
	CHECK_EQ(span_record_read(data, &rec), 0);
	CHECK(rec.refused);
	CHECK_STR(rec.step, "restore");
	CHECK_STR(rec.function, "tp");
	CHECK_EQ(rec.processes, 2);
	CHECK_EQ(rec.gpus, 2);
	CHECK(strstr(rec.error, "CUDA_ERROR_NOT_SUPPORTED") != NULL);
	CHECK(strstr(rec.hint, "NCCL_NVLS_ENABLE=0") != NULL);
	CHECK(span_record_describe(&rec, rec.driver, line, sizeof(line)));
	printf("doctor: %s\n", line);
	CHECK(strstr(line, "refused to restore tp (2 CUDA processes, 2 GPUs)") != NULL);
	CHECK(strstr(line, "CUDA_ERROR_NOT_SUPPORTED") != NULL);
	CHECK(strstr(line, "NCCL_NVLS_ENABLE=0") != NULL);
	CHECK(strstr(line, "starts of such functions fail") != NULL);
	unsetenv("MOCK_CUDA_RESTORE_FAIL_RESULT");
	unsetenv("MOCK_CUDA_RESTORE_FAIL_PID");
	/* Restored the next time (the failed start checkpointed both back):
	 * the refusal is past. */
	ret = gpu_restore_container(&r, "mock", getpid(), &meta, NULL, &got, &ngot);
	CHECK_EQ(ret, 0);
	free(got);
	gpu_span_record(data, "tp", &meta, ret);
	CHECK_EQ(span_record_read(data, &rec), 0);
	CHECK(!rec.refused);
	CHECK(!span_record_describe(&rec, rec.driver, line, sizeof(line)));
	CHECK(strstr(line, "restored tp") != NULL);
	snprintf(line, sizeof(line), "%s/" SPAN_RECORD_FILE, data);
	unlink(line);
	rmdir(data);
	/* Nothing was held back by the failed start: both GPUs place again. */
	CHECK_EQ(gpu_place(&meta, NULL, 0, &p[0], why, sizeof(why)), 0);
	gpu_release(&p[0]);
	snapshot_meta_release(&meta);
	return check_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *root = getenv("THAW_ROOT"), *old_ld = getenv("LD_LIBRARY_PATH");
	char src[1024], dir[] = "/tmp/thaw-gpu-mock.XXXXXX", cmd[4096], ldpath[2048], log[1100];
	int status = 0;
	pid_t pid;

	log_set_level(LOG_INFO);
	if (argc > 2 && !strcmp(argv[1], "--mock"))
		return mock_checks(argv[2]);
	snprintf(src, sizeof(src), "%s/test/cuda_mock.c", root && *root ? root : ".");
	if (access(src, R_OK) || system("command -v ${CC:-cc} >/dev/null"))
		SKIP("no test/cuda_mock.c or no compiler for the fake driver");
	REQUIRE(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "${CC:-cc} -shared -fPIC -O1 -Wall -o %s/libcuda.so.1 %s && "
		 "ln -s libcuda.so.1 %s/libnvidia-ml.so.1",
		 dir, src, dir);
	if (system(cmd) != 0) {
		rm_rf(dir);
		fprintf(stderr, "cannot build the fake driver from %s\n", src);
		return 1;
	}
	snprintf(ldpath, sizeof(ldpath), "%s%s%s", dir, old_ld && *old_ld ? ":" : "",
		 old_ld ? old_ld : "");
	snprintf(log, sizeof(log), "%s/pairs.log", dir);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		setenv("LD_LIBRARY_PATH", ldpath, 1);
		unsetenv("THAW_NO_GPU");
		execl("/proc/self/exe", "test_gpu_restore", "--mock", log, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	rm_rf(dir);
	printf("against the fake driver: %s\n",
	       WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "passed" : "FAILED");
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
