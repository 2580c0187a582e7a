#!/usr/bin/env bash
# gpu-burst-run.sh — bursts of GPU starts against their floors, in one run,
# one private thawd configured as by default (standbys hold nothing on the
# GPU unless a spec asks "standby_gpu": "context"; fills of one GPU in the
# order their starts asked).  Run on the GPU machine (scripts/gpu-run.sh):
#
#   bench/gpu-burst-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [PART...]
#
# PARTs (default: example routed big):
#   example  the function SPEC: normal starts one at a time (ROUNDS, default
#            5) and in bursts of 8 (2 bursts); the driver's own burst floor
#            on 8 of its checkpointed processes (build/bench/driver-burst:
#            one restore, 8 one after another, 8 from 8 threads, with their
#            unlocks; a 2 GiB copy beside them from its process and from
#            one of its own); standby
#            takes one at a time, holding nothing (today's) and holding their
#            contexts; bursts of 8 context-standby takes (2 bursts); what one
#            context standby holds on the GPU (its record's standby_gpu_bytes,
#            and nvidia-smi with 8 waiting against none)
#   routed   requests through /function/ID/… from zero (no instance
#            running; concurrency 1, 8 context standbys waiting): one at a
#            time (3), then 8 at once (2 rounds); every answer must hold EXPECT
#   big      bench/functions/gpu_big.py holding 16 GiB: the link's speed with
#            pinned buffers as the fill copies (build/bench/link-speed), one
#            context-standby take at a time (3) and bursts of 4 (2)
#   driver   (not by default) the driver's floor alone, as in example
#   variants (not by default) bursts of 8 normal starts (VARIANT_BURSTS,
#            default 2) under thawds
#            started again with each of GPU_BURST_VARIANTS (default
#            "default: order:THAW_GPU_ORDER=1 nofill:THAW_GPU_PREFILL=0
#            unchecked:THAW_GPU_VERIFY=0 noprefault:THAW_GPU_PREFAULT=0";
#            NAME:VAR=VALUE
#            ...): what of thaw's own work beside the driver's restores
#            slows them (thawd.log's "restored in" of each, by scenario)
# A start counts once its first inference answers EXPECT.  OUTDIR gets each
# scenario's thaw-bench files, driver-burst.txt, link-speed.txt, routed-*.txt,
# thawd.log and summary.txt (with "figure:" lines and each of the issue's
# bounds, met or not).  Exit 0 when every start and answer was correct.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,/^set -u/p' "$0" | sed '$d' >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5
shift 5
# Each scenario's thawd lines follow a line "==== scenario NAME" in thawd.log.
mark() { echo "==== scenario $1" >>"$OUTDIR/thawd.log"; }
PARTS=" ${*:-example routed big} "
ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/gpu-burst-XXXXXX)
TIER=$(mktemp -d /dev/shm/gpu-burst-tier-XXXXXX)
. "$ROOT/bench/lib/thawd.sh"
EX_INFER=$INFER EX_EXPECT=$EXPECT
start_thawd 0 --max-standby 16 || exit 1
eval "bench_$(declare -f run)"
run() { mark "$1"; bench_run "$@"; }

pool() { # FN: standbys waiting
	curl -s "$URL/metrics" | sed -n "s/^thaw_standby_instances{function=\"$1\"} //p"
}
cat >"$W/wait-pool.sh" <<SH
#!/bin/sh
# wait-pool.sh FN N: until FN's pool holds N standbys (180 s at most; an
# empty pool has no line in /metrics).
for i in \$(seq 1800); do
	n=\$(curl -s "$URL/metrics" | sed -n "s/^thaw_standby_instances{function=\"\$1\"} //p")
	[ "\${n:-0}" = "\$2" ] && exit 0
	sleep 0.1
done
echo "pool of \$1: not \$2 after 180 s" >&2; exit 1
SH
chmod +x "$W/wait-pool.sh"
# wait-quiet.sh: until no instance of ID is left (running or stopping) and
# the GPU's memory is back to what it was before the first burst (within
# 1 GiB; 60 s at most): a burst measured while the last one's processes
# still tear down their contexts finds the driver busy (their fills'
# allocations took 0.46-1.45 s in a second burst against 0.25-0.85 s).
QUIET_MIB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1)
# instances.py FN STATE...: the ids of FN's instances in those states, a
# line each, from GET /instances on stdin.
cat >"$W/instances.py" <<'PY'
import json, sys
fn, states = sys.argv[1], sys.argv[2:]
j = json.load(sys.stdin)
for i in (j.get("instances", j) if isinstance(j, dict) else j):
    if i.get("function") == fn and i.get("state") in states:
        print(i["instance"])
PY
cat >"$W/wait-quiet.sh" <<SH
#!/bin/sh
# thawd's port read each time: the variants start thawd again.
for i in \$(seq 600); do
	# Not quiet while thawd does not answer (python3 fails then).
	if ids=\$(curl -s "http://127.0.0.1:\$(cat "$W/port")/instances" |
		python3 "$W/instances.py" "$ID" starting running stopping 2>/dev/null); then
		left=\$(printf '%s' "\$ids" | grep -c .)
	else
		left=unknown
	fi
	used=\$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1)
	[ "\$left" = 0 ] && { [ -z "$QUIET_MIB" ] || [ "\${used:-0}" -le $((${QUIET_MIB:-0} + 1024)) ]; } && exit 0
	sleep 0.1
done
echo "not quiet after 60 s: \$left instance(s), \$used MiB used" >&2
SH
chmod +x "$W/wait-quiet.sh"
standbys() { # FN SRC N MODE [KEY=JSON...]: the function's pool asked to hold N (mode none|context)
	local fn=$1 src=$2 n=$3 mode=$4
	shift 4
	put_function "$fn" "$src" "$W/$fn.json" standby="$n" standby_gpu="\"$mode\"" lazy=null "$@"
}
stop_running() { # FN: every running instance of FN deleted
	curl -s "$URL/instances" | python3 "$W/instances.py" "$1" running |
		xargs -r -P 16 -I{} curl -s -o /dev/null -X DELETE "$URL/instances/{}"
}

# warm_burst: what 8 requests at once cost with nothing to start: 8 running
# instances (their starts untimed), 8 requests at once to their endpoints, 2
# rounds: the inference's own floor in a burst (the GPU shared by 8 processes).
warm_burst() {
	local k r pids eps=()
	read -r METHOD RPATH BODY <<<"$EX_INFER"
	for k in $(seq 8); do
		curl -s -X POST "$URL/functions/$ID/start" -o "$W/warm-$k.json"
		eps+=("$(jfield "$W/warm-$k.json" endpoint)")
	done
	: >"$OUTDIR/warm-burst.txt"
	for r in 0 1 2; do # round 0 warms each instance up: not counted
		pids=()
		for k in $(seq 8); do
			curl -s -o "$W/warm-$k.out" -w '%{http_code} %{time_total}\n' -X "$METHOD" \
				-H 'Content-Type: application/json' ${BODY:+-d "$BODY"} \
				"http://${eps[$((k - 1))]}$RPATH" >"$W/warm-$k.code" &
			pids+=($!)
		done
		wait "${pids[@]}"
		[ "$r" = 0 ] && continue
		# The same inference alone: one request to one warm instance.
		curl -s -o "$W/warm-one.out" -w '%{http_code} %{time_total}\n' -X "$METHOD" \
			-H 'Content-Type: application/json' ${BODY:+-d "$BODY"} \
			"http://${eps[$r]}$RPATH" >"$W/warm-one.code"
		grep -qF -- "$EX_EXPECT" "$W/warm-one.out" && echo "warm-one $(cat "$W/warm-one.code") ok" \
			>>"$OUTDIR/warm-burst.txt"
		for k in $(seq 8); do
			grep -qF -- "$EX_EXPECT" "$W/warm-$k.out" && echo "warm-burst $(cat "$W/warm-$k.code") ok" ||
				{ echo "warm-burst $(cat "$W/warm-$k.code") WRONG"; bad=1; }
		done >>"$OUTDIR/warm-burst.txt"
	done
	for k in $(seq 8); do
		curl -s -o /dev/null -X DELETE "$URL/instances/$(jfield "$W/warm-$k.json" instance)" &
	done
	wait "${pids[@]}" 2>/dev/null
	sleep 1
}

# driver_floor: the driver's own burst floor, on 8 of the function's
# checkpointed processes (8 standbys holding nothing).
driver_floor() {
	standbys "$ID" "$SPEC" 8 none && "$W/wait-pool.sh" "$ID" 8 && {
		pids=$(for r in "$W"/data/instances/*.json; do
			[ "$(jfield "$r" state)" = standby ] && jfield "$r" pid; done)
		# shellcheck disable=SC2086
		"$B/bench/driver-burst" --copy 2 $pids 2>&1 | tee "$OUTDIR/driver-burst.txt"
	}
}

snapped=""
snapshot_example() { # the function SPEC registered and snapshotted, once
	[ -n "$snapped" ] && return 0
	put_function "$ID" "$SPEC" "$W/$ID.json" standby=0 lazy=null &&
		snapshot_function "$ID" "$OUTDIR/snapshot-example.json" && snapped=1 && run prime --burst 1
}

case $PARTS in *" example "*)
	snapshot_example || exit 1
	run normal-one --burst 1 --repeat "$ROUNDS"
	run normal-burst --burst 8 --repeat 2 --round-cmd "$W/wait-quiet.sh"
	driver_floor
	standbys "$ID" "$SPEC" 1 none && run standby-none-one --burst 1 --repeat "$ROUNDS" \
		--round-cmd "$W/wait-pool.sh $ID 1"
	standbys "$ID" "$SPEC" 1 context && run context-one --burst 1 --repeat "$ROUNDS" \
		--round-cmd "$W/wait-pool.sh $ID 1"
	standbys "$ID" "$SPEC" 0 none && "$W/wait-pool.sh" "$ID" 0 && sleep 2
	without=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1)
	if standbys "$ID" "$SPEC" 8 context && "$W/wait-pool.sh" "$ID" 8; then
		sleep 2
		with=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1)
		held=$(for r in "$W"/data/instances/*.json; do
			[ "$(jfield "$r" state)" = standby ] && jfield "$r" standby_gpu_bytes; done | paste -sd,)
		echo "{\"gpu_used_mib_8_waiting\": \"${with:-}\", \"gpu_used_mib_none\": \"${without:-}\", \"standby_gpu_bytes\": [$held]}" \
			>"$OUTDIR/context-held.json"
		run context-burst --burst 8 --repeat 2 --round-cmd "$W/wait-pool.sh $ID 8"
		warm_burst
	else
		bad=1
	fi
esac

case $PARTS in *" driver "*)
	snapshot_example && driver_floor || bad=1
esac

case $PARTS in *" variants "*)
	snapshot_example || exit 1
	standbys "$ID" "$SPEC" 0 none && "$W/wait-pool.sh" "$ID" 0
	stop_running "$ID"
	# Each variant, the default too, on a thawd of its own started for it
	# and primed alike (one start: its contexts made, the tier's file
	# pinned), each burst from a quiet GPU: a default measured on the
	# warm thawd of the scenarios before against variants on fresh ones
	# favoured the default (2026-11-30).
	for v in ${GPU_BURST_VARIANTS:-default: order:THAW_GPU_ORDER=1 nofill:THAW_GPU_PREFILL=0 unchecked:THAW_GPU_VERIFY=0 noprefault:THAW_GPU_PREFAULT=0}; do
		kv=${v#*:}
		stop_thawd
		[ -n "$kv" ] && export "${kv%%=*}=${kv#*=}"
		start_thawd 0 --max-standby 16 || { bad=1; [ -n "$kv" ] && unset "${kv%%=*}"; continue; }
		[ -n "$kv" ] && unset "${kv%%=*}"
		run "prime-${v%%:*}" --burst 1 && "$W/wait-quiet.sh"
		run "normal-burst-${v%%:*}" --burst 8 --repeat "${VARIANT_BURSTS:-2}" \
			--round-cmd "$W/wait-quiet.sh"
	done
	stop_thawd
	start_thawd 0 --max-standby 16 || exit 1
esac

case $PARTS in *" routed "*)
	read -r METHOD RPATH BODY <<<"$EX_INFER"
	routed() { # NAME N: N requests at once through /function/ID, from zero
		local name=$1 n=$2 k pids=()
		stop_running "$ID"
		"$W/wait-pool.sh" "$ID" 8 || { bad=1; return; }
		for k in $(seq "$n"); do
			curl -s -o "$W/routed-$k.out" -w '%{http_code} %{time_total}\n' -X "$METHOD" \
				-H 'Content-Type: application/json' ${BODY:+-d "$BODY"} \
				"$URL/function/$ID$RPATH" >"$W/routed-$k.code" &
			pids+=($!)
		done
		wait "${pids[@]}" # not thawd, a child of this shell too
		for k in $(seq "$n"); do
			if grep -qF -- "$EX_EXPECT" "$W/routed-$k.out"; then
				echo "$name $(cat "$W/routed-$k.code") ok"
			else
				echo "$name $(cat "$W/routed-$k.code") WRONG $(head -c 200 "$W/routed-$k.out")"
				bad=1
			fi
		done >>"$OUTDIR/routed.txt"
	}
	: >"$OUTDIR/routed.txt"
	# ROUTED_STANDBY_GPU=none: the same with standbys that hold nothing.
	if snapshot_example && standbys "$ID" "$SPEC" 8 "${ROUTED_STANDBY_GPU:-context}" concurrency=1; then
		for _ in 1 2 3; do routed routed-one 1; done
		for _ in 1 2; do routed routed-burst 8; done
	else
		bad=1
	fi
	stop_running "$ID"
	cat "$OUTDIR/routed.txt"
esac

case $PARTS in *" big "*)
	standbys "$ID" "$SPEC" 0 none >/dev/null 2>&1
	"$W/wait-pool.sh" "$ID" 0 >/dev/null 2>&1
	stop_running "$ID"
	"$B/bench/link-speed" 0 4 3 2>&1 | tee "$OUTDIR/link-speed.txt"
	PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
	sed -e "s|@THAW_ROOT@|$ROOT|g" -e "s|/opt/torch/.venv/bin|$PYBIN|" \
		"$ROOT/bench/functions/gpu_big.json" >"$W/gpu_big.json"
	ID=big INFER='POST /check {}' EXPECT='"match": true'
	put_function big "$W/gpu_big.json" "$W/big.json" standby=0 lazy=null &&
		snapshot_function big "$OUTDIR/snapshot-big.json" && {
		run big-prime --burst 1
		standbys big "$W/gpu_big.json" 1 context &&
			run big-context-one --burst 1 --repeat 3 --round-cmd "$W/wait-pool.sh big 1"
		standbys big "$W/gpu_big.json" 4 context &&
			run big-context-burst --burst 4 --repeat 2 --round-cmd "$W/wait-pool.sh big 4"
		standbys big "$W/gpu_big.json" 0 none
	}
esac
grep -h "^==== scenario\|thaw filled\|restored and unlocked\|holds .* MiB on GPU\|for fills' allocations" \
	"$OUTDIR/thawd.log" >"$OUTDIR/fills.txt"
stop_thawd

python3 - "$OUTDIR" <<'PY' | tee "$OUTDIR/summary.txt"
import json, os, re, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
def lat(name):
    j = load(name)
    return j["start_latency_ms"] if j and j["start_latency_ms"].get("n") else None
def figures(name):
    f = {}
    try:
        for line in open(os.path.join(out, name)):
            m = re.match(r"figure: (\S+) (.*)", line)
            if m:
                parts = m.group(2).split()
                for k, v in zip(parts[::2], parts[1::2]):
                    f[m.group(1) + "." + k] = float(v)
    except OSError:
        pass
    return f
def gpu_bytes(j):
    if isinstance(j, dict):
        g = j.get("gpu_memory")
        if isinstance(g, dict) and isinstance(g.get("bytes"), int):
            return g["bytes"]
        for v in j.values():
            b = gpu_bytes(v)
            if b:
                return b
    elif isinstance(j, list):
        for v in j:
            b = gpu_bytes(v)
            if b:
                return b
    return 0
def bound(what, value, limit):
    ok = value <= limit
    print("%-70s %8.1f <= %8.1f  %s" % (what, value, limit, "met" if ok else "NOT met"))
print("request -> first correct answer (ms): p50 / p99 / n")
for name in ("normal-one", "normal-burst", "standby-none-one", "context-one", "context-burst",
             "big-prime", "big-context-one", "big-context-burst"):
    l = lat(name)
    if l:
        print("%-20s %8.1f %8.1f %4d" % (name, l["p50"], l["p99"], l["n"]))
        print("figure: gpu_burst %s p50_ms %.1f p99_ms %.1f" % (name, l["p50"], l["p99"]))
d = figures("driver-burst.txt")
if d:
    print("driver's own: one restore %.1f ms, 8 one after another %.1f ms, 8 at once %.1f ms" % (
        d.get("driver_burst.one_ms", 0), d.get("driver_burst.serial_ms", 0),
        d.get("driver_burst.parallel_ms", 0)))
one, ctx1, ctxb, none1, nb = (lat(n) for n in ("normal-one", "context-one", "context-burst",
                                               "standby-none-one", "normal-burst"))
if ctx1 and ctxb:
    bound("8 context takes: p99 <= 2x one take's p50", ctxb["p99"], 2 * ctx1["p50"])
if ctx1 and none1:
    print("one context take p50 %.1f ms against today's standby take p50 %.1f ms (%.2fx)" % (
        ctx1["p50"], none1["p50"], ctx1["p50"] / none1["p50"]))
if one and nb and d.get("driver_burst.parallel_ms"):
    other = one["p50"] - d.get("driver_burst.one_ms", 0)
    bound("8 normal starts: p99 <= 1.2x (driver's burst floor + one start's other phases)",
          nb["p99"], 1.2 * (d["driver_burst.parallel_ms"] + other))
if d.get("driver_burst.copy_alone_ms"):
    print("a 2 GiB copy (its streams made as a fill makes them) alone %.1f ms; beside 8 restores "
          "and unlocks from the same process median %.1f worst %.1f ms (streams made at worst in "
          "%.1f ms), from a process of its own median %.1f worst %.1f ms (streams %.1f ms)" % (
          d["driver_burst.copy_alone_ms"], d.get("driver_burst.copy_beside_in_median_ms", 0),
          d.get("driver_burst.copy_beside_in_worst_ms", 0),
          d.get("driver_burst.streams_in_worst_ms", 0),
          d.get("driver_burst.copy_beside_child_median_ms", 0),
          d.get("driver_burst.copy_beside_child_worst_ms", 0),
          d.get("driver_burst.streams_child_worst_ms", 0)))
if one and nb and d.get("driver_burst.parallel_unlock_ms"):
    # A start restores and unlocks: the same bound with both in the floor.
    other = one["p50"] - d.get("driver_burst.one_unlock_ms", 0)
    print("driver's own, restored and unlocked: one %.1f ms, 8 at once %.1f ms" % (
        d.get("driver_burst.one_unlock_ms", 0), d["driver_burst.parallel_unlock_ms"]))
    bound("8 normal starts: p99 <= 1.2x (floor of restores and unlocks + other phases)",
          nb["p99"], 1.2 * (d["driver_burst.parallel_unlock_ms"] + other))
# thawd's own split of each start's driver calls, by scenario (fills.txt).
split, waits, scen = {}, {}, None
try:
    for line in open(os.path.join(out, "fills.txt")):
        m = re.match(r"==== scenario (\S+)", line)
        if m:
            scen = m.group(1)
            continue
        m = re.search(r"restored and unlocked in ([\d.]+) ms \(restored in ([\d.]+)\)", line)
        if m and scen:
            split.setdefault(scen, []).append((float(m.group(1)), float(m.group(2))))
        # What a start waited for: its restore for fills' allocations
        # (gpu_order.h), and the start for its own fill.
        m = re.search(r"waited ([\d.]+) ms for fills' allocations", line)
        if m and scen:
            waits.setdefault(scen, {}).setdefault("restore for allocations", []).append(float(m.group(1)))
        m = re.search(r"allocations made ([\d.]+) ms.*the start waited ([\d.]+) ms for it", line)
        if m and scen:
            waits.setdefault(scen, {}).setdefault("allocations made", []).append(float(m.group(1)))
            waits.setdefault(scen, {}).setdefault("start for its fill", []).append(float(m.group(2)))
except OSError:
    pass
for name in sorted(split):
    v = split[name]
    tot = sorted(a for a, _ in v)
    res = sorted(b for _, b in v)
    print("%-24s driver calls per start (thawd's log, n %d): restore+unlock p50 %.1f max %.1f; "
          "restore p50 %.1f max %.1f" % (name, len(v), tot[(len(tot) - 1) // 2], tot[-1],
                                         res[(len(res) - 1) // 2], res[-1]))
for name in sorted(waits):
    for what, v in sorted(waits[name].items()):
        v.sort()
        print("%-24s %s (n %d): p50 %.1f max %.1f ms" % (name, what, len(v), v[(len(v) - 1) // 2], v[-1]))
for name in sorted(f[:-5] for f in os.listdir(out) if f.startswith("normal-burst-") and f.endswith(".json")):
    l = lat(name)
    j = load(name)
    if l and j:
        ph = j.get("phases_mean_ms") or {}
        print("%-24s first answer p50 %.1f p99 %.1f; answered p99 %.1f; gpu_restore mean %.1f" % (
            name, l["p50"], l["p99"], (j.get("start_answer_ms") or {}).get("p99", 0),
            ph.get("gpu_restore") or 0))
        print("figure: gpu_burst %s p50_ms %.1f p99_ms %.1f" % (name, l["p50"], l["p99"]))
if one and nb:
    bound("8 normal starts: p99 <= 2.5x one start's p50", nb["p99"], 2.5 * one["p50"])
def latfile(name, key):
    try:
        v = sorted(float(l.split()[2]) * 1000 for l in open(os.path.join(out, name))
                   if l.startswith(key))
    except OSError:
        return None
    if not v:
        return None
    rank = lambda p: v[max(0, -(-p * len(v) // 100) - 1)]
    return {"p50": rank(50), "p99": rank(99), "n": len(v)}
warm = latfile("warm-burst.txt", "warm-burst ")
warm1 = latfile("warm-burst.txt", "warm-one ")
if warm1:
    print("one request to one running instance (the inference alone): p50 %.1f ms (n %d)" % (
        warm1["p50"], warm1["n"]))
    print("figure: gpu_burst warm_one p50_ms %.1f" % warm1["p50"])
if warm:
    print("8 requests at once to 8 running instances (the inference's own burst floor): "
          "p50 %.1f ms, p99 %.1f ms (n %d)" % (warm["p50"], warm["p99"], warm["n"]))
    print("figure: gpu_burst warm_burst p50_ms %.1f p99_ms %.1f" % (warm["p50"], warm["p99"]))
    cb = load("context-burst")
    if cb and ctx1:
        ans = cb.get("start_answer_ms")
        if ans:
            print("8 context takes: answered p99 %.1f ms + the inference's burst p99 %.1f ms = %.1f ms "
                  "against their first answers' p99 %.1f ms" % (ans["p99"], warm["p99"],
                  ans["p99"] + warm["p99"], ctxb["p99"]))
# The floor a burst of normal starts has on one GPU with its inferences
# counted as they run: 8 restores and unlocks at once, 8 inferences at once,
# and what else one start does alone (its p50 less its driver calls and its
# inference alone).
if one and nb and warm and warm1 and d.get("driver_burst.parallel_unlock_ms"):
    other = one["p50"] - d.get("driver_burst.one_unlock_ms", 0) - warm1["p50"]
    floor = d["driver_burst.parallel_unlock_ms"] + warm["p99"] + other
    print("8 normal starts' floor, their inferences as they run: 8 restores+unlocks %.1f + 8 "
          "inferences at once p99 %.1f + one start's other phases %.1f = %.1f ms; p99 %.1f "
          "(%.2fx)" % (d["driver_burst.parallel_unlock_ms"], warm["p99"], other, floor,
                       nb["p99"], nb["p99"] / floor))
    print("figure: gpu_burst normal_floor_ms %.1f" % floor)
try:
    rows = [l.split() for l in open(os.path.join(out, "routed.txt"))]
    def p50(name):
        v = sorted(float(r[2]) * 1000 for r in rows if r[0] == name)
        return v[(len(v) + 1) // 2 - 1] if v else None
    r1, r8 = p50("routed-one"), p50("routed-burst")
    if r1 and r8:
        print("routed from zero: one p50 %.1f ms, 8 at once p50 %.1f ms" % (r1, r8))
        print("figure: gpu_burst routed_one_p50_ms %.1f routed_burst_p50_ms %.1f" % (r1, r8))
        bound("8 routed requests from zero: p50 <= 1.5x one request's", r8, 1.5 * r1)
    print("routed answers correct: %d of %d" % (sum(r[-1] == "ok" for r in rows), len(rows)))
except OSError:
    pass
h = load("context-held")
if h:
    held = h.get("standby_gpu_bytes") or []
    if held:
        print("one context standby holds %.1f MiB on the GPU (its record, mean of %d); "
              "nvidia-smi: %s MiB with 8 waiting, %s MiB with none" % (
              sum(held) / len(held) / 2**20, len(held), h["gpu_used_mib_8_waiting"],
              h["gpu_used_mib_none"]))
        print("figure: gpu_burst context_standby_held_mib %.1f" % (sum(held) / len(held) / 2**20))
ls = figures("link-speed.txt")
big1, bigb = lat("big-context-one"), lat("big-context-burst")
snap = load("snapshot-big")
nbytes = gpu_bytes(snap) if snap else 0
if not nbytes:  # thawd's own words: "big-…: thaw filled N allocation(s), X GiB"
    try:
        for line in open(os.path.join(out, "fills.txt")):
            m = re.search(r"big-\S+: thaw filled \d+ allocation\(s\), ([\d.]+) GiB", line)
            if m:
                nbytes = float(m.group(1)) * 2**30
    except OSError:
        pass
if ls.get("link_speed.threads16_gbs") and big1 and bigb and nbytes:
    floor = 4 * nbytes / (ls["link_speed.threads16_gbs"] * 1e9) * 1000
    print("16 GiB function: %.2f GiB of device memory; link %.1f GB/s; 4 fills' floor %.1f ms" % (
        nbytes / 2**30, ls["link_speed.threads16_gbs"], floor))
    bound("4 context takes of the 16 GiB function: p99 <= 1.2x (4 x bytes/link + one take's p50)",
          bigb["p99"], 1.2 * (floor + big1["p50"]))
PY
exit $bad
