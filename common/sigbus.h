/* SPDX-License-Identifier: Apache-2.0 */
/* sigbus.h — read a mapped file without dying when the file shrinks.
 *
 * A page of a mapped file past the file's end, or one the disk cannot read,
 * raises SIGBUS in whichever thread touches it, and by default that kills the
 * process (thawd, with every instance it serves).  thaw maps the files a put
 * ingests, because reading them through read() would cost a copy of every
 * byte; a file truncated while it is being read must fail that put, not the
 * daemon.
 *
 * sigbus_guarded() runs fn with this thread's guard set: a SIGBUS in it jumps
 * back out and the call returns -EFAULT.  A SIGBUS anywhere else goes on to
 * the action that was installed before (by default: the process dies, as it
 * would have).  fn must not hold a lock or own memory that only its normal
 * return would release while it touches the mapping: a SIGBUS abandons
 * whatever it was doing (so a put hashes with a context of its own,
 * chunk_codec_hash(), not libcrypto's one-shot digest, which allocates one).
 */
#ifndef THAW_SIGBUS_H
#define THAW_SIGBUS_H

/* fn(arg)'s result, or -EFAULT if it met a SIGBUS.  Installs the process's
 * SIGBUS handler on first use. */
int sigbus_guarded(int (*fn)(void *arg), void *arg);

#endif
