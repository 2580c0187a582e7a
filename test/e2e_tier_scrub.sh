#!/usr/bin/env bash
# e2e_tier_scrub.sh — real runc, CRIU and thawd: a RAM tier entry's mapped
# memory file damaged is found by thawd's background scrub
# (restore/tier_scrub.c), dropped and materialised again from the store,
# before the next start maps it:
#   1. test/fixtures/mapped_fn.py (16 MiB of seeded random bytes in one
#      private mapping) snapshotted and started: its pages are mapped, and it
#      answers its checksum; stopped;
#   2. 63 blocks of 4 KiB of its tier entry's memory file overwritten, as a
#      host's memory fault would;
#   3. within a minute the file holds its bytes again, thawd's log says which
#      file and block were damaged, and /metrics counts one damaged entry
#      found by the scrub (thaw_ram_tier_damaged_total{found_by="scrub"}) and
#      one materialised again;
#   4. the next start maps the entry again and answers the original checksum.
# The scrub runs at its default rate; THAW_TIER_SCRUB_PASS_S=1 lets its passes
# follow each other a second apart rather than a minute.
set -u
NAME=tier-scrub
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
fixture_fn "$T/fn" mapped_fn.py
sum_of() { curl -sf --max-time 60 "http://$1/checksum" | jget /dev/stdin "j['sha256']"; }
# start: POST start into $T/start; its status.
start() { local st; st=$(api POST /functions/sc/start); cp "$T/body" "$T/start"; echo "$st"; }
# The memory file's bytes before its 64 GiB growth hole (restore/mapped.c).
mem_head() { python3 -S -c 'import os,sys; f=sys.argv[1]; n=os.path.getsize(f)-(64<<30); sys.stdout.buffer.write(open(f,"rb").read(n))' "$1"; }
damaged_scrub() { api GET /metrics >/dev/null && grep -q '^thaw_ram_tier_damaged_total{found_by="scrub"} 1$' "$T/body"; }
restored() { [ -f "$MEM" ] && mem_head "$MEM" | cmp -s - "$T/mem.good"; }

export THAW_TIER_SCRUB_PASS_S=1
start_thawd --max-standby 0
put_snapshot sc "$(fn_spec mapped_fn.py "$T/fn" \
	'"env": {"MAPPED_DATA_MIB": "16", "MAPPED_TAIL_MIB": "2"}, "gpu": false')"
HEX=${SNAP#sha256:}

# ---- 1. mapped, and its checksum ----
st=$(start)
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['pages']")" = mapped ] &&
	ok "the start maps its pages" || { fail "start: $st $(cat "$T/start")"; exit 1; }
GOOD=$(sum_of "$(jget "$T/start" "j['endpoint']")")
[ -n "$GOOD" ] || fail "the instance gave no checksum"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
# The largest: the 16 MiB region the checksum covers.
MEM=$(ls -S "$SHM/$HEX/.mapped/mem/"* 2>/dev/null | head -n1)
[ -n "$MEM" ] || { fail "no memory file in $SHM/$HEX/.mapped/mem"; exit 1; }
mem_head "$MEM" >"$T/mem.good"

# ---- 2. damaged ----
# Each block read back at once: the scrub may find the damage any moment.
damaged=$(python3 -S - "$MEM" <<'PY'
import os, sys
fd, n = os.open(sys.argv[1], os.O_RDWR), 0
for i in range(63):
    off = (2 << 20) + i * (192 << 10)
    os.pwrite(fd, b"\x5a" * 4096, off)
    n += os.pread(fd, 4096, off) == b"\x5a" * 4096
os.close(fd)
print(n)
PY
)
[ "$damaged" = 63 ] && ok "63 blocks of 4 KiB of $(basename "$MEM") overwritten" ||
	{ fail "the damage did not take: $damaged blocks"; exit 1; }

# ---- 3. found by the scrub, materialised again ----
if wait_for 60 restored; then
	ok "the memory file holds its bytes again"
else
	fail "the damaged memory file was not materialised again within 60 s"
fi
wait_for 30 damaged_scrub && ok "/metrics: $(grep '^thaw_ram_tier_damaged_total{found_by="scrub"}' "$T/body")" ||
	fail "/metrics counts no damaged entry found by the scrub: $(grep thaw_ram_tier "$T/body")"
grep -q '^thaw_ram_tier_rematerialized_total 1$' "$T/body" && ok "/metrics: materialised again once" ||
	fail "/metrics: $(grep thaw_ram_tier_remat "$T/body")"
grep -q "damaged.*$(basename "$MEM").*block" "$T/thawd.log" &&
	ok "thawd's log: $(grep -m1 "damaged.*$(basename "$MEM")" "$T/thawd.log" | cut -c1-240)" ||
	fail "thawd's log does not name the damaged file"

# ---- 4. the next start runs on the sound bytes ----
st=$(start)
[ "$st" = 201 ] && [ "$(jget "$T/start" "(j['restored'], j['pages'])")" = "(True, 'mapped')" ] &&
	[ "$(sum_of "$(jget "$T/start" "j['endpoint']")")" = "$GOOD" ] &&
	ok "the next start maps the entry again and answers the original checksum" ||
	fail "start after the scrub: $st $(cat "$T/start")"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
stop_thawd >/dev/null
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
[ $fails = 0 ] && echo "e2e_tier_scrub: all passed"
exit $fails
