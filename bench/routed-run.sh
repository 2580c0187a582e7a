#!/usr/bin/env bash
# routed-run.sh — requests routed through thawd (/function/<id>/…) against the
# same requests sent to the instance directly, in one run, against a private
# thawd, with bench/http-load (a closed loop on libcurl: latencies to the
# microsecond, where hey's end at 0.1 ms):
#
#   bench/routed-run.sh OUTDIR [REQUESTS] [ROUNDS]
#
# Two functions, each with "concurrency": 16 and "max_instances": 1, so that
# one instance serves every way:
#   cpu   the CPU example (bench/functions/cpu_example.json), GET /infer?x=7:
#         Python's single-threaded HTTP/1.0 server, a connection per request
#   ka    test/fixtures/proxy_fn.py, GET /hello?x=7: HTTP/1.1, kept connections,
#         a thread per connection (what thawd adds, with little of the
#         function's own cost around it)
# and three ways to reach the instance:
#   direct    from the instance's network namespace, to the function's port:
#             the function alone (the path thawd's own connections take)
#   endpoint  to the instance's endpoint (what POST /functions/<id>/start gives
#             a gateway: the shim relays it); cpu only (the shim sets no
#             TCP_NODELAY: a kept connection waits on delayed ACKs)
#   routed    to thawd, /function/<id>/...
# For each, at 1 and at 16 concurrent, ROUNDS (default 3) rounds of REQUESTS
# (default 2000) requests, the ways in turn; every answer must be a 200 with
# the right body.
# Then the latency from zero: "idle_s": 1, and 10 times, once the function has
# no instance, one routed request of the CPU example, beside the start it
# caused (thawd's log).  Writes OUTDIR/load-*.txt (http-load's line),
# OUTDIR/thawd.log and OUTDIR/summary.txt (p50, p99 and requests/s of each
# series, the median of its rounds; what routing adds at p50 and the ratio of
# throughputs, against direct and against endpoint).  Exit 0 when every
# request was answered 200.
set -u
if [ $# -lt 1 ]; then
	sed -n '2,31p' "$0" >&2
	exit 2
fi
OUTDIR=$1 REQUESTS=${2:-2000} ROUNDS=${3:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
LOAD=$B/bench/http-load
[ -x "$LOAD" ] || { echo "no $LOAD (make all)"; exit 2; }
mkdir -p "$OUTDIR"
: >"$OUTDIR/thawd.log"
W=$(mktemp -d /tmp/routed-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/routed-run-tier-XXXXXX)
ID=cpu INFER="GET /infer?x=7" EXPECT='"y":'
. "$ROOT/bench/lib/thawd.sh"
mkdir -p "$W/fn"
cp "$ROOT/test/fixtures/proxy_fn.py" "$W/fn/"
cat >"$W/ka.json" <<EOF
{"command": ["python3", "proxy_fn.py"], "cwd": "$W/fn", "port": 8000,
 "ready": {"http": "/health"}}
EOF

start_thawd 0 || exit 1
serving='concurrency=16 max_instances=1 idle_s=600'
put_function cpu "$ROOT/bench/functions/cpu_example.json" "$W/cpu.json" $serving || exit 1
put_function ka "$W/ka.json" "$W/ka-put.json" $serving || exit 1
cp "$W/cpu.json" "$W/cpu-put.json"
snapshot_function cpu "$OUTDIR/snapshot-cpu.json" || exit 1
snapshot_function ka "$OUTDIR/snapshot-ka.json" || exit 1

# instance FN KEY: KEY of FN's one instance (its "endpoint", "instance").
instance() {
	curl -s "$URL/instances" | python3 -c "import json,sys
print([i['$2'] for i in json.load(sys.stdin)['instances'] if i.get('function') == '$1'][0])"
}
# load NAME CONCURRENCY URL [NETNS]: one round (from NETNS, a namespace file,
# if given) into OUTDIR/load-NAME.txt; bad=1 unless every answer was right.
load() {
	local ns=()
	[ -n "${4:-}" ] && ns=(nsenter --net="$4")
	"${ns[@]}" "$LOAD" -n "$REQUESTS" -c "$2" --expect "${expect[$fn]}" "$3" \
		>"$OUTDIR/load-$1.txt" 2>&1 || { echo "$1: not every answer right"; bad=1; }
}

declare -A path=([cpu]="/infer?x=7" [ka]="/hello?x=7") expect=([cpu]='"y":' [ka]="hello 7")
for fn in cpu ka; do
	# The instance every way goes to: the first routed request starts it.
	curl -s -o /dev/null "$URL/function/$fn${path[$fn]}"
	ep=$(instance "$fn" endpoint) || { echo "$fn: no instance"; exit 1; }
	netns=$W/data/instances/$(instance "$fn" instance)/netns
	port=$(jfield "$W/$fn-put.json" port)
	for c in 1 16; do
		for r in $(seq "$ROUNDS"); do
			echo "---- $fn, $c concurrent, round $r"
			load "$fn-c$c-direct-$r" "$c" "http://127.0.0.1:$port${path[$fn]}" "$netns"
			[ $fn = cpu ] && load "$fn-c$c-endpoint-$r" "$c" "http://$ep${path[$fn]}"
			load "$fn-c$c-routed-$r" "$c" "$URL/function/$fn${path[$fn]}"
		done
	done
done

# From zero: the CPU example's request that finds no instance.  Its
# instance of the load keeps the idle_s it started with: stopped here.
put_function cpu "$ROOT/bench/functions/cpu_example.json" "$W/cpu.json" \
	concurrency=16 max_instances=1 idle_s=1 || exit 1
for iid in $(curl -s "$URL/instances" | python3 -c "import json,sys
for i in json.load(sys.stdin)['instances']:
    if i.get('function') == 'cpu': print(i['instance'])"); do
	curl -s -o /dev/null -X DELETE "$URL/instances/$iid"
done
: >"$OUTDIR/zero.txt"
for r in $(seq 10); do
	for _ in $(seq 300); do
		[ "$(curl -s "$URL/instances" | grep -c '"function": *"cpu"')" = 0 ] && break
		sleep 0.1
	done
	t=$(curl -s -o "$W/zero.body" -w '%{http_code} %{time_total}' "$URL/function/cpu${path[cpu]}")
	grep -q '"y":' "$W/zero.body" || { echo "from zero: $t $(cat "$W/zero.body")"; bad=1; }
	echo "$t" >>"$OUTDIR/zero.txt"
done

python3 - "$OUTDIR" "$ROUNDS" <<'PY' | tee "$OUTDIR/summary.txt"
import glob, os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def load(f):
    """p50 and p99 in ms, and requests/s: http-load's line."""
    m = re.search(r"p50 ([\d.]+) .* p99 ([\d.]+) .* ms, (\d+) requests/s", open(f).read())
    return float(m.group(1)), float(m.group(2)), float(m.group(3))

print("series (median of %d rounds)     p50 ms   p99 ms   requests/s" % rounds)
for fn in ("cpu", "ka"):
    for c in (1, 16):
        got = {}
        for way in ("direct", "endpoint", "routed"):
            runs = [load(f) for f in sorted(glob.glob("%s/load-%s-c%d-%s-*.txt" % (out, fn, c, way)))]
            if not runs:
                continue
            got[way] = [statistics.median(x[i] for x in runs) for i in range(3)]
            print("%-3s %2d concurrent, %-8s   %7.3f  %7.3f  %9.0f" % ((fn, c, way) + tuple(got[way])))
        r = got["routed"]
        for way in ("direct", "endpoint"):
            if way in got:
                d = got[way]
                print("figure: %s c=%d: routed against %s: %+.3f ms at p50, %.2fx the throughput" %
                      (fn, c, way, r[0] - d[0], r[2] / d[2]))
zero = [float(l.split()[1]) * 1000 for l in open(os.path.join(out, "zero.txt")) if l.split()]
starts = [float(m) for m in re.findall(r"instance cpu-\S+ of cpu at \S+ in ([\d.]+) ms",
                                      open(os.path.join(out, "thawd.log")).read())][-len(zero):]
print("figure: from zero, the CPU example's request: p50 %.1f ms, max %.1f ms (n=%d); "
      "its start (thawd's log) p50 %.1f ms" % (statistics.median(zero), max(zero), len(zero),
                                               statistics.median(starts) if starts else 0))
PY
exit $bad
