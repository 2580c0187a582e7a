/* SPDX-License-Identifier: Apache-2.0 */
/* test_instance_records.c — restore/instance without runc restore: the
 * start answer's exact shape, instance records as list and stop read them
 * (running/exited, a reused shim pid left alone, everything removed, a
 * second stop -ENOENT), and a start from a snapshot that is not a thaw
 * snapshot failing with nothing left behind.  Real store, tier, processes
 * and (as root) a real network namespace. */
#include "common/config.h"
#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "restore/gpu_restore.h"
#include "restore/instance.h"
#include "restore/shim.h"
#include "restore/tier.h"
#include "store/store.h"
#include "test/check.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Paths here are a short temp dir plus short names. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static char dir[] = "/tmp/test_instance.XXXXXX";

static void test_json_shape(void)
{
	struct instance in = { .id = "fn-abc123", .function = "fn", .snapshot = "sha256:00",
			       .endpoint = "127.0.0.1:4242", .pid = 77, .tier_hit = true,
			       .t = { 1.5, 2.25, 0, 3, 6.75 } };
	const char *keys[] = { "instance", "function", "snapshot", "endpoint", "pid", "tier",
			       "pages", "lazy", "standby", "timings_ms", "restored", "userns" };
	const char *tkeys[] = { "load",	   "materialize", "setup", "criu_restore",
				"endpoint", "gpu_restore", "ready", "total" };
	json_t *j = instance_to_json(&in), *t;

	REQUIRE(j);
	CHECK_EQ(json_object_size(j), ARRAY_SIZE(keys));
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		CHECK(json_object_get(j, keys[i]) != NULL);
	CHECK_STR(json_string_value(json_object_get(j, "tier")), "ram");
	CHECK(json_is_false(json_object_get(j, "standby")));
	CHECK_STR(json_string_value(json_object_get(j, "endpoint")), "127.0.0.1:4242");
	CHECK_EQ(json_integer_value(json_object_get(j, "pid")), 77);
	t = json_object_get(j, "timings_ms");
	CHECK_EQ(json_object_size(t), ARRAY_SIZE(tkeys));
	for (size_t i = 0; i < ARRAY_SIZE(tkeys); i++)
		CHECK(json_is_number(json_object_get(t, tkeys[i])));
	CHECK(json_number_value(json_object_get(t, "criu_restore")) == 2.25);
	CHECK(json_is_true(json_object_get(j, "restored")));
	CHECK(!json_object_get(j, "restore_failure"));
	/* As the host's uid 0: no user namespace, no uid named. */
	CHECK(json_is_false(json_object_get(j, "userns")));
	CHECK(!json_object_get(j, "userns_uid"));
	json_decref(j);
	/* In a user namespace: its host uid 0. */
	in.userns_uid = 3000000000u;
	in.userns_size = 65536;
	j = instance_to_json(&in);
	REQUIRE(j);
	CHECK(json_is_true(json_object_get(j, "userns")));
	CHECK_EQ(json_integer_value(json_object_get(j, "userns_uid")), 3000000000ll);
	in.userns_uid = in.userns_size = 0;
	json_decref(j);
	/* Booted instead of restored (instance_boot): why, and the boot's times. */
	{
		const char *bkeys[] = { "setup", "boot", "endpoint", "ready", "warmup", "total" };
		struct instance b = in;

		b.booted = true;
		b.t.boot = 40.5;
		snprintf(b.boot_why, sizeof(b.boot_why), "chunk sha256:ab damaged");
		j = instance_to_json(&b);
		REQUIRE(j);
		CHECK(json_is_false(json_object_get(j, "restored")));
		CHECK_STR(json_string_value(json_object_get(j, "restore_failure")),
			  "chunk sha256:ab damaged");
		t = json_object_get(j, "timings_ms");
		CHECK_EQ(json_object_size(t), ARRAY_SIZE(bkeys));
		for (size_t i = 0; i < ARRAY_SIZE(bkeys); i++)
			CHECK(json_is_number(json_object_get(t, bkeys[i])));
		CHECK(json_number_value(json_object_get(t, "boot")) == 40.5);
		json_decref(j);
	}
	in.tier_hit = false;
	j = instance_to_json(&in);
	CHECK_STR(json_string_value(json_object_get(j, "tier")), "disk");
	CHECK(json_is_false(json_object_get(j, "lazy")));
	CHECK_STR(json_string_value(json_object_get(j, "pages")), "eager");
	CHECK(!json_object_get(j, "pages_why"));
	json_decref(j);
	/* Not mapped: the answer says why; mapped: it does not. */
	in.pages = "lazy";
	snprintf(in.pages_why, sizeof(in.pages_why), "THAW_MAPPED=0");
	j = instance_to_json(&in);
	CHECK_STR(json_string_value(json_object_get(j, "pages")), "lazy");
	CHECK_STR(json_string_value(json_object_get(j, "pages_why")), "THAW_MAPPED=0");
	json_decref(j);
	in.pages = "mapped";
	in.pages_why[0] = '\0';
	j = instance_to_json(&in);
	CHECK_STR(json_string_value(json_object_get(j, "pages")), "mapped");
	CHECK(!json_object_get(j, "pages_why"));
	json_decref(j);
	in.pages = NULL;
	/* Lazy: lazy_done is null until the daemon has served every page. */
	in.lazy = true;
	j = instance_to_json(&in);
	CHECK(json_is_true(json_object_get(j, "lazy")));
	CHECK(json_is_null(json_object_get(json_object_get(j, "timings_ms"), "lazy_done")));
	json_decref(j);
	in.t.lazy_done = 9.5;
	j = instance_to_json(&in);
	CHECK(json_number_value(json_object_get(json_object_get(j, "timings_ms"), "lazy_done")) ==
	      9.5);
	json_decref(j);
}

static pid_t sleeper(void)
{
	pid_t p = fork();

	if (p == 0) {
		signal(SIGTERM, SIG_DFL);
		for (;;)
			pause();
	}
	return p;
}

static const char *state_of(const struct thaw_config *c, const char *id)
{
	static char st[32];
	json_t *list = NULL, *e;
	size_t i;

	st[0] = '\0';
	if (instance_list(c, &list))
		return "error";
	json_array_foreach(list, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "instance")), id))
			snprintf(st, sizeof(st), "%s", json_string_value(json_object_get(e, "state")));
	json_decref(list);
	return st;
}

/* A lazy instance: what its watcher wrote shows in the list, and stop ends
 * the watcher and the daemon (sleepers here) with the rest. */
static void test_lazy_record(struct thaw_config *c)
{
	char wdir[PATH_MAX], rec[PATH_MAX], status[PATH_MAX];
	pid_t fn = sleeper(), w = sleeper(), d = sleeper();
	unsigned long long fs = 0, ws = 0, ds = 0;
	json_t *r, *list = NULL, *e;
	char *text;
	size_t i;

	REQUIRE(fn > 0 && w > 0 && d > 0);
	usleep(20000);
	proc_start_time(fn, &fs);
	proc_start_time(w, &ws);
	proc_start_time(d, &ds);
	snprintf(wdir, sizeof(wdir), "%s/instances/fn-lazy01", c->data_dir);
	snprintf(rec, sizeof(rec), "%s/instances/fn-lazy01.json", c->data_dir);
	snprintf(status, sizeof(status), "%s/lazy.status", wdir);
	REQUIRE(mkdir_p(wdir, 0700) == 0);
	r = json_pack("{s:s,s:s,s:I,s:I,s:s,s:b,s:{s:f},s:I,s:I,s:I,s:I}", "instance", "fn-lazy01",
		      "function", "fn", "pid", (json_int_t)fn, "pid_start", (json_int_t)fs,
		      "state", "running", "lazy", 1, "timings_ms", "total", 5.0,
		      "lazy_watcher_pid", (json_int_t)w, "lazy_watcher_start", (json_int_t)ws,
		      "lazy_daemon_pid", (json_int_t)d, "lazy_daemon_start", (json_int_t)ds);
	text = json_dumps(r, 0);
	REQUIRE(text && write_file_atomic(rec, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(r);

	CHECK_STR(state_of(c, "fn-lazy01"), "running"); /* no word yet: still serving */
	REQUIRE(write_file_atomic(status, "done 12.5\n", 10, 0644) == 0);
	CHECK_STR(state_of(c, "fn-lazy01"), "running");
	CHECK_EQ(instance_list(c, &list), 0);
	json_array_foreach(list, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "instance")), "fn-lazy01"))
			CHECK(json_number_value(json_object_get(json_object_get(e, "timings_ms"),
								"lazy_done")) == 12.5);
	json_decref(list);
	text = "failed the lazy-pages daemon (pid 1) was killed by signal 9\n";
	REQUIRE(write_file_atomic(status, text, strlen(text), 0644) == 0);
	CHECK_STR(state_of(c, "fn-lazy01"), "failed");
	CHECK_EQ(instance_list(c, &list), 0);
	json_array_foreach(list, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "instance")), "fn-lazy01"))
			CHECK(strstr(json_string_value(json_object_get(e, "error")) ?: "",
				     "page source lost: the lazy-pages daemon") != NULL);
	json_decref(list);

	CHECK_EQ(instance_stop(c, "fn-lazy01"), 0);
	CHECK(!proc_alive(w, ws));
	CHECK(!proc_alive(d, ds));
	CHECK_STR(state_of(c, "fn-lazy01"), "");
	kill(fn, SIGKILL);
	waitpid(fn, NULL, 0);
	waitpid(w, NULL, WNOHANG);
	waitpid(d, NULL, WNOHANG);
}

static void test_records(struct thaw_config *c)
{
	char idir[PATH_MAX], wdir[PATH_MAX], rec[PATH_MAX], ns[PATH_MAX], file[PATH_MAX];
	unsigned long long fn_start = 0, shim_start = 0, other_start = 0;
	pid_t fn = sleeper(), shim = sleeper(), other = sleeper();
	bool have_ns = geteuid() == 0;
	json_t *list = NULL;
	struct stat st;
	int status;

	REQUIRE(fn > 0 && shim > 0 && other > 0);
	CHECK_EQ(instance_list(c, &list), 0); /* no instances/ yet: an empty list */
	CHECK(json_is_array(list) && json_array_size(list) == 0);
	json_decref(list);

	snprintf(idir, sizeof(idir), "%s/instances", c->data_dir);
	snprintf(wdir, sizeof(wdir), "%s/fn-abc123", idir);
	snprintf(rec, sizeof(rec), "%s/fn-abc123.json", idir);
	snprintf(ns, sizeof(ns), "%s/netns", wdir);
	snprintf(file, sizeof(file), "%s/function.log", wdir);
	REQUIRE(mkdir_p(wdir, 0700) == 0);
	REQUIRE(write_file_atomic(file, "log\n", 4, 0644) == 0);
	if (have_ns)
		CHECK_EQ(netns_create(ns), 0);
	usleep(20000);
	CHECK_EQ(proc_start_time(fn, &fn_start), 0);
	CHECK_EQ(proc_start_time(shim, &shim_start), 0);
	CHECK_EQ(proc_start_time(other, &other_start), 0);

	json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:s,s:s,s:b,s:[]}", "instance",
			      "fn-abc123", "function", "fn", "snapshot", "sha256:00", "endpoint",
			      "127.0.0.1:1", "pid", (json_int_t)fn, "pid_start", (json_int_t)fn_start,
			      "shim_pid", (json_int_t)shim, "shim_start", (json_int_t)shim_start,
			      "container", "fn-abc123", "state", "running", "gpu", 0, "cuda_pids");
	char *text = json_dumps(r, 0);
	REQUIRE(text && write_file_atomic(rec, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(r);
	/* A second record whose shim pid is alive but is another process (its
	 * start time differs: a reused pid): stop must leave it alone. */
	snprintf(rec, sizeof(rec), "%s/fn-reused.json", idir);
	r = json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "instance", "fn-reused", "function", "fn", "pid",
		      (json_int_t)999999, "shim_pid", (json_int_t)other, "shim_start",
		      (json_int_t)(other_start + 12345), "state", "running");
	text = json_dumps(r, 0);
	REQUIRE(text && write_file_atomic(rec, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(r);

	CHECK_STR(state_of(c, "fn-abc123"), "running");
	CHECK_STR(state_of(c, "fn-reused"), "exited");
	kill(fn, SIGKILL);
	waitpid(fn, &status, 0);
	CHECK_STR(state_of(c, "fn-abc123"), "exited");

	log_clear_error();
	CHECK_EQ(instance_stop(c, "fn-abc123"), 0);
	CHECK(!proc_alive(shim, 0));
	CHECK_EQ(waitpid(shim, NULL, WNOHANG), -1); /* reaped by the stop */
	CHECK(stat(wdir, &st) < 0 && errno == ENOENT);
	snprintf(rec, sizeof(rec), "%s/fn-abc123.json", idir);
	CHECK(stat(rec, &st) < 0 && errno == ENOENT);
	CHECK_EQ(instance_stop(c, "fn-abc123"), -ENOENT);
	CHECK(strstr(log_last_error(), "no instance fn-abc123") != NULL);

	CHECK_EQ(instance_stop(c, "fn-reused"), 0);
	CHECK(proc_alive(other, other_start)); /* not ours: untouched */
	CHECK_STR(state_of(c, "fn-reused"), "");

	/* A start in progress (its starter alive), and one killed half-way. */
	unsigned long long me = 0;
	proc_start_time(getpid(), &me);
	snprintf(rec, sizeof(rec), "%s/fn-start1.json", idir);
	r = json_pack("{s:s,s:s,s:I,s:I}", "instance", "fn-start1", "state", "starting",
		      "starter_pid", (json_int_t)getpid(), "starter_start", (json_int_t)me);
	text = json_dumps(r, 0);
	REQUIRE(text && write_file_atomic(rec, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(r);
	snprintf(rec, sizeof(rec), "%s/fn-start2.json", idir);
	r = json_pack("{s:s,s:s,s:I,s:I}", "instance", "fn-start2", "state", "starting",
		      "starter_pid", (json_int_t)fn, "starter_start", (json_int_t)fn_start);
	text = json_dumps(r, 0);
	REQUIRE(text && write_file_atomic(rec, text, strlen(text), 0644) == 0);
	free(text);
	json_decref(r);
	CHECK_STR(state_of(c, "fn-start1"), "starting");
	CHECK_STR(state_of(c, "fn-start2"), "abandoned");
	CHECK_EQ(instance_stop(c, "fn-start1"), 0);
	CHECK_EQ(instance_stop(c, "fn-start2"), 0);
	CHECK_STR(state_of(c, "fn-start2"), "");

	CHECK_EQ(instance_stop(c, "../etc"), -EINVAL);
	kill(other, SIGKILL);
	waitpid(other, NULL, 0);
	if (proc_alive(shim, 0)) {
		kill(shim, SIGKILL);
		waitpid(shim, NULL, 0);
	}
}

/* A snapshot that is not a thaw snapshot (no spec in its meta): a clear
 * error, its tier lease released, nothing under instances/. */
static void test_start_without_spec(struct thaw_config *c)
{
	char file[PATH_MAX], tdir[PATH_MAX], id[CHUNK_ID_LEN], idir[PATH_MAX];
	const char *paths[1] = { file };
	struct store *s;
	struct tier *t;
	struct instance in;
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(file, sizeof(file), "%s/pages-1.img", c->data_dir);
	snprintf(tdir, sizeof(tdir), "%s/tier", c->data_dir);
	REQUIRE(write_file_atomic(file, "not an image", 12, 0644) == 0);
	s = store_open(c->store_dir);
	REQUIRE(s);
	REQUIRE(store_put(s, "plain", paths, 1, NULL, false, id, NULL) == 0);
	t = tier_open(tdir, 1 << 26, s, NULL);
	REQUIRE(t);
	log_clear_error();
	CHECK(instance_start(c, s, t, id, INSTANCE_MODE_AUTO, &in) < 0);
	CHECK(strstr(log_last_error(), "no function spec") != NULL);
	CHECK(instance_start(c, s, t, "sha256:0123456789abcdef0123", INSTANCE_MODE_AUTO, &in) ==
	      -ENOENT);
	snprintf(idir, sizeof(idir), "%s/instances", c->data_dir);
	d = opendir(idir);
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK_EQ(n, 0);
	tier_close(t);
	store_close(s);
}

/* The processes of a PID namespace, found from its first one: a child that
 * unshares a PID namespace and forks its init, which forks one more. */
static void test_pidns_members(void)
{
	int p[2], v = 0;
	pid_t outer, *pids = NULL;
	size_t n = 0;
	char c, path[64];
	FILE *f;

	if (geteuid() != 0)
		return;
	REQUIRE(pipe(p) == 0);
	outer = fork();
	if (outer == 0) {
		if (unshare(CLONE_NEWPID) < 0)
			_exit(1);
		if (fork() == 0) {	   /* pid 1 of the new namespace */
			if (fork() == 0) { /* pid 2 */
				close(p[1]);
				if (read(p[0], &c, 1) < 0)
					_exit(1);
				_exit(0);
			}
			close(p[1]);
			if (read(p[0], &c, 1) < 0)
				_exit(1);
			wait(NULL);
			_exit(0);
		}
		close(p[1]);
		wait(NULL);
		_exit(0);
	}
	close(p[0]);
	usleep(200000);
	/* The namespace's init is outer's only child. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)outer, (int)outer);
	f = fopen(path, "r");
	if (f && fscanf(f, "%d", &v) == 1 && v > 0) {
		CHECK_EQ(pidns_members(v, &pids, &n), 0);
		CHECK_EQ(n, 2);
		if (n)
			CHECK_EQ(pids[0], v);
		free(pids);
	} else {
		fprintf(stderr, "no %s: pidns_members not tested\n", path);
	}
	if (f)
		fclose(f);
	CHECK_EQ(pidns_members(999999999, &pids, &n) < 0, 1);
	close(p[1]); /* lets them all exit */
	waitpid(outer, NULL, 0);
}

int main(void)
{
	struct thaw_config c;

	REQUIRE(mkdtemp(dir));
	REQUIRE(config_init(&c, dir) == 0);
	snprintf(c.store_dir, sizeof(c.store_dir), "%s/store", dir);
	test_json_shape();
	test_records(&c);
	test_lazy_record(&c);
	test_start_without_spec(&c);
	test_pidns_members();
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
