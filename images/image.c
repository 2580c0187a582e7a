/* SPDX-License-Identifier: Apache-2.0 */
/* image.c — see image.h: an image made ready in the cache, by its source
 * (image_get) or by its digest (image_get_digest).
 *
 * skopeo copies it into an OCI layout of a work directory and umoci
 * unpacks that (tool.c); both are put into the cache under its lock
 * (cache.c), the layout first, the rootfs (what makes it present) next.
 */
#define LOG_PREFIX "image: "
#include "images/image.h"
#include "common/log.h"
#include "common/util.h"
#include "images/image_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the pull ---- */

struct pull {
	const struct thaw_config *c;
	struct image_cache k;
	const char *ref, *authfile;
	image_progress_fn progress;
	void *arg;
	char work[PATH_MAX], layout[PATH_MAX + 16], bundle[PATH_MAX + 16];
	uint64_t total;       /* bytes the source's manifest lists */
	uint64_t layers, unpacked;
};

static void pull_tick(void *p)
{
	struct pull *u = p;
	uint64_t done = image_dir_bytes(u->layout);

	if (u->progress)
		u->progress(u->arg, "pull", u->total && done > u->total ? u->total : done, u->total);
}

static void unpack_line(void *p, const char *line)
{
	struct pull *u = p;

	if (strstr(line, "unpack layer:")) {
		u->unpacked++;
		if (u->progress)
			u->progress(u->arg, "unpack", u->unpacked - 1, u->layers);
	}
}

/* skopeo's arguments: skopeo SUB [--authfile F] ARGS… (NULL-terminated). */
static void skopeo_argv(const struct pull *u, const char **argv, const char *sub,
			const char *a1, const char *a2, const char *a3)
{
	size_t n = 0;

	argv[n++] = "skopeo";
	argv[n++] = sub;
	if (u->authfile && *u->authfile && !strncmp(u->ref, "docker://", 9)) {
		argv[n++] = "--authfile";
		argv[n++] = u->authfile;
	}
	argv[n++] = a1;
	if (a2)
		argv[n++] = a2;
	if (a3)
		argv[n++] = a3;
	argv[n] = NULL;
}

/* The source's manifest, as skopeo inspect --raw prints it: its hash keys
 * sources/, and its layer sizes are the pull's total. */
static int inspect(struct pull *u, char key[65])
{
	const char *argv[8];
	struct image_tool t = { .argv = argv, .tmpdir = u->work, .keep_out = true };
	json_t *m, *layers, *l;
	size_t i;
	int ret;

	skopeo_argv(u, argv, "inspect", "--raw", u->ref, NULL);
	ret = image_tool_run(&t);
	if (ret == -EIO)
		ret = image_skopeo_failed(u->ref, "inspect", &t);
	if (!ret && !t.out_len) {
		pr_err("%s: skopeo inspect printed no manifest", u->ref);
		ret = -EIO;
	}
	if (!ret) {
		image_sha256_hex(t.out, t.out_len, key);
		m = json_loadb(t.out, t.out_len, 0, NULL);
		layers = json_object_get(m, "layers");
		json_array_foreach(layers, i, l)
		{
			u->total += (uint64_t)json_integer_value(json_object_get(l, "size"));
		}
		if (u->total)
			u->total += (uint64_t)json_integer_value(
				json_object_get(json_object_get(m, "config"), "size"));
		json_decref(m);
	}
	free(t.out);
	return ret;
}

/* Copy src (u->ref, or it pinned to a digest) into u's layout. */
static int copy(struct pull *u, const char *src)
{
	char dest[PATH_MAX + 64];
	const char *argv[8];
	struct image_tool t = { .argv = argv, .tmpdir = u->work, .on_tick = pull_tick, .arg = u };
	int ret;

	snprintf(dest, sizeof(dest), "oci:%s:%s", u->layout, IMAGE_LAYOUT_TAG);
	skopeo_argv(u, argv, "copy", "--quiet", src, dest);
	ret = image_tool_run(&t);
	if (ret == -EIO)
		ret = image_skopeo_failed(src, "copy", &t);
	if (!ret)
		pull_tick(u);
	return ret;
}

static int unpack(struct pull *u, const char *layout)
{
	char img[PATH_MAX + 64], words[1024];
	const char *argv[] = { "umoci", "--log", "info", "unpack", "--image", img, u->bundle, NULL };
	struct image_tool t = { .argv = argv, .tmpdir = u->work, .on_line = unpack_line, .arg = u };
	json_t *m = NULL;
	char hex[65];
	int ret;

	ret = image_layout_manifest(layout, hex, &m);
	if (ret)
		return ret;
	u->layers = json_array_size(json_object_get(m, "layers"));
	json_decref(m);
	snprintf(img, sizeof(img), "%s:%s", layout, IMAGE_LAYOUT_TAG);
	ret = image_tool_run(&t);
	if (ret == -EIO) {
		image_tool_words(&t, words, sizeof(words));
		pr_err("%s: umoci unpack failed: %s", u->ref, words);
	}
	if (!ret && u->progress)
		u->progress(u->arg, "unpack", u->layers, u->layers);
	return ret;
}

/* Put what the pull made into place (under the cache lock): the layout,
 * then the rootfs (what makes the image present), then its source (key;
 * NULL: none, for a copy by digest). */
static int commit(struct pull *u, const char *key, const char *hex, int *fd)
{
	char p[PATH_MAX], dir[PATH_MAX];
	int ret = 0, dfd;

	if ((ret = image_cache_path(&u->k, p, sizeof(p), "locks", hex)))
		return ret;
	ret = lock_path(p, LOCK_SH, 0600);
	if (ret < 0)
		return ret;
	*fd = ret;
	/* The unpacked files reach the disk before their names do. */
	dfd = open(u->work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (syncfs(dfd) < 0)
			pr_warn("syncfs %s: %s", u->work, strerror(errno));
		close(dfd);
	}
	for (int i = 0; i < 2; i++) {
		const char *sub = i ? "rootfs" : "layouts", *from = i ? u->bundle : u->layout;

		if ((ret = image_cache_path(&u->k, p, sizeof(p), sub, hex)))
			return ret;
		if (image_is_dir(p))
			continue;
		if (rename(from, p) < 0) {
			ret = -errno;
			pr_perror("rename %s to %s", from, p);
			return ret;
		}
		if (!image_cache_path(&u->k, dir, sizeof(dir), sub, NULL))
			fsync_dir(dir);
	}
	if (key && !(ret = image_cache_path(&u->k, p, sizeof(p), "sources", key)))
		ret = write_file_atomic(p, hex, 64, 0600);
	return ret;
}

/* out's digest and bundle: those of hex in u's cache. */
static int image_fill(const struct pull *u, const char *hex, struct image *out)
{
	snprintf(out->digest, sizeof(out->digest), "sha256:%s", hex);
	return image_cache_path(&u->k, out->bundle, sizeof(out->bundle), "rootfs", hex);
}

/* The layout copied into the work directory, of digest hex, into the cache
 * and unpacked there, unless another pull put it there meanwhile (then 1,
 * nothing unpacked).  key (NULL: none) is the source that gave it.  hex is
 * held in out->lock_fd from here on. */
static int place(struct pull *u, const char *key, const char *hex, struct image *out)
{
	uint64_t t1 = now_ns();
	int lk, got, ret;

	lk = image_cache_lock(&u->k);
	if (lk < 0)
		return lk;
	got = image_cache_take(&u->k, hex, &out->lock_fd);
	if (got > 0 && key) {
		char p[PATH_MAX];

		ret = image_cache_path(&u->k, p, sizeof(p), "sources", key);
		if (!ret)
			ret = write_file_atomic(p, hex, 64, 0600);
		if (ret)
			got = ret;
	}
	close(lk);
	if (got)
		return got;
	ret = unpack(u, u->layout);
	if (ret)
		return ret;
	lk = image_cache_lock(&u->k);
	if (lk < 0)
		return lk;
	ret = commit(u, key, hex, &out->lock_fd);
	close(lk);
	if (!ret)
		out->unpack_ms = ms_since(t1);
	return ret;
}

static int pull(struct pull *u, struct image *out)
{
	char key[65], hex[65], layout[PATH_MAX];
	uint64_t t0 = now_ns();
	int lk, ret, got;

	/* 1. The source's manifest: an image already copied is not copied again. */
	ret = inspect(u, key);
	if (ret)
		return ret;
	lk = image_cache_lock(&u->k);
	if (lk < 0)
		return lk;
	got = image_cache_source(&u->k, key, hex) ? image_cache_take(&u->k, hex, &out->lock_fd) : 0;
	close(lk);
	if (got < 0)
		return got;
	if (got) {
		out->cached = true;
		out->pull_ms = ms_since(t0); /* the source's manifest only */
	} else {
		/* 2. Copy it into a layout of the work directory. */
		if (u->progress)
			u->progress(u->arg, "pull", 0, u->total);
		ret = copy(u, u->ref);
		if (!ret)
			ret = image_layout_manifest(u->layout, hex, NULL);
		if (ret)
			return ret;
		out->pull_ms = ms_since(t0);
		/* 3. Unpack it, unless another source gave the same image. */
		ret = place(u, key, hex, out);
		if (ret < 0)
			return ret;
		out->cached = ret > 0;
	}
	ret = image_fill(u, hex, out);
	if (!ret)
		ret = image_cache_path(&u->k, layout, sizeof(layout), "layouts", hex);
	if (!ret && !(out->config = image_layout_config(layout)))
		ret = -EIO;
	return ret;
}

/* ref pinned to digest hex where its transport can name one: docker://
 * with its tag or digest replaced by @sha256:<hex>.  skopeo (1.9) selects
 * an OCI layout's or an archive's manifest by its tag only: those stay ref,
 * and the digest is checked after the copy. */
static int pinned_ref(const char *ref, const char *hex, char *buf, size_t len)
{
	const char *name, *end, *from, *colon;
	int n;

	if (strncmp(ref, "docker://", 9)) {
		n = snprintf(buf, len, "%s", ref);
	} else {
		name = ref + 9;
		end = strchr(name, '@');
		if (!end)
			end = name + strlen(name);
		/* A ':' after the last '/' starts the tag (before it, a port). */
		from = memrchr(name, '/', (size_t)(end - name));
		from = from ? from : name;
		colon = memrchr(from, ':', (size_t)(end - from));
		if (colon)
			end = colon;
		n = snprintf(buf, len, "docker://%.*s@sha256:%s", (int)(end - name), name, hex);
	}
	if (n < 0 || (size_t)n >= len) {
		pr_err("%s: reference too long", ref);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* Copy the image of digest want from u->ref (pinned where it can be) and
 * put it into the cache, only if the copy is that very image. */
static int pull_digest(struct pull *u, const char *want, struct image *out)
{
	char pinned[PATH_MAX + 128], hex[65];
	uint64_t t0 = now_ns();
	int ret;

	ret = pinned_ref(u->ref, want, pinned, sizeof(pinned));
	if (ret)
		return ret;
	if (u->progress)
		u->progress(u->arg, "pull", 0, 0);
	ret = copy(u, pinned);
	if (ret == -ENOENT && strcmp(pinned, u->ref)) {
		/* skopeo may have converted the registry's manifest when the
		 * snapshot copied it (a Docker one into the layout's OCI one):
		 * the digest is then the layout's, one the registry never
		 * had.  The reference as the spec names it, checked below. */
		pr_info("%s: not in the registry by that digest (a manifest converted when the "
			"snapshot copied it?): copying %s and checking its digest",
			pinned, u->ref);
		if (rm_rf(u->layout))
			return -EIO;
		ret = copy(u, u->ref);
	}
	if (!ret)
		ret = image_layout_manifest(u->layout, hex, NULL);
	if (ret)
		return ret;
	if (strcmp(hex, want)) {
		pr_err("%s holds image sha256:%s now, not sha256:%s, the one the snapshot was "
		       "made on (its tag moved, or it was rebuilt): not used",
		       u->ref, hex, want);
		return -ESTALE;
	}
	out->pull_ms = ms_since(t0);
	ret = place(u, NULL, hex, out);
	return ret < 0 ? ret : 0;
}

/* u for ref: the reference and authfile checked, the cache opened; *t and,
 * for a local transport, its path in local. */
static int pull_open(struct pull *u, enum image_transport *t, char *local, size_t len)
{
	char err[256];
	int ret;

	if (spec_image_ref(u->ref, t, local, len, err, sizeof(err))) {
		pr_err("%s", err);
		return -EINVAL;
	}
	if (u->authfile && *u->authfile && access(u->authfile, R_OK) < 0) {
		ret = -errno;
		pr_err("the registry auth file %s cannot be read: %s", u->authfile,
		       strerror(errno));
		return ret;
	}
	return image_cache_open(u->c, &u->k);
}

/* u's work directory, tmp/<pid>-<n>/ (removed by pull_close). */
static int pull_work(struct pull *u)
{
	static atomic_uint seq;
	int ret = image_cache_path(&u->k, u->work, sizeof(u->work), "tmp", NULL);

	if (ret)
		return ret;
	snprintf(u->work + strlen(u->work), sizeof(u->work) - strlen(u->work), "/%d-%u",
		 (int)getpid(), atomic_fetch_add(&seq, 1));
	if (mkdir(u->work, 0700) < 0) {
		ret = -errno;
		pr_perror("mkdir %s", u->work);
		u->work[0] = '\0';
		return ret;
	}
	snprintf(u->layout, sizeof(u->layout), "%s/layout", u->work);
	snprintf(u->bundle, sizeof(u->bundle), "%s/bundle", u->work);
	return 0;
}

/* The end of a pull that returned ret: its work directory removed, and on
 * failure out emptied, the reason kept. */
static int pull_close(struct pull *u, struct image *out, int ret)
{
	char msg[1024];

	if (u->work[0] && rm_rf(u->work))
		pr_warn("work directory %s is left behind (gc removes it)", u->work);
	if (!ret)
		return 0;
	snprintf(msg, sizeof(msg), "%s", log_last_error());
	image_release(out);
	memset(out, 0, sizeof(*out));
	out->lock_fd = -1;
	log_set_error("%s", msg);
	return ret;
}

int image_get(const struct thaw_config *c, const char *ref, const char *authfile,
	      image_progress_fn progress, void *arg, struct image *out)
{
	struct pull u = { .c = c, .ref = ref, .authfile = authfile, .progress = progress,
			  .arg = arg };
	enum image_transport t;
	int ret;

	memset(out, 0, sizeof(*out));
	out->lock_fd = -1;
	ret = pull_open(&u, &t, NULL, 0);
	if (!ret)
		ret = pull_work(&u);
	if (!ret)
		ret = pull(&u, out);
	if (pull_close(&u, out, ret))
		return ret;
	pr_info("image %s: %s%s, pull %.0f ms, unpack %.0f ms", ref, out->digest,
		out->cached ? " (cached)" : "", out->pull_ms, out->unpack_ms);
	return 0;
}

int image_get_digest(const struct thaw_config *c, const char *ref, const char *digest,
		     const char *authfile, image_progress_fn progress, void *arg,
		     struct image *out)
{
	struct pull u = { .c = c, .ref = ref, .authfile = authfile, .progress = progress,
			  .arg = arg };
	char local[PATH_MAX], why[512];
	const char *hex = digest + 7;
	enum image_transport t;
	int lk, ret;

	memset(out, 0, sizeof(*out));
	out->lock_fd = -1;
	if (strncmp(digest, "sha256:", 7) || !image_hex64(hex)) {
		pr_err("image %s: \"%s\" is not a sha256 digest", ref, digest);
		return -EINVAL;
	}
	ret = pull_open(&u, &t, local, sizeof(local));
	if (ret)
		goto out;
	/* In the cache: nothing to copy. */
	lk = image_cache_lock(&u.k);
	if (lk < 0) {
		ret = lk;
		goto out;
	}
	ret = image_cache_take(&u.k, hex, &out->lock_fd);
	close(lk);
	if (ret > 0) {
		out->cached = true;
		ret = image_fill(&u, hex, out);
		goto out;
	}
	if (ret < 0)
		goto out;
	/* A local source only where c allows it, as a PUT checks it (the
	 * spec may have come from a remote). */
	if (t != IMAGE_DOCKER && !config_path_allowed(c, local, why, sizeof(why))) {
		pr_err("%s: %s", ref, why);
		ret = -EACCES;
		goto out;
	}
	ret = pull_work(&u);
	if (!ret)
		ret = pull_digest(&u, hex, out);
	if (!ret)
		ret = image_fill(&u, hex, out);
out:
	/* The reason names the image by its digest. */
	if (ret && !strstr(log_last_error(), hex)) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s",
			 log_last_error()[0] ? log_last_error() : strerror(-ret));
		log_set_error("image %s: %s", digest, msg);
	}
	if (pull_close(&u, out, ret))
		return ret;
	if (!out->cached)
		pr_info("image %s: %s copied by digest, pull %.0f ms, unpack %.0f ms", ref,
			out->digest, out->pull_ms, out->unpack_ms);
	return 0;
}

void image_release(struct image *im)
{
	if (!im)
		return;
	if (im->lock_fd >= 0)
		close(im->lock_fd);
	im->lock_fd = -1;
	json_decref(im->config);
	im->config = NULL;
}
