#!/usr/bin/env bash
# Routed requests across a new snapshot at max_instances (issue 44, L8),
# with real runc, CRIU and thawd, and test/fixtures/proxy_fn.py:
#   1. q (max_instances 1, concurrency 1, queue 8) serves a held stream on
#      its instance A; a new snapshot of q is made meanwhile; the stream
#      ends, and A is being stopped (its snapshot replaced): its function
#      takes its time to exit on SIGTERM (proxy_fn.py's TERM_GATE);
#   2. four requests arrive meanwhile: A, being stopped, holds no place
#      against max_instances (docs/API.md), so an instance of the new
#      snapshot starts at once and answers the four 200 while A is still in
#      its grace, none refused 429;
#   3. A exits, and is gone; the new instance stays.
# Nothing waits for a time to pass: each step waits (with a generous limit)
# for what it expects.
set -u
NAME=routed-resnap
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" proxy_fn.py
mkdir -p "$T/out"
start_thawd

metric() {
	curl -s "$URL/metrics" | awk -v n="$1{$2}" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
ids() {
	curl -s "$URL/instances" | python3 -c "import json,sys
print(' '.join(i['instance'] for i in json.load(sys.stdin)['instances'] if i.get('function') == 'q'))"
}

put_snapshot q "$(fn_spec proxy_fn.py "$FN" '"idle_s": 300, "max_instances": 1,
	"concurrency": 1, "queue": 8, "queue_timeout_s": 300, "stop_grace_s": 300,
	"env": {"TERM_GATE": "term"}')"

# ---- 1. A holds a stream; a new snapshot; A is being stopped ----
rm -f "$FN/g1" "$FN/term"
curl -sN "$URL/function/q/stream?gate=g1" >"$T/held.out" &
hp=$!
wait_for 120 grep -q first "$T/held.out" || { fail "the stream never began"; exit 1; }
A=$(ids)
st=$(api POST "/functions/q/snapshot?wait=1")
[ "$st" = 200 ] || { fail "re-snapshot of q: $st $(cat "$T/body")"; exit 1; }
# A request after the new snapshot: the pool sees it (and waits for A's
# slot, at max_instances); it is answered once the stream ends.
curl -s -o "$T/out/0" "$URL/function/q/hello?x=0" &
zp=$!
queued1() { [ "$(metric thaw_routed_queue 'function="q"')" = 1 ]; }
wait_for 120 queued1 || fail "the request after the new snapshot did not wait"
touch "$FN/g1"
wait $hp
wait $zp
terminating() { curl -s "$URL/instances/$A/logs" | grep -q terminating; }
wait_for 120 terminating && ok "the stream ended; $A (the old snapshot's) is being stopped" ||
	fail "$A was not stopped: $(grep "$A" "$T/thawd.log" | tail -2)"

# ---- 2. four requests meanwhile ----
rp=()
for x in 1 2 3 4; do
	curl -s -o "$T/out/$x" -w '%{http_code}\n' "$URL/function/q/hello?x=$x" >"$T/out/$x.code" &
	rp+=($!)
done
answered() { [ "$(cat "$T"/out/?.code 2>/dev/null | wc -l)" = 4 ]; }
wait_for 300 answered
codes=$(cat "$T"/out/?.code 2>/dev/null | tr '\n' ' ')
right=0
for x in 1 2 3 4; do [ "$(cat "$T/out/$x" 2>/dev/null)" = "hello $x" ] && right=$((right + 1)); done
B_=$(ids)
B_=${B_//$A/}
B_=${B_// /}
# A's function exits only once "term" is there: it is still being stopped.
[ "$codes" = "200 200 200 200 " ] && [ $right = 4 ] && [ -n "$B_" ] &&
	! grep -q "instance $A of q stopped" "$T/thawd.log" &&
	ok "the 4 answered 200 by $B_ (of the new snapshot) while $A is still being stopped, none refused" ||
	fail "while $A is being stopped: codes $codes, $right right bodies, instances $(ids); $(grep -m2 'too_many' "$T/thawd.log")"

# ---- 3. A exits ----
touch "$FN/term"
wait "${rp[@]}"
stopped() { grep -q "instance $A of q stopped: idle, its function's snapshot replaced" "$T/thawd.log"; }
wait_for 120 stopped && [ "$(ids)" = "$B_" ] && ok "$A stopped once its function exited; $B_ stays" ||
	fail "after $A's exit: instances $(ids); $(grep "$A" "$T/thawd.log" | tail -2)"

echo "$fails failure(s)"
[ $fails = 0 ]
