# test/lib/free_port.sh — free_port: prints a TCP port of 127.0.0.1 that
# nothing is bound to now, chosen at random below the kernel's ephemeral
# range (net.ipv4.ip_local_port_range), so that the connections other tests
# make meanwhile (scripts/run-tests.sh runs tests side by side) never take
# it as their local port.  For a server the test starts outside thawd, which
# gives its own listeners port 0.
free_port() {
	python3 - <<'PY'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
hi = max(lo, 10001)
for _ in range(500):
    p = random.randrange(10000, hi)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    raise SystemExit("free_port: no free port below %d" % hi)
PY
}
