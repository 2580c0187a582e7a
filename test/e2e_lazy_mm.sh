#!/usr/bin/env bash
# e2e_lazy_mm.sh — real runc + CRIU lazy restore served by thaw's lazy-pages
# daemon, with a process that changes its memory map while its pages are
# still owed: test/fixtures/mm_churn_fn.py, right after it is restored,
# mremap()s, madvise(MADV_DONTNEED)s and munmap()s parts of a 128 MiB buffer
# not copied yet and forks a child that hashes what is left; every range
# must read as the original wrote it (the dropped one as zeros), in the
# parent and in the child.  The daemon's copy threads are held back
# (THAW_LAZY_PREFETCH_DELAY_MS) so that the changes surely meet pending
# pages; its summary must show the events (REMAP, REMOVE, UNMAP, FORK) and
# pending bytes they dropped, and it must finish (lazy_done) after serving
# the child too.  Then the same with no delay (the copy threads racing the
# changes), and with CRIU's daemon (THAW_LAZY_DAEMON=criu) as a cross-check.
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw

. "$ROOT/test/lib/require.sh"
require_restore_tools uffd

W=$(mktemp -d /tmp/e2e_lazy_mm.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_lazy_mm.XXXXXX)
D=$W/data
FN=e2e-m$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((1 << 30))
unset THAW_DATA_DIR THAW_STORE THAW_LAZY THAW_LAZY_DAEMON THAW_LAZY_PREFETCH_DELAY_MS

. "$ROOT/test/lib/instances.sh"

cleanup() {
	cleanup_instances
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT

mkdir -p "$W/fn"
cp "$ROOT/test/fixtures/mm_churn_fn.py" "$W/fn/"
cat >"$W/spec.json" <<JSON
{"command": ["python3", "mm_churn_fn.py"], "cwd": "$W/fn", "env": {"CHURN_MIB": "128"},
 "port": 8000, "ready": {"http": "/health", "timeout_s": 120},
 "warmup": [{"method": "GET", "path": "/arm"}], "gpu": false, "lazy": true}
JSON
snapshot_fn "$W/spec.json"
# The fixture churns once it sees this file in its working directory, bound
# into the container: made now, after the snapshot, only restored processes see it.
touch "$W/fn/restored"

# The fixture's answer once its churn is done: "ok <ms>" or what failed.
result() { # endpoint
	local r t
	for t in $(seq 1 300); do
		r=$(curl -sf --max-time 20 "http://$1/result") &&
			[ "$(echo "$r" | python3 -c 'import json,sys; print(json.load(sys.stdin)["done"])')" = True ] && break
		sleep 0.1
	done
	echo "$r" | python3 -c 'import json,sys
r = json.load(sys.stdin)
bad = [k for k, v in r["checks"].items() if v is not True]
print("ok %.0f" % r["ms"] if r["done"] and r["checks"] and not bad else "failed: %s" % (bad or r))' 2>&1
}
lazy_done() { # instance id: waits for the watcher's word
	local t
	for t in $(seq 1 200); do
		[ -s "$D/instances/$1/lazy.status" ] && break
		sleep 0.1
	done
	cat "$D/instances/$1/lazy.status" 2>/dev/null
}

# run NAME ENV...: one lazy start under ENV; checks the fixture's answer and
# that the daemon finished.  Leaves the daemon's log in $W/NAME.log.
run() {
	local name=$1 got st
	shift
	ID=() EP=() HPID=()
	rm -f "$W/start1.json"
	(
		[ $# -gt 0 ] && export "$@"
		start_instances 1 "$SNAP" --lazy
	) >"$W/$name.start" 2>&1
	cat "$W/$name.start"
	[ -s "$W/start1.json" ] || { fail "$name: no instance"; return; }
	ID[1]=$(jget "$W/start1.json" instance)
	EP[1]=$(jget "$W/start1.json" endpoint)
	got=$(result "${EP[1]}")
	case "$got" in
	ok*) ok "$name: the restored process and its child read every range as written after mremap/madvise/munmap/fork (${got#ok } ms)" ;;
	*) fail "$name: $got" ;;
	esac
	st=$(lazy_done "${ID[1]}")
	case "$st" in
	done*) ok "$name: the daemon served every page ($st)" ;;
	*) fail "$name: daemon: ${st:-no word}" ;;
	esac
	cp "$D/instances/${ID[1]}/lazy-pages.log" "$W/$name.log" 2>/dev/null
	grep -E "lazy-pages: (done|failed)" "$W/$name.log" | tail -n 1
	"$THAW" --data-dir "$D" stop "${ID[1]}" >/dev/null 2>&1 || fail "$name: stop"
}
# A number from the daemon's summary line: "<N> <what>".
summary_num() { # log what
	grep -E "lazy-pages: done" "$1" | tail -n 1 | grep -oE "[0-9]+ $2" | head -n 1 | cut -d' ' -f1
}

# --- thaw's daemon, prefetch held back: every change meets pending pages ---
run held THAW_LAZY_PREFETCH_DELAY_MS=3000
for ev in remap remove unmap fork; do
	n=$(summary_num "$W/held.log" "$ev")
	[ "${n:-0}" -ge 1 ] && ok "held: the daemon saw $n $ev event(s)" || fail "held: no $ev event in the daemon's summary"
done
n=$(summary_num "$W/held.log" "pending bytes dropped")
[ "${n:-0}" -gt 0 ] && ok "held: the changes dropped $n pending bytes" ||
	fail "held: the changes dropped no pending bytes: they did not meet pages still owed"

# --- thaw's daemon at full speed (it may be done before the changes) ----
run full-speed
# --- CRIU's daemon, the same process ---------------------------------------
run criu THAW_LAZY_DAEMON=criu

check_nothing_left "at the end"
[ $fails = 0 ] && echo "e2e_lazy_mm: all good" || echo "e2e_lazy_mm: $fails failure(s)"
[ $fails = 0 ]
