#!/usr/bin/env bash
# Assemble .gpu/ (ignored by git): everything the GPU machine needs that it
# does not have (docs/GPU.md: no criu, runc, liburing, libmicrohttpd, jansson).
#
#   .gpu/thaw-gpu.tar.xz   one archive, unpacked there by scripts/gpu-run.sh:
#     build/               thaw, thawd, test/test_*, bench/* from `make STATIC=1`
#                          (debug info stripped; glibc is the only shared library)
#     build/lib/           libcurl and its libraries, for the tests and benches
#                          that use it (found through an RPATH of $ORIGIN/../lib)
#     .deps/criu/, .deps/criu-wrapper   the CRIU 4.2 prefix (its own glibc and loader)
#     runc/runc, runc/libseccomp.so.2   Debian 12's runc 1.1.5
#     bin/runc             wrapper that runs it with its libseccomp
#   .gpu/PACKED            what was packed: commit, date, sizes
#   .gpu/perf.tar.xz       with GPU_PACK_PERF=1: this machine's perf, its libraries
#                          and loader, and perf.sh to run them (the GPU machine has
#                          no perf; scripts/perf-put-run.sh and LAZY_PERF use it)
#
# The binaries of one static build share most of their code (libcrypto), so
# one xz stream with a large window makes them small: the device tool carries
# at most 64 MiB, the working tree included; this keeps .gpu under 60 MiB.
#
# Usage: scripts/gpu-pack.sh  (or make gpu-pack).  A test or bench that does
# not build (someone's work in progress) is left out and named; thaw, thawd and
# test_cuda must build.  GPU_PACK_STRICT=1 fails on any build error instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
S=build/static
LIMIT_MIB=60

[ -x .deps/criu-wrapper ] && [ -x .deps/criu/criu ] || scripts/deps.sh
if [ ! -x .deps/criu/criu ] || [ -L .deps/criu-wrapper ]; then
	echo "gpu-pack: .deps holds no portable CRIU prefix (a system criu is linked?)" >&2
	exit 1
fi

echo "gpu-pack: make STATIC=1 all"
if ! make --no-print-directory STATIC=1 -j2 -k all >"$S.log" 2>&1 && [ -n "${GPU_PACK_STRICT:-}" ]; then
	tail -20 "$S.log" >&2
	echo "gpu-pack: static build failed (log: $S.log)" >&2
	exit 1
fi
broken=$(grep -o "\*\*\* \[[^]]*\] [^ ]*" "$S.log" | sed 's/.*\[.*: \(.*\)\].*/\1/' | sort -u | tr '\n' ' ' || true)
[ -z "$broken" ] || echo "gpu-pack: these did not build and are not packed: $broken (log: $S.log)" >&2
need="$S/thaw $S/test/test_cuda"
[ -f server/thawd_main.c ] && need="$need $S/thawd"
for f in $need; do
	if [ ! -x "$f" ] || [ "$f" -ot $S/libthaw.a ]; then
		echo "gpu-pack: $f did not build (log: $S.log)" >&2
		exit 1
	fi
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/test" "$stage/build/bench" "$stage/build/lib" "$stage/.deps" \
	"$stage/runc" "$stage/bin"

# Only binaries at least as new as libthaw.a: a target that failed to
# rebuild leaves an old one behind, which must not travel as if it were current.
pack_bin() { # src dst
	if [ "$1" -ot $S/libthaw.a ]; then
		echo "gpu-pack: skipping stale $1" >&2
		return
	fi
	strip --strip-debug -o "$2" "$1"
}
for p in thaw thawd; do
	[ -x $S/$p ] && pack_bin $S/$p "$stage/build/$p"
done
# GPU_PACK_OLD=BINARY: a static thaw built at another commit travels as
# build/thaw-old, for A/B steps such as bench-engine-qd (made by hand:
# git worktree add DIR COMMIT && make -C DIR STATIC=1 build/static/thaw).
# libthaw-cuda.so beside thawd, where thawd looks for it (common/gpumem.h).
# Not pack_bin: it does not link libthaw.a, so it may well be older than it.
if [ -f $S/libthaw-cuda.so ]; then
	strip --strip-debug -o "$stage/build/libthaw-cuda.so" $S/libthaw-cuda.so
else
	echo "gpu-pack: $S/libthaw-cuda.so did not build (log: $S.log)" >&2
	exit 1
fi
[ -n "${GPU_PACK_OLD:-}" ] && strip --strip-debug -o "$stage/build/thaw-old" "$GPU_PACK_OLD"
for t in $S/test/test_*; do
	[ -x "$t" ] && pack_bin "$t" "$stage/build/test/$(basename "$t")"
done
for b in $S/bench/*; do
	[ -f "$b" ] && [ -x "$b" ] && pack_bin "$b" "$stage/build/bench/$(basename "$b")"
done

# Shared libraries the binaries still need beyond glibc (libcurl's closure).
glibc='^(linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so'
for f in "$stage"/build/thaw* "$stage"/build/test/* "$stage"/build/bench/*; do
	[ -f "$f" ] || continue
	ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
	[[ $name =~ $glibc ]] && continue
	cp -L "$path" "$stage/build/lib/$name"
done

cp -a .deps/criu "$stage/.deps/criu"
# The wrapper from scripts/, not .deps: a .deps made before it changed holds an old one.
cp scripts/criu-wrapper "$stage/.deps/criu-wrapper"

runc=$(command -v runc)
cp -L "$runc" "$stage/runc/runc"
seccomp=$(ldd "$runc" | awk '$1 ~ /^libseccomp/ {print $3}')
[ -n "$seccomp" ] && cp -L "$seccomp" "$stage/runc/$(basename "$seccomp")"
cat >"$stage/bin/runc" <<'WRAP'
#!/bin/sh
# Debian 12's runc with the libseccomp it was built against.  runc re-executes
# itself (runc init), which finds the library the same way.  Shell built-ins
# only (as scripts/criu-wrapper): thaw runs runc several times per start.
p=$0
[ -L "$p" ] && p=$(readlink -f "$p")
case $p in */*) ;; *) p=./$p ;; esac
d=${p%/*}/../runc
LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$d/runc" "$@"
WRAP
chmod +x "$stage/bin/runc"

rm -rf .gpu && mkdir -p .gpu
echo "gpu-pack: compressing"
tar -C "$stage" -cf - . | xz -9 -T1 >.gpu/thaw-gpu.tar.xz
{
	echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with local changes)')"
	echo "packed: $(date -u +%FT%TZ) on $(uname -n)"
	echo "unpacked: $(du -sh "$stage" | cut -f1)"
	echo "archive: $(du -sh .gpu/thaw-gpu.tar.xz | cut -f1)"
	echo "contents:"
	(cd "$stage" && find . -type f -printf '  %p %s\n' | sort)
} >.gpu/PACKED
if [ "${GPU_PACK_PERF:-0}" = 1 ]; then
	pstage=$(mktemp -d)
	mkdir -p "$pstage/lib"
	cp "$(command -v perf)" "$pstage/perf"
	ldd "$pstage/perf" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' |
		while read -r l; do cp -L "$l" "$pstage/lib/"; done
	cat >"$pstage/perf.sh" <<'PERF'
#!/bin/sh
# This perf, run through its own loader and libraries.
d=$(dirname "$(readlink -f "$0")")
exec "$d/lib/ld-linux-x86-64.so.2" --library-path "$d/lib" "$d/perf" "$@"
PERF
	chmod +x "$pstage/perf.sh"
	tar -C "$pstage" -cf - . | xz -6 -T1 >.gpu/perf.tar.xz
	rm -rf "$pstage"
	echo "gpu-pack: perf packed: $(du -sh .gpu/perf.tar.xz | cut -f1)"
fi
size=$(du -sm .gpu | cut -f1)
echo "gpu-pack: .gpu is ${size} MiB ($(grep ^unpacked .gpu/PACKED))"
if [ "$size" -gt $LIMIT_MIB ]; then
	echo "gpu-pack: .gpu is over ${LIMIT_MIB} MiB: the device tool cannot carry it" >&2
	exit 1
fi
echo "gpu-pack: done; on the GPU machine run scripts/gpu-run.sh with carry [\".gpu\"]"
