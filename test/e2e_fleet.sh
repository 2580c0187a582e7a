#!/usr/bin/env bash
# A fleet of two thawds sharing snapshots through a real S3 server (a
# single-node Ceph RGW, test/lib/ceph_rgw.sh), with real runc and CRIU and a
# small CPU function (test/fixtures/term_fn.py):
#   1. thawd A (--remote) snapshots the function and pushes it by itself in
#      the background: GET /functions/<id> shows the push and its progress
#      until "done", every chunk sent; POST …/push?wait=1 again sends no
#      chunk (the remote has them all); `thaw push` does the same from the
#      command line;
#   2. thawd B, another data directory and RAM tier on the same remote,
#      pulls it (`thaw pull`, a job with progress): the function is
#      registered with A's snapshot, nothing is booted on B (no boot output),
#      and a start on B answers as A's instance does;
#   3. pulled with ?fetch=0 (manifest only), its first start on B fetches the
#      chunks (remote_fetch_ms in the answer) and answers; the next start
#      fetches nothing;
#   4. a pull of a function the remote lacks is 404 naming it, leaving
#      nothing registered; push without --remote is 409 no_remote;
#      `thaw gc --remote --dry-run` runs.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
require_restore_tools
command -v python3 >/dev/null || skip "no python3"

NAME=fleet
. "$ROOT/test/lib/thawd_e2e.sh"
. "$ROOT/test/lib/ceph_rgw.sh"
ceph_rgw_start thaw || exit 1
REMOTE=s3://thaw/fleet
mkdir -p "$T/fn"
cp "$ROOT/test/fixtures/term_fn.py" "$T/fn/"

# ---- thawd A ----
start_thawd --remote "$REMOTE"
URL_A=$URL
spec='{"command": ["python3", "term_fn.py"], "cwd": "'"$T/fn"'", "port": 8000,
	"env": {"TERM_MODE": "exit"}, "ready": {"http": "/health"}}'
for f in f g; do
	st=$(api PUT "/functions/$f" -d "$spec")
	[ "$st" = 201 ] || { fail "PUT $f: $st $(cat "$T/body")"; exit 1; }
	st=$(api POST "/functions/$f/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $f: $st $(cat "$T/body")"; exit 1; }
	[ $f = f ] && snap=$(jget "$T/body" "j['job']['result']['snapshot']")
done

# 1. the background push, followed through GET /functions/<id>
seen_progress=""
for i in $(seq 300); do
	api GET /functions/f >/dev/null
	state=$(jget "$T/body" "(j.get('push') or {}).get('state')")
	[ "$state" = uploading ] && seen_progress="$seen_progress $(jget "$T/body" "j['push']['bytes_done']")"
	[ "$state" = done ] || [ "$state" = failed ] && break
	sleep 0.1
done
if [ "$state" = done ] && [ "$(jget "$T/body" "j['push']['chunks_sent']")" = "$(jget "$T/body" "j['push']['chunks']")" ] &&
	[ "$(jget "$T/body" "j['push']['manifest']")" = "$(jget "$T/body" "j['snapshot']['id']")" ]; then
	ok "the snapshot was pushed in the background: $(jget "$T/body" "j['push']['chunks_sent']") chunks, $(jget "$T/body" "j['push']['bytes_sent']") bytes (progress seen:${seen_progress:- none})"
else
	fail "background push: state $state $(head -c 500 "$T/body")"
fi
st=$(api POST "/functions/f/push?wait=1")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['push']['state']")" = done ] &&
	[ "$(jget "$T/body" "j['push']['chunks_sent']")" = 0 ] &&
	ok "push again: 200, no chunk sent (the remote has them all)" ||
	fail "push again: $st $(cat "$T/body")"
out=$(THAW_NO_PROGRESS=1 "$THAW" push --url "$URL_A" g 2>&1) && echo "$out" | grep -q "^pushed g: " &&
	ok "thaw push g: $out" || fail "thaw push g: $out"

# ---- thawd B: another data directory and RAM tier, the same remote ----
T_A=$T DATA_A=$DATA PID_A=$THAWD_PID
DATA_B=$T/data-b
SHM_B=$(mktemp -d /dev/shm/thaw-e2e-fleet-b-XXXXXX)
"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port-b" --data-dir "$DATA_B" --ram-tier "$SHM_B" \
	--ram-tier-bytes 1G --remote "$REMOTE" >>"$T/thawd-b.log" 2>&1 &
PID_B=$!
for _ in $(seq 200); do [ -s "$T/port-b" ] && break; sleep 0.05; done
URL_B=http://127.0.0.1:$(head -n1 "$T/port-b")
stop_b() {
	kill -9 "$PID_B" 2>/dev/null
	for c in $(runc --root "$DATA_B/runc" list -q 2>/dev/null); do runc --root "$DATA_B/runc" delete -f "$c" >/dev/null 2>&1; done
	rm -rf "$SHM_B"
}
trap 'stop_b; thawd_e2e_cleanup; ceph_rgw_stop' EXIT
apib() { URL=$URL_B api "$@"; }

# 2. thaw pull onto B, then a start there
out=$(THAW_NO_PROGRESS=1 "$THAW" pull --url "$URL_B" f 2>&1) && echo "$out" | grep -q "^pulled f: $snap" &&
	ok "thaw pull f onto B: $out" || fail "thaw pull f: $out"
apib GET /functions/f >/dev/null
[ "$(jget "$T/body" "j['snapshot']['state']")" = ready ] && [ "$(jget "$T/body" "j['snapshot']['id']")" = "$snap" ] &&
	ok "B has f with A's snapshot, ready" || fail "B's f: $(head -c 400 "$T/body")"
[ -z "$(ls "$DATA_B/jobs" 2>/dev/null | xargs -r -I{} cat "$DATA_B/jobs/{}")" ] &&
	ok "nothing was booted on B (no boot output in its jobs)" || fail "B booted something: $(ls "$DATA_B/jobs")"
st=$(apib POST /functions/f/start)
if [ "$st" = 201 ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 5 "http://$ep/hello")" = hello ] && ok "a start of f on B answers" ||
		fail "f on B does not answer"
else
	fail "start of f on B: $st $(cat "$T/body")"
fi

# 3. ?fetch=0: the first start fetches
st=$(apib POST "/functions/g/pull?wait=1&fetch=0")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['job']['result']['fetched']")" = False ] &&
	ok "pull of g with ?fetch=0: registered, nothing fetched" || fail "pull ?fetch=0: $st $(cat "$T/body")"
st=$(apib POST /functions/g/start)
fetch_ms=$(jget "$T/body" "j.get('remote_fetch_ms')")
if [ "$st" = 201 ] && [ "$fetch_ms" != None ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 5 "http://$ep/hello")" = hello ] &&
		ok "g's first start on B fetched its chunks (${fetch_ms} ms) and answers" ||
		fail "g on B does not answer"
else
	fail "first start of g on B: $st $(head -c 400 "$T/body")"
fi
st=$(apib POST /functions/g/start)
[ "$st" = 201 ] && [ "$(jget "$T/body" "j.get('remote_fetch_ms')")" = None ] &&
	ok "the next start of g fetches nothing" || fail "second start of g: $st $(head -c 300 "$T/body")"

# 4. errors
st=$(apib POST "/functions/nosuch/pull?wait=1")
[ "$st" = 404 ] && grep -q nosuch "$T/body" && ok "pull of a function the remote lacks: 404 naming it" ||
	fail "pull nosuch: $st $(cat "$T/body")"
st=$(apib GET /functions/nosuch)
[ "$st" = 404 ] || fail "a failed pull left nosuch registered: $st"
kill -TERM "$PID_A"; wait "$PID_A" 2>/dev/null
start_thawd
st=$(api POST "/functions/f/push")
[ "$st" = 409 ] && [ "$(jget "$T/body" "j['error']['code']")" = no_remote ] &&
	ok "push on a thawd without --remote: 409 no_remote" || fail "push without a remote: $st $(cat "$T/body")"
"$THAW" gc --remote "$REMOTE" --dry-run >"$T/gc.out" 2>&1 && ok "thaw gc --remote --dry-run: $(tail -n1 "$T/gc.out")" ||
	fail "thaw gc --remote: $(cat "$T/gc.out")"
grep -q "$AWS_SECRET_ACCESS_KEY" "$T/thawd.log" "$T/thawd-b.log" && fail "a thawd logged the secret key"

echo "$fails failure(s)"
[ $fails = 0 ]
