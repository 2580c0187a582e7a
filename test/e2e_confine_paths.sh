#!/usr/bin/env bash
# A function's host paths are checked where they are used, not only where
# they are registered (function/confine.h; issue 36, defects 1 and 2), with
# real runc, CRIU and thawd, as an attacker who may PUT specs and make links
# under an allowed root would try:
#   1. a bundle whose "rootfs" is a link out of the allowed roots: PUT 403
#      forbidden, naming where the link goes;
#   2. the same link made after the PUT: the snapshot is 403 forbidden and
#      runc made nothing where the link goes;
#   3. a cwd that did not exist at the PUT, made a link out of the allowed
#      roots afterwards: the snapshot is 403, and no container ran;
#   4. a function snapshotted under an --allow-root (with a standby), then
#      thawd restarted without it: its snapshot and its start are 403
#      forbidden and no standby is made, while a function under a root it
#      still allows snapshots and starts;
#   5. nothing is left: no container, process or mount of the test.
set -u
NAME=confine-paths
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
# Only what each thawd here is given: not the test run's THAW_ALLOW_ROOTS
# (scripts/run-tests.sh allows /tmp, where the test's directories are).
unset THAW_ALLOW_ROOTS
A=$T/allowed   # the operator's --allow-root
E=$T/elsewhere # outside every allowed root ($T itself is not one)
K=$T/kept      # allowed by both thawds of part 4
mkdir -p "$A" "$E" "$K"
start_thawd --allow-root "$A" --allow-root "$K"

# A function that serves HTTP from its directory.
app() {
	mkdir -p "$1"
	cat >"$1/app.py" <<'PY'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(os.getcwd().encode() + b"\n")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
PY
}
# spec JSON-FIELDS: a spec running app.py, with more fields.
spec() { echo "{\"command\": [\"python3\", \"app.py\"], \"port\": 8000, \"ready\": {\"http\": \"/\"}, $1}"; }
# expect WHAT WANT GOT [CODE]
expect() {
	if [ "$3" != "$2" ]; then
		fail "$1: $3, not $2: $(head -c 400 "$T/body")"
	elif [ -n "${4:-}" ] && ! grep -q "\"code\":\"$4\"" "$T/body"; then
		fail "$1: $3 but not $4: $(head -c 400 "$T/body")"
	else
		ok "$1: $3${4:+ $4}: $(head -c 300 "$T/body")"
	fi
}
empty() { [ -z "$(ls -A "$1")" ] && ok "$2: $1 is empty" || fail "$2: $1 holds $(ls -A "$1" | tr '\n' ' ')"; }

# ---- 1. a rootfs that is a link out, at the PUT ----
mkdir -p "$A/b1" "$E/root1"
ln -s "$E/root1" "$A/b1/rootfs"
expect "PUT of a bundle whose rootfs links to $E/root1" 403 \
	"$(api PUT /functions/b1 -d "{\"bundle\": \"$A/b1\", \"command\": [\"/bin/true\"], \"port\": 8000}")" forbidden
grep -q "$E/root1" "$T/body" || fail "the 403 does not say where the rootfs goes: $(cat "$T/body")"
[ "$(api GET /functions/b1)" = 404 ] || fail "b1 was registered"

# ---- 2. the link made after the PUT ----
mkdir -p "$A/b2" "$E/root2"
expect "PUT of a bundle with no rootfs yet" 201 \
	"$(api PUT /functions/b2 -d "{\"bundle\": \"$A/b2\", \"command\": [\"/bin/true\"], \"port\": 8000}")"
ln -s "$E/root2" "$A/b2/rootfs"
expect "snapshot once b2/rootfs links to $E/root2" 403 "$(api POST '/functions/b2/snapshot?wait=1')" forbidden
grep -q "$E/root2" "$T/body" || fail "the 403 does not say where the rootfs goes: $(cat "$T/body")"
empty "$E/root2" "runc made nothing in the link's target"

# ---- 3. a cwd made a link after the PUT ----
app "$E/dir3"
expect "PUT with a cwd that does not exist yet" 201 "$(api PUT /functions/c3 -d "$(spec "\"cwd\": \"$A/later\"")")"
ln -s "$E/dir3" "$A/later"
expect "snapshot once the cwd links to $E/dir3" 403 "$(api POST '/functions/c3/snapshot?wait=1')" forbidden
grep -q "$E/dir3" "$T/body" || fail "the 403 does not say where the cwd goes: $(cat "$T/body")"
[ -z "$(own_containers)" ] || fail "a container ran: $(own_containers)"
[ "$(ls "$E/dir3")" = app.py ] || fail "$E/dir3 changed: $(ls -A "$E/dir3")"

# ---- 4. a thawd restarted without the --allow-root ----
app "$A/fn"
app "$K/ok"
expect "PUT fn (cwd under --allow-root, a standby)" 201 \
	"$(api PUT /functions/fn -d "$(spec "\"cwd\": \"$A/fn\", \"standby\": 1")")"
expect "PUT ok (cwd under an allowed root kept)" 201 \
	"$(api PUT /functions/ok -d "$(spec "\"cwd\": \"$K/ok\"")")"
expect "snapshot fn, allowed" 200 "$(api POST '/functions/fn/snapshot?wait=1')"
expect "snapshot ok" 200 "$(api POST '/functions/ok/snapshot?wait=1')"
standbys() {
	api GET /instances >/dev/null
	jget "$T/body" "sum(1 for i in j['instances'] if i['state'] == 'standby')"
}
for _ in $(seq 100); do [ "$(standbys)" = 1 ] && break; sleep 0.1; done
[ "$(standbys)" = 1 ] && ok "fn has its standby" || fail "fn's standby was not made: $(cat "$T/body")"
kill -TERM "$THAWD_PID"
wait "$THAWD_PID"
start_thawd --allow-root "$K"
expect "snapshot of fn without its --allow-root" 403 "$(api POST '/functions/fn/snapshot?wait=1')" forbidden
expect "start of fn without its --allow-root" 403 "$(api POST /functions/fn/start)" forbidden
grep -q "$A/fn" "$T/body" || fail "the start's 403 does not name the directory: $(cat "$T/body")"
sleep 3
[ "$(standbys)" = 0 ] && ok "no standby of fn was made" || fail "a standby of fn was made: $(cat "$T/body")"
grep -q "outside the directories functions may use" "$T/thawd.log" ||
	fail "thawd's log does not say why fn's standby is not made"
expect "start of ok (under the root still allowed)" 201 "$(api POST /functions/ok/start)"
ep=$(jget "$T/body" "j['endpoint']")
[ "$(curl -s --max-time 10 "http://$ep/")" = "$K/ok" ] && ok "ok answers from its directory" ||
	fail "ok's instance does not answer from $K/ok"

# ---- 5. nothing left ----
for f in b2 c3 fn ok; do
	st=$(api DELETE "/functions/$f")
	[ "$st" = 204 ] || fail "DELETE $f: $st $(cat "$T/body")"
done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
procs=$(own_procs | awk -v p="$THAWD_PID" '$1 != p')
[ -z "$procs" ] || fail "processes left: $procs"
empty "$E/root2" "after everything"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
