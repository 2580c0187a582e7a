/* SPDX-License-Identifier: Apache-2.0 */
/* instance_log.h — an instance's output: what its function wrote to stdout
 * and stderr, kept by its shim in <data>/instances/<id>/function.log, rotated
 * to function.log.1 at the configured bound (thaw_config.log_bytes,
 * common/logfile.h).
 */
#ifndef THAW_RESTORE_INSTANCE_LOG_H
#define THAW_RESTORE_INSTANCE_LOG_H

#include <stddef.h>

#include "common/config.h"

/* The path of instance id's function.log, built from c's data directory and
 * the id (never from a record: a record is data, not a trusted path).  0,
 * -EINVAL for an id that is not id_valid(), -ENAMETOOLONG. */
int instance_log_path(const struct thaw_config *c, const char *id, char *buf, size_t len);

/* The last lines lines of instance id's output, across the rotated file when
 * the current one has fewer (logfile_tail).  The instance is one with a
 * record, whatever its state: a running one, a standby, or one whose process
 * has exited while its record stays.  0 and *out (a new NUL-terminated buffer
 * of *len bytes: you own it; empty when it has written nothing); -EINVAL for a
 * bad id; -ENOENT when id has no record; another -errno (logged). */
int instance_log_tail(const struct thaw_config *c, const char *id, unsigned lines, char **out,
		      size_t *len);

#endif
