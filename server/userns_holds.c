/* SPDX-License-Identifier: Apache-2.0 */
/* userns_holds.c — see userns_holds.h. */
#include "server/userns_holds.h"

#include "common/log.h"
#include "common/util.h"
#include "function/userns.h"
#include "images/image.h"
#include "server/internal.h"
#include "server/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The functions a job holds: few at once (--max-snapshots). */
struct hold {
	char fn[128];
	unsigned jobs;
	bool deleted; /* its DELETE came while held: give back at the last end */
};

static pthread_mutex_t holds_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hold *holds;
static size_t nholds, holds_cap;

/* fn's entry (holds_mu held), or NULL. */
static struct hold *find(const char *fn)
{
	for (size_t i = 0; i < nholds; i++)
		if (!strcmp(holds[i].fn, fn))
			return &holds[i];
	return NULL;
}

/* Give fn's range back and unmount what only it used (holds_mu held, so
 * that no job of fn begins in between).  true on success. */
static bool give_back(struct server *s, const char *fn)
{
	if (userns_release(&s->cfg, fn)) {
		pr_warn("function %s: its user namespace range stays taken", fn);
		return false;
	}
	if (image_idmap_prune(&s->cfg))
		pr_warn("function %s: an idmapped image rootfs of its range stays mounted", fn);
	return true;
}

void userns_hold(const char *fn)
{
	struct hold *h;

	pthread_mutex_lock(&holds_mu);
	h = find(fn);
	if (!h && !ARRAY_GROW(holds, holds_cap, nholds + 1, 8)) {
		h = &holds[nholds++];
		*h = (struct hold){ .jobs = 0 };
		snprintf(h->fn, sizeof(h->fn), "%s", fn);
	}
	/* Out of memory: not held, as before there were holds. */
	if (h)
		h->jobs++;
	pthread_mutex_unlock(&holds_mu);
}

void userns_unhold(struct server *s, const char *fn)
{
	struct hold *h;

	pthread_mutex_lock(&holds_mu);
	h = find(fn);
	if (h && --h->jobs == 0) {
		/* Deleted while held, and not PUT again since. */
		if (h->deleted && !registry_exists(s->reg, fn) && give_back(s, fn))
			pr_info("function %s: its last snapshot job ended; its user namespace "
				"range is given back", fn);
		*h = holds[--nholds];
	}
	pthread_mutex_unlock(&holds_mu);
}

bool userns_release_unheld(struct server *s, const char *fn)
{
	struct hold *h;
	bool now;

	pthread_mutex_lock(&holds_mu);
	h = find(fn);
	if (h) {
		h->deleted = true;
		pr_info("function %s: a snapshot job of it still runs in its user namespace "
			"range; the range is given back when it ends", fn);
		now = false;
	} else {
		now = give_back(s, fn);
	}
	pthread_mutex_unlock(&holds_mu);
	return now;
}
