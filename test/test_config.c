/* test_config.c — common/config: THAW_LAZY and THAW_LAZY_DAEMON, and which
 * starts restore lazily by default. */
#include "common/config.h"
#include "test/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int init_with(struct thaw_config *c, const char *lazy, const char *daemon)
{
	if (lazy)
		setenv("THAW_LAZY", lazy, 1);
	else
		unsetenv("THAW_LAZY");
	if (daemon)
		setenv("THAW_LAZY_DAEMON", daemon, 1);
	else
		unsetenv("THAW_LAZY_DAEMON");
	return config_init(c, "/tmp/thaw-test-config-data");
}

int main(void)
{
	struct thaw_config c;

	/* CRIU's daemon: auto restores CPU functions lazily, GPU ones eagerly. */
	REQUIRE(init_with(&c, NULL, "criu") == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_AUTO);
	CHECK_STR(c.lazy_daemon, "");
	CHECK(config_restores_lazily(&c, false));
	CHECK(!config_restores_lazily(&c, true));

	/* thaw's daemon (the default where a thaw binary is found): auto is
	 * lazy for both.  Set by hand: whether build/thaw exists beside this
	 * test depends on what was built. */
	snprintf(c.lazy_daemon, sizeof(c.lazy_daemon), "/usr/local/bin/thaw");
	CHECK(config_restores_lazily(&c, false));
	CHECK(config_restores_lazily(&c, true));

	/* THAW_LAZY decides whatever the daemon. */
	REQUIRE(init_with(&c, "0", NULL) == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_OFF);
	CHECK(!config_restores_lazily(&c, false));
	CHECK(!config_restores_lazily(&c, true));
	REQUIRE(init_with(&c, "yes", "criu") == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_ON);
	CHECK(config_restores_lazily(&c, true));
	REQUIRE(init_with(&c, "auto", "thaw") == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_AUTO);

	/* Nonsense is refused, with the variable named. */
	CHECK_EQ(init_with(&c, "sometimes", NULL), -EINVAL);
	CHECK_EQ(init_with(&c, NULL, "userfaultd"), -EINVAL);
	return check_failures ? 1 : 0;
}
