#!/usr/bin/env bash
# A routed instance outlives its thawd (issue 44, M2), with real runc, CRIU
# and thawd, and test/fixtures/proxy_fn.py:
#   1. a routed request starts an instance of r (max_instances 1);
#   2. thawd is killed (kill -9), and a new one started on the same data
#      directory adopts the instance;
#   3. routed requests to r are answered by that instance (not 429: it counts
#      against max_instances, so it must take r's requests), and no other
#      instance of r is started;
#   4. it still stops after its idle_s, as it would have under its thawd.
# Nothing waits for a time to pass: each step waits (with a generous limit)
# for what it expects.
set -u
NAME=routed-adopt
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" proxy_fn.py
start_thawd

routed() { curl -s -o "$T/out" -w '%{http_code}' "$@"; }
ids() { # the ids of r's instances
	curl -s "$URL/instances" | python3 -c "import json,sys
print(' '.join(i['instance'] for i in json.load(sys.stdin)['instances'] if i.get('function') == 'r'))"
}
served_by() { grep -o "GET /function/r/hello[^ ]* 200 .* instance r-[0-9a-f]*" "$T/thawd.log" | tail -1 | awk '{ print $NF }'; }

put_snapshot r "$(fn_spec proxy_fn.py "$FN" '"idle_s": 4, "max_instances": 1,
	"concurrency": 4, "queue_timeout_s": 120')"

# ---- 1. an instance for routed requests ----
st=$(routed "$URL/function/r/hello?x=1")
first=$(ids)
[ "$st" = 200 ] && [ "$(cat "$T/out")" = "hello 1" ] && [ -n "$first" ] &&
	ok "a routed request started $first" || { fail "first request: $st $(cat "$T/out")"; exit 1; }

# ---- 2. kill -9, and a new thawd ----
kill -9 "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
start_thawd
grep -q "instance $first of r from an earlier run still serves .*: adopted" "$T/thawd.log" &&
	ok "the new thawd adopted $first" || fail "not adopted: $(grep "$first" "$T/thawd.log" | tail -2)"

# ---- 3. routed requests go to it ----
bad=0
for x in 2 3 4 5 6; do
	st=$(routed "$URL/function/r/hello?x=$x")
	{ [ "$st" = 200 ] && [ "$(cat "$T/out")" = "hello $x" ] && [ "$(served_by)" = "$first" ]; } ||
		{ bad=$((bad + 1)); last="$st $(head -c 200 "$T/out") (served by $(served_by))"; }
done
[ $bad = 0 ] && [ "$(ids)" = "$first" ] &&
	ok "after the restart, routed requests are answered by the adopted $first, and r has no other instance" ||
	fail "after the restart: $bad of 5 requests wrong, e.g. ${last:-}; instances of r: $(ids)"

# ---- 4. it stops after its idle_s ----
zero() { [ -z "$(ids)" ]; }
wait_for 120 zero && grep -q "instance $first of r stopped: idle" "$T/thawd.log" &&
	ok "the adopted $first stopped after its idle_s" ||
	fail "the adopted instance: $(ids); $(grep "$first" "$T/thawd.log" | tail -2)"

echo "$fails failure(s)"
[ $fails = 0 ]
