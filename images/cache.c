/* SPDX-License-Identifier: Apache-2.0 */
/* cache.c — the image cache's directories, locks and entries, and the
 * reading of the OCI layouts it holds (image_internal.h; the layout on
 * disk is image.h's).
 */
#define LOG_PREFIX "image: "
#include "images/image_internal.h"
#include "common/log.h"
#include "common/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOB_JSON_MAX (8u << 20) /* an index, a manifest or a config read from a layout */

bool image_hex64(const char *h)
{
	size_t i = 0;

	for (; h[i]; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return false;
	return i == 64;
}

void image_sha256_hex(const void *buf, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		memset(md, 0, 32);
	hex_encode(md, 32, hex);
}

bool image_is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* image_dir_bytes of the directory dfd (closed here), depth levels down. */
static uint64_t dir_bytes_at(int dfd, int depth)
{
	uint64_t sum = 0;
	struct dirent *de;
	DIR *d = fdopendir(dfd);

	if (!d) {
		close(dfd);
		return 0;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode)) {
			sum += (uint64_t)st.st_size;
		} else if (S_ISDIR(st.st_mode) && depth < 8) {
			int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

			if (fd >= 0)
				sum += dir_bytes_at(fd, depth + 1);
		}
	}
	closedir(d);
	return sum;
}

uint64_t image_dir_bytes(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? 0 : dir_bytes_at(fd, 0);
}

int image_cache_path(const struct image_cache *k, char *buf, size_t len, const char *sub,
		     const char *name)
{
	int n = snprintf(buf, len, "%s/%s%s%s", k->base, sub, name ? "/" : "", name ? name : "");

	if (n < 0 || (size_t)n >= len) {
		pr_err("path too long under %s", k->base);
		return -ENAMETOOLONG;
	}
	return 0;
}

int image_cache_open(const struct thaw_config *c, struct image_cache *k)
{
	static const char *const subs[] = { "layouts", "rootfs", "sources", "locks", "tmp" };
	char p[PATH_MAX];
	int ret;

	if (snprintf(k->base, sizeof(k->base), "%s/images", c->data_dir) >= (int)sizeof(k->base))
		return -ENAMETOOLONG;
	/* skopeo's and umoci's oci:PATH:TAG syntax cannot take a ':' in PATH. */
	if (strchr(k->base, ':')) {
		pr_err("the data directory %s holds a ':', which skopeo's and umoci's "
		       "oci:PATH:TAG syntax cannot take",
		       c->data_dir);
		return -EINVAL;
	}
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		ret = image_cache_path(k, p, sizeof(p), subs[i], NULL);
		if (!ret)
			ret = mkdir_p(p, 0700);
		if (ret)
			return ret;
	}
	return 0;
}

int image_cache_lock(const struct image_cache *k)
{
	char p[PATH_MAX];
	int ret = image_cache_path(k, p, sizeof(p), ".lock", NULL);

	return ret ? ret : lock_path(p, LOCK_EX, 0600);
}

bool image_all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

int image_cache_take(const struct image_cache *k, const char *hex, int *fd)
{
	char p[PATH_MAX], q[PATH_MAX];
	int ret;

	*fd = -1;
	if ((ret = image_cache_path(k, p, sizeof(p), "layouts", hex)) ||
	    (ret = image_cache_path(k, q, sizeof(q), "rootfs", hex)))
		return ret;
	if (!image_is_dir(p) || !image_is_dir(q))
		return 0;
	if ((ret = image_cache_path(k, p, sizeof(p), "locks", hex)))
		return ret;
	ret = lock_path(p, LOCK_SH, 0600);
	if (ret < 0)
		return ret;
	*fd = ret;
	return 1;
}

bool image_cache_source(const struct image_cache *k, const char *key, char hex[65])
{
	char p[PATH_MAX], *text = NULL;
	size_t len = 0;
	bool ok;

	if (image_cache_path(k, p, sizeof(p), "sources", key) || read_file(p, &text, &len, 128))
		return false;
	while (len && (text[len - 1] == '\n'))
		text[--len] = '\0';
	ok = image_hex64(text);
	if (ok)
		memcpy(hex, text, 65);
	free(text);
	return ok;
}

/* ---- reading an OCI layout ---- */

static json_t *load_json(const char *path)
{
	json_error_t jerr;
	char *text = NULL;
	size_t len = 0;
	json_t *j;

	if (read_file(path, &text, &len, BLOB_JSON_MAX))
		return NULL;
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		pr_err("%s: %s", path, jerr.text);
	free(text);
	return j;
}

/* "sha256:<hex>" of a descriptor, checked; NULL if it is not one. */
static const char *desc_hex(const json_t *desc)
{
	const char *d = json_string_value(json_object_get(desc, "digest"));

	return d && !strncmp(d, "sha256:", 7) && image_hex64(d + 7) ? d + 7 : NULL;
}

static json_t *load_blob(const char *layout, const char *hex)
{
	char p[PATH_MAX + 128];

	snprintf(p, sizeof(p), "%s/blobs/sha256/%s", layout, hex);
	return load_json(p);
}

int image_layout_manifest(const char *layout, char hex[65], json_t **manifest)
{
	char p[PATH_MAX + 32];
	json_t *index, *ms, *d, *pick = NULL;
	const char *h;
	size_t i;

	snprintf(p, sizeof(p), "%s/index.json", layout);
	index = load_json(p);
	ms = json_object_get(index, "manifests");
	json_array_foreach(ms, i, d)
	{
		const char *name = json_string_value(json_object_get(
			json_object_get(d, "annotations"), "org.opencontainers.image.ref.name"));

		if ((name && !strcmp(name, IMAGE_LAYOUT_TAG)) || json_array_size(ms) == 1)
			pick = d;
	}
	h = pick ? desc_hex(pick) : NULL;
	if (!h) {
		pr_err("%s: no manifest for tag %s", p, IMAGE_LAYOUT_TAG);
		json_decref(index);
		return -EIO;
	}
	memcpy(hex, h, 65);
	json_decref(index);
	if (manifest && !(*manifest = load_blob(layout, hex)))
		return -EIO;
	return 0;
}

json_t *image_layout_config(const char *layout)
{
	json_t *m = NULL, *cfg, *out;
	const char *h;
	char hex[65];

	if (image_layout_manifest(layout, hex, &m))
		return NULL;
	h = desc_hex(json_object_get(m, "config"));
	cfg = h ? load_blob(layout, h) : NULL;
	json_decref(m);
	if (!cfg) {
		pr_err("%s: the image's config cannot be read", layout);
		return NULL;
	}
	out = json_object_get(cfg, "config");
	out = json_is_object(out) ? json_incref(out) : json_object();
	json_decref(cfg);
	return out;
}
