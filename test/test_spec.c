/* SPDX-License-Identifier: Apache-2.0 */
/* test_spec: function specs are parsed, checked (each bad field named in the
 * message) and written back to the same JSON. */
#include "function/spec.h"
#include "common/util.h"
#include "test/check.h"

#include <errno.h>
#include <jansson.h>

static struct func_spec *parse(const char *text, const char *id, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *j = json_loads(text, 0, &jerr);
	struct func_spec *s = NULL;

	if (!j) {
		fprintf(stderr, "bad test JSON: %s: %s\n", text, jerr.text);
		check_failures++;
		return NULL;
	}
	if (spec_parse(j, id, &s, err, errlen) != 0)
		s = NULL;
	json_decref(j);
	return s;
}

/* The spec is refused with a message that mentions field. */
static void bad(const char *text, const char *field)
{
	char err[256] = "";
	struct func_spec *s = parse(text, NULL, err, sizeof(err));

	if (s || !strstr(err, field)) {
		fprintf(stderr, "spec %s: accepted or message \"%s\" does not name %s\n", text, err,
			field);
		check_failures++;
	}
	spec_free(s);
}

/* Confined unless loosened; a stored spec says every key of what it loosens,
 * and says nothing when it loosens nothing. */
static void check_sandbox(void)
{
	char err[256] = "";
	struct func_spec *s, *s2 = NULL;
	json_t *j, *sb;

	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"sandbox\":{\"seccomp\":true}}",
		  NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK(!s->sandbox.writable_root && !s->sandbox.no_seccomp && !s->sandbox.new_privileges &&
	      !s->sandbox.host_home && !s->sandbox.capabilities);
	j = spec_to_json(s);
	CHECK(j && !json_object_get(j, "sandbox"));
	json_decref(j);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"sandbox\":{"
		  "\"writable_root\":true,\"seccomp\":false,\"no_new_privileges\":false,"
		  "\"host_home\":true,\"capabilities\":[\"CAP_NET_BIND_SERVICE\"]}}",
		  NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK(s->sandbox.writable_root && s->sandbox.no_seccomp && s->sandbox.new_privileges &&
	      s->sandbox.host_home);
	CHECK(s->sandbox.capabilities && !strcmp(s->sandbox.capabilities[0], "CAP_NET_BIND_SERVICE") &&
	      !s->sandbox.capabilities[1]);
	j = spec_to_json(s);
	sb = json_object_get(j, "sandbox");
	CHECK(json_is_false(json_object_get(sb, "seccomp")) &&
	      json_is_true(json_object_get(sb, "writable_root")) &&
	      json_array_size(json_object_get(sb, "capabilities")) == 1);
	CHECK_EQ(spec_parse(j, NULL, &s2, err, sizeof(err)), 0);
	CHECK(s2 && s2->sandbox.no_seccomp && s2->sandbox.host_home && s2->sandbox.capabilities &&
	      s2->sandbox.capabilities[0]);
	spec_free(s2);
	json_decref(j);
	spec_free(s);
}

/* "image": skopeo's transports, checked at parse; command and port then
 * optional (the image's config gives them); "user" only with an image. */
static void check_image(void)
{
	static const char *const good[] = {
		"docker://busybox", "docker://busybox:1.36", "docker://library/busy-box_x.y:t",
		"docker://registry.example.com:5000/team/fn:v1.2",
		"docker://localhost/fn@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"oci:/srv/layout", "oci:/srv/layout:tag", "docker-archive:/srv/fn.tar",
		"docker-archive:/srv/fn.tar:fn:v1", "oci-archive:/srv/fn.tar:v1",
	};
	static const char *const wrong[] = {
		"busybox", "docker:busybox", "docker://", "docker://Busy/Box",
		"docker://a//b", "docker://a:", "docker://a@sha256:12", "docker://a b",
		"oci:relative", "oci:", "docker-archive:/srv/../etc/x.tar", "oci:/srv/l:",
	};
	char err[256], text[512], path[256];
	enum image_transport t;
	struct func_spec *s;
	json_t *j;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (spec_image_ref(good[i], &t, path, sizeof(path), err, sizeof(err))) {
			fprintf(stderr, "image %s refused: %s\n", good[i], err);
			check_failures++;
		}
	}
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		snprintf(text, sizeof(text), "{\"id\":\"a\",\"image\":\"%s\"}", wrong[i]);
		bad(text, "image");
	}
	CHECK(!spec_image_ref("docker-archive:/srv/fn.tar:fn:v1", &t, path, sizeof(path), NULL, 0));
	CHECK_EQ(t, IMAGE_DOCKER_ARCHIVE);
	CHECK_STR(path, "/srv/fn.tar");
	CHECK(!spec_image_ref("docker://x/y:z", &t, path, sizeof(path), NULL, 0));
	CHECK_EQ(t, IMAGE_DOCKER);

	s = parse("{\"id\":\"a\",\"image\":\"oci:/srv/l:t\",\"user\":\"root\"}", NULL, err,
		  sizeof(err));
	REQUIRE(s);
	CHECK(!s->command && s->port == 0);
	CHECK_STR(s->image, "oci:/srv/l:t");
	CHECK_STR(s->user, "root");
	j = spec_to_json(s);
	CHECK(j && !json_object_get(j, "port") && !json_object_get(j, "command"));
	CHECK_STR(json_string_value(json_object_get(j, "image")), "oci:/srv/l:t");
	CHECK_STR(json_string_value(json_object_get(j, "user")), "root");
	json_decref(j);
	spec_free(s);
	bad("{\"id\":\"a\",\"image\":\"oci:/l\",\"bundle\":\"/b\"}", "image");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":1,\"user\":\"root\"}", "user");
	bad("{\"id\":\"a\",\"image\":\"oci:/l\",\"user\":\"\"}", "user");
	bad("{\"id\":\"a\",\"image\":\"oci:/l\",\"sandbox\":{\"writable_root\":true}}",
	    "writable_root");
	/* In a user namespace its rootfs is idmapped to the range
	 * (images/idmap.c): accepted. */
	s = parse("{\"id\":\"a\",\"image\":\"oci:/l\",\"sandbox\":{\"userns\":true}}", NULL,
		  err, sizeof(err));
	REQUIRE(s);
	CHECK(s->sandbox.userns && s->userns_given);
	spec_free(s);
	bad("{\"id\":\"a\",\"command\":[\"x\"]}", "port");
}

/* Routed requests' keys: "concurrency" (its default by "gpu"), "queue",
 * "queue_timeout_s", written back only where they differ from the default. */
static void check_routing(void)
{
	char err[256];
	struct func_spec *s;
	json_t *j;

	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"concurrency\":0}", "concurrency");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"concurrency\":10001}", "concurrency");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"concurrency\":1.5}", "concurrency");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"queue\":-1}", "queue");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"queue\":\"4\"}", "queue");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"queue_timeout_s\":-2}",
	    "queue_timeout_s");
	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80}", NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->concurrency, SPEC_DEFAULT_CONCURRENCY_CPU);
	CHECK_EQ(s->queue, SPEC_DEFAULT_QUEUE);
	CHECK(s->queue_timeout_s == SPEC_DEFAULT_QUEUE_TIMEOUT_S);
	j = spec_to_json(s);
	CHECK(!json_object_get(j, "concurrency") && !json_object_get(j, "queue") &&
	      !json_object_get(j, "queue_timeout_s"));
	json_decref(j);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"gpu\":true}", NULL, err,
		  sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->concurrency, SPEC_DEFAULT_CONCURRENCY_GPU);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"concurrency\":4,\"queue\":0,"
		  "\"queue_timeout_s\":2.5}",
		  NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->concurrency, 4);
	CHECK_EQ(s->queue, 0);
	CHECK(s->queue_timeout_s == 2.5);
	j = spec_to_json(s);
	CHECK_EQ(json_integer_value(json_object_get(j, "concurrency")), 4);
	CHECK_EQ(json_integer_value(json_object_get(j, "queue")), 0);
	CHECK(json_number_value(json_object_get(j, "queue_timeout_s")) == 2.5);
	json_decref(j);
	spec_free(s);
}

/* "mounts": each checked (absolute, clean, not the container's own paths,
 * not twice), read-only by default, written back with every key; and
 * "on_restore_failure": "boot" (the default, not written back) or "fail". */
/* "standby_gpu": "context" by default for a GPU function whose memory thaw
 * carries, "none" otherwise; written out only where it is not the default;
 * "context" refused where it cannot apply. */
static void check_standby_gpu(void)
{
	static const struct {
		const char *extra;
		bool context;
		const char *written; /* NULL: not written */
	} ok[] = {
		{ "", false, NULL },
		{ ",\"gpu\":true", true, NULL },
		{ ",\"gpu\":true,\"standby_gpu\":\"none\"", false, "none" },
		{ ",\"gpu\":true,\"standby_gpu\":\"context\"", true, NULL },
		{ ",\"gpu\":true,\"gpu_memory\":\"driver\"", false, NULL },
		{ ",\"standby_gpu\":\"none\"", false, NULL },
	};
	char text[256], err[256];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct func_spec *s;
		json_t *j;

		snprintf(text, sizeof(text), "{\"id\":\"a\",\"command\":[\"x\"],\"port\":80%s}",
			 ok[i].extra);
		s = parse(text, NULL, err, sizeof(err));
		REQUIRE(s);
		CHECK_EQ(s->standby_gpu_context, ok[i].context);
		j = spec_to_json(s);
		if (ok[i].written)
			CHECK_STR(json_string_value(json_object_get(j, "standby_gpu")) ?: "",
				  ok[i].written);
		else
			CHECK(json_object_get(j, "standby_gpu") == NULL);
		json_decref(j);
		spec_free(s);
	}
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby_gpu\":\"context\"}",
	    "standby_gpu");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"gpu\":true,"
	    "\"gpu_memory\":\"driver\",\"standby_gpu\":\"context\"}", "standby_gpu");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby_gpu\":\"all\"}",
	    "standby_gpu");
}

static void check_mounts(void)
{
	char err[256] = "";
	struct func_spec *s;
	json_t *j, *m;

#define FN "{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,"
	s = parse(FN "\"mounts\":[{\"source\":\"/srv/models\",\"destination\":\"/models\"},"
		     "{\"source\":\"/srv/cache\",\"destination\":\"/var/cache/x\","
		     "\"readonly\":false}],\"on_restore_failure\":\"fail\"}",
		  NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->nmounts, 2);
	CHECK_STR(s->mounts[0].source, "/srv/models");
	CHECK_STR(s->mounts[0].destination, "/models");
	CHECK(s->mounts[0].readonly);
	CHECK(!s->mounts[1].readonly);
	CHECK(s->restore_failure_fails);
	j = spec_to_json(s);
	m = json_object_get(j, "mounts");
	CHECK_EQ(json_array_size(m), 2);
	CHECK(json_is_true(json_object_get(json_array_get(m, 0), "readonly")));
	CHECK(json_is_false(json_object_get(json_array_get(m, 1), "readonly")));
	CHECK_STR(json_string_value(json_object_get(j, "on_restore_failure")), "fail");
	json_decref(j);
	spec_free(s);
	s = parse(FN "\"mounts\":[],\"on_restore_failure\":\"boot\"}", NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->nmounts, 0);
	CHECK(!s->restore_failure_fails);
	j = spec_to_json(s);
	CHECK(!json_object_get(j, "mounts") && !json_object_get(j, "on_restore_failure"));
	json_decref(j);
	spec_free(s);
	bad(FN "\"on_restore_failure\":\"retry\"}", "on_restore_failure");
	bad(FN "\"on_restore_failure\":true}", "on_restore_failure");
	bad(FN "\"mounts\":{}}", "mounts");
	bad(FN "\"mounts\":[\"/srv\"]}", "mounts[0]");
	bad(FN "\"mounts\":[{\"source\":\"srv\",\"destination\":\"/m\"}]}", "mounts[0].source");
	bad(FN "\"mounts\":[{\"source\":\"/\",\"destination\":\"/m\"}]}", "mounts[0].source");
	bad(FN "\"mounts\":[{\"source\":\"/srv/../etc\",\"destination\":\"/m\"}]}",
	    "mounts[0].source");
	bad(FN "\"mounts\":[{\"source\":\"/srv\"}]}", "mounts[0].destination");
	bad(FN "\"mounts\":[{\"source\":\"/srv\",\"destination\":\"/m/\"}]}",
	    "mounts[0].destination");
	bad(FN "\"mounts\":[{\"source\":\"/srv\",\"destination\":\"/proc/x\"}]}",
	    "mounts[0].destination");
	bad(FN "\"mounts\":[{\"source\":\"/srv\",\"destination\":\"/.thaw\"}]}",
	    "mounts[0].destination");
	bad(FN "\"mounts\":[{\"source\":\"/a\",\"destination\":\"/m\"},"
	       "{\"source\":\"/b\",\"destination\":\"/m\"}]}",
	    "mounts[1].destination");
	bad(FN "\"mounts\":[{\"source\":\"/a\",\"destination\":\"/m\",\"readonly\":1}]}",
	    "mounts[0].readonly");
	bad(FN "\"mounts\":[{\"source\":\"/a\",\"destination\":\"/m\",\"type\":\"bind\"}]}",
	    "mounts[0]: unknown key");
#undef FN
}

/* "shm_bytes": 64 MiB by default and then not written back (a spec without
 * it reads and writes as before); bytes or a size string, stored as bytes;
 * below 1 MiB, above 1 TiB, negative, fractional or not a size: 400's
 * message naming the key. */
static void check_shm_bytes(void)
{
	static const struct {
		const char *value;
		unsigned long long bytes;
	} good[] = {
		{ "1048576", 1ull << 20 },     { "\"256M\"", 256ull << 20 },
		{ "\"1GiB\"", 1ull << 30 },    { "\"2g\"", 2ull << 30 },
		{ "\"1T\"", 1ull << 40 },      { "100000000", 100000000 },
		{ "\"67108864\"", 64ull << 20 }, { "null", 64ull << 20 },
	};
	static const char *const refused[] = {
		"-1", "0", "64", "1048575", "1099511627777", "\"2T\"", "\"-1M\"", "\"\"",
		"\"64 M\"", "\"64X\"", "\"lots\"", "1.5e8", "true", "[1]", "{}",
		"9223372036854775807", "\"99999999999999999999G\"",
	};
	char text[256], err[256];
	struct func_spec *s;
	json_t *j;

	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80}", NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->shm_bytes, SPEC_DEFAULT_SHM_BYTES);
	CHECK_EQ(SPEC_DEFAULT_SHM_BYTES, 64ull << 20);
	j = spec_to_json(s);
	CHECK(j && !json_object_get(j, "shm_bytes"));
	json_decref(j);
	spec_free(s);
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		snprintf(text, sizeof(text),
			 "{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"shm_bytes\":%s}",
			 good[i].value);
		s = parse(text, NULL, err, sizeof(err));
		if (!s) {
			fprintf(stderr, "spec %s refused: %s\n", text, err);
			check_failures++;
			continue;
		}
		CHECK_EQ(s->shm_bytes, good[i].bytes);
		j = spec_to_json(s);
		if (good[i].bytes == SPEC_DEFAULT_SHM_BYTES)
			CHECK(!json_object_get(j, "shm_bytes"));
		else
			CHECK_EQ(json_integer_value(json_object_get(j, "shm_bytes")),
				 (json_int_t)good[i].bytes);
		spec_free(s);
		/* What is written back reads the same. */
		s = NULL;
		CHECK_EQ(spec_parse(j, NULL, &s, err, sizeof(err)), 0);
		CHECK(s && s->shm_bytes == good[i].bytes);
		spec_free(s);
		json_decref(j);
	}
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		snprintf(text, sizeof(text),
			 "{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"shm_bytes\":%s}",
			 refused[i]);
		bad(text, "shm_bytes: must be a size from 1M to 1T");
	}
}

int main(void)
{
	char err[256];
	struct func_spec *s, *s2;

	s = parse("{\"id\":\"cpu-example\",\"command\":[\"python3\",\"app.py\"],"
		  "\"env\":{\"A\":\"1\",\"B\":\"x=y\"},\"cwd\":\"/srv/fn\",\"port\":8000,"
		  "\"ready\":{\"http\":\"/health\",\"timeout_s\":30},"
		  "\"warmup\":[{\"method\":\"POST\",\"path\":\"/infer\",\"body\":{\"x\":1}},"
		  "{\"path\":\"/infer?x=2\"}],"
		  "\"prepare\":{\"method\":\"POST\",\"path\":\"/prepare\"},\"gpu\":false}",
		  NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK_STR(s->id, "cpu-example");
	CHECK_STR(s->command[0], "python3");
	CHECK_STR(s->command[1], "app.py");
	CHECK(s->command[2] == NULL);
	CHECK_STR(s->env[0], "A=1");
	CHECK_STR(s->env[1], "B=x=y");
	CHECK(s->env[2] == NULL);
	CHECK_STR(s->cwd, "/srv/fn");
	CHECK_EQ(s->port, 8000);
	CHECK_EQ(s->ready, READY_HTTP);
	CHECK_STR(s->ready_path, "/health");
	CHECK(s->ready_timeout_s == 30);
	CHECK_EQ(s->nwarmup, 2);
	CHECK_STR(s->warmup[0].method, "POST");
	CHECK_STR(s->warmup[0].body, "{\"x\":1}");
	CHECK_STR(s->warmup[1].method, "GET");
	CHECK_STR(s->warmup[1].path, "/infer?x=2");
	CHECK(s->warmup[1].body == NULL);
	CHECK(s->prepare && !strcmp(s->prepare->path, "/prepare"));
	CHECK(!s->gpu);
	CHECK(s->elide_zero); /* the default */

	/* Round trip: to JSON and back gives the same JSON. */
	json_t *j1 = spec_to_json(s);
	REQUIRE(j1);
	s2 = NULL;
	CHECK_EQ(spec_parse(j1, NULL, &s2, err, sizeof(err)), 0);
	if (s2) {
		json_t *j2 = spec_to_json(s2);
		CHECK(json_equal(j1, j2));
		json_decref(j2);
		CHECK_STR(s2->warmup[0].body, s->warmup[0].body);
	}
	spec_free(s2);
	json_decref(j1);
	spec_free(s);

	/* Defaults; the id argument sets/overrides the body's. */
	s = parse("{\"command\":[\"srv\"],\"port\":1}", "fn.1_a", err, sizeof(err));
	REQUIRE(s);
	CHECK_STR(s->id, "fn.1_a");
	CHECK_EQ(s->ready, READY_TCP);
	CHECK(s->ready_timeout_s == 60);
	CHECK(s->env && s->env[0] == NULL);
	CHECK(!s->cwd && !s->prepare && s->nwarmup == 0 && !s->gpu);
	CHECK_EQ(s->lazy, SPEC_LAZY_UNSET);
	/* No "lazy" written back: the start or thawd's default decides. */
	j1 = spec_to_json(s);
	CHECK(j1 && !json_object_get(j1, "lazy"));
	json_decref(j1);
	spec_free(s);
	/* "lazy" both ways survives the round trip. */
	for (int lz = 0; lz < 2; lz++) {
		char text[128];

		snprintf(text, sizeof(text), "{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,"
			 "\"lazy\":%s}", lz ? "true" : "false");
		s = parse(text, NULL, err, sizeof(err));
		REQUIRE(s);
		CHECK_EQ(s->lazy, lz ? SPEC_LAZY : SPEC_EAGER);
		j1 = spec_to_json(s);
		CHECK(j1 && json_is_boolean(json_object_get(j1, "lazy")) &&
		      json_is_true(json_object_get(j1, "lazy")) == lz);
		s2 = NULL;
		CHECK_EQ(spec_parse(j1, NULL, &s2, err, sizeof(err)), 0);
		CHECK(s2 && s2->lazy == s->lazy);
		spec_free(s2);
		json_decref(j1);
		spec_free(s);
	}
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":65535,\"gpu\":true,"
		  "\"ready\":{\"tcp\":true}}", "b", err, sizeof(err));
	REQUIRE(s);
	CHECK_STR(s->id, "b");
	CHECK(s->gpu);
	CHECK_EQ(s->port, 65535);
	spec_free(s);
	/* elide_zero: off when asked, and written back so. */
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,\"elide_zero\":false}", NULL, err,
		  sizeof(err));
	REQUIRE(s);
	CHECK(!s->elide_zero);
	j1 = spec_to_json(s);
	CHECK(j1 && json_is_false(json_object_get(j1, "elide_zero")));
	spec_free(s);
	s = NULL;
	CHECK_EQ(spec_parse(j1, NULL, &s, err, sizeof(err)), 0);
	CHECK(s && !s->elide_zero);
	json_decref(j1);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,\"elide_zero\":true}", NULL, err,
		  sizeof(err));
	CHECK(s && s->elide_zero);
	spec_free(s);
	/* gpu_memory: thaw by default; "driver" opts out, and is written back. */
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,\"gpu\":true}", NULL, err,
		  sizeof(err));
	CHECK(s && !s->gpu_memory_driver);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,\"gpu\":true,"
		  "\"gpu_memory\":\"driver\"}", NULL, err, sizeof(err));
	REQUIRE(s);
	CHECK(s->gpu_memory_driver);
	j1 = spec_to_json(s);
	CHECK_STR(json_string_value(json_object_get(j1, "gpu_memory")), "driver");
	json_decref(j1);
	spec_free(s);
	s = parse("{\"id\":\"a\",\"command\":[\"srv\"],\"port\":1,\"gpu_memory\":\"both\"}",
		  NULL, err, sizeof(err));
	CHECK(!s);
	CHECK(strstr(err, "gpu_memory") != NULL);
	spec_free(s);
	/* A bundle may name the command itself. */
	s = parse("{\"id\":\"a\",\"bundle\":\"/srv/b\",\"port\":80}", NULL, err, sizeof(err));
	CHECK(s && !s->command && !strcmp(s->bundle, "/srv/b"));
	spec_free(s);

	/* Bad specs, each with the field named. */
	bad("[]", "object");
	bad("{\"command\":[\"x\"],\"port\":80}", "id");
	bad("{\"id\":\"Bad\",\"command\":[\"x\"],\"port\":80}", "id");
	bad("{\"id\":\"../x\",\"command\":[\"x\"],\"port\":80}", "id");
	bad("{\"id\":\"a\",\"port\":80}", "command");
	bad("{\"id\":\"a\",\"command\":[],\"port\":80}", "command");
	bad("{\"id\":\"a\",\"command\":\"python3 app.py\",\"port\":80}", "command");
	bad("{\"id\":\"a\",\"command\":[\"x\",1],\"port\":80}", "command[1]");
	bad("{\"id\":\"a\",\"command\":[\"\"],\"port\":80}", "command[0]");
	bad("{\"id\":\"a\",\"command\":[\"x\"]}", "port");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":0}", "port");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":65536}", "port");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":\"80\"}", "port");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"env\":[\"A=1\"]}", "env");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"env\":{\"A\":1}}", "env.A");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"env\":{\"A=B\":\"1\"}}", "env");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"cwd\":\"rel/dir\"}", "cwd");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"bundle\":\"b\"}", "bundle");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{}}", "ready");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{\"http\":\"health\"}}",
	    "ready.http");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{\"tcp\":false}}", "ready.tcp");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{\"tcp\":true,\"http\":\"/\"}}",
	    "ready");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{\"tcp\":true,\"timeout_s\":0}}",
	    "ready.timeout_s");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"ready\":{\"tcp\":true,\"wait\":1}}",
	    "wait");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"warmup\":{}}", "warmup");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"warmup\":[{\"method\":\"GET\"}]}",
	    "warmup[0].path");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"warmup\":[{\"path\":\"/\"},"
	    "{\"path\":\"/a b\"}]}",
	    "warmup[1].path");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"warmup\":[{\"path\":\"/\",\"x\":1}]}",
	    "warmup[0]");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"prepare\":{\"method\":\"get\",\"path\":\"/\"}}",
	    "prepare.method");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"gpu\":\"yes\"}", "gpu");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"elide_zero\":1}", "elide_zero");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"lazy\":1}", "lazy");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"colour\":\"red\"}", "colour");
	/* The sandbox: only booleans and the default set of capabilities. */
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"sandbox\":true}", "sandbox");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"sandbox\":{\"root\":1}}",
	    "sandbox: unknown key \"root\"");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"sandbox\":{\"seccomp\":0}}",
	    "sandbox.seccomp");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,"
	    "\"sandbox\":{\"capabilities\":[\"CAP_SYS_ADMIN\"]}}", "sandbox.capabilities[0]");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,"
	    "\"sandbox\":{\"capabilities\":\"CAP_KILL\"}}", "sandbox.capabilities");
	check_sandbox();
	check_image();
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby\":-1}", "standby");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby\":65}", "standby");
	bad("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby\":\"2\"}", "standby");
	s = parse("{\"id\":\"a\",\"command\":[\"x\"],\"port\":80,\"standby\":2}", NULL, err,
		  sizeof(err));
	REQUIRE(s);
	CHECK_EQ(s->standby, 2);
	j1 = spec_to_json(s);
	CHECK_EQ(json_integer_value(json_object_get(j1, "standby")), 2);
	json_decref(j1);
	spec_free(s);
	check_routing();
	check_mounts();
	check_standby_gpu();
	check_shm_bytes();

	return check_failures ? 1 : 0;
}
