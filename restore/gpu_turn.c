/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_turn.c — copies onto the GPUs in the order their starts asked. */
#include "restore/gpu_turn.h"

#include "common/util.h"

#include <pthread.h>

static pthread_mutex_t turn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static struct gpu_turn *line_head[CUDA_MAX_DEVICES];

void gpu_turn_join(struct gpu_turn *t, const int *ordinals, size_t n)
{
	pthread_mutex_lock(&turn_mu);
	for (size_t i = 0; !t->joined && i < n; i++) {
		int g = ordinals[i];
		struct gpu_turn **pp;

		if (g < 0 || g >= CUDA_MAX_DEVICES || t->in[g])
			continue;
		for (pp = &line_head[g]; *pp; pp = &(*pp)->next[g])
			;
		*pp = t;
		t->next[g] = NULL;
		t->in[g] = true;
	}
	if (!t->joined) {
		t->joined = true;
		t->joined_ns = now_ns();
	}
	pthread_mutex_unlock(&turn_mu);
}

/* Is t first in every line it is in?  (turn_mu held.) */
static bool first_everywhere(const struct gpu_turn *t)
{
	for (int g = 0; g < CUDA_MAX_DEVICES; g++)
		if (t->in[g] && line_head[g] != t)
			return false;
	return true;
}

void gpu_turn_wait(struct gpu_turn *t)
{
	pthread_mutex_lock(&turn_mu);
	while (!first_everywhere(t))
		pthread_cond_wait(&turn_cv, &turn_mu);
	pthread_mutex_unlock(&turn_mu);
	t->begin_ns = now_ns();
}

void gpu_turn_leave(struct gpu_turn *t)
{
	bool moved = false;

	pthread_mutex_lock(&turn_mu);
	/* Ended before the next in line can begin: a turn's span never
	 * overlaps the next one's. */
	if (t->begin_ns && !t->end_ns)
		t->end_ns = now_ns();
	for (int g = 0; g < CUDA_MAX_DEVICES; g++) {
		struct gpu_turn **pp;

		if (!t->in[g])
			continue;
		for (pp = &line_head[g]; *pp; pp = &(*pp)->next[g])
			if (*pp == t) {
				*pp = t->next[g];
				break;
			}
		t->in[g] = false;
		moved = true;
	}
	if (moved)
		pthread_cond_broadcast(&turn_cv);
	pthread_mutex_unlock(&turn_mu);
}
