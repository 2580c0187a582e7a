#!/usr/bin/env bash
# thaw doctor: passes on this host (no GPU is a warning, not a failure), and
# fails, naming what is missing, without criu or without runc.
set -u
B=${THAW_BUILD:-build}
THAW=$B/thaw
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export THAW_DATA_DIR=$tmp/data THAW_RAM_TIER=$tmp/tier
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. this host: exit 0, every check on a line; the data dir and the tier,
# which do not exist yet, are checked where thawd would make them and not
# made (a doctor leaves the host as it found it)
out=$("$THAW" doctor 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || bad "doctor exited $rc on this host"
for name in criu criu-chk criu-kdat runc io_uring gpu data-dir ram-tier kernel thp cgroup; do
	echo "$out" | grep -Eq "^(ok|warn|FAIL) +$name " || bad "no line for check $name"
done
# CRIU's kernel-probe cache: a warning exactly where /run is not a tmpfs.
if [ "$(stat -f -c %T /run 2>/dev/null)" = tmpfs ]; then
	echo "$out" | grep -Eq "^(ok|warn) +criu-kdat " || bad "no criu-kdat line"
else
	echo "$out" | grep -q "^warn  criu-kdat /run is not a tmpfs" || bad "no warning that /run is not a tmpfs"
fi
# Transparent huge pages: ok exactly where the host's setting is "always".
if grep -q '\[always\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
	echo "$out" | grep -q "^ok    thp " || bad "THP always, but no ok thp line"
else
	echo "$out" | grep -q "^warn  thp .*echo always" || bad "THP not always, but no thp warning"
fi
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
	echo "$out" | grep -q "^warn  gpu .*no GPU: CPU functions only" || bad "no 'no GPU' warning"
fi
# libthaw-cuda: built beside thaw, it loads; missing, a warning that says so.
echo "$out" | grep -q "^ok    gpumem .*libthaw-cuda.so loads" || bad "no 'ok gpumem' line"
echo "$(THAW_GPUMEM_LIB=$tmp/none.so "$THAW" doctor 2>&1)" |
	grep -q "^warn  gpumem    libthaw-cuda.so not found.*none.so" || bad "a missing libthaw-cuda.so not named"
# Functions in a user namespace: whether the host can, and a pool that is
# no range named as what is wrong.
echo "$out" | grep -Eq "^(ok|warn) +userns +(supported|functions cannot|functions run)" || bad "no userns line"
echo "$(THAW_USERNS_POOL=1:2 "$THAW" doctor 2>&1)" |
	grep -q '^warn  userns .*pool "1:2"' || bad "a bad THAW_USERNS_POOL not named"
[ ! -e "$tmp/data" ] && [ ! -e "$tmp/tier" ] || bad "doctor made the data dir or the tier"
echo "$out" | grep -q "^ok    ram-tier  $tmp/tier not made yet (thawd makes it; $tmp writable" ||
	bad "a tier not made yet not said so"
mkdir -p "$tmp/data" "$tmp/tier"
echo "$("$THAW" doctor 2>&1)" | grep -q "^ok    ram-tier  $tmp/tier writable, " || bad "no 'tier writable' line"
[ -z "$(find "$tmp/data" "$tmp/tier" -mindepth 1)" ] || bad "doctor left its probe files behind"

# 2. --json: one object that says the same
json=$("$THAW" doctor --json); rc=$?
[ $rc = 0 ] || bad "doctor --json exited $rc"
echo "$json" | python3 -c '
import json, sys
o = json.load(sys.stdin)
assert o["ok"] is True and o["failures"] == 0, o
names = [c["name"] for c in o["checks"]]
for n in ("criu", "runc", "io_uring", "gpu", "data-dir", "ram-tier", "kernel", "cgroup"):
    assert n in names, n
assert all(c["status"] in ("ok", "warn", "FAIL") and c["detail"] for c in o["checks"])
' || bad "doctor --json is not the expected object"

# 3. criu missing: exit 1, the criu line says so
out=$(THAW_CRIU=$tmp/no-such-criu "$THAW" doctor 2>&1); rc=$?
echo "$out" | grep '^FAIL'
[ $rc = 1 ] || bad "missing criu: exit $rc, want 1"
echo "$out" | grep -q "^FAIL  criu .*no-such-criu.*No such file" || bad "missing criu not named"
out=$(THAW_CRIU=$tmp/no-such-criu "$THAW" doctor --json); rc=$?
[ $rc = 1 ] || bad "missing criu, --json: exit $rc, want 1"
echo "$out" | grep -q '"ok": false' || bad "missing criu, --json: not ok:false"

# 4. an old criu (a fake that says 3.17): exit 1, the version named
printf '#!/bin/sh\necho "Version: 3.17"\n' >"$tmp/old-criu"
chmod +x "$tmp/old-criu"
out=$(THAW_CRIU=$tmp/old-criu "$THAW" doctor 2>&1); rc=$?
[ $rc = 1 ] || bad "old criu: exit $rc, want 1"
echo "$out" | grep -q "^FAIL  criu .*3.17.*>= 4.2" || bad "old criu not named"

# 5. a criu whose check fails: CRIU's complaint is shown
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "Version: 4.2.1"; exit 0; }\necho "Error (criu/kerndat.c:1): no vdso"; exit 1\n' >"$tmp/sick-criu"
chmod +x "$tmp/sick-criu"
out=$(THAW_CRIU=$tmp/sick-criu "$THAW" doctor 2>&1); rc=$?
[ $rc = 1 ] || bad "failing criu check: exit $rc, want 1"
echo "$out" | grep -q "^FAIL  criu-chk .*no vdso" || bad "criu check complaint not shown"

# 6. runc missing from PATH: exit 1, the runc line says so
mkdir -p "$tmp/bin"
for t in sh cat dirname readlink; do ln -s "$(command -v $t)" "$tmp/bin/$t"; done
out=$(env -u THAW_RUNC PATH=$tmp/bin "$THAW" doctor 2>&1); rc=$?
echo "$out" | grep '^FAIL'
[ $rc = 1 ] || bad "no runc: exit $rc, want 1"
echo "$out" | grep -q "^FAIL  runc .*runc not found on PATH" || bad "missing runc not named"

# 7. an unwritable RAM tier fails
touch "$tmp/file"
out=$(THAW_RAM_TIER=$tmp/file/tier "$THAW" doctor 2>&1); rc=$?
[ $rc = 1 ] || bad "unwritable tier: exit $rc, want 1"
echo "$out" | grep -q "^FAIL  ram-tier " || bad "unwritable tier not named"

# 8. with a driver (the fake libcuda.so.1 of test_cuda): the GPUs are listed
if command -v "${CC:-cc}" >/dev/null; then
	"${CC:-cc}" -shared -fPIC -O1 -o "$tmp/libcuda.so.1" "${THAW_ROOT:-.}/test/cuda_mock.c" ||
		bad "cannot build the fake driver"
	out=$(LD_LIBRARY_PATH=$tmp THAW_NO_GPU= "$THAW" doctor 2>&1); rc=$?
	echo "$out" | grep gpu
	[ $rc = 0 ] || bad "with a driver: exit $rc"
	echo "$out" | grep -q "^ok    gpu .*CUDA 13.0 with the checkpoint API, 2 GPUs" || bad "no driver line"
	echo "$out" | grep -q "^ok    gpu1 .*Mock GPU GPU-10111213-1415-1617-1819-1a1b1c1d1e1f, 80.00 GiB" ||
		bad "GPU 1 not listed"
	# functions spanning GPUs: nothing tried yet, then what the last
	# snapshot recorded (prewarm/span_record.h): a refusal under this
	# driver is a warning quoting the driver, one under another is stale
	echo "$out" | grep -q "^ok    gpu-span .*snapshotted here yet" || bad "no gpu-span line before any try"
	# the kernel driver's version from the fake NVML (580.159.04)
	ln -s libcuda.so.1 "$tmp/libnvidia-ml.so.1"
	export MOCK_NVML_FREE_MIB=40000,70000
	printf '%s' '{"at":"2026-11-25T17:20:00Z","driver":"580.159.04","error":"cuCheckpointProcessLock(1106): CUDA_ERROR_NOT_READY","function":"gpu-tp","gpus":2,"processes":2,"refused":true}' \
		>"$tmp/data/gpu-span.json"
	out=$(LD_LIBRARY_PATH=$tmp THAW_NO_GPU= "$THAW" doctor 2>&1); rc=$?
	echo "$out" | grep gpu-span
	[ $rc = 0 ] || bad "a recorded refusal failed doctor (exit $rc): it is a warning"
	echo "$out" | grep -Eq "^warn  gpu-span +driver 580.159.04 refused to checkpoint gpu-tp \(2 CUDA processes, 2 GPUs\) at 2026-11-25T17:20:00Z: cuCheckpointProcessLock\(1106\): CUDA_ERROR_NOT_READY" ||
		bad "the refusal is not reported with the driver's words"
	sed -i 's/580.159.04/575.10/' "$tmp/data/gpu-span.json"
	out=$(LD_LIBRARY_PATH=$tmp THAW_NO_GPU= "$THAW" doctor 2>&1)
	echo "$out" | grep -Eq "^ok    gpu-span +driver 580.159.04 since gpu-tp's .*under driver 575.10 \(refused\): not tried on this driver yet" ||
		bad "a refusal of another driver is not shown as stale"
	echo '{"refused": "maybe"}' >"$tmp/data/gpu-span.json"
	out=$(LD_LIBRARY_PATH=$tmp THAW_NO_GPU= "$THAW" doctor 2>&1)
	echo "$out" | grep -q "^warn  gpu-span .*gpu-span.json: not a record" || bad "a damaged record is not named"
	rm -f "$tmp/data/gpu-span.json"
	unset MOCK_NVML_FREE_MIB
fi

[ $fail = 0 ] && echo "test_doctor: all passed"
exit $fail
