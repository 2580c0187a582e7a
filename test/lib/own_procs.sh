# test/lib/own_procs.sh — own_procs: the processes an end-to-end test made,
# "pid cmdline" a line: those rooted in $T (containers) or naming $T or, if
# set, $SHM (shims, runc, CRIU, helpers).  thawd's server process (the child
# of the thawd the test started, $THAWD_PID: server/exits.h) is not listed:
# it goes with that thawd; the test excludes $THAWD_PID itself where it
# means to.
own_procs() {
	local p r cmd pid
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[ "$pid" = "$$" ] && continue
		r=$(readlink "$p/root" 2>/dev/null) || continue
		cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
		if [ -n "${THAWD_PID:-}" ] && [ "$(cat "$p/comm" 2>/dev/null)" = thawd ] &&
			[ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" = "$THAWD_PID" ]; then
			continue
		fi
		case "$r" in "$T"/*) echo "$pid $cmd"; continue ;; esac
		case "$cmd" in *"$T"*) echo "$pid $cmd"; continue ;; esac
		[ -n "${SHM:-}" ] && case "$cmd" in *"$SHM"*) echo "$pid $cmd" ;; esac
	done
}
