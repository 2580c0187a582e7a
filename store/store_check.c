/* SPDX-License-Identifier: Apache-2.0 */
/* store_check.c — the check of one chunk object where it lies: the one
 * check store_verify reports by and store_heal drops by, so that `thaw
 * store verify` and a start that found a snapshot damaged agree on what is
 * damaged. */
#define LOG_PREFIX "store: "
#include "store/internal.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int store_check_buf_init(struct store_check_buf *b)
{
	b->codec = chunk_codec_new();
	b->obj = malloc(chunk_encode_bound(CHUNK_MAX_RAW));
	b->raw = malloc(CHUNK_MAX_RAW);
	if (b->codec && b->obj && b->raw)
		return 0;
	pr_err("out of memory");
	return -ENOMEM;
}

void store_check_buf_release(struct store_check_buf *b)
{
	chunk_codec_free(b->codec);
	free(b->obj);
	free(b->raw);
	memset(b, 0, sizeof(*b));
}

int store_read_pack_object(struct store_check_buf *b, int fd, const struct pack_entry *e)
{
	ssize_t got;

	do
		got = pread(fd, b->obj, e->stored, (off_t)e->off);
	while (got < 0 && errno == EINTR);
	if (got < 0)
		return -errno;
	if ((size_t)got < e->stored)
		return -ENODATA;
	return chunk_decode(b->codec, b->obj, e->stored, e->hash, b->raw, e->raw_len);
}

int store_check_pack_entry(struct store_check_buf *b, int fd, const char *name,
			   const struct pack_entry *e, char *why, size_t len)
{
	int ret = store_read_pack_object(b, fd, e);

	if (ret == -ENODATA)
		snprintf(why, len, "corrupt (pack %s is cut short at its offset %llu)", name,
			 (unsigned long long)e->off);
	else if (ret == -EBADMSG)
		snprintf(why, len, "corrupt (%s; in pack %s)", log_last_error(), name);
	else if (ret < 0)
		snprintf(why, len, "unreadable in pack %s: %s", name, strerror(-ret));
	return ret < 0;
}

int store_check_loose(struct store_check_buf *b, const char *path,
		      const uint8_t hash[CHUNK_HASH_LEN], char *why, size_t len)
{
	size_t obj_len = 0;
	long raw_len;
	int ret;

	ret = store_read_object(path, b->obj, chunk_encode_bound(CHUNK_MAX_RAW), &obj_len);
	if (ret == -ENOENT)
		return ret;
	if (ret == -EBADMSG) {
		snprintf(why, len, "corrupt (larger than any chunk object)");
		return 1;
	}
	if (ret < 0) {
		snprintf(why, len, "unreadable: %s", strerror(-ret));
		return 1;
	}
	/* A loose object always has its header (only a pack holds bare ones). */
	raw_len = store_object_raw_len(b->obj, obj_len);
	if (raw_len < 0) {
		snprintf(why, len, "%s", obj_len < CHUNK_HEADER_SIZE ? "corrupt (truncated header)"
								     : "corrupt (bad header)");
		return 1;
	}
	ret = chunk_decode(b->codec, b->obj, obj_len, hash, b->raw, (size_t)raw_len);
	if (ret)
		snprintf(why, len, "corrupt (%s)", log_last_error());
	return ret < 0;
}
