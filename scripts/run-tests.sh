#!/usr/bin/env bash
# Run every test: each program $B/test/test_*, each script test/*.sh, each
# fuzzer build/fuzz/fuzz_* for a short fixed time.  A test exits 0 (pass),
# 77 (skip: e.g. no GPU) or anything else (fail); each runs under a timeout.
# Prints a PASS/FAIL/SKIP line per test as it ends and, last, the line
# "N passed, N failed, N skipped".
#
# Tests run side by side, JOBS at a time (default: the CPUs + 1: most of an
# end-to-end test's time is spent waiting on CRIU's I/O, a function's boot or
# a sleep).  The tests that cannot share the machine are named in ALONE and
# LOCKS below, each with why; every other test must keep to its own
# resources (a mktemp directory and RAM tier, ports from the kernel, ids
# with its pid), as test/lib/thawd_e2e.sh gives them.  JOBS=1 runs one at a
# time.
#
# TESTS="word ..." runs only the tests whose name contains one of the words
# (`TESTS=store make test`, `TESTS="e2e_logs umask" make test`); it says how
# many match, and fails when none does.
# LINT=command (the Makefile's `make test` sets it) runs that command as a
# job of its own named "lint", beside the tests that share the machine.
# A test's log is $B/test-logs/NAME.log; the times of the last run are kept
# in $B/test-logs/times ("name wall-seconds cpu-seconds" a line), and the
# next run starts the longest tests first.  A test's CPU time (its
# processes', the thawd, daemons and containers it started included) is
# counted where a cpuacct cgroup can be made; "-" elsewhere.  The last line
# before the summary says how busy the machine was over the run.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
# Each fuzzer runs its corpus (test/fuzz/corpus/: the inputs that found bugs
# and what grew from them), then new inputs, FUZZ_SECONDS in all: a
# regression run.  Fuzzing at length is a run of its own
# (FUZZ_SECONDS=3600 TESTS=fuzz make test).
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
LOGDIR=$B/test-logs
export THAW_BUILD=$PWD/$B THAW_ROOT=$PWD
# The tests' functions live in their own temporary directories: allow those
# (thawd and thaw snapshot refuse a function's directory elsewhere), as an
# operator would with THAW_ALLOW_ROOTS.  test/e2e_gateway.sh checks the refusal.
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:-/tmp:/var/tmp:$PWD}

# python3 itself, not a version manager's shim: pyenv's costs over half a
# second a call, most of it in forks, and the tests call python3 thousands
# of times (jget, fixtures, functions booting).  A directory of its own on
# PATH holds a link to the interpreter the shim would run.
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -x "$py" ] && [ "$(command -v python3)" != "$py" ] && mkdir -p "$LOGDIR/bin" &&
	ln -sf "$py" "$LOGDIR/bin/python3"; then
	PATH=$(cd "$LOGDIR/bin" && pwd):$PATH
fi

# Tests that run with no other test beside them, after all the others: they
# hold time to a bound (a latency, a stop within a window, a start within a
# timeout) that a machine busy with other tests would break.  (Lint, at
# nice 19, may still run beside them: it takes only what they leave.)
#   e2e_server_healthz: /healthz while starts run;
#   e2e_gateway: /healthz while slow clients hold connections;
#   e2e_idle_bench: thaw-bench's idle stops on time (2-4 s after a use);
#   test_thaw_bench: a fake thawd's good starts under 1 s, slow ones timed out.
ALONE=" e2e_server_healthz e2e_gateway e2e_idle_bench test_thaw_bench "
# Tests that take a named lock: never two of one lock at once.
#   ceph: a Ceph cluster each (test/lib/ceph_rgw.sh: a monitor, an OSD whose
#     memstore holds up to 4 GiB, radosgw): memory and most of a core.
#   lazy: thaw's lazy-pages daemons share the machine's copy slots (a System V
#     semaphore, restore/lazy_pages.c); e2e_lazy checks that every slot is
#     free once its daemons are gone, which a daemon of another test breaks.
declare -A LOCKS=(
	[test_s3_rgw]=ceph [e2e_remote]=ceph [e2e_fleet]=ceph [e2e_fleet_image]=ceph
	[e2e_fallback_remote]=ceph
	[e2e_lazy]=lazy [e2e_lazy_mm]=lazy [e2e_mapped]=lazy [e2e_sparse]=lazy
	[e2e_sparse_lazy]=lazy [e2e_private]=lazy
)

# matches NAME: NAME contains one of TESTS's words (all match when it is empty).
matches() {
	local w
	[ -n "${TESTS:-}" ] || return 0
	for w in $TESTS; do
		case "$1" in *"$w"*) return 0 ;; esac
	done
	return 1
}

# Every test, "name limit kind path" a line: its timeout in seconds and how
# it is run (prog, sh or fuzz).
all_tests() {
	local t
	for t in "$B"/test/test_*; do [ -x "$t" ] && echo "$(basename "$t") 600 prog $t"; done
	for t in test/*.sh; do [ -f "$t" ] && echo "$(basename "$t" .sh) 1200 sh $t"; done
	for t in build/fuzz/fuzz_*; do
		[ -x "$t" ] && echo "$(basename "$t") $((FUZZ_SECONDS + 60)) fuzz $t"
	done
	return 0
}
total=0
names=() limits=() kinds=() paths=()
while read -r n l k p; do
	[ -n "$n" ] || continue
	total=$((total + 1))
	matches "$n" || continue
	names+=("$n") limits+=("$l") kinds+=("$k") paths+=("$p")
done < <(all_tests)
matched=${#names[@]}
if [ -n "${TESTS:-}" ]; then
	echo "TESTS=$TESTS: $matched of $total tests match"
	if [ "$matched" = 0 ]; then
		echo "no test name contains any of '$TESTS'"
		echo "0 passed, 0 failed, 0 skipped"
		exit 1
	fi
fi
mkdir -p "$LOGDIR"
JOBS=${JOBS:-$(($(nproc 2>/dev/null || echo 1) + 1))}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
[ -n "${TESTS:-}" ] || echo "$total tests, $JOBS at a time"

# The order: the longest first, so that no long test starts last: by the
# last run's times; where this build has none (a fresh clone, as CI's),
# by test/durations (a full run's times, kept in the tree for that); a
# test in neither by its kind (a script is long, a program short, a fuzzer
# FUZZ_SECONDS).
declare -A last
for f in test/durations "$LOGDIR/times"; do
	[ -f "$f" ] || continue
	while read -r n s _; do
		case $n in '' | '#'*) continue ;; esac
		last[$n]=$s
	done <"$f"
done
order=$(for i in "${!names[@]}"; do
	n=${names[$i]}
	case ${kinds[$i]} in
	sh) guess=300 ;;
	fuzz) guess=$FUZZ_SECONDS ;;
	*) guess=10 ;;
	esac
	echo "${last[$n]:-$guess} $i"
done | sort -s -rn -k1,1 | awk '{ print $2 }')
shared=() alone=()
for i in $order; do
	case "$ALONE" in *" ${names[$i]} "*) alone+=("$i") ;; *) shared+=("$i") ;; esac
done

pass=0 fail=0 skip=0 failed=""
declare -A running=() started=() held=() background=()
: >"$LOGDIR/times.new"

# A cpuacct cgroup a test, under one of this run's, where the machine has
# cgroup v1's cpuacct and lets us write it (root).  A container a test
# starts lands in its cgroup too: runc makes a relative cgroupsPath
# (thaw/<instance>) under its own cgroup.
CGROOT=/sys/fs/cgroup/cpuacct/thaw-tests.$$
if mkdir "$CGROOT" 2>/dev/null; then
	trap 'cg_remove "$CGROOT"' EXIT
else
	CGROOT=""
fi
# cg_cpu N: "cpu-seconds sys-seconds" of test N's cgroup, or "- -".
cg_cpu() {
	local u s
	if [ -n "$CGROOT" ] && read -r u <"$CGROOT/$1/cpuacct.usage_user" &&
		read -r s <"$CGROOT/$1/cpuacct.usage_sys"; then
		echo "$(((u + s) / 1000000000)) $((s / 1000000000))"
	else
		echo "- -"
	fi 2>/dev/null
}
# cg_remove DIR: it and the cgroups below it, emptied as tests end (a
# directory a process is still in stays: rmdir refuses it).
cg_remove() { [ -d "$1" ] && find "$1" -depth -type d -exec rmdir {} + 2>/dev/null; return 0; }
# cpu_busy: "user-seconds sys-seconds idle-seconds" of the whole machine
# since boot, from /proc/stat (USER_HZ ticks; iowait counted as idle).
cpu_busy() {
	local hz
	hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
	awk -v hz="$hz" '$1 == "cpu" { printf "%d %d %d\n", ($2 + $3) / hz, ($4 + $7 + $8) / hz, ($5 + $6) / hz }' /proc/stat
}
read -r busy_user0 busy_sys0 busy_idle0 < <(cpu_busy)

# start I: run test I in the background (its own process group, so that a
# timeout's kill reaches what it started).
start() {
	local i=$1 n=${names[$1]} pid
	case ${kinds[$i]} in
	prog) set -- "${paths[$i]}" ;;
	sh) set -- bash "${paths[$i]}" ;;
	fuzz)
		local corpus=test/fuzz/corpus/${n#fuzz_} work
		work=$(mktemp -d)
		[ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null
		# A crash's input goes to the logs, not into the tree (libFuzzer
		# writes crash-* into its working directory otherwise).  A crash
		# exits 1: libFuzzer's own default, 77, is this runner's "skip".
		set -- sh -c '"$@"; rc=$?; rm -rf "$0"; exit $rc' "$work" "${paths[$i]}" \
			-max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
			-error_exitcode=1 -artifact_prefix="$LOGDIR/$n-" "$work"
		;;
	# Lint at the lowest priority: it is all CPU, the tests beside it
	# mostly wait, and one that wakes to a deadline should find the CPU
	# free; lint takes what they leave.
	lint) set -- nice -n 19 sh -c "$LINT" ;;
	esac
	set -- timeout -k 10 "${limits[$i]}" "$@"
	# shellcheck disable=SC2016 # $$ and $0 are the inner shell's
	[ -n "$CGROOT" ] && mkdir "$CGROOT/$n" 2>/dev/null &&
		set -- sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CGROOT/$n" "$@"
	"$@" >"$LOGDIR/$n.log" 2>&1 </dev/null &
	pid=$!
	running[$pid]=$i
	started[$pid]=$SECONDS
	[ -n "${LOCKS[$n]:-}" ] && held[${LOCKS[$n]}]=$n
	return 0
}

# reap: wait for any test to end and report it.
reap() {
	local pid rc i n t cpu sys
	wait -n -p pid
	rc=$?
	[ -n "${pid:-}" ] && [ -n "${running[$pid]:-}" ] || return 0
	i=${running[$pid]}
	n=${names[$i]}
	t=$((SECONDS - ${started[$pid]}))
	read -r cpu sys < <(cg_cpu "$n")
	[ -n "$CGROOT" ] && cg_remove "$CGROOT/$n"
	unset "running[$pid]" "started[$pid]" "background[$pid]"
	[ -n "${LOCKS[$n]:-}" ] && unset "held[${LOCKS[$n]}]"
	[ "${kinds[$i]}" = lint ] || echo "$n $t $cpu" >>"$LOGDIR/times.new"
	if [ $rc = 0 ]; then
		pass=$((pass + 1))
		printf 'PASS %-40s %4ds  cpu %4ss (sys %ss)\n' "$n" "$t" "$cpu" "$sys"
	elif [ $rc = 77 ]; then
		skip=$((skip + 1))
		printf 'SKIP %-40s %s\n' "$n" "$(tail -n1 "$LOGDIR/$n.log")"
	else
		fail=$((fail + 1))
		failed="$failed $n"
		[ $rc = 124 ] && echo "(timed out after ${limits[$i]}s)" >>"$LOGDIR/$n.log"
		printf 'FAIL %-40s %4ds  cpu %4ss (sys %ss) (exit %d)\n' "$n" "$t" "$cpu" "$sys" "$rc"
		# The checks that failed first (a tail of thawd's log, printed by
		# the test after them, would hide them), then the log's end.
		grep -E -m 8 '^FAIL|^[^ ]+:[0-9]+: in ' "$LOGDIR/$n.log" | cut -c 1-400 | sed 's/^/     ! /'
		tail -n 20 "$LOGDIR/$n.log" | sed 's/^/     | /'
	fi
}

# run_all JOBS INDEX...: run those tests, at most JOBS at a time, a test of a
# lock only while no other test holds it; in the order given, but a test
# that must wait for a lock lets the next ones by.  A background job (lint)
# takes no place and is not waited for.
run_all() {
	local jobs=$1 i k lock
	shift
	local queue=("$@")
	while [ ${#queue[@]} -gt 0 ] || [ $((${#running[@]} - ${#background[@]})) -gt 0 ]; do
		while [ $((${#running[@]} - ${#background[@]})) -lt "$jobs" ]; do
			k=""
			for j in "${!queue[@]}"; do
				i=${queue[$j]}
				lock=${LOCKS[${names[$i]}]:-}
				if [ -z "$lock" ] || [ -z "${held[$lock]:-}" ]; then
					k=$j
					break
				fi
			done
			[ -n "$k" ] || break
			start "${queue[$k]}"
			unset "queue[$k]"
			queue=("${queue[@]}")
		done
		[ $((${#running[@]} - ${#background[@]})) -gt 0 ] && reap
	done
}

# Lint, when asked for, first and in the background: beside the tests, in
# no test's place (it is all CPU at nice 19 and takes what the tests leave),
# and on, if it must, while the tests that run alone run; then waited for.
if [ -n "${LINT:-}" ]; then
	names+=(lint) limits+=(3600) kinds+=(lint) paths+=("")
	start "$((${#names[@]} - 1))"
	background[$!]=1
fi
run_all "$JOBS" "${shared[@]}"
run_all 1 "${alone[@]}"
while [ ${#running[@]} -gt 0 ]; do reap; done

# The times of this run, for the next one's order (those not run kept).
if [ -f "$LOGDIR/times" ]; then
	awk 'NR == FNR { seen[$1] = 1; print; next } !($1 in seen)' \
		"$LOGDIR/times.new" "$LOGDIR/times" >"$LOGDIR/times.tmp" &&
		mv "$LOGDIR/times.tmp" "$LOGDIR/times"
else
	mv "$LOGDIR/times.new" "$LOGDIR/times"
fi
rm -f "$LOGDIR/times.new"

read -r busy_user busy_sys busy_idle < <(cpu_busy)
echo "the machine over the run: user $((busy_user - busy_user0)) s, sys $((busy_sys - busy_sys0)) s," \
	"idle $((busy_idle - busy_idle0)) s, $SECONDS s of wall on $(nproc) CPUs"
[ -n "$failed" ] && echo "failed:$failed (logs in $LOGDIR/)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
