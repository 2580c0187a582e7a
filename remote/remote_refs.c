/* SPDX-License-Identifier: Apache-2.0 */
/* remote_refs.c — refs/<function>.json (remote.h): read, list, delete. */
#define LOG_PREFIX "remote: "
#include "remote/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_MAX_BYTES (1u << 20) /* a ref larger than this is refused */

static int ref_read(struct remote *r, const char *key, json_t **out)
{
	uint8_t *buf = NULL;
	size_t len;
	json_error_t jerr;
	uint8_t h[CHUNK_HASH_LEN];
	int ret = s3_get(r->s3, key, REF_MAX_BYTES, &buf, &len);

	*out = NULL;
	if (ret)
		return ret;
	json_t *j = json_loadb((const char *)buf, len, 0, &jerr);
	free(buf);
	const char *fn = json_string_value(json_object_get(j, "function"));
	const char *id = json_string_value(json_object_get(j, "manifest"));
	if (!json_is_object(j) || !fn || !id_valid(fn) || !id || chunk_id_parse(id, h) ||
	    !json_is_object(json_object_get(j, "spec"))) {
		pr_err("remote ref %s is damaged: %s", key, j ? "not the shape a push writes" : jerr.text);
		json_decref(j);
		return -EBADMSG;
	}
	*out = j;
	return 0;
}

int remote_delete_ref(struct remote *r, const char *function)
{
	char key[S3_KEY_MAX];

	if (!id_valid(function)) {
		pr_err("bad function name '%s'", function);
		return -EINVAL;
	}
	return s3_delete(r->s3, remote_key(r, key, sizeof(key), "refs/%s.json", function));
}

int remote_pull_ref(struct remote *r, const char *function, char **spec_json,
		    char manifest_id[CHUNK_ID_LEN])
{
	char key[S3_KEY_MAX];
	json_t *j;
	int ret;

	*spec_json = NULL;
	if (!id_valid(function)) {
		pr_err("bad function name '%s'", function);
		return -EINVAL;
	}
	ret = ref_read(r, remote_key(r, key, sizeof(key), "refs/%s.json", function), &j);
	if (ret == -ENOENT)
		log_set_error("the remote has no function '%s' (no %s)", function, key);
	if (ret)
		return ret;
	snprintf(manifest_id, CHUNK_ID_LEN, "%s", json_string_value(json_object_get(j, "manifest")));
	*spec_json = json_dumps(json_object_get(j, "spec"), JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return *spec_json ? 0 : -ENOMEM;
}

struct list_refs {
	struct remote *r;
	json_t *out;
};

static int list_ref(const struct s3_object *o, void *arg)
{
	struct list_refs *l = arg;
	json_t *j;
	size_t n = strlen(o->key);

	if (n < 5 || strcmp(o->key + n - 5, ".json"))
		return 0;
	int ret = ref_read(l->r, o->key, &j);
	if (ret == -ENOENT || ret == -EBADMSG)
		return 0; /* deleted meanwhile, or not ours: not a function */
	if (ret)
		return ret;
	json_t *e = json_pack("{s:O, s:O, s:O}", "function", json_object_get(j, "function"),
			      "manifest", json_object_get(j, "manifest"), "pushed",
			      json_object_get(j, "pushed") ? json_object_get(j, "pushed")
							   : json_null());
	json_decref(j);
	if (!e || json_array_append_new(l->out, e))
		return -ENOMEM;
	return 0;
}

int remote_list_refs(struct remote *r, json_t **out)
{
	char key[S3_KEY_MAX];
	struct list_refs l = { r, json_array() };
	int ret;

	*out = NULL;
	if (!l.out)
		return -ENOMEM;
	ret = s3_list(r->s3, remote_key(r, key, sizeof(key), "refs/"), list_ref, &l);
	if (ret) {
		json_decref(l.out);
		return ret;
	}
	*out = l.out; /* keys come sorted, and so do the functions */
	return 0;
}


struct list_tags {
	json_t *out;
};

static int list_tag(const struct s3_object *o, void *arg)
{
	struct list_tags *l = arg;
	const char *slash = strrchr(o->key, '/');
	char fn[64];
	size_t n;

	/* refs/<function>.json: the name between, as a push writes it;
	 * anything else there is not a function's. */
	slash = slash ? slash + 1 : o->key;
	n = strlen(slash);
	if (n < 6 || n - 5 >= sizeof(fn) || strcmp(slash + n - 5, ".json"))
		return 0;
	memcpy(fn, slash, n - 5);
	fn[n - 5] = '\0';
	if (!id_valid(fn))
		return 0;
	return json_object_set_new(l->out, fn, json_string(o->etag)) ? -ENOMEM : 0;
}

int remote_list_ref_tags(struct remote *r, json_t **out)
{
	char key[S3_KEY_MAX];
	struct list_tags l = { json_object() };
	int ret;

	*out = NULL;
	if (!l.out)
		return -ENOMEM;
	ret = s3_list(r->s3, remote_key(r, key, sizeof(key), "refs/"), list_tag, &l);
	if (ret) {
		json_decref(l.out);
		return ret;
	}
	*out = l.out;
	return 0;
}
