#!/usr/bin/env bash
# store_cli.sh — `thaw store` end to end: put, get, ls, stat --json, verify
# (clean, a damaged binary manifest, a damaged chunk), gc, rm, and the exit
# codes of bad input.
set -u
THAW=${THAW_BUILD:-build}/thaw
work=$(mktemp -d /tmp/thaw-store-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
check() { # description, then the command; fails the test if the command fails
	local what=$1; shift
	if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
rc() { "$@" >/dev/null 2>&1; echo $?; }
st="$work/store"
ts() { "$THAW" store --store "$st" "$@"; }

mkdir -p "$work/in/sub"
head -c 3000000 /dev/urandom >"$work/in/pages-1.img"
truncate -s 10M "$work/in/pages-1.img"       # a tail of holes
printf 'hello' >"$work/in/sub/core.img"
: >"$work/in/empty.img"

id=$(ts put --name fn-a "$work/in")
check "put prints a manifest id" grep -Eqx "sha256:[0-9a-f]{64}" <<<"$id"
check "get" ts get "${id:7:16}" "$work/out"
for f in pages-1.img sub/core.img empty.img; do
	check "get gives $f back" cmp "$work/in/$f" "$work/out/$f"
done
check "ls names it" bash -c "'$THAW' store --store '$st' ls | grep -q fn-a"
check "ls --json" bash -c "'$THAW' store --store '$st' ls --json | python3 -c 'import json,sys; l=json.load(sys.stdin); assert l[0][\"name\"]==\"fn-a\" and l[0][\"files\"]==3'"
json=$(ts stat --json)
check "stat --json has exactly its keys" python3 -c "
import json, sys
s = json.loads(sys.argv[1])
assert sorted(s) == sorted(['logical_bytes','unique_bytes','stored_bytes','zero_bytes','chunks']), s
assert s['logical_bytes'] == 10485760 + 5, s
assert s['zero_bytes'] >= 10485760 - 3000000 - 4096, s
assert s['unique_bytes'] <= 3000000 + 4096 + 5, s
assert s['chunks'] >= 2, s
" "$json"
check "verify clean" ts verify
check "gc keeps what is used" bash -c "'$THAW' store --store '$st' gc | grep -q 'freed 0 chunks'"

# Damage the manifest's binary form (what a load reads): verify says so,
# naming the file, and exits 1; a load reads the JSON and writes the binary
# form anew, after which verify is clean again.
bin=$(find "$st/manifests-bin" -type f | head -n 1)
check "a manifest has a binary form" [ -n "$bin" ]
chmod u+w "$bin"
printf 'XXXX' | dd of="$bin" bs=1 seek=100 conv=notrunc status=none
out=$(ts verify 2>/dev/null); r=$?
check "verify exits 1 on a damaged binary manifest" [ $r = 1 ]
check "verify names the binary form" [ "$(echo "$out" | cut -f1)" = "$bin" ]
check "verify says the JSON is sound" grep -q "binary form.*JSON, which is sound" <<<"$out"
check "get reads the JSON" ts get "$id" "$work/out-bin"
check "get gives the files back" cmp "$work/in/pages-1.img" "$work/out-bin/pages-1.img"
check "verify clean after the load" ts verify

# Damage one chunk: verify exits 1 and prints its id; get fails, leaves nothing.
# sub/core.img's chunk ("hello"), found in the packs' indexes (store/pack.h:
# 24 bytes of header, then entries of hash[32], u64 offset, u32 stored, u32
# raw_len): its get fails after making sub/, which must go too.
read -r obj seek bad < <(python3 - "$st/packs" <<'PY'
import glob, hashlib, struct, sys
want = hashlib.sha256(b"hello").digest()
for idx in sorted(glob.glob(sys.argv[1] + "/*.idx")):
    b = open(idx, "rb").read()
    for e in range(24, len(b) - 47, 48):
        if b[e:e + 32] == want:
            off = struct.unpack("<Q", b[e + 32:e + 40])[0]
            print(idx[:-4] + ".pack", off + 20, "sha256:" + want.hex())
PY
)
check "sub/core.img's chunk found in a pack" [ -n "${obj:-}" ]
chmod u+w "$obj"
printf 'X' | dd of="$obj" bs=1 seek="$seek" conv=notrunc status=none
out=$(ts verify 2>/dev/null); r=$?
check "verify exits 1 on a bad chunk" [ $r = 1 ]
check "verify prints the bad chunk id" [ "$(echo "$out" | cut -f1)" = "$bad" ]
err=$(ts get "$id" "$work/out2" 2>&1); r=$?
check "get of a damaged snapshot fails" [ $r = 1 ]
check "get names the bad chunk" grep -q "$bad" <<<"$err"
check "get leaves no file" [ -z "$(ls -A "$work/out2" 2>/dev/null)" ]

# Bad input.
check "usage: no command" [ "$(rc ts)" = 2 ]
check "usage: unknown command" [ "$(rc ts frobnicate)" = 2 ]
check "usage: put without --name" [ "$(rc ts put "$work/in")" = 2 ]
check "usage: get without outdir" [ "$(rc ts get "$id")" = 2 ]
check "missing file" [ "$(rc ts put --name x "$work/nope")" = 1 ]
check "unknown id" [ "$(rc ts get sha256:0000000000000000000000000000000000000000000000000000000000000000 "$work/o3")" = 1 ]
check "no store" [ "$(rc "$THAW" store --store "$work/none" stat)" = 1 ]
check "help" bash -c "'$THAW' store put --help | grep -q -- --name"

# rm, then gc frees every chunk.
check "rm" ts rm "$id"
check "gc frees it all" bash -c "'$THAW' store --store '$st' gc | grep -qv 'freed 0 chunks'"
check "store empty" [ "$(ts stat --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["chunks"])')" = 0 ]
exit $fail
