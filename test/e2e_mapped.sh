#!/usr/bin/env bash
# e2e_mapped.sh — real runc + CRIU: restore by mapping (restore/mapped.c).
#
# The function test/fixtures/mapped_fn.py holds MAPPED_E2E_MIB (128) MiB of
# seeded random bytes in one private anonymous mapping.  Run outside any
# container first, it gives the checksum every instance must answer.  Then:
#   1. one start: "pages" is "mapped", the answer is the original's, and right
#      after the start the process's anonymous memory (smaps_rollup) is at
#      most 10% of the image;
#   2. two instances write their own values into the mapped region and read
#      them back; the tier's memory files are unchanged (SHA-256); one grows
#      the region with mremap and reads zeros in the new part;
#   3. 8 concurrent starts, all mapped, all answering the original's checksum;
#   4. while a mapped instance runs: thaw store gc, an eviction that needs its
#      tier entry (refused: ENOSPC, the entry kept), two thawd start-ups on the
#      same RAM tier, one killed with -9: it still answers and its files are
#      the same; once its process exits, the lease holder is gone and the
#      eviction takes the entry;
#   5. the fallbacks, each with its reason: a forked child sharing the memory,
#      --eager, THAW_MAPPED=0;
#   6. on a huge-page tmpfs tier (where the kernel has one) the instance maps the
#      files with 2 MiB pages.
# Nothing may be left at the end.
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
# 128 MiB: large beside what a mapped start leaves anonymous (3-7 MiB of
# Python's own, so "at most 10% of the image" holds with room), and half the
# CPU of 256 (the function makes its bytes at every boot, three boots here,
# and every instance hashes them all: most of the test's CPU).
MIB=${MAPPED_E2E_MIB:-128}

. "$ROOT/test/lib/require.sh"
require_restore_tools

W=$(mktemp -d /tmp/e2e_mapped.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_mapped.XXXXXX)
D=$W/data
FN=e2e-m$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((4 << 30))
unset THAW_DATA_DIR THAW_STORE THAW_LAZY THAW_MAPPED
REF_PID=
THAWD_PID=

. "$ROOT/test/lib/instances.sh"

cleanup() {
	[ -n "$REF_PID" ] && kill -9 -- "-$REF_PID" 2>/dev/null
	[ -n "$THAWD_PID" ] && kill -9 "$THAWD_PID" 2>/dev/null
	cleanup_instances
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT

FN_DIR=$W/fn
mkdir -p "$FN_DIR"
cp "$ROOT/test/fixtures/mapped_fn.py" "$FN_DIR/"

sum_of() { curl -sf --max-time 60 "http://$1/checksum" | python3 -S -c 'import json,sys; print(json.load(sys.stdin)["sha256"])'; }
okfield() { curl -sf --max-time 60 "http://$1/$2" | python3 -S -c 'import json,sys; print(json.load(sys.stdin)["ok"])'; }
anon_kib() { awk '/^Anonymous:/ {print $2}' "/proc/$1/smaps_rollup"; }
# SHA-256 of each memory file up to its VMA's end (after it, a sparse hole of
# 64 GiB for mremap growth that nobody reads; restore/mapped.c).
mem_sums() {
	python3 - "$TIER" <<'PY'
import glob, hashlib, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/.mapped/mem/*")):
    n, h = os.path.getsize(f) - (64 << 30), hashlib.sha256()
    with open(f, "rb") as fh:
        while n > 0:
            b = fh.read(min(n, 16 << 20))
            if not b:
                break
            h.update(b)
            n -= len(b)
    print(h.hexdigest(), os.path.basename(f))
PY
}

# --- the original, outside any container --------------------------------------
. "$ROOT/test/lib/free_port.sh"
PORT=$(free_port)
(cd "$FN_DIR" && MAPPED_DATA_MIB=$MIB PORT=$PORT exec setsid python3 mapped_fn.py) &
REF_PID=$!
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
EXPECT=$(sum_of "127.0.0.1:$PORT")
kill -9 -- "-$REF_PID" 2>/dev/null
wait "$REF_PID" 2>/dev/null
REF_PID=
[ -n "$EXPECT" ] || { echo "FAIL: the original gave no checksum"; exit 1; }
echo "the original answers $EXPECT ($MIB MiB)"

spec() { # id-suffix data-mib fork -> $W/spec-<suffix>.json
	cat >"$W/spec-$1.json" <<EOF
{"command": ["python3", "mapped_fn.py"], "cwd": "$FN_DIR",
 "env": {"MAPPED_DATA_MIB": "$2", "MAPPED_FORK": "$3"}, "port": 8000,
 "ready": {"http": "/health", "timeout_s": 120},
 "warmup": [{"method": "GET", "path": "/checksum"}], "gpu": false}
EOF
}
spec main "$MIB" 0
snapshot_fn "$W/spec-main.json"
IMG=$(jget "$W/snap.json" image_bytes)
HEX=${SNAP#sha256:}

# --- 1. one start --------------------------------------------------------------
start_instances 1 "$SNAP"
pages=$(jget "$W/start1.json" pages)
[ "$pages" = mapped ] && ok "the start says pages mapped" || fail "pages: $pages ($(jget "$W/start1.json" pages_why 2>/dev/null))"
anon=$(anon_kib "${HPID[1]}")
echo "figure: e2e_mapped anonymous_kib_after_start $anon (image $((IMG / 1024)) KiB)"
[ "$anon" -le $((IMG / 1024 / 10)) ] && ok "anonymous memory after the start: $anon KiB, <= 10% of the image" ||
	fail "anonymous memory after the start: $anon KiB, more than 10% of the $((IMG / 1024)) KiB image"
grep -q '/\.thaw/' "/proc/${HPID[1]}/maps" && ok "the process maps the snapshot's memory files" ||
	fail "no /.thaw/ mapping in /proc/${HPID[1]}/maps"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] && ok "instance 1 answers the original's checksum" ||
	fail "instance 1 answers another checksum"
# The pages were written once, into the memory files: the entry holds one
# copy of the memory, and the pages file they came from is not in it.
tier_kib=$(du -sk "$TIER/$HEX" | cut -f1)
echo "figure: e2e_mapped tier_entry_kib $tier_kib (image $((IMG / 1024)) KiB)"
[ -f "$TIER/$HEX/.elided" ] && [ "$tier_kib" -le $((IMG / 1024 * 13 / 10)) ] &&
	ok "the tier entry holds one copy of the memory: $tier_kib KiB, pages files elided ($(cat "$TIER/$HEX/.elided"))" ||
	fail "the tier entry holds $tier_kib KiB for a $((IMG / 1024)) KiB image (.elided: $(cat "$TIER/$HEX/.elided" 2>&1)); $(grep -h 'mapped image' "$W"/start*.err)"
"$THAW" --data-dir "$D" ps | grep -q "^${ID[1]} .* mapped " && ok "thaw ps lists it as mapped" ||
	fail "thaw ps: $("$THAW" --data-dir "$D" ps)"
"$THAW" --data-dir "$W/no-such-dir" ps >/dev/null 2>"$W/ps.err" && fail "thaw ps on a missing data directory exited 0"
grep -q "no data directory" "$W/ps.err" || fail "thaw ps on a missing data directory: $(cat "$W/ps.err")"

# --- 2. two instances, each writing its own values -------------------------------
BEFORE=$(mem_sums)
[ -n "$BEFORE" ] || fail "no memory files in the tier"
ID1=${ID[1]} EP1=${EP[1]} HPID1=${HPID[1]}
start_instances 1 "$SNAP"
ID[2]=${ID[1]} EP[2]=${EP[1]} HPID[2]=${HPID[1]}
ID[1]=$ID1 EP[1]=$EP1 HPID[1]=$HPID1
[ "$(okfield "${EP[1]}" 'write?v=11')" = True ] || fail "instance 1: write"
[ "$(okfield "${EP[2]}" 'write?v=22')" = True ] || fail "instance 2: write"
[ "$(okfield "${EP[1]}" 'read?v=11')" = True ] && [ "$(okfield "${EP[2]}" 'read?v=22')" = True ] &&
	ok "each instance reads back its own writes into the mapped region" ||
	fail "an instance does not read back its own writes"
[ "$(okfield "${EP[2]}" grow)" = True ] && ok "instance 2 grows the mapped region (mremap) and reads zeros there" ||
	fail "instance 2: growing the region"
[ "$(okfield "${EP[1]}" 'read?v=11')" = True ] || fail "instance 1 lost its writes after instance 2's"
[ "$(mem_sums)" = "$BEFORE" ] && ok "the tier's memory files are unchanged (SHA-256)" ||
	fail "the tier's memory files changed"
stop_instances
check_nothing_left "after two instances"

# --- 3. 8 concurrent starts ------------------------------------------------------
unset ID EP HPID
start_instances 8 "$SNAP"
good=0
for i in $(seq 1 8); do
	[ "$(jget "$W/start$i.json" pages)" = mapped ] && [ "$(sum_of "${EP[$i]}")" = "$EXPECT" ] && good=$((good + 1))
	echo "figure: e2e_mapped burst8_criu_restore_ms_$i $(jget "$W/start$i.json" timings_ms criu_restore)"
done
[ $good = 8 ] && ok "8 concurrent starts: all mapped, all answer the original's checksum" ||
	fail "8 concurrent starts: only $good mapped and correct"
[ "$(mem_sums)" = "$BEFORE" ] || fail "the tier's memory files changed under 8 instances"
stop_instances
check_nothing_left "after 8 instances"

# --- 4. gc, eviction and thawd start-ups under a mapped instance -----------------
unset ID EP HPID
start_instances 1 "$SNAP"
"$THAW" --data-dir "$D" store gc >"$W/gc.out" 2>&1 || fail "thaw store gc: $(cat "$W/gc.out")"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] && ok "after thaw store gc the instance answers" || fail "after gc"

spec small 8 0
"$THAW" --data-dir "$D" snapshot --id "$FN-small" "$W/spec-small.json" >"$W/snap-small.json" 2>"$W/snap-small.err" ||
	{ cat "$W/snap-small.err"; echo "FAIL: snapshot of the small function"; exit 1; }
SMALL=$(jget "$W/snap-small.json" snapshot)
ENTRY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$TIER/$HEX.meta")
TIGHT=$((ENTRY + (4 << 20)))
if THAW_RAM_TIER_BYTES=$TIGHT "$THAW" --data-dir "$D" materialize "$SMALL" >"$W/mat.out" 2>&1; then
	fail "a materialisation that needs the leased entry's room succeeded"
else
	grep -q "is full" "$W/mat.out" && ok "eviction leaves the mapped instance's entry: the tier is full" ||
		fail "materialize failed otherwise: $(tail -n 2 "$W/mat.out")"
fi
[ -f "$TIER/$HEX.meta" ] || fail "the leased entry was evicted"

for n in 1 2; do
	rm -f "$W/port"
	"$B/thawd" --listen 127.0.0.1:0 --port-file "$W/port" --data-dir "$W/data2" --ram-tier "$TIER" \
		>>"$W/thawd.log" 2>&1 </dev/null &
	THAWD_PID=$!
	for _ in $(seq 100); do [ -s "$W/port" ] && break; sleep 0.1; done
	curl -sf "http://127.0.0.1:$(cat "$W/port")/healthz" >/dev/null || fail "thawd $n did not answer"
	kill -9 "$THAWD_PID"
	wait "$THAWD_PID" 2>/dev/null
	THAWD_PID=
done
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] && ok "after two thawd start-ups on its tier (killed -9) the instance answers" ||
	fail "after the thawd start-ups"
[ "$(mem_sums)" = "$BEFORE" ] || fail "the tier's memory files changed"
# The instance's process exits (killed here): its lease holder goes with it,
# before any stop, and the entry is free for eviction.
holder=$(jget "$D/instances/${ID[1]}.json" lease_holder_pid)
[ -n "$(alive "$holder")" ] || fail "no lease holder $holder while the instance runs"
kill -9 "${HPID[1]}"
for _ in $(seq 50); do [ -z "$(alive "$holder")" ] && break; sleep 0.1; done
[ -z "$(alive "$holder")" ] && ok "the lease holder went with the instance's process" ||
	fail "lease holder $holder is still there after the instance's process died"
if THAW_RAM_TIER_BYTES=$TIGHT "$THAW" --data-dir "$D" materialize "$SMALL" >"$W/mat.out" 2>&1; then
	[ ! -f "$TIER/$HEX.meta" ] && ok "once the instance exited, the eviction took the entry" ||
		fail "the entry is still there after the materialisation"
else
	fail "materialize after the instance's exit: $(tail -n 2 "$W/mat.out")"
fi
stop_instances
check_nothing_left "after the eviction"

# --- 5. fallbacks ----------------------------------------------------------------
unset ID EP HPID
spec fork "$MIB" 1
"$THAW" --data-dir "$D" snapshot --id "$FN-fork" "$W/spec-fork.json" >"$W/snap-fork.json" 2>"$W/snap-fork.err" ||
	{ cat "$W/snap-fork.err"; echo "FAIL: snapshot of the forking function"; exit 1; }
start_instances 1 "$(jget "$W/snap-fork.json" snapshot)"
why=$(jget "$W/start1.json" pages_why 2>/dev/null)
[ "$(jget "$W/start1.json" pages)" != mapped ] && [ "${why#*forked}" != "$why" ] &&
	ok "a forked child shares the memory: $(jget "$W/start1.json" pages) ($why)" ||
	fail "forked function: pages $(jget "$W/start1.json" pages), why '$why'"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] && ok "the forked function's instance answers the original's checksum" ||
	fail "the forked function's instance answers another checksum"
stop_instances

unset ID EP HPID
start_instances 1 "$SNAP" --eager
[ "$(jget "$W/start1.json" pages)" = eager ] && [ "$(jget "$W/start1.json" pages_why)" = "the start asked" ] &&
	ok "--eager: pages eager (the start asked)" || fail "--eager: $(cat "$W/start1.json")"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] && ok "the eager instance answers the original's checksum" ||
	fail "the eager instance answers another checksum"
# It needed the pages files the entry had left out: written from the store.
[ ! -e "$TIER/$HEX/.elided" ] && ls "$TIER/$HEX"/pages-*.img >/dev/null 2>&1 &&
	ok "the eager start had the elided pages files written into the entry" ||
	fail "after the eager start: .elided $(ls "$TIER/$HEX/.elided" 2>&1), pages files: $(ls "$TIER/$HEX" | grep -c '^pages-')"
echo "figure: e2e_mapped eager_anonymous_kib_after_start $(anon_kib "${HPID[1]}")"
stop_instances

unset ID EP HPID
THAW_MAPPED=0 start_instances 1 "$SNAP"
[ "$(jget "$W/start1.json" pages)" != mapped ] && [ "$(jget "$W/start1.json" pages_why)" = "THAW_MAPPED=0" ] &&
	ok "THAW_MAPPED=0: pages $(jget "$W/start1.json" pages)" || fail "THAW_MAPPED=0: $(cat "$W/start1.json")"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] || fail "the THAW_MAPPED=0 instance answers another checksum"
stop_instances
check_nothing_left "after the fallbacks"

# --- 6. huge pages: on a huge-page tmpfs tier the files map with 2 MiB pages ----
unset ID EP HPID
TIER2=$W/tier-huge
mkdir -p "$TIER2"
THAW_RAM_TIER=$TIER2 THAW_TIER_HUGE=1 start_instances 1 "$SNAP"
[ "$(sum_of "${EP[1]}")" = "$EXPECT" ] || fail "the instance on the huge-page tier answers another checksum"
if mountpoint -q "$TIER2"; then # (the checksum read it all: it is mapped now)
	pmd=$(awk '/^ShmemPmdMapped:/ {print $2}' "/proc/${HPID[1]}/smaps_rollup")
	echo "figure: e2e_mapped shmem_pmd_mapped_kib $pmd"
	[ "${pmd:-0}" -ge $((MIB * 1024 / 2)) ] && ok "huge-page tier: $pmd KiB mapped with 2 MiB pages" ||
		fail "huge-page tier: only ${pmd:-0} KiB mapped with 2 MiB pages"
else
	echo "no huge-page tmpfs here: the 2 MiB mapping is not checked"
fi
stop_instances
mountpoint -q "$TIER2" && umount "$TIER2"
check_nothing_left "at the end"

[ $fails = 0 ] && echo "e2e_mapped: all good" || echo "e2e_mapped: $fails failure(s)"
[ $fails = 0 ]
