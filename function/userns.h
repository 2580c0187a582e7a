/* SPDX-License-Identifier: Apache-2.0 */
/* userns.h — functions in a user namespace: their host uid ranges, and the
 * files those uids need.
 *
 * A function whose spec says "sandbox": {"userns": true} runs as uid 0 of a
 * user namespace whose uids and gids 0 to USERNS_RANGE_SIZE - 1 are an
 * unprivileged host range, its own: one range per function, from the
 * configured pool (common/config.h), kept in <data>/userns/ (a file per
 * range taken, named by its index, holding the function's id).  CRIU
 * restores the user namespace it dumped, so every restore of a snapshot
 * runs in the snapshot's range (the meta records it), and every instance
 * of one function shares it.
 *
 * Host root's files stay root's: what the range needs is opened to it
 * alone, by group (the range's first gid is the container's gid 0), never
 * to every user: the directories on the way to its root thaw made for the
 * one instance or snapshot, and the RAM tier's entry of its snapshot (CRIU
 * reads the images, and a mapped restore the memory files, from inside the
 * namespace).  The directories above, which all functions share, are made
 * searchable (o+x: no listing, and nothing in them readable that was not).
 */
#ifndef THAW_FUNCTION_USERNS_H
#define THAW_FUNCTION_USERNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

#define USERNS_RANGE_SIZE 65536u

/* A function's host ids: container id i is host base + i (i < size). */
struct userns_range {
	uint32_t base;
	uint32_t size; /* 0: no user namespace (the host's uid 0) */
};

struct func_spec;

/* Whether a function runs in a user namespace: what its spec says, else
 * thaw's default, on where it applies (userns_host_default), for a
 * function whose cwd and mount sources the range can reach; not for a
 * function from an image, whose rootfs then needs an idmapped mount
 * (images/idmap.c), which the data directory's filesystem may not have
 * and nothing checks before the first snapshot.  why (why_len bytes) says
 * which rule decided.  A snapshot records its range, so a restore runs as
 * it was made. */
bool function_userns_why(const struct thaw_config *c, const struct func_spec *s, char *why,
			 size_t why_len);
bool function_userns(const struct thaw_config *c, const struct func_spec *s);

/* Whether the default applies on this host: on in c (thawd --no-userns,
 * THAW_USERNS_DEFAULT=0 turn it off), user namespaces as thaw needs them
 * (userns_supported), and the way to the data directory and the RAM tier
 * searchable by other users (a range reaches its bundle and tier entry
 * through them).  why says why not, or what is used. */
bool userns_host_default(const struct thaw_config *c, char *why, size_t why_len);
/* Why the default does not apply where the operator turned it off. */
#define USERNS_DEFAULT_OFF "the default is off (thawd --no-userns, THAW_USERNS_DEFAULT=0)"
/* Its last part alone: the way to the data directory and the RAM tier
 * searchable by other users (why says which directory is not). */
bool userns_host_dirs(const struct thaw_config *c, char *why, size_t why_len);

/* Whether a directory on the way to path (its parents; path itself too
 * where itself) cannot be searched by other users: true and its name in
 * out (len bytes). */
bool userns_unsearchable(const char *path, bool itself, char *out, size_t len);

/* Whether this host runs containers in user namespaces as thaw needs them
 * (the kernel lets root make one with a network namespace in it, and our
 * own uid map covers c's pool); why (why_len bytes) says why not, or what
 * is used.  Forks a child that tries. */
bool userns_supported(const struct thaw_config *c, char *why, size_t why_len);

/* The range of function id under c: the one it has (<data>/userns), else
 * the lowest free one of the pool, taken now.  0 and *out; -ENOSPC when the
 * pool is full; -errno; logged. */
int userns_range_of(const struct thaw_config *c, const char *id, struct userns_range *out);

/* Give function id's range back to the pool (its function is gone): 0 or
 * -errno; none taken is 0. */
int userns_release(const struct thaw_config *c, const char *id);

/* Make the way to root (the container's root directory, or a directory
 * CRIU binds from inside the namespace) searchable by r:
 * each directory on it that r's uid cannot search is, where it is own (the
 * bundle directory thaw wrote, or its parent: one instance's or
 * snapshot's; own may be NULL), given r's first gid with mode g+x (no
 * more), and, where it lies in c's data directory or RAM tier, made o+x
 * (what is in them stays 0700 but where it is opened to r).  Anywhere else that is the
 * operator's to change: -EACCES, logged naming the directory. */
int userns_reach(const struct thaw_config *c, const char *root, const char *own,
		 const struct userns_range *r);

/* Give dir and what is directly in it to r's uid 0: a root thaw made for
 * one container (a host-rooted function's skeleton of mount points: runc's
 * init, in the namespace, makes the container's mount points there), or a
 * mapped restore's memory files, whose mode CRIU wants as dumped (0600:
 * only their owner can read them).  The container sees either read-only.
 * 0 or -errno, logged. */
int userns_give(const char *dir, const struct userns_range *r);

/* Open dir (a snapshot's entry in the RAM tier, its images) to r: dir and
 * the directories in it get r's first gid with g+rx, its files g+r.  What
 * is already so is left.  0 or -errno. */
int userns_share(const char *dir, const struct userns_range *r);

#endif
