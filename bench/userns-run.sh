#!/usr/bin/env bash
# userns-run.sh — what a user namespace costs a CPU start: the CPU example
# (bench/functions/cpu_example.json, 256 MiB of state) snapshotted with
# "sandbox": {"userns": true} and with false, in one thawd, then started one
# at a time in turn (ROUNDS rounds of REPEAT starts each, alternating, so
# that the machine's drift falls on both): thaw-bench's tables, each start
# correct ({"x": 7, "y": ...}).  The GPU's counterpart is bench/gpumem-run.sh
# userns.  Run as root on a host that supports user namespaces (thaw
# doctor's userns line); the tree must be searchable by other users.
#   bench/userns-run.sh OUTDIR
set -u
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
OUTDIR=$1
ROUNDS=${ROUNDS:-3} REPEAT=${REPEAT:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/userns-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/userns-run-tier-XXXXXX)
chmod 711 "$W" "$TIER" # the ranges reach their bundles and tier entries through them
ID=none INFER='GET /infer?x=7' EXPECT='"x": 7, "y": '
. "$ROOT/bench/lib/thawd.sh"
start_thawd 0 || exit 1
for ns in true false; do
	put_function "cpu-userns-$ns" "$ROOT/bench/functions/cpu_example.json" "$W/cpu-$ns.json" \
		"sandbox={\"userns\": $ns}" && snapshot_function "cpu-userns-$ns" "$OUTDIR/snapshot-$ns.json" || bad=1
	ID=cpu-userns-$ns
	run "cpu-userns-$ns-prime" --burst 1
done
for r in $(seq "$ROUNDS"); do
	for ns in true false; do
		ID=cpu-userns-$ns
		run "cpu-userns-$ns-$r" --burst 1 --repeat "$REPEAT"
	done
done
python3 - "$OUTDIR" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for ns in ("true", "false"):
    first, answered, n = [], [], 0
    for r in range(1, rounds + 1):
        j = json.load(open("%s/cpu-userns-%s-%d.json" % (out, ns, r)))
        first.append(j["start_latency_ms"]["p50"]); answered.append(j["start_answer_ms"]["p50"])
        n += j["ok"]
    print("figure: userns=%s starts %d; p50 of each round (ms): answered %s, first answer %s" % (
        ns, n, " ".join("%.1f" % v for v in answered), " ".join("%.1f" % v for v in first)))
PY
[ "$bad" = 0 ] && echo "userns-run: every start was correct" || echo "userns-run: failures"
exit "$bad"
