#!/usr/bin/env bash
# e2e_lazy.sh — real runc + CRIU lazy restore: snapshot the CPU example
# function (256 MiB of state, "lazy": true in its spec), start 3 instances of
# it at once (lazily, as the spec says), check that each answers exactly as
# the function computes, that each daemon finishes (timings_ms.lazy_done) and
# goes; an --eager start of the same snapshot; then the page source going
# away: the lazy-pages daemon of an instance is stopped right after the start
# returned (the tier lease must still be held: the image is still needed),
# then killed: the instance must be killed and listed as failed with the
# reason, and stop must leave nothing (process, container, mount, netns,
# daemon); a daemon killed during the start: the start fails or the instance
# is listed failed, and nothing is left; thawd --lazy: its default, and
# GET /instances tells the lost page source.
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
FN_DIR=$ROOT/bench/functions

. "$ROOT/test/lib/require.sh"
require_restore_tools uffd
command -v flock >/dev/null || skip "no flock"

W=$(mktemp -d /tmp/e2e_lazy.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_lazy.XXXXXX)
D=$W/data
FN=e2e-l$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((1 << 30))
unset THAW_DATA_DIR THAW_STORE THAW_LAZY

. "$ROOT/test/lib/instances.sh"

cleanup() {
	cleanup_instances
	[ -n "${CG:-}" ] && rmdir "$CG" 2>/dev/null
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT
# A field of instance id in `thaw ps --json`.
ps_field() { # id key...
	"$THAW" --data-dir "$D" ps --json | python3 -c 'import json,sys
for r in json.load(sys.stdin):
    if r.get("instance") == sys.argv[1]:
        v = r
        for k in sys.argv[2:]: v = v.get(k) if isinstance(v, dict) else None
        print(v)' "$@"
}
answers() { # endpoint: y for each x in $XS
	local got="" x y
	for x in $XS; do
		y=$(curl -sf --max-time 20 "http://$1/infer?x=$x" | python3 -c 'import json,sys; print(json.load(sys.stdin)["y"])')
		got="$got${got:+ }$y"
	done
	echo "$got"
}

XS="0 1 7 42 1000 123456"
MIB=256
EXPECT=$(cd "$FN_DIR" && THAW_EXAMPLE_MIB=$MIB python3 -c 'import sys
import cpu_example as m
print(" ".join(str(m.infer(int(x))) for x in sys.argv[1:]))' $XS) || { echo "cannot compute the expected answers"; exit 1; }
echo "expected y for x in [$XS]: $EXPECT"

"$B/thawd" --help | grep -q -- "--no-lazy" || fail "thawd --help does not tell --lazy/--no-lazy"
"$THAW" start --help | grep -q -- "--lazy|--eager" || fail "thaw start --help does not tell --lazy|--eager"

# --- snapshot once: bench/functions/cpu_example.json, lazy ------------------
python3 - "$FN_DIR/cpu_example.json" "$FN_DIR" "$MIB" >"$W/spec.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["cwd"] = sys.argv[2]
spec["env"]["THAW_EXAMPLE_MIB"] = sys.argv[3]
spec["lazy"] = True
print(json.dumps(spec))
EOF
snapshot_fn "$W/spec.json"

# --- 3 lazy instances at once (the spec says lazy) ---------------------------
N=3
start_instances $N "$SNAP"
for i in $(seq 1 $N); do
	[ "$(jget "$W/start$i.json" lazy)" = True ] || fail "instance $i: not lazy, though its spec says so"
	[ -S "$D/instances/${ID[$i]}/criu/lazy-pages.socket" ] || [ -s "$D/instances/${ID[$i]}/lazy.status" ] ||
		fail "instance $i: no lazy-pages.socket in its work dir and no word from its daemon"
done
for i in $(seq 1 $N); do
	got=$(answers "${EP[$i]}")
	[ "$got" = "$EXPECT" ] && ok "lazy instance $i answers /infer as the original" ||
		fail "lazy instance $i answers [$got], expected [$EXPECT]"
done
# Every daemon finishes (exit 0, every page served) and goes.
for i in $(seq 1 $N); do
	for t in $(seq 1 100); do
		[ "$(ps_field "${ID[$i]}" timings_ms lazy_done)" != None ] && break
		sleep 0.1
	done
	done_ms=$(ps_field "${ID[$i]}" timings_ms lazy_done)
	[ "$done_ms" != None ] && ok "instance $i: lazy-pages daemon served every page ${done_ms} ms after the start" ||
		fail "instance $i: no lazy_done after 10 s ($(cat "$D/instances/${ID[$i]}/lazy.status" 2>/dev/null))"
	[ "$(ps_field "${ID[$i]}" state)" = running ] || fail "instance $i: state $(ps_field "${ID[$i]}" state)"
	echo "figure: e2e_lazy start${i}_total_ms $(jget "$W/start$i.json" timings_ms total)"
	echo "figure: e2e_lazy start${i}_lazy_done_ms $done_ms"
done
for t in $(seq 1 50); do [ -z "$(daemon_procs)" ] && break; sleep 0.1; done
[ -z "$(daemon_procs)" ] || fail "lazy-pages daemons still there after they finished: $(daemon_procs)"
got=$(answers "${EP[1]}")
[ "$got" = "$EXPECT" ] || fail "instance 1 after its daemon finished answers [$got]"

# --- an eager start of the same snapshot ---------------------------------------
"$THAW" --data-dir "$D" start --eager "$SNAP" >"$W/eager.json" 2>"$W/eager.err" || fail "eager start: $(cat "$W/eager.err")"
if [ -s "$W/eager.json" ]; then
	ID[4]=$(jget "$W/eager.json" instance)
	HPID[4]=$(jget "$W/eager.json" pid)
	[ "$(jget "$W/eager.json" lazy)" = False ] || fail "thaw start --eager restored lazily"
	[ -e "$D/instances/${ID[4]}/lazy.status" ] && fail "an eager instance has a lazy-pages daemon"
	got=$(answers "$(jget "$W/eager.json" endpoint)")
	[ "$got" = "$EXPECT" ] && ok "eager instance answers /infer as the original" || fail "eager instance answers [$got]"
fi

stop_instances
check_nothing_left "after stop"
unset ID HPID

# --- the page source goes away after the start --------------------------------
# Alone on this machine a daemon serves the 256 MiB in about the time the
# start takes (thaw's own in a fraction of it), so this one is held back:
# thaw's daemon serves faults only (THAW_LAZY_PREFETCH_DELAY_MS), CRIU's
# (THAW_LAZY_DAEMON=criu) runs through a criu wrapper that puts it into a
# cgroup with 5% of a CPU (the restore itself is not slowed).  Stop the daemon as soon as the start has answered, check that it
# is not done and that the lease is still held (an eviction's LOCK_EX would
# fail), then kill it.
CG=""
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
	CG=/sys/fs/cgroup/cpu/e2e_lazy.$$
	mkdir "$CG" && echo 100000 >"$CG/cpu.cfs_period_us" && echo 5000 >"$CG/cpu.cfs_quota_us" || CG=""
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	CG=/sys/fs/cgroup/e2e_lazy.$$
	grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
	mkdir "$CG" && echo "5000 100000" >"$CG/cpu.max" || CG=""
fi
[ -n "$CG" ] || echo "no cpu cgroup to slow the daemon down: the loss may not be caught in time"
{
	echo '#!/bin/sh'
	[ -n "$CG" ] && echo "[ \"\$1\" = lazy-pages ] && echo \$\$ >'$CG/cgroup.procs'"
	echo "exec '$CRIU' \"\$@\""
} >"$W/criu-slow"
chmod +x "$W/criu-slow"
lost=0
for try in 1 2 3; do
	THAW_CRIU=$W/criu-slow THAW_LAZY_PREFETCH_DELAY_MS=600000 \
		"$THAW" --data-dir "$D" start --lazy "$SNAP" >"$W/lost.json" 2>"$W/lost.err" ||
		{ fail "lazy start: $(cat "$W/lost.err")"; break; }
	LID=$(jget "$W/lost.json" instance)
	LPID=$(jget "$W/lost.json" pid)
	DPID=$(jget "$D/instances/$LID.json" lazy_daemon_pid)
	kill -STOP "$DPID" 2>/dev/null
	if [ -s "$D/instances/$LID/lazy.status" ]; then
		echo "try $try: the daemon had finished before it could be stopped ($(cat "$D/instances/$LID/lazy.status")); again"
		"$THAW" --data-dir "$D" stop "$LID" >/dev/null 2>&1
		continue
	fi
	lost=1
	break
done
if [ $lost = 1 ]; then
	if flock -xn "$TIER/.locks/${SNAP#sha256:}" true; then
		fail "the tier lease was not held while the daemon was still serving"
	else
		ok "the tier lease is held after the start returned, while the daemon serves"
	fi
	kill -9 "$DPID"
	for t in $(seq 1 100); do
		[ "$(ps_field "$LID" state)" = failed ] && [ -z "$(alive "$LPID")" ] && break
		sleep 0.1
	done
	st=$(ps_field "$LID" state)
	err=$(ps_field "$LID" error)
	echo "after the daemon was killed: state $st, error: $err"
	[ "$st" = failed ] && echo "$err" | grep -q "page source lost" && ok "instance listed failed with the reason" ||
		fail "instance whose daemon was killed: state $st, error $err"
	"$THAW" --data-dir "$D" ps | grep -q "page source lost" || fail "thaw ps does not tell why the instance failed"
	[ -z "$(alive "$LPID")" ] && ok "the instance was killed" || fail "instance process $LPID still running without its pages"
	[ -z "$(daemon_procs)" ] || fail "daemon still there: $(daemon_procs)"
	flock -xn "$TIER/.locks/${SNAP#sha256:}" true || fail "the tier lease is still held after the daemon died"
	"$THAW" --data-dir "$D" stop "$LID" >/dev/null 2>"$W/stop.err" || fail "stop of the failed instance: $(cat "$W/stop.err")"
	check_nothing_left "after the page source went away"
elif [ $fails = 0 ]; then
	fail "the daemon always finished before it could be stopped: page-source loss not tested"
fi

# --- the daemon killed during the start ----------------------------------------
"$THAW" --data-dir "$D" start --lazy "$SNAP" >"$W/early.json" 2>"$W/early.err" &
sp=$!
for t in $(seq 1 400); do
	dp=$(daemon_procs)
	[ -n "$dp" ] && { kill -9 $dp; break; }
	sleep 0.01
done
wait $sp; rc=$?
if [ $rc = 0 ]; then
	EID=$(jget "$W/early.json" instance)
	for t in $(seq 1 50); do [ "$(ps_field "$EID" state)" = failed ] && break; sleep 0.1; done
	[ "$(ps_field "$EID" state)" = failed ] && ok "daemon killed during the start: the instance is listed failed" ||
		fail "daemon killed during the start, the start succeeded and the instance is $(ps_field "$EID" state)"
	"$THAW" --data-dir "$D" stop "$EID" >/dev/null 2>&1
else
	echo "daemon killed during the start: rc $rc: $(cat "$W/early.err")"
	[ $rc = 1 ] && ok "daemon killed during the start: the start failed" || fail "start rc $rc"
fi
check_nothing_left "daemon killed during the start"

# --- thawd --lazy: the default for a spec without "lazy" where mapped restore
# does not apply (THAW_MAPPED=0 here); GET /instances tells a lost page source;
# SIGTERM stops everything.
D2=$W/sdata
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.pop("lazy"); print(json.dumps(j))' \
	"$W/spec.json" >"$W/spec-nolazy.json"
rm -f "$W/port"
THAW_MAPPED=0 "$B/thawd" --listen 127.0.0.1:0 --port-file "$W/port" --data-dir "$D2" --lazy \
	--criu "$W/criu-slow" >>"$W/thawd.log" 2>&1 </dev/null &
THAWD=$!
for t in $(seq 1 100); do [ -s "$W/port" ] && break; sleep 0.1; done
URL=http://127.0.0.1:$(cat "$W/port" 2>/dev/null)
code=$(curl -s -o "$W/put.json" -w '%{http_code}' -X PUT "$URL/functions/$FN" -d @"$W/spec-nolazy.json")
[ "$code" = 201 ] || fail "PUT /functions/$FN: $code $(cat "$W/put.json")"
curl -s -m 300 -X POST "$URL/functions/$FN/snapshot?wait=1" >"$W/ssnap.json"
code=$(curl -s -o "$W/sstart.json" -w '%{http_code}' -m 120 -X POST "$URL/functions/$FN/start")
if [ "$code" = 201 ]; then
	SID=$(jget "$W/sstart.json" instance)
	SPID=$(jget "$W/sstart.json" pid)
	[ "$(jget "$W/sstart.json" lazy)" = True ] || fail "thawd --lazy started an instance eagerly"
	DPID=$(jget "$D2/instances/$SID.json" lazy_daemon_pid)
	[ -s "$D2/instances/$SID/lazy.status" ] && echo "(the daemon finished first: $(cat "$D2/instances/$SID/lazy.status"))"
	got=$(curl -sf --max-time 20 "$URL/instances/$SID" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
	[ "$got" = running ] || fail "GET /instances/$SID: state $got"
	if [ ! -s "$D2/instances/$SID/lazy.status" ]; then
		kill -9 "$DPID"
		for t in $(seq 1 100); do
			st=$(curl -sf --max-time 20 "$URL/instances/$SID" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], "|", j.get("error"))')
			case "$st" in failed*) break ;; esac
			sleep 0.1
		done
		echo "GET /instances/$SID after its daemon was killed: $st"
		case "$st" in "failed | page source lost"*) ok "thawd lists the instance failed with the reason" ;;
			*) fail "thawd lists the instance as: $st" ;; esac
		[ -z "$(alive "$SPID")" ] || fail "thawd's instance $SPID still runs without its page source"
	fi
else
	fail "POST /functions/$FN/start on thawd --lazy: $code $(cat "$W/sstart.json")"
fi
kill -TERM $THAWD
wait $THAWD || fail "thawd did not exit 0 on SIGTERM: $(tail -5 "$W/thawd.log")"
D=$D2 check_nothing_left "after thawd stopped"
p=$(alive $(pgrep -f -- "--data-dir $D2"))
[ -z "$p" ] || fail "processes of thawd left: $p"

# The machine's copy slots (thaw's daemon, lazy_pages.c): every daemon above
# is gone, the killed ones too, so every slot is free again (SEM_UNDO).
slots=$(($(nproc) / 2))
[ $slots -ge 1 ] || slots=1
key=$(printf '0x%08x' $((0x74680000 + slots)))
semid=$(ipcs -s | awk -v k="$key" '$1 == k {print $2}')
if [ -z "$semid" ]; then
	fail "no copy-slots semaphore $key: thaw's daemon did not limit its copies"
else
	val=$(ipcs -s -i "$semid" | awk '$1 == "0" {print $2}')
	[ "$val" = "$slots" ] && ok "all $slots copy slots free after the daemons ended" ||
		fail "copy slots: $val of $slots free after every daemon ended"
fi

[ $fails = 0 ] && echo "e2e_lazy: all good" || echo "e2e_lazy: $fails failure(s)"
[ $fails = 0 ]
