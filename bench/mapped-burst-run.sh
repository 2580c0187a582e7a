#!/usr/bin/env bash
# mapped-burst-run.sh — starts of one function with its pages coming back
# three ways, warm RAM tier, against a private thawd:
#   mapped  the default (THAW_MAPPED=1): the instance maps the tier's files
#   lazy    THAW_MAPPED=0 THAW_LAZY=1: thaw's lazy-pages daemon fills it
#   eager   THAW_MAPPED=0 THAW_LAZY=0: CRIU copies every page before it runs
#
#   bench/mapped-burst-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [BURST] [ROUNDS]
#
# Starts thawd (from $THAW_BUILD, default ./build) with its own data directory
# and RAM tier, registers SPEC.json as function ID (any "lazy" in it removed),
# snapshots it and primes the tier with one start.  Then for each way: thawd
# restarted with it, one start to read the manifest again, ROUNDS (default 3)
# starts one at a time (thaw-bench --burst 1 --repeat ROUNDS), ROUNDS bursts
# of BURST (default 8) at once, and BURST starts at once kept running (--keep)
# to read the host memory they add: MemAvailable before and after (divided by
# BURST) and each instance's anonymous memory (smaps_rollup), then stopped.
# The tier is a huge-page tmpfs of its own (THAW_TIER_HUGE, default 1).
# A start counts once its first inference answers EXPECT.  Writes
# OUTDIR/<way>-{one,burst,keep}.{txt,json,svg}, OUTDIR/thawd.log and
# OUTDIR/summary.txt (p50/p99 of start -> first correct answer, criu_restore
# and gpu_restore means, memory per instance against the image's size), with
# "figure:" lines.  Exit 0 when every start was correct.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,22p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 BURST=${6:-8} ROUNDS=${7:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/mapped-burst-run-XXXXXX)
TIER=$W/tier
if [ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1)" -gt $((16 << 30)) ] 2>/dev/null; then
	TIER=$(mktemp -d /dev/shm/mapped-burst-run-tier-XXXXXX)
fi
. "$ROOT/bench/lib/thawd.sh"
unset THAW_LAZY THAW_MAPPED
# The tier on a huge-page tmpfs of its own, as thawd's default root is where it
# can be (THAW_TIER_HUGE=0 to compare): memory files then map with 2 MiB pages.
export THAW_TIER_HUGE=${THAW_TIER_HUGE:-1}
trap 'stop_thawd; for r in "$W"/data/instances/*.json; do [ -f "$r" ] &&
	"$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1; done
	mountpoint -q "$TIER" && umount "$TIER"; rm -rf "$W" "$TIER"' EXIT

start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" lazy=null || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
IMAGE=$(jfield "$OUTDIR/snapshot.json" job result image_bytes)
run prime --burst 1

mem_avail() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }

# keep NAME: BURST starts kept running; the memory they add into NAME-mem.json.
keep() {
	local name=$1 before after r pid anon=0 n=0 criu=0 c
	sync
	before=$(mem_avail)
	run "$name-keep" --burst "$BURST" --keep
	sleep 1
	after=$(mem_avail)
	for r in "$W"/data/instances/*.json; do
		pid=$(jfield "$r" pid) || continue
		anon=$((anon + $(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)))
		n=$((n + 1))
		c=$(jfield "$r" timings_ms criu_restore | cut -d. -f1)
		[ "${c:-0}" -gt "$criu" ] && criu=$c
	done
	printf '{"instances": %d, "mem_available_drop_kib": %d, "anonymous_kib": %d, "image_bytes": %d, "criu_restore_max_ms": %d}\n' \
		"$n" $((before - after)) "$anon" "$IMAGE" "$criu" >"$OUTDIR/$name-mem.json"
	for r in "$W"/data/instances/*.json; do
		"$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
}

# series NAME THAW_MAPPED THAW_LAZY
series() {
	stop_thawd
	export THAW_MAPPED=$2 THAW_LAZY=$3
	start_thawd "$PORT" || return 1
	run "prime-$1" --burst 1
	run "$1-one" --burst 1 --repeat "$ROUNDS"
	run "$1-burst" --burst "$BURST" --repeat "$ROUNDS"
	keep "$1"
}
series mapped 1 auto || exit 1
series lazy 0 1 || exit 1
series eager 0 0 || exit 1
stop_thawd

python3 - "$OUTDIR" "$BURST" "$ROUNDS" "$IMAGE" <<'PY' | tee "$OUTDIR/summary.txt"
import json, os, sys
out, burst, rounds, image = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
print("image %.2f GB; warm RAM tier; start -> first correct answer (ms); %s rounds" % (image / 1e9, rounds))
print("%-7s %10s %10s %10s %10s %12s %12s %12s %12s  %s" % (
    "pages", "one p50", "one p99", "burst p50", "burst p99", "criu one", "criu burst",
    "gpu one", "gpu burst", "restored as"))
for way in ("mapped", "lazy", "eager"):
    one, b = load(way + "-one"), load(way + "-burst")
    if not one or not b or not one["start_latency_ms"].get("n") or not b["start_latency_ms"].get("n"):
        print("%-7s not measured" % way)
        continue
    lo, lb = one["start_latency_ms"], b["start_latency_ms"]
    po, pb = one["phases_mean_ms"], b["phases_mean_ms"]
    modes = ", ".join("%s %d" % kv for kv in sorted(b.get("restore_mode", {}).items()))
    print("%-7s %10.1f %10.1f %10.1f %10.1f %12.1f %12.1f %12.1f %12.1f  %s (burst: %d/%d ok)" % (
        way, lo["p50"], lo["p99"], lb["p50"], lb["p99"], po.get("criu_restore") or 0,
        pb.get("criu_restore") or 0, po.get("gpu_restore") or 0, pb.get("gpu_restore") or 0,
        modes or "-", b["ok"], b["attempts"]))
    print("figure: mapped_burst %s one_p50_ms %.1f" % (way, lo["p50"]))
    print("figure: mapped_burst %s burst_p50_ms %.1f" % (way, lb["p50"]))
    print("figure: mapped_burst %s burst_p99_ms %.1f" % (way, lb["p99"]))
    print("figure: mapped_burst %s burst_over_one_p50 %.2f" % (way, lb["p99"] / lo["p50"]))
    print("figure: mapped_burst %s criu_restore_burst_mean_ms %.1f" % (way, pb.get("criu_restore") or 0))
print("host memory added per kept instance (%d started at once):" % burst)
for way in ("mapped", "lazy", "eager"):
    m = load(way + "-mem")
    if not m or not m["instances"]:
        print("  %-7s not measured" % way)
        continue
    per = m["mem_available_drop_kib"] * 1024 / m["instances"]
    anon = m["anonymous_kib"] * 1024 / m["instances"]
    print("  %-7s MemAvailable -%.2f GB each (%.1f%% of the image), anonymous %.2f GB each (%.1f%%); "
          "slowest criu_restore of the %d: %d ms" % (way, per / 1e9, 100 * per / image, anon / 1e9,
                                                   100 * anon / image, m["instances"],
                                                   m.get("criu_restore_max_ms", 0)))
    print("figure: mapped_burst %s keep_criu_restore_max_ms %d" % (way, m.get("criu_restore_max_ms", 0)))
    print("figure: mapped_burst %s mem_per_instance_pct %.1f" % (way, 100 * per / image))
    print("figure: mapped_burst %s anon_per_instance_pct %.1f" % (way, 100 * anon / image))
PY
exit $bad
