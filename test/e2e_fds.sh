#!/usr/bin/env bash
# thawd out of file descriptors (issue 44, H3), with real runc, CRIU and
# thawd under `ulimit -n 512` (soft and hard: it cannot raise it), and
# test/fixtures/proxy_fn.py:
#   1. 1000 client connections (test/fixtures/slow_clients.py) each ask
#      /function/a/hold, which answers only once the test opens its gate;
#      thawd takes what its descriptors allow and refuses the rest with 503
#      and Retry-After, never 502: no local errno is the instance's failure;
#   2. while they hold, a routed request to another function (b) starts its
#      instance and is answered (or refused 503 with Retry-After: the
#      connections to instances are all taken), and the API answers;
#   3. the gate opens: the requests held are answered 200, and so is b's;
#   4. every record, container and instance directory is accounted for: none
#      left "starting", the same ids in GET /instances, runc list and
#      <data>/instances, no function over its max_instances (1);
#   5. DELETE /functions/a works (no 409) and leaves nothing of a;
#   6. a graceful stop leaves no container, directory or process.
# Nothing waits for a time to pass: each step waits (with a generous limit)
# for what it expects.
set -u
NAME=fds
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
fixture_fn "$FN" proxy_fn.py
# thawd with 512 descriptors, soft and hard (at 256, CRIU's own dump ran out
# of them on the development VM: `Can't retrieve FD from socket`).
THAWD=$T/thawd-512
printf '#!/bin/sh\nulimit -n 512 || exit 1\nexec %s "$@"\n' "$B/thawd" >"$THAWD"
chmod +x "$THAWD"
NCLIENTS=1000
# Only the descriptors bound the connections here.
# An answered client keeps its connection open (idle) until thawd's request
# timeout closes it: the connections weigh on the descriptors all along.
start_thawd --max-connections 4096 --max-connections-per-ip 0 --request-timeout 5

metric() {
	curl -s "$URL/metrics" | awk -v n="$1{$2}" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
spec() { fn_spec proxy_fn.py "$FN" "\"idle_s\": 600, \"max_instances\": 1, $1"; }
put_snapshot a "$(spec '"concurrency": 1000, "queue": 1000, "queue_timeout_s": 300')"
put_snapshot b "$(spec '"concurrency": 4, "queue_timeout_s": 300')"
grep -o 'descriptors.*' "$T/thawd.log" | head -1 | sed 's/^/   thawd: /'

# ---- 1. the load ----
rm -f "$FN/release"
port=$(head -n1 "$T/port")
python3 "$ROOT/test/fixtures/slow_clients.py" "$port" $NCLIENTS /function/a/hold \
	"$T/clients.json" 900 &
cp=$!
# clients FIELD: a number of the clients' status.
clients() { python3 -c "import json,sys; print($1)" "$T/clients.json" 2>/dev/null; }
# In place: every connection still open is one an instance serves.
held() {
	local pending
	pending=$(clients 'json.load(open(sys.argv[1]))["pending"]') || return 1
	[ -n "$pending" ] && [ "$pending" = "$(metric thaw_routed_in_flight 'function="a"')" ]
}
if wait_for 400 held; then
	ok "the load is in place: $(metric thaw_routed_in_flight 'function="a"') request(s) held by a's instance, the other $((NCLIENTS - $(metric thaw_routed_in_flight 'function="a"'))) answered or closed"
else
	fail "the load never settled: $(cat "$T/clients.json" 2>/dev/null), $(metric thaw_routed_in_flight 'function="a"') in flight"
fi

# ---- 2. another function, and the API, meanwhile ----
curl -s -o "$T/b.body" -w '%{http_code}' "$URL/function/b/hello?x=1" >"$T/b.code" 2>/dev/null &
bp=$!
bdone() { ! kill -0 $bp 2>/dev/null; }
b_running() {
	api GET /instances >/dev/null &&
		[ "$(jget "$T/body" "sum(i.get('function') == 'b' and i.get('state') == 'running' for i in j['instances'])")" = 1 ]
}
if wait_for 300 bdone; then
	wait $bp
	if [ "$(cat "$T/b.code")" = 200 ] && [ "$(cat "$T/b.body")" = "hello 1" ]; then
		ok "meanwhile, a routed request to b starts its instance and is answered"
	elif [ "$(cat "$T/b.code")" = 503 ] && jget "$T/b.body" "j['error']['code']" | grep -q no_capacity &&
		b_running; then
		ok "meanwhile, a routed request to b starts its instance, then is refused 503: $(jget "$T/b.body" "j['error']['message']")"
	else
		fail "meanwhile, b: $(cat "$T/b.code") $(head -c 300 "$T/b.body")"
	fi
else
	fail "meanwhile, the request to b got no answer"
fi
st=$(api GET /instances)
[ "$st" = 200 ] && ok "meanwhile, GET /instances: 200" || fail "meanwhile, GET /instances: $st"

# ---- 3. the gate opens ----
touch "$FN/release"
wait $cp
python3 - "$T/clients.json" $NCLIENTS <<'EOF' && ok "the $NCLIENTS requests: $(cat "$T/clients.json")" || fail "the $NCLIENTS requests: $(cat "$T/clients.json") (want 200 or 503 with Retry-After, never 502)"
import json, sys
s = json.load(open(sys.argv[1]))
c = s["codes"]
n200, n503 = c.get("200", 0), c.get("503", 0)
bad = {k: v for k, v in c.items() if k not in ("200", "503")}
ok = (s["done"] and n200 >= 1 and not bad and s["retry_after"] == n503 and
      n200 + n503 + s["closed"] == int(sys.argv[2]))
sys.exit(0 if ok else 1)
EOF
st=$(curl -s -o "$T/b.body" -w '%{http_code}' "$URL/function/b/hello?x=2")
[ "$st" = 200 ] && [ "$(cat "$T/b.body")" = "hello 2" ] && ok "after the load, b: 200" ||
	fail "after the load, b: $st $(head -c 300 "$T/b.body")"
grep -q 'lifetimes: instance .* exited' "$T/thawd.log" &&
	fail "an instance was judged exited: $(grep -m2 'lifetimes: instance .* exited' "$T/thawd.log")"

# ---- 4. everything accounted for ----
# accounted: the ids GET /instances lists, runc's containers and the
# directories in <data>/instances agree; every one is running (none
# starting, abandoned or exited); no function has more than 1.
accounted() {
	api GET /instances >/dev/null || return 1
	python3 - "$T/body" "$(own_containers | sort | tr '\n' ' ')" \
		"$(find "$DATA/instances" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort | tr '\n' ' ')" \
		>"$T/accounted" 2>&1 <<'EOF'
import json, sys
recs = json.load(open(sys.argv[1]))["instances"]
ids = sorted(i["instance"] for i in recs)
other = ["%s %s" % (i["instance"], i.get("state")) for i in recs if i.get("state") != "running"]
runc, dirs = sys.argv[2].split(), sys.argv[3].split()
per = {}
for i in recs:
    per[i.get("function")] = per.get(i.get("function"), 0) + 1
ok = not other and ids == sorted(runc) == sorted(dirs) and all(n <= 1 for n in per.values())
print("instances %s, runc %s, dirs %s, not running %s, per function %s" % (ids, runc, dirs, other, per))
sys.exit(0 if ok else 1)
EOF
}
if wait_for 120 accounted; then
	ok "accounted for: $(cat "$T/accounted")"
else
	fail "not accounted for: $(cat "$T/accounted")"
fi

# ---- 5. DELETE ----
st=$(api DELETE /functions/a)
case $st in
200 | 204) ok "DELETE /functions/a: $st" ;;
*) fail "DELETE /functions/a: $st $(head -c 300 "$T/body")" ;;
esac
nothing_of_a() {
	! own_containers | grep -q '^a-' && ! ls "$DATA/instances" 2>/dev/null | grep -q '^a-'
}
wait_for 60 nothing_of_a && ok "nothing of a is left" ||
	fail "left of a: $(own_containers | grep '^a-') $(ls "$DATA/instances" | grep '^a-')"

# ---- 6. a graceful stop ----
stop_thawd 120
rc=$?
left=$(ls "$DATA/instances" 2>/dev/null; own_containers; own_mounts | grep '/instances/')
[ $rc = 0 ] && [ -z "$left" ] && [ -z "$(own_procs)" ] &&
	ok "a graceful stop (exit 0) leaves no instance, container or process" ||
	fail "after the stop (exit $rc): left $(echo "$left" | head -5) $(own_procs | head -3)"

echo "$fails failure(s)"
[ $fails = 0 ]
