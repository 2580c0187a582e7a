#!/usr/bin/env bash
# GET /metrics never waits on the driver or the store (server/api_metrics.c):
# thawd on the CUDA mock (test/cuda_mock.c as libcuda.so.1 and
# libnvidia-ml.so.1), two GPUs.  Once a scrape shows the GPUs' free memory,
# the fake driver hangs (MOCK_NVML_BLOCK_FILE: nvmlDeviceGetMemoryInfo does
# not return while the file exists); while a call is seen waiting in it,
# scrapes answer, with the GPUs' figures from before.  Then the driver comes
# back and the figures follow it.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
command -v curl >/dev/null || skip "no curl"
command -v "${CC:-cc}" >/dev/null || skip "no C compiler for the fake driver"

NAME=metrics-gpu
. "$ROOT/test/lib/thawd_e2e.sh"
e2e_cleanup_hook() { rm -f "$T/block"; }
mkdir -p "$T/mock"
"${CC:-cc}" -shared -fPIC -O1 -o "$T/mock/libcuda.so.1" "$ROOT/test/cuda_mock.c" &&
	ln -s libcuda.so.1 "$T/mock/libnvidia-ml.so.1" || { fail "cannot build the fake driver"; exit 1; }
export LD_LIBRARY_PATH=$T/mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} MOCK_NVML_FREE_MIB=40000,60000
export MOCK_NVML_BLOCK_FILE=$T/block THAW_NO_GPU=
start_thawd --max-standby 0

# scrape: GET /metrics within 20 s into $T/body; its thaw_gpu_free_bytes lines.
scrape() {
	curl -s --max-time 20 -o "$T/body" -w '%{http_code}' "$URL/metrics" >"$T/code" || return 1
	[ "$(cat "$T/code")" = 200 ] && grep '^thaw_gpu_free_bytes' "$T/body"
}
for _ in $(seq 100); do scrape >/dev/null && break; sleep 0.1; done
before=$(scrape) && [ "$(echo "$before" | wc -l)" = 2 ] &&
	ok "the GPUs' free memory: $(echo $before)" || { fail "no GPU figures: $(head -c 300 "$T/body")"; exit 1; }

touch "$T/block"
# A scrape now: one that asks the driver itself waits in it from here on.
curl -s --max-time 20 -o /dev/null "$URL/metrics" &
for _ in $(seq 300); do [ -e "$T/block.waiting" ] && break; sleep 0.1; done
[ -e "$T/block.waiting" ] || { fail "thawd never asked the (hung) driver again"; exit 1; }
n=0
for i in 1 2 3; do
	got=$(scrape) && [ "$got" = "$before" ] && n=$((n + 1))
done
[ -e "$T/block.waiting" ] && [ $n = 3 ] &&
	ok "3 scrapes answered while the driver hangs, with the figures from before" ||
	fail "while the driver hangs: $n of 3 scrapes answered with the figures ($(cat "$T/code"))"

rm -f "$T/block"
for _ in $(seq 100); do [ ! -e "$T/block.waiting" ] && break; sleep 0.1; done
scrape >/dev/null && ok "the driver back: scrapes answer" || fail "after the driver came back: $(cat "$T/code")"
stop_thawd >/dev/null
[ $fails = 0 ] && echo "e2e_metrics_gpu: all passed"
[ $fails = 0 ]
