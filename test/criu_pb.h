/* SPDX-License-Identifier: Apache-2.0 */
/* criu_pb.h — for tests: CRIU image files written by hand, a protobuf field
 * at a time (what criu/criu_image.c decodes).  Static helpers, included by
 * the tests that build images. */
#ifndef THAW_TEST_CRIU_PB_H
#define THAW_TEST_CRIU_PB_H

#include "criu/criu_image.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A message, or a whole image file, being written. */
struct buf {
	uint8_t p[4096];
	size_t n;
};

static inline void put_varint(struct buf *b, uint64_t v)
{
	do {
		b->p[b->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

static inline void put_field(struct buf *b, uint32_t num, uint64_t v)
{
	put_varint(b, (uint64_t)num << 3);
	put_varint(b, v);
}

static inline void put_bytes(struct buf *b, uint32_t num, const void *p, size_t n)
{
	put_varint(b, (uint64_t)num << 3 | 2);
	put_varint(b, n);
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static inline void put_u32le(struct buf *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b->p[b->n++] = (uint8_t)(v >> (8 * i));
}

/* A file of one type: the two magics, then each message framed. */
static inline void file_start(struct buf *f, uint32_t magic)
{
	f->n = 0;
	put_u32le(f, CRIU_IMG_COMMON_MAGIC);
	put_u32le(f, magic);
}

static inline void file_msg(struct buf *f, const struct buf *m)
{
	put_u32le(f, (uint32_t)m->n);
	memcpy(f->p + f->n, m->p, m->n);
	f->n += m->n;
}

#endif
