/* SPDX-License-Identifier: Apache-2.0 */
/* control.c — thawd's word reaches the library (common/gpumem_protocol.h).
 *
 * The constructor installs a handler for thaw's real-time signal when thaw
 * started the process (THAW_GPUMEM_OUT is set).  The handler only posts a
 * semaphore (async-signal-safe); the control thread, started when the
 * process first uses CUDA through the library, waits on it and carries out
 * the operation with the driver's entry points called directly, never
 * through the gate it closes.  A process that never used CUDA through the
 * library has no control thread: its handler answers at once, from the
 * signal itself, that there is nothing to move.
 */
#include "interpose/gm.h"

#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A RESTORE's pinned slices are let go on RELEASE, or after this long. */
#define RELEASE_AFTER_S 30

static sem_t wake;
/* What the signals asked, taken by the control thread.  A SAVE or RESTORE
 * is one at a time (thawd waits for its answer), so one slot holds it; a
 * RELEASE is sent without waiting, so it has a flag of its own: sharing
 * the slot, a RELEASE and the request thawd sent right after it would be
 * one value, and the request's signal would run it twice. */
static int pending_value; /* 0: none */
static int release_pending;
static volatile int started;
static const char *in_dir;
const char *gm_out_dir;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

/* v in decimal at p; the number of digits.  The signal handler's paths
 * and answer are built with this: snprintf is not async-signal-safe. */
static size_t put_uint(char *p, unsigned long v)
{
	char num[24];
	size_t n = 0, k = 0;

	do {
		num[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < sizeof(num));
	while (n)
		p[k++] = num[--n];
	return k;
}

/* Write the answer whole: a temporary file renamed over the name thawd
 * reads.  Only calls that are async-signal-safe (the handler uses it). */
static void put_status(const char *json, size_t len)
{
	char tmp[4200], path[4200];
	pid_t pid = getpid();
	size_t k;
	int fd;

	if (!gm_out_dir)
		return;
	k = strlen(gm_out_dir);
	if (k > 4000)
		return;
	/* snprintf is not async-signal-safe; these paths are built by hand. */
	memcpy(path, gm_out_dir, k);
	path[k++] = '/';
	k += put_uint(path + k, (unsigned long)pid);
	memcpy(path + k, ".status", 8);
	memcpy(tmp, path, k);
	memcpy(tmp + k, ".tmp", 5);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, json, len) == (ssize_t)len)
		rename(tmp, path);
	else
		unlink(tmp);
	close(fd);
}

/* The answer being written: JSON, appended to. */
struct out {
	char buf[8192];
	size_t k;
	bool full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->k, sizeof(o->buf) - o->k, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(o->buf) - o->k)
		o->full = true;
	else
		o->k += (size_t)n;
}

/* ", "key": "text"", the text's quotes and backslashes escaped and its
 * controls made spaces. */
static void put_text(struct out *o, const char *key, const char *text)
{
	char esc[2 * GPUMEM_TEXT_MAX];
	size_t j = 0;

	for (const char *p = text; *p && j < sizeof(esc) - 2; p++) {
		if (*p == '"' || *p == '\\')
			esc[j++] = '\\';
		esc[j++] = (unsigned char)*p < 0x20 ? ' ' : *p;
	}
	esc[j] = '\0';
	put(o, ", \"%s\": \"%s\"", key, esc);
}

static void put_devs(struct out *o, const char *key, const uint64_t *v, size_t n)
{
	put(o, ", \"%s\": [", key);
	for (size_t i = 0; i < n; i++)
		put(o, "%s%llu", i ? ", " : "", (unsigned long long)v[i]);
	put(o, "]");
}

/* The record's fields by kind (common/gpumem_protocol.h): the top level's
 * first, then the "ms" object's. */
#define TOP_BOOL(name, key) put(&o, ", \"%s\": %s", key, r->name ? "true" : "false");
#define TOP_U64(name, key) put(&o, ", \"%s\": %llu", key, (unsigned long long)r->name);
#define TOP_INT(name, key) put(&o, ", \"%s\": %d", key, r->name);
#define TOP_DBL(name, key) put(&o, ", \"%s\": %.3f", key, r->name);
#define TOP_TEXT(name, key) put_text(&o, key, r->name);
#define TOP_DEVS(name, key) put_devs(&o, key, r->name, CUDA_MAX_DEVICES);
#define TOP_MS(name, key)
#define TOP_FIELD(kind, name, key) TOP_##kind(name, key)
#define MS_BOOL(name, key)
#define MS_U64(name, key)
#define MS_INT(name, key)
#define MS_DBL(name, key)
#define MS_TEXT(name, key)
#define MS_DEVS(name, key)
#define MS_MS(name, key)                                                                     \
	put(&o, "%s\"%s\": %.3f", sep, key, r->name);                                        \
	sep = ", ";
#define MS_FIELD(kind, name, key) MS_##kind(name, key)

static void answer(unsigned seq, const char *op, const struct gpumem_record *r)
{
	struct out o = { .k = 0 };
	const char *sep = "";

	put(&o, "{\"seq\": %u, \"op\": \"%s\"", seq, op);
	GPUMEM_RECORD_FIELDS(TOP_FIELD)
	put(&o, ", \"ms\": {");
	GPUMEM_RECORD_FIELDS(MS_FIELD)
	put(&o, "}}\n");
	if (!o.full)
		put_status(o.buf, o.k);
}

static void *control_main(void *arg)
{
	bool pinned = false;

	(void)arg;
	for (;;) {
		struct gpumem_record r;
		struct timespec until;
		unsigned v, op, seq;
		int w;

		if (pinned) {
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += RELEASE_AFTER_S;
			w = sem_timedwait(&wake, &until);
		} else {
			w = sem_wait(&wake);
		}
		if (w < 0 && errno == ETIMEDOUT) {
			gm_release_pinned();
			pinned = false;
			continue;
		}
		if (w < 0)
			continue;
		/* A RELEASE was sent before any request pending now. */
		if (__atomic_exchange_n(&release_pending, 0, __ATOMIC_ACQ_REL)) {
			gm_release_pinned();
			pinned = false;
		}
		v = (unsigned)__atomic_exchange_n(&pending_value, 0, __ATOMIC_ACQ_REL);
		if (!v)
			continue;
		op = GPUMEM_VALUE_OP(v);
		seq = GPUMEM_VALUE_SEQ(v);
		switch (op) {
		case GPUMEM_OP_SAVE:
			gm_save(gm_out_dir, seq, &r);
			answer(seq, "save", &r);
			break;
		case GPUMEM_OP_RESTORE:
			gm_restore(in_dir, gm_out_dir, &r);
			pinned = r.ok;
			answer(seq, "restore", &r);
			break;
		default:
			break;
		}
	}
	return NULL;
}

/* The handler runs in whatever thread of the function the signal found,
 * between any two of its instructions: it keeps that thread's errno (the
 * answer's open, write and rename may set it), as any handler must. */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	unsigned op = GPUMEM_VALUE_OP(si->si_value.sival_int);

	(void)sig;
	(void)uc;
	if (started) {
		if (op == GPUMEM_OP_RELEASE)
			__atomic_store_n(&release_pending, 1, __ATOMIC_RELEASE);
		else
			__atomic_store_n(&pending_value, si->si_value.sival_int, __ATOMIC_RELEASE);
		sem_post(&wake);
	} else if (op != GPUMEM_OP_RELEASE) {
		/* No CUDA went through the library here: say so now. */
		char buf[256] = "{\"seq\": ";
		size_t k = strlen(buf);
		static const char rest[] =
		    ", \"ok\": false, \"error\": \"no CUDA call of this process went through "
		    "libthaw-cuda\", \"allocs\": 0, \"bytes\": 0}\n";

		k += put_uint(buf + k, GPUMEM_VALUE_SEQ(si->si_value.sival_int));
		memcpy(buf + k, rest, sizeof(rest));
		put_status(buf, k + sizeof(rest) - 1);
	}
	errno = saved_errno;
}

void gm_control_start(void)
{
	pthread_t t;
	pthread_attr_t a;
	sigset_t all, old;

	if (__atomic_load_n(&started, __ATOMIC_ACQUIRE) || !gm_out_dir)
		return;
	pthread_mutex_lock(&start_mu);
	if (!started) {
		/* The control thread takes no signal of the function's. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, control_main, NULL) == 0) {
			pthread_setname_np(t, "thaw-gpumem");
			__atomic_store_n(&started, 1, __ATOMIC_RELEASE);
		}
		pthread_attr_destroy(&a);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_unlock(&start_mu);
}

/* A child of fork has no control thread and none of the parent's CUDA. */
static void after_fork_child(void)
{
	gm_share_forget();
	started = 0;
	sem_init(&wake, 0, 0);
	pthread_mutex_init(&start_mu, NULL);
}

static bool tracing;

void gm_trace(const char *fmt, ...)
{
	char line[512], path[4200];
	va_list ap;
	int n, fd;

	if (!tracing || !gm_out_dir)
		return;
	n = snprintf(line, sizeof(line), "%.1f %d ", gm_now_ms(), (int)gettid());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	snprintf(path, sizeof(path), "%s/%d.trace", gm_out_dir, (int)getpid());
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) < 0)
		tracing = false;
	close(fd);
}

__attribute__((constructor)) static void gm_init(void)
{
	struct sigaction sa = { 0 };
	const char *s;

	gm_out_dir = getenv(GPUMEM_ENV_OUT);
	in_dir = getenv(GPUMEM_ENV_IN);
	if (!in_dir)
		in_dir = gm_out_dir;
	s = getenv(GPUMEM_ENV_MIN_BYTES);
	if (s && *s)
		gm_min_bytes = strtoull(s, NULL, 0);
	s = getenv("THAW_GPUMEM_TRACE");
	tracing = s && !strcmp(s, "1");
	if (!gm_out_dir)
		return; /* not started by thaw: only a pass-through */
	sem_init(&wake, 0, 0);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(GPUMEM_SIGNAL, &sa, NULL);
	pthread_atfork(NULL, NULL, after_fork_child);
}
