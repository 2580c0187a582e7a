#!/usr/bin/env bash
# A RAM tier entry's device memory damaged, on the GPU machine (docs/DESIGN.md,
# "The RAM tier's checksums"): the GPU example ($THAW_GPU_EXAMPLE, as
# scripts/gpu-run.sh writes it) snapshotted and started once (its tier entry
# made, its tokens those of the cold process, $E2E_GPU_TOKENS where given);
# then 63 blocks of 4 KiB of the entry's gpu-*.mem overwritten, spread over
# the file, as a host's memory fault would:
#   1. the next start is not answered with the damaged memory: thawd's fill
#      finds it unlike its checksum, the instance ends before it answers, the
#      entry is dropped and materialised again from the store, and the start
#      restores from it: 201, "restored": true, the cold process's tokens;
#   2. thawd's log names the file and the block; /metrics counts one entry
#      found damaged by the fill and one materialised again;
#   3. nothing is left behind.
# The scrub is off (--tier-scrub-rate 0): the fill is what must find it.
# Prints the fill's lines (its time checking) and each start's total as
# "figure:" lines.  Skips (77) without a GPU or the GPU example.
# scripts/gpu-run.sh runs it as the step e2e_tier_damage_gpu.
set -u
NAME=tier-damage-gpu
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
[ -n "${THAW_GPU_EXAMPLE:-}" ] && [ -f "$THAW_GPU_EXAMPLE" ] ||
	skip "no GPU example (THAW_GPU_EXAMPLE: scripts/gpu-run.sh writes it)"
BODY='{"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}'

tokens() { # ENDPOINT: the tokens it generates for BODY
	curl -sf --max-time 300 -X POST -d "$BODY" "http://$1/generate" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
start() { # -> status; the answer in $T/start
	curl -s -o "$T/start" -w '%{http_code}' --max-time 1200 -X POST "$URL/functions/gx/start"
}

start_thawd --max-standby 0 --ram-tier-bytes 32G --tier-scrub-rate 0
st=$(api PUT /functions/gx -d @"$THAW_GPU_EXAMPLE")
[ "$st" = 201 ] || { fail "PUT gx: $st $(cat "$T/body")"; exit 1; }
st=$(curl -s -o "$T/body" -w '%{http_code}' --max-time 1200 -X POST "$URL/functions/gx/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot of gx: $st $(cat "$T/body")"; exit 1; }
snap=$(jget "$T/body" "j['job']['result']['snapshot']")

# ---- the entry, sound ----
st=$(start)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] ||
	{ fail "first start: $st $(cat "$T/start")"; exit 1; }
echo "figure: e2e_tier_damage_gpu sound_total_ms $(jget "$T/start" "j['timings_ms']['total']")"
toks=$(tokens "$(jget "$T/start" "j['endpoint']")")
[ -n "$toks" ] && { [ -z "${E2E_GPU_TOKENS:-}" ] || [ "$toks" = "$E2E_GPU_TOKENS" ]; } &&
	ok "the first start generates $toks" || fail "first start's tokens: $toks, not ${E2E_GPU_TOKENS:-}"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
grep -h 'thaw filled' "$T/thawd.log" | tail -1 | sed 's/^/figure: e2e_tier_damage_gpu sound_fill: /'

# ---- damaged: 63 blocks of 4 KiB of its device memory ----
mem=$(ls -S "$SHM/${snap#sha256:}"/gpu-*.mem 2>/dev/null | head -n1)
[ -n "$mem" ] || { fail "no gpu-*.mem in the tier entry $SHM/${snap#sha256:}"; exit 1; }
python3 - "$mem" <<'PY' || { fail "cannot damage $mem"; exit 1; }
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
size = os.fstat(fd).st_size
step = (size // 64) // 4096 * 4096
for i in range(63):
    off = (i + 1) * step
    b = bytearray(os.pread(fd, 4096, off))
    os.pwrite(fd, bytes(x ^ 0xff for x in b), off)
os.close(fd)
print("flipped 63 blocks of 4 KiB of %s (%d bytes), %d bytes apart" % (sys.argv[1], size, step))
PY

st=$(start)
echo "start: $(head -c 600 "$T/start")"
if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ]; then
	ok "the start after the damage restored (from the entry made again)"
else
	fail "start after the damage: $st $(cat "$T/start")"
fi
echo "figure: e2e_tier_damage_gpu damaged_total_ms $(jget "$T/start" "j['timings_ms']['total']")"
toks2=$(tokens "$(jget "$T/start" "j['endpoint']")")
[ -n "$toks2" ] && [ "$toks2" = "$toks" ] && ok "it generates the same tokens: $toks2" ||
	fail "after the damage the instance generates $toks2, not $toks"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
grep -h 'thaw filled' "$T/thawd.log" | tail -1 | sed 's/^/figure: e2e_tier_damage_gpu remade_fill: /'

# ---- said so ----
grep -q "gpu-.*\.mem unlike its checksum: block" "$T/thawd.log" &&
	ok "thawd's log: $(grep -m1 'unlike its checksum' "$T/thawd.log" | cut -c1-300)" ||
	fail "thawd's log does not name the damaged block"
api GET /metrics >/dev/null
grep -q '^thaw_ram_tier_damaged_total{found_by="fill"} 1$' "$T/body" &&
	grep -q '^thaw_ram_tier_rematerialized_total 1$' "$T/body" &&
	ok "/metrics: one entry found damaged by the fill, one materialised again" ||
	fail "/metrics: $(grep thaw_ram_tier "$T/body")"
stop_thawd 120

c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
[ -z "$(ls -A "$DATA/instances" 2>/dev/null)" ] || fail "records left: $(ls "$DATA/instances")"
[ $fails = 0 ] && echo "e2e_tier_damage_gpu: all passed"
exit $fails
