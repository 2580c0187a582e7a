#!/usr/bin/env bash
# No function reaches thaw's own state (issue 44, C1), with real runc, CRIU
# and thawd, the attack done from inside a function (test/fixtures/reach_fn.py).
# thawd runs with --allow-root $T, the directory that holds its data
# directory, as a test run's THAW_ALLOW_ROOTS=/tmp does:
#   1. a mount, bundle or cwd that is, lies in or holds the data directory,
#      its runc state or the RAM tier is refused at the PUT (403 forbidden,
#      saying it is thaw's), a link to one too; were one accepted (the bug),
#      the function is run and hooks runc's state.json of its container,
#      whose poststop hook thawd's `runc delete` would run on the host;
#   2. a function with a legitimate read-write mount finds no runc state in
#      it, and the links it makes there to the data directory are refused
#      at the PUT of a function naming one; a function whose source lies in
#      that read-write mount is refused too (403, naming the writer); and a
#      source made a link to the data directory after its PUT is refused at
#      the snapshot (403) where the bundle is written;
#   3. the hook's marker never appears, and nothing is left.
set -u
NAME=confine-state
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
unset THAW_ALLOW_ROOTS
MARKER=$T/pwned
fixture_fn "$T/fn" reach_fn.py
mkdir -p "$T/m"
start_thawd --allow-root "$T" --allow-root "$SHM"

# spec JSON-FIELDS: reach_fn.py from $T/fn (or $CWD), with more fields.
spec() { fn_spec "$T/fn/reach_fn.py" "${CWD:-$T/fn}" "\"env\": {\"MARKER\": \"$MARKER\"}${1:+, $1}"; }
mount_of() { echo "\"mounts\": [{\"source\": \"$1\", \"destination\": \"/m\", \"readonly\": false}]"; }
# refused WHAT JSON-FIELDS: the PUT is 403 forbidden, saying the path is thaw's.
refused() {
	local st
	st=$(api PUT /functions/bad -d "$(spec "${2:-}")")
	if [ "$st" = 403 ] && grep -q '"code":"forbidden"' "$T/body" && grep -q "thaw's own state" "$T/body"; then
		ok "$1 refused: $(head -c 300 "$T/body")"
		return
	fi
	fail "$1: $st, not 403 forbidden (thaw's own): $(head -c 300 "$T/body")"
	[ "$st" = 201 ] && run_attack bad
	api DELETE /functions/bad >/dev/null
}
# run_attack FN: snapshot FN, start it, have it hook every runc state it
# finds under /m, then stop it (thawd's runc delete).
run_attack() {
	local st iid
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { echo "  ($1: snapshot $st $(head -c 200 "$T/body"))"; return; }
	st=$(api POST "/functions/$1/start")
	[ "$st" = 201 ] || { echo "  ($1: start $st $(head -c 200 "$T/body"))"; return; }
	iid=$(jget "$T/body" "j['instance']")
	echo "  ($1 from inside: $(curl -s --max-time 60 "http://$(jget "$T/body" "j['endpoint']")/attack?dir=/m"))"
	api DELETE "/instances/$iid" >/dev/null
}

# ---- 1. thaw's own places, at the PUT ----
refused "a read-write mount of the data directory" "$(mount_of "$DATA")"
refused "a mount of runc's state" "$(mount_of "$DATA/runc")"
refused "a mount of the directory holding the data directory" "$(mount_of "$T")"
refused "a mount of the RAM tier" "$(mount_of "$SHM")"
ln -s "$DATA" "$T/to-data"
refused "a mount of a link to the data directory" "$(mount_of "$T/to-data")"
refused "a writable bundle in the data directory" \
	"\"bundle\": \"$DATA\", \"sandbox\": {\"writable_root\": true}"
refused "a bundle holding the data directory" "\"bundle\": \"$T\""
mkdir -p "$DATA/fns"
CWD=$DATA/fns refused "a cwd in the data directory"

# ---- 2. a legitimate read-write mount ----
st=$(api PUT /functions/legit -d "$(spec "$(mount_of "$T/m")")")
[ "$st" = 201 ] || fail "PUT legit (a read-write mount of $T/m): $st $(cat "$T/body")"
st=$(api POST "/functions/legit/snapshot?wait=1")
[ "$st" = 200 ] || fail "snapshot legit: $st $(head -c 400 "$T/body")"
st=$(api POST /functions/legit/start)
[ "$st" = 201 ] || fail "start legit: $st $(head -c 400 "$T/body")"
EP=$(jget "$T/body" "j['endpoint']")
IID=$(jget "$T/body" "j['instance']")
got=$(curl -s --max-time 60 "http://$EP/attack?dir=/")
[ "$(echo "$got" | jget /dev/stdin "j['state_files']")" = 0 ] &&
	ok "legit finds no runc state from its root: $got" || fail "legit reached runc's state: $got"
curl -s --max-time 20 "http://$EP/link?at=/m/esc&to=$DATA" >/dev/null
[ -L "$T/m/esc" ] || fail "legit did not make its link $T/m/esc"
st=$(api PUT /functions/via -d "$(spec "$(mount_of "$T/m/esc")")")
[ "$st" = 403 ] && grep -q "thaw's own state" "$T/body" &&
	ok "a mount of the link legit made is refused: $(head -c 300 "$T/body")" ||
	fail "a mount of $T/m/esc (a link to the data directory): $st $(head -c 300 "$T/body")"
mkdir -p "$T/m/later"
st=$(api PUT /functions/late -d "$(spec "$(mount_of "$T/m/later")")")
[ "$st" = 403 ] && grep -q "function legit" "$T/body" &&
	ok "a mount inside legit's read-write one is refused, naming legit" ||
	{ fail "PUT late (its mount in legit's read-write one): $st $(head -c 300 "$T/body")"
	  if [ "$st" = 201 ]; then
		curl -s --max-time 20 "http://$EP/link?at=/m/later&to=$DATA" >/dev/null
		api POST "/functions/late/snapshot?wait=1" >/dev/null
		[ "$(cat "$T/body" | head -c 12)" = '{"job":{"id"' ] && run_attack late
	  fi; }
# A link made after the PUT, where no function writes: refused where the
# bundle is written.
mkdir -p "$T/later"
st=$(api PUT /functions/later -d "$(spec "$(mount_of "$T/later")")")
[ "$st" = 201 ] || fail "PUT later (its mount a plain directory then): $st $(cat "$T/body")"
rmdir "$T/later" && ln -s "$DATA" "$T/later"
st=$(api POST "/functions/later/snapshot?wait=1")
[ "$st" = 403 ] && grep -q "thaw's own state" "$T/body" &&
	ok "later, its mount now a link to the data directory, is refused at the snapshot" ||
	{ fail "snapshot of later: $st $(head -c 300 "$T/body")"; [ "$st" = 200 ] && run_attack later; }
api DELETE "/instances/$IID" >/dev/null

# ---- 3. no hook ran, nothing left ----
[ -e "$MARKER" ] && fail "a function's hook ran on the host as root: $MARKER exists"
for f in legit late later; do api DELETE "/functions/$f" >/dev/null; done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
[ -e "$MARKER" ] && fail "a function's hook ran on the host as root: $MARKER exists"

echo "$fails failure(s)"
[ $fails = 0 ]
