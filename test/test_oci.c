/* SPDX-License-Identifier: Apache-2.0 */
/* test_oci: the bundle's config.json has what runc and CRIU need: the process,
 * a rootfs skeleton with the host's merged-/usr symlinks, non-recursive
 * read-only binds, /tmp as tmpfs, the network namespace by path, and the
 * org.criu.config annotation naming a file that skips CRIU's network lock. */
#include "common/config.h"
#include "common/netns.h"
#include "common/oci.h"
#include "common/runner.h"
#include "function/ready.h"
#include "common/log.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static json_t *find_mount(json_t *mounts, const char *dst)
{
	size_t i;
	json_t *m;

	json_array_foreach(mounts, i, m)
		if (!strcmp(json_string_value(json_object_get(m, "destination")) ?: "", dst))
			return m;
	return NULL;
}

static bool has_opt(json_t *m, const char *opt)
{
	size_t i;
	json_t *o;

	json_array_foreach(json_object_get(m, "options"), i, o)
		if (!strcmp(json_string_value(o), opt))
			return true;
	return false;
}

static const char *ns_path(json_t *nss, const char *type, bool *found)
{
	size_t i;
	json_t *n;

	*found = false;
	json_array_foreach(nss, i, n)
		if (!strcmp(json_string_value(json_object_get(n, "type")), type)) {
			*found = true;
			return json_string_value(json_object_get(n, "path"));
		}
	return NULL;
}


/* GET/POST path in the namespace; the answer's body into out (or "" on failure). */
static int http(const char *ns, const char *method, const char *path, char *out, size_t len)
{
	struct http_answer a;
	int ret = ready_http(ns, 8000, method, path, NULL, 5000, &a);

	out[0] = '\0';
	if (ret)
		return ret;
	snprintf(out, len, "%s", a.body ? a.body : "");
	ret = a.status;
	http_answer_release(&a);
	return ret;
}

static void close_stdio(struct runner_stdio *io)
{
	if (io->out_r >= 0)
		close(io->out_r);
	if (io->err_r >= 0)
		close(io->err_r);
	io->out_r = io->err_r = -1;
}

static bool any_mount_under(const char *dir)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, dir) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* The bundle really runs: runc run, checkpoint, and two instances restored
 * from the one image side by side, each in its own network namespace, with
 * the state the original had and apart from each other from then on. */
static void run_checkpoint_restore(const char *dir)
{
	struct thaw_config c;
	char fn[PATH_MAX], state[PATH_MAX + 16], ns[3][PATH_MAX + 16], b[3][PATH_MAX + 16];
	char img[PATH_MAX + 16], work[3][PATH_MAX + 16], logp[PATH_MAX + 16], buf[PATH_MAX + 64];
	char infer[512];
	char *argv[] = { "python3", "cpu_example.py", NULL };
	char *env[] = { "THAW_EXAMPLE_MIB=1", "PORT=8000", NULL };
	const char *ids[3] = { "oci-t0", "oci-t1", "oci-t2" };
	struct runner_stdio io[3] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	struct runner r;
	pid_t pid[3] = { 0 }, *pids = NULL;
	size_t n = 0;
	const char *root = getenv("THAW_ROOT");
	struct stat st;
	int i, ret;

	if (config_init(&c, dir) || access(c.criu, X_OK) || system("runc --version >/dev/null 2>&1")) {
		printf("runc or criu missing: run/checkpoint/restore not tested\n");
		return;
	}
	snprintf(buf, sizeof(buf), "%s/bench/functions", root ? root : ".");
	REQUIRE(realpath(buf, fn));
	snprintf(state, sizeof(state), "%s/runc", dir);
	r = (struct runner){ .runc = c.runc, .criu = c.criu, .state_dir = state };
	snprintf(img, sizeof(img), "%s/image", dir);
	snprintf(logp, sizeof(logp), "%s/run.log", dir);
	for (i = 0; i < 3; i++) {
		struct oci_bind bind = { .src = fn, .dst = fn };
		struct oci_spec spec = { .argv = argv, .env = env, .cwd = fn, .binds = &bind,
					 .nbinds = 1, .hostname = ids[i] };

		snprintf(ns[i], sizeof(ns[i]), "%s/ns%d", dir, i);
		snprintf(b[i], sizeof(b[i]), "%s/b%d", dir, i);
		snprintf(work[i], sizeof(work[i]), "%s/work%d", dir, i);
		spec.netns_path = ns[i];
		REQUIRE(netns_create(ns[i]) == 0);
		REQUIRE(oci_bundle_write(b[i], &spec) == 0);
	}

	CHECK_EQ(runner_run(&r, b[0], ids[0], logp, &io[0], &pid[0]), 0);
	CHECK(pid[0] > 0);
	CHECK_EQ(ready_wait(ns[0], 8000, READY_HTTP, "/health", 20, pid[0], buf, sizeof(buf)), 0);
	CHECK_EQ(http(ns[0], "POST", "/state?v=before", buf, sizeof(buf)), 200);
	CHECK_EQ(http(ns[0], "GET", "/infer?x=5", infer, sizeof(infer)), 200);
	CHECK(strstr(infer, "\"y\""));
	CHECK_EQ(runner_pids(&r, ids[0], &pids, &n), 0);
	CHECK(n >= 1 && pids && pids[0] == pid[0]);
	free(pids);
	CHECK_EQ(runner_checkpoint(&r, ids[0], img, work[0]), 0);
	snprintf(buf, sizeof(buf), "%s/inventory.img", img);
	CHECK(stat(buf, &st) == 0);
	CHECK(!ready_pid_alive(pid[0]) || usleep(200000) || !ready_pid_alive(pid[0]));
	close_stdio(&io[0]);
	CHECK_EQ(runner_delete(&r, ids[0]), 0); /* already gone: fine */

	for (i = 1; i < 3; i++) {
		ret = runner_restore(&r, b[i], ids[i], img, work[i], &io[i], &pid[i]);
		CHECK_EQ(ret, 0);
		if (ret)
			fprintf(stderr, "restore: %s\n", log_last_error());
	}
	CHECK(pid[1] > 0 && pid[2] > 0 && pid[1] != pid[2]);
	for (i = 1; i < 3; i++) {
		char nsbuf[128], want[64];

		CHECK_EQ(http(ns[i], "GET", "/state", buf, sizeof(buf)), 200);
		CHECK(strstr(buf, "\"before\""));
		CHECK_EQ(http(ns[i], "GET", "/infer?x=5", buf, sizeof(buf)), 200);
		CHECK_STR(buf, infer);
		/* Each answers from the namespace it was given. */
		CHECK(stat(ns[i], &st) == 0);
		snprintf(want, sizeof(want), "net:[%llu]", (unsigned long long)st.st_ino);
		CHECK_EQ(http(ns[i], "GET", "/netns", nsbuf, sizeof(nsbuf)), 200);
		CHECK(strstr(nsbuf, want));
	}
	CHECK_EQ(http(ns[1], "POST", "/state?v=one", buf, sizeof(buf)), 200);
	CHECK_EQ(http(ns[2], "GET", "/state", buf, sizeof(buf)), 200);
	CHECK(strstr(buf, "\"before\""));

	/* A restore from a broken image fails with CRIU's words and leaves nothing. */
	snprintf(buf, sizeof(buf), "%s/inventory.img", img);
	unlink(buf);
	struct runner_stdio bad_io;
	pid_t bad_pid;
	CHECK(runner_restore(&r, b[0], "oci-bad", img, work[0], &bad_io, &bad_pid) < 0);
	CHECK(strstr(log_last_error(), "runc restore oci-bad failed"));

	for (i = 1; i < 3; i++) {
		CHECK_EQ(runner_delete(&r, ids[i]), 0);
		close_stdio(&io[i]);
	}
	CHECK(!ready_pid_alive(pid[1]) || usleep(200000) || !ready_pid_alive(pid[1]));
	for (i = 0; i < 3; i++)
		CHECK_EQ(netns_remove(ns[i]), 0);
	CHECK(!any_mount_under(dir));
	snprintf(buf, sizeof(buf), "runc --root %s list -q | grep -q .", state);
	CHECK(system(buf) != 0); /* no container left */
}

/* config_init: defaults and the environment's overrides. */
static void check_config(void)
{
	struct thaw_config c;
	char *saved[6];
	const char *names[] = { "THAW_DATA_DIR", "THAW_CRIU", "THAW_RAM_TIER_BYTES", "THAW_RUNC",
				"THAW_RAM_TIER", "THAW_STORE" };

	for (int i = 0; i < 6; i++) {
		saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
		unsetenv(names[i]);
	}
	CHECK_EQ(config_init(&c, NULL), 0);
	CHECK_STR(c.data_dir, "/var/lib/thaw");
	CHECK_STR(c.store_dir, "/var/lib/thaw/store");
	CHECK_STR(c.ram_tier_dir, "/dev/shm/thaw");
	CHECK_STR(c.runc, "runc");
	CHECK(c.ram_tier_bytes > 0);
	/* Found beside the build (build/test/test_oci -> <repo>/.deps), or on PATH. */
	CHECK(strstr(c.criu, ".deps/criu-wrapper") || access(c.criu, X_OK) == 0 ||
	      !strcmp(c.criu, "criu"));
	setenv("THAW_DATA_DIR", "/srv/thaw", 1);
	setenv("THAW_CRIU", "/opt/criu", 1);
	setenv("THAW_RUNC", "/opt/runc", 1);
	setenv("THAW_RAM_TIER", "/dev/shm/x", 1);
	setenv("THAW_RAM_TIER_BYTES", "12345", 1);
	CHECK_EQ(config_init(&c, NULL), 0);
	CHECK_STR(c.data_dir, "/srv/thaw");
	CHECK_STR(c.store_dir, "/srv/thaw/store");
	CHECK_STR(c.criu, "/opt/criu");
	CHECK_STR(c.runc, "/opt/runc");
	CHECK_STR(c.ram_tier_dir, "/dev/shm/x");
	CHECK_EQ(c.ram_tier_bytes, 12345);
	CHECK_EQ(config_init(&c, "/d"), 0); /* the argument wins over the environment */
	CHECK_STR(c.data_dir, "/d");
	setenv("THAW_RAM_TIER_BYTES", "12k", 1);
	CHECK_EQ(config_init(&c, NULL), -EINVAL);
	for (int i = 0; i < 6; i++) {
		if (saved[i])
			setenv(names[i], saved[i], 1);
		else
			unsetenv(names[i]);
		free(saved[i]);
	}
}

static const char *env_value(const json_t *env, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < json_array_size(env); i++) {
		const char *e = json_string_value(json_array_get(env, i));

		if (e && !strncmp(e, name, n) && e[n] == '=')
			return e + n + 1;
	}
	return NULL;
}

static bool has_string(const json_t *a, const char *s)
{
	for (size_t i = 0; i < json_array_size(a); i++)
		if (!strcmp(json_string_value(json_array_get(a, i)) ?: "", s))
			return true;
	return false;
}

/* The confined defaults (common/oci.h): no capability, no_new_privileges,
 * the seccomp profile, uid 0, HOME on the tmpfs, the password hashes masked. */
static void check_confined(const json_t *cfg)
{
	const json_t *proc = json_object_get(cfg, "process"), *l = json_object_get(cfg, "linux");
	const json_t *sc = json_object_get(l, "seccomp"), *rules = json_object_get(sc, "syscalls");
	bool allows_read = false, allows_mount = false;

	for (size_t i = 0; i < 4; i++) {
		static const char *const sets[] = { "bounding", "effective", "permitted", "ambient" };
		const json_t *set = json_object_get(json_object_get(proc, "capabilities"), sets[i]);

		CHECK(json_is_array(set));
		CHECK_EQ(json_array_size(set), 0);
	}
	CHECK(json_is_true(json_object_get(proc, "noNewPrivileges")));
	CHECK_EQ(json_integer_value(json_object_get(json_object_get(proc, "user"), "uid")), 0);
	CHECK_STR(env_value(json_object_get(proc, "env"), "HOME"), "/tmp");
	CHECK(has_string(json_object_get(l, "maskedPaths"), "/etc/shadow"));
	CHECK(has_string(json_object_get(l, "maskedPaths"), "/etc/gshadow"));
	CHECK_STR(json_string_value(json_object_get(sc, "defaultAction")), "SCMP_ACT_ERRNO");
	for (size_t i = 0; i < json_array_size(rules); i++) {
		const json_t *r = json_array_get(rules, i);

		if (strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ALLOW"))
			continue;
		allows_read |= has_string(json_object_get(r, "names"), "read");
		allows_mount |= has_string(json_object_get(r, "names"), "mount") ||
				has_string(json_object_get(r, "names"), "unshare") ||
				has_string(json_object_get(r, "names"), "chroot");
	}
	CHECK(allows_read && !allows_mount);
}

/* In a user namespace a bind keeps its source mount's locked flags (runc's
 * remount would drop them, and the kernel refuses that): a tmpfs of the
 * test's own, nodev, noexec and noatime, against the test's directory. */
static void check_userns_binds(const char *dir)
{
	char *argv[] = { "true", NULL };
	char locked[PATH_MAX], bundle[PATH_MAX], p[PATH_MAX + 16];
	struct oci_bind binds[] = { { .src = locked, .dst = "/l" },
				    { .src = dir, .dst = "/d", .writable = true } };
	struct oci_spec spec = {
		.argv = argv, .cwd = "/", .binds = binds, .nbinds = 2, .hostname = "u1",
		.cgroups_path = "thaw/u1", .userns_base = 3000000000u, .userns_size = 65536,
	};
	struct statvfs own;
	json_error_t jerr;
	json_t *cfg, *m;

	snprintf(locked, sizeof(locked), "%s/locked", dir);
	REQUIRE(mkdir(locked, 0755) == 0);
	if (mount("thaw-test", locked, "tmpfs", MS_NODEV | MS_NOEXEC | MS_NOATIME, "size=64k")) {
		printf("the userns binds' flags not checked: mount a tmpfs: %s\n", strerror(errno));
		return;
	}
	REQUIRE(statvfs(dir, &own) == 0);
	snprintf(bundle, sizeof(bundle), "%s/userns", dir);
	CHECK(oci_bundle_write(bundle, &spec) == 0);
	snprintf(p, sizeof(p), "%s/config.json", bundle);
	cfg = json_load_file(p, 0, &jerr);
	m = find_mount(json_object_get(cfg, "mounts"), "/l");
	CHECK(m && has_opt(m, "bind") && has_opt(m, "ro") && has_opt(m, "nosuid"));
	CHECK(has_opt(m, "nodev") && has_opt(m, "noexec") && has_opt(m, "noatime"));
	CHECK(!has_opt(m, "strictatime"));
	m = find_mount(json_object_get(cfg, "mounts"), "/d");
	CHECK(m && !has_opt(m, "ro"));
	CHECK_EQ(has_opt(m, "nodev"), !!(own.f_flag & ST_NODEV));
	CHECK_EQ(has_opt(m, "strictatime"), !(own.f_flag & (ST_RELATIME | ST_NOATIME)));
	json_decref(cfg);
	/* Outside one, the options are the bind's own. */
	spec.userns_size = 0;
	CHECK(oci_bundle_write(bundle, &spec) == 0);
	cfg = json_load_file(p, 0, &jerr);
	m = find_mount(json_object_get(cfg, "mounts"), "/l");
	CHECK(m && !has_opt(m, "nodev") && !has_opt(m, "noexec"));
	json_decref(cfg);
	umount2(locked, MNT_DETACH);
}

int main(void)
{
	char dir[] = "/tmp/test_oci.XXXXXX", bundle[PATH_MAX], p[PATH_MAX + 64], link[PATH_MAX];
	char *argv[] = { "python3", "app.py", NULL };
	char *env[] = { "A=1", NULL };
	struct oci_bind binds[] = { { .src = "/srv/fn", .dst = "/srv/fn" },
				    { .src = "/data", .dst = "/data", .writable = true } };
	struct oci_spec spec = {
		.argv = argv, .env = env, .cwd = "/srv/fn", .netns_path = "/run/thaw/ns1",
		.binds = binds, .nbinds = 2, .hostname = "fn1", .cgroups_path = "thaw/fn1",
	};
	json_error_t jerr;
	json_t *cfg, *m, *l;
	bool found;

	check_config();
	REQUIRE(mkdtemp(dir));
	check_userns_binds(dir);
	snprintf(bundle, sizeof(bundle), "%s/b", dir);
	REQUIRE(oci_bundle_write(bundle, &spec) == 0);
	snprintf(p, sizeof(p), "%s/config.json", bundle);
	cfg = json_load_file(p, 0, &jerr);
	REQUIRE(cfg);

	/* The process. */
	json_t *proc = json_object_get(cfg, "process");
	CHECK_STR(json_string_value(json_array_get(json_object_get(proc, "args"), 0)), "python3");
	CHECK_STR(json_string_value(json_array_get(json_object_get(proc, "args"), 1)), "app.py");
	CHECK_EQ(json_array_size(json_object_get(proc, "args")), 2);
	CHECK_STR(json_string_value(json_array_get(json_object_get(proc, "env"), 0)), "A=1");
	/* Host-rooted: the host's PATH (a venv in /opt means the same inside). */
	char want_path[8192];
	snprintf(want_path, sizeof(want_path), "PATH=%s", getenv("PATH") ?: "");
	CHECK_STR(json_string_value(json_array_get(json_object_get(proc, "env"), 1)), want_path);
	CHECK(json_is_false(json_object_get(proc, "terminal")));
	CHECK_STR(json_string_value(json_object_get(proc, "cwd")), "/srv/fn");
	CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(proc, "rlimits"), 0),
						    "type")),
		  "RLIMIT_NOFILE");
	CHECK_STR(json_string_value(json_object_get(cfg, "hostname")), "fn1");

	/* The rootfs skeleton, with the host's top-level symlinks. */
	snprintf(p, sizeof(p), "%s/rootfs", bundle);
	CHECK_STR(json_string_value(json_object_get(json_object_get(cfg, "root"), "path")), p);
	CHECK(json_is_true(json_object_get(json_object_get(cfg, "root"), "readonly")));
	static const char *const dirs[] = { "usr", "etc", "root", "opt", "proc", "dev", "sys", "tmp" };
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		struct stat st;
		snprintf(p, sizeof(p), "%s/rootfs/%s", bundle, dirs[i]);
		CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
	}
	static const char *const links[] = { "bin", "lib", "lib64", "sbin" };
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		char host[32], want[PATH_MAX];
		ssize_t n, w;
		snprintf(host, sizeof(host), "/%s", links[i]);
		w = readlink(host, want, sizeof(want) - 1);
		if (w <= 0)
			continue; /* not a symlink on this host */
		want[w] = '\0';
		snprintf(p, sizeof(p), "%s/rootfs/%s", bundle, links[i]);
		n = readlink(p, link, sizeof(link) - 1);
		CHECK(n > 0);
		link[n > 0 ? n : 0] = '\0';
		CHECK_STR(link, want);
	}

	/* Mounts. */
	json_t *mounts = json_object_get(cfg, "mounts");
	CHECK_STR(json_string_value(json_object_get(find_mount(mounts, "/proc"), "type")), "proc");
	CHECK_STR(json_string_value(json_object_get(find_mount(mounts, "/tmp"), "type")), "tmpfs");
	CHECK(find_mount(mounts, "/dev/pts") && find_mount(mounts, "/dev/shm") &&
	      find_mount(mounts, "/sys"));
	CHECK(has_opt(find_mount(mounts, "/sys"), "ro"));
	static const char *const ro_binds[] = { "/usr", "/etc" };
	for (size_t i = 0; i < ARRAY_SIZE(ro_binds); i++) {
		m = find_mount(mounts, ro_binds[i]);
		CHECK(m);
		CHECK_STR(json_string_value(json_object_get(m, "source")), ro_binds[i]);
		CHECK(has_opt(m, "bind") && has_opt(m, "ro") && !has_opt(m, "rbind"));
	}
	/* The host's root user's home is not a function's. */
	CHECK(!find_mount(mounts, "/root"));
	/* A submount like /usr/local/nvidia comes only for GPU functions. */
	CHECK(!find_mount(mounts, "/usr/local/nvidia"));
	m = find_mount(mounts, "/srv/fn");
	CHECK(m && has_opt(m, "ro") && !has_opt(m, "rbind"));
	m = find_mount(mounts, "/data");
	CHECK(m && has_opt(m, "bind") && !has_opt(m, "ro"));

	/* Namespaces: network by path, the others new. */
	l = json_object_get(cfg, "linux");
	CHECK_STR(ns_path(json_object_get(l, "namespaces"), "network", &found), "/run/thaw/ns1");
	static const char *const nss[] = { "pid", "ipc", "uts", "mount" };
	for (size_t i = 0; i < ARRAY_SIZE(nss); i++) {
		CHECK(!ns_path(json_object_get(l, "namespaces"), nss[i], &found));
		CHECK(found);
	}
	CHECK(!ns_path(json_object_get(l, "namespaces"), "user", &found) && !found);
	CHECK_STR(json_string_value(json_object_get(l, "cgroupsPath")), "thaw/fn1");
	CHECK_EQ(json_array_size(json_object_get(l, "devices")), 0);
	CHECK(json_array_size(json_object_get(l, "maskedPaths")) > 0);
	check_confined(cfg);

	/* CRIU's configuration. */
	const char *conf = json_string_value(
		json_object_get(json_object_get(cfg, "annotations"), "org.criu.config"));
	snprintf(p, sizeof(p), "%s/criu.conf", bundle);
	CHECK_STR(conf, p);
	char *text = NULL;
	size_t len;
	CHECK_EQ(read_file(p, &text, &len, 4096), 0);
	CHECK(text && strstr(text, "network-lock skip"));
	/* The cgroups are CRIU's to dump, runc's on a restore. */
	CHECK(text && !strstr(text, "manage-cgroups"));
	free(text);
	text = NULL;
	json_decref(cfg);
	spec.restore = true;
	snprintf(bundle, sizeof(bundle), "%s/b-restore", dir);
	CHECK_EQ(oci_bundle_write(bundle, &spec), 0);
	snprintf(p, sizeof(p), "%s/criu.conf", bundle);
	CHECK_EQ(read_file(p, &text, &len, 4096), 0);
	CHECK(text && strstr(text, "network-lock skip") && strstr(text, "manage-cgroups=ignore\n"));
	free(text);
	spec.restore = false;

	/* Each loosening, explicitly. */
	static char *const caps[] = { "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", NULL };
	spec.sandbox = (struct oci_sandbox){ .writable_root = true, .no_seccomp = true,
					     .new_privileges = true, .host_home = true,
					     .capabilities = caps };
	snprintf(bundle, sizeof(bundle), "%s/b-loose", dir);
	CHECK_EQ(oci_bundle_write(bundle, &spec), 0);
	snprintf(p, sizeof(p), "%s/config.json", bundle);
	cfg = json_load_file(p, 0, &jerr);
	CHECK(cfg);
	proc = json_object_get(cfg, "process");
	CHECK(json_is_false(json_object_get(json_object_get(cfg, "root"), "readonly")));
	CHECK(json_is_false(json_object_get(proc, "noNewPrivileges")));
	CHECK(!json_object_get(json_object_get(cfg, "linux"), "seccomp"));
	CHECK(!env_value(json_object_get(proc, "env"), "HOME"));
	CHECK(find_mount(json_object_get(cfg, "mounts"), "/root"));
	for (size_t i = 0; i < 4; i++) {
		static const char *const sets[] = { "bounding", "effective", "permitted", "ambient" };
		json_t *set = json_object_get(json_object_get(proc, "capabilities"), sets[i]);

		CHECK_EQ(json_array_size(set), 2);
		CHECK_STR(json_string_value(json_array_get(set, 0)), "CAP_NET_BIND_SERVICE");
	}
	json_decref(cfg);
	spec.sandbox = (struct oci_sandbox){ 0 };
	CHECK(oci_capability_known("CAP_NET_BIND_SERVICE"));
	CHECK(!oci_capability_known("CAP_SYS_ADMIN") && !oci_capability_known("CAP_SYS_PTRACE"));

	/* A user's rootfs is used as it is; GPU functions list their devices. */
	spec.rootfs = dir;
	spec.gpu = true;
	spec.netns_path = NULL;
	snprintf(bundle, sizeof(bundle), "%s/b2", dir);
	CHECK_EQ(oci_bundle_write(bundle, &spec), 0);
	snprintf(p, sizeof(p), "%s/config.json", bundle);
	cfg = json_load_file(p, 0, &jerr);
	CHECK(cfg);
	CHECK_STR(json_string_value(json_object_get(json_object_get(cfg, "root"), "path")), dir);
	CHECK(!find_mount(json_object_get(cfg, "mounts"), "/usr"));
	l = json_object_get(cfg, "linux");
	CHECK(!ns_path(json_object_get(l, "namespaces"), "network", &found) && found);
	size_t ndev = json_array_size(json_object_get(l, "devices"));
	CHECK_EQ(ndev + 1, json_array_size(json_object_get(json_object_get(l, "resources"), "devices")));
	if (access("/dev/nvidiactl", F_OK) == 0)
		CHECK(ndev > 0);
	json_decref(cfg);

	/* No process: refused, nothing written. */
	spec.argv = NULL;
	snprintf(bundle, sizeof(bundle), "%s/b3", dir);
	CHECK_EQ(oci_bundle_write(bundle, &spec), -EINVAL);
	snprintf(p, sizeof(p), "%s/config.json", bundle);
	CHECK(access(p, F_OK) < 0);

	if (geteuid() == 0)
		run_checkpoint_restore(dir);
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
