#!/usr/bin/env bash
# What a data-plane token can read (docs/API.md, "Authentication"; issue 36,
# defect 3), with real runc, CRIU and thawd: a function whose "env" holds a
# secret, with a standby, registered with the control token; then, with the
# data token, everything the data plane can read:
#   1. GET /instances, GET /instances?all=1 and GET /instances/<iid> of the
#      standby and of a started instance, the start's answer, GET /metrics
#      and the instances' logs: none holds the secret value (nor a
#      snapshot_meta), while GET /functions/<id> with the control token
#      does show it (the secret is real);
#   2. the data token still gets 403 on GET /functions/<id> and /jobs;
#   3. a start's query seconds are decimal: ?idle_s=0x1p3 (a hex float that
#      strtod reads as 8), 1e3, inf, " 8" are 400 bad_request; 2.5 is taken.
set -u
NAME=secrets
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
SECRET=sk-live-$RANDOM$RANDOM$RANDOM
echo "ctl-$RANDOM-$RANDOM" >"$T/ctl"
echo "data-$RANDOM-$RANDOM" >"$T/data.tok"
CT=$(cat "$T/ctl")
DT=$(cat "$T/data.tok")
start_thawd --control-token-file "$T/ctl" --data-token-file "$T/data.tok" --allow-root "$T/fns"

# as TOKEN METHOD PATH [curl args]: the status; the body in $T/body.
as() {
	local tok=$1 m=$2 p=$3
	shift 3
	curl -s -D "$T/hdr" -o "$T/body" -w '%{http_code}' -X "$m" -H "Authorization: Bearer $tok" \
		-H 'Content-Type: application/json' "$URL$p" "$@"
}
# clean WHAT: the body of the last answer holds neither the secret nor a
# snapshot_meta.
clean() {
	if grep -q "$SECRET" "$T/body"; then
		fail "$1 shows the secret: $(head -c 300 "$T/body")"
	elif grep -q snapshot_meta "$T/body"; then
		fail "$1 shows a snapshot_meta: $(head -c 300 "$T/body")"
	else
		ok "$1: no secret"
	fi
}

FN=$T/fns/sec # outside the data directory, which no function may reach
fixture_fn "$FN" ok_fn.py
st=$(as "$CT" PUT /functions/sec -d "$(fn_spec ok_fn.py "$FN" "\"env\": {\"API_KEY\": \"$SECRET\"}, \"standby\": 1")")
[ "$st" = 201 ] || { fail "PUT: $st $(cat "$T/body")"; exit 1; }
st=$(as "$CT" POST '/functions/sec/snapshot?wait=1')
[ "$st" = 200 ] || { fail "snapshot: $st $(cat "$T/body")"; exit 1; }
st=$(as "$CT" GET /functions/sec)
[ "$st" = 200 ] && grep -q "$SECRET" "$T/body" && ok "the control token reads the spec, secret included" ||
	fail "control GET /functions/sec: $st $(cat "$T/body")"

# ---- 1. what the data plane reads ----
SB=""
for _ in $(seq 150); do
	as "$DT" GET /instances >/dev/null
	SB=$(jget "$T/body" "' '.join(i['instance'] for i in j['instances'] if i['state'] == 'standby')")
	[ -n "$SB" ] && break
	sleep 0.1
done
[ -n "$SB" ] && ok "a standby: $SB" || fail "no standby was made"
st=$(as "$DT" GET /instances)
[ "$st" = 200 ] && clean "data token: GET /instances (a standby listed)" || fail "GET /instances: $st"
st=$(as "$DT" GET "/instances/$SB")
[ "$st" = 200 ] && clean "data token: GET /instances/$SB (the standby)" || fail "GET /instances/$SB: $st"
st=$(as "$DT" GET "/instances/$SB/logs")
[ "$st" = 200 ] && clean "data token: the standby's logs" || fail "GET /instances/$SB/logs: $st"
st=$(as "$DT" POST /functions/sec/start)
[ "$st" = 201 ] && clean "data token: the start's answer" || fail "start: $st $(cat "$T/body")"
IID=$(jget "$T/body" "j['instance']")
st=$(as "$DT" GET "/instances/$IID")
[ "$st" = 200 ] && clean "data token: GET /instances/$IID (running)" || fail "GET /instances/$IID: $st"
st=$(as "$DT" DELETE "/instances/$IID?wait=1")
[ "$st" = 204 ] || fail "DELETE /instances/$IID: $st $(cat "$T/body")"
st=$(as "$DT" GET '/instances?all=1')
[ "$st" = 200 ] && clean "data token: GET /instances?all=1 (an ended one listed)" ||
	fail "GET /instances?all=1: $st"
st=$(as "$DT" GET "/instances/$IID")
[ "$st" = 200 ] && clean "data token: GET /instances/$IID (ended)" || fail "GET /instances/$IID (ended): $st"
st=$(as "$DT" GET /metrics)
[ "$st" = 200 ] && clean "data token: GET /metrics" || fail "GET /metrics: $st"

# ---- 2. the control routes stay shut to it ----
for p in /functions/sec /functions /jobs; do
	st=$(as "$DT" GET "$p")
	[ "$st" = 403 ] && ok "data token: GET $p: 403" || fail "data token: GET $p: $st"
done

# ---- 3. a start's query seconds are decimal ----
for v in 0x1p3 1e3 inf nan '%208' -1 ''; do
	st=$(as "$DT" POST "/functions/sec/start?idle_s=$v")
	if [ "$st" = 400 ] && grep -q '"code":"bad_request"' "$T/body"; then
		ok "start?idle_s=$v: 400"
	else
		fail "start?idle_s=$v: $st $(head -c 300 "$T/body")"
		[ "$st" = 201 ] && as "$DT" DELETE "/instances/$(jget "$T/body" "j['instance']")" >/dev/null
	fi
done
st=$(as "$DT" POST '/functions/sec/start?idle_s=2.5')
[ "$st" = 201 ] && ok "start?idle_s=2.5: 201" || fail "start?idle_s=2.5: $st $(cat "$T/body")"

st=$(as "$CT" DELETE /functions/sec)
[ "$st" = 204 ] || fail "DELETE /functions/sec: $st $(cat "$T/body")"
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
