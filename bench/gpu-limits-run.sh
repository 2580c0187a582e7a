#!/usr/bin/env bash
# gpu-limits-run.sh — a GPU function's end and its admission, against a private
# thawd (scripts/gpu-run.sh runs it on the GPU machine with the GPU example):
#
#   bench/gpu-limits-run.sh SPEC.json ID "INFER" EXPECT OUTDIR
#
#   1. a start that answers INFER with EXPECT; then its first process is killed
#      from outside (kill -9): thawd reaps it (GPU state and all) and keeps its
#      record, "exited 137: killed by SIGKILL", how long that took, and its
#      logs; the GPU memory it held is free again;
#   2. thawd again with --gpu-mem-reserve above the GPU's memory: a start
#      answers 503 no_gpu_memory before anything is restored (no record, no
#      container), in how many ms.
# OUTDIR/summary.txt holds the figures.  Exit 0 when each point held.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,15p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/thaw-gpu-limits-XXXXXX)
TIER=$W/tier
. "$ROOT/bench/lib/thawd.sh"
S=$OUTDIR/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1; }
now_ms() { date +%s%3N; }

start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
base_mib=$(gpu_used_mib)

# 1. a start, then kill -9 of its first process
code=$(curl -s -o "$W/start.json" -w '%{http_code}' -X POST "$URL/functions/$ID/start")
if [ "$code" != 201 ]; then
	say "FAIL: start: $code $(head -c 300 "$W/start.json")"
	exit 1
fi
IID=$(jfield "$W/start.json" instance) EP=$(jfield "$W/start.json" endpoint) PID=$(jfield "$W/start.json" pid)
method=${INFER%% *} rest=${INFER#* } path=${rest%% *} body=${rest#"$path"}
data=()
[ -n "${body# }" ] && data=(-H 'Content-Type: application/json' -d "${body# }")
curl -s -m 120 -X "$method" "http://$EP$path" "${data[@]}" >"$W/answer" || true
grep -qF -- "$EXPECT" "$W/answer" && say "ok: instance $IID answers as the cold process did" ||
	{ say "FAIL: $IID answered $(head -c 200 "$W/answer")"; bad=1; }
held_mib=$(gpu_used_mib)
t0=$(now_ms)
kill -9 "$PID"
state=""
for _ in $(seq 200); do
	curl -s "$URL/instances/$IID" >"$W/rec.json"
	state=$(jfield "$W/rec.json" state)
	[ "$state" = exited ] && [ -n "$(jfield "$W/rec.json" ended_ms)" ] && break
	sleep 0.05
done
reap_ms=$(($(now_ms) - t0))
reason=$(jfield "$W/rec.json" reason)
if [ "$state" = exited ] && [ "$reason" = "exited 137: killed by SIGKILL" ]; then
	say "ok: killed from outside: reaped in ${reap_ms} ms; its record says \"$reason\""
else
	say "FAIL: after kill -9: state '$state', reason '$reason' ($reap_ms ms)"
	bad=1
fi
curl -s "$URL/instances/$IID/logs?tail=5" >"$W/logs"
say "ok: its logs stay readable ($(wc -l <"$W/logs") of the last 5 lines)"
sleep 1
say "GPU memory used (MiB): before the start $base_mib, instance running $held_mib, after its reaping $(gpu_used_mib)"

# 2. admission by GPU memory
stop_thawd
start_thawd 0 --gpu-mem-reserve 200G || exit 1
n0=$(ls "$W/data/instances" 2>/dev/null | grep -c '\.json$')
t0=$(now_ms)
code=$(curl -s -o "$W/refused.json" -w '%{http_code}' -X POST "$URL/functions/$ID/start")
ms=$(($(now_ms) - t0))
n1=$(ls "$W/data/instances" 2>/dev/null | grep -c '\.json$')
if [ "$code" = 503 ] && [ "$(jfield "$W/refused.json" error code)" = no_gpu_memory ] && [ "$n0" = "$n1" ]; then
	say "ok: --gpu-mem-reserve 200G: 503 no_gpu_memory in ${ms} ms, nothing restored: $(jfield "$W/refused.json" error message)"
else
	say "FAIL: --gpu-mem-reserve 200G: $code $(head -c 300 "$W/refused.json") (records $n0 -> $n1)"
	bad=1
fi
exit $bad
