#!/usr/bin/env bash
# Install what thaw needs on a Debian 12 machine, only what is missing:
#   - apt packages (build tools, libraries, runc);
#   - a CRIU >= 4.2 prefix in .deps/criu (Debian 12's criu 3.17 does not start on
#     6.x kernels), downloaded from Debian testing through a private apt
#     configuration: the machine's apt sources are never edited.
# A system criu >= 4.2 is used instead where there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.deps

APT_PKGS="build-essential pkg-config clang libclang-rt-14-dev liburing-dev libzstd-dev
 libjansson-dev libmicrohttpd-dev libssl-dev libcurl4-openssl-dev libxxhash-dev zstd runc python3
 libgnutls28-dev libgmp-dev libidn2-dev libunistring-dev libp11-kit-dev libtasn1-6-dev
 nettle-dev libffi-dev clang-tidy cppcheck curl hey
 ceph-mon ceph-osd radosgw skopeo umoci busybox-static haproxy"
# ceph-mon ceph-osd radosgw: the tests' S3 server (test/lib/ceph_rgw.sh), started
# by hand under a temporary directory; no systemd unit of theirs is used.
# skopeo, umoci: a spec's "image" is copied and unpacked with them
# (images/image.c); busybox-static: the tests build an image from it.
# haproxy: the load balancer before a fleet (deploy/haproxy), run by hand by
# test/e2e_fleet_lb.sh and bench/fleet-run.sh; its systemd unit is not used.

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

missing=""
for p in $APT_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "deps: installing:$missing"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

criu_ok() { # $1: a command that runs criu; true if it is >= 4.2
	local v
	v=$($1 --version 2>/dev/null | awk '/^Version:/ {print $2}') || return 1
	[ -n "$v" ] || return 1
	[ "$(printf '4.2\n%s\n' "$v" | sort -V | head -1)" = 4.2 ]
}

mkdir -p "$DEPS"
if command -v criu >/dev/null && criu_ok criu; then
	ln -sfn "$(command -v criu)" "$DEPS/criu-wrapper"
	echo "deps: using system criu $(criu --version | awk '/^Version:/ {print $2}')"
	exit 0
fi

PFX=$DEPS/criu
if [ ! -x "$PFX/criu" ] || ! criu_ok "$DEPS/criu-wrapper"; then
	echo "deps: fetching criu 4.2 and its libraries from Debian testing into $PFX"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs" "$tmp/x"
	echo "deb http://deb.debian.org/debian testing main" >"$tmp/sources.list"
	O="-o Dir::Etc::sourcelist=$tmp/sources.list -o Dir::Etc::sourceparts=- \
	   -o Dir::State::Lists=$tmp/lists -o Dir::Cache=$tmp/cache -o APT::Get::List-Cleanup=0 \
	   -o APT::Sandbox::User=root"
	apt-get $O update -qq
	(cd "$tmp/debs" && apt-get $O download -qq criu libc6 libbsd0 libgnutls30t64 libnet9 \
		libnftables1 libnl-3-200 libprotobuf-c1 libuuid1 libcompel1 libnftnl11 libmnl0 \
		libxtables12 libjansson4 libgmp10 libmd0 libp11-kit0 libidn2-0 libunistring5 \
		libtasn1-6 libnettle8t64 libhogweed6t64 libffi8 libedit2 libtinfo6)
	for f in "$tmp"/debs/*.deb; do dpkg -x "$f" "$tmp/x"; done
	rm -rf "$PFX.new" && mkdir -p "$PFX.new/lib"
	cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/*.so* "$PFX.new/lib/"
	cp "$tmp/x/usr/sbin/criu" "$PFX.new/criu"
	rm -rf "$PFX" && mv "$PFX.new" "$PFX"
fi

# runc is pointed at the wrapper (runc --criu WRAPPER); scripts/criu-wrapper
# says what it does.  Installed every time, so that `make deps` updates it.
cp scripts/criu-wrapper "$DEPS/criu-wrapper.new"
chmod +x "$DEPS/criu-wrapper.new"
mv "$DEPS/criu-wrapper.new" "$DEPS/criu-wrapper"
echo "deps: criu $("$DEPS/criu-wrapper" --version | awk '/^Version:/ {print $2}') at $DEPS/criu-wrapper"
