/* SPDX-License-Identifier: Apache-2.0 */
/* auth.h — the bearer token thawd asks of every request but /healthz.
 *
 * The token is read from a file (--token-file): its first line, without the
 * line end.  A request is let in when its Authorization header is exactly
 * "Bearer <token>"; the comparison takes the same time whatever the header
 * holds (both sides are hashed with SHA-256 and the digests compared with
 * CRYPTO_memcmp), so timing tells a client nothing about the token.
 */
#ifndef THAW_SERVER_AUTH_H
#define THAW_SERVER_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#define AUTH_TOKEN_MAX 4096

struct auth {
	uint8_t digest[32]; /* SHA-256 of the token */
	bool enabled;
};

/* Read the token from path.  0, or -errno (-EINVAL: empty or not text), logged. */
int auth_load(struct auth *a, const char *path);
/* true if the request may go on: no token configured, or header is
 * "Bearer <token>" (header may be NULL). */
bool auth_check(const struct auth *a, const char *header);

#endif
