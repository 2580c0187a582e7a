/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_crash.c — a put killed with SIGKILL at any point leaves a store
 * that verifies clean, and the same put done again succeeds and round-trips.
 *
 * ~97 MiB of mixed input (incompressible, compressible, sparse with zero runs,
 * a block repeated inside one file, small files of odd sizes in a directory)
 * is put by a child process into a fresh store, and the child is killed at a
 * random point of its put.  Time is a poor ruler on a shared 2-core machine
 * (one put takes 120 ms or 600 ms), so the point is measured in progress: the
 * parent counts, through inotify, the objects the put begins writing (each is
 * a new file in tmp/) and kills it once the K-th has begun, plus a random
 * 0-500 us so that the kill falls anywhere inside that object's write.  K is
 * drawn from a seeded generator, one in each of N equal slices of the objects
 * a whole put writes (the median of three puts before), so the kills span the
 * whole put; one more kill comes the moment the manifest is linked (the end of
 * the put: it may come too late, the put having already returned).  Should the
 * store's objects ever make no names in tmp/, the kills go by time instead
 * (THAW_CRASH_BY_TIME=1 forces that).  After each kill:
 *	- store_verify finds 0 bad chunks;
 *	- every manifest in the store loads and names only chunks that exist;
 *	- store_gc leaves tmp/ empty (the dead writer's temp files are stale);
 *	- a put of the same input succeeds, store_get writes it back byte for
 *	  byte.  Odd iterations put before gc (over the leftovers of the dead
 *	  put), even ones after.
 * Then store_get is killed at 6 points spanning it (by time): under their
 * final names it must leave only complete files, whatever else it leaves being
 * its temp files.
 * THAW_CRASH_SEED sets the seed (default 1), THAW_CRASH_ITERS the number of
 * kills (default 16), TMPDIR the place (default /dev/shm; see main()).
 */
#include "common/log.h"
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1u << 20)

static char base[512]; /* short, so that paths built on it always fit */
static volatile pid_t child = -1;

static uint64_t rng_state;

static uint64_t rng_next(void) /* xorshift64*: deterministic for a seed */
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static void fill_random(uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = rng_next();
		memcpy(buf + i, &v, MIN(8, len - i));
	}
}

static void cleanup(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
	if (base[0]) {
		rm_rf(base);
		base[0] = '\0';
	}
}

static void on_signal(int sig)
{
	/* The runner's timeout: leave no child and no temp dir behind. */
	cleanup();
	_exit(128 + sig);
}

static void write_input(const char *path, const uint8_t *buf, size_t len)
{
	REQUIRE(write_file_atomic(path, buf, len, 0644) == 0);
}

/* The input: paths to put, and the files store_get must give back. */
struct expect {
	const char *name; /* under the get directory */
	const char *src;  /* under base */
};

static const struct expect expected[] = {
	{ "weights.bin", "in/weights.bin" },     { "heap.bin", "in/heap.bin" },
	{ "sparse.bin", "in/sparse.bin" },       { "repeat.bin", "in/img/repeat.bin" },
	{ "sub/empty", "in/img/sub/empty" },     { "sub/one", "in/img/sub/one" },
	{ "sub/page-1", "in/img/sub/page-1" },   { "sub/page+1", "in/img/sub/page+1" },
	{ "sub/odd", "in/img/sub/odd" },         { "sub/mib+1", "in/img/sub/mib+1" },
};
static const char *const put_rel[] = { "in/weights.bin", "in/heap.bin", "in/sparse.bin",
				       "in/img" };
static char put_abs[ARRAY_SIZE(put_rel)][PATH_MAX];
static const char *put_paths[ARRAY_SIZE(put_rel)];

static uint64_t make_input(void)
{
	size_t len = 40 * MiB, o;
	uint8_t *buf = malloc(len);
	char p[PATH_MAX];
	uint64_t total = 0;

	REQUIRE(buf);
	snprintf(p, sizeof(p), "%s/in/img/sub", base);
	REQUIRE(mkdir_p(p, 0755) == 0);

	/* Incompressible, like GPU weights. */
	fill_random(buf, 40 * MiB);
	snprintf(p, sizeof(p), "%s/in/weights.bin", base);
	write_input(p, buf, 40 * MiB);
	total += 40 * MiB;

	/* Runtime heap: text records, compresses well, no two alike. */
	for (o = 0; o < 24 * MiB;) {
		char rec[96];
		int n = snprintf(rec, sizeof(rec), "obj %010zu kind=%u refs=%u name=tensor.%u\n", o,
				 (unsigned)(rng_next() % 7), (unsigned)(rng_next() % 100),
				 (unsigned)(rng_next() % 4096));
		memcpy(buf + o, rec, MIN((size_t)n, 24 * MiB - o));
		o += (size_t)n;
	}
	snprintf(p, sizeof(p), "%s/in/heap.bin", base);
	write_input(p, buf, 24 * MiB);
	total += 24 * MiB;

	/* Sparse: 256 KiB pieces, random or zero, runs of each. */
	for (o = 0; o < 16 * MiB; o += 256 << 10) {
		if (rng_next() % 3)
			memset(buf + o, 0, 256 << 10);
		else
			fill_random(buf + o, 256 << 10);
	}
	snprintf(p, sizeof(p), "%s/in/sparse.bin", base);
	write_input(p, buf, 16 * MiB);
	total += 16 * MiB;

	/* One MiB repeated: chunks repeated inside one put. */
	fill_random(buf, MiB);
	for (o = MiB; o < 16 * MiB; o += MiB)
		memcpy(buf + o, buf, MiB);
	snprintf(p, sizeof(p), "%s/in/img/repeat.bin", base);
	write_input(p, buf, 16 * MiB);
	total += 16 * MiB;

	/* Small files of awkward sizes. */
	static const struct {
		const char *name;
		size_t len;
	} smalls[] = { { "empty", 0 },      { "one", 1 },        { "page-1", 4095 },
		       { "page+1", 4097 },  { "odd", 100003 },   { "mib+1", MiB + 1 } };
	for (size_t i = 0; i < ARRAY_SIZE(smalls); i++) {
		fill_random(buf, smalls[i].len);
		snprintf(p, sizeof(p), "%s/in/img/sub/%s", base, smalls[i].name);
		write_input(p, buf, smalls[i].len);
		total += smalls[i].len;
	}
	free(buf);

	for (size_t i = 0; i < ARRAY_SIZE(put_rel); i++) {
		snprintf(put_abs[i], PATH_MAX, "%s/%s", base, put_rel[i]);
		put_paths[i] = put_abs[i];
	}
	return total;
}

static int files_equal(const char *a, const char *b)
{
	static uint8_t ba[MiB], bb[MiB];
	int fa = -1, fb = -1, same = 0;

	fa = open(a, O_RDONLY | O_CLOEXEC);
	fb = open(b, O_RDONLY | O_CLOEXEC);
	if (fa < 0 || fb < 0) {
		fprintf(stderr, "cannot open %s or %s: %s\n", a, b, strerror(errno));
		goto out;
	}
	for (;;) {
		ssize_t na = read(fa, ba, sizeof(ba)), nb = 0;

		/* Read the same amount from b (regular files: full reads but at EOF). */
		while (na > 0 && nb < na) {
			ssize_t r = read(fb, bb + nb, (size_t)(na - nb));
			if (r <= 0)
				break;
			nb += r;
		}
		if (na < 0 || na != nb || memcmp(ba, bb, (size_t)na)) {
			fprintf(stderr, "%s and %s differ\n", a, b);
			goto out;
		}
		if (na == 0) {
			same = read(fb, bb, 1) == 0;
			if (!same)
				fprintf(stderr, "%s is longer than %s\n", b, a);
			goto out;
		}
	}
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return same;
}

/* Count regular files under dir (0 if it does not exist). */
static long counted;
static int count_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F)
		counted++;
	return 0;
}

static long count_files(const char *dir)
{
	counted = 0;
	nftw(dir, count_one, 16, FTW_PHYS);
	return counted;
}

/* When to kill a put. */
struct kill_plan {
	long at_object;     /* once it has begun writing its at_object-th object (each
			     * object is written to a new file in tmp/, which inotify
			     * tells); 0: not by count */
	uint64_t at_ns;     /* or after this long; 0: not by time */
	unsigned jitter_us; /* then wait this long more, so that the kill lands anywhere
			     * in that object's write */
	bool at_manifest;   /* or the moment a manifest is linked into manifests/ */
};

/* Put the input in a child process and SIGKILL it as plan says (NULL: never).
 * *objects: the objects it began; *took_ns: from fork to its end.
 * Returns 1 if killed, 0 if it finished the put, -1 if it failed. */
static int child_put(const char *dir, const struct kill_plan *plan, long *objects,
		     uint64_t *took_ns)
{
	static const struct kill_plan never;
	char wdir[PATH_MAX], buf[64 * 1024] __attribute__((aligned(8)));
	ssize_t n;
	struct store *s;
	int status = 0, ifd, wtmp, wman;
	long seen = 0;
	bool killed = false, done = false;
	uint64_t t0;
	pid_t pid;

	if (!plan)
		plan = &never;
	/* The layout first, so that there are directories to watch. */
	s = store_open(dir);
	REQUIRE(s);
	store_close(s);
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	REQUIRE(ifd >= 0);
	snprintf(wdir, sizeof(wdir), "%s/tmp", dir);
	wtmp = inotify_add_watch(ifd, wdir, IN_CREATE);
	snprintf(wdir, sizeof(wdir), "%s/manifests", dir);
	wman = inotify_add_watch(ifd, wdir, IN_CREATE | IN_MOVED_TO);
	REQUIRE(wtmp >= 0 && wman >= 0);

	fflush(NULL);
	t0 = now_ns();
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		char id[CHUNK_ID_LEN];
		int ret = -EIO;

		s = store_open(dir);
		if (s)
			ret = store_put(s, "crash", put_paths, ARRAY_SIZE(put_paths), NULL,
					false, id, NULL);
		store_close(s);
		_exit(ret == 0 ? 0 : 1);
	}
	child = pid;
	while (!done) {
		struct pollfd pfd = { .fd = ifd, .events = POLLIN };
		uint64_t now = now_ns();
		int wait_ms = 5;
		bool fire = false;

		if (plan->at_ns && !killed)
			wait_ms = now - t0 >= plan->at_ns
					  ? 0
					  : MIN(5, (int)((t0 + plan->at_ns - now) / 1000000));
		poll(&pfd, 1, wait_ms);
		while ((n = read(ifd, buf, sizeof(buf))) > 0) {
			for (char *e = buf; e < buf + n;) {
				const struct inotify_event *ev = (const void *)e;

				if (ev->wd == wtmp && (ev->mask & IN_CREATE))
					fire |= ++seen == plan->at_object;
				else if (ev->wd == wman && plan->at_manifest)
					fire = true;
				e += sizeof(*ev) + ev->len;
			}
		}
		if (plan->at_ns && now_ns() - t0 >= plan->at_ns)
			fire = true;
		if (fire && !killed) {
			if (plan->jitter_us)
				usleep(plan->jitter_us);
			kill(pid, SIGKILL); /* a put that has just ended is a zombie: harmless */
			killed = true;
		}
		pid_t w = waitpid(pid, &status, WNOHANG);
		REQUIRE(w >= 0);
		done = w == pid;
	}
	/* The events of a put that ended since the last read. */
	while ((n = read(ifd, buf, sizeof(buf))) > 0)
		for (char *e = buf; e < buf + n; e += sizeof(struct inotify_event) +
						     ((const struct inotify_event *)e)->len)
			seen += ((const struct inotify_event *)e)->wd == wtmp;
	if (took_ns)
		*took_ns = now_ns() - t0;
	child = -1;
	close(ifd);
	if (objects)
		*objects = seen;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		return 1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	fprintf(stderr, "put child: status %#x\n", status);
	return -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

static int put_again(struct store *s, char id[CHUNK_ID_LEN])
{
	return store_put(s, "crash", put_paths, ARRAY_SIZE(put_paths), NULL, false, id, NULL);
}

static void on_bad(const char *chunk_id, const char *why, void *arg)
{
	fprintf(stderr, "verify: bad chunk %s: %s\n", chunk_id, why);
	(*(int *)arg)++;
}

/* Every manifest loads and names only chunks that exist; returns how many there are. */
static int check_manifests(struct store *s)
{
	json_t *list = NULL, *e;
	size_t i;
	int n = 0;

	REQUIRE(store_list(s, &list) == 0);
	json_array_foreach(list, i, e) {
		const char *id = json_string_value(json_object_get(e, "id"));
		struct manifest *m = NULL;
		char full[CHUNK_ID_LEN], p[PATH_MAX];

		n++;
		CHECK(id != NULL);
		if (!id || store_manifest_load(s, id, &m, full) < 0) {
			fprintf(stderr, "manifest %s does not load: %s\n", id ? id : "?",
				log_last_error());
			check_failures++;
			continue;
		}
		for (size_t f = 0; f < m->nfiles; f++) {
			for (size_t c = 0; c < m->files[f].nchunks; c++) {
				const struct manifest_chunk *ch = &m->files[f].chunks[c];

				if (ch->zero)
					continue;
				struct store_chunk_loc loc;
				if (store_chunk_locate(s, ch->hash, &loc) < 0) {
					chunk_id_format(ch->hash, p);
					fprintf(stderr, "manifest %s names missing chunk %s\n", id,
						p);
					check_failures++;
				}
			}
		}
		manifest_free(m);
	}
	json_decref(list);
	return n;
}

static void check_get(struct store *s, const char *id, const char *out)
{
	char a[PATH_MAX], b[PATH_MAX];

	rm_rf(out);
	CHECK_EQ(store_get(s, id, out, false), 0);
	for (size_t i = 0; i < ARRAY_SIZE(expected); i++) {
		snprintf(a, sizeof(a), "%s/%s", base, expected[i].src);
		snprintf(b, sizeof(b), "%s/%s", out, expected[i].name);
		CHECK(files_equal(a, b));
	}
	CHECK_EQ(count_files(out), ARRAY_SIZE(expected));
	rm_rf(out);
}

/* Get kills: a get killed at any point leaves, under the final names, only
 * complete files; what else it leaves are its temp files (*.thaw-get-*). */
static const char *walk_out;
static int walk_final, walk_temp;

static int check_out_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	const char *rel = path + strlen(walk_out) + 1;
	char src[PATH_MAX];
	size_t i;

	if (type != FTW_F)
		return 0;
	if (strstr(rel, ".thaw-get-")) {
		walk_temp++;
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(expected) && strcmp(expected[i].name, rel); i++)
		;
	if (i == ARRAY_SIZE(expected)) {
		fprintf(stderr, "killed get left %s, which is no file of the manifest\n", path);
		check_failures++;
		return 0;
	}
	snprintf(src, sizeof(src), "%s/%s", base, expected[i].src);
	if (!files_equal(src, path)) {
		fprintf(stderr, "killed get left %s incomplete under its final name\n", path);
		check_failures++;
	}
	walk_final++;
	return 0;
}

/* store_get in a child, SIGKILLed after delay_ns (0: never); 1 killed, 0 done, -1 failed. */
static int child_get(const char *dir, const char *id, const char *out, uint64_t delay_ns,
		     uint64_t *took_ns)
{
	uint64_t t0;
	int status;
	pid_t pid;

	fflush(NULL);
	t0 = now_ns();
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct store *s = store_open(dir);
		int ret = s ? store_get(s, id, out, false) : -EIO;

		store_close(s);
		_exit(ret == 0 ? 0 : 1);
	}
	child = pid;
	if (delay_ns) {
		struct timespec ts = { .tv_sec = (time_t)(delay_ns / 1000000000u),
				       .tv_nsec = (long)(delay_ns % 1000000000u) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		kill(pid, SIGKILL);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	child = -1;
	if (took_ns)
		*took_ns = now_ns() - t0;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		return 1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void get_kills(const char *dir, const char *id, const char *out, int n)
{
	uint64_t took[3];
	int killed = 0;

	/* A get writes no temp file into the store to count, so these go by time. */
	for (int i = 0; i < 3; i++) {
		REQUIRE(rm_rf(out) == 0);
		REQUIRE(child_get(dir, id, out, 0, &took[i]) == 0);
	}
	qsort(took, 3, sizeof(took[0]), cmp_u64);
	for (int i = 0; i < n; i++) {
		double u = i + (rng_next() >> 11) * 0x1.0p-53;
		uint64_t delay = (uint64_t)(u * 1.2 * (double)took[1] / n) + 1;
		int how;

		REQUIRE(rm_rf(out) == 0);
		how = child_get(dir, id, out, delay, NULL);
		REQUIRE(how >= 0);
		killed += how;
		walk_out = out;
		walk_final = walk_temp = 0;
		nftw(out, check_out_one, 16, FTW_PHYS);
		printf("get kill %d at %5.1f ms: %-9s %2d files in place, %d temp files\n", i,
		       delay / 1e6, how ? "killed," : "finished,", walk_final, walk_temp);
		if (how == 0)
			CHECK_EQ(walk_final, ARRAY_SIZE(expected));
	}
	REQUIRE(rm_rf(out) == 0);
	printf("%d of %d gets killed (a whole get takes %.0f ms)\n", killed, n, took[1] / 1e6);
}

int main(void)
{
	const char *tmpdir = getenv("TMPDIR"), *e;
	uint64_t seed = 1, total;
	long full;
	bool by_time;
	char last_id[CHUNK_ID_LEN] = "";
	int iters = 16, killed = 0, finished = 0, with_tmp = 0, with_chunks = 0, after_manifest = 0;
	char dir[1024], out[1024], tmp[1024];
	struct sigaction sa = { .sa_handler = on_signal };

	if ((e = getenv("THAW_CRASH_SEED")))
		seed = strtoull(e, NULL, 0);
	if ((e = getenv("THAW_CRASH_ITERS")))
		iters = atoi(e);
	REQUIRE(iters > 0);
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;

	/* A SIGKILL leaves the page cache as it was, so a disk adds only time and
	 * noise to the kill points here (losing power is another matter, which no
	 * test on a running machine can show): tmpfs unless TMPDIR says otherwise. */
	if (!tmpdir)
		tmpdir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(base, sizeof(base), "%s/thaw-crash-XXXXXX", tmpdir);
	REQUIRE(mkdtemp(base));
	atexit(cleanup);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	total = make_input();
	snprintf(dir, sizeof(dir), "%s/store", base);
	snprintf(out, sizeof(out), "%s/out", base);
	snprintf(tmp, sizeof(tmp), "%s/store/tmp", base);

	/* How many objects a whole put writes (chunks and the manifest), so that
	 * the kills span it; the put is multi-threaded, so take the median of
	 * three.  Should the store ever write objects without a name in tmp/,
	 * fall back on time (below). */
	long writes[3];
	uint64_t took[3], put_ns, this_ns = 0;
	for (int i = 0; i < 3; i++) {
		REQUIRE(child_put(dir, NULL, &writes[i], &took[i]) == 0);
		REQUIRE(rm_rf(dir) == 0);
	}
	qsort(writes, 3, sizeof(writes[0]), cmp_long);
	qsort(took, 3, sizeof(took[0]), cmp_u64);
	full = writes[1];
	/* By time, the kills span the fastest put seen (a put that finished
	 * before its kill is one more sample): puts get faster once the input is
	 * in the page cache and the machine quietens, and kills spread over a
	 * slow put's time would land after the fast ones had ended. */
	put_ns = took[0];
	by_time = full <= iters || getenv("THAW_CRASH_BY_TIME");
	if (by_time)
		printf("kills by time%s\n",
		       full <= iters ? " (the store writes no temp files)" : "");
	printf("seed %llu: input %.1f MiB, a whole put writes %ld objects in %.0f ms (fastest "
	       "%.0f)\n", (unsigned long long)seed, total / (double)MiB, full, took[1] / 1e6,
	       took[0] / 1e6);

	for (int i = 0; i <= iters; i++) {
		/* One kill point in each slice of [1, full objects] (or of [0, 1.2 x
		 * the put's duration]), uniform within it, then a random 0-500 us
		 * more; the last kill comes the moment the manifest is linked. */
		double u = i + (rng_next() >> 11) * 0x1.0p-53;
		struct kill_plan plan = { .jitter_us = (unsigned)(rng_next() % 500) };
		long began;

		if (i == iters)
			plan = (struct kill_plan){ .at_manifest = true };
		else if (by_time)
			plan.at_ns = (uint64_t)(u * 1.2 * (double)put_ns / iters) + 1;
		else
			plan.at_object = 1 + (long)(u * (double)full / iters);
		struct store *s = NULL;
		char id[CHUNK_ID_LEN];
		uint64_t freed_chunks = 0, freed_bytes = 0;
		int how, r, bad = 0, manifests;
		long chunks_left, tmp_left;

		REQUIRE(rm_rf(dir) == 0);
		how = child_put(dir, &plan, &began, &this_ns);
		REQUIRE(how >= 0);
		if (how == 0 && this_ns < put_ns)
			put_ns = this_ns;
		killed += how == 1;
		finished += how == 0;
		tmp_left = count_files(tmp);
		with_tmp += tmp_left > 0;

		s = store_open(dir);
		REQUIRE(s);
		/* Chunks the dead put left where readers find them: in indexed
		 * packs, or loose (a pack with no index is nobody's chunks). */
		struct store_stats sst;
		REQUIRE(store_stat(s, &sst) == 0);
		chunks_left = (long)sst.chunks;
		with_chunks += chunks_left > 0;
		r = store_verify(s, on_bad, &bad);
		CHECK_EQ(r, 0);
		CHECK_EQ(bad, 0);
		manifests = check_manifests(s);
		CHECK(manifests <= 1);
		after_manifest += how == 1 && manifests == 1;
		if (r != 0 || bad || check_failures)
			fprintf(stderr,
				"iteration %d: the store after a kill at object %ld, %.1f ms is "
				"damaged\n",
				i, plan.at_object, plan.at_ns / 1e6);

		if (i % 2 == 0) {
			CHECK_EQ(store_gc(s, &freed_chunks, &freed_bytes), 0);
			CHECK_EQ(count_files(tmp), 0);
			/* Chunks of a put that wrote no manifest belong to nobody. */
			CHECK_EQ(freed_chunks, manifests ? 0 : chunks_left);
			CHECK_EQ(put_again(s, id), 0);
		} else {
			/* Put over whatever the dead put left, then gc must keep it all. */
			CHECK_EQ(put_again(s, id), 0);
			CHECK_EQ(store_gc(s, &freed_chunks, &freed_bytes), 0);
			CHECK_EQ(count_files(tmp), 0);
			CHECK_EQ(freed_chunks, 0); /* the new manifest uses every one */
		}
		check_get(s, id, out);
		memcpy(last_id, id, sizeof(last_id));
		bad = 0;
		CHECK_EQ(store_verify(s, on_bad, &bad), 0);
		/* The same put again is the same manifest but for its creation time. */
		r = check_manifests(s);
		CHECK(r >= 1 && r <= manifests + 1);
		const char *unit = plan.at_manifest ? "manifest" : by_time ? "ms" : "object";
		printf("kill %2d at %-8s %4ld +%3u us: %-8s %4ld begun, %4ld chunks, %ld temp "
		       "files, %d manifest; gc freed %llu chunks (%.1f MiB)\n",
		       i, unit, by_time ? (long)(plan.at_ns / 1000000) : plan.at_object,
		       plan.jitter_us, how == 1 ? "killed," : "finished,", began, chunks_left,
		       tmp_left, manifests, (unsigned long long)freed_chunks,
		       freed_bytes / (double)MiB);
		store_close(s);
		if (check_failures)
			break;
	}
	printf("%d killed (%d of them after the manifest was written), %d finished before the "
	       "kill; %d kills left temp files, %d left chunks\n",
	       killed, after_manifest, finished, with_tmp, with_chunks);
	if (!check_failures) {
		/* The kills must really land inside puts, most of them. */
		CHECK(killed >= iters / 2);
		/* The kill at the manifest races the put's last microseconds (fsync
		 * of the directory, exit), and may come too late: no check. */
	}
	if (!check_failures)
		get_kills(dir, last_id, out, 6);
	return check_failures ? 1 : 0;
}
