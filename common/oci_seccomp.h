/* SPDX-License-Identifier: Apache-2.0 */
/* oci_seccomp.h — the default seccomp profile of a function's container.
 *
 * The profile OCI runtimes apply by default (Docker's, containerd's, Podman's
 * are one list): every syscall an ordinary program uses is allowed, the rest
 * answer EPERM.  Left out are those that reach outside the container or the
 * kernel's common paths: mount and the namespace calls, module loading, bpf,
 * perf, keyrings, clock setting, reboot, kexec, swap, quotas, open_by_handle_at
 * and the like.  clone may not make namespaces, clone3 answers ENOSYS (libc
 * then falls back to clone, whose flags can be checked), AF_VSOCK sockets and
 * personalities other than the harmless ones are refused.
 *
 * CRIU keeps a dumped process's filters (it reads them with ptrace) and puts
 * them back at the end of a restore, so a restored function is filtered as
 * its boot was.
 */
#ifndef THAW_OCI_SECCOMP_H
#define THAW_OCI_SECCOMP_H

#include <jansson.h>

/* The config.json "linux.seccomp" object, allowing as well what the given
 * capabilities (NULL-terminated names, may be NULL) need: chroot for
 * CAP_SYS_CHROOT.  NULL when out of memory. */
json_t *oci_seccomp_profile(char *const *capabilities);

#endif
