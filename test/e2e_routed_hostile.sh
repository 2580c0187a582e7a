#!/usr/bin/env bash
# Requests routed through thawd from the attack side (issue 44), with real runc,
# CRIU and thawd, and test/fixtures/hostile_fn.py (python's http.server,
# HTTP/1.1 keep-alive, recording every request it parses):
#   1. request smuggling: a bare CR in a header value hiding a second
#      Content-Length, the body holding a second request: the attacker gets
#      400, the next client (over the same kept connection) gets its own
#      answer, and the function never sees the hidden request nor the
#      victim's Cookie in another request; a bare CR, NUL, another control
#      byte, obs-fold, whitespace before the colon, a name that is not a
#      token, a bare LF ending a line, HTTP/1.1 without Host: each 400 and
#      the function never sees it;
#      A GET with a body stays a GET;
#   2. forwarding headers a client sends (X-Forwarded-*, Forwarded,
#      X-Real-IP) never reach the function: thawd's own do;
#   3. hop-by-hop: headers named in the client's or the instance's
#      Connection are dropped; the instance's trailers never become the
#      client's headers;
#   4. an instance's 100 KB status line: 502; an instance's Content-Length
#      longer than what it sends, then close: 502, or a cut connection, never
#      a complete-looking answer;
#   5. --request-timeout cuts a routed body trickled a byte at a time, and
#      the slot is free again;
#   6. SIGTERM while a routed request is being served: its answer reaches
#      the client before thawd exits;
#   7. a start refused 403 (a root no longer allowed) answers 403 forbidden
#      to the routed request, not 403 internal.
# Nothing waits for a time and then checks: each step waits for what it
# expects, with a generous limit.
set -u
NAME=routed-hostile
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
FN2=$T/fn2
fixture_fn "$FN" hostile_fn.py
fixture_fn "$FN2" hostile_fn.py
export THAW_ALLOW_ROOTS=$FN:$FN2
start_thawd --request-timeout 3

spec() { fn_spec hostile_fn.py "$1" "\"idle_s\": 600, $2"; } # spec DIR EXTRA-KEYS
put_snapshot h "$(spec "$FN" '"concurrency": 4, "max_instances": 1, "queue_timeout_s": 120')"
put_snapshot g "$(spec "$FN2" '"concurrency": 1, "max_instances": 1')"
st=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/function/h/health")
[ "$st" = 200 ] || { fail "first routed request: $st $(cat "$T/body")"; exit 1; }

# Sections 1 to 5, over raw sockets.
python3 - "$(head -n1 "$T/port")" <<'EOF' || fails=$((fails + 1))
import json, socket, sys, time

port = int(sys.argv[1])
fails = 0


def report(good, what, detail=""):
    global fails
    fails += not good
    print("%s %s%s" % ("ok:" if good else "FAIL:", what, (": " + detail) if detail else ""))


class Conn:
    def __init__(self, timeout=30.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.closed = False

    def fill(self):
        try:
            d = self.s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            d = b""
        if not d:
            self.closed = True
        self.buf += d
        return bool(d)

    def line(self):
        while b"\r\n" not in self.buf:
            if not self.fill():
                return None
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def take(self, n):
        while len(self.buf) < n:
            if not self.fill():
                break
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def answer(self):
        """One answer: (status, [(name, value)], body, complete), status 0
        if none came."""
        l = self.line()
        if not l:
            return 0, [], b"", False
        status = int(l.split()[1])
        hdrs = []
        while True:
            l = self.line()
            if l is None:
                return status, hdrs, b"", False
            if l == b"":
                break
            k, _, v = l.decode("latin-1").partition(":")
            hdrs.append((k.strip().lower(), v.strip()))
        h = dict(hdrs)
        if "content-length" in h:
            n = int(h["content-length"])
            body = self.take(n)
            return status, hdrs, body, len(body) == n
        if h.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                l = self.line()
                if l is None:
                    return status, hdrs, body, False
                n = int(l.split(b";")[0], 16)
                if n == 0:
                    trailers = []
                    while True:
                        l = self.line()
                        if l is None:
                            return status, hdrs, body, False
                        if l == b"":
                            return status, hdrs + [("(trailer)", t) for t in trailers], body, True
                        trailers.append(l.decode("latin-1"))
                body += self.take(n)
                self.take(2)
        while self.fill():
            pass
        return status, hdrs, self.buf, False

    def close(self):
        self.s.close()


def one(raw, timeout=30.0):
    c = Conn(timeout)
    c.s.sendall(raw)
    r = c.answer()
    c.close()
    return r


def routed(path, extra=b"", method=b"GET"):
    return one(method + b" /function/h" + path + b" HTTP/1.1\r\nHost: localhost\r\n" + extra +
               b"Connection: close\r\n\r\n")


def seen():
    st, _, body, _ = routed(b"/seen")
    return json.loads(body) if st == 200 else None


# ---- 1. smuggling ----
hidden = (b"GET /echo/smuggled HTTP/1.1\r\nHost: localhost\r\nX-Smuggled: 1\r\n"
          b"Content-Length: 80\r\n\r\n")
attack = (b"POST /function/h/echo/attacker HTTP/1.1\r\nHost: localhost\r\n"
          b"X-A: a\rContent-Length: 0\r\nContent-Length: " + str(len(hidden)).encode() +
          b"\r\n\r\n" + hidden)
a = Conn()
a.s.sendall(attack)
ast, _, abody, _ = a.answer()
a.close()
vst, _, vbody, _ = routed(b"/echo/victim", b"Cookie: session=victim-secret-42\r\n")
try:
    vpath = json.loads(vbody)["path"]
except ValueError:
    vpath = repr(vbody[:120])
log = seen() or []
leaked = [r["path"] for r in log if "victim-secret-42" in json.dumps(r) and
          (r["path"] != "/echo/victim" or "victim-secret-42" in r["body"])]
smuggled = [r["path"] for r in log if "smuggled" in r["path"]]
report(ast == 400 and vst == 200 and vpath == "/echo/victim" and not leaked and not smuggled,
       "a bare CR hiding a Content-Length (and a request in the body): the attacker gets 400, "
       "the next client its own answer",
       "attacker %d, victim %d %s, the function saw the victim's cookie in %s, smuggled %s" %
       (ast, vst, vpath, leaked, smuggled))

bad = [
    (b"bare CR in a value", b"X-A: a\rb\r\n"),
    (b"NUL in a value", b"X-A: a\x00b\r\n"),
    (b"control byte in a value", b"X-A: a\x01b\r\n"),
    (b"obs-fold", b"X-A: one\r\n two\r\n"),
    (b"space before the colon", b"Transfer-Encoding : chunked\r\n"),
    (b"tab before the colon", b"X-A\t: 1\r\n"),
    (b"a name that is not a token", b"X(A): 1\r\n"),
    (b"a line ended by a bare LF", b"X-A: 1\nX-B: 2\r\n"),
]
for i, (what, line) in enumerate(bad):
    raw = (b"GET /function/h/echo/bad-%d HTTP/1.1\r\nHost: localhost\r\n" % i + line +
           b"Content-Length: 5\r\n\r\n0\r\n\r\n")
    c = Conn()
    c.s.sendall(raw)
    st, hdrs, body, _ = c.answer()
    while c.fill():
        pass
    c.close()
    report(st == 400 and c.closed, "%s: 400, connection closed" % what.decode(),
           "%d %s" % (st, body[:160]))
st, _, body, _ = one(b"GET /function/h/echo/nohost HTTP/1.1\r\nConnection: close\r\n\r\n")
report(st == 400, "HTTP/1.1 without Host: 400", "%d %s" % (st, body[:160]))
log = seen() or []
report(log and not [r for r in log if "/bad-" in r["path"] or "nohost" in r["path"]],
       "none of them reached the function",
       str([r["path"] for r in log if "/bad-" in r["path"] or "nohost" in r["path"]]))
st, _, body, _ = routed(b"/echo/fine", b"X-Tab: a\tb\r\nX-Space: c  \r\nX-Empty:\r\n")
h = dict((k.lower(), v) for k, v in json.loads(body)["headers"]) if st == 200 else {}
report(st == 200 and h.get("x-tab") == "a\tb" and "x-empty" in h,
       "a tab inside a value, trailing spaces and an empty value are fine", "%d %s" % (st, body[:200]))

st, _, body, _ = one(b"GET /function/h/echo/getbody HTTP/1.1\r\nHost: localhost\r\n"
                     b"Content-Length: 3\r\nConnection: close\r\n\r\nabc")
e = json.loads(body) if st == 200 else {}
report(e.get("method") == "GET" and e.get("body") == "abc", "a GET with a body reaches the function as a GET",
       "%d %s %r" % (st, e.get("method"), e.get("body")))

# ---- 2. forwarding headers ----
st, _, body, _ = routed(b"/echo/fwd", b"X-Forwarded-Proto: https\r\nX-Forwarded-For: 6.6.6.6\r\n"
                        b"X-Forwarded-Host: evil.example\r\nForwarded: for=6.6.6.6;proto=https\r\n"
                        b"X-Real-IP: 6.6.6.6\r\n")
hl = [(k.lower(), v) for k, v in json.loads(body)["headers"]] if st == 200 else []
want = [("x-forwarded-for", "127.0.0.1"), ("x-forwarded-proto", "http")]
got = [(k, v) for k, v in hl if k.startswith("x-forwarded") or k in ("forwarded", "x-real-ip")]
report(st == 200 and sorted(got) == want and "6.6.6.6" not in body.decode() and
       "evil" not in body.decode(),
       "a client's X-Forwarded-*, Forwarded, X-Real-IP are dropped; thawd's own reach the function",
       "%d %s" % (st, got))

# ---- 3. hop-by-hop ----
st, _, body, _ = routed(b"/echo/hop", b"Connection: X-Hop, keep-alive\r\nX-Hop: secret\r\n"
                        b"X-Stay: 1\r\n")
hn = [k.lower() for k, _ in json.loads(body)["headers"]] if st == 200 else []
report(st == 200 and "x-hop" not in hn and "x-stay" in hn,
       "a header the client's Connection names is not forwarded", "%d %s" % (st, hn))
st, hdrs, body, _ = routed(b"/connhdr")
names = [k for k, _ in hdrs]
report(st == 200 and "x-secret" not in names and "x-kept" in names,
       "a header the instance's Connection names is not passed back", "%d %s" % (st, hdrs))
st, hdrs, body, complete = routed(b"/trailers")
cookies = [v for k, v in hdrs if k == "set-cookie"]
dates = [v for k, v in hdrs if k == "date"]
report(st == 200 and body == b"hello" and not cookies and "1970" not in " ".join(dates) and
       "x-t" not in [k for k, _ in hdrs],
       "the instance's trailers are not made the client's headers", "%d %s %r" % (st, hdrs, body))

# ---- 4. broken answers ----
st, hdrs, body, _ = routed(b"/bigstatus")
report(st == 502, "an instance's 100 KB status line: 502", "%d %s" % (st, body[:200]))
st, hdrs, body, complete = routed(b"/short")
report(st == 502 or (st == 200 and not complete),
       "an instance's answer shorter than its Content-Length: 502 or a cut connection",
       "%d complete=%s %d bytes %s" % (st, complete, len(body), hdrs))

# ---- 5. slow clients ----
# Each request below must be cut by thawd (--request-timeout 3) long before
# its sender would be done (a byte every 0.2 s of 100000).
def trickle(head, body_bytes):
    c = Conn(timeout=5)
    end = time.monotonic() + 120
    cut = False
    try:
        for b in head:
            c.s.sendall(bytes([b]))
            time.sleep(0.01)
        while time.monotonic() < end:
            c.s.sendall(b"x")
            time.sleep(0.2)
            c.s.setblocking(False)
            try:
                d = c.s.recv(65536)
                if not d or d:
                    cut = True
                    break
            except BlockingIOError:
                pass
            finally:
                c.s.setblocking(True)
    except (BrokenPipeError, ConnectionResetError):
        cut = True
    c.close()
    return cut


cut = trickle(b"POST /function/h/echo/slow HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n",
              100000)
report(cut, "a routed body trickled a byte every 0.2 s: thawd cuts it (--request-timeout 3)")
c = Conn(timeout=5)
cut = False
try:
    for b in b"GET /function/h/echo/slowhead HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"y" * 1000:
        c.s.sendall(bytes([b]))
        time.sleep(0.2)
except (BrokenPipeError, ConnectionResetError):
    cut = True
c.close()
report(cut, "a routed head trickled a byte every 0.2 s: thawd cuts it")
ok = 0
for k in range(4):
    st, _, _, _ = routed(b"/echo/after-slow-%d" % k)
    ok += st == 200
report(ok == 4, "after them, requests are served", "%d of 4" % ok)
sys.exit(1 if fails else 0)
EOF

# ---- 6. SIGTERM while a request is served ----
# A request that takes 3 s, then SIGTERM once the function has it: the answer
# must reach the client, whole, before thawd exits.
for round in 1 2 3; do
	rm -f "$T/sleep.out"
	curl -s -o "$T/sleep.out" -w '%{http_code}' "$URL/function/h/sleep?ms=3000&r=$round" >"$T/sleep.code" &
	cp=$!
	for _ in $(seq 600); do
		curl -s "$URL/function/h/seen" | grep -q "sleep?ms=3000&r=$round" && break
		sleep 0.1
	done
	stop_thawd 60
	wait $cp
	code=$(cat "$T/sleep.code")
	[ "$code" = 200 ] && [ "$(cat "$T/sleep.out")" = slept ] &&
		ok "SIGTERM during a routed request (round $round): its answer reached the client" ||
		fail "SIGTERM during a routed request (round $round): $code \"$(cat "$T/sleep.out" 2>/dev/null)\""
	# The next round's thawd (and the last one's, for section 7) allows FN
	# only: g's root is no longer one.
	[ $round = 3 ] && export THAW_ALLOW_ROOTS=$FN
	start_thawd --request-timeout 3
done

# ---- 7. a start's refusal, routed ----
st=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/function/g/health")
code=$(jget "$T/body" "j['error']['code']")
[ "$st" = 403 ] && [ "$code" = forbidden ] &&
	ok "a start refused 403 (its root no longer allowed): the routed request gets 403 forbidden" ||
	fail "a start refused for its root: $st $code $(cat "$T/body")"

echo "$fails failure(s)"
[ $fails = 0 ]
