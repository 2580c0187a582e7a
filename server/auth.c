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

int auth_load(struct auth *a, const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	int ret;

	memset(a, 0, sizeof(*a));
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
	SHA256((const unsigned char *)buf, len, a->digest);
	a->enabled = true;
out:
	OPENSSL_cleanse(buf, len);
	free(buf);
	return ret;
}

bool auth_check(const struct auth *a, const char *header)
{
	static const char scheme[] = "Bearer ";
	uint8_t d[32];

	if (!a->enabled)
		return true;
	if (!header || strncmp(header, scheme, sizeof(scheme) - 1))
		return false;
	header += sizeof(scheme) - 1;
	SHA256((const unsigned char *)header, strlen(header), d);
	return CRYPTO_memcmp(d, a->digest, sizeof(d)) == 0;
}
