#!/usr/bin/env bash
# fill-lines.sh — a GPU start's lines on thawd's fill and the driver's
# restore, kept and turned into figures (bench/gpu-span-run.sh,
# bench/gpu-tp-run.sh).  From LOG (the start's log, THAW_LOG=info) the lines
# "thaw filled" (the start's fill and its wait for it, and one per GPU
# filled) and "restored and unlocked" are appended to OUT, each prefixed
# with LABEL; then a "figure:" line per GPU filled (bytes, time, GB/s, its
# turn's wait) and one for the start's wait for the fill, named NAME.
# Usage: bench/fill-lines.sh NAME LABEL LOG OUT
set -u
NAME=$1 LABEL=$2 LOG=$3 OUT=$4
grep -h "thaw filled\|restored and unlocked\|thaw checked\|the library copied" "$LOG" |
	sed "s/^/$LABEL: /" >>"$OUT"
python3 - "$NAME" "$LABEL" "$LOG" <<'PY'
import re, sys
name, label, log = sys.argv[1:4]
gpu = re.compile(r"thaw filled GPU (\d+): ([\d.]+ \S+) in ([\d.]+) ms, ([\d.]+) GB/s "
                 r"\(its turn after ([\d.]+) ms\)")
start = re.compile(r"thaw filled (\d+) allocation\(s\), ([\d.]+ \S+), in ([\d.]+) ms .*"
                   r"the start waited ([\d.]+) ms for it")
seen = False
for line in open(log, errors="replace"):
    m = gpu.search(line)
    if m:
        seen = True
        print("figure: %s fill_gpu%s %s in %s ms, %s GB/s, its turn after %s ms (%s)"
              % (name, m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), label))
    m = start.search(line)
    if m:
        print("figure: %s fill %s allocation(s), %s in %s ms; the start waited %s ms for it (%s)"
              % (name, m.group(1), m.group(2), m.group(3), m.group(4), label))
        parts = re.search(r"\((contexts [^)]*)\)", line)
        if parts:  # where the fill's time went
            print("figure: %s fill_parts %s (%s)" % (name, parts.group(1), label))
    m = re.search(r"restored and unlocked in ([\d.]+) ms", line)
    if m:
        print("figure: %s driver_restore_unlock_ms %s (%s)" % (name, m.group(1), label))
if not seen:
    print("figure: %s fill_gpu none: thawd filled no GPU (%s; see the start's log)" % (name, label))
PY
