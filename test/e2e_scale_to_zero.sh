#!/usr/bin/env bash
# Scale to zero under load, with real runc, CRIU and thawd, a small CPU
# function (test/fixtures/term_fn.py) whose spec has "idle_s": 2 and
# "max_instances": 24:
#   1. hey (Debian's HTTP load generator) drives 200 starts, 8 concurrent
#      (each worker at most 4 a second, so that the run outlasts idle_s and
#      instances go while others come):
#      every answer is 201 or a clean 429/503 with an error code, none a
#      transport error; 10 s after the run no instance, container, network
#      namespace, shim or record of one is left, and thawd's ended records
#      say each was stopped for being idle;
#   2. thaw-bench's idle-stop scenario (--burst 8 --idle-stop 2): each
#      instance, used once, is stopped 2-4 s after that use and none is left
#      (thaw-bench exits 3 otherwise).
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
BENCH=$B/bench/thaw-bench
. "$ROOT/test/lib/require.sh"
require_restore_tools
command -v python3 >/dev/null || skip "no python3"
command -v hey >/dev/null || skip "no hey (apt-get install hey; make deps installs it)"

NAME=s2z
. "$ROOT/test/lib/thawd_e2e.sh"
mkdir -p "$T/fn"
cp "$ROOT/test/fixtures/term_fn.py" "$T/fn/"
start_thawd

st=$(api PUT /functions/z -d "{\"command\": [\"python3\", \"term_fn.py\"], \"cwd\": \"$T/fn\",
	\"port\": 8000, \"env\": {\"TERM_MODE\": \"exit\"}, \"ready\": {\"http\": \"/health\"},
	\"idle_s\": 2, \"max_instances\": 24}")
[ "$st" = 201 ] || { fail "PUT z: $st $(cat "$T/body")"; exit 1; }
st=$(api POST "/functions/z/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot z: $st $(cat "$T/body")"; exit 1; }

# What is left of instances: records, instance directories, containers,
# network namespace mounts, processes (shims, lease holders, functions).
leftovers() {
	ls "$DATA/instances" 2>/dev/null | sed 's/^/instances\//'
	own_containers | sed 's/^/container /'
	own_mounts | grep '/instances/' | sed 's/^/mount /'
	own_procs | grep -v "^$THAWD_PID " | sed 's/^/process /'
}

# ---- 1. hey: 200 starts, 8 concurrent ----
hey -n 200 -c 8 -q 4 -m POST -t 120 "$URL/functions/z/start" >"$T/hey.out" 2>&1
sed -n '/Status code distribution/,$p' "$T/hey.out"
codes=$(awk '/^[ \t]+\[[0-9]+\]/ { gsub(/[\[\]]/, "", $1); print $1 ":" $2 }' "$T/hey.out" | tr '\n' ' ')
total=$(awk '/^[ \t]+\[[0-9]+\]/ { n += $2 } END { print n + 0 }' "$T/hey.out")
bad=$(awk '/^[ \t]+\[[0-9]+\]/ { gsub(/[\[\]]/, "", $1); if ($1 != 201 && $1 != 429 && $1 != 503) print $1 }' "$T/hey.out")
n201=$(awk '/^[ \t]+\[201\]/ { print $2 }' "$T/hey.out")
if [ "$total" = 200 ] && [ -z "$bad" ] && ! grep -q 'Error distribution' "$T/hey.out" &&
	[ "${n201:-0}" -gt 0 ]; then
	ok "hey: 200 starts, 8 concurrent: $codes"
else
	fail "hey: $total answers ($codes), unexpected: ${bad:-none}; $(sed -n '/Error distribution/,$p' "$T/hey.out" | head -5)"
fi
# Every refusal is a clean one: thawd counted each by its reason.
api GET /metrics >/dev/null
refused=$(awk '/^thaw_starts_refused_total/ { n += $2 } END { print n + 0 }' "$T/body")
n_refused=$((200 - ${n201:-0}))
[ "$refused" = "$n_refused" ] && ok "/metrics: $refused start(s) refused, by reason: $(grep '^thaw_starts_refused_total' "$T/body" | tr '\n' ' ')" ||
	fail "/metrics counts $refused refusal(s), hey saw $n_refused non-201"
sleep 10
left=$(leftovers)
[ -z "$left" ] && ok "10 s after the run: no instance, container, netns or process left" ||
	fail "10 s after the run, left: $(echo "$left" | head -10)"
api GET "/instances?all=1" >/dev/null
python3 - "$T/body" "${n201:-0}" <<'EOF' && ok "the ${n201:-0} instances ended \"stopped: idle 2 s\"" || fail "ended records: $(head -c 300 "$T/body")"
import json, sys
insts = [i for i in json.load(open(sys.argv[1]))["instances"] if i.get("function") == "z"]
reasons = {i.get("reason") for i in insts}
ok = len(insts) == int(sys.argv[2]) and reasons == {"stopped: idle 2 s"}
if not ok:
    print(len(insts), "ended records, reasons", reasons, file=sys.stderr)
sys.exit(0 if ok else 1)
EOF

# ---- 2. thaw-bench's idle-stop scenario ----
"$BENCH" --url "$URL" --function z --burst 8 --idle-stop 2 --infer "GET /hello" \
	--expect hello --json "$T/bench.json" >"$T/bench.out" 2>&1
rc=$?
cat "$T/bench.out"
on_time=$(jget "$T/bench.json" "j['idle_stop']['on_time']")
[ $rc = 0 ] && [ "$on_time" = 8 ] && [ "$(jget "$T/bench.json" "j['idle_stop']['left_running']")" = 0 ] &&
	ok "thaw-bench --idle-stop 2: 8 of 8 stopped on time, none left" ||
	fail "thaw-bench --idle-stop 2: exit $rc, on time ${on_time:-?}"
left=$(leftovers)
[ -z "$left" ] || fail "after thaw-bench, left: $(echo "$left" | head -10)"

api DELETE /functions/z >/dev/null
echo "$fails failure(s)"
[ $fails = 0 ]
