# test/lib/ceph_rgw.sh — a real S3-compatible server for the tests and the
# benchmarks: a single-node Ceph cluster (one monitor, one memstore OSD and
# radosgw) on 127.0.0.1, all under one temporary directory, no systemd.
#
# Sourced; then:
#   ceph_rgw_start [BUCKET]   start it (skips the test, exit 77, where the
#                             Ceph packages are not installed and cannot be),
#                             create an S3 user and BUCKET (default "thaw"),
#                             and export what an AWS tool needs:
#     AWS_ENDPOINT_URL        http://127.0.0.1:PORT (path-style addressing)
#     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (us-east-1)
#     CEPH_RGW_BUCKET         the bucket
#     CEPH_RGW_DIR            the cluster's directory (logs under log/)
#     CEPH_RGW_CONF           its ceph.conf (for radosgw-admin -c, rados -c)
#   ceph_rgw_stop             stop every daemon and remove the directory; an
#                             EXIT trap runs it (chained before a trap the
#                             caller set earlier).
# CEPH_RGW_MEM_BYTES caps what the OSD holds in RAM (memstore: about twice the
# data stored; default 4 GiB).  CEPH_RGW_KEEP=1 keeps the directory.
#
# The settings are those that made a cluster start in about 2 s on a 2-core
# machine: without the short paxos intervals start-up took 12.6 s and each new
# pool 2.5 s more; the monitor stops on a disk it thinks full unless
# mon_data_avail_{warn,crit} are lowered; a single OSD needs size-1 pools and
# a CRUSH rule that chooses OSDs, not hosts; and deleted objects are otherwise
# kept for two hours by rgw's gc.

# Ports below the ephemeral range, where no other test's connection can
# take one between this choice and the daemon's bind (test/lib/free_port.sh).
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"
ceph_rgw_free_port() { free_port; }

ceph_rgw_install() {
	command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null &&
		command -v radosgw >/dev/null && return 0
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "ceph_rgw: installing ceph-mon ceph-osd radosgw"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
		ceph-mon ceph-osd radosgw >/dev/null 2>&1 ||
		{ $sudo apt-get update -qq >/dev/null 2>&1 &&
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
				--no-install-recommends ceph-mon ceph-osd radosgw >/dev/null 2>&1; } ||
		return 1
}

ceph_rgw_write_conf() { # dir mon_port rgw_port fsid
	local d=$1
	cat >"$d/ceph.conf" <<EOF
[global]
fsid = $4
mon host = v2:127.0.0.1:$2
mon initial members = a
public network = 127.0.0.1/32
ms bind msgr1 = false
ms bind msgr2 = true
run dir = $d/run
admin socket = $d/run/\$name.asok
log file = $d/log/\$name.log
pid file = $d/run/\$name.pid
keyring = $d/keyring
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
paxos propose interval = 0.05
paxos min wait = 0.01
mon data avail warn = 1
mon data avail crit = 0
[mon.a]
mon data = $d/mon-a
[osd.0]
osd objectstore = memstore
osd data = $d/osd-0
memstore device bytes = ${CEPH_RGW_MEM_BYTES:-4294967296}
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$3
rgw data = $d/rgw
rgw gc obj min wait = 1
rgw gc processor period = 1
rgw enable usage log = false
EOF
}

ceph_rgw_fail() { # message: print it and the ends of the logs
	echo "ceph_rgw: $*" >&2
	local l
	for l in "$CEPH_RGW_DIR"/log/*.log; do
		[ -f "$l" ] && { echo "--- $l" >&2; tail -n 15 "$l" >&2; }
	done
	return 1
}

ceph_rgw_stop() {
	[ -n "${CEPH_RGW_DIR:-}" ] && [ -d "$CEPH_RGW_DIR" ] || return 0
	local p pids=""
	for p in "$CEPH_RGW_DIR"/run/*.pid; do
		[ -f "$p" ] && pids="$pids $(cat "$p")"
	done
	# shellcheck disable=SC2086
	[ -n "$pids" ] && kill $pids 2>/dev/null
	for _ in $(seq 50); do
		p=""
		for q in $pids; do kill -0 "$q" 2>/dev/null && p="$p $q"; done
		[ -z "$p" ] && break
		sleep 0.1
	done
	# shellcheck disable=SC2086
	[ -n "$p" ] && kill -9 $p 2>/dev/null
	[ -n "${CEPH_RGW_KEEP:-}" ] || rm -rf "$CEPH_RGW_DIR"
	CEPH_RGW_DIR=""
}

# The S3 call that makes the bucket, with curl's own SigV4 signing.
ceph_rgw_make_bucket() {
	curl -sf -o /dev/null -X PUT --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$AWS_ENDPOINT_URL/$1"
}

ceph_rgw_start() {
	local bucket=${1:-thaw} d mon_port rgw_port fsid uuid t0=$SECONDS
	ceph_rgw_install || { echo "skipped: Ceph packages (ceph-mon ceph-osd radosgw) cannot be installed"; exit 77; }
	d=$(mktemp -d /tmp/thaw-ceph-XXXXXX)
	CEPH_RGW_DIR=$d
	CEPH_RGW_CONF=$d/ceph.conf
	local prev
	prev=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
	# shellcheck disable=SC2064
	trap "ceph_rgw_stop; $prev" EXIT
	mkdir -p "$d/run" "$d/log" "$d/mon-a" "$d/osd-0" "$d/rgw"
	mon_port=$(ceph_rgw_free_port)
	rgw_port=$(ceph_rgw_free_port)
	fsid=$(cat /proc/sys/kernel/random/uuid)
	uuid=$(cat /proc/sys/kernel/random/uuid)
	ceph_rgw_write_conf "$d" "$mon_port" "$rgw_port" "$fsid"
	local c=(-c "$d/ceph.conf")
	monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$d/monmap" \
		>/dev/null 2>&1 || { ceph_rgw_fail "monmaptool failed"; return 1; }
	# One keyring for every daemon and tool: the monitor imports its keys at mkfs.
	ceph-authtool "$d/keyring" --create-keyring >/dev/null --gen-key -n mon. --cap mon 'allow *' &&
		ceph-authtool "$d/keyring" --gen-key -n client.admin --cap mon 'allow *' \
			--cap osd 'allow *' --cap mgr 'allow *' &&
		ceph-authtool "$d/keyring" --gen-key -n osd.0 --cap mon 'allow profile osd' \
			--cap osd 'allow *' --cap mgr 'allow profile osd' &&
		ceph-authtool "$d/keyring" --gen-key -n client.rgw --cap mon 'allow rw' \
			--cap osd 'allow rwx' --cap mgr "allow rw" >/dev/null ||
		{ ceph_rgw_fail "ceph-authtool failed"; return 1; }
	ceph-mon "${c[@]}" --mkfs -i a --monmap "$d/monmap" --keyring "$d/keyring" \
		>"$d/log/mkfs.out" 2>&1 ||
		{ ceph_rgw_fail "ceph-mon --mkfs failed: $(tail -n 3 "$d/log/mkfs.out")"; return 1; }
	ceph-mon "${c[@]}" -i a 2>>"$d/log/daemons.out" || { ceph_rgw_fail "ceph-mon did not start"; return 1; }
	local id
	id=$(timeout 30 ceph "${c[@]}" osd new "$uuid" 2>>"$d/log/cli.out") ||
		{ ceph_rgw_fail "ceph osd new failed"; return 1; }
	ceph-osd "${c[@]}" -i "$id" --mkfs --osd-uuid "$uuid" >"$d/log/osd-mkfs.out" 2>&1 ||
		{ ceph_rgw_fail "ceph-osd --mkfs failed"; return 1; }
	ceph-osd "${c[@]}" -i "$id" 2>>"$d/log/daemons.out" || { ceph_rgw_fail "ceph-osd did not start"; return 1; }
	radosgw "${c[@]}" -n client.rgw 2>>"$d/log/daemons.out" || { ceph_rgw_fail "radosgw did not start"; return 1; }
	export AWS_ENDPOINT_URL="http://127.0.0.1:$rgw_port" AWS_REGION=us-east-1
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	AWS_ACCESS_KEY_ID=$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
	AWS_SECRET_ACCESS_KEY=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
	unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_REGION
	# radosgw-admin waits for the cluster; rgw makes its pools as it starts.
	timeout 60 radosgw-admin "${c[@]}" user create --uid=thaw --display-name=thaw \
		--access-key="$AWS_ACCESS_KEY_ID" --secret-key="$AWS_SECRET_ACCESS_KEY" \
		>"$d/log/user.out" 2>&1 || { ceph_rgw_fail "radosgw-admin user create failed"; return 1; }
	local ok=""
	for _ in $(seq 300); do
		if ceph_rgw_make_bucket "$bucket"; then ok=1; break; fi
		sleep 0.1
	done
	[ -n "$ok" ] || { ceph_rgw_fail "bucket $bucket could not be made at $AWS_ENDPOINT_URL"; return 1; }
	export CEPH_RGW_BUCKET=$bucket CEPH_RGW_DIR CEPH_RGW_CONF
	echo "ceph_rgw: $AWS_ENDPOINT_URL bucket $bucket up in $((SECONDS - t0)) s ($d)"
}

# Run as a program, `bash test/lib/ceph_rgw.sh run CMD [ARGS]` starts a
# cluster, runs CMD with the variables above set and THAW_TEST_S3_BUCKET too
# (what the C tests look for), and exits with CMD's status.
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = run ]; then
	shift
	ceph_rgw_start || exit 1
	export THAW_TEST_S3_BUCKET=$CEPH_RGW_BUCKET
	"$@"
	exit $?
fi
