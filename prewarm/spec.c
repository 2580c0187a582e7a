/* spec.c — PLACEHOLDER so that the tree links while this module is written;
 * its owner replaces this whole file. Every function fails with -ENOSYS. */
#include "prewarm/spec.h"
#include <errno.h>
#include <stddef.h>

int spec_parse(const json_t *j, const char *id, struct func_spec **out, char *err, size_t errlen)
{
	return -ENOSYS;
}

json_t *spec_to_json(const struct func_spec *s)
{
	return NULL;
}

void spec_free(struct func_spec *s)
{
}
