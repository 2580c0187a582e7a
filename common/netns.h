/* SPDX-License-Identifier: Apache-2.0 */
/* netns.h — network namespaces made by thaw, one per instance.
 *
 * A namespace is kept alive by bind-mounting /proc/<pid>/ns/net of a process
 * that unshared it onto a file (as `ip netns` does), so no process needs to
 * stay in it; loopback is brought up with SIOCSIFFLAGS.  runc joins it by
 * path, which makes it external to CRIU.
 */
#ifndef THAW_NETNS_H
#define THAW_NETNS_H

#include <stdint.h>
#include <sys/types.h>

/* Create a namespace bound on path (a new file), loopback up. */
int netns_create(const char *path);
/* A container in a user namespace has the network namespace runc made for
 * it (CRIU dumps only namespaces its user namespace owns): netns_reserve
 * makes path (a new file) as netns_create would, without a namespace, and
 * once runc has started or restored the container, netns_adopt binds
 * /proc/<pid>/ns/net of its process onto it and brings its loopback up
 * (CRIU restores it down).  From then on path is read as netns_create's.
 * 0 or -errno; a failed adopt leaves path unbound. */
int netns_reserve(const char *path);
int netns_adopt(const char *path, pid_t pid);
/* Unmount and remove it; a missing one is fine. */
int netns_remove(const char *path);
/* A TCP socket connected to 127.0.0.1:port inside the namespace at path
 * (the socket is made on a thread that joined the namespace, so the caller's
 * namespace is untouched).  Returns the fd, or -errno (-ECONNREFUSED while
 * nothing listens; -ETIMEDOUT after timeout_ms). */
int netns_connect(const char *path, uint16_t port, int timeout_ms);

#endif
