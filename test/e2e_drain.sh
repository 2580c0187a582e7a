#!/usr/bin/env bash
# What a load balancer sees of a thawd that drains (docs/API.md, GET /readyz,
# POST /drain), with real runc and CRIU and test/fixtures/proxy_fn.py:
#   1. GET /readyz answers 200 "ready" (no token needed); GET /healthz 200;
#   2. with a routed request in flight (/hold, waiting on a gate), POST
#      /drain answers 202 and thawd goes on listening: /readyz 503
#      "draining" with Retry-After, /healthz still 200 ("draining": true), a
#      new routed request and a new start 503 shutting_down with
#      Retry-After: 1 (what the balancer retries on another host);
#   3. the request in flight finishes 200, then thawd stops its instance
#      and exits 0, leaving no container;
#   4. SIGTERM drains the same way: a routed request in flight when it
#      comes is answered 200 before thawd exits 0 (it used to be cut after
#      10 s), /readyz 503 meanwhile;
#   5. a thawd that takes no start (--max-starts 0) is not ready: 503 full.
set -u
NAME=drain
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
fixture_fn "$T/fn" proxy_fn.py
start_thawd

st=$(curl -s -o "$T/rz" -w '%{http_code}' "$URL/readyz")
[ "$st" = 200 ] && [ "$(jget "$T/rz" "j['status']")" = ready ] &&
	ok "GET /readyz: 200 ready" || fail "GET /readyz: $st $(cat "$T/rz")"
put_snapshot d "$(fn_spec proxy_fn.py "$T/fn")"

# hold: a routed request kept in flight until the gate "release" exists;
# its status and body in $T/hold.$1.
hold() {
	curl -s -o "$T/hold.$1" -w '%{http_code}' "$URL/function/d/hold" >"$T/hold.$1.st" &
	HOLD_PID=$!
}
routed_open() { # N: /readyz counts N routed requests open
	curl -s -o "$T/rz" "$URL/readyz"
	[ "$(jget "$T/rz" "j['routed_open']")" = "$1" ]
}
hold 1
wait_for 60 routed_open 1 || fail "the held request never arrived: $(cat "$T/rz")"

st=$(api POST /drain)
[ "$st" = 202 ] && ok "POST /drain: 202 $(cat "$T/body")" || fail "POST /drain: $st $(cat "$T/body")"
st=$(curl -s -D "$T/hdr" -o "$T/rz" -w '%{http_code}' "$URL/readyz")
[ "$st" = 503 ] && [ "$(jget "$T/rz" "j['status']")" = draining ] &&
	grep -qi '^Retry-After: 1' "$T/hdr" &&
	ok "draining: GET /readyz 503 draining, Retry-After: 1" ||
	fail "readyz while draining: $st $(cat "$T/rz")"
st=$(curl -s -o "$T/hz" -w '%{http_code}' "$URL/healthz")
[ "$st" = 200 ] && [ "$(jget "$T/hz" "j['draining']")" = True ] &&
	ok "draining: GET /healthz 200 (alive), \"draining\": true" ||
	fail "healthz while draining: $st $(cat "$T/hz")"
st=$(api GET "/function/d/hello?x=1")
[ "$st" = 503 ] && [ "$(jget "$T/body" "j['error']['code']")" = shutting_down ] &&
	grep -qi '^Retry-After: 1' "$T/hdr" &&
	ok "draining: a new routed request 503 shutting_down, Retry-After: 1" ||
	fail "routed while draining: $st $(cat "$T/body")"
st=$(api POST /functions/d/start)
[ "$st" = 503 ] && [ "$(jget "$T/body" "j['error']['code']")" = shutting_down ] &&
	ok "draining: a new start 503 shutting_down" ||
	fail "start while draining: $st $(cat "$T/body")"
kill -0 "$THAWD_PID" 2>/dev/null && ok "thawd still listening while the request is in flight" ||
	fail "thawd exited before the request in flight was over"

# drained N HOW: the held request N let go; it must finish 200, and the
# draining thawd exit 0 with no container left (HOW names the drain).
drained() {
	local rc
	touch "$T/fn/release"
	wait "$HOLD_PID"
	[ "$(cat "$T/hold.$1.st")" = 200 ] && [ "$(cat "$T/hold.$1")" = released ] &&
		ok "$2: the request in flight finished: 200 released" ||
		fail "$2: request in flight: $(cat "$T/hold.$1.st") $(cat "$T/hold.$1")"
	for _ in $(seq 600); do kill -0 "$THAWD_PID" 2>/dev/null || break; sleep 0.1; done
	wait "$THAWD_PID"
	rc=$?
	THAWD_PID=""
	[ $rc = 0 ] && [ -z "$(own_containers)" ] && ok "$2: thawd exited 0, no container left" ||
		fail "$2: rc $rc, containers: $(own_containers | tr '\n' ' ')"
}
drained 1 "POST /drain"
grep -q "drained" "$T/thawd.log" || fail "no 'drained' in the log"

# ---- SIGTERM drains too ----
rm -f "$T/fn/release"
start_thawd
hold 2
wait_for 60 routed_open 1 || fail "the held request never arrived (2): $(cat "$T/rz")"
kill -TERM "$THAWD_PID"
draining() { curl -s -o "$T/rz" "$URL/readyz"; [ "$(jget "$T/rz" "j['status']")" = draining ]; }
wait_for 30 draining && ok "SIGTERM: /readyz says draining while a request is in flight" ||
	fail "SIGTERM: readyz $(cat "$T/rz")"
drained 2 SIGTERM

# ---- not ready when full: --max-starts 0 takes no start ----
start_thawd --max-starts 0
st=$(curl -s -D "$T/hdr" -o "$T/rz" -w '%{http_code}' "$URL/readyz")
[ "$st" = 503 ] && [ "$(jget "$T/rz" "j['status']")" = full ] && grep -qi '^Retry-After: 1' "$T/hdr" &&
	ok "--max-starts 0: GET /readyz 503 full" || fail "readyz when full: $st $(cat "$T/rz")"
stop_thawd || fail "thawd (--max-starts 0) did not exit 0"
[ $fails = 0 ]
