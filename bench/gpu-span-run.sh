#!/usr/bin/env bash
# gpu-span-run.sh — one process spanning 2 GPUs (bench/functions/gpu_span.json:
# gpu_big.py holding 16 GiB dealt to GPUs 0 and 1, "gpus": 2): its cold boot
# to the first answer, then a snapshot and a start through thaw that must
# answer as the cold process did ("match": true, the same tensors, both GPUs)
# and be a restore.  Prints "figure:" lines: the cold boot, the start to its
# first answer, the start's phases (gpu_memory_copy: libthaw-cuda's copy back
# of both GPUs at once), and the bytes saved per GPU.  Exits 77 (skip) with
# fewer than 2 GPUs.  Each start runs with THAW_LOG=info: its lines on thawd's
# fill ("thaw filled", one "thaw filled GPU N" per GPU, the start's wait for
# it) and on the driver's restore ("restored and unlocked") go to
# OUTDIR/fills.txt, and each GPU's fill speed is a "figure:" line.
# Usage: bench/gpu-span-run.sh WORKDIR [OUTDIR] (THAW_BUILD, THAW_ROOT set by
# gpu-run.sh; OUTDIR defaults to $THAW_FIGURES/gpu-span, else WORKDIR)
set -u
W=${1:-/var/tmp/thaw-gpu-span}
OUTDIR=${2:-${THAW_FIGURES:+$THAW_FIGURES/gpu-span}}
OUTDIR=${OUTDIR:-$W}
THAW=${THAW_BUILD:-build}/thaw
ROOT=${THAW_ROOT:-$PWD}
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -lt 2 ]; then
	echo "skipped: $n GPU(s) here; the function spans 2"
	exit 77
fi
rm -rf "$W" && mkdir -p "$W" && chmod 711 "$W" && mkdir -p "$OUTDIR" || exit 1
: >"$OUTDIR/fills.txt"
PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
sed -e "s|@THAW_ROOT@|$ROOT|g" -e "s|/opt/torch/.venv/bin|$PYBIN|" \
	"$ROOT/bench/functions/gpu_span.json" >"$W/spec.json"
check() { # URL: the answer's fields that must not change ("ms" does)
	curl -sf -X POST -H 'Content-Type: application/json' -d '{}' "$1/check" |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["match"], j["tensors"], j["gpus"])'
}
port=$((21000 + $$ % 20000))
c0=$(date +%s%N)
(cd "$ROOT/bench/functions" && exec setsid python3 gpu_big.py --port $port --gib 16 --gpus 2) &
ref=$!
for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.25; done
cold=$(check "http://127.0.0.1:$port")
echo "figure: gpu_span cold_boot_to_first_answer_ms $((($(date +%s%N) - c0) / 1000000))"
kill -9 -- "-$ref" 2>/dev/null
wait "$ref" 2>/dev/null
echo "cold: $cold"
"$THAW" --data-dir "$W/data" snapshot --id gpu-span "$W/spec.json" >"$W/snap.json" 2>"$W/snap.err" || {
	echo "snapshot failed:"; tail -n 20 "$W/snap.err"; exit 1; }
echo "snapshot: $(head -c 4000 "$W/snap.json")"
snap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$W/snap.json")
for round in 1 2; do
	s0=$(date +%s%N)
	THAW_LOG=info "$THAW" --data-dir "$W/data" start "$snap" >"$W/start.json" 2>"$W/start.err" || {
		echo "start failed:"; tail -n 20 "$W/start.err"; exit 1; }
	bash "$ROOT/bench/fill-lines.sh" gpu_span "round $round" "$W/start.err" "$OUTDIR/fills.txt"
	ep=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$W/start.json")
	iid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["instance"])' "$W/start.json")
	warm=$(check "http://$ep")
	echo "figure: gpu_span start_to_first_answer_ms $((($(date +%s%N) - s0) / 1000000)) (round $round)"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("figure: gpu_span start restored=%s %s" % (j.get("restored"), json.dumps(j.get("timings_ms"))))' "$W/start.json"
	restored=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("restored"))' "$W/start.json")
	"$THAW" --data-dir "$W/data" stop "$iid" >/dev/null 2>&1
	echo "restored: $warm"
	[ "$cold" = "$warm" ] || { echo "the restored function answered otherwise"; cat "$W/start.json"; exit 1; }
	[ "$restored" = True ] || { echo "the start booted cold"; cat "$W/start.json"; exit 1; }
done
echo "the function spanning 2 GPUs restored and answered like the cold process (thaw start)"

# The same through thawd, as a gateway starts it: thawd's contexts are made
# and the RAM tier's file pinned once for all its starts (a `thaw start` is
# a process of its own that makes and pins them every time).  A snapshot of
# its own, then SPAN_THAWD_ROUNDS starts (default 3) one at a time; the
# first pins.
B=${THAW_BUILD:-build} TIER=$(mktemp -d /dev/shm/gpu-span-tier-XXXXXX)
W=$W/thawd
mkdir -p "$W"
ID=gpu-span INFER='POST /check {}' EXPECT='"match": true'
. "$ROOT/bench/lib/thawd.sh"
start_thawd 0 || exit 1
put_function gpu-span "$W/../spec.json" "$W/spec.json" standby=0 &&
	snapshot_function gpu-span "$W/snap.json" || exit 1
for round in $(seq "${SPAN_THAWD_ROUNDS:-3}"); do
	s0=$(date +%s%N)
	code=$(curl -s -o "$W/start.json" -w '%{http_code}' -X POST "$URL/functions/gpu-span/start")
	[ "$code" = 201 ] || { echo "start through thawd: $code $(head -c 400 "$W/start.json")"; exit 1; }
	ep=$(jfield "$W/start.json" endpoint)
	warm=$(check "http://$ep")
	echo "figure: gpu_span thawd_start_to_first_answer_ms $((($(date +%s%N) - s0) / 1000000)) (thawd round $round)"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("figure: gpu_span thawd start restored=%s %s" % (j.get("restored"), json.dumps(j.get("timings_ms"))))' "$W/start.json"
	restored=$(jfield "$W/start.json" restored)
	curl -s -o /dev/null -X DELETE "$URL/instances/$(jfield "$W/start.json" instance)"
	[ "$cold" = "$warm" ] || { echo "the restored function answered otherwise"; exit 1; }
	[ "$restored" = True ] || { echo "the start booted cold"; exit 1; }
done
# thawd's own log has its fill lines for each start.
bash "$ROOT/bench/fill-lines.sh" gpu_span "thawd" "$OUTDIR/thawd.log" "$OUTDIR/fills.txt"
echo "the function spanning 2 GPUs restored and answered like the cold process (thawd)"
