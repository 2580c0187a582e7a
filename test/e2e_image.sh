#!/usr/bin/env bash
# Functions from OCI images (images/image.h), with real skopeo, umoci, runc,
# CRIU and thawd, and no network: an image is built here from busybox-static
# (its httpd serves the working directory; a CGI script prints $GREETING),
# written as an OCI layout and, by skopeo, as a docker-archive (what
# `docker save` writes).
#   1. a function on the docker-archive whose spec says nothing but "image"
#      snapshots, starts and answers: the image's Entrypoint+Cmd, Env,
#      WorkingDir and first ExposedPort were used; the job's result names the
#      image's digest, its timings the pull and the unpack (printed);
#   2. a second function on the same archive, whose spec sets command, env,
#      cwd and port, answers with those, and shares the first's unpacked
#      rootfs: nothing is pulled again, both instances have the same root;
#   3. a function on the OCI layout snapshots, starts and answers;
#   4. a missing image, a corrupt layer (a flipped byte: digest mismatch), a
#      registry that cannot be reached, and bad references (refused at PUT:
#      400, or 403 outside --allow-root) each fail clearly and leave the
#      image cache as it was;
#   5. an image whose User is not root is refused with the reason, and runs
#      with "user": "root";
#   6. the snapshot's job reports its progress (pull, unpack, then phases);
#   7. the layout's tag moved to a new image: a start of the existing
#      snapshot still answers from the old image (a start never pulls), a new
#      snapshot answers from the new one;
#   8. gc at thawd's start-up keeps an image a running instance uses even
#      when no snapshot names it, and removes the images no snapshot and no
#      process uses, with their layouts.
set -u
NAME=image
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
require_image_tools
I=$T/img
mkdir -p "$I"

# ---- the images ----
# mkroot DIR TEXT: a rootfs with busybox, /www and /alt (index.html: TEXT,
# and the CGI script), and an empty /tmp.
mkroot() {
	local r=$1 d
	mkdir -p "$r/bin" "$r/tmp"
	cp "$BUSYBOX" "$r/bin/busybox"
	for l in sh httpd cat; do ln -sf busybox "$r/bin/$l"; done
	for d in www alt; do
		mkdir -p "$r/$d/cgi-bin"
		echo "$2 from /$d" >"$r/$d/index.html"
		printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\necho "greeting=$GREETING"\n' \
			>"$r/$d/cgi-bin/info"
		chmod 755 "$r/$d/cgi-bin/info"
	done
}
(
	set -e
	cd "$I"
	umoci init --layout lay
	umoci new --image lay:t
	umoci unpack --image lay:t bun >/dev/null
	mkroot bun/rootfs hello
	umoci repack --image lay:t bun
	umoci config --image lay:t --config.entrypoint httpd --config.entrypoint -f \
		--config.cmd -p --config.cmd 8000 --config.env GREETING=from-image \
		--config.workingdir /www --config.exposedports 8000/tcp --config.exposedports 53/udp
	umoci config --image lay:t --tag nobody --config.user 65534
	# v2: the same name, other content (for the moved tag and the corrupt layer).
	rm -rf bun
	umoci unpack --image lay:t bun >/dev/null
	cp -a lay v2
	echo "v2" >bun/rootfs/www/index.html
	umoci repack --image v2:t bun
	umoci gc --layout lay
	umoci gc --layout v2
	rm -rf bun
	skopeo copy -q oci:lay:t docker-archive:"$I/img.tar":thaw/busybox:test
	# bad: v2 with a byte of its top layer flipped.
	cp -a v2 bad
	python3 - "$I/bad" <<'EOF'
import json, sys
lay = sys.argv[1]
idx = json.load(open(f"{lay}/index.json"))
d = [m for m in idx["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == "t"][0]
man = json.load(open(f"{lay}/blobs/sha256/{d['digest'][7:]}"))
p = f"{lay}/blobs/sha256/{man['layers'][-1]['digest'][7:]}"
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(b)
EOF
) >"$T/build.log" 2>&1 || { cat "$T/build.log"; echo "cannot build the test image"; exit 1; }
ok "test image: busybox-static httpd, $(du -k "$I/img.tar" | cut -f1) KiB as a docker-archive"

start_thawd
cache_state() { # what the image cache holds, in order
	(cd "$DATA/images" 2>/dev/null && find layouts rootfs sources locks tmp -mindepth 1 -maxdepth 1 | sort &&
		cat sources/* 2>/dev/null)
}
put() { # ID JSON: PUT, expect 201/200
	local st
	st=$(api PUT "/functions/$1" -d "$2")
	[ "$st" = 201 ] || [ "$st" = 200 ] || { fail "PUT $1: $st $(cat "$T/body")"; return 1; }
}
snap() { # ID: snapshot (wait=1), expect 200; JOB the job's JSON file
	local st
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $1: $st $(cat "$T/body")"; return 1; }
	cp "$T/body" "$T/job-$1.json"
	JOB=$T/job-$1.json
}
start() { # ID: start, expect 201; EP, PID, IID
	local st
	st=$(api POST "/functions/$1/start")
	[ "$st" = 201 ] || { fail "start $1: $st $(cat "$T/body")"; return 1; }
	EP=$(jget "$T/body" "j['endpoint']")
	PID=$(jget "$T/body" "j['pid']")
	IID=$(jget "$T/body" "j['instance']")
}
get() { curl -s --max-time 5 "http://$EP$1"; }
READY='"ready": {"http": "/"}'

# ---- 1. the docker-archive, the spec silent ----
put arch "{\"image\": \"docker-archive:$I/img.tar\", $READY}" || exit 1
api GET /functions/arch >/dev/null
[ "$(jget "$T/body" "j.get('port')")" = None ] && [ "$(jget "$T/body" "j.get('command')")" = None ] &&
	ok "PUT with an image and no command, port: accepted as given" ||
	fail "GET /functions/arch: $(cat "$T/body")"
snap arch || exit 1
DIGEST=$(jget "$JOB" "j['job']['result']['image']")
echo "   docker-archive: pull $(jget "$JOB" "round(j['job']['result']['timings_ms']['image_pull'])") ms," \
	"unpack $(jget "$JOB" "round(j['job']['result']['timings_ms']['image_unpack'])") ms," \
	"snapshot total $(jget "$JOB" "round(j['job']['result']['timings_ms']['total'])") ms, image $DIGEST"
case "$DIGEST" in sha256:????????????????????????????????????????????????????????????????) ;;
*) fail "the job's result names no image digest: $(cat "$JOB")" ;; esac
start arch || exit 1
ARCH_PID=$PID
[ "$(get /)" = "hello from /www" ] && ok "the image's WorkingDir (/www) and port (8000) were used" ||
	fail "GET / on the image's defaults: '$(get /)'"
[ "$(get /cgi-bin/info)" = "greeting=from-image" ] && ok "the image's Env was used" ||
	fail "GET /cgi-bin/info: '$(get /cgi-bin/info)'"
[ "$(tr '\0' ' ' </proc/$PID/cmdline)" = "httpd -f -p 8000 " ] &&
	ok "command: Entrypoint + Cmd (httpd -f -p 8000)" ||
	fail "the instance runs '$(tr '\0' ' ' </proc/$PID/cmdline)'"
ROOT1=$DATA/images/rootfs/${DIGEST#sha256:}/rootfs
[ "$(stat -Lc %d:%i /proc/$PID/root/)" = "$(stat -c %d:%i "$ROOT1")" ] &&
	ok "its root is the unpacked image, by digest (images/rootfs/${DIGEST:7:12}…)" ||
	fail "its root is not $ROOT1"

# ---- 2. the same archive, the spec overriding; one rootfs for both ----
put arch2 "{\"image\": \"docker-archive:$I/img.tar\", $READY, \"command\": [\"httpd\", \"-f\", \"-p\", \"9000\"],
	\"port\": 9000, \"cwd\": \"/alt\", \"env\": {\"GREETING\": \"from-spec\"}}" || exit 1
snap arch2 || exit 1
[ "$(jget "$JOB" "j['job']['result']['image']")" = "$DIGEST" ] &&
	[ "$(jget "$JOB" "j['job']['result']['timings_ms']['image_unpack']")" = 0.0 ] &&
	ok "the second function's snapshot found the image cached (pull $(jget "$JOB" "round(j['job']['result']['timings_ms']['image_pull'])") ms: the source's manifest only)" ||
	fail "second snapshot: $(cat "$JOB")"
start arch2 || exit 1
[ "$(get /)" = "hello from /alt" ] && [ "$(get /cgi-bin/info)" = "greeting=from-spec" ] &&
	ok "the spec's command, port (9000), cwd (/alt) and env override the image's" ||
	fail "arch2 answers '$(get /)' '$(get /cgi-bin/info)'"
[ "$(stat -Lc %d:%i /proc/$PID/root/)" = "$(stat -c %d:%i "$ROOT1")" ] &&
	[ "$(stat -Lc %d:%i /proc/$ARCH_PID/root/)" = "$(stat -c %d:%i "$ROOT1")" ] &&
	ok "both functions' instances run on one unpacked rootfs" ||
	fail "the roots differ"
[ "$(ls "$DATA/images/rootfs" | wc -l)" = 1 ] && ok "one image in the cache" ||
	fail "images cached: $(ls "$DATA/images/rootfs")"

# ---- 3. the OCI layout ----
put lay "{\"image\": \"oci:$I/lay:t\", $READY}" || exit 1
snap lay || exit 1
LAY_DIGEST=$(jget "$JOB" "j['job']['result']['image']")
echo "   oci layout: pull $(jget "$JOB" "round(j['job']['result']['timings_ms']['image_pull'])") ms," \
	"unpack $(jget "$JOB" "round(j['job']['result']['timings_ms']['image_unpack'])") ms, image $LAY_DIGEST"
start lay || exit 1
LAY_IID=$IID LAY_EP=$EP
[ "$(get /)" = "hello from /www" ] && [ "$(get /cgi-bin/info)" = "greeting=from-image" ] &&
	ok "a function on the OCI layout snapshots, starts and answers" ||
	fail "lay answers '$(get /)'"

# ---- 4. failures leave the cache as it was ----
before=$(cache_state)
failing() { # ID IMAGE WORDS STATUS: the snapshot fails with STATUS, saying WORDS
	local st msg
	put "$1" "{\"image\": \"$2\", $READY}" || return
	st=$(api POST "/functions/$1/snapshot?wait=1")
	msg=$(jget "$T/body" "j['error']['message']")
	if [ "$st" = "$4" ] && echo "$msg" | grep -qi -- "$3"; then
		ok "$1: $st $(jget "$T/body" "j['error']['code']"): $(echo "$msg" | cut -c1-150)"
	else
		fail "$1: $st $(cat "$T/body")"
	fi
	[ "$(cache_state)" = "$before" ] && ok "$1: the cache is as it was" ||
		fail "$1: the cache changed: $(diff <(echo "$before") <(cache_state))"
}
failing missing "docker-archive:$I/nope.tar" "not found" 500
failing corrupt "oci:$I/bad:t" "damaged (a digest does not match)" 500
failing notag "oci:$I/lay:nosuchtag" "not found" 500
failing nonet "docker://localhost:1/thaw/busybox:test" "no network" 500
badref() { # IMAGE STATUS WORDS: refused at PUT
	local st
	st=$(api PUT /functions/badref -d "{\"image\": \"$1\", $READY}")
	[ "$st" = "$2" ] && grep -q -- "$3" "$T/body" &&
		ok "PUT image \"$1\": $st $(jget "$T/body" "j['error']['message']" | cut -c1-110)" ||
		fail "PUT image \"$1\": $st $(cat "$T/body")"
}
badref "busybox:latest" 400 "has no transport"
badref "docker://Thaw/BusyBox:test" 400 "bad repository name"
badref "docker://busybox:bad tag" 400 "no spaces"
badref "oci:relative/lay:t" 400 "absolute"
badref "docker-archive:/etc/thaw-image.tar" 403 "outside the directories"
st=$(api PUT /functions/badref -d "{\"image\": \"oci:$I/lay:t\", \"bundle\": \"$I\", \"port\": 1}")
[ "$st" = 400 ] && ok "image and bundle together: 400" || fail "image and bundle: $st"
[ "$(cache_state)" = "$before" ] && [ -z "$(ls "$DATA/images/tmp")" ] &&
	ok "after every failure: the cache as it was, no work directory left" ||
	fail "the cache changed or work is left: $(ls "$DATA/images/tmp")"

# ---- 5. a User that is not root ----
put nobody "{\"image\": \"oci:$I/lay:nobody\", $READY}" || exit 1
st=$(api POST "/functions/nobody/snapshot?wait=1")
[ "$st" = 500 ] && grep -q 'uid 65534' "$T/body" && ok "an image whose User is 65534 is refused: $(jget "$T/body" "j['error']['message']" | cut -c1-140)…" ||
	fail "nobody: $st $(cat "$T/body")"
put nobody "{\"image\": \"oci:$I/lay:nobody\", \"user\": \"root\", $READY}" || exit 1
snap nobody && start nobody && [ "$(get /)" = "hello from /www" ] &&
	ok "with \"user\": \"root\" it snapshots, starts and answers" || fail "nobody as root"
api DELETE "/instances/$IID" >/dev/null

# ---- 6. progress in the job ----
put prog "{\"image\": \"oci:$I/v2:t\", $READY}" || exit 1
# curl alone in the loop, from the POST on: the pull and the unpack of this
# image take ~0.1 s each.
jid=$(curl -s -X POST -H 'Content-Type: application/json' "$URL/functions/prog/snapshot" |
	grep -o '"id":"job-[0-9]*"' | cut -d'"' -f4)
: >"$T/phases.raw"
for _ in $(seq 3000); do
	body=$(curl -s "$URL/jobs/$jid")
	echo "$body" >>"$T/phases.raw"
	case "$body" in *'"state":"running"'*) ;; *) break ;; esac
done
python3 - "$T/phases.raw" >"$T/phases" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    p = json.loads(line).get("progress") if line.strip() else None
    if p:
        print(f"{p['phase']} {p['done']}/{p['total']}")
EOF
phases=$(awk 'NF && !seen[$1]++' "$T/phases" | tr '\n' ' ')
echo "   progress seen (first of each phase): $phases"
grep -qE "^(pull|unpack) [0-9]+/[1-9]" "$T/phases" && grep -qE "^(criu_dump|ingest) " "$T/phases" &&
	ok "GET /jobs/<jid> showed the pull or the unpack with its total, then the snapshot's phases" ||
	fail "progress seen: '$phases'"

# ---- 7. the tag moves; the existing snapshot stays ----
rm -rf "$I/lay" && cp -a "$I/v2" "$I/lay"
api DELETE "/instances/$LAY_IID" >/dev/null
start lay || exit 1
LAY_IID=$IID
[ "$(get /)" = "hello from /www" ] &&
	ok "tag moved: a start of the existing snapshot still answers from the old image (no pull)" ||
	fail "after the tag moved, lay answers '$(get /)'"
snap lay || exit 1
LAY2_DIGEST=$(jget "$JOB" "j['job']['result']['image']")
start lay || exit 1
[ "$LAY2_DIGEST" != "$LAY_DIGEST" ] && [ "$(get /)" = v2 ] &&
	ok "a new snapshot takes the tag's new image ($LAY2_DIGEST)" ||
	fail "re-snapshot: $LAY2_DIGEST, answers '$(get /)'"
api DELETE "/instances/$IID" >/dev/null

# ---- 8. gc ----
# Now: arch and arch2 on DIGEST (snapshots), lay on LAY2_DIGEST (snapshot),
# LAY_DIGEST named by no snapshot but the root of instance LAY_IID, nobody's
# and prog's images named by their snapshots.  Delete nobody and prog,
# kill thawd (its instances keep running) and start it again: it adopts
# LAY_IID, and its gc removes nobody's and prog's images only.
for f in nobody prog missing corrupt notag nonet; do api DELETE "/functions/$f" >/dev/null; done
n_before=$(ls "$DATA/images/rootfs" | wc -l)
kill -9 "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
start_thawd
for _ in $(seq 100); do grep -q "listening on" "$T/thawd.log" && break; sleep 0.1; done
have() { [ -d "$DATA/images/rootfs/${1#sha256:}" ] && [ -d "$DATA/images/layouts/${1#sha256:}" ]; }
if have "$DIGEST" && have "$LAY2_DIGEST" && have "$LAY_DIGEST" && [ "$(ls "$DATA/images/rootfs" | wc -l)" = 3 ]; then
	ok "gc at start-up: $n_before images -> 3: kept those snapshots name and the one a running instance uses"
else
	fail "after gc: $(ls "$DATA/images/rootfs") (had $n_before)"
fi
grep -q "gc: image sha256:.* removed" "$T/thawd.log" && ok "thawd's log names what gc removed" ||
	fail "no gc line in thawd's log"
api DELETE "/instances/$LAY_IID" >/dev/null
kill -9 "$THAWD_PID"
wait "$THAWD_PID" 2>/dev/null
start_thawd
[ ! -e "$DATA/images/rootfs/${LAY_DIGEST#sha256:}" ] && [ ! -e "$DATA/images/layouts/${LAY_DIGEST#sha256:}" ] &&
	have "$DIGEST" && have "$LAY2_DIGEST" &&
	ok "once its instance stopped, the old image went at the next start-up; the others stay" ||
	fail "after the second gc: $(ls "$DATA/images/rootfs")"
start arch && [ "$(get /)" = "hello from /www" ] && ok "arch still starts and answers after gc" ||
	fail "arch after gc"

[ $fails = 0 ] || exit 1
