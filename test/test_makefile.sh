#!/usr/bin/env bash
# The Makefile's habits: `make help` names every .PHONY target; the
# environment's TESTS (run-tests.sh's filter) reaches the test run unchanged;
# run-tests.sh says how many tests match and fails when none does; an object
# is rebuilt when a header it includes changes, and only then.
set -u
ROOT=${THAW_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 1
command -v make >/dev/null || { echo "no make"; exit 77; }
# Not the jobserver or flags of a make that runs this test.
unset MAKEFLAGS MFLAGS MAKELEVEL
fail=0
bad() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The make runs of 1 and 2 get a build directory of their own: the Makefile
# records its flags in $(B)/.cflags as it reads itself, and these runs'
# flags (no DEVELOPER=1) written into the tree's build would make every
# object stale for the next build, and for make lint beside this test.
SCRATCH_B=$tmp/b

# 1. make help lists every .PHONY target
help=$(make --no-print-directory B="$SCRATCH_B" help) || bad "make help failed"
echo "$help"
phony=$(sed -n 's/^\.PHONY:[[:space:]]*//p' Makefile)
[ -n "$phony" ] || bad "no .PHONY line in the Makefile"
for t in $phony; do
	echo "$help" | grep -Eq "(^|[ ,])make $t( |,|$)" || bad "make help does not list '$t'"
done

# 2. TESTS from the environment (or make's command line) reaches a recipe as
# it was, not as some variable of the Makefile's
# shellcheck disable=SC2016 # $$TESTS is for make, then the shell it runs
probe='print-tests-filter: ; @echo "$$TESTS"'
got=$(TESTS=store make --no-print-directory B="$SCRATCH_B" --eval "$probe" print-tests-filter)
[ "$got" = store ] || bad "TESTS=store reached the recipe as '$got'"
got=$(make --no-print-directory B="$SCRATCH_B" TESTS=store --eval "$probe" print-tests-filter)
[ "$got" = store ] || bad "make TESTS=store: the recipe saw '$got'"

# 3. run-tests.sh: a filter that matches nothing fails and says so
out=$(TESTS=no-test-has-this-name B=${THAW_BUILD:-build} scripts/run-tests.sh 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] || bad "a filter matching no test exited $rc, not 1"
echo "$out" | grep -q "0 of [0-9]* tests match" || bad "no count of matching tests"
[ "$(echo "$out" | tail -n1)" = "0 passed, 0 failed, 0 skipped" ] || bad "no summary line last"

# 4. dependency files: in a scratch build directory, a header's change
# rebuilds exactly the objects that include it.
mkdir -p "$tmp/src/common" "$tmp/src/store"
cp Makefile "$tmp/src/"
cat >"$tmp/src/common/a.h" <<'H'
#define A 1
H
cat >"$tmp/src/common/a.c" <<'C'
#include "common/a.h"
int a(void) { return A; }
C
cat >"$tmp/src/store/b.c" <<'C'
int b(void) { return 2; }
C
build() { make --no-print-directory -C "$tmp/src" build/libthaw.a 2>&1; }
out=$(build) || bad "the scratch library did not build: $out"
[ -f "$tmp/src/build/obj/common/a.d" ] || bad "no dependency file build/obj/common/a.d"
out=$(build)
echo "$out" | grep -q -- ' -c ' && bad "an up-to-date build compiled again: $out"
sleep 1
touch "$tmp/src/common/a.h"
out=$(build)
echo "$out" | grep -q -- '-c -o build/obj/common/a.o' || bad "a.h changed, a.o not rebuilt: $out"
echo "$out" | grep -q -- '-c -o build/obj/store/b.o' && bad "a.h changed, b.o rebuilt too: $out"
# A header that goes away (moved) does not break the build (-MP).
sed -i 's|#include "common/a.h"|#define A 3|' "$tmp/src/common/a.c"
rm "$tmp/src/common/a.h"
out=$(build) || bad "a removed header broke the build: $out"
# A change of flags rebuilds everything (build/.cflags).
out=$(make --no-print-directory -C "$tmp/src" O=1 build/libthaw.a 2>&1)
echo "$out" | grep -q -- '-O1 .*-c -o build/obj/store/b.o' || bad "O=1 did not rebuild b.o: $out"

[ $fail = 0 ] && echo "makefile: ok"
exit $fail
