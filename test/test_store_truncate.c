/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_truncate.c — a put whose input shrinks under it (common/sigbus).
 *
 * A put maps its large inputs; a page of a mapped file past its end faults
 * with SIGBUS.  The guard must turn that into a failed call in the thread
 * that read it, leave every other SIGBUS deadly as before, and a put of a
 * file truncated while it is read must fail with the file named (or finish,
 * if the truncation came after it read everything), never kill the process,
 * and leave a store that verifies clean.
 */
#include "common/log.h"
#include "common/sigbus.h"
#include "common/util.h"
#include "store/store.h"
#include "test/check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[] = "/dev/shm/thaw-test-truncate-XXXXXX";

static int read_past_end(void *arg)
{
	const volatile uint8_t *p = arg;

	return p[8192]; /* the file is 4 KiB: this page is past its end */
}

static int add_one(void *arg)
{
	return *(int *)arg + 1;
}

/* A file of 4 KiB mapped as 16 KiB. */
static uint8_t *map_short_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	uint8_t *m;

	REQUIRE(fd >= 0);
	CHECK(ftruncate(fd, 4096) == 0);
	m = mmap(NULL, 16384, PROT_READ, MAP_SHARED, fd, 0);
	REQUIRE(m != MAP_FAILED);
	close(fd);
	return m;
}

static void test_guard(void)
{
	char path[256];
	int v = 41;

	snprintf(path, sizeof(path), "%s/short", dir);
	uint8_t *m = map_short_file(path);

	CHECK(sigbus_guarded(add_one, &v) == 42);
	CHECK(sigbus_guarded(read_past_end, m) == -EFAULT);
	/* The guard is reusable, and a fault does not leave it set. */
	CHECK(sigbus_guarded(read_past_end, m) == -EFAULT);
	CHECK(sigbus_guarded(add_one, &v) == 42);

	/* Outside a guard a SIGBUS is as deadly as it was. */
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		read_past_end(m);
		_exit(0);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
#ifdef __SANITIZE_ADDRESS__
	/* The sanitizer's own handler was there first: it reports and exits. */
	CHECK(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
#else
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
#endif
	munmap(m, 16384);
}

struct truncater {
	const char *path;
	long delay_us;
};

static void *truncate_later(void *arg)
{
	struct truncater *t = arg;

	usleep((useconds_t)t->delay_us);
	CHECK(truncate(t->path, 12288) == 0);
	return NULL;
}

static void write_random(const char *path, size_t len)
{
	uint8_t *buf = malloc(len);
	uint64_t x = 88172645463325252ull;

	REQUIRE(buf != NULL);
	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
	CHECK(write_file_atomic(path, buf, len, 0644) == 0);
	free(buf);
}

/* Puts of a 256 MiB file truncated after a delay: some (the short delays)
 * must fail, each failure names the file, and the store stays clean. */
static void test_put_truncated(void)
{
	static const long delays_us[] = {0, 2000, 10000, 30000, 80000};
	char input[256], sdir[256];
	int failed = 0;

	snprintf(input, sizeof(input), "%s/input.bin", dir);
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	for (size_t i = 0; i < ARRAY_SIZE(delays_us); i++) {
		struct truncater t = {input, delays_us[i]};
		const char *paths[] = {input};
		char id[CHUNK_ID_LEN];
		pthread_t th;
		struct store *s;
		int ret;

		write_random(input, 256u << 20);
		s = store_open(sdir);
		REQUIRE(s != NULL);
		store_set_input_map(s, true);
		CHECK(pthread_create(&th, NULL, truncate_later, &t) == 0);
		ret = store_put(s, "t", paths, 1, NULL, false, id, NULL);
		pthread_join(th, NULL);
		if (ret < 0) {
			failed++;
			CHECK(strstr(log_last_error(), "input.bin") != NULL);
			CHECK(strstr(log_last_error(), "changed while being read") != NULL);
		}
		printf("truncated after %ld us: %s\n", delays_us[i],
		       ret < 0 ? log_last_error() : "put finished first");
		CHECK(store_verify(s, NULL, NULL) == 0);
		store_close(s);
	}
	CHECK(failed > 0);
}

int main(void)
{
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer's SIGBUS interception does not survive a handler
	 * that jumps out of the signal: the process dies (seen with gcc 12). */
	printf("skipped: SIGBUS recovery does not run under ThreadSanitizer\n");
	return 77;
#endif
	CHECK(mkdtemp(dir) != NULL);
	test_guard();
	test_put_truncated();
	rm_rf(dir);
	return check_failures ? 1 : 0;
}
