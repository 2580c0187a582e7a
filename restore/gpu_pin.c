/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_pin.c — see gpu_pin.h.
 *
 * The cache is a list under pin_mu; a file is pinned outside the lock (it
 * takes a while), its entry marked "pinning" meanwhile so that a second
 * fill of the same file waits for it rather than pinning it again.
 *
 * The reaper is started by the first gpu_pin_get and runs until gpu_pin_stop
 * (thawd's shutdown): it waits on reap_cv rather than sleeping, so that a
 * stop is seen at once and the thread can be joined.
 */
#include "restore/gpu_pin.h"
#include "restore/gpu_prefill_cuda.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pin_cv = PTHREAD_COND_INITIALIZER;
static struct pinned_file *pins;

/* The reaper: started (and joinable) while reaper_running; stopping set
 * by gpu_pin_stop, under pin_mu, for it to end.  reap_cv waits on the
 * monotonic clock (initialised with the first start). */
#define REAP_EVERY_S 5
static pthread_cond_t reap_cv;
static bool reap_cv_made;
static pthread_t reaper;
static bool reaper_running, reaper_stopping;

/* Files kept pinned for a context standby (gpu_pin_keep) while the process
 * holder lives: a use each, so the reaper leaves them. */
struct pin_keep {
	pid_t holder;
	struct pinned_file *f;
	struct pin_keep *next;
};
static struct pin_keep *keeps;

struct pin_job {
	struct pinned_file *f;
	size_t first, last; /* pieces */
	int ordinal;
};

static void *pin_pieces(void *arg)
{
	struct pin_job *j = arg;
	struct pinned_file *f = j->f;

	if (prefill_use_device(j->ordinal))
		return NULL;
	/* For every context (portable): a fill onto another GPU copies
	 * from the same pages. */
	for (size_t k = j->first; k < j->last; k++) {
		size_t a = k * PIECE, n = f->len - a < PIECE ? f->len - a : PIECE;

		f->pinned[k] = prefill_pin_piece(f->base + a, n, CU_HOSTREG_PORTABLE);
	}
	return NULL;
}

/* Map and pin f's file on up to MAX_THREADS threads. */
static int pin_file(struct pinned_file *f, int fd, int ordinal)
{
	struct pin_job jobs[MAX_THREADS];
	size_t per;
	int n;

	f->base = mmap(NULL, f->len, PROT_READ, MAP_SHARED, fd, 0);
	if (f->base == MAP_FAILED) {
		f->base = NULL;
		return -errno;
	}
	f->npieces = (f->len + PIECE - 1) / PIECE;
	f->pinned = calloc(f->npieces, sizeof(bool));
	if (!f->pinned)
		return -ENOMEM;
	n = prefill_threads_for(f->len);
	per = (f->npieces + (size_t)n - 1) / (size_t)n;
	for (int i = 0; i < n; i++) {
		jobs[i] = (struct pin_job){ f, i * per, (i + 1) * per, ordinal };
		if (jobs[i].last > f->npieces)
			jobs[i].last = f->npieces;
	}
	prefill_run_jobs(pin_pieces, jobs, sizeof(jobs[0]), n);
	return 0;
}

static void pin_free(struct pinned_file *f)
{
	for (size_t k = 0; f->pinned && k < f->npieces; k++)
		if (f->pinned[k])
			prefill_cu.host_unregister(f->base + k * PIECE);
	if (f->base)
		munmap(f->base, f->len);
	free(f->pinned);
	free(f);
}

static bool same_file(const struct pinned_file *f, const struct stat *sb)
{
	return sb->st_dev == f->dev && sb->st_ino == f->ino && (size_t)sb->st_size == f->len &&
	       sb->st_mtim.tv_sec == f->mtime.tv_sec && sb->st_mtim.tv_nsec == f->mtime.tv_nsec;
}

/* Is f's file still the one it mapped? */
static bool pin_current(const struct pinned_file *f)
{
	struct stat sb;

	return !stat(f->path, &sb) && same_file(f, &sb);
}

/* Take off the list (onto *gone) what the reaper lets go: keeps whose
 * holder is gone, and files no one uses that failed, are idle (or all of
 * them, idle_too), or are no longer the file they mapped.  Under pin_mu. */
static void reap_locked(struct pinned_file **gone, bool idle_too)
{
	/* A standby stopped without its take (its holder is gone). */
	for (struct pin_keep **kp = &keeps; *kp;) {
		struct pin_keep *k = *kp;

		if (!idle_too && (kill(k->holder, 0) == 0 || errno != ESRCH)) {
			kp = &k->next;
			continue;
		}
		*kp = k->next;
		k->f->users--;
		k->f->last_used = now_ns();
		free(k);
	}
	for (struct pinned_file **pp = &pins; *pp;) {
		struct pinned_file *f = *pp;

		if (f->users || f->state != 1 ||
		    (!idle_too && !f->failed &&
		     now_ns() - f->last_used < GPU_PIN_IDLE_S * 1000000000ull && pin_current(f))) {
			pp = &f->next;
			continue;
		}
		*pp = f->next;
		f->next = *gone;
		*gone = f;
	}
}

/* Unpin and free what reap_locked took, outside pin_mu (unpinning takes a
 * while). */
static void free_gone(struct pinned_file *gone)
{
	while (gone) {
		struct pinned_file *f = gone;

		gone = f->next;
		/* Unpinned in a context of the device that pinned it. */
		prefill_use_device(f->ordinal);
		pin_free(f);
	}
}

static void *pin_reaper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pin_mu);
	while (!reaper_stopping) {
		struct pinned_file *gone = NULL;
		struct timespec until = mono_after_ms(REAP_EVERY_S * 1000ull);

		while (!reaper_stopping &&
		       pthread_cond_timedwait(&reap_cv, &pin_mu, &until) != ETIMEDOUT)
			;
		if (reaper_stopping)
			break;
		reap_locked(&gone, false);
		pthread_mutex_unlock(&pin_mu);
		free_gone(gone);
		pthread_mutex_lock(&pin_mu);
	}
	pthread_mutex_unlock(&pin_mu);
	return NULL;
}

/* The reaper running, started if it is not (and not being stopped).  Under
 * pin_mu.  Without it nothing is let go until gpu_pin_stop: a start that
 * fails is tried again by the next get. */
static void reaper_start_locked(void)
{
	if (reaper_running || reaper_stopping)
		return;
	if (!reap_cv_made) {
		reap_cv_made = cond_init_monotonic(&reap_cv) == 0;
		if (!reap_cv_made)
			return;
	}
	reaper_running = pthread_create(&reaper, NULL, pin_reaper, NULL) == 0;
	if (reaper_running)
		pthread_setname_np(reaper, "thaw-pin-reap");
}

struct pinned_file *gpu_pin_get(const char *path, int ordinal)
{
	struct pinned_file *f;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;
	bool failed = false;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) < 0 || !sb.st_size) {
		close(fd);
		return NULL;
	}
	pthread_mutex_lock(&pin_mu);
	reaper_start_locked();
	for (f = pins; f; f = f->next)
		if (!f->failed && same_file(f, &sb))
			break;
	if (f) {
		f->users++;
		while (f->state == 0)
			pthread_cond_wait(&pin_cv, &pin_mu);
		if (f->failed) {
			f->users--;
			f = NULL;
		}
		pthread_mutex_unlock(&pin_mu);
		close(fd);
		return f;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&pin_mu);
		close(fd);
		return NULL;
	}
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->dev = sb.st_dev;
	f->ino = sb.st_ino;
	f->mtime = sb.st_mtim;
	f->len = (size_t)sb.st_size;
	f->ordinal = ordinal;
	f->users = 1;
	f->next = pins;
	pins = f;
	pthread_mutex_unlock(&pin_mu);
	ret = pin_file(f, fd, ordinal);
	close(fd);
	pthread_mutex_lock(&pin_mu);
	f->state = 1;
	/* A failed entry is found by no one from now on; the reaper frees
	 * it once those who waited for it have gone. */
	f->failed = ret || !f->base;
	f->last_used = now_ns();
	if (f->failed) {
		f->users--;
		failed = true;
	}
	pthread_cond_broadcast(&pin_cv);
	pthread_mutex_unlock(&pin_mu);
	/* Not f->failed: once unlocked, a failed f is the reaper's to free. */
	return failed ? NULL : f;
}

void gpu_pin_put(struct pinned_file *f)
{
	pthread_mutex_lock(&pin_mu);
	f->users--;
	f->last_used = now_ns();
	pthread_mutex_unlock(&pin_mu);
}

void gpu_pin_keep(pid_t holder, const char *path, int ordinal)
{
	struct pinned_file *f = gpu_pin_get(path, ordinal);
	struct pin_keep *k = f ? calloc(1, sizeof(*k)) : NULL;

	if (!k) {
		if (f)
			gpu_pin_put(f);
		return;
	}
	k->holder = holder;
	k->f = f;
	pthread_mutex_lock(&pin_mu);
	k->next = keeps;
	keeps = k;
	pthread_mutex_unlock(&pin_mu);
}

void gpu_pin_unkeep(pid_t holder)
{
	pthread_mutex_lock(&pin_mu);
	for (struct pin_keep **kp = &keeps; *kp;) {
		struct pin_keep *k = *kp;

		if (k->holder != holder) {
			kp = &k->next;
			continue;
		}
		*kp = k->next;
		k->f->users--;
		k->f->last_used = now_ns();
		free(k);
	}
	pthread_mutex_unlock(&pin_mu);
}

void gpu_pin_stop(void)
{
	struct pinned_file *gone = NULL;
	bool join;

	pthread_mutex_lock(&pin_mu);
	join = reaper_running;
	if (join) {
		reaper_stopping = true;
		pthread_cond_broadcast(&reap_cv);
	}
	pthread_mutex_unlock(&pin_mu);
	/* Outside pin_mu: the reaper takes it to see the stop. */
	if (join)
		pthread_join(reaper, NULL);
	pthread_mutex_lock(&pin_mu);
	reaper_running = false;
	reaper_stopping = false;
	reap_locked(&gone, true);
	pthread_mutex_unlock(&pin_mu);
	free_gone(gone);
}
