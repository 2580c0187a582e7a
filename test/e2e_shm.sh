#!/usr/bin/env bash
# The spec's "shm_bytes" sizes a function's /dev/shm, and a snapshot keeps
# it, with real runc, CRIU and thawd (one thawd for every check):
#   1. PUTs with a bad "shm_bytes" (negative, not a size, over 1 TiB, below
#      1 MiB) answer 400 naming the key; "192M" is stored as bytes;
#   2. a function with "shm_bytes": "192M" writes 80 MiB to /dev/shm and a
#      34 MiB segment mapped shared and unlinked while mapped (as NCCL's
#      are) in its warmup, before the snapshot: more than the 64 MiB
#      default holds;
#   3. a start restores it: statvfs inside says 192 MiB, and what it
#      wrote reads back with the sums it had;
#   4. a spec without the key (an older one) is stored without it, and its
#      function's /dev/shm is 64 MiB as before.
set -u
NAME=shm
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fns/shm # outside the data directory, which no function may reach
fixture_fn "$FN" shm_fn.py
start_thawd --allow-root "$T/fns"

# 1. The 400s: each names the key.
for v in -1 '"lots"' '"2T"' 64 1.5e8 '"64 M"'; do
	st=$(api PUT /functions/bad -d "$(fn_spec shm_fn.py "$FN" "\"shm_bytes\": $v")")
	if [ "$st" = 400 ] && grep -q 'shm_bytes: must be a size from 1M to 1T' "$T/body"; then
		ok "shm_bytes $v: 400"
	else
		fail "shm_bytes $v: $st $(cat "$T/body")"
	fi
done

# 2. Filled beyond 64 MiB before the snapshot.
put_snapshot big "$(fn_spec shm_fn.py "$FN" \
	'"shm_bytes": "192M", "warmup": [{"method": "POST", "path": "/fill"}]')"
api GET /functions/big >/dev/null
stored=$(jget "$T/body" "j.get('shm_bytes')")
[ "$stored" = 201326592 ] && ok "stored as \"shm_bytes\": $stored" ||
	fail "stored shm_bytes: $stored, not 201326592"
echo "snapshot image: $(jget "$T/body" "j['snapshot']['image_bytes']") bytes," \
	"timings_ms $(jget "$T/body" "j['snapshot']['timings_ms']")"

# 3. Restored: the size and the contents.
st=$(api POST /functions/big/start)
[ "$st" = 201 ] || { fail "start: $st $(head -c 600 "$T/body")"; exit 1; }
ep=$(jget "$T/body" "j['endpoint']")
echo "start: pages $(jget "$T/body" "j['pages']"), timings_ms $(jget "$T/body" "j['timings_ms']")"
curl -s --max-time 60 -o "$T/shm.json" "http://$ep/shm"
echo "restored: $(cat "$T/shm.json")"
size=$(jget "$T/shm.json" "j['size']")
[ "$size" = 201326592 ] && ok "restored /dev/shm is 192 MiB by statvfs" ||
	fail "restored /dev/shm is $size bytes, not 201326592"
[ "$(jget "$T/shm.json" "j['data'] == j['data_wrote'] != None")" = True ] &&
	ok "the 80 MiB file reads back as written" || fail "the file differs: $(cat "$T/shm.json")"
[ "$(jget "$T/shm.json" "j['seg'] == j['seg_wrote'] != None and not j['seg_linked']")" = True ] &&
	ok "the unlinked shared segment reads back as written" ||
	fail "the segment differs: $(cat "$T/shm.json")"
api DELETE "/instances/$(jget "$T/body" "j['instance']")" >/dev/null

# 4. An older spec: no key, 64 MiB.
put_snapshot plain "$(fn_spec shm_fn.py "$FN")"
api GET /functions/plain >/dev/null
echo "without: snapshot image: $(jget "$T/body" "j['snapshot']['image_bytes']") bytes," \
	"timings_ms $(jget "$T/body" "j['snapshot']['timings_ms']")"
[ "$(jget "$T/body" "'shm_bytes' in j")" = False ] &&
	ok "a spec without shm_bytes is stored without it" ||
	fail "stored spec: $(cat "$T/body")"
st=$(api POST /functions/plain/start)
[ "$st" = 201 ] || { fail "start plain: $st $(head -c 600 "$T/body")"; exit 1; }
ep=$(jget "$T/body" "j['endpoint']")
echo "without: start: pages $(jget "$T/body" "j['pages']"), timings_ms $(jget "$T/body" "j['timings_ms']")"
size=$(curl -s --max-time 60 "http://$ep/shm" | python3 -S -c 'import json,sys; print(json.load(sys.stdin)["size"])')
[ "$size" = 67108864 ] && ok "without shm_bytes /dev/shm is 64 MiB" ||
	fail "without shm_bytes /dev/shm is $size bytes"
api DELETE "/instances/$(jget "$T/body" "j['instance']")" >/dev/null

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
