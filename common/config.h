/* SPDX-License-Identifier: Apache-2.0 */
/* config.h — where thaw keeps things and which external programs it runs.
 * One struct, filled with defaults, then overridden by flags/environment,
 * shared by the CLI and thawd.
 */
#ifndef THAW_CONFIG_H
#define THAW_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Restore pages on demand (lazy-pages) or all before the start answers.
 * AUTO: lazily, but a GPU function eagerly when the daemon is CRIU's, or when
 * more than lazy_max_gpu_starts GPU starts (this one included) are in flight.
 * This decides only where mapped restore does not apply (restore/mapped.h).
 * Why (bench/LOG.md, "Sparse and lazy images" and "Bursts: lazy, eager, and
 * auto"): lazily, a CPU function answers sooner, and so does a GPU function
 * with thaw's daemon (its copy threads fill the image while the CUDA restore
 * runs), but not with CRIU's (the driver's restore faults the GPU state in
 * through userfaultfd page by page), and not in a burst of GPU starts (the
 * copying is the same, and a saturated machine has nothing to overlap it with). */
enum config_lazy { CONFIG_LAZY_AUTO, CONFIG_LAZY_ON, CONFIG_LAZY_OFF };
/* AUTO's limit: lazy while at most this many GPU starts are in flight.
 * 1: only a GPU start with no other in flight.  On the H100 (bench/LOG.md,
 * "Bursts: lazy, eager, and auto") with 1 the first start of a burst goes
 * lazily, much sooner, and the burst's p50 stays at all-eager's; with 2 the
 * two lazy ones' copying slowed the rest below all-eager. */
#define CONFIG_LAZY_MAX_GPU_STARTS_DEFAULT 1

/* The RAM tier on its own tmpfs with transparent huge pages (restore/tier.h,
 * tier_root_prepare).  AUTO: where it can, and only for the default root
 * (CONFIG_RAM_TIER_DEFAULT): a test or a user pointing the tier at a scratch
 * directory expects to rm -rf it, and a mount left there by a crash would
 * hold RAM and refuse that; ON (THAW_TIER_HUGE=1): for any root, and an error
 * where it cannot; OFF: a plain directory. */
enum config_huge { CONFIG_HUGE_AUTO, CONFIG_HUGE_ON, CONFIG_HUGE_OFF };
#define CONFIG_RAM_TIER_DEFAULT "/dev/shm/thaw"

/* The store's settings (store/store.h, store_open_with). */
struct config_store {
	bool loose;	/* $THAW_STORE_LAYOUT pack|loose: new chunks into pack files
			 * (pack, the default) or a file each (loose) */
	bool direct;	/* $THAW_STORE_DIRECT 1|0: packs written with O_DIRECT;
			 * default 1 */
	bool map_input; /* $THAW_STORE_MAP 1|0: a put maps input files of 8 MiB
			 * and more instead of read(); default 1 */
};

/* A function's output (an instance's function.log, a snapshot job's log) is
 * rotated when it reaches this many bytes, so that at most twice as much is
 * kept (common/logfile.h). */
#define CONFIG_LOG_BYTES_DEFAULT (1ull << 20)
#define CONFIG_LOG_BYTES_MIN     (4ull << 10)
#define CONFIG_LOG_BYTES_MAX     (1ull << 40)

/* Directories a function's "bundle", "cwd" and mounts may lie under (config_path_allowed). */
#define CONFIG_MAX_ROOTS 16

struct json_t; /* jansson's */

struct thaw_config {
	char data_dir[PATH_MAX];     /* store/ snapshots/ functions/ instances/ live here */
	char store_dir[PATH_MAX];    /* default <data_dir>/store */
	char ram_tier_dir[PATH_MAX]; /* default /dev/shm/thaw */
	uint64_t ram_tier_bytes;     /* budget of the RAM tier; default half of /dev/shm */
	char runc[PATH_MAX];         /* runc binary; default "runc" on PATH */
	char criu[PATH_MAX];         /* criu to hand to runc --criu: default the .deps wrapper
				      * beside the build, else a system criu >= 4.2 */
	enum config_lazy lazy;       /* how to restore when neither the start nor the
				      * function's spec says; default CONFIG_LAZY_AUTO */
	char lazy_daemon[PATH_MAX];  /* the thaw binary whose `lazy-pages` serves lazy
				      * restores (thaw's own daemon, the default), or ""
				      * for `criu lazy-pages` (THAW_LAZY_DAEMON=criu) */
	int lazy_max_gpu_starts;     /* AUTO restores a GPU function lazily while at most
				      * this many GPU starts of this process, this one
				      * included, are in flight ($THAW_LAZY_MAX_GPU_STARTS;
				      * default 1; 0: GPU functions always eagerly; -1: no
				      * limit) */
	enum config_huge tier_huge;  /* $THAW_TIER_HUGE auto|1|0; default CONFIG_HUGE_AUTO */
	uint64_t mapped_min;         /* restore by mapping (restore/mapped.h) the private
				      * VMAs holding at least this many bytes of pages:
				      * $THAW_MAPPED 1|0 (default 1), $THAW_MAPPED_MIN_KIB
				      * (default 1024); 0: never mapped */
	/* Where a function's "bundle", "cwd" and mounts' sources may be: the
	 * tree's example functions (bench/functions beside the build), and
	 * $THAW_ALLOW_ROOTS (DIR:DIR) or thawd --allow-root DIR.  A spec that
	 * names a directory elsewhere (/usr, /etc, /) is refused: a function
	 * runs as root in its container and could read or write it.  Never
	 * the data directory, the store or the RAM tier, nor a directory that
	 * holds one, whatever the roots (function/confine.h). */
	char allow_roots[CONFIG_MAX_ROOTS][PATH_MAX];
	size_t nallow_roots;
	bool lazy_gpu_after_fill;    /* a lazy GPU start waits for the daemon to have
				      * served every page before the CUDA restore
				      * ($THAW_LAZY_GPU_AFTER_FILL 1|0; default 0): the
				      * driver's restore then reads filled memory and
				      * does not share the memory bus with the copy */
	struct config_store store;   /* $THAW_STORE_LAYOUT, _DIRECT, _MAP */
	/* A containers auth file (skopeo's --authfile: registry credentials
	 * for a spec's "image"), $THAW_REGISTRY_AUTH or thawd --registry-auth;
	 * "" none.  Its path only: the credentials are never read or logged here. */
	char registry_auth[PATH_MAX];
	/* The host uids (and gids) functions in a user namespace are mapped
	 * to, a range of USERNS_RANGE_SIZE per function (function/userns.h):
	 * $THAW_USERNS_POOL or thawd --userns-pool, START:COUNT, or a file
	 * in /etc/subuid's form whose line for "thaw" says it; default
	 * CONFIG_USERNS_POOL_BASE:CONFIG_USERNS_POOL_COUNT. */
	uint32_t userns_base, userns_count;
	/* Whether a function whose spec does not say "userns" runs in a user
	 * namespace where the host supports it (function_userns; default on;
	 * $THAW_USERNS_DEFAULT=0, thawd --no-userns: off). */
	bool userns_default;
	uint64_t log_bytes;          /* rotate a function's output at this size
				      * ($THAW_LOG_BYTES, K/M/G/T suffixes; default
				      * CONFIG_LOG_BYTES_DEFAULT) */
	/* The functions registered in data_dir, whose host paths a function's
	 * are compared with wherever they are checked (function/confine.h: a
	 * directory one function may write is reached by no other): a new
	 * JSON object, each one's id to its spec (read, never changed), into
	 * *out; 0 or -errno.  thawd answers from its registry (registry_specs), thaw
	 * snapshot from the registry's files in data_dir.  NULL
	 * (config_init's): there are none to compare with. */
	int (*registered)(void *arg, struct json_t **out);
	void *registered_arg;
};

/* Whether a start that neither the start nor the function's spec decides
 * restores lazily under c (see enum config_lazy).  gpu_starts: for a GPU
 * start, the GPU starts in flight in this process, this one included (a CPU
 * start's is not looked at).  A pure function of its arguments.  why (NULL,
 * or why_len bytes): the reason in words, for the log ("3 GPU starts in
 * flight > THAW_LAZY_MAX_GPU_STARTS=1"). */
bool config_restores_lazily(const struct thaw_config *c, bool gpu, unsigned gpu_starts, char *why,
			    size_t why_len);

/* Fill c with defaults for data_dir (NULL: $THAW_DATA_DIR or /var/lib/thaw),
 * honouring THAW_RAM_TIER, THAW_RAM_TIER_BYTES, THAW_RUNC, THAW_CRIU,
 * THAW_LAZY and THAW_TIER_HUGE (1/true/yes, 0/false/no or auto),
 * THAW_LAZY_DAEMON (thaw, the default: the `thaw` binary beside ours or one
 * directory up, as in build/; criu), THAW_LAZY_MAX_GPU_STARTS (a whole
 * number >= -1), THAW_LAZY_GPU_AFTER_FILL (1/0), THAW_MAPPED (1/0) and
 * THAW_MAPPED_MIN_KIB (>= 4), THAW_LOG_BYTES (config_parse_bytes, between
 * CONFIG_LOG_BYTES_MIN and _MAX), and the store's (config_store_init).  A bad
 * value is -EINVAL, logged with the variable named. */
int config_init(struct thaw_config *c, const char *data_dir);

/* A byte size: decimal digits with an optional binary suffix K, M, G or T
 * (either case, optionally followed by "i", "iB" or "B"), between min and
 * max.  0 and *out, or -EINVAL (not logged). */
int config_parse_bytes(const char *v, uint64_t min, uint64_t max, uint64_t *out);

/* Add dir (absolute) to c's allowed roots: 0, -EINVAL (not absolute),
 * -ENOSPC (more than CONFIG_MAX_ROOTS), -ENAMETOOLONG; logged. */
int config_allow_root(struct thaw_config *c, const char *dir);

/* Past any range a distribution's useradd gives (/etc/subuid from 100000). */
#define CONFIG_USERNS_POOL_BASE 2147483648u
#define CONFIG_USERNS_POOL_COUNT 268435456u
/* Set c's user namespace pool from v: "START:COUNT", or the path of a file
 * in /etc/subuid's form ("name:start:count" lines) whose "thaw" line says
 * it.  The pool must hold at least one range and end below 2^32 - 1.
 * 0, or -EINVAL / the file's -errno, logged naming what. */
int config_userns_pool(struct thaw_config *c, const char *v);
/* Whether path (absolute) lies under one of c's allowed roots, both with
 * symlinks resolved (a path that does not exist is taken as written).  When
 * not, why (why_len bytes) says so, naming the roots and the settings. */
bool config_path_allowed(const struct thaw_config *c, const char *path, char *why,
			 size_t why_len);

/* The store's settings alone, for a program that opens a store without the
 * rest of the configuration: THAW_STORE_LAYOUT (pack or loose),
 * THAW_STORE_DIRECT and THAW_STORE_MAP (1 or 0); unset or empty: the
 * default.  A bad value is -EINVAL, logged with the variable named. */
int config_store_init(struct config_store *s);

#endif
