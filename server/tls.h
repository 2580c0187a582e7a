/* SPDX-License-Identifier: Apache-2.0 */
/* tls.h — thawd's HTTPS credentials: a PEM certificate (chain) and its
 * private key, read from two files at start-up and handed to libmicrohttpd,
 * whose TLS (GnuTLS) serves them.
 *
 * tls_load() checks everything that can be checked before thawd listens, so
 * that a bad file stops thawd before it touches its data directory: each
 * file readable, not empty, PEM of its kind (read by OpenSSL, which says
 * what is wrong and in which file), the key the certificate's, and
 * libmicrohttpd willing to serve the pair (a daemon started without a
 * socket, which builds GnuTLS's credentials from them as the real one will).
 */
#ifndef THAW_SERVER_TLS_H
#define THAW_SERVER_TLS_H

#define TLS_PEM_MAX (1u << 20) /* bytes per file */

struct tls {
	char *cert; /* PEM text; NULL: plain HTTP */
	char *key;  /* PEM text, unencrypted; wiped by tls_release() */
};

/* Read and check cert_path and key_path into t (zeroed to begin with).  A key
 * file that other users can read is warned about, not refused.  0, or -errno
 * (-EINVAL: not PEM, not a pair, or refused by libmicrohttpd; -ENOTSUP: no
 * TLS in this build), logged naming the file; t is then left empty. */
int tls_load(struct tls *t, const char *cert_path, const char *key_path);
/* Wipe and free what tls_load() read; t is empty after.  An empty t is fine. */
void tls_release(struct tls *t);

#endif
