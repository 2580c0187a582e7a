#!/usr/bin/env bash
# gpu-tp-run.sh — the 2-process tensor-parallel function (bench/functions/
# gpu_tp.json, PyTorch distributed over NCCL, "gpus": 2): snapshot, then a
# start that must answer like the cold process.  Exits 77 (skip) with fewer
# than 2 GPUs.  When the driver refuses the checkpoint of a process (NCCL's
# inter-process memory, for one), the snapshot fails with the driver's words
# and version: this prints them for bench/RESULTS.md.
# Usage: bench/gpu-tp-run.sh WORKDIR (THAW_BUILD, THAW_ROOT set by gpu-run.sh)
# GPU_TP_ENV='{"NCCL_P2P_DISABLE": "1"}' adds to the spec's environment (and
# the cold process's): which NCCL transports the driver lets through.
# GPU_TP_SPEC='{"shm_bytes": "512M"}' adds keys to the spec itself.
# The start runs with THAW_LOG=info: its lines on thawd's fill ("thaw
# filled", one "thaw filled GPU N" per GPU, the start's wait for it) and on
# the driver's restore ("restored and unlocked") go to OUTDIR/fills.txt
# (OUTDIR: the second argument, else $THAW_FIGURES/<WORKDIR's name>, else
# WORKDIR), and each GPU's fill speed is a "figure:" line.
# TP_TRACE=1: the function is snapshotted with THAW_GPUMEM_TRACE=1 (each
# library writes its steps to <pid>.trace in its out directory, kept in
# OUTDIR when a start hangs).
# TP_AGAIN=1: after the start, four more of the same snapshot from the RAM
# tier, alternately filled by thawd (the default) and copied by each rank's
# library (THAW_GPU_PREFILL=0), logged at debug level.
# A step past its deadline (TP_STEP_S) has its threads' stacks written to
# OUTDIR/<step>.stacks before it is killed.
set -u
W=${1:-/var/tmp/thaw-gpu-tp}
OUTDIR=${2:-${THAW_FIGURES:+$THAW_FIGURES/$(basename "$W")}}
OUTDIR=${OUTDIR:-$W}
THAW=${THAW_BUILD:-build}/thaw
ROOT=${THAW_ROOT:-$PWD}
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -lt 2 ]; then
	echo "skipped: $n GPU(s) here; the tensor-parallel function needs 2"
	exit 77
fi
rm -rf "$W" && mkdir -p "$W" "$OUTDIR" || exit 1
PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
sed -e "s|@THAW_ROOT@|$ROOT|g" -e "s|/opt/torch/.venv/bin|$PYBIN|" \
	"$ROOT/bench/functions/gpu_tp.json" >"$W/spec.json"
if [ -n "${GPU_TP_ENV:-}" ]; then
	python3 - "$W/spec.json" "$GPU_TP_ENV" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1])); s["env"].update(json.loads(sys.argv[2]))
json.dump(s, open(sys.argv[1], "w"))
PY
	for kv in $(python3 -c 'import json,sys; print(" ".join("%s=%s" % i for i in json.loads(sys.argv[1]).items()))' "$GPU_TP_ENV"); do
		export "${kv?}"
	done
	echo "environment added: $GPU_TP_ENV"
fi
if [ "${TP_TRACE:-0}" = 1 ]; then
	python3 - "$W/spec.json" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1])); s["env"]["THAW_GPUMEM_TRACE"] = "1"
json.dump(s, open(sys.argv[1], "w"))
PY
fi
if [ -n "${GPU_TP_SPEC:-}" ]; then
	python3 - "$W/spec.json" "$GPU_TP_SPEC" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1])); s.update(json.loads(sys.argv[2]))
json.dump(s, open(sys.argv[1], "w"))
PY
	echo "spec keys added: $GPU_TP_SPEC"
fi
# The cold process's answer, outside thaw.
port=$((21000 + $$ % 20000))
c0=$(date +%s%N)
(cd "$ROOT/bench/functions" && MASTER_PORT=$((port + 1)) exec setsid python3 gpu_tp.py --port $port) &
ref=$!
for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.25; done
cold=$(curl -sf "http://127.0.0.1:$port/infer")
echo "figure: gpu_tp cold_boot_to_first_answer_ms $((($(date +%s%N) - c0) / 1000000))"
kill -9 -- "-$ref" 2>/dev/null
wait "$ref" 2>/dev/null
echo "cold: $cold"
# The stacks of pid's threads and of the function's processes (the
# kernel's, and gdb's where the host has it) into file.
dump_stacks() {
	local pid=$1 file=$2 t q
	{
		echo "== thaw $pid"
		for t in /proc/"$pid"/task/*; do
			echo "-- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
			cat "$t/stack" 2>/dev/null
		done
		command -v gdb >/dev/null && timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt" 2>&1
		# The function's processes: those with libthaw-cuda's control
		# thread (the ranks; the launcher's name differs from theirs).
		for q in $(grep -lx thaw-gpumem /proc/[0-9]*/task/*/comm 2>/dev/null | cut -d/ -f3 | sort -u); do
			echo "== rank $q: $(tr '\0' ' ' </proc/"$q"/cmdline 2>/dev/null | cut -c1-120)"
			for t in /proc/"$q"/task/*; do
				echo "-- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null) syscall=$(cat "$t/syscall" 2>/dev/null | cut -d' ' -f1-3)"
				[ "$(cat "$t/comm" 2>/dev/null)" = thaw-gpumem ] && cat "$t/stack" 2>/dev/null
			done
		done
	} >"$file" 2>&1
}
# Run a step with a deadline of its own (TP_STEP_S, default 120 s), its log
# kept in OUTDIR: a snapshot or start that hangs says where.  Usage:
# watched NAME OUT ERR CMD...
watched() {
	local name=$1 out=$2 err=$3 pid rc waited=0
	shift 3
	"$@" >"$out" 2>"$err" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$waited" -ge "${TP_STEP_S:-120}" ]; then
			echo "$name: still running after ${TP_STEP_S:-120} s: stacks in $OUTDIR/$name.stacks"
			dump_stacks "$pid" "$OUTDIR/$name.stacks"
			cp "$err" "$OUTDIR/$name.err" 2>/dev/null
			for t in "$W"/data/instances/*/gpu-out/*.trace; do
				[ -f "$t" ] && cp "$t" "$OUTDIR/$name-$(basename "$(dirname "$(dirname "$t")")")-$(basename "$t")"
			done
			kill -9 "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			return 124
		fi
		sleep 1
		waited=$((waited + 1))
	done
	wait "$pid"
	rc=$?
	return $rc
}
watched snapshot "$W/snap.json" "$W/snap.err" env THAW_LOG=info "$THAW" --data-dir "$W/data" \
	snapshot --id gpu-tp "$W/spec.json" || {
	echo "snapshot of the tensor-parallel function failed (driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)):"
	cp "$W/snap.err" "$OUTDIR/snap.err" 2>/dev/null
	tail -n 40 "$W/snap.err"
	echo "thaw doctor on that data directory:"
	"$THAW" --data-dir "$W/data" doctor 2>&1 | grep -E "gpu-span|gpu-move"
	exit 1
}
snap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$W/snap.json")
s0=$(date +%s%N)
watched start "$W/start.json" "$W/start.err" env THAW_LOG=info "$THAW" --data-dir "$W/data" \
	start "$snap" || {
	echo "start failed or hung:"; cp "$W/start.err" "$OUTDIR/start.err" 2>/dev/null
	tail -n 40 "$W/start.err"; exit 1; }
: >"$OUTDIR/fills.txt"
bash "$ROOT/bench/fill-lines.sh" gpu_tp start "$W/start.err" "$OUTDIR/fills.txt"
cat "$W/start.json"
# A start that fell back to a cold boot answers like the cold process too:
# only a restore counts.
restored=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("restored"))' "$W/start.json")
echo "figure: gpu_tp restored $restored"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("figure: gpu_tp snapshot_ms %s" % json.dumps(j.get("timings_ms")))' "$W/snap.json" 2>/dev/null
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("figure: gpu_tp start_ms %s" % json.dumps(j.get("timings_ms")))' "$W/start.json"
ep=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$W/start.json")
iid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["instance"])' "$W/start.json")
warm=$(curl -sf "http://$ep/infer")
echo "figure: gpu_tp start_to_first_answer_ms $((($(date +%s%N) - s0) / 1000000))"
echo "restored: $warm"
"$THAW" --data-dir "$W/data" stop "$iid" >/dev/null 2>&1
[ -n "$cold" ] && [ "$cold" = "$warm" ] || {
	echo "the restored function answered otherwise: '$warm' (cold: '$cold')"
	find "$W/data" -name '*.log' -newer "$W/snap.json" -exec tail -n 30 {} + 2>/dev/null | tail -n 80
	exit 1
}
[ "$restored" = True ] || { echo "the start booted the function cold instead of restoring it"; exit 1; }
echo "the 2-GPU tensor-parallel function restored and answered like the cold process"
[ "${TP_AGAIN:-0}" = 1 ] || exit 0
# again NAME [VAR=VALUE...]: the same snapshot started again (from the RAM
# tier now), with thawd's environment added, its log at debug level; its
# figures named gpu_tp_NAME, its answer the cold processes'.
again() {
	local name=$1 s0 ep iid warm
	shift
	s0=$(date +%s%N)
	watched "start-$name" "$W/start-$name.json" "$W/start-$name.err" env THAW_LOG=debug "$@" \
		"$THAW" --data-dir "$W/data" start "$snap" || {
		echo "the start $name ($*) failed or hung:"
		cp "$W/start-$name.err" "$OUTDIR/start-$name.err" 2>/dev/null
		grep -E "fill|restored and unlocked|copied back" "$W/start-$name.err" | tail -n 40
		return 1
	}
	cp "$W/start-$name.err" "$OUTDIR/start-$name.err"
	bash "$ROOT/bench/fill-lines.sh" "gpu_tp_$name" "start $name" "$W/start-$name.err" "$OUTDIR/fills.txt"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("figure: gpu_tp_%s start_ms %s" % (sys.argv[2], json.dumps(j.get("timings_ms"))))' "$W/start-$name.json" "$name"
	ep=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$W/start-$name.json")
	iid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["instance"])' "$W/start-$name.json")
	warm=$(curl -sf "http://$ep/infer")
	echo "figure: gpu_tp_$name start_to_first_answer_ms $((($(date +%s%N) - s0) / 1000000))"
	"$THAW" --data-dir "$W/data" stop "$iid" >/dev/null 2>&1
	[ "$cold" = "$warm" ] || { echo "the start $name answered otherwise: '$warm' (cold: '$cold')"; return 1; }
	echo "the start $name ($*) restored and answered like the cold processes"
}
# From the RAM tier: thawd filling each rank (the default), then each
# rank's library copying its own (THAW_GPU_PREFILL=0), twice each.
bad=0
for round in 1 2; do
	again "filled$round" THAW_GPU_PREFILL=1 || bad=1
	again "copied$round" THAW_GPU_PREFILL=0 || bad=1
done
exit $bad
