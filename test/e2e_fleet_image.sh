#!/usr/bin/env bash
# A function on an OCI image, shared by two thawds through a real S3 server
# (a single-node Ceph RGW, test/lib/ceph_rgw.sh), with real skopeo, umoci,
# runc and CRIU.  The image is built here from busybox-static, as an OCI
# layout both thawds can read (no network).
#   1. thawd A snapshots a function on the layout's tag and pushes it;
#   2. the tag moves to another image; thawd B (its own data directory, RAM
#      tier and image cache) pulls the function: nothing boots, no image is
#      copied; B's start fails 409 image_changed naming the snapshot's
#      digest, and B's image cache holds nothing, not even work; with the
#      layout gone, 502 image_unavailable naming the digest, the same;
#   3. the tag back on the snapshot's image: B's start copies that image by
#      its digest into B's cache (timings_ms.image), restores onto B's own
#      rootfs and answers as A's instance does; the image in B's cache has
#      the digest the snapshot records;
#   4. B's second start copies nothing.
set -u
NAME=fleet_image
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
require_image_tools
. "$ROOT/test/lib/ceph_rgw.sh"
ceph_rgw_start thaw || exit 1
REMOTE=s3://thaw/fleet-image
I=$T/img
mkdir -p "$I"

# ---- the images: lay:t (httpd serving "hello") and v2:t (serving "v2") ----
(
	set -e
	cd "$I"
	umoci init --layout lay
	umoci new --image lay:t
	umoci unpack --image lay:t bun >/dev/null
	mkdir -p bun/rootfs/bin bun/rootfs/tmp bun/rootfs/www
	cp "$BUSYBOX" bun/rootfs/bin/busybox
	for l in sh httpd; do ln -sf busybox "bun/rootfs/bin/$l"; done
	echo hello >bun/rootfs/www/index.html
	umoci repack --image lay:t bun
	umoci config --image lay:t --config.entrypoint httpd --config.entrypoint -f \
		--config.cmd -p --config.cmd 8000 --config.workingdir /www --config.exposedports 8000/tcp
	rm -rf bun
	umoci unpack --image lay:t bun >/dev/null
	cp -a lay v2
	echo v2 >bun/rootfs/www/index.html
	umoci repack --image v2:t bun
	umoci gc --layout lay
	umoci gc --layout v2
	rm -rf bun
	cp -a lay orig
) >"$T/build.log" 2>&1 || { cat "$T/build.log"; echo "cannot build the test image"; exit 1; }

# ---- 1. A: snapshot on the layout's tag, pushed ----
start_thawd --remote "$REMOTE"
st=$(api PUT /functions/img -d "{\"image\": \"oci:$I/lay:t\", \"ready\": {\"http\": \"/\"}}")
[ "$st" = 201 ] || { fail "PUT img on A: $st $(cat "$T/body")"; exit 1; }
st=$(api POST "/functions/img/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot on A: $st $(cat "$T/body")"; exit 1; }
DIGEST=$(jget "$T/body" "j['job']['result']['image']")
HEX=${DIGEST#sha256:}
push_ended() {
	api GET /functions/img >/dev/null
	case "$(jget "$T/body" "(j.get('push') or {}).get('state')")" in done | failed) return 0 ;; esac
	return 1
}
wait_for 30 push_ended
[ "$(jget "$T/body" "j['push']['state']")" = done ] &&
	ok "A snapshotted img on oci:…/lay:t (image ${DIGEST:0:19}…) and pushed it" ||
	{ fail "A's push: $(head -c 400 "$T/body")"; exit 1; }
st=$(api POST /functions/img/start)
[ "$st" = 201 ] || { fail "start on A: $st $(cat "$T/body")"; exit 1; }
A_ANSWER=$(curl -s --max-time 5 "http://$(jget "$T/body" "j['endpoint']")/")
[ "$A_ANSWER" = hello ] || fail "A's instance answers '$A_ANSWER'"

# ---- 2. the tag moves; B pulls; its start refuses the other image ----
rm -rf "$I/lay" && cp -a "$I/v2" "$I/lay"
DATA_B=$T/data-b
SHM_B=$(mktemp -d /dev/shm/thaw-e2e-fleet-image-b-XXXXXX)
stop_b() {
	[ -n "${PID_B:-}" ] && kill -9 "$PID_B" 2>/dev/null
	for c in $(runc --root "$DATA_B/runc" list -q 2>/dev/null); do runc --root "$DATA_B/runc" delete -f "$c" >/dev/null 2>&1; done
	rm -rf "$SHM_B"
}
trap 'stop_b; thawd_e2e_cleanup; ceph_rgw_stop' EXIT
"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port-b" --data-dir "$DATA_B" --ram-tier "$SHM_B" \
	--ram-tier-bytes 1G --remote "$REMOTE" >>"$T/thawd-b.log" 2>&1 &
PID_B=$!
wait_port "$T/port-b" "$PID_B"
URL_A=$URL URL_B=http://127.0.0.1:$(head -n1 "$T/port-b")
apib() { URL=$URL_B api "$@"; }
cache_b() { # what B's image cache holds
	(cd "$DATA_B/images" 2>/dev/null && find layouts rootfs sources locks tmp -mindepth 1 -maxdepth 1 | sort)
}
st=$(apib POST "/functions/img/pull?wait=1")
[ "$st" = 200 ] && ok "B pulled img" || { fail "pull on B: $st $(cat "$T/body")"; exit 1; }
[ -z "$(ls "$DATA_B/jobs" 2>/dev/null | xargs -r -I{} cat "$DATA_B/jobs/{}")" ] && [ -z "$(cache_b)" ] &&
	ok "nothing was booted on B, and the pull copied no image" ||
	fail "after the pull: jobs $(ls "$DATA_B/jobs"), image cache: $(cache_b)"
st=$(apib POST /functions/img/start)
msg=$(jget "$T/body" "j['error']['message']")
[ "$st" = 409 ] && [ "$(jget "$T/body" "j['error']['code']")" = image_changed ] &&
	echo "$msg" | grep -q "$HEX" &&
	ok "the tag moved: B's start is $st image_changed: $(echo "$msg" | cut -c1-220)…" ||
	fail "start on B with the tag moved: $st $(cat "$T/body")"
[ -z "$(cache_b)" ] && ok "B's image cache holds nothing after the refusal (no layout, rootfs or work)" ||
	fail "B's image cache after the refusal: $(cache_b)"
mv "$I/lay" "$I/gone"
st=$(apib POST /functions/img/start)
msg=$(jget "$T/body" "j['error']['message']")
[ "$st" = 502 ] && [ "$(jget "$T/body" "j['error']['code']")" = image_unavailable ] &&
	echo "$msg" | grep -q "$HEX" && [ -z "$(cache_b)" ] &&
	ok "the layout gone: $st image_unavailable: $(echo "$msg" | cut -c1-200)…; the cache holds nothing" ||
	fail "start on B with the layout gone: $st $(cat "$T/body"); cache: $(cache_b)"
apib GET /instances >/dev/null
[ "$(jget "$T/body" "len(j['instances'])")" = 0 ] || fail "the refused start left an instance: $(cat "$T/body")"

# ---- 3. the tag back: B brings the snapshot's image by its digest ----
rm -rf "$I/lay" && cp -a "$I/orig" "$I/lay"
st=$(apib POST /functions/img/start)
if [ "$st" = 201 ]; then
	cp "$T/body" "$T/start-b.json"
	ep=$(jget "$T/body" "j['endpoint']")
	pid=$(jget "$T/body" "j['pid']")
	[ "$(jget "$T/body" "j['image']['digest']")" = "$DIGEST" ] &&
		[ "$(jget "$T/body" "j['image']['copied']")" = True ] &&
		[ "$(jget "$T/body" "j['timings_ms']['image'] > 0")" = True ] &&
		ok "B's first start copied the image: timings_ms.image $(jget "$T/body" "j['timings_ms']['image']") ms of $(jget "$T/body" "j['timings_ms']['total']") ms" ||
		fail "B's first start: $(cat "$T/body")"
	B_ANSWER=$(curl -s --max-time 5 "http://$ep/")
	[ "$B_ANSWER" = "$A_ANSWER" ] && ok "B's instance answers as A's: '$B_ANSWER'" ||
		fail "B's instance answers '$B_ANSWER', A's '$A_ANSWER'"
	[ "$(stat -Lc %d:%i "/proc/$pid/root/")" = "$(stat -c %d:%i "$DATA_B/images/rootfs/$HEX/rootfs")" ] &&
		ok "its root is B's own copy (images/rootfs/${HEX:0:12}… under B's data directory)" ||
		fail "B's instance's root is not B's copy of the image"
else
	fail "start on B: $st $(cat "$T/body")"
fi
got=$(python3 - "$DATA_B/images/layouts/$HEX" <<'EOF' 2>&1
import hashlib, json, sys
lay = sys.argv[1]
d = json.load(open(f"{lay}/index.json"))["manifests"][0]["digest"]
print(d, "sha256:" + hashlib.sha256(open(f"{lay}/blobs/sha256/{d[7:]}", "rb").read()).hexdigest())
EOF
)
[ "$got" = "$DIGEST $DIGEST" ] && [ "$(cache_b | grep -c .)" = 3 ] &&
	ok "B's image cache holds that one image, and its manifest hashes to the snapshot's digest" ||
	fail "B's cache: $(cache_b); its layout: $got"
[ -z "$(ls "$DATA_B/jobs" 2>/dev/null | xargs -r -I{} cat "$DATA_B/jobs/{}")" ] ||
	fail "B booted something: $(ls "$DATA_B/jobs")"

# ---- 4. the next start copies nothing ----
ino=$(stat -c %i "$DATA_B/images/layouts/$HEX")
st=$(apib POST /functions/img/start)
[ "$st" = 201 ] && [ "$(jget "$T/body" "j['image']['copied']")" = False ] &&
	[ "$(stat -c %i "$DATA_B/images/layouts/$HEX")" = "$ino" ] &&
	[ "$(grep -c "copied by digest" "$T/thawd-b.log")" = 1 ] &&
	[ "$(curl -s --max-time 5 "http://$(jget "$T/body" "j['endpoint']")/")" = hello ] &&
	ok "B's second start found the image in its cache (timings_ms.image $(jget "$T/body" "j['timings_ms']['image']") ms) and answers" ||
	fail "B's second start: $st $(cat "$T/body")"

[ $fails = 0 ] || { echo "--- thawd-b.log (tail)"; tail -n 30 "$T/thawd-b.log"; }
[ $fails = 0 ]
