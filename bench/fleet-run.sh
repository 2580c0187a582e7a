#!/usr/bin/env bash
# fleet-run.sh — a fleet of three thawds behind HAProxy, consistent hashing of
# the function id against round robin, in one run (docs/DESIGN.md, "A fleet
# behind a load balancer"):
#
#   bench/fleet-run.sh [OUTDIR] [FUNCS] [ROUNDS]
#
# The fleet is test/e2e_fleet_lb.sh's (test/lib/fleet_lb.sh): three thawds in
# network namespaces, each with its own data directory and a RAM tier of
# FLEET_TIER_BYTES (default 192M), one Ceph RGW as the remote, HAProxy running
# deploy/haproxy/haproxy.cfg as shipped (hash) and, on a second port, the same
# backend with "balance roundrobin" (rr).  FUNCS (default 6) functions, the CPU
# example (bench/functions/cpu_example.py) with FLEET_MIB MiB of state (default
# 48; "idle_s": 1, "concurrency": 4), are snapshotted on one host and pushed.
# Then, for each policy, on fresh hosts (empty data directories and tiers: every
# host learns the functions from the remote): ROUNDS (default 5) rounds, each a
# burst of BURST (default 4) concurrent requests to every function in turn
# (the same seeded order for both), then a wait until every instance has
# stopped (idle), so that each burst needs a start somewhere.  Reported per
# policy: answers, starts per host and by tier (thaw_start_tier_total: ram,
# disk, remote), the RAM-tier hit rate (ram / all restores), and latency p50 /
# p99 of every request and of each burst's slowest (the one that waited for
# the start).  The tier is smaller than all the functions' images together and
# larger than a third of them: hashing gives each host its share, round robin
# gives each host all of them.
# OUTDIR (default ./fleet-out) gets summary.md, summary.json and the logs.
# Needs root, runc and CRIU (make deps), haproxy, the Ceph packages.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(realpath -m "${1:-./fleet-out}")
FUNCS=${2:-6}
ROUNDS=${3:-5}
BURST=${BURST:-4}
FLEET_MIB=${FLEET_MIB:-48}
export FLEET_TIER_BYTES=${FLEET_TIER_BYTES:-192M}
export THAW_ROOT=$ROOT THAW_BUILD=${THAW_BUILD:-$ROOT/build}
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:-/tmp:/var/tmp:$ROOT}
mkdir -p "$OUT"
NAME=fleet-bench
cd "$ROOT" || exit 1
. "$ROOT/test/lib/e2e.sh"
. "$ROOT/test/lib/ceph_rgw.sh"
. "$ROOT/test/lib/fleet_lb.sh"
command -v haproxy >/dev/null || { echo "no haproxy: apt-get install haproxy"; exit 1; }

fleet_net_up
ceph_rgw_start thaw || exit 1
trap 'cp "$T"/*.log "$OUT/" 2>/dev/null; thawd_e2e_cleanup; ceph_rgw_stop' EXIT
e2e_tokens
RR_PORT=$(free_port)
cat >"$T/rr.cfg" <<EOF
frontend thaw_rr
	bind 127.0.0.1:$RR_PORT
	default_backend thaw_rr
# deploy/haproxy/haproxy.cfg's backend, but round robin.
backend thaw_rr
	balance roundrobin
	option httpchk GET /readyz
	http-check expect status 200
	default-server check inter 1s fastinter 250ms downinter 500ms fall 2 rise 2 maxconn 256
	http-request set-header Authorization "Bearer \${THAW_DATA_TOKEN}"
	http-response set-header X-Thaw-Host %s
	server thaw1 "\${THAW1}"
	server thaw2 "\${THAW2}"
	server thaw3 "\${THAW3}"
EOF
fleet_lb_start "$T/rr.cfg"

# ---- the functions, snapshotted on host 1 and pushed ----
fixture_fn "$T/fn" # an empty directory: the function's files come next
cp "$ROOT/bench/functions/cpu_example.py" "$T/fn/"
spec="{\"command\": [\"python3\", \"cpu_example.py\"], \"cwd\": \"$T/fn\", \"port\": 8000,
  \"ready\": {\"http\": \"/health\", \"timeout_s\": 120}, \"env\": {\"THAW_EXAMPLE_MIB\": \"$FLEET_MIB\"},
  \"idle_s\": 1, \"concurrency\": 4}"
fleet_host_start 1
fns=""
for k in $(seq "$FUNCS"); do
	fn=fn$k
	fns="$fns $fn"
	st=$(h 1 PUT "/functions/$fn" -d "$spec")
	[ "$st" = 201 ] || { echo "PUT $fn: $st $(cat "$T/body")"; exit 1; }
	st=$(h 1 POST "/functions/$fn/snapshot?wait=1")
	[ "$st" = 200 ] || { echo "snapshot $fn: $st $(cat "$T/body")"; exit 1; }
	echo "snapshot $fn: $(jget "$T/body" "'%s, %d bytes' % (j['job']['result']['snapshot'][:19], j['job']['result'].get('image_bytes', 0))")"
done
pushed() {
	local fn
	for fn in $fns; do
		h 1 GET "/functions/$fn" >/dev/null
		[ "$(jget "$T/body" "(j.get('push') or {}).get('state')")" = done ] || return 1
	done
}
wait_for 300 pushed || { echo "the pushes did not finish"; exit 1; }
kill -TERM "${HPID[1]}"
wait "${HPID[1]}"
HPID[1]=""

# ---- each policy on fresh hosts ----
fresh_hosts() {
	local i
	for i in 1 2 3; do
		rm -rf "${T:?}/h$i" "${SHM:?}/h$i"
		fleet_host_start "$i" --remote-poll 10
	done
}
stop_hosts() {
	local i
	for i in 1 2 3; do
		kill -TERM "${HPID[$i]}"
		wait "${HPID[$i]}"
		HPID[$i]=""
	done
}
host_metrics() { # POLICY: each host's thaw_start_tier_total and thaw_starts_total
	local i
	for i in 1 2 3; do
		h "$i" GET /metrics >/dev/null
		grep -E '^thaw_start_tier_total|^thaw_starts_total' "$T/body" | sed "s/^/thaw$i /" >>"$OUT/metrics-$1.txt"
	done
}
for policy in hash rr; do
	url=$LB
	FLEET_BACKEND=thaw_fleet
	[ $policy = rr ] && url=http://127.0.0.1:$RR_PORT FLEET_BACKEND=thaw_rr
	fresh_hosts
	wait_for 60 fleet_lb_up thaw1 thaw2 thaw3 || { echo "hosts not up in $FLEET_BACKEND"; exit 1; }
	echo "policy $policy: $ROUNDS rounds of $BURST requests to each of$fns"
	python3 - "$url" "$OUT/requests-$policy.json" "$ROUNDS" "$BURST" "$TOKEN" "${HURL[1]}" \
		"${HURL[2]}" "${HURL[3]}" $fns <<'PY'
import http.client, json, random, sys, threading, time, urllib.parse, urllib.request
url, out, rounds, burst, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
hosts, fns = sys.argv[6:9], sys.argv[9:]
u = urllib.parse.urlsplit(url)
rng = random.Random(48)
reqs = []

def one(fn, x, res):
    t0 = time.monotonic()
    st, host = "err", ""
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        c.request("GET", "/function/%s/infer?x=%d" % (fn, x))
        r = c.getresponse()
        r.read()
        st, host = r.status, r.getheader("X-Thaw-Host", "")
        c.close()
    except Exception as e:
        st = "err: %s" % e
    res.append({"fn": fn, "status": st, "host": host, "ms": (time.monotonic() - t0) * 1000})

def instances():
    n = 0
    for h in hosts:
        q = urllib.request.Request(h + "/instances", headers={"Authorization": "Bearer " + token})
        n += len(json.load(urllib.request.urlopen(q))["instances"])
    return n

for r in range(rounds):
    order = fns[:]
    rng.shuffle(order)
    for fn in order:
        res = []
        ts = [threading.Thread(target=one, args=(fn, i, res)) for i in range(burst)]
        for t in ts: t.start()
        for t in ts: t.join()
        slow = max(x["ms"] for x in res)
        for x in res:
            x["round"], x["burst_max"] = r, x["ms"] == slow
        reqs += res
    end = time.monotonic() + 120
    while instances() and time.monotonic() < end:
        time.sleep(0.25)
json.dump(reqs, open(out, "w"))
PY
	host_metrics $policy
	stop_hosts
done

# ---- the report ----
python3 - "$OUT" "$FUNCS" "$ROUNDS" "$BURST" "$FLEET_MIB" "$FLEET_TIER_BYTES" <<'PY'
import json, re, sys
out, funcs, rounds, burst, mib, tier = sys.argv[1:7]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else 0
rows, summary = [], {}
for pol in ("hash", "rr"):
    reqs = json.load(open("%s/requests-%s.json" % (out, pol)))
    tiers, starts = {}, {}
    for l in open("%s/metrics-%s.txt" % (out, pol)):
        host, rest = l.split(" ", 1)
        m = re.match(r'(\w+)\{([^}]*)\} (\S+)', rest)
        name, labels, v = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))
        if name == "thaw_start_tier_total":
            tiers[labels["tier"]] = tiers.get(labels["tier"], 0) + v
            starts[host] = starts.get(host, 0) + v
    ok = sum(1 for r in reqs if r["status"] == 200)
    ms = [r["ms"] for r in reqs if r["status"] == 200]
    first = [r["ms"] for r in reqs if r["status"] == 200 and r["burst_max"]]
    n = sum(tiers.values())
    s = {"requests": len(reqs), "ok": ok, "restores": int(n),
         "tiers": {k: int(v) for k, v in sorted(tiers.items())},
         "starts_per_host": {k: int(v) for k, v in sorted(starts.items())},
         "ram_hit": tiers.get("ram", 0) / n if n else 0,
         "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99),
         "burst_p50_ms": pct(first, 50), "burst_p99_ms": pct(first, 99)}
    summary[pol] = s
    rows.append("| %s | %d/%d | %d | %s | %s | %.0f%% | %.0f | %.0f | %.0f | %.0f |" % (
        "consistent hash (bounded load)" if pol == "hash" else "round robin", ok, len(reqs), n,
        ", ".join("%s %d" % kv for kv in s["starts_per_host"].items()),
        ", ".join("%s %d" % kv for kv in s["tiers"].items()), 100 * s["ram_hit"],
        s["p50_ms"], s["p99_ms"], s["burst_p50_ms"], s["burst_p99_ms"]))
json.dump(summary, open(out + "/summary.json", "w"), indent=1)
md = ["%s functions (CPU example, %s MiB of state), %s rounds of a burst of %s requests to each, "
      "RAM tier %s per host, 3 hosts" % (funcs, mib, rounds, burst, tier), "",
      "| policy | 200s | restores | restores per host | by tier | RAM-tier hits | p50 ms | p99 ms | burst's slowest p50 ms | p99 ms |",
      "|---|---|---|---|---|---|---|---|---|---|"] + rows
open(out + "/summary.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
