#!/usr/bin/env bash
# thaw-bench's idle-stop scenario against a real thawd (real runc and CRIU),
# a small CPU function (test/fixtures/term_fn.py) whose spec has
# "idle_s": 2: --burst 8 --idle-stop 2 starts 8 instances, uses each once,
# and watches them; each must be stopped 2-4 s after that use ("stopped:
# idle", not sooner, not later) and none left running (thaw-bench exits 3
# otherwise); nothing of them is left after (records, containers, network
# namespace mounts, processes).
#
# How promptly thawd stops an idle instance is this test's to hold (the
# other lifetime tests bound only how soon): scripts/run-tests.sh runs it
# alone, since a machine busy with other tests would make the stops late.
set -u
NAME=idlebench
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
BENCH=$B/bench/thaw-bench
[ -x "$BENCH" ] || { echo "no $BENCH (make all)"; exit 1; }
fixture_fn "$T/fn" term_fn.py
start_thawd

put_snapshot z "$(fn_spec term_fn.py "$T/fn" '"env": {"TERM_MODE": "exit"}, "idle_s": 2, "max_instances": 24')"

"$BENCH" --url "$URL" --function z --burst 8 --idle-stop 2 --infer "GET /hello" \
	--expect hello --json "$T/bench.json" >"$T/bench.out" 2>&1
rc=$?
cat "$T/bench.out"
on_time=$(jget "$T/bench.json" "j['idle_stop']['on_time']")
[ $rc = 0 ] && [ "$on_time" = 8 ] && [ "$(jget "$T/bench.json" "j['idle_stop']['left_running']")" = 0 ] &&
	ok "thaw-bench --idle-stop 2: 8 of 8 stopped on time, none left" ||
	fail "thaw-bench --idle-stop 2: exit $rc, on time ${on_time:-?}"
left=$(ls "$DATA/instances" 2>/dev/null | sed 's/^/instances\//'
	own_containers | sed 's/^/container /'
	own_mounts | grep '/instances/' | sed 's/^/mount /'
	own_procs | grep -v "^$THAWD_PID " | sed 's/^/process /')
[ -z "$left" ] && ok "nothing of them left" || fail "after thaw-bench, left: $(echo "$left" | head -10)"

api DELETE /functions/z >/dev/null
echo "$fails failure(s)"
[ $fails = 0 ]
