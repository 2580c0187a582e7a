#!/usr/bin/env bash
# stop-metrics-run.sh — GET /metrics with instances running, and DELETE of
# each instance, against a private thawd; for the GPU machine, runnable
# anywhere as root:
#
#   bench/stop-metrics-run.sh SPEC.json ID OUTDIR [INSTANCES]
#
# Registers SPEC.json as function ID, snapshots it, starts INSTANCES (default
# 2) instances, then:
#   1. scrapes GET /metrics SCRAPES times (default 6), SCRAPE_GAP_S apart
#      (default 11: longer than the store's 10 s, so that a scrape that read the
#      store itself would show it), each scrape's time by curl;
#   2. DELETEs each instance: the answer's time by curl, and from its ended
#      record the stop's steps after the request (unreachable, GPU memory
#      released, ended), in ms.
# Prints a table and writes OUTDIR/stop-metrics.txt.  Exit 0 when every
# scrape and every DELETE answered.
set -u
if [ $# -lt 3 ]; then
	sed -n '2,17p' "$0" >&2
	exit 2
fi
SPEC=$1 ID=$2 OUTDIR=$3 N=${4:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/thaw-stop-metrics-XXXXXX)
TIER=$(mktemp -d /dev/shm/thaw-stop-metrics-tier-XXXXXX)
INFER="" EXPECT=""
. "$ROOT/bench/lib/thawd.sh"
OUT=$OUTDIR/stop-metrics.txt
: >"$OUT"
say() { echo "$*" | tee -a "$OUT"; }

start_thawd 0 || exit 1
put_function "$ID" "$SPEC" "$W/spec.json" || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
iids=()
for i in $(seq "$N"); do
	code=$(curl -s -m 600 -o "$W/start.json" -w '%{http_code}' -X POST "$URL/functions/$ID/start")
	[ "$code" = 201 ] || { say "start $i: $code $(head -c 300 "$W/start.json")"; bad=1; continue; }
	iids+=("$(jfield "$W/start.json" instance)")
done
say "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) $ID: ${#iids[@]} instance(s) running"

say "GET /metrics, ${SCRAPES:-6} scrapes ${SCRAPE_GAP_S:-11} s apart (ms):"
line=""
for i in $(seq "${SCRAPES:-6}"); do
	[ "$i" = 1 ] || sleep "${SCRAPE_GAP_S:-11}"
	t=$(curl -s -m 60 -o "$W/metrics.txt" -w '%{http_code} %{time_total}' "$URL/metrics")
	[ "${t%% *}" = 200 ] || bad=1
	line="$line $(awk -v s="${t#* }" 'BEGIN { printf "%.1f", s * 1000 }')"
done
say " $line"
grep '^thaw_gpu_free_bytes\|^thaw_store_bytes' "$W/metrics.txt" | sed 's/^/  /' | tee -a "$OUT"

say "DELETE /instances/<iid>: answer (curl), then from the ended record, ms after the request:"
say "  instance              answer  unreachable  gpu_released  ended"
for iid in "${iids[@]}"; do
	t=$(curl -s -m 600 -o /dev/null -w '%{http_code} %{time_total}' -X DELETE "$URL/instances/$iid")
	[ "${t%% *}" = 204 ] || { say "  $iid: DELETE ${t%% *}"; bad=1; continue; }
	for _ in $(seq 600); do
		curl -s "$URL/instances/$iid" >"$W/rec.json"
		[ "$(jfield "$W/rec.json" state)" = stopped ] && break
		sleep 0.1
	done
	python3 - "$W/rec.json" "${t#* }" "$iid" <<'PY' | tee -a "$OUT"
import json, sys
j = json.load(open(sys.argv[1])); s = j.get("stop") or {}
r = s.get("requested_ms")
f = lambda k: "%.0f" % (s[k] - r) if r and k in s else "-"
print("  %-20s %7.1f  %11s  %12s  %5s" % (sys.argv[3], float(sys.argv[2]) * 1000,
      f("unreachable_ms"), f("gpu_released_ms"), f("ended_ms")))
PY
done
exit $bad
