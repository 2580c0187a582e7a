/* SPDX-License-Identifier: Apache-2.0 */
/* image_internal.h — what the image cache's files share (images/ only).
 *
 * image.c pulls (image_get, image_get_digest), apply.c completes a spec
 * from an image's config (image_apply), gc.c removes what nothing uses
 * (image_gc); they share the cache's directories and locks (cache.c), the
 * reading of an OCI layout (cache.c) and the running of skopeo and umoci
 * (tool.c).  The layout on disk is image.h's.
 */
#ifndef THAW_IMAGES_IMAGE_INTERNAL_H
#define THAW_IMAGES_IMAGE_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

#define IMAGE_LAYOUT_TAG "thaw" /* the tag of the one image in a layout of the cache */

/* ---- small helpers ---- */

/* s is 64 lowercase hex digits. */
bool image_hex64(const char *s);
/* SHA-256 of buf into hex (NUL-terminated). */
void image_sha256_hex(const void *buf, size_t len, char hex[65]);
/* p is a directory (symlinks followed). */
bool image_is_dir(const char *p);
/* s is one or more decimal digits. */
bool image_all_digits(const char *s);
/* Bytes of the regular files under dir (what a copy has written so far);
 * 0 if it cannot be read. */
uint64_t image_dir_bytes(const char *dir);

/* ---- the cache: <data>/images/ ---- */

struct image_cache {
	char base[PATH_MAX]; /* <data>/images */
};

/* <base>/sub[/name] into buf; -ENAMETOOLONG (logged) if it does not fit. */
int image_cache_path(const struct image_cache *k, char *buf, size_t len, const char *sub,
		     const char *name);
/* k for c's data directory, its subdirectories made.  0, -EINVAL for a data
 * directory skopeo and umoci cannot name (a ':'), or -errno. */
int image_cache_open(const struct thaw_config *c, struct image_cache *k);
/* The whole cache locked exclusively (held while it is looked up or changed,
 * briefly, and by gc): the lock's fd (close it to let go), or -errno. */
int image_cache_lock(const struct image_cache *k);
/* Under the cache lock: digest hex locked shared if both its layout and its
 * rootfs are there: 1 and *fd, 0 if not (nothing held, *fd -1), or -errno. */
int image_cache_take(const struct image_cache *k, const char *hex, int *fd);
/* The digest sources/<key> names into hex: true, or false if none (or not
 * a digest). */
bool image_cache_source(const struct image_cache *k, const char *key, char hex[65]);

/* image_idmap_prune with the cache lock held (image_gc). */
int image_idmap_prune_locked(const struct thaw_config *c, const struct image_cache *k);

/* ---- reading an OCI layout ---- */

/* The manifest digest the layout's index names for IMAGE_LAYOUT_TAG (or
 * its only manifest) into hex and, if manifest is not NULL, the manifest
 * itself (you own it).  0 or -EIO (logged). */
int image_layout_manifest(const char *layout, char hex[65], json_t **manifest);
/* The image config's "config" object (you own it; an empty object if the
 * image has none), or NULL (logged). */
json_t *image_layout_config(const char *layout);

/* ---- running skopeo and umoci ---- */

#define IMAGE_TOOL_TAIL 4096

struct image_tool {
	const char *const *argv;
	const char *tmpdir;         /* the child's TMPDIR (its big temporary files) */
	bool keep_out;              /* stdout into out; else it joins the tail */
	char *out;                  /* stdout, NUL-terminated (you free it) */
	size_t out_len;
	char tail[IMAGE_TOOL_TAIL]; /* the end of what it printed */
	size_t tail_len;
	char line[512];             /* stderr's current line, for on_line */
	size_t line_len;
	void (*on_line)(void *arg, const char *line); /* each line of stderr; may be NULL */
	void (*on_tick)(void *arg);                   /* every half second; may be NULL */
	void *arg;
};

/* Run t->argv to its end.  0 if it exited 0; -ENOENT if it could not be
 * run at all; -EIO otherwise (what it printed is in t->tail). */
int image_tool_run(struct image_tool *t);
/* skopeo's (or umoci's) own words: the msg="…" of its last fatal line,
 * else the last line it printed; into buf. */
void image_tool_words(const struct image_tool *t, char *buf, size_t len);
/* Why skopeo failed at step (its subcommand) on ref, from its words: logged,
 * and -EINVAL (a bad reference), -EACCES (unauthorised), -ENETUNREACH (no
 * network), -ENOENT (not found) or -EIO (damaged, or anything else). */
int image_skopeo_failed(const char *ref, const char *step, const struct image_tool *t);

#endif
