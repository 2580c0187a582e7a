#!/usr/bin/env bash
# thawd over TLS (--tls-cert, --tls-key), with a self-signed certificate made
# by the openssl CLI; over real sockets, no runc, CRIU or GPU needed:
#   1. TLS is off by default: plain HTTP answers, the port file holds the
#      port alone and the log says http://;
#   2. with a certificate and its key: curl --cacert gets /healthz 200, a PUT
#      /functions/<id> with the token is 201 and the function is there, one
#      without the token is 401; the port file says https on its second
#      line and the log https://; a key file only its owner reads gets no
#      warning;
#   3. curl without the certificate as CA fails verification (exit 60);
#   4. plain HTTP to the TLS port fails at once (no answer, no hang), as do
#      a burst of plain connections and one that sends nothing (closed by
#      --request-timeout); thawd still answers over TLS after them;
#   5. the settings: THAW_TLS_CERT and THAW_TLS_KEY are read, a flag wins
#      over its variable, and a key file every user can read is warned
#      about, not refused;
#   6. what stops thawd before it touches anything (no data directory, RAM
#      tier or port file made; on a running thawd's data directory its lock
#      is left alone): a certificate without a key or a key without a
#      certificate (exit 2, naming the missing flag); a garbage, empty or
#      missing certificate or key, a key that is not the certificate's, an
#      encrypted key (exit 1, naming the file); TLS without a token off
#      loopback (exit 1, naming --token-file);
#   7. SIGTERM: thawd exits 0.
set -u
B=${THAW_BUILD:-$PWD/build}
THAWD=$B/thawd
. "${THAW_ROOT:-$PWD}/test/lib/wait_port.sh"
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
OPENSSL=$(command -v openssl) || { echo "skipped: no openssl"; exit 77; }
for c in python3 curl timeout; do
	command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }
done
curl -V | grep -qw https || { echo "skipped: this curl has no https"; exit 77; }

T=$(mktemp -d /tmp/thaw-e2e-tls-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-tls-XXXXXX)
TOKEN=e2e-$RANDOM-$RANDOM
echo "$TOKEN" >"$T/token"
PID=""
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

cleanup() {
	[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd's log (tail)"; tail -n 30 "$T/thawd.log"; }
	rm -rf "$T" "$SHM"
}
trap cleanup EXIT

# cert NAME: a self-signed certificate for 127.0.0.1 and localhost in
# $T/NAME.crt, its key (mode 0600) in $T/NAME.key.
cert() {
	(umask 077 && "$OPENSSL" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$T/$1.key" -out "$T/$1.crt" -days 2 -subj "/CN=thaw-e2e-$1" \
		-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$T/openssl.out" 2>&1) ||
		{ echo "openssl cannot make a certificate: $(cat "$T/openssl.out")"; exit 1; }
	chmod 644 "$T/$1.crt"
}

# start NAME ARGS…: thawd on a free port of 127.0.0.1, data in $T/NAME, its
# pid in $PID, the port in $PORT.
start() {
	local name=$1
	shift
	rm -f "$T/$name.port"
	"$THAWD" --listen 127.0.0.1:0 --port-file "$T/$name.port" --data-dir "$T/$name" \
		--ram-tier "$SHM/$name" --ram-tier-bytes 64M --token-file "$T/token" \
		--request-timeout 2 "$@" >"$T/thawd.log" 2>&1 &
	PID=$!
	wait_port "$T/$name.port" "$PID" || { echo "thawd did not start"; tail "$T/thawd.log"; exit 1; }
	PORT=$(head -n 1 "$T/$name.port")
}

# stop: SIGTERM, and thawd must exit 0.
stop() {
	local rc
	kill -TERM "$PID"
	wait "$PID"
	rc=$?
	PID=""
	[ $rc = 0 ] || fail "thawd exited $rc on SIGTERM"
}

# get URL [curl args…]: the status on stdout ("000" if none), the body in
# $T/body, curl's exit status in $T/rc.
get() {
	local url=$1
	shift
	curl -s --max-time 5 -o "$T/body" -w '%{http_code}' "$@" "$url"
	echo $? >"$T/rc"
}

cert a
cert b # another key: not a's

# ---- 1. TLS off by default ----
start plain
st=$(get "http://127.0.0.1:$PORT/healthz")
[ "$st" = 200 ] && grep -q '"status":"ok"' "$T/body" && ok "no TLS flags: plain HTTP /healthz 200" ||
	fail "no TLS flags: http /healthz: $st $(cat "$T/body")"
[ "$(cat "$T/plain.port")" = "$PORT" ] || fail "plain port file: \"$(cat "$T/plain.port")\""
grep -q "listening on http://127.0.0.1:$PORT" "$T/thawd.log" ||
	fail "the log does not say http://127.0.0.1:$PORT: $(grep listening "$T/thawd.log")"
stop

# ---- 2. with a certificate and its key ----
start tls --tls-cert "$T/a.crt" --tls-key "$T/a.key"
URL=https://127.0.0.1:$PORT
if [ "$(sed -n 2p "$T/tls.port")" = https ] && [ "$(wc -l <"$T/tls.port")" = 2 ]; then
	ok "the port file says $PORT, then https"
else
	fail "TLS port file: \"$(cat "$T/tls.port")\""
fi
grep -q "listening on https://127.0.0.1:$PORT" "$T/thawd.log" ||
	fail "the log does not say https://127.0.0.1:$PORT: $(grep listening "$T/thawd.log")"
grep -q "can be read by every user" "$T/thawd.log" && fail "a warning about a key file of mode 0600"
st=$(get "$URL/healthz" --cacert "$T/a.crt")
[ "$st" = 200 ] && grep -q '"status":"ok"' "$T/body" && ok "https /healthz with --cacert: 200" ||
	fail "https /healthz with --cacert: $st (curl exit $(cat "$T/rc")) $(cat "$T/body")"
mkdir -p "$T/fn"
SPEC="{\"command\":[\"python3\",\"-c\",\"pass\"],\"port\":8000,\"cwd\":\"$T/fn\"}"
st=$(get "$URL/functions/tls1" --cacert "$T/a.crt" -X PUT -H "Authorization: Bearer $TOKEN" \
	-H 'Content-Type: application/json' -d "$SPEC")
[ "$st" = 201 ] && ok "https PUT /functions/tls1 with the token: 201" ||
	fail "https PUT /functions/tls1: $st (curl exit $(cat "$T/rc")) $(cat "$T/body")"
st=$(get "$URL/functions/tls1" --cacert "$T/a.crt" -H "Authorization: Bearer $TOKEN")
[ "$st" = 200 ] && grep -q '"id":"tls1"' "$T/body" && ok "https GET /functions/tls1: 200" ||
	fail "https GET /functions/tls1: $st $(cat "$T/body")"
st=$(get "$URL/functions/tls2" --cacert "$T/a.crt" -X PUT -H 'Content-Type: application/json' \
	-d "$SPEC")
[ "$st" = 401 ] && grep -q unauthorized "$T/body" && ok "https PUT without the token: 401" ||
	fail "https PUT without the token: $st $(cat "$T/body")"

# ---- 3. no CA: verification fails ----
st=$(get "$URL/healthz")
rc=$(cat "$T/rc")
[ "$rc" = 60 ] && [ "$st" = 000 ] && ok "https without --cacert: curl exit 60 (not verified)" ||
	fail "https without --cacert: curl exit $rc, status $st"

# ---- 4. plain HTTP to the TLS port ----
start_s=$SECONDS
st=$(get "http://127.0.0.1:$PORT/healthz")
rc=$(cat "$T/rc")
if [ "$st" != 000 ] || [ "$rc" = 0 ] || [ "$rc" = 28 ]; then
	fail "plain HTTP to the TLS port: status $st, curl exit $rc"
else
	ok "plain HTTP to the TLS port fails at once: curl exit $rc"
fi
# A burst of plain requests, and one connection that sends nothing: each is
# closed (the silent one by --request-timeout 2), none is answered.
python3 - "$PORT" >"$T/plain.out" 2>&1 <<'EOF'
import socket, sys, time
port = int(sys.argv[1])
bad = 0
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s
silent = conn()
t0 = time.monotonic()
for i in range(20):
    s = conn()
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except socket.timeout:
        print("plain connection %d: still open after 5 s" % i); bad = 1
    except ConnectionResetError:
        pass
    if b"HTTP/" in got:
        print("plain connection %d: answered in plain HTTP: %r" % (i, got[:80])); bad = 1
    s.close()
try:
    d = silent.recv(4096)
    if d:
        print("the silent connection got %r" % d[:80]); bad = 1
except socket.timeout:
    print("the silent connection is still open after %.1f s" % (time.monotonic() - t0)); bad = 1
except ConnectionResetError:
    pass
print("silent connection closed after %.1f s" % (time.monotonic() - t0))
sys.exit(bad)
EOF
if [ $? = 0 ]; then
	ok "20 plain HTTP connections closed unanswered; $(tail -n 1 "$T/plain.out")"
else
	fail "plain connections to the TLS port: $(cat "$T/plain.out")"
fi
[ $((SECONDS - start_s)) -le 12 ] || fail "plain HTTP to the TLS port took $((SECONDS - start_s)) s"
kill -0 "$PID" 2>/dev/null || fail "thawd died after plain HTTP to its TLS port"
st=$(get "$URL/functions" --cacert "$T/a.crt" -H "Authorization: Bearer $TOKEN")
[ "$st" = 200 ] && grep -q '"id":"tls1"' "$T/body" && ok "TLS still answers after plain HTTP: 200" ||
	fail "https GET /functions after plain HTTP: $st (curl exit $(cat "$T/rc")) $(cat "$T/body")"
grep -q "TLS handshake failed" "$T/thawd.log" ||
	fail "the log does not say why plain connections failed: $(grep -m3 libmicrohttpd "$T/thawd.log")"

# ---- 6 (on a running thawd's data directory): a bad key leaves its lock alone ----
timeout -k 2 10 "$THAWD" --listen 127.0.0.1:0 --port-file "$T/x.port" --data-dir "$T/tls" \
	--ram-tier "$SHM/x" --tls-cert "$T/a.crt" --tls-key "$T/b.key" >"$T/x.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -qF "$T/b.key" "$T/x.out" && ! grep -q thawd.lock "$T/x.out"; then
	ok "a mismatching key on a running thawd's data directory: exit 1 before the lock"
else
	fail "a mismatching key on a running thawd's data directory: exit $rc: $(cat "$T/x.out")"
fi
[ "$(cat "$T/tls/thawd.lock" 2>/dev/null)" = "$PID" ] ||
	fail "thawd.lock holds \"$(cat "$T/tls/thawd.lock" 2>/dev/null)\", not the running thawd's pid $PID"
[ -e "$SHM/x" ] || [ -e "$T/x.port" ] && fail "the refused thawd made its RAM tier or port file"
st=$(get "$URL/healthz" --cacert "$T/a.crt")
[ "$st" = 200 ] || fail "https /healthz after the refused thawd: $st"

# ---- 7. SIGTERM ----
stop

# ---- 5. the settings: variables, flags over them, a readable key ----
cp "$T/a.key" "$T/a644.key"
chmod 644 "$T/a644.key"
echo garbage >"$T/garbage.crt"
THAW_TLS_CERT=$T/garbage.crt THAW_TLS_KEY=$T/a644.key start env --tls-cert "$T/a.crt"
st=$(get "https://localhost:$PORT/healthz" --cacert "$T/a.crt")
[ "$st" = 200 ] && ok "--tls-cert over THAW_TLS_CERT, THAW_TLS_KEY read: https://localhost 200" ||
	fail "--tls-cert with THAW_TLS_KEY: $st (curl exit $(cat "$T/rc"))"
grep -q "TLS key file $T/a644.key can be read by every user" "$T/thawd.log" &&
	ok "a key file of mode 0644 is warned about" ||
	fail "no warning about the 0644 key: $(head -n 3 "$T/thawd.log")"
stop

# ---- 6. what stops thawd before it touches anything ----
# refused NAME WANT-RC WANT-TEXT ARGS…: thawd with ARGS exits WANT-RC saying
# WANT-TEXT, having made no data directory, RAM tier or port file.
refused() {
	local name=$1 want=$2 text=$3 rc
	shift 3
	timeout -k 2 10 "$THAWD" --listen 127.0.0.1:0 --port-file "$T/$name.port" \
		--data-dir "$T/$name" --ram-tier "$SHM/$name" --token-file "$T/token" "$@" \
		>"$T/$name.out" 2>&1
	rc=$?
	if [ $rc != "$want" ]; then
		fail "$name: exit $rc, not $want: $(tail -n 3 "$T/$name.out")"
	elif ! grep -qF -- "$text" "$T/$name.out"; then
		fail "$name: exit $rc but no \"$text\" in: $(cat "$T/$name.out")"
	else
		ok "$name: exit $rc: $(tail -n 1 "$T/$name.out")"
	fi
	[ -e "$T/$name" ] || [ -e "$SHM/$name" ] || [ -e "$T/$name.port" ] &&
		fail "$name: thawd touched things before refusing"
}
: >"$T/empty.crt"
"$OPENSSL" pkey -in "$T/a.key" -aes256 -passout pass:secret -out "$T/enc.key" 2>/dev/null ||
	fail "openssl cannot encrypt a key"
refused cert-only 2 "without --tls-key" --tls-cert "$T/a.crt"
THAW_TLS_KEY=$T/a.key refused key-only 2 "without --tls-cert"
refused garbage-cert 1 "$T/garbage.crt" --tls-cert "$T/garbage.crt" --tls-key "$T/a.key"
refused empty-cert 1 "$T/empty.crt" --tls-cert "$T/empty.crt" --tls-key "$T/a.key"
refused missing-key 1 "$T/none.key" --tls-cert "$T/a.crt" --tls-key "$T/none.key"
refused key-as-cert 1 "$T/a.key" --tls-cert "$T/a.key" --tls-key "$T/a.key"
refused mismatching-key 1 "$T/b.key" --tls-cert "$T/a.crt" --tls-key "$T/b.key"
refused encrypted-key 1 "$T/enc.key: the key is encrypted" --tls-cert "$T/a.crt" --tls-key "$T/enc.key"
# TLS is no token: off loopback thawd still wants one.
env -u THAW_TOKEN_FILE -u THAW_CONTROL_TOKEN_FILE -u THAW_DATA_TOKEN_FILE \
	timeout -k 2 10 "$THAWD" --listen 0.0.0.0:0 --port-file "$T/open.port" --data-dir "$T/open" \
	--ram-tier "$SHM/open" --tls-cert "$T/a.crt" --tls-key "$T/a.key" >"$T/open.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q -- --token-file "$T/open.out" &&
	ok "TLS without a token on 0.0.0.0: exit 1 naming --token-file" ||
	fail "TLS without a token on 0.0.0.0: exit $rc: $(cat "$T/open.out")"
[ -e "$T/open" ] || [ -e "$T/open.port" ] && fail "TLS without a token: thawd touched things"

[ $fails = 0 ] && echo "e2e_tls: all passed" || echo "e2e_tls: $fails failure(s)"
[ $fails = 0 ]
