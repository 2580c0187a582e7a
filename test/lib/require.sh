# test/lib/require.sh — what the end-to-end tests that run containers need.
# Sourced first, before the test makes anything, with ROOT (the tree) and
# THAW (the thaw binary) set.
#
# require_restore_tools [uffd]: skip (exit 77) without root, runc, curl or
# CRIU >= 4.2 (.deps/criu-wrapper, or $THAW_CRIU); fail (exit 1) without the
# thaw binary; with uffd, also skip where CRIU cannot use userfaultfd (lazy
# restores).  Sets CRIU.
skip() { echo "skipped: $*"; exit 77; }

require_restore_tools() {
	[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU, namespaces)"
	command -v runc >/dev/null || skip "no runc"
	command -v curl >/dev/null || skip "no curl"
	[ -x "$ROOT/.deps/criu-wrapper" ] || [ -n "${THAW_CRIU:-}" ] || skip "no CRIU 4.2 (make deps)"
	[ -x "$THAW" ] || { echo "no $THAW (make all)"; exit 1; }
	CRIU=${THAW_CRIU:-$ROOT/.deps/criu-wrapper}
	[ "${1:-}" != uffd ] || "$CRIU" check --feature uffd-noncoop >/dev/null 2>&1 ||
		skip "no userfaultfd for CRIU (criu check --feature uffd-noncoop)"
}

# require_image_tools: skip without skopeo, umoci, python3 or a static
# busybox (the image the tests build has nothing else).  Sets BUSYBOX.
require_image_tools() {
	local t
	for t in skopeo umoci python3; do command -v $t >/dev/null || skip "no $t (make deps)"; done
	BUSYBOX=$(command -v busybox) || skip "no busybox (busybox-static: make deps)"
	file -L "$BUSYBOX" 2>/dev/null | grep -q "statically linked" ||
		ldd "$BUSYBOX" 2>&1 | grep -q "not a dynamic" || skip "busybox is not static (busybox-static)"
}
