/* SPDX-License-Identifier: Apache-2.0 */
/* share.c — device memory the function's processes share, carried by the
 * libraries themselves (docs/DESIGN.md, "GPU memory", "Shared memory").
 *
 * A driver that refuses to checkpoint processes that share memory (driver
 * 580 answers NOT_SUPPORTED at the restore of NCCL's P2P buffers) sees
 * only private memory if each process lets go of what it shares before
 * the lock: the process that made and exported an allocation (its
 * creator) saves its bytes with its private memory and unmaps it; each
 * process that imported it only unmaps it.  After the driver's restore the
 * creator makes it again, copies its bytes back, exports it again and hands
 * the new descriptor to each importer over a unix socket in the out
 * directory; the importer imports it and maps it at its old address with
 * its old access.  The function's handle values stay what they were.
 *
 * Which import is which export.  An importer usually closes the descriptor
 * it imported, and the driver's descriptors need not have an inode of
 * their own (an anonymous inode is shared by all), so nothing the importer
 * can read names the allocation.  What does is the open file itself: the
 * descriptor passed by SCM_RIGHTS is the exporter's file.  So the library
 * keeps a dup of each descriptor exported or imported (<pid>.fds lists
 * them), and thawd, which may compare files of any two processes
 * (kcmp(KCMP_FILE) as root; the function's seccomp profile does not allow
 * kcmp, nor need it), writes shared.pairs before it asks SAVE.  The dups
 * are closed once the save has unmapped everything (they hold the memory
 * the driver must no longer see), and new ones kept after the restore.
 *
 * What is carried: an export whose every import thawd paired, mapped once
 * and whole, and an import thawd paired with its export, mapped once and
 * whole.  Anything else shared (a descriptor kind other than POSIX, an
 * import thawd could not pair, any process with an unpaired import, no
 * pairing at all: an older thawd) stays the driver's, as before.
 *
 * Ordering.  At SAVE, in two rounds through files of the out directory,
 * so that every process decides alike and none waits on one that waits on
 * it: each importer, its calls held and its contexts synchronised (no
 * kernel of it writes the memory any more), writes <pid>.quiet, the imports
 * it can let go of (one mapping, whole); each creator waits for those of
 * its importers, carries an export only where every importer can let go of
 * it, and writes <pid>.plan, what it carries; each importer lets go of
 * what its creator's plan names, and keeps (the driver's) the rest.  Only
 * then are the bytes copied.  At RESTORE a creator starts serving its
 * exports (a thread of its own) before it takes what it imports itself, so
 * two processes that import from each other never wait on each other; each
 * process's calls stay held until all it shares is back, the creator's
 * until each importer took its memory.  An importer that ended, or gave up
 * (GPUMEM_SHARE_ABANDON), fails its creators' restores at once; a creator
 * that ended fails its importers'; both wait at most SHARE_WAIT_MS.
 */
#include "interpose/gm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define QUIET_WAIT_MS 30000
#define SHARE_WAIT_MS 120000
#define PAIRS_MAGIC "thaw-shared-pairs 1"

/* thawd's pairing was read at the last save, and it paired every import
 * of the function's: exports may be carried. */
static bool pairing_whole;

enum gm_carry gm_carry_of(const struct gm_map *m)
{
	const struct gm_handle *h = m->h;

	if (!h || !h->rh || m->access_full || h->nmaps != 1 || m->offset || m->size != h->size)
		return GM_LEAVE;
	if (!h->shared)
		return GM_COPY;
	if (h->share_full || (h->exported && h->imported))
		return GM_LEAVE;
	if (h->imported)
		return h->creator ? GM_DROP : GM_LEAVE;
	return pairing_whole && !h->share_off ? GM_COPY : GM_LEAVE;
}

void gm_share_forget(void)
{
	/* Single-threaded here: the parent's lock state is of no matter. */
	for (size_t i = 0; i < gm_nhandles; i++)
		if (gm_handles[i]->shared) {
			gm_share_fds_close(gm_handles[i]);
			gm_handles[i]->share_full = true;
		}
}

static struct gm_handle *by_value(cu_handle vh)
{
	for (size_t i = 0; i < gm_nhandles; i++)
		if (gm_handles[i]->vh == vh && !gm_handles[i]->dead)
			return gm_handles[i];
	return NULL;
}

static struct gm_map *map_of(const struct gm_handle *h)
{
	for (struct gm_map *m = gm_maps; m; m = m->next)
		if (m->h == h)
			return m;
	return NULL;
}

void gm_share_fds_close(struct gm_handle *h)
{
	for (int i = 0; i < h->nfds; i++)
		close(h->fds[i]);
	h->nfds = 0;
}

void gm_share_fds_write(void)
{
	char path[4096], tmp[4200];
	bool any = false;
	FILE *f;
	int bad;

	if (!gm_out_dir)
		return;
	snprintf(path, sizeof(path), "%s/" GPUMEM_SHARE_FDS_FMT, gm_out_dir, (int)getpid());
	for (size_t i = 0; i < gm_nhandles; i++)
		any |= gm_handles[i]->nfds > 0;
	if (!any) {
		unlink(path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return;
	for (size_t i = 0; i < gm_nhandles; i++)
		for (int k = 0; k < gm_handles[i]->nfds; k++)
			fprintf(f, "%c %llu %d\n", gm_handles[i]->imported ? 'i' : 'e',
				(unsigned long long)gm_handles[i]->vh, gm_handles[i]->fds[k]);
	bad = ferror(f);
	if (fclose(f) || bad || rename(tmp, path))
		unlink(tmp);
}

void gm_share_pair(const char *dir)
{
	char path[4096], line[256];
	unsigned long long ivh, cvh;
	unsigned unpaired = 1;
	int ipid, cpid, me = (int)getpid();
	FILE *f;

	pairing_whole = false;
	for (size_t i = 0; i < gm_nhandles; i++) {
		gm_handles[i]->creator = 0;
		gm_handles[i]->creator_vh = 0;
		gm_handles[i]->nimporters = 0;
		gm_handles[i]->share_off = false;
		gm_handles[i]->carried = false;
	}
	snprintf(path, sizeof(path), "%s/" GPUMEM_SHARE_PAIRS, dir);
	f = fopen(path, "re");
	if (!f)
		return; /* nothing shared, or a thawd that does not pair */
	if (!fgets(line, sizeof(line), f) || strncmp(line, PAIRS_MAGIC " ", strlen(PAIRS_MAGIC) + 1) ||
	    sscanf(line + strlen(PAIRS_MAGIC), "%u", &unpaired) != 1 || unpaired) {
		/* An import nobody's known: the memory it maps must stay
		 * where it is, and so must every export it could be. */
		fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		struct gm_handle *h;

		if (sscanf(line, "%d %llu %d %llu", &ipid, &ivh, &cpid, &cvh) != 4)
			continue;
		if (ipid == me && (h = by_value((cu_handle)ivh)) && h->imported) {
			h->creator = cpid;
			h->creator_vh = (cu_handle)cvh;
		}
		if (cpid == me && (h = by_value((cu_handle)cvh)) && h->exported) {
			if (h->nimporters < GM_MAX_IMPORTERS)
				h->importers[h->nimporters++] = ipid;
			else
				h->share_full = true;
		}
	}
	fclose(f);
	pairing_whole = true;
}

/* The process has not ended (a zombie has). */
static bool alive(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true; /* no /proc: kill's word */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

static void share_fail(struct gpumem_record *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void share_fail(struct gpumem_record *r, const char *fmt, ...)
{
	va_list ap;

	r->ok = false;
	if (r->error[0])
		return;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	va_end(ap);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* What a file of another process's says for this save (seq on its first
 * line): -1 not yet (missing, or an older save's), else whether it has the
 * line want (want NULL: 1 once it is this save's). */
static int file_says(const char *path, unsigned seq, const char *want)
{
	char line[128];
	unsigned got = 0;
	int found = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "%u", &got) != 1 || got != seq) {
		fclose(f);
		return -1;
	}
	found = !want;
	while (!found && fgets(line, sizeof(line), f))
		found = !strcmp(line, want);
	fclose(f);
	return found;
}

/* Wait (bounded) for pid's file <pid>.<ext> of this save; file_says's answer, or
 * -1 with r's error (pid ended, or the deadline passed; role says what pid
 * is to this process). */
static int wait_says(const char *dir, const char *ext, pid_t pid, unsigned seq, const char *want,
		     double t0, const char *role, struct gpumem_record *r)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%d.%s", dir, (int)pid, ext);
	for (;;) {
		int k = file_says(path, seq, want);

		if (k >= 0)
			return k;
		if (!alive(pid)) {
			share_fail(r, "process %d, %s, ended during the save", (int)pid, role);
			return -1;
		}
		if (gm_now_ms() - t0 > QUIET_WAIT_MS) {
			share_fail(r, "process %d, %s, did not hold its calls within %d s", (int)pid,
				   role, QUIET_WAIT_MS / 1000);
			return -1;
		}
		sleep_ms(2);
	}
}

/* dir/<pid>.<ext>: "seq", then lines; written whole.  0 or -1 (r). */
static int write_says(const char *dir, const char *ext, unsigned seq, const char *lines,
		      struct gpumem_record *r)
{
	char path[4096], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d.%s", dir, (int)getpid(), ext);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f || fprintf(f, "%u\n%s", seq, lines) < 0 || fclose(f) || rename(tmp, path)) {
		share_fail(r, "%.200s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Lines of what this process is willing to carry (gm_carry_of): "i <creator>
 * <its value>" per import, or "e <value>" per export; malloc'd. */
static char *willing(bool imports)
{
	size_t cap = 64 * gm_nhandles + 1, k = 0;
	char *b = malloc(cap);

	if (!b)
		return NULL;
	b[0] = '\0';
	for (size_t i = 0; i < gm_nhandles; i++) {
		struct gm_handle *h = gm_handles[i];
		struct gm_map *m = map_of(h);
		int n;

		if (!m || gm_carry_of(m) == GM_LEAVE || (imports ? !h->imported : !h->exported))
			continue;
		n = imports ? snprintf(b + k, cap - k, "i %d %llu\n", (int)h->creator,
				       (unsigned long long)h->creator_vh) :
			      snprintf(b + k, cap - k, "e %llu\n", (unsigned long long)h->vh);
		if (n > 0 && (size_t)n < cap - k)
			k += (size_t)n;
	}
	return b;
}

int gm_share_agree(const char *dir, unsigned seq, struct gpumem_record *r)
{
	bool importer = false, creator = false;
	double t0 = gm_now_ms();
	char want[96], *lines;
	int ret = -1;

	for (size_t i = 0; i < gm_nhandles; i++) {
		importer |= gm_handles[i]->imported && gm_handles[i]->creator;
		creator |= gm_handles[i]->exported && gm_handles[i]->nimporters;
	}
	/* Round one: what each import could be carried as (its calls held,
	 * its contexts synchronised: no kernel of it writes them any more). */
	lines = importer ? willing(true) : NULL;
	if (importer && (!lines || write_says(dir, GPUMEM_SHARE_QUIET, seq, lines, r)))
		goto out;
	free(lines);
	lines = NULL;
	if (creator) {
		/* An export is carried when each of its importers can let go
		 * of it: else it stays the driver's everywhere. */
		for (size_t i = 0; i < gm_nhandles; i++) {
			struct gm_handle *h = gm_handles[i];
			struct gm_map *m = map_of(h);

			if (!h->exported || !h->nimporters || !m || gm_carry_of(m) == GM_LEAVE)
				continue;
			snprintf(want, sizeof(want), "i %d %llu\n", (int)getpid(),
				 (unsigned long long)h->vh);
			for (int k = 0; k < h->nimporters && !h->share_off; k++) {
				int w = wait_says(dir, GPUMEM_SHARE_QUIET, h->importers[k], seq,
						  want, t0, "which maps memory this one shares", r);

				if (w < 0)
					goto out;
				h->share_off = !w;
			}
		}
		/* Round two: what is carried, for the importers. */
		lines = willing(false);
		if (!lines || write_says(dir, GPUMEM_SHARE_PLAN, seq, lines, r))
			goto out;
	}
	/* An import is let go only where its creator carries it. */
	for (size_t i = 0; importer && i < gm_nhandles; i++) {
		struct gm_handle *h = gm_handles[i];
		struct gm_map *m = map_of(h);
		int w;

		if (!h->imported || !m || gm_carry_of(m) == GM_LEAVE)
			continue;
		snprintf(want, sizeof(want), "e %llu\n", (unsigned long long)h->creator_vh);
		w = wait_says(dir, GPUMEM_SHARE_PLAN, h->creator, seq, want, t0,
			      "whose memory this one maps", r);
		if (w < 0)
			goto out;
		if (!w)
			h->creator = 0;
	}
	ret = 0;
out:
	free(lines);
	if (ret && !r->error[0])
		share_fail(r, "no memory to agree on the shared allocations");
	return ret;
}

cu_result gm_share_remap(struct gm_map *m)
{
	cu_handle rh = 0;
	cu_result cr;

	if (!m->h->nfds)
		return CU_ERR_INVALID_VALUE;
	cr = gm_real.cuMemImportFromShareableHandle(&rh, (void *)(uintptr_t)m->h->fds[0],
						   CU_HANDLE_POSIX_FD);
	if (cr != CU_SUCCESS)
		return cr;
	cr = gm_map_handle(m, rh, true);
	if (cr != CU_SUCCESS)
		gm_real.cuMemRelease(rh);
	return cr;
}

/* --- the restore: a creator's server --- */

struct serve_entry {
	cu_handle vh;
	pid_t pid;
	int fd; /* the new export, -1: the creator has none to give */
	unsigned long long size;
	bool served;
};

struct server {
	int sock;
	struct serve_entry *e;
	int n;
	char error[GPUMEM_TEXT_MAX];
};

static int send_answer(int c, int err, unsigned long long size, int fd)
{
	struct gpumem_share_answer a = { .magic = GPUMEM_SHARE_MAGIC, .err = err, .size = size };
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &a, sizeof(a) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	memset(ctl, 0, sizeof(ctl));
	if (!err) {
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return sendmsg(c, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(a) ? 0 : -1;
}

/* One importer's question, answered. */
static void serve_one(struct server *s, int c)
{
	struct gpumem_share_ask ask;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	struct timeval tv = { .tv_sec = 5 };
	struct serve_entry *e = NULL;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) ||
	    recv(c, &ask, sizeof(ask), MSG_WAITALL) != (ssize_t)sizeof(ask) ||
	    ask.magic != GPUMEM_SHARE_MAGIC)
		return;
	/* Only the process thawd paired with the export gets it. */
	for (int i = 0; i < s->n && !e; i++)
		if (!s->e[i].served && s->e[i].vh == (cu_handle)ask.vh && s->e[i].pid == cred.pid)
			e = &s->e[i];
	if (!e) {
		send_answer(c, -ENOENT, 0, -1);
		return;
	}
	if (ask.flags & GPUMEM_SHARE_ABANDON) {
		e->served = true;
		if (!s->error[0])
			snprintf(s->error, sizeof(s->error),
				 "process %d, which maps memory this one shares, could not restore",
				 (int)cred.pid);
		send_answer(c, -ECANCELED, 0, -1);
		return;
	}
	if (send_answer(c, e->fd < 0 ? -EIO : 0, e->size, e->fd) == 0)
		e->served = true;
	gm_trace("share: handle %#llx handed to %d (%s)", (unsigned long long)e->vh, (int)cred.pid,
		 e->served ? "sent" : "not sent");
}

static void *serve(void *arg)
{
	struct server *s = arg;
	double t0 = gm_now_ms();

	for (;;) {
		struct pollfd p = { s->sock, POLLIN, 0 };
		int left = 0, live = 0;

		for (int i = 0; i < s->n; i++) {
			if (s->e[i].served)
				continue;
			left++;
			if (alive(s->e[i].pid))
				live++;
			else if (!s->error[0])
				snprintf(s->error, sizeof(s->error),
					 "process %d, which maps memory this one shares, ended "
					 "before it took it", (int)s->e[i].pid);
		}
		/* After a failure every live importer is still answered (each
		 * asks once an import, abandoning or not): one that found no
		 * one answering would wait for each ask's timeout in turn. */
		if (!left || (s->error[0] && !live))
			break;
		if (gm_now_ms() - t0 > SHARE_WAIT_MS) {
			snprintf(s->error, sizeof(s->error),
				 "%d process(es) that map memory this one shares did not take it "
				 "within %d s", left, SHARE_WAIT_MS / 1000);
			break;
		}
		if (poll(&p, 1, 100) > 0) {
			int c = accept4(s->sock, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0) {
				serve_one(s, c);
				close(c);
			}
		}
	}
	return NULL;
}

/* Bind dir/<pid>.share for the server; -1 with r's error. */
static int listen_at(const char *dir, struct server *s, struct gpumem_record *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" GPUMEM_SHARE_SOCK_FMT, dir,
			 (int)getpid());

	if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
		share_fail(r, "the out directory's path is too long for a socket");
		return -1;
	}
	unlink(sa.sun_path);
	s->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->sock < 0 || bind(s->sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(s->sock, 64)) {
		share_fail(r, "socket %.200s: %s", sa.sun_path, strerror(errno));
		if (s->sock >= 0)
			close(s->sock);
		s->sock = -1;
		return -1;
	}
	return 0;
}

/* --- the restore: an importer's side --- */

/* Ask creator for its export vh: the new descriptor, or -1 with r's error. */
static int ask_creator(const char *dir, pid_t creator, cu_handle vh, bool abandon,
		       struct gpumem_record *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct gpumem_share_ask ask = { .magic = GPUMEM_SHARE_MAGIC, .vh = vh,
					.flags = abandon ? GPUMEM_SHARE_ABANDON : 0 };
	struct gpumem_share_answer a;
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &a, sizeof(a) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	struct timeval tv = { .tv_sec = 30 };
	double t0 = gm_now_ms();
	int c = -1, fd = -1;
	ssize_t got;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" GPUMEM_SHARE_SOCK_FMT, dir, (int)creator);
	/* The creator listens once its own copy is done. */
	for (;;) {
		c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c < 0) {
			share_fail(r, "socket: %s", strerror(errno));
			return -1;
		}
		if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		close(c);
		if (!alive(creator)) {
			share_fail(r, "process %d, whose memory this one maps, ended before it "
				   "handed it over", (int)creator);
			return -1;
		}
		if (gm_now_ms() - t0 > SHARE_WAIT_MS) {
			share_fail(r, "process %d, whose memory this one maps, did not hand it "
				   "over within %d s", (int)creator, SHARE_WAIT_MS / 1000);
			return -1;
		}
		sleep_ms(5);
	}
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&a, 0, sizeof(a));
	if (send(c, &ask, sizeof(ask), MSG_NOSIGNAL) != (ssize_t)sizeof(ask)) {
		share_fail(r, "asking process %d for its memory: %s", (int)creator, strerror(errno));
		close(c);
		return -1;
	}
	got = recvmsg(c, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); got > 0 && cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	close(c);
	if (abandon) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (got != (ssize_t)sizeof(a) || a.magic != GPUMEM_SHARE_MAGIC || a.err || fd < 0) {
		share_fail(r, "process %d did not hand over the memory this one maps: %s",
			   (int)creator,
			   got != (ssize_t)sizeof(a) ? "no answer" : a.err ? strerror(-a.err) :
			   "no descriptor");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* m's memory from its creator, mapped at its address; 0 or -1. */
static int take_import(const char *dir, struct gm_map *m, struct gpumem_record *r)
{
	struct gm_handle *h = m->h;
	cu_handle rh = 0;
	char ebuf[32];
	cu_result cr;
	int fd;

	gm_trace("share: asking %d for %#llx", (int)h->creator, (unsigned long long)h->creator_vh);
	fd = ask_creator(dir, h->creator, h->creator_vh, false, r);
	if (fd < 0)
		return -1;
	gm_trace("share: importing and mapping it at %#llx", (unsigned long long)m->va);
	cr = gm_real.cuMemImportFromShareableHandle(&rh, (void *)(uintptr_t)fd,
						   CU_HANDLE_POSIX_FD);
	if (cr == CU_SUCCESS) {
		cr = gm_map_handle(m, rh, true);
		if (cr != CU_SUCCESS)
			gm_real.cuMemRelease(rh);
	}
	if (cr != CU_SUCCESS) {
		close(fd);
		share_fail(r, "mapping the memory of process %d: %s", (int)h->creator,
			   gm_error_name(cr, ebuf, sizeof(ebuf)));
		return -1;
	}
	/* Kept for the next save's pairing. */
	gm_share_fds_close(h);
	h->fds[h->nfds++] = fd;
	return 0;
}

/* A new export of h (mapped at m), kept in h->fds; -1 with r's error. */
static int export_again(struct gm_handle *h, struct gm_map *m, struct gpumem_record *r)
{
	cu_handle tmp = 0;
	char ebuf[32];
	cu_result cr;
	int fd = -1;

	/* A handle of the memory even where the function released its own. */
	gm_trace("share: exporting %#llx again", (unsigned long long)m->va);
	cr = gm_real.cuMemRetainAllocationHandle(&tmp, (void *)(uintptr_t)m->va);
	if (cr == CU_SUCCESS) {
		cr = gm_real.cuMemExportToShareableHandle(&fd, tmp, CU_HANDLE_POSIX_FD, 0);
		gm_real.cuMemRelease(tmp);
	}
	if (cr != CU_SUCCESS) {
		share_fail(r, "exporting shared memory again: %s",
			   gm_error_name(cr, ebuf, sizeof(ebuf)));
		return -1;
	}
	gm_share_fds_close(h);
	h->fds[h->nfds++] = fd;
	return 0;
}

void gm_share_restore(const char *dir, struct gpumem_record *r)
{
	struct server s = { .sock = -1 };
	pthread_t t;
	bool serving = false;
	char path[4096];
	int n = 0;

	if (!dir)
		return;
	/* What the creator hands over: an entry per import thawd paired. */
	for (size_t i = 0; i < gm_nhandles; i++)
		if (gm_handles[i]->carried && gm_handles[i]->exported)
			n += gm_handles[i]->nimporters;
	if (n) {
		s.e = calloc((size_t)n, sizeof(*s.e));
		if (!s.e)
			share_fail(r, "no memory for the shared allocations' importers");
	}
	for (size_t i = 0; s.e && i < gm_nhandles; i++) {
		struct gm_handle *h = gm_handles[i];
		struct gm_map *m = map_of(h);
		int fd = -1;

		if (!h->carried || !h->exported || !h->nimporters)
			continue;
		/* Only memory that came back is handed over; else each importer
		 * is told, and fails rather than wait.  What thawd filled is
		 * handed over as thawd's own export (prefill.c). */
		if (r->ok && m && !m->saved && ((h->fill_fd && h->nfds > 0) ||
						 export_again(h, m, r) == 0)) {
			fd = h->fds[0];
			r->shared_allocs++;
			r->shared_bytes += m->size;
		}
		for (int k = 0; k < h->nimporters; k++)
			s.e[s.n++] = (struct serve_entry){ h->vh, h->importers[k], fd, h->size, false };
	}
	for (size_t i = 0; i < gm_nhandles; i++)
		gm_handles[i]->fill_fd = false;
	gm_trace("share: %d import(s) of this process's memory to serve", s.n);
	if (s.n && listen_at(dir, &s, r) == 0) {
		if (pthread_create(&t, NULL, serve, &s) == 0)
			serving = true;
		else
			share_fail(r, "no thread to hand shared memory over");
	}
	/* What this process imports, from each creator (serving meanwhile). */
	for (struct gm_map *m = gm_maps; m; m = m->next) {
		if (!m->saved || !m->h->imported || !m->h->carried)
			continue;
		if (!r->ok || take_import(dir, m, r)) {
			/* Its creators are told at once. */
			ask_creator(dir, m->h->creator, m->h->creator_vh, true, r);
			continue;
		}
		r->shared_allocs++;
		r->shared_bytes += m->size;
	}
	if (serving) {
		gm_trace("share: waiting for the importers");
		pthread_join(t, NULL);
		if (s.error[0])
			share_fail(r, "%s", s.error);
	}
	if (s.sock >= 0) {
		close(s.sock);
		snprintf(path, sizeof(path), "%s/" GPUMEM_SHARE_SOCK_FMT, dir, (int)getpid());
		unlink(path);
	}
	free(s.e);
	gm_share_fds_write();
}
