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
# --lazy on the same data, tier and port and runs the same lazy.  Then, with
# `thaw start --lazy` on that data, the time until each daemon had served
# every page (timings_ms.lazy_done), REPEAT times.  Writes OUTDIR/{eager,lazy}
# .txt/.json and OUTDIR/lazy_done.txt.  Exit 0 when every start was correct.
#
# The baseline (issue 7): the same function snapshotted again as ID-full with
# "elide_zero": false, its image written out by `thaw materialize` into a
# plain directory, and `runc restore` (+ CUDA restore and unlock) of that
# unelided image timed by thaw-bench's --baseline-plain in the eager run, in
# the same invocation (PLAIN_RUNS, default 2; 0: none).  OUTDIR/elision.txt
# holds the image bytes before and after elision.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,17p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 REPEAT=${6:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
BENCH=$B/bench/thaw-bench
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/lazy-eager-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/lazy-eager-run-tier-XXXXXX)
PIDFILE=$W/thawd.pid
bad=0

stop_thawd() {
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	rm -f "$PIDFILE"
}
cleanup() {
	local r
	stop_thawd
	for r in "$W"/data/instances/*.json; do
		[ -f "$r" ] && "$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT

start_thawd() { # PORT MODE-FLAG
	rm -f "$W/port"
	"$B/thawd" --listen "127.0.0.1:$1" --port-file "$W/port" --data-dir "$W/data" \
		--ram-tier "$TIER" "$2" >>"$OUTDIR/thawd.log" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	for _ in $(seq 300); do [ -s "$W/port" ] && break; sleep 0.1; done
	[ -s "$W/port" ] || { echo "thawd did not start (see thawd.log)"; return 1; }
}
start_thawd 0 --no-lazy || exit 1
PORT=$(cat "$W/port")
URL=http://127.0.0.1:$PORT

python3 - "$SPEC" "$W/spec.json" <<'PY' || exit 1
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
j = json.load(open(src))
j.pop("lazy", None)
if "bundle" not in j or "cwd" in j:
    j["cwd"] = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(src)),
                                             j.get("cwd", ".")))
json.dump(j, open(dst, "w"))
PY
code=$(curl -s -o "$W/put.json" -w '%{http_code}' -X PUT "$URL/functions/$ID" -d @"$W/spec.json")
[ "$code" = 201 ] || [ "$code" = 200 ] || { echo "PUT: $code $(cat "$W/put.json")"; exit 1; }
echo "snapshot of $ID..."
curl -s -m 1200 -X POST "$URL/functions/$ID/snapshot?wait=1" >"$OUTDIR/snapshot.json"
SNAP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["result"]["snapshot"])' \
	"$OUTDIR/snapshot.json" 2>/dev/null)
[ -n "$SNAP" ] || { echo "snapshot failed: $(cat "$OUTDIR/snapshot.json")"; exit 1; }
echo "snapshot $SNAP"

run() { # name args...
	local name=$1
	shift
	echo "---- $name: thaw-bench $*"
	"$BENCH" --url "$URL" --function "$ID" --infer "$INFER" --expect "$EXPECT" \
		--json "$OUTDIR/$name.json" "$@" 2>&1 | tee "$OUTDIR/$name.txt"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["ok"] == j["attempts"] > 0 else 1)' \
		"$OUTDIR/$name.json" 2>/dev/null || { echo "$name: not every start was correct"; bad=1; }
}
PLAIN_RUNS=${PLAIN_RUNS:-2}
BASELINE=()
if [ "$PLAIN_RUNS" -gt 0 ]; then
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["elide_zero"]=False; json.dump(j, open(sys.argv[2], "w"))' \
		"$W/spec.json" "$W/spec-full.json"
	code=$(curl -s -o "$W/put.json" -w '%{http_code}' -X PUT "$URL/functions/$ID-full" -d @"$W/spec-full.json")
	[ "$code" = 201 ] || [ "$code" = 200 ] || { echo "PUT $ID-full: $code $(cat "$W/put.json")"; exit 1; }
	echo "snapshot of $ID-full (no elision), for the plain-restore baseline..."
	curl -s -m 1200 -X POST "$URL/functions/$ID-full/snapshot?wait=1" >"$OUTDIR/snapshot-full.json"
	FULL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["result"]["snapshot"])' \
		"$OUTDIR/snapshot-full.json" 2>/dev/null)
	[ -n "$FULL" ] || { echo "snapshot $ID-full failed: $(cat "$OUTDIR/snapshot-full.json")"; exit 1; }
	"$B/thaw" --data-dir "$W/data" materialize "$FULL" --out "$TIER/plain-full" >/dev/null ||
		{ echo "thaw materialize $FULL failed"; exit 1; }
	BASELINE=(--baseline-plain "$TIER/plain-full" --baseline-runs "$PLAIN_RUNS" --runc-root "$W/runc")
fi
python3 - "$W/data/store/manifests" "$SNAP" "${FULL:-}" <<'PY' | tee "$OUTDIR/elision.txt"
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
start_thawd "$PORT" --lazy || exit 1
run lazy --burst 1 --repeat "$REPEAT"
stop_thawd

# lazy_done: thaw start --lazy, then wait for the daemon's word.
: >"$OUTDIR/lazy_done.txt"
for i in $(seq 1 "$REPEAT"); do
	THAW_RAM_TIER=$TIER "$B/thaw" --data-dir "$W/data" start --lazy "$SNAP" >"$W/s.json" 2>"$W/s.err" ||
		{ echo "thaw start --lazy: $(cat "$W/s.err")"; bad=1; continue; }
	iid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["instance"])' "$W/s.json")
	for _ in $(seq 600); do
		d=$("$B/thaw" --data-dir "$W/data" ps --json | python3 -c 'import json,sys
for r in json.load(sys.stdin):
    if r["instance"] == sys.argv[1]:
        print(r["state"], r["timings_ms"].get("lazy_done"), r["timings_ms"]["total"])' "$iid")
		case "$d" in "running None"*) sleep 0.05 ;; *) break ;; esac
	done
	echo "start $i: state, lazy_done ms, start total ms: $d" | tee -a "$OUTDIR/lazy_done.txt"
	"$B/thaw" --data-dir "$W/data" stop "$iid" >/dev/null
done
exit $bad
