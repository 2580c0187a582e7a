/* SPDX-License-Identifier: Apache-2.0 */
/* recover.c — what thawd finds from an earlier run, and what it leaves when
 * it stops.
 *
 * Before anything else, thawd takes <data>/thawd.lock: two thawds on one data
 * directory would each take the other's instances for lost ones and stop
 * them, mark its snapshots failed and garbage-collect chunks it is writing.
 * The second one stops there, having touched nothing.
 *
 * At start-up, an earlier thawd may have died at any point (kill -9 in the
 * middle of a snapshot included):
 *   - snapshots it left "building" are marked failed (registry_open does it);
 *   - deletes it left half done (functions marked "deleting") are finished
 *     first: every instance recorded for the function is stopped, whatever
 *     its state (standbys included), its snapshot's manifest is deleted and
 *     its file removed, so that none of its instances is adopted;
 *   - instances recorded under <data>/instances whose first process and
 *     endpoint shim are alive are adopted (they go on answering; this thawd
 *     lists and stops them); the others are stopped and cleaned up, and so
 *     is what a start killed before its first record left there;
 *   - runc processes it started that outlived it (a checkpoint or restore
 *     in progress) are killed with their CRIU, and the mounts a restore
 *     makes for CRIU under the runc root are undone;
 *   - what a snapshot in progress leaves (its runc container, network
 *     namespace mount and work directory under <data>/work) is removed;
 *   - the manifests of thawd's own snapshots (tagged "thawd" in their meta,
 *     naming this data directory's registry) that no function names are
 *     deleted: a kill between a manifest's write and the registry's record
 *     of it, or between a function's change and the deletion of the snapshot
 *     it forgot, leaves one.  Untagged manifests (`thaw snapshot`'s, `thaw
 *     store put`'s) and another registry's are never touched;
 *   - the store is garbage collected: a put that was cut short leaves chunks
 *     that no manifest names (never a half-written object: the store is
 *     crash-safe), and gc removes them and stale temp files.
 */
#define LOG_PREFIX "thawd: "
#include "common/log.h"
#include "common/netns.h"
#include "common/runner.h"
#include "common/util.h"
#include "function/snapshot_meta.h"
#include "images/image.h"
#include "restore/instance.h"
#include "restore/instance_ended.h"
#include "restore/shim.h"
#include "server/exits.h"
#include "server/insts.h"
#include "server/internal.h"
#include "server/pool.h"
#include "server/registry.h"
#include "store/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pid written into the lock file by the process holding it; 0 if unknown
 * (not written yet, or not a pid). */
static pid_t lock_holder(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	char *end;
	long pid;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	pid = strtol(buf, &end, 10);
	if (end == buf || (*end && *end != '\n') || pid <= 0 || pid > INT_MAX)
		return 0;
	return (pid_t)pid;
}

/* The thawd named in the lock is gone (or a zombie) while the lock is still
 * held: its server, killed with it (server/exits.h), is on its way out, and
 * its lock with it. */
static bool holder_dying(pid_t holder)
{
	return !proc_alive(holder, 0);
}

#define LOCK_DYING_WAIT_MS 5000

int recover_lock_data_dir(struct server *s)
{
	char path[PATH_MAX + 16], buf[32];
	unsigned waited_ms = 0;
	int fd, n, ret;
	pid_t holder;

	snprintf(path, sizeof(path), "%s/thawd.lock", s->cfg.data_dir);
	/* O_CLOEXEC: a flock lasts while any descriptor of it is open, and
	 * thawd's children (runc, CRIU, shims) must not keep it after thawd. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		ret = -errno;
		pr_perror("cannot open %s", path);
		return ret;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EINTR)
			continue;
		ret = -errno;
		if (ret == -EWOULDBLOCK) {
			holder = lock_holder(fd);
			if (holder && holder_dying(holder) && waited_ms < LOCK_DYING_WAIT_MS) {
				usleep(50 * 1000);
				waited_ms += 50;
				continue;
			}
			if (holder)
				pr_err("another thawd (pid %d) serves the data directory %s (it holds "
				       "%s): not starting a second one on it",
				       (int)holder, s->cfg.data_dir, path);
			else
				pr_err("another process (pid unknown) holds %s: another thawd "
				       "serves the data directory %s; not starting a second one on "
				       "it",
				       path, s->cfg.data_dir);
		} else {
			pr_perror("cannot lock %s", path);
		}
		close(fd);
		return ret;
	}
	/* Ours: the pid to signal (the keeper's, which passes signals on), for
	 * the message of a thawd that finds it taken. */
	n = snprintf(buf, sizeof(buf), "%d\n", (int)(exits_keeper_pid() ?: getpid()));
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		pr_warn("cannot write the pid into %s: %s", path, strerror(errno));
	s->lock_fd = fd;
	return 0;
}

/* Kill the processes an earlier thawd left, chosen by match(pid, text,
 * arg) on the text of /proc/<pid>/<file> (NUL-terminated; cmdline's
 * arguments NUL-separated, n bytes in all): true kills it (match may kill
 * more, and logs what it kills).  thawd and init are passed by.  They are
 * not our children: waited for until they are gone (2 s at most). */
static void kill_matching(const char *file,
			  bool (*match)(pid_t pid, const char *text, size_t n, void *arg), void *arg)
{
	char path[64], buf[8192];
	struct dirent *de;
	pid_t killed[64];
	size_t nkilled = 0;
	DIR *d = opendir("/proc");

	if (!d)
		return;
	while ((de = readdir(d)) && nkilled < ARRAY_SIZE(killed)) {
		pid_t pid = (pid_t)atoi(de->d_name);
		ssize_t n;
		int fd;

		if (pid <= 1 || pid == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (!match(pid, buf, (size_t)n, arg))
			continue;
		kill(pid, SIGKILL);
		killed[nkilled++] = pid;
	}
	closedir(d);
	for (int i = 0; i < 100; i++) {
		size_t alive = 0;

		for (size_t k = 0; k < nkilled; k++)
			alive += kill(killed[k], 0) == 0;
		if (!alive)
			break;
		usleep(20 * 1000);
	}
}

/* A runc process given the runc root root (its cmdline: "…", "--root",
 * "<data>/runc", …): killed with its process group. */
static bool runc_of_root(pid_t pid, const char *cmdline, size_t n, void *root)
{
	for (const char *a = cmdline; a < cmdline + n; a += strlen(a) + 1) {
		const char *next = a + strlen(a) + 1;

		if (strcmp(a, "--root") || next >= cmdline + n || strcmp(next, root))
			continue;
		pr_warn("runc process %d (%s), left by an earlier run, killed", (int)pid, cmdline);
		if (getpgid(pid) == pid)
			kill(-pid, SIGKILL);
		return true;
	}
	return false;
}

/* runc processes of an earlier thawd that outlived it (a `runc checkpoint`
 * or `runc restore` in progress when it was killed: runc runs in a process
 * group of its own, with CRIU in it).  They are recognised by the runc root
 * they were given, <data>/runc, and killed with their group before anything
 * else is cleaned, so that none of them writes into what is being removed. */
static void kill_orphan_runc(struct server *s)
{
	char root[PATH_MAX + 16];

	snprintf(root, sizeof(root), "%s/runc", s->cfg.data_dir);
	kill_matching("cmdline", runc_of_root, root);
}

/* Is the recorded instance serving: its first process and its endpoint's
 * shim both alive (each checked with its start time, so that a reused pid
 * does not count)? */
static bool instance_serving(const json_t *rec)
{
	const char *st = json_string_value(json_object_get(rec, "state"));
	json_t *shim = json_object_get(rec, "shim_pid");
	json_t *shim_start = json_object_get(rec, "shim_start");

	return st && !strcmp(st, "running") && json_is_integer(shim) &&
	       json_is_integer(shim_start) && json_integer_value(shim) > 0 &&
	       proc_alive((pid_t)json_integer_value(shim),
			  (unsigned long long)json_integer_value(shim_start));
}

/* The instances recorded under the data directory by an earlier thawd (or
 * by thaw start): one still serving (container and endpoint alive) is
 * adopted, as a container runtime's shim outlives its daemon: it goes on
 * answering, and this thawd lists it, stops it on DELETE and when it
 * stops.  Any other (exited, failed, a start cut short) is stopped and
 * cleaned up. */
/* The idle, lifetime and grace limits an adopted instance was started with
 * (instance_set_limits recorded them), so that it is stopped as it would
 * have been by the thawd that started it. */
static void adopt_limits(struct server *s, const char *id, const json_t *rec)
{
	struct inst_limits l = {
		.idle_s = json_number_value(json_object_get(rec, "idle_s")),
		.lifetime_s = json_number_value(json_object_get(rec, "max_lifetime_s")),
		.grace_s = json_number_value(json_object_get(rec, "stop_grace_s")),
		.started_ms = (uint64_t)json_integer_value(json_object_get(rec, "started_ms")),
	};

	if (l.started_ms)
		insts_set_limits(s->insts, id, &l);
}

static void adopt_recorded_instances(struct server *s)
{
	struct instance_end ended = { .exited = true,
				      .why = "status unknown: it ended while no thawd ran" };
	json_t *list = NULL, *rec;
	size_t i, adopted = 0;
	int ret;

	ret = instance_list(&s->cfg, &list);
	if (ret) {
		pr_warn("cannot list the instances of an earlier run: %s",
			log_last_error()[0] ? log_last_error() : strerror(-ret));
		return;
	}
	json_array_foreach(list, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "instance"));
		const char *fn = json_string_value(json_object_get(rec, "function"));
		const char *st = json_string_value(json_object_get(rec, "state"));

		if (!id)
			id = json_string_value(json_object_get(rec, "id"));
		if (!id || !id_valid(id))
			continue;
		if (instance_serving(rec) &&
		    insts_add(s->insts, id, fn ? fn : "?",
			      (pid_t)json_integer_value(json_object_get(rec, "pid")),
			      (unsigned long long)json_integer_value(json_object_get(rec, "pid_start")),
			      true) == 0) {
			pr_info("instance %s of %s from an earlier run still serves at %s: adopted",
				id, fn ? fn : "?",
				json_string_value(json_object_get(rec, "endpoint")) ?: "?");
			adopt_limits(s, id, rec);
			adopted++;
			continue;
		}
		/* A stop an earlier thawd began (restore/instance.h,
		 * instance_stop_begin) is finished, without the rest of its
		 * grace: its endpoint was closed already. */
		if (st && !strcmp(st, "stopping")) {
			struct instance_end stopped = { .exited = false };
			const char *why = json_string_value(
				json_object_get(json_object_get(rec, "stop"), "why"));

			snprintf(stopped.why, sizeof(stopped.why), "%s", why ? why : "stopped");
			ret = instance_end(&s->cfg, id, 0, &stopped);
		} else {
			ret = instance_end(&s->cfg, id, 0,
					   st && !strcmp(st, "exited") ? &ended : NULL);
		}
		if (ret && ret != -ENOENT)
			pr_err("instance %s of %s from an earlier run (%s) could not be "
			       "stopped: %s",
			       id, fn ? fn : "?", st ? st : "?", log_last_error());
		else
			pr_warn("instance %s of %s from an earlier run was %s: stopped and cleaned up",
				id, fn ? fn : "?", st ? st : "?");
	}
	if (adopted)
		pr_info("%zu instance(s) of an earlier run adopted", adopted);
	json_decref(list);
}

void recover_route_adopted(struct server *s)
{
	struct inst_view *v = NULL;
	json_t *list = NULL, *rec;
	size_t n = 0, i, routed = 0;

	if (!s->pool || insts_list(s->insts, &v, &n) || !n || instance_list(&s->cfg, &list)) {
		free(v);
		return;
	}
	json_array_foreach(list, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "instance"));

		if (!id || !json_is_true(json_object_get(rec, "routed")))
			continue;
		for (size_t k = 0; k < n; k++)
			if (v[k].adopted && !strcmp(v[k].ref.id, id) &&
			    pool_adopt(s->pool, v[k].ref.function, rec) == 0)
				routed++;
	}
	if (routed)
		pr_info("%zu adopted instance(s) take routed requests again", routed);
	json_decref(list);
	free(v);
}

/* The pid of a record's temporary file <id>.json.tmp.<pid>
 * (write_file_atomic), or 0 if name is not one. */
static pid_t record_temp_pid(const char *name)
{
	const char *tmp = strstr(name, ".json.tmp.");
	char *end;
	long pid;

	if (!tmp)
		return 0;
	pid = strtol(tmp + 10, &end, 10);
	return end == tmp + 10 || *end || pid <= 0 || pid > INT_MAX ? 0 : (pid_t)pid;
}

/* Is there a temporary file of id's record in dir (a start writing it)? */
static bool record_being_written(const char *dir, const char *id)
{
	size_t il = strlen(id);
	struct dirent *de;
	bool found = false;
	DIR *d = opendir(dir);

	if (!d)
		return false;
	while (!found && (de = readdir(d)))
		found = !strncmp(de->d_name, id, il) && !strncmp(de->d_name + il, ".json.tmp.", 10);
	closedir(d);
	return found;
}

/* What a start killed before its first record was in place leaves in
 * <data>/instances: the record's temporary file, and the instance's
 * directory, still empty (the record is written before anything goes into
 * it).  Neither is ever listed, so nothing else would ever remove them.  A
 * temporary file of a live process (a `thaw start` writing its record right
 * now) is left alone, and so is its directory; so is a directory with
 * something in it: no start leaves one without its record, and what it holds
 * is not ours to guess about. */
static void clean_instance_leftovers(struct server *s)
{
	char dir[PATH_MAX + 16], path[PATH_MAX + 300], rec[PATH_MAX + 310];
	struct dirent *de;
	struct stat st;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/instances", s->cfg.data_dir);
	/* The temporary files of dead writers first: a directory whose record
	 * is still being written is left alone below. */
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		pid_t pid = record_temp_pid(de->d_name);

		if (!pid || (pid != getpid() && proc_alive(pid, 0)) ||
		    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		if (unlink(path) == 0)
			pr_warn("removed %s, the record a start cut short was writing", path);
	}
	closedir(d);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!id_valid(de->d_name) ||
		    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path) ||
		    lstat(path, &st) || !S_ISDIR(st.st_mode))
			continue;
		snprintf(rec, sizeof(rec), "%s.json", path);
		if (access(rec, F_OK) == 0 || errno != ENOENT ||
		    record_being_written(dir, de->d_name))
			continue;
		if (rmdir(path) == 0)
			pr_warn("removed %s, left by a start cut short before its record", path);
		else
			pr_warn("%s has no record: left as it is (%s)", path, strerror(errno));
	}
	closedir(d);
}

/* Is mp <dir>/<one name>/<leaf> or below it? */
static bool under_leaf(const char *mp, const char *leaf)
{
	const char *slash = strchr(mp, '/');
	size_t ll = strlen(leaf);

	return slash && slash != mp && !strncmp(slash + 1, leaf, ll) &&
	       (slash[1 + ll] == '/' || slash[1 + ll] == '\0');
}

/* Unmount what is mounted under dir, deepest first: everything (the netns
 * files of snapshots cut short) when leaf is NULL, else only what lies at or
 * below dir/<any name>/<leaf>. */
static void umount_under(const char *dir, const char *leaf)
{
	char line[4096 + 256], **mnts = NULL;
	size_t n = 0, dl = strlen(dir);
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX];

		/* id parent major:minor root mount-point … */
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		if (strncmp(mp, dir, dl) || (mp[dl] != '/' && mp[dl] != '\0'))
			continue;
		if (leaf && (mp[dl] != '/' || !under_leaf(mp + dl + 1, leaf)))
			continue;
		char **m = realloc(mnts, (n + 1) * sizeof(*m));
		if (!m)
			break;
		mnts = m;
		if (!(mnts[n] = strdup(mp)))
			break;
		n++;
	}
	fclose(f);
	while (n-- > 0) {
		if (umount2(mnts[n], MNT_DETACH) == 0)
			pr_warn("unmounted %s, left by an earlier run", mnts[n]);
		free(mnts[n]);
	}
	free(mnts);
}

/* What is left of container id in runc root dir once `runc delete` is done:
 * nothing, or a state directory without its state.json, which runc made for a
 * `runc restore` killed before CRIU was done.  runc knows no container there
 * (delete and list pass it by), so it would stay for good.  Its files go,
 * and its directories if they are empty (criu-root, unmounted before):
 * nothing is removed recursively, so a directory still mounted, or not
 * empty, stays.  0 once the directory is gone, else -errno. */
static int remove_state_leftover(const char *root, const char *id)
{
	char path[PATH_MAX + 80];
	struct dirent *de;
	int dfd, ret = 0;
	DIR *d;

	if (snprintf(path, sizeof(path), "%s/%s", root, id) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (faccessat(dfd, "state.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		close(dfd);
		return -EEXIST; /* runc's: not ours to take apart */
	}
	d = fdopendir(dfd);
	if (!d) {
		ret = -errno;
		close(dfd);
		return ret;
	}
	while ((de = readdir(d))) {
		const char *n = de->d_name;

		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		if (unlinkat(dfd, n, de->d_type == DT_DIR ? AT_REMOVEDIR : 0) < 0 &&
		    (errno != EISDIR || unlinkat(dfd, n, AT_REMOVEDIR) < 0) && !ret)
			ret = -errno;
	}
	closedir(d);
	if (!ret && rmdir(path) < 0)
		ret = -errno;
	return ret;
}

/* Is container id one an earlier run left in runc root dir: a directory
 * there that is not an adopted instance's? */
static bool leftover_container(struct server *s, const char *root, const char *id)
{
	char path[PATH_MAX + 80], fn[64];
	struct stat st;

	return id_valid(id) && insts_function(s->insts, id, fn) != 0 &&
	       snprintf(path, sizeof(path), "%s/%s", root, id) < (int)sizeof(path) &&
	       lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

struct cgroup_sweep {
	struct server *s;
	const char *root;
};

/* A process in the cgroup thaw/<id> (function/bundle.c) of a leftover
 * container, in some hierarchy (a line of /proc/<pid>/cgroup whose path
 * ends in "/thaw/<id>"): runc restore puts CRIU there before it restores,
 * and a CRIU whose runc was killed with thawd stays, with what it had
 * restored, while runc, which never saved that container's state, kills
 * nothing of it. */
static bool in_leftover_cgroup(pid_t pid, const char *text, size_t n, void *arg)
{
	const struct cgroup_sweep *w = arg;

	for (const char *line = text; *line;) {
		const char *end = strchrnul(line, '\n'), *id = NULL;
		char name[128];

		for (const char *p = line; p + 6 <= end; p++)
			if (!memcmp(p, "/thaw/", 6))
				id = p + 6;
		if (id && (size_t)(end - id) < sizeof(name)) {
			memcpy(name, id, (size_t)(end - id));
			name[end - id] = '\0';
			if (!strchr(name, '/') && leftover_container(w->s, w->root, name)) {
				pr_warn("process %d in the cgroup of container %s, left by an "
					"earlier run, killed", (int)pid, name);
				return true;
			}
		}
		line = *end ? end + 1 : end;
	}
	return false;
}

/* Containers in runc root dir that an earlier run left (a snapshot or a
 * restore cut short): each one's processes killed, and it deleted. */
static void delete_containers(struct server *s, const char *root)
{
	struct runner r = { .runc = s->cfg.runc, .criu = s->cfg.criu, .state_dir = root };
	struct cgroup_sweep w = { s, root };
	struct dirent *de;
	DIR *d;
	int ret;

	/* What runc cannot kill first, in one pass for all of them. */
	kill_matching("cgroup", in_leftover_cgroup, &w);
	d = opendir(root);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char fn[64];

		if (de->d_name[0] == '.' || de->d_type != DT_DIR)
			continue;
		/* An adopted instance's container is the instance itself. */
		if (insts_function(s->insts, de->d_name, fn) == 0)
			continue;
		if (runner_delete(&r, de->d_name)) {
			pr_err("container %s (in %s), left by an earlier run, could not be "
			       "deleted: %s",
			       de->d_name, root, log_last_error());
			continue;
		}
		ret = remove_state_leftover(root, de->d_name);
		if (ret)
			pr_err("container %s (in %s), left by an earlier run: its state directory "
			       "could not be removed (%s); left as it is",
			       de->d_name, root,
			       ret == -EEXIST ? "runc still has its state.json" : strerror(-ret));
		else
			pr_warn("container %s (in %s), left by an earlier run, deleted", de->d_name,
				root);
	}
	closedir(d);
}

static void clean_snapshot_leftovers(struct server *s)
{
	char work[PATH_MAX + 16], root[PATH_MAX + 16];
	struct stat st;

	snprintf(root, sizeof(root), "%s/runc", s->cfg.data_dir);
	delete_containers(s, root);
	snprintf(work, sizeof(work), "%s/work", s->cfg.data_dir);
	if (stat(work, &st) == 0) {
		umount_under(work, NULL);
		if (rm_rf(work) == 0)
			pr_info("removed %s, left by an earlier run", work);
	}
}

/* `runc restore` binds the container's rootfs at <runc root>/<id>/criu-root
 * for CRIU and unmounts it once CRIU is done: a restore killed with thawd
 * leaves that mount behind, pinning the rootfs, one more for every restore
 * cut short.  Once the orphaned runc processes are gone, no such mount is in
 * use: they are unmounted before any container is deleted (and
 * remove_state_leftover then takes the directories runc left around them). */
static void umount_restore_leftovers(struct server *s)
{
	char root[PATH_MAX + 16];

	snprintf(root, sizeof(root), "%s/runc", s->cfg.data_dir);
	umount_under(root, "criu-root");
}

/* Finish the delete of function fn that an earlier thawd began (records:
 * every instance recorded, as instance_list gives them).  Its file goes only
 * once none of its instances is left; else it stays marked, and a DELETE
 * takes it up. */
static void finish_delete(struct server *s, const char *fn, json_t *records)
{
	char snap[CHUNK_ID_LEN] = "";
	size_t i, stopped = 0, failed = 0;
	json_t *rec;
	int ret;

	if (registry_delete_begin(s->reg, fn, snap))
		return;
	json_array_foreach(records, i, rec)
	{
		const char *rfn = json_string_value(json_object_get(rec, "function"));
		const char *id = json_string_value(json_object_get(rec, "instance"));

		if (!id)
			id = json_string_value(json_object_get(rec, "id"));
		if (!rfn || strcmp(rfn, fn) || !id || !id_valid(id))
			continue;
		log_clear_error();
		ret = instance_stop(&s->cfg, id);
		if (ret == 0) {
			stopped++;
		} else if (ret != -ENOENT) {
			failed++;
			pr_err("function %s was being deleted: its instance %s could not be "
			       "stopped: %s",
			       fn, id, log_last_error()[0] ? log_last_error() : strerror(-ret));
		}
	}
	if (failed) {
		registry_delete_release(s->reg, fn);
		pr_err("function %s stays being deleted (gone to clients, its file kept): "
		       "DELETE /functions/%s to finish",
		       fn, fn);
		return;
	}
	if (snap[0]) {
		ret = store_manifest_delete(s->store, snap);
		if (ret && ret != -ENOENT)
			pr_warn("function %s: cannot delete its snapshot %s: %s", fn, snap,
				log_last_error());
	}
	ret = registry_delete(s->reg, fn, NULL);
	if (ret) {
		registry_delete_release(s->reg, fn);
		pr_err("function %s was being deleted: its file could not be removed (%s)", fn,
		       strerror(-ret));
		return;
	}
	pr_warn("function %s was being deleted when thawd stopped: delete finished, "
		"%zu instance(s) stopped",
		fn, stopped);
}

static void finish_deletes(struct server *s)
{
	struct registry_fn *fns = NULL;
	json_t *records = NULL;
	size_t n = 0;
	int ret;

	if (registry_functions(s->reg, true, &fns, &n) || !n)
		goto out;
	ret = instance_list(&s->cfg, &records);
	if (ret) {
		/* Nothing is known of their instances: the marks stay, and a
		 * DELETE of each function finishes it. */
		pr_err("cannot list instances (%s): %zu delete(s) left unfinished",
		       log_last_error()[0] ? log_last_error() : strerror(-ret), n);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		finish_delete(s, fns[i].id, records);
out:
	json_decref(records);
	free(fns);
}

/* Delete the manifests of this thawd's snapshots that no function names
 * (registry_snapshot_orphan).  At start-up no snapshot is in the making, so a
 * tagged manifest that no function names is one that a crash left. */
static void drop_orphan_snapshots(struct server *s)
{
	json_t *list = NULL, *m;
	size_t i, dropped = 0;
	int ret;

	ret = store_list(s->store, &list);
	if (ret) {
		pr_warn("cannot list the store's manifests: %s", log_last_error());
		return;
	}
	json_array_foreach(list, i, m)
	{
		const char *id = json_string_value(json_object_get(m, "id"));
		struct manifest *man = NULL;
		struct snapshot_meta sm;
		char why[256];

		if (!id || store_manifest_load(s->store, id, &man, NULL))
			continue; /* damaged: `thaw store verify` says so, gc keeps it */
		ret = snapshot_meta_parse(man->meta, &sm, why, sizeof(why));
		if (ret)
			pr_warn("snapshot %s: its meta: %s: kept", id, why);
		if (!ret && registry_snapshot_orphan(s->reg, id, &sm.thawd)) {
			ret = store_manifest_delete(s->store, id);
			if (ret && ret != -ENOENT) {
				pr_warn("snapshot %s of function %s, which no function names: "
					"cannot delete it: %s",
					id, sm.thawd.function, log_last_error());
			} else {
				pr_warn("snapshot %s of function %s (%s), which no function names "
					"(left by an earlier run): deleted",
					id, sm.thawd.function, sm.thawd.job ?: "?");
				dropped++;
			}
		}
		snapshot_meta_release(&sm);
		manifest_free(man);
	}
	if (dropped)
		pr_info("%zu snapshot(s) that no function names deleted", dropped);
	json_decref(list);
}

int recover_startup(struct server *s)
{
	uint64_t chunks = 0, bytes = 0;

	kill_orphan_runc(s);
	umount_restore_leftovers(s);
	finish_deletes(s);
	adopt_recorded_instances(s);
	clean_instance_leftovers(s);
	clean_snapshot_leftovers(s);
	drop_orphan_snapshots(s);
	if (store_gc(s->store, &chunks, &bytes) == 0) {
		if (chunks)
			pr_info("store gc: %llu chunk(s), %llu bytes freed",
				(unsigned long long)chunks, (unsigned long long)bytes);
	} else {
		pr_warn("store gc: %s", log_last_error());
	}
	/* Images no snapshot names any more (their functions deleted or
	 * re-snapshotted on another image): images/image.h. */
	if (image_gc(&s->cfg, s->store, NULL))
		pr_warn("image gc: %s", log_last_error());
	return 0;
}

void stop_own_instances(struct server *s)
{
	struct inst_ref *refs = NULL;
	size_t n = 0;

	if (insts_take(s->insts, NULL, &refs, &n))
		return;
	if (n)
		pr_info("stopping %zu instance(s)", n);
	for (size_t i = 0; i < n; i++) {
		if (instance_stop(&s->cfg, refs[i].id) && log_last_error()[0])
			pr_warn("stop instance %s of %s: %s", refs[i].id, refs[i].function,
				log_last_error());
	}
	free(refs);
}

static void *preload_manifests(void *arg)
{
	struct server *s = arg;
	struct registry_fn *fns = NULL;
	unsigned loaded = 0;
	uint64_t t0 = now_ns();
	size_t n = 0;

	if (registry_functions(s->reg, false, &fns, &n))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		struct manifest *m = NULL;

		if (atomic_load(&s->stopping) || loaded >= STORE_MANIFEST_CACHE)
			break;
		if (!fns[i].snap[0])
			continue;
		if (store_manifest_load(s->store, fns[i].snap, &m, NULL) == 0)
			loaded++;
		manifest_free(m);
	}
	free(fns);
	if (loaded)
		pr_info("%u snapshot manifest(s) read ahead of their first start in %.1f ms",
			loaded, (now_ns() - t0) / 1e6);
	return NULL;
}

void recover_preload_manifests(struct server *s)
{
	int ret = pthread_create(&s->preload, NULL, preload_manifests, s);

	if (ret)
		pr_warn("cannot read snapshot manifests ahead: %s", strerror(ret));
	s->preload_started = ret == 0;
}
