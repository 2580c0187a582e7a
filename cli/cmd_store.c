/* cmd_store.c — placeholder until the store CLI lands. */
#include "cli/cli.h"

int cmd_store(int argc, char **argv)
{
	fprintf(stderr, "thaw store: not built yet\n");
	return 1;
}
