#!/usr/bin/env bash
# perf-put-run.sh — on the GPU machine, after scripts/gpu-run.sh has unpacked
# .gpu/x: a CPU profile of `thaw store put` of 1 GiB of new random data into a
# store on its disk (issue 2: where a put's CPU goes beside SHA-256), with
# /usr/bin/time's totals of three puts.  perf itself is not installed there:
# .gpu/perf.tar.xz (GPU_PACK_PERF=1 scripts/gpu-pack.sh) holds the dev
# machine's perf and its libraries, unpacked into .gpu/perf and run through
# their own loader (.gpu/perf/perf.sh).
# Writes $OUT/perf.tar.gz.
set -u
cd "$(dirname "$0")/.."
mkdir -p .gpu/perf && tar -C .gpu/perf -xJf .gpu/perf.tar.xz || exit 1
P=.gpu/perf/perf.sh
T=.gpu/x/build/thaw W=/var/tmp/pr
mkdir -p $W "$OUT/perf"
head -c 1073741824 /dev/urandom >$W/r1g
lscpu >"$OUT/perf/lscpu.txt" 2>&1
for i in 1 2 3; do
	rm -rf $W/st
	/usr/bin/time -v $T store --store $W/st put --name x $W/r1g >"$OUT/perf/time$i.txt" 2>&1
done
rm -rf $W/st
$P record -F 1999 -o $W/perf.data -- $T store --store $W/st put --name x $W/r1g >"$OUT/perf/record.txt" 2>&1
$P report -i $W/perf.data --no-children --sort dso,sym --stdio 2>&1 | head -150 >"$OUT/perf/sym.txt"
$P report -i $W/perf.data --no-children --sort pid --stdio 2>&1 | head -40 >"$OUT/perf/pid.txt"
rm -rf $W
tar -C "$OUT" -czf "$OUT/perf.tar.gz" perf && rm -rf "$OUT/perf"
