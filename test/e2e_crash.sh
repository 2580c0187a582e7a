#!/usr/bin/env bash
# thawd killed with SIGKILL at random points, round after round, with real
# runc and CRIU.  Each round picks an operation, launches it, waits a random
# delay drawn over the operation's whole duration (measured once at the
# start), kills thawd -9, restarts it on the same data directory and port,
# and checks:
#   - functions: each one's spec and snapshot are the ones before the round,
#     or the ones the round's operation was making; none is left building;
#     an answer the client got (201/200/204) is the truth after the restart;
#   - instances: every instance alive before the round (but the one being
#     stopped) is listed running, adopted (counted by this thawd's metrics)
#     and its endpoint answers the function's request exactly; no other
#     instance is listed but one the round was starting;
#   - nothing left that no record explains: runc containers and runc state
#     directories, mounts under the data directory and the RAM tier,
#     processes rooted in or naming this test's directory, entries of
#     <data>/instances, <data>/work, function temp files, store leases and
#     temp files, packs without an index, RAM tier builds, reservations and
#     incomplete entries;
#   - `thaw store verify` is clean;
#   - every function's last good snapshot starts (201), answers, and stops;
#     one without a snapshot (its first cut short, or its spec changed)
#     snapshots again.
# The operations: put (create a function, change one, or send it again
# unchanged), snapshot (?wait=1), start, stop (DELETE of an instance), delete
# (DELETE of a function), and gc (thawd killed during its start-up recovery,
# whose store gc is its last step, or `thaw store gc` killed with thawd).
# Every other start is from the store: the snapshot's RAM tier entry is
# evicted first as another process sharing the tier would (flock), so that
# kills find materialisations too; the tier's budget holds 4.5 entries.
#
# THAW_CRASH_SEED replays a run (the same operations and delays; timing
# decides the rest); THAW_CRASH_ROUNDS sets the rounds; THAW_CRASH_MAX_S
# stops starting rounds after that many seconds; THAW_CRASH_KEEP_GOING=1 goes
# on after a failing round; THAW_CRASH_LOG=FILE keeps thawd's log there.
#
# Two checks, on by default, that 0 turns off (to run this test against a
# thawd from before their fixes):
#   THAW_CRASH_CHECK_MANIFESTS: every manifest in the store is a function's
#     snapshot.  A snapshot killed between its ingest (store_put writes the
#     manifest) and registry_snapshot_end leaves a manifest that no function
#     names, and so does a kill between the registry's update and
#     forget_snapshot in PUT (a changed spec), in a snapshot that replaces
#     another, and in DELETE /functions/<id> (server/api_functions.c): thawd tags its
#     manifests, and its start-up recovery deletes those of its own that no
#     function names.
#   THAW_CRASH_CHECK_DELETED: no instance of a deleted function outlives it.
#     DELETE /functions/<id> marks the function "deleting" in its file before
#     it stops anything, and removes the file once its instances are stopped;
#     a thawd killed in between leaves the mark, and the restarted one's
#     recovery finishes the delete before it adopts any instance.
# Before the rounds, each check's windows are also made to happen on purpose
# and the invariants checked after the restart: the reproduction of a DELETE
# killed ~30 ms in (where the kill lands is timing's), a function file marked
# "deleting" with its instances and a standby up, a replaced snapshot's
# manifest put back, and manifests tagged as thawd's that no function names.
set -u
B=${THAW_BUILD:-$PWD/build}
R=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
[ -x "$THAW" ] || { echo "no $THAW"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (runc, CRIU, namespaces)"; exit 77; }
for c in runc python3 curl; do
	command -v $c >/dev/null || { echo "skipped: no $c"; exit 77; }
done

SEED=${THAW_CRASH_SEED:-$(($(date +%s%N) / 1000 % 1000000))}
# A round costs ~3.5 s of wall and as much CPU on the 2-core machine alone
# (a restart, and a start of every function's snapshot in the checks), ~7 s
# of wall beside the other tests (run-tests.sh runs it so).  20 rounds try
# each of the six operations three times or so, every run with a new seed,
# for ~70 s of CPU: make test's share (30 rounds took 330 s of wall in CI's
# make test, which must end within 15 minutes); THAW_CRASH_ROUNDS=200 (and a
# larger THAW_CRASH_MAX_S) soaks.  The cap keeps a slow machine to its budget.
ROUNDS=${THAW_CRASH_ROUNDS:-20}
MAX_S=${THAW_CRASH_MAX_S:-160}
KEEP_GOING=${THAW_CRASH_KEEP_GOING:-0}
CHECK_MANIFESTS=${THAW_CRASH_CHECK_MANIFESTS:-1}
CHECK_DELETED=${THAW_CRASH_CHECK_DELETED:-1}
RANDOM=$SEED
echo "seed $SEED, $ROUNDS rounds (replay: THAW_CRASH_SEED=$SEED THAW_CRASH_ROUNDS=$ROUNDS)"

T=$(mktemp -d /tmp/thaw-e2e-crash-XXXXXX)
SHM=$(mktemp -d /dev/shm/thaw-e2e-crash-XXXXXX)
DATA=$T/data
STORE=$DATA/store
TOKEN=crash-$RANDOM-$RANDOM
echo "$TOKEN" >"$T/token"
THAWD_PID=""
PORT=0
TIER_BYTES=1G # until an entry's size is known
MIB=16
MAX_FUNCS=3
MAX_INSTS=3
fails=0
round_fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); round_fails=$((round_fails + 1)); }
ok() { echo "ok: $*"; }

. "$R/test/lib/own_procs.sh"
own_mounts() { awk -v t="$T" -v s="$SHM" 'index($5, t) == 1 || index($5, s) == 1 { print $5 }' /proc/self/mountinfo; }
own_containers() { [ -d "$DATA/runc" ] && runc --root "$DATA/runc" list -q 2>/dev/null; }
# own_cgroup_procs: "pid (instance)" of each process in the cgroup of one of
# this test's instances (thaw/cr?-<6 hex>, function/bundle.c), where runc
# restore puts CRIU before it restores: a CRIU whose runc was killed names
# nothing of $T, and is found only there.
own_cgroup_procs() {
	local f x p
	grep -lE '/thaw/cr[a-z]-[0-9a-f]{6}$' /proc/[0-9]*/cgroup 2>/dev/null | while read -r f; do
		x=$(grep -oE 'thaw/cr[a-z]-[0-9a-f]{6}$' "$f" 2>/dev/null | head -n1)
		p=${f#/proc/}
		[ -n "$x" ] && echo "${p%/cgroup} (${x#thaw/})"
	done
}

cleanup() {
	[ -n "$THAWD_PID" ] && kill -9 "$THAWD_PID" 2>/dev/null && wait "$THAWD_PID" 2>/dev/null
	for c in $(own_containers); do runc --root "$DATA/runc" delete -f "$c" >/dev/null 2>&1; done
	own_procs | awk '{print $1}' | xargs -r kill -9 2>/dev/null
	own_cgroup_procs | awk '{print $1}' | xargs -r kill -9 2>/dev/null
	for m in $(own_mounts | sort -r); do umount -l "$m" 2>/dev/null; done
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd.log (tail)"; tail -n 60 "$T/thawd.log"; }
	[ -n "${THAW_CRASH_LOG:-}" ] && cp "$T/thawd.log" "$THAW_CRASH_LOG"
	# Never rm -rf into a mount (a restore's criu-root binds a rootfs).
	if [ -n "$(own_mounts)" ]; then
		echo "mounts still there, so $T and $SHM are left: $(own_mounts | tr '\n' ' ')"
	else
		rm -rf "$T" "$SHM"
	fi
}
trap cleanup EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# rnd N: a number in [0, N) into RND, from the seeded $RANDOM (never in a
# subshell: that would not move the parent's sequence on).
rnd() { RND=$(((RANDOM * 32768 + RANDOM) % $1)); }

# launch_thawd: start it on $PORT (0 at first); STARTED_MS is when.
launch_thawd() {
	rm -f "$T/port"
	STARTED_MS=$(now_ms)
	"$THAWD" --listen "127.0.0.1:$PORT" --port-file "$T/port" --data-dir "$DATA" \
		--ram-tier "$SHM" --ram-tier-bytes "$TIER_BYTES" --token-file "$T/token" \
		>>"$T/thawd.log" 2>&1 &
	THAWD_PID=$!
}
# start_thawd: launch it and wait until it listens.  A port still held
# (by a child of the killed thawd that kept its socket, say) is a failure.
start_thawd() {
	local tries
	for tries in 1 2 3 4 5; do
		launch_thawd
		for _ in $(seq 600); do
			[ -s "$T/port" ] && break
			kill -0 "$THAWD_PID" 2>/dev/null || break
			sleep 0.05
		done
		[ -s "$T/port" ] && break
		wait "$THAWD_PID" 2>/dev/null
		THAWD_PID=""
		tail -n 3 "$T/thawd.log" | grep -q "address is in use" || break
		sleep 0.5
	done
	if [ ! -s "$T/port" ]; then
		fail "thawd did not start (port $PORT, $tries tries)"
		tail -n 20 "$T/thawd.log"
		exit 1
	fi
	[ "$tries" = 1 ] || fail "thawd could listen on port $PORT again only at try $tries"
	PORT=$(cat "$T/port")
	URL=http://127.0.0.1:$PORT
	STARTUP_MS=$(($(now_ms) - STARTED_MS))
}
kill_thawd() {
	[ -n "$THAWD_PID" ] || return 0
	kill -9 "$THAWD_PID" 2>/dev/null
	wait "$THAWD_PID" 2>/dev/null
	THAWD_PID=""
}

# api METHOD PATH [curl args…]: the status on stdout, the body in $T/body.
api() {
	local m=$1 p=$2
	shift 2
	curl -s --max-time 120 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-X "$m" "$URL$p" "$@"
}
# api_bg METHOD PATH [curl args…]: the same in the background: the status
# into $T/op.code, the body into $T/op.body; OP_PID waits for it.
api_bg() {
	local m=$1 p=$2
	shift 2
	rm -f "$T/op.code" "$T/op.body"
	curl -s --max-time 300 -o "$T/op.body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-X "$m" "$URL$p" "$@" >"$T/op.code" &
	OP_PID=$!
}
# jget FILE EXPR: a Python expression over the JSON j of FILE.
# python3 -S here and below: the standard library only, and half the
# start-up CPU without site-packages (test/lib/thawd_e2e.sh says why).
jget() { python3 -S -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

spec_for() { # GEN [STANDBY] → the CPU example's spec, with its cwd absolute and a generation in env
	python3 - "$R/bench/functions" "$MIB" "$1" "${2:-0}" <<'EOF'
import json, sys
d, mib, gen, standby = sys.argv[1:5]
s = json.load(open(d + "/cpu_example.json"))
s["cwd"] = d
s["env"]["THAW_EXAMPLE_MIB"] = mib
s["env"]["THAW_CRASH_GEN"] = gen
if int(standby):
    s["standby"] = int(standby)
print(json.dumps(s))
EOF
}

# infer EP: y of /infer?x=3 through endpoint EP, or nothing.  The answer
# is {"x": 3, "y": N}, N an integer: matched in bash, not parsed by a
# python3 (~50 ms of CPU each, and the checks call this ~100 times a run).
infer() {
	local r
	r=$(curl -s --max-time 20 "http://$1/infer?x=3")
	[[ $r =~ \"y\":\ *(-?[0-9]+)[,}\ ] ]] && echo "${BASH_REMATCH[1]}"
}

# ---- the model: what must exist ----
declare -A SNAP # function → its last good snapshot id ("" when none)
declare -A GEN  # function → the generation in its spec's env
declare -A INST # live instance → its endpoint
declare -A INSTFN # live instance → its function

EXPECT=$(cd "$R/bench/functions" && THAW_EXAMPLE_MIB=$MIB python3 -c \
	'import cpu_example as c; print(c.infer(3))')
[ -n "$EXPECT" ] || { echo "cannot compute what the function answers"; exit 1; }

# ---- durations, measured once, to scale the delays ----
start_thawd
T_STARTUP=$STARTUP_MS
spec_for 0 >"$T/spec"
t0=$(now_ms)
st=$(api PUT /functions/cra -d @"$T/spec")
T_PUT=$(($(now_ms) - t0))
[ "$st" = 201 ] || { fail "PUT /functions/cra: $st $(cat "$T/body")"; exit 1; }
GEN[cra]=0
t0=$(now_ms)
st=$(api POST '/functions/cra/snapshot?wait=1')
T_SNAP=$(($(now_ms) - t0))
[ "$st" = 200 ] || { fail "snapshot of cra: $st $(cat "$T/body")"; exit 1; }
SNAP[cra]=$(jget "$T/body" "j['job']['result']['snapshot']")
api PUT /functions/crb -d @"$T/spec" >/dev/null
GEN[crb]=0
st=$(api POST '/functions/crb/snapshot?wait=1')
[ "$st" = 200 ] || { fail "snapshot of crb: $st $(cat "$T/body")"; exit 1; }
SNAP[crb]=$(jget "$T/body" "j['job']['result']['snapshot']")
# A start from the store (a miss in the RAM tier) and one from the tier.
T_START=0
for fn in cra cra; do
	t0=$(now_ms)
	st=$(api POST /functions/$fn/start)
	t=$(($(now_ms) - t0))
	[ "$st" = 201 ] || { fail "start of $fn: $st $(cat "$T/body")"; exit 1; }
	[ $t -gt $T_START ] && T_START=$t
	iid=$(jget "$T/body" "j['instance']")
	INST[$iid]=$(jget "$T/body" "j['endpoint']")
	INSTFN[$iid]=$fn
	[ "$(infer "${INST[$iid]}")" = "$EXPECT" ] || { fail "instance $iid does not answer"; exit 1; }
done
t0=$(now_ms)
st=$(api DELETE "/instances/$iid")
T_STOP=$(($(now_ms) - t0))
[ "$st" = 204 ] || { fail "DELETE /instances/$iid: $st $(cat "$T/body")"; exit 1; }
unset "INST[$iid]" "INSTFN[$iid]"
api PUT /functions/crz -d @"$T/spec" >/dev/null
t0=$(now_ms)
st=$(api DELETE /functions/crz)
T_DELETE=$(($(now_ms) - t0))
[ "$st" = 204 ] || { fail "DELETE /functions/crz: $st $(cat "$T/body")"; exit 1; }
t0=$(now_ms)
"$THAW" store --store "$STORE" gc >"$T/gc.out" 2>&1 || { fail "thaw store gc: $(cat "$T/gc.out")"; exit 1; }
T_GC=$(($(now_ms) - t0))
# A RAM tier with room for 4 entries and a half: the instances (3 at most)
# lease theirs, a start needs one more, and the rest is evicted, so that
# starts often materialise from the store and a kill finds them doing it.
api GET /metrics >/dev/null
entry=$(awk '$1 == "thaw_ram_tier_bytes" { print $2 }' "$T/body")
[ -n "$entry" ] && [ "$entry" -gt 0 ] 2>/dev/null || { fail "no RAM tier bytes in the metrics"; exit 1; }
TIER_BYTES=$((entry * 9 / 2))
# A restart's recovery, with an instance to adopt and a store to collect.
kill_thawd
start_thawd
[ $STARTUP_MS -gt $T_STARTUP ] && T_STARTUP=$STARTUP_MS
echo "figure: durations (ms): put $T_PUT, snapshot $T_SNAP, start $T_START, stop $T_STOP," \
	"delete $T_DELETE, store gc $T_GC, thawd start-up $T_STARTUP; RAM tier entry $entry bytes, budget $TIER_BYTES"

# ---- the checks after a restart ----

# What this thawd says: "fn state id gen" lines, "-" for none.
functions_now() {
	api GET /functions >/dev/null
	python3 -S - "$T/body" <<'EOF'
import json, sys
for f in json.load(open(sys.argv[1]))["functions"]:
    s = f["snapshot"]
    print(f["id"], s["state"], s["id"] or "-", f["env"].get("THAW_CRASH_GEN", "-"))
EOF
}
# "iid state function endpoint pid…" lines.
instances_now() {
	api GET /instances >/dev/null
	python3 -S - "$T/body" <<'EOF'
import json, sys
for i in json.load(open(sys.argv[1]))["instances"]:
    pids = [str(i[k]) for k in ("pid", "shim_pid", "lease_holder_pid", "lazy_watcher_pid",
                                "lazy_daemon_pid") if i.get(k)]
    print(i.get("instance", "?"), i.get("state", "?"), i.get("function", "?"),
          i.get("endpoint") or "-", " ".join(pids))
EOF
}

# check_functions: against the model and what the round was doing
# (OP, OP_FN, OP_GEN, OP_CODE, OP_SNAP); updates the model.
check_functions() {
	local fn state id gen seen=" "
	while read -r fn state id gen; do
		seen="$seen$fn "
		[ "$id" = - ] && id=""
		if [ -z "${GEN[$fn]+x}" ]; then
			# Not in the model: only the function this round created.
			if [ "$OP" = put ] && [ "$fn" = "$OP_FN" ] && [ -z "$id" ] && [ "$gen" = "$OP_GEN" ]; then
				GEN[$fn]=$gen
				SNAP[$fn]=""
			else
				fail "function $fn ($state $id gen $gen) was never created"
			fi
			continue
		fi
		[ "$state" != building ] || fail "function $fn: left building after the restart"
		if [ "$gen" != "${GEN[$fn]}" ]; then
			if [ "$OP" = put ] && [ "$fn" = "$OP_FN" ] && [ "$gen" = "$OP_GEN" ]; then
				# The change landed: its snapshot was forgotten with it.
				[ -z "$id" ] || fail "function $fn changed but kept snapshot $id"
				GEN[$fn]=$gen
				SNAP[$fn]=""
				continue
			fi
			fail "function $fn: spec generation $gen, expected ${GEN[$fn]}"
		fi
		if [ "$id" != "${SNAP[$fn]}" ]; then
			if [ "$OP" = snapshot ] && [ "$fn" = "$OP_FN" ] && [ -n "$id" ] && [ "$state" = ready ]; then
				SNAP[$fn]=$id # the new one was complete when thawd died
			else
				fail "function $fn: snapshot '${id}' ($state), expected '${SNAP[$fn]}'"
			fi
		fi
	done < <(functions_now)
	for fn in "${!GEN[@]}"; do
		case "$seen" in *" $fn "*) continue ;; esac
		if [ "$OP" = delete ] && [ "$fn" = "$OP_FN" ]; then
			DELETED_FN=$fn # the delete had landed
		else
			fail "function $fn is gone"
		fi
		unset "GEN[$fn]" "SNAP[$fn]"
	done
	# What the client was told is what is.
	case "$OP:$OP_CODE" in
	put:201 | put:200)
		[ "${GEN[$OP_FN]:-}" = "$OP_GEN" ] || fail "PUT of $OP_FN answered $OP_CODE, but its spec is not there"
		;;
	delete:204)
		[ -z "${GEN[$OP_FN]+x}" ] || fail "DELETE of function $OP_FN answered 204, but it is listed"
		;;
	snapshot:200)
		[ "${SNAP[$OP_FN]}" = "$OP_SNAP" ] ||
			fail "snapshot of $OP_FN answered 200 ($OP_SNAP), but its snapshot is '${SNAP[$OP_FN]}'"
		;;
	esac
}

# check_instances: every listed one running and answering; the model's
# all there (but the one being stopped); updates the model.  LISTED gets
# the listed ids, ADOPTED_PIDS their processes.
check_instances() {
	local iid state fn ep pids n=0 got
	declare -A listed=()
	LISTED=" "
	ADOPTED_PIDS=" "
	while read -r iid state fn ep pids; do
		[ -n "$iid" ] || continue
		listed[$iid]=1
		LISTED="$LISTED$iid "
		ADOPTED_PIDS="$ADOPTED_PIDS$pids "
		n=$((n + 1))
		[ "$state" = running ] || fail "instance $iid of $fn is listed $state"
		if [ -z "${INST[$iid]+x}" ]; then
			if [ "$OP" = start ] && [ "$fn" = "$OP_FN" ] && [ -z "$NEW_IID" ]; then
				NEW_IID=$iid # the round's start had got it running
				INST[$iid]=$ep
				INSTFN[$iid]=$fn
			else
				fail "instance $iid of $fn ($state, $ep) was never started"
				continue
			fi
		fi
		got=$(infer "$ep")
		[ "$got" = "$EXPECT" ] || fail "instance $iid of $fn at $ep answers '$got', expected $EXPECT"
		# An instance of the function this round deleted.  With the check
		# off, it stays in the model: adopted, and it must keep answering.
		if [ -n "$DELETED_FN" ] && [ "$fn" = "$DELETED_FN" ]; then
			if [ "$OP_CODE" = 204 ]; then
				fail "DELETE of function $fn answered 204, but its instance $iid is listed"
			elif [ "$CHECK_DELETED" = 1 ]; then
				fail "instance $iid of the deleted function $fn outlives it (THAW_CRASH_CHECK_DELETED)"
			else
				SURVIVORS=$((SURVIVORS + 1))
			fi
		fi
	done < <(instances_now)
	for iid in "${!INST[@]}"; do
		[ -n "${listed[$iid]:-}" ] && continue
		if { [ "$OP" = stop ] && [ "$iid" = "$OP_IID" ]; } ||
			{ [ -n "$DELETED_FN" ] && [ "${INSTFN[$iid]}" = "$DELETED_FN" ]; }; then
			unset "INST[$iid]" "INSTFN[$iid]"
			continue
		fi
		fail "instance $iid of ${INSTFN[$iid]} was not adopted"
		unset "INST[$iid]" "INSTFN[$iid]"
	done
	case "$OP:$OP_CODE" in
	start:201)
		iid=$(jget "$T/op.body" "j['instance']")
		[ -n "${listed[$iid]:-}" ] || fail "start of $OP_FN answered 201 ($iid), but it is not listed"
		;;
	stop:204)
		[ -z "${listed[$OP_IID]:-}" ] || fail "DELETE of $OP_IID answered 204, but it is listed"
		;;
	esac
	# Adopted: this thawd counts them as its own.
	api GET /metrics >/dev/null
	got=$(awk '$1 == "thaw_instances_running" { print $2 }' "$T/body")
	[ "$got" = "$n" ] || fail "thaw_instances_running is '$got', $n instance(s) listed"
}

# check_leftovers: nothing that no record explains.
check_leftovers() {
	local c p m x hex
	c=$(for x in $(own_containers); do case "$LISTED" in *" $x "*) ;; *) echo "$x" ;; esac; done)
	[ -z "$c" ] || fail "containers left: $c"
	# runc's own state directories too: runc lists only those with a state.
	c=$(ls -A "$DATA/runc" 2>/dev/null | while read -r x; do
		case "$LISTED" in *" $x "*) ;; *) echo "$x: $(ls -A "$DATA/runc/$x" | tr '\n' ' ')" ;; esac
	done)
	[ -z "$c" ] || fail "in the runc root $DATA/runc, no instance explains: $c"
	not_adopted() { local l w; while read -r l; do w=${l%% *}; case "$ADOPTED_PIDS" in *" $w "*) ;; *) echo "$l" ;; esac; done; }
	for _ in $(seq 100); do # killed processes die in a moment, longer on a busy machine
		p=$(own_procs | grep -v "^$THAWD_PID " | not_adopted)
		[ -z "$p" ] && break
		sleep 0.1
	done
	[ -z "$p" ] || fail "processes left: $p"
	for _ in $(seq 100); do
		p=$(own_cgroup_procs | while read -r x w; do
			w=${w#(}
			case "$LISTED" in *" ${w%)} "*) ;; *) echo "$x $w" ;; esac
		done)
		[ -z "$p" ] && break
		sleep 0.1
	done
	[ -z "$p" ] || fail "processes left in the cgroups of instances no record explains: $p"
	m=$(own_mounts | while read -r x; do
		case "$x" in "$DATA"/instances/*)
			x=${x#"$DATA"/instances/}
			x=${x%/netns}
			case "$LISTED" in *" $x "*) continue ;; esac
			echo "$DATA/instances/$x"
			;;
		*) echo "$x" ;; esac
	done)
	[ -z "$m" ] || fail "mounts left: $m"
	x=$(ls -A "$DATA/instances" 2>/dev/null | while read -r f; do
		case "$LISTED" in *" ${f%.json} "*) ;; *) echo "$f" ;; esac
	done)
	[ -z "$x" ] || fail "in $DATA/instances, no record explains: $x"
	[ ! -d "$DATA/work" ] || [ -z "$(ls -A "$DATA/work")" ] ||
		fail "snapshot work dirs left: $(ls "$DATA/work")"
	x=$(ls -A "$DATA/functions" | grep -v '^[a-z0-9][a-z0-9._-]*\.json$')
	[ -z "$x" ] || fail "in $DATA/functions: $x"
	x=$(ls -A "$STORE/leases" "$STORE/tmp" 2>&1 | grep -v -e '^$' -e ':$')
	[ -z "$x" ] || fail "store leases or temp files left: $x"
	x=$(cd "$STORE/packs" && for f in *.pack; do [ -e "$f" ] && [ ! -e "${f%.pack}.idx" ] && echo "$f"; done)
	[ -z "$x" ] || fail "packs without an index: $x"
	# The RAM tier: .locks/, and entries (<hex>/ with <hex>.meta), nothing else.
	x=$(cd "$SHM" && for f in * .[!.]*; do
		[ -e "$f" ] || continue
		case "$f" in
		.locks) continue ;;
		*.meta) hex=${f%.meta} ;;
		*) hex=$f ;;
		esac
		[[ "$hex" =~ ^[0-9a-f]{64}$ ]] && [ -d "$hex" ] && [ -f "$hex.meta" ] && continue
		echo "$f"
	done)
	[ -z "$x" ] || fail "in the RAM tier, not an entry: $x"
}

check_store() {
	"$THAW" store --store "$STORE" verify >"$T/verify" 2>&1 || fail "store verify: $(tail -n 5 "$T/verify")"
	[ "$CHECK_MANIFESTS" = 1 ] || return 0
	local want=" ${SNAP[*]} " id
	# Each manifest's "id" (ls --json: [{"id": …, "name": …, …}, …]).
	for id in $("$THAW" store --store "$STORE" ls --json | grep -o '"id": *"[^"]*"' | cut -d'"' -f4); do
		case "$want" in *" $id "*) ;; *) fail "manifest $id is no function's snapshot" ;; esac
	done
}

# Every function's last good snapshot starts, answers, and stops.
check_startable() {
	local fn st iid ep snap
	for fn in "${!SNAP[@]}"; do
		[ -n "${SNAP[$fn]}" ] || continue
		st=$(api POST /functions/$fn/start)
		if [ "$st" != 201 ]; then
			fail "start of $fn (snapshot ${SNAP[$fn]}): $st $(head -c 300 "$T/body")"
			continue
		fi
		# One python3 for the three fields, not one each.
		{ read -r iid; read -r ep; read -r snap; } < <(jget "$T/body" "j['instance'], j['endpoint'], j['snapshot'], sep='\\n'")
		[ "$snap" = "${SNAP[$fn]}" ] || fail "start of $fn ran snapshot $snap, not ${SNAP[$fn]}"
		[ "$(infer "$ep")" = "$EXPECT" ] || fail "instance $iid of $fn (started from its snapshot) does not answer"
		st=$(api DELETE "/instances/$iid")
		[ "$st" = 204 ] || fail "DELETE /instances/$iid: $st $(cat "$T/body")"
	done
}

# A function whose snapshot was cut short snapshots again, uninterrupted
# (and the rounds have snapshots to start).
snapshot_missing() {
	local fn st
	for fn in $(sorted_keys "${!SNAP[@]}"); do
		[ -z "${SNAP[$fn]}" ] || continue
		st=$(api POST "/functions/$fn/snapshot?wait=1")
		if [ "$st" = 200 ]; then
			SNAP[$fn]=$(jget "$T/body" "j['job']['result']['snapshot']")
		else
			fail "snapshot of $fn after the restart: $st $(head -c 300 "$T/body")"
		fi
	done
}

# ---- the rounds ----

# What the restarted thawd's recovery did, from its log since line $1:
# "adopted 1, stopped 2, …" into RECOVERY, and added up in RECOVERED.
declare -A RECOVERED=()
RECOVERY_WHAT=(adopted "still serves" stopped "earlier run was" runc-killed "runc process"
	unmounted "unmounted" containers "container .* left by an earlier run, deleted"
	work-dirs "removed .*/work, left by" marked-failed "was building when thawd stopped"
	record-leftovers "start cut short" stale-leases "stale lease"
	tier-leftovers "interrupted materialisation|removing incomplete entry"
	deletes-finished "was being deleted when thawd stopped: delete finished"
	manifests-dropped "which no function names .*: deleted"
	gc-freed "store gc: [1-9]")
recovery_summary() {
	local i k n
	RECOVERY=""
	tail -n +"$(($1 + 1))" "$T/thawd.log" >"$T/round.log"
	for ((i = 0; i < ${#RECOVERY_WHAT[@]}; i += 2)); do
		k=${RECOVERY_WHAT[i]}
		n=$(grep -cE "${RECOVERY_WHAT[i + 1]}" "$T/round.log")
		[ "$n" -gt 0 ] || continue
		RECOVERY="$RECOVERY${RECOVERY:+, }$k $n"
		RECOVERED[$k]=$((${RECOVERED[$k]:-0} + n))
	done
	[ -n "$RECOVERY" ] || RECOVERY="nothing to recover"
}

# delay_for MS: a delay in [0, 1.2 MS] (at least 20 ms wide) into DELAY.
delay_for() {
	local span=$(($1 * 12 / 10))
	[ $span -ge 20 ] || span=20
	rnd $((span + 1))
	DELAY=$RND
	SPAN=$span
}
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# evict ID: what the tier's eviction does (restore/tier.c, remove_entry), as
# another process that shares the tier would do it: under the entry's lock,
# taken exclusively without waiting (a leased entry stays), its metadata
# first, then its directory.  True if it was evicted.
evict() {
	local e=$SHM/${1#sha256:}
	[ -f "$e.meta" ] || return 1
	flock -xn "$SHM/.locks/${1#sha256:}" sh -c 'rm -f "$1.meta" && rm -rf "$1"' sh "$e"
}

pick_op() {
	local n_fn=${#GEN[@]} n_inst=${#INST[@]} n_snap=0 fn
	for fn in "${!SNAP[@]}"; do [ -n "${SNAP[$fn]}" ] && n_snap=$((n_snap + 1)); done
	rnd 100
	if [ $RND -lt 12 ]; then OP=put
	elif [ $RND -lt 30 ]; then OP=snapshot
	elif [ $RND -lt 54 ]; then OP=start
	elif [ $RND -lt 74 ]; then OP=stop
	elif [ $RND -lt 92 ]; then OP=gc
	else OP=delete
	fi
	# Two functions at least before one is deleted; a stop needs an
	# instance, a start a snapshot and room, a snapshot a function.
	[ $OP = delete ] && [ $n_fn -lt 2 ] && OP=put
	[ $OP = start ] && [ $n_inst -ge $MAX_INSTS ] && OP=stop
	[ $OP = stop ] && [ $n_inst = 0 ] && OP=start
	[ $OP = start ] && [ $n_snap = 0 ] && OP=snapshot
	[ $OP = snapshot ] && [ $n_fn = 0 ] && OP=put
	return 0
}
# pick_from WORD…: one of them into PICK.
pick_from() { rnd $#; shift $RND; PICK=$1; }
sorted_keys() { printf '%s\n' "$@" | sort | tr '\n' ' '; }

# ---- on purpose: a delete cut short, and manifests that no function names ----
# The rounds hit these windows only by chance; here each is made to happen,
# and the invariants are checked as after a round.  Function crx is made for
# them and gone at the end.

# check_restart WHAT: the checks of a round after the restart, for what the
# test did (OP…, set by the caller); the log since line $lines on failure.
check_restart() {
	round_fails=0
	NEW_IID=""
	check_functions
	check_instances
	check_leftovers
	check_store
	if [ $round_fails = 0 ]; then
		ok "$1"
		return 0
	fi
	echo "--- thawd.log since: $1"
	tail -n +"$((lines + 1))" "$T/thawd.log" | tail -n 80 | sed 's/^/    /'
	[ "$KEEP_GOING" = 1 ] || exit 1
}
reset_op() { OP=none OP_FN="" OP_GEN="" OP_IID="" OP_SNAP="" OP_CODE="" OP_PID="" DELETED_FN=""; }
# crx_up [STANDBY]: function crx with a ready snapshot and 2 instances
# running, in the model (a standby, if asked for, is not: none may survive).
crx_up() {
	local st iid n=0
	if [ -z "${GEN[crx]+x}" ] || [ "${1:-0}" != 0 ]; then
		spec_for 0 "${1:-0}" >"$T/spec"
		st=$(api PUT /functions/crx -d @"$T/spec")
		[ "$st" = 201 ] || [ "$st" = 200 ] || { fail "PUT /functions/crx: $st $(cat "$T/body")"; exit 1; }
		GEN[crx]=0
		SNAP[crx]=${SNAP[crx]:-}
	fi
	if [ -z "${SNAP[crx]}" ]; then
		st=$(api POST '/functions/crx/snapshot?wait=1')
		[ "$st" = 200 ] || { fail "snapshot of crx: $st $(cat "$T/body")"; exit 1; }
		SNAP[crx]=$(jget "$T/body" "j['job']['result']['snapshot']")
	fi
	for iid in "${!INSTFN[@]}"; do [ "${INSTFN[$iid]}" = crx ] && n=$((n + 1)); done
	for ((; n < 2; n++)); do
		st=$(api POST /functions/crx/start)
		[ "$st" = 201 ] || { fail "start of crx: $st $(cat "$T/body")"; exit 1; }
		iid=$(jget "$T/body" "j['instance']")
		INST[$iid]=$(jget "$T/body" "j['endpoint']")
		INSTFN[$iid]=crx
	done
}
crx_endpoints() { for iid in "${!INSTFN[@]}"; do [ "${INSTFN[$iid]}" = crx ] && echo "${INST[$iid]}"; done; }
standbys_of_crx() {
	api GET /instances >/dev/null
	jget "$T/body" "len([i for i in j['instances'] if i.get('function') == 'crx' and i.get('state') == 'standby'])"
}

if [ "$CHECK_DELETED" = 1 ]; then
	# The reproduction: DELETE of a function with 2 instances, thawd
	# killed -9 ~30 ms later.  Where the kill lands is timing's: before
	# the mark (the function and its instances are all there), between
	# the mark and the end (the restart finishes the delete), or after.
	hit=""
	for delay in 30 15 60 100; do
		crx_up
		reset_op
		OP=delete OP_FN=crx
		eps=$(crx_endpoints)
		lines=$(wc -l <"$T/thawd.log")
		api_bg DELETE /functions/crx
		sleep_ms $delay
		kill_thawd
		wait "$OP_PID"
		OP_CODE=$(cat "$T/op.code" 2>/dev/null)
		start_thawd
		check_restart "DELETE /functions/crx killed at $delay ms (answer ${OP_CODE:--}): the invariants hold"
		if tail -n +"$((lines + 1))" "$T/thawd.log" |
			grep -q "function crx was being deleted when thawd stopped: delete finished"; then
			hit=$delay
			st=$(api GET /functions/crx)
			[ "$st" = 404 ] || fail "crx after its delete was finished: GET answers $st"
			for ep in $eps; do
				[ -z "$(infer "$ep")" ] || fail "an instance of the deleted crx still answers at $ep"
			done
			st=$(api DELETE /functions/crx)
			[ "$st" = 404 ] || fail "a second DELETE of crx: $st $(cat "$T/body")"
			break
		fi
		if [ -n "${GEN[crx]+x}" ]; then
			echo "note: the kill at $delay ms came before the delete began"
		else
			echo "note: the kill at $delay ms came after the delete was done"
		fi
	done
	if [ -n "$hit" ]; then
		ok "the kill at $hit ms came mid-delete: the restart finished it, no instance of crx outlives it"
	else
		echo "note: no kill came mid-delete; the marked file below makes that state"
	fi

	# The state a kill between the mark and the first stop leaves, made
	# so: crx with 2 instances and a standby, thawd killed, its file
	# marked "deleting" as DELETE marks it.
	crx_up 1
	for _ in $(seq 200); do
		[ "$(standbys_of_crx)" -ge 1 ] 2>/dev/null && break
		sleep 0.1
	done
	nsb=$(standbys_of_crx)
	[ "${nsb:-0}" -ge 1 ] 2>/dev/null || { fail "crx (standby 1) has no standby after 20 s"; nsb=0; }
	eps=$(crx_endpoints)
	kill_thawd
	python3 - "$DATA/functions/crx.json" <<'EOF'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j["deleting"] = True
open(p, "w").write(json.dumps(j))
EOF
	reset_op
	OP=delete OP_FN=crx
	lines=$(wc -l <"$T/thawd.log")
	start_thawd
	check_restart "crx marked deleting with 2 instances and $nsb standby up: the restart finished the delete"
	n=$(tail -n +"$((lines + 1))" "$T/thawd.log" |
		sed -n 's/.*function crx was being deleted when thawd stopped: delete finished, \([0-9]*\) instance.*/\1/p')
	[ "$n" = $((2 + nsb)) ] || fail "the restart stopped '${n}' instance(s) of crx, expected $((2 + nsb))"
	for ep in $eps; do
		[ -z "$(infer "$ep")" ] || fail "an instance of the deleted crx still answers at $ep"
	done
	[ ! -e "$DATA/functions/crx.json" ] || fail "crx's file is still there"
	spec_for 0 >"$T/spec"
	st=$(api PUT /functions/crx -d @"$T/spec")
	[ "$st" = 201 ] || fail "PUT of crx after its delete was finished: $st $(cat "$T/body")"
	st=$(api DELETE /functions/crx)
	[ "$st" = 204 ] || fail "DELETE /functions/crx: $st $(cat "$T/body")"
	[ $fails = 0 ] || [ "$KEEP_GOING" = 1 ] || exit 1
fi

if [ "$CHECK_MANIFESTS" = 1 ]; then
	# A snapshot that replaces another, killed before it deletes the old
	# manifest: made so by putting the old manifest back, bytes and all.
	old=${SNAP[crb]}
	cp "$STORE/manifests/${old#sha256:}" "$T/old-manifest"
	st=$(api POST '/functions/crb/snapshot?wait=1')
	[ "$st" = 200 ] || { fail "snapshot of crb: $st $(cat "$T/body")"; exit 1; }
	SNAP[crb]=$(jget "$T/body" "j['job']['result']['snapshot']")
	kill_thawd
	cp "$T/old-manifest" "$STORE/manifests/${old#sha256:}"
	# What a snapshot killed after its manifest's write leaves (its
	# function there, naming another snapshot; or gone), tagged as thawd
	# tags its snapshots; one tagged by another data directory's thawd
	# sharing the store; and one `thaw store put` made, untagged.
	reg=$(realpath "$DATA/functions")
	head -c 100000 /dev/urandom >"$T/blob"
	tagged() { echo "{\"thawd\":{\"registry\":\"$1\",\"function\":\"$2\",\"job\":\"job-99\"}}"; }
	o1=$("$THAW" store --store "$STORE" put --name cra --meta "$(tagged "$reg" cra)" "$T/blob" 2>>"$T/put.err")
	o2=$("$THAW" store --store "$STORE" put --name crgone --meta "$(tagged "$reg" crgone)" "$T/blob" 2>>"$T/put.err")
	k1=$("$THAW" store --store "$STORE" put --name cra --meta "$(tagged /elsewhere/functions cra)" "$T/blob" 2>>"$T/put.err")
	k2=$("$THAW" store --store "$STORE" put --name mine "$T/blob" 2>>"$T/put.err")
	reset_op
	lines=$(wc -l <"$T/thawd.log")
	start_thawd
	"$THAW" store --store "$STORE" ls --json >"$T/ls.json"
	have=" $(jget "$T/ls.json" "' '.join(m['id'] for m in j)") "
	for id in "$old" "$o1" "$o2"; do
		case "$have" in *" $id "*) fail "manifest $id, of this thawd and named by no function, was kept" ;; esac
	done
	for id in "$k1" "$k2" "${SNAP[cra]}" "${SNAP[crb]}"; do
		case "$have" in *" $id "*) ;; *) fail "manifest '$id' was deleted" ;; esac
	done
	n=$(tail -n +"$((lines + 1))" "$T/thawd.log" | grep -c "which no function names (left by an earlier run): deleted")
	[ "$n" = 3 ] || fail "the restart says it deleted $n manifest(s), expected 3"
	# Not this thawd's: the test's, removed for the store check.
	"$THAW" store --store "$STORE" rm "$k1" "$k2" || fail "thaw store rm $k1 $k2"
	check_restart "manifests no function names: this thawd's deleted (a replaced snapshot's, two tagged), another's and an untagged one kept"
fi

T_BEGIN=$(now_ms)
GENS=0
SURVIVORS=0
rounds_run=0
for round in $(seq "$ROUNDS"); do
	if [ $(($(now_ms) - T_BEGIN)) -gt $((MAX_S * 1000)) ]; then
		echo "stopping after $rounds_run rounds: THAW_CRASH_MAX_S=$MAX_S seconds spent"
		break
	fi
	round_fails=0
	OP_FN="" OP_GEN="" OP_IID="" OP_SNAP="" OP_CODE="" OP_PID="" NEW_IID="" GC_PID="" DELETED_FN=""
	pick_op
	lines=$(wc -l <"$T/thawd.log")
	what=""
	case $OP in
	put)
		GENS=$((GENS + 1))
		rnd 3
		if { [ $RND = 0 ] && [ ${#GEN[@]} -lt $MAX_FUNCS ]; } || [ ${#GEN[@]} = 0 ]; then
			for OP_FN in cra crb crc crd; do [ -z "${GEN[$OP_FN]+x}" ] && break; done
			OP_GEN=$GENS
			what="create"
		else
			pick_from $(sorted_keys "${!GEN[@]}")
			OP_FN=$PICK
			rnd 2
			if [ $RND = 0 ]; then OP_GEN=${GEN[$OP_FN]}; what="same"; else OP_GEN=$GENS; what="change"; fi
		fi
		spec_for "$OP_GEN" >"$T/spec"
		delay_for $T_PUT
		api_bg PUT "/functions/$OP_FN" -d @"$T/spec"
		;;
	snapshot)
		# The functions without a snapshot first.
		cands=""
		for fn in $(sorted_keys "${!SNAP[@]}"); do [ -z "${SNAP[$fn]}" ] && cands="$cands $fn"; done
		[ -n "$cands" ] || cands=$(sorted_keys "${!SNAP[@]}")
		pick_from $cands
		OP_FN=$PICK
		delay_for $T_SNAP
		api_bg POST "/functions/$OP_FN/snapshot?wait=1"
		;;
	start)
		# Every other start from the store: a function without
		# instances (they lease its entry), its entry evicted first,
		# so that the kill may find the tier materialising it.
		rnd 2
		cold=$RND
		cands="" idle=""
		for fn in $(sorted_keys "${!SNAP[@]}"); do
			[ -n "${SNAP[$fn]}" ] || continue
			cands="$cands $fn"
			[[ " ${INSTFN[*]} " == *" $fn "* ]] || idle="$idle $fn"
		done
		[ $cold = 0 ] && [ -n "$idle" ] && cands=$idle
		pick_from $cands
		OP_FN=$PICK
		what=warm
		[ $cold = 0 ] && evict "${SNAP[$OP_FN]}" && what=cold
		delay_for $T_START
		api_bg POST "/functions/$OP_FN/start"
		;;
	stop)
		pick_from $(sorted_keys "${!INST[@]}")
		OP_IID=$PICK
		OP_FN=${INSTFN[$OP_IID]}
		delay_for $T_STOP
		api_bg DELETE "/instances/$OP_IID"
		;;
	delete)
		# A function with instances first: its DELETE stops them.
		cands=""
		for iid in $(sorted_keys "${!INSTFN[@]}"); do
			[ -n "${GEN[${INSTFN[$iid]}]+x}" ] && cands="$cands ${INSTFN[$iid]}"
		done
		[ -n "$cands" ] || cands=$(sorted_keys "${!GEN[@]}")
		pick_from $cands
		OP_FN=$PICK
		n=0
		for iid in "${!INSTFN[@]}"; do [ "${INSTFN[$iid]}" = "$OP_FN" ] && n=$((n + 1)); done
		what="$n instance(s)"
		delay_for $((T_DELETE + n * T_STOP))
		api_bg DELETE "/functions/$OP_FN"
		;;
	gc)
		rnd 2
		if [ $RND = 0 ]; then
			# During thawd's start-up recovery (its store gc last).
			what="start-up"
			delay_for $T_STARTUP
			kill_thawd
			launch_thawd
		else
			what="thaw store gc"
			delay_for $T_GC
			"$THAW" store --store "$STORE" gc >>"$T/gc.out" 2>&1 &
			GC_PID=$!
		fi
		;;
	esac
	sleep_ms $DELAY
	kill_thawd
	if [ -n "$GC_PID" ]; then
		kill -9 "$GC_PID" 2>/dev/null
		wait "$GC_PID" 2>/dev/null
	fi
	if [ -n "$OP_PID" ]; then
		wait "$OP_PID"
		OP_CODE=$(cat "$T/op.code" 2>/dev/null)
		[ "$OP" = snapshot ] && [ "$OP_CODE" = 200 ] && OP_SNAP=$(jget "$T/op.body" "j['job']['result']['snapshot']")
	fi
	start_thawd
	recovery_summary "$lines"

	check_functions
	check_instances
	check_leftovers
	check_store
	check_startable
	snapshot_missing
	rounds_run=$round

	case $OP in
	put) desc="put($OP_FN, $what)" ;;
	snapshot) desc="$OP($OP_FN)" ;;
	start) desc="$OP($OP_FN, $what)" ;;
	stop) desc="stop($OP_IID)" ;;
	delete) desc="delete($OP_FN, $what)" ;;
	gc) desc="gc($what)" ;;
	esac
	if [ $round_fails = 0 ]; then result=ok; else result="FAIL ($round_fails)"; fi
	echo "seed $SEED round $round/$ROUNDS op $desc delay ${DELAY}/${SPAN} ms answer ${OP_CODE:--}" \
		"result $result: ${#GEN[@]} function(s), ${#INST[@]} instance(s); recovery: $RECOVERY"
	if [ $round_fails != 0 ]; then
		echo "--- thawd.log of the round"
		tail -n +"$((lines + 1))" "$T/thawd.log" | tail -n 80 | sed 's/^/    /'
		[ "$KEEP_GOING" = 1 ] || break
	fi
done

echo "figure: $rounds_run rounds in $((($(now_ms) - T_BEGIN) / 1000)) s"
summary=""
for ((i = 0; i < ${#RECOVERY_WHAT[@]}; i += 2)); do
	k=${RECOVERY_WHAT[i]}
	summary="$summary${summary:+, }$k ${RECOVERED[$k]:-0}"
done
echo "figure: recovery over all rounds: $summary"
[ $SURVIVORS = 0 ] || echo "note: $SURVIVORS instance(s) outlived their deleted function (THAW_CRASH_CHECK_DELETED=1 fails on it)"
[ $fails = 0 ] && ok "$rounds_run rounds, every invariant held after every restart"
echo "$fails failure(s) (seed $SEED)"
[ $fails = 0 ]
