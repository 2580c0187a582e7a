#!/usr/bin/env bash
# e2e_lazy_hold.sh — thaw's lazy-pages daemon held (--hold-ms, what
# THAW_LAZY_GPU_HOLD asks of it for a GPU start, here through
# THAW_LAZY_HOLD_MS on a CPU function): snapshot the CPU example (256 MiB of
# state), then
#   1. a start held with a long bound: while held the instance answers exactly
#      (its faults, and the streams after them, are served) and the daemon has
#      not served every page; SIGUSR1 releases it late, it then fills the
#      rest, exits 0, and the instance still answers exactly;
#   2. a start held and never released: the bound releases it, the daemon
#      finishes on its own;
#   3. a held daemon killed: the instance is listed failed (page source lost),
#      its process killed, and stop leaves nothing;
#   4. --events-first (THAW_LAZY_EVENTS_FIRST=1): answers exact, daemon done;
#   5. THAW_LAZY_GPU_HOLD=1 (thaw start's setting) leaves a CPU start unheld.
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
FN_DIR=$ROOT/bench/functions

. "$ROOT/test/lib/require.sh"
require_restore_tools uffd

W=$(mktemp -d /tmp/e2e_lazy_hold.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_lazy_hold.XXXXXX)
D=$W/data
FN=e2e-h$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((1 << 30))
unset THAW_DATA_DIR THAW_STORE THAW_LAZY THAW_LAZY_HOLD_MS THAW_LAZY_EVENTS_FIRST

. "$ROOT/test/lib/instances.sh"
trap 'cleanup_instances; rm -rf "$W" "$TIER"' EXIT

status_of() { cat "$D/instances/$1/lazy.status" 2>/dev/null; }
summary_of() { grep -E "lazy-pages: (done|failed)" "$D/instances/$1/lazy-pages.log" 2>/dev/null | tail -n 1; }
answers() { # endpoint: y for each x in $XS
	local got="" x y
	for x in $XS; do
		y=$(curl -sf --max-time 20 "http://$1/infer?x=$x" | python3 -c 'import json,sys; print(json.load(sys.stdin)["y"])')
		got="$got${got:+ }$y"
	done
	echo "$got"
}
# wait_done ID SECONDS: until the watcher wrote the daemon's end (0) or not (1).
wait_done() {
	local t
	for t in $(seq 1 $(($2 * 10))); do
		[ -s "$D/instances/$1/lazy.status" ] && return 0
		sleep 0.1
	done
	return 1
}
# start_held NAME [VAR=VALUE...]: thaw start --lazy with those set; ID, EP, PID, DPID.
start_held() {
	local name=$1
	shift
	env "$@" "$THAW" --data-dir "$D" start --lazy "$SNAP" >"$W/$name.json" 2>"$W/$name.err" ||
		{ fail "$name: thaw start --lazy: $(cat "$W/$name.err")"; return 1; }
	ID=$(jget "$W/$name.json" instance)
	EP=$(jget "$W/$name.json" endpoint)
	PID=$(jget "$W/$name.json" pid)
	DPID=$(jget "$D/instances/$ID.json" lazy_daemon_pid)
}

XS="0 1 7 42 1000 123456"
MIB=256
EXPECT=$(cd "$FN_DIR" && THAW_EXAMPLE_MIB=$MIB python3 -c 'import sys
import cpu_example as m
print(" ".join(str(m.infer(int(x))) for x in sys.argv[1:]))' $XS) || { echo "cannot compute the expected answers"; exit 1; }
echo "expected y for x in [$XS]: $EXPECT"
"$THAW" lazy-pages --help | grep -q -- "--hold-ms" || fail "thaw lazy-pages --help does not tell --hold-ms"

python3 - "$FN_DIR/cpu_example.json" "$FN_DIR" "$MIB" >"$W/spec.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["cwd"] = sys.argv[2]
spec["env"]["THAW_EXAMPLE_MIB"] = sys.argv[3]
spec["lazy"] = True
print(json.dumps(spec))
EOF
snapshot_fn "$W/spec.json"

# --- 1. held, released late by SIGUSR1 ----------------------------------------
if start_held late THAW_LAZY_HOLD_MS=600000; then
	got=$(answers "$EP")
	[ "$got" = "$EXPECT" ] && ok "held: the instance answers exactly while held" ||
		fail "held: answers [$got], expected [$EXPECT]"
	sleep 1
	if [ -s "$D/instances/$ID/lazy.status" ]; then
		fail "held: the daemon finished before its release: $(status_of "$ID")"
	else
		ok "held: 1 s after the answers the daemon has not served every page"
	fi
	grep -q "held: streams only" "$D/instances/$ID/lazy-pages.log" ||
		fail "held: the daemon's log does not say it is held"
	kill -USR1 "$DPID"
	wait_done "$ID" 20 || fail "released: no word from the daemon 20 s after SIGUSR1"
	case "$(status_of "$ID")" in
	done*) ok "released: the daemon served every page ($(status_of "$ID"))" ;;
	*) fail "released: the daemon ended: $(status_of "$ID")" ;;
	esac
	echo "summary: $(summary_of "$ID")"
	summary_of "$ID" | grep -q "held [0-9.]* ms (signal" ||
		fail "released: the summary does not say the signal released the hold"
	got=$(answers "$EP")
	[ "$got" = "$EXPECT" ] && ok "released: the instance answers exactly after the fill" ||
		fail "released: answers [$got], expected [$EXPECT]"
	[ -z "$(alive "$DPID")" ] || fail "released: the daemon $DPID is still there"
	"$THAW" --data-dir "$D" stop "$ID" >/dev/null 2>"$W/stop.err" || fail "stop: $(cat "$W/stop.err")"
	[ -z "$(alive "$PID")" ] || fail "released: instance process $PID still there after stop"
fi

# --- 2. held and never released: the bound -------------------------------------
BOUND_MS=1500
if start_held bound THAW_LAZY_HOLD_MS=$BOUND_MS; then
	wait_done "$ID" 20 || fail "bound: no word from the daemon 20 s after the start"
	st=$(status_of "$ID")
	case "$st" in
	done*) ok "bound: the daemon served every page without a release ($st)" ;;
	*) fail "bound: the daemon ended: $st" ;;
	esac
	done_ms=${st#done }
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' \
		"${done_ms:-0}" "$BOUND_MS" && ok "bound: done after the bound (${done_ms} ms)" ||
		fail "bound: done after ${done_ms} ms, before the ${BOUND_MS} ms bound"
	echo "summary: $(summary_of "$ID")"
	summary_of "$ID" | grep -q "held [0-9.]* ms (bound" ||
		fail "bound: the summary does not say the bound released the hold"
	got=$(answers "$EP")
	[ "$got" = "$EXPECT" ] && ok "bound: the instance answers exactly" ||
		fail "bound: answers [$got], expected [$EXPECT]"
	"$THAW" --data-dir "$D" stop "$ID" >/dev/null 2>"$W/stop.err" || fail "stop: $(cat "$W/stop.err")"
fi

# --- 3. a held daemon killed: the page source goes away -------------------------
if start_held lost THAW_LAZY_HOLD_MS=600000; then
	[ -s "$D/instances/$ID/lazy.status" ] && fail "lost: the held daemon finished: $(status_of "$ID")"
	kill -9 "$DPID"
	for t in $(seq 1 100); do
		"$THAW" --data-dir "$D" ps | grep -q "page source lost" && [ -z "$(alive "$PID")" ] && break
		sleep 0.1
	done
	"$THAW" --data-dir "$D" ps | grep -q "page source lost" && ok "lost: the instance is listed failed (page source lost)" ||
		fail "lost: thaw ps: $("$THAW" --data-dir "$D" ps)"
	[ -z "$(alive "$PID")" ] && ok "lost: the instance was killed" || fail "lost: process $PID still runs"
	"$THAW" --data-dir "$D" stop "$ID" >/dev/null 2>"$W/stop.err" || fail "lost: stop: $(cat "$W/stop.err")"
fi
check_nothing_left "after the held starts"

# --- 4. --events-first ----------------------------------------------------------
if start_held evfirst THAW_LAZY_EVENTS_FIRST=1 THAW_LAZY_THREADS=8 THAW_LAZY_COPY_SLOTS=-1; then
	got=$(answers "$EP")
	[ "$got" = "$EXPECT" ] && ok "events first: the instance answers exactly" ||
		fail "events first: answers [$got], expected [$EXPECT]"
	wait_done "$ID" 20 || fail "events first: no word from the daemon"
	case "$(status_of "$ID")" in done*) ok "events first: every page served" ;;
	*) fail "events first: the daemon ended: $(status_of "$ID")" ;; esac
	echo "summary: $(summary_of "$ID")"
	summary_of "$ID" | grep -q "events first" || fail "events first: not in the summary"
	"$THAW" --data-dir "$D" stop "$ID" >/dev/null 2>"$W/stop.err" || fail "stop: $(cat "$W/stop.err")"
fi

# --- 5. THAW_LAZY_GPU_HOLD holds GPU starts only ------------------------------
if start_held cpu THAW_LAZY_GPU_HOLD=1; then
	wait_done "$ID" 20 || fail "THAW_LAZY_GPU_HOLD=1, CPU start: no word from the daemon"
	grep -q "held: streams only" "$D/instances/$ID/lazy-pages.log" &&
		fail "THAW_LAZY_GPU_HOLD=1 held the daemon of a CPU start" ||
		ok "THAW_LAZY_GPU_HOLD=1: a CPU start is not held"
	"$THAW" --data-dir "$D" stop "$ID" >/dev/null 2>"$W/stop.err" || fail "stop: $(cat "$W/stop.err")"
fi
check_nothing_left "at the end"

[ $fails = 0 ] && echo "e2e_lazy_hold: all good" || echo "e2e_lazy_hold: $fails failure(s)"
[ $fails = 0 ]
