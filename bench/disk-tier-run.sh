#!/usr/bin/env bash
# disk-tier-run.sh — a start from the disk tier against the disk, one run:
# bench/disk-tier (an image of GB GB in a store on a disk; its packs read
# with O_DIRECT, 4 MiB at a time, as the floor; thaw's manifest load and
# materialisation into a RAM tier directory from a cold page cache; the CPU
# and decompression floors) and bench/manifest (a 17.2 GB image's manifest,
# JSON against binary form), their output into OUT.
#
#   bench/disk-tier-run.sh [GB] [DIR] [OUT]
#
# GB: the image (default 4); DIR: where the store goes (default
# /var/tmp/thaw-disk-tier; must not be tmpfs), made afresh and removed at the
# end; OUT: a directory for disk-tier.txt and manifest.txt (default: none,
# stdout only).  RUNS (default 3) rounds; DISK_TIER_FLAGS adds flags to
# bench/disk-tier (e.g. "--random 50 --text 40").  Binaries from $THAW_BUILD
# (default build/): nothing is built here.  Needs about GB of free disk, and
# of memory twice over (the input in /dev/shm while it is stored, then the
# tier); root, for drop_caches and a huge-page tier.
set -u
GB=${1:-4} DIR=${2:-/var/tmp/thaw-disk-tier} OUT=${3:-}
B=${THAW_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
for p in disk-tier manifest; do
	[ -x "$B/bench/$p" ] || { echo "no $B/bench/$p: build it (make bench) or set THAW_BUILD" >&2; exit 2; }
done
mkdir -p "$DIR" || exit 1
if [ "$(stat -f -c %T "$DIR")" = tmpfs ]; then
	echo "$DIR is on tmpfs: the disk tier is about a disk; give a directory on one" >&2
	exit 2
fi
[ -n "$OUT" ] && { mkdir -p "$OUT" || exit 1; }
tee_out() { if [ -n "$OUT" ]; then tee "$OUT/$1"; else cat; fi; }
echo "disk: $(df -h "$DIR" | awk 'NR == 2 {print $1 ", " $2 " (" $4 " free)"}'), $(stat -f -c %T "$DIR");" \
	"$(nproc) CPUs; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
set -o pipefail
# shellcheck disable=SC2086 # DISK_TIER_FLAGS are words for bench/disk-tier
"$B/bench/disk-tier" --dir "$DIR" --gb "$GB" --runs "${RUNS:-3}" --fresh --clean \
	${DISK_TIER_FLAGS:-} 2>&1 | tee_out disk-tier.txt || exit 1
"$B/bench/manifest" --gb 17.2 --dir "$DIR" 2>&1 | tee_out manifest.txt || exit 1
rmdir "$DIR" 2>/dev/null
exit 0
