/* config.h — where thaw keeps things and which external programs it runs.
 * One struct, filled with defaults, then overridden by flags/environment,
 * shared by the CLI and thawd.
 */
#ifndef THAW_CONFIG_H
#define THAW_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* Restore pages on demand (CRIU lazy-pages) or all before the start answers.
 * AUTO: lazily for CPU functions, eagerly for GPU ones.  Measured (bench/RESULTS.md,
 * "Sparse and lazy images"): lazily, a CPU function answers sooner (CPU example
 * 250 vs 720 ms); a GPU function answers later (H100 example 3.9 vs 3.7 s), since
 * the driver's restore then faults its GPU state in through userfaultfd page by
 * page. */
enum config_lazy { CONFIG_LAZY_AUTO, CONFIG_LAZY_ON, CONFIG_LAZY_OFF };

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
};

/* Fill c with defaults for data_dir (NULL: $THAW_DATA_DIR or /var/lib/thaw),
 * honouring THAW_RAM_TIER, THAW_RAM_TIER_BYTES, THAW_RUNC, THAW_CRIU and
 * THAW_LAZY (1/true/yes or 0/false/no) and THAW_LAZY_DAEMON (thaw, the default:
 * the `thaw` binary beside ours or one directory up, as in build/; criu). */
int config_init(struct thaw_config *c, const char *data_dir);

#endif
