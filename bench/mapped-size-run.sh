#!/usr/bin/env bash
# mapped-size-run.sh — criu_restore against the image's size, mapped, lazy and
# eager in the same run (CI's kind of machine: no GPU).
#
#   bench/mapped-size-run.sh [OUTDIR] [SIZES_MIB] [REPEAT]
#
# For each size (default "256 2048" MiB) the function test/fixtures/mapped_fn.py
# holding that much seeded random data is snapshotted (thaw snapshot), its
# tier entry materialised, then REPEAT (default 3) starts of each way, one at a
# time, interleaved (mapped, lazy, eager, mapped, …): thaw start --mapped,
# --lazy and --eager, each checked against the checksum of the original
# process and stopped.  eager (CRIU copies every page) is the baseline.
# Prints a table of criu_restore (min / median / max ms) and start total per
# size and way, the anonymous memory of each instance right after its start,
# and the mapped 2nd-size / 1st-size ratio (the aim: within 1.5x).  Writes
# OUTDIR/summary.txt (default ./mapped-size-out) with "figure:" lines.
# Needs root, runc and CRIU 4.2 (make deps).  Exit 0 when every start answered
# the original's checksum.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
OUTDIR=${1:-./mapped-size-out}
SIZES=${2:-256 2048}
REPEAT=${3:-3}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
W=$(mktemp -d /tmp/mapped-size-run.XXXXXX)
TIER=$(mktemp -d /dev/shm/mapped-size-run.XXXXXX)
D=$W/data
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((12 << 30))
unset THAW_DATA_DIR THAW_STORE THAW_LAZY THAW_MAPPED
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:+$THAW_ALLOW_ROOTS:}$W # the function's directory
bad=0
cleanup() {
	local r
	for r in "$D"/instances/*.json; do
		[ -f "$r" ] && "$THAW" --data-dir "$D" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
	[ -n "${REF:-}" ] && kill -9 -- "-$REF" 2>/dev/null
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT
mkdir -p "$W/fn"
cp "$ROOT/test/fixtures/mapped_fn.py" "$W/fn/"
jget() { python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v = v[k]
print(v)' "$@"; }
sum_of() { curl -sf --max-time 120 "http://$1/checksum" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])'; }

: >"$W/rows"
for mib in $SIZES; do
	# The original, outside any container: the checksum to expect.
	port=$((20000 + ($$ + mib) % 20000))
	(cd "$W/fn" && MAPPED_DATA_MIB=$mib PORT=$port exec setsid python3 mapped_fn.py) &
	REF=$!
	for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
	expect=$(sum_of "127.0.0.1:$port")
	kill -9 -- "-$REF" 2>/dev/null
	wait "$REF" 2>/dev/null
	REF=
	cat >"$W/spec-$mib.json" <<EOF
{"command": ["python3", "mapped_fn.py"], "cwd": "$W/fn", "env": {"MAPPED_DATA_MIB": "$mib"},
 "port": 8000, "ready": {"http": "/health", "timeout_s": 300}, "gpu": false}
EOF
	"$THAW" --data-dir "$D" snapshot --id "size-$mib" "$W/spec-$mib.json" >"$W/snap-$mib.json" 2>"$W/snap.err" ||
		{ cat "$W/snap.err"; echo "snapshot of $mib MiB failed"; exit 1; }
	snap=$(jget "$W/snap-$mib.json" snapshot)
	image=$(jget "$W/snap-$mib.json" image_bytes)
	"$THAW" --data-dir "$D" materialize "$snap" >/dev/null 2>&1 || { echo "materialize failed"; exit 1; }
	echo "size $mib MiB: image $image bytes, snapshot $snap, checksum $expect"
	for r in $(seq "$REPEAT"); do
		for way in mapped lazy eager; do
			if ! "$THAW" --data-dir "$D" start "--$way" "$snap" >"$W/start.json" 2>"$W/start.err"; then
				echo "start --$way failed: $(tail -n 2 "$W/start.err")"
				bad=1
				continue
			fi
			got=$(jget "$W/start.json" pages)
			pid=$(jget "$W/start.json" pid)
			anon=$(awk '/^Anonymous:/ {print $2}' "/proc/$pid/smaps_rollup")
			ans=$(sum_of "$(jget "$W/start.json" endpoint)")
			[ "$ans" = "$expect" ] || { echo "$way start of $mib MiB answered another checksum"; bad=1; }
			[ "$got" = "$way" ] || { echo "asked --$way, restored $got ($(jget "$W/start.json" pages_why))"; bad=1; }
			echo "$mib $way $(jget "$W/start.json" timings_ms criu_restore) $(jget "$W/start.json" timings_ms total) $anon $image" >>"$W/rows"
			echo "  $way: criu_restore $(jget "$W/start.json" timings_ms criu_restore) ms, anonymous $anon KiB"
			"$THAW" --data-dir "$D" stop "$(jget "$W/start.json" instance)" >/dev/null 2>&1 || bad=1
		done
	done
done

python3 - "$W/rows" "$REPEAT" <<'PY' | tee "$OUTDIR/summary.txt"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("criu_restore (ms) of thaw start, one at a time, warm RAM tier, %s each; eager is the baseline" % sys.argv[2])
print("%8s %-7s %9s %9s %9s %10s %12s %9s" % ("MiB", "pages", "min", "median", "max", "total p50",
                                            "anon (MiB)", "vs eager"))
col = {}  # (mib, way) -> (criu_restore list, total list, anonymous KiB list)
for r in rows:
    c = col.setdefault((int(r[0]), r[1]), ([], [], []))
    c[0].append(float(r[2]))
    c[1].append(float(r[3]))
    c[2].append(int(r[4]))
med = {k: statistics.median(c[0]) for k, c in col.items()}
for mib in sorted({k[0] for k in col}):
    for way in ("mapped", "lazy", "eager"):
        if (mib, way) not in col:
            continue
        v, t, a = col[mib, way]
        base = med.get((mib, "eager"))
        print("%8d %-7s %9.1f %9.1f %9.1f %10.1f %12.1f %8.2fx" % (
            mib, way, min(v), med[mib, way], max(v), statistics.median(t),
            statistics.median(a) / 1024, med[mib, way] / base if base else float("nan")))
        print("figure: mapped_size %d %s criu_restore_median_ms %.1f" % (mib, way, med[mib, way]))
sizes = sorted({int(r[0]) for r in rows})
if len(sizes) > 1 and (sizes[0], "mapped") in med and (sizes[-1], "mapped") in med:
    ratio = med[sizes[-1], "mapped"] / med[sizes[0], "mapped"]
    print("mapped: %d MiB / %d MiB criu_restore = %.2fx (aim: within 1.5x)" % (sizes[-1], sizes[0], ratio))
    print("figure: mapped_size ratio %.2f" % ratio)
PY
exit $bad
