/* config.h — where thaw keeps things and which external programs it runs.
 * One struct, filled with defaults, then overridden by flags/environment,
 * shared by the CLI and thawd.
 */
#ifndef THAW_CONFIG_H
#define THAW_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

struct thaw_config {
	char data_dir[PATH_MAX];     /* store/ snapshots/ functions/ instances/ live here */
	char store_dir[PATH_MAX];    /* default <data_dir>/store */
	char ram_tier_dir[PATH_MAX]; /* default /dev/shm/thaw */
	uint64_t ram_tier_bytes;     /* budget of the RAM tier; default half of /dev/shm */
	char runc[PATH_MAX];         /* runc binary; default "runc" on PATH */
	char criu[PATH_MAX];         /* criu to hand to runc --criu: default the .deps wrapper
				      * beside the build, else a system criu >= 4.2 */
	bool lazy;                   /* restore lazily (CRIU lazy-pages) unless the start or
				      * the function's spec says otherwise; default false */
};

/* Fill c with defaults for data_dir (NULL: $THAW_DATA_DIR or /var/lib/thaw),
 * honouring THAW_RAM_TIER, THAW_RAM_TIER_BYTES, THAW_RUNC, THAW_CRIU and
 * THAW_LAZY (1/true/yes or 0/false/no). */
int config_init(struct thaw_config *c, const char *data_dir);

#endif
