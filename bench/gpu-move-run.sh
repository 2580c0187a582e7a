#!/usr/bin/env bash
# gpu-move-run.sh — several GPUs (a host with 2 or more): the GPU example
# snapshotted once, then started on each GPU by request (?gpu=N: one of them
# is another GPU than the one it was snapshotted on: a restore with GPU
# pairs), each answering as the cold process did; then a burst of BURST starts
# placed by thawd (spread over the GPUs) against the same burst all on GPU 0,
# p50/p99 of the start's answer for each.
#
#   bench/gpu-move-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [BURST]
#
# OUTDIR/summary.txt holds the figures.  Exit 0 when every start answered
# right, 77 on a host with one GPU.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,13p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 BURST=${6:-8}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 2 ] || { echo "skipped: $ngpu GPU(s) here; this needs 2"; exit 77; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/thaw-gpu-move-XXXXXX)
TIER=$W/tier
. "$ROOT/bench/lib/thawd.sh"
S=$OUTDIR/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
method=${INFER%% *} rest=${INFER#* } path=${rest%% *} body=${rest#"$path"}
data=()
[ -n "${body# }" ] && data=(-H 'Content-Type: application/json' -d "${body# }")

# start QUERY OUT: POST …/start?QUERY into OUT.json; its answer time into OUT.ms
start() {
	curl -s -o "$2.json" -w '%{time_total}\n' -X POST "$URL/functions/$ID/start$1" >"$2.ms"
}
# check OUT: the instance of OUT.json answers EXPECT; prints its GPU index
check() {
	local ep
	ep=$(jfield "$1.json" endpoint) || { echo "no instance: $(head -c 300 "$1.json")"; return 1; }
	curl -s -m 120 -X "$method" "http://$ep$path" "${data[@]}" | grep -qF -- "$EXPECT" ||
		{ echo "$(jfield "$1.json" instance): wrong answer"; return 1; }
	python3 -c 'import json,sys; print(",".join(str(g["index"]) for g in json.load(open(sys.argv[1])).get("gpus", [])))' "$1.json"
}
stop_all() {
	local f
	for f in "$W"/b-*.json "$W"/one-*.json; do
		[ -f "$f" ] && curl -s -o /dev/null -X DELETE "$URL/instances/$(jfield "$f" instance)?grace_s=0"
	done
	rm -f "$W"/b-*.json "$W"/one-*.json
}
pct() { # FILES...: p50 and p99 of the answer times (ms)
	cat "$@" | python3 -c 'import sys
v = sorted(float(x) * 1000 for x in sys.stdin.read().split())
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
print(f"p50 {q(0.5):.0f} ms, p99 {q(0.99):.0f} ms, max {v[-1]:.0f} ms (n={len(v)})")'
}

start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
say "host: $ngpu GPUs: $(nvidia-smi -L | tr '\n' ';')"

# 1. on each GPU by request
for g in $(seq 0 $((ngpu - 1))); do
	start "?gpu=$g" "$W/on-$g"
	if got=$(check "$W/on-$g"); then
		say "ok: ?gpu=$g: on GPU $got in $(python3 -c "print(round(float(open('$W/on-$g.ms').read()) * 1000))") ms (gpu_restore $(jfield "$W/on-$g.json" timings_ms gpu_restore) ms), answers as the cold process"
	else
		say "FAIL: ?gpu=$g: $got"
		bad=1
	fi
	curl -s -o /dev/null -X DELETE "$URL/instances/$(jfield "$W/on-$g.json" instance)?grace_s=0"
done
grep -h "gpu: GPU .* -> " "$OUTDIR/thawd.log" | tail -n 2 | sed 's/^/  thawd: /' | tee -a "$S"

# 2. a burst placed by thawd, then the same burst all on GPU 0
for mode in spread one; do
	q=""
	[ $mode = one ] && q="?gpu=0"
	# wait on these only: a bare wait would wait for thawd too
	pids=()
	for i in $(seq "$BURST"); do start "$q" "$W/b-$i" & pids+=($!); done
	wait "${pids[@]}"
	# every instance asked at once: 8 generations one after another took
	# longer than the bursts themselves
	pids=()
	for i in $(seq "$BURST"); do
		(check "$W/b-$i" >"$W/b-$i.gpu" 2>&1 || sed -i "s/^/x /" "$W/b-$i.gpu") &
		pids+=($!)
	done
	wait "${pids[@]}"
	per=$(cat "$W"/b-*.gpu | sort | uniq -c | tr '\n' ' ')
	say "burst of $BURST, $mode: answer $(pct "$W"/b-*.ms); instances per GPU: $per"
	case "$per" in *x*) bad=1 ;; esac
	curl -s "$URL/metrics" | grep '^thaw_gpu_' | sed 's/^/  /' | tee -a "$S"
	stop_all
	rm -f "$W"/b-*.ms "$W"/b-*.gpu
done
exit $bad
