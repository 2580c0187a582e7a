# test/lib/e2e.sh — the first lines of an end-to-end test that runs
# functions with real runc, CRIU and thawd, and what such tests do to make
# their functions, in one place rather than copied into each.  Sourced with
# NAME (the test's short name) set, from the tree's root or with THAW_ROOT
# and THAW_BUILD set (scripts/run-tests.sh sets both):
#	NAME=foo
#	. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh" [uffd]
# It sets B (the build), ROOT (the tree), THAWD and THAW (the binaries; a
# test may point THAWD elsewhere afterwards); skips (exit 77) without root,
# runc, curl, CRIU or python3, and with uffd without userfaultfd for CRIU
# (test/lib/require.sh); then sources test/lib/thawd_e2e.sh (T, DATA, SHM,
# start_thawd, stop_thawd, api, ok, fail, jget, wait_for, …).  And:
#   fixture_fn DIR FILE...: DIR made, and each test/fixtures/FILE copied
#     into it (a function's directory);
#   fn_spec FILE DIR [JSON-FIELDS]: the spec (a PUT's body) of the Python
#     function FILE run from DIR (proxy_fn.py for routed requests,
#     reach_fn.py for confinement, …): port 8000, ready once GET /health
#     answers, and JSON-FIELDS ('"idle_s": 2, "env": {…}') added;
#   put_snapshot ID SPEC: PUT function ID with SPEC (201, or 200 when it
#     is there) and snapshot it (?wait=1: 200), its snapshot's id in SNAP;
#     either failing is the test's failure, and ends it.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
require_restore_tools "${1:-}"
command -v python3 >/dev/null || skip "no python3"
. "$ROOT/test/lib/thawd_e2e.sh"

fixture_fn() {
	local dir=$1 f
	shift
	mkdir -p "$dir"
	for f in "$@"; do cp "$ROOT/test/fixtures/$f" "$dir/"; done
}

fn_spec() {
	echo "{\"command\": [\"python3\", \"$1\"], \"cwd\": \"$2\", \"port\": 8000,
	  \"ready\": {\"http\": \"/health\"}${3:+, $3}}"
}

put_snapshot() {
	local st
	st=$(api PUT "/functions/$1" -d "$2")
	[ "$st" = 201 ] || [ "$st" = 200 ] || { fail "PUT $1: $st $(cat "$T/body")"; exit 1; }
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $1: $st $(head -c 600 "$T/body")"; exit 1; }
	SNAP=$(jget "$T/body" "j['job']['result']['snapshot']")
}
