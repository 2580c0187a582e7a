#!/usr/bin/env bash
# Functions in a user namespace ("sandbox": {"userns": true}; docs/DESIGN.md
# "Confinement"), with real runc, CRIU and thawd, one thawd for all of it:
#   1. a function in a user namespace is snapshotted and restored (mapped),
#      and answers as its cold process did: the same token, its count of
#      requests going on from the snapshot's warmup; it runs as the host uid
#      range thawd gave it ("userns_uid" in the start's answer, thaw ps);
#   2. from inside it, a file of the host's root, mode 0600, that a mount
#      makes visible is unreadable; the same function without a user
#      namespace (today's confinement alone) reads it; the hardening pass's
#      attacks rerun: a read-write mount of a directory laid out as thaw's
#      data directory (a runc state file, mode 0600 as runc writes it, and
#      a function's spec) is what a mount check missed would give (C1), or
#      a mount source swapped under the check (H2): in a user namespace
#      the state file is not hooked and the spec not read, without one both
#      are (the hook then ran as host root at `runc delete`);
#   3. the same as a standby taken, with the spec's "lazy" (eager where
#      vm.unprivileged_userfaultfd is 0, saying why), and through a routed
#      request, each restored in its own user namespace, another
#      function's range; and booted cold when its snapshot is damaged
#      (restore or boot), in the same range;
#   4. the range stays the function's across snapshots and goes back to
#      the pool with the function;
#   5. but not while a snapshot job of the function still runs its
#      container in it: a function deleted during its snapshot keeps its
#      range until the job ends, and another function asking meanwhile
#      gets another range (given back, the next would have been the same
#      host uids as the job's container).
set -u
NAME=userns
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh" uffd
[ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] || skip "no user namespaces"
# The way to each function's root must be searchable by its range: the
# test's own directory is mktemp's 0700.
chmod 711 "$T"
FN=$T/fn
fixture_fn "$FN" userns_fn.py reach_fn.py
mkdir -p "$FN/mnt"
echo "host root's secret" >"$FN/mnt/secret"
chmod 600 "$FN/mnt/secret"
chmod 755 "$FN" "$FN/mnt"
# A directory of the host's root that each function gets read-write (one
# each: a directory a function writes is reached by nothing else).
mkdir -m 755 "$T/rw-uns" "$T/rw-host"
for d in "$T/rw-uns" "$T/rw-host"; do
	mkdir -p -m 755 "$d/runc/c1" "$d/functions"
	echo '{"id": "c1", "config": {"hooks": {}}}' >"$d/runc/c1/state.json"
	echo '{"command": ["python3", "x.py"]}' >"$d/functions/x.json"
	chmod 600 "$d/runc/c1/state.json" "$d/functions/x.json"
	cp -p "$d/runc/c1/state.json" "$T/state.orig"
done
POOL=3000000000:196608
# The RAM tier on a tmpfs mounted nosuid,nodev,noexec, as thawd mounts its
# default one (restore/tier_root.c) and as a systemd host's /dev/shm is: in a
# user namespace those flags are locked on the memory files' mount.
mkdir -p "$T/tier"
mount -t tmpfs -o nosuid,nodev,noexec,size=1g thaw-test-tier "$T/tier" || fail "mount a tmpfs on $T/tier"
start_thawd --allow-root "$FN" --userns-pool "$POOL" --ram-tier "$T/tier"

spec() { # USERNS [MORE-JSON [RW-DIR]]
	fn_spec userns_fn.py "$FN" "\"sandbox\": {\"userns\": $1},
	  \"mounts\": [{\"source\": \"$FN/mnt\", \"destination\": \"/srv/fn/data\"}${3:+,
	    {\"source\": \"$3\", \"destination\": \"/rw\", \"readonly\": false\}}],
	  \"env\": {\"SECRET\": \"/srv/fn/data/secret\", \"WRITABLE\": \"/rw\", \"ATTACK\": \"/rw\"},
	  \"warmup\": [{\"method\": \"GET\", \"path\": \"/probe\"}]${2:+, $2}"
}

# start FN [WHAT]: POST start, GET /probe into $T/probe; the answer in $T/start.
start() {
	local st ep
	st=$(api POST "/functions/$1/start")
	cp "$T/body" "$T/start"
	[ "$st" = 201 ] || { fail "${2:-$1}: start: $st $(head -c 600 "$T/body")"; return 1; }
	ep=$(jget "$T/start" "j['endpoint']")
	curl -s --max-time 20 -o "$T/probe" "http://$ep/probe" || { fail "${2:-$1}: GET /probe"; return 1; }
	echo "${2:-$1}: $(jget "$T/start" "j['pages'], j.get('userns'), j.get('userns_uid')") $(cat "$T/probe")"
}
p() { jget "$T/probe" "$1"; }
s() { jget "$T/start" "$1"; }

# ---- 1, 2: snapshotted and restored in its user namespace; the secret ----
put_snapshot uns "$(spec true "" "$T/rw-uns")"
start uns "uns (mapped)" || exit 1
BASE=$(s "j.get('userns_uid')")
[ "$(s "j['userns']")" = True ] && [ -n "$BASE" ] && [ "$BASE" -ge 3000000000 ] &&
	ok "the start says: user namespace, host uid $BASE" || fail "start answer: $(cat "$T/start")"
[ "$(p "' '.join(j['uid_map'])")" = "0 $BASE 65536" ] && ok "it runs as host uids $BASE+65536" ||
	fail "uid_map $(p "j['uid_map']")"
[ "$(p "j['served']")" = 2 ] && ok "restored: served goes on from the warmup's 1" ||
	fail "served $(p "j['served']") (a restore goes on from 1)"
TOKEN_UNS=$(p "j['token']")
[ "$(p "j['secret']")" = PermissionError ] && ok "host root's 0600 file is out of its reach" ||
	fail "read host root's 0600 file: $(p "j['secret']")"
# What a read-write mount made of a state file in the hardening pass (code
# run as host root): here the host's root's directory stays unwritten.
[ "$(p "j['write']")" = PermissionError ] && [ ! -e "$T/rw-uns/probe" ] &&
	ok "a read-write mount of host root's directory: not writable by it" ||
	fail "wrote into host root's directory: $(p "j['write']")"
[ "$(p "j['attack']")" = "{'state_files': 1, 'hooked': 0, 'specs': 0}" ] &&
	cmp -s "$T/state.orig" "$T/rw-uns/runc/c1/state.json" &&
	ok "C1/H2 rerun: a runc state file and a spec in its read-write mount: seen, not hooked, not read" ||
	fail "C1/H2 rerun in a user namespace: $(p "j['attack']")"
"$THAW" ps --data-dir "$DATA" >"$T/ps"
grep -q " $BASE\$" "$T/ps" && ok "thaw ps names its uid 0: $BASE" || fail "thaw ps: $(cat "$T/ps")"

# The mapped image is built beside the first start: a later one maps it.
for i in 1 2 3; do
	api DELETE "/instances/$(s "j['instance']")" >/dev/null
	start uns "uns (again)" || break
	[ "$(s "j['pages']")" = mapped ] && break
done
[ "$(s "j['pages']")" = mapped ] && [ "$(p "j['token']")" = "$TOKEN_UNS" ] && [ "$(p "j['served']")" = 2 ] &&
	ok "restored mapped: the same answer" || fail "mapped: $(cat "$T/start") $(cat "$T/probe")"

put_snapshot host "$(spec false "" "$T/rw-host")"
start host "host (no userns)" || exit 1
[ "$(s "j['userns']")" = False ] && [ "$(p "' '.join(j['uid_map'])")" = "0 0 4294967295" ] &&
	ok "without: the host's uid 0" || fail "host: $(cat "$T/start") $(cat "$T/probe")"
[ "$(p "j['secret']")" = "host root's secret" ] && ok "without: the same file is read (the difference)" ||
	fail "without a user namespace the file was not read: $(p "j['secret']")"
[ "$(p "j['write']")" = ok ] && [ -e "$T/rw-host/probe" ] &&
	ok "without: host root's directory is written (the difference)" ||
	fail "without a user namespace the mount was not written: $(p "j['write']")"
[ "$(p "j['attack']")" = "{'state_files': 1, 'hooked': 1, 'specs': 1}" ] &&
	grep -q poststop "$T/rw-host/runc/c1/state.json" &&
	ok "without: the state file hooked, the spec read (the difference)" ||
	fail "C1/H2 rerun without a user namespace: $(p "j['attack']")"

# ---- 3. lazy, standby, routed, booted ----
put_snapshot unsl "$(spec true '"lazy": true, "standby": 1')"
wait_for 60 sh -c "curl -s '$URL/instances' | grep -q '\"standby\": *true'" || fail "no standby of unsl"
start unsl "unsl (standby taken)"
[ "$(s "j['standby']")" = True ] && [ "$(p "j['served']")" = 2 ] && [ "$(p "j['secret']")" = PermissionError ] &&
	ok "a standby taken: restored, in its user namespace" || fail "standby: $(cat "$T/start")"
BASE_L=$(s "j.get('userns_uid')")
[ -n "$BASE_L" ] && [ "$BASE_L" != "$BASE" ] && ok "another function, another range ($BASE_L)" ||
	fail "unsl's range $BASE_L, uns's $BASE"
start unsl "unsl (lazy)"
# CRIU's lazy restore opens a userfaultfd in the restored process, which in a
# user namespace only vm.unprivileged_userfaultfd=1 lets it: else eagerly.
if [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null)" = 1 ]; then
	[ "$(s "j['pages']")" = lazy ]
else
	[ "$(s "j['pages']")" = eager ] && s "j['pages_why']" | grep -q userfaultfd
fi && [ "$(p "j['served']")" = 2 ] && [ "$(s "j['userns_uid']")" = "$BASE_L" ] &&
	ok "the spec's lazy: $(s "j['pages'], j.get('pages_why')"), in its user namespace" ||
	fail "lazy: $(cat "$T/start")"

curl -s --max-time 30 -o "$T/probe" "$URL/function/uns/probe"
[ "$(p "' '.join(j['uid_map'])")" = "0 $BASE 65536" ] && [ "$(p "j['token']")" = "$TOKEN_UNS" ] &&
	ok "a routed request: answered from the snapshot, in its user namespace" ||
	fail "routed: $(cat "$T/probe")"

# ---- booted cold (restore or boot): its snapshot damaged, in its range ----
stop_thawd
snap=$(python3 -c "import json; print(json.load(open('$DATA/functions/uns.json'))['snapshot']['id'])")
[ -n "$(python3 "$ROOT/test/lib/pack_damage.py" flip "$DATA/store" "$snap")" ] || fail "no chunk to flip"
start_thawd --allow-root "$FN" --userns-pool "$POOL" --ram-tier "$SHM/t2"
start uns "uns (booted)"
[ "$(s "j['restored']")" = False ] && [ "$(s "j['userns_uid']")" = "$BASE" ] &&
	[ "$(p "' '.join(j['uid_map'])")" = "0 $BASE 65536" ] && [ "$(p "j['secret']")" = PermissionError ] &&
	ok "its snapshot damaged, booted cold in the same range" || fail "booted: $(cat "$T/start") $(cat "$T/probe")"

# ---- 4. the range is the function's; DELETE gives it back ----
ls "$DATA/userns" >"$T/ranges"
[ "$(wc -l <"$T/ranges")" = 2 ] && ok "two ranges taken: $(tr '\n' ' ' <"$T/ranges")" || fail "ranges: $(cat "$T/ranges")"
st=$(api DELETE /functions/unsl)
[ "$st" = 204 ] && [ "$(ls "$DATA/userns" | wc -l)" = 1 ] && ok "DELETE gave its range back" ||
	fail "DELETE unsl: $st, ranges $(ls "$DATA/userns")"

# ---- 5. a snapshot job holds its function's range until it ends ----
range_of() { grep -lx "$1" "$DATA"/userns/* 2>/dev/null | xargs -rn1 basename; } # FN: its range's file
no_job_runs() { ! curl -s "$URL/jobs" | grep -q '"state": *"running"'; }
wait_for 120 no_job_runs || fail "a snapshot job still runs (uns's re-snapshot?)"
st=$(api PUT /functions/unsj -d "$(fn_spec userns_fn.py "$FN" '"sandbox": {"userns": true},
	"env": {"START_DELAY_S": "5"}')")
[ "$st" = 201 ] && st=$(api POST /functions/unsj/snapshot)
JOB=$(jget "$T/body" "j['job']['id']")
[ "$st" = 202 ] && wait_for 30 sh -c "grep -lqx unsj '$DATA'/userns/*" || fail "unsj's snapshot: $st, no range"
R=$(range_of unsj)
st=$(api DELETE /functions/unsj)
job_runs() { curl -s "$URL/jobs/$JOB" | grep -q '"state": *"running"'; }
[ "$st" = 204 ] && job_runs && [ "$(range_of unsj)" = "$R" ] &&
	ok "deleted while its snapshot job runs: its range $R stays taken" ||
	fail "DELETE unsj during its snapshot: $st, job $(curl -s "$URL/jobs/$JOB" | head -c 300), ranges $(ls "$DATA/userns")"
put_snapshot unsk "$(fn_spec userns_fn.py "$FN" '"sandbox": {"userns": true}')"
RK=$(range_of unsk)
[ -n "$RK" ] && [ "$RK" != "$R" ] && ok "another function asking meanwhile gets another range ($RK)" ||
	fail "unsk's range $RK, unsj's job's $R"
wait_for 120 sh -c "! curl -s '$URL/jobs/$JOB' | grep -q '\"state\": *\"running\"'" || fail "unsj's job never ended"
[ ! -e "$DATA/userns/$R" ] && grep -q "unsj: its last snapshot job ended; its user namespace range is given back" \
	"$T/thawd.log" && ok "its job ended: the range went back" ||
	fail "after unsj's job: ranges $(ls "$DATA/userns")"
exit $((fails > 0))
