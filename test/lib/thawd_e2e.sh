# test/lib/thawd_e2e.sh — a private thawd for an end-to-end test, and what
# such tests share.  Sourced after test/lib/require.sh, with NAME (the test's
# short name) and B, ROOT, THAWD set (a test that runs functions sources
# test/lib/e2e.sh, which does all of that).  It makes T (the test's directory, data
# in DATA = $T/data) and SHM (its RAM tier), and gives:
#   ok / fail (counting failures in $fails), jget FILE EXPR,
#   start_thawd [THAWD-OPTIONS...] (URL set; its log $T/thawd.log; the RAM
#     tier $SHM of RAM_TIER_BYTES, default 1G),
#   stop_thawd [SECONDS] (SIGTERM, waits up to SECONDS, default 60, and
#     returns thawd's exit status),
#   e2e_tokens (TOKEN and DTOKEN made and written to $T/token, $T/dtoken),
#   api METHOD PATH [curl args] (status on stdout, body in $T/body, headers in
#     $T/hdr, a JSON content type, TOKEN as the bearer where it is set; a
#     DELETE of an instance with ?wait=1 unless PATH says wait=: answered
#     once the instance is gone, not once it is unreachable),
#   own_procs / own_mounts / own_containers (what the test made),
#   wait_for SECONDS COMMAND... (until COMMAND succeeds, SECONDS at most),
# and an EXIT trap that kills thawd, runs the test's e2e_cleanup_hook if it
# defines one, and removes every container, process and mount of the test
# (the tail of thawd's log printed when a check failed).
T=$(mktemp -d "/tmp/thaw-e2e-$NAME-XXXXXX")
SHM=$(mktemp -d "/dev/shm/thaw-e2e-$NAME-XXXXXX")
DATA=$T/data
THAWD_PID=""
TOKEN="" DTOKEN="" # e2e_tokens sets them; never the environment's
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# python3 -S: no site-packages, which jget does not need: started without
# them it takes half the CPU (~40 ms here, where a .pth there runs code at
# every start), and tests call jget hundreds of times.
jget() { python3 -S -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

. "$ROOT/test/lib/own_procs.sh"
. "$ROOT/test/lib/wait_port.sh"
own_mounts() { awk -v t="$T" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo; }
own_containers() { [ -d "$DATA/runc" ] && runc --root "$DATA/runc" list -q 2>/dev/null; }

thawd_e2e_cleanup() {
	[ -n "$THAWD_PID" ] && kill -9 "$THAWD_PID" 2>/dev/null
	[ "$(type -t e2e_cleanup_hook)" = function ] && e2e_cleanup_hook
	for c in $(own_containers); do runc --root "$DATA/runc" delete -f "$c" >/dev/null 2>&1; done
	own_procs | awk '{print $1}' | xargs -r kill -9 2>/dev/null
	for m in $(own_mounts | sort -r); do umount -l "$m" 2>/dev/null; done
	[ $fails != 0 ] && [ -f "$T/thawd.log" ] && { echo "--- thawd.log (tail)"; tail -n 40 "$T/thawd.log"; }
	rm -rf "$T" "$SHM"
}
trap thawd_e2e_cleanup EXIT

start_thawd() {
	rm -f "$T/port"
	"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port" --data-dir "$DATA" --ram-tier "$SHM" \
		--ram-tier-bytes "${RAM_TIER_BYTES:-1G}" "$@" >>"$T/thawd.log" 2>&1 &
	THAWD_PID=$!
	wait_port "$T/port" "$THAWD_PID" || { echo "thawd did not start"; tail "$T/thawd.log"; exit 1; }
	URL=http://127.0.0.1:$(head -n1 "$T/port")
}

stop_thawd() {
	local rc
	kill -TERM "$THAWD_PID"
	for _ in $(seq $((${1:-60} * 10))); do kill -0 "$THAWD_PID" 2>/dev/null || break; sleep 0.1; done
	wait "$THAWD_PID"
	rc=$?
	THAWD_PID=""
	return $rc
}

# wait_for SECONDS COMMAND...: run COMMAND until it succeeds, for SECONDS of
# wall time at most; 0 once it has, 1 if it never did.  The pause between
# tries grows from 0.05 s to 0.5 s: what is there at once costs no wait, and
# a long wait costs two tries a second, not ten (a try is a curl, a python3
# or more: tens of ms of CPU each on the 2-core machines the tests share).
# COMMAND must stay true once it is (a state the test holds, a count that
# only grows): a state it could pass through between two tries is missed.
wait_for() {
	local end=$((SECONDS + $1)) pause=0.05
	shift
	until "$@"; do
		[ $SECONDS -lt $end ] || return 1
		sleep $pause
		case $pause in 0.05) pause=0.1 ;; 0.1) pause=0.2 ;; 0.2) pause=0.5 ;; esac
	done
}

e2e_tokens() {
	TOKEN=full-$RANDOM-$RANDOM
	DTOKEN=data-$RANDOM-$RANDOM
	echo "$TOKEN" >"$T/token"
	echo "$DTOKEN" >"$T/dtoken"
}

api() {
	local m=$1 p=$2
	shift 2
	if [ "$m" = DELETE ] && [[ $p == /instances/* ]] && [[ $p != *wait=* ]]; then
		[[ $p == *\?* ]] && p="$p&wait=1" || p="$p?wait=1"
	fi
	curl -s -D "$T/hdr" -o "$T/body" -w '%{http_code}' -X "$m" \
		${TOKEN:+-H "Authorization: Bearer $TOKEN"} \
		-H 'Content-Type: application/json' "$URL$p" "$@"
}
