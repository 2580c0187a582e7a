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

/* The snapshot's "gpus" text, read as a start reads its meta. */
static struct snapshot_meta gpus(const char *text)
{
	char buf[1024], why[256];
	struct snapshot_meta sm;
	json_t *j;

	snprintf(buf, sizeof(buf), "{\"gpus\":%s}", text);
	j = json_loads(buf, 0, NULL);
	REQUIRE(j && snapshot_meta_parse(j, &sm, why, sizeof(why)) == 0);
	json_decref(j);
	return sm;
}

int main(void)
{
	struct cuda_device one[] = { dev(0, "GPU-a", "H100", 70) };
	struct cuda_device four[] = { dev(0, "GPU-a", "H100", 2), dev(1, "GPU-b", "H100", 30),
				      dev(2, "GPU-c", "H100", 60), dev(3, "GPU-d", "A100", 79) };
	size_t choice[4];
	char why[512];
	bool moved;
	struct snapshot_meta g;

	/* One GPU, the snapshot's own, with room: stays, no pairs. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":3221225472}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, one, 1, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 0);
	CHECK(!moved);
	snapshot_meta_release(&g);

	/* One GPU without room: -EAGAIN, and the message says what and how much. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":107374182400}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, one, 1, choice, &moved, why, sizeof(why)), -EAGAIN);
	CHECK(strstr(why, "GPU 0") && strstr(why, "needs") && strstr(why, "most free"));
	snapshot_meta_release(&g);

	/* Its own GPU is full: the same model with the most free memory
	 * (GPU-c, 60 GiB) rather than the A100 with more; moved. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":10737418240}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK(moved);
	snapshot_meta_release(&g);

	/* Two GPUs: each device once; the second goes where the first did not. */
	g = gpus("[{\"uuid\":\"GPU-x\",\"name\":\"H100\",\"used_bytes\":21474836480},"
		 "{\"uuid\":\"GPU-y\",\"name\":\"H100\",\"used_bytes\":21474836480}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK_EQ(choice[1], 1);
	CHECK(moved);
	snapshot_meta_release(&g);

	/* No H100 has room left for a third: any with room (the A100), which
	 * the driver will refuse (warned at restore); none at all: -EAGAIN. */
	g = gpus("[{\"name\":\"H100\",\"uuid\":\"GPU-p\",\"used_bytes\":42949672960},"
		 "{\"name\":\"H100\",\"uuid\":\"GPU-q\",\"used_bytes\":42949672960}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 2);
	CHECK_EQ(choice[1], 3);
	snapshot_meta_release(&g);
	g = gpus("[{\"uuid\":\"GPU-p\",\"used_bytes\":85899345920}]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, four, 4, choice, &moved, why, sizeof(why)), -EAGAIN);
	snapshot_meta_release(&g);

	/* More GPUs in the snapshot than here: -ENODEV. */
	g = gpus("[\"GPU-a\",\"GPU-b\"]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, one, 1, choice, &moved, why, sizeof(why)), -ENODEV);
	CHECK(strstr(why, "2 GPU(s)"));
	snapshot_meta_release(&g);

	/* No recorded usage: the own GPU (the total check comes later). */
	g = gpus("[\"GPU-b\"]");
	CHECK_EQ(gpu_choose(g.gpus, g.ngpus, four, 4, choice, &moved, why, sizeof(why)), 0);
	CHECK_EQ(choice[0], 1);
	CHECK(!moved);
	snapshot_meta_release(&g);

	/* Admission (gpu_admit_devices): 20 GiB needed, 70 free on the one
	 * GPU; a reserve of 40 GiB leaves room, 60 GiB does not, and says so. */
	g = gpus("[{\"uuid\":\"GPU-a\",\"used_bytes\":21474836480}]");
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 0, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 40 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 60 * GIB, why, sizeof(why)), -EAGAIN);
	CHECK(strstr(why, "--gpu-mem-reserve keeps 60.00 GiB free"));
	/* On four, the reserve moves it off the GPUs it would leave short. */
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, four, 4, 50 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, four, 4, 60 * GIB, why, sizeof(why)), -EAGAIN);
	snapshot_meta_release(&g);
	/* No usage recorded: the reserve alone decides. */
	g = gpus("[\"GPU-a\"]");
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 70 * GIB, why, sizeof(why)), 0);
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 71 * GIB, why, sizeof(why)), -EAGAIN);
	/* No free-memory figures at all (no NVML): not judged here. */
	one[0].free_bytes = 0;
	CHECK_EQ(gpu_admit_devices(g.gpus, g.ngpus, one, 1, 71 * GIB, why, sizeof(why)), 0);
	snapshot_meta_release(&g);

	/* Placement with no free-memory figures at all (no NVML): nothing is
	 * judged by memory, as for admission; the GPU of the snapshot is
	 * taken. */
	{
		struct cuda_device blind[] = { dev(0, "GPU-a", "H100", 0), dev(1, "GPU-b", "H100", 0) };
		struct gpu_placement q;

		g = gpus("[{\"uuid\":\"GPU-b\",\"name\":\"H100\",\"used_bytes\":32212254720}]");
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, blind, 2, 0, &q, why, sizeof(why)),
			 0);
		CHECK_STR(q.dev[0].uuid, "GPU-b");
		CHECK(!q.moved);
		gpu_release(&q);
		snapshot_meta_release(&g);
	}

	/* Placement (gpu_place_devices): a burst spreads.  Two equal GPUs, a
	 * snapshot of 30 GiB from GPU-a: the first start takes GPU-a (its own
	 * on the tie), the second sees 30 GiB held there and takes GPU-b, the
	 * third GPU-a again (50 left on each, one start in flight on each: its
	 * own), the fourth GPU-b, and a fifth finds 20 GiB left on each: none
	 * has room. */
	{
		struct cuda_device two[] = { dev(0, "GPU-a", "H100", 80), dev(1, "GPU-b", "H100", 80) };
		struct gpu_placement p[5];

		g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\",\"used_bytes\":32212254720}]");
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[0], why, sizeof(why)), 0);
		CHECK_STR(p[0].dev[0].uuid, "GPU-a");
		CHECK(!p[0].moved && p[0].held);
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[1], why, sizeof(why)), 0);
		CHECK_STR(p[1].dev[0].uuid, "GPU-b");
		CHECK(p[1].moved);
		CHECK_EQ(p[1].dev[0].free_bytes, 80 * GIB); /* GPU-b as it was */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[2], why, sizeof(why)), 0);
		CHECK_STR(p[2].dev[0].uuid, "GPU-a");
		CHECK_EQ(p[2].dev[0].free_bytes, 50 * GIB); /* less what p[0] holds */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[3], why, sizeof(why)), 0);
		CHECK_STR(p[3].dev[0].uuid, "GPU-b");
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[4], why, sizeof(why)), -EAGAIN);
		CHECK(!p[4].held);
		/* A placement given back frees its GPU for the next. */
		gpu_release(&p[1]);
		gpu_release(&p[1]); /* twice: nothing */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, NULL, two, 2, 0, &p[4], why, sizeof(why)), 0);
		CHECK_STR(p[4].dev[0].uuid, "GPU-b");
		gpu_release(&p[4]);
		gpu_release(&p[3]);

		/* Asked for: by index, by UUID (with or without "GPU-"). */
		gpu_release(&p[2]);
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "1", two, 2, 0, &p[1], why, sizeof(why)), 0);
		CHECK_STR(p[1].dev[0].uuid, "GPU-b");
		gpu_release(&p[1]);
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "gpu-b", two, 2, 0, &p[1], why, sizeof(why)), 0);
		CHECK_STR(p[1].dev[0].uuid, "GPU-b");
		gpu_release(&p[1]);
		/* GPU-a holds 30 of p[0]'s: asking for it with a 25 GiB reserve
		 * leaves no room (503), without a reserve it fits. */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "0", two, 2, 25 * GIB, &p[1], why, sizeof(why)),
			 -EAGAIN);
		CHECK(strstr(why, "GPU 0 has 50.00 GiB free"));
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "0", two, 2, 0, &p[1], why, sizeof(why)), 0);
		gpu_release(&p[1]);
		/* Requests this host cannot meet: 400s, nothing held. */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "2", two, 2, 0, &p[1], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "no GPU 2"));
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "GPU-zz", two, 2, 0, &p[1], why,
					   sizeof(why)),
			 -EINVAL);
		/* None asked. */
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "", two, 2, 0, &p[1], why, sizeof(why)),
			 0);
		gpu_release(&p[1]);
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "0,1", two, 2, 0, &p[1], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "more GPUs than the snapshot's 1"));
		CHECK(!p[1].held);
		snapshot_meta_release(&g);
		g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"A100\"}]");
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "1", two, 2, 0, &p[1], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "same chip type"));
		snapshot_meta_release(&g);

		/* Two GPUs asked for a function of two: in the order asked;
		 * once, not twice; and the count must match. */
		g = gpus("[{\"uuid\":\"GPU-a\",\"name\":\"H100\"},"
			 "{\"uuid\":\"GPU-b\",\"name\":\"H100\"}]");
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "1,0", two, 2, 0, &p[1], why, sizeof(why)), 0);
		CHECK_STR(p[1].dev[0].uuid, "GPU-b");
		CHECK_STR(p[1].dev[1].uuid, "GPU-a");
		CHECK(p[1].moved);
		gpu_release(&p[1]);
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "1,1", two, 2, 0, &p[1], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "twice"));
		CHECK_EQ(gpu_place_devices(g.gpus, g.ngpus, "1", two, 2, 0, &p[1], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "the snapshot used 2"));
		snapshot_meta_release(&g);
		gpu_release(&p[0]);
	}
	return check_failures ? 1 : 0;
}
