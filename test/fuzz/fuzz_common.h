/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_common.h — what every libFuzzer target of thaw shares.
 *
 * FUZZ_ASSERT aborts with the target's name, file and line on stdout (the
 * fuzzer reports the crash and keeps its input).
 *
 * The code under test logs every rejected input to stderr, millions of lines
 * in a run; fuzz_quiet_stderr(), called from the target's LLVMFuzzerInitialize,
 * closes stderr for the target (-close_fd_mask=2, which keeps libFuzzer's own
 * and the sanitizers' reports) unless THAW_LOG is set.
 */
#ifndef THAW_FUZZ_COMMON_H
#define THAW_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#ifndef FUZZ_NAME
#error "define FUZZ_NAME (the target's name) before including fuzz_common.h"
#endif

#define FUZZ_ASSERT(cond)                                                                  \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stdout, FUZZ_NAME ": %s:%d: %s\n", __FILE__, __LINE__,     \
				#cond);                                                    \
			fflush(stdout);                                                    \
			abort();                                                           \
		}                                                                          \
	} while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);

static inline int fuzz_quiet_stderr(int *argc, char ***argv)
{
	static char flag[] = "-close_fd_mask=2";
	char **nargv;

	if (getenv("THAW_LOG"))
		return 0;
	nargv = calloc((size_t)*argc + 2, sizeof(*nargv));
	if (!nargv)
		return 0;
	/* Flags go before the corpus directories; libFuzzer takes them anywhere
	 * but argv[0] must stay first. */
	nargv[0] = (*argv)[0];
	nargv[1] = flag;
	for (int i = 1; i < *argc; i++)
		nargv[i + 1] = (*argv)[i];
	*argc += 1;
	*argv = nargv; /* lives for the whole run */
	return 0;
}

#endif
