#!/usr/bin/env bash
# Restore or boot (docs/DESIGN.md, "Restore or boot"), and the host's
# directories a function needs, with real runc, CRIU and thawd and
# test/fixtures/fallback_fn.py:
#   1. a flipped byte in a chunk of a snapshot's pack: the start still answers
#      201, "restored": false naming the chunk, with an instance that answers
#      right; the function is marked "unrestorable"; the next start boots
#      directly (reason "marked"), and so does its standby (frozen, taken by a
#      start); exactly one re-snapshot job runs through all of it; once it is
#      ready the damaged chunk is in the store again (written anew, not
#      deduplicated against the damaged copy), the mark is gone and the start
#      is restored; /metrics counts the boots by reason;
#   2. the same with "on_restore_failure": "fail": 500 damaged as before, no
#      boot, no re-snapshot, no mark;
#   3. a snapshot whose record says CRIU 99.0 (made with a criu that says so):
#      no restore tried, the start boots naming the difference (reason
#      "host"); with "fail", 500 host_mismatch naming it; thaw doctor lists it;
#   4. "mounts": a model-like file read by the function at its boot and again
#      after its restore (same bytes, read-only: a write is refused); a mount
#      outside the allowed roots is 403 at PUT;
#   5. a function that exits before it is ready because its spec names a
#      host path its sandbox does not have: the snapshot's error names it;
#   6. the CUDA mock (test/cuda_mock.c as libcuda.so.1): a GPU function
#      snapshotted under driver 580.159.04, started under 590.10.01: no
#      restore tried, the reason names both drivers (boots; "fail": 500);
#   7. nothing is left behind: no container, process or mount.
# Each step waits (with a generous limit) for the state it expects.
set -u
NAME=fallback
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
mkdir -p "$FN" "$T/models"
cp "$ROOT/test/fixtures/fallback_fn.py" "$FN/"
head -c 3000000 /dev/urandom >"$T/models/weights.bin"
GATE=$FN/gate # in the cwd: the container sees it

metric() { # NAME LABELS: its value in /metrics (0 if absent)
	curl -s "$URL/metrics" | awk -v n="$1{$2}" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
errcode() { jget "$T/body" "j['error']['code']"; }
errmsg() { jget "$T/body" "j['error']['message']"; }
# spec [EXTRA-KEYS [MORE-ENV]]: a spec of the function.
spec() {
	echo "{\"command\": [\"python3\", \"fallback_fn.py\"], \"cwd\": \"$FN\", \"port\": 8000,
		\"ready\": {\"http\": \"/health\", \"timeout_s\": 60},
		\"prepare\": {\"path\": \"/prepare\"},
		\"env\": {\"GATE\": \"$GATE\"${2:+, $2}} ${1:+, $1}}"
}
put_snap() { # ID SPEC: register and snapshot (?wait=1); true on 200
	local st
	st=$(api PUT "/functions/$1" -d "$2")
	[ "$st" = 201 ] || [ "$st" = 200 ] || { fail "PUT $1: $st $(cat "$T/body")"; return 1; }
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot of $1: $st $(cat "$T/body")"; return 1; }
}
snap_of() { api GET "/functions/$1" >/dev/null && jget "$T/body" "j['snapshot']['id']"; }
mark_of() { api GET "/functions/$1" >/dev/null && jget "$T/body" "(j['snapshot']['unrestorable'] or {}).get('why')"; }
state_of() { api GET "/functions/$1" >/dev/null && jget "$T/body" "j['snapshot']['state']"; }
snapshot_jobs() { # FN: its snapshot jobs in this thawd
	api GET /jobs >/dev/null && jget "$T/body" "sum(1 for x in j['jobs'] if x['function'] == '$1' and x['kind'] == 'snapshot')"
}
DAMAGE=$ROOT/test/lib/pack_damage.py
# chunks_of SNAPSHOT: the ids of its manifest's chunks, one a line.
chunks_of() { python3 "$DAMAGE" chunks "$DATA/store" "$1"; }
# flip SNAPSHOT [TWIN]: flip a byte in the middle of the largest chunk of the
# snapshot's manifest (of those TWIN's names too, when given: a snapshot of
# the same state booted apart, so that the chunk is one a boot reproduces),
# in its pack; prints the chunk's id.
flip() { python3 "$DAMAGE" flip "$DATA/store" "$1" "${2:-}"; }
in_packs() { python3 "$DAMAGE" indexed "$DATA/store" "$1"; } # CHUNK: in a pack's index?
# endpoint_says PATH WANT: the last start's instance answers PATH with WANT.
endpoint_says() {
	local ep got
	ep=$(jget "$T/start" "j['endpoint']")
	got=$(curl -s --max-time 10 "http://$ep$1")
	[ "$got" = "$2" ] || { echo "GET $1 on $ep: \"$got\", not \"$2\""; return 1; }
}
start() { # FN: POST its start; status on stdout, the answer in $T/start
	local st
	st=$(api POST "/functions/$1/start")
	cp "$T/body" "$T/start"
	echo "$st"
}
stop_instance() { api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null; }
standby_of() { # FN: a standby instance of it (its restored flag), or nothing
	api GET /instances >/dev/null &&
		jget "$T/body" "' '.join('%s:%s' % (i['instance'], i.get('restored')) for i in j['instances'] if i['function'] == '$1' and i['state'] == 'standby')"
}

# A criu that says it is 99.0 and is the real one otherwise: the record of a
# snapshot made with it says 99.0, newer than this host's.
cat >"$T/criu99" <<EOF
#!/bin/sh
[ "\$1" = --version ] && { echo "Version: 99.0"; exit 0; }
exec "$CRIU" "\$@"
EOF
chmod +x "$T/criu99"

# ---- the snapshots, made before anything materialises them ----
start_thawd --criu "$T/criu99" --max-standby 0
# Each function's state its own (SEED): no chunk is shared between them.
put_snap hm "$(spec "" '"SEED": "9"')" || exit 1
put_snap hmf "$(spec '"on_restore_failure": "fail"' '"SEED": "10"')" || exit 1
stop_thawd
start_thawd --max-standby 0
put_snap fb "$(spec '"standby": 1' '"SEED": "7"')" || exit 1
put_snap fbt "$(spec "" '"SEED": "7"')" || exit 1 # fb's twin: the chunks a boot reproduces
put_snap ff "$(spec '"on_restore_failure": "fail"' '"SEED": "8"')" || exit 1
state_sum() { python3 -c "import random,hashlib; print(hashlib.sha256(random.Random($1).randbytes(4 << 20)).hexdigest())"; }
want_state=$(state_sum 7)
stop_thawd
fb_snap=$(python3 -c "import json; print(json.load(open('$DATA/functions/fb.json'))['snapshot']['id'])")
ff_snap=$(python3 -c "import json; print(json.load(open('$DATA/functions/ff.json'))['snapshot']['id'])")
fbt_snap=$(python3 -c "import json; print(json.load(open('$DATA/functions/fbt.json'))['snapshot']['id'])")
fb_chunk=$(flip "$fb_snap" "$fbt_snap")
ff_chunk=$(flip "$ff_snap")
[ -n "$fb_chunk" ] && [ -n "$ff_chunk" ] || fail "no chunk to flip"
# A new RAM tier: nothing of the snapshots is materialised.
start_thawd --ram-tier "$SHM/t2"

# ---- 1. a flipped byte: the start boots, one re-snapshot, then restored ----
touch "$GATE" # the re-snapshot waits in its prepare hook until this goes
st=$(start fb)
if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	jget "$T/start" "j['restore_failure']" | grep -qF "$fb_chunk"; then
	ok "start of fb (a chunk flipped): 201, restored false, naming $fb_chunk"
else
	fail "start of fb: $st $(cat "$T/start")"
fi
endpoint_says /state "$want_state" && ok "the booted instance answers right" || fail "the booted instance"
stop_instance
mark_of fb | grep -qF "$fb_chunk" && ok "GET /functions/fb: unrestorable, naming the chunk" ||
	fail "fb not marked: $(cat "$T/body")"
wait_for 60 sh -c "[ \"\$(curl -s $URL/functions/fb | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"snapshot\"][\"state\"])')\" = building ]" ||
	fail "no re-snapshot of fb building: $(cat "$T/body")"
st=$(start fb)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	ok "the next start boots directly, while the re-snapshot builds" || fail "second start of fb: $st $(cat "$T/start")"
stop_instance
# Its standby boots too (standby: 1), frozen until a start takes it.
wait_for 120 sh -c "[ -n \"\$(curl -s $URL/instances | python3 -c 'import json,sys; print(\" \".join(i[\"instance\"] for i in json.load(sys.stdin)[\"instances\"] if i[\"function\"] == \"fb\" and i[\"state\"] == \"standby\" and i.get(\"restored\") is False))')\" ]" &&
	ok "fb's standby is booted: $(standby_of fb)" || fail "no booted standby of fb: $(standby_of fb)"
st=$(start fb)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['standby']")" = True ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	endpoint_says /state "$want_state" && ok "a start takes the booted standby" ||
	fail "start of fb with a booted standby: $st $(cat "$T/start")"
stop_instance
[ "$(snapshot_jobs fb)" = 1 ] && ok "exactly one re-snapshot job of fb" || fail "snapshot jobs of fb: $(snapshot_jobs fb)"
rm -f "$GATE"
wait_for 120 sh -c "[ \"\$(curl -s $URL/functions/fb | python3 -c 'import json,sys; s=json.load(sys.stdin)[\"snapshot\"]; print(s[\"state\"], s[\"unrestorable\"] is None)')\" = 'ready True' ]" &&
	ok "fb's re-snapshot is ready and the mark is gone" || fail "fb after its re-snapshot: $(curl -s "$URL/functions/fb")"
[ "$(snap_of fb)" != "$fb_snap" ] || fail "fb's snapshot is still $fb_snap"
if ! chunks_of "$(snap_of fb)" | grep -qx "${fb_chunk#sha256:}"; then
	ok "the re-snapshot holds other chunks than the damaged one (nothing to write anew)"
elif in_packs "$fb_chunk"; then
	ok "the damaged chunk, which the re-snapshot holds, was written anew (in a pack's index again)"
else
	fail "$fb_chunk is in no pack's index: deduplicated against the damaged copy?"
fi
st=$(start fb)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] && endpoint_says /state "$want_state" &&
	ok "the start after the re-snapshot is restored" || fail "start of fb after its re-snapshot: $st $(cat "$T/start")"
stop_instance
[ "$(snapshot_jobs fb)" = 1 ] || fail "snapshot jobs of fb at the end: $(snapshot_jobs fb)"
[ "$(metric thaw_start_boots_total 'function="fb",reason="damaged"')" = 1 ] &&
	[ "$(metric thaw_start_boots_total 'function="fb",reason="marked"')" = 2 ] &&
	ok "/metrics: 1 boot for the damage, 2 for the mark" ||
	fail "metrics: $(curl -s "$URL/metrics" | grep boots)"

# ---- 2. "on_restore_failure": "fail": the error as before ----
st=$(start ff)
[ "$st" = 500 ] && [ "$(errcode)" = damaged ] && errmsg | grep -qF "$ff_chunk" &&
	ok "start of ff (fail): 500 damaged naming the chunk" || fail "start of ff: $st $(cat "$T/body")"
[ "$(mark_of ff)" = None ] && [ "$(state_of ff)" = ready ] && [ "$(snapshot_jobs ff)" = 0 ] &&
	ok "ff: no mark, no re-snapshot" || fail "ff after its start: $(cat "$T/body") jobs $(snapshot_jobs ff)"

# ---- 3. a snapshot of a host unlike this one ----
st=$(start hm)
if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	jget "$T/start" "j['restore_failure']" | grep -q "CRIU .* here is older than the 99.0"; then
	ok "start of hm (CRIU 99.0 recorded): 201, booted: $(jget "$T/start" "j['restore_failure']")"
else
	fail "start of hm: $st $(cat "$T/start")"
fi
endpoint_says /state "$(state_sum 9)" || fail "hm's booted instance"
stop_instance
[ "$(metric thaw_start_boots_total 'function="hm",reason="host"')" = 1 ] || fail "metrics: no host boot of hm"
st=$(start hmf)
[ "$st" = 500 ] && [ "$(errcode)" = host_mismatch ] && errmsg | grep -q "older than the 99.0" &&
	ok "start of hmf (fail): 500 host_mismatch: $(errmsg)" || fail "start of hmf: $st $(cat "$T/body")"
[ "$(mark_of hmf)" = None ] || fail "hmf is marked"
# thaw doctor lists the local snapshots that cannot run here (a warning).
hmf_snap=$(snap_of hmf)
"$THAW" --data-dir "$DATA" doctor >"$T/doctor" 2>&1
grep -q "^warn  snapshot-.*$hmf_snap (function hmf) cannot be restored here: CRIU .* older than the 99.0" "$T/doctor" &&
	grep -q "^warn  snapshots .* snapshots cannot be restored here" "$T/doctor" &&
	ok "thaw doctor names hmf's snapshot" || fail "thaw doctor: $(grep snapshot "$T/doctor")"
api DELETE /functions/hm >/dev/null # its re-snapshot may still run: deleted with it

# ---- 4. "mounts" ----
mspec() { # SOURCE: the function with the model mounted at /models
	spec "\"mounts\": [{\"source\": \"$1\", \"destination\": \"/models\"}]" \
		"\"MODEL\": \"/models/weights.bin\", \"SEED\": \"11\""
}
st=$(api PUT /functions/mo -d "$(mspec /etc)")
[ "$st" = 403 ] && [ "$(errcode)" = forbidden ] && errmsg | grep -q "mounts\[0\].source" &&
	ok "a mount outside the allowed roots: 403 ($(errmsg))" || fail "PUT mo with /etc mounted: $st $(cat "$T/body")"
want_model=$(sha256sum "$T/models/weights.bin" | cut -d' ' -f1)
put_snap mo "$(mspec "$T/models")" &&
	ok "the snapshot of a function reading its mounted model"
st=$(start mo)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] &&
	endpoint_says /model "$want_model $want_model" &&
	ok "restored, it reads the model it read at its boot, and again now" ||
	fail "start of mo: $st $(cat "$T/start")"
endpoint_says /write "refused: Read-only file system" && ok "the mount is read-only" || fail "mo's mount is writable"
stop_instance

# ---- 5. a path the sandbox does not have ----
st=$(api PUT /functions/hidden -d "$(spec "" "\"MODEL\": \"$T/models/weights.bin\"")")
[ "$st" = 201 ] || fail "PUT hidden: $st $(cat "$T/body")"
st=$(api POST '/functions/hidden/snapshot?wait=1')
if [ "$st" = 500 ] && errmsg | grep -qF "$T/models/weights.bin (env MODEL)" &&
	errmsg | grep -q "mounts"; then
	ok "the snapshot's error names the invisible path: $(errmsg | cut -c1-200)"
else
	fail "snapshot of hidden: $st $(cat "$T/body")"
fi

stop_thawd

# ---- 6. the CUDA mock: a driver that changed under a GPU snapshot ----
if command -v "${CC:-cc}" >/dev/null; then
	mkdir -p "$T/mock"
	"${CC:-cc}" -shared -fPIC -O1 -o "$T/mock/libcuda.so.1" "$ROOT/test/cuda_mock.c" &&
		ln -s libcuda.so.1 "$T/mock/libnvidia-ml.so.1" || fail "cannot build the fake driver"
	gspec() { spec "\"gpu\": true, \"gpu_memory\": \"driver\"${1:+, $1}" "\"SEED\": \"$2\""; }
	export LD_LIBRARY_PATH=$T/mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} MOCK_NVML_FREE_MIB=40000,60000
	export THAW_NO_GPU=
	start_thawd --max-standby 0 --ram-tier "$SHM/t3"
	put_snap gm "$(gspec "" 12)" && put_snap gmf "$(gspec '"on_restore_failure": "fail"' 13)" &&
		ok "GPU snapshots under the fake driver 580.159.04"
	stop_thawd
	MOCK_NVML_DRIVER=590.10.01 start_thawd --max-standby 0 --ram-tier "$SHM/t4"
	st=$(start gm)
	if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
		jget "$T/start" "j['restore_failure']" | grep -q "driver 580.159.04, this host runs 590.10.01"; then
		ok "start of gm under another driver: booted: $(jget "$T/start" "j['restore_failure']")"
	else
		fail "start of gm: $st $(cat "$T/start")"
	fi
	stop_instance
	st=$(start gmf)
	[ "$st" = 500 ] && [ "$(errcode)" = host_mismatch ] && errmsg | grep -q "590.10.01" &&
		ok "start of gmf (fail): 500 host_mismatch" || fail "start of gmf: $st $(cat "$T/body")"
	api DELETE /functions/gm >/dev/null
	stop_thawd
	unset LD_LIBRARY_PATH MOCK_NVML_FREE_MIB
fi

# ---- 7. nothing left ----
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
p=$(own_procs)
[ -z "$p" ] || fail "processes left: $p"
[ -z "$(ls -A "$DATA/instances" 2>/dev/null)" ] || fail "records left: $(ls "$DATA/instances")"
[ $fails = 0 ] && echo "e2e_fallback: all passed"
exit $fails
