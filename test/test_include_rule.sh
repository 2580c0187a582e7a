#!/usr/bin/env bash
# scripts/check-includes.sh: the real tree keeps the module rule, and a copy of
# it with one forbidden include added fails, naming the file, the line and the
# edge.
set -u
ROOT=${THAW_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
CHECK=$ROOT/scripts/check-includes.sh
command -v awk >/dev/null || { echo "no awk"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. the tree as it is: exit 0
out=$("$CHECK" "$ROOT" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || bad "the real tree breaks the rule (exit $rc)"

# A copy of the module directories only (what the checker reads): every
# module its RULES table names, so that a new module needs no edit here.
MODULES=$(awk '/^RULES=/ { on = 1; next } on && /^'"'"'/ { exit } on && NF { sub(":", "", $1); print $1 }' "$CHECK")
copy() {
	rm -rf "$tmp/tree"
	mkdir -p "$tmp/tree"
	for d in $MODULES; do
		cp -r "$ROOT/$d" "$tmp/tree/$d"
	done
}

# expect_fail FILE LINE-TEXT EDGE: append LINE-TEXT to FILE in a fresh copy;
# the checker must exit 1 and name FILE:<its last line> and EDGE.
expect_fail() {
	local file=$1 text=$2 edge=$3 n out rc
	copy
	echo "$text" >>"$tmp/tree/$file"
	n=$(wc -l <"$tmp/tree/$file")
	out=$("$CHECK" "$tmp/tree" 2>&1); rc=$?
	echo "$out"
	[ $rc = 1 ] || bad "$file with '$text': exit $rc, not 1"
	echo "$out" | grep -q "^$file:$n: forbidden include edge $edge " ||
		bad "$file with '$text': no line naming $file:$n and $edge"
	[ "$(echo "$out" | grep -c 'forbidden include edge')" = 1 ] ||
		bad "$file with '$text': not exactly one forbidden edge reported"
}

# 2. store/ may use only common/
expect_fail store/chunk.c '#include "server/server.h"' 'store -> server'
# 3. the edge this rule was made against: restore -> prewarm
expect_fail restore/instance.c '#include "prewarm/prewarm.h"' 'restore -> prewarm'
# 3b. the image cache serves both paths and includes neither
expect_fail images/image.c '#include "prewarm/prewarm.h"' 'images -> prewarm'
# 4. common/ uses nothing of ours, not even through a header; spaces after '#'
expect_fail common/util.h '#  include "store/store.h"' 'common -> store'
# 5. cli and server never include each other
expect_fail cli/thaw.c '#include "server/internal.h"' 'cli -> server'
# 6. no library module includes test/ or bench/
expect_fail function/spec.c '#include "test/check.h"' 'function -> test'

# 7. the remote tier sits on the store, never under it; prewarm/ does not use it
expect_fail store/store.c '#include "remote/remote.h"' 'store -> remote'
expect_fail prewarm/prewarm.c '#include "remote/remote.h"' 'prewarm -> remote'

# 8. an allowed edge added still passes
copy
echo '#include "function/spec.h"' >>"$tmp/tree/restore/engine.c"
"$CHECK" "$tmp/tree" >/dev/null 2>&1 || bad "an allowed edge restore -> function was refused"

[ $fail = 0 ] && echo "include rule: ok"
exit $fail
