/* SPDX-License-Identifier: Apache-2.0 */
/* util.h — small helpers every module uses: time, files, paths, hex, progress.
 * Actions return 0 or -errno and log the failure once (pr_err/pr_perror).
 */
#ifndef THAW_UTIL_H
#define THAW_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

/* Linux 5.14; glibc 2.36's headers may lack it.  Prefaulting a shared file
 * mapping with it makes a full tmpfs an error (ENOSPC) rather than a SIGBUS
 * at the write that touches the page. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b)     ((a) < (b) ? (a) : (b))
#define MAX(a, b)     ((a) > (b) ? (a) : (b))
#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))

/* Make room for need items of size bytes in the array *items, which has room
 * for *cap now (git's ALLOC_GROW): where need > *cap, realloc() it to twice
 * *cap (to first where *cap is 0), doubled again until need fits.  The items
 * there are kept, the new room is not cleared.  0, or -ENOMEM with *items and
 * *cap as they were.  Call it through ARRAY_GROW. */
int array_grow(void **items, size_t *cap, size_t need, size_t size, size_t first);
/* array_grow for an array of any type, whose size_t capacity is cap:
 *	if (ARRAY_GROW(v, cap, n + 1, 64)) return -ENOMEM;  v[n++] = x; */
#define ARRAY_GROW(items, cap, need, first)                                                        \
	({                                                                                         \
		void *ag_items_ = (items);                                                         \
		int ag_ret_ = array_grow(&ag_items_, &(cap), (need), sizeof(*(items)), (first));   \
		(items) = ag_items_;                                                               \
		ag_ret_;                                                                           \
	})

/* Monotonic clock in nanoseconds, and milliseconds elapsed since such a reading. */
uint64_t now_ns(void);
double ms_since(uint64_t start_ns);
/* The wall clock (CLOCK_REALTIME) in ms: for times other processes read. */
uint64_t realtime_ms(void);
/* cv made so that its timed waits run on now_ns()'s clock (CLOCK_MONOTONIC):
 * a wall clock set back must not stretch a wait.  0, or the error number
 * pthread_cond_init gave. */
int cond_init_monotonic(pthread_cond_t *cv);
/* now_ns() reading ns as the deadline pthread_cond_timedwait takes on such
 * a cv; mono_after_ms(ms): the reading ms from now. */
struct timespec mono_timespec(uint64_t ns);
struct timespec mono_after_ms(uint64_t ms);

/* For benchmarks that read cold: the page cache dropped, all of it
 * (/proc/sys/vm/drop_caches at level, 1 or 3) where this process may, else
 * each regular file under every one of trees written back and advised out
 * (fdatasync, POSIX_FADV_DONTNEED).  true where the whole cache went. */
bool page_cache_drop(int level, const char *const *trees, size_t ntrees);

/* mkdir -p; existing directories are fine (left as they are), those it makes
 * have exactly mode, whatever the umask.  0 or -errno (logged). */
int mkdir_p(const char *path, mode_t mode);
/* mkdir_p(path, 0700), and an existing directory path that this process's
 * user owns made 0700 too: thawd's data directory, its parts and its RAM tier
 * hold every function's secrets and every snapshot's memory, and an older
 * thawd (or a umask) may have left them open to other users.  A directory
 * someone else owns is left as it is (logged).  0 or -errno (logged). */
int dir_make_private(const char *path);
/* rm -rf; a missing path is fine.  Does not cross into other mounts. */
int rm_rf(const char *path);
/* /proc/self/mountinfo escapes ' ', '\t', '\n' and '\\' in its paths as
 * \ooo: undo it in place. */
void mountinfo_unescape(char *s);
/* Open path (created with mode if missing) and flock it with how (LOCK_SH,
 * LOCK_EX, | LOCK_NB): the fd, which holds the lock until closed, or -errno
 * (logged, but for -EWOULDBLOCK with LOCK_NB). */
int lock_path(const char *path, int how, mode_t mode);

/* Call in a child just forked (it makes only async-signal-safe calls): the
 * child detaches from its starter, in a session of its own and not its
 * child (it forks again and the middle process exits at once, so the starter
 * waitpid()s the pid its fork returned and is left no zombie), with the
 * signal mask cleared, SIGPIPE and SIGCHLD at their defaults and SIGHUP
 * ignored, the n (at most 8) descriptors of keep at 3, 4, … (a -1 there
 * stays closed), stdin, stdout and stderr on /dev/null, and nothing else
 * open: a listening socket or another instance's pipe held there would
 * outlive its owner.  Returns in the detached process only. */
void detach_child(const int *keep, size_t n);
/* fsync the directory itself, so that a rename/link inside it is durable. */
int fsync_dir(const char *dir);
/* Write a whole file crash-safely: temp file beside it, fsync, rename, fsync dir.
 * A reader sees the old content or the new, never a part. */
int write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode);
/* Read a whole file of at most max bytes into a new NUL-terminated buffer
 * (you own *buf); -EFBIG if it is larger. */
int read_file(const char *path, char **buf, size_t *len, size_t max);
/* Read a whole file of at most cap bytes into buf; *len its size.  -EFBIG
 * if it is larger, else 0 or -errno (-ENOENT: no such file). */
int read_file_into(const char *path, void *buf, size_t cap, size_t *len);
/* Populate the pages under len bytes at p of a shared writable mapping
 * (MADV_POPULATE_WRITE) before they are written: a full tmpfs is then
 * -ENOSPC here, never a SIGBUS at the write.  0 or -errno (-EINVAL: a
 * kernel before 5.14). */
int populate_write(void *p, size_t len);
/* Write/read all of buf, retrying short transfers and EINTR. */
int write_all(int fd, const void *buf, size_t len);
int pwrite_all(int fd, const void *buf, size_t len, off_t off);
/* Read up to len bytes at off into buf, retrying short reads and EINTR: the
 * count (less than len only where the file ends first), or -errno. */
ssize_t pread_upto(int fd, void *buf, size_t len, off_t off);

/* len bytes aligned to 2 MiB and asked to be backed by huge pages (where the
 * kernel's THP setting is madvise or always): for buffers that are copied
 * through and handed to O_DIRECT, so that the copy misses the TLB less and a
 * write pins two pages rather than a thousand.  free() it. */
void *alloc_huge(size_t len);

/* A function or instance id: [a-z0-9][a-z0-9._-]{0,62}.  Such an id is safe as
 * one path component (no '/', never "." or ".."). */
bool id_valid(const char *id);

/* Whether err (a positive errno) is this process's own want of descriptors,
 * memory or buffers: it says nothing of what the call was about, and passes
 * as other work gives them back. */
bool errno_own_want(int err);

/* Lowercase hex of n bytes into out (2n+1 bytes with the NUL). */
void hex_encode(const uint8_t *in, size_t n, char *out);
/* Exactly 2n hex digits into n bytes; -EINVAL otherwise. */
int hex_decode(const char *in, uint8_t *out, size_t n);

/* "1.50 GiB" style; returns buf. */
const char *fmt_bytes(uint64_t bytes, char buf[32]);

/* A progress line on stderr for long work, drawn only when stderr is a
 * terminal, at most ~10 times a second:  "put  1.2 GiB / 4.0 GiB  850 MB/s". */
struct progress {
	const char *label;
	uint64_t total; /* 0 if unknown */
	uint64_t start_ns;
	uint64_t last_draw_ns;
	bool enabled;
};
void progress_init(struct progress *p, const char *label, uint64_t total);
void progress_update(struct progress *p, uint64_t done);
/* Clear the line (the caller prints its own summary). */
void progress_done(struct progress *p);

#endif
