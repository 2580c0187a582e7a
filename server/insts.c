/* SPDX-License-Identifier: Apache-2.0 */
/* insts.c — see insts.h. */
#include "server/insts.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	struct inst_ref ref;
	pid_t pid;
	unsigned long long pid_start;
	bool adopted;
	struct inst_limits limits;
};

/* Starts in flight of one function, counted against its max_instances. */
struct pending {
	char function[64];
	unsigned n;
};

struct insts {
	pthread_mutex_t lock;
	struct entry *e;
	size_t n, cap;
	/* Ids being stopped (insts_claim): few at a time. */
	char (*claimed)[64];
	size_t nclaimed, capclaimed;
	struct pending *pend;
	size_t npend, cappend;
};

struct insts *insts_new(void)
{
	struct insts *t = calloc(1, sizeof(*t));

	if (t)
		pthread_mutex_init(&t->lock, NULL);
	return t;
}

void insts_free(struct insts *t)
{
	if (!t)
		return;
	free(t->e);
	free(t->claimed);
	free(t->pend);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

int insts_add(struct insts *t, const char *id, const char *function, pid_t pid,
	      unsigned long long pid_start, bool adopted)
{
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (ARRAY_GROW(t->e, t->cap, t->n + 1, 32)) {
		ret = -ENOMEM;
		goto out;
	}
	struct entry *e = &t->e[t->n++];
	memset(e, 0, sizeof(*e));
	snprintf(e->ref.id, sizeof(e->ref.id), "%s", id);
	snprintf(e->ref.function, sizeof(e->ref.function), "%s", function);
	e->pid = pid;
	e->pid_start = pid_start;
	e->adopted = adopted;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int insts_remove(struct insts *t, const char *id)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		if (!strcmp(t->e[i].ref.id, id)) {
			t->e[i] = t->e[--t->n];
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int insts_take(struct insts *t, const char *function, struct inst_ref **out, size_t *n)
{
	struct inst_ref *refs;
	size_t k = 0;
	int ret = 0;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&t->lock);
	refs = calloc(t->n ? t->n : 1, sizeof(*refs));
	if (!refs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t->n;) {
		if (function && strcmp(t->e[i].ref.function, function)) {
			i++;
			continue;
		}
		refs[k++] = t->e[i].ref;
		t->e[i] = t->e[--t->n];
	}
	*out = refs;
	*n = k;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

size_t insts_count(struct insts *t, size_t *alive)
{
	size_t n, a = 0;

	pthread_mutex_lock(&t->lock);
	n = t->n;
	for (size_t i = 0; i < t->n; i++)
		a += t->e[i].pid > 0 && kill(t->e[i].pid, 0) == 0;
	pthread_mutex_unlock(&t->lock);
	if (alive)
		*alive = a;
	return n;
}

int insts_function(struct insts *t, const char *id, char function[64])
{
	int ret = -ENOENT;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		if (!strcmp(t->e[i].ref.id, id)) {
			memcpy(function, t->e[i].ref.function, 64);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* Is id being stopped?  Under the lock. */
static bool claimed(const struct insts *t, const char *id)
{
	for (size_t i = 0; i < t->nclaimed; i++)
		if (!strcmp(t->claimed[i], id))
			return true;
	return false;
}

int insts_claim(struct insts *t, const char *id)
{
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (claimed(t, id)) {
		ret = -EALREADY;
		goto out;
	}
	if (ARRAY_GROW(t->claimed, t->capclaimed, t->nclaimed + 1, 16)) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(t->claimed[t->nclaimed++], sizeof(t->claimed[0]), "%s", id);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void insts_release(struct insts *t, const char *id)
{
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->nclaimed; i++) {
		if (!strcmp(t->claimed[i], id)) {
			memmove(t->claimed[i], t->claimed[--t->nclaimed], sizeof(t->claimed[0]));
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
}

static struct pending *pending_of(struct insts *t, const char *function)
{
	for (size_t i = 0; i < t->npend; i++)
		if (!strcmp(t->pend[i].function, function))
			return &t->pend[i];
	return NULL;
}

int insts_reserve(struct insts *t, const char *function, unsigned max, unsigned *have)
{
	struct pending *p;
	unsigned n = 0;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++)
		n += !strcmp(t->e[i].ref.function, function) && !claimed(t, t->e[i].ref.id);
	p = pending_of(t, function);
	n += p ? p->n : 0;
	*have = n;
	if (max && n >= max) {
		ret = -EUSERS;
		goto out;
	}
	if (!p) {
		if (ARRAY_GROW(t->pend, t->cappend, t->npend + 1, 8)) {
			ret = -ENOMEM;
			goto out;
		}
		p = &t->pend[t->npend++];
		snprintf(p->function, sizeof(p->function), "%s", function);
		p->n = 0;
	}
	p->n++;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void insts_unreserve(struct insts *t, const char *function)
{
	struct pending *p;

	pthread_mutex_lock(&t->lock);
	p = pending_of(t, function);
	if (p && p->n && --p->n == 0)
		*p = t->pend[--t->npend];
	pthread_mutex_unlock(&t->lock);
}

int insts_set_limits(struct insts *t, const char *id, const struct inst_limits *l)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		if (!strcmp(t->e[i].ref.id, id)) {
			t->e[i].limits = *l;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int insts_list(struct insts *t, struct inst_view **out, size_t *n)
{
	struct inst_view *v;

	pthread_mutex_lock(&t->lock);
	v = calloc(t->n ? t->n : 1, sizeof(*v));
	if (v) {
		for (size_t i = 0; i < t->n; i++)
			v[i] = (struct inst_view){ .ref = t->e[i].ref, .pid = t->e[i].pid,
						   .pid_start = t->e[i].pid_start,
						   .adopted = t->e[i].adopted,
						   .limits = t->e[i].limits };
		*n = t->n;
	}
	pthread_mutex_unlock(&t->lock);
	*out = v;
	return v ? 0 : -ENOMEM;
}
