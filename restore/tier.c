/* tier.c — PLACEHOLDER so that the tree links while this module is written;
 * its owner replaces this whole file. Every function fails with -ENOSYS. */
#include "restore/tier.h"
#include <errno.h>
#include <stddef.h>

struct tier *tier_open(const char *dir, uint64_t budget_bytes, struct store *s, const struct engine_opts *opts)
{
	return NULL;
}

void tier_close(struct tier *t)
{
}

int tier_acquire(struct tier *t, const char *snapshot_id, struct tier_lease **out)
{
	return -ENOSYS;
}

const char *tier_lease_path(const struct tier_lease *l)
{
	return NULL;
}

bool tier_lease_hit(const struct tier_lease *l)
{
	return false;
}

double tier_lease_materialize_ms(const struct tier_lease *l)
{
	return 0;
}

void tier_release(struct tier_lease *l)
{
}

uint64_t tier_used_bytes(struct tier *t)
{
	return 0;
}

uint64_t tier_budget_bytes(struct tier *t)
{
	return 0;
}
