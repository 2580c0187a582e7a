#!/usr/bin/env bash
# thaw-bench-run.sh — the thaw-bench scenarios of one function against a private
# thawd, start to finish, with the baselines; used on the GPU machine
# (scripts/gpu-run.sh) and runnable anywhere as root:
#
#   bench/thaw-bench-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [BURST]
#
# Starts thawd (from $THAW_BUILD, default ./build) on a free port with its own
# data directory and RAM tier, registers SPEC.json as function ID (a relative
# "cwd" taken against the spec's directory), snapshots it, then runs:
#   1. seq:   starts one at a time (--burst 1 --repeat 3), warm RAM tier, with
#             the cold-boot and plain-restore baselines (2 runs each);
#   2. burst: BURST (default 2) starts at once, warm tier;
#   3. cold:  one at a time on a cold tier (thawd restarted on an emptied tier
#             before each start, --cold-cmd), 2 starts: the disk-tier start;
#             then its floor, an O_DIRECT dd of the same stored bytes
#             (OUTDIR/disk-floor.txt).
# Each writes OUTDIR/<name>.txt (the table), .json and .svg; OUTDIR/snapshot.json
# holds the snapshot job.  thawd, its instances and directories are removed at
# the end, also on failure.  Exit 0 when every scenario ran and every start was
# correct, 1 otherwise.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,20p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 BURST=${6:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/thaw-bench-run-XXXXXX)
TIER=$W/tier # tmpfs or not, thawd's tier works; /dev/shm is used when it is roomy
if [ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1)" -gt $((16 << 30)) ] 2>/dev/null; then
	TIER=$(mktemp -d /dev/shm/thaw-bench-run-tier-XXXXXX)
fi
. "$ROOT/bench/lib/thawd.sh"

start_thawd 0 || exit 1

# The cold-tier step: stop thawd, empty its tier, start it again on the same port.
cat >"$W/cold.sh" <<EOF
#!/bin/sh
pid=\$(cat "$PIDFILE" 2>/dev/null) && kill "\$pid" 2>/dev/null
while [ -n "\$pid" ] && kill -0 "\$pid" 2>/dev/null; do sleep 0.05; done
rm -rf "$TIER"/* "$TIER"/.[!.]* 2>/dev/null
"$B/thawd" --listen 127.0.0.1:$PORT --port-file "$W/port" --data-dir "$W/data" \\
	--ram-tier "$TIER" >>"$OUTDIR/thawd.log" 2>&1 </dev/null &
echo \$! >"$PIDFILE"
EOF
chmod +x "$W/cold.sh"

put_function "$ID" "$SPEC" "$W/spec.json" || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1

# One start first, so that the tier is warm for seq and burst (it is cold for "cold").
run prime --burst 1
whole_image "$SNAP" || bad=1
run seq --burst 1 --repeat 3 --baseline-cold "$W/spec.json" --baseline-plain "$TIER/${SNAP#sha256:}" \
	--baseline-runs 2 --runc-root "$W/runc"
run burst --burst "$BURST"
run cold --burst 1 --repeat 2 --cold-tier --cold-cmd "$W/cold.sh"

# The floor of the cold (disk-tier) start, in the same run: an O_DIRECT read of
# the same stored bytes (the store's packs: this data directory holds only this
# function's snapshot) with dd, against the cold starts' materialise phase.
packs=("$W/data/store/packs/"*.pack)
if [ -e "${packs[0]}" ]; then
	bytes=$(du -cb "${packs[@]}" | tail -n1 | cut -f1)
	t0=$(date +%s%N)
	for p in "${packs[@]}"; do dd if="$p" of=/dev/null bs=4M iflag=direct status=none || bad=1; done
	t1=$(date +%s%N)
	python3 - "$bytes" "$t0" "$t1" "$OUTDIR/cold.json" >"$OUTDIR/disk-floor.txt" <<'PY'
import json, sys
b, t0, t1 = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dd_s = (t1 - t0) / 1e9
j = json.load(open(sys.argv[4]))
mat = (j.get("phases_mean_ms") or {}).get("materialize")
lat = (j.get("start_latency_ms") or {}).get("p50")
print("disk-tier start against the disk (same run):")
print(f"  stored bytes (packs): {b / 1e9:.3f} GB")
print(f"  floor: dd iflag=direct bs=4M of the packs: {dd_s:.3f} s ({b / dd_s / 1e9:.2f} GB/s)")
if mat:
    print(f"  cold start's materialise phase (mean): {mat / 1e3:.3f} s ({b / (mat / 1e3) / 1e9:.2f} GB/s of stored bytes), "
          f"{dd_s / (mat / 1e3):.2f}x the floor's speed")
if lat:
    print(f"  cold start, request to first correct answer (p50): {lat / 1e3:.3f} s")
PY
	cat "$OUTDIR/disk-floor.txt"
	# The engine alone on the same store, page cache dropped each time, as
	# thawd's tier would (a huge-page tmpfs where there is one), in a few
	# settings: where the materialise phase's time goes besides the reads.
	if [ -w /proc/sys/vm/drop_caches ] && [ "${THAW_ENGINE_PROBE:-1}" != 0 ]; then
		echo "the engine alone (thaw materialize), page cache dropped before each:"
		for opts in "" "--order stream" "--qd 64" "--threads 8" "--arena 512"; do
			out=$TIER/probe-$$
			rm -rf "$out"
			sync && echo 3 >/proc/sys/vm/drop_caches
			# shellcheck disable=SC2086
			echo "  [${opts:-defaults}] $("$B/thaw" materialize --store "$W/data/store" --out "$out" $opts "$SNAP" 2>&1 >/dev/null | grep -E 'in [0-9.]+ s' | tail -n1)"
			rm -rf "$out"
		done | tee -a "$OUTDIR/disk-floor.txt"
	fi
fi
exit $bad
