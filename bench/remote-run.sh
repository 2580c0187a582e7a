#!/usr/bin/env bash
# remote-run.sh — the remote tier against the AWS CLI, in one run, against one
# S3 server (a single-node Ceph RGW on 127.0.0.1, test/lib/ceph_rgw.sh):
#
#   bench/remote-run.sh [OUTDIR] [MIB] [RUNS]
#
# MIB (default 1024): the state of the CPU example (bench/functions/
# cpu_example.json, THAW_EXAMPLE_MIB), seeded random bytes, so the image is
# about MIB MiB and incompressible; RUNS (default 3) rounds of each
# measurement.  OUTDIR (default ./remote-out) gets summary.md (the table),
# the logs and every answer.  What it does:
#   1. thawd A (--remote s3://BUCKET/bench) snapshots the function; its push
#      in the background is the first push (bytes_sent / seconds from
#      GET /functions/<id>); RUNS-1 more pushes of the same snapshot by
#      `thaw remote push` to fresh prefixes.  The baseline: `aws s3 cp` of a
#      file of the same bytes (A's packs, cut to the bytes thaw sent) from
#      /dev/shm to the same RGW, RUNS times.
#   2. thawd B on a fresh data directory and RAM tier, RUNS times:
#      POST /functions/<id>/pull?wait=1 (all chunks): bytes_fetched /
#      fetch_seconds, and the request's wall time.  The baseline: `aws s3 cp`
#      of that object back to /dev/shm, RUNS times.
#   3. starts on B, RUNS rounds, each on a fresh data directory: pull?fetch=0
#      then a start (the remote tier: the start fetches), RAM_STARTS
#      (default 3) more starts (the RAM tier), then B restarted on an empty
#      RAM tier and a start (the disk tier).  A start is POST /start → the
#      instance's first correct answer to GET /infer?x=7 (A's instance's
#      answer), then DELETE.  The model: stored bytes / the pull's bandwidth
#      + the RAM-tier start; the aim is the remote-tier start within 1.2x.
#   4. build/bench/manifest: a 17.2 GB image's manifest, binary against JSON.
# AWS CLI: Debian's awscli (/usr/bin/aws; installed with apt-get when missing),
# its defaults written out in a private config file: multipart from 8 MiB in
# 8 MiB parts, 10 requests in flight (AWSCLI_CONCURRENCY changes the last).
# B's data directory is under BENCH_DISK (default /var/tmp: a disk, so that
# the disk tier is one), the aws downloads go to /dev/shm.  Binaries from
# $THAW_BUILD (default build/); needs root, runc and CRIU (make deps), the
# Ceph packages (installed by ceph_rgw.sh), about 6x MIB of RAM.  Exit 0 when
# every step ran and every start answered as A's instance.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${THAW_BUILD:-$ROOT/build}
OUTDIR=${1:-./remote-out}
MIB=${2:-1024}
RUNS=${3:-3}
RAM_STARTS=${RAM_STARTS:-3}
CONC=${AWSCLI_CONCURRENCY:-10}
BUCKET=thaw-bench
ID=cpu
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
: >"$OUTDIR/thawd.log"
: >"$OUTDIR/thawd-b.log"
for p in thawd thaw bench/manifest; do
	[ -x "$B/$p" ] || { echo "no $B/$p: build it (make) or set THAW_BUILD" >&2; exit 2; }
done
W=$(mktemp -d /tmp/remote-run-XXXXXX)
TIER=$(mktemp -d /dev/shm/remote-run-a-XXXXXX)
TIER_B=$(mktemp -d /dev/shm/remote-run-b-XXXXXX)
SHM=$(mktemp -d /dev/shm/remote-run-aws-XXXXXX)
DISK=$(mktemp -d "${BENCH_DISK:-/var/tmp}/remote-run-b-XXXXXX")
. "$ROOT/bench/lib/thawd.sh"
PIDFILE_B=$W/thawd-b.pid
stop_b() {
	local pid
	pid=$(cat "$PIDFILE_B" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	rm -f "$PIDFILE_B"
}
remote_cleanup() {
	local c
	stop_b
	for c in $(runc --root "$DISK/data/runc" list -q 2>/dev/null); do
		runc --root "$DISK/data/runc" delete -f "$c" >/dev/null 2>&1
	done
	rm -rf "$DISK" "$TIER_B" "$SHM"
	bench_cleanup
}
trap remote_cleanup EXIT
die() { echo "remote-run: $*" >&2; exit 1; }

# ---- the server, and the AWS CLI ----
if [ ! -x /usr/bin/aws ]; then
	echo "installing Debian's awscli (apt-get install awscli)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends awscli \
		>"$W/apt.log" 2>&1 || die "cannot install awscli: $(tail -n 3 "$W/apt.log")"
fi
AWS=/usr/bin/aws
export AWS_CONFIG_FILE=$W/aws-config AWS_SHARED_CREDENTIALS_FILE=/dev/null
cat >"$AWS_CONFIG_FILE" <<EOF
[default]
s3 =
  max_concurrent_requests = $CONC
  multipart_threshold = 8MB
  multipart_chunksize = 8MB
EOF
# memstore keeps about twice what it holds: thaw's packs, a second push, the
# AWS CLI's object.
mem=$((MIB * 8 + 2048))
[ $mem -lt 4096 ] && mem=4096
export CEPH_RGW_MEM_BYTES=$((mem << 20))
. "$ROOT/test/lib/ceph_rgw.sh"
ceph_rgw_start "$BUCKET" || die "the RGW did not start"
REMOTE=s3://$BUCKET/bench
awsc() { "$AWS" --endpoint-url "$AWS_ENDPOINT_URL" --only-show-errors "$@"; }
now() { date +%s.%N; }
since() { python3 -c 'import sys, time; print("%.3f" % (time.time() - float(sys.argv[1])))' "$1"; }

{
	echo "tree $ROOT at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- '*.c' '*.h' 2>/dev/null || echo ', with local edits of C sources'); binaries $B"
	echo "machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "S3: Ceph RGW $(radosgw --version 2>/dev/null | awk '{print $3}') at $AWS_ENDPOINT_URL (memstore OSD); $("$AWS" --version 2>&1)"
	echo "function: bench/functions/cpu_example.json, THAW_EXAMPLE_MIB=$MIB; $RUNS runs"
} | tee "$OUTDIR/machine.txt"

# ---- 1. A: snapshot, the background push ----
start_thawd 0 --remote "$REMOTE" --ram-tier-bytes "$((MIB * 3 + 512))M" || die "thawd A did not start"
URL_A=$URL
put_function "$ID" "$ROOT/bench/functions/cpu_example.json" "$W/spec.json" \
	"env={\"THAW_EXAMPLE_MIB\": \"$MIB\"}" 'ready={"http": "/health", "timeout_s": 600}' || exit 1
snapshot_function "$ID" "$OUTDIR/snapshot.json" || exit 1
for _ in $(seq 6000); do
	curl -s "$URL_A/functions/$ID" >"$W/fn.json"
	st=$(jfield "$W/fn.json" push state)
	[ "$st" = "done" ] || [ "$st" = failed ] && break
	sleep 0.1
done
cp "$W/fn.json" "$OUTDIR/push-1.json"
[ "$st" = "done" ] || die "the background push: ${st:-none}: $(cat "$W/fn.json")"
echo "push 1 (thawd, in the background): $(jfield "$W/fn.json" push bytes_sent) bytes in $(jfield "$W/fn.json" push seconds) s"
echo "push thawd $(jfield "$W/fn.json" push bytes_sent) $(jfield "$W/fn.json" push seconds) $(jfield "$W/fn.json" push chunks_sent)" >"$W/rows"
SENT=$(jfield "$W/fn.json" push bytes_sent)
# The answer every start must give: A's instance's.
curl -s -X POST "$URL_A/functions/$ID/start" >"$W/a-start.json"
EXPECT=$(curl -s --max-time 30 "http://$(jfield "$W/a-start.json" endpoint)/infer?x=7")
curl -s -o /dev/null -X DELETE "$URL_A/instances/$(jfield "$W/a-start.json" instance)"
[ -n "$EXPECT" ] || die "A's instance did not answer: $(cat "$W/a-start.json")"
echo "A's answer: $EXPECT"
stop_thawd
rm -rf "${TIER:?}"/* # A is done; its memory back
for r in $(seq 2 "$RUNS"); do
	"$B/thaw" remote --store "$W/data/store" --remote "s3://$BUCKET/push$r" --json push \
		"$ID" "$SNAP" >"$OUTDIR/push-$r.json" 2>"$W/push.err" || die "thaw remote push: $(cat "$W/push.err")"
	echo "push $r (thaw remote push): $(tail -n1 "$W/push.err")"
	echo "push thaw-remote $(jfield "$OUTDIR/push-$r.json" bytes_sent) $(jfield "$OUTDIR/push-$r.json" seconds) $(jfield "$OUTDIR/push-$r.json" chunks_sent)" >>"$W/rows"
	awsc s3 rm --recursive "s3://$BUCKET/push$r/" >/dev/null
done

# The AWS CLI: the same number of bytes, up and down: A's packs, cut to what
# thaw sent (packs, indexes, manifest and ref) or made up to it with random
# bytes.
{ cat "$W"/data/store/packs/*.pack; head -c "$SENT" /dev/urandom; } 2>/dev/null |
	head -c "$SENT" >"$SHM/packs.bin"
[ "$(stat -c %s "$SHM/packs.bin")" = "$SENT" ] || die "cannot make $SENT bytes for the AWS CLI"
for r in $(seq "$RUNS"); do
	t0=$(now)
	awsc s3 cp "$SHM/packs.bin" "s3://$BUCKET/awscli/packs.bin" || die "aws s3 cp up failed"
	s=$(since "$t0")
	echo "aws s3 cp up $r: $SENT bytes in $s s"
	echo "push awscli $SENT $s 0" >>"$W/rows"
done
for r in $(seq "$RUNS"); do
	rm -f "$SHM/down.bin"
	t0=$(now)
	awsc s3 cp "s3://$BUCKET/awscli/packs.bin" "$SHM/down.bin" || die "aws s3 cp down failed"
	s=$(since "$t0")
	echo "aws s3 cp down $r: $SENT bytes in $s s"
	echo "pull awscli $SENT $s $s" >>"$W/rows"
	[ "$r" = 1 ] && { cmp -s "$SHM/packs.bin" "$SHM/down.bin" || die "aws s3 cp brought other bytes back"; }
done
rm -f "$SHM/packs.bin" "$SHM/down.bin"
awsc s3 rm "s3://$BUCKET/awscli/packs.bin"

# ---- 2. B: pulls onto a fresh data directory ----
# start_b [keep]: thawd B on DISK/data and TIER_B; without "keep" both fresh.
start_b() {
	stop_b
	local c
	for c in $(runc --root "$DISK/data/runc" list -q 2>/dev/null); do
		runc --root "$DISK/data/runc" delete -f "$c" >/dev/null 2>&1
	done
	[ "${1:-}" = keep ] || rm -rf "$DISK/data"
	rm -rf "${TIER_B:?}"/* "$TIER_B"/.[!.]* 2>/dev/null
	rm -f "$W/port-b"
	"$B/thawd" --listen 127.0.0.1:0 --port-file "$W/port-b" --data-dir "$DISK/data" \
		--ram-tier "$TIER_B" --ram-tier-bytes "$((MIB * 3 + 512))M" --remote "$REMOTE" \
		>>"$OUTDIR/thawd-b.log" 2>&1 </dev/null &
	echo $! >"$PIDFILE_B"
	for _ in $(seq 300); do [ -s "$W/port-b" ] && break; sleep 0.05; done
	[ -s "$W/port-b" ] || die "thawd B did not start (thawd-b.log)"
	URL_B=http://127.0.0.1:$(cat "$W/port-b")
	for _ in $(seq 100); do curl -sf "$URL_B/healthz" >/dev/null && break; sleep 0.05; done
}
# pull_b QUERY OUT: POST pull?wait=1&QUERY; OUT the answer; prints its wall seconds.
pull_b() {
	local code
	code=$(curl -s -o "$2" -w '%{http_code} %{time_total}' -X POST "$URL_B/functions/$ID/pull?wait=1$1")
	[ "${code% *}" = 200 ] || die "pull$1 on B: $code $(cat "$2")"
	echo "${code#* }"
}
for r in $(seq "$RUNS"); do
	start_b
	wall=$(pull_b "" "$OUTDIR/pull-$r.json")
	j=(job result)
	echo "pull $r (thawd B): $(jfield "$OUTDIR/pull-$r.json" "${j[@]}" bytes_fetched) bytes, fetch $(jfield "$OUTDIR/pull-$r.json" "${j[@]}" fetch_seconds) s, request $wall s"
	echo "pull thawd $(jfield "$OUTDIR/pull-$r.json" "${j[@]}" bytes_fetched) $(jfield "$OUTDIR/pull-$r.json" "${j[@]}" fetch_seconds) $wall" >>"$W/rows"
done

# ---- 3. starts on B: remote tier, RAM tier, disk tier ----
# start_one TIER OUT: a start, its first correct answer, its delete; a row.
start_one() {
	local want=$1 out=$2 a b got iid
	a=$(curl -s -o "$out" -w '%{http_code} %{time_total}' -X POST "$URL_B/functions/$ID/start")
	[ "${a% *}" = 201 ] || { echo "start ($want) on B: $a $(head -c 300 "$out")"; bad=1; return 1; }
	b=$(curl -s -o "$W/infer" -w '%{time_total}' --max-time 30 "http://$(jfield "$out" endpoint)/infer?x=7")
	got=$(cat "$W/infer")
	iid=$(jfield "$out" instance)
	curl -s -o /dev/null -X DELETE "$URL_B/instances/$iid"
	[ "$got" = "$EXPECT" ] || { echo "start ($want): answered '$got', A's instance '$EXPECT'"; bad=1; return 1; }
	[ "$(jfield "$out" tier)" = "$([ "$want" = ram ] && echo ram || echo disk)" ] ||
		echo "start ($want): the answer says tier $(jfield "$out" tier)"
	python3 - "$out" "$want" "${a#* }" "$b" >>"$W/rows" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j["timings_ms"]
print("start %s %.1f %.1f %.1f %.1f" % (sys.argv[2], (float(sys.argv[3]) + float(sys.argv[4])) * 1e3,
                                        j.get("remote_fetch_ms") or 0, t["materialize"], t["total"]))
PY
	tail -n1 "$W/rows" | awk '{printf "  %s: %.1f ms to the first answer (fetch %.1f, materialize %.1f, thawd total %.1f)\n", $2, $3, $4, $5, $6}'
}
for r in $(seq "$RUNS"); do
	echo "start round $r"
	start_b
	pull_b "&fetch=0" "$OUTDIR/pull-manifest-$r.json" >/dev/null
	start_one remote "$OUTDIR/start-remote-$r.json"
	for k in $(seq "$RAM_STARTS"); do
		start_one ram "$OUTDIR/start-ram-$r-$k.json"
	done
	start_b keep
	start_one disk "$OUTDIR/start-disk-$r.json"
done
stop_b

# ---- 4. the manifest of a 17.2 GB image ----
mkdir -p "$DISK/manifest"
"$B/bench/manifest" --gb 17.2 --dir "$DISK/manifest" >"$OUTDIR/manifest.txt" 2>&1 ||
	die "bench/manifest failed: $(tail -n 3 "$OUTDIR/manifest.txt")"
grep -E '^manifest of|^\| (JSON|store_manifest_load from)' "$OUTDIR/manifest.txt" |
	sed 's/^/  /'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUTDIR/machine.txt"
cp "$W/rows" "$OUTDIR/rows.txt"

# ---- the table ----
python3 - "$W/rows" "$OUTDIR/manifest.txt" "$MIB" "$CONC" "$RUNS" <<'PY' | tee "$OUTDIR/summary.md"
import re, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
mib, conc, runs = sys.argv[3], sys.argv[4], sys.argv[5]
med = statistics.median
def rate(kind, who):
    v = [(int(r[2]), float(r[3]), float(r[4])) for r in rows if r[0] == kind and r[1] == who]
    return v
def mbs(b, s):
    return b / s / 1e6 if s > 0 else float("nan")
def ms(what):
    return [float(r[2]) for r in rows if r[0] == "start" and r[1] == what]
def col(what, i):
    return [float(r[i]) for r in rows if r[0] == "start" and r[1] == what]
def fmt(v):
    return ", ".join("%.0f" % x for x in v)
push_t = rate("push", "thawd") + rate("push", "thaw-remote")
push_a = rate("push", "awscli")
pull_t = rate("pull", "thawd")
pull_a = rate("pull", "awscli")
print("## The remote tier against the AWS CLI (%s MiB CPU example, %s runs)\n" % (mib, runs))
print("| what | median | runs | baseline (same bytes, same RGW) | median | runs | thaw / baseline |")
print("|---|---:|---|---|---:|---|---:|")
pt = [mbs(b, s) for b, s, _ in push_t]
pa = [mbs(b, s) for b, s, _ in push_a]
print("| push, MB/s (bytes sent / push seconds; run 1 thawd's background push, then `thaw remote push`) "
      "| **%.0f** | %s | `aws s3 cp` up, file in /dev/shm, %s in flight, 8 MiB parts | %.0f | %s | %.2fx |" % (
          med(pt), fmt(pt), conc, med(pa), fmt(pa), med(pt) / med(pa)))
ft = [mbs(b, s) for b, s, _ in pull_t]
wt = [mbs(b, w) for b, _, w in pull_t]
fa = [mbs(b, s) for b, s, _ in pull_a]
print("| pull, MB/s (thawd B, `POST pull?wait=1`, bytes_fetched / fetch_seconds) | **%.0f** | %s | "
      "`aws s3 cp` down to /dev/shm | %.0f | %s | %.2fx |" % (med(ft), fmt(ft), med(fa), fmt(fa), med(ft) / med(fa)))
print("| pull, MB/s (bytes_fetched / the request's wall time) | %.0f | %s | as above | %.0f | | %.2fx |" % (
    med(wt), fmt(wt), med(fa), med(wt) / med(fa)))
stored = med([b for b, _, _ in pull_t])
bw = med(ft) * 1e6
remote, ram, disk = ms("remote"), ms("ram"), ms("disk")
model = stored / bw * 1e3 + med(ram)
print("| start, remote tier (fresh data directory after `pull?fetch=0`: the start fetches), ms | **%.0f** | %s | "
      "model: stored bytes / pull bandwidth + RAM-tier start = %.0f / %.0f MB/s + %.0f | %.0f | | **%.2fx** (aim 1.2x) |" % (
          med(remote), fmt(remote), stored / 1e6, bw / 1e6, med(ram), model, med(remote) / model))
print("| start, remote tier, against fetch then disk-tier start (stored bytes / pull bandwidth + disk-tier start) | %.0f | | what a start did before the fetch was streamed into the RAM tier: the whole fetch, then materialisation from the local store | %.0f | | %.2fx |" % (
    med(remote), stored / bw * 1e3 + med(disk), med(remote) / (stored / bw * 1e3 + med(disk))))
print("| start, RAM tier (the same function, tier warm), ms | %.0f | %s | | | | |" % (med(ram), fmt(ram)))
print("| start, disk tier (thawd B restarted on an empty RAM tier), ms | %.0f | %s | | | | |" % (med(disk), fmt(disk)))
m = open(sys.argv[2]).read()
def mrow(label):
    x = re.search(r"^\| %s[^|]*\| ([0-9.]+) \|" % re.escape(label), m, re.M)
    return float(x.group(1)) if x else float("nan")
js = mrow("JSON: read, SHA-256, parse and check")
for label, what in (("store_manifest_load from the binary form, page cache warm", "warm"),
                    ("store_manifest_load from the binary form, its pages dropped", "its pages dropped")):
    b = mrow(label)
    print("| manifest load, 17.2 GB image, binary form, %s, ms | **%.1f** | best of 5 | JSON load (read, SHA-256, parse) | %.1f | | %.0fx faster |" % (
        what, b, js, js / b))
print()
print("Starts: POST /start → the instance's first correct answer (GET /infer?x=7, as A's instance answered), ms.")
rf, rm_ = col("remote", 3), col("remote", 4)
print("Remote-tier start, medians: remote_fetch_ms %.0f (%.0f MB/s; the RAM tier filled as the chunks came), "
      "materialize %.0f (left to do after the fetch), the rest %.0f; stored bytes %d (%.2f GiB)." % (
          med(rf), stored / med(rf) / 1e3, med(rm_), med(remote) - med(rf) - med(rm_), stored, stored / 2**30))
print("Disk-tier start: materialize %.0f ms of %.0f." % (med(col("disk", 4)), med(disk)))
print()
print("figure: remote push_mbs %.0f awscli_up_mbs %.0f pull_mbs %.0f pull_wall_mbs %.0f awscli_down_mbs %.0f" % (
    med(pt), med(pa), med(ft), med(wt), med(fa)))
print("figure: remote start_remote_ms %.0f start_ram_ms %.0f start_disk_ms %.0f model_ms %.0f ratio %.2f" % (
    med(remote), med(ram), med(disk), model, med(remote) / model))
PY
exit $bad
