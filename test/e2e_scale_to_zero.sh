#!/usr/bin/env bash
# Scale to zero under load, with real runc, CRIU and thawd, a small CPU
# function (test/fixtures/term_fn.py) whose spec has "idle_s": 2 and
# "max_instances": 24: hey (Debian's HTTP load generator) drives 32 starts,
# 8 concurrent (each worker at most 1 a second, so that the run lasts 4 s
# or more, twice idle_s, and instances go while others come): every answer
# is 201 or a clean 429/503 with an error code, none a transport error;
# /metrics counts each refusal by its reason; after the run every instance
# goes (within 60 s: no instance, container, network namespace, shim or
# record of one is left), and thawd's ended records say each was stopped
# for being idle.  How promptly an idle instance is stopped is
# test/e2e_idle_bench.sh's (it runs alone).
set -u
NAME=s2z
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
command -v hey >/dev/null || skip "no hey (apt-get install hey; make deps installs it)"
fixture_fn "$T/fn" term_fn.py
start_thawd

put_snapshot z "$(fn_spec term_fn.py "$T/fn" '"env": {"TERM_MODE": "exit"}, "idle_s": 2, "max_instances": 24')"

# What is left of instances: records, instance directories, containers,
# network namespace mounts, processes (shims, lease holders, functions).
leftovers() {
	ls "$DATA/instances" 2>/dev/null | sed 's/^/instances\//'
	own_containers | sed 's/^/container /'
	own_mounts | grep '/instances/' | sed 's/^/mount /'
	own_procs | grep -v "^$THAWD_PID " | sed 's/^/process /'
}

# ---- hey: 32 starts, 8 concurrent ----
# Each start is a real restore (~1 s of CPU): 8 at a time load thawd as
# 200 did, and 32 at 1 a second a worker keep it so for 4 s, as 64 at 2 a
# second did, for half the CPU (the whole suite waits for its CPU).
N=32
hey -n $N -c 8 -q 1 -m POST -t 120 "$URL/functions/z/start" >"$T/hey.out" 2>&1
sed -n '/Status code distribution/,$p' "$T/hey.out"
codes=$(awk '/^[ \t]+\[[0-9]+\]/ { gsub(/[\[\]]/, "", $1); print $1 ":" $2 }' "$T/hey.out" | tr '\n' ' ')
total=$(awk '/^[ \t]+\[[0-9]+\]/ { n += $2 } END { print n + 0 }' "$T/hey.out")
bad=$(awk '/^[ \t]+\[[0-9]+\]/ { gsub(/[\[\]]/, "", $1); if ($1 != 201 && $1 != 429 && $1 != 503) print $1 }' "$T/hey.out")
n201=$(awk '/^[ \t]+\[201\]/ { print $2 }' "$T/hey.out")
if [ "$total" = $N ] && [ -z "$bad" ] && ! grep -q 'Error distribution' "$T/hey.out" &&
	[ "${n201:-0}" -gt 0 ]; then
	ok "hey: $N starts, 8 concurrent: $codes"
else
	fail "hey: $total answers ($codes), unexpected: ${bad:-none}; $(sed -n '/Error distribution/,$p' "$T/hey.out" | head -5)"
fi
# Every refusal is a clean one: thawd counted each by its reason.
api GET /metrics >/dev/null
refused=$(awk '/^thaw_starts_refused_total/ { n += $2 } END { print n + 0 }' "$T/body")
n_refused=$((N - ${n201:-0}))
[ "$refused" = "$n_refused" ] && ok "/metrics: $refused start(s) refused, by reason: $(grep '^thaw_starts_refused_total' "$T/body" | tr '\n' ' ')" ||
	fail "/metrics counts $refused refusal(s), hey saw $n_refused non-201"
# Every instance goes by its idle stop, 2 s after its last use: waited
# for, 60 s at most, however slow the machine (the ended records below say
# each was stopped for being idle, not by anything else).
t0=$SECONDS
until left=$(leftovers) && [ -z "$left" ] || [ $((SECONDS - t0)) -ge 60 ]; do sleep 0.5; done
[ -z "$left" ] && ok "$((SECONDS - t0)) s after the run: no instance, container, netns or process left" ||
	fail "60 s after the run, left: $(echo "$left" | head -10)"
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

api DELETE /functions/z >/dev/null
echo "$fails failure(s)"
[ $fails = 0 ]
