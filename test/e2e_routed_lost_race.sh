#!/usr/bin/env bash
# A routed start that loses a race to a new snapshot (issue 44, L4), with
# real runc, CRIU and thawd, and test/fixtures/proxy_fn.py.  The race is
# made, not waited for: thawd's runc is test/lib/runc_hold, which holds the
# start's `runc restore` until the test lets it go.
#   1. a request to q from zero starts an instance of snapshot S1; its
#      restore is held while q is snapshotted again (S2: S1's manifest is
#      deleted), then let go: the restore ends, and the pool finds S1 gone
#      when it reads the instance's port;
#   2. that request is answered 503 unavailable with Retry-After (a race
#      lost, to be tried again), not 502 instance_failed "names no port";
#      the instance of S1 is stopped;
#   3. the next request is answered 200 by an instance of S2.
set -u
NAME=routed-lost-race
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" proxy_fn.py
mkdir -p "$T/hold"
export RUNC_HOLD_DIR=$T/hold
start_thawd --runc "$ROOT/test/lib/runc_hold"

# instances: q's instances, "ID SNAPSHOT" a line.
instances() {
	curl -s "$URL/instances" | python3 -S -c "import json,sys
for i in json.load(sys.stdin)['instances']:
    if i.get('function') == 'q': print(i.get('instance'), i.get('snapshot'))"
}

put_snapshot q "$(fn_spec proxy_fn.py "$FN" '"idle_s": 300, "max_instances": 1')"
S1=$(jget "$T/body" "j['job']['result']['snapshot']")

# ---- 1. a start of S1, held at its restore; S2 made meanwhile ----
echo restore >"$T/hold/hold"
curl -s -o "$T/first" -D "$T/first.hdr" -w '%{http_code}' "$URL/function/q/hello?x=1" >"$T/first.code" &
cp=$!
wait_for 120 test -s "$T/hold/held" || { fail "the start's restore was never held"; exit 1; }
st=$(api POST "/functions/q/snapshot?wait=1")
[ "$st" = 200 ] || fail "re-snapshot of q while a start of it was held: $st $(head -c 300 "$T/body")"
S2=$(jget "$T/body" "j['job']['result']['snapshot']")
[ -n "$S2" ] && [ "$S2" != "$S1" ] || fail "no new snapshot: S1 $S1, S2 $S2"
[ ! -e "$DATA/store/manifests/${S1#sha256:}" ] || fail "S1's manifest is still there"
kill -CONT "$(awk '{ print $NF }' "$T/hold/held")"
wait $cp

# ---- 2. the race lost: 503, to be tried again ----
code=$(cat "$T/first.code")
if [ "$code" = 503 ] && grep -q '"code":"unavailable"' "$T/first" && grep -qi '^retry-after:' "$T/first.hdr"; then
	ok "the request whose start lost the race: 503 unavailable, Retry-After: $(head -c 300 "$T/first")"
else
	fail "the request whose start lost the race: $code, not 503 unavailable with Retry-After: $(head -c 300 "$T/first")"
fi
gone() { ! instances | grep -q "$S1"; }
wait_for 120 gone || fail "S1's instance is left: $(instances)"

# ---- 3. the next request: an instance of S2 ----
code=$(curl -s -o "$T/second" -w '%{http_code}' "$URL/function/q/hello?x=2")
[ "$code" = 200 ] && [ "$(cat "$T/second")" = "hello 2" ] && instances | grep -q "$S2" &&
	ok "the next request: 200 by an instance of S2 ($(instances))" ||
	fail "the next request: $code $(head -c 200 "$T/second"); instances: $(instances)"

api DELETE /functions/q >/dev/null
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
echo "$fails failure(s)"
[ $fails = 0 ]
