#!/usr/bin/env bash
# Functions confined by default, from the attack side, with real runc, CRIU
# and thawd (common/oci.h, docs/DESIGN.md "Confinement"):
#   1. "cwd": "/usr/share" and "bundle": "/" are refused (403 forbidden,
#      naming --allow-root) unless the operator allows the directory;
#   2. allowed explicitly (--allow-root /etc), a function whose cwd is /etc,
#      snapshotted and started (a restored instance), cannot read the host's
#      /etc/shadow, cannot create a file in /etc, /usr/share or its root,
#      does not see the host's /root, cannot chroot or make a mount
#      namespace; it runs with no capability, no_new_privileges and the
#      seccomp filter, and writes its /tmp; nothing appeared on the host;
#   3. the same function with every loosening in its "sandbox" (writable
#      root, no seccomp, host_home, CAP_SYS_CHROOT) does each of those
#      things it was allowed, and still cannot read /etc/shadow;
#   4. nothing is left after the DELETEs.
set -u
NAME=confine
NAME_PROBE=thaw-confine-probe-$$
MARKER=/root/$NAME_PROBE
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
# The marker and whatever the function might have created on the host go too.
trap 'rm -f "$MARKER" "/etc/$NAME_PROBE" "/usr/share/$NAME_PROBE" "/$NAME_PROBE"; thawd_e2e_cleanup' EXIT
start_thawd --allow-root /etc

# spec CWD [SANDBOX-JSON]: the probe function, its source given on the command
# line (a cwd such as /etc holds no copy of it).
spec() {
	python3 - "$ROOT/test/fixtures/confine_fn.py" "$1" "$NAME_PROBE" "${2:-}" <<'PY'
import json, sys
src, cwd, name, sandbox = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4]
s = {"command": ["python3", "-c", src], "cwd": cwd, "port": 8000,
     "env": {"PROBE_NAME": name}, "ready": {"http": "/health", "timeout_s": 60}}
if sandbox:
    s["sandbox"] = json.loads(sandbox)
print(json.dumps(s))
PY
}

# probe FN: snapshot FN, start an instance (a restore), GET /probe into
# $T/probe.FN; the instance id in IID_FN.  Returns non-zero if any step fails.
probe() {
	local fn=$1 st ep
	st=$(api POST "/functions/$fn/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "$fn: snapshot: $st $(head -c 400 "$T/body")"; return 1; }
	st=$(api POST "/functions/$fn/start")
	[ "$st" = 201 ] || { fail "$fn: start: $st $(head -c 400 "$T/body")"; return 1; }
	ep=$(jget "$T/body" "j['endpoint']")
	eval "IID_${fn//-/_}=$(jget "$T/body" "j['instance']")"
	curl -s --max-time 20 -o "$T/probe.$fn" "http://$ep/probe" ||
		{ fail "$fn: GET /probe failed"; return 1; }
	echo "$fn (restored): $(cat "$T/probe.$fn")"
}
pget() { jget "$T/probe.$1" "j['$2']"; }
expect() { # FN KEY WANT (WANT "!ok": anything but ok)
	local got
	got=$(pget "$1" "$2")
	case "$3" in
	'!ok') [ -n "$got" ] && [ "$got" != ok ] && ok "$1: $2 refused ($got)" ||
		fail "$1: $2 was allowed: '$got'" ;;
	*) [ "$got" = "$3" ] && ok "$1: $2 = $got" || fail "$1: $2 = '$got', expected '$3'" ;;
	esac
}

echo "a marker the host's root user owns" >"$MARKER"

# ---- 1. refused unless allowed ----
for bad in '"cwd": "/usr/share"' '"bundle": "/"'; do
	st=$(api PUT /functions/bad -d "{\"command\": [\"true\"], \"port\": 8000, $bad}")
	if [ "$st" = 403 ] && grep -q 'allow-root' "$T/body"; then
		ok "{$bad} refused: $(cat "$T/body")"
	else
		fail "{$bad}: $st $(cat "$T/body")"
	fi
done

# ---- 2. confined: cwd /etc, allowed explicitly ----
spec /etc >"$T/confined.json"
st=$(api PUT /functions/confined -d @"$T/confined.json")
[ "$st" = 201 ] || fail "PUT confined (cwd /etc, allowed): $st $(cat "$T/body")"
if probe confined; then
	for k in read_shadow write_etc write_usr_share write_root chroot mount_ns; do
		expect confined $k '!ok'
	done
	expect confined see_root_home absent
	expect confined write_tmp ok
	expect confined cap_eff 0000000000000000
	expect confined no_new_privs 1
	expect confined seccomp 2
fi
for f in "/etc/$NAME_PROBE" "/usr/share/$NAME_PROBE" "/$NAME_PROBE"; do
	[ -e "$f" ] && fail "the function created $f on the host"
done

# ---- 3. loosened, explicitly ----
mkdir -p "$T/fn"
spec "$T/fn" '{"writable_root": true, "seccomp": false, "host_home": true,
	"no_new_privileges": false, "capabilities": ["CAP_SYS_CHROOT"]}' >"$T/loose.json"
st=$(api PUT /functions/loose -d @"$T/loose.json")
[ "$st" = 201 ] || fail "PUT loose: $st $(cat "$T/body")"
api GET /functions/loose >/dev/null
[ "$(jget "$T/body" "j['sandbox']['seccomp']")" = False ] ||
	fail "GET /functions/loose does not show its sandbox: $(cat "$T/body")"
if probe loose; then
	expect loose write_root ok
	expect loose chroot ok
	expect loose see_root_home ok
	expect loose seccomp 0
	expect loose no_new_privs 0
	expect loose read_shadow '!ok'
	expect loose mount_ns '!ok'
	[ "$(pget loose cap_eff)" != 0000000000000000 ] && ok "loose: cap_eff $(pget loose cap_eff)" ||
		fail "loose: no capability"
fi
[ -e "/$NAME_PROBE" ] && fail "the loosened function's root is the host's"

# ---- 4. nothing left ----
for fn in confined loose; do
	st=$(api DELETE "/functions/$fn")
	[ "$st" = 204 ] || fail "DELETE /functions/$fn: $st $(cat "$T/body")"
done
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
m=$(own_mounts)
[ -z "$m" ] || fail "mounts left: $m"

echo "$fails failure(s)"
[ $fails = 0 ]
