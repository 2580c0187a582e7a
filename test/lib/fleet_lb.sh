# test/lib/fleet_lb.sh — three thawd "hosts" behind HAProxy on this machine,
# for test/e2e_fleet_lb.sh and bench/fleet-run.sh.  Sourced after
# test/lib/e2e.sh (T, SHM, THAWD, ROOT, fail, wait_for, wait_port) and
# test/lib/ceph_rgw.sh with the RGW started (AWS_ENDPOINT_URL), and after
# e2e_tokens (TOKEN, DTOKEN).  Each host is a thawd in its own network
# namespace (NET.11, .12, .13 on a bridge at NET.1), with its own data
# directory ($T/hI) and RAM tier ($SHM/hI), all on one remote; HAProxy runs
# the shipped deploy/haproxy/haproxy.cfg in front.
#   fleet_net_up            the bridge and the three namespaces (exit 77
#                           where none can be made); sets NET
#   fleet_lb_start [CFG..]  HAProxy: the shipped file, the fleet's own
#                           plumbing (a stats socket; the RGW, which listens
#                           on 127.0.0.1, forwarded onto the bridge), then
#                           CFG files; sets LB (its URL), LB_PID
#   fleet_host_start I [ARGS..]  host I's thawd (--remote s3://thaw/PREFIX,
#                           FLEET_PREFIX, default lb; ARGS added); sets
#                           HPID[I], HURL[I]
#   h I METHOD PATH [curl args]  api (test/lib/thawd_e2e.sh) against host I
#   fleet_lb_up NAME...     HAProxy has each server NAME (thaw1…) UP in
#                           backend FLEET_BACKEND (default thaw_fleet)
#   fleet_cleanup           kill it all, remove the network (e2e_cleanup_hook
#                           calls it)
declare -a HPID HURL
FLEET_SUF=$$
NET=10.248.$((FLEET_SUF % 200 + 20))
FLEET_BR=tfb$FLEET_SUF
FLEET_NETS=""

fleet_cleanup() {
	local i c ns
	for i in 1 2 3; do
		[ -n "${HPID[$i]:-}" ] && kill -9 "${HPID[$i]}" 2>/dev/null
		for c in $(runc --root "$T/h$i/runc" list -q 2>/dev/null); do
			runc --root "$T/h$i/runc" delete -f "$c" >/dev/null 2>&1
		done
	done
	[ -n "${LB_PID:-}" ] && kill -9 "$LB_PID" 2>/dev/null
	for ns in $FLEET_NETS; do ip netns del "$ns" 2>/dev/null; done
	ip link del "$FLEET_BR" 2>/dev/null
}
e2e_cleanup_hook() { fleet_cleanup; }

fleet_net_up() {
	local i ns
	command -v ip >/dev/null || skip "no ip (iproute2)"
	ip link add "$FLEET_BR" type bridge 2>/dev/null || skip "cannot make a bridge here"
	ip addr add "$NET.1/24" dev "$FLEET_BR"
	ip link set "$FLEET_BR" up
	for i in 1 2 3; do
		ns=tf$FLEET_SUF-$i
		ip netns add "$ns" && FLEET_NETS="$FLEET_NETS $ns"
		ip link add "tfv$FLEET_SUF$i" type veth peer name eth0 netns "$ns"
		ip link set "tfv$FLEET_SUF$i" master "$FLEET_BR" up
		ip -n "$ns" addr add "$NET.1$i/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
		ip -n "$ns" route add default via "$NET.1"
	done
}

fleet_lb_start() {
	local rgw_port=${AWS_ENDPOINT_URL##*:} args="" f
	FLEET_RGW=$(free_port)
	LB_PORT=$(free_port)
	cat >"$T/fleet.cfg" <<EOF
global
	stats socket $T/haproxy.sock mode 600 level admin
# The hosts reach the RGW, which listens on 127.0.0.1, through the bridge.
listen rgw
	mode tcp
	option tcplog
	bind $NET.1:$FLEET_RGW
	server rgw 127.0.0.1:$rgw_port
EOF
	for f in "$@"; do args="$args -f $f"; done
	# shellcheck disable=SC2086 # the files' names are the test's own
	THAW_LB_BIND=127.0.0.1:$LB_PORT THAW1=$NET.11:8080 THAW2=$NET.12:8080 \
		THAW3=$NET.13:8080 THAW_DATA_TOKEN=$DTOKEN haproxy -db \
		-f "$ROOT/deploy/haproxy/haproxy.cfg" -f "$T/fleet.cfg" $args >"$T/haproxy.log" 2>&1 &
	LB_PID=$!
	LB=http://127.0.0.1:$LB_PORT
	fleet_lb_sock() { [ -S "$T/haproxy.sock" ] || ! kill -0 "$LB_PID" 2>/dev/null; }
	wait_for 30 fleet_lb_sock
	kill -0 "$LB_PID" 2>/dev/null || { fail "haproxy did not start: $(tail -5 "$T/haproxy.log")"; exit 1; }
}

fleet_host_start() {
	local i=$1
	shift
	mkdir -p "$SHM/h$i"
	rm -f "$T/port-$i"
	# nsenter, not ip netns exec: the network namespace only (ip netns exec
	# also makes a mount namespace of its own, which thawd's containers
	# would then live in).
	nsenter --net="/run/netns/tf$FLEET_SUF-$i" -- "$THAWD" --listen "$NET.1$i:8080" \
		--port-file "$T/port-$i" --data-dir "$T/h$i" --ram-tier "$SHM/h$i" \
		--ram-tier-bytes "${FLEET_TIER_BYTES:-512M}" \
		--remote "s3://thaw/${FLEET_PREFIX:-lb}" --s3-endpoint "http://$NET.1:$FLEET_RGW" \
		--token-file "$T/token" --data-token-file "$T/dtoken" "$@" >>"$T/thawd-$i.log" 2>&1 &
	HPID[$i]=$!
	HURL[$i]=http://$NET.1$i:8080
	wait_port "$T/port-$i" "${HPID[$i]}" || { fail "host $i did not start"; tail "$T/thawd-$i.log"; exit 1; }
}

h() { local i=$1; shift; URL=${HURL[$i]} api "$@"; }

fleet_lb_up() {
	local s n
	s=$(python3 -S - "$T/haproxy.sock" "${FLEET_BACKEND:-thaw_fleet}" <<'PY'
import socket, sys
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[1])
c.sendall(b"show stat\n")
out = b""
while True:
    b = c.recv(65536)
    if not b:
        break
    out += b
for l in out.decode().splitlines():
    f = l.split(",")
    if len(f) > 17 and f[0] == sys.argv[2] and f[1].startswith("thaw"):
        print(f[1], f[17])
PY
)
	for n in "$@"; do echo "$s" | grep -q "^$n UP" || return 1; done
}
