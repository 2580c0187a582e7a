#!/usr/bin/env bash
# Run every test: each program $B/test/test_*, each script test/*.sh, each
# fuzzer build/fuzz/fuzz_* for a short fixed time.  A test exits 0 (pass),
# 77 (skip: e.g. no GPU) or anything else (fail); each runs under a timeout.
# Ends with the line "N passed, N failed, N skipped".
# TESTS=word runs only the tests whose name contains word (`TESTS=store make
# test`); it says how many match, and fails when none does.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
LOGDIR=$B/test-logs
mkdir -p "$LOGDIR"
export THAW_BUILD=$PWD/$B THAW_ROOT=$PWD
# The tests' functions live in their own temporary directories: allow those
# (thawd and thaw snapshot refuse a function's directory elsewhere), as an
# operator would with THAW_ALLOW_ROOTS.  test/e2e_gateway.sh checks the refusal.
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:-/tmp:/var/tmp:$PWD}
pass=0 fail=0 skip=0 failed=""

matches() { case "$1" in *${TESTS:-}*) return 0 ;; esac; return 1; }

# Every test's name, as run_one below gets it.
all_names() {
	local t
	for t in "$B"/test/test_*; do [ -x "$t" ] && basename "$t"; done
	for t in test/*.sh; do [ -f "$t" ] && basename "$t" .sh; done
	for t in build/fuzz/fuzz_*; do [ -x "$t" ] && basename "$t"; done
	return 0
}
total=0 matched=0
while read -r n; do
	[ -n "$n" ] || continue
	total=$((total + 1))
	matches "$n" && matched=$((matched + 1))
done < <(all_names)
if [ -n "${TESTS:-}" ]; then
	echo "TESTS=$TESTS: $matched of $total tests match"
	if [ $matched = 0 ]; then
		echo "no test name contains '$TESTS'"
		echo "0 passed, 0 failed, 0 skipped"
		exit 1
	fi
else
	echo "$total tests"
fi

run_one() { # name timeout cmd...
	local name=$1 limit=$2; shift 2
	matches "$name" || return
	local start=$SECONDS rc
	timeout -k 10 "$limit" "$@" >"$LOGDIR/$name.log" 2>&1
	rc=$?
	local t=$((SECONDS - start))
	if [ $rc = 0 ]; then
		pass=$((pass + 1)); printf 'PASS %-40s %4ds\n' "$name" "$t"
	elif [ $rc = 77 ]; then
		skip=$((skip + 1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n1 "$LOGDIR/$name.log")"
	else
		fail=$((fail + 1)); failed="$failed $name"
		[ $rc = 124 ] && echo "(timed out after ${limit}s)" >>"$LOGDIR/$name.log"
		printf 'FAIL %-40s %4ds (exit %d)\n' "$name" "$t" "$rc"
		tail -n 30 "$LOGDIR/$name.log" | sed 's/^/     | /'
	fi
}

for t in "$B"/test/test_*; do
	[ -x "$t" ] || continue
	run_one "$(basename "$t")" 600 "$t"
done
for t in test/*.sh; do
	[ -f "$t" ] || continue
	run_one "$(basename "$t" .sh)" 1200 bash "$t"
done
for f in build/fuzz/fuzz_*; do
	[ -x "$f" ] || continue
	n=$(basename "$f")
	corpus=test/fuzz/corpus/${n#fuzz_}
	work=$(mktemp -d)
	[ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null
	# A crash's input goes to the logs, not into the tree (libFuzzer writes
	# crash-* into its working directory otherwise).
	run_one "$n" $((FUZZ_SECONDS + 60)) "$f" -max_total_time="$FUZZ_SECONDS" \
		-rss_limit_mb=2048 -timeout=10 -artifact_prefix="$LOGDIR/$n-" "$work"
	rm -rf "$work"
done

[ -n "$failed" ] && echo "failed:$failed (logs in $LOGDIR/)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
