/* SPDX-License-Identifier: Apache-2.0 */
/* spec_internal.h — what the spec's parsers share (spec.c, spec_mounts.c);
 * not for other modules.
 */
#ifndef THAW_FUNCTION_SPEC_INTERNAL_H
#define THAW_FUNCTION_SPEC_INTERNAL_H

#include <stddef.h>

/* A spec refused: the reason, formatted, into err (may be NULL); -EINVAL. */
int __attribute__((format(printf, 3, 4))) spec_fail(char *err, size_t errlen, const char *fmt,
						     ...);

#endif
