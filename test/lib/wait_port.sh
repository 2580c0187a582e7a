# test/lib/wait_port.sh — wait_port FILE [PID]: wait until a thawd started
# with --port-file FILE has written its port; 0 once it has, 1 if it never
# did.  While PID (if given) lives it waits up to 120 s: a start-up recovers
# what an earlier run left (containers, mounts, the store's gc, the tier),
# and on a 2-core machine shared with other tests that took more than the
# 10 s a fixed loop gave it.  A thawd that exits ends the wait at once.
wait_port() {
	local file=$1 pid=${2:-} end=$((SECONDS + 120)) pause=0.02
	until [ -s "$file" ]; do
		[ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
		[ $SECONDS -lt $end ] || return 1
		sleep $pause
		case $pause in 0.02) pause=0.05 ;; 0.05) pause=0.1 ;; esac
	done
}
