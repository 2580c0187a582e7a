/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpu_choose.c — where a snapshot's GPU state goes (gpu_choose): its own
 * GPU when that has room, else the one of its model with the most free
 * memory, each device once, and a clear refusal naming the need when none has
 * room.  No GPU needed: the devices are described, as cuda_devices would. */
#include "restore/gpu_restore.h"
#include "test/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define GIB (1ull << 30)

static struct cuda_device dev(int ordinal, const char *uuid, const char *name, uint64_t free_gib)
{
	struct cuda_device d = { .ordinal = ordinal, .total_bytes = 80 * GIB,
				 .free_bytes = free_gib * GIB };

	snprintf(d.uuid, sizeof(d.uuid), "%s", uuid);
	snprintf(d.name, sizeof(d.name), "%s", name);
	return d;
}

static json_t *gpus(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	REQUIRE(j);
	return j;
}

int main(void)
{
	struct cuda_device one[] = { dev(0, "GPU-a", "H100", 70) };
	struct cuda_device four[] = { dev(0, "GPU-a", "H100", 2), dev(1, "GPU-b", "H100", 30),
				      dev(2, "GPU-c", "H100", 60), dev(3, "GPU-d", "A100", 79) };
	size_t choice[4];
	char why[512];
	bool moved;
	json_t *g;

	/* One GPU, the snapshot's own, with room: stays, no pairs. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":3221225472}]");
	CHECK_EQ(gpu_choose(g, one, 1, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 0);
	CHECK(!moved);
	json_decref(g);

	/* One GPU without room: -EAGAIN, and the message says what and how much. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":107374182400}]");
	CHECK_EQ(gpu_choose(g, one, 1, choice, &moved, why, sizeof(why)), -EAGAIN);
	CHECK(strstr(why, "GPU 0") && strstr(why, "needs") && strstr(why, "most free"));
	json_decref(g);

	/* Its own GPU is full: the same model with the most free memory
	 * (GPU-c, 60 GiB) rather than the A100 with more; moved. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":10737418240}]");
	CHECK_EQ(gpu_choose(g, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK(moved);
	json_decref(g);

	/* Two GPUs: each device once; the second goes where the first did not. */
	g = gpus("[{\"uuid\":\"GPU-x\",\"name\":\"H100\",\"used_bytes\":21474836480},"
		 "{\"uuid\":\"GPU-y\",\"name\":\"H100\",\"used_bytes\":21474836480}]");
	CHECK_EQ(gpu_choose(g, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK_EQ(choice[1], 1);
	CHECK(moved);
	json_decref(g);

	/* No H100 has room left for a third: any with room (the A100), which
	 * the driver will refuse (warned at restore); none at all: -EAGAIN. */
	g = gpus("[{\"name\":\"H100\",\"uuid\":\"GPU-p\",\"used_bytes\":42949672960},"
		 "{\"name\":\"H100\",\"uuid\":\"GPU-q\",\"used_bytes\":42949672960}]");
	CHECK_EQ(gpu_choose(g, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK_EQ(choice[1], 3);
	json_decref(g);
	g = gpus("[{\"uuid\":\"GPU-p\",\"used_bytes\":85899345920}]");
	CHECK_EQ(gpu_choose(g, four, 4, choice, &moved, why, sizeof(why)), -EAGAIN);
	json_decref(g);

	/* More GPUs in the snapshot than here: -ENODEV. */
	g = gpus("[\"GPU-a\",\"GPU-b\"]");
	CHECK_EQ(gpu_choose(g, one, 1, choice, &moved, why, sizeof(why)), -ENODEV);
	CHECK(strstr(why, "2 GPU(s)"));
	json_decref(g);

	/* No recorded usage: the own GPU (the total check comes later). */
	g = gpus("[\"GPU-b\"]");
	CHECK_EQ(gpu_choose(g, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 1);
	CHECK(!moved);
	json_decref(g);

	/* Admission (gpu_admit_devices): 20 GiB needed, 70 free on the one
	 * GPU; a reserve of 40 GiB leaves room, 60 GiB does not, and says so. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"used_bytes\":21474836480}]");
	CHECK_EQ(gpu_admit_devices(g, one, 1, 0, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g, one, 1, 40 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g, one, 1, 60 * GIB, why, sizeof(why)), -EAGAIN);
	CHECK(strstr(why, "--gpu-mem-reserve keeps 60.00 GiB free"));
	/* On four, the reserve moves it off the GPUs it would leave short. */
	CHECK_EQ(gpu_admit_devices(g, four, 4, 50 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g, four, 4, 60 * GIB, why, sizeof(why)), -EAGAIN);
	json_decref(g);
	/* No usage recorded: the reserve alone decides. */
	g = gpus("[\"GPU-a\"]");
	CHECK_EQ(gpu_admit_devices(g, one, 1, 70 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g, one, 1, 71 * GIB, why, sizeof(why)), -EAGAIN);
	/* No free-memory figures at all (no NVML): not judged here. */
	one[0].free_bytes = 0;
	CHECK_EQ(gpu_admit_devices(g, one, 1, 71 * GIB, why, sizeof(why)), 0);
	json_decref(g);
	return check_failures ? 1 : 0;
}
