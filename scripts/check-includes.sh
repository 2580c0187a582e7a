#!/usr/bin/env bash
# The dependency rule between thaw's modules, checked on every #include.
#
# Each line of RULES names a module (a directory) and the modules its .c and
# .h files may include; a module may always include its own headers.  An
# include of any directory not listed on its line (bench/, test/, a module
# named nowhere) is forbidden too.  This table is the rule.  docs/DESIGN.md
# ("Modules and the rule between them") orders the modules in one chain,
# server, cli -> prewarm -> restore -> images -> function -> remote -> store ->
# criu -> common; the table allows only the edges the code uses of that order
# (no function -> store, no prewarm -> restore, no prewarm -> remote): widen a
# line here when one is truly needed.
RULES='
common:
interpose: common
criu:     common
store:    common criu
remote:   common store
function: common
images:   common store function
restore:  common criu store remote function images
prewarm:  common criu store function images
server:   common criu store remote function images restore prewarm
cli:      common criu store remote function images restore prewarm
'
# interpose/ is libthaw-cuda.so, loaded into functions: it may include
# common/'s headers for their constants, and links nothing of common.
# bench/ and test/ may include anything and are not checked.
#
# Usage: scripts/check-includes.sh [ROOT]   (ROOT: the tree to check, default
# the one this script is in).  Reads every .c and .h directly under the
# modules above, collects each `#include "dir/..."` edge and prints every one
# the rule forbids as FILE:LINE: from -> to ("dir/file.h"), then exits 1; 0 if
# none; 2 on a usage error or a module directory missing.
set -u
ROOT=${1:-$(dirname "$0")/..}
cd "$ROOT" || exit 2

declare -A allowed
modules=()
while read -r mod deps; do
	[ -n "$mod" ] || continue
	mod=${mod%:}
	modules+=("$mod")
	allowed[$mod]=" $mod $deps "
done <<<"$RULES"

files=()
for m in "${modules[@]}"; do
	if [ ! -d "$m" ]; then
		echo "check-includes: no directory $m/ under $PWD" >&2
		exit 2
	fi
	for f in "$m"/*.c "$m"/*.h; do
		[ -f "$f" ] && files+=("$f")
	done
done

# One awk pass over all files: FILE LINE TARGET-DIR HEADER for each
# #include "dir/..." (quoted includes with a directory; <...> are the system's).
bad=0 edges=0
while read -r file line to hdr; do
	edges=$((edges + 1))
	from=${file%%/*}
	case "${allowed[$from]}" in
	*" $to "*) ;;
	*)
		read -r -a deps <<<"${allowed[$from]# $from }"
		echo "$file:$line: forbidden include edge $from -> $to (\"$hdr\");" \
			"$from may include only: ${deps[*]:-nothing of ours}" >&2
		bad=1
		;;
	esac
done < <(awk '
	match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*\/[^"]*"/) {
		s = $0
		sub(/^[^"]*"/, "", s)
		sub(/".*$/, "", s)
		d = s
		sub(/\/.*$/, "", d)
		print FILENAME, FNR, d, s
	}' "${files[@]}")

if [ $bad = 0 ]; then
	echo "check-includes: ${#files[@]} files, $edges include edges, all within the rule"
fi
exit $bad
