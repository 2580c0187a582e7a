# test/lib/instances.sh — what the end-to-end tests of instances share.
# Sourced (not run: run-tests.sh runs test/*.sh only) once the test has set
#   W     its temporary directory (its mounts are those under it)
#   TIER  its RAM tier (the lazy-pages daemons it caused serve from there)
#   D     its data directory;  FN  the prefix of its function ids;  THAW  the thaw binary
# It gives ok/fail (counting failures in $fails), jget, the processes the test
# made, cleanup_instances (for the EXIT trap) and check_nothing_left.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

jget() { # file key...: a value from a JSON file (python3 -S: as thawd_e2e.sh's)
	python3 -S -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v = v[k]
print(v)' "$@"
}

# snapshot_fn SPEC: `thaw snapshot --id $FN SPEC` into $W/snap.json, SNAP its
# id; the test ends (exit 1) if the snapshot fails, as nothing after it can run.
snapshot_fn() {
	if ! "$THAW" --data-dir "$D" snapshot --id "$FN" "$1" >"$W/snap.json" 2>"$W/snap.err"; then
		cat "$W/snap.err"
		echo "FAIL: thaw snapshot"
		exit 1
	fi
	SNAP=$(jget "$W/snap.json" snapshot)
	echo "snapshot $SNAP: $(jget "$W/snap.json" image_bytes) bytes of image"
}

# stop_instances: `thaw stop` of every ${ID[@]}; each of their processes
# (${HPID[@]}) must be gone after it.
stop_instances() {
	local i
	"$THAW" --data-dir "$D" stop "${ID[@]}" >/dev/null 2>"$W/stop.err" || fail "thaw stop: $(cat "$W/stop.err")"
	for i in "${!ID[@]}"; do
		[ -n "$(alive "${HPID[$i]}")" ] && fail "instance $i: process ${HPID[$i]} still there"
	done
}

# A zombie is gone but for its parent's wait (the restored containers' parent,
# runc, has exited, so whoever adopted them reaps them in its own time).
alive() { local p; for p; do grep -qs '^State:[[:space:]]*[ZX]' /proc/$p/status || [ ! -d /proc/$p ] || echo $p; done; }
# Processes of the test's containers: runc puts each in cgroup thaw/<id>, and
# every instance id starts with the function id.
container_procs() { alive $(grep -l "/thaw/$FN" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3); }
# Shims and lazy-pages watchers are forks of `thaw --data-dir $D start`.
shim_procs() { alive $(pgrep -f -- "--data-dir $D start"); }
# Lazy-pages daemons serving from the test's tier.
daemon_procs() { alive $(pgrep -f -- "lazy-pages --images-dir $TIER"); }
test_procs() { echo $(shim_procs) $(daemon_procs) $(container_procs); }
our_mounts() { awk -v w="$W" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo; }

# Stop every instance the test recorded, then force away whatever is left.
cleanup_instances() {
	local r p
	for r in "$D"/instances/*.json; do
		[ -f "$r" ] && "$THAW" --data-dir "$D" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
	runc --root "$D/runc" list -q 2>/dev/null | xargs -r -n1 runc --root "$D/runc" delete -f 2>/dev/null
	for p in $(test_procs); do kill -9 "$p" 2>/dev/null; done
	our_mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
}

# Nothing of the test may be left: containers, processes (lazy-pages daemons
# included), mounts, instance directories and records.
check_nothing_left() { # what
	local what=$1 c p m i
	c=$(runc --root "$D/runc" list -q 2>/dev/null)
	p=$(test_procs)
	m=$(our_mounts)
	i=$(ls -A "$D/instances" 2>/dev/null)
	[ -z "$c" ] || fail "$what: containers left: $c"
	[ -z "${p// /}" ] || fail "$what: processes left: $p ($(ps -o pid,comm,args -p ${p// /,} 2>/dev/null | tail -n +2))"
	[ -z "$m" ] || fail "$what: mounts left: $m"
	[ -z "$i" ] || fail "$what: left in instances/: $i"
	[ -z "$c$m$i${p// /}" ] && ok "$what: nothing left"
}

# start_instances N SNAP [thaw start options...]: N starts of SNAP at once.
# Each answer goes to $W/start<i>.json; ID[i], EP[i] (endpoint) and HPID[i]
# (host pid) are set; a start that fails is a failure, one with no answer ends
# the test.
start_instances() {
	local n=$1 snap=$2 i t0
	local -a pids
	shift 2
	t0=$(date +%s%N)
	for i in $(seq 1 "$n"); do
		"$THAW" --data-dir "$D" start "$@" "$snap" >"$W/start$i.json" 2>"$W/start$i.err" &
		pids[$i]=$!
	done
	for i in $(seq 1 "$n"); do
		wait "${pids[$i]}" || fail "start $i: $(cat "$W/start$i.err")"
	done
	echo "$n concurrent starts took $((($(date +%s%N) - t0) / 1000000)) ms"
	for i in $(seq 1 "$n"); do
		[ -s "$W/start$i.json" ] || { echo "FAIL: no instance $i"; exit 1; }
	done
	# One python3 for every answer's fields, not five for each (~50 ms of
	# CPU a python3, and these tests start dozens of instances).
	while IFS=$'\x1f' read -r i id ep pid tier timings; do
		ID[$i]=$id EP[$i]=$ep HPID[$i]=$pid
		echo "instance $i: $id at $ep, host pid $pid, tier $tier, timings $timings"
	done < <(python3 -S - "$W" "$n" <<'EOF'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
for i in range(1, n + 1):
    j = json.load(open("%s/start%d.json" % (w, i)))
    v = [j.get(k) for k in ("instance", "endpoint", "pid", "tier", "timings_ms")]
    print("\x1f".join([str(i)] + ["" if x is None else str(x) for x in v]))
EOF
	)
}
