#!/usr/bin/env bash
# scripts/changed-sources.sh — the C sources that a change in the work tree
# touches, one a line: those git says changed against HEAD (modified, staged
# or new) and those that include a changed header.  `make lint-changed` (what
# `TESTS=word make test` runs) lints these and nothing else.
set -u
cd "$(dirname "$0")/.." || exit 1
dirs="common criu store remote function images restore prewarm server cli interpose bench test"
# shellcheck disable=SC2086 # $dirs: one pathspec a word
git status --porcelain --untracked-files=all -- $dirs 2>/dev/null |
	sed -e 's/^...//' -e 's/.* -> //' |
	while read -r f; do
		case $f in
		*.c) [ -f "$f" ] && echo "$f" ;;
		*.h) grep -rlF --include='*.c' "#include \"$f\"" $dirs ;;
		esac
	done | sort -u
