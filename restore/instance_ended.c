/* SPDX-License-Identifier: Apache-2.0 */
/* instance_ended.c — see instance_ended.h. */
#define LOG_PREFIX "instance: "
#include "restore/instance_ended.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const log_suffixes[] = { ".log", ".log.1" };

int instance_ended_path(const struct thaw_config *c, const char *id, const char *suffix,
			char *buf, size_t len)
{
	if (!id_valid(id))
		return -EINVAL;
	if ((size_t)snprintf(buf, len, "%s/ended/%s%s", c->data_dir, id, suffix) >= len) {
		pr_err("path too long: %s/ended/%s%s", c->data_dir, id, suffix);
		return -ENAMETOOLONG;
	}
	return 0;
}

static int ended_dir(const struct thaw_config *c, char *buf, size_t len)
{
	if ((size_t)snprintf(buf, len, "%s/ended", c->data_dir) >= len)
		return -ENAMETOOLONG;
	return mkdir_p(buf, 0700);
}

void instance_ended_keep_logs(const struct thaw_config *c, const char *id, const char *dir)
{
	static const char *const names[] = { "function.log", "function.log.1" };
	char from[PATH_MAX + 32], to[PATH_MAX], d[PATH_MAX];

	if (ended_dir(c, d, sizeof(d)))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if ((size_t)snprintf(from, sizeof(from), "%s/%s", dir, names[i]) >= sizeof(from) ||
		    instance_ended_path(c, id, log_suffixes[i], to, sizeof(to)))
			continue;
		/* A link, not a rename: the live name stays until the directory
		 * goes, after the ended record is written (instance_log_tail). */
		if (unlink(to) < 0 && errno != ENOENT)
			pr_warn("cannot replace %s: %s", to, strerror(errno));
		if (link(from, to) < 0 && errno != ENOENT)
			pr_warn("cannot keep %s as %s: %s", from, to, strerror(errno));
	}
}

/* The value of key in a "key value" lines file (memory.events on cgroup v2,
 * memory.oom_control on v1 both say "oom_kill N"). */
static long long cgroup_count(const char *path, const char *key)
{
	char line[128], k[64];
	long long v = -1, n;
	FILE *f = fopen(path, "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %lld", k, &n) == 2 && !strcmp(k, key))
			v = n;
	if (f)
		fclose(f);
	return v;
}

bool instance_ended_oom(const char *runc_root, const char *id)
{
	char path[PATH_MAX + 96];
	const char *dir;
	json_t *st, *paths;
	bool oom = false;

	if (!id_valid(id) ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s/state.json", runc_root, id) >= sizeof(path))
		return false;
	st = json_load_file(path, 0, NULL);
	paths = json_object_get(st, "cgroup_paths");
	/* v1: the memory controller's directory; v2: the unified one (""). */
	dir = json_string_value(json_object_get(paths, "memory"));
	if (dir && (size_t)snprintf(path, sizeof(path), "%s/memory.oom_control", dir) < sizeof(path))
		oom = cgroup_count(path, "oom_kill") > 0;
	dir = json_string_value(json_object_get(paths, ""));
	if (!oom && dir &&
	    (size_t)snprintf(path, sizeof(path), "%s/memory.events", dir) < sizeof(path))
		oom = cgroup_count(path, "oom_kill") > 0;
	json_decref(st);
	return oom;
}

/* "exited 0", "exited 137: OOM-killed", "stopped: idle 3 s" into rec. */
static void describe(json_t *rec, const struct instance_end *e, bool oom)
{
	char reason[256];

	if (!e->exited) {
		snprintf(reason, sizeof(reason), "stopped: %s", e->why);
	} else if (e->have_status && WIFEXITED(e->wait_status)) {
		json_object_set_new(rec, "exit_code", json_integer(WEXITSTATUS(e->wait_status)));
		snprintf(reason, sizeof(reason), "exited %d%s", WEXITSTATUS(e->wait_status),
			 oom ? ": OOM-killed" : "");
	} else if (e->have_status && WIFSIGNALED(e->wait_status)) {
		int sig = WTERMSIG(e->wait_status);
		const char *abbrev = sigabbrev_np(sig);

		json_object_set_new(rec, "exit_code", json_integer(128 + sig));
		json_object_set_new(rec, "signal", json_string(abbrev ? abbrev : "?"));
		if (oom)
			snprintf(reason, sizeof(reason), "exited %d: OOM-killed", 128 + sig);
		else
			snprintf(reason, sizeof(reason), "exited %d: killed by SIG%s", 128 + sig,
				 abbrev ? abbrev : "?");
	} else {
		snprintf(reason, sizeof(reason), "exited%s%s", oom ? ": OOM-killed; " : " (",
			 e->why[0] ? e->why : "status unknown");
		if (!oom)
			strncat(reason, ")", sizeof(reason) - strlen(reason) - 1);
	}
	json_object_set_new(rec, "state", json_string(e->exited ? "exited" : "stopped"));
	json_object_set_new(rec, "reason", json_string(reason));
	json_object_set_new(rec, "oom_killed", json_boolean(oom));
}

int instance_ended_write(const struct thaw_config *c, const char *id, const json_t *rec,
			 const struct instance_end *e, bool oom)
{
	/* What describes the instance; not the pids of what is gone. */
	static const char *const kept_keys[] = { "instance", "function", "snapshot", "endpoint",
						 "started_ms", "timings_ms", "gpu", "pages",
						 "idle_s", "max_lifetime_s", "stop_grace_s" };
	char path[PATH_MAX], d[PATH_MAX], *text;
	json_t *out = json_object();
	int ret;

	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(kept_keys); i++) {
		json_t *v = json_object_get(rec, kept_keys[i]);

		if (v)
			json_object_set(out, kept_keys[i], v);
	}
	json_t *stop = json_deep_copy(json_object_get(rec, "stop"));
	json_int_t now = (json_int_t)realtime_ms();

	json_object_set_new(out, "instance", json_string(id));
	json_object_set_new(out, "ended_ms", json_integer(now));
	/* A stop's steps (instance_stop_begin), ended now. */
	if (json_is_object(stop)) {
		json_object_set_new(stop, "ended_ms", json_integer(now));
		json_object_set_new(out, "stop", stop);
	} else {
		json_decref(stop);
	}
	describe(out, e, oom);
	ret = ended_dir(c, d, sizeof(d));
	if (!ret)
		ret = instance_ended_path(c, id, ".json", path, sizeof(path));
	text = ret ? NULL : json_dumps(out, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (!ret && !text)
		ret = -ENOMEM;
	if (!ret)
		ret = write_file_atomic(path, text, strlen(text), 0600);
	if (ret)
		pr_err("cannot keep the record of ended instance %s: %s", id, strerror(-ret));
	free(text);
	json_decref(out);
	return ret;
}

int instance_ended_get(const struct thaw_config *c, const char *id, json_t **out)
{
	char path[PATH_MAX];
	int ret = instance_ended_path(c, id, ".json", path, sizeof(path));

	*out = NULL;
	if (ret)
		return ret;
	*out = json_load_file(path, 0, NULL);
	if (!*out)
		return access(path, F_OK) == 0 ? -EIO : -ENOENT;
	return 0;
}

/* Each ended instance's id (from its record's name) with its record. */
static int each_ended(const struct thaw_config *c,
		      void (*fn)(const struct thaw_config *c, const char *id, json_t *rec,
				 void *arg),
		      void *arg)
{
	char dir[PATH_MAX], id[80];
	struct dirent *de;
	DIR *d;

	if ((size_t)snprintf(dir, sizeof(dir), "%s/ended", c->data_dir) >= sizeof(dir))
		return -ENAMETOOLONG;
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		json_t *rec = NULL;

		if (n < 6 || n - 5 >= sizeof(id) || strcmp(de->d_name + n - 5, ".json"))
			continue;
		memcpy(id, de->d_name, n - 5);
		id[n - 5] = '\0';
		if (!id_valid(id) || instance_ended_get(c, id, &rec))
			continue;
		fn(c, id, rec, arg);
		json_decref(rec);
	}
	closedir(d);
	return 0;
}

static void append(const struct thaw_config *c, const char *id, json_t *rec, void *arg)
{
	json_array_append(arg, rec);
}

int instance_ended_list(const struct thaw_config *c, json_t *arr)
{
	return each_ended(c, append, arr);
}

struct expiry {
	uint64_t before_ms;
	unsigned removed;
};

static void expire_one(const struct thaw_config *c, const char *id, json_t *rec, void *arg)
{
	struct expiry *x = arg;
	json_int_t ended = json_integer_value(json_object_get(rec, "ended_ms"));
	char path[PATH_MAX];

	if (ended > 0 && (uint64_t)ended >= x->before_ms)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(log_suffixes); i++)
		if (!instance_ended_path(c, id, log_suffixes[i], path, sizeof(path)))
			unlink(path);
	/* The record last: while it is there, the instance is listed. */
	if (!instance_ended_path(c, id, ".json", path, sizeof(path)) && unlink(path) == 0)
		x->removed++;
}

unsigned instance_ended_expire(const struct thaw_config *c, uint64_t keep_ms)
{
	uint64_t now = realtime_ms();
	struct expiry x = { .before_ms = now > keep_ms ? now - keep_ms : 0 };

	each_ended(c, expire_one, &x);
	return x.removed;
}
