/* prewarm.c — PLACEHOLDER so that the tree links while this module is written;
 * its owner replaces this whole file. Every function fails with -ENOSYS. */
#include "prewarm/prewarm.h"
#include <errno.h>
#include <stddef.h>

int prewarm_snapshot(const struct thaw_config *c, struct store *s, const struct func_spec *spec, struct snapshot_result *out)
{
	return -ENOSYS;
}

void snapshot_result_release(struct snapshot_result *r)
{
}
