#!/usr/bin/env bash
# Signals to thawd (issue 44, L9), with real runc, CRIU and thawd:
#   1. SIGUSR1, SIGUSR2 and SIGALRM, to the thawd started (the keeper, the pid
#      in thawd.lock) and to its server process: ignored; thawd goes on
#      serving, and its instance runs on;
#   2. SIGHUP: a graceful stop, as SIGTERM: thawd exits 0 and stops its
#      instance (no container, directory or process left).
# Nothing waits for a time to pass: each step waits (with a generous limit)
# for what it expects.
set -u
NAME=signals
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" proxy_fn.py
start_thawd

put_snapshot s "$(fn_spec proxy_fn.py "$FN")"
st=$(api POST /functions/s/start)
[ "$st" = 201 ] || { fail "start s: $st $(cat "$T/body")"; exit 1; }
id=$(jget "$T/body" "j['instance']")
server=$(pgrep -P "$THAWD_PID" -x thawd | head -1)
[ -n "$server" ] || { fail "no server process under thawd $THAWD_PID"; exit 1; }

# ---- 1. ignored ----
for sig in USR1 USR2 ALRM; do
	for who in "$THAWD_PID" "$server"; do kill -s "$sig" "$who" 2>/dev/null; done
done
# Each signal sent to either pid reaches the server (the keeper drops its
# own, so only those sent to the server are logged): wait for its three.
logged() { [ "$(grep -c ': ignored$' "$T/thawd.log")" -ge 3 ]; }
for _ in $(seq 600); do logged && break; sleep 0.1; done
alive=true
for who in "$THAWD_PID" "$server"; do kill -0 "$who" 2>/dev/null || alive=false; done
st=$(api GET "/instances/$id")
if $alive && logged && [ "$st" = 200 ] && [ "$(jget "$T/body" "j['state']")" = running ] &&
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ]; then
	ok "SIGUSR1, SIGUSR2, SIGALRM to thawd and its server: ignored ($(grep -c ': ignored$' "$T/thawd.log") logged); it serves, and $id runs on"
else
	fail "after SIGUSR1/USR2/ALRM: thawd alive $alive, instance $st $(head -c 200 "$T/body"); $(grep -i 'signal\|alarm' "$T/thawd.log" | tail -3)"
fi

# ---- 2. SIGHUP: a graceful stop ----
kill -HUP "$THAWD_PID"
for _ in $(seq 1200); do kill -0 "$THAWD_PID" 2>/dev/null || break; sleep 0.1; done
wait "$THAWD_PID"
rc=$?
THAWD_PID=""
left=$(find "$DATA/instances" -mindepth 1 -maxdepth 1 -type d 2>/dev/null; own_containers; own_procs)
[ $rc = 0 ] && [ -z "$left" ] && grep -q 'Hangup: stopping' "$T/thawd.log" &&
	ok "SIGHUP: a graceful stop (exit 0), $id stopped, nothing left" ||
	fail "SIGHUP: exit $rc, left: $(echo "$left" | head -3); $(tail -3 "$T/thawd.log")"

echo "$fails failure(s)"
[ $fails = 0 ]
