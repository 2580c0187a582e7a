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
	case FAULT_MATERIALIZE:
		return "materialize";
	case FAULT_NONE:
		break;
	}
	return "";
}
