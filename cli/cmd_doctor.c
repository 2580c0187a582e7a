/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_doctor.c — thaw doctor: can this host snapshot and restore?
 *
 * One line per check (ok, warn or FAIL, and why), or one JSON object with
 * --json.  Exit 0 only when everything thaw needs holds; a missing GPU is a
 * warning (CPU functions still work), not a failure.
 */
#define LOG_PREFIX "doctor: "
#include "cli/cli.h"
#include "common/config.h"
#include "common/cuda.h"
#include "common/gpumem.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "function/userns.h"
#include "prewarm/host_record.h"
#include "common/span_record.h"
#include "restore/tier.h"
#include "store/store.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <liburing.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* CRIU's cache of what it probed of the kernel (kerndat): it reads it where
 * it finds it, and writes it only on a tmpfs, which a reboot clears. */
#define CRIU_KDAT "/run/criu.kdat"

enum status { ST_OK, ST_WARN, ST_FAIL };
static const char *const status_word[] = { "ok", "warn", "FAIL" };

struct doctor {
	json_t *checks; /* with --json; NULL prints lines */
	int failures;
	int warnings;
};

static void report(struct doctor *d, const char *name, enum status st, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void report(struct doctor *d, const char *name, enum status st, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (st == ST_FAIL)
		d->failures++;
	else if (st == ST_WARN)
		d->warnings++;
	if (d->checks) {
		json_array_append_new(d->checks, json_pack("{s:s, s:s, s:s}", "name", name,
							   "status", status_word[st],
							   "detail", msg));
		return;
	}
	printf("%-4s  %-9s %s\n", status_word[st], name, msg);
}

/* Run argv with stdout and stderr into out (NUL-terminated, truncated to len),
 * killing it after timeout_ms.  Returns its exit status, 127 if it could not
 * start, -ETIMEDOUT, or -errno where it could not be forked. */
static int run_capture(char *const argv[], char *out, size_t len, int timeout_ms)
{
	struct spawn sp = SPAWN_INIT;
	int status = 0, ret;
	size_t n = 0;
	uint64_t start = now_ns();

	out[0] = '\0';
	sp.argv = (const char *const *)argv;
	sp.out = SPAWN_PIPE;
	sp.err = SPAWN_OUT;
	ret = spawn_start(&sp);
	if (ret)
		return ret;
	for (;;) {
		struct pollfd pf = { .fd = sp.pipe_out, .events = POLLIN };
		char sink[4096];
		int left = timeout_ms - (int)ms_since(start);
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, left) <= 0) {
			close(sp.pipe_out);
			spawn_wait(&sp, 0, NULL); /* killed, unless it has just ended */
			return -ETIMEDOUT;
		}
		/* keep the first len-1 bytes, drain the rest so the child never blocks */
		if (n + 1 < len)
			r = read(sp.pipe_out, out + n, len - 1 - n);
		else
			r = read(sp.pipe_out, sink, sizeof(sink));
		if (r <= 0)
			break;
		if (n + 1 < len)
			n += r;
	}
	out[n] = '\0';
	close(sp.pipe_out);
	ret = spawn_wait(&sp, -1, &status);
	if (ret)
		return ret;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The last non-empty line of s, for a complaint on one line. */
static const char *last_line(char *s)
{
	size_t n = strlen(s);
	char *nl;

	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
	nl = strrchr(s, '\n');
	return nl ? nl + 1 : s;
}

static bool find_on_path(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char *dup, *save = NULL;
	bool found = false;

	if (!path || !(dup = strdup(path)))
		return false;
	for (char *dir = strtok_r(dup, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/%s", *dir ? dir : ".", name);
		if (access(out, X_OK) == 0) {
			found = true;
			break;
		}
	}
	free(dup);
	return found;
}

/* The .deps criu wrapper beside the build: build/thaw or build/static/thaw
 * lies one or two levels below the repository root. */
static bool find_deps_criu(char *out, size_t len)
{
	char exe[PATH_MAX / 2]; /* room for the suffix in out */
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return false;
	exe[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(exe, '/');

		if (!slash || slash == exe)
			return false;
		*slash = '\0';
		snprintf(out, len, "%s/.deps/criu-wrapper", exe);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* "4.2.1" >= 4.2? */
static bool version_at_least(const char *v, int major, int minor)
{
	int a = 0, b = 0;

	if (sscanf(v, "%d.%d", &a, &b) < 1)
		return false;
	return a > major || (a == major && b >= minor);
}

static void check_criu(struct doctor *d)
{
	const char *env = getenv("THAW_CRIU");
	char criu[PATH_MAX], out[8192], version[64] = "";
	const char *from;
	char *v;
	int rc;

	if (env && *env) {
		snprintf(criu, sizeof(criu), "%s", env);
		from = "$THAW_CRIU";
		if (access(criu, X_OK)) {
			report(d, "criu", ST_FAIL, "%s (from $THAW_CRIU): %s", criu, strerror(errno));
			return;
		}
	} else if (find_deps_criu(criu, sizeof(criu))) {
		from = "the .deps prefix";
	} else if (find_on_path("criu", criu, sizeof(criu))) {
		from = "PATH";
	} else {
		report(d, "criu", ST_FAIL,
		       "criu not found: no .deps/criu-wrapper beside the build (make deps) and "
		       "no criu on PATH");
		return;
	}
	rc = run_capture((char *[]){ criu, "--version", NULL }, out, sizeof(out), 10000);
	v = strstr(out, "Version:");
	if (rc != 0 || !v || sscanf(v, "Version: %63s", version) != 1) {
		report(d, "criu", ST_FAIL, "%s (from %s) does not run: %s", criu, from,
		       rc == 0 ? "no version in its output" : last_line(out));
		return;
	}
	if (!version_at_least(version, 4, 2)) {
		report(d, "criu", ST_FAIL,
		       "%s (from %s) is criu %s; thaw needs >= 4.2 (older ones fail on "
		       "6.x kernels): make deps",
		       criu, from, version);
		return;
	}
	report(d, "criu", ST_OK, "criu %s at %s (from %s)", version, criu, from);

	rc = run_capture((char *[]){ criu, "check", NULL }, out, sizeof(out), 60000);
	if (rc == 0)
		report(d, "criu-chk", ST_OK, "criu check: %s", last_line(out));
	else if (rc == -ETIMEDOUT)
		report(d, "criu-chk", ST_FAIL, "criu check did not finish in 60 s");
	else
		report(d, "criu-chk", ST_FAIL, "criu check failed (exit %d): %s", rc,
		       last_line(out));

	/* Lazy restore (--lazy) needs userfaultfd with non-cooperative events. */
	rc = run_capture((char *[]){ criu, "check", "--feature", "uffd-noncoop", NULL }, out,
			 sizeof(out), 60000);
	if (rc == 0)
		report(d, "criu-lazy", ST_OK, "lazy restore: userfaultfd (uffd-noncoop) works");
	else
		report(d, "criu-lazy", ST_WARN,
		       "lazy restore (--lazy) unavailable: criu check --feature uffd-noncoop: %s",
		       rc == -ETIMEDOUT ? "no answer in 60 s" : last_line(out));
}

/* Without its kerndat cache CRIU probes the kernel again at every start
 * (forks, a network namespace, userfaultfd, ptrace...): tens of ms of each
 * restore where /run is not a tmpfs (bench/LOG.md, where a lazy GPU start's
 * criu_restore goes).
 * After check_criu, whose `criu check` writes the cache where it can. */
static void check_criu_kdat(struct doctor *d)
{
	struct statfs fs;

	if (statfs("/run", &fs) < 0 || fs.f_type != TMPFS_MAGIC) {
		report(d, "criu-kdat", ST_WARN,
		       "/run is not a tmpfs: CRIU keeps its kernel-probe cache (%s) only on "
		       "one, so every restore probes the kernel again (~40 ms of a start on "
		       "a 2-core machine); a tmpfs mounted on /run lets it keep one",
		       CRIU_KDAT);
		return;
	}
	if (access(CRIU_KDAT, F_OK) == 0)
		report(d, "criu-kdat", ST_OK, "CRIU keeps its kernel-probe cache in %s", CRIU_KDAT);
	else if (access(CRIU_KDAT ".tmp", F_OK) == 0)
		/* CRIU creates it with O_EXCL, and one that died left it. */
		report(d, "criu-kdat", ST_WARN,
		       "%s.tmp, left by a CRIU that did not finish, stops CRIU from writing its "
		       "kernel-probe cache (%s): every restore probes the kernel again "
		       "(~40 ms of a start on a 2-core machine); remove it",
		       CRIU_KDAT, CRIU_KDAT);
	else
		report(d, "criu-kdat", ST_OK,
		       "/run is a tmpfs: CRIU keeps its kernel-probe cache there (%s)", CRIU_KDAT);
}

static void check_runc(struct doctor *d)
{
	const char *env = getenv("THAW_RUNC");
	char runc[PATH_MAX], out[4096];
	char *nl;
	int rc;

	if (env && *env) {
		snprintf(runc, sizeof(runc), "%s", env);
		if (access(runc, X_OK)) {
			report(d, "runc", ST_FAIL, "%s (from $THAW_RUNC): %s", runc, strerror(errno));
			return;
		}
	} else if (!find_on_path("runc", runc, sizeof(runc))) {
		report(d, "runc", ST_FAIL, "runc not found on PATH (apt-get install runc)");
		return;
	}
	rc = run_capture((char *[]){ runc, "--version", NULL }, out, sizeof(out), 10000);
	if (rc != 0 || strncmp(out, "runc version", 12)) {
		report(d, "runc", ST_FAIL, "%s does not run: %s", runc, last_line(out));
		return;
	}
	nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
	report(d, "runc", ST_OK, "%s at %s", out, runc);
}

/* Functions in a user namespace ("sandbox": {"userns": true}): whether
 * this host can run them, and how (docs/DESIGN.md, "Confinement"). */
static void check_userns(struct doctor *d)
{
	struct thaw_config c;
	char why[256], off[PATH_MAX + 128];
	FILE *f;
	int uffd = 0;

	if (config_init(&c, cli_data_dir())) {
		report(d, "userns", ST_WARN, "no configuration: %s", log_last_error());
		return;
	}
	if (!userns_supported(&c, why, sizeof(why))) {
		report(d, "userns", ST_WARN,
		       "functions cannot run in a user namespace here (\"sandbox\": {\"userns\": "
		       "true} fails): %s",
		       why);
		return;
	}
	f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "re");
	if (f) {
		if (fscanf(f, "%d", &uffd) != 1)
			uffd = 0;
		fclose(f);
	}
	/* userns_host_default's other parts, supported being known: not
	 * asked twice (it forks a child to try). */
	if (!c.userns_default)
		snprintf(off, sizeof(off), USERNS_DEFAULT_OFF);
	if (!c.userns_default || !userns_host_dirs(&c, off, sizeof(off))) {
		report(d, "userns", ST_WARN,
		       "supported (%s), but functions whose spec does not say run as the host's "
		       "uid 0: %s",
		       why, off);
		return;
	}
	report(d, "userns", ST_OK, "functions run in a user namespace by default: %s; %s", why,
	       uffd == 1 ? "lazy restores too (vm.unprivileged_userfaultfd=1)" :
			   "their lazy restores go eager (vm.unprivileged_userfaultfd=0)");
}

static void check_io_uring(struct doctor *d)
{
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	char *disabled = NULL;
	size_t len;
	int ret;

	ret = io_uring_queue_init(4, &ring, 0);
	if (ret < 0) {
		if (read_file("/proc/sys/kernel/io_uring_disabled", &disabled, &len, 64) == 0 &&
		    atoi(disabled) != 0)
			report(d, "io_uring", ST_FAIL,
			       "io_uring_queue_init: %s: disabled by sysctl "
			       "kernel.io_uring_disabled=%d",
			       strerror(-ret), atoi(disabled));
		else
			report(d, "io_uring", ST_FAIL, "io_uring_queue_init: %s", strerror(-ret));
		free(disabled);
		return;
	}
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_nop(sqe);
	sqe->user_data = 42;
	ret = io_uring_submit_and_wait(&ring, 1);
	if (ret >= 0)
		ret = io_uring_wait_cqe(&ring, &cqe);
	if (ret < 0)
		report(d, "io_uring", ST_FAIL, "NOP round trip: %s", strerror(-ret));
	else if (cqe->user_data != 42 || cqe->res != 0)
		report(d, "io_uring", ST_FAIL, "NOP round trip: unexpected completion (res %d)",
		       cqe->res);
	else if (read_file("/proc/sys/kernel/io_uring_disabled", &disabled, &len, 64) == 0 &&
		 atoi(disabled) != 0)
		report(d, "io_uring", ST_OK,
		       "io_uring_queue_init and a NOP round trip (kernel.io_uring_disabled=%d: "
		       "only privileged users)",
		       atoi(disabled));
	else
		report(d, "io_uring", ST_OK, "io_uring_queue_init and a NOP round trip");
	free(disabled);
	io_uring_queue_exit(&ring);
}

/* Can a snapshot be restored onto another GPU than its own (the checkpoint
 * API's GPU pairs, driver 580 and later)?  With one GPU it never has to. */
static void check_gpu_moves(struct doctor *d, size_t n)
{
	char drv[64] = "";
	int major;

	if (cuda_kernel_driver_version(drv, sizeof(drv))) {
		report(d, "gpu-move", ST_WARN, "%zu GPU%s; the kernel driver's version is unknown "
		       "(no NVML, no /proc/driver/nvidia/version): restore onto another GPU "
		       "needs driver >= %d", n, n > 1 ? "s" : "", CUDA_PAIRS_MIN_DRIVER);
		return;
	}
	major = atoi(drv);
	if (major >= CUDA_PAIRS_MIN_DRIVER)
		report(d, "gpu-move", ST_OK, "%zu GPU%s, driver %s: a snapshot restores onto any "
		       "GPU of the same model (GPU pairs)%s", n, n > 1 ? "s" : "", drv,
		       n > 1 ? "; starts spread over the GPUs" : "");
	else
		report(d, "gpu-move", n > 1 ? ST_WARN : ST_OK,
		       "%zu GPU%s, driver %s: restore onto another GPU needs driver >= %d; a "
		       "snapshot restores onto its own GPU only", n, n > 1 ? "s" : "", drv,
		       CUDA_PAIRS_MIN_DRIVER);
}

/* Functions spanning GPUs (several CUDA processes, NCCL between them): can
 * this driver checkpoint and restore them?  Only a try tells; the last
 * one's outcome is recorded by the snapshot or the start
 * (common/span_record.h): the step refused, the driver's words, and what
 * the spec could set to avoid it. */
static void check_gpu_spans(struct doctor *d)
{
	struct span_record r;
	char drv[64] = "unknown", line[1400];
	int ret = span_record_read(cli_data_dir(), &r);

	if (ret == -ENOENT) {
		report(d, "gpu-span", ST_OK, "no function of several CUDA processes or GPUs "
		       "snapshotted here yet: whether the driver checkpoints one is known at its "
		       "first snapshot");
		return;
	}
	if (ret) {
		report(d, "gpu-span", ST_WARN, "%s/%s: %s", cli_data_dir(), SPAN_RECORD_FILE,
		       ret == -EINVAL ? "not a record of a checkpoint" : strerror(-ret));
		return;
	}
	cuda_kernel_driver_version(drv, sizeof(drv));
	report(d, "gpu-span", span_record_describe(&r, drv, line, sizeof(line)) ? ST_WARN : ST_OK,
	       "%s", line);
}

static void check_gpu(struct doctor *d)
{
	struct cuda_device *devs = NULL;
	size_t n = 0;
	int version = 0, ret;

	if (!cuda_available()) {
		report(d, "gpu", ST_WARN, "no GPU: CPU functions only (%s)", cuda_unavailable_reason());
		return;
	}
	ret = cuda_driver_version(&version);
	if (!ret)
		ret = cuda_devices(&devs, &n);
	if (ret) {
		report(d, "gpu", ST_WARN, "no GPU: CPU functions only (%s)", log_last_error());
		return;
	}
	if (!n) {
		report(d, "gpu", ST_WARN, "no GPU: CPU functions only (driver CUDA %d.%d, 0 devices)",
		       version / 1000, version % 1000 / 10);
		return;
	}
	if (cuda_checkpoint_supported())
		report(d, "gpu", ST_OK, "driver supports CUDA %d.%d with the checkpoint API, %zu GPU%s",
		       version / 1000, version % 1000 / 10, n, n > 1 ? "s" : "");
	else
		report(d, "gpu", ST_WARN,
		       "driver supports CUDA %d.%d but has no checkpoint API (driver >= 550 "
		       "needed): GPU functions cannot be snapshotted; %zu GPU%s",
		       version / 1000, version % 1000 / 10, n, n > 1 ? "s" : "");
	check_gpu_moves(d, n);
	check_gpu_spans(d);
	for (size_t i = 0; i < n; i++) {
		char tb[32], fb[32], name[16];

		snprintf(name, sizeof(name), "gpu%d", devs[i].ordinal);
		if (devs[i].free_bytes)
			report(d, name, ST_OK, "%s %s, %s, %s free", devs[i].name, devs[i].uuid,
			       fmt_bytes(devs[i].total_bytes, tb), fmt_bytes(devs[i].free_bytes, fb));
		else
			report(d, name, ST_OK, "%s %s, %s (free unknown: no NVML)", devs[i].name,
			       devs[i].uuid, fmt_bytes(devs[i].total_bytes, tb));
	}
	free(devs);
}

/* libthaw-cuda.so (common/gpumem.h): there beside thaw, and loadable (in
 * a child: the library defines dlsym, which thaw has no use for). */
static void check_gpumem(struct doctor *d)
{
	char lib[PATH_MAX], why[PATH_MAX + 64], err[512] = "";
	int p[2], status = 0;
	ssize_t k;
	pid_t pid;

	if (gpumem_library(lib, sizeof(lib), why, sizeof(why))) {
		report(d, "gpumem", ST_WARN,
		       "libthaw-cuda.so not found (%s): a GPU function's device memory goes through "
		       "the driver's checkpoint (one thread, ~5-6 GB/s)", why);
		return;
	}
	if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
		report(d, "gpumem", ST_WARN, "%s: cannot try it (%s)", lib, strerror(errno));
		return;
	}
	if (pid == 0) {
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		const char *e = h ? "" : dlerror();

		if (write(p[1], e, strlen(e)) < 0)
			_exit(2);
		_exit(h ? 0 : 1);
	}
	close(p[1]);
	k = read(p[0], err, sizeof(err) - 1);
	err[k > 0 ? k : 0] = '\0';
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		report(d, "gpumem", ST_FAIL, "%s does not load: %s", lib, err[0] ? err : "it crashed");
	else
		report(d, "gpumem", ST_OK,
		       "%s loads: GPU functions' device memory is carried by thaw and copied back "
		       "at the link's speed (a spec's \"gpu_memory\": \"driver\" opts out)%s",
		       lib, cuda_available() ? "" : "; no GPU here");
}

/* A directory thaw writes into: created if missing, a file created and removed. */
/* Can this process write in dir: a file made there and removed (0), or
 * -errno. */
static int probe_writable(const char *dir)
{
	char probe[PATH_MAX + 32];
	int fd;

	snprintf(probe, sizeof(probe), "%s/.doctor-%d", dir, (int)getpid());
	fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "x", 1) != 1) {
		int e = fd < 0 ? errno : EIO;

		if (fd >= 0) {
			close(fd);
			unlink(probe);
		}
		return -e;
	}
	close(fd);
	return unlink(probe) ? -errno : 0;
}

/* The nearest directory at or above path that exists, into out; -errno
 * where a part of it is something else than a directory. */
static int existing_ancestor(const char *path, char *out, size_t len)
{
	struct stat st;

	snprintf(out, len, "%s", path);
	for (;;) {
		char *slash;

		if (!stat(out, &st))
			return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
		if (errno != ENOENT)
			return -errno;
		slash = strrchr(out, '/');
		if (!slash)
			return -ENOENT;
		if (slash == out)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
}

/* A directory thawd writes: writable, and how much room it has.  One that
 * does not exist yet is not made (a doctor leaves the host as it found
 * it): where thawd would make it, the nearest directory that exists must
 * be writable. */
static void check_dir(struct doctor *d, const char *name, const char *dir)
{
	char at[PATH_MAX], fb[32];
	struct statvfs vfs;
	bool exists;
	int ret;

	ret = existing_ancestor(dir, at, sizeof(at));
	if (ret) {
		report(d, name, ST_FAIL, "%s: cannot be made: %s", dir, strerror(-ret));
		return;
	}
	exists = !strcmp(at, dir);
	ret = probe_writable(at);
	if (ret) {
		report(d, name, ST_FAIL, exists ? "%s: not writable: %s" : "%s: cannot be made in %s: %s",
		       dir, exists ? strerror(-ret) : at, strerror(-ret));
		return;
	}
	if (statvfs(at, &vfs)) {
		report(d, name, ST_FAIL, "%s: statvfs: %s", at, strerror(errno));
		return;
	}
	if (exists)
		report(d, name, ST_OK, "%s writable, %s free", dir,
		       fmt_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize, fb));
	else
		report(d, name, ST_OK, "%s not made yet (thawd makes it; %s writable, %s free)", dir, at,
		       fmt_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize, fb));
}

/* The RAM tier's huge-page tmpfs (tier_root_prepare): what thawd finds or
 * would mount there; mounting nothing.  A plain directory is only a warning:
 * it works, with 4 KiB pages. */
static void check_tier_huge(struct doctor *d, const char *tier)
{
	struct thaw_config c;
	enum tier_root_kind kind;
	char why[1024];

	if (config_init(&c, cli_data_dir())) {
		report(d, "ram-tier-huge", ST_FAIL, "%s", log_last_error());
		return;
	}
	tier_root_probe(tier, c.tier_huge, &kind, why, sizeof(why));
	if (kind == TIER_ROOT_PLAIN && c.tier_huge == CONFIG_HUGE_ON)
		report(d, "ram-tier-huge", ST_FAIL, "%s: THAW_TIER_HUGE=1 but %s", tier, why);
	else if (kind == TIER_ROOT_PLAIN)
		report(d, "ram-tier-huge", ST_WARN, "%s: %s: %s", tier, tier_root_kind_name(kind), why);
	else if (kind == TIER_ROOT_USER)
		report(d, "ram-tier-huge", ST_OK, "%s: %s: %s", tier, tier_root_kind_name(kind), why);
	else
		report(d, "ram-tier-huge", ST_OK, "%s: %s", tier, tier_root_kind_name(kind));
}

static void check_kernel(struct doctor *d)
{
	struct utsname u;

	if (uname(&u)) {
		report(d, "kernel", ST_WARN, "uname: %s", strerror(errno));
		return;
	}
	report(d, "kernel", ST_OK, "Linux %s %s", u.release, u.machine);
}

/* Transparent huge pages for the processes thaw snapshots: thaw does not
 * choose how a function's memory is backed, the host's setting does, and
 * the CUDA driver's checkpoint of GPU state lands in that memory. */
static void check_thp(struct doctor *d)
{
	char *text = NULL, mode[16] = "";
	const char *open_br, *close_br;
	size_t len;

	if (read_file("/sys/kernel/mm/transparent_hugepage/enabled", &text, &len, 4096)) {
		report(d, "thp", ST_WARN, "no transparent huge pages on this kernel");
		return;
	}
	open_br = strchr(text, '[');
	close_br = open_br ? strchr(open_br, ']') : NULL;
	if (open_br && close_br && close_br - open_br - 1 < (long)sizeof(mode))
		snprintf(mode, sizeof(mode), "%.*s", (int)(close_br - open_br - 1), open_br + 1);
	free(text);
	if (!strcmp(mode, "always"))
		report(d, "thp", ST_OK, "transparent huge pages: always (GPU state is checkpointed "
					"into huge pages)");
	else
		report(d, "thp", ST_WARN,
		       "transparent huge pages: %s; the CUDA driver checkpoints GPU state into 4 KiB "
		       "pages then (H100: 25 GB in 18-23 s against 11-13 s with always, and restores "
		       "20-25%% slower); echo always > /sys/kernel/mm/transparent_hugepage/enabled",
		       mode[0] ? mode : "unknown");
}

static void check_cgroup(struct doctor *d)
{
	struct statfs fs;

	if (statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
		report(d, "cgroup", ST_OK, "cgroup v2 at /sys/fs/cgroup");
		return;
	}
	/* runc also works on the hybrid and v1 layouts; they are a warning. */
	if (statfs("/sys/fs/cgroup/unified", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
		report(d, "cgroup", ST_WARN,
		       "hybrid: cgroup v1 controllers, cgroup v2 only at /sys/fs/cgroup/unified");
		return;
	}
	if (access("/sys/fs/cgroup/memory", F_OK) == 0) {
		report(d, "cgroup", ST_WARN, "cgroup v1 only (no cgroup v2)");
		return;
	}
	report(d, "cgroup", ST_FAIL, "no cgroup hierarchy under /sys/fs/cgroup (runc needs one)");
}

/* The store's snapshots that cannot be restored on this host: each one
 * whose record differs from this host where its restore depends on it
 * (prewarm/host_record.h), with the difference.  A warning: thawd boots
 * such a function instead, and re-snapshots it (docs/DESIGN.md, "Restore
 * or boot").  The store is only read, never made. */
static void check_snapshots(struct doctor *d)
{
	char manifests[PATH_MAX + 16], why[1024];
	struct thaw_config c;
	struct store *s = NULL;
	json_t *list = NULL, *here = NULL, *e;
	size_t i, n = 0, bad = 0;

	snprintf(manifests, sizeof(manifests), "%s/manifests", cli_store_dir());
	if (access(manifests, F_OK)) {
		report(d, "snapshots", ST_OK, "no store at %s yet", cli_store_dir());
		return;
	}
	if (config_init(&c, cli_data_dir()) || !(s = store_open_with(cli_store_dir(), &c.store)) ||
	    store_list(s, &list) || !(here = host_record_here(&c))) {
		report(d, "snapshots", ST_WARN, "cannot read the store %s: %s", cli_store_dir(),
		       log_last_error());
		goto out;
	}
	json_array_foreach(list, i, e) {
		const char *id = json_string_value(json_object_get(e, "id"));
		struct manifest *m = NULL;
		struct snapshot_meta sm;
		char name[64];

		if (!id || store_manifest_load(s, id, &m, NULL))
			continue;
		snprintf(name, sizeof(name), "snapshot-%.19s", id + 7);
		if (snapshot_meta_parse(m->meta, &sm, why, sizeof(why))) {
			n++;
			report(d, name, ST_WARN, "%s (function %s): its meta cannot be read: %s", id,
			       m->name, why);
			bad++;
		} else if (sm.spec_err != -ENOENT) { /* a snapshot, not any manifest */
			n++;
			if (host_record_compare(sm.host, sm.gpu, here, why, sizeof(why)) == 1) {
				report(d, name, ST_WARN, "%s (function %s) cannot be restored here: %s",
				       id, m->name, why);
				bad++;
			}
		}
		snapshot_meta_release(&sm);
		manifest_free(m);
	}
	if (!bad)
		report(d, "snapshots", ST_OK, "%zu snapshot%s in %s, none made on a host unlike "
			  "this one", n, n == 1 ? "" : "s", cli_store_dir());
	else
		report(d, "snapshots", ST_WARN, "%zu of %zu snapshots cannot be restored here "
			  "(listed above); thawd boots their functions and re-snapshots them",
		       bad, n);
out:
	json_decref(here);
	json_decref(list);
	store_close(s);
}

/* What check_store collects: how many bad objects, the first few. */
struct store_bad {
	int n;
	char first[600];
};

static void note_bad(const char *what, const char *why, void *arg)
{
	struct store_bad *b = arg;
	size_t len = strlen(b->first);

	if (b->n++ < 3 && len < sizeof(b->first) - 1)
		snprintf(b->first + len, sizeof(b->first) - len, "%s%s: %.160s", len ? "; " : "",
			 what, why);
}

/* The store's verification: by default store_check, which
 * reads the manifests, the pack indexes and the packs' lengths but no chunk
 * (seconds on a large store, where reading every chunk takes as long as
 * reading the store); with full, store_verify, which reads every chunk.
 * Then every function's snapshot must have its manifest.  Any bad object is
 * a failure: a start of it fails or boots instead.  The store is only read. */
static void check_store(struct doctor *d, bool full)
{
	char manifests[PATH_MAX + 16];
	struct store_bad b = { 0 };
	struct thaw_config c;
	struct store *s = NULL;
	int n, f;

	snprintf(manifests, sizeof(manifests), "%s/manifests", cli_store_dir());
	if (access(manifests, F_OK)) {
		report(d, "store", ST_OK, "no store at %s yet", cli_store_dir());
		return;
	}
	if (config_init(&c, cli_data_dir()) || !(s = store_open_with(cli_store_dir(), &c.store))) {
		report(d, "store", ST_FAIL, "cannot open the store %s: %s", cli_store_dir(),
		       log_last_error());
		return;
	}
	n = full ? store_verify(s, note_bad, &b) : store_check(s, note_bad, &b);
	f = n < 0 ? 0 : cli_verify_functions(cli_store_dir(), note_bad, &b);
	if (n < 0 || f < 0)
		report(d, "store", ST_FAIL, "cannot verify the store %s: %s", cli_store_dir(),
		       strerror(-(n < 0 ? n : f)));
	else if (b.n)
		report(d, "store", ST_FAIL,
		       "%d bad object%s in %s (%s); `thaw store verify` lists them all: %s", b.n,
		       b.n == 1 ? "" : "s", cli_store_dir(),
		       full ? "every chunk read" : "manifests, pack indexes and lengths", b.first);
	else
		report(d, "store", ST_OK,
		       "%s: %s sound, every function's snapshot there%s", cli_store_dir(),
		       full ? "every chunk and manifest" : "manifests, pack indexes and lengths",
		       full ? "" : " (chunks not read: thaw doctor --full, or thaw store verify)");
	store_close(s);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: thaw doctor [--json] [--full]\n\n"
		   "Check that this host can snapshot and restore: CRIU >= 4.2 and `criu check`\n"
		   "(and whether CRIU can keep its kernel-probe cache, which saves ~40 ms of a\n"
		   "start), runc, io_uring, the CUDA driver and its GPUs, the data directory and\n"
		   "the RAM tier (writable, free space; one not made yet is not made: where\n"
		   "thawd would make it is checked), the kernel and cgroups, the local\n"
		   "snapshots that cannot be restored on this host (a warning), and the store:\n"
		   "its manifests, pack indexes and packs' lengths, and every function's snapshot\n"
		   "there (no chunk is read; --full reads every one, as thaw store verify).\n"
		   "Exit 0 when all that thaw needs holds; a missing GPU is only a warning (CPU\n"
		   "functions work).\n\n"
		   "  --json   print one JSON object: {\"ok\": bool, \"checks\": [{name, status, detail}]}\n"
		   "  --full   verify the store by reading every chunk (as long as reading the store)\n\n"
		   "environment:\n"
		   "  THAW_CRIU      criu to check (default: .deps/criu-wrapper beside the build, else PATH)\n"
		   "  THAW_RUNC      runc to check (default: runc on PATH)\n"
		   "  THAW_RAM_TIER  RAM tier directory (default /dev/shm/thaw)\n"
		   "  THAW_TIER_HUGE auto|1|0: the tier on its own huge-page tmpfs (auto: the default root)\n"
		   "  THAW_DATA_DIR  data directory (or thaw --data-dir; default /var/lib/thaw)\n"
		   "  THAW_NO_GPU=1  act as if there were no GPU\n"
		   "  THAW_USERNS_POOL START:COUNT|FILE  host uids for functions in a user namespace\n");
}

int cmd_doctor(int argc, char **argv)
{
	struct doctor d = { 0 };
	const char *tier = getenv("THAW_RAM_TIER");
	bool json = false, full = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--full")) {
			full = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "thaw doctor: unknown argument %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (json) {
		d.checks = json_array();
		if (!d.checks) {
			fprintf(stderr, "thaw doctor: out of memory\n");
			return 1;
		}
	}
	check_criu(&d);
	check_criu_kdat(&d);
	check_runc(&d);
	check_userns(&d);
	check_io_uring(&d);
	check_gpu(&d);
	check_gpumem(&d);
	check_dir(&d, "data-dir", cli_data_dir());
	check_dir(&d, "ram-tier", tier && *tier ? tier : CONFIG_RAM_TIER_DEFAULT);
	check_tier_huge(&d, tier && *tier ? tier : CONFIG_RAM_TIER_DEFAULT);
	check_kernel(&d);
	check_thp(&d);
	check_cgroup(&d);
	check_snapshots(&d);
	check_store(&d, full);

	if (json) {
		json_t *o = json_pack("{s:b, s:i, s:i, s:o}", "ok", d.failures == 0, "failures",
				      d.failures, "warnings", d.warnings, "checks", d.checks);
		char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;

		if (!s) {
			fprintf(stderr, "thaw doctor: cannot format JSON\n");
			json_decref(o);
			return 1;
		}
		printf("%s\n", s);
		free(s);
		json_decref(o);
	} else {
		printf("%s: %d failure%s, %d warning%s\n",
		       d.failures ? "not ready" : "ready", d.failures, d.failures == 1 ? "" : "s",
		       d.warnings, d.warnings == 1 ? "" : "s");
	}
	return d.failures ? 1 : 0;
}
