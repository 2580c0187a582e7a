#!/usr/bin/env bash
# thawd's data directory and RAM tier are private whatever the umask (issue
# 44, M4 and L10), with real runc, CRIU and thawd.  Under umask 022, with a
# data directory and a tier left 0755 by an older thawd:
#   1. a function whose env holds a secret is registered, snapshotted, and
#      started twice (a mapped restore and a lazy one), and its instances
#      answer: what a restored container maps or reads is still reachable;
#   2. while they run, and again once they are stopped (their ended records
#      and logs written), no file or directory under the data directory or
#      the tier can be read, written or searched by group or other, but for
#      the exceptions below;
#   3. the data directory and the tier root are 0700.
# Its functions run as the host's uid 0 ("userns": false): in a user
# namespace (the default where the test's directory is searchable, as it is
# here) thaw opens the data directory and the tier root to search by others
# (o+x, no listing) and a function's own directories to its range's group,
# by design (docs/DESIGN.md, "Confinement"; e2e_userns runs them).
# The exceptions, each under a 0700 directory so no other user reaches it:
#   - instances/*/bundle/rootfs (the rootfs skeleton of a function without a
#     bundle): 0755, because CRIU records the container root's mode at the
#     dump and refuses another at the restore (e2e_umask), and snapshots
#     taken before this change recorded 0755; and the empty directories in
#     it (0755 too), the container's mount points, which hold nothing;
#   - symbolic links (their own mode means nothing) and nsfs bind mounts
#     (the network namespace a mount point shows, not a file thawd wrote).
set -u
NAME=private
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh" uffd
SECRET=sk-live-$RANDOM$RANDOM
FN=$T/fn
fixture_fn "$FN" ok_fn.py
chmod 755 "$T" "$FN"
chmod 644 "$FN/ok_fn.py"
# What an older thawd left: a world-readable data directory and tier.
mkdir -m 755 "$DATA" "$DATA/functions"
chmod 755 "$SHM"

# exposed: every path under the data directory and the tier that group or
# other may read, write or search, less the exceptions above.
exposed() {
	find "$DATA" "$SHM" -path "$DATA/runc" -prune -o ! -type l -perm /077 -print 2>/dev/null |
		while read -r p; do
			case $p in
			"$DATA"/instances/*/bundle/rootfs) continue ;;
			"$DATA"/instances/*/bundle/rootfs/*)
				[ -d "$p" ] && [ -z "$(ls -A "$p")" ] && continue
				;;
			esac
			[ "$(stat -f -c %T "$p" 2>/dev/null)" = nsfs ] && continue
			echo "$(stat -c %a "$p") $p"
		done
	# runc's state: only what is not a link (runc's own files).
	find "$DATA/runc" ! -type l -perm /077 -printf '%m %p\n' 2>/dev/null
}
check_private() {
	local bad
	bad=$(exposed)
	if [ -z "$bad" ]; then
		ok "$1: nothing under the data directory or the tier is open to group or other"
	else
		fail "$1: open to group or other: $(echo "$bad" | head -n 20)"
	fi
}

umask 022
start_thawd --allow-root "$FN"
for f in m l; do
	lazy=""
	[ $f = l ] && lazy=', "lazy": true'
	st=$(api PUT /functions/$f -d "$(fn_spec ok_fn.py "$FN" "\"env\": {\"SECRET\": \"$SECRET\"},
	  \"sandbox\": {\"userns\": false}$lazy")")
	[ "$st" = 201 ] || fail "PUT $f: $st $(cat "$T/body")"
	st=$(api POST "/functions/$f/snapshot?wait=1")
	[ "$st" = 200 ] || fail "snapshot $f: $st $(cat "$T/body")"
done
iids=""
for f in m l; do
	st=$(api POST /functions/$f/start)
	if [ "$st" = 201 ]; then
		ep=$(jget "$T/body" "j['endpoint']")
		pages=$(jget "$T/body" "j.get('pages')")
		iids="$iids $(jget "$T/body" "j['instance']")"
		[ "$(curl -s --max-time 10 "http://$ep/")" = ok ] &&
			ok "$f: the restored instance answers (pages $pages)" ||
			fail "$f: the restored instance (pages $pages) does not answer"
	else
		fail "start $f: $st $(head -c 600 "$T/body")"
	fi
done
for d in "$DATA" "$SHM"; do
	m=$(stat -c %a "$d")
	[ "$m" = 700 ] && ok "$d is 700" || fail "$d is $m, not 700"
done
check_private "with instances running"
for i in $iids; do
	st=$(api DELETE "/instances/$i")
	[ "$st" = 200 ] || [ "$st" = 204 ] || fail "stop $i: $st $(cat "$T/body")"
done
stop_thawd || fail "thawd exited $?"
check_private "after the instances ended and thawd stopped"
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
