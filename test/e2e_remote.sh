#!/usr/bin/env bash
# e2e_remote: the remote tier (remote/, `thaw remote`) against a real
# S3 server, a single-node Ceph RGW (test/lib/ceph_rgw.sh):
#   - a store's snapshot pushed, then pulled into an empty second store and
#     written out byte-identical, the second store verified clean;
#   - a re-snapshot that changed ~5% of the data uploads ~5%;
#   - a pack flipped on the server: the fetch retries, fails naming the chunk,
#     and leaves the store with no manifest and nothing bad;
#   - gc: marks, deletes only after the grace, never what a ref reaches;
#   - wrong keys, a missing bucket and a bad URL: clear errors, no secret.
set -u
B=${THAW_BUILD:-build}
ROOT=${THAW_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
. "$ROOT/test/lib/ceph_rgw.sh"
[ -x "$THAW" ] || { echo "no $THAW (make all)"; exit 1; }
W=$(mktemp -d /tmp/e2e_remote.XXXXXX)
trap 'rm -rf "$W"' EXIT
ceph_rgw_start thaw || exit 1
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
jget() { python3 -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
s3curl() { # METHOD KEY [curl args]: a signed request to the bucket
	local m=$1 k=$2; shift 2
	curl -sf -X "$m" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" "$AWS_ENDPOINT_URL/thaw/$k"
}
R=s3://thaw/fleet
rem() { "$THAW" remote --remote "$R" "$@"; }

# The input: random pages (raw chunks), a heap that compresses, holes.
mkdir -p "$W/in"
head -c $((48 << 20)) /dev/urandom >"$W/in/pages-1.img"
python3 -c "
import sys
with open(sys.argv[1], 'wb') as f:
    for i in range(200000): f.write(b'heap object %08d ' % i * 4)
" "$W/in/heap.img"
truncate -s 64M "$W/in/sparse.img"
id1=$("$THAW" store --store "$W/a" put --name fn "$W/in" 2>/dev/null) || { fail "store put"; exit 1; }
echo '{"command": ["python3", "fn.py"], "port": 8000}' >"$W/spec.json"

# 1. push, then pull into an empty store, byte-identical
out=$(rem --store "$W/a" push --json --spec "$W/spec.json" fn "$id1") || fail "push"
echo "push 1: $out"
sent1=$(jget "$out" "['bytes_sent']")
stored1=$(jget "$out" "['chunk_bytes']")
[ "$(jget "$out" "['chunks_sent']")" = "$(jget "$out" "['chunks']")" ] && ok "first push sends every chunk" || fail "first push"
mb_up=$(python3 -c "print(round($sent1 / $(jget "$out" "['seconds']") / 1e6))")
rem ls | grep -q "^fn .*$id1" && ok "ls shows the ref" || fail "ls: $(rem ls)"
got=$(rem --store "$W/b" pull --spec-out "$W/spec.out" fn 2>"$W/pull.err") || { cat "$W/pull.err"; fail "pull"; }
[ "$got" = "$id1" ] && ok "pull gives the pushed manifest" || fail "pull printed '$got'"
mb_down=$(sed -n 's/.* \([0-9]*\) MB\/s$/\1/p' "$W/pull.err")
cmp -s <(python3 -m json.tool "$W/spec.json") <(python3 -m json.tool "$W/spec.out") &&
	ok "the spec comes back" || fail "spec differs"
"$THAW" store --store "$W/b" get "$id1" "$W/out1" && for f in pages-1.img heap.img sparse.img; do
	cmp -s "$W/in/$f" "$W/out1/$f" || fail "$f differs after push and pull"
done && ok "pulled snapshot written out byte-identical"
"$THAW" store --store "$W/b" verify >/dev/null && ok "pulled store verifies" || fail "verify b"
out=$(rem --store "$W/b" fetch --json "$id1" 2>/dev/null) && [ "$(jget "$out" "['chunks_fetched']")" = 0 ] &&
	ok "a second fetch fetches nothing" || fail "second fetch: $out"

# 2. ~5% changed: ~5% uploaded
python3 -c "
import os, sys
f = open(sys.argv[1], 'r+b'); n = os.path.getsize(sys.argv[1])
for k in range(8):                       # 8 runs of 300 KiB: 2.4 MiB of 48
    f.seek(n // 8 * k + 12345); f.write(os.urandom(300 << 10))
" "$W/in/pages-1.img"
id2=$("$THAW" store --store "$W/a" put --name fn "$W/in" 2>/dev/null)
out=$(rem --store "$W/a" push --json --spec "$W/spec.json" fn "$id2") || fail "push 2"
echo "push 2: $out"
sent2=$(jget "$out" "['bytes_sent']")
pct=$(python3 -c "print(round(100 * $sent2 / $sent1, 1))")
python3 -c "import sys; sys.exit(not (2 <= $pct <= 12))" &&
	ok "re-push after changing ~5% of the data uploaded $sent2 of $sent1 bytes ($pct%)" ||
	fail "re-push uploaded $pct% ($sent2 of $sent1)"
got=$(rem --store "$W/b" pull fn 2>"$W/pull2.err")
[ "$got" = "$id2" ] && "$THAW" store --store "$W/b" get "$id2" "$W/out2" &&
	cmp -s "$W/in/pages-1.img" "$W/out2/pages-1.img" && ok "re-pull: the new snapshot, identical" ||
	fail "re-pull"
echo "re-pull: $(tail -n1 "$W/pull2.err")"

# 3. a flipped byte in a pack on the server
RC=s3://thaw/corrupt
"$THAW" remote --remote "$RC" --store "$W/a" push fn "$id1" 2>/dev/null || fail "push to $RC"
pack=$(s3curl GET "?list-type=2&prefix=corrupt%2Fpacks%2F" | grep -o 'corrupt/packs/[0-9a-f]*\.pack' | head -1)
s3curl GET "$pack" -o "$W/pack" && python3 -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[100] ^= 0x40
open(sys.argv[1], 'wb').write(b)" "$W/pack" && s3curl PUT "$pack" -T "$W/pack" -o /dev/null ||
	fail "cannot flip a byte of $pack"
"$THAW" remote --remote "$RC" --store "$W/c" fetch "$id1" >"$W/bad.out" 2>&1
rc=$?
cat "$W/bad.out" | tail -n 3
[ $rc = 1 ] && grep -q "thaw remote fetch: fetch failed: chunk sha256:[0-9a-f]\{64\} .*the remote cannot give it" "$W/bad.out" &&
	ok "a corrupt pack fails the fetch, naming the chunk" || fail "corrupt fetch (exit $rc)"
[ "$(grep -c "fetching it again" "$W/bad.out")" -ge 2 ] && ok "the bad range was fetched again" ||
	fail "no retries seen"
[ -z "$(ls "$W/c/manifests" 2>/dev/null)" ] && ok "no manifest written for it" || fail "a manifest was written"
"$THAW" store --store "$W/c" verify >/dev/null && ok "the store is still sound" || fail "verify c"

# 4. gc: an unreferenced function's objects go after the grace, nothing a ref reaches
"$THAW" store --store "$W/a" put --name other "$W/in/heap.img" >/dev/null 2>&1
head -c $((8 << 20)) /dev/urandom >"$W/other.img"
id3=$("$THAW" store --store "$W/a" put --name other "$W/other.img" 2>/dev/null)
rem --store "$W/a" push other "$id3" 2>/dev/null || fail "push other"
s3curl DELETE fleet/refs/other.json -o /dev/null || fail "delete ref"
# A mark is the server's Date, whole seconds: an object written in the second
# of the mark counts as newer than it, and is kept (marked again).
sleep 1.1
# The grace is long enough that the second gc comes within it on a busy
# machine too; the third waits as long as the second says is left.
out=$(rem gc --grace 10) || fail "gc 1"
echo "$out"
# Unreferenced: other's pack, index and manifest, and fn's first manifest.
echo "$out" | grep -q "0 deleted .* 4 marked$" && ok "first gc marks 4 objects, deletes none" || fail "gc 1: $out"
out=$(rem gc --grace 10)
echo "$out" | grep -q "0 deleted .*can go in [0-9]* s" && ok "a gc within the grace deletes nothing" || fail "gc 2: $out"
left=$(echo "$out" | sed -n 's/.*can go in \([0-9]*\) s.*/\1/p' | head -n1)
sleep $((${left:-10} + 1))
out=$(rem gc --grace 10) || fail "gc 3"
echo "$out"
echo "$out" | grep -q "4 deleted" && ok "after the grace, gc deletes the 4" || fail "gc 3: $out"
s3curl HEAD "fleet/manifests/${id3#sha256:}" -o /dev/null && fail "other's manifest still there"
got=$(rem --store "$W/d" pull fn 2>/dev/null) && "$THAW" store --store "$W/d" get "$got" "$W/out3" &&
	cmp -s "$W/in/pages-1.img" "$W/out3/pages-1.img" && cmp -s "$W/in/heap.img" "$W/out3/heap.img" &&
	ok "fn still pulls whole after gc" || fail "pull after gc"

# 5. errors that say what is wrong and never print a secret
secret=$AWS_SECRET_ACCESS_KEY
err=$(AWS_SECRET_ACCESS_KEY=not-the-key "$THAW" remote --remote "$R" ls 2>&1)
rc=$?
echo "$err"
[ $rc = 1 ] && echo "$err" | grep -q "403 SignatureDoesNotMatch" && ! echo "$err" | grep -qe "not-the-key" -e "$secret" &&
	ok "wrong keys: 403 named, no secret" || fail "wrong keys (exit $rc)"
err=$("$THAW" remote --remote s3://no-such-bucket ls 2>&1)
echo "$err" | grep -q "NoSuchBucket" && ok "missing bucket named" || fail "missing bucket: $err"
err=$("$THAW" remote --remote http://x ls 2>&1)
[ $? = 1 ] && echo "$err" | grep -q "bad remote" && ok "bad URL" || fail "bad URL: $err"
err=$(env -u AWS_ACCESS_KEY_ID AWS_SHARED_CREDENTIALS_FILE=/nonexistent "$THAW" remote --remote "$R" ls 2>&1)
echo "$err" | grep -q "no S3 credentials" && ok "no keys" || fail "no keys: $err"
err=$("$THAW" remote --remote "$R" --store "$W/e" pull nosuchfn 2>&1)
echo "$err" | grep -q "no function 'nosuchfn'" && ok "unknown function" || fail "unknown function: $err"

echo "figures: push $mb_up MB/s, pull $mb_down MB/s (48 MiB random + 30 MiB heap, local RGW); re-push $pct% ($sent2 of $sent1 bytes; chunks $stored1 bytes)"
[ $fails = 0 ] && echo "ok" && exit 0
exit 1
