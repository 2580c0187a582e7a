/* SPDX-License-Identifier: Apache-2.0 */
/* auth.h — the bearer tokens thawd asks of every request but /healthz.
 *
 * Up to three tokens, each read from a file: its first line, without the line
 * end.  The full token (--token-file) opens every route; the control token
 * (--control-token-file) the routes that change or read functions, snapshots
 * and jobs; the data token (--data-token-file) starts and instances, so that
 * a gateway can hold only that one.  A request's Authorization header is
 * "Bearer <token>" (the scheme in any case, one space or more); the token is
 * compared with every configured token, each in the
 * same time whatever the header holds (both sides are hashed with SHA-256
 * and the digests compared with CRYPTO_memcmp, none skipped), so timing
 * tells a client nothing about a token.
 */
#ifndef THAW_SERVER_AUTH_H
#define THAW_SERVER_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#define AUTH_TOKEN_MAX 4096

/* What a token opens: a mask. */
enum auth_scope {
	AUTH_SCOPE_NONE = 0,
	AUTH_SCOPE_DATA = 1 << 0,    /* starts, instances */
	AUTH_SCOPE_CONTROL = 1 << 1, /* functions, snapshots, jobs */
	AUTH_SCOPE_ALL = AUTH_SCOPE_DATA | AUTH_SCOPE_CONTROL,
};

enum auth_kind { AUTH_FULL = 0, AUTH_CONTROL, AUTH_DATA, AUTH_KINDS };

struct auth {
	uint8_t digest[AUTH_KINDS][32]; /* SHA-256 of each token */
	bool have[AUTH_KINDS];
	bool enabled; /* any token configured */
};

/* Read the token of kind from path into a (a zeroed struct auth to begin
 * with).  0, or -errno (-EINVAL: empty or not text), logged. */
int auth_load_kind(struct auth *a, enum auth_kind kind, const char *path);
/* Zero a, then read the full token from path: auth_load_kind(AUTH_FULL). */
int auth_load(struct auth *a, const char *path);
/* The scopes header (may be NULL) opens: AUTH_SCOPE_ALL when no token is
 * configured; else the union over the configured tokens it matches. */
unsigned auth_scopes(const struct auth *a, const char *header);
/* true if the request may go on: no token configured, or header is
 * "Bearer <a configured token>". */
bool auth_check(const struct auth *a, const char *header);

#endif
