#!/usr/bin/env bash
# What an older thawd accepted and this one refuses (issue 44's rules for
# "mounts": function/confine.h, function/spec_mounts.h) is refused where it
# is used, saying why and what to do, with real runc, CRIU and thawd.  The
# data directory is made as an older thawd left it: its files written by
# hand while thawd is stopped.
#   1. r (a read-only mount of $A/m/sub) is snapshotted; then w, whose
#      read-write mount $A/m holds r's source, is put on disk beside it, as
#      registered before the rule: r's start and r's and w's snapshots are
#      403 forbidden, each naming the other function and what to do, and
#      nothing runs; once w is PUT again apart, r starts.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
require_restore_tools
command -v python3 >/dev/null || skip "no python3"
unset THAW_ALLOW_ROOTS

NAME=older-specs
. "$ROOT/test/lib/thawd_e2e.sh"
A=$T/allowed
mkdir -p "$A/fn" "$A/m/sub" "$A/w"
cp "$ROOT/test/fixtures/proxy_fn.py" "$A/fn/"
start_thawd --allow-root "$A"

spec() { # spec MOUNTS-JSON
	echo "{\"command\": [\"python3\", \"proxy_fn.py\"], \"cwd\": \"$A/fn\", \"port\": 8000,
	  \"ready\": {\"http\": \"/health\", \"timeout_s\": 60}, \"mounts\": $1}"
}
# expect WHAT STATUS WANT-CODE WANT-IN-MESSAGE...: the last answer ($st, $T/body).
expect() {
	local what=$1 want=$2 code=$3 w
	shift 3
	[ "$st" = "$want" ] && grep -q "\"code\":\"$code\"" "$T/body" || {
		fail "$what: $st, not $want $code: $(head -c 400 "$T/body")"
		return
	}
	for w in "$@"; do
		grep -qF -- "$w" "$T/body" || { fail "$what: its message does not say \"$w\": $(head -c 400 "$T/body")"; return; }
	done
	ok "$what: $st $(head -c 300 "$T/body")"
}

st=$(api PUT /functions/r -d "$(spec "[{\"source\": \"$A/m/sub\", \"destination\": \"/o\"}]")")
[ "$st" = 201 ] || fail "PUT r: $st $(cat "$T/body")"
st=$(api POST "/functions/r/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot r: $st $(head -c 400 "$T/body")"; exit 1; }
stop_thawd || fail "thawd's exit status $? at its first stop"

# As an older thawd recorded it: w beside r, without a snapshot.
python3 - "$DATA" "$A" <<'PY' || fail "could not make the older data directory"
import json, os, sys
data, a = sys.argv[1], sys.argv[2]
fns = os.path.join(data, "functions")
w = json.load(open(os.path.join(fns, "r.json")))
w["spec"]["id"] = "w"
w["spec"]["mounts"] = [{"source": a + "/m", "destination": "/m", "readonly": False}]
w["snapshot"] = {"state": "none", "id": None, "error": None, "job": None,
                 "image_bytes": 0, "stored_bytes": 0, "timings_ms": None}
with open(os.path.join(fns, "w.json"), "w") as f:
    f.write(json.dumps(w))
PY
start_thawd --allow-root "$A"

# ---- 1. an overlap registered before the rule ----
st=$(api POST /functions/r/start)
expect "start of r (its source lies in w's read-write mount)" 403 forbidden "function w" \
	"PUT one of the two again"
st=$(api POST "/functions/r/snapshot?wait=1")
expect "snapshot of r" 403 forbidden "function w"
st=$(api POST "/functions/w/snapshot?wait=1")
expect "snapshot of w (its read-write mount holds r's source)" 403 forbidden "function r"
[ -z "$(own_containers)" ] || fail "containers ran: $(own_containers)"
# What the message says to do: w PUT again with its mount apart.
st=$(api PUT /functions/w -d "$(spec "[{\"source\": \"$A/w\", \"destination\": \"/m\", \"readonly\": false}]")")
[ "$st" = 200 ] || fail "PUT w again (its mount $A/w): $st $(cat "$T/body")"
st=$(api POST /functions/r/start)
[ "$st" = 201 ] && ok "r starts once w is PUT again apart" ||
	fail "start of r once w is apart: $st $(head -c 400 "$T/body")"
IID=$(jget "$T/body" "j['instance']")
[ -n "$IID" ] && api DELETE "/instances/$IID" >/dev/null

for f in r w; do api DELETE "/functions/$f" >/dev/null; done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
echo "$fails failure(s)"
[ $fails = 0 ]
