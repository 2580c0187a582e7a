#!/usr/bin/env bash
# thaw doctor reports the store's damage, and thaw store verify a function
# whose snapshot's manifest is gone (issue 44, L6), with the real thaw on a
# data directory of its own (no thawd, no containers):
#   1. a sound store: two snapshots (thaw store put), two functions naming
#      them (function files as thawd writes them): verify exits 0, doctor's
#      "store" check is ok;
#   2. the manifest of function g's snapshot removed (thaw store rm): verify
#      exits 1 naming "function g"; doctor's "store" check fails naming it;
#   3. a pack cut short: verify names its chunks; doctor's cheap check (no
#      chunk read) fails, saying how many, and so does doctor --full.
set -u
B=${THAW_BUILD:-$PWD/build}
THAW=$B/thaw
[ -x "$THAW" ] || { echo "no $THAW (make all)"; exit 1; }
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
T=$(mktemp -d /tmp/thaw-store-doctor-XXXXXX)
trap 'rm -rf "$T"' EXIT
D=$T/data
export THAW_DATA_DIR=$D THAW_RAM_TIER=$T/tier
unset THAW_STORE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# store_status: doctor's "store" check, "STATUS DETAIL".
store_status() {
	"$THAW" doctor --json "$@" 2>/dev/null >"$T/doctor.json"
	python3 -c 'import json,sys
for c in json.load(open(sys.argv[1]))["checks"]:
    if c["name"] == "store": print(c["status"], c["detail"])' "$T/doctor.json"
}
# function ID SNAPSHOT: a function file as thawd writes it.
function_file() {
	mkdir -p "$D/functions"
	cat >"$D/functions/$1.json" <<JSON
{"version": 1, "spec": {"command": ["true"], "port": 8000},
 "snapshot": {"state": "ready", "id": "$2", "error": null, "job": "job-1"}}
JSON
}

mkdir -p "$T/a" "$T/b"
head -c $((6 << 20)) /dev/urandom >"$T/a/pages.img"
head -c $((6 << 20)) /dev/urandom >"$T/b/pages.img"
ma=$("$THAW" store put --name f "$T/a" 2>/dev/null)
mb=$("$THAW" store put --name g "$T/b" 2>/dev/null)
[ -n "$ma" ] && [ -n "$mb" ] || { echo "thaw store put failed"; exit 1; }
function_file f "$ma"
function_file g "$mb"

# 1. sound
"$THAW" store verify >"$T/v.out" 2>/dev/null && ok "sound: verify exits 0" ||
	fail "sound: verify: $(cat "$T/v.out")"
st=$(store_status)
case $st in ok*) ok "sound: doctor: $st" ;; *) fail "sound: doctor's store check: '$st'" ;; esac

# 2. function g's manifest gone
"$THAW" store rm "$mb" 2>/dev/null || fail "thaw store rm"
"$THAW" store verify >"$T/v.out" 2>/dev/null
rc=$?
[ $rc = 1 ] && grep -q "^function g" "$T/v.out" && ok "manifest gone: verify names function g" ||
	fail "manifest gone: verify exit $rc: $(cat "$T/v.out")"
st=$(store_status)
case $st in FAIL*"function g"*) ok "manifest gone: doctor: $st" ;;
*) fail "manifest gone: doctor's store check: '$st'" ;; esac

# 3. a pack cut short (f's: g's chunks went with nothing, none was gc'd)
pack=$(ls -S "$D"/store/packs/*.pack | head -n1)
chmod u+w "$pack"
truncate -s 8192 "$pack"
"$THAW" store verify >"$T/v.out" 2>/dev/null
nv=$(grep -c "cut short\|missing\|corrupt" "$T/v.out")
[ "$nv" -gt 0 ] && ok "pack cut short: verify lists $nv bad" || fail "pack cut short: verify: $(cat "$T/v.out")"
st=$(store_status)
case $st in FAIL*"bad object"*) ok "pack cut short: doctor: ${st:0:200}" ;;
*) fail "pack cut short: doctor's store check: '$st'" ;; esac
st=$(store_status --full)
case $st in FAIL*"every chunk read"*) ok "pack cut short: doctor --full: ${st:0:120}" ;;
*) fail "pack cut short: doctor --full: '$st'" ;; esac

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
