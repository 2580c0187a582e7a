/* SPDX-License-Identifier: Apache-2.0 */
/* fallback.h — restore or boot (docs/DESIGN.md, "Restore or boot").
 *
 * A start whose snapshot cannot be restored, for a reason of the snapshot
 * or of the host, boots the function cold from its spec instead (unless its
 * spec says "on_restore_failure": "fail"), and answers with that instance,
 * "restored": false with the reason.  The snapshot is then marked
 * "unrestorable" in the registry: the function's later starts, and its
 * standbys, boot directly, while one re-snapshot runs in the background; the
 * new snapshot serves once it is ready, and clears the mark.
 *
 * What this file decides; the start (server/starts.c) asks it, in order:
 * fallback_precheck before anything is restored (a mark, or a host that
 * differs from the snapshot's record: prewarm/host_record.h, compared once
 * per snapshot), fallback_applies after a restore failed, fallback_boot to
 * boot, fallback_mark once the snapshot is known bad.
 */
#ifndef THAW_SERVER_FALLBACK_H
#define THAW_SERVER_FALLBACK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/config.h"
#include "common/fault.h"
#include "restore/instance.h"

struct server;
struct fallback;

/* The reasons a start boots, as /metrics counts them
 * (thaw_start_boots_total{reason}). */
#define FALLBACK_MARKED	 "marked"  /* the snapshot was marked before: boot directly */
#define FALLBACK_HOST	 "host"	   /* this host differs from the snapshot's record */
#define FALLBACK_DAMAGED "damaged" /* its stored data failed its check */
#define FALLBACK_RESTORE "restore" /* CRIU, runc, the driver failed to restore it */
#define FALLBACK_READY	 "ready"   /* restored, it did not become ready */

/* A re-snapshot that failed is not launched again for the same snapshot
 * before this long: a function that cannot be snapshotted costs a boot every
 * ten minutes, not one per start. */
#define FALLBACK_RESNAPSHOT_RETRY_S 600
/* One that could not be launched (--max-snapshots jobs running) is tried
 * again by a start after this long. */
#define FALLBACK_LAUNCH_RETRY_S 30

/* The state of a server's fallbacks (this host's record, made now with c's
 * criu; each snapshot's verdict; the re-snapshots launched).  NULL when out
 * of memory. */
struct fallback *fallback_new(const struct thaw_config *c);
void fallback_free(struct fallback *f); /* NULL is fine */

/* Before a start of fn restores snap: must it boot instead?  true with
 * *reason (FALLBACK_MARKED or FALLBACK_HOST) and why (the mark's reason, or
 * every difference of the host) when snap is marked, or when this host
 * differs from the one that made it where its restore depends on it.  A
 * host difference is found once per snapshot; it marks the function unless
 * its spec says "on_restore_failure": "fail" (fails: true). */
bool fallback_precheck(struct server *s, const char *fn, const char *snap, bool fails,
		       const char **reason, char *why, size_t len);

/* A snapshot snap of fn pulled from the remote tier, its meta meta: checked
 * as a start checks it, before its first start.  true, why naming every
 * difference, when this host differs; the function is then marked unless
 * fails (its starts boot, and the first launches the re-snapshot). */
bool fallback_pulled(struct server *s, const char *fn, const char *snap, const json_t *meta,
		     bool fails, char *why, size_t len);

/* Whether the snapshot snap of fn that this host and this start could not
 * see restored (err, the step in->fault.step) is a failure a boot answers: its
 * stored data damaged, CRIU, runc or the driver failing to restore it, or
 * the restored function not becoming ready.  Not: a race (the function
 * deleted or its snapshot replaced meanwhile), its image, a lack of room or
 * of resources (a boot needs them too), a path refused.  true with *reason
 * and why (the restore's words, err's where it said none). */
bool fallback_applies(struct server *s, const char *fn, const char *snap, int err,
		      const struct instance *in, const char **reason, char *why, size_t len);

/* Boot fn cold for a start (or, standby, a CPU function's standby), standing
 * in for its snapshot snap because of why: its spec as the registry holds it,
 * its image made ready as for a snapshot.  0 and *in, or -errno with the
 * reason set (log_last_error). */
int fallback_boot(struct server *s, const char *fn, const char *snap, const char *why,
		  bool standby, struct instance *in);

/* fn's snapshot snap cannot serve starts (why): the function is marked,
 * and one re-snapshot is launched unless one is building, or one for snap
 * failed within FALLBACK_RESNAPSHOT_RETRY_S.  Where the restore's fault (may
 * be NULL) names a damaged or missing chunk, that re-snapshot first heals
 * snap (store_heal: every chunk it names checked, and the packs a damaged
 * one lies in; every damaged one out of the store's index), so that it
 * writes them all anew rather than deduplicating against them. */
void fallback_mark(struct server *s, const char *fn, const char *snap, const char *why,
		   const struct fault *fault);

/* A start of snap that found it damaged and may not boot ("on_restore_failure":
 * "fail"), fault its restore's: where it names a damaged or missing chunk,
 * snap is healed now (store_heal, as fallback_mark's re-snapshot does), so
 * that the next snapshot of its function writes every damaged chunk anew.
 * As long as reading the snapshot. */
void fallback_heal(struct server *s, const char *snap, const struct fault *fault);

/* Whether a restore's fault says that the store's data is damaged: a chunk
 * that failed its check (-EBADMSG) or that the store lacks (-ENOENT). */
bool fallback_fault_damaged(const struct fault *fault);

#endif
