#!/usr/bin/env bash
# thaw-bench against a fake thawd (test/fixtures/fake_thawd.py) that answers
# some starts with 503, some with 500, some never, some with an instance that
# answers wrongly: the failure counts by kind, percentiles of good starts only,
# phase means, instance cleanup, tokens, cold-tier rounds, the JSON and the SVG.
set -u
B=${THAW_BUILD:-build}
R=${THAW_ROOT:-.}
BENCH=$B/bench/thaw-bench
FAKE=$R/test/fixtures/fake_thawd.py
[ -x "$BENCH" ] || { echo "no $BENCH"; exit 1; }
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }

T=$(mktemp -d /tmp/thaw-test-bench-XXXXXX)
FAKE_PID=""
stop_fake() {
	if [ -n "$FAKE_PID" ]; then
		kill "$FAKE_PID" 2>/dev/null
		wait "$FAKE_PID" 2>/dev/null
		FAKE_PID=""
	fi
}
IMG=""
cleanup() {
	stop_fake
	[ -n "$IMG" ] && rm -rf "$IMG"
	rm -rf "$T"
}
trap cleanup EXIT

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

start_fake() { # args for the fake; sets PORT and URL
	stop_fake
	rm -f "$T/port"
	python3 "$FAKE" --port-file "$T/port" "$@" &
	FAKE_PID=$!
	for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
	[ -s "$T/port" ] || { echo "fake thawd did not start"; exit 1; }
	PORT=$(cat "$T/port")
	URL=http://127.0.0.1:$PORT
}

# jq-less JSON probe: jget FILE 'python expression on j'
jget() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
expect_eq() { # what got want
	[ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

INFER=(--infer "GET /infer?x=7" --expect '"y": 49')

# 1. A burst of 10 with every kind of failure.  The good starts take ~50 ms;
# a failed one would show up as 2000 ms (timeout) or >= 1500 ms (wrong answer,
# answered late on purpose) if it leaked into the percentiles.
start_fake --plan ok,503,ok,500,hang,wrong,ok,ok,nojson,ok --delay-ms 50 --wrong-delay-ms 1500
"$BENCH" --url "$URL" --function fn-a --burst 10 "${INFER[@]}" --start-timeout 2 \
	--json "$T/a.json" --svg "$T/a.svg" >"$T/a.out" 2>"$T/a.err"
rc=$?
cat "$T/a.out"
# 5 of 10 failed, and --max-failures is 0 by default: the run is made and
# reported, and the exit status says it did not pass.
expect_eq "burst exit" "$rc" 3
grep -q "5 of 10 starts failed (--max-failures 0)" "$T/a.err" || fail "no word on the failed starts: $(cat "$T/a.err")"
expect_eq attempts "$(jget "$T/a.json" 'j["attempts"]')" 10
expect_eq ok "$(jget "$T/a.json" 'j["ok"]')" 5
expect_eq failed "$(jget "$T/a.json" 'j["failed"]')" 5
expect_eq failures "$(jget "$T/a.json" 'sorted(j["failures"].items())')" \
	"[('infer_wrong_answer', 1), ('start_bad_response', 1), ('start_http_500', 1), ('start_http_503', 1), ('start_timeout', 1)]"
expect_eq "latency n" "$(jget "$T/a.json" 'j["start_latency_ms"]["n"]')" 5
# percentiles of good starts only: all >= the fake's 50 ms delay, all < 1000 ms
expect_eq "latency range" "$(jget "$T/a.json" '50 <= j["start_latency_ms"]["min"] and j["start_latency_ms"]["max"] < 1000 and j["start_latency_ms"]["p50"] <= j["start_latency_ms"]["p99"] <= j["start_latency_ms"]["max"]')" True
expect_eq "phase means" "$(jget "$T/a.json" '[j["phases_mean_ms"][k] for k in ("materialize","criu_restore","gpu_restore","ready","total")]')" \
	"[11.0, 22.0, 0.0, 33.0, 66.0]"
expect_eq "tiers" "$(jget "$T/a.json" 'sorted(j["tier"].items())')" "[('disk', 1), ('ram', 5)]"
expect_eq "restore modes" "$(jget "$T/a.json" 'sorted(j["restore_mode"].items())')" "[('eager', 1), ('lazy', 5)]"
grep -Eq "^restored: (eager 1, lazy 5|lazy 5, eager 1)$" "$T/a.out" || fail "table does not list the restore modes"
grep -q "start_http_503 1" "$T/a.out" || fail "table does not list start_http_503 1"
grep -q "start_timeout 1" "$T/a.out" || fail "table does not list start_timeout 1"
grep -q "infer_wrong_answer 1" "$T/a.out" || fail "table does not list infer_wrong_answer 1"
grep -Eq "^thaw start -> first answer +5 " "$T/a.out" || fail "table row of good starts is not n=5"
# every instance that was created was deleted: 5 ok + 1 wrong
curl -s "$URL/_fake/stats" >"$T/stats.json"
expect_eq "live instances" "$(jget "$T/stats.json" 'j["live"]')" "[]"
expect_eq "deleted instances" "$(jget "$T/stats.json" 'j["deleted"]')" 6
# the SVG parses and has a line per series, axis labels and ticks
python3 - "$T/a.svg" <<'EOF' || fail "SVG is not a well-formed latency plot"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg", root.tag
texts = [t.text or "" for t in root.iter(ns + "text")]
assert any("start latency (ms)" in t for t in texts), texts
assert any("fraction" in t for t in texts), texts
assert any("thaw start" in t and "n=5" in t for t in texts), texts
assert any("bursts of 10, 1 rounds" in t for t in texts), texts  # the title says what ran
lines = root.findall(ns + "polyline")
assert len(lines) == 1, len(lines)
pts = lines[0].get("points").split()
assert len(pts) >= 2 * 5, pts  # a step per distinct sample
assert sum(1 for t in texts if t.strip().replace(".", "").isdigit()) >= 10, texts  # ticks
EOF

# 2. Open loop, fixed arrivals: 15/s for 1 s is exactly 15 starts, all good.
start_fake --plan ok --delay-ms 10
"$BENCH" --url "$URL/" --function fn-a --rate 15 --duration 1 --arrivals fixed "${INFER[@]}" \
	--json "$T/b.json" >"$T/b.out" 2>&1 || fail "rate run exit $?"
expect_eq "fixed attempts" "$(jget "$T/b.json" 'j["attempts"]')" 15
expect_eq "fixed ok" "$(jget "$T/b.json" 'j["ok"]')" 15
expect_eq "fixed failures" "$(jget "$T/b.json" 'j["failures"]')" "{}"
# Poisson arrivals are seeded: the same seed gives the same count, twice.
"$BENCH" --url "$URL" --function fn-a --rate 20 --duration 1 --seed 7 "${INFER[@]}" \
	--json "$T/c1.json" >/dev/null 2>&1
"$BENCH" --url "$URL" --function fn-a --rate 20 --duration 1 --seed 7 "${INFER[@]}" \
	--json "$T/c2.json" >/dev/null 2>&1
n1=$(jget "$T/c1.json" 'j["attempts"]')
n2=$(jget "$T/c2.json" 'j["attempts"]')
expect_eq "poisson seeded" "$n1" "$n2"
[ "$n1" -ge 5 ] && [ "$n1" -le 40 ] || fail "poisson 20/s for 1 s gave $n1 arrivals"

# 3. An inference answering 500, and a start answered with 404.
start_fake --plan infer500,404 --delay-ms 1
"$BENCH" --url "$URL" --function fn-a --burst 2 "${INFER[@]}" --json "$T/d.json" >/dev/null 2>&1
expect_eq "infer 500 / 404" "$(jget "$T/d.json" 'sorted(j["failures"].items())')" \
	"[('infer_http_500', 1), ('start_http_404', 1)]"
expect_eq "no latency" "$(jget "$T/d.json" 'j["start_latency_ms"]')" "{'n': 0}"

# 4. Token: without it every start is a 401; with --token-file all good.
start_fake --plan ok --token s3cret --delay-ms 1
echo s3cret >"$T/token"
"$BENCH" --url "$URL" --function fn-a --burst 3 "${INFER[@]}" --json "$T/e.json" --max-failures 3 >/dev/null 2>&1
expect_eq "failures within --max-failures: exit" "$?" 0
expect_eq "no token" "$(jget "$T/e.json" 'j["failures"]')" "{'start_http_401': 3}"
"$BENCH" --url "$URL" --function fn-a --burst 3 --token-file "$T/token" "${INFER[@]}" \
	--json "$T/f.json" >/dev/null 2>&1
expect_eq "token ok" "$(jget "$T/f.json" 'j["ok"]')" 3
curl -s -H "Authorization: Bearer s3cret" "$URL/_fake/stats" >"$T/stats.json"
expect_eq "token deletes" "$(jget "$T/stats.json" 'j["live"]')" "[]"

# 5. Cold tier: the RAM tier is emptied before each round by --cold-cmd.
start_fake --plan ok --delay-ms 1
"$BENCH" --url "$URL" --function fn-a --burst 2 --repeat 3 --cold-tier \
	--cold-cmd "curl -sf -X POST $URL/_fake/drop >/dev/null && echo x >>$T/drops" \
	"${INFER[@]}" --json "$T/g.json" >"$T/g.out" 2>&1 || fail "cold-tier exit $?"
expect_eq "cold drops" "$(wc -l <"$T/drops")" 3
expect_eq "cold tiers" "$(jget "$T/g.json" 'sorted(j["tier"].items())')" "[('disk', 3), ('ram', 3)]"
expect_eq "cold ok" "$(jget "$T/g.json" 'j["ok"]')" 6
"$BENCH" --url "$URL" --function fn-a --burst 1 --cold-tier --cold-cmd false "${INFER[@]}" \
	>/dev/null 2>&1 && fail "a failing --cold-cmd must fail the run"

# 6. Nothing listening: connection errors, counted as such.
stop_fake
"$BENCH" --url "$URL" --function fn-a --burst 2 "${INFER[@]}" --json "$T/h.json" >/dev/null 2>&1
expect_eq "connect" "$(jget "$T/h.json" 'j["failures"]')" "{'start_connect': 2}"

# 7. Usage errors exit 1.
"$BENCH" --function fn-a --burst 1 >/dev/null 2>&1; expect_eq "no --infer" $? 1
"$BENCH" --function fn-a "${INFER[@]}" >/dev/null 2>&1; expect_eq "no mode" $? 1
"$BENCH" --function fn-a --rate 1 "${INFER[@]}" >/dev/null 2>&1; expect_eq "no duration" $? 1
"$BENCH" --function Bad/id --burst 1 "${INFER[@]}" >/dev/null 2>&1; expect_eq "bad id" $? 1
"$BENCH" --function fn-a --burst 1 --infer "GET infer" >/dev/null 2>&1; expect_eq "bad infer" $? 1
"$BENCH" --function fn-a --burst 1 --cold-tier "${INFER[@]}" >/dev/null 2>&1
expect_eq "cold without cmd" $? 1

# 8. Baselines with real runc and CRIU (root only): cold boot of the CPU
# example, and plain runc restore of its image, made by thaw snapshot and
# written out of the store uncompressed by thaw materialize.
if [ "$(id -u)" = 0 ] && command -v runc >/dev/null && [ -x "$R/.deps/criu-wrapper" ]; then
	# never the system's criu 3.17, wherever the binary under test lives
	export THAW_CRIU=${THAW_CRIU:-$R/.deps/criu-wrapper}
	cat >"$T/fn.json" <<EOF
{"command": ["python3", "cpu_example.py"], "cwd": "$(cd "$R/bench/functions" && pwd)",
 "env": {"THAW_EXAMPLE_MIB": "8"}, "port": 8000,
 "ready": {"http": "/health", "timeout_s": 60}}
EOF
	snap=$("$B/thaw" --data-dir "$T/data" snapshot --id fn-a "$T/fn.json" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"])')
	IMG=$(mktemp -u /dev/shm/thaw-test-bench-img-XXXXXX)
	if [ -n "$snap" ] && "$B/thaw" --data-dir "$T/data" materialize --out "$IMG" "$snap" >/dev/null; then
		start_fake --plan ok --delay-ms 1
		mkdir -p "$T/tmp"
		TMPDIR=$T/tmp "$BENCH" --url "$URL" --function fn-a --burst 1 \
			--infer "GET /infer?x=7" --expect '"x": 7, "y": ' --runc-root "$T/runc" \
			--baseline-cold "$T/fn.json" --baseline-plain "$IMG" \
			--baseline-runs 2 --json "$T/i.json" --svg "$T/i.svg" >"$T/i.out" 2>&1
		cat "$T/i.out"
		expect_eq "cold boot" "$(jget "$T/i.json" '(j["baselines"]["cold_boot"]["available"], j["baselines"]["cold_boot"]["latency_ms"]["n"])')" "(True, 2)"
		expect_eq "plain restore" "$(jget "$T/i.json" '(j["baselines"]["plain_restore"]["available"], j["baselines"]["plain_restore"]["latency_ms"]["n"])')" "(True, 2)"
		expect_eq "baseline lines" "$(python3 -c 'import sys,xml.etree.ElementTree as E; print(len(E.parse(sys.argv[1]).getroot().findall("{http://www.w3.org/2000/svg}polyline")))' "$T/i.svg")" 3
		# a missing image is reported as not available, never as a number
		TMPDIR=$T/tmp "$BENCH" --url "$URL" --function fn-a --burst 1 \
			--infer "GET /infer?x=7" --runc-root "$T/runc" \
			--baseline-plain "$T/no-such-image" --baseline-cold "$T/fn.json" \
			--baseline-runs 1 --json "$T/j.json" >/dev/null 2>&1
		expect_eq "no image" "$(jget "$T/j.json" 'j["baselines"]["plain_restore"]["available"]')" False
		grep -q "not available: cannot copy the image" "$T/j.json" ||
			fail "no reason for the missing baseline"
	else
		fail "thaw snapshot/materialize of the CPU example failed"
	fi
	# The same function as a GPU one, under the CUDA mock (test/cuda_mock.c):
	# its container binds libthaw-cuda's directories (/.thaw-gpu and
	# /.thaw-gpu-out), which CRIU dumps as external mounts; a plain restore
	# whose bundle lacks them fails ("No mapping for N:(null) mountpoint").
	if command -v "${CC:-cc}" >/dev/null && [ -e "$B/libthaw-cuda.so" ]; then
		mkdir -p "$T/mock"
		"${CC:-cc}" -shared -fPIC -O1 -o "$T/mock/libcuda.so.1" "$R/test/cuda_mock.c" &&
			ln -s libcuda.so.1 "$T/mock/libnvidia-ml.so.1" || fail "cannot build the fake driver"
		sed 's/"port": 8000,/"port": 8000, "gpu": true,/' "$T/fn.json" >"$T/gfn.json"
		rm -rf "$IMG"
		gsnap=$(LD_LIBRARY_PATH=$T/mock MOCK_NVML_FREE_MIB=40000,60000 THAW_NO_GPU= \
			"$B/thaw" --data-dir "$T/data" snapshot --id fn-g "$T/gfn.json" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"])')
		if [ -n "$gsnap" ] && "$B/thaw" --data-dir "$T/data" materialize --out "$IMG" "$gsnap" >/dev/null; then
			start_fake --plan ok --delay-ms 1
			LD_LIBRARY_PATH=$T/mock MOCK_NVML_FREE_MIB=40000,60000 THAW_NO_GPU= TMPDIR=$T/tmp \
				"$BENCH" --url "$URL" --function fn-g --burst 1 \
				--infer "GET /infer?x=7" --expect '"x": 7, "y": ' --runc-root "$T/runc" \
				--baseline-plain "$IMG" --baseline-cold "$T/gfn.json" --baseline-runs 1 \
				--json "$T/g.json" >"$T/g.out" 2>&1
			got=$(jget "$T/g.json" '(j["baselines"]["plain_restore"]["available"], j["baselines"]["plain_restore"].get("latency_ms", {}).get("n"))')
			[ "$got" = "(True, 1)" ] ||
				fail "plain restore of a GPU snapshot: $got: $(grep -m1 'plain restore .*not available' "$T/g.out")"
		else
			fail "thaw snapshot/materialize of the CPU example as a GPU function failed"
		fi
	fi
	[ -z "$(runc --root "$T/runc" list -q 2>/dev/null)" ] || fail "containers left"
	grep -q "$T/tmp" /proc/mounts && fail "namespaces left mounted"
	[ -z "$(ls -A "$T/tmp" 2>/dev/null)" ] || fail "temp dirs left: $(ls "$T/tmp")"
else
	echo "baselines not tested: needs root, runc and .deps/criu-wrapper"
fi

[ $fails = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all thaw-bench checks passed"
