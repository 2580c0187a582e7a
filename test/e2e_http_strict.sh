#!/usr/bin/env bash
# thawd's HTTP from the attack side, with the exact bytes a hostile client
# sends over a raw socket (no runc, CRIU or GPU needed; issue 36):
#   1. request smuggling (RFC 9112, 6.3): Content-Length: 0 with
#      Transfer-Encoding: chunked and a second request hidden in the body
#      (either header first), two different Content-Lengths (either first),
#      a Content-Length that is not a number, a Transfer-Encoding other than
#      chunked, two Host headers: each one answer, 400 bad_request with
#      "Connection: close", then the connection closed; the hidden PUT and
#      the PUTs did nothing.  A plain chunked PUT still works;
#   2. a raw byte that is not UTF-8 (0xff, 0x80, 0xc3 0x28) in the id of
#      every id route: 400 invalid_id, the byte shown as \xNN, never 500
#      "out of memory"; a Content-Type of such bytes: 415, not 500;
#   3. the Authorization scheme in any case ("bearer", "BEARER") opens, a
#      token of other case does not;
#   4. HTTP versions: 1.0 and 1.1 served; 1.2 served as 1.1 (RFC 9110,
#      2.5: a higher minor version is the highest one known); 2.0 and 0.9
#      are 505;
#   5. a second thawd on the first one's port exits 1 saying the address is
#      in use, and leaves no data directory (nor RAM tier, nor port file).
set -u
B=${THAW_BUILD:-$PWD/build}
THAWD=$B/thawd
. "${THAW_ROOT:-$PWD}/test/lib/wait_port.sh"
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
for c in python3 curl timeout; do
	command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }
done

T=$(mktemp -d /tmp/thaw-e2e-http-strict-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-http-strict-XXXXXX)
TOKEN=e2e-$RANDOM-$RANDOM
echo "$TOKEN" >"$T/token"
PID=""
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
cleanup() {
	[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd.log (tail)"; tail -n 30 "$T/thawd.log"; }
	rm -rf "$T" "$SHM"
}
trap cleanup EXIT

mkdir -p "$T/fn"
"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port" --data-dir "$T/data" --ram-tier "$SHM/a" \
	--ram-tier-bytes 64M --token-file "$T/token" --allow-root "$T/fn" >>"$T/thawd.log" 2>&1 &
PID=$!
wait_port "$T/port" "$PID" || { echo "thawd did not start"; tail "$T/thawd.log"; exit 1; }
PORT=$(head -n1 "$T/port")

python3 - "$PORT" "$TOKEN" "$T/fn" <<'EOF'
import json, re, socket, sys, time

port, token, fn = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
AUTH = b"Authorization: Bearer " + token + b"\r\n"
fails = 0


def report(good, what, detail=""):
    global fails
    fails += not good
    print("%s %s%s" % ("ok:" if good else "FAIL:", what, (": " + detail) if detail else ""))


def exchange(data, wait=5.0):
    """Send data on one connection; read until the server closes it (or
    wait s).  Returns (bytes read, whether the server closed it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(data)
    got, closed, end = b"", False, time.monotonic() + wait
    while time.monotonic() < end:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not d:
            closed = True
            break
        got += d
    s.close()
    return got, closed


def answers(data):
    """The answers in data: [(status, headers (lowercase names), body)]."""
    out = []
    while data.startswith(b"HTTP/"):
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            hdrs[k.strip().lower().decode()] = v.strip().decode(errors="replace")
        n = int(hdrs.get("content-length", "0"))
        out.append((status, hdrs, rest[:n]))
        data = rest[n:]
    return out


def code(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return None


def get(path, extra=b"", auth=AUTH, version=b"HTTP/1.1"):
    got, _ = exchange(b"GET " + path + b" " + version + b"\r\nHost: thawd\r\n" + auth + extra +
                      b"Connection: close\r\n\r\n")
    a = answers(got)
    return (a[0] if a else (None, {}, got)), got


def spec_body():
    return json.dumps({"command": ["python3", "-c", "pass"], "port": 8000, "cwd": fn}).encode()


def exists(fid):
    (st, _, _), _ = get(b"/functions/" + fid)
    return st == 200


# ---- 1. request smuggling ----
spec = spec_body()
hidden = (b"PUT /functions/smuggled HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(spec) + spec)
cases = [
    ("Content-Length: 0 then Transfer-Encoding: chunked, a PUT hidden in the body",
     b"POST /functions/nosuch/snapshot HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden),
    ("Transfer-Encoding: chunked then Content-Length: 0, a PUT hidden in the body",
     b"GET /functions HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n" + hidden),
    ("Content-Length: 0 and a chunked body that holds the PUT",
     b"GET /functions HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n" +
     b"%x\r\n" % len(hidden) + hidden + b"\r\n0\r\n\r\n" + hidden),
    ("two Content-Lengths, the first one short",
     b"PUT /functions/twolen HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Type: application/json\r\nContent-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(spec) +
     spec),
    ("two Content-Lengths, the second one short",
     b"PUT /functions/twolen HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Type: application/json\r\nContent-Length: %d\r\nContent-Length: 0\r\n\r\n" % len(spec) +
     spec),
    ("a Content-Length that is a list",
     b"PUT /functions/twolen HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Type: application/json\r\nContent-Length: %d, %d\r\n\r\n" % (len(spec), len(spec)) +
     spec),
    ("Transfer-Encoding: gzip, chunked",
     b"PUT /functions/twolen HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
     b"Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" +
     b"%x\r\n" % len(spec) + spec + b"\r\n0\r\n\r\n"),
    ("two Host headers",
     b"GET /functions HTTP/1.1\r\nHost: thawd\r\nHost: evil.example\r\n" + AUTH + b"\r\n" +
     b"GET /functions HTTP/1.1\r\nHost: thawd\r\n" + AUTH + b"\r\n"),
]
for what, data in cases:
    got, closed = exchange(data)
    a = answers(got)
    if a and b"Request malformed" in got and a[0][1].get("connection", "").lower() == "close":
        # libmicrohttpd's own 400 (HTML; 0.9.75 writes its head twice),
        # for a Content-Length it cannot parse, before thawd sees it.
        statuses = re.findall(rb"(?:^|\r\n)HTTP/1\.1 (\d{3}) ", got)
        good = closed and set(statuses) == {b"400"}
    else:
        good = (len(a) == 1 and a[0][0] == 400 and code(a[0][2]) == "bad_request" and
                a[0][1].get("connection", "").lower() == "close" and closed)
    report(good, what, "%d answer(s): %s; closed: %s" % (
        len(a), " | ".join("%d %s" % (x[0], x[2][:160].decode(errors="replace").strip())
                           for x in a), closed))
for fid in (b"smuggled", b"twolen"):
    report(not exists(fid), "GET /functions/%s: nothing was made" % fid.decode())

# A chunked body alone is sound: a PUT in chunks works.
got, _ = exchange(b"PUT /functions/chunked HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
                  b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n" + b"%x\r\n" % 10 + spec[:10] + b"\r\n" +
                  b"%x\r\n" % (len(spec) - 10) + spec[10:] + b"\r\n0\r\n\r\n")
a = answers(got)
report(len(a) == 1 and a[0][0] == 201 and exists(b"chunked"), "a chunked PUT: 201",
       got.decode(errors="replace")[:200])

# ---- 2. bytes that are not UTF-8 in an id ----
routes = [(b"GET", b"/functions/%s"), (b"PUT", b"/functions/%s"), (b"DELETE", b"/functions/%s"),
          (b"POST", b"/functions/%s/snapshot"), (b"POST", b"/functions/%s/start"),
          (b"POST", b"/functions/%s/push"), (b"POST", b"/functions/%s/pull"),
          (b"GET", b"/instances/%s"), (b"DELETE", b"/instances/%s"),
          (b"GET", b"/instances/%s/logs"), (b"GET", b"/jobs/%s"), (b"GET", b"/jobs/%s/logs")]
for bad in (b"\xff", b"a\x80b", b"\xc3\x28"):
    for method, path in routes:
        target = path % bad
        got, _ = exchange(method + b" " + target + b" HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
                          b"Connection: close\r\n\r\n")
        a = answers(got)
        msg = ""
        try:
            msg = json.loads(a[0][2])["error"]["message"]
        except Exception:
            pass
        shown = "\\x%02x" % next(c for c in bad if c >= 0x80)
        good = len(a) == 1 and a[0][0] == 400 and code(a[0][2]) == "invalid_id" and shown in msg
        report(good, "%s %r" % (method.decode(), target),
               "%s %s" % (a[0][0] if a else "none", a[0][2].decode(errors="replace").strip() if a else got))
got, _ = exchange(b"POST /functions/chunked/snapshot HTTP/1.1\r\nHost: thawd\r\n" + AUTH +
                  b"Content-Type: \xff\xfe/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
a = answers(got)
report(len(a) == 1 and a[0][0] == 415 and code(a[0][2]) == "unsupported_media_type",
       "a Content-Type of raw bytes: 415", got.decode(errors="replace")[:300])

# ---- 3. the Authorization scheme in any case ----
for hdr, want in ((b"Authorization: bearer " + token + b"\r\n", 200),
                  (b"Authorization: BEARER " + token + b"\r\n", 200),
                  (b"Authorization: Bearer  " + token + b"\r\n", 200),
                  (b"Authorization: Bearer " + token.upper() + b"\r\n", 401),
                  (b"Authorization: Bearer" + token + b"\r\n", 401),
                  (b"Authorization: Basic " + token + b"\r\n", 401)):
    (st, _, body), _ = get(b"/functions", auth=hdr)
    report(st == want, "%r: %s" % (hdr.strip(), want), "%s %s" % (st, body[:120]))

# ---- 4. HTTP versions ----
for v, want, line in ((b"HTTP/1.0", 200, b"HTTP/1.1 200"), (b"HTTP/1.1", 200, b"HTTP/1.1 200"),
                      (b"HTTP/1.2", 200, b"HTTP/1.1 200"), (b"HTTP/2.0", 505, b"HTTP/1.1 505"),
                      (b"HTTP/0.9", 505, b"HTTP/1.1 505")):
    (st, _, _), got = get(b"/functions", version=v)
    report(st == want and got.startswith(line), "GET /functions %s: %d" % (v.decode(), want),
           got.decode(errors="replace")[:60])
sys.exit(1 if fails else 0)
EOF
[ $? = 0 ] || fail "the raw requests above"

# ---- 5. a second thawd on the first one's port leaves nothing ----
timeout -k 2 10 "$THAWD" --listen "127.0.0.1:$PORT" --port-file "$T/b.port" --data-dir "$T/b" \
	--ram-tier "$SHM/b" --ram-tier-bytes 64M --token-file "$T/token" >"$T/b.out" 2>&1
rc=$?
if [ $rc != 1 ] || ! grep -q "127.0.0.1:$PORT: the address is in use" "$T/b.out"; then
	fail "a second thawd on port $PORT: exit $rc: $(cat "$T/b.out")"
else
	ok "a second thawd on port $PORT exits 1: $(head -n1 "$T/b.out")"
fi
for left in "$T/b" "$SHM/b" "$T/b.port"; do
	[ -e "$left" ] && fail "the second thawd left $left: $(find "$left" | head -n 5 | tr '\n' ' ')"
done
[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")" = 200 ] ||
	fail "the first thawd does not answer /healthz any more"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
