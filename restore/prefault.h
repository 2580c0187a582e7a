/* SPDX-License-Identifier: Apache-2.0 */
/* prefault.h — map a mapped instance's snapshot pages into its page tables
 * before it needs them.
 *
 * A mapped restore leaves every page of the snapshot's memory files to be
 * faulted in on first touch: by the driver as it copies the GPU state back,
 * by the function as it runs.  A standby has time to spare while it waits, so
 * its pages are faulted in then: each data range of each file mapped from
 * OCI_MAPPED_DEST is read through /proc/<pid>/mem, which maps the page cache's
 * pages (read-only, shared: no memory is added) into the process.  Holes are
 * skipped (SEEK_DATA on /proc/<pid>/map_files): reading one would allocate a
 * tmpfs page for it.
 */
#ifndef THAW_RESTORE_PREFAULT_H
#define THAW_RESTORE_PREFAULT_H

#include <stdint.h>
#include <sys/types.h>

/* Fault in the mapped snapshot pages of every process in the PID namespace
 * of init.  *bytes (may be NULL): how many were read.  0, or -errno (what
 * could not be read is only slower later, so callers may go on). */
int prefault_mapped(pid_t init, uint64_t *bytes);

#endif
