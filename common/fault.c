/* SPDX-License-Identifier: Apache-2.0 */
/* fault.c — see fault.h. */
#include "common/fault.h"

#include <string.h>

static __thread struct fault last;

void fault_note(const struct fault *f)
{
	last = *f;
}

void fault_take(struct fault *out)
{
	*out = last;
	memset(&last, 0, sizeof(last));
}

void fault_clear(void)
{
	memset(&last, 0, sizeof(last));
}

const char *fault_step_name(enum fault_step step)
{
	switch (step) {
#define FAULT_STEP_NAME(e, name)                                               \
	case FAULT_##e:                                                        \
		return name;
		FAULT_STEPS(FAULT_STEP_NAME)
#undef FAULT_STEP_NAME
	case FAULT_NONE:
		break;
	}
	return "";
}
