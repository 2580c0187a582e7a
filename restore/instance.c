/* instance.c — PLACEHOLDER so that the tree links while this module is written;
 * its owner replaces this whole file. Every function fails with -ENOSYS. */
#include "restore/instance.h"
#include <errno.h>
#include <stddef.h>

int instance_start(const struct thaw_config *c, struct store *s, struct tier *t, const char *snapshot_id, struct instance *out)
{
	return -ENOSYS;
}

int instance_stop(const struct thaw_config *c, const char *id)
{
	return -ENOSYS;
}

int instance_list(const struct thaw_config *c, json_t **out)
{
	return -ENOSYS;
}

json_t *instance_to_json(const struct instance *in)
{
	return NULL;
}
