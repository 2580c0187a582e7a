#!/usr/bin/env bash
# A function from an OCI image in a user namespace ("image" with
# "sandbox": {"userns": true}; images/idmap.c, docs/DESIGN.md
# "Confinement"), with real skopeo, umoci, runc, CRIU and thawd, and no
# network: the image is built here from busybox-static (its httpd runs CGI
# scripts), with a file of uid 0 mode 0600 and one of uid 1000.
#   1. the PUT is accepted, the snapshot made, and a start restores it (not
#      booted: "restored") in the function's range, and again mapped; each
#      answers as the snapshot's process was: the token its warmup wrote in
#      /tmp (a tmpfs CRIU dumps), the same in every start;
#   2. inside, every file has the owner the image gave it: the image's root's
#      0600 file is the function's (its uid 0's) to read, the uid-1000 file
#      stays uid 1000's; the root is read-only even where the function owns
#      it; a file of the host's root, mode 0600, bound in through a mount,
#      stays unreadable;
#   3. from the host: the process runs as the range's first uid; the cache's
#      rootfs still belongs to host root; one idmapped mount of it serves
#      every start of the range, a cold boot after thawd's restart too (its
#      snapshot damaged: restore or boot), and goes with the function's
#      DELETE.
set -u
NAME=userns_image
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
require_image_tools
[ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] || skip "no user namespaces"
# The way to the function's root and its mount's source must be searchable
# by its range: the test's own directory is mktemp's 0700.
chmod 711 "$T"
I=$T/img
mkdir -p "$I" "$T/host"
echo "host root's secret" >"$T/host/secret"
chmod 600 "$T/host/secret"
chmod 755 "$T/host"

(
	set -e
	cd "$I"
	umoci init --layout lay
	umoci new --image lay:t
	umoci unpack --image lay:t bun >/dev/null
	r=bun/rootfs
	mkdir -p "$r/bin" "$r/tmp" "$r/www/cgi-bin"
	cp "$BUSYBOX" "$r/bin/busybox"
	for l in sh httpd cat stat id sed head tr kill; do ln -sf busybox "$r/bin/$l"; done
	echo hello >"$r/www/index.html"
	printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\ncat /proc/sys/kernel/random/uuid >/tmp/token\ncat /tmp/token\n' \
		>"$r/www/cgi-bin/warm"
	cat >"$r/www/cgi-bin/info" <<'EOF'
#!/bin/sh
printf "Content-Type: text/plain\r\n\r\n"
echo "token=$(cat /tmp/token 2>&1)"
echo "uid=$(id -u):$(id -g)"
echo "uid_map=$(echo $(cat /proc/self/uid_map))"
echo "secret=$(cat /secret 2>&1)"
echo "secret_owner=$(stat -c %u:%g:%a /secret)"
echo "other_owner=$(stat -c %u:%g:%a /other)"
echo "www_owner=$(stat -c %u:%g /www)"
echo "write=$( (echo x >/www/x) 2>&1 | sed 's/.*: //')"
echo "host=$(cat /srv/host/secret 2>&1 | sed 's/.*: //')"
EOF
	chmod 755 "$r/www/cgi-bin/warm" "$r/www/cgi-bin/info"
	echo "the image's root's secret" >"$r/secret"
	chmod 600 "$r/secret"
	echo "uid 1000's" >"$r/other"
	chown 1000:1000 "$r/other"
	chmod 640 "$r/other"
	umoci repack --image lay:t bun
	# sh holds 3 MB of its own (a mapped restore maps a mapping of 1 MiB
	# or more) and runs httpd.
	umoci config --image lay:t --config.entrypoint sh --config.entrypoint -c \
		--config.entrypoint 'x=$(head -c 3000000 /dev/zero | tr "\0" x); trap "kill \$!; exit" TERM; httpd -f -p 8000 & wait' \
		--config.workingdir /www --config.exposedports 8000/tcp
	umoci gc --layout lay
) >"$T/build.log" 2>&1 || { cat "$T/build.log"; echo "cannot build the test image"; exit 1; }
ok "test image: busybox-static httpd, /secret 0:0 0600, /other 1000:1000 0640"

start_thawd --allow-root "$T/host" --allow-root "$I" --userns-pool 3100000000:131072
SPEC="{\"image\": \"oci:$I/lay:t\", \"sandbox\": {\"userns\": true}, \"ready\": {\"http\": \"/\"},
  \"warmup\": [{\"method\": \"GET\", \"path\": \"/cgi-bin/warm\"}],
  \"mounts\": [{\"source\": \"$T/host\", \"destination\": \"/srv/host\"}]}"

# ---- 1. accepted, snapshotted, restored ----
st=$(api PUT /functions/img -d "$SPEC")
[ "$st" = 201 ] && ok "PUT an image function with \"sandbox\": {\"userns\": true}: 201" ||
	{ fail "PUT: $st $(cat "$T/body")"; exit 1; }
st=$(api POST "/functions/img/snapshot?wait=1")
[ "$st" = 200 ] && ok "snapshotted in its user namespace" ||
	{ fail "snapshot: $st $(head -c 800 "$T/body")"; exit 1; }
DIGEST=$(jget "$T/body" "j['job']['result']['image']")

start() { # WHAT: start, GET /cgi-bin/info into $T/info; the answer's fields in S_*
	local st
	st=$(api POST /functions/img/start)
	cp "$T/body" "$T/start"
	[ "$st" = 201 ] || { fail "$1: start: $st $(head -c 600 "$T/body")"; return 1; }
	# One python3 for every field: it takes a second to start on a loaded machine.
	eval "$(python3 -S -c 'import json, sys
j = json.load(open(sys.argv[1]))
for k in ("endpoint", "instance", "pid", "restored", "pages", "userns", "userns_uid"):
    print("S_%s=\"%s\"" % (k, j.get(k, "")))' "$T/start")"
	curl -s --max-time 20 -o "$T/info" "http://$S_endpoint/cgi-bin/info" || { fail "$1: GET /cgi-bin/info"; return 1; }
	echo "   $1: restored $S_restored, pages $S_pages, uid 0 = host $S_userns_uid, token $(v token)"
}
v() { sed -n "s/^$1=//p" "$T/info"; }

start "first start" || exit 1
BASE=$S_userns_uid
PID=$S_pid
WTOKEN=$(v token)
[ "$S_restored" = True ] && [ "$S_userns" = True ] && [ -n "$BASE" ] &&
	[ "$BASE" -ge 3100000000 ] && ok "restored, not booted, in a user namespace: uid 0 is host $BASE" ||
	fail "start: $(cat "$T/start")"
[ "$(v uid_map)" = "0 $BASE 65536" ] && [ "$(v uid)" = 0:0 ] &&
	ok "inside: uid 0, host uids $BASE+65536" || fail "inside: uid $(v uid), uid_map $(v uid_map)"
case "$WTOKEN" in ????????-????-????-????-????????????)
	ok "answers with the token its snapshot's warmup wrote in /tmp" ;;
*) fail "token: '$WTOKEN'" ;; esac

# ---- 2. owners as the image gave them ----
[ "$(v secret)" = "the image's root's secret" ] && [ "$(v secret_owner)" = 0:0:600 ] &&
	ok "the image's uid 0 file (0600) is its own uid 0's: read" ||
	fail "/secret: '$(v secret)', owner $(v secret_owner)"
[ "$(v other_owner)" = 1000:1000:640 ] && ok "the image's uid 1000 file keeps its owner (1000:1000)" ||
	fail "/other's owner: $(v other_owner)"
[ "$(v www_owner)" = 0:0 ] && [ "$(v write)" = "Read-only file system" ] &&
	ok "its root is read-only, even where it owns it: $(v write)" ||
	fail "/www: owner $(v www_owner), write: $(v write)"
[ "$(v host)" = "Permission denied" ] && ok "host root's 0600 file bound in stays unreadable: $(v host)" ||
	fail "host root's file: $(v host)"

# ---- 3. from the host ----
[ "$(awk '/^Uid:/ { print $2 }' "/proc/$PID/status")" = "$BASE" ] &&
	[ "$(awk '/^Gid:/ { print $2 }' "/proc/$PID/status")" = "$BASE" ] &&
	ok "from the host, pid $PID runs as uid and gid $BASE" ||
	fail "pid $PID: $(grep -E '^(Uid|Gid):' "/proc/$PID/status")"
ROOTFS=$DATA/images/rootfs/${DIGEST#sha256:}/rootfs
[ "$(stat -c %u:%g:%a "$ROOTFS/secret")" = 0:0:600 ] && [ "$(stat -c %u "$ROOTFS/other")" = 1000 ] &&
	[ ! -e "$ROOTFS/www/x" ] && ok "the image cache's files are as unpacked: host root's, unwritten" ||
	fail "cache: $(stat -c '%n %u:%g:%a' "$ROOTFS/secret" "$ROOTFS/other")"
idmaps() { awk -v d="$DATA/images/idmap/" 'index($5, d) == 1 && $6 ~ /idmapped/ { print $5 }' /proc/self/mountinfo; }
[ "$(idmaps)" = "$DATA/images/idmap/${DIGEST#sha256:}-$BASE" ] &&
	ok "one idmapped mount of the image's rootfs for the range: images/idmap/${DIGEST:7:12}…-$BASE" ||
	fail "idmapped mounts: $(idmaps)"

# Again: the mapped image is built beside the first start, a later one maps it.
for i in 1 2 3; do
	api DELETE "/instances/$S_instance" >/dev/null
	start "start $((i + 1))" || break
	[ "$S_pages" = mapped ] && break
done
[ "$S_restored" = True ] && [ "$S_pages" = mapped ] && [ "$(v token)" = "$WTOKEN" ] &&
	[ "$(v secret)" = "the image's root's secret" ] && [ "$(v host)" = "Permission denied" ] &&
	ok "restored mapped: the same token, the same owners" ||
	fail "mapped: $(cat "$T/start") $(cat "$T/info")"
[ "$(idmaps | wc -l)" = 1 ] && ok "every start reused the one idmapped mount" ||
	fail "idmapped mounts: $(idmaps)"

# Booted cold (restore or boot) when its snapshot is damaged, after a
# restart of thawd (whose gc keeps the mount: its range and image are used).
api DELETE "/instances/$S_instance" >/dev/null
stop_thawd
snap=$(python3 -S -c "import json; print(json.load(open('$DATA/functions/img.json'))['snapshot']['id'])")
[ -n "$(python3 "$ROOT/test/lib/pack_damage.py" flip "$DATA/store" "$snap")" ] || fail "no chunk to flip"
start_thawd --allow-root "$T/host" --allow-root "$I" --userns-pool 3100000000:131072 --ram-tier "$SHM/t2"
start "booted" &&
	[ "$S_restored" = False ] && [ "$S_userns_uid" = "$BASE" ] && [ "$(v uid_map)" = "0 $BASE 65536" ] &&
	[ "$(v secret)" = "the image's root's secret" ] && [ "$(v other_owner)" = 1000:1000:640 ] &&
	[ "$(v host)" = "Permission denied" ] && [ "$(idmaps | wc -l)" = 1 ] &&
	ok "its snapshot damaged, booted cold in the same range, on the same idmapped mount" ||
	fail "booted: $(cat "$T/start") $(cat "$T/info") $(idmaps)"

# The boot launched its re-snapshot, whose container runs in the range on
# the mount: both stay until that job ends (server/userns_holds.h).
st=$(api DELETE /functions/img)
wait_for 120 sh -c "! curl -s '$URL/jobs' | grep -q '\"state\": *\"running\"'" || fail "img's re-snapshot never ended"
[ "$st" = 204 ] && [ -z "$(idmaps)" ] && [ -z "$(ls "$DATA/images/idmap")" ] && [ -z "$(ls "$DATA/userns")" ] &&
	ok "DELETE /functions/img: once its re-snapshot ended, its idmapped mount and range are gone" ||
	fail "after DELETE ($st): $(idmaps) $(ls "$DATA/images/idmap") ranges $(ls "$DATA/userns")"
[ $fails = 0 ] || exit 1
