/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_pack_index.c — pack_index_parse() on arbitrary bytes.
 *
 * The input is parsed as it is, and again with a correct checksum appended
 * (random bytes almost never carry one, which would stop every input at the
 * checksum and leave the entry checks unfuzzed).  Whatever the input, the
 * parser must not crash, leak or read past len.  An accepted index must hold
 * only possible entries (aligned, inside the pack, sizes a chunk object can
 * have), and encode back to the very bytes it was parsed from.
 */
#include "store/pack.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_pack_index"
#include "test/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_quiet_stderr(argc, argv);
}

static void parse_and_check(const uint8_t *buf, size_t len)
{
	struct pack_entry *e = NULL;
	uint64_t size = 0;
	size_t n = 0, out_len = 0;

	if (pack_index_parse(buf, len, &e, &n, &size) != 0) {
		FUZZ_ASSERT(!e && n == 0);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		FUZZ_ASSERT(e[i].off % PACK_ALIGN == 0);
		FUZZ_ASSERT(e[i].off + e[i].stored <= size);
		FUZZ_ASSERT(e[i].stored >= CHUNK_HEADER_SIZE);
		FUZZ_ASSERT(e[i].raw_len > 0 && e[i].raw_len <= CHUNK_MAX_RAW);
	}
	uint8_t *again = pack_index_encode(e, n, size, &out_len);
	FUZZ_ASSERT(again);
	FUZZ_ASSERT(out_len == len && !memcmp(again, buf, len));
	free(again);
	free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf;

	if (size > (1u << 20))
		return 0;
	parse_and_check(data, size);
	buf = malloc(size + CHUNK_HASH_LEN);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	chunk_hash(buf, size, buf + size);
	parse_and_check(buf, size + CHUNK_HASH_LEN);
	free(buf);
	return 0;
}
