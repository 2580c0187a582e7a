#!/usr/bin/env bash
# gpumem-run.sh — GPU starts with libthaw-cuda carrying the device memory
# ("gpu_memory": "thaw", the default) against the CUDA driver carrying it
# ("gpu_memory": "driver"): the same functions, the same thawd, the same run.
# Run on the GPU machine (scripts/gpu-run.sh), as root:
#
#   bench/gpumem-run.sh OUTDIR TOKENS [PART...]
#
# TOKENS: the tokens the GPU example's cold process generated.  PARTs (all
# by default, or $GPUMEM_PARTS): example (the GPU example, $THAW_GPU_EXAMPLE: 5 starts one at
# a time ($GPUMEM_REPEAT), then a burst of 8, in each mode), big (bench/functions/gpu_big.py
# holding 16 GiB, default allocator: 3 starts one at a time in each mode),
# expandable (gpu_big with 4 GiB, expandable segments and a thread
# launching matmuls throughout: 3 starts, thaw), userns (the GPU example and
# gpu_big with 16 GiB, each snapshotted in a user namespace ("sandbox":
# {"userns": true}) and without, started in turn in the same thawd: 5 and
# 3 starts one at a time each), big-thaw (big's thaw half alone: what
# scripts/gpu-run.sh runs with THAW_GPU_VERIFY=0 and without, to weigh the
# fill's checking in a start).  Every start must answer
# as the cold process did (the tokens; "match": true).  Each scenario's
# thaw-bench table goes to OUTDIR/<name>.txt; the snapshot jobs (their
# driver_checkpoint and gpu_memory_save timings) to OUTDIR/snapshot-<fn>.json;
# the RAM tier is a huge-page tmpfs unless THAW_TIER_HUGE=0;
# "figure:" lines summarise.  Exit 0 when every start was correct.
set -u
[ $# -ge 2 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
OUTDIR=$1 TOKENS=$2
shift 2
PARTS=${*:-${GPUMEM_PARTS:-big example expandable}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
BENCH=$B/bench/thaw-bench
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/gpumem-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/gpumem-run-tier-XXXXXX)
# Searchable (not readable) by others: a function in a user namespace runs as
# an unprivileged host uid, which must reach its root below the data
# directory; thawd refuses to open the operator's directories itself.
chmod 711 "$W" "$TIER"
ID=none INFER="" EXPECT=""
. "$ROOT/bench/lib/thawd.sh"
# A huge-page tier (thawd's own default root is one; this one is too): the
# copy back pins the tier's pages, 2 MiB at a time instead of 4 KiB.
export THAW_TIER_HUGE=${THAW_TIER_HUGE:-1}
trap 'bench_cleanup_tier' EXIT
bench_cleanup_tier() {
	stop_thawd
	for r in "$W"/data/instances/*.json; do
		[ -f "$r" ] && "$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
	mountpoint -q "$TIER" && umount "$TIER"
	# A user namespace's staging mounts (common/host_stage.h) are read-only
	# and live as long as the mount namespace: gone with the work directory.
	findmnt -rn -o TARGET | grep "^$W/" | sort -r | xargs -r -n1 umount -l 2>/dev/null
	rm -rf "$W" "$TIER"
}
start_thawd 0 || exit 1

PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
sed -e "s|@THAW_ROOT@|$ROOT|g" -e "s|/opt/torch/.venv/bin|$PYBIN|" \
	"$ROOT/bench/functions/gpu_big.json" >"$W/gpu_big.json"

# figures FN: the snapshot's split of the CUDA checkpoint, and each scenario's rows.
snap_figures() {
	local f=$OUTDIR/snapshot-$1.json
	echo "figure: gpumem $1 snapshot driver_checkpoint_ms $(jfield "$f" job result timings_ms driver_checkpoint)" \
		"gpu_memory_save_ms $(jfield "$f" job result timings_ms gpu_memory_save)" \
		"criu_dump_ms $(jfield "$f" job result timings_ms criu_dump)" \
		"total_ms $(jfield "$f" job result timings_ms total)"
}

# keep_criu_logs NAME: one more start, its CRIU and runc logs kept in
# OUTDIR/criu-NAME (where a start's criu_restore goes), then stopped.
keep_criu_logs() {
	local r=$W/keep.json iid
	curl -s -X POST "$URL/functions/$ID/start" >"$r"
	iid=$(jfield "$r" instance) || { echo "keep_criu_logs: no instance: $(cat "$r")"; return 0; }
	cp -r "$W/data/instances/$iid/criu" "$OUTDIR/criu-$1" 2>/dev/null
	curl -s -X DELETE "$URL/instances/$iid" >/dev/null
}

# one FN SPEC MODE [KEY=JSON...]: register, snapshot; ID set.
one() {
	local fn=$1 spec=$2 mode=$3
	shift 3
	ID=$fn
	put_function "$fn" "$spec" "$W/$fn.json" "gpu_memory=\"$mode\"" "$@" || { bad=1; return 1; }
	snapshot_function "$fn" "$OUTDIR/snapshot-$fn.json" || { bad=1; return 1; }
	snap_figures "$fn"
}

# starts FN SPEC MODE REPEAT [KEY=JSON...]: FN registered and snapshotted
# (one), then a priming start and REPEAT starts one at a time.
starts() {
	local fn=$1 spec=$2 mode=$3 repeat=$4
	shift 4
	one "$fn" "$spec" "$mode" "$@" || return 1
	run "$fn-prime" --burst 1
	run "$fn-seq" --burst 1 --repeat "$repeat"
}

# drop FN: its snapshot goes (store and tier), for the next one's room.
drop() {
	curl -s -X DELETE "$URL/functions/$1" >/dev/null
	"$B/thaw" store --store "$W/data/store" gc >/dev/null 2>&1 || true
}

EXAMPLE_INFER='POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}'
EXAMPLE_EXPECT="\"tokens\": $TOKENS"

case " $PARTS " in *" example "*)
	INFER=$EXAMPLE_INFER EXPECT=$EXAMPLE_EXPECT
	for mode in thaw driver; do
		starts "example-$mode" "$THAW_GPU_EXAMPLE" "$mode" "${GPUMEM_REPEAT:-5}" || continue
		keep_criu_logs "example-$mode"
		run "example-$mode-burst" --burst 8
	done
esac
case " $PARTS " in *" big "*)
	INFER='POST /check {}' EXPECT='"match": true'
	for mode in thaw driver; do
		starts "big-$mode" "$W/gpu_big.json" "$mode" 3 || continue
		drop "big-$mode"
	done
esac
case " $PARTS " in *" big-thaw "*)
	INFER='POST /check {}' EXPECT='"match": true'
	starts big-thaw "$W/gpu_big.json" thaw 5
esac
case " $PARTS " in *" expandable "*)
	INFER='POST /check {}' EXPECT='"match": true'
	cmd="[\"python3\", \"$ROOT/bench/functions/gpu_big.py\", \"--port\", \"8000\", \"--gib\", \"4\", \"--worker\"]"
	env="{\"PATH\": \"$PYBIN:/usr/bin:/bin\", \"PYTHONUNBUFFERED\": \"1\", \"PYTORCH_CUDA_ALLOC_CONF\": \"expandable_segments:True\"}"
	starts expandable-thaw "$W/gpu_big.json" thaw 3 "command=$cmd" "env=$env"
esac
case " $PARTS " in *" userns "*)
	# What a function in a user namespace is given of /opt (staged where it
	# has submounts): said here, so that a function that cannot read its
	# files there shows why.
	findmnt -R /opt -o TARGET,SOURCE,FSTYPE,OPTIONS | head -n 12
	# safetensors writes the weights 0600: readable by host root alone,
	# which a function in a user namespace is not.  The example's weights
	# are no secret: readable by all (gpu_llm.py now saves them so).
	chmod -R a+rX "${GPU_LLM_MODEL_DIR:-/opt/thaw-gpu-model/default}"
	ls -la "${GPU_LLM_MODEL_DIR:-/opt/thaw-gpu-model/default}" 2>&1 | head -n 12
	for ns in true false; do
		INFER=$EXAMPLE_INFER EXPECT=$EXAMPLE_EXPECT
		starts "example-userns-$ns" "$THAW_GPU_EXAMPLE" thaw "${GPUMEM_REPEAT:-5}" \
			"sandbox={\"userns\": $ns}" && drop "example-userns-$ns"
		# The stage's view of the model, where the function failed to read it.
		[ "$ns" = true ] && ls -la "$W/data/stage${GPU_LLM_MODEL_DIR:-/opt/thaw-gpu-model/default}" 2>&1 | head -n 12
		INFER='POST /check {}' EXPECT='"match": true'
		starts "big-userns-$ns" "$W/gpu_big.json" thaw 3 "sandbox={\"userns\": $ns}" &&
			drop "big-userns-$ns"
	done
esac
# Every start's phases, as thawd logged them.
grep -h "instance .* of .*: 127.0.0.1" "$OUTDIR/thawd.log" | tail -n 60 >"$OUTDIR/starts.txt"
[ "$bad" = 0 ] && echo "gpumem-run: every start was correct" || echo "gpumem-run: failures"
[ "$bad" = 0 ]
