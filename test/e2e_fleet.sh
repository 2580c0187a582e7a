#!/usr/bin/env bash
# A fleet of two thawds sharing snapshots through a real S3 server (a
# single-node Ceph RGW, test/lib/ceph_rgw.sh), with real runc and CRIU and a
# small CPU function (test/fixtures/term_fn.py):
#   1. thawd A (--remote) snapshots the function and pushes it by itself in
#      the background: GET /functions/<id> shows the push and its progress
#      until "done", every chunk sent; POST …/push?wait=1 again sends no
#      chunk (the remote has them all); `thaw push` does the same from the
#      command line;
#   2. thawd B, another data directory and RAM tier on the same remote,
#      pulls it (`thaw pull`, a job with progress): the function is
#      registered with A's snapshot, nothing is booted on B (no boot output),
#      and a start on B answers as A's instance does;
#   3. pulled with ?fetch=0 (manifest only), its first starts on B (two at
#      once) fetch the chunks once (remote_fetch_ms in the answer), straight
#      into B's RAM tier as they come ("tier": "ram"), and answer; the next
#      start fetches nothing;
#   4. a re-snapshot on A uploads only its new chunks: as many as the new
#      manifest has that no snapshot pushed before had; then f asks for
#      "standby": 1 and B pulls it with ?fetch=0: with no start, B's standby
#      thread fetches the new snapshot's chunks and a standby of it appears,
#      which a start on B then takes ("standby": true) and which answers;
#   5. a chunk object flipped on the server: B's pull fails 502 naming the
#      chunk after fetching it again, the function is not made ready, and B's
#      store verifies clean; pulled with ?fetch=0, a start meets the same
#      chunk in its streamed fetch: 502 naming it, nothing of it left in B's
#      RAM tier (no build, no reservation), the store clean;
#   6. B killed mid-pull (a function with 320 MiB of random memory), past
#      100 MiB, and restarted: its store verifies clean, and the pull again
#      fetches only what the first had not sealed (some, not all);
#   7. A deletes a function: its ref goes, and two remote gc runs remove the
#      objects only it reached and nothing another function uses (a fresh
#      store pulls f whole afterwards);
#   8. a pull of a function the remote lacks is 404 naming it, leaving
#      nothing registered; push without --remote is 409 no_remote;
#   9. the server stops mid-transfer (radosgw killed once B's pull has fetched its first range): the
#      pull fails with the remote's error, nothing is made ready, and B's
#      store verifies clean.
set -u
NAME=fleet
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
. "$ROOT/test/lib/ceph_rgw.sh"
ceph_rgw_start thaw || exit 1
REMOTE=s3://thaw/fleet
fixture_fn "$T/fn" term_fn.py

# ---- thawd A ----
start_thawd --remote "$REMOTE"
URL_A=$URL
mkspec() { fn_spec term_fn.py "$T/fn" "\"env\": $1"; } # ENV-JSON
spec=$(mkspec '{"TERM_MODE": "exit"}')
for f in f g; do
	st=$(api PUT "/functions/$f" -d "$spec")
	[ "$st" = 201 ] || { fail "PUT $f: $st $(cat "$T/body")"; exit 1; }
	st=$(api POST "/functions/$f/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $f: $st $(cat "$T/body")"; exit 1; }
	[ $f = f ] && snap=$(jget "$T/body" "j['job']['result']['snapshot']")
done

# 1. the background push, followed through GET /functions/<id>
seen_progress=""
for i in $(seq 300); do
	api GET /functions/f >/dev/null
	state=$(jget "$T/body" "(j.get('push') or {}).get('state')")
	[ "$state" = uploading ] && seen_progress="$seen_progress $(jget "$T/body" "j['push']['bytes_done']")"
	[ "$state" = done ] || [ "$state" = failed ] && break
	sleep 0.1
done
if [ "$state" = done ] && [ "$(jget "$T/body" "j['push']['chunks_sent']")" = "$(jget "$T/body" "j['push']['chunks']")" ] &&
	[ "$(jget "$T/body" "j['push']['manifest']")" = "$(jget "$T/body" "j['snapshot']['id']")" ]; then
	ok "the snapshot was pushed in the background: $(jget "$T/body" "j['push']['chunks_sent']") chunks, $(jget "$T/body" "j['push']['bytes_sent']") bytes (progress seen:${seen_progress:- none})"
else
	fail "background push: state $state $(head -c 500 "$T/body")"
fi
st=$(api POST "/functions/f/push?wait=1")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['push']['state']")" = done ] &&
	[ "$(jget "$T/body" "j['push']['chunks_sent']")" = 0 ] &&
	ok "push again: 200, no chunk sent (the remote has them all)" ||
	fail "push again: $st $(cat "$T/body")"
out=$(THAW_NO_PROGRESS=1 "$THAW" push --url "$URL_A" g 2>&1) && echo "$out" | grep -q "^pushed g: " &&
	ok "thaw push g: $out" || fail "thaw push g: $out"

# ---- thawd B: another data directory and RAM tier, the same remote ----
T_A=$T DATA_A=$DATA PID_A=$THAWD_PID
DATA_B=$T/data-b
SHM_B=$(mktemp -d /dev/shm/thaw-e2e-fleet-b-XXXXXX)
stop_b() {
	[ -n "${PID_B:-}" ] && kill -9 "$PID_B" 2>/dev/null
	for c in $(runc --root "$DATA_B/runc" list -q 2>/dev/null); do runc --root "$DATA_B/runc" delete -f "$c" >/dev/null 2>&1; done
	rm -rf "$SHM_B"
}
trap 'stop_b; thawd_e2e_cleanup; ceph_rgw_stop' EXIT
apib() { URL=$URL_B api "$@"; }
start_b() {
	rm -f "$T/port-b"
	"$THAWD" --listen 127.0.0.1:0 --port-file "$T/port-b" --data-dir "$DATA_B" --ram-tier "$SHM_B" \
		--ram-tier-bytes 1G --remote "$REMOTE" >>"$T/thawd-b.log" 2>&1 &
	PID_B=$!
	wait_port "$T/port-b" "$PID_B"
	URL_B=http://127.0.0.1:$(head -n1 "$T/port-b")
}
s3curl() { # METHOD KEY [curl args]: a signed request to the bucket
	local m=$1 k=$2
	shift 2
	curl -sf -X "$m" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" "$AWS_ENDPOINT_URL/thaw/$k"
}
packs() { s3curl GET "?list-type=2&prefix=fleet%2Fpacks%2F" | grep -o '<Key>[^<]*\.pack</Key>' | sed 's/<[^>]*>//g' | sort; }
# push_ended ID: its background push is done or failed (GET into $T/body).
push_ended() {
	api GET "/functions/$1" >/dev/null
	case "$(jget "$T/body" "(j.get('push') or {}).get('state')")" in done | failed) return 0 ;; esac
	return 1
}
# snap_push ID: snapshot on A, then wait for its background push (60 s at
# most); $T/push.json: the function as it was then.
snap_push() {
	local st
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot $1: $st $(cat "$T/body")"; return 1; }
	wait_for 60 push_ended "$1"
	cp "$T/body" "$T/push.json"
}
chunks_of() { python3 -c "
import json, re, sys
print('\n'.join(sorted(set(re.findall(r'sha256:[0-9a-f]{64}', json.dumps(json.load(open(sys.argv[1]))['files']))))))" "$1"; }
start_b
# pull_and_kill FN BYTES PID: start B's pull of FN and kill -9 PID as soon as
# it has fetched more than BYTES (one process polling, so that the kill comes
# within milliseconds); prints how much it had then (nothing if the pull ended
# first).  The job's id goes to $T/pull.job.
pull_and_kill() {
	python3 - "$URL_B" "$1" "$2" "$3" "$T/pull.job" <<'PY'
import json, os, signal, sys, urllib.request
url, fn, limit, pid, jobfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
req = urllib.request.Request(f"{url}/functions/{fn}/pull", method="POST", data=b"",
                             headers={"Content-Type": "application/json"})
jid = json.load(urllib.request.urlopen(req))["job"]["id"]
open(jobfile, "w").write(jid)
while True:
    j = json.load(urllib.request.urlopen(f"{url}/jobs/{jid}"))
    done = (j.get("progress") or {}).get("done", 0)
    if done > limit:
        os.kill(pid, signal.SIGKILL)
        print(done)
        break
    if j["state"] != "running":
        break
PY
}

# 2. thaw pull onto B, then a start there
out=$(THAW_NO_PROGRESS=1 "$THAW" pull --url "$URL_B" f 2>&1) && echo "$out" | grep -q "^pulled f: $snap" &&
	ok "thaw pull f onto B: $out" || fail "thaw pull f: $out"
apib GET /functions/f >/dev/null
[ "$(jget "$T/body" "j['snapshot']['state']")" = ready ] && [ "$(jget "$T/body" "j['snapshot']['id']")" = "$snap" ] &&
	ok "B has f with A's snapshot, ready" || fail "B's f: $(head -c 400 "$T/body")"
[ -z "$(ls "$DATA_B/jobs" 2>/dev/null | xargs -r -I{} cat "$DATA_B/jobs/{}")" ] &&
	ok "nothing was booted on B (no boot output in its jobs)" || fail "B booted something: $(ls "$DATA_B/jobs")"
st=$(apib POST /functions/f/start)
if [ "$st" = 201 ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 5 "http://$ep/hello")" = hello ] && ok "a start of f on B answers" ||
		fail "f on B does not answer"
else
	fail "start of f on B: $st $(cat "$T/body")"
fi

# 3. ?fetch=0: the first start fetches
st=$(apib POST "/functions/g/pull?wait=1&fetch=0")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['job']['result']['fetched']")" = False ] &&
	ok "pull of g with ?fetch=0: registered, nothing fetched" || fail "pull ?fetch=0: $st $(cat "$T/body")"
# two starts at once: one fetches, the other waits for that fetch
curl -s -o "$T/g2.json" -w '%{http_code}' -X POST "$URL_B/functions/g/start" >"$T/g2.st" &
g2=$!
st=$(apib POST /functions/g/start)
wait "$g2"
g_snap=$(jget "$T/body" "j.get('snapshot')")
[ "$(cat "$T/g2.st")" = 201 ] &&
	[ "$(curl -s --max-time 5 "http://$(jget "$T/g2.json" "j['endpoint']")/hello")" = hello ] &&
	[ "$(grep -c "fetched $g_snap: [1-9][0-9]* of" "$T/thawd-b.log")" = 1 ] &&
	ok "two starts of g at once: both answer, its chunks fetched once" ||
	fail "two starts of g at once: $(cat "$T/g2.st") $(head -c 300 "$T/g2.json"); fetches: $(grep "fetched $g_snap" "$T/thawd-b.log")"
fetch_ms=$(jget "$T/body" "j.get('remote_fetch_ms')")
if [ "$st" = 201 ] && [ "$fetch_ms" != None ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 5 "http://$ep/hello")" = hello ] &&
		ok "g's first start on B fetched its chunks (${fetch_ms} ms) and answers" ||
		fail "g on B does not answer"
	# streamed: written into B's RAM tier as they came, not read back from its store
	grep -q "materialised .* as it was fetched" "$T/thawd-b.log" &&
		[ "$(jget "$T/body" "j['tier']")" = ram ] &&
		ok "g's fetched chunks went into B's RAM tier as they came ($(grep -o 'as it was fetched: [^,]*' "$T/thawd-b.log" | tail -n1))" ||
		fail "g's start did not stream its fetch into the RAM tier: $(head -c 600 "$T/body")"
	# its pages went straight into the mapped image's memory files, or the
	# log says why the image maps nothing (a small function may not)
	echo "B's mapped image: $(grep -h "mapped image\|no windows" "$T/thawd-b.log" | tail -n 2)"
	grep -q "no windows for the mapped image" "$T/thawd-b.log" &&
		fail "B wrote g's pages twice: $(grep -h 'no windows' "$T/thawd-b.log")"
else
	fail "first start of g on B: $st $(head -c 400 "$T/body")"
fi
st=$(apib POST /functions/g/start)
[ "$st" = 201 ] && [ "$(jget "$T/body" "j.get('remote_fetch_ms')")" = None ] &&
	ok "the next start of g fetches nothing" || fail "second start of g: $st $(head -c 300 "$T/body")"

# 4. a re-snapshot uploads only its new chunks
# What the remote holds already: the chunks of every snapshot pushed so far
# (f's and g's, which share most of them).
mkdir -p "$T/before" && cp "$DATA"/store/manifests/* "$T/before/"
snap_push f
new_snap=$(jget "$T/push.json" "j['snapshot']['id']")
new_chunks=$(comm -13 <(for m in "$T"/before/*; do chunks_of "$m"; done | sort -u) \
	<(chunks_of "$DATA/store/manifests/${new_snap#sha256:}") | wc -l)
sent=$(jget "$T/push.json" "j['push']['chunks_sent']")
total=$(jget "$T/push.json" "j['push']['chunks']")
[ "$(jget "$T/push.json" "j['push']['state']")" = done ] && [ "$sent" = "$new_chunks" ] && [ "$sent" -lt "$total" ] &&
	ok "re-snapshot of f: $sent of $total chunks uploaded, the $new_chunks no earlier snapshot had ($(jget "$T/push.json" "j['push']['bytes_sent']") bytes)" ||
	fail "re-snapshot push: sent $sent of $total, new chunks $new_chunks: $(jget "$T/push.json" "j['push']")"
# A standby of the re-snapshot on B, which has only the earlier one's chunks.
spec_sb=$(python3 -c 'import json, sys; s = json.loads(sys.argv[1]); s["standby"] = 1; print(json.dumps(s))' "$spec")
st=$(api PUT /functions/f -d "$spec_sb")
[ "$st" = 200 ] || fail "PUT f with a standby on A: $st $(cat "$T/body")"
st=$(api POST "/functions/f/push?wait=1")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['push']['manifest']")" = "$new_snap" ] ||
	fail "push of f with a standby: $st $(cat "$T/body")"
st=$(apib POST "/functions/f/pull?wait=1&fetch=0")
[ "$st" = 200 ] && [ "$(jget "$T/body" "j['job']['result']['fetched']")" = False ] &&
	[ "$(jget "$T/body" "j['job']['result']['snapshot']")" = "$new_snap" ] ||
	fail "pull of f with a standby, ?fetch=0: $st $(cat "$T/body")"
t0=$SECONDS standby_b=""
for _ in $(seq 300); do
	apib GET /instances >/dev/null
	standby_b=$(jget "$T/body" "' '.join(i['instance'] for i in j['instances'] if i['state'] == 'standby' and i['snapshot'] == '$new_snap')")
	[ -n "$standby_b" ] && break
	sleep 0.1
done
if [ -n "$standby_b" ] && grep -q "fetched $new_snap for the standbys of f" "$T/thawd-b.log"; then
	ok "B fetched f's pulled snapshot for its standby, with no start: standby $standby_b within $((SECONDS - t0)) s"
else
	fail "no standby of f's $new_snap on B within 30 s: $(grep -E 'standby|fetch' "$T/thawd-b.log" | tail -5)"
fi
st=$(apib POST /functions/f/start)
if [ "$st" = 201 ] && [ "$(jget "$T/body" "j['standby']")" = True ] &&
	[ "$(jget "$T/body" "j['instance']")" = "$standby_b" ] &&
	[ "$(jget "$T/body" "j.get('remote_fetch_ms')")" = None ]; then
	ep=$(jget "$T/body" "j['endpoint']")
	[ "$(curl -s --max-time 5 "http://$ep/hello")" = hello ] &&
		ok "a start of f on B took the standby ($standby_b) and answers" || fail "f's standby on B does not answer"
else
	fail "start of f on B with a standby: $st $(head -c 400 "$T/body")"
fi
# No more standbys of f, on A or B, for what follows.
api PUT /functions/f -d "$spec" >/dev/null
apib PUT /functions/f -d "$spec" >/dev/null

# 5. a flipped byte on the server
before=$(packs)
st=$(api PUT /functions/h -d "$(mkspec '{"TERM_MODE": "ignore", "BALLAST_MB": "8"}')")
[ "$st" = 201 ] || fail "PUT h: $st $(cat "$T/body")"
snap_push h
newpack=$(comm -13 <(echo "$before") <(packs) | head -n1)
if [ -n "$newpack" ] && s3curl GET "$newpack" -o "$T/pack"; then
	python3 -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[200] ^= 0xff
open(sys.argv[1], 'wb').write(b)" "$T/pack"
	s3curl PUT "$newpack" --data-binary @"$T/pack" -o /dev/null || fail "cannot put the flipped pack back"
	st=$(apib POST "/functions/h/pull?wait=1")
	if [ "$st" = 502 ] && [ "$(jget "$T/body" "j['error']['code']")" = remote_failed ] &&
		grep -q 'chunk sha256:' "$T/body"; then
		ok "a flipped byte in $newpack: B's pull is 502 remote_failed naming the chunk"
	else
		fail "pull of the flipped h: $st $(head -c 400 "$T/body")"
	fi
	grep -q "fetching it again" "$T/thawd-b.log" && ok "B fetched the bad range again before refusing it" ||
		fail "B did not retry the bad range"
	apib GET /functions/h >/dev/null
	[ "$(jget "$T/body" "j['snapshot']['state']")" != ready ] || fail "h became ready on B from a flipped chunk"
	"$THAW" store --store "$DATA_B/store" verify >"$T/verify.out" 2>&1 &&
		ok "B's store verifies clean after the refused pull" || fail "B's store: $(tail -3 "$T/verify.out")"
	# the same through a start: the manifest only, then a start that streams
	# the fetch into the RAM tier meets the flipped chunk
	st=$(apib POST "/functions/h/pull?wait=1&fetch=0")
	[ "$st" = 200 ] || fail "pull of h with ?fetch=0: $st $(head -c 300 "$T/body")"
	st=$(apib POST /functions/h/start)
	if [ "$st" = 502 ] && [ "$(jget "$T/body" "j['error']['code']")" = remote_failed ] &&
		grep -q 'chunk sha256:' "$T/body"; then
		ok "a start of the flipped h on B is 502 remote_failed naming the chunk"
	else
		fail "start of the flipped h: $st $(head -c 400 "$T/body")"
	fi
	left=$(find "$SHM_B" -maxdepth 1 -name '.build-*' -o -maxdepth 1 -name '.resv-*' | wc -l)
	entries=$(find "$SHM_B" -maxdepth 1 -name '*.meta' | wc -l)
	[ "$left" = 0 ] && [ "$(ls "$SHM_B" | grep -vc '\.meta$')" = "$entries" ] &&
		ok "B's RAM tier holds nothing of h (no build, no reservation, $entries whole entries)" ||
		fail "B's RAM tier after the refused start: $(ls -a "$SHM_B")"
	"$THAW" store --store "$DATA_B/store" verify >"$T/verify.out" 2>&1 &&
		ok "B's store verifies clean after the refused start" || fail "B's store: $(tail -3 "$T/verify.out")"
else
	fail "no new pack of h on the remote ($newpack)"
fi

# 6. B killed mid-pull, then the pull again
# 320 MiB: the kill past 100 MiB (a fetch seals its packs every 64 MiB)
# leaves over 200 MiB to fetch, some seconds of it, where the poll that
# kills takes milliseconds; every MiB more is CPU the suite waits for (a
# boot's urandom, CRIU, the store, radosgw and the OSD each move it).
st=$(api PUT /functions/big -d "$(mkspec '{"TERM_MODE": "exit", "BALLAST_MB": "320"}')")
[ "$st" = 201 ] || fail "PUT big: $st $(cat "$T/body")"
snap_push big
[ "$(jget "$T/push.json" "j['push']['state']")" = done ] || fail "push of big: $(jget "$T/push.json" "j['push']")"
killed_at=$(pull_and_kill big $((100 << 20)) "$PID_B")
wait "$PID_B" 2>/dev/null
if [ -n "$killed_at" ]; then
	"$THAW" store --store "$DATA_B/store" verify >"$T/verify.out" 2>&1 &&
		ok "B killed mid-pull at $((killed_at >> 20)) MiB: its store verifies clean" ||
		fail "B's store after the kill: $(tail -3 "$T/verify.out")"
	start_b
	st=$(apib POST "/functions/big/pull?wait=1")
	fetched=$(jget "$T/body" "j['job']['result']['chunks_fetched']")
	all=$(jget "$T/body" "j['job']['result']['chunks']")
	if [ "$st" = 200 ] && [ "$fetched" -lt "$all" ] && [ "$fetched" -gt 0 ]; then
		ok "the pull again fetched $fetched of $all chunks (the rest survived the kill)"
	else
		fail "pull after the kill: $st fetched ${fetched:-?} of ${all:-?}: $(head -c 300 "$T/body")"
	fi
	st=$(apib POST /functions/big/start)
	[ "$st" = 201 ] && ok "big starts on B after the resumed pull" || fail "start of big on B: $st $(head -c 300 "$T/body")"
else
	fail "the pull of big ended before 100 MiB could be seen (state $(jget "$T/body" "j['state']"))"
fi

# 7. A deletes big: its ref goes, gc removes only what it alone reached
before=$(packs | wc -l)
st=$(api DELETE /functions/big)
[ "$st" = 204 ] || fail "DELETE big on A: $st"
"$THAW" remote --remote "$REMOTE" ls >"$T/ls.out" 2>&1
grep -q "^big " "$T/ls.out" && fail "big's ref stays on the remote" || ok "A's DELETE of big removed its ref"
"$THAW" gc --remote "$REMOTE" --grace 0 >"$T/gc1.out" 2>&1 || fail "gc 1: $(cat "$T/gc1.out")"
sleep 1.1
"$THAW" gc --remote "$REMOTE" --grace 0 >"$T/gc2.out" 2>&1 || fail "gc 2: $(cat "$T/gc2.out")"
after=$(packs | wc -l)
[ "$after" -lt "$before" ] && ok "two gc runs: $before packs -> $after ($(tail -n1 "$T/gc2.out"))" ||
	fail "gc removed no pack: $before -> $after; $(cat "$T/gc1.out" "$T/gc2.out")"
"$THAW" remote --remote "$REMOTE" --store "$T/fresh" pull f >/dev/null 2>"$T/fresh.err" &&
	"$THAW" store --store "$T/fresh" verify >/dev/null 2>&1 &&
	ok "after gc, f still pulls whole into a fresh store" || fail "f after gc: $(tail -3 "$T/fresh.err")"

# (for 9: a function on the remote, pushed while A has it)
# 256 MiB: 32 ranges of 8 MiB, twice the GETs a fetch has in flight, so
# that radosgw killed at the first range's arrival leaves some unasked.
st=$(api PUT /functions/big2 -d "$(mkspec '{"TERM_MODE": "exit", "BALLAST_MB": "256"}')")
[ "$st" = 201 ] || fail "PUT big2: $st $(cat "$T/body")"
snap_push big2

# 8. errors
st=$(apib POST "/functions/nosuch/pull?wait=1")
[ "$st" = 404 ] && grep -q nosuch "$T/body" && ok "pull of a function the remote lacks: 404 naming it" ||
	fail "pull nosuch: $st $(cat "$T/body")"
st=$(apib GET /functions/nosuch)
[ "$st" = 404 ] || fail "a failed pull left nosuch registered: $st"
kill -TERM "$PID_A"; wait "$PID_A" 2>/dev/null
start_thawd
st=$(api POST "/functions/f/push")
[ "$st" = 409 ] && [ "$(jget "$T/body" "j['error']['code']")" = no_remote ] &&
	ok "push on a thawd without --remote: 409 no_remote" || fail "push without a remote: $st $(cat "$T/body")"

# 9. the server stops mid-transfer
killed=$(pull_and_kill big2 0 "$(cat "$CEPH_RGW_DIR/run/client.rgw.pid")")
jid=$(cat "$T/pull.job")
for i in $(seq 300); do
	apib GET "/jobs/$jid" >/dev/null
	[ "$(jget "$T/body" "j['state']")" = running ] || break
	sleep 0.1
done
if [ -n "$killed" ] && [ "$(jget "$T/body" "j['state']")" = failed ]; then
	ok "radosgw killed with $((killed >> 20)) MiB of 256 fetched: the pull failed: $(jget "$T/body" "j['error']['message']" | head -c 200)"
else
	fail "pull with the server killed: killed at '${killed}', job $(head -c 300 "$T/body")"
fi
apib GET /functions/big2 >/dev/null
[ "$(jget "$T/body" "j['snapshot']['state']")" != ready ] || fail "big2 became ready without its server"
"$THAW" store --store "$DATA_B/store" verify >"$T/verify.out" 2>&1 &&
	ok "B's store verifies clean after the server went away" || fail "B's store: $(tail -3 "$T/verify.out")"

grep -q "$AWS_SECRET_ACCESS_KEY" "$T/thawd.log" "$T/thawd-b.log" && fail "a thawd logged the secret key"

echo "$fails failure(s)"
[ $fails = 0 ]
