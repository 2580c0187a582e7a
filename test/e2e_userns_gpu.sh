#!/usr/bin/env bash
# A GPU function in a user namespace, restored from thawd's RAM tier, under
# the CUDA mock (test/cuda_mock.c as thawd's libcuda): its container maps
# libthaw-cuda executable from /.thaw-gpu, which a restore binds from the
# snapshot's tier entry.  CRIU mounts it with the flags it dumped, and in a
# user namespace the kernel refuses a remount that drops a flag the source
# has locked: with the tier's nodev not in the dumped bind, every restore
# failed (`mnt-v2: Can't bind remount 0x200003 … Operation not permitted`,
# the H200's 16 GiB function) and the start booted cold instead.  The tier
# here is a tmpfs mounted as thawd mounts its own (nosuid, nodev; exec
# allowed: the library is mapped executable from it).  Shown: the start is
# a restore in a user namespace, mapped, and answers as the cold process did.
set -u
NAME=userns-gpu
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
[ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] || skip "no user namespaces"
[ -e "$B/libthaw-cuda.so" ] || skip "no libthaw-cuda.so"
command -v "${CC:-cc}" >/dev/null || skip "no C compiler for the CUDA mock"
chmod 711 "$T"
mkdir -p "$T/mock"
"${CC:-cc}" -shared -fPIC -O1 -o "$T/mock/libcuda.so.1" "$ROOT/test/cuda_mock.c" &&
	ln -s libcuda.so.1 "$T/mock/libnvidia-ml.so.1" || { fail "cannot build the CUDA mock"; exit 1; }
FN=$T/fn
fixture_fn "$FN" userns_fn.py
chmod 755 "$FN"
mkdir -p "$T/tier"
mount -t tmpfs -o nosuid,nodev,size=1g thaw-test-tier "$T/tier" || { fail "mount a tmpfs on $T/tier"; exit 1; }
LD_LIBRARY_PATH=$T/mock MOCK_NVML_FREE_MIB=40000 THAW_NO_GPU= \
	start_thawd --allow-root "$FN" --userns-pool 3000000000:131072 --ram-tier "$T/tier"

put_snapshot g "$(fn_spec userns_fn.py "$FN" '"gpu": true, "sandbox": {"userns": true},
	"warmup": [{"method": "GET", "path": "/probe"}]')"
for round in 1 2; do
	st=$(api POST /functions/g/start)
	cp "$T/body" "$T/start"
	[ "$st" = 201 ] || { fail "start $round: $st $(head -c 600 "$T/body")"; break; }
	ep=$(jget "$T/start" "j['endpoint']")
	curl -s --max-time 20 -o "$T/probe" "http://$ep/probe" || fail "start $round: GET /probe"
	echo "start $round: $(jget "$T/start" "j.get('restored'), j.get('pages'), j.get('userns'), j.get('gpu_memory'), j.get('restored_why', '')")"
	[ "$(jget "$T/start" "j.get('restored'), j.get('userns')")" = "True True" ] &&
		[ "$(jget "$T/probe" "j['served']")" = 2 ] &&
		ok "start $round: restored in a user namespace, served goes on from the warmup's 1" ||
		fail "start $round: $(head -c 900 "$T/start") $(cat "$T/probe")"
	grep -q '/.thaw-gpu/libthaw-cuda.so' "/proc/$(jget "$T/start" "j['pid']")/maps" 2>/dev/null &&
		ok "start $round: libthaw-cuda mapped from /.thaw-gpu" ||
		fail "start $round: libthaw-cuda is not mapped in the restored process"
	api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
done
grep -m3 "Can't bind remount\|booted, not restored" "$T/thawd.log" && fail "thawd's log names a failed restore"
[ $fails = 0 ] && echo "e2e_userns_gpu: all passed"
