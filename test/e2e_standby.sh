#!/usr/bin/env bash
# Standby instances (server/standby.h) of a CPU function with "standby": 2,
# with real runc, CRIU and thawd:
#   1. after its snapshot the pool fills to 2: GET /instances lists two
#      "standby" instances, /metrics says thaw_standby_instances 2, and their
#      containers are paused (frozen);
#   2. a start answers 201 with "standby": true (timings: resume, ready) and
#      its endpoint answers /infer as the function computes; the pool refills
#      to 2; a standby answered its readiness check before it was frozen (its
#      record's timings_ms.ready), and a take runs no runc (thawd thaws the
#      container's cgroup itself: runc's log of calls names no resume), after
#      which runc says the container is running;
#   3. two starts in a row both come from the pool; one taken with idle_s 10
#      after the standbys waited longer than that still runs a second later;
#   4. a re-snapshot retires the stale standbys: the pool refills with the
#      new snapshot's, and the next start (a standby) is of the new snapshot;
#   5. PUT of the same spec with another "standby" keeps the snapshot; 0
#      retires every standby, and a start then restores as usual (a miss);
#   6. kill -9 of thawd with standbys up, then a restart: the old standbys
#      are removed (no container, netns mount, lease holder or record of
#      them), the pool refills;
#   7. DELETE /functions/<id> leaves nothing: no container, record, mount,
#      process.
set -u
NAME=standby
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"

# The standbys GET /instances lists: "id snapshot" lines.
standbys() {
	api GET /instances >/dev/null
	jget "$T/body" "'\n'.join(i['instance'] + ' ' + i['snapshot'] for i in j['instances'] if i['state'] == 'standby')"
}
# wait_pool N [SNAP]: until N standbys (of SNAP, if given) are listed, 30 s at most.
wait_pool() {
	local n=$1 snap=${2:-} have
	for _ in $(seq 300); do
		have=$(standbys | grep -c "${snap:-.}")
		[ "$have" = "$n" ] && return 0
		sleep 0.1
	done
	return 1
}
spec() { # STANDBY
	python3 - "$ROOT/bench/functions" "$1" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
s = json.load(open(d + "/cpu_example.json"))
s["cwd"] = d
s["env"]["THAW_EXAMPLE_MIB"] = "16"
s["standby"] = n
print(json.dumps(s))
PY
}
expect=$(cd "$ROOT/bench/functions" && THAW_EXAMPLE_MIB=16 python3 -c \
	'import cpu_example as c; print(c.infer(7))')
# start_one WHAT: POST start into $T/start; checks the answer and /infer;
# prints "standby-flag snapshot instance".
start_one() {
	local st ep y
	st=$(api POST /functions/sb/start)
	cp "$T/body" "$T/start"
	if [ "$st" != 201 ]; then
		fail "$1: start $st $(cat "$T/start")"
		return 1
	fi
	ep=$(jget "$T/start" "j['endpoint']")
	y=$(curl -s --max-time 10 "http://$ep/infer?x=7" | python3 -c 'import json,sys; print(json.load(sys.stdin)["y"])' 2>/dev/null)
	[ "$y" = "$expect" ] || fail "$1: /infer?x=7 answered '$y', expected $expect"
	echo "$(jget "$T/start" "j['standby']") $(jget "$T/start" "j['snapshot']") $(jget "$T/start" "j['instance']")"
}

# runc, each call logged: a take must make none.
cat >"$T/runc" <<EOF
#!/bin/sh
echo "\$*" >>"$T/runc.calls"
exec runc "\$@"
EOF
chmod +x "$T/runc"
start_thawd --runc "$T/runc"

# ---- 1. the pool fills ----
spec 2 >"$T/spec.json"
st=$(api PUT /functions/sb -d @"$T/spec.json")
[ "$st" = 201 ] || fail "PUT: $st $(cat "$T/body")"
st=$(api POST '/functions/sb/snapshot?wait=1')
[ "$st" = 200 ] || { fail "snapshot: $st $(cat "$T/body")"; exit 1; }
api GET /functions/sb >/dev/null
SNAP1=$(jget "$T/body" "j['snapshot']['id']")
if wait_pool 2 "$SNAP1"; then ok "the pool filled to 2 standbys of $SNAP1"; else fail "pool: $(standbys)"; fi
api GET /metrics >/dev/null
grep -q '^thaw_standby_instances{function="sb"} 2$' "$T/body" && ok "/metrics: 2 standbys" ||
	fail "/metrics: $(grep standby "$T/body")"
for id in $(standbys | awk '{print $1}'); do
	s=$(runc --root "$DATA/runc" state "$id" 2>/dev/null | jget /dev/stdin "j['status']")
	[ "$s" = paused ] || fail "standby $id: container is '$s', not paused"
	api GET "/instances/$id" >/dev/null
	[ "$(jget "$T/body" "j['timings_ms'].get('ready', 0) > 0")" = True ] &&
		ok "standby $id answered its readiness check before it was frozen" ||
		fail "standby $id was frozen before its readiness check: timings $(jget "$T/body" "j['timings_ms']")"
done

# ---- 2. a start takes one; the pool refills ----
r=$(start_one "first start") && set -- $r
if [ "${1:-}" = True ]; then
	ok "a start took a standby: $(jget "$T/start" "j['timings_ms']")"
else
	fail "the start did not take a standby: $(cat "$T/start")"
fi
[ "$(jget "$T/start" "'resume' in j['timings_ms']")" = True ] || fail "no resume timing"
FIRST=${3:-}
if [ -n "$FIRST" ]; then
	grep -q "resume $FIRST" "$T/runc.calls" &&
		fail "the take of $FIRST ran runc: $(grep "resume $FIRST" "$T/runc.calls")" ||
		ok "the take of $FIRST ran no runc"
	s=$(runc --root "$DATA/runc" state "$FIRST" 2>/dev/null | jget /dev/stdin "j['status']")
	[ "$s" = running ] && ok "runc says $FIRST is running" || fail "runc says $FIRST is '$s'"
fi
if wait_pool 2 "$SNAP1"; then ok "the pool refilled to 2"; else fail "no refill: $(standbys)"; fi

# ---- 3. two starts in a row ----
a=$(start_one "second start" | awk '{print $1}')
b=$(start_one "third start" | awk '{print $1}')
[ "$a $b" = "True True" ] && ok "two starts in a row both from the pool" ||
	fail "two starts in a row: standby $a, $b"
wait_pool 2 "$SNAP1" || fail "no refill after two starts: $(standbys)"

# ---- 3b. a taken standby is idle from its take, not from its making ----
# The pool's standbys are older than idle_s by now; one taken with idle_s 10
# and not called yet must still run a second later (idle counted from its
# endpoint's making stopped it at the lifetimes thread's next tick).
sleep 11
st=$(api POST '/functions/sb/start?idle_s=10')
iid=$(jget "$T/body" "j['instance']")
sleep 1
[ "$st" = 201 ] && [ "$(api GET "/instances/$iid" >/dev/null; jget "$T/body" "j['state']")" = running ] &&
	ok "a standby taken with idle_s 10 after waiting longer still runs a second later" ||
	fail "standby taken with idle_s 10: $st, then: $(head -c 300 "$T/body")"
api DELETE "/instances/$iid" >/dev/null
wait_pool 2 "$SNAP1" || fail "no refill after the idle take: $(standbys)"

# ---- 4. a re-snapshot retires the stale standbys ----
st=$(api POST '/functions/sb/snapshot?wait=1')
[ "$st" = 200 ] || fail "re-snapshot: $st $(cat "$T/body")"
api GET /functions/sb >/dev/null
SNAP2=$(jget "$T/body" "j['snapshot']['id']")
[ "$SNAP2" != "$SNAP1" ] || fail "the re-snapshot has the same id"
if wait_pool 2 "$SNAP2" && [ -z "$(standbys | grep -v "$SNAP2")" ]; then
	ok "stale standbys retired, 2 of the new snapshot"
else
	fail "after the re-snapshot: $(standbys)"
fi
r=$(start_one "start after the re-snapshot") && set -- $r
[ "${1:-} ${2:-}" = "True $SNAP2" ] && ok "the next start is a standby of the new snapshot" ||
	fail "start after the re-snapshot: standby ${1:-} snapshot ${2:-}, want $SNAP2"
wait_pool 2 "$SNAP2" || fail "no refill after the re-snapshot's start"

# ---- 5. the spec's standby changes ----
spec 1 >"$T/spec1.json"
st=$(api PUT /functions/sb -d @"$T/spec1.json")
api GET /functions/sb >/dev/null
[ "$(jget "$T/body" "j['snapshot']['id']")" = "$SNAP2" ] && ok "standby 2 -> 1 keeps the snapshot" ||
	fail "PUT standby 1 forgot the snapshot: $(cat "$T/body")"
wait_pool 1 "$SNAP2" && ok "the pool shrank to 1" || fail "standby 1: $(standbys)"
spec 0 >"$T/spec0.json"
api PUT /functions/sb -d @"$T/spec0.json" >/dev/null
wait_pool 0 || fail "standby 0: $(standbys)"
r=$(start_one "start without standbys") && set -- $r
[ "${1:-}" = False ] && ok "without standbys a start restores as usual" || fail "standby 0: ${1:-}"
api GET /metrics >/dev/null
hits=$(sed -n 's/^thaw_standby_starts_total{function="sb",result="hit"} //p' "$T/body")
[ "$hits" = 5 ] && ok "/metrics: 5 standby hits" || fail "/metrics hits: '$hits'"
api PUT /functions/sb -d @"$T/spec.json" >/dev/null
wait_pool 2 "$SNAP2" || fail "standby 2 again: $(standbys)"

# ---- 6. kill -9 with standbys up, then a restart ----
OLD=$(standbys | awk '{print $1}')
kill -9 "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
THAWD_PID=""
start_thawd
for id in $OLD; do
	[ -e "$DATA/instances/$id.json" ] && fail "restart: the record of standby $id is left"
	runc --root "$DATA/runc" state "$id" >/dev/null 2>&1 && fail "restart: container $id is left"
	grep -q "/instances/$id/" /proc/self/mountinfo && fail "restart: a mount of $id is left"
	pgrep -f -- "$id" >/dev/null && fail "restart: a process naming $id is left: $(pgrep -af -- "$id")"
done
ok "restart: the old standbys ($(echo $OLD)) are gone"
wait_pool 2 "$SNAP2" && ok "the pool refilled after the restart" || fail "after the restart: $(standbys)"

# ---- 7. DELETE leaves nothing ----
st=$(api DELETE /functions/sb)
[ "$st" = 204 ] || fail "DELETE: $st $(cat "$T/body")"
# What the DELETE killed goes in a moment (longer on a busy machine).
for _ in $(seq 150); do
	[ -z "$(own_containers)$(own_mounts)$(own_procs | grep -v thawd)" ] && break
	sleep 0.1
done
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
r=$(ls "$DATA/instances" 2>/dev/null | grep '\.json$')
[ -z "$r" ] || fail "records left: $r"
m=$(own_mounts)
[ -z "$m" ] || fail "mounts left: $m"
p=$(own_procs | grep -v thawd)
[ -z "$p" ] || fail "processes left: $p"
[ $fails = 0 ] && ok "DELETE left nothing"

echo "$fails failure(s)"
[ $fails = 0 ]
