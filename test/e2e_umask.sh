#!/usr/bin/env bash
# A snapshot restores whatever umask thawd runs under (issue 36, defect 4),
# with real runc, CRIU and thawd.  CRIU records the mode of the container's
# root (the rootfs skeleton thawd makes for a function without a bundle) and
# refuses another at the restore, so what thawd makes must not depend on its
# umask.  For each pair (077 then 022, 022 then 077):
#   1. a thawd under the first umask snapshots a function with a standby;
#   2. a thawd under the second on the same data directory starts it (201,
#      its endpoint answers), and remakes its standby;
#   3. the snapshot's rootfs skeleton was 0755 under either.
set -u
NAME=umask
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fns/u # outside the data directory, which no function may reach
fixture_fn "$FN" ok_fn.py

# thawd_under MASK: a thawd started under umask MASK.
thawd_under() {
	local was
	was=$(umask)
	umask "$1"
	start_thawd --allow-root "$T/fns"
	umask "$was"
}
standbys() {
	api GET /instances >/dev/null
	jget "$T/body" "sum(1 for i in j['instances'] if i['state'] == 'standby')"
}

for pair in "077 022" "022 077"; do
	set -- $pair
	first=$1 second=$2
	thawd_under "$first"
	st=$(api PUT /functions/u -d "$(fn_spec ok_fn.py "$FN" "\"standby\": 1")")
	[ "$st" = 201 ] || [ "$st" = 200 ] || fail "umask $first: PUT: $st $(cat "$T/body")"
	st=$(api POST '/functions/u/snapshot?wait=1')
	[ "$st" = 200 ] && ok "umask $first: snapshot" || fail "umask $first: snapshot: $st $(cat "$T/body")"
	stop_thawd

	thawd_under "$second"
	st=$(api POST /functions/u/start)
	if [ "$st" = 201 ]; then
		ep=$(jget "$T/body" "j['endpoint']")
		dir=$(jget "$T/body" "j['instance']")
		mode=$(stat -c %a "$DATA/instances/$dir/bundle/rootfs" 2>/dev/null)
		[ "$(curl -s --max-time 10 "http://$ep/")" = ok ] &&
			ok "snapshot under umask $first, started under $second (rootfs $mode)" ||
			fail "umask $first then $second: the instance does not answer"
		[ -z "$mode" ] || [ "$mode" = 755 ] || fail "umask $second: the rootfs skeleton is $mode, not 755"
	else
		fail "snapshot under umask $first, start under $second: $st $(head -c 600 "$T/body")"
	fi
	for _ in $(seq 100); do [ "$(standbys)" = 1 ] && break; sleep 0.1; done
	[ "$(standbys)" = 1 ] && ok "umask $second: the standby was remade" ||
		fail "umask $first then $second: no standby: $(grep -m1 'bad mode' "$T/thawd.log")"
	stop_thawd
done
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
