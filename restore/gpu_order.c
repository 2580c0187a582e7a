/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_order.c — see gpu_order.h. */
#include "restore/gpu_order.h"

#include "common/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t order_cv;
static pthread_once_t order_once = PTHREAD_ONCE_INIT;
static struct gpu_making *making; /* fills making theirs, oldest first */
static uint64_t last_seq;
static int restoring;

/* The waits run on the monotonic clock: a clock set back must not make
 * a restore wait for good. */
static void order_init(void)
{
	cond_init_monotonic(&order_cv);
}

/* Off unless THAW_GPU_ORDER=1 (gpu_order.h says why). */
static bool order_on(void)
{
	const char *e = getenv("THAW_GPU_ORDER");

	return e && !strcmp(e, "1");
}

/* Take m off the list (order_mu held). */
static void unlink_locked(struct gpu_making *m)
{
	for (struct gpu_making **pp = &making; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	m->left = 0;
	m->next = NULL;
	pthread_cond_broadcast(&order_cv);
}

void gpu_order_making(struct gpu_making *m)
{
	struct gpu_making **pp;

	pthread_once(&order_once, order_init);
	pthread_mutex_lock(&order_mu);
	if (!m->seq)
		m->seq = ++last_seq;
	/* On the list, oldest first, while any of its processes makes. */
	if (m->left++ == 0) {
		for (pp = &making; *pp && (*pp)->seq < m->seq; pp = &(*pp)->next)
			;
		m->next = *pp;
		*pp = m;
	}
	pthread_mutex_unlock(&order_mu);
}

void gpu_order_made(struct gpu_making *m)
{
	pthread_mutex_lock(&order_mu);
	if (m->left > 0 && --m->left == 0)
		unlink_locked(m);
	pthread_mutex_unlock(&order_mu);
}

void gpu_order_forget(struct gpu_making *m)
{
	pthread_mutex_lock(&order_mu);
	if (m->left > 0)
		unlink_locked(m);
	pthread_mutex_unlock(&order_mu);
}

/* Is a fill begun no later than seq still making its allocations?
 * (order_mu held; the list is oldest first.) */
static bool earlier_making(uint64_t seq)
{
	return making && making->seq <= seq;
}

double gpu_order_restore_begin(const struct gpu_making *own)
{
	uint64_t t0 = now_ns(), seq;
	struct timespec until = mono_after_ms(GPU_ORDER_WAIT_MS);

	pthread_once(&order_once, order_init);
	pthread_mutex_lock(&order_mu);
	seq = own && own->seq ? own->seq : last_seq;
	while (order_on() && earlier_making(seq))
		if (pthread_cond_timedwait(&order_cv, &order_mu, &until))
			break;
	restoring++;
	pthread_mutex_unlock(&order_mu);
	return ms_since(t0);
}

void gpu_order_restored(void)
{
	pthread_mutex_lock(&order_mu);
	if (restoring > 0 && --restoring == 0)
		pthread_cond_broadcast(&order_cv);
	pthread_mutex_unlock(&order_mu);
}

void gpu_order_quiet(void)
{
	struct timespec until = mono_after_ms(GPU_ORDER_QUIET_MS);

	pthread_once(&order_once, order_init);
	pthread_mutex_lock(&order_mu);
	while (order_on() && restoring > 0)
		if (pthread_cond_timedwait(&order_cv, &order_mu, &until))
			break;
	pthread_mutex_unlock(&order_mu);
}
