/* SPDX-License-Identifier: Apache-2.0 */
/* registry.h — the functions thawd knows and the state of their snapshots.
 *
 * Each function is one file, <dir>/<id>.json (written with
 * write_file_atomic, so a crash leaves the old or the new), holding
 *
 *	{"version":1, "spec":{…spec_to_json…},
 *	 "snapshot":{"state":"none|building|ready|failed", "id":"sha256:…"|null,
 *	             "error":"…"|null, "job":"…"|null, "image_bytes":N,
 *	             "stored_bytes":N, "timings_ms":{…}|null,
 *	             "damaged":{"at":"<RFC 3339>","what":"…"}|null,
 *	             "unrestorable":{"at":"<RFC 3339>","why":"…"}|null},
 *	 "deleting":true}                 (only while a delete is under way)
 *
 * and GET /functions/<id> answers the spec's fields plus "snapshot".  On open,
 * a snapshot left "building" by an earlier thawd becomes "failed" with the
 * reason "thawd restarted during the snapshot".
 *
 * A function being deleted is gone to clients at once (every function below
 * but the delete's own answers as if it were not there), and stays recorded,
 * "deleting", until its instances are stopped: a thawd killed in the middle
 * leaves the mark, and the next one's recovery finishes the delete.
 *
 * Thread-safe; the lock is held only for the in-memory change and the file
 * write, never across a snapshot or a start.
 */
#ifndef THAW_SERVER_REGISTRY_H
#define THAW_SERVER_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "function/snapshot_meta.h"
#include "store/chunk.h"

struct func_spec;
struct thaw_config;

#define REGISTRY_RESTART_REASON "thawd restarted during the snapshot"

enum snap_state { SNAP_NONE, SNAP_BUILDING, SNAP_READY, SNAP_FAILED };

struct registry;

/* Open the registry kept in dir (created if needed), loading every function
 * found there.  NULL on error, logged. */
struct registry *registry_open(const char *dir);
void registry_free(struct registry *r); /* NULL is fine */

/* Create or replace function id with spec (the registry takes its own copy).
 * *created tells which.  Replacing a spec with a different one forgets the
 * snapshot (it was taken of the old spec); the same spec, or one that
 * differs only in how instances are served ("standby", "idle_s",
 * "max_lifetime_s", "stop_grace_s", "max_instances", "concurrency", "queue",
 * "queue_timeout_s"), keeps it.  forgot
 * (may be NULL): the id of a ready snapshot forgotten so, else "".  -EBUSY
 * while a snapshot of it is building, -EINPROGRESS while it is being
 * deleted. */
int registry_put(struct registry *r, const char *id, const json_t *spec, bool *created,
		 char *forgot);
/* registry_put, and *out (a new object, as registry_get_json's) the function
 * as this put left it, taken under the same lock: a DELETE that runs right
 * after cannot make the put's own answer fail.  *out is NULL on error. */
int registry_put_get(struct registry *r, const char *id, const json_t *spec, bool *created,
		     char *forgot, json_t **out);
/* registry_put_get of a spec first checked where its paths may be
 * (function_spec_check against c, whose "registered" is r's own list:
 * registry_specs), with no other admission checked or recorded in between,
 * so that two functions whose paths clash are never both let in: each is
 * checked before the other is recorded.  A PUT and a pull admit so.  A
 * spec the check refuses: -EACCES, -EINVAL or -ENOMEM, key (key_len bytes)
 * naming the spec's key at fault and why saying why; else key is "" and
 * the result is registry_put_get's. */
int registry_admit(struct registry *r, const struct thaw_config *c, const char *id,
		   const json_t *spec, bool *created, char *forgot, json_t **out, char *key,
		   size_t key_len, char *why, size_t why_len);
/* GET /functions/<id>: a new object; -ENOENT. */
int registry_get_json(struct registry *r, const char *id, json_t **out);
/* What the server decides on of a function's snapshots (the "snapshot" of
 * GET /functions/<id>, in part). */
struct registry_snap {
	enum snap_state state;  /* of the latest attempt */
	char id[CHUNK_ID_LEN];  /* the current snapshot ("" none): the one starts use */
	uint64_t image_bytes;   /* its image's size */
};
/* Function id's settings as the server reads them: its spec parsed
 * (spec_parse, so every default is filled in) into *spec (yours:
 * spec_free) and its snapshot's state into *snap (may be NULL).  -ENOENT
 * unknown, -ENOMEM, or -EINVAL for a stored spec that no longer parses
 * (logged). */
int registry_get_spec(struct registry *r, const char *id, struct func_spec **spec,
		      struct registry_snap *snap);
/* The ids of the functions (not those being deleted), sorted: a new array
 * of strings. */
int registry_list_ids(struct registry *r, json_t **out);
/* GET /functions: a new array, sorted by id. */
int registry_list_json(struct registry *r, json_t **out);
/* The specs of the functions r (a struct registry) holds (what
 * function/confine.h compares a function's host paths with: a thaw_config's
 * "registered"): a new object, each id to its spec, which the caller must
 * not change (it is the registry's own: a put replaces a spec, never
 * changes it, so none is copied at every start); 0 or -ENOMEM. */
int registry_specs(void *r, json_t **out);
/* Forget function id and remove its file (being deleted or not); -ENOENT.
 * forgot (may be NULL): the id of its ready snapshot, else "". */
int registry_delete(struct registry *r, const char *id, char *forgot);
/* A delete of function id begins: it is marked "deleting" in its file
 * (persisted before this returns) and is gone to clients from now on, and
 * the caller holds the delete until registry_delete (done) or
 * registry_delete_release (not done: the mark stays, and a later delete takes
 * it up).  One marked by an earlier thawd, or left by a delete released so, is
 * taken up.  forgot (may be NULL): the id of its current snapshot, else "".
 * -ENOENT unknown, -EALREADY another caller holds its delete, or the file's
 * write error. */
int registry_delete_begin(struct registry *r, const char *id, char *forgot);
void registry_delete_release(struct registry *r, const char *id);
/* A function as the server's own work lists it (not GET /functions). */
struct registry_fn {
	char id[64];
	char snap[CHUNK_ID_LEN]; /* its current snapshot, "" none */
};
/* The functions marked "deleting" (deleting true) or the others, sorted
 * by id, into *fns (yours: free) and *n: 0 or -ENOMEM. */
int registry_functions(struct registry *r, bool deleting, struct registry_fn **fns, size_t *n);
bool registry_exists(struct registry *r, const char *id);

/* A snapshot of id begins, as job job_id: state "building".  *spec: a copy of
 * its spec (you own it).  The function's current snapshot, if any, stays
 * current (and serves starts) until registry_snapshot_end records a new one.
 * -ENOENT unknown, -EBUSY already building. */
int registry_snapshot_begin(struct registry *r, const char *id, const char *job_id,
			    json_t **spec);
/* The snapshot of job job_id ended: ready with snapshot_id, sizes and
 * timings_ms (may be NULL; copied), or failed with error (snapshot_id NULL;
 * the current snapshot, if any, stays).  forgot (may be NULL): the id of the
 * snapshot a ready one replaced, else "" (the caller drops it).
 * -ENOENT (nothing recorded) if the function was deleted or replaced
 * meanwhile: the caller then knows that the snapshot belongs to nobody. */
int registry_snapshot_end(struct registry *r, const char *id, const char *job_id,
			  const char *snapshot_id, uint64_t image_bytes, uint64_t stored_bytes,
			  const json_t *timings_ms, const char *error, char *forgot);
/* A start of snapshot_id, id's current snapshot, found its stored data
 * damaged (what: the words naming the chunk, pack or manifest): mark it so,
 * with the time, until a new snapshot replaces it or the spec changes.
 * -ENOENT if id is gone or its current snapshot is another one by now. */
int registry_snapshot_damaged(struct registry *r, const char *id, const char *snapshot_id,
			      const char *what);
/* The current snapshot snapshot_id of id cannot serve starts (why: the
 * restore's failure, or where this host differs from the one that made it):
 * starts boot the function instead, until a new snapshot replaces it or
 * the spec changes (docs/DESIGN.md, "Restore or boot").  A mark there
 * already is kept.  -ENOENT if id is gone or its current snapshot is
 * another one by now. */
int registry_snapshot_unrestorable(struct registry *r, const char *id, const char *snapshot_id,
				   const char *why);
/* Is snapshot_id, id's current snapshot, marked so?  why (may be NULL): the
 * mark's reason. */
bool registry_unrestorable(struct registry *r, const char *id, const char *snapshot_id,
			   char *why, size_t len);
/* The current snapshot of id into out (there is one while a re-snapshot
 * builds or after one failed); -ENOENT unknown function, -ENODATA none
 * (*state says the state of the latest attempt). */
int registry_ready_snapshot(struct registry *r, const char *id, char out[CHUNK_ID_LEN],
			    enum snap_state *state);

/* The tag thawd puts into the meta of the snapshots it makes (as "thawd",
 * function/snapshot_meta.h), so that they can be told from others in a store
 * that `thaw snapshot` or another data directory's thawd may share: the
 * registry's directory (symlinks resolved; r's, it lives as long as r), the
 * function id and the job job_id (the caller's strings). */
struct snapshot_tag registry_snapshot_tag(struct registry *r, const char *id, const char *job_id);
/* Is the manifest snapshot_id, whose meta holds tag, a snapshot of this
 * registry's functions that none of them names any more (a thawd killed
 * between a manifest's write or a function's change and the manifest's
 * deletion)?  false when tag is another registry's or none; when a function
 * (being deleted or not) names it as its current snapshot; when it is its
 * function's snapshot still building (that job's); when its function's file
 * is there but could not be read. */
bool registry_snapshot_orphan(struct registry *r, const char *snapshot_id,
			      const struct snapshot_tag *tag);

const char *snap_state_name(enum snap_state s);

#endif
