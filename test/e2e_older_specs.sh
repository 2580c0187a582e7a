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
#      nothing runs; once w is PUT again apart, r starts;
#   2. e's spec and snapshot mount a directory at /etc (now a destination
#      thaw refuses for a function without a bundle): its start and its
#      snapshot are 409 conflict, naming /etc and saying to PUT it again
#      (and snapshot it again), and no boot is tried in the snapshot's
#      place; once PUT again with another destination and snapshotted, it
#      starts.
#   3. the other way: v's snapshot was made by a newer thaw (its meta's
#      "meta_version" is 99, function/snapshot_meta.h): its start boots
#      (201, "restored": false, naming meta_version), one re-snapshot
#      replaces it, and the start after that is restored.
set -u
NAME=older-specs
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
unset THAW_ALLOW_ROOTS
A=$T/allowed
fixture_fn "$A/fn" proxy_fn.py
mkdir -p "$A/m/sub" "$A/w" "$A/e"
start_thawd --allow-root "$A"

spec() { fn_spec proxy_fn.py "$A/fn" "\"mounts\": $1"; } # spec MOUNTS-JSON
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

put_snapshot r "$(spec "[{\"source\": \"$A/m/sub\", \"destination\": \"/o\"}]")"
stop_thawd || fail "thawd's exit status $? at its first stop"

# As an older thawd recorded them: w beside r, without a snapshot; and e,
# with a snapshot whose manifest is r's with e's spec in its meta (stored
# under the hash of its bytes: e's restore never gets to its image); and v,
# whose snapshot is r's as a newer thaw would have recorded it.
python3 - "$DATA" "$A" <<'PY' || fail "could not make the older data directory"
import copy, hashlib, json, os, sys
data, a = sys.argv[1], sys.argv[2]
fns, mdir = os.path.join(data, "functions"), os.path.join(data, "store", "manifests")
r = json.load(open(os.path.join(fns, "r.json")))
def write(path, data, mode):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
w = copy.deepcopy(r)
w["spec"]["id"] = "w"
w["spec"]["mounts"] = [{"source": a + "/m", "destination": "/m", "readonly": False}]
w["snapshot"] = {"state": "none", "id": None, "error": None, "job": None,
                 "image_bytes": 0, "stored_bytes": 0, "timings_ms": None}
write(os.path.join(fns, "w.json"), json.dumps(w).encode(), 0o600)
e_mounts = [{"source": a + "/e", "destination": "/etc", "readonly": True}]
m = json.load(open(os.path.join(mdir, r["snapshot"]["id"].split(":")[1])))
m["meta"]["spec"]["id"] = "e"
m["meta"]["spec"]["mounts"] = e_mounts
text = json.dumps(m).encode()
h = hashlib.sha256(text).hexdigest()
write(os.path.join(mdir, h), text, 0o400)
e = copy.deepcopy(r)
e["spec"]["id"] = "e"
e["spec"]["mounts"] = e_mounts
e["snapshot"]["id"] = "sha256:" + h
write(os.path.join(fns, "e.json"), json.dumps(e).encode(), 0o600)
m = json.load(open(os.path.join(mdir, r["snapshot"]["id"].split(":")[1])))
m["meta"]["meta_version"] = 99
m["meta"]["spec"]["id"] = "v"
text = json.dumps(m).encode()
h = hashlib.sha256(text).hexdigest()
write(os.path.join(mdir, h), text, 0o400)
v = copy.deepcopy(r)
v["spec"]["id"] = "v"
v["snapshot"]["id"] = "sha256:" + h
write(os.path.join(fns, "v.json"), json.dumps(v).encode(), 0o600)
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

# ---- 2. a destination now refused, in a spec and a snapshot made before ----
st=$(api POST /functions/e/start)
expect "start of e (its snapshot mounts /etc)" 409 conflict "/etc" "PUT the function again" \
	"snapshot it again"
grep -q "booting it instead" "$T/body" && fail "start of e: a boot was tried: $(head -c 300 "$T/body")"
st=$(api POST "/functions/e/snapshot?wait=1")
expect "snapshot of e (its spec mounts /etc)" 409 conflict "/etc" "PUT the function again"
n=$(curl -s "$URL/instances" | python3 -S -c "import json,sys
print(sum(1 for i in json.load(sys.stdin)['instances'] if i.get('function') == 'e'))")
[ "$n" = 0 ] || fail "instances of e after its refused start: $n"
st=$(api PUT /functions/e -d "$(spec "[{\"source\": \"$A/e\", \"destination\": \"/e\"}]")")
[ "$st" = 200 ] || fail "PUT e again (mounted at /e): $st $(cat "$T/body")"
st=$(api POST "/functions/e/snapshot?wait=1")
[ "$st" = 200 ] || fail "snapshot e again: $st $(head -c 400 "$T/body")"
st=$(api POST /functions/e/start)
[ "$st" = 201 ] && ok "e, PUT again and snapshotted again, starts" ||
	fail "start of e after its new snapshot: $st $(head -c 400 "$T/body")"
IID=$(jget "$T/body" "j['instance']")
[ -n "$IID" ] && api DELETE "/instances/$IID" >/dev/null

# ---- 3. a snapshot a newer thaw made ----
v_snap=$(python3 -c "import json; print(json.load(open('$DATA/functions/v.json'))['snapshot']['id'])")
st=$(api POST /functions/v/start)
if [ "$st" = 201 ] && [ "$(jget "$T/body" "j['restored']")" = False ] &&
	jget "$T/body" "j['restore_failure']" | grep -qF '"meta_version" is 99'; then
	ok "start of v (meta_version 99): 201, booted: $(jget "$T/body" "j['restore_failure']")"
else
	fail "start of v (meta_version 99): $st $(head -c 400 "$T/body")"
fi
IID=$(jget "$T/body" "j.get('instance', '')")
[ -n "$IID" ] && api DELETE "/instances/$IID" >/dev/null
wait_for 120 sh -c "curl -s $URL/functions/v | python3 -c 'import json,sys; s=json.load(sys.stdin)[\"snapshot\"]; sys.exit(not (s[\"state\"] == \"ready\" and s[\"id\"] != \"$v_snap\" and s[\"unrestorable\"] is None))'" &&
	ok "v's re-snapshot replaced it" || fail "v after its re-snapshot: $(curl -s "$URL/functions/v")"
st=$(api POST /functions/v/start)
[ "$st" = 201 ] && [ "$(jget "$T/body" "j['restored']")" = True ] &&
	ok "the start after v's re-snapshot is restored" ||
	fail "start of v after its re-snapshot: $st $(head -c 400 "$T/body")"
IID=$(jget "$T/body" "j.get('instance', '')")
[ -n "$IID" ] && api DELETE "/instances/$IID" >/dev/null

for f in r w e v; do api DELETE "/functions/$f" >/dev/null; done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
echo "$fails failure(s)"
[ $fails = 0 ]
