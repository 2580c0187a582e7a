#!/usr/bin/env bash
# e2e_restore.sh — real runc + CRIU: snapshot the CPU example function once,
# start 4 instances of it at once, check that each answers exactly as the
# function computes, that they are isolated (state, PID and network
# namespaces), stop them and check that nothing is left; then a broken image
# and a missing criu: clear errors, nothing left.
#
# With --gpu (on the GPU machine; skipped without a GPU): the same with the
# GPU example function (bench/functions/gpu_example.json, weights prepared by
# gpu_llm.py --prepare): 2 instances at once, each generating the same tokens
# (and $E2E_GPU_TOKENS, the tokens a cold process generated, when given),
# CUDA restored into each, then stopped (CUDA locked and checkpointed first).
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
FN_DIR=$ROOT/bench/functions

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU, namespaces)"
command -v runc >/dev/null || skip "no runc"
command -v curl >/dev/null || skip "no curl"
[ -x "$ROOT/.deps/criu-wrapper" ] || [ -n "${THAW_CRIU:-}" ] || skip "no CRIU 4.2 (make deps)"
[ -x "$THAW" ] || { echo "no $THAW (make all)"; exit 1; }
GPU=0
[ "${1:-}" = --gpu ] && GPU=1
if [ $GPU = 1 ]; then
	command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
	GPU_MODEL=${GPU_LLM_MODEL_DIR:-/opt/thaw-gpu-model/default}
	[ -d "$GPU_MODEL" ] || skip "no model in $GPU_MODEL (python3 bench/functions/gpu_llm.py --prepare)"
fi

W=$(mktemp -d /tmp/e2e_restore.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_restore.XXXXXX)
D=$W/data
FN=e2e-r$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((1 << 30))
# The GPU example's image is 4 GB, 3 GB of it not zero.
[ $GPU = 1 ] && export THAW_RAM_TIER_BYTES=$((16 << 30))
unset THAW_DATA_DIR THAW_STORE

. "$ROOT/test/lib/instances.sh"

cleanup() {
	cleanup_instances
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT

# --- GPU: the example LLM, 2 instances ---------------------------------------
gpu_main() {
	local spec=${THAW_GPU_EXAMPLE:-} n=2 i body toks ref=""
	if [ -z "$spec" ]; then
		spec=$W/gpu_example.json
		sed "s|@THAW_ROOT@|$ROOT|g" "$ROOT/bench/functions/gpu_example.json" >"$spec"
	fi
	"$THAW" --data-dir "$D" snapshot --id "$FN" "$spec" >"$W/snap.json" 2>"$W/snap.err" ||
		{ cat "$W/snap.err"; echo "FAIL: thaw snapshot of the GPU example"; exit 1; }
	echo "snapshot: $(cat "$W/snap.json" | tr -d '\n ')"
	SNAP=$(jget "$W/snap.json" snapshot)
	for i in $(seq 1 $n); do
		"$THAW" --data-dir "$D" start "$SNAP" >"$W/start$i.json" 2>"$W/start$i.err" &
		pids[$i]=$!
	done
	for i in $(seq 1 $n); do
		wait "${pids[$i]}" || fail "start $i: $(cat "$W/start$i.err")"
	done
	nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader | sed 's/^/gpu memory: /'
	body='{"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}'
	for i in $(seq 1 $n); do
		[ -s "$W/start$i.json" ] || { echo "FAIL: no instance $i"; exit 1; }
		ID[$i]=$(jget "$W/start$i.json" instance)
		HPID[$i]=$(jget "$W/start$i.json" pid)
		echo "start $i: $(cat "$W/start$i.json" | tr -d '\n ')"
		echo "figure: e2e_restore_gpu start${i}_gpu_restore_ms $(jget "$W/start$i.json" timings_ms gpu_restore)"
		echo "figure: e2e_restore_gpu start${i}_criu_restore_ms $(jget "$W/start$i.json" timings_ms criu_restore)"
		echo "figure: e2e_restore_gpu start${i}_total_ms $(jget "$W/start$i.json" timings_ms total)"
		echo "figure: e2e_restore_gpu start${i}_gpu_memory $(jget "$W/start$i.json" gpu_memory)" \
			"copy_ms $(jget "$W/start$i.json" timings_ms gpu_memory_copy)"
		# libthaw-cuda beside thaw carries the device memory (the default).
		[ "$(jget "$W/start$i.json" gpu_memory)" = thaw ] ||
			fail "instance $i: gpu_memory $(jget "$W/start$i.json" gpu_memory): $(jget "$W/start$i.json" gpu_memory_why)"
		python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' \
			"$(jget "$W/start$i.json" timings_ms gpu_restore)" || fail "instance $i: no CUDA restore timed"
		[ "$(jget "$D/instances/${ID[$i]}.json" cuda_pids | tr -d '[] ')" != "" ] ||
			fail "instance $i: no CUDA process recorded"
		toks=$(curl -sf --max-time 120 -X POST -d "$body" "http://$(jget "$W/start$i.json" endpoint)/generate" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
		echo "instance $i tokens: $toks"
		[ -n "$toks" ] || fail "instance $i: no tokens"
		[ -z "$ref" ] && ref=$toks
		[ "$toks" = "$ref" ] || fail "instance $i generated other tokens than instance 1"
		[ -z "${E2E_GPU_TOKENS:-}" ] || [ "$toks" = "$E2E_GPU_TOKENS" ] ||
			fail "instance $i: tokens differ from the cold process's $E2E_GPU_TOKENS"
	done
	[ "${HPID[1]}" != "${HPID[2]}" ] || fail "two instances share host pid ${HPID[1]}"
	t0=$(date +%s%N)
	stop_instances
	echo "figure: e2e_restore_gpu stop_ms_for_$n $((($(date +%s%N) - t0) / 1000000))"
	check_nothing_left "after stop"
	[ $fails = 0 ] && echo "e2e_restore --gpu: all good" || echo "e2e_restore --gpu: $fails failure(s)"
	[ $fails = 0 ]
	exit
}
[ $GPU = 1 ] && gpu_main

# The function's answers, computed from its own code outside any container
# (same seed, same state size): what every restored instance must answer.
XS="0 1 7 42 1000 123456"
MIB=64
EXPECT=$(cd "$FN_DIR" && THAW_EXAMPLE_MIB=$MIB python3 -c 'import sys
import cpu_example as m
print(" ".join(str(m.infer(int(x))) for x in sys.argv[1:]))' $XS) || { echo "cannot compute the expected answers"; exit 1; }
echo "expected y for x in [$XS]: $EXPECT"

# --- snapshot once ---------------------------------------------------------
cat >"$W/spec.json" <<EOF
{"command": ["python3", "cpu_example.py"], "cwd": "$FN_DIR",
 "env": {"THAW_EXAMPLE_MIB": "$MIB"}, "port": 8000,
 "ready": {"http": "/health", "timeout_s": 60},
 "warmup": [{"method": "GET", "path": "/infer?x=1"}], "gpu": false}
EOF
snapshot_fn "$W/spec.json"

# --- usage errors ----------------------------------------------------------
"$THAW" --data-dir "$D" start >/dev/null 2>&1; [ $? = 2 ] || fail "thaw start without a snapshot should exit 2"
"$THAW" --data-dir "$D" start --help | grep -q "usage: thaw start" || fail "thaw start --help"
"$THAW" --data-dir "$D" stop "$FN-nosuch" >/dev/null 2>"$W/err"; rc=$?
[ $rc = 1 ] && grep -q "no instance $FN-nosuch" "$W/err" || fail "stop of an unknown instance: rc $rc, $(cat "$W/err")"
"$THAW" --data-dir "$D" start "$FN-nosuch" >/dev/null 2>"$W/err"; rc=$?
[ $rc = 1 ] && grep -q "no snapshot" "$W/err" || fail "start of an unknown snapshot: rc $rc, $(cat "$W/err")"

# --- 4 instances at once ---------------------------------------------------
N=4
start_instances $N "$SNAP"
for i in $(seq 1 $N); do
	SHIM[$i]=$(jget "$D/instances/${ID[$i]}.json" shim_pid)
	[ "$(jget "$W/start$i.json" snapshot)" = "$SNAP" ] || fail "instance $i: wrong snapshot"
	[ "$(jget "$W/start$i.json" function)" = "$FN" ] || fail "instance $i: wrong function"
	# Neither the start, the spec nor THAW_MAPPED says: the function restores mapped.
	[ -n "${THAW_MAPPED:-}" ] || [ "$(jget "$W/start$i.json" pages)" = mapped ] ||
		fail "instance $i: not restored mapped by default: $(jget "$W/start$i.json" pages)" \
			"($(jget "$W/start$i.json" pages_why 2>/dev/null))"
done
[ "$("$THAW" --data-dir "$D" ps --json | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin) if r["state"] == "running"))')" = $N ] ||
	fail "thaw ps does not show $N running instances"

# Each answers exactly as the function computes.
for i in $(seq 1 $N); do
	got=""
	for x in $XS; do
		y=$(curl -sf --max-time 10 "http://${EP[$i]}/infer?x=$x" | python3 -c 'import json,sys; print(json.load(sys.stdin)["y"])')
		got="$got${got:+ }$y"
	done
	[ "$got" = "$EXPECT" ] && ok "instance $i answers /infer as the original" ||
		fail "instance $i answers [$got], expected [$EXPECT]"
done

# Isolation: state set on one is not seen by the others.
curl -sf --max-time 10 -X POST "http://${EP[1]}/state?v=only-in-1" >/dev/null || fail "POST /state"
for i in $(seq 1 $N); do
	v=$(curl -sf --max-time 10 "http://${EP[$i]}/state" | python3 -c 'import json,sys; print(json.load(sys.stdin)["v"])')
	want=None; [ $i = 1 ] && want=only-in-1
	[ "$v" = "$want" ] || fail "instance $i: /state is $v, expected $want"
done
# Own PID and network namespaces: the same pid inside (CRIU restores it),
# different host pids and namespace inodes.
host_ns=$(readlink /proc/self/ns/net)
declare -A seen_ns seen_hpid
for i in $(seq 1 $N); do
	p=$(curl -sf --max-time 10 "http://${EP[$i]}/pid" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
	ns=$(curl -sf --max-time 10 "http://${EP[$i]}/netns" | python3 -c 'import json,sys; print(json.load(sys.stdin)["netns"])')
	[ "$i" = 1 ] && pid1=$p
	[ "$p" = "$pid1" ] || fail "instance $i has pid $p inside, instance 1 has $pid1"
	[ "$p" != "${HPID[$i]}" ] || fail "instance $i: pid inside equals its host pid: no PID namespace?"
	[ "$ns" != "$host_ns" ] || fail "instance $i is in the host's network namespace"
	[ -z "${seen_ns[$ns]:-}" ] || fail "instances $i and ${seen_ns[$ns]} share network namespace $ns"
	[ -z "${seen_hpid[${HPID[$i]}]:-}" ] || fail "instances $i and ${seen_hpid[${HPID[$i]}]} share host pid"
	seen_ns[$ns]=$i
	seen_hpid[${HPID[$i]}]=$i
	[ "$(readlink /proc/${HPID[$i]}/ns/net)" = "$ns" ] || fail "instance $i: host pid ${HPID[$i]} is not in $ns"
	# In its container's cgroup, thaw/<instance>, in every hierarchy: runc
	# makes it, CRIU leaves the cgroups to runc (manage-cgroups=ignore).
	awk -F: -v want="/thaw/${ID[$i]}" 'substr($3, length($3) - length(want) + 1) != want {
		print; bad = 1 } END { exit bad }' "/proc/${HPID[$i]}/cgroup" ||
		fail "instance $i: host pid ${HPID[$i]} is not in cgroup thaw/${ID[$i]} everywhere"
done
ok "isolation: one pid inside ($pid1), $N host pids, $N network namespaces, $N cgroups"

# A later start finds the snapshot in the RAM tier.
"$THAW" --data-dir "$D" start "$FN" >"$W/start5.json" 2>"$W/start5.err" || fail "start by function id: $(cat "$W/start5.err")"
if [ -s "$W/start5.json" ]; then
	[ "$(jget "$W/start5.json" tier)" = ram ] || fail "5th start: tier $(jget "$W/start5.json" tier), expected ram"
	echo "5th start (tier ram): $(jget "$W/start5.json" timings_ms total) ms"
	ID[5]=$(jget "$W/start5.json" instance)
	HPID[5]=$(jget "$W/start5.json" pid)
	SHIM[5]=$(jget "$D/instances/${ID[5]}.json" shim_pid)
fi

# --- stop them all ---------------------------------------------------------
stop_instances
for i in "${!ID[@]}"; do
	[ -n "$(alive "${SHIM[$i]}")" ] && [ "$(cat /proc/${SHIM[$i]}/comm 2>/dev/null)" = thaw-shim ] &&
		fail "instance $i: shim ${SHIM[$i]} still running"
done
check_nothing_left "after stop"
"$THAW" --data-dir "$D" stop "${ID[1]}" >/dev/null 2>&1 && fail "a second stop should say there is no such instance"

# --- a missing criu --------------------------------------------------------
THAW_CRIU=/nonexistent/criu "$THAW" --data-dir "$D" start "$SNAP" >/dev/null 2>"$W/err"; rc=$?
echo "missing criu: rc $rc: $(cat "$W/err")"
[ $rc = 1 ] && grep -q "criu_restore" "$W/err" || fail "a missing criu: rc $rc, error: $(cat "$W/err")"
check_nothing_left "missing criu"

# --- a broken image --------------------------------------------------------
# The tier checks its entries' files and sizes (a missing file is written
# again), so break one in place: CRIU's image magic of inventory.img.
entry=$TIER/${SNAP#sha256:}
[ -f "$entry/inventory.img" ] || fail "no inventory.img in the tier entry $entry"
printf '\xde\xad\xbe\xef' | dd of="$entry/inventory.img" conv=notrunc status=none
"$THAW" --data-dir "$D" start "$SNAP" >/dev/null 2>"$W/err"; rc=$?
echo "broken image: rc $rc: $(cat "$W/err")"
[ $rc = 1 ] && grep -q "criu_restore" "$W/err" && grep -qi "error" "$W/err" ||
	fail "a broken image: rc $rc, error: $(cat "$W/err")"
check_nothing_left "broken image"

[ $fails = 0 ] && echo "e2e_restore: all good" || echo "e2e_restore: $fails failure(s)"
[ $fails = 0 ]
