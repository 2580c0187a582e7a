/* SPDX-License-Identifier: Apache-2.0 */
/* tier_scrub.c — the integrity of the RAM tier's entries (tier.h): what
 * readers report damaged, an entry dropped as damaged and made again, and
 * the scrub that reads every entry again in the background.
 *
 * An entry found damaged is dropped even while leased: its metadata goes
 * first (it is no entry any more), its directory is renamed away and
 * removed.  Instances that map its memory files keep their mappings (a
 * removed file lives on while mapped, and nothing is truncated), and whose
 * bytes they read is theirs already: the next start gets a new entry.
 */
#define LOG_PREFIX "tier: "
#include "restore/tier.h"
#include "restore/tier_internal.h"
#include "restore/tier_sums.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Reports kept at most: a reader reports an entry once per start that
 * found it damaged, and an entry dropped takes its reports with it. */
#define REPORTS_MAX 64

struct report {
	dev_t dev;
	ino_t ino;
	enum tier_found_by by;
	char why[256];
};

/* The reports, and what the scrubs wait on (a report, or their stop). */
static pthread_mutex_t reports_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reports_cv; /* on now_ns()'s clock: reports_cv_ready */
static pthread_once_t reports_once = PTHREAD_ONCE_INIT;
static struct report reports[REPORTS_MAX];
static unsigned nreports, reports_seq;

static void reports_cv_init(void)
{
	cond_init_monotonic(&reports_cv);
}

/* reports_cv made, before its first use. */
static void reports_cv_ready(void)
{
	pthread_once(&reports_once, reports_cv_init);
}

const char *tier_found_by_name(enum tier_found_by by)
{
	return by == TIER_FOUND_FILL ? "fill" : by == TIER_FOUND_SCRUB ? "scrub" : "?";
}

void tier_damage_report(const char *dir, enum tier_found_by by, const char *why)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		pr_warn("%s, found damaged, is gone already: %s", dir, strerror(errno));
		return;
	}
	pthread_mutex_lock(&reports_mu);
	if (nreports == REPORTS_MAX)
		memmove(&reports[0], &reports[1], sizeof(reports[0]) * --nreports);
	reports[nreports] = (struct report){ .dev = st.st_dev, .ino = st.st_ino, .by = by };
	snprintf(reports[nreports].why, sizeof(reports[nreports].why), "%s", why);
	nreports++;
	reports_seq++;
	reports_cv_ready();
	pthread_cond_broadcast(&reports_cv);
	pthread_mutex_unlock(&reports_mu);
}

static bool reported(dev_t dev, ino_t ino, enum tier_found_by *by, char *why, size_t len)
{
	bool found = false;

	pthread_mutex_lock(&reports_mu);
	for (unsigned i = 0; i < nreports && !found; i++)
		if (reports[i].dev == dev && reports[i].ino == ino) {
			found = true;
			*by = reports[i].by;
			snprintf(why, len, "%s", reports[i].why);
		}
	pthread_mutex_unlock(&reports_mu);
	return found;
}

static void forget(dev_t dev, ino_t ino)
{
	pthread_mutex_lock(&reports_mu);
	for (unsigned i = 0; i < nreports;)
		if (reports[i].dev == dev && reports[i].ino == ino)
			memmove(&reports[i], &reports[i + 1], sizeof(reports[0]) * (--nreports - i));
		else
			i++;
	pthread_mutex_unlock(&reports_mu);
}

/* The entry of hex dropped as damaged (its build lock held), if its
 * directory is still (dev, ino). */
static int drop_locked(struct tier *t, const char *hex, dev_t dev, ino_t ino,
		       enum tier_found_by by, const char *why)
{
	char dir[PATH_MAX], meta[PATH_MAX], gone[PATH_MAX];
	struct stat st;
	int ret;

	snprintf(dir, sizeof(dir), "%s/%s", t->dir, hex);
	snprintf(meta, sizeof(meta), "%s/%s.meta", t->dir, hex);
	/* Gone, being evicted (its metadata goes first), or made again. */
	if (access(meta, F_OK) < 0 || stat(dir, &st) < 0 || st.st_dev != dev || st.st_ino != ino) {
		forget(dev, ino);
		return 0;
	}
	snprintf(gone, sizeof(gone), "%s/.bad-%s-%d-%u", t->dir, hex, getpid(),
		 atomic_fetch_add(&t->seq, 1));
	/* The metadata first: without it the directory is no entry any more. */
	if (unlink(meta) < 0 && errno != ENOENT) {
		ret = -errno;
		pr_perror("unlink %s", meta);
		return ret;
	}
	if (rename(dir, gone) < 0) {
		ret = -errno;
		pr_perror("rename %s to %s", dir, gone);
		return ret;
	}
	rm_rf(gone);
	forget(dev, ino);
	pthread_mutex_lock(&t->mu);
	t->st.damaged[by]++;
	if (t->nredo == REDO_MAX)
		memmove(t->redo[0], t->redo[1], sizeof(t->redo[0]) * --t->nredo);
	memcpy(t->redo[t->nredo++], hex, HEX_LEN + 1);
	pthread_mutex_unlock(&t->mu);
	pr_err("RAM tier entry sha256:%s is damaged (the %s found %s): dropped, to be "
	       "materialised again from the store", hex, tier_found_by_name(by), why);
	return 1;
}

int tier_drop_damaged(struct tier *t, const char *hex, dev_t dev, ino_t ino,
		      enum tier_found_by by, const char *why)
{
	char name[HEX_LEN + 16];
	int bfd, ret;

	snprintf(name, sizeof(name), "%.*s.build", HEX_LEN, hex);
	bfd = tier_lock(t, name, LOCK_EX);
	if (bfd < 0)
		return bfd;
	ret = drop_locked(t, hex, dev, ino, by, why);
	close(bfd);
	return ret;
}

bool tier_drop_reported(struct tier *t, const char *hex, bool drop)
{
	char dir[PATH_MAX], why[256];
	enum tier_found_by by;
	struct stat st;

	snprintf(dir, sizeof(dir), "%s/%s", t->dir, hex);
	if (stat(dir, &st) < 0 || !reported(st.st_dev, st.st_ino, &by, why, sizeof(why)))
		return false;
	if (drop)
		drop_locked(t, hex, st.st_dev, st.st_ino, by, why);
	return true;
}

void tier_redo_done(struct tier *t, const char *hex)
{
	bool again = false;

	pthread_mutex_lock(&t->mu);
	for (unsigned i = 0; i < t->nredo && !again; i++)
		if (!strcmp(t->redo[i], hex)) {
			memcpy(t->redo[i], t->redo[--t->nredo], sizeof(t->redo[i]));
			t->st.rematerialized++;
			again = true;
		}
	pthread_mutex_unlock(&t->mu);
	if (again)
		pr_info("sha256:%s materialised again from the store, its damaged entry gone", hex);
}

int tier_lease_existing(struct tier *t, const char *hex, struct tier_lease **out)
{
	struct tier_lease *l = calloc(1, sizeof(*l));
	char meta[PATH_MAX];
	struct stat st;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	snprintf(l->hex, sizeof(l->hex), "%.*s", HEX_LEN, hex);
	snprintf(l->path, sizeof(l->path), "%s/%s", t->dir, l->hex);
	snprintf(meta, sizeof(meta), "%s/%s.meta", t->dir, l->hex);
	l->fd = tier_lock(t, l->hex, LOCK_SH);
	if (l->fd < 0) {
		int ret = l->fd;

		free(l);
		return ret;
	}
	/* The metadata makes it an entry (tier.c). */
	if (stat(meta, &st) == 0 && stat(l->path, &st) == 0 && S_ISDIR(st.st_mode)) {
		l->dev = st.st_dev;
		l->ino = st.st_ino;
		l->hit = true;
		*out = l;
		return 0;
	}
	tier_release(l);
	return -ENOENT;
}

void tier_lease_ident(const struct tier_lease *l, dev_t *dev, ino_t *ino)
{
	*dev = l->dev;
	*ino = l->ino;
}

void tier_count_scrub(struct tier *t, uint64_t bytes, bool pass)
{
	pthread_mutex_lock(&t->mu);
	t->st.scrubbed_bytes += bytes;
	t->st.scrub_passes += pass;
	pthread_mutex_unlock(&t->mu);
}

/* --- the scrub ----------------------------------------------------------- */

struct tier_scrub {
	struct tier *t;
	uint64_t rate;
	unsigned pass_s;
	pthread_t thread;
	bool stop; /* under reports_mu */
};

/* A pass's pace: rate bytes a second at most, a second's worth of bytes
 * ahead at most after a slow stretch. */
struct pace {
	struct tier_scrub *sc; /* NULL: tier_scrub_pass, not to be stopped */
	uint64_t rate, t0, bytes;
};

/* Wait until ns (now_ns's clock), a stop or, with report_seq, a report
 * made since it was read.  true: stopped. */
static bool scrub_wait(struct tier_scrub *sc, uint64_t until, const unsigned *report_seq)
{
	struct timespec ts = mono_timespec(until);
	bool stop;

	reports_cv_ready();
	pthread_mutex_lock(&reports_mu);
	while (!sc->stop && (!report_seq || *report_seq == reports_seq) && now_ns() < until)
		pthread_cond_timedwait(&reports_cv, &reports_mu, &ts);
	stop = sc->stop;
	pthread_mutex_unlock(&reports_mu);
	return stop;
}

static int pace(uint64_t bytes, void *arg)
{
	struct pace *p = arg;
	uint64_t due, now;

	if (!p->rate)
		return 0;
	p->bytes += bytes;
	due = p->t0 + (uint64_t)((double)p->bytes * 1e9 / (double)p->rate);
	now = now_ns();
	if (now > due + 1000000000ull)
		p->t0 += now - due - 1000000000ull; /* no burst to catch up */
	else if (due > now && p->sc && scrub_wait(p->sc, due, NULL))
		return -ECANCELED;
	else if (due > now && !p->sc)
		usleep((useconds_t)((due - now) / 1000));
	return 0;
}

/* Make hex's entry again (the scrub dropped it, or a reader reported it). */
static void make_again(struct tier *t, const char *hex)
{
	char id[CHUNK_ID_LEN];
	struct tier_lease *l = NULL;
	int ret;

	snprintf(id, sizeof(id), "sha256:%.*s", HEX_LEN, hex);
	ret = tier_acquire(t, id, &l);
	if (ret)
		pr_warn("%s: cannot materialise it again now (%s): its next start will",
			id, strerror(-ret));
	tier_release(l);
}

/* Check the entry in dir against its checksums at p's pace.  0 sound (or
 * without checksums), 1 damaged (why says where; or gone meanwhile, which
 * tier_drop_damaged tells), -ECANCELED. */
static int check_entry(struct tier *t, const char *dir, struct pace *p, char *why, size_t len)
{
	struct tier_sums *sums = NULL;
	uint64_t read = 0;
	int ret = tier_sums_load(dir, &sums);

	if (ret == -EUCLEAN) {
		snprintf(why, len, "its checksums (" TIER_SUMS ") damaged");
		return 1;
	}
	if (ret) /* none (an older thaw's; tier_open removes those it can) */
		return 0;
	for (size_t i = 0; !ret && i < sums->n; i++) {
		const struct tier_sum_file *f = &sums->f[i];
		uint64_t bad = 0;

		ret = tier_sums_check_file(dir, f, pace, p, &bad, &read);
		if (ret == -ENOENT) {
			snprintf(why, len, "%s missing", f->path);
			ret = 1;
		} else if (ret == -EUCLEAN && bad == UINT64_MAX) {
			snprintf(why, len, "%s of another size than it was made", f->path);
			ret = 1;
		} else if (ret == -EUCLEAN) {
			snprintf(why, len, "%s unlike its checksum: block %llu (bytes %llu-%llu)",
				 f->path, (unsigned long long)(bad / TIER_SUM_BLOCK),
				 (unsigned long long)bad,
				 (unsigned long long)(bad + TIER_SUM_BLOCK - 1));
			ret = 1;
		} else if (ret && ret != -ECANCELED) {
			pr_warn("%s/%s: cannot check it: %s", dir, f->path, strerror(-ret));
			ret = 0;
		}
	}
	tier_count_scrub(t, read, false);
	tier_sums_free(sums);
	return ret;
}

/* The entries of t ("<hex>.meta"), each hex NUL-terminated. */
static int list_hexes(struct tier *t, char (**out)[HEX_LEN + 1], size_t *n)
{
	char (*v)[HEX_LEN + 1] = NULL;
	struct dirent *de;
	size_t cap = 0;
	DIR *d = opendir(t->dir);

	*n = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (len != HEX_LEN + 5 || strcmp(de->d_name + HEX_LEN, ".meta"))
			continue;
		if (ARRAY_GROW(v, cap, *n + 1, 16)) {
			closedir(d);
			free(v);
			return -ENOMEM;
		}
		snprintf(v[(*n)++], HEX_LEN + 1, "%.*s", HEX_LEN, de->d_name);
	}
	closedir(d);
	*out = v;
	return 0;
}

/* Scrub the entry of hex: dropped and made again if a reader reported it
 * or its files are unlike their checksums.  1 damaged, 0, -ECANCELED. */
static int scrub_entry(struct tier *t, const char *hex, struct pace *p)
{
	struct tier_lease *l = NULL;
	enum tier_found_by by = TIER_FOUND_SCRUB;
	char why[PATH_MAX + 128], dir[PATH_MAX];
	dev_t dev;
	ino_t ino;
	int ret;

	/* Not leased while read: a read that takes minutes must not keep the
	 * entry from eviction.  An entry evicted meanwhile is read through
	 * the files still open, or found gone (tier_drop_damaged tells). */
	if (tier_lease_existing(t, hex, &l))
		return 0; /* gone (evicted), or being made */
	tier_lease_ident(l, &dev, &ino);
	snprintf(dir, sizeof(dir), "%s", tier_lease_path(l));
	tier_release(l);
	ret = reported(dev, ino, &by, why, sizeof(why)) ? 1 : check_entry(t, dir, p, why, sizeof(why));
	if (ret == 1 && tier_drop_damaged(t, hex, dev, ino, by, why) != 1)
		ret = 0; /* gone, or another dropped it already */
	if (ret == 1)
		make_again(t, hex);
	return ret;
}

static int scrub_pass(struct tier *t, struct tier_scrub *sc, uint64_t rate, unsigned *damaged)
{
	struct pace p = { .sc = sc, .rate = rate, .t0 = now_ns() };
	char (*hexes)[HEX_LEN + 1] = NULL;
	size_t n = 0;
	int ret = list_hexes(t, &hexes, &n);

	if (damaged)
		*damaged = 0;
	for (size_t i = 0; !ret && i < n; i++) {
		ret = scrub_entry(t, hexes[i], &p);
		if (ret == 1 && damaged)
			(*damaged)++;
		ret = ret == 1 ? 0 : ret;
	}
	if (!ret)
		tier_count_scrub(t, 0, true);
	free(hexes);
	return ret;
}

int tier_scrub_pass(struct tier *t, uint64_t rate, unsigned *damaged)
{
	return scrub_pass(t, NULL, rate, damaged);
}

static void *scrub_main(void *arg)
{
	struct tier_scrub *sc = arg;

	for (;;) {
		uint64_t t0 = now_ns();
		unsigned seq, damaged = 0;

		pthread_mutex_lock(&reports_mu);
		seq = reports_seq;
		pthread_mutex_unlock(&reports_mu);
		if (scrub_pass(sc->t, sc, sc->rate, &damaged) == -ECANCELED)
			break;
		if (damaged)
			pr_info("scrub: %u damaged entries found in a pass of %.1f s", damaged,
				ms_since(t0) / 1e3);
		/* The next pass a while after this one began, or at once for
		 * what a reader reported meanwhile. */
		if (scrub_wait(sc, t0 + sc->pass_s * 1000000000ull, &seq))
			break;
	}
	return NULL;
}

struct tier_scrub *tier_scrub_start(struct tier *t, uint64_t rate)
{
	const char *env = getenv("THAW_TIER_SCRUB_PASS_S");
	struct tier_scrub *sc;
	char b[32];
	int ret;

	if (!rate)
		return NULL;
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		pr_err("out of memory");
		return NULL;
	}
	sc->t = t;
	sc->rate = rate;
	sc->pass_s = env && *env ? (unsigned)strtoul(env, NULL, 10) : TIER_SCRUB_PASS_S;
	ret = pthread_create(&sc->thread, NULL, scrub_main, sc);
	if (ret) {
		pr_err("cannot start the RAM tier's scrub: %s", strerror(ret));
		free(sc);
		return NULL;
	}
	pr_info("scrub: the RAM tier's entries checked again at %s/s at most, a pass every %u "
		"s at least", fmt_bytes(rate, b), sc->pass_s);
	return sc;
}

void tier_scrub_stop(struct tier_scrub *sc)
{
	if (!sc)
		return;
	reports_cv_ready();
	pthread_mutex_lock(&reports_mu);
	sc->stop = true;
	pthread_cond_broadcast(&reports_cv);
	pthread_mutex_unlock(&reports_mu);
	pthread_join(sc->thread, NULL);
	free(sc);
}
