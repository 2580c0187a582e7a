#!/usr/bin/env bash
# thawd end to end, with real runc and CRIU, over real sockets:
#   1. register the CPU example (bench/functions/cpu_example.py, small state),
#      snapshot it (?wait=1), and start 16 instances of it AT ONCE: each
#      answers 201 with docs/API.md's fields, and GET /infer through each
#      endpoint answers exactly what the function computes; the metrics count
#      them; then DELETE each (204) and nothing is left;
#   2. (GET /healthz while starts run: test/e2e_server_healthz.sh, alone)
#   3. 504: a function that is ready only while a file exists in its cwd,
#      removed after its snapshot, is not ready in time on restore;
#   4. kill -9 of thawd during a snapshot (held at a known point by its runc,
#      test/lib/runc_hold; and with an instance running), then
#      a restart: the snapshot is marked failed, the instance (still serving)
#      adopted, answering, and cleaned up by its DELETE; a re-snapshot killed
#      half-way leaves the last snapshot current; nothing else is left running
#      (no runc containers, no processes
#      rooted in the data directory, no netns mounts), `thaw store verify` is
#      clean; the function snapshots fine afterwards;
#   5. DELETE /functions/<id> stops that function's instances only; of two
#      DELETEs of it at once, one answers 204, the other 409 or 404;
#   6. SIGTERM: thawd stops its instances and exits 0.
set -u
B=${THAW_BUILD:-$PWD/build}
R=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (runc, CRIU, namespaces)"; exit 77; }
for c in runc python3 curl; do
	command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }
done

T=$(mktemp -d /tmp/thaw-e2e-server-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-server-XXXXXX)
DATA=$T/data
TOKEN=e2e-$RANDOM-$RANDOM
echo "$TOKEN" >"$T/token"
THAWD_PID=""
MIB=16
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# Processes that belong to this test's data: rooted in it (containers) or
# naming it on their command line (thawd and the shims it forks).
. "$R/test/lib/own_procs.sh"
. "$R/test/lib/wait_port.sh"
own_mounts() { awk -v t="$T" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo; }
own_containers() { [ -d "$DATA/runc" ] && runc --root "$DATA/runc" list -q 2>/dev/null; }

cleanup() {
	[ -n "$THAWD_PID" ] && kill -9 "$THAWD_PID" 2>/dev/null
	for c in $(own_containers); do runc --root "$DATA/runc" delete -f "$c" >/dev/null 2>&1; done
	own_procs | awk '{print $1}' | xargs -r kill -9 2>/dev/null
	for m in $(own_mounts | sort -r); do umount -l "$m" 2>/dev/null; done
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd.log (tail)"; tail -n 40 "$T/thawd.log"; }
	rm -rf "$T" "$SHM"
}
trap cleanup EXIT

# thawd's runc is test/lib/runc_hold: `hold run|checkpoint|restore` makes the
# next such runc call stop there, so that a kill (or a client's leaving)
# lands at that point.
start_thawd() {
	rm -f "$T/port"
	RUNC_HOLD_DIR=$T "$THAWD" --runc "$R/test/lib/runc_hold" --listen 127.0.0.1:0 --port-file "$T/port" --data-dir "$DATA" \
		--ram-tier "$SHM" --ram-tier-bytes 2G --token-file "$T/token" "$@" \
		>>"$T/thawd.log" 2>&1 &
	THAWD_PID=$!
	wait_port "$T/port" "$THAWD_PID" || { echo "thawd did not start"; tail "$T/thawd.log"; exit 1; }
	URL=http://127.0.0.1:$(cat "$T/port")
}

stop_thawd() { # SIGTERM; true if it exited 0 within 60 s
	local rc
	kill -TERM "$THAWD_PID"
	for _ in $(seq 600); do kill -0 "$THAWD_PID" 2>/dev/null || break; sleep 0.1; done
	wait "$THAWD_PID"
	rc=$?
	THAWD_PID=""
	return $rc
}

# api METHOD PATH [curl args…]: the status on stdout, the body in $T/body.
# A DELETE of an instance with ?wait=1 (as test/lib/thawd_e2e.sh's api):
# answered once the instance is gone, not once it is unreachable, so that
# "nothing left" can be checked right after it.
api() {
	local m=$1 p=$2
	shift 2
	if [ "$m" = DELETE ] && [[ $p == /instances/* ]] && [[ $p != *wait=* ]]; then
		[[ $p == *\?* ]] && p="$p&wait=1" || p="$p?wait=1"
	fi
	curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -X "$m" "$URL$p" "$@"
}
# jget FILE EXPR: a Python expression over the JSON j of FILE.
# python3 -S: the standard library only, and half the start-up CPU
# without site-packages (test/lib/thawd_e2e.sh says why).
jget() { python3 -S -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

nothing_left() { # what: fails for each leftover
	local what=$1 c p m
	c=$(own_containers)
	[ -z "$c" ] || fail "$what: containers left: $c"
	p=$(own_procs)
	[ -z "$p" ] || fail "$what: processes left: $p"
	m=$(own_mounts)
	[ -z "$m" ] || fail "$what: mounts left: $m"
}

spec_for() { # MIB → the CPU example's spec with an absolute cwd
	python3 - "$R/bench/functions" "$1" <<'EOF'
import json, sys
d, mib = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/cpu_example.json"))
s["cwd"] = d
s["env"]["THAW_EXAMPLE_MIB"] = mib
print(json.dumps(s))
EOF
}

start_thawd

# ---- 1. snapshot, 16 concurrent starts ----
spec_for $MIB >"$T/cpu.json"
st=$(api PUT /functions/cpu -d @"$T/cpu.json")
[ "$st" = 201 ] || fail "PUT /functions/cpu: $st $(cat "$T/body")"
st=$(api POST '/functions/cpu/snapshot?wait=1')
if [ "$st" != 200 ]; then
	fail "snapshot: $st $(cat "$T/body")"
	exit 1
fi
ok "snapshot in $(jget "$T/body" "round(j['job']['duration_ms'])") ms"
api GET /functions/cpu >/dev/null
[ "$(jget "$T/body" "j['snapshot']['state']")" = ready ] || fail "snapshot state: $(cat "$T/body")"
[ "$(jget "$T/body" "j['snapshot']['image_bytes'] > 0")" = True ] || fail "image_bytes"

# What the function answers, computed by the function's own code.
expect=$(cd "$R/bench/functions" && THAW_EXAMPLE_MIB=$MIB python3 -c \
	'import cpu_example as c; print(" ".join(str(c.infer(x)) for x in (3, 7, 1000)))')
[ -n "$expect" ] || fail "cannot compute the expected answers"

t0=$(date +%s%N)
pids=""
for i in $(seq 16); do
	curl -s -o "$T/start.$i" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-X POST "$URL/functions/cpu/start" >"$T/code.$i" &
	pids="$pids $!"
done
wait $pids # not a bare wait: thawd is a child too
t1=$(date +%s%N)
ok "16 concurrent starts answered in $(((t1 - t0) / 1000000)) ms"
iids=""
good=0
for i in $(seq 16); do
	code=$(cat "$T/code.$i")
	if [ "$code" != 201 ]; then
		fail "start $i: $code $(cat "$T/start.$i")"
		continue
	fi
	f=$T/start.$i
	# One python3 for the fields, the endpoint and the id (~50 ms of CPU
	# each, 16 instances).
	{ read -r fields; read -r ep; read -r iid; } < <(jget "$f" "all(k in j for k in ('instance','function','snapshot','endpoint','pid','tier','timings_ms')) and all(k in j['timings_ms'] for k in ('materialize','criu_restore','gpu_restore','ready','total')) and j['function']=='cpu' and j['tier'] in ('ram','disk'), j.get('endpoint'), j.get('instance'), sep='\\n'")
	[ "$fields" = True ] || fail "start $i answer lacks fields: $(cat "$f")"
	iids="$iids $iid"
	got=""
	for x in 3 7 1000; do
		# {"x": X, "y": N}, N an integer: matched here, not by a python3.
		y=$(curl -s --max-time 20 "http://$ep/infer?x=$x")
		[[ $y =~ \"y\":\ *(-?[0-9]+)[,}\ ] ]] && y=${BASH_REMATCH[1]} || y=""
		got="$got $y"
	done
	if [ "${got# }" = "$expect" ]; then
		good=$((good + 1))
	else
		fail "instance $iid at $ep answers '${got# }', expected '$expect'"
	fi
done
[ $good = 16 ] && ok "16 instances answer /infer correctly"
n=$(echo $iids | tr ' ' '\n' | sort -u | wc -l)
[ "$n" = 16 ] || fail "instance ids are not distinct: $iids"
python3 - "$T" <<'EOF' || fail "restore phases (ms) could not be summarised"
import glob, json, sys
ts = [json.load(open(f))["timings_ms"] for f in glob.glob(sys.argv[1] + "/start.*")]
ts = [t for t in ts if t]
for k in ("materialize", "criu_restore", "ready", "total"):
    v = sorted(t[k] for t in ts)
    print("figure: %-12s mean %7.1f ms  max %7.1f ms  (16 concurrent starts)" % (k, sum(v) / len(v), v[-1]))
EOF

api GET /metrics >/dev/null
grep -q '^thaw_starts_total{function="cpu"} 16$' "$T/body" || fail "metrics: starts_total: $(grep thaw_starts_total "$T/body")"
grep -q '^thaw_instances_running 16$' "$T/body" || fail "metrics: $(grep thaw_instances_running "$T/body")"
grep -q '^thaw_restore_phase_seconds_count{phase="total"} 16$' "$T/body" || fail "metrics: phase count"
grep -q '^thaw_snapshots_total{result="ok"} 1$' "$T/body" || fail "metrics: snapshots_total"
st=$(api GET /instances)
[ "$st" = 200 ] && [ "$(jget "$T/body" "len(j['instances'])")" = 16 ] ||
	fail "GET /instances: $st $(head -c 300 "$T/body")"
first=$(echo $iids | awk '{print $1}')
st=$(api GET "/instances/$first")
[ "$st" = 200 ] || fail "GET /instances/$first: $st"

for iid in $iids; do
	st=$(api DELETE "/instances/$iid")
	[ "$st" = 204 ] || fail "DELETE /instances/$iid: $st $(cat "$T/body")"
done
st=$(api DELETE "/instances/$first")
[ "$st" = 404 ] || fail "DELETE of a deleted instance: $st"
api GET /instances >/dev/null
[ "$(jget "$T/body" "len(j['instances'])")" = 0 ] || fail "instances left: $(cat "$T/body")"
c=$(own_containers)
[ -z "$c" ] || fail "containers left after DELETE: $c"
p=$(own_procs | grep -v "^$THAWD_PID ")
[ -z "$p" ] || fail "processes left after DELETE: $p"
[ -z "$(own_mounts)" ] || fail "mounts left after DELETE: $(own_mounts)"

# ---- 3. 504: not ready in time after the restore ----
mkdir -p "$T/fn504"
cat >"$T/fn504/app.py" <<'EOF'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if os.path.exists("ready-flag") else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
EOF
touch "$T/fn504/ready-flag"
st=$(api PUT /functions/slow -d "{\"command\":[\"python3\",\"app.py\"],\"cwd\":\"$T/fn504\",\"port\":8000,\"ready\":{\"http\":\"/health\",\"timeout_s\":2}}")
[ "$st" = 201 ] || fail "PUT /functions/slow: $st $(cat "$T/body")"
st=$(api POST '/functions/slow/snapshot?wait=1')
[ "$st" = 200 ] || fail "snapshot of slow: $st $(cat "$T/body")"
rm -f "$T/fn504/ready-flag"
st=$(api POST /functions/slow/start)
if [ "$st" = 504 ] && [ "$(jget "$T/body" "j['error']['code']")" = timeout ]; then
	ok "504 when not ready in time: $(jget "$T/body" "j['error']['message']")"
else
	fail "start of a function never ready: $st $(cat "$T/body")"
fi
api GET /metrics >/dev/null
grep -q '^thaw_start_failures_total{function="slow",code="timeout"} 1$' "$T/body" ||
	fail "metrics: the timeout is not counted: $(grep failures "$T/body")"

# ---- 4. kill -9 during a snapshot ----
# after_kill WHAT: restart thawd and check what it made of the debris.
after_kill() {
	local what=$1 state why c p lines
	lines=$(wc -l <"$T/thawd.log")
	RESTARTED_AT=$((lines + 1)) # the restarted thawd's first line in its log
	start_thawd
	# What the recovery did, for the log of this test.
	tail -n +"$((lines + 1))" "$T/thawd.log" | grep -E "earlier run|marked failed" | sed 's/^/    /'
	# An instance that was serving when thawd died is adopted: it still
	# answers, this thawd lists it, and its DELETE cleans it up.
	if [ -n "${KEPT_IID:-}" ]; then
		c=$(api GET "/instances/$KEPT_IID")
		[ "$c" = 200 ] && [ "$(jget "$T/body" "j['state']")" = running ] ||
			fail "kill -9 $what: instance $KEPT_IID after the restart: $c $(cat "$T/body")"
		p=$(curl -s --max-time 20 "http://$KEPT_EP/infer?x=3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["x"])' 2>/dev/null)
		[ "$p" = 3 ] && ok "kill -9 $what: the instance started before it still answers" ||
			fail "kill -9 $what: the instance started before it does not answer"
		grep -q "instance $KEPT_IID of cpu from an earlier run still serves .*: adopted" "$T/thawd.log" ||
			fail "kill -9 $what: instance $KEPT_IID not adopted"
		c=$(api DELETE "/instances/$KEPT_IID")
		[ "$c" = 204 ] || fail "kill -9 $what: DELETE of the adopted instance: $c $(cat "$T/body")"
		KEPT_IID=
	fi
	api GET /functions/big >/dev/null
	state=$(jget "$T/body" "j['snapshot']['state']")
	why=$(jget "$T/body" "j['snapshot']['error']")
	[ "$state" = failed ] && [ "$why" = "thawd restarted during the snapshot" ] ||
		fail "kill -9 $what: snapshot state $state ($why)"
	# Every instance still recorded was adopted: running, and answering.
	api GET /instances >/dev/null
	[ "$(jget "$T/body" "sorted(set(i['state'] for i in j['instances'])) in ([], ['running'])")" = True ] ||
		fail "kill -9 $what, restart: instances not running: $(cat "$T/body")"
	for ep in $(jget "$T/body" "' '.join(i['endpoint'] for i in j['instances'])"); do
		curl -sf --max-time 20 "http://$ep/infer?x=1" >/dev/null ||
			fail "kill -9 $what, restart: adopted instance at $ep does not answer"
	done
	# Nothing else is left: what the adopted instances hold (their container,
	# processes, shim, lease holder, namespace mount) is theirs.
	adopted_ids=" $(jget "$T/body" "' '.join(i['instance'] for i in j['instances'])") "
	adopted_pids=" $(jget "$T/body" "' '.join(str(i[k]) for i in j['instances'] for k in ('pid', 'shim_pid', 'lease_holder_pid', 'lazy_watcher_pid', 'lazy_daemon_pid') if i.get(k))") "
	not_adopted() { local l w; while read -r l; do w=${l%% *}; case "$adopted_pids" in *" $w "*) ;; *) echo "$l" ;; esac; done; }
	# Killed processes die in a moment (longer on a busy machine).
	for _ in $(seq 100); do
		[ -z "$(own_procs | grep -v "^$THAWD_PID " | not_adopted)" ] && break
		sleep 0.1
	done
	c=$(for x in $(own_containers); do case "$adopted_ids" in *" $x "*) ;; *) echo "$x" ;; esac; done)
	[ -z "$c" ] || fail "kill -9 $what, restart: containers left: $c"
	p=$(own_procs | grep -v "^$THAWD_PID " | not_adopted)
	[ -z "$p" ] || fail "kill -9 $what, restart: processes left: $p"
	m=$(own_mounts | grep -v "^$DATA/instances/[^/]*/netns$")
	[ -z "$m" ] || fail "kill -9 $what, restart: mounts left: $m"
	[ ! -d "$DATA/work" ] || [ -z "$(ls -A "$DATA/work")" ] ||
		fail "kill -9 $what, restart: work dirs left: $(ls "$DATA/work")"
	if "$THAW" store --store "$DATA/store" verify >"$T/verify" 2>&1; then
		ok "kill -9 $what: restart clean, store verify clean"
	else
		fail "kill -9 $what: store verify: $(cat "$T/verify")"
	fi
}
kill_thawd() {
	kill -9 "$THAWD_PID"
	wait "$THAWD_PID" 2>/dev/null
	THAWD_PID=""
}
hold() { # run|checkpoint|restore: hold the next runc call of that kind
	rm -f "$T/held"
	echo "$1" >"$T/hold"
}
held() { # what: wait (120 s at most) until the hold took; says where
	local end=$((SECONDS + 120))
	while [ ! -s "$T/held" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
	if [ -s "$T/held" ]; then
		echo "    held: $(sed 's/ [0-9]*$//' "$T/held")"
		return 0
	fi
	fail "$1: the snapshot never reached the hold ($(cat "$T/hold" 2>/dev/null))"
	rm -f "$T/hold"
	return 1
}

# (a) Early in the snapshot (the function loading its state: held after
# `runc run`), with an instance running: the restarted thawd adopts it
# (after_kill checks it).
st=$(api POST /functions/cpu/start)
[ "$st" = 201 ] || fail "start before the kill: $st $(cat "$T/body")"
KEPT_IID=$(jget "$T/body" "j['instance']")
KEPT_EP=$(jget "$T/body" "j['endpoint']")
spec_for 192 >"$T/big.json"
api PUT /functions/big -d @"$T/big.json" >/dev/null
hold run
st=$(api POST /functions/big/snapshot)
[ "$st" = 202 ] || fail "snapshot of big: $st $(cat "$T/body")"
held "while the function loads"
kill_thawd
after_kill "while the function loads"

# (b) During the CRIU dump (held once CRIU writes the image), restarting at
# once: the orphaned `runc checkpoint` and its CRIU must not outlive the
# recovery.
hold checkpoint
st=$(api POST /functions/big/snapshot)
[ "$st" = 202 ] || fail "snapshot of big: $st $(cat "$T/body")"
held "during the dump"
kill_thawd
after_kill "during the dump"

# (c) A re-snapshot of cpu killed during its dump: cpu's snapshot stays
# current while the new one builds and after the kill (it starts below).
# Held, not watched for: its dump and ingest take ~0.3 s, and a kill that
# came after them found a complete snapshot, rightly "ready" (issue 39).
api GET /functions/cpu >/dev/null
cpu_snap=$(jget "$T/body" "j['snapshot']['id']")
hold checkpoint
st=$(api POST /functions/cpu/snapshot)
[ "$st" = 202 ] || fail "re-snapshot of cpu: $st $(cat "$T/body")"
held "during a re-snapshot"
api GET /functions/cpu >/dev/null
[ "$(jget "$T/body" "(j['snapshot']['state'], j['snapshot']['id'])")" = "('building', '$cpu_snap')" ] &&
	ok "while cpu's re-snapshot builds, its snapshot stays current" ||
	fail "cpu during its re-snapshot: $(cat "$T/body")"
kill_thawd
after_kill "during a re-snapshot"
api GET /functions/cpu >/dev/null
[ "$(jget "$T/body" "(j['snapshot']['state'], j['snapshot']['id'])")" = "('failed', '$cpu_snap')" ] &&
	ok "a re-snapshot killed half-way leaves cpu's snapshot current" ||
	fail "cpu after a killed re-snapshot: $(cat "$T/body")"

# The old snapshot of cpu still starts; big snapshots again.  The restarted
# thawd read the ready snapshots' manifests ahead (how fast the first start
# then loads its own: test/e2e_server_healthz.sh, alone).
read_ahead() { tail -n +"$RESTARTED_AT" "$T/thawd.log" | grep -q "[0-9] snapshot manifest(s) read ahead"; }
for _ in $(seq 300); do read_ahead && break; sleep 0.1; done
read_ahead || fail "the restarted thawd did not read cpu's manifest ahead (30 s)"
st=$(api POST /functions/cpu/start)
[ "$st" = 201 ] || fail "start after restart: $st $(cat "$T/body")"
cpu_iid=$(jget "$T/body" "j['instance']")
# thaw-bench against this real thawd (its starts and DELETEs pass thawd's
# request rules: no form type on a bodiless POST), 2 starts at once.
if "$B/bench/thaw-bench" --url "$URL" --token-file "$T/token" --function cpu --burst 2 \
	--infer "GET /infer?x=7" --expect '"x": 7' --json "$T/tb.json" >"$T/tb.out" 2>&1; then
	ok "thaw-bench: 2 starts against thawd, both correct"
else
	fail "thaw-bench against thawd: $(tail -n 5 "$T/tb.out")"
fi
st=$(api POST '/functions/big/snapshot?wait=1')
[ "$st" = 200 ] || fail "snapshot of big after restart: $st $(cat "$T/body")"

# A client that gives up before the answer (a gateway's timeout) leaves no
# instance behind.  Its start is held at its runc restore until the client
# has gone, however fast the machine (a start took ~0.5 s here, the client
# gave up at 0.2 s), then let go.
hold restore
curl -s -o /dev/null --max-time 0.2 -H "Authorization: Bearer $TOKEN" -X POST "$URL/functions/big/start"
held "a start whose client went away" && kill -CONT "$(awk '{ print $NF }' "$T/held")"
for _ in $(seq 300); do
	grep -q "client closed the connection before the answer" "$T/thawd.log" && break
	sleep 0.1
done
if grep -q "client closed the connection before the answer" "$T/thawd.log"; then
	api GET /instances >/dev/null
	[ "$(jget "$T/body" "[i['function'] for i in j['instances'] if i['function'] == 'big']")" = "[]" ] &&
		ok "a start whose client went away is stopped" ||
		fail "instances after a client went away: $(cat "$T/body")"
else
	fail "the start whose client went away was not noticed"
fi
st=$(api POST /functions/big/start)
[ "$st" = 201 ] || fail "start of big: $st $(cat "$T/body")"
big_iid=$(jget "$T/body" "j['instance']")

# ---- 5. DELETE a function: its instances stop, the others' do not ----
manifests() { "$THAW" store --store "$DATA/store" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
before=$(manifests)
# Two DELETEs of it at once: one does it (204), the other answers 409 while
# the first works (the function is marked "deleting") or 404 once it is done.
curl -s -o "$T/del1.body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -X DELETE \
	"$URL/functions/cpu" >"$T/del1.code" &
del1=$!
st=$(api DELETE /functions/cpu)
wait $del1
pair=$(printf '%s\n' "$(cat "$T/del1.code")" "$st" | sort | tr '\n' ' ')
case "$pair" in
"204 409 " | "204 404 ") ok "two DELETEs of cpu at once: $pair" ;;
*) fail "two DELETEs of cpu at once: $pair ($(cat "$T/del1.body") $(cat "$T/body"))" ;;
esac
after=$(manifests)
[ "$after" = $((before - 1)) ] || fail "DELETE /functions/cpu: $before manifests before, $after after"
st=$(api GET "/instances/$cpu_iid")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['state']")" = stopped ] &&
	grep -q 'its function was deleted' "$T/body" ||
	fail "instance $cpu_iid of the deleted function: $st $(cat "$T/body")"
st=$(api GET "/instances/$big_iid")
[ "$st" = 200 ] || fail "instance $big_iid of big after deleting cpu: $st"
st=$(api POST /functions/cpu/start)
[ "$st" = 404 ] || fail "start of a deleted function: $st"

# ---- 6. SIGTERM stops thawd's instances ----
if stop_thawd; then ok "SIGTERM: exit 0"; else fail "SIGTERM: thawd did not exit 0"; fi
nothing_left "after SIGTERM"

echo "$fails failure(s)"
[ $fails = 0 ]
