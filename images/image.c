/* SPDX-License-Identifier: Apache-2.0 */
/* image.c — see image.h.
 *
 * skopeo and umoci are run as programs (Debian's packages): skopeo reads
 * every transport users ship images in and checks every blob against its
 * digest; umoci unpacks an OCI layout's layers in order, whiteouts included.
 * What they print on failure is kept (its end) and turned into the reason.
 */
#define LOG_PREFIX "image: "
#include "images/image.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"
#include "store/manifest.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define LAYOUT_TAG    "thaw"
#define TAIL_MAX      4096
#define RAW_MAX       (4u << 20) /* a manifest (list) printed by skopeo inspect --raw */
#define BLOB_JSON_MAX (8u << 20) /* an index, a manifest or a config read from a layout */
#define TICK_MS       500
#define USER_FILE_MAX (1u << 20)

extern char **environ;

/* ---- running skopeo and umoci ---- */

struct tool {
	const char *const *argv;
	const char *tmpdir;  /* the child's TMPDIR (its big temporary files) */
	bool keep_out;       /* stdout into out; else it joins the tail */
	char *out;           /* stdout, NUL-terminated (you free it) */
	size_t out_len;
	char tail[TAIL_MAX]; /* the end of what it printed */
	size_t tail_len;
	char line[512];      /* stderr's current line, for on_line */
	size_t line_len;
	void (*on_line)(void *arg, const char *line);
	void (*on_tick)(void *arg);
	void *arg;
};

static void tail_add(struct tool *t, const char *buf, size_t n)
{
	if (n >= TAIL_MAX) {
		buf += n - (TAIL_MAX - 1);
		n = TAIL_MAX - 1;
	}
	if (t->tail_len + n >= TAIL_MAX) {
		size_t drop = t->tail_len + n - (TAIL_MAX - 1);

		memmove(t->tail, t->tail + drop, t->tail_len - drop);
		t->tail_len -= drop;
	}
	memcpy(t->tail + t->tail_len, buf, n);
	t->tail_len += n;
	t->tail[t->tail_len] = '\0';
}

static void lines_add(struct tool *t, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\n') {
			t->line[t->line_len] = '\0';
			if (t->on_line)
				t->on_line(t->arg, t->line);
			t->line_len = 0;
		} else if (t->line_len + 1 < sizeof(t->line)) {
			t->line[t->line_len++] = buf[i];
		}
	}
}

static int out_add(struct tool *t, const char *buf, size_t n)
{
	char *p;

	if (t->out_len + n > RAW_MAX)
		return -EFBIG;
	p = realloc(t->out, t->out_len + n + 1);
	if (!p)
		return -ENOMEM;
	t->out = p;
	memcpy(t->out + t->out_len, buf, n);
	t->out_len += n;
	t->out[t->out_len] = '\0';
	return 0;
}

/* environ with TMPDIR replaced (built before the fork: the child of a
 * threaded process may only make async-signal-safe calls). */
static char **child_env(const char *tmpdir)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(char *));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!tmpdir || strncmp(environ[i], "TMPDIR=", 7))
			env[k++] = environ[i];
	if (tmpdir && asprintf(&env[k], "TMPDIR=%s", tmpdir) < 0) {
		free(env);
		return NULL;
	}
	return env;
}

/* Run t->argv to its end.  0 if it exited 0; -ENOENT if it could not be
 * run at all; -EIO otherwise (what it printed is in t->tail). */
static int tool_run(struct tool *t)
{
	char **env = child_env(t->tmpdir), buf[8192];
	uint64_t last_tick = now_ns();
	struct spawn sp = SPAWN_INIT;
	struct pollfd fds[2];
	int status = 0, ret;

	t->tail_len = 0;
	t->tail[0] = '\0';
	if (!env)
		return -ENOMEM;
	sp.argv = t->argv;
	sp.env = env;
	sp.out = sp.err = SPAWN_PIPE;
	ret = spawn_start(&sp);
	if (ret)
		goto out;
	fds[0] = (struct pollfd){ .fd = sp.pipe_out, .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = sp.pipe_err, .events = POLLIN };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		int r = poll(fds, 2, TICK_MS);

		if (r < 0 && errno != EINTR) {
			ret = -errno;
			pr_perror("poll");
			break;
		}
		for (int i = 0; r > 0 && i < 2; i++) {
			ssize_t n;

			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			n = read(fds[i].fd, buf, sizeof(buf));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				fds[i].fd = -1;
				continue;
			}
			if (i == 0 && t->keep_out) {
				int e = out_add(t, buf, (size_t)n);

				if (e && !ret) {
					ret = e;
					pr_err("%s printed more than %u bytes", t->argv[0], RAW_MAX);
				}
			} else {
				tail_add(t, buf, (size_t)n);
				lines_add(t, buf, (size_t)n);
			}
		}
		if (t->on_tick && now_ns() - last_tick >= TICK_MS * 1000000ull) {
			last_tick = now_ns();
			t->on_tick(t->arg);
		}
	}
	close(sp.pipe_out);
	close(sp.pipe_err);
	spawn_wait(&sp, -1, &status);
	if (!ret && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		ret = -ENOENT;
		pr_err("%s cannot be run (not installed? make deps installs it)", t->argv[0]);
	} else if (!ret && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		ret = -EIO;
	}
out:
	if (t->tmpdir) {
		for (size_t i = 0; env[i]; i++)
			if (!strncmp(env[i], "TMPDIR=", 7))
				free(env[i]);
	}
	free(env);
	return ret;
}

/* skopeo's own words: the msg="…" of its last fatal line, else the last
 * line it printed; into buf. */
static void tool_words(const struct tool *t, char *buf, size_t len)
{
	const char *m = NULL, *p = t->tail;
	size_t o = 0;

	while ((p = strstr(p, "msg=\""))) {
		m = p + 5;
		p = m;
	}
	if (!m) {
		const char *end = t->tail + t->tail_len;

		while (end > t->tail && (end[-1] == '\n' || end[-1] == ' '))
			end--;
		m = end;
		while (m > t->tail && m[-1] != '\n')
			m--;
		snprintf(buf, len, "%.*s", (int)(end - m), m);
		return;
	}
	for (; *m && *m != '\n' && o + 1 < len; m++) {
		if (m[0] == '\\' && m[1]) {
			m++;
		} else if (*m == '"') {
			break;
		}
		buf[o++] = *m;
	}
	buf[o] = '\0';
	/* skopeo puts every failure to open a source under this heading. */
	if (!strncmp(buf, "Error parsing image name \"", 26)) {
		const char *rest = strstr(buf + 26, "\": ");

		if (rest)
			memmove(buf, rest + 3, strlen(rest + 3) + 1);
	}
}

static bool has(const char *s, const char *what)
{
	return strcasestr(s, what) != NULL;
}

/* Why skopeo failed, as an errno and in words. */
static int skopeo_failed(const char *ref, const char *step, const struct tool *t)
{
	char words[1024];
	const char *what;
	int ret;

	tool_words(t, words, sizeof(words));
	if (has(words, "invalid reference format") || has(words, "invalid image name") ||
	    has(words, "invalid transport")) {
		ret = -EINVAL;
		what = "bad reference";
	} else if (has(words, "unauthorized") || has(words, "authentication required") ||
		   has(words, "access denied") || has(words, "denied:") ||
		   has(words, "requested access to the resource is denied")) {
		ret = -EACCES;
		what = "unauthorised (the registry refused; thawd --registry-auth names the "
		       "credentials)";
	} else if (has(words, "dial tcp") || has(words, "no such host") ||
		   has(words, "connection refused") || has(words, "network is unreachable") ||
		   has(words, "i/o timeout") || has(words, "handshake timeout") ||
		   has(words, "name resolution") || has(words, "connection reset")) {
		ret = -ENETUNREACH;
		what = "no network (the registry cannot be reached)";
	} else if (has(words, "digest did not match") || has(words, "digest mismatch") ||
		   has(words, "does not match") || has(words, "unexpected eof") ||
		   has(words, "invalid tar") || has(words, "gzip: invalid")) {
		ret = -EIO;
		what = "its data is damaged (a digest does not match)";
	} else if (has(words, "manifest unknown") || has(words, "not found") ||
		   has(words, "no such file or directory") || has(words, "does not exist") ||
		   has(words, "no descriptor found") || has(words, "name unknown")) {
		ret = -ENOENT;
		what = "not found";
	} else {
		ret = -EIO;
		what = "failed";
	}
	pr_err("%s: %s: %s (skopeo %s)", ref, what, words[0] ? words : "no message",
	       step);
	return ret;
}

/* ---- small helpers ---- */

static bool hex64(const char *h)
{
	size_t i = 0;

	for (; h[i]; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return false;
	return i == 64;
}

static void sha256_hex(const void *buf, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		memset(md, 0, 32);
	hex_encode(md, 32, hex);
}

static bool is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Bytes of the regular files under dir (what a copy has written so far). */
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

static uint64_t dir_bytes(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? 0 : dir_bytes_at(fd, 0);
}

struct cache {
	char base[PATH_MAX];
};

static int cache_path(const struct cache *k, char *buf, size_t len, const char *sub,
		      const char *name)
{
	int n = snprintf(buf, len, "%s/%s%s%s", k->base, sub, name ? "/" : "", name ? name : "");

	if (n < 0 || (size_t)n >= len) {
		pr_err("path too long under %s", k->base);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int cache_open(const struct thaw_config *c, struct cache *k)
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
		ret = cache_path(k, p, sizeof(p), subs[i], NULL);
		if (!ret)
			ret = mkdir_p(p, 0700);
		if (ret)
			return ret;
	}
	return 0;
}

/* The whole cache, held while it is looked up or changed (short), and by gc. */
static int cache_lock(const struct cache *k)
{
	char p[PATH_MAX];
	int ret = cache_path(k, p, sizeof(p), ".lock", NULL);

	return ret ? ret : lock_path(p, LOCK_EX, 0600);
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

	return d && !strncmp(d, "sha256:", 7) && hex64(d + 7) ? d + 7 : NULL;
}

static json_t *load_blob(const char *layout, const char *hex)
{
	char p[PATH_MAX + 128];

	snprintf(p, sizeof(p), "%s/blobs/sha256/%s", layout, hex);
	return load_json(p);
}

/* The manifest digest the layout's index names for LAYOUT_TAG (or its only
 * manifest) into hex, and (may be NULL) the manifest itself. */
static int layout_manifest(const char *layout, char hex[65], json_t **manifest)
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

		if ((name && !strcmp(name, LAYOUT_TAG)) || json_array_size(ms) == 1)
			pick = d;
	}
	h = pick ? desc_hex(pick) : NULL;
	if (!h) {
		pr_err("%s: no manifest for tag %s", p, LAYOUT_TAG);
		json_decref(index);
		return -EIO;
	}
	memcpy(hex, h, 65);
	json_decref(index);
	if (manifest && !(*manifest = load_blob(layout, hex)))
		return -EIO;
	return 0;
}

/* The image config's "config" object (a new reference; an empty object if
 * the image has none). */
static json_t *layout_config(const char *layout)
{
	json_t *m = NULL, *cfg, *out;
	const char *h;
	char hex[65];

	if (layout_manifest(layout, hex, &m))
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

/* ---- the pull ---- */

struct pull {
	const struct thaw_config *c;
	struct cache k;
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
	uint64_t done = dir_bytes(u->layout);

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
	struct tool t = { .argv = argv, .tmpdir = u->work, .keep_out = true };
	json_t *m, *layers, *l;
	size_t i;
	int ret;

	skopeo_argv(u, argv, "inspect", "--raw", u->ref, NULL);
	ret = tool_run(&t);
	if (ret == -EIO)
		ret = skopeo_failed(u->ref, "inspect", &t);
	if (!ret && !t.out_len) {
		pr_err("%s: skopeo inspect printed no manifest", u->ref);
		ret = -EIO;
	}
	if (!ret) {
		sha256_hex(t.out, t.out_len, key);
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
	struct tool t = { .argv = argv, .tmpdir = u->work, .on_tick = pull_tick, .arg = u };
	int ret;

	snprintf(dest, sizeof(dest), "oci:%s:%s", u->layout, LAYOUT_TAG);
	skopeo_argv(u, argv, "copy", "--quiet", src, dest);
	ret = tool_run(&t);
	if (ret == -EIO)
		ret = skopeo_failed(src, "copy", &t);
	if (!ret)
		pull_tick(u);
	return ret;
}

static int unpack(struct pull *u, const char *layout)
{
	char img[PATH_MAX + 64], words[1024];
	const char *argv[] = { "umoci", "--log", "info", "unpack", "--image", img, u->bundle, NULL };
	struct tool t = { .argv = argv, .tmpdir = u->work, .on_line = unpack_line, .arg = u };
	json_t *m = NULL;
	char hex[65];
	int ret;

	ret = layout_manifest(layout, hex, &m);
	if (ret)
		return ret;
	u->layers = json_array_size(json_object_get(m, "layers"));
	json_decref(m);
	snprintf(img, sizeof(img), "%s:%s", layout, LAYOUT_TAG);
	ret = tool_run(&t);
	if (ret == -EIO) {
		tool_words(&t, words, sizeof(words));
		pr_err("%s: umoci unpack failed: %s", u->ref, words);
	}
	if (!ret && u->progress)
		u->progress(u->arg, "unpack", u->layers, u->layers);
	return ret;
}

/* Lock digest hex shared (under the cache lock) and check that both its
 * layout and its rootfs are there: 1 and *fd if so, 0 if not (nothing held). */
static int take_if_present(const struct cache *k, const char *hex, int *fd)
{
	char p[PATH_MAX], q[PATH_MAX];
	int ret;

	*fd = -1;
	if ((ret = cache_path(k, p, sizeof(p), "layouts", hex)) ||
	    (ret = cache_path(k, q, sizeof(q), "rootfs", hex)))
		return ret;
	if (!is_dir(p) || !is_dir(q))
		return 0;
	if ((ret = cache_path(k, p, sizeof(p), "locks", hex)))
		return ret;
	ret = lock_path(p, LOCK_SH, 0600);
	if (ret < 0)
		return ret;
	*fd = ret;
	return 1;
}

/* The digest sources/<key> names, if any, into hex. */
static bool source_known(const struct cache *k, const char *key, char hex[65])
{
	char p[PATH_MAX], *text = NULL;
	size_t len = 0;
	bool ok;

	if (cache_path(k, p, sizeof(p), "sources", key) || read_file(p, &text, &len, 128))
		return false;
	while (len && (text[len - 1] == '\n'))
		text[--len] = '\0';
	ok = hex64(text);
	if (ok)
		memcpy(hex, text, 65);
	free(text);
	return ok;
}

/* Put what the pull made into place (under the cache lock): the layout,
 * then the rootfs (what makes the image present), then its source (key;
 * NULL: none, for a copy by digest). */
static int commit(struct pull *u, const char *key, const char *hex, int *fd)
{
	char p[PATH_MAX], dir[PATH_MAX];
	int ret = 0, dfd;

	if ((ret = cache_path(&u->k, p, sizeof(p), "locks", hex)))
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

		if ((ret = cache_path(&u->k, p, sizeof(p), sub, hex)))
			return ret;
		if (is_dir(p))
			continue;
		if (rename(from, p) < 0) {
			ret = -errno;
			pr_perror("rename %s to %s", from, p);
			return ret;
		}
		if (!cache_path(&u->k, dir, sizeof(dir), sub, NULL))
			fsync_dir(dir);
	}
	if (key && !(ret = cache_path(&u->k, p, sizeof(p), "sources", key)))
		ret = write_file_atomic(p, hex, 64, 0600);
	return ret;
}

/* out's digest and bundle: those of hex in u's cache. */
static int image_fill(const struct pull *u, const char *hex, struct image *out)
{
	snprintf(out->digest, sizeof(out->digest), "sha256:%s", hex);
	return cache_path(&u->k, out->bundle, sizeof(out->bundle), "rootfs", hex);
}

/* The layout copied into the work directory, of digest hex, into the cache
 * and unpacked there, unless another pull put it there meanwhile (then 1,
 * nothing unpacked).  key (NULL: none) is the source that gave it.  hex is
 * held in out->lock_fd from here on. */
static int place(struct pull *u, const char *key, const char *hex, struct image *out)
{
	uint64_t t1 = now_ns();
	int lk, got, ret;

	lk = cache_lock(&u->k);
	if (lk < 0)
		return lk;
	got = take_if_present(&u->k, hex, &out->lock_fd);
	if (got > 0 && key) {
		char p[PATH_MAX];

		ret = cache_path(&u->k, p, sizeof(p), "sources", key);
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
	lk = cache_lock(&u->k);
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
	lk = cache_lock(&u->k);
	if (lk < 0)
		return lk;
	got = source_known(&u->k, key, hex) ? take_if_present(&u->k, hex, &out->lock_fd) : 0;
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
			ret = layout_manifest(u->layout, hex, NULL);
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
		ret = cache_path(&u->k, layout, sizeof(layout), "layouts", hex);
	if (!ret && !(out->config = layout_config(layout)))
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
		ret = layout_manifest(u->layout, hex, NULL);
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
	return cache_open(u->c, &u->k);
}

/* u's work directory, tmp/<pid>-<n>/ (removed by pull_close). */
static int pull_work(struct pull *u)
{
	static atomic_uint seq;
	int ret = cache_path(&u->k, u->work, sizeof(u->work), "tmp", NULL);

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
	if (strncmp(digest, "sha256:", 7) || !hex64(hex)) {
		pr_err("image %s: \"%s\" is not a sha256 digest", ref, digest);
		return -EINVAL;
	}
	ret = pull_open(&u, &t, local, sizeof(local));
	if (ret)
		goto out;
	/* In the cache: nothing to copy. */
	lk = cache_lock(&u.k);
	if (lk < 0) {
		ret = lk;
		goto out;
	}
	ret = take_if_present(&u.k, hex, &out->lock_fd);
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

/* ---- the spec an image gives ---- */

/* A file of the rootfs, symlinks resolved inside it (an image's /etc/passwd
 * may be a link anywhere); NULL if there is none. */
static char *read_in_root(const char *bundle, const char *rel)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	char root[PATH_MAX + 16], *text = NULL;
	int rfd, fd;
	size_t len = 0;
	ssize_t n;

	snprintf(root, sizeof(root), "%s/rootfs", bundle);
	rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return NULL;
	fd = (int)syscall(SYS_openat2, rfd, rel, &how, sizeof(how));
	close(rfd);
	if (fd < 0)
		return NULL;
	text = malloc(USER_FILE_MAX + 1);
	while (text && len < USER_FILE_MAX && (n = read(fd, text + len, USER_FILE_MAX - len)) > 0)
		len += (size_t)n;
	close(fd);
	if (text)
		text[len] = '\0';
	return text;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/* In a passwd or group file, the line whose field 0 is name (or, numeric,
 * whose field 2 is): its fields 2 and 3 as numbers.  false if none. */
static bool lookup(const char *text, const char *name, long *f2, long *f3)
{
	bool by_id = all_digits(name);

	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n'), *f[4] = { l, NULL, NULL, NULL };
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);
		char line[1024];

		if (ll < sizeof(line)) {
			memcpy(line, l, ll);
			line[ll] = '\0';
			char *save = NULL, *tok = strtok_r(line, ":", &save);
			int i = 0;

			for (; tok && i < 4; tok = strtok_r(NULL, ":", &save))
				f[i++] = tok;
			if (i >= 3 && (by_id ? !strcmp(f[2], name) : !strcmp(f[0], name))) {
				*f2 = strtol(f[2], NULL, 10);
				*f3 = i >= 4 && all_digits(f[3]) ? strtol(f[3], NULL, 10) : 0;
				return true;
			}
		}
		l = nl ? nl + 1 : NULL;
	}
	return false;
}

/* user[:group], names looked up in the image's /etc/passwd and /etc/group,
 * into uid and gid.  -EINVAL with why. */
static int resolve_user(const char *bundle, const char *user, long *uid, long *gid, char *err,
			size_t errlen)
{
	char u[128], *g;
	char *passwd = NULL, *group = NULL;
	long x;
	int ret = 0;

	snprintf(u, sizeof(u), "%s", user);
	g = strchr(u, ':');
	if (g)
		*g++ = '\0';
	*uid = *gid = 0;
	if (!*u || !strcmp(u, "root"))
		u[0] = '0', u[1] = '\0';
	passwd = read_in_root(bundle, "etc/passwd");
	if (all_digits(u)) {
		*uid = strtol(u, NULL, 10);
		if (passwd)
			(void)lookup(passwd, u, &x, gid);
	} else if (!passwd || !lookup(passwd, u, uid, gid)) {
		snprintf(err, errlen, "user: \"%s\" is not in the image's /etc/passwd", u);
		ret = -EINVAL;
		goto out;
	}
	if (g && all_digits(g)) {
		*gid = strtol(g, NULL, 10);
	} else if (g) {
		group = read_in_root(bundle, "etc/group");
		if (!strcmp(g, "root"))
			*gid = 0;
		else if (!group || !lookup(group, g, gid, &x)) {
			snprintf(err, errlen, "user: group \"%s\" is not in the image's /etc/group", g);
			ret = -EINVAL;
		}
	}
out:
	free(passwd);
	free(group);
	return ret;
}

int image_apply(const struct image *im, const struct func_spec *spec, struct func_spec **out,
		char *err, size_t errlen)
{
	const json_t *cfg = im->config;
	json_t *j = spec_to_json(spec), *v, *env;
	const char *user = spec->user, *key;
	long uid = 0, gid = 0;
	size_t i;
	int ret = -EINVAL;

	*out = NULL;
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	json_object_del(j, "image");
	json_object_del(j, "user");
	json_object_set_new(j, "bundle", json_string(im->bundle));

	/* command: the spec's, else Entrypoint followed by Cmd. */
	if (!spec->command) {
		json_t *cmd = json_array();

		for (int k = 0; k < 2; k++) {
			json_array_foreach(json_object_get(cfg, k ? "Cmd" : "Entrypoint"), i, v)
			{
				json_array_append(cmd, v);
			}
		}
		if (!json_array_size(cmd)) {
			json_decref(cmd);
			snprintf(err, errlen, "command: the spec gives none, and the image %s has no "
					      "Entrypoint or Cmd", im->digest);
			goto out;
		}
		json_object_set_new(j, "command", cmd);
	}
	/* env: the image's, with the spec's on top. */
	env = json_object_get(j, "env");
	json_array_foreach(json_object_get(cfg, "Env"), i, v)
	{
		const char *kv = json_string_value(v), *eq = kv ? strchr(kv, '=') : NULL;
		char name[256];

		if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
		if (!json_object_get(env, name))
			json_object_set_new(env, name, json_string(eq + 1));
	}
	/* cwd: the spec's, else WorkingDir. */
	v = json_object_get(cfg, "WorkingDir");
	if (!spec->cwd && json_is_string(v) && json_string_value(v)[0] == '/')
		json_object_set_new(j, "cwd", json_string(json_string_value(v)));
	/* port: the spec's, else the first exposed TCP port. */
	if (!spec->port) {
		long port = 0;

		json_object_foreach(json_object_get(cfg, "ExposedPorts"), key, v)
		{
			char *end;
			long p = strtol(key, &end, 10);

			if (!port && p > 0 && p < 65536 && (!*end || !strcmp(end, "/tcp")))
				port = p;
		}
		if (!port) {
			snprintf(err, errlen, "port: the spec gives none, and the image %s exposes no "
					      "TCP port", im->digest);
			goto out;
		}
		json_object_set_new(j, "port", json_integer(port));
	}
	/* user: the spec's, else the image's; only uid 0 can be dumped. */
	if (!user)
		user = json_string_value(json_object_get(cfg, "User"));
	ret = resolve_user(im->bundle, user ? user : "", &uid, &gid, err, errlen);
	if (ret)
		goto out;
	if (uid || gid) {
		snprintf(err, errlen,
			 "user: the %s runs as \"%s\" (uid %ld, gid %ld), but thaw runs a function "
			 "as uid 0 without capabilities: CRIU cannot checkpoint another uid's "
			 "process without CAP_SYS_RESOURCE (docs/DESIGN.md, \"Confinement\"); "
			 "give \"user\": \"root\" to run it as uid 0",
			 spec->user ? "spec" : "image", user, uid, gid);
		ret = -EINVAL;
		goto out;
	}
	ret = spec_parse(j, spec->id, out, err, errlen);
out:
	json_decref(j);
	return ret;
}

/* ---- gc ---- */

struct root_ids {
	dev_t *dev;
	ino_t *ino;
	size_t n, cap;
};

/* The root directory of every live process (a container's is its rootfs). */
static void live_roots(struct root_ids *r)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char p[300];
		struct stat st;

		if (!all_digits(de->d_name))
			continue;
		snprintf(p, sizeof(p), "/proc/%s/root", de->d_name);
		if (stat(p, &st) < 0)
			continue;
		size_t dev_cap = r->cap; /* dev and ino grow together */

		if (ARRAY_GROW(r->dev, dev_cap, r->n + 1, 256) ||
		    ARRAY_GROW(r->ino, r->cap, r->n + 1, 256))
			break;
		r->dev[r->n] = st.st_dev;
		r->ino[r->n++] = st.st_ino;
	}
	if (d)
		closedir(d);
}

static bool is_live_root(const struct root_ids *r, const char *bundle)
{
	char p[PATH_MAX + 16];
	struct stat st;

	snprintf(p, sizeof(p), "%s/rootfs", bundle);
	if (stat(p, &st) < 0)
		return false;
	for (size_t i = 0; i < r->n; i++)
		if (r->dev[i] == st.st_dev && r->ino[i] == st.st_ino)
			return true;
	return false;
}

/* Digests that the store's manifests name, as a JSON object of hex → true. */
static int used_digests(struct store *s, json_t *used)
{
	json_t *list = NULL, *e;
	size_t i;
	int ret = store_list(s, &list);

	if (ret)
		return ret;
	json_array_foreach(list, i, e)
	{
		const char *id = json_string_value(json_object_get(e, "id"));
		struct manifest *m = NULL;
		const char *d;

		if (!id)
			continue;
		ret = store_manifest_load(s, id, &m, NULL);
		if (ret == -ENOENT)
			continue;
		if (ret) {
			/* A manifest that cannot be read may name any image. */
			pr_warn("gc: manifest %s cannot be read: nothing is removed", id);
			break;
		}
		d = json_string_value(json_object_get(json_object_get(m->meta, "image"), "digest"));
		if (d && !strncmp(d, "sha256:", 7) && hex64(d + 7))
			json_object_set_new(used, d + 7, json_true());
		manifest_free(m);
	}
	json_decref(list);
	return ret;
}

/* Remove digest hex: out of the way first (a rename), so that a crash
 * leaves no half-removed rootfs that looks whole. */
static int remove_image(const struct cache *k, const char *hex)
{
	static atomic_uint seq;
	char p[PATH_MAX], q[PATH_MAX], name[128];
	int ret = 0;

	for (int i = 0; i < 2; i++) {
		const char *sub = i ? "layouts" : "rootfs";

		snprintf(name, sizeof(name), "%d-gc-%u", (int)getpid(), atomic_fetch_add(&seq, 1));
		if (cache_path(k, p, sizeof(p), sub, hex) || cache_path(k, q, sizeof(q), "tmp", name))
			return -ENAMETOOLONG;
		if (rename(p, q) < 0) {
			if (errno != ENOENT) {
				ret = -errno;
				pr_perror("rename %s", p);
			}
			continue;
		}
		if (rm_rf(q))
			pr_warn("gc: %s is left behind", q);
	}
	return ret;
}

static void remove_sources_of(const struct cache *k, const json_t *gone)
{
	char dir[PATH_MAX], hex[65];
	struct dirent *de;
	DIR *d;

	if (cache_path(k, dir, sizeof(dir), "sources", NULL) || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (!source_known(k, de->d_name, hex) || json_object_get(gone, hex))
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

/* Work directories whose process is gone. */
static void remove_stale_work(const struct cache *k)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct dirent *de;
	DIR *d;

	if (cache_path(k, dir, sizeof(dir), "tmp", NULL) || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		long pid = strtol(de->d_name, NULL, 10);

		if (de->d_name[0] == '.' || pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		if (!cache_path(k, p, sizeof(p), "tmp", de->d_name) && rm_rf(p))
			pr_warn("gc: %s is left behind", p);
	}
	closedir(d);
}

int image_gc(const struct thaw_config *c, struct store *s, unsigned *removed)
{
	struct root_ids roots = { 0 };
	json_t *used = json_object(), *held = json_object(), *gone = json_object(), *v;
	char dir[PATH_MAX], p[PATH_MAX];
	struct cache k;
	struct dirent *de;
	const char *hex;
	DIR *d;
	int lk = -1, ret;

	if (removed)
		*removed = 0;
	if (!used || !held || !gone) {
		ret = -ENOMEM;
		goto out;
	}
	if (snprintf(k.base, sizeof(k.base), "%s/images", c->data_dir) >= (int)sizeof(k.base) ||
	    cache_path(&k, dir, sizeof(dir), "rootfs", NULL)) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (!is_dir(dir)) {
		ret = 0;
		goto out;
	}
	lk = cache_lock(&k);
	if (lk < 0) {
		ret = lk;
		goto out;
	}
	remove_stale_work(&k);
	/* Every image no snapshot in progress holds, locked first: a snapshot
	 * that held one has written its manifest before it let go, so the
	 * listing below, made after, sees it. */
	for (int i = 0; i < 2; i++) {
		if (cache_path(&k, dir, sizeof(dir), i ? "layouts" : "rootfs", NULL) ||
		    !(d = opendir(dir)))
			continue;
		while ((de = readdir(d))) {
			int fd;

			if (!hex64(de->d_name) || json_object_get(held, de->d_name) ||
			    cache_path(&k, p, sizeof(p), "locks", de->d_name))
				continue;
			fd = lock_path(p, LOCK_EX | LOCK_NB, 0600);
			if (fd >= 0)
				json_object_set_new(held, de->d_name, json_integer(fd));
		}
		closedir(d);
		d = NULL;
	}
	ret = used_digests(s, used);
	if (ret)
		goto out;
	live_roots(&roots);
	json_object_foreach(held, hex, v)
	{
		if (json_object_get(used, hex))
			continue;
		if (cache_path(&k, p, sizeof(p), "rootfs", hex) || is_live_root(&roots, p))
			continue;
		if (remove_image(&k, hex) == 0) {
			json_object_set_new(gone, hex, json_true());
			pr_info("gc: image sha256:%s removed: no snapshot names it", hex);
			if (removed)
				(*removed)++;
			if (!cache_path(&k, p, sizeof(p), "locks", hex))
				unlink(p);
		}
	}
	remove_sources_of(&k, gone);
out:
	json_object_foreach(held, hex, v)
	{
		close((int)json_integer_value(v));
	}
	if (lk >= 0)
		close(lk);
	free(roots.dev);
	free(roots.ino);
	json_decref(used);
	json_decref(held);
	json_decref(gone);
	return ret;
}
