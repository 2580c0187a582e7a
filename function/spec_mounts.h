/* SPDX-License-Identifier: Apache-2.0 */
/* spec_mounts.h — a spec's "mounts": host directories bound into the
 * function's container (the OCI runtime spec's names).
 *
 *	"mounts": [{"source": "/srv/models", "destination": "/models",
 *	            "readonly": true}]
 *
 * Read-only unless "readonly" is false.  Each source must be a directory
 * under an allowed root, away from thaw's own state, and a read-write one
 * must hold and lie in no other path a function reaches (function/confine.h:
 * checked at registration and again where the bundle is written, where the
 * very directory checked is bound).  A destination may not be the
 * container's own (/proc, /sys, /dev, thaw's), /tmp, where thaw binds the
 * host's directories for a function without a bundle or an image (/usr,
 * /etc, /opt, …) or its cwd, nor nest with another mount's.  They are part of what the function runs: recorded
 * in its snapshot's spec and bound again, from the same sources, at every
 * restore (CRIU restores a container only into the mounts it was dumped
 * with; runc hands it the binds as external mounts).
 */
#ifndef THAW_FUNCTION_SPEC_MOUNTS_H
#define THAW_FUNCTION_SPEC_MOUNTS_H

#include <jansson.h>
#include <stddef.h>

#include "function/spec.h"

/* Parse v (the spec's "mounts"; NULL or null: none) into s->mounts and
 * s->nmounts.  0, or -EINVAL with err naming the field. */
int spec_mounts_parse(const json_t *v, struct func_spec *s, char *err, size_t errlen);
/* The mounts of s as JSON (every key), or NULL when it has none. */
json_t *spec_mounts_to_json(const struct func_spec *s);
void spec_mounts_free(struct func_spec *s);

#endif
