/* SPDX-License-Identifier: Apache-2.0 */
/* test_tier.c — the RAM tier: materialise once, then hit; 8 threads and 2
 * processes acquiring one snapshot read the store once and all see it
 * complete; eviction keeps the budget and never takes a leased snapshot
 * (-ENOSPC when only leased ones are left); a bad or missing chunk and a cancel
 * mid-way leave no entry and no build directory; a restart keeps complete
 * entries and removes everything half made. */
#include "common/log.h"
#include "common/util.h"
#include "restore/engine.h"
#include "restore/tier.h"
#include "store/store.h"
#include "test/check.h"
#include "test/store_damage.h"
#include "test/tier_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A snapshot of nfiles files of size bytes each, random but for a zero run. */
static void make_snapshot(struct store *s, const char *name, size_t size, int nfiles,
			  char id[CHUNK_ID_LEN])
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	const char *paths[1] = { dir };
	uint8_t *buf = malloc(size);

	REQUIRE(buf);
	snprintf(dir, sizeof(dir), "%s/src-%s", root, name);
	REQUIRE(mkdir_p(dir, 0755) == 0);
	for (int i = 0; i < nfiles; i++) {
		fill_random(buf, size);
		memset(buf + size / 2, 0, size / 8);
		snprintf(path, sizeof(path), "%s/pages-%d.img", dir, i);
		REQUIRE(write_file_atomic(path, buf, size, 0600) == 0);
	}
	free(buf);
	REQUIRE(store_put(s, name, paths, 1, NULL, false, id, NULL) == 0);
}

/* The files under a tier entry equal the source files. */
static int same_as_source(const char *entry, const char *name)
{
	char src[PATH_MAX], a[PATH_MAX + 300], b[PATH_MAX + 300];
	DIR *d;
	struct dirent *de;
	int bad = 0, n = 0;

	snprintf(src, sizeof(src), "%s/src-%s", root, name);
	d = opendir(src);
	if (!d)
		return 1;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", src, de->d_name);
		snprintf(b, sizeof(b), "%s/%s", entry, de->d_name);
		if (!same_bytes(a, b)) {
			fprintf(stderr, "%s differs from %s\n", b, a);
			bad++;
		}
		n++;
	}
	closedir(d);
	return bad || !n;
}

/* Names in the tier directory that start with prefix. */
static int count_names(const char *prefix)
{
	DIR *d = opendir(tdir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

static bool entry_exists(const char *id)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", tdir, id + 7);
	if (stat(p, &st) == 0)
		return true;
	snprintf(p, sizeof(p), "%s/%s.meta", tdir, id + 7);
	return stat(p, &st) == 0;
}

static void test_basic(struct store *s, const char *id)
{
	struct tier *t = tier_open(tdir, 1ull << 30, s, NULL);
	struct tier_lease *a = NULL, *b = NULL;
	struct tier_stats st;

	REQUIRE(t);
	CHECK_EQ(tier_acquire(t, id, &a), 0);
	REQUIRE(a);
	CHECK(!tier_lease_hit(a));
	CHECK_EQ(same_as_source(tier_lease_path(a), "basic"), 0);
	/* a prefix of the id works too */
	char prefix[20];
	snprintf(prefix, sizeof(prefix), "%.19s", id);
	CHECK_EQ(tier_acquire(t, prefix, &b), 0);
	REQUIRE(b);
	CHECK(tier_lease_hit(b));
	CHECK_STR(tier_lease_path(a), tier_lease_path(b));
	tier_get_stats(t, &st);
	CHECK_EQ(st.materializations, 1);
	CHECK_EQ(st.hits, 1);
	CHECK(tier_used_bytes(t) > 0);
	CHECK_EQ(tier_budget_bytes(t), 1ull << 30);
	CHECK_EQ(count_names(".build-"), 0);
	CHECK_EQ(count_names(".resv-"), 0);
	tier_release(a);
	tier_release(b);
	tier_close(t);
}

struct racer {
	struct tier *t;
	const char *id;
	const char *name;
	pthread_barrier_t *go;
	int ret, same;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct tier_lease *l = NULL;

	pthread_barrier_wait(r->go);
	r->ret = tier_acquire(r->t, r->id, &l);
	/* complete when acquire returns, before anything is released */
	r->same = l ? same_as_source(tier_lease_path(l), r->name) : -1;
	tier_release(l);
	return NULL;
}

static void test_threads(struct store *s, const char *id)
{
	struct tier *t = tier_open(tdir, 1ull << 30, s, NULL);
	pthread_t th[8];
	struct racer r[8];
	pthread_barrier_t go;
	struct tier_stats st;

	REQUIRE(t);
	pthread_barrier_init(&go, NULL, 8);
	for (int i = 0; i < 8; i++) {
		r[i] = (struct racer){ .t = t, .id = id, .name = "threads", .go = &go };
		REQUIRE(pthread_create(&th[i], NULL, race, &r[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(r[i].ret, 0);
		CHECK_EQ(r[i].same, 0);
	}
	tier_get_stats(t, &st);
	printf("8 threads: %llu materialisations, %llu waited, %llu hits\n",
	       (unsigned long long)st.materializations, (unsigned long long)st.waits,
	       (unsigned long long)st.hits);
	CHECK_EQ(st.materializations, 1);
	CHECK_EQ(st.waits + st.hits, 7);
	pthread_barrier_destroy(&go);
	tier_close(t);
}

/* Two processes, each with its own store and tier objects: the store is read once. */
static void test_processes(const char *id)
{
	int go[2];
	pid_t pid[2];
	int total = 0;

	REQUIRE(pipe(go) == 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		REQUIRE(pid[i] >= 0);
		if (pid[i] == 0) {
			struct store *s = store_open(sdir);
			struct tier *t = s ? tier_open(tdir, 1ull << 30, s, NULL) : NULL;
			struct tier_lease *l = NULL;
			struct tier_stats st;
			char c;

			close(go[1]);
			if (!t || read(go[0], &c, 1) != 1)
				_exit(100);
			if (tier_acquire(t, id, &l) || same_as_source(tier_lease_path(l), "procs"))
				_exit(101);
			tier_get_stats(t, &st);
			tier_release(l);
			tier_close(t);
			store_close(s);
			_exit((int)st.materializations);
		}
	}
	close(go[0]);
	REQUIRE(write(go[1], "xx", 2) == 2);
	close(go[1]);
	for (int i = 0; i < 2; i++) {
		int status;
		REQUIRE(waitpid(pid[i], &status, 0) == pid[i]);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
		total += WIFEXITED(status) ? WEXITSTATUS(status) : 100;
	}
	printf("2 processes: %d materialisations\n", total);
	CHECK_EQ(total, 1);
}

static void test_evict(struct store *s, const char *id1, const char *id2, const char *id3,
		       uint64_t each)
{
	/* Room for two snapshots and a half. */
	uint64_t budget = each * 5 / 2;
	struct tier *t;
	struct tier_lease *l1 = NULL, *l2 = NULL, *l3 = NULL, *again = NULL;
	struct tier_stats st;

	rm_rf(tdir);
	t = tier_open(tdir, budget, s, NULL);
	REQUIRE(t);
	CHECK_EQ(tier_acquire(t, id1, &l1), 0);
	tier_release(l1);
	CHECK_EQ(tier_acquire(t, id2, &l2), 0); /* kept leased */
	CHECK(tier_used_bytes(t) <= budget);
	CHECK_EQ(tier_acquire(t, id3, &l3), 0); /* evicts id1, the unleased one */
	CHECK(tier_used_bytes(t) <= budget);
	CHECK(!entry_exists(id1));
	CHECK(entry_exists(id2));
	CHECK(entry_exists(id3));
	CHECK_EQ(same_as_source(tier_lease_path(l2), "ev2"), 0);
	tier_get_stats(t, &st);
	CHECK_EQ(st.evictions, 1);
	/* Both left are leased: id1 cannot come back. */
	log_clear_error();
	CHECK_EQ(tier_acquire(t, id1, &again), -ENOSPC);
	CHECK(again == NULL);
	fprintf(stderr, "expected failure: %s\n", log_last_error());
	CHECK(strstr(log_last_error(), "full") != NULL);
	CHECK(entry_exists(id2) && entry_exists(id3));
	CHECK_EQ(count_names(".build-"), 0);
	CHECK_EQ(count_names(".resv-"), 0);
	/* Once id2 is released it is the one to go (LRU among the unleased). */
	tier_release(l2);
	CHECK_EQ(tier_acquire(t, id1, &again), 0);
	CHECK(!entry_exists(id2));
	CHECK(entry_exists(id3));
	CHECK(tier_used_bytes(t) <= budget);
	tier_release(again);
	tier_release(l3);
	tier_close(t);
}

static void test_bad(struct store *s, const char *id, bool remove)
{
	struct tier *t = tier_open(tdir, 1ull << 30, s, NULL);
	struct manifest *m = NULL;
	struct tier_lease *l = NULL;
	char cid[CHUNK_ID_LEN];

	REQUIRE(t);
	REQUIRE(store_manifest_load(s, id, &m, NULL) == 0);
	const struct manifest_chunk *c = &m->files[0].chunks[m->files[0].nchunks - 1];
	REQUIRE(!c->zero);
	chunk_id_format(c->hash, cid);
	if (remove)
		chunk_remove(s, c->hash);
	else
		chunk_flip(s, c->hash, CHUNK_HEADER_SIZE + 8);
	log_clear_error();
	CHECK_EQ(tier_acquire(t, id, &l), remove ? -ENOENT : -EBADMSG);
	fprintf(stderr, "expected failure: %s\n", log_last_error());
	CHECK(strstr(log_last_error(), cid) != NULL);
	CHECK(strstr(log_last_error(), m->files[0].path) != NULL);
	CHECK(!entry_exists(id));
	CHECK_EQ(count_names(".build-"), 0);
	CHECK_EQ(count_names(".resv-"), 0);
	manifest_free(m);
	tier_close(t);
}

struct canceller {
	atomic_bool *flag;
	atomic_bool done;
	bool saw_build;
};

/* Wait until a build directory holds files, then pull the flag. */
static void *cancel_midway(void *arg)
{
	struct canceller *c = arg;

	for (int i = 0; i < 20000 && !atomic_load(&c->done); i++) {
		char p[PATH_MAX];
		DIR *d = opendir(tdir);
		struct dirent *de;
		struct stat st;

		while (d && (de = readdir(d))) {
			if (strncmp(de->d_name, ".build-", 7))
				continue;
			snprintf(p, sizeof(p), "%s/%s/pages-0.img", tdir, de->d_name);
			if (stat(p, &st) == 0 && st.st_blocks > 0)
				c->saw_build = true;
		}
		if (d)
			closedir(d);
		if (c->saw_build) {
			atomic_store(c->flag, true);
			return NULL;
		}
		usleep(500);
	}
	return NULL;
}

/* Slows the engine down (it calls this from the calling thread), so that
 * the canceller sees a build directory with data in it whatever the machine. */
static void slow_progress(uint64_t done, uint64_t total, void *arg)
{
	usleep(100 * 1000);
}

static void test_cancel(struct store *s, const char *id)
{
	atomic_bool flag = false;
	struct engine_opts o;
	struct tier *t;
	struct tier_lease *l = NULL;
	struct canceller c = { .flag = &flag };
	pthread_t th;

	/* One worker, one read at a time, O_DIRECT: slow enough to catch mid-way. */
	engine_opts_default(&o);
	o.threads = 1;
	o.queue_depth = 1;
	o.direct = ENGINE_DIRECT_ON;
	o.cancel = &flag;
	o.progress = slow_progress;
	t = tier_open(tdir, 1ull << 30, s, &o);
	REQUIRE(t);
	REQUIRE(pthread_create(&th, NULL, cancel_midway, &c) == 0);
	int ret = tier_acquire(t, id, &l);
	atomic_store(&c.done, true);
	pthread_join(th, NULL);
	CHECK(c.saw_build);
	CHECK_EQ(ret, -ECANCELED);
	tier_release(l);
	CHECK(!entry_exists(id));
	CHECK_EQ(count_names(".build-"), 0);
	CHECK_EQ(count_names(".resv-"), 0);
	tier_close(t);
}

/* What a crash leaves: a half-built directory, an entry without metadata,
 * metadata without an entry, an entry whose file is short. */
static void test_restart(struct store *s, const char *good, const char *short_id)
{
	char p[PATH_MAX], q[PATH_MAX + 16];
	struct tier *t;
	struct tier_lease *l = NULL;
	const char *fake = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
	const char *fake2 = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

	rm_rf(tdir);
	t = tier_open(tdir, 1ull << 30, s, NULL);
	REQUIRE(t);
	CHECK_EQ(tier_acquire(t, good, &l), 0);
	tier_release(l);
	CHECK_EQ(tier_acquire(t, short_id, &l), 0);
	tier_release(l);
	tier_close(t);

	snprintf(p, sizeof(p), "%s/.build-%s-999999-0", tdir, fake);
	REQUIRE(mkdir_p(p, 0755) == 0);
	snprintf(q, sizeof(q), "%s/pages-1.img", p);
	REQUIRE(write_file_atomic(q, "half", 4, 0600) == 0);
	snprintf(p, sizeof(p), "%s/.resv-%s-999999-0", tdir, fake);
	REQUIRE(write_file_atomic(p, "1000\n", 5, 0600) == 0);
	snprintf(p, sizeof(p), "%s/%s", tdir, fake);
	REQUIRE(mkdir_p(p, 0755) == 0); /* renamed, metadata never written */
	snprintf(p, sizeof(p), "%s/%s.meta", tdir, fake2);
	REQUIRE(write_file_atomic(p, "{}", 2, 0600) == 0);
	snprintf(p, sizeof(p), "%s/%s/pages-0.img", tdir, short_id + 7);
	REQUIRE(truncate(p, 4096) == 0);
	/* what CRIU leaves in an image directory it restored from: no reason to drop it */
	snprintf(p, sizeof(p), "%s/%s/stats-restore", tdir, good + 7);
	REQUIRE(write_file_atomic(p, "criu", 4, 0600) == 0);
	snprintf(p, sizeof(p), "%s/not-ours", tdir);
	REQUIRE(write_file_atomic(p, "x", 1, 0600) == 0);

	t = tier_open(tdir, 1ull << 30, s, NULL);
	REQUIRE(t);
	CHECK(entry_exists(good));
	CHECK(!entry_exists(short_id));
	CHECK_EQ(count_names(".build-"), 0);
	CHECK_EQ(count_names(".resv-"), 0);
	CHECK_EQ(count_names(fake), 0);
	CHECK_EQ(count_names(fake2), 0);
	CHECK_EQ(count_names("not-ours"), 1);
	CHECK_EQ(tier_acquire(t, good, &l), 0);
	CHECK(l && tier_lease_hit(l));
	CHECK(l && same_as_source(tier_lease_path(l), "basic") == 0);
	tier_release(l);
	tier_close(t);
}

int main(void)
{
	char basic[CHUNK_ID_LEN], threads[CHUNK_ID_LEN], procs[CHUNK_ID_LEN];
	char ev1[CHUNK_ID_LEN], ev2[CHUNK_ID_LEN], ev3[CHUNK_ID_LEN];
	char bad1[CHUNK_ID_LEN], bad2[CHUNK_ID_LEN], big[CHUNK_ID_LEN];
	struct store *s;

	tier_test_dirs("tier");
	s = store_open(sdir);
	REQUIRE(s);
	make_snapshot(s, "basic", 3 << 20, 2, basic);
	make_snapshot(s, "threads", 16 << 20, 2, threads);
	make_snapshot(s, "procs", 16 << 20, 2, procs);
	make_snapshot(s, "ev1", 4 << 20, 1, ev1);
	make_snapshot(s, "ev2", 4 << 20, 1, ev2);
	make_snapshot(s, "ev3", 4 << 20, 1, ev3);
	make_snapshot(s, "bad1", 2 << 20, 1, bad1);
	make_snapshot(s, "bad2", 2 << 20, 1, bad2);
	make_snapshot(s, "big", 96 << 20, 1, big);

	test_basic(s, basic);
	test_threads(s, threads);
	test_processes(procs);
	test_evict(s, ev1, ev2, ev3, (4 << 20) - (4 << 20) / 8);
	test_bad(s, bad1, false);
	test_bad(s, bad2, true);
	test_cancel(s, big);
	test_restart(s, basic, threads);

	store_close(s);
	return check_failures ? 1 : 0;
}
