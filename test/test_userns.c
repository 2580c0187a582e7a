/* SPDX-License-Identifier: Apache-2.0 */
/* test_userns: the pool of user namespace ranges (function/userns.h).  One
 * function never gets two ranges, however many threads and processes ask
 * at once (the first snapshots of one function, thawd and `thaw snapshot`
 * side by side); two functions never share one; a range given back is
 * taken again; a full pool is -ENOSPC; a range file is never seen without
 * its owner. */
#include "function/userns.h"
#include "function/spec.h"
#include "common/config.h"
#include "common/log.h"
#include "test/check.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define PROCS 4

static struct thaw_config cfg;
static pthread_barrier_t go; /* the threads ask at once */

struct ask {
	const char *id;
	struct userns_range r;
	int ret;
};

static void *ask_thread(void *arg)
{
	struct ask *a = arg;

	pthread_barrier_wait(&go);
	a->ret = userns_range_of(&cfg, a->id, &a->r);
	return NULL;
}

/* Each range file holds a whole id: never empty, never a temporary left. */
static void check_files(const char *dir, unsigned want)
{
	char p[512], buf[64];
	struct dirent *de;
	unsigned n = 0;
	DIR *d = opendir(dir);

	REQUIRE(d);
	while ((de = readdir(d))) {
		FILE *f;
		size_t len;

		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		CASE("file %.64s", de->d_name);
		CHECK(de->d_name[0] >= '0' && de->d_name[0] <= '9');
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		REQUIRE((f = fopen(p, "r")));
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		CHECK(len > 0 && !strncmp(buf, "fn", 2));
		n++;
	}
	CASE_END();
	closedir(d);
	CHECK_EQ(n, want);
}

int main(void)
{
	char data[] = "/tmp/test_userns.XXXXXX", dir[256], id[THREADS][16];
	struct ask same[THREADS], apart[THREADS];
	pthread_t t[2 * THREADS];
	struct userns_range r, procs[PROCS];
	int pipes[PROCS][2];
	pid_t pids[PROCS];

	log_set_level(LOG_WARN);
	REQUIRE(mkdtemp(data));
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", data);
	cfg.userns_base = 3000000000u;
	cfg.userns_count = 16 * USERNS_RANGE_SIZE;
	snprintf(dir, sizeof(dir), "%s/userns", data);

	/* Threads: eight ask for one function, eight for eight others. */
	REQUIRE(!pthread_barrier_init(&go, NULL, 2 * THREADS));
	for (int i = 0; i < THREADS; i++) {
		snprintf(id[i], sizeof(id[i]), "fn%d", i);
		same[i] = (struct ask){ .id = "fnsame" };
		apart[i] = (struct ask){ .id = id[i] };
		REQUIRE(!pthread_create(&t[2 * i], NULL, ask_thread, &same[i]));
		REQUIRE(!pthread_create(&t[2 * i + 1], NULL, ask_thread, &apart[i]));
	}
	for (int i = 0; i < 2 * THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < THREADS; i++) {
		CASE("thread %d", i);
		CHECK_EQ(same[i].ret, 0);
		CHECK_EQ(same[i].r.base, same[0].r.base);
		CHECK_EQ(same[i].r.size, USERNS_RANGE_SIZE);
		CHECK_EQ(apart[i].ret, 0);
		CHECK(apart[i].r.base != same[0].r.base);
		for (int j = 0; j < i; j++)
			CHECK(apart[i].r.base != apart[j].r.base);
		CHECK((apart[i].r.base - cfg.userns_base) % USERNS_RANGE_SIZE == 0);
	}
	CASE_END();
	check_files(dir, THREADS + 1);

	/* Processes: four ask for one new function at once (when the pipe
	 * they wait on closes). */
	int start[2];
	REQUIRE(pipe(start) == 0);
	for (int i = 0; i < PROCS; i++) {
		REQUIRE(pipe(pipes[i]) == 0);
		pids[i] = fork();
		REQUIRE(pids[i] >= 0);
		if (pids[i] == 0) {
			struct userns_range mine = { 0 };
			char b;

			close(start[1]);
			if (read(start[0], &b, 1) != 0 || userns_range_of(&cfg, "fnprocs", &mine))
				_exit(1);
			_exit(write(pipes[i][1], &mine, sizeof(mine)) == sizeof(mine) ? 0 : 1);
		}
		close(pipes[i][1]);
	}
	close(start[0]);
	close(start[1]);
	for (int i = 0; i < PROCS; i++) {
		int status = 0;

		CASE("process %d", i);
		CHECK(read(pipes[i][0], &procs[i], sizeof(procs[i])) == sizeof(procs[i]));
		close(pipes[i][0]);
		REQUIRE(waitpid(pids[i], &status, 0) == pids[i]);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		CHECK_EQ(procs[i].base, procs[0].base);
	}
	CASE_END();
	check_files(dir, THREADS + 2);

	/* Given back, taken by the next function that asks; a function asking
	 * again keeps its own. */
	CHECK_EQ(userns_release(&cfg, "fnsame"), 0);
	CHECK_EQ(userns_release(&cfg, "fnsame"), 0); /* none taken: 0 */
	CHECK_EQ(userns_range_of(&cfg, "fnnext", &r), 0);
	CHECK_EQ(r.base, same[0].r.base);
	CHECK_EQ(userns_range_of(&cfg, "fn3", &r), 0);
	CHECK_EQ(r.base, apart[3].r.base);

	/* The pool is 16 ranges: 10 taken, 6 more, then none. */
	for (int i = 0; i < 6; i++) {
		char more[16];

		snprintf(more, sizeof(more), "fnmore%d", i);
		CASE("%s", more);
		CHECK_EQ(userns_range_of(&cfg, more, &r), 0);
	}
	CASE_END();
	CHECK_EQ(userns_range_of(&cfg, "fnfull", &r), -ENOSPC);
	check_files(dir, 16);

	/* A data directory where no range was ever taken: giving back is 0. */
	char empty[] = "/tmp/test_userns.XXXXXX";
	REQUIRE(mkdtemp(empty));
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", empty);
	CHECK_EQ(userns_release(&cfg, "fn0"), 0);
	rmdir(empty);

	/* The default: what a spec says wins; a function of several GPUs
	 * stays out of it (decided before the host is asked). */
	struct func_spec two = { .gpus = 2, .gpu = true }, asked = two;
	char why[512];

	cfg.userns_default = true;
	CHECK(!function_userns_why(&cfg, &two, why, sizeof(why)));
	CHECK(strstr(why, "several GPUs") != NULL);
	asked.userns_given = true;
	asked.sandbox.userns = true;
	CHECK(function_userns_why(&cfg, &asked, why, sizeof(why)));

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", data);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", data);
	return check_failures ? 1 : 0;
}
