#!/usr/bin/env bash
# A function in a user namespace on a host whose /usr has a submount (a GPU
# host's /usr/local/nvidia, and others): the kernel refuses, in a new user
# namespace, a non-recursive bind of a mount with children (`error mounting
# "/usr" ... invalid argument` at runc run), so thawd binds such a directory
# alone onto <data>/stage/usr, private, and the container binds that
# (common/host_stage.h).  thawd runs in a mount namespace of its own where a
# tmpfs is mounted on a fresh directory under /usr: the host's mounts are
# left as they were.  A second tmpfs there, nodev, noexec and noatime (as a
# GPU host's /usr/local/nvidia is), is one of the function's "mounts": in a
# user namespace those flags are locked, and runc's read-only remount of the
# bind dropped them (`error mounting ... flags: 0x1023: operation not
# permitted` before the bind kept them).  Checks: the function is snapshotted (CRIU dump) and
# restored (CRIU restore) in its namespace; /usr is staged in thawd's
# namespace, read-only and private; after thawd starts again in a fresh namespace (as after a
# reboot: no staging mount) a start restores again.
set -u
NAME=userns_stage
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
[ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] || skip "no user namespaces"
command -v unshare >/dev/null || skip "no unshare"
chmod 711 "$T"
FN=$T/fn
fixture_fn "$FN" userns_fn.py
chmod 755 "$FN"
mkdir -m 700 "$T/private" && fixture_fn "$T/private/fn" userns_fn.py
SUB=/usr/local/thaw-test-sub-$$
mkdir "$SUB" || skip "cannot make $SUB"
e2e_cleanup_hook() { rmdir "$SUB" 2>/dev/null; }
# thawd in its own mount namespace, /usr with a submount there only, and the
# locked tmpfs with a file the function reads.
LOCKED=$T/locked
mkdir "$LOCKED"
cat >"$T/thawd-ns" <<EOS
#!/bin/sh
exec unshare -m --propagation private sh -c 'mount -t tmpfs thaw-test-sub "\$0" &&
	mount -t tmpfs -o nodev,noexec,noatime,mode=755 thaw-test-locked "$LOCKED" &&
	echo locked-flags-kept >"$LOCKED/word" && chmod 644 "$LOCKED/word" &&
	exec "\$@"' "$SUB" "$THAWD" "\$@"
EOS
chmod 755 "$T/thawd-ns"
THAWD=$T/thawd-ns
POOL=3000000000:196608
start_thawd --allow-root "$FN" --userns-pool "$POOL"
staged() { nsenter -t "$THAWD_PID" -m awk -v p="$DATA/stage/usr" '$5 == p' /proc/self/mountinfo; }
nsenter -t "$THAWD_PID" -m awk -v p="$SUB" '$5 == p { f = 1 } END { exit !f }' /proc/self/mountinfo &&
	ok "thawd's /usr has a submount: $SUB" || fail "no tmpfs on $SUB in thawd's namespace"

start() { # WHAT
	local st ep
	st=$(api POST /functions/stg/start)
	cp "$T/body" "$T/start"
	[ "$st" = 201 ] || { fail "$1: start: $st $(head -c 600 "$T/body")"; return 1; }
	ep=$(jget "$T/start" "j['endpoint']")
	curl -s --max-time 20 -o "$T/probe" "http://$ep/probe" || { fail "$1: GET /probe"; return 1; }
	[ "$(jget "$T/start" "j['restored']")" = True ] &&
		[ "$(jget "$T/probe" "' '.join(j['uid_map'])")" = "0 3000000000 65536" ] &&
		[ "$(jget "$T/probe" "j['served']")" = 2 ] &&
		[ "$(jget "$T/probe" "j['secret']")" = locked-flags-kept ] &&
		ok "$1: restored in its user namespace, served goes on from the warmup's 1, the locked mount read" ||
		fail "$1: $(cat "$T/start") $(cat "$T/probe")"
	api DELETE "/instances/$(jget "$T/start" "j['id']")" >/dev/null
}

put_snapshot stg "$(fn_spec userns_fn.py "$FN" "\"sandbox\": {\"userns\": true},
  \"env\": {\"SECRET\": \"/locked/word\"},
  \"mounts\": [{\"source\": \"$LOCKED\", \"destination\": \"/locked\"}],
  \"warmup\": [{\"method\": \"GET\", \"path\": \"/probe\"}]")"
ok "snapshotted in a user namespace with a submount in /usr"
# Its root /usr, read-only, no peer group (private).
[ "$(staged | awk '{print $4, substr($6, 1, 3), $7}')" = "/usr ro, -" ] &&
	ok "/usr bound alone on $DATA/stage/usr: $(staged | awk '{print $4, $6, $7}')" ||
	fail "/usr not staged: $(nsenter -t "$THAWD_PID" -m grep "$DATA" /proc/self/mountinfo)"
start "first start"

# A fresh mount namespace: no staging mount until a bundle needs it.  This
# thawd is told nothing: by default a function whose spec does not say
# runs in a user namespace where the host supports it; one that says
# false runs as the host's uid 0.
stop_thawd
start_thawd --allow-root "$FN" --allow-root "$T/private" --userns-pool "$POOL"
[ -z "$(staged)" ] || fail "staged before any start"
start "after a restart (no staging mount)"
[ -n "$(staged)" ] && ok "staged again by the restore's bundle" || fail "not staged again"

# thawd's default: a spec without "userns" gets one, a spec saying false
# does not, and the spec is stored as given.
probe_of() { # FN: start it, GET /probe into $T/probe, the start in $T/start
	local ep
	[ "$(api POST "/functions/$1/start")" = 201 ] || { fail "start $1: $(cat "$T/body")"; return 1; }
	cp "$T/body" "$T/start"
	ep=$(jget "$T/start" "j['endpoint']")
	curl -s --max-time 20 -o "$T/probe" "http://$ep/probe"
}
put_snapshot dflt "$(fn_spec userns_fn.py "$FN")"
probe_of dflt &&
	[ "$(jget "$T/start" "j['userns'], j['restored']")" = "True True" ] &&
	[ "$(jget "$T/probe" "j['uid_map'][1]")" -ge 3000065536 ] &&
	ok "no \"userns\" in the spec, thawd's default: restored in a user namespace, host uid $(jget "$T/probe" "j['uid_map'][1]")" ||
	fail "default: $(cat "$T/start") $(cat "$T/probe")"
api GET /functions/dflt >/dev/null
[ "$(jget "$T/body" "'userns' in (j.get('sandbox') or {})")" = False ] || fail "dflt's spec: $(cat "$T/body")"
put_snapshot optout "$(fn_spec userns_fn.py "$FN" "\"sandbox\": {\"userns\": false}")"
probe_of optout &&
	[ "$(jget "$T/start" "j['userns']")" = False ] &&
	[ "$(jget "$T/probe" "' '.join(j['uid_map'])")" = "0 0 4294967295" ] &&
	ok "\"userns\": false: the host's uid 0 under the same thawd" || fail "opt-out: $(cat "$T/start") $(cat "$T/probe")"
api GET /functions/optout >/dev/null
[ "$(jget "$T/body" "j['sandbox']['userns']")" = False ] || fail "optout's spec: $(cat "$T/body")"
# The default where the range could not reach the function's directory
# (mode 0700): it runs as before, as the host's uid 0, and thawd says why
# (a spec saying true there is refused, naming the directory).
put_snapshot private "$(fn_spec userns_fn.py "$T/private/fn")"
probe_of private &&
	[ "$(jget "$T/start" "j['userns']")" = False ] &&
	grep -q "private runs as the host's uid 0, in no user namespace: $T/private, on the way to its cwd, is not searchable" "$T/thawd.log" &&
	ok "a function in a 0700 directory: the default does not apply, and thawd's log says why" ||
	fail "0700: $(cat "$T/start") $(grep 'private runs' "$T/thawd.log")"
# thawd --no-userns: the default off.
stop_thawd
start_thawd --allow-root "$FN" --userns-pool "$POOL" --no-userns
put_snapshot off "$(fn_spec userns_fn.py "$FN")"
probe_of off && [ "$(jget "$T/start" "j['userns']")" = False ] &&
	ok "thawd --no-userns: a spec without \"userns\" runs as the host's uid 0" || fail "--no-userns: $(cat "$T/start")"
exit $((fails > 0))
