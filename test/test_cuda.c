/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda.c — the CUDA driver shim.
 *
 * Everywhere: where cuda.h can be found (nvcc's include dir, $CUDA_HOME),
 * thaw's one copy of the driver's ABI (common/cuda_abi.h: layouts,
 * constants, entry points' types) is compiled against it
 * (-DTHAW_CUDA_LAYOUT_CHECK).
 * Everywhere: the shim against a fake libcuda.so.1 (test/cuda_mock.c, built
 * here with cc): devices, UUIDs, the state machine, GPU pairs, errors.
 * Without a driver: every cuda_* call answers -ENODEV, then the test skips.
 * With a GPU: a PyTorch process holds a tensor of known content; it is locked,
 * checkpointed, restored (to the same GPU, then again through an explicit
 * GPU pair) and unlocked, and the checksum it computes on the GPU afterwards
 * must be the one it computed before (and the known value).
 */
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* N float64 values 0..N-1: every partial sum is an integer below 2^53, so
 * the sum is exact, whatever order the GPU adds them in: N(N-1)/2. */
/* 256 MiB on the GPU; THAW_TEST_CUDA_MIB sets another size (a small one
 * shows the driver's fixed cost of a checkpoint and a restore). */
static unsigned long long tensor_n(void)
{
	const char *s = getenv("THAW_TEST_CUDA_MIB");
	unsigned long long mib = s && *s ? strtoull(s, NULL, 10) : 256;

	return (mib ? mib : 1) << 17; /* float64: 2^17 per MiB */
}
#define TENSOR_N tensor_n()

#define PY_SCRIPT \
	"import sys, torch\n" \
	"x = torch.arange(%llu, dtype=torch.float64, device='cuda')\n" \
	"torch.cuda.synchronize()\n" \
	"print('ready', flush=True)\n" \
	"for line in sys.stdin:\n" \
	"    s = x.sum().item()\n" \
	"    torch.cuda.synchronize()\n" \
	"    print('sum %%d' %% int(s), flush=True)\n"

static pid_t child = -1;
static int child_in = -1, child_out = -1;
static pid_t sleeper = -1;

/* Lock and checkpoint a CUDA process before killing it: killing a running or
 * restored one has hung hosts on some drivers (docs/GPU.md). */
static void cleanup(void)
{
	enum cuda_proc_state st;

	if (child > 0) {
		if (cuda_process_state(child, &st) == 0) {
			if (st == CUDA_PROC_RUNNING && cuda_lock(child, 10000) == 0)
				st = CUDA_PROC_LOCKED;
			if (st == CUDA_PROC_LOCKED)
				cuda_checkpoint(child);
		}
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
	if (sleeper > 0) {
		kill(sleeper, SIGKILL);
		waitpid(sleeper, NULL, 0);
		sleeper = -1;
	}
}

static void layout_check(void)
{
	const char *root = getenv("THAW_ROOT");
	const char *cuda_home = getenv("CUDA_HOME");
	char inc[512], path[1024], cmd[2048];
	int rc;

	if (!root || !*root)
		root = ".";
	snprintf(inc, sizeof(inc), "%s/include",
		 cuda_home && *cuda_home ? cuda_home : "/usr/local/cuda");
	snprintf(path, sizeof(path), "%s/cuda.h", inc);
	if (access(path, R_OK)) {
		printf("layout check: no %s, not checked\n", path);
		return;
	}
	snprintf(path, sizeof(path), "%s/common/cuda_abi.h", root);
	if (access(path, R_OK) || system("command -v ${CC:-cc} >/dev/null")) {
		printf("layout check: no source tree or no compiler, not checked\n");
		return;
	}
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && ${CC:-cc} -std=gnu11 -D_GNU_SOURCE -I. -I'%s' -DTHAW_CUDA_LAYOUT_CHECK "
		 "-fsyntax-only -x c common/cuda_abi.h",
		 root, inc);
	rc = system(cmd);
	printf("layout check against %s/cuda.h: %s\n", inc, rc == 0 ? "same" : "DIFFERENT");
	CHECK_EQ(rc, 0);
}

static int read_line(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	uint64_t start = now_ns();

	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = timeout_ms - (int)ms_since(start);
		ssize_t r;

		if (left <= 0 || poll(&p, 1, left) <= 0)
			return -ETIMEDOUT;
		r = read(fd, buf + n, 1);
		if (r <= 0)
			return -EPIPE;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -E2BIG;
}

/* Ask the child for its checksum; -1 on failure. */
static long long child_sum(void)
{
	char line[256];
	long long v;

	if (write_all(child_in, "\n", 1))
		return -1;
	if (read_line(child_out, line, sizeof(line), 60000)) {
		fprintf(stderr, "no checksum from the CUDA process\n");
		return -1;
	}
	if (sscanf(line, "sum %lld", &v) != 1) {
		fprintf(stderr, "unexpected line: %s\n", line);
		return -1;
	}
	return v;
}

static void start_child(void)
{
	int in[2], out[2];
	char script[1024];
	char line[256];

	snprintf(script, sizeof(script), PY_SCRIPT, TENSOR_N);
	REQUIRE(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	child = fork();
	REQUIRE(child >= 0);
	if (child == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execlp("python3", "python3", "-c", script, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	child_in = in[1];
	child_out = out[0];
	uint64_t t = now_ns();
	/* import torch on a cold page cache takes ~20 s */
	if (read_line(child_out, line, sizeof(line), 180000) || strcmp(line, "ready")) {
		fprintf(stderr, "the PyTorch process did not get ready\n");
		exit(1);
	}
	printf("pytorch process %d ready in %.0f ms\n", (int)child, ms_since(t));
}

static int state_of(pid_t pid)
{
	enum cuda_proc_state st;
	int ret = cuda_process_state(pid, &st);

	return ret ? ret : (int)st;
}

/* lock -> checkpoint -> restore (pairs or not) -> unlock, checking the state at each step. */
static void cycle(const struct cuda_gpu_pair *pairs, size_t npairs)
{
	const char *how = npairs ? "pairs" : "same";
	uint64_t t;

	CHECK_EQ(state_of(child), CUDA_PROC_RUNNING);
	t = now_ns();
	CHECK_EQ(cuda_lock(child, 10000), 0);
	printf("figure: cuda_%s lock_ms %.1f\n", how, ms_since(t));
	CHECK_EQ(state_of(child), CUDA_PROC_LOCKED);
	t = now_ns();
	CHECK_EQ(cuda_checkpoint(child), 0);
	printf("figure: cuda_%s checkpoint_ms %.1f (%llu MiB tensor)\n", how, ms_since(t), TENSOR_N >> 17);
	CHECK_EQ(state_of(child), CUDA_PROC_CHECKPOINTED);
	t = now_ns();
	CHECK_EQ(cuda_restore(child, pairs, npairs), 0);
	printf("figure: cuda_%s restore_ms %.1f\n", how, ms_since(t));
	CHECK_EQ(state_of(child), CUDA_PROC_LOCKED);
	t = now_ns();
	CHECK_EQ(cuda_unlock(child), 0);
	printf("figure: cuda_%s unlock_ms %.1f\n", how, ms_since(t));
	CHECK_EQ(state_of(child), CUDA_PROC_RUNNING);
}

/* ---- against the fake driver (test/cuda_mock.c), in a child of our own ---- */

#define MOCK_PID  999990 /* listed in MOCK_CUDA_PIDS: holds "CUDA state" */
#define MOCK_PID2 999991

static int mock_checks(void)
{
	struct cuda_device *devs = NULL;
	struct cuda_gpu_pair pair;
	pid_t *cpids = NULL;
	size_t n = 0, ncuda = 0;
	int version = 0, tid = 0;

	setenv("MOCK_CUDA_PIDS", "999990,999991", 1);
	REQUIRE(cuda_available());
	CHECK(cuda_checkpoint_supported());
	CHECK_STR(cuda_unavailable_reason(), "");
	CHECK_EQ(cuda_driver_version(&version), 0);
	CHECK_EQ(version, 13000);
	REQUIRE(cuda_devices(&devs, &n) == 0);
	REQUIRE(n == 2);
	CHECK_STR(devs[0].name, "Mock GPU");
	CHECK_EQ(devs[0].minor, -1); /* no NVML here, no /proc/driver/nvidia */
	CHECK_STR(devs[0].uuid, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
	CHECK_STR(devs[1].uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
	CHECK_EQ(devs[1].ordinal, 1);
	CHECK_EQ(devs[1].total_bytes, 80ULL << 30);

	/* a process without CUDA state */
	CHECK_EQ(state_of(getpid()), -ESRCH);
	CHECK_EQ(cuda_lock(getpid(), 1000), -ESRCH);

	/* the whole cycle, with a pair from GPU 0 to GPU 1 */
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_RUNNING);
	CHECK_EQ(cuda_restore_thread_id(MOCK_PID, &tid), 0);
	CHECK_EQ(tid, MOCK_PID + 1);
	CHECK_EQ(cuda_lock(MOCK_PID, 1), -ETIMEDOUT);
	CHECK_EQ(cuda_checkpoint(MOCK_PID), -EIO); /* not locked: ILLEGAL_STATE */
	CHECK_EQ(cuda_lock(MOCK_PID, 5000), 0);
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_LOCKED);
	CHECK_EQ(cuda_checkpoint(MOCK_PID), 0);
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_CHECKPOINTED);
	snprintf(pair.old_uuid, sizeof(pair.old_uuid), "%s", devs[0].uuid);
	snprintf(pair.new_uuid, sizeof(pair.new_uuid), "zz-not-a-uuid");
	CHECK_EQ(cuda_restore(MOCK_PID, &pair, 1), -EINVAL); /* refused before the driver */
	snprintf(pair.new_uuid, sizeof(pair.new_uuid), "GPU-ffffffff-0405-0607-0809-0a0b0c0d0e0f");
	CHECK_EQ(cuda_restore(MOCK_PID, &pair, 1), -EINVAL); /* a GPU the driver does not know */
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_CHECKPOINTED);
	setenv("MOCK_CUDA_RESTORE_OOM", "1", 1);
	CHECK_EQ(cuda_restore(MOCK_PID, NULL, 0), -ENOMEM);
	unsetenv("MOCK_CUDA_RESTORE_OOM");
	/* without the prefix, upper case: the same GPU */
	snprintf(pair.new_uuid, sizeof(pair.new_uuid), "10111213-1415-1617-1819-1A1B1C1D1E1F");
	CHECK_EQ(cuda_restore(MOCK_PID, &pair, 1), 0);
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_LOCKED);
	CHECK_EQ(cuda_unlock(MOCK_PID), 0);
	CHECK_EQ(state_of(MOCK_PID), CUDA_PROC_RUNNING);
	CHECK_EQ(cuda_unlock(MOCK_PID), -EIO);

	/* which of a container's processes hold CUDA state */
	pid_t pids[3] = { getpid(), MOCK_PID2, 1 };
	CHECK_EQ(cuda_filter_processes(pids, 3, &cpids, &ncuda), 0);
	CHECK_EQ(ncuda, 1);
	if (ncuda == 1)
		CHECK_EQ(cpids[0], MOCK_PID2);
	free(cpids);
	free(devs);
	return check_failures ? 1 : 0;
}

/* The fake driver with cuInit failing: no GPU, said once, calls -ENODEV. */
static int mock_nodev_checks(void)
{
	enum cuda_proc_state st;

	CHECK(!cuda_available());
	CHECK(!cuda_checkpoint_supported());
	CHECK(strstr(cuda_unavailable_reason(), "cuInit: CUDA_ERROR_NO_DEVICE") != NULL);
	CHECK_EQ(cuda_lock(MOCK_PID, 100), -ENODEV);
	CHECK_EQ(cuda_process_state(MOCK_PID, &st), -ENODEV);
	return check_failures ? 1 : 0;
}

/* Build the fake libcuda.so.1 and run this program against it twice. */
static void mock_run(void)
{
	const char *root = getenv("THAW_ROOT");
	char src[1024], dir[] = "/tmp/thaw-cuda-mock.XXXXXX", cmd[4096], ldpath[2048];
	const char *old_ld = getenv("LD_LIBRARY_PATH");
	const char *modes[] = { "--mock", "--mock-nodev" };

	snprintf(src, sizeof(src), "%s/test/cuda_mock.c", root && *root ? root : ".");
	if (access(src, R_OK) || system("command -v ${CC:-cc} >/dev/null")) {
		printf("mock driver: no %s or no compiler, not run\n", src);
		return;
	}
	REQUIRE(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "${CC:-cc} -shared -fPIC -O1 -Wall -o %s/libcuda.so.1 %s", dir,
		 src);
	if (system(cmd) != 0) {
		fprintf(stderr, "mock driver: cannot build %s\n", src);
		check_failures++;
		goto out;
	}
	snprintf(ldpath, sizeof(ldpath), "%s%s%s", dir, old_ld && *old_ld ? ":" : "",
		 old_ld ? old_ld : "");
	for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
		int status = 0;
		pid_t pid = fork();

		REQUIRE(pid >= 0);
		if (pid == 0) {
			setenv("LD_LIBRARY_PATH", ldpath, 1);
			unsetenv("THAW_NO_GPU");
			if (i == 1)
				setenv("MOCK_CUDA_NO_DEVICE", "1", 1);
			execl("/proc/self/exe", "test_cuda", modes[i], (char *)NULL);
			_exit(127);
		}
		REQUIRE(waitpid(pid, &status, 0) == pid);
		printf("mock driver %s: %s\n", modes[i],
		       WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "passed" : "FAILED");
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
out:
	rm_rf(dir);
}

int main(int argc, char **argv)
{
	struct cuda_device *devs = NULL;
	struct cuda_gpu_pair pair;
	pid_t *cpids = NULL;
	size_t n = 0, ncuda = 0;
	int version = 0, tid = 0, ret;
	const long long expect = (long long)(TENSOR_N * (TENSOR_N - 1) / 2);

	log_set_level(LOG_INFO);
	if (argc > 1 && !strcmp(argv[1], "--mock"))
		return mock_checks();
	if (argc > 1 && !strcmp(argv[1], "--mock-nodev"))
		return mock_nodev_checks();
	layout_check();
	mock_run();
	atexit(cleanup);

	if (!cuda_available()) {
		enum cuda_proc_state st;

		CHECK_EQ(cuda_init(), -ENODEV);
		CHECK_EQ(cuda_driver_version(&version), -ENODEV);
		CHECK_EQ(cuda_devices(&devs, &n), -ENODEV);
		CHECK(devs == NULL && n == 0);
		CHECK_EQ(cuda_process_state(getpid(), &st), -ENODEV);
		CHECK_EQ(cuda_lock(getpid(), 100), -ENODEV);
		CHECK_EQ(cuda_checkpoint(getpid()), -ENODEV);
		CHECK_EQ(cuda_restore(getpid(), NULL, 0), -ENODEV);
		CHECK_EQ(cuda_unlock(getpid()), -ENODEV);
		CHECK_EQ(cuda_restore_thread_id(getpid(), &tid), -ENODEV);
		CHECK_EQ(cuda_filter_processes(&(pid_t){ getpid() }, 1, &cpids, &ncuda), -ENODEV);
		if (check_failures)
			return 1;
		SKIP("no GPU: CPU functions only (every cuda_* call answered -ENODEV)");
	}

	REQUIRE(cuda_driver_version(&version) == 0);
	printf("driver API version %d.%d\n", version / 1000, version % 1000 / 10);
	REQUIRE(cuda_devices(&devs, &n) == 0);
	REQUIRE(n > 0);
	for (size_t i = 0; i < n; i++) {
		char tb[32], fb[32];

		printf("GPU %d: %s %s, %s, %s free\n", devs[i].ordinal, devs[i].name, devs[i].uuid,
		       fmt_bytes(devs[i].total_bytes, tb), fmt_bytes(devs[i].free_bytes, fb));
		CHECK(strncmp(devs[i].uuid, "GPU-", 4) == 0 && strlen(devs[i].uuid) == 40);
		CHECK(devs[i].total_bytes > (1ULL << 30));
		CHECK(devs[i].free_bytes <= devs[i].total_bytes);
	}

	/* A process without CUDA state: a clean error, neither a hang nor success. */
	sleeper = fork();
	REQUIRE(sleeper >= 0);
	if (sleeper == 0) {
		execlp("sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	uint64_t t = now_ns();
	ret = cuda_lock(sleeper, 2000);
	printf("lock on non-CUDA pid %d: %d (%s) in %.0f ms\n", (int)sleeper, ret, strerror(-ret),
	       ms_since(t));
	CHECK_EQ(ret, -ESRCH);
	CHECK_EQ(state_of(sleeper), -ESRCH);

	start_child();
	long long before = child_sum();
	printf("checksum before: %lld (expected %lld)\n", before, expect);
	CHECK_EQ(before, expect);

	ret = cuda_restore_thread_id(child, &tid);
	printf("restore thread id of %d: %d (ret %d)\n", (int)child, tid, ret);
	CHECK_EQ(ret, 0);
	CHECK(tid > 0);

	pid_t both[2] = { sleeper, child };
	CHECK_EQ(cuda_filter_processes(both, 2, &cpids, &ncuda), 0);
	CHECK_EQ(ncuda, 1);
	if (ncuda == 1)
		CHECK_EQ(cpids[0], child);
	free(cpids);

	printf("cycle 1 (restore onto the same GPU):\n");
	cycle(NULL, 0);
	long long after = child_sum();
	printf("checksum after: %lld\n", after);
	CHECK_EQ(after, before);

	snprintf(pair.old_uuid, sizeof(pair.old_uuid), "%s", devs[0].uuid);
	snprintf(pair.new_uuid, sizeof(pair.new_uuid), "%s", devs[0].uuid);
	printf("cycle 2 (restore through gpuPairs %s -> %s):\n", pair.old_uuid, pair.new_uuid);
	cycle(&pair, 1);
	after = child_sum();
	printf("checksum after: %lld\n", after);
	CHECK_EQ(after, before);

	free(devs);
	cleanup();
	return check_failures ? 1 : 0;
}
