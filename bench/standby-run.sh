#!/usr/bin/env bash
# standby-run.sh — starts that take a standby instance against normal starts
# of the same function, in one run, against a private thawd:
#
#   bench/standby-run.sh SPEC.json ID "INFER" EXPECT OUTDIR [ROUNDS]
#
# Starts thawd (from $THAW_BUILD, default ./build) with its own data directory
# and RAM tier, registers SPEC.json as function ID with "standby": 0, snapshots
# it and primes the tier with one start.  Then, ROUNDS (default 10) starts one
# at a time each (thaw-bench --burst 1 --repeat ROUNDS):
#   normal   no standbys: a mapped restore (the RAM tier warm); and the
#            plain restore (thaw-bench's baseline) of the same image
#   standby  "standby": 1 (the same spec otherwise: the snapshot is kept);
#            before each round thaw-bench waits until the pool holds one
#   refill   "standby": 1, and before each round a start of its own takes the
#            standby: the measured start, right after, finds none (a miss, a
#            normal restore); the pool refills only once no start has been in
#            flight for a while (server/standby.c), so the two do not meet
#   collide  the same, but the measured start waits until the refill has
#            begun: the worst case, what a refill costs a start beside it
# and what a waiting standby holds: its processes' resident and anonymous
# memory (smaps_rollup) and, where nvidia-smi is, the GPU memory used with it
# waiting against without.  A start counts once its first inference answers
# EXPECT.  Writes OUTDIR/<scenario>.{txt,json,svg}, OUTDIR/standby-mem.json,
# OUTDIR/thawd.log and OUTDIR/summary.txt (p50/p99 of request -> first
# correct answer, with "figure:" lines).  Exit 0 when every start was correct.
set -u
if [ $# -lt 5 ]; then
	sed -n '2,24p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 INFER=$3 EXPECT=$4 OUTDIR=$5 ROUNDS=${6:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/standby-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/standby-run-tier-XXXXXX)
. "$ROOT/bench/lib/thawd.sh"
# The tier is a plain directory unless THAW_TIER_HUGE=1 (a huge-page tmpfs of
# its own): on the H100 the GPU example's first request after a mapped restore
# took ~0.95 s from a huge-page tier against ~0.4 s from a plain one
# (bench/LOG.md), so the plain one, thawd's choice for any but its default root.
trap 'stop_thawd; for r in "$W"/data/instances/*.json; do [ -f "$r" ] &&
	"$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1; done
	mountpoint -q "$TIER" && umount "$TIER"; rm -rf "$W" "$TIER"' EXIT

start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" standby=0 lazy=null || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
run prime --burst 1

# The pool's size, from /metrics.
cat >"$W/pool.sh" <<SH
#!/bin/sh
curl -s "$URL/metrics" | sed -n 's/^thaw_standby_instances{function="$ID"} //p'
SH
# Wait (60 s at most) until the pool holds one standby.
cat >"$W/wait-pool.sh" <<SH
#!/bin/sh
for i in \$(seq 600); do [ "\$($W/pool.sh)" = 1 ] && exit 0; sleep 0.1; done
echo "no standby after 60 s" >&2; exit 1
SH
# Delete what the last round's taker kept, wait for a standby, take it: the
# measured start that follows finds the pool refilling.
cat >"$W/take.sh" <<SH
#!/bin/sh
[ -s "$W/taken" ] && curl -s -o /dev/null -X DELETE "$URL/instances/\$(cat $W/taken)"
$W/wait-pool.sh || exit 1
curl -s -X POST "$URL/functions/$ID/start" -o "$W/take.json" || exit 1
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["standby"]; print(j["instance"])' \
	"$W/take.json" >"$W/taken" || { echo "the taking start got no standby: \$(cat $W/take.json)" >&2; exit 1; }
[ "\${1:-}" = collide ] || exit 0
# Until the refill has begun (a standby "starting"), 5 s at most.
for i in \$(seq 500); do
	curl -s "$URL/instances" | grep -q '"state": *"starting"' && exit 0
	sleep 0.01
done
echo "no refill began within 5 s" >&2; exit 1
SH
chmod +x "$W/pool.sh" "$W/wait-pool.sh" "$W/take.sh"

# The plain restore (runc restore of the same image, then the CUDA restore:
# thaw-bench's baseline) in the same run, STANDBY_PLAIN_RUNS times (default 2;
# 0: none).
plain=()
[ "${STANDBY_PLAIN_RUNS:-2}" -gt 0 ] &&
	plain=(--baseline-plain "$TIER/${SNAP#sha256:}" --baseline-runs "${STANDBY_PLAIN_RUNS:-2}"
		--runc-root "$W/runc")
[ ${#plain[@]} -gt 0 ] && { whole_image "$SNAP" || bad=1; }
run normal --burst 1 --repeat "$ROUNDS" "${plain[@]}"
put_function "$ID" "$SPEC" "$W/spec.json" standby=1 lazy=null || exit 1
run standby --burst 1 --repeat "$ROUNDS" --round-cmd "$W/wait-pool.sh"

# What one waiting standby holds.
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1; }
"$W/wait-pool.sh"
sleep 1
with=$(gpu_used)
rss=0 anon=0 pte=0 n=0
for r in "$W"/data/instances/*.json; do
	[ "$(jfield "$r" state)" = standby ] || continue
	pid=$(jfield "$r" pid)
	ns=$(readlink "/proc/$pid/ns/pid")
	# Every process of its container: those in its PID namespace.
	for d in /proc/[0-9]*; do
		[ "$(readlink "$d/ns/pid" 2>/dev/null)" = "$ns" ] || continue
		rss=$((rss + $(awk '/^Rss:/ {print $2}' "$d/smaps_rollup" 2>/dev/null || echo 0)))
		anon=$((anon + $(awk '/^Anonymous:/ {print $2}' "$d/smaps_rollup" 2>/dev/null || echo 0)))
		pte=$((pte + $(awk '/^VmPTE:/ {print $2}' "$d/status" 2>/dev/null || echo 0)))
	done
	n=$((n + 1))
done
put_function "$ID" "$SPEC" "$W/spec.json" standby=0 lazy=null || exit 1
for _ in $(seq 100); do [ -z "$("$W/pool.sh")" ] || [ "$("$W/pool.sh")" = 0 ] && break; sleep 0.1; done
sleep 1
without=$(gpu_used)
printf '{"standbys": %d, "rss_kib": %d, "anonymous_kib": %d, "page_tables_kib": %d, "gpu_used_mib_with": "%s", "gpu_used_mib_without": "%s", "image_bytes": %s}\n' \
	"$n" "$rss" "$anon" "$pte" "${with:-}" "${without:-}" "$(jfield "$OUTDIR/snapshot.json" job result image_bytes)" \
	>"$OUTDIR/standby-mem.json"

put_function "$ID" "$SPEC" "$W/spec.json" standby=1 lazy=null || exit 1
run refill --burst 1 --repeat "$ROUNDS" --round-cmd "$W/take.sh"
run collide --burst 1 --repeat "$ROUNDS" --round-cmd "$W/take.sh collide"
[ -s "$W/taken" ] && curl -s -o /dev/null -X DELETE "$URL/instances/$(cat "$W/taken")"
stop_thawd

python3 - "$OUTDIR" "$ROUNDS" <<'PY' | tee "$OUTDIR/summary.txt"
import json, os, sys
out, rounds = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
print("start -> first correct answer (ms), %s starts one at a time each, warm RAM tier" % rounds)
print("%-8s %9s %9s %9s  %s" % ("start", "p50", "p99", "max", "phases (mean ms)"))
lat = {}
for name in ("normal", "standby", "refill", "collide"):
    j = load(name)
    if not j or not j["start_latency_ms"].get("n"):
        print("%-8s not measured" % name)
        continue
    l, ph = j["start_latency_ms"], j["phases_mean_ms"]
    lat[name] = l
    print("%-8s %9.1f %9.1f %9.1f  %s (%d/%d ok)" % (
        name, l["p50"], l["p99"], l["max"],
        " ".join("%s %.1f" % (k, v) for k, v in sorted(ph.items()) if v), j["ok"], j["attempts"]))
    print("figure: standby %s p50_ms %.1f" % (name, l["p50"]))
    print("figure: standby %s p99_ms %.1f" % (name, l["p99"]))
plain = ((load("normal") or {}).get("baselines") or {}).get("plain_restore") or {}
if plain.get("available") and (plain.get("latency_ms") or {}).get("n"):
    l = plain["latency_ms"]
    lat["plain"] = l
    print("%-8s %9.1f %9.1f %9.1f  (runc restore + CUDA restore of the same image)" % (
        "plain", l["p50"], l["p99"], l["max"]))
    print("figure: standby plain p50_ms %.1f" % l["p50"])
if "normal" in lat and "standby" in lat:
    r = lat["standby"]["p50"] / lat["normal"]["p50"]
    print("standby / normal, p50: %.3f (aim: at most 0.25)" % r)
    print("figure: standby standby_over_normal_p50 %.3f" % r)
# The takes as thawd timed them (its log: "standby <id> of <fn> taken: ..., T ms
# (resume R, gpu_restore G, ready D)"): what a take waits for, by phase.
import re, statistics
takes = [tuple(float(x) for x in m) for m in re.findall(
    r"standby \S+ of \S+ taken: \S+, ([\d.]+) ms \(resume ([\d.]+), gpu_restore ([\d.]+), ready ([\d.]+)\)",
    open(os.path.join(out, "thawd.log")).read())]
if takes:
    med = [statistics.median(t[i] for t in takes) for i in range(4)]
    print("takes in thawd (n=%d), p50 ms: total %.1f (resume %.1f, gpu_restore %.1f, ready %.1f), max total %.1f" %
          (len(takes), med[0], med[1], med[2], med[3], max(t[0] for t in takes)))
    print("figure: standby take_thawd_p50_ms %.1f" % med[0])
    print("figure: standby take_resume_p50_ms %.1f" % med[1])
    print("figure: standby take_ready_p50_ms %.1f" % med[3])
for name, what in (("refill", "a miss right after a take"),
                   ("collide", "a miss while a refill runs")):
    if "normal" in lat and name in lat:
        r = lat[name]["p50"] / lat["normal"]["p50"]
        print("%s / normal, p50: %.3f (1.0: the refill costs it nothing)" % (what, r))
        print("figure: standby %s_over_normal_p50 %.3f" % (name, r))
m = load("standby-mem")
if m and m["standbys"]:
    print("a waiting standby holds: anonymous %.1f MiB and page tables %.1f MiB of its own; "
          "resident %.1f MiB with the tier's shared pages (image %.1f MiB); "
          "GPU memory used with it waiting %s MiB, without %s MiB" % (
          m["anonymous_kib"] / 1024, m.get("page_tables_kib", 0) / 1024,
          m["rss_kib"] / 1024, m["image_bytes"] / 2**20,
          m["gpu_used_mib_with"] or "-", m["gpu_used_mib_without"] or "-"))
    print("figure: standby waiting_rss_mib %.1f" % (m["rss_kib"] / 1024))
    print("figure: standby waiting_anon_mib %.1f" % (m["anonymous_kib"] / 1024))
    if m["gpu_used_mib_with"]:
        print("figure: standby waiting_gpu_mib %d" % (int(m["gpu_used_mib_with"]) - int(m["gpu_used_mib_without"])))
PY
exit $bad
