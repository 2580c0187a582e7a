/* SPDX-License-Identifier: Apache-2.0 */
/* test_host_record.c — what a snapshot's restore depends on
 * (prewarm/host_record.h), and the comparison that decides whether a start
 * tries it:
 * - records of this host and of a snapshot, on the CPU (arch, XSAVE, CRIU);
 * - the comparison of each key that matters, with its words: an older CRIU,
 *   a CPU without the snapshot's FPU state, another architecture; what does
 *   not matter (the kernel, a newer CRIU, a CPU function's driver) is not a
 *   difference, nor is a snapshot made before records;
 * - against the fake driver (test/cuda_mock.c, built here as libcuda.so.1
 *   and libnvidia-ml.so.1): a GPU snapshot recorded under one driver and one
 *   GPU model is different on a host whose driver version, GPU model or
 *   compute capability changed (the fake's knobs), and the same otherwise.
 */
#include "common/config.h"
#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "prewarm/host_record.h"
#include "test/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void show(const char *what, const json_t *j)
{
	char *t = json_dumps(j, JSON_COMPACT);

	printf("%s: %s\n", what, t ? t : "?");
	fflush(stdout);
	free(t);
}

static json_t *load(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	REQUIRE(j);
	return j;
}

static int compare(const char *rec, const char *here, bool gpu, char *why, size_t len)
{
	json_t *m = load(rec), *h = load(here);
	int r = host_record_compare(m, gpu, h, why, len);

	json_decref(m);
	json_decref(h);
	return r;
}

static void cpu_checks(void)
{
	struct thaw_config c;
	json_t *here, *snap;
	char why[1024];

	REQUIRE(config_init(&c, "/tmp") == 0);
	here = host_record_here(&c);
	REQUIRE(here);
	CHECK(json_string_value(json_object_get(here, "kernel")));
	CHECK(json_string_value(json_object_get(here, "arch")));
	CHECK(json_is_string(json_object_get(here, "criu")));
	show("this host", here);
	/* A snapshot made here runs here. */
	snap = host_record_snapshot(here, NULL, 0, "sha256:abc");
	REQUIRE(snap);
	CHECK_STR(json_string_value(json_object_get(snap, "image")), "sha256:abc");
	CHECK_EQ(json_array_size(json_object_get(snap, "gpus")), 0);
	CHECK_EQ(host_record_compare(snap, false, here, why, sizeof(why)), 0);
	CHECK_STR(why, "");
	json_decref(snap);
	json_decref(here);

	CASE("a snapshot made before records");
	here = load("{\"criu\":\"4.2.1\"}");
	CHECK_EQ(host_record_compare(NULL, false, here, why, sizeof(why)), 0);
	json_decref(here);

	CASE("an older CRIU");
	CHECK_EQ(compare("{\"criu\":\"4.2.1\"}", "{\"criu\":\"4.1\"}", false, why, sizeof(why)), 1);
	CHECK(strstr(why, "CRIU 4.1 here is older than the 4.2.1"));
	CASE("a newer CRIU reads older images");
	CHECK_EQ(compare("{\"criu\":\"4.1\"}", "{\"criu\":\"4.2.1\"}", false, why, sizeof(why)), 0);
	CHECK_EQ(compare("{\"criu\":\"4.2\"}", "{\"criu\":\"4.2.1\"}", false, why, sizeof(why)), 0);
	CASE("the kernel is recorded, not compared");
	CHECK_EQ(compare("{\"kernel\":\"6.1.0\"}", "{\"kernel\":\"6.12.3\"}", false, why,
			 sizeof(why)),
		 0);
	CASE("a CPU without AVX-512 and AMX");
	CHECK_EQ(compare("{\"arch\":\"x86_64\",\"xfeatures\":393959}",
			 "{\"arch\":\"x86_64\",\"xfeatures\":743}", false, why, sizeof(why)),
		 1);
	CHECK(strstr(why, "this CPU lacks FPU state the snapshot's had (amx_tilecfg, amx_tiledata;"));
	CASE("a CPU with more FPU state");
	CHECK_EQ(compare("{\"arch\":\"x86_64\",\"xfeatures\":7}",
			 "{\"arch\":\"x86_64\",\"xfeatures\":743}", false, why, sizeof(why)),
		 0);
	CASE("another architecture");
	CHECK_EQ(compare("{\"arch\":\"aarch64\"}", "{\"arch\":\"x86_64\"}", false, why, sizeof(why)),
		 1);
	CHECK(strstr(why, "made on aarch64, this host is x86_64"));
	CASE("two differences, both named");
	CHECK_EQ(compare("{\"arch\":\"x86_64\",\"xfeatures\":231,\"criu\":\"9.0\"}",
			 "{\"arch\":\"x86_64\",\"xfeatures\":7,\"criu\":\"4.2.1\"}", false, why,
			 sizeof(why)),
		 1);
	CHECK(strstr(why, "avx512_opmask, avx512_zmm_hi256, avx512_hi16_zmm") &&
	      strstr(why, "; CRIU 4.2.1 here is older than the 9.0"));
	CASE("a short buffer is cut, never overrun");
	CHECK_EQ(compare("{\"criu\":\"9.0\"}", "{\"criu\":\"4.2.1\"}", false, why, 8), 1);
	CHECK_EQ(strlen(why), 7);
	CASE("a CPU function's driver does not matter");
	CHECK_EQ(compare("{\"driver\":{\"cuda\":12080,\"version\":\"570.1\"},\"gpus\":[]}",
			 "{\"driver\":{\"cuda\":13000,\"version\":\"580.159.04\"},\"gpus\":[]}", false,
			 why, sizeof(why)),
		 0);
	CASE_END();
}

/* Against the fake driver: the record of a GPU snapshot made under the
 * defaults, then the host changed knob by knob. */
static int mock_checks(void)
{
	struct thaw_config c;
	struct cuda_device *devs = NULL;
	struct snapshot_meta sm;
	json_t *here, *snap, *meta;
	char why[1024];
	size_t n = 0;

	setenv("MOCK_NVML_FREE_MIB", "40000,60000", 1);
	REQUIRE(config_init(&c, "/tmp") == 0);
	REQUIRE(cuda_available());
	REQUIRE(cuda_devices(&devs, &n) == 0 && n == 2);
	CHECK_EQ(devs[0].cc_major, 9);
	CHECK_EQ(devs[0].cc_minor, 0);
	here = host_record_here(&c);
	REQUIRE(here);
	show("this host, on the fake driver", here);
	CHECK_EQ(json_integer_value(json_object_get(json_object_get(here, "driver"), "cuda")), 13000);
	CHECK_STR(json_string_value(json_object_get(json_object_get(here, "driver"), "version")),
		  "580.159.04");
	CHECK_EQ(json_array_size(json_object_get(here, "gpus")), 2);
	/* The snapshot of a function given GPU 1. */
	snap = host_record_snapshot(here, &devs[1], 1, NULL);
	REQUIRE(snap);
	CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(snap, "gpus"), 0),
						    "cc")),
		  "9.0");
	/* As a start reads it: through the snapshot's meta. */
	meta = json_pack("{s:O, s:o}", "host", snap, "spec",
			 load("{\"id\":\"f\",\"command\":[\"/bin/true\"],\"port\":80,"
			      "\"gpu\":true}"));
	REQUIRE(meta && snapshot_meta_parse(meta, &sm, why, sizeof(why)) == 0);
	CHECK(sm.gpu && sm.host);
	CHECK_EQ(host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)), 0);
	json_decref(here);

	CASE("another kernel driver");
	setenv("MOCK_NVML_DRIVER", "590.10.01", 1);
	here = host_record_here(&c);
	CHECK_EQ(host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)), 1);
	CHECK(strstr(why, "CUDA checkpoint is of driver 580.159.04, this host runs 590.10.01"));
	printf("%s\n", why);
	json_decref(here);
	unsetenv("MOCK_NVML_DRIVER");

	CASE("another CUDA driver version, the kernel driver's unknown");
	setenv("MOCK_CUDA_DRIVER_VERSION", "12080", 1);
	here = host_record_here(&c);
	json_object_set_new(json_object_get(here, "driver"), "version", json_string(""));
	CHECK_EQ(host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)), 1);
	CHECK(strstr(why, "CUDA driver 13.0, this host's is 12.8"));
	json_decref(here);
	unsetenv("MOCK_CUDA_DRIVER_VERSION");

	CASE("another GPU model");
	setenv("MOCK_CUDA_GPU_NAME", "Mock GPU B", 1);
	here = host_record_here(&c);
	CHECK_EQ(host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)), 1);
	CHECK(strstr(why, "GPU 0 of the snapshot is Mock GPU (compute capability 9.0); this host "
			  "has no such GPU (its GPU 0 is Mock GPU B (compute capability 9.0))"));
	printf("%s\n", why);
	json_decref(here);
	unsetenv("MOCK_CUDA_GPU_NAME");

	CASE("another compute capability");
	setenv("MOCK_CUDA_CC", "8.0", 1);
	here = host_record_here(&c);
	CHECK_EQ(host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)), 1);
	CHECK(strstr(why, "compute capability 8.0"));
	json_decref(here);
	unsetenv("MOCK_CUDA_CC");

	CASE("a CPU function's snapshot on a changed driver");
	setenv("MOCK_NVML_DRIVER", "590.10.01", 1);
	here = host_record_here(&c);
	CHECK_EQ(host_record_compare(sm.host, false, here, why, sizeof(why)), 0);
	json_decref(here);
	CASE_END();

	snapshot_meta_release(&sm);
	json_decref(meta);
	json_decref(snap);
	free(devs);
	return check_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *root = getenv("THAW_ROOT"), *old_ld = getenv("LD_LIBRARY_PATH");
	char src[1024], dir[] = "/tmp/thaw-host-record.XXXXXX", cmd[4096], ldpath[2048];
	int status = 0;
	pid_t pid;

	log_set_level(LOG_WARN);
	if (argc > 1 && !strcmp(argv[1], "--mock"))
		return mock_checks();
	setenv("THAW_NO_GPU", "1", 1); /* the CPU checks: no driver, whatever the host */
	cpu_checks();
	snprintf(src, sizeof(src), "%s/test/cuda_mock.c", root && *root ? root : ".");
	if (access(src, R_OK) || system("command -v ${CC:-cc} >/dev/null")) {
		printf("no fake driver (no test/cuda_mock.c or no compiler): GPU checks skipped\n");
		return check_failures ? 1 : 0;
	}
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
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		setenv("LD_LIBRARY_PATH", ldpath, 1);
		unsetenv("THAW_NO_GPU");
		execl("/proc/self/exe", "test_host_record", "--mock", (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	rm_rf(dir);
	printf("against the fake driver: %s\n",
	       WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "passed" : "FAILED");
	return check_failures || !WIFEXITED(status) || WEXITSTATUS(status) ? 1 : 0;
}
