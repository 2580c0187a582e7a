#!/usr/bin/env bash
# e2e_snapshot: `thaw snapshot` of the CPU example with real runc and CRIU:
# the manifest is in the store with its meta, the store verifies clean, and
# nothing is left behind (container, namespace mount, work dir, process).
# Then the failures: a function that never gets ready, one that exits, a
# missing criu, a criu that fails the dump, a bad spec: each a clear error,
# and nothing left behind either.
set -u
B=${THAW_BUILD:-build}
R=${THAW_ROOT:-.}
THAW=$B/thaw
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (runc, namespaces)"; exit 77; }
command -v runc >/dev/null || { echo "skipped: no runc"; exit 77; }
[ -x "${THAW_CRIU:-$R/.deps/criu-wrapper}" ] || { echo "skipped: no CRIU 4.2 (make deps)"; exit 77; }
export THAW_CRIU=${THAW_CRIU:-$R/.deps/criu-wrapper}
GPU=0
[ "${1:-}" = --gpu ] && GPU=1

D=$(mktemp -d /tmp/e2e_snapshot.XXXXXX)
DATA=$D/data
fails=0

cleanup() {
	# Only what this test made: containers in its own runc root, mounts under $D.
	if [ -d "$DATA/runc" ]; then
		for c in $(runc --root "$DATA/runc" list -q 2>/dev/null); do
			runc --root "$DATA/runc" delete -f "$c" >/dev/null 2>&1
		done
	fi
	awk -v d="$D" '$5 ~ "^"d {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m"; done
	rm -rf "$D"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Nothing of ours may remain: no container, no namespace mount, no work dir, no process.
nothing_left() { # $1: what just ran
	local c
	c=$(runc --root "$DATA/runc" list -q 2>/dev/null)
	[ -z "$c" ] || fail "$1: containers left: $c"
	grep -q " $D" /proc/self/mountinfo && fail "$1: mounts left: $(grep " $D" /proc/self/mountinfo)"
	[ -z "$(ls -A "$DATA/work" 2>/dev/null)" ] || fail "$1: work dirs left: $(ls "$DATA/work")"
	pgrep -f "$D/fn" >/dev/null && fail "$1: processes left: $(pgrep -af "$D/fn")"
	pgrep -f "e2e-snapshot-marker" >/dev/null && fail "$1: processes left: $(pgrep -af e2e-snapshot-marker)"
	return 0
}

# --gpu (the GPU machine): snapshot a small PyTorch function holding 256 MiB
# on the GPU: its CUDA process is found, locked and checkpointed, and the
# manifest names the GPUs, the driver and the CUDA pids.  (The full GPU
# example is snapshotted and restored by e2e_restore.sh --gpu.)
if [ $GPU = 1 ]; then
	command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no GPU"; exit 77; }
	python3 -c "import torch" 2>/dev/null || { echo "skipped: no torch"; exit 77; }
	mkdir -p "$D/fn"
	cat >"$D/fn/gpu_fn.py" <<'PY'
import http.server, os, torch
x = torch.arange(1 << 26, device="cuda", dtype=torch.float32)  # 256 MiB on the GPU
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("%d %r" % (os.getpid(), float(x[:1000].sum()))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
print("gpu_fn: ready", flush=True)
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
PY
	cat >"$D/gpu_example.json" <<JSON
{"command": ["python3", "gpu_fn.py"], "cwd": "$D/fn", "port": 8000, "gpu": true,
 "ready": {"http": "/", "timeout_s": 240}, "warmup": [{"path": "/"}]}
JSON
	echo "== snapshot of a GPU function"
	if ! "$THAW" --data-dir "$DATA" snapshot "$D/gpu_example.json" >"$D/out.json" 2>"$D/err"; then
		fail "thaw snapshot (GPU): $(cat "$D/err")"
	else
		cat "$D/out.json"
		python3 - "$D/out.json" "$DATA/store" <<'PY' || fail "GPU manifest not as expected"
import json, os, sys
out = json.load(open(sys.argv[1]))
m = json.load(open(os.path.join(sys.argv[2], "manifests", out["snapshot"][7:])))
meta, ok = m["meta"], True
def check(cond, what):
    global ok
    if not cond:
        print("check failed:", what); ok = False
check(len(meta["cuda_pids"]) >= 1, "a CUDA process was checkpointed: %s" % meta["cuda_pids"])
check(all(p > 0 for p in meta["cuda_ns_pids"]), "namespace pids: %s" % meta["cuda_ns_pids"])
check(len(meta["gpus"]) >= 1 and meta["gpus"][0]["uuid"].startswith("GPU-"), "GPUs: %s" % meta["gpus"])
# What the checkpoint freed on the GPU: the 256 MiB tensor at least (plus the
# context), below the device's size; a restore checks free memory against it.
used = [g.get("used_bytes", 0) for g in meta["gpus"]]
check(any(u >= 256 << 20 and u < g["total_bytes"] for u, g in zip(used, meta["gpus"])),
      "GPU memory the function held not recorded: %s" % meta["gpus"])
check(meta["versions"].get("driver", 0) > 0, "driver version")
check(out["timings_ms"]["cuda_checkpoint"] > 10, "CUDA checkpoint took time")
check(out["image_bytes"] > 256 << 20, "the image holds the GPU state: %d" % out["image_bytes"])
print("figure: gpu snapshot", " ".join("%s=%.0fms" % kv for kv in out["timings_ms"].items()),
      "image=%.2fGiB stored=%.2fGiB" % (out["image_bytes"] / 2**30, out["stored_bytes"] / 2**30))
sys.exit(0 if ok else 1)
PY
	fi
	nothing_left "GPU snapshot"
	[ $fails = 0 ] && { echo "e2e_snapshot --gpu: all good"; exit 0; }
	echo "e2e_snapshot --gpu: $fails failure(s)"
	exit 1
fi

# The function lives in its own directory; the spec's cwd is relative to it.
mkdir -p "$D/fn"
cp "$R/bench/functions/cpu_example.py" "$D/fn/"
cat >"$D/fn/cpu_test.json" <<JSON
{
  "command": ["python3", "$D/fn/cpu_example.py"],
  "cwd": ".",
  "env": {"THAW_EXAMPLE_MIB": "64"},
  "port": 8000,
  "ready": {"http": "/health", "timeout_s": 60},
  "warmup": [{"method": "GET", "path": "/infer?x=1"}, {"method": "POST", "path": "/state?v=warm"}],
  "prepare": {"method": "GET", "path": "/info"}
}
JSON

echo "== snapshot of the CPU example (64 MiB of state)"
if ! "$THAW" --data-dir "$DATA" snapshot "$D/fn/cpu_test.json" >"$D/out.json" 2>"$D/err"; then
	fail "thaw snapshot: $(cat "$D/err")"
else
	cat "$D/out.json"
	python3 - "$D/out.json" "$DATA/store" "$D/fn" <<'PY' || fail "result or manifest not as expected"
import json, os, sys
out = json.load(open(sys.argv[1]))
store, fndir = sys.argv[2], sys.argv[3]
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("check failed:", what); ok = False
sid = out["snapshot"]
check(sid.startswith("sha256:") and len(sid) == 71, "snapshot id")
check(out["function"] == "cpu-test", "id from the file name: %s" % out["function"])
check(out["image_bytes"] > 64 << 20, "image holds the 64 MiB state: %d" % out["image_bytes"])
check(0 < out["stored_bytes"] <= out["image_bytes"] * 1.01, "stored bytes %d" % out["stored_bytes"])
t = out["timings_ms"]
for k in ("boot", "ready", "warmup", "prepare", "cuda_checkpoint", "criu_dump", "elide", "ingest", "total"):
    check(k in t and t[k] >= 0, "timing " + k)
check(t["total"] >= t["boot"] + t["ready"] + t["criu_dump"], "total covers the phases")
m = json.load(open(os.path.join(store, "manifests", sid[7:])))
meta = m["meta"]
check(m["name"] == "cpu-test", "manifest name")
check(meta["spec"]["cwd"] == fndir, "cwd resolved against the spec's dir: %s" % meta["spec"]["cwd"])
check(meta["spec"]["port"] == 8000 and meta["spec"]["prepare"]["path"] == "/info", "spec in meta")
check(meta["versions"]["criu"].startswith("4."), "criu version %s" % meta["versions"].get("criu"))
check(meta["versions"]["kernel"] == os.uname().release, "kernel version")
check(meta["versions"]["runc"] != "", "runc version")
check(meta["cuda_pids"] == [] and meta["gpus"] == [] or os.path.exists("/dev/nvidiactl"), "no CUDA here")
check(meta["image_bytes"] == out["image_bytes"], "image bytes in meta")
check(meta["image_bytes"] <= meta["image_bytes_before_elision"], "image bytes after elision <= before")
# The pages files shrink by the pages elided; the pagemaps change by a few bytes.
check(abs(meta["zero_pages_elided"] * 4096 - (meta["image_bytes_before_elision"] - meta["image_bytes"])) < 65536,
      "zero_pages_elided matches the bytes saved")
print("figure: e2e_snapshot cpu image_bytes_before_elision %d image_bytes %d zero_pages_elided %d" %
      (meta["image_bytes_before_elision"], meta["image_bytes"], meta["zero_pages_elided"]))
files = {f["path"] for f in m["files"]}
for f in ("inventory.img", "descriptors.json"):
    check(f in files, "image file " + f)
check(any(f.startswith("pages-") for f in files), "pages image")
sys.exit(0 if ok else 1)
PY
	sid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$D/out.json")
	"$THAW" --data-dir "$DATA" store ls | grep -q "cpu-test" || fail "store ls does not list it"
	"$THAW" --data-dir "$DATA" store verify >"$D/verify" 2>&1 || fail "store verify: $(cat "$D/verify")"
	# The function really was warm: its tmpfs-free state is in the image, and
	# restoring it is instance.c's test; here the image must restore at all.
fi
nothing_left "snapshot"

expect_error() { # name, expected words..., with the command's stderr in $D/err
	local name=$1; shift
	for w in "$@"; do
		grep -qF -- "$w" "$D/err" || fail "$name: error lacks '$w': $(cat "$D/err")"
	done
}

echo "== a function that never gets ready"
cat >"$D/fn/never.json" <<JSON
{"command": ["python3", "-c", "import sys, time; print('e2e-snapshot-marker booting', flush=True); print('warming forever', file=sys.stderr, flush=True); time.sleep(600)"],
 "cwd": ".", "port": 8000, "ready": {"tcp": true, "timeout_s": 2}}
JSON
start=$SECONDS
if "$THAW" --data-dir "$DATA" snapshot "$D/fn/never.json" >/dev/null 2>"$D/err"; then
	fail "never-ready function was snapshotted"
fi
cat "$D/err"
expect_error never-ready "ready" "not ready after 2 s" "warming forever" "e2e-snapshot-marker booting"
[ $((SECONDS - start)) -lt 30 ] || fail "never-ready took $((SECONDS - start)) s"
nothing_left "never-ready"

echo "== a function that exits"
cat >"$D/fn/exits.json" <<JSON
{"command": ["python3", "-c", "import sys; sys.exit('e2e-snapshot-marker: cannot load the model')"],
 "cwd": ".", "port": 8000, "ready": {"http": "/health", "timeout_s": 30}}
JSON
if "$THAW" --data-dir "$DATA" snapshot "$D/fn/exits.json" >/dev/null 2>"$D/err"; then
	fail "exiting function was snapshotted"
fi
cat "$D/err"
expect_error exits "exited before it was ready" "cannot load the model"
nothing_left "exits"

echo "== a warm-up that fails"
cat >"$D/fn/badwarm.json" <<JSON
{"command": ["python3", "cpu_example.py"], "cwd": ".", "env": {"THAW_EXAMPLE_MIB": "1"},
 "port": 8000, "ready": {"http": "/health"}, "warmup": [{"path": "/no-such-path"}]}
JSON
if "$THAW" --data-dir "$DATA" snapshot "$D/fn/badwarm.json" >/dev/null 2>"$D/err"; then
	fail "failing warm-up was snapshotted"
fi
cat "$D/err"
expect_error badwarm "warmup" "/no-such-path" "404"
nothing_left "badwarm"

echo "== a missing criu"
if THAW_CRIU=/nonexistent "$THAW" --data-dir "$DATA" snapshot "$D/fn/cpu_test.json" >/dev/null 2>"$D/err"; then
	fail "snapshot without criu succeeded"
fi
cat "$D/err"
expect_error nocriu "criu not found" "/nonexistent"
nothing_left "missing criu"

echo "== a criu that fails the dump"
printf '#!/bin/sh\necho "e2e fake criu: refusing" >&2\nexit 1\n' >"$D/badcriu"
chmod +x "$D/badcriu"
sed 's/"64"/"1"/' "$D/fn/cpu_test.json" >"$D/fn/small.json"
if THAW_CRIU=$D/badcriu "$THAW" --data-dir "$DATA" snapshot "$D/fn/small.json" >/dev/null 2>"$D/err"; then
	fail "snapshot with a failing criu succeeded"
fi
cat "$D/err"
expect_error badcriu "criu dump" "runc checkpoint"
nothing_left "failing criu"

if [ ! -e /dev/nvidiactl ]; then
	echo "== a GPU function on a host without a driver"
	sed 's/"prepare"/"gpu": true, "prepare"/' "$D/fn/small.json" >"$D/fn/gpu.json"
	if "$THAW" --data-dir "$DATA" snapshot "$D/fn/gpu.json" >/dev/null 2>"$D/err"; then
		fail "GPU function snapshotted without a driver"
	fi
	cat "$D/err"
	expect_error nogpu "GPU function needs a CUDA driver"
	nothing_left "no driver"
fi

echo "== a bad spec"
echo '{"command": ["x"], "port": 99999}' >"$D/fn/bad.json"
"$THAW" --data-dir "$DATA" snapshot "$D/fn/bad.json" >/dev/null 2>"$D/err"
rc=$?
[ $rc = 2 ] || fail "bad spec: exit $rc, want 2"
expect_error badspec "port"
"$THAW" snapshot --help | grep -q "relative" || fail "snapshot --help does not explain the relative cwd"

if [ $fails = 0 ]; then echo "e2e_snapshot: all good"; exit 0; fi
echo "e2e_snapshot: $fails failure(s)"
exit 1
