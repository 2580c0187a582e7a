/* SPDX-License-Identifier: Apache-2.0 */
/* logs.h — GET /instances/<iid>/logs and GET /jobs/<jid>/logs: the end of a
 * function's output (common/logfile.h) as text/plain, ?tail=N lines
 * (default 100, at most 10000).
 */
#ifndef THAW_SERVER_LOGS_H
#define THAW_SERVER_LOGS_H

struct req;

/* Instance q->route.id's output since its restore: 200, 400 bad tail, 404
 * no record (an instance whose process exited is there while its record
 * is). */
int logs_get_instance(struct req *q);
/* Job q->route.id's function's output while it booted and warmed up for
 * its snapshot: 200, 400 bad tail, 404 no such job (any more). */
int logs_get_job(struct req *q);

#endif
