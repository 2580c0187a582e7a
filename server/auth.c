/* SPDX-License-Identifier: Apache-2.0 */
/* auth.c — see auth.h. */
#define LOG_PREFIX "auth: "
#include "server/auth.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int auth_load_kind(struct auth *a, enum auth_kind kind, const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	int ret;

	if ((unsigned)kind >= AUTH_KINDS)
		return -EINVAL;
	ret = read_file(path, &buf, &len, AUTH_TOKEN_MAX);
	if (ret) {
		pr_err("token file %s: %s", path,
		       ret == -EFBIG ? "larger than 4 KiB" : strerror(-ret));
		return ret;
	}
	len = strcspn(buf, "\r\n");
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++) {
		/* A token is printable ASCII without spaces: what a header can carry. */
		if (buf[i] <= ' ' || buf[i] > '~') {
			pr_err("token file %s: the token must be printable ASCII without spaces",
			       path);
			ret = -EINVAL;
			goto out;
		}
	}
	if (len == 0) {
		pr_err("token file %s: the token is empty", path);
		ret = -EINVAL;
		goto out;
	}
	SHA256((const unsigned char *)buf, len, a->digest[kind]);
	a->have[kind] = true;
	a->enabled = true;
out:
	OPENSSL_cleanse(buf, len);
	free(buf);
	return ret;
}

int auth_load(struct auth *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	return auth_load_kind(a, AUTH_FULL, path);
}

unsigned auth_scopes(const struct auth *a, const char *header)
{
	static const char scheme[] = "Bearer";
	static const unsigned opens[AUTH_KINDS] = {
		[AUTH_FULL] = AUTH_SCOPE_ALL,
		[AUTH_CONTROL] = AUTH_SCOPE_CONTROL,
		[AUTH_DATA] = AUTH_SCOPE_DATA,
	};
	unsigned scopes = AUTH_SCOPE_NONE;
	uint8_t d[32];

	if (!a->enabled)
		return AUTH_SCOPE_ALL;
	/* The scheme is case-insensitive, and followed by one space or more
	 * (RFC 9110, 11.4; RFC 6750, 2.1): "bearer x" is "Bearer x". */
	if (!header || strncasecmp(header, scheme, sizeof(scheme) - 1) ||
	    header[sizeof(scheme) - 1] != ' ')
		return AUTH_SCOPE_NONE;
	header += sizeof(scheme) - 1;
	header += strspn(header, " ");
	SHA256((const unsigned char *)header, strlen(header), d);
	/* Every configured token is compared: which one matched (if any)
	 * takes no more time than any other. */
	for (int k = 0; k < AUTH_KINDS; k++)
		if (a->have[k] && CRYPTO_memcmp(d, a->digest[k], sizeof(d)) == 0)
			scopes |= opens[k];
	return scopes;
}

bool auth_check(const struct auth *a, const char *header)
{
	return auth_scopes(a, header) != AUTH_SCOPE_NONE;
}
