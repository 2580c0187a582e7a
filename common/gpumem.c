/* SPDX-License-Identifier: Apache-2.0 */
/* gpumem.c — see gpumem.h. */
#define LOG_PREFIX "gpumem: "
#include "common/gpumem.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


/* Whether pid's maps name a file whose path contains what. */
static bool maps_have(pid_t pid, const char *what)
{
	char path[64], line[PATH_MAX + 128];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Why the library is not in pid, as far as can be told from outside: a
 * statically linked program (no dynamic loader mapped), no LD_PRELOAD,
 * secure-execution mode (AT_SECURE: ld.so ignores a preload path with a
 * slash), or the library missing where the process looks. */
static void why_not_loaded(pid_t pid, char *buf, size_t len)
{
	char path[128], env[8192], preload[256] = "", exe[256] = "", cause[160];
	unsigned long aux[2];
	bool secure = false, seen = false;
	struct stat st;
	size_t n = 0;
	ssize_t k;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	f = fopen(path, "re");
	if (f) {
		n = fread(env, 1, sizeof(env) - 1, f);
		fclose(f);
	}
	env[n] = '\0';
	for (size_t i = 0; i < n; i += strlen(env + i) + 1)
		if (!strncmp(env + i, "LD_PRELOAD=", 11)) {
			snprintf(preload, sizeof(preload), "%s", env + i + 11);
			seen = true;
		}
	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)pid);
	f = fopen(path, "re");
	while (f && fread(aux, sizeof(aux), 1, f) == 1 && aux[0] != 0)
		if (aux[0] == 23 /* AT_SECURE */)
			secure = aux[1] != 0;
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	k = readlink(path, exe, sizeof(exe) - 1);
	exe[k > 0 ? k : 0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/root%s/%s", (int)pid, GPUMEM_IN_DEST,
		 GPUMEM_LIB_NAME);
	if (!maps_have(pid, "/ld-linux") && !maps_have(pid, "/ld-musl"))
		snprintf(cause, sizeof(cause), "a statically linked program: LD_PRELOAD has no effect");
	else if (!seen)
		snprintf(cause, sizeof(cause), "no LD_PRELOAD in its environment");
	else if (secure)
		snprintf(cause, sizeof(cause), "it runs in secure-execution mode (AT_SECURE), where "
			 "ld.so ignores LD_PRELOAD=%.60s", preload);
	else if (stat(path, &st))
		snprintf(cause, sizeof(cause), "%s/%s is not there as it sees it", GPUMEM_IN_DEST,
			 GPUMEM_LIB_NAME);
	else
		snprintf(cause, sizeof(cause), "LD_PRELOAD=%.60s did not load (the function's log "
			 "may say why)", preload);
	snprintf(buf, len, "libthaw-cuda.so is not loaded in process %d (%s): %s", (int)pid,
		 exe[0] ? exe : "?", cause);
}

bool gpumem_loaded(pid_t pid)
{
	return maps_have(pid, "/" GPUMEM_LIB_NAME);
}

static void status_path(const char *dir, pid_t ns_pid, char *buf, size_t len)
{
	snprintf(buf, len, "%s/" GPUMEM_STATUS_FMT, dir, (int)ns_pid);
}

static uint64_t num(const json_t *o, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(o, k));

	return v > 0 ? (uint64_t)v : 0;
}

static double ms_of(const json_t *o, const char *k)
{
	return json_number_value(json_object_get(json_object_get(o, "ms"), k));
}

static void text_of(const json_t *o, const char *k, char *out, size_t len)
{
	snprintf(out, len, "%s", json_string_value(json_object_get(o, k)) ?: "");
}

static void devs_of(const json_t *o, const char *k, uint64_t *out, size_t n)
{
	const json_t *a = json_object_get(o, k);

	for (size_t i = 0; i < n; i++) {
		json_int_t v = json_integer_value(json_array_get(a, i));

		out[i] = v > 0 ? (uint64_t)v : 0;
	}
}

/* One field of the record, by its kind (gpumem_protocol.h). */
#define PARSE_BOOL(name, key) st->name = json_is_true(json_object_get(o, key));
#define PARSE_U64(name, key) st->name = num(o, key);
#define PARSE_INT(name, key) st->name = (int)num(o, key);
#define PARSE_MS(name, key) st->name = ms_of(o, key);
#define PARSE_DBL(name, key) st->name = json_number_value(json_object_get(o, key));
#define PARSE_TEXT(name, key) text_of(o, key, st->name, sizeof(st->name));
#define PARSE_DEVS(name, key) devs_of(o, key, st->name, ARRAY_SIZE(st->name));
#define PARSE_FIELD(kind, name, key) PARSE_##kind(name, key)

/* Parse an answer to seq; 1 when it is that answer, 0 when not (yet). */
static int parse(const char *text, unsigned seq, struct gpumem_status *st)
{
	json_t *o = json_loads(text, 0, NULL);

	if (!o || num(o, "seq") != seq) {
		json_decref(o);
		return 0;
	}
	st->answered = true;
	GPUMEM_RECORD_FIELDS(PARSE_FIELD)
	json_decref(o);
	return 1;
}

static const char *op_name(enum gpumem_op op)
{
	return op == GPUMEM_OP_SAVE ? "save" : op == GPUMEM_OP_RESTORE ? "restore" : "release";
}

int gpumem_request(const pid_t *pids, const pid_t *ns_pids, size_t n, enum gpumem_op op,
		   const char *out_dir, unsigned timeout_ms, struct gpumem_status *st)
{
	static unsigned next_seq;
	unsigned seq = (__atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED) & 0x7ffffff) | 1;
	uint64_t t0 = now_ns();
	size_t left = n;
	char path[PATH_MAX];
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		memset(&st[i], 0, sizeof(st[i]));
		status_path(out_dir, ns_pids[i], path, sizeof(path));
		unlink(path);
	}
	for (size_t i = 0; i < n; i++) {
		union sigval v = { .sival_int = GPUMEM_VALUE(op, seq) };

		if (sigqueue(pids[i], GPUMEM_SIGNAL, v) < 0) {
			snprintf(st[i].error, sizeof(st[i].error), "process %d: %s", (int)pids[i],
				 strerror(errno));
			st[i].answered = true; /* nothing will come */
			ret = -ESRCH;
			left--;
		}
	}
	while (left > 0) {
		for (size_t i = 0; i < n; i++) {
			char *text = NULL;
			size_t len;

			if (st[i].answered)
				continue;
			status_path(out_dir, ns_pids[i], path, sizeof(path));
			if (read_file(path, &text, &len, 1 << 16) == 0 && parse(text, seq, &st[i])) {
				unlink(path);
				left--;
			} else if (kill(pids[i], 0) < 0 && errno == ESRCH) {
				snprintf(st[i].error, sizeof(st[i].error),
					 "process %d ended before it answered", (int)pids[i]);
				st[i].answered = true;
				ret = -ESRCH;
				left--;
			}
			free(text);
		}
		if (left && ms_since(t0) > timeout_ms) {
			for (size_t i = 0; i < n; i++)
				if (!st[i].answered)
					snprintf(st[i].error, sizeof(st[i].error),
						 "process %d did not answer the %s within %u ms",
						 (int)pids[i], op_name(op), timeout_ms);
			return -ETIMEDOUT;
		}
		if (left)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	for (size_t i = 0; i < n; i++)
		if (st[i].answered && !st[i].ok && !st[i].error[0])
			snprintf(st[i].error, sizeof(st[i].error), "the %s failed", op_name(op));
	return ret;
}

/* A descriptor a process kept of what it exported or imported
 * (GPUMEM_SHARE_FDS_FMT). */
struct share_fd {
	size_t proc;
	bool imported;
	unsigned long long vh;
	int fd;
};

/* Each process's kept descriptors appended to *a; 0 or -ENOMEM. */
static int share_fds_read(const pid_t *ns_pids, size_t n, const char *out_dir,
			  struct share_fd **a, size_t *na)
{
	size_t cap = 0;

	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX], name[32], *text = NULL, *line, *save = NULL;
		size_t len;

		snprintf(name, sizeof(name), GPUMEM_SHARE_FDS_FMT, (int)ns_pids[i]);
		snprintf(path, sizeof(path), "%s/%s", out_dir, name);
		if (read_file(path, &text, &len, 1 << 20))
			continue;
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			struct share_fd f = { .proc = i };
			char kind;

			if (sscanf(line, "%c %llu %d", &kind, &f.vh, &f.fd) != 3 ||
			    (kind != 'e' && kind != 'i'))
				continue;
			f.imported = kind == 'i';
			if (*na == cap) {
				struct share_fd *b = realloc(*a, (cap ? cap * 2 : 16) * sizeof(**a));

				if (!b) {
					free(text);
					return -ENOMEM;
				}
				*a = b;
				cap = cap ? cap * 2 : 16;
			}
			(*a)[(*na)++] = f;
		}
		free(text);
	}
	return 0;
}

/* Which import is which export, for the libraries' SAVE (interpose/share.c
 * says why thawd decides it): an import and an export of two processes
 * whose kept descriptors are one open file (kcmp(KCMP_FILE), allowed to
 * thawd, not to the function) are one allocation.  Written whole as
 * GPUMEM_SHARE_PAIRS, with the count of imports nobody's export was found
 * for (the libraries then leave everything shared to the driver), unseen
 * (CUDA processes without the library, whose imports nobody can tell)
 * counted among them; removed when nothing is shared. */
static void share_pair(const pid_t *pids, const pid_t *ns_pids, size_t n, const char *out_dir,
		       size_t unseen)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	struct share_fd *a = NULL;
	size_t na = 0, pairs = 0, unpaired = 0;
	FILE *f = NULL;
	int bad = 0;

	/* An earlier save's word is never taken for this one's. */
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%d." GPUMEM_SHARE_QUIET, out_dir, (int)ns_pids[i]);
		unlink(path);
		snprintf(path, sizeof(path), "%s/%d." GPUMEM_SHARE_PLAN, out_dir, (int)ns_pids[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/" GPUMEM_SHARE_PAIRS, out_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (share_fds_read(ns_pids, n, out_dir, &a, &na) || !na) {
		unlink(path);
		goto out;
	}
	f = fopen(tmp, "we");
	if (!f) {
		pr_warn("%s: %s", tmp, strerror(errno));
		unlink(path);
		goto out;
	}
	/* The pairs first, the header (with the count) last: written at the
	 * front once known. */
	fprintf(f, "%-40s\n", "");
	for (size_t i = 0; i < na; i++) {
		size_t e;

		if (!a[i].imported)
			continue;
		for (e = 0; e < na; e++)
			if (!a[e].imported && a[e].proc != a[i].proc &&
			    syscall(SYS_kcmp, pids[a[i].proc], pids[a[e].proc], KCMP_FILE, a[i].fd,
				    a[e].fd) == 0)
				break;
		if (e == na) {
			unpaired++;
			continue;
		}
		fprintf(f, "%d %llu %d %llu\n", (int)ns_pids[a[i].proc], a[i].vh,
			(int)ns_pids[a[e].proc], a[e].vh);
		pairs++;
	}
	bad = fseek(f, 0, SEEK_SET) ||
	      fprintf(f, "thaw-shared-pairs 1 %zu", unpaired + unseen) < 0;
	bad |= ferror(f);
	if (fclose(f) || bad || rename(tmp, path)) {
		pr_warn("%s: could not be written", path);
		unlink(tmp);
		unlink(path);
		goto out;
	}
	if (unpaired || unseen)
		pr_warn("%zu import(s) of shared GPU memory match no export of the function's "
			"processes, %zu CUDA process(es) have no libthaw-cuda: all of its shared "
			"memory is left to the driver", unpaired, unseen);
	else
		pr_info("%zu import(s) of shared GPU memory paired with their exports", pairs);
out:
	free(a);
}

int gpumem_save_all(const pid_t *pids, const pid_t *ns_pids, size_t n, const char *out_dir,
		    unsigned timeout_ms, struct gpumem_status *st, size_t *moved, char *why,
		    size_t whylen)
{
	pid_t *ask = calloc(n + 1, sizeof(*ask)), *ask_ns = calloc(n + 1, sizeof(*ask_ns));
	struct gpumem_status *got = calloc(n + 1, sizeof(*got));
	size_t k = 0, *idx = calloc(n + 1, sizeof(*idx));
	int ret = 0;

	*moved = 0;
	why[0] = '\0';
	if (!ask || !ask_ns || !got || !idx) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		memset(&st[i], 0, sizeof(st[i]));
		if (gpumem_loaded(pids[i])) {
			ask[k] = pids[i];
			ask_ns[k] = ns_pids[i];
			idx[k++] = i;
			continue;
		}
		st[i].answered = true;
		why_not_loaded(pids[i], st[i].error, sizeof(st[i].error));
	}
	if (k) {
		share_pair(ask, ask_ns, k, out_dir, n - k);
		ret = gpumem_request(ask, ask_ns, k, GPUMEM_OP_SAVE, out_dir, timeout_ms, got);
	}
	for (size_t j = 0; j < k; j++) {
		st[idx[j]] = got[j];
		/* A save that failed and could not put the memory back: the
		 * process is held without it, and cannot be snapshotted. */
		if (got[j].held && !ret)
			ret = -EIO;
		if (gpumem_carried(&got[j]))
			(*moved)++;
		else if (got[j].ok)
			snprintf(st[idx[j]].error, sizeof(st[idx[j]].error),
				 "process %d holds no device memory libthaw-cuda can move",
				 (int)ask[j]);
	}
	for (size_t i = 0; !*moved && i < n; i++)
		if (st[i].error[0]) {
			snprintf(why, whylen, "%s", st[i].error);
			break;
		}
out:
	free(ask);
	free(ask_ns);
	free(got);
	free(idx);
	return ret;
}

void gpumem_release(const pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		union sigval v = { .sival_int = GPUMEM_VALUE(GPUMEM_OP_RELEASE, 0) };

		/* The signal would end a process without the library. */
		if (!gpumem_loaded(pids[i]))
			continue;
		if (sigqueue(pids[i], GPUMEM_SIGNAL, v) < 0 && errno != ESRCH)
			pr_warn("release of process %d: %s", (int)pids[i], strerror(errno));
	}
}

int gpumem_library(char *path, size_t len, char *why, size_t whylen)
{
	const char *env = getenv("THAW_GPUMEM_LIB");
	char self[PATH_MAX];
	ssize_t k;
	char *slash;

	if (env && *env) {
		snprintf(path, len, "%s", env);
	} else {
		k = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (k < 0) {
			snprintf(why, whylen, "/proc/self/exe: %s", strerror(errno));
			return -ENOENT;
		}
		self[k] = '\0';
		slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		if (snprintf(path, len, "%s/%s", self, GPUMEM_LIB_NAME) >= (int)len)
			return -ENAMETOOLONG;
	}
	if (access(path, R_OK) < 0) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -ENOENT;
	}
	return 0;
}

void gpumem_describe(const struct gpumem_status *st, char *buf, size_t len)
{
	char a[32], b[32], c[32], shared[80] = "";

	/* Memory shared with the function's other processes, carried by the
	 * libraries: made here and saved with the rest, or imported and
	 * handed back by its creator. */
	if (st->shared_allocs)
		snprintf(shared, sizeof(shared), "; %llu shared, %s",
			 (unsigned long long)st->shared_allocs, fmt_bytes(st->shared_bytes, c));
	snprintf(buf, len, "%llu allocation(s), %s moved (%.1f ms)%s; %llu, %s left to the driver",
		 (unsigned long long)st->allocs, fmt_bytes(st->bytes, a), st->total_ms, shared,
		 (unsigned long long)st->left_allocs, fmt_bytes(st->left_bytes, b));
}
