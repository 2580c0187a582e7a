#!/usr/bin/env bash
# lazy-burst-run.sh — a burst of starts of one function restored three ways,
# warm RAM tier, against a private thawd: THAW_LAZY=auto (lazy while at most
# THAW_LAZY_MAX_GPU_STARTS GPU starts are in flight, eager beyond), 1 and 0.
#
#   bench/lazy-burst-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [BURST] [ROUNDS]
#
# Starts thawd (from $THAW_BUILD, default ./build) with its own data directory
# and RAM tier, registers SPEC.json as function ID (a relative "cwd" taken
# against the spec's directory; any "lazy" in it removed, so that THAW_LAZY
# decides), snapshots it and primes the tier with one start.  Then, for each of
# THAW_LAZY=auto, 1 and 0: thawd restarted with it on the same data, tier and
# port, one start to read the manifest again, then thaw-bench --burst BURST
# (default 8) --repeat ROUNDS (default 3; the rounds one after the other).
# THAW_LAZY_MAX_GPU_STARTS and THAW_LAZY_DAEMON are thawd's as given (unset:
# 1 and thaw).  Writes OUTDIR/{auto,lazy,eager}.txt/.json/.svg (lazy:
# THAW_LAZY=1, eager: 0), OUTDIR/thawd.log (its line per start says lazy or
# eager and why) and OUTDIR/summary.txt: p50 and p99 of start -> first correct
# answer per series, and how many starts restored lazily; "figure:" lines too.
# Exit 0 when every start was correct.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,20p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 BURST=${6:-8} ROUNDS=${7:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/lazy-burst-run-XXXXXX)
TIER=$W/tier # tmpfs or not, thawd's tier works; /dev/shm is used when it is roomy
if [ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1)" -gt $((16 << 30)) ] 2>/dev/null; then
	TIER=$(mktemp -d /dev/shm/lazy-burst-run-tier-XXXXXX)
fi
. "$ROOT/bench/lib/thawd.sh"

export THAW_LAZY=auto
start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" lazy=null || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
run prime --burst 1

# series NAME THAW_LAZY: thawd restarted with it, one start, then the bursts.
series() {
	stop_thawd
	export THAW_LAZY=$2
	start_thawd "$PORT" || return 1
	run "prime-$1" --burst 1
	run "$1" --burst "$BURST" --repeat "$ROUNDS"
}
series auto auto || exit 1
series lazy 1 || exit 1
series eager 0 || exit 1
stop_thawd

python3 - "$OUTDIR" "$BURST" "$ROUNDS" "${THAW_LAZY_MAX_GPU_STARTS:-1 (default)}" <<'PY' |
import json, os, sys
out, burst, rounds, limit = sys.argv[1:5]
print("burst of %s starts x %s rounds, warm RAM tier, start -> first correct answer (ms); "
      "THAW_LAZY_MAX_GPU_STARTS=%s" % (burst, rounds, limit))
print("%-12s %5s %5s %9s %9s %9s  %s" % ("THAW_LAZY", "n", "ok", "p50", "p99", "mean", "restored"))
for name, v in (("auto", "auto"), ("lazy", "1"), ("eager", "0")):
    try:
        j = json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError) as e:
        print("%-12s not measured (%s)" % (v, e))
        continue
    lat = j["start_latency_ms"]
    modes = ", ".join("%s %d" % kv for kv in sorted(j.get("restore_mode", {}).items()))
    if lat.get("n"):
        print("%-12s %5d %5d %9.1f %9.1f %9.1f  %s" % (v, j["attempts"], j["ok"], lat["p50"],
                                                       lat["p99"], lat["mean"], modes or "-"))
    else:
        print("%-12s %5d %5d %9s %9s %9s  %s" % (v, j["attempts"], 0, "-", "-", "-", modes or "-"))
for name in ("auto", "lazy", "eager"):
    try:
        lat = json.load(open(os.path.join(out, name + ".json")))["start_latency_ms"]
    except (OSError, ValueError):
        continue
    if lat.get("n"):
        print("figure: lazy_burst %s p50_ms %.1f" % (name, lat["p50"]))
        print("figure: lazy_burst %s p99_ms %.1f" % (name, lat["p99"]))
PY
	tee "$OUTDIR/summary.txt"
exit $bad
