#!/usr/bin/env bash
# A dropped snapshot's chunks are collected in the background (issue 44,
# L10), with real runc, CRIU and thawd.  A function "keep" is snapshotted
# (the baseline: the store's pack bytes with it), then 3 times a function
# "cyc" holding 24 MiB of memory of its own is PUT, snapshotted and
# DELETEd; after each DELETE the store's pack bytes come back to within
# 4 MiB of the baseline by themselves (thawd's collector runs the store's gc
# after a drop), waited for as a condition with a generous deadline, with
# no gc run by hand and no restart.  A re-snapshot drops the snapshot it
# replaces the same way; "keep" still starts afterwards.
set -u
NAME=gcbg
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" ok_fn.py
start_thawd --allow-root "$FN"

# pack_bytes: the bytes of the store's pack files.
pack_bytes() {
	find "$DATA/store/packs" -name '*.pack' -printf '%s\n' 2>/dev/null | awk '{ n += $1 } END { print n + 0 }'
}
# put_snap ID MIB: PUT function ID holding MIB MiB of its own, and snapshot it.
put_snap() {
	local st
	st=$(api PUT "/functions/$1" -d "$(fn_spec ok_fn.py "$FN" "\"env\": {\"MIB\": \"$2\"}")")
	[ "$st" = 201 ] || [ "$st" = 200 ] || fail "PUT $1: $st $(cat "$T/body")"
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || fail "snapshot $1: $st $(cat "$T/body")"
}
# back_to_baseline WHAT: wait (up to 120 s) for the pack bytes to come back
# within 4 MiB of the baseline.
back_to_baseline() {
	local now
	for _ in $(seq 600); do
		now=$(pack_bytes)
		[ "$now" -le $((base + (4 << 20))) ] && break
		sleep 0.2
	done
	[ "$now" -le $((base + (4 << 20))) ] &&
		ok "$1: pack bytes back to $now (baseline $base)" ||
		fail "$1: pack bytes $now, baseline $base: the dropped snapshot's packs stay"
}

put_snap keep 0
base=$(pack_bytes)
for k in 1 2 3; do
	put_snap cyc 24
	grown=$(pack_bytes)
	[ "$grown" -gt $((base + (16 << 20))) ] || fail "cycle $k: the snapshot stored only $((grown - base)) bytes"
	st=$(api DELETE /functions/cyc)
	[ "$st" = 204 ] || fail "DELETE cyc: $st $(cat "$T/body")"
	back_to_baseline "cycle $k (snapshot, delete)"
done
# A re-snapshot (the same spec, new memory) drops the snapshot it replaces.
put_snap cyc 24
one=$(pack_bytes)
st=$(api POST "/functions/cyc/snapshot?wait=1")
[ "$st" = 200 ] || fail "re-snapshot cyc: $st $(cat "$T/body")"
base_was=$base
base=$one
back_to_baseline "a re-snapshot (the one it replaced collected)"
base=$base_was
st=$(api DELETE /functions/cyc)
[ "$st" = 204 ] || fail "DELETE cyc: $st $(cat "$T/body")"
back_to_baseline "its delete"
st=$(api POST /functions/keep/start)
if [ "$st" = 201 ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 10 "http://$ep/")" = ok ] && ok "keep still starts and answers" ||
		fail "keep's instance does not answer"
else
	fail "start keep after the gcs: $st $(head -c 600 "$T/body")"
fi
stop_thawd || fail "thawd exited $?"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
