/* SPDX-License-Identifier: Apache-2.0 */
/* le.h — little-endian fields of the store's binary formats (pack indexes,
 * binary manifests), read and written at any alignment. */
#ifndef THAW_STORE_LE_H
#define THAW_STORE_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

#endif
