#!/usr/bin/env bash
# lazy-eager-run.sh — eager against lazy restore of one function, from a warm
# RAM tier, one start at a time, against a private thawd:
#
#   bench/lazy-eager-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [REPEAT]
#
# Starts thawd --no-lazy (from $THAW_BUILD, default ./build) with its own data
# directory and RAM tier, registers SPEC.json as function ID (a "cwd" taken
# against the spec's directory; any "lazy" in it removed, so thawd's default
# decides), snapshots it, primes the tier with one start, then runs
# thaw-bench --burst 1 --repeat REPEAT (default 5) eager; restarts thawd
# --lazy on the same data, tier and port, primes it with one uncounted start
# (as the eager series was) and runs the same lazy.  Then, with
# `thaw start --lazy` on that data, the time until each daemon had served
# every page (timings_ms.lazy_done), REPEAT times.  Writes OUTDIR/{eager,lazy}
# .txt/.json and OUTDIR/lazy_done.txt.  Exit 0 when every start was correct.
# Lazy is served by thaw's lazy-pages daemon (the default); with LAZY_CRIU=1
# (the default; 0: not) the lazy series and lazy_done run again with CRIU's
# (THAW_LAZY_DAEMON=criu) as lazy-criu.txt/.json and lazy_done-criu.txt, and
# lazy_done*.txt carry the daemon's summary line (thaw's: bytes, MiB/s).
# LAZY_AB="A B...": lazy_done once per word in turn, each word a comma-separated
# list of VAR=VALUE set for that start (e.g. "THAW_LAZY_THREADS=8
# THAW_LAZY_THREADS=14,THAW_LAZY_COPY_SLOTS=14"; "-": nothing set).
# LAZY_LOGS=1: lazy_done keeps each start's logs in OUTDIR/restore-logs/.
# LAZY_PERF=CMD: a system-wide perf profile of some starts (see perf_begin;
# LAZY_PERF_ROUNDS, LAZY_PERF_SCRIPT=1 for bench/perf-timeline.py).
# LAZY_VS="VAR=VALUE,...": after the lazy series, two more, as lazy-vs (thawd
# under those settings) and lazy-again (as lazy), so that drift favours neither;
# several such words (space-separated): lazy-vs1, lazy-vs2, ... then lazy-again.
# LAZY_FILL=1: after the lazy series, two more with thaw's daemon, as
# lazy-fill (thawd under THAW_LAZY_GPU_AFTER_FILL=1: the CUDA restore waits for
# every page) and lazy-again (as lazy), so that drift favours neither.
#
# The baseline (issue 7): the same function snapshotted again as ID-full with
# "elide_zero": false, its image written out by `thaw materialize` into a
# plain directory, and `runc restore` (+ CUDA restore and unlock) of that
# unelided image timed by thaw-bench's --baseline-plain in the eager run, in
# the same invocation (PLAIN_RUNS, default 2; 0: none).  OUTDIR/elision.txt
# holds the image bytes before and after elision.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,/^set -u/p' "$0" | sed '$d' >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 REPEAT=${6:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/lazy-eager-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/lazy-eager-run-tier-XXXXXX)
. "$ROOT/bench/lib/thawd.sh"

start_thawd 0 --no-lazy || exit 1
# Any "lazy" of the spec removed: thawd's --lazy/--no-lazy decides.
put_function "$ID" "$SPEC" "$W/spec.json" lazy=null || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
SNAP_ELIDED=$SNAP

PLAIN_RUNS=${PLAIN_RUNS:-2}
BASELINE=()
FULL=
if [ "$PLAIN_RUNS" -gt 0 ]; then
	put_function "$ID-full" "$SPEC" "$W/spec-full.json" lazy=null elide_zero=false || exit 1
	snapshot_function "$ID-full" "$OUTDIR/snapshot-full.json" || exit 1
	FULL=$SNAP
	"$B/thaw" --data-dir "$W/data" materialize "$FULL" --out "$TIER/plain-full" >/dev/null ||
		{ echo "thaw materialize $FULL failed"; exit 1; }
	BASELINE=(--baseline-plain "$TIER/plain-full" --baseline-runs "$PLAIN_RUNS" --runc-root "$W/runc")
fi
SNAP=$SNAP_ELIDED
python3 - "$W/data/store/manifests" "$SNAP" "$FULL" <<'PY' | tee "$OUTDIR/elision.txt"
import json, os, sys
d, snap, full = sys.argv[1:4]
m = json.load(open(os.path.join(d, snap[7:])))["meta"]
before = m.get("image_bytes_before_elision", m.get("image_bytes"))
print("image bytes before elision: %d" % before)
print("image bytes after elision:  %d (%.1f%% of before), %d zero pages elided, elide %.0f ms"
      % (m["image_bytes"], 100.0 * m["image_bytes"] / before, m.get("zero_pages_elided", 0),
         m.get("timings_ms", {}).get("elide", 0)))
if full:
    f = json.load(open(os.path.join(d, full[7:])))["meta"]
    print("unelided snapshot (baseline): %d bytes of image" % f["image_bytes"])
PY
run prime --burst 1
run eager --burst 1 --repeat "$REPEAT" "${BASELINE[@]}"
stop_thawd
export THAW_LAZY_DAEMON=thaw
# LAZY_PERF=CMD (a perf binary, or a script running one): each start of the
# lazy_done series (of its first LAZY_PERF_ROUNDS rounds), one more start of
# each thawd lazy series (traced_start) and the eager start of LAZY_LOGS run under a
# system-wide `CMD record -a -g` of 3 s, kept as OUTDIR/perf-NAME.txt (its
# report by symbol), to see where the machine's CPU goes while a start runs.
# LAZY_PERF_SCRIPT=1: the context switches too (sched:sched_switch, where the
# tracepoints are there), and the samples and switches of every thread but the
# idle ones as `perf script` text, OUTDIR/perf-NAME.script.xz: a timeline of
# what each thread did, and where it waited, while the start ran.
perf_begin() {
	PERF_PID=
	[ -n "${LAZY_PERF:-}" ] && [ ! -e "$OUTDIR/perf-$1.txt" ] || return 0
	PERF_NAME=$1
	local ev=()
	if [ "${LAZY_PERF_SCRIPT:-0}" = 1 ]; then
		# A known clock, and its offset from the wall clock the logs use.
		ev=(-k CLOCK_MONOTONIC)
		python3 -c 'import time; print("realtime - monotonic:", time.time() - time.monotonic())' \
			>"$OUTDIR/perf-$1.clock"
		[ -d /sys/kernel/tracing/events/sched ] ||
			mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
		[ -d /sys/kernel/tracing/events/sched ] && ev+=(-e cpu-clock -e sched:sched_switch)
	fi
	$LAZY_PERF record -a -g -F 999 "${ev[@]}" -o "$W/perf.data" -- sleep 3 >"$W/perf.log" 2>&1 &
	PERF_PID=$!
	sleep 0.3
}
perf_end() {
	[ -n "${PERF_PID:-}" ] || return 0
	wait "$PERF_PID"
	$LAZY_PERF report -i "$W/perf.data" --no-children --sort comm,dso,sym --stdio -g none \
		>"$OUTDIR/perf-$PERF_NAME.txt" 2>&1
	$LAZY_PERF report -i "$W/perf.data" --no-children --sort sym --stdio -g caller,0.5,callee \
		--percent-limit 1.5 >"$OUTDIR/perf-$PERF_NAME-callers.txt" 2>&1
	if [ "${LAZY_PERF_SCRIPT:-0}" = 1 ]; then
		cp "$W/perf.log" "$OUTDIR/perf-$PERF_NAME.log"
		$LAZY_PERF script -i "$W/perf.data" -F comm,tid,cpu,time,event,trace,ip,sym \
			--max-stack 14 2>/dev/null |
			awk 'BEGIN { RS = ""; ORS = "\n\n" } $1 != "swapper" && $1 !~ /^(kworker|ksoftirqd|migration|rcu_)/' |
			xz -3 >"$OUTDIR/perf-$PERF_NAME.script.xz"
	fi
	PERF_PID=
}

# keep_logs IID DIR: instance IID's logs (CRIU's, runc's, the daemon's) into DIR.
keep_logs() {
	mkdir -p "$2"
	(cd "$W/data/instances/$1" && find . -name '*.log' -size -64M -exec cp --parents {} "$2" \;)
}
# Each restarted thawd gets one start that is not counted, as the eager series
# had: its first start would read the manifest again (~0.3 s of load).
# lazy_series NAME [VAR=VALUE,...]: a thawd restarted with --lazy (with those
# settings in its environment), its uncounted priming start, then the series.
lazy_series() {
	local kvs=()
	[ -n "${2:-}" ] && IFS=, read -r -a kvs <<<"$2"
	for kv in "${kvs[@]}"; do export "${kv?}"; done
	start_thawd "$PORT" --lazy || exit 1
	for kv in "${kvs[@]}"; do unset "${kv%%=*}"; done
	run "prime-$1" --burst 1
	run "$1" --burst 1 --repeat "$REPEAT"
	traced_start "$1"
	stop_thawd
}
# traced_start NAME: with LAZY_PERF, one more start of this thawd under perf
# (perf_begin), its logs kept in OUTDIR/restore-logs/thawd-NAME: a start on
# thawd's path, where the CUDA restore begins sooner than in `thaw start`
# (no CUDA initialisation in the start itself).
traced_start() {
	[ -n "${LAZY_PERF:-}" ] || return 0
	local iid keep="$OUTDIR/restore-logs/thawd-$1"
	perf_begin "thawd-$1"
	curl -s -m 120 -X POST "$URL/functions/$ID/start" >"$W/t.json"
	perf_end
	iid=$(jfield "$W/t.json" instance) ||
		{ echo "traced start of $1: $(cat "$W/t.json")"; return 0; }
	for _ in $(seq 100); do [ -e "$W/data/instances/$iid/lazy.status" ] && break; sleep 0.1; done
	keep_logs "$iid" "$keep"
	cp "$W/t.json" "$keep/start.json"
	curl -s -X DELETE "$URL/instances/$iid" >/dev/null
}
lazy_series lazy
if [ "${LAZY_FILL:-0}" = 1 ]; then
	lazy_series lazy-fill THAW_LAZY_GPU_AFTER_FILL=1
	lazy_series lazy-again
fi
if [ -n "${LAZY_VS:-}" ]; then
	vs=($LAZY_VS)
	if [ ${#vs[@]} = 1 ]; then
		lazy_series lazy-vs "$LAZY_VS"
	else
		for k in "${!vs[@]}"; do lazy_series "lazy-vs$((k + 1))" "${vs[$k]}"; done
	fi
	lazy_series lazy-again
fi
if [ "${LAZY_CRIU:-1}" = 1 ]; then
	lazy_series lazy-criu THAW_LAZY_DAEMON=criu
fi

# lazy_done: thaw start --lazy, then wait for the daemon's word.  With
# LAZY_AB (thaw's daemon) each repetition runs once per word, interleaved.
lazy_done() { # daemon out
export THAW_LAZY_DAEMON=$1
: >"$2"
local variants=-
[ "$1" = thaw ] && [ -n "${LAZY_AB:-}" ] && variants=$LAZY_AB
for i in $(seq 1 "$REPEAT"); do
for v in $variants; do
	local envs=() name="$1-$i-${v//[^A-Za-z0-9_=.-]/_}"
	[ "$v" != - ] && IFS=, read -r -a envs <<<"$v"
	[ "$i" -le "${LAZY_PERF_ROUNDS:-$REPEAT}" ] && perf_begin "$name"
	[ "${LAZY_LOGS:-0}" = 1 ] && envs+=(THAW_LOG=info) # its phases, kept below
	env "${envs[@]}" THAW_RAM_TIER="$TIER" "$B/thaw" --data-dir "$W/data" start --lazy "$SNAP" \
		>"$W/s.json" 2>"$W/s.err" ||
		{ echo "thaw start --lazy ($v): $(cat "$W/s.err")"; bad=1; perf_end; continue; }
	perf_end
	iid=$(jfield "$W/s.json" instance)
	for _ in $(seq 600); do
		d=$("$B/thaw" --data-dir "$W/data" ps --json | python3 -c 'import json,sys
for r in json.load(sys.stdin):
    if r["instance"] == sys.argv[1]:
        t = r["timings_ms"]
        print(r["state"], t.get("lazy_done"), t["total"], t.get("criu_restore"),
              t.get("gpu_restore"), t.get("lazy_wait"))' "$iid")
		case "$d" in "running None"*) sleep 0.05 ;; *) break ;; esac
	done
	echo "start $i ($v): state, lazy_done ms, start total ms, criu_restore, gpu_restore, lazy_wait: $d" | tee -a "$2"
	grep -E "lazy-pages: (done|failed)" "$W/data/instances/$iid/lazy-pages.log" 2>/dev/null | tail -n 1 | tee -a "$2"
	# LAZY_LOGS=1: each start's logs (CRIU's restore.log, runc's, the daemon's)
	# kept under OUTDIR/restore-logs/, to see where a restore's time goes.
	if [ "${LAZY_LOGS:-0}" = 1 ]; then
		local keep="$OUTDIR/restore-logs/$name"
		keep_logs "$iid" "$keep"
		cp "$W/s.err" "$keep/thaw-start.log"
		keep_smaps "$W/s.json" "$keep"
	fi
	"$B/thaw" --data-dir "$W/data" stop "$iid" >/dev/null
done
done
}
# keep_smaps START.json DIR: the started process's memory map as it is now
# (smaps_rollup, and its 20 largest mappings with their huge-page lines), to
# tell whether its memory came back in huge pages.
keep_smaps() {
	local pid
	pid=$(jfield "$1" pid)
	[ "$pid" -gt 0 ] 2>/dev/null || return 0
	cat "/proc/$pid/smaps_rollup" >"$2/smaps_rollup.txt" 2>&1
	python3 - "$pid" >"$2/smaps_top.txt" 2>&1 <<'PY'
import sys
maps, cur = [], None
for line in open("/proc/%s/smaps" % sys.argv[1]):
    f = line.split()
    if "-" in f[0] and not f[0].endswith(":"):
        cur = {"head": line.strip()}; maps.append(cur)
    elif f[0].endswith(":") and cur is not None:
        cur[f[0][:-1]] = " ".join(f[1:])
maps.sort(key=lambda m: -int(m.get("Rss", "0 kB").split()[0]))
for m in maps[:20]:
    print(m["head"])
    print("   ", {k: m.get(k) for k in ("Rss", "AnonHugePages", "THPeligible", "VmFlags")})
PY
}
lazy_done thaw "$OUTDIR/lazy_done.txt"
# LAZY_LOGS=1: one eager `thaw start` too, its memory map kept as the lazy ones'.
if [ "${LAZY_LOGS:-0}" = 1 ]; then
	keep="$OUTDIR/restore-logs/eager"
	mkdir -p "$keep"
	perf_begin eager
	THAW_LOG=info THAW_RAM_TIER="$TIER" "$B/thaw" --data-dir "$W/data" start --eager "$SNAP" >"$W/s.json" 2>"$W/s.err"
	rc=$?
	cp "$W/s.err" "$keep/thaw-start.log"
	perf_end
	if [ $rc = 0 ]; then
		keep_smaps "$W/s.json" "$keep"
		cp "$W/s.json" "$keep/start.json"
		"$B/thaw" --data-dir "$W/data" stop "$(jfield "$W/s.json" instance)" >/dev/null
	else
		echo "thaw start --eager: $(cat "$W/s.err")"
	fi
fi
[ "${LAZY_CRIU:-1}" = 1 ] && lazy_done criu "$OUTDIR/lazy_done-criu.txt"
exit $bad
