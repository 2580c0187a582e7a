/* SPDX-License-Identifier: Apache-2.0 */
/* test_snapshot_meta.c — the snapshot's meta, parsed once
 * (function/snapshot_meta.h):
 * - what prewarm writes reads back field for field, meta_version included;
 * - the names older thaws wrote or readers accepted (a GPU as a bare UUID,
 *   a GPU's figure under four names, the total under three, the CUDA
 *   processes as two lists) read as today's, and are never written;
 * - a manifest made before any of it (`thaw store put`, an old snapshot)
 *   reads as "not recorded";
 * - a member of the wrong type, a required one missing, a newer
 *   meta_version: an error naming it; a spec this thaw refuses is the
 *   spec's error, not the meta's.
 */
#include "function/snapshot_meta.h"
#include "test/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SPEC "{\"id\":\"f\",\"command\":[\"/bin/true\"],\"port\":8080,\"gpu\":true}"

static json_t *load(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	if (!j)
		fprintf(stderr, "bad JSON in the test: %s: %s\n", e.text, text);
	REQUIRE(j);
	return j;
}

/* Parse text: its return, why in why. */
static int parse(const char *text, struct snapshot_meta *sm, char *why, size_t len)
{
	json_t *j = load(text);
	int ret = snapshot_meta_parse(j, sm, why, len);

	json_decref(j);
	return ret;
}

/* text must fail, and why must hold want. */
static void refused(const char *text, const char *want)
{
	struct snapshot_meta sm;
	char why[256];

	CASE("%s", text);
	CHECK_EQ(parse(text, &sm, why, sizeof(why)), -EBADMSG);
	if (!strstr(why, want))
		CHECK_FAILED("the error \"%s\" does not name \"%s\"", why, want);
	CHECK(sm.spec == NULL && sm.gpus == NULL && sm.json_ == NULL);
	snapshot_meta_release(&sm); /* empty: nothing */
	CASE_END();
}

/* What prewarm writes, through the writer, reads back the same. */
static void round_trip(void)
{
	struct snapshot_gpu gpus[2] = {
		{ .uuid = "GPU-a", .name = "H200", .index = 0, .total_bytes = 150, .used_bytes = 7 },
		{ .uuid = "GPU-b", .name = "H200", .index = 3, .total_bytes = 150, .used_bytes = 0 },
	};
	struct snapshot_cuda_process procs[2] = { { .pid = 100, .ns_pid = 7, .gpus = 1 },
						  { .pid = 101, .ns_pid = 8, .gpus = 3 } };
	pid_t ns[] = { 7, 8 };
	json_t *spec_j = load(SPEC), *host = load("{\"arch\":\"x86_64\",\"criu\":\"4.2.1\"}");
	json_t *timings = load("{\"boot\":12.5,\"ingest\":3}"), *j;
	struct func_spec *spec = NULL;
	struct snapshot_meta in, out;
	char err[256], why[256];

	REQUIRE(spec_parse(spec_j, NULL, &spec, err, sizeof(err)) == 0);
	in = (struct snapshot_meta){
		.function = "f", .spec = spec,
		.versions = { .kernel = "6.18", .runc = "1.1", .criu = "4.2.1", .driver = 13000 },
		.gpus = gpus, .ngpus = 2, .cuda_processes = procs, .ncuda_processes = 2,
		.gpu_memory = { .recorded = true, .thaw = true, .why = "", .mount = true,
				.bytes = 1 << 20, .allocs = 3, .left_bytes = 4096, .ns_pids = ns,
				.nns_pids = 2 },
		.image = { .reference = "docker://x:1", .digest = "sha256:ab", .bundle = "/b" },
		.host = host, .timings_ms = timings, .image_bytes = 10,
		.image_bytes_before_elision = 20, .zero_pages_elided = 2, .created = "2026-01-02",
		.mapped_mount = "/.thaw", .confined = true,
		.thawd = { .registry = "/data/functions", .function = "f", .job = "j1" },
	};
	j = snapshot_meta_to_json(&in);
	REQUIRE(j);
	snapshot_meta_release(&in); /* the caller's: nothing */
	/* The old lists are written beside cuda_processes; no old name is. */
	CHECK_EQ(json_integer_value(json_object_get(j, "meta_version")), SNAPSHOT_META_VERSION);
	CHECK_EQ(json_integer_value(json_array_get(json_object_get(j, "cuda_pids"), 1)), 101);
	CHECK_EQ(json_integer_value(json_array_get(json_object_get(j, "cuda_ns_pids"), 0)), 7);
	CHECK(!json_object_get(j, "gpu_used_bytes") && !json_object_get(j, "booted"));
	CHECK(!json_object_get(json_array_get(json_object_get(j, "gpus"), 1), "used_bytes"));

	CHECK_EQ(snapshot_meta_parse(j, &out, why, sizeof(why)), 0);
	json_decref(j); /* out holds what it points into */
	CHECK_STR(why, "");
	CHECK_EQ(out.version, SNAPSHOT_META_VERSION);
	CHECK_STR(out.function, "f");
	REQUIRE(out.spec);
	CHECK_STR(out.spec->id, "f");
	CHECK_EQ(out.spec->port, 8080);
	CHECK(out.gpu);
	CHECK_STR(out.versions.kernel, "6.18");
	CHECK_STR(out.versions.criu, "4.2.1");
	CHECK_EQ(out.versions.driver, 13000);
	REQUIRE(out.ngpus == 2);
	CHECK_STR(out.gpus[1].uuid, "GPU-b");
	CHECK_STR(out.gpus[1].name, "H200");
	CHECK_EQ(out.gpus[1].index, 3);
	CHECK_EQ(out.gpus[0].used_bytes, 7);
	CHECK_EQ(out.gpus[1].used_bytes, 0);
	CHECK_EQ(out.gpus[0].total_bytes, 150);
	REQUIRE(out.ncuda_processes == 2);
	CHECK_EQ(out.cuda_processes[1].pid, 101);
	CHECK_EQ(out.cuda_processes[1].ns_pid, 8);
	CHECK_EQ(out.cuda_processes[1].gpus, 3);
	CHECK(out.gpu_memory.recorded && out.gpu_memory.thaw && out.gpu_memory.mount);
	CHECK_EQ(out.gpu_memory.bytes, 1 << 20);
	CHECK_EQ(out.gpu_memory.allocs, 3);
	CHECK_EQ(out.gpu_memory.left_bytes, 4096);
	REQUIRE(out.gpu_memory.nns_pids == 2);
	CHECK_EQ(out.gpu_memory.ns_pids[1], 8);
	CHECK_STR(out.image.reference, "docker://x:1");
	CHECK_STR(out.image.digest, "sha256:ab");
	CHECK_STR(out.image.bundle, "/b");
	CHECK(json_equal((json_t *)out.host, host));
	CHECK(json_equal((json_t *)out.timings_ms, timings));
	CHECK_EQ(out.image_bytes, 10);
	CHECK_EQ(out.image_bytes_before_elision, 20);
	CHECK_EQ(out.zero_pages_elided, 2);
	CHECK_STR(out.created, "2026-01-02");
	CHECK_STR(out.mapped_mount, "/.thaw");
	CHECK(out.confined && !out.booted);
	CHECK_STR(out.thawd.registry, "/data/functions");
	CHECK_STR(out.thawd.job, "j1");
	/* The spec taken: the caller's now, and not freed twice. */
	spec = snapshot_meta_take_spec(&out);
	CHECK(spec && !out.spec);
	snapshot_meta_release(&out);
	snapshot_meta_release(&out); /* twice: nothing */
	spec_free(spec);
	spec_free((struct func_spec *)in.spec);
	json_decref(spec_j);
	json_decref(host);
	json_decref(timings);
}

/* What older thaws wrote, and the names readers accepted. */
static void old_names(void)
{
	struct snapshot_meta sm;
	char why[256];
	json_t *j;

	CASE("the first snapshots: GPUs as UUIDs, two lists of pids");
	CHECK_EQ(parse("{\"spec\":" SPEC ",\"gpus\":[\"GPU-a\",\"GPU-b\"],"
		       "\"cuda_pids\":[100,101],\"cuda_ns_pids\":[7],\"gpu_bytes\":5}",
		       &sm, why, sizeof(why)),
		 0);
	CHECK_EQ(sm.version, 0);
	REQUIRE(sm.ngpus == 2);
	CHECK_STR(sm.gpus[1].uuid, "GPU-b");
	CHECK(sm.gpus[1].name == NULL);
	CHECK_EQ(sm.gpus[1].index, -1);
	CHECK_EQ(sm.gpu_used_bytes, 5);
	REQUIRE(sm.ncuda_processes == 2);
	CHECK_EQ(sm.cuda_processes[0].pid, 100);
	CHECK_EQ(sm.cuda_processes[0].ns_pid, 7);
	CHECK_EQ(sm.cuda_processes[1].ns_pid, 0);
	CHECK(!sm.confined && !sm.mapped_mount && !sm.gpu_memory.recorded);
	/* Written again: today's names only. */
	j = snapshot_meta_to_json(&sm);
	REQUIRE(j);
	CHECK_EQ(json_integer_value(json_object_get(j, "gpu_used_bytes")), 5);
	CHECK(!json_object_get(j, "gpu_bytes"));
	CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(j, "gpus"), 0),
						    "uuid")),
		  "GPU-a");
	json_decref(j);
	snapshot_meta_release(&sm);

	CASE("a GPU's figure under each of its names");
	static const char *const names[] = { "used_bytes", "memory_used_bytes", "gpu_bytes",
					     "used" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char text[256];

		snprintf(text, sizeof(text), "{\"gpus\":[{\"uuid\":\"GPU-a\",\"%s\":42}]}",
			 names[i]);
		CASE("%s", text);
		CHECK_EQ(parse(text, &sm, why, sizeof(why)), 0);
		CHECK_EQ(sm.ngpus ? sm.gpus[0].used_bytes : 0, 42);
		snapshot_meta_release(&sm);
	}
	CASE("the first name with a figure wins");
	CHECK_EQ(parse("{\"gpus\":[{\"used_bytes\":0,\"gpu_bytes\":9,\"used\":3}]}", &sm, why,
		       sizeof(why)),
		 0);
	CHECK_EQ(sm.gpus[0].used_bytes, 9);
	snapshot_meta_release(&sm);
	CASE("the total under each of its names");
	CHECK_EQ(parse("{\"gpu_memory_bytes\":11}", &sm, why, sizeof(why)), 0);
	CHECK_EQ(sm.gpu_used_bytes, 11);
	snapshot_meta_release(&sm);
	CHECK_EQ(parse("{\"gpu_used_bytes\":12,\"gpu_bytes\":13}", &sm, why, sizeof(why)), 0);
	CHECK_EQ(sm.gpu_used_bytes, 12);
	snapshot_meta_release(&sm);

	CASE("a manifest thaw store put made: nothing recorded");
	CHECK_EQ(parse("{\"criu\":\"4.2\",\"anything\":[1]}", &sm, why, sizeof(why)), 0);
	CHECK(!sm.spec && sm.spec_err == -ENOENT && !sm.function && !sm.ngpus &&
	      !sm.ncuda_processes && !sm.image.reference && !sm.thawd.registry && !sm.host);
	snapshot_meta_release(&sm);

	CASE("a booted standby's record");
	CHECK_EQ(parse("{\"spec\":" SPEC ",\"booted\":true}", &sm, why, sizeof(why)), 0);
	CHECK(sm.booted && sm.spec);
	snapshot_meta_release(&sm);

	CASE("a spec this thaw refuses: the spec's error");
	CHECK_EQ(parse("{\"meta_version\":1,\"function\":\"f\",\"spec\":{\"id\":\"f\","
		       "\"port\":80}}",
		       &sm, why, sizeof(why)),
		 0);
	CHECK(!sm.spec && sm.spec_err == -EINVAL && strstr(sm.spec_why, "command"));
	CHECK(!snapshot_meta_take_spec(&sm));
	snapshot_meta_release(&sm);
	CASE_END();
}

static void errors(void)
{
	struct snapshot_meta sm;
	char why[16];

	refused("[1]", "not an object");
	refused("{\"meta_version\":2,\"function\":\"f\",\"spec\":" SPEC "}",
		"\"meta_version\" is 2: this thaw reads up to 1");
	refused("{\"meta_version\":\"1\"}", "\"meta_version\" is not a positive integer");
	refused("{\"meta_version\":1,\"spec\":" SPEC "}", "without its \"function\"");
	refused("{\"meta_version\":1,\"function\":\"f\"}", "without its \"spec\"");
	refused("{\"spec\":[]}", "\"spec\" is not an object");
	refused("{\"function\":7}", "\"function\" is not a string");
	refused("{\"gpus\":{}}", "\"gpus\" is not an array");
	refused("{\"gpus\":[5]}", "gpus[0] is neither an object nor a UUID");
	refused("{\"gpus\":[{\"uuid\":1}]}", "gpus[0].\"uuid\" is not a string");
	refused("{\"gpus\":[{\"uuid\":\"a\"},{\"used\":\"10\"}]}",
		"gpus[1].\"used\" is not a non-negative integer");
	refused("{\"gpus\":[{\"index\":-1}]}", "gpus[0].\"index\" is not a non-negative integer");
	refused("{\"gpu_bytes\":-5}", "\"gpu_bytes\" is not a non-negative integer");
	refused("{\"cuda_pids\":[1,0]}", "cuda_pids[1] is not a process id");
	refused("{\"cuda_processes\":[{\"pid\":3,\"gpus\":[0]}]}",
		"cuda_processes[0].\"gpus\"[0] is not one of the snapshot's GPUs");
	refused("{\"cuda_processes\":[{\"ns_pid\":3}]}",
		"cuda_processes[0].\"pid\" is not a process id");
	refused("{\"gpu_memory\":{\"mode\":\"both\"}}",
		"gpu_memory.\"mode\" is \"both\", neither \"thaw\" nor \"driver\"");
	refused("{\"gpu_memory\":{\"mode\":\"thaw\",\"bytes\":\"1G\"}}",
		"gpu_memory.\"bytes\" is not a non-negative integer");
	refused("{\"gpu_memory\":{\"mount\":1}}", "gpu_memory.\"mount\" is not true or false");
	refused("{\"gpu_memory\":{\"ns_pids\":[\"7\"]}}", "gpu_memory.ns_pids[0] is not a process id");
	refused("{\"image\":{\"reference\":\"docker://x\"}}", "\"image\" lacks its \"digest\"");
	refused("{\"image\":\"docker://x\"}", "\"image\" is not an object");
	refused("{\"host\":[]}", "\"host\" is not an object");
	refused("{\"timings_ms\":{\"boot\":\"1\"}}", "timings_ms.\"boot\" is not a number");
	refused("{\"versions\":{\"driver\":\"580\"}}", "versions.\"driver\" is not an integer");
	refused("{\"confined\":\"yes\"}", "\"confined\" is not true or false");
	refused("{\"mapped_mount\":true}", "\"mapped_mount\" is not a string");
	refused("{\"thawd\":{\"registry\":5}}", "thawd.\"registry\" is not a string");
	/* A short buffer is cut, never overrun. */
	CHECK_EQ(parse("{\"gpus\":{}}", &sm, why, sizeof(why)), -EBADMSG);
	CHECK_EQ(strlen(why), sizeof(why) - 1);
	CHECK_EQ(parse("{\"gpus\":{}}", &sm, NULL, 0), -EBADMSG);
}

int main(void)
{
	round_trip();
	old_names();
	errors();
	return check_failures ? 1 : 0;
}
