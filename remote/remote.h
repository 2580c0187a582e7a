/* SPDX-License-Identifier: Apache-2.0 */
/* remote.h — the remote tier: a store's snapshots on an S3-compatible object
 * store (s3.h), shared by every host of a fleet.
 *
 * Layout under s3://bucket/prefix/, the store's own and as immutable:
 *	packs/<32 hex>.pack   chunk objects (chunk.h) exactly as a local pack
 *	                      holds them (pack.h: 4 KiB aligned); a random name,
 *	                      never written twice
 *	packs/<32 hex>.idx    its index in the local format (pack.h), uploaded
 *	                      after the pack: only an indexed pack exists
 *	manifests/<64 hex>    a manifest's JSON bytes, named by their SHA-256
 *	refs/<function>.json  {"function","manifest","spec","pushed"}: a
 *	                      function's spec and current snapshot, written last
 *	gc/pending.json       what remote gc marked as unreferenced (see
 *	                      remote_gc and docs/DESIGN.md, "The remote tier")
 * A push writes packs, then their indexes, then the manifest, then the ref:
 * a reader that finds a ref finds everything it names, and two hosts
 * pushing at once write different packs and at worst the same manifest
 * bytes.  Nothing but gc deletes, and gc never deletes what a ref reaches.
 *
 * The remote's pack indexes are cached under the store directory
 * (remote/<16 hex of the remote's URL and endpoint>/), as packs never change.
 * Functions return 0 or -errno and log the reason (log_last_error()).
 */
#ifndef THAW_REMOTE_REMOTE_H
#define THAW_REMOTE_REMOTE_H

#include "store/chunk.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct remote;
struct store;

#define REMOTE_PACK_BYTES   (64u << 20) /* a push starts a new pack beyond this */
#define REMOTE_FETCH_GAP    (64u << 10) /* chunks this close in a pack: one GET */
#define REMOTE_FETCH_RANGE  (8u << 20)	/* the longest range one GET asks for */
#define REMOTE_FETCH_BATCH  (256u << 20) /* bytes of ranges in memory at once */
#define REMOTE_PARALLEL	    16		/* GETs in flight */
#define REMOTE_FETCH_WORKERS 4		/* threads checking and storing fetched ranges, at most */
#define REMOTE_FETCH_SEAL   (64u << 20) /* a fetch makes its packs durable this often */
#define REMOTE_GC_GRACE_S   3600	/* remote_gc's default grace */

/* Bytes done of total so far; called on the calling thread. */
typedef void (*remote_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Open the remote at url ("s3://bucket" or "s3://bucket/prefix"; NULL:
 * $THAW_REMOTE) through endpoint (NULL: $AWS_ENDPOINT_URL, else AWS; see
 * s3.h for the region and keys).  0 and *out, or -EINVAL (a bad URL, named),
 * -ENOKEY (no keys).  Opening sends no request. */
int remote_open(const char *url, const char *endpoint, struct remote **out);
void remote_close(struct remote *r); /* NULL is fine */
/* "s3://bucket/prefix at ENDPOINT (region, where the keys came from)": no secret. */
const char *remote_describe(const struct remote *r);

struct remote_push_stats {
	uint64_t chunks;	 /* distinct chunks of the manifest */
	uint64_t chunks_sent;	 /* of which uploaded: the remote lacked them */
	uint64_t bytes_sent;	 /* bytes of packs, indexes, manifest and ref uploaded */
	uint64_t chunk_bytes;	 /* stored bytes of all the manifest's chunks */
	uint64_t packs;		 /* new packs */
	double seconds;
};

/* Upload function's snapshot: the chunks of manifest_id (in store) that the
 * remote lacks, in new packs (multipart above S3_MULTIPART_MIN, parts in
 * flight); then the manifest; then refs/<function>.json with spec_json (a
 * JSON object, as text) and the manifest's id, last.  A chunk in a pack
 * that gc has marked is uploaded again rather than relied on.  stats and
 * progress may be NULL. */
int remote_push(struct remote *r, struct store *s, const char *function, const char *spec_json,
		const char *manifest_id, remote_progress_fn progress, void *arg,
		struct remote_push_stats *stats);

/* Delete refs/<function>.json: the function is gone from the fleet; what
 * only it reached goes at the next gc runs.  Missing is fine. */
int remote_delete_ref(struct remote *r, const char *function);

/* Read refs/<function>.json: *spec_json (malloc'd JSON text, you own it)
 * and manifest_id.  -ENOENT where the remote has no such function. */
int remote_pull_ref(struct remote *r, const char *function, char **spec_json,
		    char manifest_id[CHUNK_ID_LEN]);

/* Every ref, as a JSON array of {"function","manifest","pushed"} (you own
 * it, json_decref), sorted by function. */
int remote_list_refs(struct remote *r, json_t **out);
/* Every ref's ETag, as a JSON object {function: etag}, from one listing (no
 * ref is read): what changed since an earlier listing, cheaply (you own
 * it, json_decref). */
int remote_list_ref_tags(struct remote *r, json_t **out);

/* Fetch manifest_id's JSON from the remote and check it (its bytes hash to
 * its id; manifest_parse's checks).  Nothing is written: the manifest joins
 * a store only after its chunks, in remote_fetch_missing.  *out (you own
 * it, manifest_free) may be NULL to only check. */
struct manifest;
int remote_fetch_manifest(struct remote *r, const char *manifest_id, struct manifest **out);

struct remote_fetch_stats {
	uint64_t chunks;       /* distinct chunks of the manifest */
	uint64_t chunks_fetched;
	uint64_t bytes_fetched; /* bytes of ranges received, retries included */
	uint64_t retries;	/* ranges fetched again: corrupt, cut or failed */
	double seconds;
};

/* Make manifest_id whole in store: fetch every chunk it names that the
 * store lacks, with parallel ranged GETs of the remote's packs, check each
 * against its SHA-256 before it is stored (a bad or cut answer is fetched
 * again, S3_ATTEMPTS tries in all), store them in new local packs, then
 * write the manifest, as a put does (the store lock held shared meanwhile,
 * so local gc waits).  The manifest waits in the store's pending/ while its
 * chunks come, and the packs are made durable every REMOTE_FETCH_SEAL bytes:
 * a fetch that is killed keeps what it sealed (gc keeps it for a day), and
 * the next fetch of the manifest fetches only the rest.  A chunk the remote cannot give fails the call naming
 * it; what was fetched before stays as whole packs (gc's, or the next
 * fetch's), never as a manifest that lacks chunks.  stats/progress may be NULL. */
int remote_fetch_missing(struct remote *r, struct store *s, const char *manifest_id,
			 remote_progress_fn progress, void *arg, struct remote_fetch_stats *stats);

/* A fetch that streams its chunks into a consumer as they arrive (the RAM
 * tier's materialisation, restore/tier.h) rather than only into the store. */
struct remote_fetch_opts {
	remote_progress_fn progress; /* may be NULL */
	void *arg;
	/* Called once, on the calling thread, with the manifest (checked,
	 * not yet in the store) after the plan and before the first GET; from
	 * then on the store holds every chunk the fetch does not bring.  Not 0:
	 * the fetch stops with that error. */
	int (*begin)(void *arg, const struct manifest *m);
	/* Called for every chunk fetched, from the fetch's worker threads (at
	 * once), only once its bytes hashed to its name: data is the chunk's
	 * len bytes, valid during the call.  A chunk fetched again after a bad
	 * answer may come twice.  Not 0: the fetch stops with that error. */
	int (*chunk)(void *arg, const uint8_t hash[CHUNK_HASH_LEN], const void *data, size_t len);
	/* May be NULL.  The chunks of the files first() says yes to (file:
	 * an index into m's files) are fetched before any other chunk, and
	 * first_done is called on the calling thread once all of them went
	 * through chunk(), before the rest is asked for (also when there were
	 * none to fetch): a consumer that must read some files before it can
	 * place the others (the RAM tier's mapped layout) waits one round for
	 * them, not for the whole fetch.  Not 0: the fetch stops with that
	 * error. */
	bool (*first)(void *arg, const struct manifest *m, size_t file);
	int (*first_done)(void *arg);
	void *consumer; /* begin's, chunk's, first's and first_done's arg */
};

/* remote_fetch_missing with a consumer; o may be NULL. */
int remote_fetch_missing_with(struct remote *r, struct store *s, const char *manifest_id,
			      const struct remote_fetch_opts *o, struct remote_fetch_stats *stats);

struct remote_gc_stats {
	uint64_t refs;		/* functions with a ref */
	uint64_t kept;		/* objects a ref reaches */
	uint64_t marked;	/* unreferenced objects now marked (gc/pending.json) */
	uint64_t deleted;	/* objects deleted */
	uint64_t deleted_bytes;
	int64_t wait_s;		/* > 0: the earlier mark is this young; nothing deleted yet */
};

/* Mark and sweep, with a grace period (REMOTE_GC_GRACE_S when grace_s < 0).
 * A gc that finds a mark at least grace_s old (by the server's clock)
 * deletes each object of it that no ref reaches now and that was not
 * written since the mark; then it marks what is unreferenced now.  A mark
 * younger than grace_s is left as it is (stats->wait_s says for how long).
 * dry_run: count, write and delete nothing.  The safety argument is in
 * docs/DESIGN.md, "The remote tier". */
int remote_gc(struct remote *r, int grace_s, bool dry_run, struct remote_gc_stats *stats);

#endif
