#!/usr/bin/env bash
# thawd's gateway from the attack side, over real sockets (no runc, CRIU or
# GPU needed):
#   1. one thawd per data directory: a second thawd on the same data
#      directory (another port) exits non-zero saying which thawd (pid) holds
#      <data>/thawd.lock, having touched nothing (no RAM tier made, no port
#      file); the first still answers and still lists its functions;
#   2. no port sharing: a second thawd (another data directory) on the first
#      one's port, 127.0.0.1 or 0.0.0.0, exits non-zero saying the address is
#      in use; the first still answers every new connection;
#   3. control bytes in the raw request target: "DELETE /functions/ct1\0/start"
#      (which libmicrohttpd's C string would cut to "DELETE /functions/ct1"),
#      a NUL at the end or in the query, \x01, \t, \x7f, with or without the
#      token: each a 400 bad_request with the JSON error shape, and ct1 is
#      still there;
#   4. slow clients: 600 connections from 127.0.0.2 that send a header line
#      every second and never finish their request, and one from 127.0.0.3
#      that sends a PUT body a byte every half second: GET /healthz from
#      127.0.0.1 answers each of 8 probes within 1 s while the slow clients
#      run (they go on until the probes are done); at most
#      --max-connections-per-ip (64) of the 600 are held, and every held one
#      is closed by --request-timeout (3 s here) with nothing answered; the
#      slow PUT did nothing;
#   5. SIGTERM: the first thawd exits 0, and a new thawd starts on its data
#      directory (the lock went with it);
#   6. no token off loopback: thawd on 0.0.0.0, [::] or 10.x without any
#      token exits 1 naming --token-file and THAW_TOKEN_FILE, having touched
#      nothing; with only THAW_DATA_TOKEN_FILE it starts on 0.0.0.0;
#   7. without a token (loopback): a Host that is not a loopback name (DNS
#      rebinding: evil.example, 127.0.0.1.nip.io, ...) is 403 forbidden and
#      does nothing; what a cross-site form can send (a POST or DELETE with
#      a form's Content-Type, a body that is not application/json) is 415
#      unsupported_media_type and does nothing; curl -X PUT -d @spec.json
#      (a form's type, a JSON body) still works;
#   8. scoped tokens: the data token starts and lists instances but gets 403
#      on functions, snapshots and jobs; the control token the reverse; the
#      full token opens both; /metrics takes any, /healthz none.
set -u
B=${THAW_BUILD:-$PWD/build}
THAWD=$B/thawd
. "${THAW_ROOT:-$PWD}/test/lib/wait_port.sh"
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
for c in python3 curl timeout; do
	command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }
done
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); s.close()' 2>/dev/null ||
	{ echo "skipped: cannot bind a socket to 127.0.0.2"; exit 77; }

T=$(mktemp -d /tmp/thaw-e2e-gateway-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-gateway-XXXXXX)
TOKEN=e2e-$RANDOM-$RANDOM
echo "$TOKEN" >"$T/token"
PID_A=""
PID_N=""
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

cleanup() {
	[ -n "$PID_A" ] && kill -9 "$PID_A" 2>/dev/null
	[ -n "$PID_N" ] && kill -9 "$PID_N" 2>/dev/null
	[ $fails != 0 ] && [ -f "$T/a.log" ] && { echo "--- thawd A's log (tail)"; tail -n 30 "$T/a.log"; }
	rm -rf "$T" "$SHM"
}
trap cleanup EXIT

# start_a: thawd A on a free port of 127.0.0.1, data in $T/a.
start_a() {
	rm -f "$T/a.port"
	"$THAWD" --listen 127.0.0.1:0 --port-file "$T/a.port" --data-dir "$T/a" \
		--ram-tier "$SHM/a" --ram-tier-bytes 64M --token-file "$T/token" \
		--request-timeout 3 "$@" >>"$T/a.log" 2>&1 &
	PID_A=$!
	wait_port "$T/a.port" "$PID_A" || { echo "thawd did not start"; tail "$T/a.log"; exit 1; }
	PORT=$(cat "$T/a.port")
	URL=http://127.0.0.1:$PORT
}

# api METHOD PATH [curl args…]: the status on stdout, the body in $T/body.
api() {
	local m=$1 p=$2
	shift 2
	curl -s --max-time 5 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-X "$m" "$URL$p" "$@"
}

# a_answers WHAT: A answers /healthz and still lists ct1.
a_answers() {
	local st
	st=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$URL/healthz")
	[ "$st" = 200 ] || fail "$1: thawd A's /healthz: $st"
	st=$(api GET /functions)
	if [ "$st" = 200 ] && grep -q '"id":"ct1"' "$T/body"; then
		ok "$1: thawd A answers and lists ct1"
	else
		fail "$1: GET /functions: $st $(head -c 300 "$T/body")"
	fi
}

# second NAME ARGS…: run another thawd (10 s at most); its exit status in
# $rc, its output in $T/NAME.out.
second() {
	local name=$1
	shift
	timeout -k 2 10 "$THAWD" --port-file "$T/$name.port" "$@" >"$T/$name.out" 2>&1
	rc=$?
}

start_a
mkdir -p "$T/fn"
st=$(api PUT /functions/ct1 -d "{\"command\":[\"python3\",\"-c\",\"pass\"],\"port\":8000,\"cwd\":\"$T/fn\"}")
[ "$st" = 201 ] || { fail "PUT /functions/ct1: $st $(cat "$T/body")"; exit 1; }

# ---- 1. one thawd per data directory ----
[ "$(cat "$T/a/thawd.lock" 2>/dev/null)" = "$PID_A" ] ||
	fail "thawd.lock holds \"$(cat "$T/a/thawd.lock" 2>/dev/null)\", not A's pid $PID_A"
second b --listen 127.0.0.1:0 --data-dir "$T/a" --ram-tier "$SHM/b" --ram-tier-bytes 64M
if [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 ]; then
	fail "a second thawd on A's data directory: exit $rc (it ran)"
elif ! grep -q "pid $PID_A" "$T/b.out" || ! grep -q "$T/a/thawd.lock" "$T/b.out" ||
	! grep -q "data directory $T/a " "$T/b.out"; then
	fail "a second thawd on A's data directory: exit $rc, but not the message: $(cat "$T/b.out")"
else
	ok "a second thawd on A's data directory exits $rc: $(grep -m1 'cannot start' "$T/b.out")"
fi
[ -e "$SHM/b" ] && fail "the second thawd made its RAM tier before giving up"
[ -e "$T/b.port" ] && fail "the second thawd wrote a port file"
grep -q 'registry\|store\|tier' "$T/b.out" && fail "the second thawd opened things: $(cat "$T/b.out")"
a_answers "after a second thawd on its data directory"

# ---- 2. no port sharing ----
for host in 127.0.0.1 0.0.0.0; do
	# With a token: off loopback thawd would refuse to start without one.
	second c --listen "$host:$PORT" --data-dir "$T/c" --ram-tier "$SHM/c" --ram-tier-bytes 64M \
		--token-file "$T/token"
	if [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 ]; then
		fail "a second thawd on $host:$PORT: exit $rc (it ran)"
	elif ! grep -q "$host:$PORT: the address is in use" "$T/c.out"; then
		fail "a second thawd on $host:$PORT: exit $rc, but not the message: $(cat "$T/c.out")"
	else
		ok "a second thawd on $host:$PORT exits $rc: $(grep -m1 'cannot start' "$T/c.out")"
	fi
	[ -e "$T/c.port" ] && fail "the second thawd on $host:$PORT wrote a port file"
done
# Every new connection still reaches A (no second listener takes a share).
n=0
for _ in $(seq 20); do
	[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ] && n=$((n + 1))
done
[ $n = 20 ] || fail "only $n of 20 new connections answered by A"
a_answers "after a second thawd on its port"

# ---- 3. control bytes in the raw request target ----
python3 - "$PORT" "$TOKEN" >"$T/raw.out" 2>&1 <<'EOF'
import json, socket, sys

port, token = int(sys.argv[1]), sys.argv[2]
targets = [
    b"/functions/ct1\x00/start",
    b"/functions/ct1\x00",
    b"/functions/ct1?x=\x00",
    b"/functions/ct1\x01",
    b"/functions/ct1\t",
    b"/functions/ct1\x7f",
]
bad = 0
for auth in (True, False):
    for t in targets:
        req = b"DELETE " + t + b" HTTP/1.1\r\nHost: thawd\r\nConnection: close\r\n"
        if auth:
            req += b"Authorization: Bearer " + token.encode() + b"\r\n"
        req += b"\r\n"
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(req)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = head.split(b" ")[1].decode() if head.count(b" ") >= 1 else "none"
        try:
            err = json.loads(body)["error"]
            shape = err["code"] == "bad_request" and isinstance(err["message"], str)
        except Exception:
            shape = False
        good = status == "400" and shape
        bad += not good
        print("%s DELETE %r%s: %s %s" % ("ok:" if good else "FAIL:", t,
              "" if auth else " (no token)", status, body.decode(errors="replace").strip()))
sys.exit(1 if bad else 0)
EOF
rc=$?
cat "$T/raw.out"
[ $rc = 0 ] || fail "a request target with a control byte was not a 400 bad_request"
st=$(api GET /functions/ct1)
[ "$st" = 200 ] && ok "GET /functions/ct1 still 200" || fail "ct1 after the control bytes: $st"

# ---- 4. slow clients ----
python3 - "$PORT" "$TOKEN" "$T/slow.ready" "$T/slow.done" >"$T/slow.out" 2>&1 <<'EOF' &
import json, os, select, socket, sys, time

port, token, ready, done = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
# RUN: at least as long as this (past the 3 s request timeout), and on
# until the probes are done (done appears; CAP bounds a lost probe loop).
N, RUN, CAP = 600, 7.0, 120.0
t0 = time.monotonic()
conns = []  # [socket, closed at (s after t0) or None, answered]
for i in range(N):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: thawd\r\n")
    except OSError:
        conns.append([s, time.monotonic() - t0, False])
        continue
    s.setblocking(False)
    conns.append([s, None, False])
# A body a byte every half second, from another address.
body = s2 = None
s2 = socket.socket()
s2.bind(("127.0.0.3", 0))
s2.settimeout(5)
s2.connect(("127.0.0.1", port))
s2.sendall(("PUT /functions/ct2 HTTP/1.1\r\nHost: thawd\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n" % token).encode())
s2.setblocking(False)
slow_body = [s2, None, False]
every = conns + [slow_body]
open_at_2s = None
next_line = next_byte = time.monotonic()
open(ready, "w").close()
while (time.monotonic() - t0 < RUN or not os.path.exists(done)) and time.monotonic() - t0 < CAP:
    now = time.monotonic()
    if open_at_2s is None and now - t0 >= 2.0:
        open_at_2s = sum(1 for c in conns if c[1] is None)
    live = [c for c in every if c[1] is None]
    if now >= next_line:
        for c in conns:
            if c[1] is None:
                try:
                    c[0].send(b"X-Slow: 1\r\n")
                except OSError:
                    c[1] = now - t0
        next_line += 1.0
    if now >= next_byte and slow_body[1] is None:
        try:
            s2.send(b" ")
        except OSError:
            slow_body[1] = now - t0
        next_byte += 0.5
    r, _, _ = select.select([c[0] for c in live], [], [], 0.05) if live else ([], [], [])
    for c in live:
        if c[0] in r:
            try:
                d = c[0].recv(4096)
            except OSError:
                d = b""
            if d:
                c[2] = True
            c[1] = time.monotonic() - t0
held = [c[1] for c in conns if c[1] is None or c[1] > 1.0]
print(json.dumps({
    "connections": N,
    "open_at_2s": open_at_2s,
    "held": len(held),
    "still_open": sum(1 for c in conns if c[1] is None),
    "longest_s": max([c[1] for c in conns if c[1] is not None] or [0]),
    "answered": sum(1 for c in conns if c[2]),
    "slow_body_closed_s": slow_body[1],
    "slow_body_answered": slow_body[2],
}))
EOF
SLOW=$!
# A fixed number of probes while every slow client is open, however slow
# the machine: the slow clients stay until the probes are done, so what is
# checked is each probe's answer, not how many fit in a window.
for _ in $(seq 600); do
	[ -e "$T/slow.ready" ] || ! kill -0 $SLOW 2>/dev/null && break
	sleep 0.1
done
worst=0
probes=0
bad=0
while [ $probes -lt 8 ] && kill -0 $SLOW 2>/dev/null; do
	out=$(curl -s --max-time 1 -o /dev/null -w '%{http_code} %{time_total}' "$URL/healthz")
	probes=$((probes + 1))
	set -- $out
	if [ "${1:-000}" != 200 ]; then
		bad=$((bad + 1))
		echo "probe $probes: ${out:-no answer} (within 1 s)"
	fi
	worst=$(awk -v a="$worst" -v b="${2:-1}" 'BEGIN { print (b > a ? b : a) }')
	sleep 0.4
done
touch "$T/slow.done"
wait $SLOW
src=$?
cat "$T/slow.out"
[ $src = 0 ] || fail "the slow clients' script failed ($src)"
[ $probes -ge 8 ] || fail "only $probes probes of /healthz: the slow clients ended before the probes did"
if [ $bad = 0 ]; then
	ok "GET /healthz answered $probes of $probes probes during the slow clients (slowest ${worst}s)"
else
	fail "GET /healthz: $bad of $probes probes got no answer within 1 s"
fi
r=$(python3 - "$T/slow.out" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
bad = []
if not (1 <= j["open_at_2s"] <= 64):
    bad.append("%d of the 600 held at 2 s, not 1 to 64" % j["open_at_2s"])
if j["held"] > 64:
    bad.append("%d held" % j["held"])
if j["still_open"]:
    bad.append("%d still open after 7 s" % j["still_open"])
if j["longest_s"] > 5.0:
    bad.append("one lived %.1f s" % j["longest_s"])
if j["answered"]:
    bad.append("%d got an answer" % j["answered"])
if j["slow_body_closed_s"] is None or j["slow_body_closed_s"] > 5.0 or j["slow_body_answered"]:
    bad.append("the slow body: closed at %s s, answered %s" % (j["slow_body_closed_s"], j["slow_body_answered"]))
print("; ".join(bad) or "ok")
EOF
)
if [ "$r" = ok ]; then
	ok "slow clients: at most 64 held from one address, each closed within the 3 s request timeout"
else
	fail "slow clients: $r"
fi
st=$(api GET /functions/ct2)
[ "$st" = 404 ] || fail "the slow PUT of ct2 did something: GET /functions/ct2 $st"
grep -q "sent no whole request within 3 s" "$T/a.log" || fail "no log line of the closed connections"
a_answers "after the slow clients"

# ---- 5. SIGTERM, then a new thawd on the same data directory ----
kill -TERM "$PID_A"
for _ in $(seq 100); do kill -0 "$PID_A" 2>/dev/null || break; sleep 0.1; done
wait "$PID_A"
rc=$?
PID_A=""
[ $rc = 0 ] || fail "thawd A exited $rc on SIGTERM"
echo "ctl-$RANDOM-$RANDOM" >"$T/ctl"
echo "data-$RANDOM-$RANDOM" >"$T/data"
THAW_DATA_TOKEN_FILE=$T/data start_a --control-token-file "$T/ctl"
a_answers "a new thawd on the same data directory"

# ---- 8. scoped tokens ----
# scoped TOKEN METHOD PATH [curl args…]: the status, the body in $T/body.
scoped() {
	local tok=$1 m=$2 p=$3
	shift 3
	curl -s --max-time 5 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $tok" \
		-H 'Content-Type: application/json' -X "$m" "$URL$p" "$@"
}
# expect WHAT WANT GOT [CODE]: GOT is WANT (and the error code is CODE).
expect() {
	if [ "$3" != "$2" ]; then
		fail "$1: $3, not $2: $(head -c 200 "$T/body")"
	elif [ -n "${4:-}" ] && ! grep -q "\"code\":\"$4\"" "$T/body"; then
		fail "$1: $3 but not $4: $(head -c 200 "$T/body")"
	else
		ok "$1: $3${4:+ $4}"
	fi
}
DT=$(cat "$T/data")
CT=$(cat "$T/ctl")
SPEC3="{\"command\":[\"python3\",\"-c\",\"pass\"],\"port\":8000,\"cwd\":\"$T/fn\"}"
expect "data token: PUT /functions/ct3" 403 "$(scoped "$DT" PUT /functions/ct3 -d "$SPEC3")" forbidden
expect "data token: GET /functions" 403 "$(scoped "$DT" GET /functions)" forbidden
expect "data token: GET /functions/ct1" 403 "$(scoped "$DT" GET /functions/ct1)" forbidden
expect "data token: DELETE /functions/ct1" 403 "$(scoped "$DT" DELETE /functions/ct1)" forbidden
expect "data token: POST snapshot" 403 "$(scoped "$DT" POST /functions/ct1/snapshot)" forbidden
expect "data token: GET /jobs" 403 "$(scoped "$DT" GET /jobs)" forbidden
expect "data token: GET /instances" 200 "$(scoped "$DT" GET /instances)"
expect "data token: GET /metrics" 200 "$(scoped "$DT" GET /metrics)"
# Let through to the handler: ct1 has no snapshot (409), nosuch is unknown.
st=$(scoped "$DT" POST /functions/ct1/start)
[ "$st" != 403 ] && [ "$st" != 401 ] && ok "data token: POST /functions/ct1/start reaches the handler ($st)" ||
	fail "data token: POST /functions/ct1/start: $st"
expect "data token: POST /functions/nosuch/start" 404 "$(scoped "$DT" POST /functions/nosuch/start)"
expect "data token: DELETE /instances/nosuch" 404 "$(scoped "$DT" DELETE /instances/nosuch)"
expect "control token: GET /instances" 403 "$(scoped "$CT" GET /instances)" forbidden
expect "control token: POST start" 403 "$(scoped "$CT" POST /functions/ct1/start)" forbidden
expect "control token: DELETE /instances/x" 403 "$(scoped "$CT" DELETE /instances/x)" forbidden
expect "control token: PUT /functions/ct3" 201 "$(scoped "$CT" PUT /functions/ct3 -d "$SPEC3")"
expect "control token: GET /jobs" 200 "$(scoped "$CT" GET /jobs)"
expect "control token: GET /metrics" 200 "$(scoped "$CT" GET /metrics)"
expect "full token: GET /instances" 200 "$(scoped "$TOKEN" GET /instances)"
expect "full token: DELETE /functions/ct3" 204 "$(scoped "$TOKEN" DELETE /functions/ct3)"
expect "a token's prefix: GET /instances" 401 "$(scoped "${DT%?}" GET /instances)" unauthorized
expect "no token: GET /metrics" 401 "$(curl -s -o "$T/body" -w '%{http_code}' "$URL/metrics")" unauthorized
expect "no token: GET /healthz" 200 "$(curl -s -o "$T/body" -w '%{http_code}' "$URL/healthz")"
# With a token, Host is not checked: a gateway names thawd as it likes.
expect "full token, Host: thawd.internal" 200 \
	"$(scoped "$TOKEN" GET /functions -H 'Host: thawd.internal')"
st=$(api GET /functions/ct1)
[ "$st" = 200 ] || fail "ct1 after the data token's DELETE: $st"
kill -TERM "$PID_A"
wait "$PID_A"
PID_A=""

# ---- 6. no token off loopback ----
for l in 0.0.0.0:0 "[::]:0" 10.255.255.1:0; do
	env -u THAW_TOKEN_FILE -u THAW_CONTROL_TOKEN_FILE -u THAW_DATA_TOKEN_FILE \
		timeout -k 2 10 "$THAWD" --listen "$l" --port-file "$T/n.port" --data-dir "$T/n" \
		--ram-tier "$SHM/n" --ram-tier-bytes 64M >"$T/n.out" 2>&1
	rc=$?
	if [ $rc != 1 ]; then
		fail "no token on $l: exit $rc, not 1: $(tail -n 3 "$T/n.out")"
	elif ! grep -q -- '--token-file' "$T/n.out" || ! grep -q THAW_TOKEN_FILE "$T/n.out" ||
		! grep -qF -- "--listen $l" "$T/n.out"; then
		fail "no token on $l: exit 1 but not the message: $(cat "$T/n.out")"
	else
		ok "no token on $l: exit 1: $(grep -m1 'cannot start' "$T/n.out")"
	fi
	[ -e "$T/n" ] || [ -e "$SHM/n" ] || [ -e "$T/n.port" ] &&
		fail "no token on $l: thawd touched things before refusing"
done
THAW_DATA_TOKEN_FILE=$T/data "$THAWD" --listen 0.0.0.0:0 --port-file "$T/n.port" \
	--data-dir "$T/n" --ram-tier "$SHM/n" --ram-tier-bytes 64M >"$T/n.out" 2>&1 &
PID_N=$!
wait_port "$T/n.port" "$PID_N"
if [ -s "$T/n.port" ]; then
	NURL=http://127.0.0.1:$(cat "$T/n.port")
	st=$(curl -s -o "$T/body" -w '%{http_code}' "$NURL/instances")
	expect "0.0.0.0 with only a data token: no token" 401 "$st" unauthorized
	st=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $DT" "$NURL/functions")
	expect "0.0.0.0 with only a data token: GET /functions" 403 "$st" forbidden
else
	fail "thawd on 0.0.0.0 with THAW_DATA_TOKEN_FILE did not start: $(tail -n 3 "$T/n.out")"
fi
kill -TERM $PID_N
wait $PID_N
PID_N=""
rm -rf "$T/n" "$SHM/n" "$T/n.port"

# ---- 7. without a token: Host and Content-Type ----
"$THAWD" --listen 127.0.0.1:0 --port-file "$T/n.port" --data-dir "$T/n" --ram-tier "$SHM/n" \
	--ram-tier-bytes 64M >"$T/n.out" 2>&1 &
PID_N=$!
wait_port "$T/n.port" "$PID_N"
NPORT=$(cat "$T/n.port" 2>/dev/null)
NURL=http://127.0.0.1:$NPORT
# napi METHOD PATH [curl args…]: no token; the status, the body in $T/body.
napi() {
	local m=$1 p=$2
	shift 2
	curl -s --max-time 5 -o "$T/body" -w '%{http_code}' -X "$m" "$NURL$p" "$@"
}
for h in evil.example "evil.example:$NPORT" "127.0.0.1.nip.io:$NPORT" "localhost.evil.example" \
	"[::2]:$NPORT" 0.0.0.0 "127.0.0.1:$NPORT.evil.example"; do
	expect "no token, Host: $h: GET /functions" 403 "$(napi GET /functions -H "Host: $h")" forbidden
done
expect "no token, Host: evil.example: PUT /functions/rb" 403 \
	"$(napi PUT /functions/rb -H 'Host: evil.example' -H 'Content-Type: application/json' -d "$SPEC3")" \
	forbidden
for h in "localhost:$NPORT" localhost "127.4.5.6:$NPORT" "[::1]:$NPORT" "LOCALHOST"; do
	expect "no token, Host: $h: GET /functions" 200 "$(napi GET /functions -H "Host: $h")"
done
echo "$SPEC3" >"$T/spec3.json"
# What a user types (README, scripts/run.sh): curl's default form type.
expect "no token: curl -X PUT -d @spec.json" 201 "$(napi PUT /functions/fx -d @"$T/spec3.json")"
expect "no token: PUT, text/plain JSON" 415 \
	"$(napi PUT /functions/fy -H 'Content-Type: text/plain' -d @"$T/spec3.json")" unsupported_media_type
expect "no token: PUT, a form's fields" 415 "$(napi PUT /functions/fy -d 'command=x&port=1')" \
	unsupported_media_type
# What a page on another site can make a browser send without asking.
expect "cross-site form POST snapshot (urlencoded, empty)" 415 \
	"$(napi POST /functions/fx/snapshot -H 'Origin: http://evil.example' -d '')" unsupported_media_type
expect "cross-site form POST snapshot (multipart)" 415 \
	"$(napi POST /functions/fx/snapshot -F a=b)" unsupported_media_type
expect "cross-site fetch POST start (text/plain)" 415 \
	"$(napi POST /functions/fx/start -H 'Content-Type: text/plain;charset=UTF-8' -d '{}')" \
	unsupported_media_type
expect "cross-site POST start (a body, no type)" 415 \
	"$(napi POST /functions/fx/start -H 'Content-Type:' -d '{}')" unsupported_media_type
expect "DELETE /functions/fx (text/plain body)" 415 \
	"$(napi DELETE /functions/fx -H 'Content-Type: text/plain' -d x)" unsupported_media_type
expect "no token: GET /functions/fy" 404 "$(napi GET /functions/fy)"
expect "no token: GET /functions/rb" 404 "$(napi GET /functions/rb)"
st=$(napi GET /functions/fx)
if [ "$st" = 200 ] && grep -q '"state":"none"' "$T/body"; then
	ok "fx is there and was not snapshotted"
else
	fail "fx after the refused requests: $st $(head -c 300 "$T/body")"
fi
st=$(napi GET /jobs)
[ "$st" = 200 ] && grep -q '"jobs":\[\]' "$T/body" && ok "no job was started" ||
	fail "GET /jobs: $st $(head -c 300 "$T/body")"
# A POST without a body or a type goes through (to the handler: 404).
expect "no token: POST snapshot (no body, no type)" 404 "$(napi POST /functions/nosuch/snapshot)"

# ---- 9. functions confined to the directories the operator allows ----
# (THAW_ALLOW_ROOTS is the tests' /tmp, /var/tmp and the tree: / and /etc are not.)
for kv in '"bundle": "/"' '"bundle": "/usr"' '"cwd": "/etc"' '"cwd": "/root"' '"cwd": "/tmp/../etc"'; do
	expect "spec with $kv" 403 "$(napi PUT /functions/esc -H 'Content-Type: application/json' \
		-d "{\"command\": [\"python3\", \"-m\", \"http.server\"], \"port\": 8000, $kv}")" forbidden
done
grep -q "outside the directories functions may use" "$T/body" ||
	fail "the refusal does not say why: $(head -c 300 "$T/body")"
st=$(napi GET /functions/esc)
[ "$st" = 404 ] && ok "no escaping function was registered" || fail "GET /functions/esc: $st"
# A symlink under an allowed root that points out of it counts where it points.
ln -s /etc "$T/etc-link"
expect "spec with a cwd symlinked to /etc" 403 "$(napi PUT /functions/esc -H 'Content-Type: application/json' \
	-d "{\"command\": [\"python3\"], \"port\": 8000, \"cwd\": \"$T/etc-link\"}")" forbidden
# The CLI refuses the same, before it runs anything.
printf '{"command": ["python3", "-m", "http.server"], "port": 8000, "cwd": "/etc"}\n' >"$T/esc.json"
"$B/thaw" --data-dir "$T/cli" snapshot --id esc "$T/esc.json" >/dev/null 2>"$T/esc.err"
rc=$?
[ $rc = 2 ] && grep -q "outside the directories functions may use" "$T/esc.err" &&
	ok "thaw snapshot refuses cwd /etc (exit 2)" || fail "thaw snapshot of cwd /etc: rc $rc, $(cat "$T/esc.err")"
[ ! -d "$T/cli/work" ] || [ -z "$(ls -A "$T/cli/work")" ] || fail "thaw snapshot of cwd /etc left work behind"
kill -TERM $PID_N
wait $PID_N
PID_N=""

[ $fails = 0 ] && echo "e2e_gateway: all passed" || echo "e2e_gateway: $fails failure(s)"
[ $fails = 0 ]
