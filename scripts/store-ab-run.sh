#!/usr/bin/env bash
# store-ab-run.sh — on the GPU machine, after scripts/gpu-run.sh has unpacked
# .gpu/x: bench/store of an earlier commit (.gpu/old-bench-store.xz, a static
# build made here, e.g. in a git worktree with `make STATIC=1
# build/static/bench/store`, then xz'd) against this pack's, alternating
# old, new, old, new, 1 GiB of random data into a store on the machine's disk,
# so that the host's speed on the day favours neither.  Writes $OUT/ab.tar.gz.
set -u
cd "$(dirname "$0")/.."
OLD=/tmp/old-bench-store W=/var/tmp/bs
xz -dc .gpu/old-bench-store.xz >$OLD && chmod +x $OLD || exit 1
mkdir -p "$OUT/ab"
for r in 1 2; do
	for v in old new; do
		b=.gpu/x/build/bench/store
		[ $v = old ] && b=$OLD
		mkdir -p $W
		# --image-mib 0: no CRIU image; the random rows are what is compared.
		$b --random-mib 1024 --repeat 2 --image-mib 0 --work $W >"$OUT/ab/$v-$r.txt" 2>&1
		rm -rf $W
	done
done
tar -C "$OUT" -czf "$OUT/ab.tar.gz" ab && rm -rf "$OUT/ab"
