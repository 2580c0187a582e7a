/* SPDX-License-Identifier: Apache-2.0 */
/* test_gpu_order — the order of thaw's driver calls around the driver's
 * restores (restore/gpu_order.h), without a driver: which fills a restore
 * waits for with THAW_GPU_ORDER=1 and none without, that its wait is bounded, and that a
 * let-go waits for the restores.  Whether a wait happened is decided by
 * what the other thread had done when it ended, never by a clock, but for
 * the bound (a fill that never finishes: the restore goes after
 * GPU_ORDER_WAIT_MS). */
#include "restore/gpu_order.h"
#include "test/check.h"

#include "common/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* A thread that ends fill m's making (or, with restore set, a start's
 * restore) once it is told to go, and says when it did. */
struct later {
	struct gpu_making *m;
	bool restore;
	atomic_int go, done;
	pthread_t th;
};

static void *later_main(void *arg)
{
	struct later *l = arg;

	while (!atomic_load(&l->go))
		usleep(1000);
	atomic_store(&l->done, 1);
	if (l->restore)
		gpu_order_restored();
	else
		gpu_order_made(l->m);
	return NULL;
}

static void later_start(struct later *l, struct gpu_making *m, bool restore)
{
	*l = (struct later){ .m = m, .restore = restore };
	REQUIRE(!pthread_create(&l->th, NULL, later_main, l));
}

/* Let it go once the caller has been waiting a while (the caller then
 * checks whether it waited for it: done set before its wait ended). */
static void *release_soon(void *arg)
{
	struct later *l = arg;

	usleep(100 * 1000);
	atomic_store(&l->go, 1);
	return NULL;
}

/* Fill a began before fill b; a's allocations are made, b's are not yet
 * when the restore of a's start comes (b_start: of b's start).  mode:
 * THAW_GPU_ORDER or NULL.  Returns whether the restore waited for b. */
static bool waits_for_fill_b(const char *mode, bool b_start)
{
	struct gpu_making a = { 0 }, b = { 0 };
	struct later lb;
	pthread_t soon;
	bool waited_for_b;

	if (mode)
		setenv("THAW_GPU_ORDER", mode, 1);
	else
		unsetenv("THAW_GPU_ORDER");
	gpu_order_making(&a);
	gpu_order_making(&b);
	gpu_order_made(&a);
	later_start(&lb, &b, false);
	REQUIRE(!pthread_create(&soon, NULL, release_soon, &lb));
	gpu_order_restore_begin(b_start ? &b : &a);
	waited_for_b = atomic_load(&lb.done);
	gpu_order_restored();
	atomic_store(&lb.go, 1);
	pthread_join(soon, NULL);
	pthread_join(lb.th, NULL);
	unsetenv("THAW_GPU_ORDER");
	return waited_for_b;
}

/* With THAW_GPU_ORDER=1 a restore waits for the fills begun no later than
 * its own that still make their allocations, not for one begun after its
 * own; by default for none. */
static void which_fills(void)
{
	CASE("a later fill");
	CHECK(!waits_for_fill_b("1", false));
	CASE("its own fill");
	CHECK(waits_for_fill_b("1", true));
	CASE("its own fill, by default");
	CHECK(!waits_for_fill_b(NULL, true));
	CASE("its own fill, THAW_GPU_ORDER=0");
	CHECK(!waits_for_fill_b("0", true));
	CASE_END();
}

/* A fill that ends early is forgotten, twice too: it holds nothing. */
static void forget_twice(void)
{
	struct gpu_making late = { 0 };

	gpu_order_making(&late);
	gpu_order_forget(&late);
	gpu_order_forget(&late);
	CHECK_EQ(late.left, 0);
	CHECK(late.next == NULL);
}

/* A fill that never says it made them holds a restore GPU_ORDER_WAIT_MS
 * at most. */
static void bounded(void)
{
	struct gpu_making stuck = { 0 };
	double waited;

	gpu_order_making(&stuck);
	waited = gpu_order_restore_begin(NULL);
	gpu_order_restored();
	gpu_order_forget(&stuck);
	CHECK(waited >= GPU_ORDER_WAIT_MS - 1);
	CHECK(waited < 60 * 1000);
}

/* A let-go waits until no start restores. */
static void quiet_waits_for_restores(void)
{
	struct later lr;
	pthread_t soon;

	gpu_order_restore_begin(NULL);
	later_start(&lr, NULL, true);
	REQUIRE(!pthread_create(&soon, NULL, release_soon, &lr));
	gpu_order_quiet();
	CHECK(atomic_load(&lr.done));
	pthread_join(soon, NULL);
	pthread_join(lr.th, NULL);
}

int main(void)
{
	which_fills();
	/* The rest with the order on. */
	setenv("THAW_GPU_ORDER", "1", 1);
	forget_twice();
	bounded();
	quiet_waits_for_restores();
	return check_failures ? 1 : 0;
}
