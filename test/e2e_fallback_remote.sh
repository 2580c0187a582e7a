#!/usr/bin/env bash
# A snapshot pulled from the remote tier onto a host unlike the one that made
# it (docs/DESIGN.md, "Restore or boot"), through a real S3 server (a
# single-node Ceph RGW, test/lib/ceph_rgw.sh), real runc, CRIU and thawd, and
# test/fixtures/fallback_fn.py:
#   1. thawd A, whose criu says it is 99.0 (its snapshots' records say so),
#      snapshots two functions and pushes them;
#   2. thawd B (another data directory, this host's CRIU 4.2) pulls them:
#      the pull says "restorable": false naming the difference, and
#      GET /functions/<id> marks the function unrestorable before any start;
#   3. the first start on B restores nothing: it boots (201, "restored":
#      false, counted as "marked"), with an instance that answers right, and
#      one re-snapshot on B makes a snapshot of this host; the start after it
#      is restored;
#   4. with "on_restore_failure": "fail", the pulled function's start is 500
#      host_mismatch naming the difference;
#   5. nothing is left behind.
set -u
NAME=fallback-remote
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
. "$ROOT/test/lib/ceph_rgw.sh"
ceph_rgw_start thaw || exit 1
REMOTE=s3://thaw/fallback
FN=$T/fn
mkdir -p "$FN"
cp "$ROOT/test/fixtures/fallback_fn.py" "$FN/"

metric() { # NAME LABELS: its value in /metrics (0 if absent)
	curl -s "$URL/metrics" | awk -v n="$1{$2}" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
spec() { # [EXTRA-KEYS]
	echo "{\"command\": [\"python3\", \"fallback_fn.py\"], \"cwd\": \"$FN\", \"port\": 8000,
		\"ready\": {\"http\": \"/health\", \"timeout_s\": 60}, \"env\": {\"SEED\": \"21\"} ${1:+, $1}}"
}
pushed() { # FN: its push is done
	api GET "/functions/$1" >/dev/null && [ "$(jget "$T/body" "(j.get('push') or {}).get('state')")" = done ]
}
ready_again() { # FN SNAP: a snapshot other than SNAP is ready, and unmarked
	api GET "/functions/$1" >/dev/null &&
		[ "$(jget "$T/body" "(j['snapshot']['state'], j['snapshot']['id'] != '$2', j['snapshot']['unrestorable'] is None)")" = "('ready', True, True)" ]
}
want_state=$(python3 -c "import random,hashlib; print(hashlib.sha256(random.Random(21).randbytes(4 << 20)).hexdigest())")

cat >"$T/criu99" <<EOF
#!/bin/sh
[ "\$1" = --version ] && { echo "Version: 99.0"; exit 0; }
exec "$CRIU" "\$@"
EOF
chmod +x "$T/criu99"

# ---- 1. thawd A: snapshots recorded under "CRIU 99.0", pushed ----
DATA=$T/data-a
start_thawd --remote "$REMOTE" --criu "$T/criu99" --ram-tier "$SHM/a"
for f in p pf; do
	extra=""
	[ $f = pf ] && extra='"on_restore_failure": "fail"'
	st=$(api PUT "/functions/$f" -d "$(spec "$extra")")
	[ "$st" = 201 ] || { fail "PUT $f on A: $st $(cat "$T/body")"; exit 1; }
	st=$(api POST "/functions/$f/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot of $f on A: $st $(cat "$T/body")"; exit 1; }
	wait_for 120 pushed $f || { fail "$f was not pushed: $(cat "$T/body")"; exit 1; }
done
ok "A made and pushed p and pf"
stop_thawd

# ---- 2. thawd B pulls them ----
DATA=$T/data-b
start_thawd --remote "$REMOTE" --ram-tier "$SHM/b"
st=$(api POST "/functions/p/pull?wait=1")
if [ "$st" = 200 ] && [ "$(jget "$T/body" "j['job']['result']['restorable']")" = False ] &&
	jget "$T/body" "j['job']['result']['why']" | grep -q "older than the 99.0"; then
	ok "the pull of p says it cannot be restored here: $(jget "$T/body" "j['job']['result']['why']")"
else
	fail "pull of p: $st $(cat "$T/body")"
fi
api GET /functions/p >/dev/null
psnap=$(jget "$T/body" "j['snapshot']['id']")
jget "$T/body" "(j['snapshot']['unrestorable'] or {}).get('why')" | grep -q "older than the 99.0" &&
	ok "GET /functions/p: unrestorable before any start" || fail "p not marked: $(cat "$T/body")"

# ---- 3. its first start boots; one re-snapshot; then restored ----
st=$(api POST /functions/p/start)
cp "$T/body" "$T/start"
ep=$(jget "$T/start" "j.get('endpoint')")
if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	[ "$(curl -s --max-time 10 "http://$ep/state")" = "$want_state" ]; then
	ok "the first start of p boots, and answers right"
else
	fail "first start of p: $st $(cat "$T/start")"
fi
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
[ "$(metric thaw_start_boots_total 'function="p",reason="marked"')" = 1 ] || fail "metrics: $(curl -s "$URL/metrics" | grep boots)"
wait_for 120 ready_again p "$psnap" && ok "p's re-snapshot on B is ready, the mark gone" ||
	fail "p after its re-snapshot: $(cat "$T/body")"
api GET /jobs >/dev/null
[ "$(jget "$T/body" "sum(1 for x in j['jobs'] if x['function'] == 'p' and x['kind'] == 'snapshot')")" = 1 ] ||
	fail "snapshot jobs of p on B: $(cat "$T/body")"
st=$(api POST /functions/p/start)
cp "$T/body" "$T/start"
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] &&
	ok "the start after the re-snapshot is restored" || fail "start of p after: $st $(cat "$T/start")"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null

# ---- 4. "on_restore_failure": "fail" ----
st=$(api POST "/functions/pf/pull?wait=1")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['job']['result']['restorable']")" = False ] ||
	fail "pull of pf: $st $(cat "$T/body")"
st=$(api POST /functions/pf/start)
[ "$st" = 500 ] && [ "$(jget "$T/body" "j['error']['code']")" = host_mismatch ] &&
	jget "$T/body" "j['error']['message']" | grep -q "older than the 99.0" &&
	ok "start of pf (fail): 500 host_mismatch" || fail "start of pf: $st $(cat "$T/body")"
api GET /functions/pf >/dev/null
[ "$(jget "$T/body" "j['snapshot']['unrestorable']")" = None ] || fail "pf is marked: $(cat "$T/body")"
stop_thawd

# ---- 5. nothing left ----
for d in "$T/data-a" "$T/data-b"; do
	c=$(runc --root "$d/runc" list -q 2>/dev/null)
	[ -z "$c" ] || fail "containers left in $d: $c"
	[ -z "$(ls -A "$d/instances" 2>/dev/null)" ] || fail "records left in $d: $(ls "$d/instances")"
done
p=$(own_procs)
[ -z "$p" ] || fail "processes left: $p"
[ $fails = 0 ] && echo "e2e_fallback_remote: all passed"
exit $fails
