# test/lib/own_procs.sh — own_procs: the processes an end-to-end test made,
# "pid cmdline" a line: those rooted in $T (containers) or naming $T or, if
# set, $SHM (shims, runc, CRIU, helpers).  thawd's server process (the child
# of the thawd the test started, $THAWD_PID: server/exits.h) is not listed:
# it goes with that thawd; the test excludes $THAWD_PID itself where it
# means to.
#
# One python3 for the whole of /proc, not a readlink, tr, cat and awk for
# each process: a process costs ~10 ms of CPU to start on the machines the
# tests run on, and a test that waits for its processes to go calls this in
# a loop.  Neither the shell ($$) nor that python3 (whose arguments name $T)
# is listed.  python3 -S: it needs no site-packages, and starts in half the
# time without them.
own_procs() {
	python3 -S - "$$" "$T" "${SHM:-}" "${THAWD_PID:-}" <<'EOF'
import os, sys

shell, t, shm, thawd = sys.argv[1:5]
me = str(os.getpid())


def read(pid, name):
    try:
        with open("/proc/%s/%s" % (pid, name), "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    if pid in (shell, me):
        continue
    try:
        root = os.readlink("/proc/%s/root" % pid)
    except OSError:
        continue
    cmd = read(pid, "cmdline").replace("\0", " ")
    if thawd and read(pid, "comm").strip() == "thawd":
        ppid = [l.split()[1] for l in read(pid, "status").splitlines() if l.startswith("PPid:")]
        if ppid == [thawd]:
            continue
    if root.startswith(t + "/") or t in cmd or (shm and shm in cmd):
        print(pid, cmd)
EOF
}
