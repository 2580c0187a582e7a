/* SPDX-License-Identifier: Apache-2.0 */
/* pack_index.c — the pack index file's format (pack.h): encode and parse. */
#define LOG_PREFIX "store: "
#include "store/pack.h"
#include "store/le.h"
#include "common/log.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint8_t *pack_index_encode(const struct pack_entry *e, size_t n, uint64_t pack_size, size_t *len)
{
	size_t body = PACK_INDEX_HEADER + n * PACK_INDEX_ENTRY;
	uint8_t *buf = malloc(body + CHUNK_HASH_LEN), *p;

	if (!buf)
		return NULL;
	memcpy(buf, "THPI", 4);
	put_le32(buf + 4, 1);
	put_le64(buf + 8, n);
	put_le64(buf + 16, pack_size);
	p = buf + PACK_INDEX_HEADER;
	for (size_t i = 0; i < n; i++, p += PACK_INDEX_ENTRY) {
		memcpy(p, e[i].hash, CHUNK_HASH_LEN);
		put_le64(p + 32, e[i].off);
		put_le32(p + 40, e[i].stored);
		put_le32(p + 44, e[i].raw_len);
	}
	chunk_hash(buf, body, buf + body);
	*len = body + CHUNK_HASH_LEN;
	return buf;
}

int pack_index_parse(const uint8_t *buf, size_t len, struct pack_entry **out, size_t *n,
		     uint64_t *pack_size)
{
	uint8_t sum[CHUNK_HASH_LEN];
	struct pack_entry *v = NULL;
	uint64_t count, size;

	*out = NULL;
	*n = 0;
	if (len < PACK_INDEX_HEADER + CHUNK_HASH_LEN || memcmp(buf, "THPI", 4)) {
		pr_err("pack index: not an index (bad magic or too short)");
		return -EBADMSG;
	}
	if (get_le32(buf + 4) != 1) {
		pr_err("pack index: unknown version %u", get_le32(buf + 4));
		return -EBADMSG;
	}
	count = get_le64(buf + 8);
	size = get_le64(buf + 16);
	if (count > (len - PACK_INDEX_HEADER - CHUNK_HASH_LEN) / PACK_INDEX_ENTRY ||
	    PACK_INDEX_HEADER + count * PACK_INDEX_ENTRY + CHUNK_HASH_LEN != len) {
		pr_err("pack index: %llu entries do not fill its %zu bytes",
		       (unsigned long long)count, len);
		return -EBADMSG;
	}
	chunk_hash(buf, len - CHUNK_HASH_LEN, sum);
	if (memcmp(sum, buf + len - CHUNK_HASH_LEN, CHUNK_HASH_LEN)) {
		pr_err("pack index: checksum mismatch");
		return -EBADMSG;
	}
	if (count && !(v = malloc(count * sizeof(*v))))
		return -ENOMEM;
	for (uint64_t i = 0; i < count; i++) {
		const uint8_t *p = buf + PACK_INDEX_HEADER + i * PACK_INDEX_ENTRY;
		struct pack_entry *e = &v[i];

		memcpy(e->hash, p, CHUNK_HASH_LEN);
		e->off = get_le64(p + 32);
		e->stored = get_le32(p + 40);
		e->raw_len = get_le32(p + 44);
		if (e->off % PACK_ALIGN || e->raw_len == 0 || e->raw_len > CHUNK_MAX_RAW ||
		    !chunk_object_size_possible(e->stored, e->raw_len) ||
		    e->off > size || size - e->off < e->stored) {
			pr_err("pack index: entry %llu (offset %llu, %u bytes of %u) is impossible "
			       "in a pack of %llu bytes",
			       (unsigned long long)i, (unsigned long long)e->off, e->stored,
			       e->raw_len, (unsigned long long)size);
			free(v);
			return -EBADMSG;
		}
	}
	*out = v;
	*n = count;
	*pack_size = size;
	return 0;
}
