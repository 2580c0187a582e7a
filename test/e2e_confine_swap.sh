#!/usr/bin/env bash
# A mount's source swapped under the check never binds another directory
# (issue 44, H2), with real runc, CRIU and thawd and the swapping done with
# renameat2(RENAME_EXCHANGE) between a directory and a link to a directory
# outside the allowed roots, which holds a marker file:
#   1. a function with a read-write mount does the swapping itself, from
#      inside its container (test/fixtures/reach_fn.py): another function
#      whose mount source lies in that read-write directory is refused at
#      the PUT (403, naming the writer); were it accepted (the bug), its
#      starts while the writer swaps are checked as in 2;
#   2. the host swaps a source no function writes while a function with it
#      is started again and again: each start either binds the directory it
#      was given or is refused, and no instance ever sees the marker; once
#      the swapping is over, a start binds the directory;
#   3. nothing is left.
set -u
NAME=confine-swap
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
unset THAW_ALLOW_ROOTS
A=$T/allowed # the only allowed root
O=$T/outside # outside it: must never be bound
STARTS=${E2E_SWAP_STARTS:-16}
fixture_fn "$A/fn" reach_fn.py
mkdir -p "$A/rw/src" "$A/b/src" "$O"
echo "outside" >"$O/secret"
echo "inside" >"$A/rw/src/inside"
echo "inside" >"$A/b/src/inside"
start_thawd --allow-root "$A"

# spec JSON-FIELDS: reach_fn.py, with more fields.
spec() { fn_spec reach_fn.py "$A/fn" "${1:-}"; }
mnt() { echo "{\"source\": \"$1\", \"destination\": \"$2\", \"readonly\": $3}"; }
# starts FN [N]: start FN N times (default $STARTS); every instance is asked
# what its /v holds.  Sets SAW (the instances that saw the marker), GOOD
# (those that saw their own directory) and REFUSED (starts refused).
starts() {
	local st ep iid got
	SAW=0 GOOD=0 REFUSED=0
	for _ in $(seq "${2:-$STARTS}"); do
		st=$(api POST "/functions/$1/start")
		if [ "$st" != 201 ]; then
			REFUSED=$((REFUSED + 1))
			continue
		fi
		ep=$(jget "$T/body" "j['endpoint']")
		iid=$(jget "$T/body" "j['instance']")
		got=$(curl -s --max-time 30 "http://$ep/look?p=/v")
		case "$got" in
		*secret*) SAW=$((SAW + 1)) ;;
		*inside*) GOOD=$((GOOD + 1)) ;;
		esac
		api DELETE "/instances/$iid" >/dev/null
	done
	echo "  $1: ${2:-$STARTS} starts: $GOOD bound their directory, $REFUSED refused, $SAW saw the marker"
}

# ---- 1. the function swaps its own read-write directory ----
st=$(api PUT /functions/writer -d "$(spec "\"mounts\": [$(mnt "$A/rw" /m false)]")")
[ "$st" = 201 ] || fail "PUT writer: $st $(cat "$T/body")"
st=$(api POST "/functions/writer/snapshot?wait=1")
[ "$st" = 200 ] || fail "snapshot writer: $st $(head -c 300 "$T/body")"
st=$(api POST /functions/writer/start)
[ "$st" = 201 ] || fail "start writer: $st $(head -c 300 "$T/body")"
WEP=$(jget "$T/body" "j['endpoint']")
WID=$(jget "$T/body" "j['instance']")
curl -s --max-time 20 "http://$WEP/link?at=/m/lnk&to=$O" >/dev/null
[ -L "$A/rw/lnk" ] || fail "writer did not make its link"
st=$(api PUT /functions/victim -d "$(spec "\"mounts\": [$(mnt "$A/rw/src" /v true)]")")
if [ "$st" = 403 ] && grep -q "writer" "$T/body"; then
	ok "a mount inside another function's read-write one is refused: $(head -c 300 "$T/body")"
else
	fail "PUT victim (its source in writer's read-write mount): $st $(head -c 300 "$T/body")"
	if [ "$st" = 201 ]; then
		api POST "/functions/victim/snapshot?wait=1" >/dev/null
		curl -s --max-time 20 "http://$WEP/flip?a=/m/src&b=/m/lnk&n=100000000" >/dev/null
		starts victim
		[ $SAW = 0 ] || fail "victim: $SAW of $STARTS instances had the outside directory"
	fi
fi
api DELETE "/instances/$WID" >/dev/null

# ---- 2. the host swaps a source no function writes ----
st=$(api PUT /functions/steady -d "$(spec "\"mounts\": [$(mnt "$A/b/src" /v true)]")")
[ "$st" = 201 ] || fail "PUT steady: $st $(cat "$T/body")"
st=$(api POST "/functions/steady/snapshot?wait=1")
[ "$st" = 200 ] || fail "snapshot steady: $st $(head -c 300 "$T/body")"
ln -s "$O" "$A/b/lnk"
python3 - "$A/b/src" "$A/b/lnk" "$T/flipping" <<'PY' &
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, flag = (p.encode() for p in sys.argv[1:])
open(flag, "w").close()
while os.path.exists(flag):
    libc.renameat2(-100, a, -100, b, 2)
PY
FLIPPER=$!
starts steady
rm -f "$T/flipping"
wait "$FLIPPER"
[ $SAW = 0 ] && ok "steady: no instance had the outside directory ($GOOD bound theirs, $REFUSED refused)" ||
	fail "steady: $SAW of $STARTS instances had the outside directory"
# The flipping over, src the directory again: a start binds it.
[ -L "$A/b/src" ] && mv -T "$A/b/src" "$A/b/tmp" && mv -T "$A/b/lnk" "$A/b/src" && mv -T "$A/b/tmp" "$A/b/lnk"
starts steady 1
[ $GOOD = 1 ] && ok "steady, no longer swapped, binds its directory" ||
	fail "steady, no longer swapped: $GOOD bound its directory, $REFUSED refused, $SAW saw the marker"
grep -q "changed while it was checked\|outside the directories functions may use" "$T/thawd.log" ||
	[ $REFUSED = 0 ] || fail "thawd's log does not say why starts were refused"

# ---- 3. nothing left ----
for f in writer victim steady; do api DELETE "/functions/$f" >/dev/null; done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
[ "$(cat "$O/secret")" = outside ] || fail "the outside marker changed"

echo "$fails failure(s)"
[ $fails = 0 ]
