/* SPDX-License-Identifier: Apache-2.0 */
/* registry.c — see registry.h. */
#define LOG_PREFIX "registry: "
#include "server/registry.h"
#include "common/log.h"
#include "common/util.h"
#include "function/confine.h"
#include "function/spec.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REGISTRY_VERSION  1
#define REGISTRY_FILE_MAX (4u << 20) /* a function file larger than this is damaged */

/* A mark on a function's current snapshot: when (RFC 3339) and what;
 * "" and NULL when there is none.  In its file as {"at", KEY} (KEY "what"
 * of "damaged", "why" of "unrestorable"). */
struct snap_mark {
	char at[32];
	char *what;
};

struct entry {
	char id[64];
	json_t *spec;
	enum snap_state state;      /* of the latest snapshot attempt */
	/* The snapshot starts use: "" when there is none.  It stays through a
	 * re-snapshot (building, or failed) until a new one is complete. */
	char snap_id[CHUNK_ID_LEN];
	char *error;
	char job[64];
	uint64_t image_bytes, stored_bytes;
	json_t *timings; /* NULL if none */
	/* The current snapshot's stored data failed a start (registry.h). */
	struct snap_mark damaged;
	/* The current snapshot cannot serve starts (registry.h). */
	struct snap_mark unrestorable;
	/* Being deleted (registry_delete_begin): gone to clients, recorded in
	 * its file until the delete is done.  claimed: a request of this
	 * thawd is doing it now (not recorded). */
	bool deleting, claimed;
};

struct registry {
	pthread_mutex_t lock;
	char dir[PATH_MAX];
	char real[PATH_MAX]; /* dir, symlinks resolved: what the snapshot tags name */
	struct entry **e;
	size_t n, cap;
};

static const char *const state_names[] = { "none", "building", "ready", "failed" };

const char *snap_state_name(enum snap_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "none";
}

static int state_parse(const char *s, enum snap_state *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(state_names); i++) {
		if (s && !strcmp(s, state_names[i])) {
			*out = (enum snap_state)i;
			return 0;
		}
	}
	return -EINVAL;
}

static void entry_free(struct entry *e)
{
	if (!e)
		return;
	json_decref(e->spec);
	json_decref(e->timings);
	free(e->error);
	free(e->damaged.what);
	free(e->unrestorable.what);
	free(e);
}

static void mark_clear(struct snap_mark *m)
{
	m->at[0] = '\0';
	free(m->what);
	m->what = NULL;
}

/* m as its file and GET /functions/<id> show it, its text under key; null
 * when it is not set. */
static json_t *mark_json(const struct snap_mark *m, const char *key)
{
	return m->what ? json_pack("{s:s, s:s}", "at", m->at, key, m->what) : json_null();
}

/* m from v, its form in a function's file: 0 (a mark without either part
 * is dropped), or -ENOMEM. */
static int mark_load(struct snap_mark *m, const json_t *v, const char *key)
{
	if (!json_is_string(json_object_get(v, key)) || !json_is_string(json_object_get(v, "at")))
		return 0;
	snprintf(m->at, sizeof(m->at), "%s", json_string_value(json_object_get(v, "at")));
	m->what = strdup(json_string_value(json_object_get(v, key)));
	return m->what ? 0 : -ENOMEM;
}

/* The current snapshot is no longer marked damaged, nor unrestorable (a
 * new one, or none). */
static void entry_clear_damaged(struct entry *e)
{
	mark_clear(&e->damaged);
	mark_clear(&e->unrestorable);
}

/* Forget the snapshot state of e (back to "none"). */
static void entry_clear_snapshot(struct entry *e)
{
	e->state = SNAP_NONE;
	e->snap_id[0] = '\0';
	free(e->error);
	e->error = NULL;
	e->job[0] = '\0';
	e->image_bytes = e->stored_bytes = 0;
	json_decref(e->timings);
	e->timings = NULL;
	entry_clear_damaged(e);
}

static json_t *str_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

static json_t *snapshot_json(const struct entry *e)
{
	json_t *timings = e->timings ? json_deep_copy(e->timings) : json_null();
	json_t *damaged = mark_json(&e->damaged, "what");
	json_t *unrestorable = mark_json(&e->unrestorable, "why");

	/* json_pack's "o" steals the references it is given, also on failure. */
	return json_pack("{s:s, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o}", "state",
			 snap_state_name(e->state), "id", str_or_null(e->snap_id), "error",
			 str_or_null(e->error), "job", str_or_null(e->job), "image_bytes",
			 (json_int_t)e->image_bytes, "stored_bytes", (json_int_t)e->stored_bytes,
			 "timings_ms", timings, "damaged", damaged, "unrestorable", unrestorable);
}

/* What GET /functions/<id> answers: the spec's fields plus "snapshot". */
static json_t *entry_api_json(const struct entry *e)
{
	json_t *j = json_deep_copy(e->spec), *snap = snapshot_json(e);

	if (!j || !snap || json_object_set_new(j, "id", json_string(e->id)) ||
	    json_object_set_new(j, "snapshot", snap)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* Write e's file.  Called with the lock held, so that two writers of one
 * file (whose temp name is per process) never meet. */
static int entry_persist(struct registry *r, const struct entry *e)
{
	char path[PATH_MAX + 80];
	json_t *spec = json_deep_copy(e->spec), *snap = snapshot_json(e);
	json_t *j = NULL;
	char *text = NULL;
	int ret = -ENOMEM;

	if (!spec || !snap) {
		json_decref(spec);
		json_decref(snap);
		goto out;
	}
	j = json_pack("{s:i, s:o, s:o}", "version", REGISTRY_VERSION, "spec", spec, "snapshot",
		      snap);
	if (!j || (e->deleting && json_object_set_new(j, "deleting", json_true())))
		goto out;
	text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (!text)
		goto out;
	if (snprintf(path, sizeof(path), "%s/%s.json", r->dir, e->id) >= (int)sizeof(path)) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	ret = write_file_atomic(path, text, strlen(text), 0600);
out:
	if (ret == -ENOMEM)
		pr_err("out of memory writing function %s", e->id);
	free(text);
	json_decref(j);
	return ret;
}

/* Function id, whether or not it is being deleted. */
static struct entry *find_any(struct registry *r, const char *id, size_t *idx)
{
	for (size_t i = 0; i < r->n; i++) {
		if (!strcmp(r->e[i]->id, id)) {
			if (idx)
				*idx = i;
			return r->e[i];
		}
	}
	return NULL;
}

/* Function id as clients see it: one being deleted is gone already. */
static struct entry *find(struct registry *r, const char *id)
{
	struct entry *e = find_any(r, id, NULL);

	return e && !e->deleting ? e : NULL;
}

static int add(struct registry *r, struct entry *e)
{
	if (ARRAY_GROW(r->e, r->cap, r->n + 1, 16))
		return -ENOMEM;
	r->e[r->n++] = e;
	return 0;
}

static bool snap_id_valid(const char *s)
{
	uint8_t h[CHUNK_HASH_LEN];

	return s && strlen(s) == CHUNK_ID_LEN - 1 && !strncmp(s, "sha256:", 7) &&
	       hex_decode(s + 7, h, CHUNK_HASH_LEN) == 0;
}

/* Parse one function file; NULL (logged) if it is damaged. */
static struct entry *entry_load(const char *path, const char *id)
{
	struct entry *e = NULL;
	json_t *j = NULL, *spec, *snap, *v;
	json_error_t jerr;
	char *buf = NULL;
	size_t len;
	int ret;

	ret = read_file(path, &buf, &len, REGISTRY_FILE_MAX);
	if (ret) {
		pr_warn("%s: %s; function %s skipped", path, strerror(-ret), id);
		return NULL;
	}
	j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		pr_warn("%s: line %d: %s; function %s skipped", path, jerr.line, jerr.text, id);
		goto bad;
	}
	spec = json_object_get(j, "spec");
	snap = json_object_get(j, "snapshot");
	if (!json_is_object(spec) || !json_is_object(snap) ||
	    json_integer_value(json_object_get(j, "version")) != REGISTRY_VERSION) {
		pr_warn("%s: not a version %d function file; function %s skipped", path,
			REGISTRY_VERSION, id);
		goto bad;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		goto bad;
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->spec = json_deep_copy(spec);
	if (!e->spec)
		goto bad;
	if (state_parse(json_string_value(json_object_get(snap, "state")), &e->state)) {
		pr_warn("%s: unknown snapshot state; function %s skipped", path, id);
		goto bad;
	}
	v = json_object_get(snap, "id");
	if (e->state == SNAP_READY || json_is_string(v)) {
		if (!snap_id_valid(json_string_value(v))) {
			pr_warn("%s: bad snapshot id; function %s skipped", path, id);
			goto bad;
		}
		snprintf(e->snap_id, sizeof(e->snap_id), "%s", json_string_value(v));
	}
	v = json_object_get(snap, "error");
	if (json_is_string(v) && !(e->error = strdup(json_string_value(v))))
		goto bad;
	v = json_object_get(snap, "job");
	if (json_is_string(v))
		snprintf(e->job, sizeof(e->job), "%s", json_string_value(v));
	v = json_object_get(snap, "image_bytes");
	e->image_bytes = json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
	v = json_object_get(snap, "stored_bytes");
	e->stored_bytes =
		json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
	v = json_object_get(snap, "timings_ms");
	if (json_is_object(v) && !(e->timings = json_deep_copy(v)))
		goto bad;
	/* A mark of damage belongs to a current snapshot; one without either
	 * part is dropped rather than the function. */
	if (e->snap_id[0] &&
	    (mark_load(&e->damaged, json_object_get(snap, "damaged"), "what") ||
	     mark_load(&e->unrestorable, json_object_get(snap, "unrestorable"), "why")))
		goto bad;
	e->deleting = json_is_true(json_object_get(j, "deleting"));
	json_decref(j);
	free(buf);
	return e;
bad:
	entry_free(e);
	json_decref(j);
	free(buf);
	return NULL;
}

static int load_all(struct registry *r)
{
	DIR *d = opendir(r->dir);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		ret = -errno;
		pr_perror("open %s", r->dir);
		return ret;
	}
	while ((de = readdir(d))) {
		char id[64], path[PATH_MAX];
		size_t l = strlen(de->d_name);
		struct entry *e;

		if (snprintf(path, sizeof(path), "%s/%s", r->dir, de->d_name) >= (int)sizeof(path))
			continue;
		if (strstr(de->d_name, ".json.tmp.")) {
			/* A write_file_atomic that a crash interrupted. */
			unlink(path);
			continue;
		}
		if (l <= 5 || strcmp(de->d_name + l - 5, ".json") || l - 5 >= sizeof(id))
			continue;
		memcpy(id, de->d_name, l - 5);
		id[l - 5] = '\0';
		if (!id_valid(id))
			continue;
		e = entry_load(path, id);
		if (!e)
			continue;
		if (e->state == SNAP_BUILDING) {
			pr_warn("function %s: its snapshot (job %s) was building when thawd stopped: "
				"marked failed",
				id, e->job[0] ? e->job : "?");
			e->state = SNAP_FAILED;
			free(e->error);
			e->error = strdup(REGISTRY_RESTART_REASON);
			entry_persist(r, e);
		}
		ret = add(r, e);
		if (ret) {
			entry_free(e);
			break;
		}
	}
	closedir(d);
	return ret;
}

struct registry *registry_open(const char *dir)
{
	struct registry *r = calloc(1, sizeof(*r));

	if (!r) {
		pr_err("out of memory");
		return NULL;
	}
	pthread_mutex_init(&r->lock, NULL);
	if (snprintf(r->dir, sizeof(r->dir), "%s", dir) >= (int)sizeof(r->dir)) {
		pr_err("path too long: %s", dir);
		goto err;
	}
	if (dir_make_private(dir))
		goto err;
	if (!realpath(dir, r->real))
		snprintf(r->real, sizeof(r->real), "%s", dir);
	if (load_all(r))
		goto err;
	pr_info("%zu functions in %s", r->n, dir);
	return r;
err:
	registry_free(r);
	return NULL;
}

void registry_free(struct registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		entry_free(r->e[i]);
	free(r->e);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Do specs a and b differ only in how instances are served (standbys,
 * lifetimes, limits)?  The snapshot is of what the function runs, which
 * those do not change. */
static bool same_but_serving(const json_t *a, const json_t *b)
{
	static const char *const serving[] = { "standby", "standby_gpu", "idle_s", "max_lifetime_s",
					       "stop_grace_s", "max_instances", "concurrency",
					       "queue", "queue_timeout_s", "on_restore_failure" };
	json_t *ca = json_copy((json_t *)a), *cb = json_copy((json_t *)b);
	bool same = ca && cb;

	if (same) {
		for (size_t i = 0; i < sizeof(serving) / sizeof(serving[0]); i++) {
			json_object_del(ca, serving[i]);
			json_object_del(cb, serving[i]);
		}
		same = json_equal(ca, cb);
	}
	json_decref(ca);
	json_decref(cb);
	return same;
}

int registry_put(struct registry *r, const char *id, const json_t *spec, bool *created,
		 char *forgot)
{
	return registry_put_get(r, id, spec, created, forgot, NULL);
}

int registry_put_get(struct registry *r, const char *id, const json_t *spec, bool *created,
		     char *forgot, json_t **out)
{
	struct entry *e, *fresh = NULL;
	json_t *copy = json_deep_copy(spec);
	int ret = 0;

	if (out)
		*out = NULL;
	if (forgot)
		forgot[0] = '\0';
	if (!copy)
		return -ENOMEM;
	pthread_mutex_lock(&r->lock);
	e = find_any(r, id, NULL);
	if (e && e->deleting) {
		ret = -EINPROGRESS;
		goto out;
	}
	if (e) {
		*created = false;
		if (e->state == SNAP_BUILDING) {
			ret = -EBUSY;
			goto out;
		}
		if (!json_equal(e->spec, copy)) {
			if (!same_but_serving(e->spec, copy)) {
				if (forgot)
					memcpy(forgot, e->snap_id, CHUNK_ID_LEN);
				entry_clear_snapshot(e);
			}
			json_decref(e->spec);
			e->spec = copy;
			copy = NULL;
		}
		ret = entry_persist(r, e);
		if (!ret && out && !(*out = entry_api_json(e)))
			ret = -ENOMEM;
		goto out;
	}
	*created = true;
	fresh = calloc(1, sizeof(*fresh));
	if (!fresh) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(fresh->id, sizeof(fresh->id), "%s", id);
	fresh->spec = copy;
	copy = NULL;
	ret = entry_persist(r, fresh);
	if (ret)
		goto out;
	ret = add(r, fresh);
	if (ret)
		goto out;
	if (out && !(*out = entry_api_json(fresh)))
		ret = -ENOMEM; /* recorded all the same: a retry's PUT finds it */
	fresh = NULL;
out:
	pthread_mutex_unlock(&r->lock);
	entry_free(fresh);
	json_decref(copy);
	return ret;
}

/* From an admission's check to its write, one at a time (registry_admit).
 * Not r->lock: the check reads the registry itself (c->registered). */
static pthread_mutex_t admit_lock = PTHREAD_MUTEX_INITIALIZER;

int registry_admit(struct registry *r, const struct thaw_config *c, const char *id,
		   const json_t *spec, bool *created, char *forgot, json_t **out, char *key,
		   size_t key_len, char *why, size_t why_len)
{
	int ret;

	if (out)
		*out = NULL;
	pthread_mutex_lock(&admit_lock);
	ret = function_spec_check(c, id, spec, key, key_len, why, why_len);
	if (!ret) {
		key[0] = '\0';
		ret = registry_put_get(r, id, spec, created, forgot, out);
	}
	pthread_mutex_unlock(&admit_lock);
	return ret;
}

int registry_get_json(struct registry *r, const char *id, json_t **out)
{
	struct entry *e;
	int ret = 0;

	*out = NULL;
	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e)
		ret = -ENOENT;
	else if (!(*out = entry_api_json(e)))
		ret = -ENOMEM;
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int registry_get_spec(struct registry *r, const char *id, struct func_spec **spec,
		      struct registry_snap *snap)
{
	char err[256];
	struct entry *e;
	int ret;

	*spec = NULL;
	if (snap)
		memset(snap, 0, sizeof(*snap));
	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e) {
		ret = -ENOENT;
		goto out;
	}
	/* Parsed under the lock (no I/O, microseconds): e->spec is replaced,
	 * and freed, by a PUT. */
	ret = spec_parse(e->spec, e->id, spec, err, sizeof(err));
	if (ret == -EINVAL)
		pr_err("function %s: its stored spec does not parse: %s", id, err);
	if (ret || !snap)
		goto out;
	snap->state = e->state;
	memcpy(snap->id, e->snap_id, CHUNK_ID_LEN);
	snap->image_bytes = e->image_bytes;
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp((*(struct entry *const *)a)->id, (*(struct entry *const *)b)->id);
}

/* The functions (not those being deleted), in the order of their ids, each
 * as item makes it, into *out: 0 or -ENOMEM. */
static int list_json(struct registry *r, json_t *(*item)(const struct entry *e), json_t **out)
{
	json_t *arr = json_array();
	int ret = 0;

	*out = NULL;
	if (!arr)
		return -ENOMEM;
	pthread_mutex_lock(&r->lock);
	if (r->n) /* r->e is NULL with no function, and qsort's may not be */
		qsort(r->e, r->n, sizeof(*r->e), cmp_entry);
	for (size_t i = 0; i < r->n && !ret; i++) {
		if (!r->e[i]->deleting && json_array_append_new(arr, item(r->e[i])))
			ret = -ENOMEM;
	}
	pthread_mutex_unlock(&r->lock);
	if (ret) {
		json_decref(arr);
		return ret;
	}
	*out = arr;
	return 0;
}

int registry_list_json(struct registry *r, json_t **out)
{
	return list_json(r, entry_api_json, out);
}

int registry_specs(void *arg, json_t **out)
{
	struct registry *r = arg;
	json_t *all = json_object();
	int ret = all ? 0 : -ENOMEM;

	*out = NULL;
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < r->n && !ret; i++)
		if (!r->e[i]->deleting && json_object_set(all, r->e[i]->id, r->e[i]->spec))
			ret = -ENOMEM;
	pthread_mutex_unlock(&r->lock);
	if (ret)
		json_decref(all);
	else
		*out = all;
	return ret;
}

int registry_delete(struct registry *r, const char *id, char *forgot)
{
	char path[PATH_MAX + 80];
	struct entry *e;
	size_t idx;
	int ret = 0;

	if (forgot)
		forgot[0] = '\0';
	pthread_mutex_lock(&r->lock);
	e = find_any(r, id, &idx);
	if (!e) {
		ret = -ENOENT;
		goto out;
	}
	snprintf(path, sizeof(path), "%s/%s.json", r->dir, id);
	if (unlink(path) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("remove %s", path);
		goto out;
	}
	fsync_dir(r->dir);
	if (forgot)
		memcpy(forgot, e->snap_id, CHUNK_ID_LEN);
	r->e[idx] = r->e[--r->n];
	entry_free(e);
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int registry_delete_begin(struct registry *r, const char *id, char *forgot)
{
	struct entry *e;
	int ret = 0;

	if (forgot)
		forgot[0] = '\0';
	pthread_mutex_lock(&r->lock);
	e = find_any(r, id, NULL);
	if (!e) {
		ret = -ENOENT;
		goto out;
	}
	if (e->claimed) {
		ret = -EALREADY;
		goto out;
	}
	if (!e->deleting) {
		e->deleting = true;
		ret = entry_persist(r, e);
		if (ret) {
			e->deleting = false;
			goto out;
		}
	}
	e->claimed = true;
	if (forgot)
		memcpy(forgot, e->snap_id, CHUNK_ID_LEN);
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

void registry_delete_release(struct registry *r, const char *id)
{
	struct entry *e;

	pthread_mutex_lock(&r->lock);
	e = find_any(r, id, NULL);
	if (e)
		e->claimed = false;
	pthread_mutex_unlock(&r->lock);
}

static json_t *entry_id_json(const struct entry *e)
{
	return json_string(e->id);
}

int registry_list_ids(struct registry *r, json_t **out)
{
	return list_json(r, entry_id_json, out);
}

int registry_functions(struct registry *r, bool deleting, struct registry_fn **fns, size_t *n)
{
	struct registry_fn *f;
	size_t k = 0;

	*fns = NULL;
	*n = 0;
	pthread_mutex_lock(&r->lock);
	f = calloc(r->n ? r->n : 1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&r->lock);
		return -ENOMEM;
	}
	if (r->n)
		qsort(r->e, r->n, sizeof(*r->e), cmp_entry);
	for (size_t i = 0; i < r->n; i++) {
		if (r->e[i]->deleting != deleting)
			continue;
		snprintf(f[k].id, sizeof(f[k].id), "%s", r->e[i]->id);
		memcpy(f[k].snap, r->e[i]->snap_id, CHUNK_ID_LEN);
		k++;
	}
	pthread_mutex_unlock(&r->lock);
	*fns = f;
	*n = k;
	return 0;
}

struct snapshot_tag registry_snapshot_tag(struct registry *r, const char *id, const char *job_id)
{
	return (struct snapshot_tag){ .registry = r->real, .function = id, .job = job_id };
}

bool registry_snapshot_orphan(struct registry *r, const char *snapshot_id,
			      const struct snapshot_tag *tag)
{
	const char *reg = tag->registry, *fn = tag->function, *job = tag->job;
	char path[PATH_MAX + 80];
	struct entry *e;
	bool orphan = false;

	/* Another registry's (a thawd of another data directory sharing the
	 * store), or not a tag at all: not this registry's to judge. */
	if (!reg || !fn || strcmp(reg, r->real) || !id_valid(fn))
		return false;
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < r->n; i++) {
		if (!strcmp(r->e[i]->snap_id, snapshot_id))
			goto out;
	}
	e = find_any(r, fn, NULL);
	/* Its own snapshot in the making: between the manifest's write and
	 * registry_snapshot_end. */
	if (e && e->state == SNAP_BUILDING && job && !strcmp(e->job, job))
		goto out;
	/* A function file that could not be read: what it names is unknown. */
	snprintf(path, sizeof(path), "%s/%s.json", r->dir, fn);
	if (!e && access(path, F_OK) == 0)
		goto out;
	orphan = true;
out:
	pthread_mutex_unlock(&r->lock);
	return orphan;
}

bool registry_exists(struct registry *r, const char *id)
{
	bool yes;

	pthread_mutex_lock(&r->lock);
	yes = find(r, id) != NULL;
	pthread_mutex_unlock(&r->lock);
	return yes;
}

int registry_snapshot_begin(struct registry *r, const char *id, const char *job_id,
			    json_t **spec)
{
	enum snap_state was;
	struct entry *e;
	int ret = 0;

	*spec = NULL;
	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e) {
		ret = -ENOENT;
		goto out;
	}
	if (e->state == SNAP_BUILDING) {
		ret = -EBUSY;
		goto out;
	}
	*spec = json_deep_copy(e->spec);
	if (!*spec) {
		ret = -ENOMEM;
		goto out;
	}
	/* The current snapshot (if any) stays, and serves starts, until the
	 * new one is complete: a failed or killed re-snapshot leaves it. */
	was = e->state;
	e->state = SNAP_BUILDING;
	free(e->error);
	e->error = NULL;
	snprintf(e->job, sizeof(e->job), "%s", job_id);
	ret = entry_persist(r, e);
	if (ret) {
		e->state = was;
		json_decref(*spec);
		*spec = NULL;
	}
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int registry_snapshot_end(struct registry *r, const char *id, const char *job_id,
			  const char *snapshot_id, uint64_t image_bytes, uint64_t stored_bytes,
			  const json_t *timings_ms, const char *error, char *forgot)
{
	struct entry *e;
	int ret = 0;

	if (forgot)
		forgot[0] = '\0';
	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e || e->state != SNAP_BUILDING || strcmp(e->job, job_id)) {
		ret = -ENOENT;
		goto out;
	}
	free(e->error);
	e->error = NULL;
	if (snapshot_id) {
		/* The one it replaces is the caller's to drop (never itself). */
		if (forgot && strcmp(e->snap_id, snapshot_id))
			memcpy(forgot, e->snap_id, CHUNK_ID_LEN);
		json_decref(e->timings);
		e->timings = timings_ms ? json_deep_copy(timings_ms) : NULL;
		if (strcmp(e->snap_id, snapshot_id))
			entry_clear_damaged(e);
		e->state = SNAP_READY;
		snprintf(e->snap_id, sizeof(e->snap_id), "%s", snapshot_id);
		e->image_bytes = image_bytes;
		e->stored_bytes = stored_bytes;
	} else {
		e->state = SNAP_FAILED;
		e->error = strdup(error && *error ? error : "snapshot failed");
	}
	ret = entry_persist(r, e);
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

/* Mark function id's snapshot snapshot_id with what, stamped now: the
 * unrestorable mark if unrestorable (its first reason stays), else the
 * damaged one (the latest stays).  0, -ENOENT (no such function, or
 * another snapshot), -ENOMEM, or the write's error. */
static int snapshot_mark(struct registry *r, const char *id, const char *snapshot_id,
			 bool unrestorable, const char *what)
{
	char at[32], *copy = strdup(what);
	time_t now = time(NULL);
	struct snap_mark *m;
	struct tm tm;
	struct entry *e;
	int ret = 0;

	if (!copy)
		return -ENOMEM;
	if (!gmtime_r(&now, &tm) || !strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(at, sizeof(at), "1970-01-01T00:00:00Z");
	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e || strcmp(e->snap_id, snapshot_id)) {
		ret = -ENOENT;
		goto out;
	}
	m = unrestorable ? &e->unrestorable : &e->damaged;
	if (unrestorable && m->what)
		goto out; /* marked already: the first reason stays */
	free(m->what);
	m->what = copy;
	copy = NULL;
	snprintf(m->at, sizeof(m->at), "%s", at);
	ret = entry_persist(r, e);
out:
	pthread_mutex_unlock(&r->lock);
	free(copy);
	return ret;
}

int registry_snapshot_damaged(struct registry *r, const char *id, const char *snapshot_id,
			      const char *what)
{
	return snapshot_mark(r, id, snapshot_id, false, what && *what ? what : "damaged");
}

int registry_snapshot_unrestorable(struct registry *r, const char *id, const char *snapshot_id,
				   const char *why)
{
	return snapshot_mark(r, id, snapshot_id, true,
			     why && *why ? why : "it cannot be restored");
}

bool registry_unrestorable(struct registry *r, const char *id, const char *snapshot_id,
			   char *why, size_t len)
{
	struct entry *e;
	bool yes;

	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	yes = e && e->unrestorable.what && !strcmp(e->snap_id, snapshot_id);
	if (yes && why && len)
		snprintf(why, len, "%s", e->unrestorable.what);
	pthread_mutex_unlock(&r->lock);
	return yes;
}

int registry_ready_snapshot(struct registry *r, const char *id, char out[CHUNK_ID_LEN],
			    enum snap_state *state)
{
	struct entry *e;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	e = find(r, id);
	if (!e) {
		ret = -ENOENT;
	} else {
		if (state)
			*state = e->state;
		if (e->snap_id[0])
			memcpy(out, e->snap_id, CHUNK_ID_LEN);
		else
			ret = -ENODATA;
	}
	pthread_mutex_unlock(&r->lock);
	return ret;
}
