#!/usr/bin/env bash
# engine-take-run.sh — how the engine's workers share out the chunks, A/B in one
# run: `thaw materialize` of the snapshot bench/engine left in DIR, warm, into
# a huge-page tmpfs (as thaw's tier on a machine without free page reporting),
# each worker taking runs of 1 chunk (neighbouring chunks to different
# workers) against runs of up to 32 (the default: ~2 MiB each), interleaved.
#
#   bench/engine-take-run.sh DIR [ROUNDS]      (DIR: bench/engine --dir, kept)
#
# Prints thaw materialize's summary line per run and a table of the best and
# median seconds per setting.  Needs root (it mounts a tmpfs).
set -u
DIR=${1:?usage: $0 DIR [ROUNDS]} ROUNDS=${2:-3}
B=${THAW_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ID=$(cat "$DIR/id") || exit 1
MNT=$(mktemp -d /dev/shm/engine-take-XXXXXX)
mount -t tmpfs -o huge=within_size,size=8g thaw-take "$MNT" || exit 1
trap 'umount "$MNT"; rmdir "$MNT"' EXIT
find "$DIR/store" -type f -exec cat {} + >/dev/null # warm: every chunk in the page cache
: >"$MNT/../engine-take-$$.txt"
for r in $(seq "$ROUNDS"); do
	for take in 1 32; do
		rm -rf "$MNT/out"
		line=$("$B/thaw" materialize --store "$DIR/store" --out "$MNT/out" --direct off \
			--take $take "$ID" 2>&1 | grep '^materialized') || { echo "take $take failed"; exit 1; }
		echo "take $take round $r: $line"
		echo "$take $(echo "$line" | sed -n 's/.* in \([0-9.]*\) s,.*/\1/p')" >>"$MNT/../engine-take-$$.txt"
	done
done
rm -rf "$MNT/out"
echo
echo "| take (chunks per run) | n | best s | median s |"
echo "|---:|---:|---:|---:|"
for take in 1 32; do
	awk -v t=$take '$1 == t { print $2 }' "$MNT/../engine-take-$$.txt" | sort -n |
		awk -v t=$take '{ a[NR] = $1 } END { printf "| %s | %d | %.3f | %.3f |\n", t, NR, a[1], a[int((NR + 1) / 2)] }'
done
rm -f "$MNT/../engine-take-$$.txt"
