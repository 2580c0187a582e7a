#!/usr/bin/env bash
# e2e_dedup: two snapshots of the CPU example, each of a fresh boot warmed up
# with different traffic, share >= 90% of their non-zero bytes in the store
# (issue 7: a re-snapshot must cost little).  Real runc and CRIU.
#
# Shared = bytes of the second manifest's stored (non-hole) chunks whose ids
# the first manifest also has / the second manifest's non-hole bytes.
set -u
B=${THAW_BUILD:-build}
R=${THAW_ROOT:-.}
THAW=$B/thaw
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (runc, namespaces)"; exit 77; }
command -v runc >/dev/null || { echo "skipped: no runc"; exit 77; }
[ -x "${THAW_CRIU:-$R/.deps/criu-wrapper}" ] || { echo "skipped: no CRIU 4.2 (make deps)"; exit 77; }
export THAW_CRIU=${THAW_CRIU:-$R/.deps/criu-wrapper}
# The CPU example as shipped holds 256 MiB of state (bench/functions/cpu_example.json).
# With 64 MiB the interpreter's own heap, whose pages change with the traffic,
# weighs four times as much: 86% shared with content-defined chunks, 92% at best
# with 4 KiB chunks (measured 2026-11-23).
MIB=${E2E_DEDUP_MIB:-256}

D=$(mktemp -d /tmp/e2e_dedup.XXXXXX)
DATA=$D/data
cleanup() {
	if [ -d "$DATA/runc" ]; then
		for c in $(runc --root "$DATA/runc" list -q 2>/dev/null); do
			runc --root "$DATA/runc" delete -f "$c" >/dev/null 2>&1
		done
	fi
	awk -v d="$D" '$5 ~ "^"d {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m"; done
	[ -n "${E2E_KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT

mkdir -p "$D/fn"
cp "$R/bench/functions/cpu_example.py" "$D/fn/"
# spec NAME WARMUP_JSON: the CPU example with its own warm-up list.
spec() {
	cat >"$D/fn/$1.json" <<JSON
{
  "command": ["python3", "$D/fn/cpu_example.py"],
  "cwd": ".",
  "env": {"THAW_EXAMPLE_MIB": "$MIB"},
  "port": 8000,
  "ready": {"http": "/health", "timeout_s": 60},
  "warmup": $2
}
JSON
}
spec dedup-a '[{"method": "GET", "path": "/infer?x=1"}, {"method": "GET", "path": "/infer?x=2"}]'
# Different traffic: other inputs, a state write, repeated requests.
w=$(python3 -c 'import json; print(json.dumps(
    [{"method": "GET", "path": "/infer?x=%d" % (x * 7919)} for x in range(40)] +
    [{"method": "POST", "path": "/state?v=" + "w" * 3000},
     {"method": "GET", "path": "/info"}, {"method": "GET", "path": "/state"}]))')
spec dedup-b "$w"

for s in dedup-a dedup-b; do
	"$THAW" --data-dir "$DATA" snapshot "$D/fn/$s.json" >"$D/$s.out" 2>"$D/$s.err" ||
		{ echo "FAIL: thaw snapshot $s: $(cat "$D/$s.err")"; exit 1; }
	echo "$s: $(cat "$D/$s.out")"
done

python3 - "$DATA/store" "$D/dedup-a.out" "$D/dedup-b.out" <<'PY'
import json, os, sys
store = sys.argv[1]
def manifest(out):
    sid = json.load(open(out))["snapshot"]
    return json.load(open(os.path.join(store, "manifests", sid[7:])))
a, b = manifest(sys.argv[2]), manifest(sys.argv[3])
def chunks(m):
    for f in m["files"]:
        for c in f["chunks"]:
            if not c.get("zero"):
                yield f["path"], c
ids_a = {c["id"] for _, c in chunks(a)}
nonzero = shared = 0
by_file = {}
for path, c in chunks(b):
    nonzero += c["len"]
    hit = c["id"] in ids_a
    shared += c["len"] if hit else 0
    t = by_file.setdefault(path, [0, 0])
    t[0] += c["len"]; t[1] += c["len"] if hit else 0
for path, (n, s) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:6]:
    print("  %-24s %12d non-zero bytes, %5.1f%% shared" % (path, n, 100.0 * s / n))
frac = shared / nonzero if nonzero else 0
print("second snapshot: %d non-zero bytes, %d shared with the first: %.2f%%"
      % (nonzero, shared, 100 * frac))
print("figure: dedup_shared_pct %.2f" % (100 * frac))
sys.exit(0 if frac >= 0.90 else 1)
PY
rc=$?
[ $rc = 0 ] && echo "e2e_dedup: ok" || echo "FAIL: less than 90% shared"
exit $rc
