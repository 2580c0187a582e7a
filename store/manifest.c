/* SPDX-License-Identifier: Apache-2.0 */
/* manifest.c — strict parsing and canonical serialization of manifests; see manifest.h. */
#define LOG_PREFIX "manifest: "
#include "store/manifest.h"
#include "store/le.h"
#include "common/log.h"
#include "common/util.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MANIFEST_MAX_PATH 4096

struct manifest *manifest_new(const char *name)
{
	struct manifest *m = calloc(1, sizeof(*m));
	char created[32];
	struct tm tm;
	time_t t = time(NULL);

	if (!m)
		return NULL;
	gmtime_r(&t, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	m->name = strdup(name ? name : "");
	m->created = strdup(created);
	m->meta = json_object();
	if (!m->name || !m->created || !m->meta) {
		manifest_free(m);
		return NULL;
	}
	return m;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfiles; i++) {
		free(m->files[i].path);
		free(m->files[i].chunks);
	}
	free(m->files);
	free(m->name);
	free(m->created);
	json_decref(m->meta);
	free(m);
}

struct manifest *manifest_copy(const struct manifest *m)
{
	struct manifest *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->name = strdup(m->name);
	c->created = strdup(m->created);
	c->meta = json_deep_copy(m->meta);
	c->files = calloc(m->nfiles ? m->nfiles : 1, sizeof(*c->files));
	if (!c->name || !c->created || !c->meta || !c->files)
		goto fail;
	for (size_t i = 0; i < m->nfiles; i++, c->nfiles++) {
		const struct manifest_file *f = &m->files[i];
		struct manifest_file *g = &c->files[i];

		*g = *f;
		g->path = strdup(f->path);
		g->chunks = malloc((f->nchunks ? f->nchunks : 1) * sizeof(*g->chunks));
		if (!g->path || !g->chunks) {
			c->nfiles++; /* so that manifest_free frees this one too */
			goto fail;
		}
		if (f->nchunks) /* an empty file's list may be NULL (a put's own manifest) */
			memcpy(g->chunks, f->chunks, f->nchunks * sizeof(*g->chunks));
	}
	return c;
fail:
	manifest_free(c);
	return NULL;
}

size_t manifest_mem_bytes(const struct manifest *m)
{
	size_t n = sizeof(*m) + strlen(m->name) + strlen(m->created) + 2 +
		   m->nfiles * sizeof(*m->files);
	char *meta = json_dumps(m->meta, JSON_COMPACT);

	n += meta ? strlen(meta) : 0;
	free(meta);
	for (size_t i = 0; i < m->nfiles; i++)
		n += strlen(m->files[i].path) + 1 + m->files[i].nchunks * sizeof(*m->files[i].chunks);
	return n;
}

/* A string member without NUL bytes, or NULL (reason logged). */
static const char *get_string(json_t *obj, const char *key, const char *where)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_string(v)) {
		pr_err("%s: \"%s\" is %s, not a string", where, key,
		       v ? "of the wrong type" : "missing");
		return NULL;
	}
	if (strlen(json_string_value(v)) != json_string_length(v)) {
		pr_err("%s: \"%s\" contains a NUL byte", where, key);
		return NULL;
	}
	return json_string_value(v);
}

/* A non-negative integer member no larger than max; -EINVAL (logged) otherwise. */
static int get_uint(json_t *obj, const char *key, uint64_t max, uint64_t *out, const char *where)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v)) {
		pr_err("%s: \"%s\" is %s, not an integer", where, key,
		       v ? "of the wrong type" : "missing");
		return -EINVAL;
	}
	json_int_t i = json_integer_value(v);
	if (i < 0 || (uint64_t)i > max) {
		pr_err("%s: \"%s\" = %lld is out of range", where, key, (long long)i);
		return -EINVAL;
	}
	*out = (uint64_t)i;
	return 0;
}

/* Refuse members we do not know: a manifest means exactly what it says. */
static int only_keys(json_t *obj, const char *const *keys, size_t n, const char *where)
{
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v)
	{
		size_t i;
		for (i = 0; i < n; i++)
			if (!strcmp(k, keys[i]))
				break;
		if (i == n) {
			pr_err("%s: unknown member \"%s\"", where, k);
			return -EINVAL;
		}
	}
	return 0;
}

static int path_ok(const char *p)
{
	size_t len = strlen(p);

	if (len == 0 || len > MANIFEST_MAX_PATH)
		return 0;
	if (p[0] == '/')
		return 0;
	for (const char *c = p; *c;) {
		const char *e = strchrnul(c, '/');
		size_t n = (size_t)(e - c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		c = *e ? e + 1 : e;
		if (*e && !*c)
			return 0; /* trailing slash: an empty last component */
	}
	return 1;
}

static int parse_chunk(json_t *jc, struct manifest_chunk *c, const char *where)
{
	static const char *const keys[] = {"off", "len", "id", "stored", "zero"};
	json_t *z = json_object_get(jc, "zero");
	uint64_t v;

	if (!json_is_object(jc)) {
		pr_err("%s is not an object", where);
		return -EINVAL;
	}
	if (only_keys(jc, keys, ARRAY_SIZE(keys), where))
		return -EINVAL;
	if (get_uint(jc, "off", INT64_MAX, &c->off, where) ||
	    get_uint(jc, "len", INT64_MAX, &c->len, where))
		return -EINVAL;
	if (c->len == 0) {
		pr_err("%s: len is 0", where);
		return -EINVAL;
	}
	if (z && !json_is_boolean(z)) {
		pr_err("%s: \"zero\" is not a boolean", where);
		return -EINVAL;
	}
	c->zero = json_is_true(z);
	if (c->zero) {
		if (json_object_get(jc, "id") || json_object_get(jc, "stored")) {
			pr_err("%s: a hole has an id or stored size", where);
			return -EINVAL;
		}
		c->stored = 0;
		memset(c->hash, 0, sizeof(c->hash));
		return 0;
	}
	if (c->len > CHUNK_MAX_RAW) {
		pr_err("%s: len %llu is larger than a chunk may be (%u)", where,
		       (unsigned long long)c->len, CHUNK_MAX_RAW);
		return -EINVAL;
	}
	const char *id = get_string(jc, "id", where);
	if (!id)
		return -EINVAL;
	if (chunk_id_parse(id, c->hash)) {
		pr_err("%s: bad chunk id \"%.80s\"", where, id);
		return -EINVAL;
	}
	if (get_uint(jc, "stored", chunk_encode_bound(c->len), &v, where))
		return -EINVAL;
	if (v < CHUNK_HEADER_SIZE) {
		pr_err("%s: stored size %llu is smaller than a chunk header", where,
		       (unsigned long long)v);
		return -EINVAL;
	}
	c->stored = (uint32_t)v;
	return 0;
}

/* A file's path and chunk list, however it was built: a clean relative path,
 * chunks in order, contiguous, adding up to its size. */
static int check_file(const struct manifest_file *f, size_t idx)
{
	uint64_t pos = 0;

	if (!path_ok(f->path)) {
		pr_err("files[%zu]: path \"%.200s\" is not a clean relative path (empty, absolute, "
		       "\".\", \"..\" or empty component)",
		       idx, f->path);
		return -EINVAL;
	}
	for (size_t i = 0; i < f->nchunks; i++) {
		const struct manifest_chunk *c = &f->chunks[i];

		if (c->off != pos) {
			pr_err("files[%zu] (%.60s) chunks[%zu]: offset %llu where %llu was expected "
			       "(chunks out of order, overlapping or with a gap)",
			       idx, f->path, i, (unsigned long long)c->off, (unsigned long long)pos);
			return -EINVAL;
		}
		if (c->len > f->size - pos) {
			pr_err("files[%zu] (%.60s) chunks[%zu]: runs past the file's size %llu", idx,
			       f->path, i, (unsigned long long)f->size);
			return -EINVAL;
		}
		pos += c->len;
	}
	if (pos != f->size) {
		pr_err("files[%zu] (%.60s): chunks add up to %llu bytes, size is %llu", idx, f->path,
		       (unsigned long long)pos, (unsigned long long)f->size);
		return -EINVAL;
	}
	return 0;
}

static int parse_file(json_t *jf, struct manifest_file *f, size_t idx)
{
	static const char *const keys[] = {"path", "size", "mode", "chunks"};
	char where[128];
	uint64_t v;
	json_t *jcs, *jc;
	size_t i;

	snprintf(where, sizeof(where), "files[%zu]", idx);
	if (!json_is_object(jf)) {
		pr_err("%s is not an object", where);
		return -EINVAL;
	}
	if (only_keys(jf, keys, ARRAY_SIZE(keys), where))
		return -EINVAL;
	const char *path = get_string(jf, "path", where);
	if (!path)
		return -EINVAL;
	if (get_uint(jf, "size", INT64_MAX, &f->size, where) ||
	    get_uint(jf, "mode", 07777, &v, where))
		return -EINVAL;
	f->mode = (uint32_t)v & 0777;
	jcs = json_object_get(jf, "chunks");
	if (!json_is_array(jcs)) {
		pr_err("%s: \"chunks\" is %s, not an array", where,
		       jcs ? "of the wrong type" : "missing");
		return -EINVAL;
	}
	f->path = strdup(path);
	f->chunks = calloc(json_array_size(jcs) ? json_array_size(jcs) : 1, sizeof(*f->chunks));
	if (!f->path || !f->chunks)
		return -ENOMEM;
	json_array_foreach(jcs, i, jc)
	{
		char cwhere[256];

		snprintf(cwhere, sizeof(cwhere), "%s (%.60s) chunks[%zu]", where, path, i);
		if (parse_chunk(jc, &f->chunks[i], cwhere))
			return -EINVAL;
		f->nchunks = i + 1;
	}
	return check_file(f, idx);
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int check_unique(const struct manifest *m)
{
	char **paths;
	int ret = 0;

	if (m->nfiles < 2)
		return 0;
	paths = malloc(m->nfiles * sizeof(*paths));
	if (!paths)
		return -ENOMEM;
	for (size_t i = 0; i < m->nfiles; i++)
		paths[i] = m->files[i].path;
	qsort(paths, m->nfiles, sizeof(*paths), cmp_path);
	for (size_t i = 1; i < m->nfiles; i++) {
		if (!strcmp(paths[i - 1], paths[i])) {
			pr_err("path \"%.200s\" appears twice", paths[i]);
			ret = -EINVAL;
			break;
		}
		/* "a" and "a/b" cannot both be files. */
		size_t n = strlen(paths[i - 1]);
		if (!strncmp(paths[i - 1], paths[i], n) && paths[i][n] == '/') {
			pr_err("path \"%.200s\" is both a file and a directory", paths[i - 1]);
			ret = -EINVAL;
			break;
		}
	}
	free(paths);
	return ret;
}

int manifest_check(const struct manifest *m)
{
	int ret;

	for (size_t i = 0; i < m->nfiles; i++)
		if ((ret = check_file(&m->files[i], i)))
			return ret;
	return check_unique(m);
}

int manifest_parse(const char *json, size_t len, struct manifest **out)
{
	static const char *const keys[] = {"version", "name", "created", "files", "meta"};
	struct manifest *m = NULL;
	json_error_t jerr;
	json_t *root = NULL, *jfiles, *jf, *meta;
	const char *s;
	uint64_t version;
	size_t i;
	int ret = -EINVAL;

	*out = NULL;
	if (len > MANIFEST_MAX_SIZE) {
		pr_err("manifest of %zu bytes is larger than %u", len, MANIFEST_MAX_SIZE);
		return -EINVAL;
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		pr_err("not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		       jerr.column);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		pr_err("not a JSON object");
		goto out;
	}
	if (only_keys(root, keys, ARRAY_SIZE(keys), "top level"))
		goto out;
	if (get_uint(root, "version", INT64_MAX, &version, "top level"))
		goto out;
	if (version != MANIFEST_VERSION) {
		pr_err("unknown version %llu (this thaw reads version %d)",
		       (unsigned long long)version, MANIFEST_VERSION);
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto out;
	}
	if (!(s = get_string(root, "name", "top level")) || !(m->name = strdup(s)))
		goto out;
	if (!(s = get_string(root, "created", "top level")) || !(m->created = strdup(s)))
		goto out;
	meta = json_object_get(root, "meta");
	if (meta && !json_is_object(meta)) {
		pr_err("\"meta\" is not an object");
		goto out;
	}
	m->meta = meta ? json_incref(meta) : json_object();
	if (!m->meta) {
		ret = -ENOMEM;
		goto out;
	}
	jfiles = json_object_get(root, "files");
	if (!json_is_array(jfiles)) {
		pr_err("\"files\" is %s, not an array", jfiles ? "of the wrong type" : "missing");
		goto out;
	}
	m->files = calloc(json_array_size(jfiles) ? json_array_size(jfiles) : 1, sizeof(*m->files));
	if (!m->files) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(jfiles, i, jf)
	{
		m->nfiles = i + 1;
		ret = parse_file(jf, &m->files[i], i);
		if (ret)
			goto out;
	}
	ret = check_unique(m);
	if (ret)
		goto out;
	*out = m;
	m = NULL;
out:
	manifest_free(m);
	json_decref(root);
	return ret;
}

/* The serialised manifest is built as text, not as a jansson tree: a tree of
 * a 3 GB image's ~50,000 chunk objects, packed and then dumped, cost more than
 * all the rest of writing the manifest (bench/LOG.md, "Mapped input and a
 * sampled chunker").  The bytes are exactly what json_dumps(JSON_COMPACT | JSON_SORT_KEYS)
 * of that tree gives (test_manifest checks it against jansson), so manifest
 * ids do not change: keys in sorted order, no spaces, and every string and
 * the meta object still encoded by jansson itself. */
struct text {
	char *s;
	size_t len, cap;
	bool failed; /* out of memory, or a string jansson would not encode */
};

static void text_add(struct text *t, const char *p, size_t n)
{
	if (t->failed)
		return;
	if (ARRAY_GROW(t->s, t->cap, t->len + n + 1, 4096)) {
		t->failed = true;
		return;
	}
	memcpy(t->s + t->len, p, n);
	t->len += n;
	t->s[t->len] = '\0';
}

static void text_str(struct text *t, const char *p)
{
	text_add(t, p, strlen(p));
}

static void text_uint(struct text *t, uint64_t v)
{
	char b[24];

	text_add(t, b, (size_t)snprintf(b, sizeof(b), "%llu", (unsigned long long)v));
}

/* A JSON value as jansson writes it (a string: quoted and escaped). */
static void text_json(struct text *t, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;

	if (!s)
		t->failed = true;
	else
		text_str(t, s);
	free(s);
}

static void text_string(struct text *t, const char *s)
{
	json_t *v = json_string(s); /* NULL unless valid UTF-8 */

	text_json(t, v);
	json_decref(v);
}

static void text_chunk(struct text *t, const struct manifest_chunk *c)
{
	char id[CHUNK_ID_LEN];

	if (c->zero) {
		text_str(t, "{\"len\":");
		text_uint(t, c->len);
		text_str(t, ",\"off\":");
		text_uint(t, c->off);
		text_str(t, ",\"zero\":true}");
		return;
	}
	chunk_id_format(c->hash, id);
	text_str(t, "{\"id\":\"");
	text_str(t, id);
	text_str(t, "\",\"len\":");
	text_uint(t, c->len);
	text_str(t, ",\"off\":");
	text_uint(t, c->off);
	text_str(t, ",\"stored\":");
	text_uint(t, c->stored);
	text_str(t, "}");
}

char *manifest_serialize(const struct manifest *m, size_t *len)
{
	struct text t = {0};
	json_t *empty = m->meta ? NULL : json_object();

	text_str(&t, "{\"created\":");
	text_string(&t, m->created ? m->created : "");
	text_str(&t, ",\"files\":[");
	for (size_t i = 0; i < m->nfiles && !t.failed; i++) {
		const struct manifest_file *f = &m->files[i];

		text_str(&t, i ? ",{\"chunks\":[" : "{\"chunks\":[");
		for (size_t j = 0; j < f->nchunks; j++) {
			if (j)
				text_str(&t, ",");
			text_chunk(&t, &f->chunks[j]);
		}
		text_str(&t, "],\"mode\":");
		text_uint(&t, f->mode & 0777);
		text_str(&t, ",\"path\":");
		text_string(&t, f->path);
		text_str(&t, ",\"size\":");
		text_uint(&t, f->size);
		text_str(&t, "}");
	}
	text_str(&t, "],\"meta\":");
	text_json(&t, m->meta ? m->meta : empty);
	text_str(&t, ",\"name\":");
	text_string(&t, m->name ? m->name : "");
	text_str(&t, ",\"version\":");
	text_uint(&t, MANIFEST_VERSION);
	text_str(&t, "}");
	json_decref(empty);
	if (t.failed) {
		pr_err("cannot serialize manifest (out of memory, or a name or path that is "
		       "not UTF-8)");
		free(t.s);
		return NULL;
	}
	if (len)
		*len = t.len;
	return t.s;
}

void manifest_totals(const struct manifest *m, struct manifest_totals *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct manifest_file *f = &m->files[i];

		t->logical_bytes += f->size;
		for (size_t j = 0; j < f->nchunks; j++) {
			if (f->chunks[j].zero) {
				t->zero_bytes += f->chunks[j].len;
			} else {
				t->stored_bytes += f->chunks[j].stored;
				t->chunks++;
			}
		}
	}
}

/* The binary form (manifest.h). */

#define BIN_HOLE 1u /* a chunk entry's flag: an all-zero run, never stored */

uint8_t *manifest_bin_encode(const struct manifest *m, const uint8_t hash[CHUNK_HASH_LEN],
			     const struct manifest_bin_source *src, size_t *len)
{
	char *meta = json_dumps(m->meta, JSON_COMPACT | JSON_SORT_KEYS);
	size_t nchunks = 0, strings, body, off;
	uint8_t *buf = NULL, *p;

	if (!meta)
		return NULL;
	strings = strlen(m->name) + strlen(m->created) + strlen(meta) + 3;
	for (size_t i = 0; i < m->nfiles; i++) {
		nchunks += m->files[i].nchunks;
		strings += strlen(m->files[i].path) + 1;
	}
	body = MANIFEST_BIN_HEADER + m->nfiles * MANIFEST_BIN_FILE + nchunks * MANIFEST_BIN_CHUNK +
	       strings;
	buf = calloc(1, body + CHUNK_HASH_LEN);
	if (!buf)
		goto out;
	memcpy(buf, "THMB", 4);
	put_le32(buf + 4, MANIFEST_BIN_VERSION);
	memcpy(buf + 8, hash, CHUNK_HASH_LEN);
	put_le64(buf + 40, src->size);
	put_le64(buf + 48, src->ino);
	put_le64(buf + 56, src->mtime_ns);
	put_le64(buf + 64, m->nfiles);
	put_le64(buf + 72, nchunks);
	put_le64(buf + 80, strings);
	p = buf + MANIFEST_BIN_HEADER;
	for (size_t i = 0; i < m->nfiles; i++, p += MANIFEST_BIN_FILE) {
		put_le64(p, m->files[i].size);
		put_le64(p + 8, m->files[i].nchunks);
		put_le32(p + 16, m->files[i].mode & 0777);
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		for (size_t j = 0; j < m->files[i].nchunks; j++, p += MANIFEST_BIN_CHUNK) {
			const struct manifest_chunk *c = &m->files[i].chunks[j];

			if (!c->zero)
				memcpy(p, c->hash, CHUNK_HASH_LEN);
			put_le64(p + 32, c->len);
			put_le32(p + 40, c->zero ? 0 : c->stored);
			put_le32(p + 44, c->zero ? BIN_HOLE : 0);
		}
	}
	off = (size_t)(p - buf);
#define PUT_STRING(str)                                                                            \
	do {                                                                                       \
		size_t n_ = strlen(str) + 1;                                                       \
		memcpy(buf + off, (str), n_);                                                      \
		off += n_;                                                                         \
	} while (0)
	PUT_STRING(m->name);
	PUT_STRING(m->created);
	PUT_STRING(meta);
	for (size_t i = 0; i < m->nfiles; i++)
		PUT_STRING(m->files[i].path);
#undef PUT_STRING
	chunk_hash(buf, body, buf + body);
	*len = body + CHUNK_HASH_LEN;
out:
	free(meta);
	return buf;
}

/* The next NUL-terminated string of the strings area [*pos, end), or NULL. */
static const char *next_string(const uint8_t *buf, size_t *pos, size_t end)
{
	const uint8_t *nul = *pos < end ? memchr(buf + *pos, 0, end - *pos) : NULL;
	const char *s = (const char *)buf + *pos;

	if (!nul)
		return NULL;
	*pos = (size_t)(nul - buf) + 1;
	return s;
}

/* One chunk entry into c at off: the checks parse_chunk makes. */
static int bin_chunk(const uint8_t *p, uint64_t off, struct manifest_chunk *c, size_t fi, size_t ci)
{
	uint32_t flags = get_le32(p + 44);

	c->off = off;
	c->len = get_le64(p + 32);
	c->stored = get_le32(p + 40);
	c->zero = flags & BIN_HOLE;
	memcpy(c->hash, p, CHUNK_HASH_LEN);
	if (flags & ~BIN_HOLE || c->len == 0 || c->len > INT64_MAX) {
		pr_err("binary: files[%zu] chunks[%zu]: bad flags or length", fi, ci);
		return -EBADMSG;
	}
	if (c->zero) {
		static const uint8_t none[CHUNK_HASH_LEN];

		if (c->stored || memcmp(c->hash, none, CHUNK_HASH_LEN)) {
			pr_err("binary: files[%zu] chunks[%zu]: a hole has an id or stored size", fi, ci);
			return -EBADMSG;
		}
		return 0;
	}
	if (c->len > CHUNK_MAX_RAW || c->stored < CHUNK_HEADER_SIZE ||
	    c->stored > chunk_encode_bound(c->len)) {
		pr_err("binary: files[%zu] chunks[%zu]: %u stored bytes of %llu are impossible", fi,
		       ci, c->stored, (unsigned long long)c->len);
		return -EBADMSG;
	}
	return 0;
}

/* The files and chunks of a checked binary into m. */
static int bin_files(const uint8_t *buf, uint64_t nchunks, struct manifest *m)
{
	const uint8_t *fp = buf + MANIFEST_BIN_HEADER;
	const uint8_t *cp = fp + m->nfiles * MANIFEST_BIN_FILE;
	uint64_t left = nchunks;

	for (size_t i = 0; i < m->nfiles; i++, fp += MANIFEST_BIN_FILE) {
		struct manifest_file *f = &m->files[i];
		uint64_t n = get_le64(fp + 8), off = 0;
		uint32_t mode = get_le32(fp + 16);

		f->size = get_le64(fp);
		if (n > left || mode > 0777 || get_le32(fp + 20) || f->size > INT64_MAX) {
			pr_err("binary: files[%zu]: bad chunk count, mode or size", i);
			return -EBADMSG;
		}
		left -= n;
		f->mode = mode;
		f->chunks = malloc((n ? n : 1) * sizeof(*f->chunks));
		if (!f->chunks)
			return -ENOMEM;
		for (size_t j = 0; j < n; j++, cp += MANIFEST_BIN_CHUNK) {
			int ret = bin_chunk(cp, off, &f->chunks[j], i, j);

			f->nchunks = j + 1;
			if (ret)
				return ret;
			if (f->chunks[j].len > f->size - off) {
				pr_err("binary: files[%zu]: chunks run past its size", i);
				return -EBADMSG;
			}
			off += f->chunks[j].len;
		}
	}
	if (left) {
		pr_err("binary: %llu chunk entries belong to no file", (unsigned long long)left);
		return -EBADMSG;
	}
	return 0;
}

/* The strings of a checked binary into m: name, created, meta, paths. */
static int bin_strings(const uint8_t *buf, size_t pos, size_t end, struct manifest *m)
{
	const char *name = next_string(buf, &pos, end);
	const char *created = name ? next_string(buf, &pos, end) : NULL;
	const char *meta = created ? next_string(buf, &pos, end) : NULL;
	json_error_t jerr;

	if (!meta) {
		pr_err("binary: strings cut short");
		return -EBADMSG;
	}
	m->name = strdup(name);
	m->created = strdup(created);
	if (!m->name || !m->created)
		return -ENOMEM;
	m->meta = json_loads(meta, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(m->meta)) {
		pr_err("binary: meta is not a JSON object");
		return -EBADMSG;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		const char *path = next_string(buf, &pos, end);

		if (!path) {
			pr_err("binary: strings cut short");
			return -EBADMSG;
		}
		m->files[i].path = strdup(path);
		if (!m->files[i].path)
			return -ENOMEM;
	}
	if (pos != end) {
		pr_err("binary: %zu bytes after the strings", end - pos);
		return -EBADMSG;
	}
	return 0;
}

int manifest_bin_decode(const uint8_t *buf, size_t len, const uint8_t hash[CHUNK_HASH_LEN],
			const struct manifest_bin_source *src, struct manifest **out)
{
	uint8_t sum[CHUNK_HASH_LEN];
	uint64_t nfiles, nchunks, strings;
	struct manifest *m = NULL;
	size_t body;
	int ret;

	*out = NULL;
	if (len < MANIFEST_BIN_HEADER + CHUNK_HASH_LEN || memcmp(buf, "THMB", 4)) {
		pr_err("binary: not a binary manifest (bad magic or too short)");
		return -EBADMSG;
	}
	if (get_le32(buf + 4) != MANIFEST_BIN_VERSION) {
		pr_debug("binary: version %u, this thaw writes %d", get_le32(buf + 4),
			 MANIFEST_BIN_VERSION);
		return -ESTALE;
	}
	body = len - CHUNK_HASH_LEN;
	nfiles = get_le64(buf + 64);
	nchunks = get_le64(buf + 72);
	strings = get_le64(buf + 80);
	if (nfiles > body / MANIFEST_BIN_FILE || nchunks > body / MANIFEST_BIN_CHUNK ||
	    strings > body || get_le64(buf + 88) ||
	    MANIFEST_BIN_HEADER + nfiles * MANIFEST_BIN_FILE + nchunks * MANIFEST_BIN_CHUNK +
		    strings != body) {
		pr_err("binary: %llu files, %llu chunks and %llu bytes of strings do not fill its "
		       "%zu bytes",
		       (unsigned long long)nfiles, (unsigned long long)nchunks,
		       (unsigned long long)strings, len);
		return -EBADMSG;
	}
	chunk_hash(buf, body, sum);
	if (memcmp(sum, buf + body, CHUNK_HASH_LEN)) {
		pr_err("binary: checksum mismatch");
		return -EBADMSG;
	}
	if (memcmp(buf + 8, hash, CHUNK_HASH_LEN) || get_le64(buf + 40) != src->size ||
	    get_le64(buf + 48) != src->ino || get_le64(buf + 56) != src->mtime_ns) {
		pr_debug("binary: made from another manifest, or another file of it");
		return -ESTALE;
	}
	m = calloc(1, sizeof(*m));
	if (!m || !(m->files = calloc(nfiles ? nfiles : 1, sizeof(*m->files)))) {
		ret = -ENOMEM;
		goto out;
	}
	m->nfiles = nfiles;
	ret = bin_files(buf, nchunks, m);
	if (ret == 0)
		ret = bin_strings(buf, body - strings, body, m);
	if (ret == 0 && manifest_check(m) < 0)
		ret = -EBADMSG;
	if (ret == 0) {
		*out = m;
		m = NULL;
	}
out:
	if (ret == -ENOMEM)
		pr_err("binary: out of memory");
	manifest_free(m);
	return ret;
}
