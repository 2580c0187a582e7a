/* SPDX-License-Identifier: Apache-2.0 */
/* config.c — see config.h. */
#define LOG_PREFIX "config: "
#include "common/config.h"
#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}

static int copy_path(char *dst, const char *src, const char *what)
{
	if (snprintf(dst, PATH_MAX, "%s", src) >= PATH_MAX) {
		pr_err("%s path too long: %s", what, src);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* The CRIU wrapper that deps.sh puts in <repo>/.deps: walk up from the
 * directory of our own binary (build/thaw, build/test/x, build/static/bench/x…)
 * until a .deps/criu-wrapper appears, so that it is found wherever the tree
 * lies (also the copy that travels to the GPU machine). */
static int find_deps_criu(char *out)
{
	char dir[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);

	if (n <= 0)
		return -ENOENT;
	dir[n] = '\0';
	for (;;) {
		char *slash = strrchr(dir, '/');

		if (!slash)
			return -ENOENT;
		*slash = '\0';
		snprintf(cand, sizeof(cand), "%s/.deps/criu-wrapper", dir);
		if (access(cand, X_OK) == 0)
			return copy_path(out, cand, "criu");
		if (slash == dir)
			return -ENOENT;
	}
}

/* The thaw binary of this build: beside our own binary (build/thaw beside
 * build/thawd) or one or two directories up (build/test/x, build/bench/x). */
static int find_thaw_bin(char *out)
{
	char dir[PATH_MAX], cand[PATH_MAX + 8];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	struct stat st;

	if (n <= 0)
		return -ENOENT;
	dir[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(dir, '/');

		if (!slash || slash == dir)
			return -ENOENT;
		*slash = '\0';
		snprintf(cand, sizeof(cand), "%s/thaw", dir);
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return copy_path(out, cand, "thaw");
	}
	return -ENOENT;
}

bool config_restores_lazily(const struct thaw_config *c, bool gpu, unsigned gpu_starts, char *why,
			    size_t why_len)
{
	char buf[128];
	bool lazy;

	if (c->lazy != CONFIG_LAZY_AUTO) {
		lazy = c->lazy == CONFIG_LAZY_ON;
		snprintf(buf, sizeof(buf), "THAW_LAZY=%d", lazy);
	} else if (!gpu) {
		lazy = true;
		snprintf(buf, sizeof(buf), "THAW_LAZY=auto, a CPU function");
	} else if (!c->lazy_daemon[0]) {
		/* CRIU's daemon: the CUDA restore faults its state in page by page. */
		lazy = false;
		snprintf(buf, sizeof(buf),
			 "THAW_LAZY=auto, a GPU function under THAW_LAZY_DAEMON=criu");
	} else if (c->lazy_max_gpu_starts < 0) {
		lazy = true;
		snprintf(buf, sizeof(buf),
			 "%u GPU start%s in flight, THAW_LAZY_MAX_GPU_STARTS=-1 (no limit)",
			 gpu_starts, gpu_starts == 1 ? "" : "s");
	} else {
		/* Several GPU starts at once: nothing left to overlap the copy with. */
		lazy = gpu_starts <= (unsigned)c->lazy_max_gpu_starts;
		snprintf(buf, sizeof(buf),
			 "%u GPU start%s in flight %s THAW_LAZY_MAX_GPU_STARTS=%d", gpu_starts,
			 gpu_starts == 1 ? "" : "s", lazy ? "<=" : ">", c->lazy_max_gpu_starts);
	}
	if (why && why_len)
		snprintf(why, why_len, "%s", buf);
	return lazy;
}

/* A whole number >= min from the environment, or dflt when unset. */
static int env_int(const char *name, int min, int dflt, const char *what, int *out)
{
	const char *v = getenv(name);
	char *end;
	long n;

	*out = dflt;
	if (!v || !*v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < min || n > INT_MAX) {
		pr_err("%s=%s is not %s", name, v, what);
		return -EINVAL;
	}
	*out = (int)n;
	return 0;
}

static int lazy_daemon_init(struct thaw_config *c)
{
	const char *v = env_or("THAW_LAZY_DAEMON", "thaw");

	if (!strcmp(v, "criu"))
		return 0;
	if (strcmp(v, "thaw")) {
		pr_err("THAW_LAZY_DAEMON=%s is neither thaw nor criu", v);
		return -EINVAL;
	}
	if (find_thaw_bin(c->lazy_daemon) == 0)
		return 0;
	/* A thawd installed without thaw beside it: CRIU's daemon still works. */
	pr_warn("no thaw binary beside this one: lazy restores use criu lazy-pages");
	c->lazy_daemon[0] = '\0';
	return 0;
}

/* A program by name on $PATH, as an absolute path. */
static int find_on_path(const char *name, char *out)
{
	const char *path = env_or("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	char cand[PATH_MAX];

	while (*path) {
		size_t len = strcspn(path, ":");

		if (len && snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, path, name) <
				   (int)sizeof(cand) &&
		    access(cand, X_OK) == 0)
			return copy_path(out, cand, name);
		path += len;
		if (*path == ':')
			path++;
	}
	return -ENOENT;
}

/* A setting that is on, off or auto: *out 1, -1 or 0 (also when unset). */
static int env_tristate(const char *name, int *out)
{
	const char *v = getenv(name);

	*out = 0;
	if (!v || !*v || !strcasecmp(v, "auto"))
		return 0;
	if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes")) {
		*out = 1;
	} else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no")) {
		*out = -1;
	} else {
		pr_err("%s=%s is none of 1/true/yes, 0/false/no, auto", name, v);
		return -EINVAL;
	}
	return 0;
}

/* A setting of 1 or 0 (unset or empty: dflt). */
static int env_flag(const char *name, bool dflt, bool *out)
{
	const char *v = getenv(name);

	*out = dflt;
	if (!v || !*v)
		return 0;
	if (strcmp(v, "0") && strcmp(v, "1")) {
		pr_err("%s=%s: expected 1 or 0", name, v);
		return -EINVAL;
	}
	*out = *v == '1';
	return 0;
}

int config_parse_bytes(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long n, mul = 1;
	char *end;

	if (!v || *v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		switch (*end) {
		case 'K': case 'k': mul = 1ull << 10; break;
		case 'M': case 'm': mul = 1ull << 20; break;
		case 'G': case 'g': mul = 1ull << 30; break;
		case 'T': case 't': mul = 1ull << 40; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
	}
	if (*end || n > max / mul || n * mul < min || n * mul > max)
		return -EINVAL;
	*out = n * mul;
	return 0;
}

int config_store_init(struct config_store *s)
{
	const char *l = getenv("THAW_STORE_LAYOUT");

	s->loose = false;
	if (l && *l && strcmp(l, "pack")) {
		if (strcmp(l, "loose")) {
			pr_err("THAW_STORE_LAYOUT=%s: expected pack or loose", l);
			return -EINVAL;
		}
		s->loose = true;
	}
	if (env_flag("THAW_STORE_DIRECT", true, &s->direct) < 0 ||
	    env_flag("THAW_STORE_MAP", true, &s->map_input) < 0)
		return -EINVAL;
	return 0;
}

int config_allow_root(struct thaw_config *c, const char *dir)
{
	if (!dir || dir[0] != '/') {
		pr_err("allowed root '%s' is not an absolute path", dir ? dir : "");
		return -EINVAL;
	}
	for (size_t i = 0; i < c->nallow_roots; i++)
		if (!strcmp(c->allow_roots[i], dir))
			return 0;
	if (c->nallow_roots == CONFIG_MAX_ROOTS) {
		pr_err("more than %d allowed roots", CONFIG_MAX_ROOTS);
		return -ENOSPC;
	}
	return copy_path(c->allow_roots[c->nallow_roots++], dir, "allowed root");
}

/* The tree's example functions: bench/functions in a directory above our
 * binary (build/thawd, build/test/x). */
static void allow_examples(struct thaw_config *c)
{
	char dir[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	struct stat st;

	if (n <= 0)
		return;
	dir[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(dir, '/');

		if (!slash || slash == dir)
			return;
		*slash = '\0';
		snprintf(cand, sizeof(cand), "%s/bench/functions", dir);
		if (stat(cand, &st) == 0 && S_ISDIR(st.st_mode)) {
			config_allow_root(c, cand);
			return;
		}
	}
}

static int allow_roots_init(struct thaw_config *c)
{
	const char *v = getenv("THAW_ALLOW_ROOTS");
	int ret = 0;

	/* Not the data directory: a function must never reach thaw's own
	 * state, whatever the roots (function/confine.c, thaws_own). */
	allow_examples(c);
	while (!ret && v && *v) {
		char one[PATH_MAX];
		size_t len = strcspn(v, ":");

		if (len) {
			if (len >= sizeof(one)) {
				pr_err("THAW_ALLOW_ROOTS: a path too long");
				return -ENAMETOOLONG;
			}
			memcpy(one, v, len);
			one[len] = '\0';
			ret = config_allow_root(c, one);
			if (ret)
				pr_err("THAW_ALLOW_ROOTS=%s: %s is not usable", getenv("THAW_ALLOW_ROOTS"),
				       one);
		}
		v += len;
		if (*v == ':')
			v++;
	}
	return ret;
}

/* path with its symlinks resolved; as given when it does not exist. */
static void resolved(const char *path, char out[PATH_MAX])
{
	if (!realpath(path, out))
		snprintf(out, PATH_MAX, "%s", path);
}

bool config_path_allowed(const struct thaw_config *c, const char *path, char *why,
			 size_t why_len)
{
	char p[PATH_MAX], r[PATH_MAX], list[1024] = "";
	size_t used = 0;

	resolved(path, p);
	for (size_t i = 0; i < c->nallow_roots; i++) {
		size_t n;

		resolved(c->allow_roots[i], r);
		n = strlen(r);
		/* Under it: equal, or a prefix followed by '/' ("/" itself allows all). */
		if (!strncmp(p, r, n) && (p[n] == '\0' || p[n] == '/' || (n == 1 && r[0] == '/')))
			return true;
		if (used < sizeof(list))
			used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
						 i ? ", " : "", c->allow_roots[i]);
	}
	if (why && why_len)
		snprintf(why, why_len,
			 "%s is outside the directories functions may use (%s): a function runs "
			 "as root in its container; allow one with thawd --allow-root DIR or "
			 "THAW_ALLOW_ROOTS=DIR:DIR",
			 path, list[0] ? list : "none");
	return false;
}

/* "START:COUNT" into *base, *count: 0 or -EINVAL. */
static int parse_pool(const char *v, uint32_t *base, uint32_t *count)
{
	unsigned long long b, n;
	char *end;

	errno = 0;
	b = strtoull(v, &end, 10);
	if (errno || end == v || *end != ':' || v[0] == '-')
		return -EINVAL;
	v = end + 1;
	n = strtoull(v, &end, 10);
	if (errno || end == v || (*end && *end != '\n') || v[0] == '-')
		return -EINVAL;
	/* One range at least, and none reaching (uid_t)-1, which means "no uid". */
	if (n < 65536 || b + n > 0xffffffffull)
		return -EINVAL;
	*base = (uint32_t)b;
	*count = (uint32_t)n;
	return 0;
}

int config_userns_pool(struct thaw_config *c, const char *v)
{
	char line[256];
	FILE *f;
	int ret = -ENOENT;

	if (v[0] != '/') {
		ret = parse_pool(v, &c->userns_base, &c->userns_count);
		if (ret)
			pr_err("user namespace pool \"%s\": not START:COUNT, a range of at "
			       "least 65536 ids below 4294967295",
			       v);
		return ret;
	}
	f = fopen(v, "re");
	if (!f) {
		ret = -errno;
		pr_perror("user namespace pool %s", v);
		return ret;
	}
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "thaw:", 5)) {
			ret = parse_pool(line + 5, &c->userns_base, &c->userns_count);
			break;
		}
	fclose(f);
	if (ret == -ENOENT)
		pr_err("user namespace pool %s: no line \"thaw:START:COUNT\"", v);
	else if (ret)
		pr_err("user namespace pool %s: its \"thaw\" line is not START:COUNT, a range "
		       "of at least 65536 ids below 4294967295",
		       v);
	return ret;
}

int config_init(struct thaw_config *c, const char *data_dir)
{
	const char *v;
	char buf[PATH_MAX + 16];
	int tri, kib, ret;

	memset(c, 0, sizeof(*c));
	if (!data_dir || !*data_dir)
		data_dir = env_or("THAW_DATA_DIR", "/var/lib/thaw");
	ret = copy_path(c->data_dir, data_dir, "data");
	if (ret)
		return ret;
	snprintf(buf, sizeof(buf), "%s/store", c->data_dir);
	ret = copy_path(c->store_dir, env_or("THAW_STORE", buf), "store");
	if (!ret)
		ret = config_store_init(&c->store);
	if (ret)
		return ret;
	ret = copy_path(c->ram_tier_dir, env_or("THAW_RAM_TIER", CONFIG_RAM_TIER_DEFAULT), "RAM tier");
	if (ret)
		return ret;

	v = getenv("THAW_RAM_TIER_BYTES");
	if (v && *v) {
		char *end;
		unsigned long long b;

		errno = 0;
		b = strtoull(v, &end, 10);
		if (errno || end == v || *end || b == 0) {
			pr_err("THAW_RAM_TIER_BYTES=%s is not a positive number of bytes", v);
			return -EINVAL;
		}
		c->ram_tier_bytes = b;
	} else {
		struct statvfs sv;

		if (statvfs("/dev/shm", &sv) == 0)
			c->ram_tier_bytes = (uint64_t)sv.f_blocks * sv.f_frsize / 2;
		else
			c->ram_tier_bytes = 1ull << 30; /* no /dev/shm: a modest budget */
	}

	ret = env_tristate("THAW_LAZY", &tri);
	if (ret)
		return ret;
	c->lazy = tri > 0 ? CONFIG_LAZY_ON : tri < 0 ? CONFIG_LAZY_OFF : CONFIG_LAZY_AUTO;
	ret = env_tristate("THAW_TIER_HUGE", &tri);
	if (ret)
		return ret;
	c->tier_huge = tri > 0 ? CONFIG_HUGE_ON : tri < 0 ? CONFIG_HUGE_OFF : CONFIG_HUGE_AUTO;
	ret = env_tristate("THAW_LAZY_GPU_AFTER_FILL", &tri);
	if (ret)
		return ret;
	c->lazy_gpu_after_fill = tri > 0;

	ret = env_tristate("THAW_MAPPED", &tri);
	if (!ret)
		ret = env_int("THAW_MAPPED_MIN_KIB", 4, 1024, "a size in KiB (4 or more)", &kib);
	if (ret)
		return ret;
	c->mapped_min = tri < 0 ? 0 : (uint64_t)kib << 10;

	c->log_bytes = CONFIG_LOG_BYTES_DEFAULT;
	v = getenv("THAW_LOG_BYTES");
	if (v && *v &&
	    config_parse_bytes(v, CONFIG_LOG_BYTES_MIN, CONFIG_LOG_BYTES_MAX, &c->log_bytes)) {
		pr_err("THAW_LOG_BYTES=%s is not a size from 4K to 1T (digits, then K, M, G or T)",
		       v);
		return -EINVAL;
	}

	c->userns_base = CONFIG_USERNS_POOL_BASE;
	c->userns_count = CONFIG_USERNS_POOL_COUNT;
	v = getenv("THAW_USERNS_POOL");
	if (v && *v) {
		ret = config_userns_pool(c, v);
		if (ret)
			return ret;
	}

	/* On unless told otherwise; where it applies, function_userns says. */
	c->userns_default = true;
	v = getenv("THAW_USERNS_DEFAULT");
	if (v && *v) {
		if (strcmp(v, "0") && strcmp(v, "1")) {
			pr_err("THAW_USERNS_DEFAULT=%s is neither 1 nor 0", v);
			return -EINVAL;
		}
		c->userns_default = !strcmp(v, "1");
	}

	ret = allow_roots_init(c);
	if (ret)
		return ret;
	ret = lazy_daemon_init(c);
	if (ret)
		return ret;
	ret = env_int("THAW_LAZY_MAX_GPU_STARTS", -1, CONFIG_LAZY_MAX_GPU_STARTS_DEFAULT,
		      "a number of GPU starts (0 or more; -1: no limit)", &c->lazy_max_gpu_starts);
	if (ret)
		return ret;
	ret = copy_path(c->runc, env_or("THAW_RUNC", "runc"), "runc");
	if (!ret)
		ret = copy_path(c->registry_auth, env_or("THAW_REGISTRY_AUTH", ""), "registry auth");
	if (ret)
		return ret;

	v = getenv("THAW_CRIU");
	if (v && *v)
		return copy_path(c->criu, v, "criu");
	if (find_deps_criu(c->criu) == 0 || find_on_path("criu", c->criu) == 0)
		return 0;
	/* Leave a name: runc reports it as missing when it is used, and
	 * thaw doctor says so before that. */
	return copy_path(c->criu, "criu", "criu");
}
