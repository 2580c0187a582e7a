#!/usr/bin/env bash
# A failed fallback boot's output stays out of the start's error (issue 44,
# L7), with real runc, CRIU and thawd.  A function whose env holds a secret
# is snapshotted; then every pack of the store is zeroed (its restore fails:
# damaged) and the function is made to print its secret and exit at boot.
# A start boots it instead of restoring (and marks the snapshot damaged), a
# second start boots it directly (the snapshot marked), each boot fails, and:
#   1. each start's error (what a data-plane client reads) holds no line of
#      the function's output, and names the instance whose output is kept;
#   2. that instance's log (GET /instances/<id>/logs) holds the output, and
#      GET /instances/<id> says how it ended;
#   3. nothing is left running.
set -u
NAME=bootout
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
SECRET=sk-live-$RANDOM$RANDOM$RANDOM
FN=$T/fn
fixture_fn "$FN" ok_fn.py
start_thawd --allow-root "$FN"
st=$(api PUT /functions/bo -d "$(fn_spec ok_fn.py "$FN" "\"env\": {\"SECRET\": \"$SECRET\"}")")
[ "$st" = 201 ] || fail "PUT: $st $(cat "$T/body")"
st=$(api POST "/functions/bo/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot: $st $(cat "$T/body")"; exit 1; }

# Every stored chunk damaged in place; the function fails at its boot.
python3 - "$DATA/store/packs" <<'PY'
import os, sys
for n in os.listdir(sys.argv[1]):
    if n.endswith(".pack"):
        p = os.path.join(sys.argv[1], n)
        os.chmod(p, 0o600)
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.write(b"\0" * size)
PY
touch "$FN/fail"
for k in 1 2; do
	st=$(api POST /functions/bo/start)
	cp "$T/body" "$T/start.body"
	echo "start $k: $st $(head -c 300 "$T/start.body")"
	[ "${st:0:1}" = 5 ] || fail "start $k answered $st, not an error"
	if grep -q "$SECRET\|booting with" "$T/start.body"; then
		fail "start $k: the error holds the function's output: $(cat "$T/start.body")"
	else
		ok "start $k: the error holds none of the function's output"
	fi
	iid=$(grep -o 'GET /instances/[^/]*/logs' "$T/start.body" | head -n1 | cut -d/ -f3)
	if [ -z "$iid" ]; then
		fail "start $k: the error names no instance whose output is kept"
		continue
	fi
	ok "start $k: the error names instance $iid"
	st=$(api GET "/instances/$iid/logs")
	[ "$st" = 200 ] && grep -q "SECRET=$SECRET" "$T/body" &&
		ok "start $k: its log (GET /instances/$iid/logs) holds the output" ||
		fail "start $k: GET /instances/$iid/logs: $st $(head -c 300 "$T/body")"
	st=$(api GET "/instances/$iid")
	[ "$st" = 200 ] && ok "start $k: GET /instances/$iid: $(jget "$T/body" "j.get('reason')")" ||
		fail "start $k: GET /instances/$iid: $st $(head -c 300 "$T/body")"
done
stop_thawd || fail "thawd exited $?"
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
