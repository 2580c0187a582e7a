/* SPDX-License-Identifier: Apache-2.0 */
/* oci.c — see oci.h. */
#define LOG_PREFIX "oci: "
#include "common/oci.h"
#include "common/host_stage.h"
#include "common/log.h"
#include "common/oci_seccomp.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Host directories bound read-only into a container that has no rootfs of
 * its own; /usr/local/nvidia is added for GPU functions, and /root where the
 * sandbox says host_home (the host's root user's files are not a function's). */
static const char *const host_dirs[] = { "/usr", "/etc", "/opt", "/root" };
/* Top-level names that are symlinks into /usr on a merged-/usr host, or real
 * directories (then bound like the others) on an older one. */
static const char *const top_links[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };

/* The OCI runtimes' default set: what a function may be given, and what
 * every container had before functions were confined. */
char *const oci_legacy_capabilities[] = {
	"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",   "CAP_FOWNER",
	"CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",   "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL",      "CAP_AUDIT_WRITE", NULL,
};

bool oci_capability_known(const char *name)
{
	for (size_t i = 0; oci_legacy_capabilities[i]; i++)
		if (!strcmp(oci_legacy_capabilities[i], name))
			return true;
	return false;
}

/* runc spec's defaults, and what uid 0 could read in the host's /etc even
 * without CAP_DAC_OVERRIDE (it owns the files): the password hashes.  runc
 * binds /dev/null over each that exists. */
static const char *const masked_paths[] = {
	"/proc/acpi",	      "/proc/asound",	  "/proc/kcore",      "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/sys/firmware",      "/proc/scsi",	  "/etc/shadow",      "/etc/shadow-",
	"/etc/gshadow",	      "/etc/gshadow-",
};
static const char *const readonly_paths[] = {
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

/* The CRIU options runc cannot be told on its command line for every caller:
 * the network namespace is joined by path, so it is external to CRIU and
 * there is nothing of ours to lock; a connection still open at checkpoint
 * (a client that has not closed yet) is dumped and restored closed instead
 * of failing the dump. */
static const char criu_conf[] = "network-lock skip\n"
				"tcp-close\n";

/* And for a restore: the cgroups are runc's.  runc restore creates the
 * container's cgroups and puts CRIU in them before it asks for the restore,
 * so the processes CRIU forks start there.  CRIU's default ("soft") would
 * also mount every controller in a yard of its own and move each task into
 * the cgroups it is already in, restoring no property (runc made them):
 * milliseconds of every restore for nothing (bench/LOG.md).  The
 * container has no cgroup namespace and no cgroupfs, so it has no cgroups of
 * its own to restore.  (The option takes its value after '=': a separate
 * word is not read as one.) */
static const char criu_restore_conf[] = "manage-cgroups=ignore\n";

static json_t *str_array(const char *const *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *mount_obj(const char *dst, const char *type, const char *src,
			 const char *const *opts, size_t nopts)
{
	json_t *m = json_pack("{s:s, s:s, s:s}", "destination", dst, "type", type, "source", src);

	if (m && nopts)
		json_object_set_new(m, "options", str_array(opts, nopts));
	return m;
}

/* The flags of src's mount that a user namespace locks (nodev, noexec and
 * the atime ones), as runc's options: runc remounts a bind to apply its
 * options, and in a user namespace the kernel refuses (EPERM) a remount
 * that would drop one of them (a GPU host's /usr/local/nvidia, a nodev
 * tmpfs).  nosuid is in every bind's options already.  Returns how many it
 * put in opts (room for 4). */
static size_t locked_flags(const char *src, const char **opts)
{
	struct statvfs sv;
	size_t n = 0;

	if (statvfs(src, &sv) < 0)
		return 0; /* runc's own error names the path */
	if (sv.f_flag & ST_NODEV)
		opts[n++] = "nodev";
	if (sv.f_flag & ST_NOEXEC)
		opts[n++] = "noexec";
	/* One atime mode of three: none given is relatime to the kernel. */
	if (sv.f_flag & ST_NOATIME)
		opts[n++] = "noatime";
	else if (!(sv.f_flag & ST_RELATIME))
		opts[n++] = "strictatime";
	if (sv.f_flag & ST_NODIRATIME)
		opts[n++] = "nodiratime";
	return n;
}

/* A non-recursive bind: a submount of src (e.g. /usr/local/nvidia under /usr)
 * is not carried along, so CRIU sees exactly the mounts we declared.  In a
 * user namespace it keeps src's locked flags. */
static json_t *bind_obj(const struct oci_spec *spec, const char *src, const char *dst,
			bool writable, enum oci_bind_flags flags)
{
	const char *opts[9] = { "bind", "nosuid" };
	size_t n = 2;

	if (!writable)
		opts[n++] = "ro";
	switch (flags) {
	case OCI_BIND_INERT:
		opts[n++] = "nodev";
		opts[n++] = "noexec";
		break;
	case OCI_BIND_NODEV:
		opts[n++] = "nodev";
		break;
	case OCI_BIND_AS_SOURCE:
		if (spec->userns_size)
			n += locked_flags(src, opts + n);
		break;
	}
	return mount_obj(dst, "bind", src, opts, n);
}

static bool is_host_dir(const char *path)
{
	for (size_t i = 0; i < ARRAY_SIZE(host_dirs); i++)
		if (!strcmp(path, host_dirs[i]))
			return true;
	return false;
}

/* The source of the bind of host directory dir: dir, or in a user
 * namespace its staging mount where it has submounts (host_stage.h). */
static int host_src(const struct oci_spec *spec, const char *dir, char *src, size_t len)
{
	if (!spec->host_stage) {
		snprintf(src, len, "%s", dir);
		return 0;
	}
	return host_stage_source(spec->host_stage, dir, src, len);
}

/* The size of the container's /dev/shm. */
static unsigned long long shm_bytes(const struct oci_spec *spec)
{
	return spec->shm_bytes ? spec->shm_bytes : OCI_DEFAULT_SHM_BYTES;
}

/* The container's mounts, in *out; 0 or -errno (a host directory that
 * could not be staged). */
static int build_mounts(const struct oci_spec *spec, bool host_root, json_t **out)
{
	static const char *const dev[] = { "nosuid", "strictatime", "mode=755", "size=65536k" };
	static const char *const pts[] = { "nosuid", "noexec", "newinstance", "ptmxmode=0666",
					   "mode=0620", "gid=5" };
	const char *shm_opts[] = { "nosuid", "noexec", "nodev", "mode=1777", NULL };
	char shm_size[32];
	static const char *const mq[] = { "nosuid", "noexec", "nodev" };
	static const char *const sys[] = { "nosuid", "noexec", "nodev", "ro" };
	static const char *const tmp[] = { "nosuid", "nodev", "mode=1777" };
	unsigned long long shm = shm_bytes(spec);
	json_t *m = json_array();
	char src[PATH_MAX];
	struct stat st;
	int ret;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	json_array_append_new(m, mount_obj("/proc", "proc", "proc", NULL, 0));
	json_array_append_new(m, mount_obj("/dev", "tmpfs", "tmpfs", dev, ARRAY_SIZE(dev)));
	json_array_append_new(m, mount_obj("/dev/pts", "devpts", "devpts", pts, ARRAY_SIZE(pts)));
	/* The spec's size (shm_bytes), in KiB where it is whole ones: the
	 * default reads as it always did.  tmpfs rounds it up to pages. */
	if (shm % 1024)
		snprintf(shm_size, sizeof(shm_size), "size=%llu", shm);
	else
		snprintf(shm_size, sizeof(shm_size), "size=%lluk", shm / 1024);
	shm_opts[ARRAY_SIZE(shm_opts) - 1] = shm_size;
	json_array_append_new(m, mount_obj("/dev/shm", "tmpfs", "shm", shm_opts,
					   ARRAY_SIZE(shm_opts)));
	json_array_append_new(m, mount_obj("/dev/mqueue", "mqueue", "mqueue", mq, ARRAY_SIZE(mq)));
	json_array_append_new(m, mount_obj("/sys", "sysfs", "sysfs", sys, ARRAY_SIZE(sys)));
	/* CRIU dumps a tmpfs's contents with the image. */
	json_array_append_new(m, mount_obj("/tmp", "tmpfs", "tmpfs", tmp, ARRAY_SIZE(tmp)));
	if (host_root) {
		for (size_t i = 0; i < ARRAY_SIZE(host_dirs); i++) {
			if (stat(host_dirs[i], &st) || !S_ISDIR(st.st_mode))
				continue;
			if (!strcmp(host_dirs[i], "/root") && !spec->sandbox.host_home)
				continue;
			ret = host_src(spec, host_dirs[i], src, sizeof(src));
			if (ret)
				goto err;
			json_array_append_new(m, bind_obj(spec, src, host_dirs[i], false, OCI_BIND_AS_SOURCE));
			if (!strcmp(host_dirs[i], "/usr") && spec->gpu &&
			    stat("/usr/local/nvidia", &st) == 0 && S_ISDIR(st.st_mode))
				json_array_append_new(m, bind_obj(spec, "/usr/local/nvidia",
								  "/usr/local/nvidia", false, OCI_BIND_AS_SOURCE));
		}
		for (size_t i = 0; i < ARRAY_SIZE(top_links); i++) {
			char p[64];

			snprintf(p, sizeof(p), "/%s", top_links[i]);
			if (lstat(p, &st) || !S_ISDIR(st.st_mode))
				continue;
			ret = host_src(spec, p, src, sizeof(src));
			if (ret)
				goto err;
			json_array_append_new(m, bind_obj(spec, src, p, false, OCI_BIND_AS_SOURCE));
		}
	} else if (spec->gpu && stat("/usr/local/nvidia", &st) == 0 && S_ISDIR(st.st_mode)) {
		json_array_append_new(m, bind_obj(spec, "/usr/local/nvidia", "/usr/local/nvidia",
						  false, OCI_BIND_AS_SOURCE));
	}
	for (size_t i = 0; i < spec->nbinds; i++) {
		/* A read-only bind of a host directory already bound (a function
		 * whose cwd is /etc) would be a second mount at one destination:
		 * runc names external mounts by destination, and the restore of
		 * such a pair lost the read-only flag and the masks. */
		if (host_root && !spec->binds[i].writable && is_host_dir(spec->binds[i].dst))
			continue;
		json_array_append_new(m, bind_obj(spec, spec->binds[i].src, spec->binds[i].dst,
						  spec->binds[i].writable, spec->binds[i].flags));
	}
	*out = m;
	return 0;
err:
	json_decref(m);
	return ret;
}

/* /dev/nvidiaN: a GPU's node (not nvidiactl, nvidia-uvm…); its N. */
static int gpu_node_minor(const char *name)
{
	const char *p = name + strlen("nvidia");

	if (strncmp(name, "nvidia", 6) || !*p || strspn(p, "0123456789") != strlen(p))
		return -1;
	return atoi(p);
}

static bool gpu_allowed(const struct oci_spec *spec, int minor)
{
	if (minor < 0 || !spec->gpu_minors)
		return true;
	for (size_t i = 0; i < spec->ngpu_minors; i++)
		if (spec->gpu_minors[i] == minor)
			return true;
	return false;
}

static int add_nvidia_dev(json_t *devs, json_t *allow, const char *path, bool allowed)
{
	struct stat st;

	if (stat(path, &st) || !S_ISCHR(st.st_mode))
		return 0;
	json_array_append_new(devs, json_pack("{s:s, s:s, s:I, s:I, s:i, s:i, s:i}", "path", path,
					      "type", "c", "major", (json_int_t)major(st.st_rdev),
					      "minor", (json_int_t)minor(st.st_rdev), "fileMode",
					      (int)(st.st_mode & 07777), "uid", 0, "gid", 0));
	if (!allowed)
		return 1;
	json_array_append_new(allow, json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type", "c",
					       "major", (json_int_t)major(st.st_rdev), "minor",
					       (json_int_t)minor(st.st_rdev), "access", "rwm"));
	return 1;
}

/* Every /dev/nvidia* character device, and those in /dev/nvidia-caps; the
 * GPUs' own nodes allowed only for the spec's GPUs. */
static int add_nvidia_devs(const struct oci_spec *spec, json_t *devs, json_t *allow)
{
	static const char *const dirs[] = { "/dev", "/dev/nvidia-caps" };
	int n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *de;

		if (!d)
			continue;
		while ((de = readdir(d))) {
			char p[PATH_MAX + 32];

			if (i == 0 && strncmp(de->d_name, "nvidia", 6))
				continue;
			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", dirs[i], de->d_name);
			n += add_nvidia_dev(devs, allow, p,
					    i != 0 || gpu_allowed(spec, gpu_node_minor(de->d_name)));
		}
		closedir(d);
	}
	return n;
}

static json_t *build_linux(const struct oci_spec *spec)
{
	json_t *ns, *devs, *allow, *l;

	ns = json_pack("[{s:s}, {s:s}, {s:s}, {s:s}]", "type", "pid", "type", "ipc", "type", "uts",
		       "type", "mount");
	devs = json_array();
	allow = json_pack("[{s:b, s:s}]", "allow", 0, "access", "rwm");
	l = json_object();
	if (!ns || !devs || !allow || !l) {
		json_decref(ns);
		json_decref(devs);
		json_decref(allow);
		json_decref(l);
		return NULL;
	}
	if (spec->netns_path)
		json_array_append_new(ns, json_pack("{s:s, s:s}", "type", "network", "path",
						    spec->netns_path));
	else
		json_array_append_new(ns, json_pack("{s:s}", "type", "network"));
	if (spec->userns_size) {
		json_t *map = json_pack("[{s:i, s:I, s:I}]", "containerID", 0, "hostID",
					(json_int_t)spec->userns_base, "size",
					(json_int_t)spec->userns_size);

		json_array_append_new(ns, json_pack("{s:s}", "type", "user"));
		json_object_set(l, "uidMappings", map);
		json_object_set_new(l, "gidMappings", map);
	}
	if (spec->gpu && add_nvidia_devs(spec, devs, allow) == 0)
		pr_warn("GPU function but no /dev/nvidia* device on this host");
	json_object_set_new(l, "namespaces", ns);
	json_object_set_new(l, "devices", devs);
	json_object_set_new(l, "resources", json_pack("{s:o}", "devices", allow));
	json_object_set_new(l, "maskedPaths", str_array(masked_paths, ARRAY_SIZE(masked_paths)));
	if (!spec->sandbox.no_seccomp)
		json_object_set_new(l, "seccomp", oci_seccomp_profile(spec->sandbox.capabilities));
	json_object_set_new(l, "readonlyPaths",
			    str_array(readonly_paths, ARRAY_SIZE(readonly_paths)));
	if (spec->cgroups_path)
		json_object_set_new(l, "cgroupsPath", json_string(spec->cgroups_path));
	return l;
}

static bool env_has(const struct oci_spec *spec, const char *prefix)
{
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		if (!strncmp(spec->env[i], prefix, strlen(prefix)))
			return true;
	return false;
}

static void env_add(json_t *env, const char *name, const char *value)
{
	char *e = NULL;

	if (asprintf(&e, "%s=%s", name, value) > 0)
		json_array_append_new(env, json_string(e));
	free(e);
}

static json_t *build_env(const struct oci_spec *spec)
{
	static const char default_path[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	const char *host_path = getenv("PATH"), *host_ld = getenv("LD_LIBRARY_PATH");
	json_t *env = json_array();

	for (size_t i = 0; env && spec->env && spec->env[i]; i++)
		json_array_append_new(env, json_string(spec->env[i]));
	if (!env)
		return NULL;
	/* A host-rooted function runs what the host would run: the host's own
	 * PATH means something there (e.g. a venv in /opt holding torch), and
	 * so does its LD_LIBRARY_PATH. */
	for (size_t i = 0; spec->env_defaults && spec->env_defaults[i]; i++) {
		const char *d = spec->env_defaults[i], *eq = strchr(d, '=');
		char name[128];

		if (!eq || (size_t)(eq - d) + 2 > sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s=", (int)(eq - d), d);
		if (!env_has(spec, name))
			json_array_append_new(env, json_string(d));
	}
	if (!env_has(spec, "PATH="))
		env_add(env, "PATH", !spec->rootfs && host_path && *host_path ? host_path : default_path);
	if (!spec->rootfs && host_ld && *host_ld && !env_has(spec, "LD_LIBRARY_PATH="))
		env_add(env, "LD_LIBRARY_PATH", host_ld);
	/* root's home is not the function's (nor writable on a read-only
	 * root): caches (Python's, Triton's, Hugging Face's) go to the tmpfs. */
	if (!spec->sandbox.host_home && !env_has(spec, "HOME="))
		env_add(env, "HOME", "/tmp");
	return env;
}

static json_t *build_capabilities(const struct oci_sandbox *sb)
{
	json_t *set = json_array(), *c;

	for (size_t i = 0; set && sb->capabilities && sb->capabilities[i]; i++)
		json_array_append_new(set, json_string(sb->capabilities[i]));
	c = json_pack("{s:O, s:O, s:O, s:O}", "bounding", set, "effective", set, "permitted", set,
		      "ambient", set);
	json_decref(set);
	return c;
}

static json_t *build_process(const struct oci_spec *spec)
{
	json_t *args = json_array();
	struct rlimit nofile = { 1024, 1024 };

	for (size_t i = 0; args && spec->argv[i]; i++)
		json_array_append_new(args, json_string(spec->argv[i]));
	/* Our own limit: raising it needs CAP_SYS_RESOURCE, which a sandboxed
	 * host may not give (runc then fails to start the container). */
	getrlimit(RLIMIT_NOFILE, &nofile);
	return json_pack("{s:b, s:{s:I, s:I}, s:o, s:o, s:s, s:o, s:[{s:s, s:I, s:I}], s:b}",
			 "terminal", 0, "user", "uid", (json_int_t)0, "gid", (json_int_t)0, "args", args, "env",
			 build_env(spec), "cwd", spec->cwd ? spec->cwd : "/", "capabilities",
			 build_capabilities(&spec->sandbox), "rlimits", "type", "RLIMIT_NOFILE",
			 "hard", (json_int_t)nofile.rlim_max, "soft", (json_int_t)nofile.rlim_cur,
			 "noNewPrivileges", !spec->sandbox.new_privileges);
}

/* Skeleton of a host-rooted rootfs: mount points, and the merged-/usr
 * symlinks as the host has them. */
static int make_rootfs(const char *rootfs)
{
	static const char *const dirs[] = { "usr", "etc", "root", "opt", "proc", "dev", "sys", "tmp" };
	char p[PATH_MAX + 32], target[PATH_MAX];
	struct stat st;
	int ret;

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(p, sizeof(p), "%s/%s", rootfs, dirs[i]);
		ret = mkdir_p(p, 0755);
		if (ret)
			return ret;
	}
	for (size_t i = 0; i < ARRAY_SIZE(top_links); i++) {
		char host[64];
		ssize_t n;

		snprintf(host, sizeof(host), "/%s", top_links[i]);
		snprintf(p, sizeof(p), "%s/%s", rootfs, top_links[i]);
		if (lstat(host, &st))
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(host, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (symlink(target, p) < 0 && errno != EEXIST) {
				ret = -errno;
				pr_perror("symlink %s -> %s", p, target);
				return ret;
			}
		} else if (S_ISDIR(st.st_mode)) {
			ret = mkdir_p(p, 0755);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* In a user namespace, the directories on the way to each bind's
 * destination that the skeleton lacks (a mount at /srv/fn/data, a cwd in
 * /var/lib/fn): made here, 0755 and the range's uid 0's.  Otherwise
 * runc's restore makes them, as host root with thawd's umask (0700), and
 * CRIU, which mounts from inside the namespace, cannot reach the mount
 * point (`mnt-v2: Can't stat mountpoint ...: Permission denied`): every
 * restore of such a function failed and booted instead.  The last
 * component stays runc's to make (a file or a directory, as its source
 * is); a link of the skeleton's (/bin) is not followed.  0 or -errno. */
static int make_userns_mountpoints(const char *rootfs, const struct oci_spec *spec)
{
	for (size_t i = 0; i < spec->nbinds; i++) {
		char path[PATH_MAX], *save = NULL, *tok, *next;
		int dfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret = 0;

		snprintf(path, sizeof(path), "%s", spec->binds[i].dst);
		tok = strtok_r(path, "/", &save);
		while (dfd >= 0 && tok && (next = strtok_r(NULL, "/", &save))) {
			int fd;

			if (mkdirat(dfd, tok, 0755) == 0) {
				if (fchmodat(dfd, tok, 0755, 0) < 0 ||
				    fchownat(dfd, tok, spec->userns_base, spec->userns_base,
					     AT_SYMLINK_NOFOLLOW) < 0)
					ret = -errno;
			} else if (errno != EEXIST) {
				ret = -errno;
			}
			if (ret)
				break;
			fd = openat(dfd, tok, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			close(dfd);
			dfd = fd;
			tok = next;
		}
		if (dfd >= 0)
			close(dfd);
		if (ret) {
			pr_err("rootfs %s: the way to %s: %s", rootfs, spec->binds[i].dst,
			       strerror(-ret));
			return ret;
		}
	}
	return 0;
}

/* The directory path, resolved in the root rfd holds as the container
 * sees it (its links followed inside it), made where it is missing:
 * 0755, thawd's, as runc makes a mount point.  0 or -errno. */
static int mkdir_in_root(int rfd, const char *path)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	char p[PATH_MAX], *slash = NULL;
	const char *name;
	int pfd, fd, ret = 0;
	size_t n;

	if ((size_t)snprintf(p, sizeof(p), "%s", path) >= sizeof(p))
		return -ENAMETOOLONG;
	n = strlen(p);
	/* Each component from the top: "a", "a/b", … */
	for (size_t i = 1; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		p[i] = '\0';
		fd = (int)syscall(SYS_openat2, rfd, p, &how, sizeof(how));
		if (fd >= 0) {
			close(fd);
		} else if (errno != ENOENT) {
			ret = -errno;
		} else {
			/* Its parent, there already: the component made in it. */
			slash = strrchr(p, '/');
			if (slash)
				*slash = '\0';
			pfd = (int)syscall(SYS_openat2, rfd, slash ? p : "/", &how, sizeof(how));
			if (slash)
				*slash = '/';
			name = slash ? slash + 1 : p;
			if (pfd < 0)
				ret = -errno;
			else if ((mkdirat(pfd, name, 0755) < 0 && errno != EEXIST) ||
				 fchmodat(pfd, name, 0755, 0) < 0)
				ret = -errno;
			if (pfd >= 0)
				close(pfd);
		}
		if (i < n)
			p[i] = '/';
		if (ret)
			return ret;
	}
	return 0;
}

/* In spec->mountpoints_in, the mount points of mounts (each not inside an
 * earlier one: /dev/pts is in /dev's tmpfs) and the cwd: runc, in the
 * container's user namespace, cannot make them in the read-only idmapped
 * root it is given, nor can CRIU at a restore.  Without a user namespace
 * runc makes the same ones there, as host root.  0 or -errno (logged). */
static int make_mountpoints_in(const struct oci_spec *spec, const json_t *mounts)
{
	int rfd = open(spec->mountpoints_in, O_PATH | O_DIRECTORY | O_CLOEXEC), ret = 0;
	const char *dst = NULL;
	size_t i, n = json_array_size(mounts);

	if (rfd < 0) {
		ret = -errno;
		pr_perror("%s", spec->mountpoints_in);
		return ret;
	}
	for (i = 0; !ret && i <= n; i++) {
		bool inside = false;

		dst = i < n ? json_string_value(json_object_get(json_array_get(mounts, i),
								"destination"))
			    : spec->cwd;
		if (!dst || dst[0] != '/')
			continue;
		for (size_t j = 0; j < i && j < n && !inside; j++) {
			const char *d = json_string_value(
				json_object_get(json_array_get(mounts, j), "destination"));
			size_t l = d ? strlen(d) : 0;

			inside = l && !strncmp(dst, d, l) && dst[l] == '/';
		}
		if (!inside)
			ret = mkdir_in_root(rfd, dst + 1);
	}
	close(rfd);
	if (ret)
		pr_err("rootfs %s: the mount point %s: %s", spec->mountpoints_in, dst,
		       strerror(-ret));
	return ret;
}

/* CRIU keeps the contents of a file that is unlinked but still open or
 * mapped (a ghost) in the image only up to its ghost-limit, 1 MiB by
 * default, and fails the dump beyond.  NCCL's shared-memory transport maps
 * segments of tens of MiB in /dev/shm and unlinks them once its peers have
 * mapped them: as large a ghost as /dev/shm can hold is dumped. */
static int write_criu_conf(const char *path, const struct oci_spec *spec)
{
	char text[sizeof(criu_conf) + sizeof(criu_restore_conf) + 48];

	snprintf(text, sizeof(text), "%sghost-limit=%llu\n%s", criu_conf, shm_bytes(spec),
		 spec->restore ? criu_restore_conf : "");
	return write_file_atomic(path, text, strlen(text), 0644);
}

int oci_bundle_write(const char *dir, const struct oci_spec *spec)
{
	char absdir[PATH_MAX], rootfs[PATH_MAX + 16], conf[PATH_MAX + 16], cfg[PATH_MAX + 16];
	json_t *root = NULL, *mounts = NULL;
	char *text = NULL;
	bool host_root = !spec->rootfs;
	int ret;

	if (!spec->argv || !spec->argv[0]) {
		pr_err("bundle %s: no process to run", dir);
		return -EINVAL;
	}
	if (spec->userns_size && spec->netns_path) {
		pr_err("bundle %s: a user namespace's network namespace is runc's to make", dir);
		return -EINVAL;
	}
	ret = mkdir_p(dir, 0700); /* its rootfs: make_rootfs */
	if (ret)
		return ret;
	if (!realpath(dir, absdir)) {
		ret = -errno;
		pr_perror("realpath %s", dir);
		return ret;
	}
	snprintf(cfg, sizeof(cfg), "%s/config.json", absdir);
	snprintf(conf, sizeof(conf), "%s/criu.conf", absdir);
	if (host_root) {
		snprintf(rootfs, sizeof(rootfs), "%s/rootfs", absdir);
		ret = make_rootfs(rootfs);
		if (!ret && spec->userns_size)
			ret = make_userns_mountpoints(rootfs, spec);
		if (ret)
			goto out;
	} else if (!realpath(spec->rootfs, rootfs)) {
		ret = -errno;
		pr_perror("rootfs %s", spec->rootfs);
		goto out;
	}

	ret = build_mounts(spec, host_root, &mounts);
	if (!ret && spec->mountpoints_in)
		ret = make_mountpoints_in(spec, mounts);
	if (ret)
		goto out;
	root = json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o, s:{s:s}}", "ociVersion", "1.0.2",
			 "process", build_process(spec), "root", "path", rootfs, "readonly",
			 !spec->sandbox.writable_root,
			 "hostname", spec->hostname ? spec->hostname : "thaw", "mounts",
			 mounts, "linux", build_linux(spec), "annotations",
			 "org.criu.config", conf);
	if (!root) {
		ret = -ENOMEM;
		pr_err("bundle %s: cannot build config.json", dir);
		goto out;
	}
	ret = write_criu_conf(conf, spec);
	if (ret)
		goto out;
	text = json_dumps(root, JSON_INDENT(1));
	if (!text) {
		ret = -ENOMEM;
		pr_err("bundle %s: cannot serialise config.json", dir);
		goto out;
	}
	ret = write_file_atomic(cfg, text, strlen(text), 0644);
out:
	if (ret) {
		unlink(cfg);
		unlink(conf);
	}
	free(text);
	json_decref(root);
	return ret;
}
