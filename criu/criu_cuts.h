/* SPDX-License-Identifier: Apache-2.0 */
/* criu_cuts.h — where the chunks of a CRIU pages file must start.
 *
 * pages-<id>.img is the data of one process's pagemap entries laid end to
 * end.  A re-snapshot of the same function has mostly the same mappings, but
 * some grew, moved or appeared: cutting at every entry's first byte keeps one
 * entry's change out of its neighbours' chunks, and within an entry the
 * content-defined chunker (chunker.h), which survives shifts, takes over.
 */
#ifndef THAW_CRIU_CRIU_CUTS_H
#define THAW_CRIU_CRIU_CUTS_H

#include <stddef.h>
#include <stdint.h>

/* The offsets in dir/pages_name (a "pages-<id>.img") at which a pagemap entry
 * of a pagemap-*.img of dir with that pages_id begins, ascending, without 0:
 * 0 and *cuts (you own it; free()), *n of them.  No cuts within an entry:
 * address-aligned ones lose everything when ASLR shifts a mapping between two
 * boots (store_put.c tells the measurement).  -ENOENT when the name is not a pages file or no pagemap names it, -EINVAL
 * for a pagemap that does not decode or does not add up to the file's size,
 * else -errno. */
int criu_pages_cuts(const char *dir, const char *pages_name, uint64_t file_size, uint64_t **cuts,
		    size_t *n);

#endif
