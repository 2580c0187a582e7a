/* SPDX-License-Identifier: Apache-2.0 */
/* remote_gc.c — remote_gc (remote.h): mark and sweep with a grace period,
 * and gc's marks (gc/pending.json) as a push and gc read them. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "store/fill.h"
#include "store/manifest.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PENDING_MAX_BYTES (256u << 20) /* a mark larger than this is refused */

void remote_pending_release(struct remote_pending *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->keys[i]);
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

bool remote_pending_has(const struct remote_pending *p, const char *key)
{
	return p->n && bsearch(&key, p->keys, p->n, sizeof(*p->keys), cmp_str);
}

/* Read gc/pending.json (none: p->exists false). */
int remote_pending_read(struct remote *r, struct remote_pending *p)
{
	char key[S3_KEY_MAX];
	struct s3_object head;
	uint8_t *buf = NULL;
	size_t len;
	json_t *j = NULL, *objs, *v;
	json_error_t jerr;
	size_t i;
	int ret;

	memset(p, 0, sizeof(*p));
	remote_key(r, key, sizeof(key), "gc/pending.json");
	ret = s3_head(r->s3, key, &head);
	if (ret == -ENOENT)
		return 0;
	if (!ret)
		ret = s3_get(r->s3, key, PENDING_MAX_BYTES, &buf, &len);
	if (ret == -ENOENT)
		return 0;
	if (ret)
		return ret;
	j = json_loadb((const char *)buf, len, 0, &jerr);
	objs = json_object_get(j, "objects");
	if (!json_is_object(j) || !json_is_array(objs) ||
	    !json_is_integer(json_object_get(j, "marked_ms"))) {
		pr_err("%s is damaged: %s; remove it to start gc afresh", key,
		       j ? "not the shape gc writes" : jerr.text);
		ret = -EBADMSG;
		goto out;
	}
	p->keys = calloc(json_array_size(objs) + 1, sizeof(*p->keys));
	if (!p->keys) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(objs, i, v)
	{
		if (!json_is_string(v) || !(p->keys[p->n] = strdup(json_string_value(v)))) {
			ret = json_is_string(v) ? -ENOMEM : -EBADMSG;
			goto out;
		}
		p->n++;
	}
	qsort(p->keys, p->n, sizeof(*p->keys), cmp_str);
	p->exists = true;
	snprintf(p->etag, sizeof(p->etag), "%s", head.etag);
	p->sweeping = json_is_true(json_object_get(j, "sweeping"));
	p->marked_ms = json_integer_value(json_object_get(j, "marked_ms"));
	p->grace_s = (int)json_integer_value(json_object_get(j, "grace_s"));
out:
	if (ret)
		remote_pending_release(p);
	json_decref(j);
	free(buf);
	return ret;
}

struct objects {
	struct s3_object *v;
	size_t n, cap;
	const char *skip1, *skip2; /* prefixes gc never touches */
};

static int collect_object(const struct s3_object *o, void *arg)
{
	struct objects *l = arg;

	if (!strncmp(o->key, l->skip1, strlen(l->skip1)) ||
	    !strncmp(o->key, l->skip2, strlen(l->skip2)))
		return 0;
	if (ARRAY_GROW(l->v, l->cap, l->n + 1, 256))
		return -ENOMEM;
	l->v[l->n++] = *o;
	return 0;
}

/* Every key a ref reaches: refs' manifests, and the packs holding any of
 * their chunks (with their indexes). */
struct reach {
	char **keys;
	size_t n, cap;
	uint64_t refs;
};

static int reach_add(struct reach *rc, const char *key)
{
	if (ARRAY_GROW(rc->keys, rc->cap, rc->n + 1, 256))
		return -ENOMEM;
	return (rc->keys[rc->n] = strdup(key)) ? (rc->n++, 0) : -ENOMEM;
}

static void reach_release(struct reach *rc)
{
	for (size_t i = 0; i < rc->n; i++)
		free(rc->keys[i]);
	free(rc->keys);
	memset(rc, 0, sizeof(*rc));
}

static int reachable(struct remote *r, struct reach *rc)
{
	json_t *refs = NULL, *e;
	struct hash_set live;
	struct rindex x;
	char key[S3_KEY_MAX];
	size_t i;
	int ret;

	memset(rc, 0, sizeof(*rc));
	memset(&x, 0, sizeof(x));
	hash_set_init(&live);
	/* Refs first, then the packs: a pack written after the listing of refs
	 * is newer than any mark this gc makes, so it is never deleted as a
	 * result of this view. */
	if ((ret = remote_list_refs(r, &refs)))
		goto out;
	json_array_foreach(refs, i, e)
	{
		struct manifest *m = NULL;
		const char *id = json_string_value(json_object_get(e, "manifest"));
		rc->refs++;
		ret = remote_fetch_manifest(r, id, &m);
		if (ret) {
			char why[1024];
			snprintf(why, sizeof(why), "%s", log_last_error());
			pr_err("function %s: %s; gc stops, deleting nothing",
			       json_string_value(json_object_get(e, "function")), why);
			goto out;
		}
		for (size_t f = 0; f < m->nfiles && !ret; f++)
			for (size_t k = 0; k < m->files[f].nchunks && !ret; k++)
				if (!m->files[f].chunks[k].zero &&
				    hash_set_add(&live, m->files[f].chunks[k].hash) < 0)
					ret = -ENOMEM;
		manifest_free(m);
		if (!ret)
			ret = reach_add(rc, remote_key(r, key, sizeof(key), "manifests/%s", id + 7));
		if (ret)
			goto out;
	}
	if ((ret = remote_index_load(r, NULL, &x)))
		goto out;
	for (size_t p = 0; p < x.npacks && !ret; p++) {
		bool used = false;
		for (size_t k = 0; k < x.packs[p].n && !used; k++)
			used = hash_set_has(&live, x.packs[p].e[k].hash);
		if (!used)
			continue;
		remote_pack_key(r, &x.packs[p], "pack", key, sizeof(key));
		ret = reach_add(rc, key);
		remote_pack_key(r, &x.packs[p], "idx", key, sizeof(key));
		if (!ret)
			ret = reach_add(rc, key);
	}
	if (!ret && rc->n)
		qsort(rc->keys, rc->n, sizeof(*rc->keys), cmp_str);
out:
	json_decref(refs);
	remote_index_release(&x);
	hash_set_release(&live);
	if (ret)
		reach_release(rc);
	return ret;
}

static bool reach_has(const struct reach *rc, const char *key)
{
	return rc->n && bsearch(&key, rc->keys, rc->n, sizeof(*rc->keys), cmp_str);
}

/* Every object gc may delete (packs/, manifests/), with its size and age. */
static int list_collectable(struct remote *r, struct objects *all)
{
	char k1[S3_KEY_MAX], k2[S3_KEY_MAX], pre[S3_KEY_MAX];

	memset(all, 0, sizeof(*all));
	all->skip1 = remote_key(r, k1, sizeof(k1), "refs/");
	all->skip2 = remote_key(r, k2, sizeof(k2), "gc/");
	int ret = s3_list(r->s3, remote_key(r, pre, sizeof(pre), "packs/"), collect_object, all);
	if (!ret)
		ret = s3_list(r->s3, remote_key(r, pre, sizeof(pre), "manifests/"), collect_object, all);
	all->skip1 = all->skip2 = NULL;
	return ret;
}

static int pending_write(struct remote *r, const char *const *keys, size_t n, int64_t marked_ms,
			 int grace_s, bool sweeping)
{
	json_t *objs = json_array(), *j;
	char key[S3_KEY_MAX], *text;
	int ret;

	for (size_t i = 0; objs && i < n; i++)
		if (json_array_append_new(objs, json_string(keys[i]))) {
			json_decref(objs);
			objs = NULL;
		}
	j = objs ? json_pack("{s:i, s:I, s:i, s:b, s:o}", "version", 1, "marked_ms",
			     (json_int_t)marked_ms, "grace_s", grace_s, "sweeping", sweeping,
			     "objects", objs)
		 : NULL;
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return -ENOMEM;
	struct s3_source src = { .buf = text, .fd = -1, .len = strlen(text) };
	ret = s3_put(r->s3, remote_key(r, key, sizeof(key), "gc/pending.json"), &src);
	free(text);
	return ret;
}

/* Delete what the mark pd lists that is still unreachable and not written
 * since the mark; an index before its pack. */
static int sweep(struct remote *r, const struct remote_pending *pd, const struct reach *rc,
		 const struct objects *all, struct remote_gc_stats *st)
{
	int ret = 0;

	for (int pass = 0; pass < 2 && !ret; pass++)
		for (size_t i = 0; i < all->n && !ret; i++) {
			const struct s3_object *o = &all->v[i];
			size_t n = strlen(o->key);
			bool idx = n > 4 && !strcmp(o->key + n - 4, ".idx");
			if ((pass == 0) != idx)
				continue;
			if (!remote_pending_has(pd, o->key) || reach_has(rc, o->key) ||
			    o->mtime_ms >= pd->marked_ms)
				continue;
			ret = s3_delete(r->s3, o->key);
			if (!ret) {
				st->deleted++;
				st->deleted_bytes += o->size;
				pr_info("gc: deleted %s", o->key);
			}
		}
	return ret;
}

int remote_gc(struct remote *r, int grace_s, bool dry_run, struct remote_gc_stats *stats)
{
	struct remote_gc_stats st = { 0 };
	struct remote_pending pd = { 0 };
	struct reach rc = { 0 };
	struct objects all = { 0 };
	char **cand = NULL;
	size_t ncand = 0;
	int ret;

	if (grace_s < 0)
		grace_s = REMOTE_GC_GRACE_S;
	if ((ret = remote_pending_read(r, &pd)))
		goto out;
	int64_t now = s3_server_time_ms(r->s3);
	if (pd.exists && !pd.sweeping) {
		int64_t age_s = (now - pd.marked_ms) / 1000;
		int need = MAX(grace_s, pd.grace_s);
		if (age_s < need) {
			st.wait_s = need - age_s;
			st.marked = pd.n;
			goto out; /* the mark stands until its grace is over */
		}
		/* Tell pushes that a sweep is on, before looking at what to delete. */
		if (!dry_run &&
		    (ret = pending_write(r, (const char *const *)pd.keys, pd.n, pd.marked_ms,
					 pd.grace_s, true)))
			goto out;
	}
	if ((ret = reachable(r, &rc)) || (ret = list_collectable(r, &all)))
		goto out;
	/* The server's clock when the listing answered: anything written later
	 * is newer than this mark. */
	int64_t mark_ms = s3_server_time_ms(r->s3);
	st.refs = rc.refs;
	if (pd.exists && !dry_run && (ret = sweep(r, &pd, &rc, &all, &st)))
		goto out;
	cand = calloc(all.n + 1, sizeof(*cand));
	if (!cand) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < all.n; i++) {
		if (reach_has(&rc, all.v[i].key)) {
			st.kept++;
			continue;
		}
		/* Deleted by this sweep: not marked again. */
		if (pd.exists && !dry_run && remote_pending_has(&pd, all.v[i].key) &&
		    all.v[i].mtime_ms < pd.marked_ms)
			continue;
		cand[ncand++] = all.v[i].key;
	}
	st.marked = ncand;
	if (!dry_run)
		ret = pending_write(r, (const char *const *)cand, ncand, mark_ms, grace_s, false);
out:
	if (stats)
		*stats = st;
	free(cand);
	free(all.v);
	reach_release(&rc);
	remote_pending_release(&pd);
	return ret;
}

