/* cmd_doctor.c — placeholder until the doctor lands: says so and fails. */
#include "cli/cli.h"

int cmd_doctor(int argc, char **argv)
{
	fprintf(stderr, "thaw doctor: not built yet\n");
	return 1;
}
