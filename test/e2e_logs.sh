#!/usr/bin/env bash
# A function's output, end to end, with real runc and CRIU (thawd with
# --log-bytes 4K, the function test/fixtures/logs_fn.py):
#   1. its snapshot's job keeps its boot output: GET /jobs/<jid>/logs has
#      "line 1" .. "line 20", ?tail=5 exactly the last five;
#   2. a started instance's log is what the restored process prints from then
#      on (not its boot's): GET /instances/<iid>/logs?tail=5 is exactly the
#      last 5 lines it printed, text/plain; stderr too; `thaw logs --tail 5`
#      prints the same;
#   3. a function printing 128 KiB: function.log and function.log.1 are each
#      within the bound (so at most 2x on disk), and a tail of more lines than
#      the current file holds is the last lines it printed, in order, across
#      both files (and of more than both hold, all they hold);
#   4. bad input: tail=-1, abc, 100000 and an empty one are 400 bad_request;
#      an unknown instance or job 404; a path-traversal id 400 invalid_id;
#      POST 405; the data token reads instance logs, not job logs (403);
#   5. an instance started by `thaw start` (THAW_LOG_BYTES) killed -9 from
#      outside: while its record stays, its log is still served, and bounded;
#   6. a function that prints "boom" and exits 1 at boot: its snapshot job
#      fails and GET /jobs/<jid>/logs has "boom";
#   7. a restarted thawd starts with no job logs (ids start again at job-1);
#      at the end nothing is left: no container, process or mount.
set -u
NAME=logs
RAM_TIER_BYTES=2G
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
[ -x "$THAWD" ] || { echo "no $THAWD"; exit 1; }
e2e_tokens
BOUND=4096

# Instances `thaw start` made are stopped through thaw (thawd is gone by then).
e2e_cleanup_hook() {
	local r
	for r in "$DATA"/instances/*.json; do
		[ -f "$r" ] && THAW_RAM_TIER=$SHM "$THAW" --data-dir "$DATA" stop \
			"$(basename "$r" .json)" >/dev/null 2>&1
	done
}

start_thawd_logs() {
	start_thawd --token-file "$T/token" --data-token-file "$T/dtoken" --log-bytes 4K "$@"
}

# api METHOD PATH [curl args…]: the status on stdout, the body in $T/body,
# the headers in $T/hdr (its own: no JSON type, and --path-as-is for the
# traversal ids).
api() {
	local m=$1 p=$2
	shift 2
	curl -s --path-as-is -o "$T/body" -D "$T/hdr" -w '%{http_code}' \
		-H "Authorization: Bearer $TOKEN" -X "$m" "$URL$p" "$@"
}
err_code() { jget "$T/body" "j['error']['code']"; }

# wait_log PATH WANT: GET PATH (a logs route) until its body ends with the
# line WANT (the shim drains the pipes on its own time), at most 10 s.
wait_log() {
	local p=$1 want=$2
	for _ in $(seq 100); do
		[ "$(api GET "$p")" = 200 ] && [ "$(tail -n 1 "$T/body")" = "$want" ] && return 0
		sleep 0.1
	done
	return 1
}

spam_lines() { # FROM TO: the lines /spam prints
	python3 -c 'import sys
for i in range(int(sys.argv[1]), int(sys.argv[2]) + 1):
    l = "spam %06d " % i
    print(l + "x" * (63 - len(l)))' "$1" "$2"
}

spec() { # [ARG]: the fixture's spec
	python3 - "$ROOT/test/fixtures" "${1:-}" <<'EOF'
import json, sys
d, arg = sys.argv[1], sys.argv[2]
cmd = ["python3", "logs_fn.py"] + ([arg] if arg else [])
print(json.dumps({"command": cmd, "cwd": d, "port": 8000,
                  "ready": {"tcp": True, "timeout_s": 30}}))
EOF
}

start_thawd_logs

# ---- 1. the snapshot's job keeps the boot output ----
spec >"$T/logs.json"
st=$(api PUT /functions/logs -d @"$T/logs.json")
[ "$st" = 201 ] || fail "PUT /functions/logs: $st $(cat "$T/body")"
st=$(api POST '/functions/logs/snapshot?wait=1')
if [ "$st" != 200 ]; then
	fail "snapshot: $st $(cat "$T/body")"
	exit 1
fi
JID=$(jget "$T/body" "j['job']['id']")
st=$(api GET "/jobs/$JID/logs")
[ "$st" = 200 ] || fail "GET /jobs/$JID/logs: $st $(cat "$T/body")"
seq 1 20 | sed 's/^/line /' >"$T/boot"
cmp -s "$T/body" "$T/boot" || fail "job log: $(head -c 300 "$T/body")"
st=$(api GET "/jobs/$JID/logs?tail=5")
[ "$st" = 200 ] && [ "$(cat "$T/body")" = "$(seq 16 20 | sed 's/^/line /')" ] ||
	fail "job log ?tail=5: $st $(cat "$T/body")"
grep -qi '^content-type: text/plain; charset=utf-8' "$T/hdr" || fail "job log type: $(cat "$T/hdr")"
[ $fails = 0 ] && ok "job $JID keeps the boot output (20 lines, tail=5 the last 5)"

# ---- 2. an instance's log: what it prints after its restore ----
st=$(api POST /functions/logs/start)
[ "$st" = 201 ] || { fail "start: $st $(cat "$T/body")"; exit 1; }
IID=$(jget "$T/body" "j['instance']")
EP=$(jget "$T/body" "j['endpoint']")
curl -sf "http://$EP/print?n=8&tag=after" >/dev/null || fail "GET /print through $EP"
wait_log "/instances/$IID/logs" "after 8" || fail "instance log: $(cat "$T/body")"
st=$(api GET "/instances/$IID/logs?tail=5")
[ "$st" = 200 ] && [ "$(cat "$T/body")" = "$(seq 4 8 | sed 's/^/after /')" ] ||
	fail "instance log ?tail=5: $st $(cat "$T/body")"
grep -qi '^content-type: text/plain; charset=utf-8' "$T/hdr" ||
	fail "instance log type: $(cat "$T/hdr")"
# No tail: the default 100, so all 8 and nothing of the boot.
st=$(api GET "/instances/$IID/logs")
[ "$(cat "$T/body")" = "$(seq 1 8 | sed 's/^/after /')" ] || fail "instance log, all: $(cat "$T/body")"
"$THAW" --data-dir "$DATA" logs --tail 5 "$IID" >"$T/cli" 2>"$T/cli.err" || fail "thaw logs: $(cat "$T/cli.err")"
[ "$(cat "$T/cli")" = "$(seq 4 8 | sed 's/^/after /')" ] || fail "thaw logs --tail 5: $(cat "$T/cli")"
curl -sf "http://$EP/print?n=2&tag=oops&err=1" >/dev/null || fail "GET /print?err=1"
for _ in $(seq 50); do
	api GET "/instances/$IID/logs?tail=2" >/dev/null
	grep -q '^oops 2$' "$T/body" && break
	sleep 0.1
done
grep -q '^oops 1$' "$T/body" && grep -q '^oops 2$' "$T/body" || fail "stderr in the log: $(cat "$T/body")"
[ $fails = 0 ] && ok "instance $IID: tail=5 is the last 5 lines it printed (API and thaw logs), stderr too"

# ---- 3. bounded: 128 KiB through a 4 KiB bound ----
curl -sf "http://$EP/spam?n=2000" >/dev/null || fail "GET /spam"
wait_log "/instances/$IID/logs?tail=1" "$(spam_lines 2000 2000)" || fail "spam did not arrive: $(cat "$T/body")"
LOG=$DATA/instances/$IID/function.log
cur=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
old=$(stat -c %s "$LOG.1" 2>/dev/null || echo 0)
[ "$cur" -le $BOUND ] && [ "$old" -le $BOUND ] && [ "$old" -gt 0 ] ||
	fail "function.log $cur bytes, function.log.1 $old bytes (bound $BOUND)"
[ $((cur + old)) -le $((2 * BOUND)) ] || fail "$((cur + old)) bytes on disk"
# What is kept, 64-byte lines: more than the current file holds is asked for,
# then more than both hold.
kept=$(((cur + old) / 64))
n=$((cur / 64 + 5))
st=$(api GET "/instances/$IID/logs?tail=$n")
spam_lines $((2001 - n)) 2000 >"$T/want"
[ "$st" = 200 ] && cmp -s "$T/body" "$T/want" || fail "tail=$n across the rotation: $st $(head -c 200 "$T/body")"
st=$(api GET "/instances/$IID/logs?tail=1000")
spam_lines $((2001 - kept)) 2000 >"$T/want"
[ "$st" = 200 ] && cmp -s "$T/body" "$T/want" || fail "tail=1000 ($kept kept): $st $(head -c 200 "$T/body")"
st=$(api GET "/instances/$IID/logs?tail=3")
[ "$(cat "$T/body")" = "$(spam_lines 1998 2000)" ] || fail "tail=3: $(cat "$T/body")"
[ $fails = 0 ] && ok "128 KiB printed: $cur + $old bytes kept (bound $BOUND), tail=$n spans both files"

# ---- 4. bad input ----
for t in -1 abc 100000 '' 1.5; do
	st=$(api GET "/instances/$IID/logs?tail=$t")
	[ "$st" = 400 ] && [ "$(err_code)" = bad_request ] || fail "tail=$t: $st $(cat "$T/body")"
	st=$(api GET "/jobs/$JID/logs?tail=$t")
	[ "$st" = 400 ] || fail "job tail=$t: $st"
done
st=$(api GET "/instances/$IID/logs?tail=10000")
[ "$st" = 200 ] || fail "tail=10000: $st"
st=$(api GET "/instances/nosuch-123456/logs")
[ "$st" = 404 ] && [ "$(err_code)" = not_found ] || fail "unknown instance: $st $(cat "$T/body")"
st=$(api GET "/jobs/job-999/logs")
[ "$st" = 404 ] && [ "$(err_code)" = not_found ] || fail "unknown job: $st $(cat "$T/body")"
for p in "/instances/../logs" "/instances/%2e%2e/logs" "/instances/..%2fdata/logs" "/jobs/../logs"; do
	st=$(api GET "$p")
	[ "$st" = 400 ] && [ "$(err_code)" = invalid_id ] || fail "GET $p: $st $(cat "$T/body")"
done
st=$(api POST "/instances/$IID/logs")
[ "$st" = 405 ] || fail "POST logs: $st"
st=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $DTOKEN" "$URL/instances/$IID/logs")
[ "$st" = 200 ] || fail "data token, instance logs: $st"
st=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $DTOKEN" "$URL/jobs/$JID/logs")
[ "$st" = 403 ] || fail "data token, job logs: $st"
st=$(curl -s -o /dev/null -w '%{http_code}' "$URL/instances/$IID/logs")
[ "$st" = 401 ] || fail "no token: $st"
"$THAW" --data-dir "$DATA" logs --tail abc "$IID" >/dev/null 2>&1
[ $? = 2 ] || fail "thaw logs --tail abc: not exit 2"
"$THAW" --data-dir "$DATA" logs nosuch-123456 >/dev/null 2>&1
[ $? = 1 ] || fail "thaw logs of an unknown instance: not exit 1"
"$THAW" --data-dir "$DATA" logs ../x >/dev/null 2>&1
[ $? = 2 ] || fail "thaw logs ../x: not exit 2"
api GET "/instances/$IID/logs" >/dev/null
cp "$T/body" "$T/logs.before"
st=$(api DELETE "/instances/$IID")
[ "$st" = 204 ] || fail "DELETE $IID: $st"
# Its output stays readable while its record does (thawd --keep-ended).
st=$(api GET "/instances/$IID/logs")
[ "$st" = 200 ] && [ -s "$T/logs.before" ] &&
	[ "$(head -c "$(stat -c %s "$T/logs.before")" "$T/body")" = "$(cat "$T/logs.before")" ] &&
	ok "the logs of the stopped instance are still there" ||
	fail "logs of a stopped instance: $st $(head -c 300 "$T/body")"
"$THAW" --data-dir "$DATA" logs "$IID" >"$T/cli.out" 2>&1 && cmp -s "$T/cli.out" "$T/body" ||
	fail "thaw logs of the stopped instance: $(head -c 300 "$T/cli.out")"
[ $fails = 0 ] && ok "bad tails 400, unknown 404, traversal 400 invalid_id, scopes, gone once stopped"

# ---- 5. killed from outside: the log stays with the record ----
SNAP=$(api GET /functions/logs >/dev/null; jget "$T/body" "j['snapshot']['id']")
if THAW_RAM_TIER=$SHM THAW_RAM_TIER_BYTES=2147483648 THAW_LOG_BYTES=4K \
	"$THAW" --data-dir "$DATA" start "$SNAP" >"$T/start.json" 2>"$T/start.err"; then
	KID=$(jget "$T/start.json" "j['instance']")
	KPID=$(jget "$T/start.json" "j['pid']")
	KEP=$(jget "$T/start.json" "j['endpoint']")
	curl -sf "http://$KEP/spam?n=500" >/dev/null || fail "GET /spam of $KID"
	curl -sf "http://$KEP/print?n=3&tag=killed" >/dev/null || fail "GET /print of $KID"
	wait_log "/instances/$KID/logs?tail=3" "killed 3" || fail "log of $KID: $(cat "$T/body")"
	kill -9 "$KPID"
	for _ in $(seq 100); do
		api GET "/instances/$KID" >/dev/null
		[ "$(jget "$T/body" "j['state']")" = exited ] && break
		sleep 0.1
	done
	[ "$(jget "$T/body" "j['state']")" = exited ] || fail "$KID after kill -9: $(cat "$T/body")"
	st=$(api GET "/instances/$KID/logs?tail=3")
	[ "$st" = 200 ] && [ "$(cat "$T/body")" = "$(seq 1 3 | sed 's/^/killed /')" ] ||
		fail "log of the killed $KID: $st $(cat "$T/body")"
	[ "$("$THAW" --data-dir "$DATA" logs --tail 1 "$KID")" = "killed 3" ] || fail "thaw logs of the killed $KID"
	LOG=$DATA/instances/$KID/function.log
	cur=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
	old=$(stat -c %s "$LOG.1" 2>/dev/null || echo 0)
	[ "$cur" -le $BOUND ] && [ "$old" -le $BOUND ] && [ "$old" -gt 0 ] ||
		fail "thaw start's log: $cur + $old bytes (THAW_LOG_BYTES=4K)"
	THAW_RAM_TIER=$SHM "$THAW" --data-dir "$DATA" stop "$KID" >/dev/null 2>&1 || fail "thaw stop $KID"
	[ $fails = 0 ] && ok "killed -9 (thaw start, THAW_LOG_BYTES=4K): its log served while its record stays"
else
	fail "thaw start $SNAP: $(cat "$T/start.err")"
fi

# ---- 6. a boot that fails: its job's log says why ----
spec --boom >"$T/boom.json"
st=$(api PUT /functions/boom -d @"$T/boom.json")
[ "$st" = 201 ] || fail "PUT /functions/boom: $st $(cat "$T/body")"
st=$(api POST /functions/boom/snapshot)
[ "$st" = 202 ] || fail "snapshot of boom: $st $(cat "$T/body")"
BJID=$(jget "$T/body" "j['job']['id']")
for _ in $(seq 300); do
	api GET "/jobs/$BJID" >/dev/null
	case "$(jget "$T/body" "j['state']")" in done | failed) break ;; esac
	sleep 0.1
done
[ "$(jget "$T/body" "j['state']")" = failed ] || fail "boom's job: $(cat "$T/body")"
st=$(api GET "/jobs/$BJID/logs")
[ "$st" = 200 ] && grep -qx boom "$T/body" || fail "boom's job log: $st $(cat "$T/body")"
[ $fails = 0 ] && ok "a boot that fails: job $BJID failed, its log has \"boom\""

# ---- 7. a restart: no job logs of the earlier run; nothing left ----
stop_thawd || fail "thawd did not exit 0 on SIGTERM"
start_thawd_logs
[ -z "$(ls -A "$DATA/jobs" 2>/dev/null)" ] || fail "job logs left from the earlier run: $(ls "$DATA/jobs")"
st=$(api GET "/jobs/$JID/logs")
[ "$st" = 404 ] || fail "a job of the earlier run: $st"
stop_thawd || fail "thawd did not exit 0 on SIGTERM"
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
p=$(own_procs)
[ -z "$p" ] || fail "processes left: $p"
m=$(own_mounts)
[ -z "$m" ] || fail "mounts left: $m"
[ $fails = 0 ] && ok "restart: job logs emptied; nothing left"

[ $fails = 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"
exit 1
