/* SPDX-License-Identifier: Apache-2.0 */
/* spec_mounts.c — see spec_mounts.h. */
#include "function/spec_mounts.h"
#include "common/gpumem_protocol.h"
#include "common/oci.h"
#include "common/util.h"
#include "function/spec_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mount_keys[] = { "source", "destination", "readonly" };
/* Where thaw or the kernel already mount something of their own. */
static const char *const reserved[] = { "/proc", "/sys", "/dev", OCI_MAPPED_DEST, GPUMEM_IN_DEST,
					GPUMEM_OUT_DEST };
/* What thaw binds read-only from the host into a container without a root
 * of its own (common/oci.c): a mount there would be shadowed, or need a
 * mount point made in a read-only bind, and fail at the snapshot. */
static const char *const host_bound[] = { "/usr", "/etc", "/opt", "/root", "/bin", "/sbin",
					  "/lib", "/lib32", "/lib64", "/libx32" };

/* An absolute path without ".", ".." or empty components, not "/", without
 * a trailing '/', at most PATH_MAX - 1 bytes. */
static bool clean_path(const char *p)
{
	size_t n = strlen(p);

	if (p[0] != '/' || n < 2 || n >= PATH_MAX || p[n - 1] == '/' || strstr(p, "//"))
		return false;
	for (const char *c = p; c; c = strchr(c + 1, '/'))
		if (!strncmp(c, "/./", 3) || !strcmp(c, "/.") || !strncmp(c, "/../", 4) ||
		    !strcmp(c, "/.."))
			return false;
	return !strpbrk(p, "\n\r\t");
}

/* Whether path is dir or lies under it. */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static int parse_one(const json_t *o, size_t i, const struct func_spec *s, struct spec_mount *m,
		     char *err, size_t errlen)
{
	const json_t *src = json_object_get(o, "source"), *dst = json_object_get(o, "destination");
	const json_t *ro = json_object_get(o, "readonly");
	const char *key;
	json_t *v;

	if (!json_is_object(o))
		return spec_fail(err, errlen, "mounts[%zu]: must be {\"source\", \"destination\", "
					 "\"readonly\"}", i);
	json_object_foreach((json_t *)o, key, v) {
		bool known = false;

		for (size_t k = 0; k < ARRAY_SIZE(mount_keys); k++)
			known |= !strcmp(key, mount_keys[k]);
		if (!known)
			return spec_fail(err, errlen, "mounts[%zu]: unknown key \"%s\"", i, key);
	}
	if (!json_is_string(src) || !clean_path(json_string_value(src)))
		return spec_fail(err, errlen,
				 "mounts[%zu].source: must be an absolute path of a host "
				 "directory (not /, without . or ..)",
				 i);
	if (!json_is_string(dst) || !clean_path(json_string_value(dst)))
		return spec_fail(err, errlen,
				 "mounts[%zu].destination: must be an absolute path in the "
				 "container (not /, without . or ..)",
				 i);
	for (size_t k = 0; k < ARRAY_SIZE(reserved); k++)
		if (under(json_string_value(dst), reserved[k]))
			return spec_fail(err, errlen,
					 "mounts[%zu].destination: %s is the container's "
					 "own",
					 i, reserved[k]);
	if (!strcmp(json_string_value(dst), "/tmp"))
		return spec_fail(err, errlen,
				 "mounts[%zu].destination: /tmp is the container's own tmpfs; "
				 "mount under it instead",
				 i);
	for (size_t k = 0; !s->bundle && !s->image && k < ARRAY_SIZE(host_bound); k++)
		if (under(json_string_value(dst), host_bound[k]))
			return spec_fail(err, errlen,
					 "mounts[%zu].destination: thaw binds the host's %s "
					 "there read-only (a function without a bundle runs on "
					 "the host's directories); choose another path",
					 i, host_bound[k]);
	if (!s->bundle && !s->image && s->cwd && strcmp(s->cwd, "/") &&
	    (under(json_string_value(dst), s->cwd) || under(s->cwd, json_string_value(dst))))
		return spec_fail(err, errlen,
				 "mounts[%zu].destination: %s is where thaw binds the "
				 "function's cwd (%s), read-only; choose another path",
				 i, json_string_value(dst), s->cwd);
	if (ro && !json_is_boolean(ro))
		return spec_fail(err, errlen, "mounts[%zu].readonly: must be true or false", i);
	m->source = strdup(json_string_value(src));
	m->destination = strdup(json_string_value(dst));
	m->readonly = !ro || json_is_true(ro);
	if (!m->source || !m->destination)
		return spec_fail(err, errlen, "mounts: out of memory");
	return 0;
}

int spec_mounts_parse(const json_t *v, struct func_spec *s, char *err, size_t errlen)
{
	size_t n;
	int ret;

	if (!v || json_is_null(v))
		return 0;
	n = json_array_size(v);
	if (!json_is_array(v) || n > SPEC_MAX_MOUNTS)
		return spec_fail(err, errlen, "mounts: must be an array of at most %d {\"source\", "
					 "\"destination\", \"readonly\"}",
			    SPEC_MAX_MOUNTS);
	if (!n)
		return 0;
	s->mounts = calloc(n, sizeof(*s->mounts));
	if (!s->mounts)
		return spec_fail(err, errlen, "mounts: out of memory");
	for (size_t i = 0; i < n; i++) {
		s->nmounts = i + 1;
		ret = parse_one(json_array_get(v, i), i, s, &s->mounts[i], err, errlen);
		if (ret)
			return ret;
		/* One inside another would need its mount point made in the
		 * other's source, on the host (or fail in a read-only one). */
		for (size_t k = 0; k < i && s->mounts[i].destination; k++) {
			const char *a = s->mounts[k].destination ?: "", *b = s->mounts[i].destination;

			if (!strcmp(a, b))
				return spec_fail(err, errlen, "mounts[%zu].destination: %s twice",
						 i, b);
			if (under(a, b) || under(b, a))
				return spec_fail(err, errlen,
						 "mounts[%zu].destination: %s and mounts[%zu]'s %s "
						 "nest; give each its own path",
						 i, b, k, a);
		}
	}
	return 0;
}

json_t *spec_mounts_to_json(const struct func_spec *s)
{
	json_t *a;

	if (!s->nmounts)
		return NULL;
	a = json_array();
	for (size_t i = 0; a && i < s->nmounts; i++)
		if (json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "source",
						       s->mounts[i].source, "destination",
						       s->mounts[i].destination, "readonly",
						       s->mounts[i].readonly))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

void spec_mounts_free(struct func_spec *s)
{
	for (size_t i = 0; i < s->nmounts; i++) {
		free(s->mounts[i].source);
		free(s->mounts[i].destination);
	}
	free(s->mounts);
	s->mounts = NULL;
	s->nmounts = 0;
}
