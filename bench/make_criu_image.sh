#!/usr/bin/env bash
# make_criu_image.sh OUTDIR [MiB] — two real CRIU images of one process, for
# the store and restore benchmarks.
#
# A python3 process builds MiB (default 300) of deterministic state and waits:
#   ~60% pseudo-random bytearrays (incompressible, like model weights),
#   ~25% text records (heap-like, compresses well),
#   ~15% touched zero pages (dumped by CRIU, elided by the store).
# It is dumped into OUTDIR/dump1 with --leave-running; then, on SIGUSR1, it
# rewrites ~1/64 of its random bytes (at least 2 MiB) in 1 MiB slices and
# maps and fills a new 1 MiB region (a mapping of its own, so that the pages
# after it shift in the image), and is dumped again into OUTDIR/dump2.  The process is killed at the
# end, also on failure.  dump1 and dump2 are what a re-snapshot of the same
# function looks like: almost all bytes shared, at shifted offsets.
#
# Env: CRIU (default $THAW_ROOT/.deps/criu-wrapper, then the repo's), SEED (42).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUTDIR [MiB]" >&2
	exit 2
fi
OUT=$1
MIB=${2:-300}
SEED=${SEED:-42}
ROOT=${THAW_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
CRIU=${CRIU:-$ROOT/.deps/criu-wrapper}

if [ ! -x "$CRIU" ]; then
	echo "make_criu_image: no criu at $CRIU (run make deps)" >&2
	exit 1
fi
case "$MIB" in '' | *[!0-9]*) echo "make_criu_image: MiB must be a number" >&2; exit 2 ;; esac

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/dump1" "$OUT/dump2" "$OUT/.ready" "$OUT/.changed"
mkdir -p "$OUT/dump1" "$OUT/dump2"

pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		{ kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
	fi
	rm -f "$OUT/.ready" "$OUT/.changed" "$OUT/.holder.py"
}
trap cleanup EXIT

cat >"$OUT/.holder.py" <<'PY'
import mmap, os, random, signal, sys

out, mib, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MiB = 1 << 20
rng = random.Random(seed)

# Pseudo-random blocks of 8 MiB: bytearrays, so that they can change in place.
n_rand = mib * 60 // 100
blocks = []
left = n_rand * MiB
while left > 0:
    n = min(8 * MiB, left)
    blocks.append(bytearray(rng.randbytes(n)))
    left -= n

# Text records: heap-like state, compressible, a little random.
words = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf",
         b"hotel", b"india", b"juliet", b"kilo", b"lima", b"mike", b"november"]
n_text = mib * 25 // 100
text = []
for part in range(max(n_text // 4, 1)):
    recs = []
    size = 0
    i = 0
    while size < 4 * MiB:
        r = b"rec %08d %s=%d %s\n" % (part * 100000 + i, rng.choice(words),
                                      rng.randrange(1000), rng.choice(words))
        recs.append(r)
        size += len(r)
        i += 1
    text.append(b"".join(recs))

# Zero pages that were written (a fresh allocation's untouched pages are not
# dumped at all; these are, as all-zero pages).
n_zero = max(mib - n_rand - n_text, 1)
zero = bytearray(n_zero * MiB)
for i in range(0, len(zero), 4096):
    zero[i] = 1
    zero[i] = 0

changed = []

def change(signum, frame):
    r = random.Random(seed + 1)
    nmib = max(n_rand // 64, 2)
    for _ in range(nmib):
        b = blocks[r.randrange(len(blocks))]
        if len(b) < MiB:
            continue
        off = r.randrange(0, len(b) - MiB + 1, 4096)
        b[off:off + MiB] = r.randbytes(MiB)
    # a private mapping of its own (MAP_SHARED would be shmem, imaged apart):
    # the pages after it shift in the image
    m = mmap.mmap(-1, MiB, flags=mmap.MAP_PRIVATE)
    m.write(r.randbytes(MiB))
    changed.append(m)
    with open(os.path.join(out, ".changed"), "w") as f:
        f.write("%d\n" % nmib)

signal.signal(signal.SIGUSR1, change)
with open(os.path.join(out, ".ready"), "w") as f:
    f.write("%d\n" % os.getpid())
while True:
    signal.pause()
PY

wait_for() { # file seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ -e "$1" ] && return 0
		kill -0 "$pid" 2>/dev/null || { echo "make_criu_image: holder died" >&2; return 1; }
		sleep 0.1
	done
	echo "make_criu_image: timed out waiting for $1" >&2
	return 1
}

# CRIU needs a process of its own session, with no terminal: setsid, stdio not a tty.
cd /
setsid python3 "$OUT/.holder.py" "$OUT" "$MIB" "$SEED" </dev/null >/dev/null 2>&1 &
pid=$!
wait_for "$OUT/.ready" $((60 + MIB / 5))
t0=$(date +%s.%N)
"$CRIU" dump -t "$pid" -D "$OUT/dump1" -o dump.log -v4 --leave-running ||
	{ echo "make_criu_image: criu dump failed; see $OUT/dump1/dump.log" >&2; exit 1; }
t1=$(date +%s.%N)
kill -USR1 "$pid"
wait_for "$OUT/.changed" 60
t2=$(date +%s.%N)
"$CRIU" dump -t "$pid" -D "$OUT/dump2" -o dump.log -v4 --leave-running ||
	{ echo "make_criu_image: criu dump failed; see $OUT/dump2/dump.log" >&2; exit 1; }
t3=$(date +%s.%N)
# (the group's stderr: bash reports the killed job there)
{ kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
pid=""

for d in dump1 dump2; do
	echo "$d: $(du -sb --apparent-size "$OUT/$d" | cut -f1) bytes in $(ls "$OUT/$d" | wc -l) files"
done
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
	'BEGIN { printf "criu dump: %.2f s, %.2f s\n", b - a, d - c }'
