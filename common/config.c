/* config.c — PLACEHOLDER so that the tree links while this module is written;
 * its owner replaces this whole file. Every function fails with -ENOSYS. */
#include "common/config.h"
#include <errno.h>
#include <stddef.h>

int config_init(struct thaw_config *c, const char *data_dir)
{
	return -ENOSYS;
}
