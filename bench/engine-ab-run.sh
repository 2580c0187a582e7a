#!/usr/bin/env bash
# engine-ab-run.sh — settings of the restore engine A/B in one run:
# `thaw materialize` of the snapshot bench/engine left in DIR, into a
# huge-page tmpfs (as thaw's tier on a machine without free page reporting),
# the settings interleaved round after round (every other round in reverse
# order), from a warm page cache (every chunk read once first) or a cold one
# (caches dropped before each run).
#
#   bench/engine-ab-run.sh DIR ROUNDS warm|cold NAME=FLAGS NAME=FLAGS...
#
# e.g. bench/engine-ab-run.sh /var/tmp/be 3 warm '1=--take 1' '32=--take 32'
# DIR: bench/engine --dir, kept (bench/engine --dir DIR --runs 0 makes it).
# FLAGS go to thaw materialize (warm adds --direct off); where their first
# word is a path to a program (another build of thaw, to compare commits),
# that program runs them instead of $THAW_BUILD/thaw.  Prints each run's
# summary line and a table of the best and median seconds per setting.
# Needs root (it mounts a tmpfs; cold drops caches).
set -u
if [ $# -lt 4 ]; then
	sed -n '2,16p' "$0" >&2
	exit 2
fi
DIR=$1 ROUNDS=$2 CACHE=$3
shift 3
case $CACHE in warm | cold) ;; *) echo "cache must be warm or cold, not $CACHE" >&2; exit 2 ;; esac
B=${THAW_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ID=$(cat "$DIR/id") || exit 1
MNT=$(mktemp -d /dev/shm/engine-ab-XXXXXX)
TIMES=$(mktemp /tmp/engine-ab-times-XXXXXX)
mount -t tmpfs -o huge=within_size,size=8g thaw-ab "$MNT" || { rmdir "$MNT"; exit 1; }
trap 'umount "$MNT"; rmdir "$MNT"; rm -f "$TIMES"' EXIT
[ "$CACHE" = warm ] && find "$DIR/store" -type f -exec cat {} + >/dev/null
# Every other round runs the settings in reverse order, so that a machine
# that speeds up or slows down within a round (a disk's cache) favours none.
FORWARD=("$@") BACKWARD=()
for ((i = $# - 1; i >= 0; i--)); do BACKWARD+=("${FORWARD[$i]}"); done
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order=("${FORWARD[@]}"); else order=("${BACKWARD[@]}"); fi
	for setting in "${order[@]}"; do
		name=${setting%%=*} flags=${setting#*=} thaw=$B/thaw
		case $flags in /* | ./*)
			thaw=${flags%% *}
			flags=${flags#"$thaw"}
			;;
		esac
		rm -rf "$MNT/out"
		if [ "$CACHE" = cold ]; then
			sync && echo 3 >/proc/sys/vm/drop_caches || exit 1
		else
			flags="--direct off $flags"
		fi
		# shellcheck disable=SC2086 # FLAGS are words for thaw materialize
		line=$("$thaw" materialize --store "$DIR/store" --out "$MNT/out" $flags "$ID" 2>&1 |
			grep '^materialized') || { echo "$name ($flags) failed"; exit 1; }
		echo "$name round $r ($CACHE): $line"
		echo "$name $(echo "$line" | sed -n 's/.* in \([0-9.]*\) s,.*/\1/p')" >>"$TIMES"
	done
done
rm -rf "$MNT/out"
echo
echo "| setting ($CACHE) | n | best s | median s |"
echo "|---|---:|---:|---:|"
for setting in "$@"; do
	name=${setting%%=*}
	awk -v t="$name" '$1 == t { print $2 }' "$TIMES" | sort -n |
		awk -v t="$name" '{ a[NR] = $1 } END { printf "| %s | %d | %.3f | %.3f |\n", t, NR, a[1], a[int((NR + 1) / 2)] }'
done
