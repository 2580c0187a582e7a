/* SPDX-License-Identifier: Apache-2.0 */
/* image.h — a function's container image: pulled once, unpacked once, shared.
 *
 * A spec's "image" (function/spec.h, skopeo's transport syntax) is copied
 * with skopeo into an OCI layout and unpacked with umoci into a rootfs, both
 * kept under the data directory by the digest of the image's manifest (as
 * the layout holds it), so that every function on one image shares one
 * rootfs and a snapshot names the very rootfs it was made on:
 *
 *	<data>/images/layouts/<hex>/  the image, an OCI layout (tag "thaw")
 *	<data>/images/rootfs/<hex>/   umoci's bundle of it: rootfs/, config.json, …
 *	<data>/images/sources/<key>   "<hex>": what the source whose manifest hashes
 *	                              to <key> was copied to, so that a source
 *	                              already copied is not copied again
 *	<data>/images/locks/<hex>     shared while a snapshot uses <hex>
 *	<data>/images/tmp/<pid>-<n>/  work in progress, renamed into place whole
 *	<data>/images/idmap/<hex>-<base>  rootfs <hex> as the user namespace
 *	                              range from host uid <base> sees it (idmap.c)
 *	<data>/images/.lock           held while the cache is looked up or changed
 *
 * A snapshot names the image by its digest: another host that restores it
 * gets that very image into its own cache (image_get_digest).  Nothing is
 * half-written in place: a pull or an unpack that fails leaves the cache as
 * it was.  gc (image_gc) removes what no snapshot in the store names,
 * no snapshot in progress holds and no live process has as its root.
 */
#ifndef THAW_IMAGES_IMAGE_H
#define THAW_IMAGES_IMAGE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "function/spec.h"
#include "function/userns.h"
#include "store/store.h"

/* Progress of long work: phase "pull" (done of total bytes; total 0 when
 * unknown) or "unpack" (done of total layers). */
typedef void (*image_progress_fn)(void *arg, const char *phase, uint64_t done, uint64_t total);

struct image {
	char digest[80];         /* "sha256:<hex>" of its manifest in the layout */
	char bundle[PATH_MAX];   /* <data>/images/rootfs/<hex>: a bundle whose rootfs/ it is */
	json_t *config;          /* the image config's "config" (Entrypoint, Cmd, Env, …); may be NULL */
	bool cached;             /* true: the cache had it, nothing was copied */
	double pull_ms, unpack_ms;
	int lock_fd;             /* locks/<hex>, held shared until image_release */
};

/* Make ref (a checked spec "image") ready in c's data directory: looked up
 * by its source's manifest, else copied and unpacked.  authfile (NULL or "":
 * none) is handed to skopeo as --authfile, never logged.  progress may be
 * NULL.  0 and *out, which holds its digest against gc until image_release;
 * or -errno with the reason logged (log_last_error): -ENOENT the image is
 * not there, -EACCES the registry refused the credentials, -ENETUNREACH the
 * registry cannot be reached, -EINVAL a reference skopeo refuses, -EIO the
 * image's data fails its digests or another failure of skopeo or umoci. */
int image_get(const struct thaw_config *c, const char *ref, const char *authfile,
	      image_progress_fn progress, void *arg, struct image *out);
/* The image whose manifest digest is digest ("sha256:<hex>", as a
 * snapshot's meta records it), ready in c's cache for a restore: found
 * there, else copied from ref (pinned to the digest for docker://; skopeo
 * selects an OCI layout's or an archive's manifest by tag only, so those
 * are copied as named), its digest checked, and unpacked.  A local source
 * must lie under c's allowed roots.  out->config is not read (NULL);
 * out->cached: nothing was copied.  0 and *out, held as image_get's; or
 * -errno with the reason set, naming the digest: image_get's, -EACCES also
 * for a source outside the allowed roots, and -ESTALE when the source
 * holds another image now (a tag moved).  A failure leaves the cache as it
 * was. */
int image_get_digest(const struct thaw_config *c, const char *ref, const char *digest,
		     const char *authfile, image_progress_fn progress, void *arg,
		     struct image *out);
void image_release(struct image *im);

/* The spec to boot: spec's own command, env, cwd, port, else the image
 * config's (Entrypoint and Cmd, Env merged under the spec's, WorkingDir, the
 * first exposed TCP port), with the image's rootfs as its bundle and no
 * "image" or "user" left.  The user (the spec's, else the image's) must be
 * uid 0 and gid 0: a function runs as uid 0 without capabilities
 * (docs/DESIGN.md, "Confinement").  0 and *out (you own it), or -EINVAL with
 * why in err. */
int image_apply(const struct image *im, const struct func_spec *spec, struct func_spec **out,
		char *err, size_t errlen);

/* Remove from c's image cache every image no manifest of s names (its meta's
 * "image"."digest"), no image_get holds and no live process has as its root,
 * and work directories their process left.  *removed (may be NULL): images
 * removed.  0 or -errno. */
int image_gc(const struct thaw_config *c, struct store *s, unsigned *removed);

/* The rootfs of bundle (an image's in c's cache, <data>/images/rootfs/<hex>,
 * as image_get gives it) as the user namespace range r sees it: an
 * idmapped mount of it, read-only, where a file of host uid k is r's base
 * + k, so that in the container every file has the owner the image gave
 * it (function_bundle's image_root).  Made once per image and range, and
 * reused.  0 and its path in out (len bytes), or -errno (logged): -EINVAL
 * for a bundle outside the cache, or (from the kernel) a filesystem without
 * idmapped mounts. */
int image_idmap(const struct thaw_config *c, const char *bundle, const struct userns_range *r,
		char *out, size_t len);
/* Unmount every idmapped rootfs of c's cache whose range is no function's
 * any more (function/userns.h) or whose image is gone: a function's DELETE
 * and image_gc.  Instances still running keep theirs.  0 or -errno. */
int image_idmap_prune(const struct thaw_config *c);

#endif
