#!/usr/bin/env bash
# Instance lifetimes and limits (server/lifetimes.h), with real runc, CRIU
# and thawd, a small CPU function (test/fixtures/term_fn.py):
#   1. "idle_s": 4: an instance called every half second for 8 s stays up,
#      and is stopped no sooner than 4 s after the last call; GET
#      /instances/<iid> said when and why beforehand; nothing of it is left
#      (container, netns mount, shim, record);
#   2. ?max_lifetime_s=4 on the start: stopped no sooner than 4 s after it;
#   3. "max_instances": 2: the third start answers 429 too_many_instances
#      with Retry-After and takes nothing; an instance being stopped (its
#      grace running) holds no place;
#   4. stops are graceful: a function whose SIGTERM handler exits is gone on
#      DELETE without waiting its "stop_grace_s" (30 s); one whose handler
#      ignores it is killed after its grace (2 s), the DELETE answered before
#      that, once its endpoint refuses connections, and its ended record says
#      when each step happened; a thawd killed -9 during such a grace (60 s)
#      finishes the stop at its restart; ?grace_s=0 kills one whose grace is
#      60 s without waiting it; one without a handler (its namespace's init
#      never sees SIGTERM) is killed without waiting its 30 s;
#   5. an instance whose process is killed from outside (kill -9) is cleaned
#      up by thawd (no DELETE), and /metrics counts it (reason "exited"); its
#      record stays, saying "exited 137: killed by SIGKILL", and logs?tail=5
#      gives the last lines it printed;
#   6. with --mem-reserve above what the host has, a start answers 503
#      no_memory with Retry-After before anything is restored; /metrics
#      counts refusals by reason; with --keep-ended 2 the records of ended
#      instances go.
# Ended instances (1, 5): GET /instances/<iid> says how they ended; GET
# /instances lists them only with ?all=1.
#
# No bound on time here is one a busy machine can break: a stop comes no
# sooner than its idle_s, lifetime or grace (timed from before the request
# that starts that clock) and is waited for 30 s past it; "without waiting
# the grace" is within half a grace of 30 s or more.  So this test shares
# the machine with the others (scripts/run-tests.sh).  How promptly a stop
# follows idle_s is e2e_idle_bench's, which runs alone (thaw-bench's idle
# stops: 0-2 s after idle_s).
set -u
NAME=lifetimes
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
fixture_fn "$T/fn" term_fn.py
start_thawd
now_ms() { date +%s%3N; }
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) [ZX] ' "/proc/$1/stat" 2>/dev/null; } # not a zombie

# fn ID MODE EXTRA-JSON: PUT and snapshot a term_fn function.
fn() {
	local id=$1 mode=$2 extra=$3 st
	st=$(api PUT "/functions/$id" -d "$(fn_spec term_fn.py "$T/fn" "\"env\": {\"TERM_MODE\": \"$mode\"} $extra")")
	[ "$st" = 201 ] || { fail "PUT $id: $st $(cat "$T/body")"; return 1; }
	st=$(api POST "/functions/$id/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $id: $st $(cat "$T/body")"; return 1; }
}
# start ID [QUERY]: IID, EP and PID of the new instance.
start() {
	local st
	st=$(api POST "/functions/$1/start${2:-}")
	[ "$st" = 201 ] || { fail "start $1: $st $(cat "$T/body")"; return 1; }
	IID=$(jget "$T/body" "j['instance']")
	EP=$(jget "$T/body" "j['endpoint']")
	PID=$(jget "$T/body" "j['pid']")
}
gone() { # IID: no record, container, netns mount or shim of it
	[ ! -e "$DATA/instances/$1.json" ] && ! runc --root "$DATA/runc" state "$1" >/dev/null 2>&1 &&
		! grep -q "/instances/$1/" /proc/self/mountinfo && ! pgrep -f -- "instances/$1/" >/dev/null
}
# wait_gone IID SECONDS: until gone, SECONDS at most; fails if never.
wait_gone() {
	local end=$((SECONDS + $2))
	until gone "$1"; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.1
	done
}

# ---- 1. idle_s ----
# Calls every half second for twice idle_s: a busy machine would have to
# hold the test back 3.5 s between two calls to let the instance idle out.
# If it did (a call fails), the stop must still have come idle_s or more
# after the last call that got through: thawd is judged on when it stopped
# the instance, never on how fast the test could call it.
fn idle exit ', "idle_s": 4' || exit 1
start idle || exit 1
last=$(now_ms) # the start's answer: its idle time counts from there at the latest
called=0
for i in $(seq 16); do
	[ $i = 1 ] || sleep 0.5
	t=$(now_ms) # before the call: the instance saw it after this
	curl -s --max-time 5 "http://$EP/hello" >/dev/null || break
	last=$t called=$i
done
if [ $called = 16 ]; then
	gone "$IID" && fail "the instance called every half second was stopped"
	ok "called every half second for 8 s: still up"
	api GET "/instances/$IID" >/dev/null
	why=$(jget "$T/body" "j.get('stop_why')")
	[ "$why" = idle ] && ok "GET /instances says: stop_why idle, stop_at_ms $(jget "$T/body" "j['stop_at_ms']")" ||
		fail "GET /instances/$IID: stop_why '$why': $(head -c 400 "$T/body")"
fi
if wait_gone "$IID" 34; then
	api GET "/instances/$IID" >/dev/null
	idle_ms=$(($(jget "$T/body" "j['stop']['requested_ms']") - last))
	[ $idle_ms -ge 4000 ] && ok "stopped ${idle_ms} ms after the last call (idle_s 4; $called of 16 calls before it), nothing left" ||
		fail "stopped ${idle_ms} ms after the last call, before its idle_s (4 s)"
else
	fail "not stopped within 30 s past its idle_s after the last call"
fi
st=$(api GET "/instances/$IID")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['state']")" = stopped ] &&
	[ "$(jget "$T/body" "j['reason']")" = "stopped: idle 4 s" ] &&
	ok "its record stays: $(jget "$T/body" "j['reason']")" ||
	fail "GET /instances/$IID after the idle stop: $st $(head -c 400 "$T/body")"
api GET /instances >/dev/null
grep -q "$IID" "$T/body" && fail "GET /instances lists the stopped instance"
api GET "/instances?all=1" >/dev/null
grep -q "$IID" "$T/body" && ok "GET /instances?all=1 lists it, GET /instances does not" ||
	fail "GET /instances?all=1 does not list $IID"

# ---- 2. max_lifetime_s on the start ----
fn life exit '' || exit 1
t0=$(now_ms)
start life '?max_lifetime_s=4' || exit 1
if wait_gone "$IID" 34; then
	d=$(($(now_ms) - t0))
	[ $d -ge 4000 ] && ok "max_lifetime_s=4: stopped at ${d} ms" ||
		fail "max_lifetime_s=4: stopped at ${d} ms, before its lifetime"
else
	fail "max_lifetime_s=4: not stopped within 30 s past its lifetime"
fi
st=$(api POST '/functions/life/start?max_lifetime_s=abc')
[ "$st" = 400 ] && ok "?max_lifetime_s=abc: 400" || fail "?max_lifetime_s=abc: $st"

# ---- 3. max_instances ----
fn capped exit ', "max_instances": 2' || exit 1
start capped && A=$IID
start capped && Bi=$IID
n0=$(ls "$DATA/instances" | grep -c '\.json$')
st=$(api POST /functions/capped/start)
n1=$(ls "$DATA/instances" | grep -c '\.json$')
if [ "$st" = 429 ] && [ "$(jget "$T/body" "j['error']['code']")" = too_many_instances ] &&
	grep -qi '^retry-after:' "$T/hdr" && [ "$n0" = "$n1" ]; then
	ok "third start of max_instances 2: 429 too_many_instances, Retry-After, nothing taken"
else
	fail "third start: $st $(cat "$T/body") (records $n0 -> $n1)"
fi
api DELETE "/instances/$A" >/dev/null
start capped && ok "after a DELETE the function starts again" && api DELETE "/instances/$IID" >/dev/null
api DELETE "/instances/$Bi" >/dev/null
# An instance being stopped holds no place: at max_instances 1, a start
# right after the DELETE of one that takes its 8 s grace is made at once
# (a 429 until it was gone, before).  It can only pass wrongly, never fail
# wrongly: a start that came after the grace would find the place free.
fn capped1 ignore ', "max_instances": 1, "stop_grace_s": 8' || exit 1
start capped1 && A=$IID
st=$(api DELETE "/instances/$A?wait=0")
if start capped1; then
	ok "max_instances 1: a start during the other's stop (DELETE $st) is made at once"
	api DELETE "/instances/$IID?grace_s=0" >/dev/null
fi
wait_gone "$A" 60 || fail "$A not gone 60 s after its DELETE (grace 8 s)"

# ---- 4. graceful stops ----
# A DELETE (?wait=1: api's default) that does not wait a grace of 30 s or
# more answers within 15 s, however busy the machine.
fn leaves exit ', "stop_grace_s": 30' || exit 1
start leaves || exit 1
t0=$(now_ms); st=$(api DELETE "/instances/$IID"); d=$(($(now_ms) - t0))
[ "$st" = 204 ] && [ $d -lt 15000 ] && ok "SIGTERM handler that exits: DELETE in ${d} ms (grace 30 s)" ||
	fail "handler that exits: DELETE $st in ${d} ms (grace 30 s)"
fn stubborn ignore ', "stop_grace_s": 2' || exit 1
start stubborn || exit 1
# The answer comes once the instance cannot be reached, its grace and the
# kill after it: while its process lives, its endpoint refuses connections.
st=$(api DELETE "/instances/$IID?wait=0")
alive=no; alive "$PID" && alive=yes
curl -s --max-time 5 "http://$EP/hello" >/dev/null; refused=$?
[ "$st" = 204 ] && [ $refused = 7 ] &&
	ok "SIGTERM ignored: DELETE answered before the kill (process alive then: $alive), endpoint refused" ||
	fail "SIGTERM ignored: DELETE $st, curl to the endpoint after it: $refused (7: refused)"
if wait_gone "$IID" 30 >/dev/null; then
	api GET "/instances/$IID" >/dev/null
	stop=$(jget "$T/body" "[j['stop'][k] - j['stop']['requested_ms'] for k in ('unreachable_ms', 'ended_ms')] + [j['reason']]")
	jget "$T/body" "j['stop']['requested_ms'] <= j['stop']['unreachable_ms'] <= j['stop']['ended_ms'] and j['stop']['ended_ms'] - j['stop']['requested_ms'] >= 2000" |
		grep -qx True && ok "then killed after its 2 s grace, nothing left; the record: $stop" ||
		fail "the ended record of the SIGTERM-ignoring instance: $(head -c 600 "$T/body")"
else
	fail "SIGTERM ignored: not gone 30 s after its DELETE"
fi
# A DELETE of a function answers once its instances are gone, a stop
# already under way (its grace running) included: before, it answered at
# once and the instance lived on through its grace.
fn stubdel ignore ', "stop_grace_s": 3' || exit 1
start stubdel || exit 1
st=$(api DELETE "/instances/$IID?wait=0")
st2=$(api DELETE /functions/stubdel)
if [ "$st" = 204 ] && [ "$st2" = 204 ] && ! alive "$PID" && ! own_containers | grep -qx "$IID"; then
	ok "DELETE of a function whose instance's stop was under way: answered once it was gone"
else
	fail "DELETE /functions during its instance's grace: $st/$st2, process alive: $(alive "$PID" && echo yes || echo no), containers: $(own_containers | tr '\n' ' ')"
fi
fn stubborn60 ignore ', "stop_grace_s": 60' || exit 1
start stubborn60 || exit 1
t0=$(now_ms); st=$(api DELETE "/instances/$IID?grace_s=0"); d=$(($(now_ms) - t0))
[ "$st" = 204 ] && [ $d -lt 15000 ] && ok "?grace_s=0: killed without its 60 s grace (${d} ms)" ||
	fail "?grace_s=0: DELETE $st in ${d} ms (grace 60 s)"
st=$(api DELETE "/instances/$IID?grace_s=-1")
[ "$st" = 400 ] || [ "$st" = 404 ] || fail "?grace_s=-1: $st"
fn nohandler "" ', "stop_grace_s": 30' || exit 1
start nohandler || exit 1
t0=$(now_ms); st=$(api DELETE "/instances/$IID"); d=$(($(now_ms) - t0))
[ "$st" = 204 ] && [ $d -lt 15000 ] &&
	ok "no SIGTERM handler (never delivered to an init): killed without its 30 s grace (${d} ms)" ||
	fail "no handler: DELETE $st in ${d} ms (grace 30 s)"

# ---- 5. killed from outside ----
start leaves || exit 1
for i in 1 2 3 4 5 6 7; do curl -s --max-time 5 "http://$EP/call-$i" >/dev/null; done
t0=$(now_ms)
kill -9 "$PID"
if wait_gone "$IID" 30; then
	ok "killed from outside: cleaned up in $(($(now_ms) - t0)) ms"
else
	fail "killed from outside: not cleaned up within 30 s"
fi
api GET "/instances/$IID" >/dev/null
reason=$(jget "$T/body" "j['reason']")
[ "$(jget "$T/body" "j['state']")" = exited ] && [ "$reason" = "exited 137: killed by SIGKILL" ] &&
	[ "$(jget "$T/body" "j['exit_code']")" = 137 ] && ok "its record says: $reason" ||
	fail "record of the killed instance: $(head -c 400 "$T/body")"
st=$(api GET "/instances/$IID/logs?tail=5")
want=$(printf 'served /call-%s\n' 3 4 5 6 7)
[ "$st" = 200 ] && [ "$(cat "$T/body")" = "$want" ] && ok "its logs?tail=5: the last 5 lines it printed" ||
	fail "logs of the killed instance: $st $(head -c 300 "$T/body")"
st=$(api DELETE "/instances/$IID")
[ "$st" = 404 ] && grep -q 'it has ended (exited 137' "$T/body" && ok "DELETE of it: 404 saying how it ended" ||
	fail "DELETE of the ended instance: $st $(cat "$T/body")"
api GET /metrics >/dev/null
for r in idle lifetime exited; do
	grep -q "^thaw_instances_stopped_total{reason=\"$r\"} 1$" "$T/body" && ok "/metrics: stopped $r 1" ||
		fail "/metrics: $(grep stopped_total "$T/body")"
done
grep -q '^thaw_starts_refused_total{reason="too_many_instances"} 1$' "$T/body" &&
	ok "/metrics: refused too_many_instances 1" || fail "/metrics: $(grep refused_total "$T/body")"

# ---- 5b. a thawd killed during a stop (after the metrics above: it restarts) ----
# A thawd killed while a stop waits out the grace: its restart finishes it.
start stubborn60 || exit 1
st=$(api DELETE "/instances/$IID?wait=0")
api GET "/instances/$IID" >/dev/null
[ "$st" = 204 ] && alive "$PID" && [ "$(jget "$T/body" "j['state']")" = stopping ] &&
	! curl -s --max-time 5 "http://$EP/hello" >/dev/null &&
	ok "grace 60 s: DELETE answered, the process alive, the record 'stopping', the endpoint closed" ||
	fail "grace 60 s: DELETE $st, GET: $(head -c 400 "$T/body")"
kill -9 "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
start_thawd
if wait_gone "$IID" 30 >/dev/null && ! alive "$PID"; then
	api GET "/instances/$IID" >/dev/null
	[ "$(jget "$T/body" "j['reason']")" = "stopped: DELETE" ] &&
		jget "$T/body" "j['stop']['ended_ms'] > 0" | grep -qx True &&
		ok "thawd killed during the stop's grace: its restart finished the stop" ||
		fail "the ended record after the restart: $(head -c 600 "$T/body")"
else
	fail "thawd killed during the stop's grace: the instance outlived its restart"
fi

# ---- 6. admission by memory ----
kill -TERM "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
start_thawd --mem-reserve 1000T --keep-ended 2
# The lifetimes thread removes them, looking every 5 s.
end=$((SECONDS + 30))
until [ -z "$(ls "$DATA/ended" 2>/dev/null)" ] || [ $SECONDS -ge $end ]; do sleep 0.2; done
[ -z "$(ls "$DATA/ended" 2>/dev/null)" ] && ok "--keep-ended 2: the records of ended instances are gone" ||
	fail "--keep-ended 2: left $(ls "$DATA/ended")"
n0=$(ls "$DATA/instances" 2>/dev/null | grep -c '\.json$')
st=$(api POST /functions/leaves/start)
n1=$(ls "$DATA/instances" 2>/dev/null | grep -c '\.json$')
if [ "$st" = 503 ] && [ "$(jget "$T/body" "j['error']['code']")" = no_memory ] &&
	grep -qi '^retry-after:' "$T/hdr" && grep -q 'mem-reserve' "$T/body" && [ "$n0" = "$n1" ] &&
	[ -z "$(own_containers)" ]; then
	ok "--mem-reserve above what the host has: 503 no_memory before any restore ($(jget "$T/body" "j['error']['message']"))"
else
	fail "--mem-reserve 1000T: $st $(cat "$T/body") (records $n0 -> $n1)"
fi
api GET /metrics >/dev/null
grep -q '^thaw_starts_refused_total{reason="no_memory"} 1$' "$T/body" &&
	ok "/metrics: refused no_memory 1" || fail "/metrics: $(grep refused_total "$T/body")"

for f in idle life capped capped1 leaves stubborn stubborn60 nohandler; do api DELETE "/functions/$f" >/dev/null; done
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
echo "$fails failure(s)"
[ $fails = 0 ]
