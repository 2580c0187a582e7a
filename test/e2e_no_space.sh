#!/usr/bin/env bash
# A full disk is 507 no_space wherever thawd writes (docs/API.md, "Errors";
# issue 36, defect 6), against a real thawd whose data directory is a small
# tmpfs (no runc or CRIU needed: nothing boots).  With the disk full:
#   1. PUT of a new function, and of a changed spec: 507 no_space;
#   2. POST /functions/<id>/snapshot (the snapshot's begin is recorded),
#      with and without ?wait=1: 507 no_space, nothing left "building";
#   3. DELETE /functions/<id> (its mark is recorded): 507 no_space;
#   4. with room again, each of them works (201, 202, 204).
set -u
B=${THAW_BUILD:-$PWD/build}
THAWD=$B/thawd
. "${THAW_ROOT:-$PWD}/test/lib/wait_port.sh"
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (a tmpfs mount)"; exit 77; }
for c in python3 curl; do command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }; done

T=$(mktemp -d /tmp/thaw-e2e-no-space-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-no-space-XXXXXX)
PID=""
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
cleanup() {
	[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd.log (tail)"; tail -n 30 "$T/thawd.log"; }
	mountpoint -q "$T/disk" && { umount "$T/disk" || umount -l "$T/disk"; }
	rm -rf "$T" "$SHM"
}
trap cleanup EXIT

mkdir -p "$T/disk"
mount -t tmpfs -o size=4m tmpfs "$T/disk" || { echo "skipped: cannot mount a tmpfs"; exit 77; }
DATA=$T/disk/data
mkdir -p "$DATA" "$T/fn" # the function outside the data directory, which no function may reach
"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port" --data-dir "$DATA" --ram-tier "$SHM/tier" \
	--ram-tier-bytes 64M >>"$T/thawd.log" 2>&1 &
PID=$!
wait_port "$T/port" "$PID" || { echo "thawd did not start"; tail "$T/thawd.log"; exit 1; }
URL=http://127.0.0.1:$(head -n1 "$T/port")
api() {
	local m=$1 p=$2
	shift 2
	curl -s -o "$T/body" -w '%{http_code}' -X "$m" -H 'Content-Type: application/json' "$URL$p" "$@"
}
spec() { echo "{\"command\": [\"python3\", \"-c\", \"pass\"], \"port\": $1, \"cwd\": \"$T/fn\"}"; }
expect() { # WHAT WANT GOT [CODE]
	if [ "$3" != "$2" ]; then
		fail "$1: $3, not $2: $(head -c 300 "$T/body")"
	elif [ -n "${4:-}" ] && ! grep -q "\"code\":\"$4\"" "$T/body"; then
		fail "$1: $3 but not $4: $(head -c 300 "$T/body")"
	else
		ok "$1: $3${4:+ $4}"
	fi
}

expect "PUT a (room)" 201 "$(api PUT /functions/a -d "$(spec 8000)")"
# Fill the disk; keep the filler to free it after.
dd if=/dev/zero of="$T/disk/filler" bs=64k status=none 2>/dev/null
[ "$(df --output=avail "$T/disk" | tail -n1 | tr -d ' ')" = 0 ] || fail "the disk is not full: $(df -h "$T/disk")"

# ---- 1-3: a full disk ----
expect "full: PUT b" 507 "$(api PUT /functions/b -d "$(spec 8000)")" no_space
grep -q "No space left on device" "$T/body" || fail "the 507 does not say why: $(cat "$T/body")"
expect "full: PUT a changed" 507 "$(api PUT /functions/a -d "$(spec 8001)")" no_space
expect "full: POST snapshot" 507 "$(api POST /functions/a/snapshot)" no_space
expect "full: POST snapshot?wait=1" 507 "$(api POST '/functions/a/snapshot?wait=1')" no_space
expect "full: DELETE a" 507 "$(api DELETE /functions/a)" no_space
st=$(api GET /functions/a)
if [ "$st" = 200 ] && [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"]["state"])' "$T/body")" = none ]; then
	ok "a is still there, its snapshot not left building"
else
	fail "GET /functions/a after the full disk: $st $(cat "$T/body")"
fi

# ---- 4. room again ----
rm -f "$T/disk/filler"
expect "room: PUT b" 201 "$(api PUT /functions/b -d "$(spec 8000)")"
expect "room: POST snapshot of a (a job)" 202 "$(api POST /functions/a/snapshot)"
for _ in $(seq 100); do
	api GET /functions/a >/dev/null
	grep -q '"state":"building"' "$T/body" || break
	sleep 0.1
done
expect "room: DELETE b" 204 "$(api DELETE /functions/b)"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
