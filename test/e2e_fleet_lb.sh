#!/usr/bin/env bash
# A fleet behind a real load balancer: three thawds, each in its own network
# namespace with its own data directory and RAM tier (three hosts), one Ceph
# RGW as their remote tier (test/lib/ceph_rgw.sh), and HAProxy (Debian's)
# running the shipped deploy/haproxy/haproxy.cfg in front, with real runc,
# CRIU and test/fixtures/proxy_fn.py:
#   1. f is registered and snapshotted on host 1 only (pushed to the remote);
#      hey through HAProxy to /function/f/...: every answer 200; then a
#      checked load (test/fixtures/fleet_load.py: each body is its own
#      request's): every answer 200 and right, answered by more than one host
#      (bounded load spills past the hash's host), and each host that served
#      f learned it from the remote with one pull (concurrent requests waited
#      on it); a function the remote lacks too is 404;
#   2. requests one after another all land on one host (the hash's), whose
#      RAM tier holds f (a start there counted in thaw_start_tier_total);
#   3. that host killed (kill -9) mid-load: the other hosts carry on, no
#      request lost beyond those in flight on it (at most the load's
#      concurrency, each answered 502/503/504, or cut when its answer had
#      begun: HAProxy retries only what no byte came back of); restarted, it rejoins (HAProxy
#      sees it up, and f's requests land on it again);
#   4. f snapshotted again on host 1: the other hosts follow the remote's ref
#      without a restart (their f has the new snapshot);
#   5. that host drained (POST /drain) mid-load: every answer 200 (HAProxy
#      retries its 503s elsewhere), and it exits 0 with no instance left;
#   6. f deleted on host 1: the hosts still up forget it too (404).
set -u
NAME=fleet-lb
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
command -v haproxy >/dev/null || skip "no haproxy (scripts/deps.sh installs it)"
command -v hey >/dev/null || skip "no hey (scripts/deps.sh installs it)"
. "$ROOT/test/lib/ceph_rgw.sh"
ok() { echo "ok: [${SECONDS}s] $*"; } # where the time goes

. "$ROOT/test/lib/fleet_lb.sh"
fleet_net_up
ceph_rgw_start thaw || exit 1
trap 'thawd_e2e_cleanup; ceph_rgw_stop' EXIT
e2e_tokens
fleet_lb_start
DATA=$T/h1 # the library's cleanup takes host 1's containers; fleet_cleanup the others'
for i in 1 2 3; do fleet_host_start $i --remote-poll 1; done
lb_up() { fleet_lb_up "$@"; }
wait_for 60 lb_up thaw1 thaw2 thaw3 && ok "HAProxy: thaw1 thaw2 thaw3 UP (GET /readyz)" ||
	{ fail "HAProxy never saw the three hosts up"; tail "$T/haproxy.log"; exit 1; }

# ---- 1. f on host 1 only; load through HAProxy ----
fixture_fn "$T/fn" proxy_fn.py
spec=$(fn_spec proxy_fn.py "$T/fn" '"concurrency": 4')
st=$(h 1 PUT /functions/f -d "$spec")
[ "$st" = 201 ] || { fail "PUT f: $st $(cat "$T/body")"; exit 1; }
st=$(h 1 POST "/functions/f/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot f: $st $(cat "$T/body")"; exit 1; }
snap1=$(jget "$T/body" "j['job']['result']['snapshot']")
pushed() { h 1 GET /functions/f >/dev/null; [ "$(jget "$T/body" "(j.get('push') or {}).get('state')")" = done ]; }
wait_for 60 pushed || fail "f was not pushed: $(cat "$T/body")"
for i in 2 3; do
	st=$(h $i GET /functions/f)
	[ "$st" = 404 ] || fail "host $i has f before any request: $st"
done

# FLEET_HEY_N (a multiple of 16): the issue's 2000 requests at 16 at once
# (~4 s at the 463 requests/s measured here; a smaller number for a quick run).
HEY_N=${FLEET_HEY_N:-2000}
hey -n "$HEY_N" -c 16 "$LB/function/f/hello?x=1" >"$T/hey.out" 2>&1
codes=$(sed -n "/Status code distribution/,/^\$/p" "$T/hey.out" | grep -o "\[[0-9]*\][[:space:]]*[0-9]*" | tr -s " \t" " ")
# hey runs -n/-c requests on each of its -c workers.
[ "$codes" = "[200] $HEY_N" ] && ok "hey -n $HEY_N -c 16 through HAProxy: every answer 200 ($(grep -m1 'Requests/sec' "$T/hey.out" | tr -s ' '))" ||
	fail "hey: $codes $(cat "$T/hey.out" | tail -20)"
load() { # N C OUT
	python3 "$ROOT/test/fixtures/fleet_load.py" "$LB" f "$1" "$2" "$3"
}
load 160 16 "$T/l1.json"
summary() { jget "$1" "'%d of %d 200 and right, %d wrong, status %s, hosts %s' % (j['ok'], j['n'], j['wrong'], j['status'], j['hosts'])"; }
nhosts=$(jget "$T/l1.json" "len([h for h in j['hosts'] if h])")
[ "$(jget "$T/l1.json" "j['ok']")" = 160 ] && [ "$nhosts" -ge 2 ] &&
	ok "checked load: $(summary "$T/l1.json")" || fail "checked load: $(summary "$T/l1.json")"
for i in 2 3; do
	st=$(h $i GET /functions/f)
	[ "$st" = 200 ] || continue
	h $i GET /jobs >/dev/null
	pulls=$(jget "$T/body" "len([x for x in j['jobs'] if x['kind'] == 'pull' and x['function'] == 'f'])")
	[ "$pulls" = 1 ] && ok "host $i learned f from the remote with one pull" ||
		fail "host $i: $pulls pulls of f: $(cat "$T/body")"
done

st=$(curl -s -o "$T/body" -w '%{http_code}' "$LB/function/nosuch/hello")
[ "$st" = 404 ] && [ "$(jget "$T/body" "j['error']['code']")" = not_found ] &&
	ok "a function the remote lacks too: 404 not_found through HAProxy" ||
	fail "nosuch through HAProxy: $st $(cat "$T/body")"

# ---- 2. one after another: one host, the warm one ----
load 8 1 "$T/seq.json"
warm=$(jget "$T/seq.json" "list(j['hosts'])[0] if len(j['hosts']) == 1 and j['ok'] == 8 else ''")
W=${warm#thaw}
if [ -n "$warm" ]; then
	h "$W" GET /metrics >/dev/null
	starts=$(grep '^thaw_start_tier_total{function="f"' "$T/body" | awk '{s += $2} END {print s + 0}')
	[ "$starts" -ge 1 ] && ok "8 requests one after another: all on $warm, whose tier holds f ($(grep '^thaw_start_tier_total{function="f"' "$T/body" | tr '\n' ' '))" ||
		fail "$warm never started f: $(grep thaw_start_tier "$T/body")"
else
	fail "requests one after another: $(summary "$T/seq.json")"
	W=1 warm=thaw1
fi

# ---- 3. the warm host killed mid-load, then restarted ----
python3 "$ROOT/test/fixtures/fleet_load.py" "$LB" f 200 8 "$T/l2.json" &
LOAD=$!
progress() { local n; n=$(cat "$1.progress" 2>/dev/null); [ "${n:-0}" -ge "$2" ]; } # OUT N
progressed() { progress "$T/l2.json" 30; }
wait_for 60 progressed || fail "the load never got going"
kill -9 "${HPID[$W]}"
wait "${HPID[$W]}" 2>/dev/null
HPID[$W]=""
wait $LOAD
bad=$(jget "$T/l2.json" "j['n'] - j['ok']")
badcodes=$(jget "$T/l2.json" "sorted(k for k in j['status'] if k != '200')")
if [ "$(jget "$T/l2.json" "j['wrong']")" = 0 ] && [ "$bad" -le 8 ] &&
	[ "$(jget "$T/l2.json" "all(k in ('502', '503', '504') or k.startswith('err:') for k in j['status'] if k != '200')")" = True ]; then
	ok "$warm killed mid-load: $(summary "$T/l2.json") ($bad lost, at most the 8 in flight)"
else
	fail "$warm killed mid-load: $(summary "$T/l2.json"), not 200: $badcodes"
fi
fleet_host_start "$W" --remote-poll 1
wait_for 60 lb_up "$warm" && ok "$warm restarted: HAProxy sees it up again" || fail "$warm never came back up"
load 4 1 "$T/seq2.json"
[ "$(jget "$T/seq2.json" "j['hosts'].get('$warm', 0)")" = 4 ] &&
	ok "$warm rejoined: f's requests land on it again" || fail "after the restart: $(summary "$T/seq2.json")"

# ---- 4. a new snapshot on host 1 reaches the others ----
st=$(h 1 POST "/functions/f/snapshot?wait=1")
[ "$st" = 200 ] || fail "snapshot f again: $st $(cat "$T/body")"
snap2=$(jget "$T/body" "j['job']['result']['snapshot']")
follows() { # I: host I's f has snapshot snap2
	h "$1" GET /functions/f >/dev/null
	[ "$(jget "$T/body" "(j.get('snapshot') or {}).get('id')")" = "$snap2" ]
}
for i in 2 3; do
	[ "$(h $i GET /functions/f)" = 200 ] || continue
	wait_for 60 follows $i && ok "host $i follows f's new snapshot without a restart" ||
		fail "host $i: f's snapshot is not $snap2: $(head -c 300 "$T/body")"
done
[ "$snap1" != "$snap2" ] || fail "the second snapshot has the first's id"

# ---- 5. the warm host drained mid-load ----
python3 "$ROOT/test/fixtures/fleet_load.py" "$LB" f 120 8 "$T/l3.json" &
LOAD=$!
p3() { progress "$T/l3.json" 30; }
wait_for 60 p3 || fail "the load never got going (drain)"
st=$(h "$W" POST /drain)
[ "$st" = 202 ] || fail "POST /drain to $warm: $st $(cat "$T/body")"
wait $LOAD
[ "$(jget "$T/l3.json" "j['ok']")" = 120 ] && ok "$warm drained mid-load: $(summary "$T/l3.json")" ||
	fail "drain mid-load: $(summary "$T/l3.json")"
for _ in $(seq 600); do kill -0 "${HPID[$W]}" 2>/dev/null || break; sleep 0.1; done
wait "${HPID[$W]}"
rc=$?
HPID[$W]=""
left=$(runc --root "$T/h$W/runc" list -q 2>/dev/null | tr '\n' ' ')
[ $rc = 0 ] && [ -z "$left" ] && ok "$warm exited 0 after its drain, no instance left" ||
	fail "$warm after its drain: rc $rc, containers: $left"

# ---- 6. f deleted on a host: the others forget it ----
D=1
[ "$W" = 1 ] && D=2
st=$(h $D DELETE /functions/f)
[ "$st" = 204 ] || fail "DELETE f on host $D: $st $(cat "$T/body")"
gone() { [ "$(h "$1" GET /functions/f)" = 404 ]; }
for i in 1 2 3; do
	[ "$i" = "$W" ] && continue
	wait_for 60 gone $i && ok "host $i: f deleted in the fleet is gone here too" ||
		fail "host $i still has f: $(head -c 300 "$T/body")"
done
[ $fails = 0 ]
