/* SPDX-License-Identifier: Apache-2.0 */
/* test_config.c — common/config: THAW_LAZY, THAW_LAZY_DAEMON and
 * THAW_LAZY_MAX_GPU_STARTS, and which starts restore lazily by default; the
 * store's settings (THAW_STORE_LAYOUT, THAW_STORE_DIRECT, THAW_STORE_MAP). */
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void set_or_unset(const char *name, const char *v)
{
	if (v)
		setenv(name, v, 1);
	else
		unsetenv(name);
}

static int init_with(struct thaw_config *c, const char *lazy, const char *daemon,
		     const char *max_gpu)
{
	set_or_unset("THAW_LAZY", lazy);
	set_or_unset("THAW_LAZY_DAEMON", daemon);
	set_or_unset("THAW_LAZY_MAX_GPU_STARTS", max_gpu);
	return config_init(c, "/tmp/thaw-test-config-data");
}

/* config_restores_lazily with its reason, which must never be empty. */
static bool lazily(const struct thaw_config *c, bool gpu, unsigned gpu_starts, char *why)
{
	bool lazy;

	why[0] = '\0';
	lazy = config_restores_lazily(c, gpu, gpu_starts, why, 160);
	CHECK(why[0] != '\0');
	return lazy;
}

/* thaw's daemon, set by hand: whether build/thaw exists beside this test
 * depends on what was built. */
static void thaw_daemon(struct thaw_config *c)
{
	snprintf(c->lazy_daemon, sizeof(c->lazy_daemon), "/usr/local/bin/thaw");
}

/* One store setting: unset, empty, good and bad values, through config_init
 * and config_store_init alike. */
static void store_setting(const char *name, const char *good, const char *bad)
{
	struct thaw_config c;
	struct config_store st;

	unsetenv("THAW_STORE_LAYOUT");
	unsetenv("THAW_STORE_DIRECT");
	unsetenv("THAW_STORE_MAP");
	/* The defaults: packs, O_DIRECT, mapped input; empty is unset. */
	for (int empty = 0; empty < 2; empty++) {
		set_or_unset(name, empty ? "" : NULL);
		REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
		CHECK(!c.store.loose);
		CHECK(c.store.direct);
		CHECK(c.store.map_input);
	}
	/* The value that is not the default. */
	setenv(name, good, 1);
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK_EQ(c.store.loose, !strcmp(name, "THAW_STORE_LAYOUT"));
	CHECK_EQ(c.store.direct, !!strcmp(name, "THAW_STORE_DIRECT"));
	CHECK_EQ(c.store.map_input, !!strcmp(name, "THAW_STORE_MAP"));
	REQUIRE(config_store_init(&st) == 0);
	CHECK_EQ(st.loose, c.store.loose);
	CHECK_EQ(st.direct, c.store.direct);
	CHECK_EQ(st.map_input, c.store.map_input);
	/* Nonsense: refused, with the variable named. */
	setenv(name, bad, 1);
	CHECK_EQ(init_with(&c, NULL, NULL, NULL), -EINVAL);
	CHECK(strstr(log_last_error(), name) != NULL);
	CHECK_EQ(config_store_init(&st), -EINVAL);
	unsetenv(name);
}

int main(void)
{
	struct thaw_config c;
	char why[160];

	/* CRIU's daemon: auto restores CPU functions lazily, GPU ones eagerly,
	 * even alone. */
	REQUIRE(init_with(&c, NULL, "criu", NULL) == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_AUTO);
	CHECK_STR(c.lazy_daemon, "");
	CHECK_EQ(c.lazy_max_gpu_starts, CONFIG_LAZY_MAX_GPU_STARTS_DEFAULT);
	CHECK(lazily(&c, false, 0, why));
	CHECK(!lazily(&c, true, 1, why));
	CHECK(strstr(why, "THAW_LAZY_DAEMON=criu") != NULL);

	/* thaw's daemon (the default where a thaw binary is found), auto, the
	 * default limit of 1: a GPU function lazily only while no other GPU start
	 * is in flight; eagerly beyond. */
	thaw_daemon(&c);
	CHECK_EQ(CONFIG_LAZY_MAX_GPU_STARTS_DEFAULT, 1);
	CHECK(lazily(&c, true, 1, why)); /* alone: at the limit */
	CHECK_STR(why, "1 GPU start in flight <= THAW_LAZY_MAX_GPU_STARTS=1");
	CHECK(!lazily(&c, true, 2, why)); /* above it */
	CHECK_STR(why, "2 GPU starts in flight > THAW_LAZY_MAX_GPU_STARTS=1");
	CHECK(!lazily(&c, true, 3, why));
	CHECK(!lazily(&c, true, 8, why));
	CHECK(!lazily(&c, true, UINT_MAX, why));
	/* CPU functions are not counted and not limited: lazily whatever the count. */
	CHECK(lazily(&c, false, 0, why));
	CHECK(lazily(&c, false, 8, why));
	CHECK(lazily(&c, false, UINT_MAX, why));
	/* No why wanted: the same answer. */
	CHECK(config_restores_lazily(&c, true, 1, NULL, 0));
	CHECK(!config_restores_lazily(&c, true, 2, NULL, 0));
	CHECK(config_restores_lazily(&c, true, 1, why, 1) && why[0] == '\0');

	/* The limit set: 2 (lazy with one other), 0 (GPU always eagerly), -1 (none). */
	REQUIRE(init_with(&c, NULL, NULL, "2") == 0);
	CHECK_EQ(c.lazy_max_gpu_starts, 2);
	thaw_daemon(&c);
	CHECK(lazily(&c, true, 2, why));
	CHECK_STR(why, "2 GPU starts in flight <= THAW_LAZY_MAX_GPU_STARTS=2");
	CHECK(!lazily(&c, true, 3, why));
	CHECK(lazily(&c, false, 3, why));
	REQUIRE(init_with(&c, NULL, NULL, "0") == 0);
	CHECK_EQ(c.lazy_max_gpu_starts, 0);
	thaw_daemon(&c);
	CHECK(!lazily(&c, true, 1, why));
	CHECK(lazily(&c, false, 1, why));
	REQUIRE(init_with(&c, NULL, NULL, "-1") == 0);
	CHECK_EQ(c.lazy_max_gpu_starts, -1);
	thaw_daemon(&c);
	CHECK(lazily(&c, true, 1, why));
	CHECK(lazily(&c, true, 64, why));
	CHECK(lazily(&c, true, UINT_MAX, why));
	/* ...but CRIU's daemon keeps GPU functions eager whatever the limit. */
	c.lazy_daemon[0] = '\0';
	CHECK(!lazily(&c, true, 1, why));
	REQUIRE(init_with(&c, NULL, NULL, "") == 0); /* empty: the default */
	CHECK_EQ(c.lazy_max_gpu_starts, CONFIG_LAZY_MAX_GPU_STARTS_DEFAULT);

	/* THAW_LAZY decides whatever the daemon and the count. */
	REQUIRE(init_with(&c, "0", NULL, NULL) == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_OFF);
	thaw_daemon(&c);
	CHECK(!lazily(&c, false, 0, why));
	CHECK_STR(why, "THAW_LAZY=0");
	CHECK(!lazily(&c, true, 1, why));
	CHECK(!lazily(&c, true, 8, why));
	REQUIRE(init_with(&c, "yes", "criu", NULL) == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_ON);
	CHECK(lazily(&c, true, 1, why));
	CHECK_STR(why, "THAW_LAZY=1");
	CHECK(lazily(&c, true, 8, why));
	CHECK(lazily(&c, false, 8, why));
	REQUIRE(init_with(&c, "1", NULL, "1") == 0);
	thaw_daemon(&c);
	CHECK(lazily(&c, true, UINT_MAX, why));
	REQUIRE(init_with(&c, "auto", "thaw", NULL) == 0);
	CHECK_EQ(c.lazy, CONFIG_LAZY_AUTO);

	/* Nonsense is refused, with the variable named. */
	CHECK_EQ(init_with(&c, "sometimes", NULL, NULL), -EINVAL);
	CHECK_EQ(init_with(&c, NULL, "userfaultd", NULL), -EINVAL);
	CHECK_EQ(init_with(&c, NULL, NULL, "two"), -EINVAL);
	CHECK(strstr(log_last_error(), "THAW_LAZY_MAX_GPU_STARTS=two") != NULL);
	CHECK_EQ(init_with(&c, NULL, NULL, "3x"), -EINVAL);
	CHECK_EQ(init_with(&c, NULL, NULL, "-2"), -EINVAL);
	CHECK_EQ(init_with(&c, NULL, NULL, "99999999999"), -EINVAL);

	/* THAW_LAZY_GPU_AFTER_FILL: off unless asked for. */
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK(!c.lazy_gpu_after_fill);
	setenv("THAW_LAZY_GPU_AFTER_FILL", "1", 1);
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK(c.lazy_gpu_after_fill);
	setenv("THAW_LAZY_GPU_AFTER_FILL", "no", 1);
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK(!c.lazy_gpu_after_fill);
	setenv("THAW_LAZY_GPU_AFTER_FILL", "later", 1);
	CHECK_EQ(init_with(&c, NULL, NULL, NULL), -EINVAL);
	CHECK(strstr(log_last_error(), "THAW_LAZY_GPU_AFTER_FILL=later") != NULL);
	unsetenv("THAW_LAZY_GPU_AFTER_FILL");

	/* THAW_LOG_BYTES: 1 MiB unless set; binary suffixes; 4K to 1T. */
	unsetenv("THAW_LOG_BYTES");
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK_EQ(c.log_bytes, 1 << 20);
	static const struct {
		const char *v;
		uint64_t bytes;
	} sizes[] = { { "4096", 4096 },	     { "4K", 4096 },	       { "4k", 4096 },
		      { "64KiB", 65536 },    { "2M", 2 << 20 },        { "1G", 1ull << 30 },
		      { "3MB", 3 << 20 },    { "1T", 1ull << 40 } };
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		CASE("THAW_LOG_BYTES=\"%s\"", sizes[i].v);
		setenv("THAW_LOG_BYTES", sizes[i].v, 1);
		CHECK_EQ(init_with(&c, NULL, NULL, NULL), 0);
		CHECK_EQ(c.log_bytes, sizes[i].bytes);
	}
	static const char *const bad_sizes[] = { "4095", "1K1", "0", "-4K", "4X", "2T", "K",
						 " 4K", "4K ", "99999999999999999999999" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_sizes); i++) {
		CASE("THAW_LOG_BYTES=\"%s\"", bad_sizes[i]);
		setenv("THAW_LOG_BYTES", bad_sizes[i], 1);
		CHECK_EQ(init_with(&c, NULL, NULL, NULL), -EINVAL);
		CHECK(strstr(log_last_error(), "THAW_LOG_BYTES") != NULL);
	}
	CASE_END();
	unsetenv("THAW_LOG_BYTES");

	store_setting("THAW_STORE_LAYOUT", "loose", "packed");
	store_setting("THAW_STORE_DIRECT", "0", "yes");
	store_setting("THAW_STORE_MAP", "0", "2");
	/* "pack" and "1" are the defaults spelled out. */
	setenv("THAW_STORE_LAYOUT", "pack", 1);
	setenv("THAW_STORE_DIRECT", "1", 1);
	setenv("THAW_STORE_MAP", "1", 1);
	REQUIRE(init_with(&c, NULL, NULL, NULL) == 0);
	CHECK(!c.store.loose && c.store.direct && c.store.map_input);
	unsetenv("THAW_STORE_LAYOUT");
	unsetenv("THAW_STORE_DIRECT");
	unsetenv("THAW_STORE_MAP");
	return check_failures ? 1 : 0;
}
