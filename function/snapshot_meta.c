/* SPDX-License-Identifier: Apache-2.0 */
/* snapshot_meta.c — see snapshot_meta.h. */
#include "function/snapshot_meta.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parse under way: the first failure's words. */
struct rd {
	char *why;
	size_t len;
	int err;
};

__attribute__((format(printf, 2, 3))) static void bad(struct rd *r, const char *fmt, ...)
{
	va_list ap;

	if (r->err)
		return;
	r->err = -EBADMSG;
	if (!r->len)
		return;
	va_start(ap, fmt);
	vsnprintf(r->why, r->len, fmt, ap);
	va_end(ap);
}

static void out_of_memory(struct rd *r)
{
	if (r->err)
		return;
	r->err = -ENOMEM;
	if (r->len)
		snprintf(r->why, r->len, "out of memory");
}

/* Member key of o; NULL when absent or null.  In the getters below, where
 * names o in an error ("gpus[1]."; "" for the meta itself). */
static const json_t *member(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_null(v) ? NULL : v;
}

static const char *get_str(struct rd *r, const json_t *o, const char *where, const char *key)
{
	const json_t *v = member(o, key);

	if (v && !json_is_string(v))
		bad(r, "%s\"%s\" is not a string", where, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool get_bool(struct rd *r, const json_t *o, const char *where, const char *key)
{
	const json_t *v = member(o, key);

	if (v && !json_is_boolean(v))
		bad(r, "%s\"%s\" is not true or false", where, key);
	return json_is_true(v);
}

/* A count of something (bytes, pages): a non-negative integer; *have says
 * whether it was there. */
static uint64_t get_count(struct rd *r, const json_t *o, const char *where, const char *key,
			  bool *have)
{
	const json_t *v = member(o, key);

	if (have)
		*have = false;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		bad(r, "%s\"%s\" is not a non-negative integer", where, key);
		return 0;
	}
	if (have)
		*have = true;
	return (uint64_t)json_integer_value(v);
}

/* The first of keys present with a figure above 0 (the names one figure has
 * had); each present must be a count. */
static uint64_t get_aliased(struct rd *r, const json_t *o, const char *where,
			    const char *const *keys, size_t n)
{
	uint64_t got = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t v = get_count(r, o, where, keys[i], NULL);

		if (!got)
			got = v;
	}
	return got;
}

static const json_t *get_object(struct rd *r, const json_t *o, const char *where, const char *key)
{
	const json_t *v = member(o, key);

	if (v && !json_is_object(v)) {
		bad(r, "%s\"%s\" is not an object", where, key);
		return NULL;
	}
	return v;
}

static const json_t *get_array(struct rd *r, const json_t *o, const char *where, const char *key)
{
	const json_t *v = member(o, key);

	if (v && !json_is_array(v)) {
		bad(r, "%s\"%s\" is not an array", where, key);
		return NULL;
	}
	return v;
}

/* A list of pids (positive integers) into a new array *out (NULL when
 * empty). */
static void get_pids(struct rd *r, const json_t *a, const char *name, pid_t **out, size_t *n)
{
	const json_t *v;
	size_t i;

	*out = NULL;
	*n = 0;
	if (!json_array_size(a))
		return;
	*out = calloc(json_array_size(a), sizeof(**out));
	if (!*out) {
		out_of_memory(r);
		return;
	}
	json_array_foreach(a, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
		    json_integer_value(v) > INT32_MAX) {
			bad(r, "%s[%zu] is not a process id", name, i);
			return;
		}
		(*out)[(*n)++] = (pid_t)json_integer_value(v);
	}
}

static const char *const used_names[] = { "used_bytes", "memory_used_bytes", "gpu_bytes",
					  "used" };
static const char *const total_names[] = { "gpu_used_bytes", "gpu_bytes", "gpu_memory_bytes" };

static void parse_gpus(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *a = get_array(r, meta, "", "gpus"), *g;
	struct snapshot_gpu *gpus;
	char where[32];
	size_t i;

	sm->gpu_used_bytes = get_aliased(r, meta, "", total_names, ARRAY_SIZE(total_names));
	if (!json_array_size(a))
		return;
	sm->gpus = gpus = calloc(json_array_size(a), sizeof(*gpus));
	if (!gpus) {
		out_of_memory(r);
		return;
	}
	json_array_foreach(a, i, g) {
		struct snapshot_gpu *d = &gpus[sm->ngpus++];
		bool have;
		uint64_t v;

		d->index = -1;
		if (json_is_string(g)) { /* the first snapshots: its UUID only */
			d->uuid = json_string_value(g);
			continue;
		}
		snprintf(where, sizeof(where), "gpus[%zu].", i);
		if (!json_is_object(g)) {
			bad(r, "gpus[%zu] is neither an object nor a UUID", i);
			return;
		}
		d->uuid = get_str(r, g, where, "uuid");
		d->name = get_str(r, g, where, "name");
		d->total_bytes = get_count(r, g, where, "total_bytes", NULL);
		d->used_bytes = get_aliased(r, g, where, used_names, ARRAY_SIZE(used_names));
		v = get_count(r, g, where, "index", &have);
		if (have && v > INT32_MAX)
			bad(r, "%s\"index\" is out of range", where);
		else if (have)
			d->index = (int)v;
	}
}

/* "cuda_processes", or where it is absent, what "cuda_pids" and
 * "cuda_ns_pids" say of the same processes. */
static void parse_cuda(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *procs = get_array(r, meta, "", "cuda_processes"), *p, *g;
	struct snapshot_cuda_process *cp;
	pid_t *pids = NULL, *ns = NULL;
	size_t npids = 0, nns = 0, i, k;
	char where[40];

	get_pids(r, get_array(r, meta, "", "cuda_pids"), "cuda_pids", &pids, &npids);
	get_pids(r, get_array(r, meta, "", "cuda_ns_pids"), "cuda_ns_pids", &ns, &nns);
	if (r->err)
		goto out;
	if (!procs) {
		if (!npids)
			goto out;
		sm->cuda_processes = cp = calloc(npids, sizeof(*cp));
		if (!cp) {
			out_of_memory(r);
			goto out;
		}
		for (i = 0; i < npids; i++)
			cp[i] = (struct snapshot_cuda_process){
				.pid = pids[i], .ns_pid = i < nns ? ns[i] : 0 };
		sm->ncuda_processes = npids;
		goto out;
	}
	if (!json_array_size(procs))
		goto out;
	sm->cuda_processes = cp = calloc(json_array_size(procs), sizeof(*cp));
	if (!cp) {
		out_of_memory(r);
		goto out;
	}
	json_array_foreach(procs, i, p) {
		struct snapshot_cuda_process *c = &cp[sm->ncuda_processes++];
		const json_t *held;
		uint64_t v;

		snprintf(where, sizeof(where), "cuda_processes[%zu].", i);
		if (!json_is_object(p)) {
			bad(r, "cuda_processes[%zu] is not an object", i);
			goto out;
		}
		v = get_count(r, p, where, "pid", NULL);
		c->pid = v <= INT32_MAX ? (pid_t)v : 0;
		if (c->pid <= 0)
			bad(r, "%s\"pid\" is not a process id", where);
		v = get_count(r, p, where, "ns_pid", NULL);
		c->ns_pid = v <= INT32_MAX ? (pid_t)v : 0;
		held = get_array(r, p, where, "gpus");
		json_array_foreach(held, k, g) {
			if (!json_is_integer(g) || json_integer_value(g) < 0 ||
			    json_integer_value(g) >= 64 ||
			    (size_t)json_integer_value(g) >= sm->ngpus) {
				bad(r, "%s\"gpus\"[%zu] is not one of the snapshot's GPUs", where, k);
				goto out;
			}
			c->gpus |= 1ull << json_integer_value(g);
		}
	}
out:
	free(pids);
	free(ns);
}

static void parse_gpu_memory(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *gm = get_object(r, meta, "", "gpu_memory");
	struct snapshot_gpu_memory *m = &sm->gpu_memory;
	const char *where = "gpu_memory.", *mode;
	pid_t *ns = NULL;

	if (!gm)
		return;
	m->recorded = true;
	mode = get_str(r, gm, where, "mode");
	if (mode && strcmp(mode, "thaw") && strcmp(mode, "driver"))
		bad(r, "gpu_memory.\"mode\" is \"%s\", neither \"thaw\" nor \"driver\"", mode);
	m->thaw = mode && !strcmp(mode, "thaw");
	m->why = get_str(r, gm, where, "why");
	m->mount = get_bool(r, gm, where, "mount");
	m->bytes = get_count(r, gm, where, "bytes", NULL);
	m->allocs = get_count(r, gm, where, "allocs", NULL);
	m->left_bytes = get_count(r, gm, where, "left_bytes", NULL);
	get_pids(r, get_array(r, gm, where, "ns_pids"), "gpu_memory.ns_pids", &ns, &m->nns_pids);
	m->ns_pids = ns;
}

static void parse_image(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *im = get_object(r, meta, "", "image");
	const char *where = "image.";

	if (!im)
		return;
	sm->image.reference = get_str(r, im, where, "reference");
	sm->image.digest = get_str(r, im, where, "digest");
	sm->image.bundle = get_str(r, im, where, "bundle");
	if (!r->err && (!sm->image.reference || !sm->image.digest))
		bad(r, "\"image\" lacks its \"%s\"", sm->image.reference ? "digest" : "reference");
}

static void parse_userns(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *u = get_object(r, meta, "", "userns");
	uint64_t base, size;

	if (!u)
		return;
	base = get_count(r, u, "userns.", "uid", NULL);
	size = get_count(r, u, "userns.", "size", NULL);
	if (!r->err && (!size || base + size > 0xffffffffull))
		bad(r, "\"userns\" is not a range of host uids");
	sm->userns_base = (uint32_t)base;
	sm->userns_size = (uint32_t)size;
}

static void parse_versions(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *v = get_object(r, meta, "", "versions"), *drv;
	const char *where = "versions.";

	if (!v)
		return;
	sm->versions.kernel = get_str(r, v, where, "kernel");
	sm->versions.runc = get_str(r, v, where, "runc");
	sm->versions.criu = get_str(r, v, where, "criu");
	drv = member(v, "driver");
	if (drv && !json_is_integer(drv))
		bad(r, "versions.\"driver\" is not an integer");
	sm->versions.driver = json_is_integer(drv) ? json_integer_value(drv) : 0;
}

static void parse_spec(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *spec = get_object(r, meta, "", "spec");
	struct func_spec *s = NULL;

	sm->spec_err = -ENOENT;
	if (!spec)
		return;
	sm->spec_err = spec_parse(spec, NULL, &s, sm->spec_why, sizeof(sm->spec_why));
	sm->spec = s;
	sm->gpu = s && s->gpu;
}

static void parse_timings(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *t = get_object(r, meta, "", "timings_ms"), *v;
	const char *key;

	json_object_foreach((json_t *)t, key, v) {
		if (!json_is_number(v)) {
			bad(r, "timings_ms.\"%s\" is not a number", key);
			return;
		}
	}
	sm->timings_ms = t;
}

static void parse_tag(struct rd *r, const json_t *meta, struct snapshot_meta *sm)
{
	const json_t *tag = get_object(r, meta, "", "thawd");
	const char *where = "thawd.";

	if (!tag)
		return;
	sm->thawd.registry = get_str(r, tag, where, "registry");
	sm->thawd.function = get_str(r, tag, where, "function");
	sm->thawd.job = get_str(r, tag, where, "job");
}

int snapshot_meta_parse(const json_t *meta, struct snapshot_meta *sm, char *why, size_t len)
{
	struct rd r = { .why = why, .len = len };
	const json_t *v;

	memset(sm, 0, sizeof(*sm));
	if (len)
		why[0] = '\0';
	if (!json_is_object(meta)) {
		bad(&r, "the meta is not an object");
		return r.err;
	}
	sm->json_ = json_incref((json_t *)meta);
	sm->owned_ = true;
	v = member(meta, "meta_version");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1))
		bad(&r, "\"meta_version\" is not a positive integer");
	else if (v && json_integer_value(v) > SNAPSHOT_META_VERSION)
		bad(&r, "\"meta_version\" is %lld: this thaw reads up to %d (a newer thaw made "
		    "the snapshot)", (long long)json_integer_value(v), SNAPSHOT_META_VERSION);
	sm->version = json_is_integer(v) ? (int)json_integer_value(v) : 0;
	sm->function = get_str(&r, meta, "", "function");
	parse_spec(&r, meta, sm);
	if (sm->version >= 1 && !r.err && (!sm->function || sm->spec_err == -ENOENT))
		bad(&r, "meta_version %d without its \"%s\"", sm->version,
		    sm->function ? "spec" : "function");
	parse_versions(&r, meta, sm);
	parse_gpus(&r, meta, sm);
	parse_cuda(&r, meta, sm);
	parse_gpu_memory(&r, meta, sm);
	parse_image(&r, meta, sm);
	sm->host = get_object(&r, meta, "", "host");
	parse_timings(&r, meta, sm);
	sm->image_bytes = get_count(&r, meta, "", "image_bytes", NULL);
	sm->image_bytes_before_elision = get_count(&r, meta, "", "image_bytes_before_elision",
						   NULL);
	sm->zero_pages_elided = get_count(&r, meta, "", "zero_pages_elided", NULL);
	sm->created = get_str(&r, meta, "", "created");
	sm->mapped_mount = get_str(&r, meta, "", "mapped_mount");
	sm->confined = get_bool(&r, meta, "", "confined");
	parse_userns(&r, meta, sm);
	sm->booted = get_bool(&r, meta, "", "booted");
	parse_tag(&r, meta, sm);
	if (r.err)
		snapshot_meta_release(sm);
	return r.err;
}

void snapshot_meta_release(struct snapshot_meta *sm)
{
	if (!sm->owned_)
		return;
	spec_free((struct func_spec *)sm->spec);
	free((void *)sm->gpus);
	free((void *)sm->cuda_processes);
	free((void *)sm->gpu_memory.ns_pids);
	json_decref(sm->json_);
	memset(sm, 0, sizeof(*sm));
}

struct func_spec *snapshot_meta_take_spec(struct snapshot_meta *sm)
{
	struct func_spec *s = sm->owned_ ? (struct func_spec *)sm->spec : NULL;

	if (s)
		sm->spec = NULL;
	return s;
}

/* ---- the writer ------------------------------------------------------ */

/* o[key] = v (a new reference, taken even on failure); NULL v: out of
 * memory.  -1 on failure. */
static int put(json_t *o, const char *key, json_t *v)
{
	return v ? json_object_set_new(o, key, v) : -1;
}

static int put_str(json_t *o, const char *key, const char *s)
{
	return s ? put(o, key, json_string(s)) : 0;
}

static int put_count(json_t *o, const char *key, uint64_t v)
{
	return put(o, key, json_integer((json_int_t)v));
}

static json_t *pids_json(const pid_t *pids, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer(pids[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* The old lists of the CUDA processes: their pids (ns false) or their pids
 * in the container (ns true). */
static json_t *cuda_list_json(const struct snapshot_meta *sm, bool ns)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < sm->ncuda_processes; i++) {
		const struct snapshot_cuda_process *c = &sm->cuda_processes[i];

		if (json_array_append_new(a, json_integer(ns ? c->ns_pid : c->pid))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *versions_json(const struct snapshot_versions *v)
{
	json_t *o = json_object();

	if (o && (put_str(o, "kernel", v->kernel) || put_str(o, "runc", v->runc) ||
		  put_str(o, "criu", v->criu) ||
		  (v->driver && put(o, "driver", json_integer(v->driver))))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *gpus_json(const struct snapshot_meta *sm)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < sm->ngpus; i++) {
		const struct snapshot_gpu *g = &sm->gpus[i];
		json_t *o = json_object();

		if (!o || put_str(o, "uuid", g->uuid) || put_str(o, "name", g->name) ||
		    (g->total_bytes && put_count(o, "total_bytes", g->total_bytes)) ||
		    (g->index >= 0 && put(o, "index", json_integer(g->index))) ||
		    (g->used_bytes && put_count(o, "used_bytes", g->used_bytes)) ||
		    json_array_append_new(a, o)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *processes_json(const struct snapshot_meta *sm)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < sm->ncuda_processes; i++) {
		const struct snapshot_cuda_process *c = &sm->cuda_processes[i];
		json_t *held = json_array(), *o;

		for (size_t g = 0; held && g < 64; g++) {
			if (!(c->gpus & (1ull << g)) ||
			    !json_array_append_new(held, json_integer((json_int_t)g)))
				continue;
			json_decref(held);
			held = NULL;
		}
		o = held ? json_pack("{s:i, s:i, s:o}", "pid", (int)c->pid, "ns_pid",
				     (int)c->ns_pid, "gpus", held) :
			   NULL;
		if (!o || json_array_append_new(a, o)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *gpu_memory_json(const struct snapshot_gpu_memory *m)
{
	json_t *ns = pids_json(m->ns_pids, m->nns_pids);

	return ns ? json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:o}", "mode",
			      m->thaw ? "thaw" : "driver", "why", m->why ? m->why : "", "mount",
			      m->mount, "bytes", (json_int_t)m->bytes, "allocs",
			      (json_int_t)m->allocs, "left_bytes", (json_int_t)m->left_bytes,
			      "ns_pids", ns) :
		    NULL;
}

json_t *snapshot_meta_to_json(const struct snapshot_meta *sm)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (put(o, "meta_version", json_integer(SNAPSHOT_META_VERSION)) ||
	    put_str(o, "function", sm->function) ||
	    (sm->spec && put(o, "spec", spec_to_json(sm->spec))) ||
	    put(o, "versions", versions_json(&sm->versions)) || put(o, "gpus", gpus_json(sm)) ||
	    (sm->gpu_used_bytes && put_count(o, "gpu_used_bytes", sm->gpu_used_bytes)) ||
	    /* The old lists, for thaws that read only those. */
	    put(o, "cuda_pids", cuda_list_json(sm, false)) ||
	    put(o, "cuda_ns_pids", cuda_list_json(sm, true)) ||
	    (sm->ncuda_processes && put(o, "cuda_processes", processes_json(sm))) ||
	    (sm->gpu_memory.recorded && put(o, "gpu_memory", gpu_memory_json(&sm->gpu_memory))) ||
	    (sm->image.reference &&
	     put(o, "image", json_pack("{s:s, s:s*, s:s*}", "reference", sm->image.reference,
				       "digest", sm->image.digest, "bundle", sm->image.bundle))) ||
	    (sm->host && put(o, "host", json_deep_copy(sm->host))) ||
	    (sm->timings_ms && put(o, "timings_ms", json_deep_copy(sm->timings_ms))) ||
	    put_count(o, "image_bytes", sm->image_bytes) ||
	    put_count(o, "image_bytes_before_elision", sm->image_bytes_before_elision) ||
	    put_count(o, "zero_pages_elided", sm->zero_pages_elided) ||
	    put_str(o, "created", sm->created) || put_str(o, "mapped_mount", sm->mapped_mount) ||
	    put(o, "confined", json_boolean(sm->confined)) ||
	    (sm->userns_size && put(o, "userns", json_pack("{s:I, s:I}", "uid",
							   (json_int_t)sm->userns_base, "size",
							   (json_int_t)sm->userns_size))) ||
	    (sm->booted && put(o, "booted", json_true())) ||
	    (sm->thawd.registry &&
	     put(o, "thawd", json_pack("{s:s, s:s*, s:s*}", "registry", sm->thawd.registry,
				       "function", sm->thawd.function, "job", sm->thawd.job)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}
