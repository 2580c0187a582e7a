#!/usr/bin/env bash
# gpu-run.sh — the GPU tests and benchmarks, run on the GPU machine.
#
# The GPU machine has no network and none of thaw's libraries, runc or CRIU
# (docs/GPU.md).  So everything is built here first, into one archive:
#
#   scripts/gpu-pack.sh          # here: writes .gpu/thaw-gpu.tar.xz (ignored by git)
#
# and this script runs there, from the repository root, with .gpu carried over
# (the device tool: run(command="bash scripts/gpu-run.sh", carry=[".gpu"])).
#
# What it does:
#   1. unpacks the archive into .gpu/x and puts its runc and CRIU first on
#      PATH (and in THAW_RUNC, THAW_CRIU), so nothing is installed there;
#   2. runs thaw doctor, test_cuda (the driver's checkpoint API on a real
#      PyTorch process) and a runc + CRIU smoke test;
#   3. runs the GPU end-to-end tests and benchmarks listed in the section
#      marked EXTEND below, each as a "step" with its own timeout.
# Each step's log and a PASS/SKIP/FAIL line go into $OUT (summary.txt,
# logs.tar.gz); what a step writes to $THAW_FIGURES comes back as
# figures.tar.gz.  The device tool returns few files, hence the archives.
#
# Settings: OUT (default ./gpu-out); GPU_STEPS, names of the steps to run,
# space-separated (a word matches any step containing it, "=name" that step
# only); STEP_TIMEOUT (seconds per step, default 600); GPU_ALL_TESTS=1 also
# runs every CPU test; GPU_LLM_SKIP=1 skips building the GPU example's model;
# GPU_RUN_TMPFS=0 leaves /run as it is (by default it is made a tmpfs: --run-tmpfs).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD

# runc_smoke: a container run by this runc, checkpointed and restored through
# this CRIU: the counter it keeps in its /tmp (a tmpfs CRIU dumps) goes on.
runc_smoke() {
	local d id=thaw-smoke-$$ c0 c1 c2 ok=1
	d=$(mktemp -d /tmp/thaw-runc-smoke.XXXXXX)
	mkdir -p "$d"/bundle/rootfs/{usr,etc,proc,dev,sys,tmp} "$d/img"
	for l in bin lib lib64 sbin; do ln -s usr/$l "$d/bundle/rootfs/$l"; done
	(cd "$d/bundle" && runc spec) || return 1
	printf 'network-lock skip\n' >"$d/criu.conf"
	python3 - "$d" <<'PY' || return 1
import json, sys
d = sys.argv[1]; p = d + "/bundle/config.json"; c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/sh", "-c",
    "i=0; while :; do i=$((i+1)); echo $i >/tmp/count; sleep 0.05; done"]
c["root"] = {"path": "rootfs", "readonly": True}
c["mounts"] += [{"destination": x, "type": "bind", "source": x, "options": ["bind", "ro"]}
                for x in ("/usr", "/etc")]
c["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                    "options": ["nosuid", "nodev"]})
c["annotations"] = {"org.criu.config": d + "/criu.conf"}
json.dump(c, open(p, "w"))
PY
	local R="runc --root $d/state"
	local t0=$(date +%s.%N)
	$R run -d -b "$d/bundle" --pid-file "$d/pid" $id </dev/null > >(cat >"$d/run.log") 2>&1 || { cat "$d/run.log"; ok=0; }
	sleep 1
	c0=$(cat /proc/$(cat "$d/pid")/root/tmp/count 2>/dev/null)
	local t1=$(date +%s.%N)
	$R --criu "$THAW_CRIU" checkpoint --image-path "$d/img" --work-path "$d/w1" $id >"$d/ckpt.log" 2>&1 ||
		{ echo "runc checkpoint failed:"; cat "$d/ckpt.log"; tail -5 "$d"/w1/*.log; ok=0; }
	local t2=$(date +%s.%N)
	$R --criu "$THAW_CRIU" restore -d -b "$d/bundle" --image-path "$d/img" --work-path "$d/w2" \
		--pid-file "$d/pid2" $id </dev/null > >(cat >"$d/rest.log") 2>&1 ||
		{ echo "runc restore failed:"; cat "$d/rest.log"; tail -5 "$d"/w2/*.log; ok=0; }
	local t3=$(date +%s.%N)
	c1=$(cat /proc/$(cat "$d/pid2" 2>/dev/null)/root/tmp/count 2>/dev/null)
	sleep 0.5
	c2=$(cat /proc/$(cat "$d/pid2" 2>/dev/null)/root/tmp/count 2>/dev/null)
	$R delete -f $id >/dev/null 2>&1
	echo "counter: $c0 before the checkpoint, $c1 just after the restore, $c2 0.5 s later"
	python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; print('figure: runc_smoke checkpoint_ms %.0f' % ((a[1]-a[0])*1e3)); print('figure: runc_smoke restore_ms %.0f' % ((a[2]-a[1])*1e3))" $t1 $t2 $t3
	[ -n "$c0" ] && [ -n "$c1" ] && [ -n "$c2" ] && [ "$c1" -ge "$c0" ] && [ "$c2" -gt "$c1" ] || ok=0
	[ $ok = 1 ] && rm -rf "$d" || echo "left for inspection: $d"
	[ $ok = 1 ]
}

if [ "${1:-}" = --runc-smoke ]; then # a step of this script, run under its timeout
	runc_smoke
	exit
fi

# --run-tmpfs: make /run a tmpfs, as it is on a systemd host, where it is not
# (the GPU machine): CRIU keeps its kernel-probe cache (/run/criu.kdat) only on
# one, and without it every restore probes the kernel again (~50 ms of a GPU
# start there; thaw doctor's criu-kdat warns of it).  What /run held stays
# reachable: each entry bound back into the new tmpfs.  Ephemeral machines only.
if [ "${1:-}" = --run-tmpfs ]; then
	[ "$(stat -f -c %T /run)" = tmpfs ] && { echo "/run is a tmpfs already"; exit 0; }
	old=/tmp/thaw-host-run
	mkdir -p "$old" && mount --bind /run "$old" && mount -t tmpfs -o mode=755 tmpfs /run || exit 1
	for e in "$old"/* "$old"/.[!.]*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		n=${e##*/}
		# CRIU's own cache: a criu.kdat.tmp left behind stops it from ever
		# writing one (it creates it O_EXCL).
		case $n in criu.kdat*) continue ;; esac
		if [ -L "$e" ]; then
			cp -a "$e" /run/
		elif [ -d "$e" ]; then
			mkdir -p "/run/$n" && mount --bind "$e" "/run/$n"
		else
			touch "/run/$n" && mount --bind "$e" "/run/$n"
		fi
	done
	echo "/run is now a tmpfs ($(ls /run | wc -l) entries bound back from the old one)"
	exit 0
fi

OUT=${OUT:-$ROOT/gpu-out}
X=$ROOT/.gpu/x
mkdir -p "$OUT/logs" "$OUT/figures"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
failed=0
start_all=$SECONDS

say() { echo "$*" | tee -a "$SUMMARY"; }

if [ ! -f .gpu/thaw-gpu.tar.xz ]; then
	say "FAIL no .gpu/thaw-gpu.tar.xz: run scripts/gpu-pack.sh here first, then carry .gpu"
	exit 1
fi
rm -rf "$X" && mkdir -p "$X"
if command -v xz >/dev/null; then
	tar -C "$X" -xJf .gpu/thaw-gpu.tar.xz
else
	python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
		.gpu/thaw-gpu.tar.xz "$X"
fi || { say "FAIL cannot unpack .gpu/thaw-gpu.tar.xz"; exit 1; }

# runc and CRIU in place: the wrappers on PATH and in thaw's environment, and
# .deps at the repo root for scripts that look for $THAW_ROOT/.deps/criu-wrapper.
export PATH=$X/bin:$PATH
export THAW_RUNC=$X/bin/runc THAW_CRIU=$X/.deps/criu-wrapper
[ -e .deps ] || ln -s "$X/.deps" .deps
export THAW_BUILD=$X/build THAW_ROOT=$ROOT B=.gpu/x/build
export THAW_DATA_DIR=${THAW_DATA_DIR:-/tmp/thaw-data}
export THAW_RAM_TIER=${THAW_RAM_TIER:-/dev/shm/thaw}
export THAW_FIGURES=$OUT/figures PYTHONUNBUFFERED=1
# Functions of the tests and benchmarks live in the tree and in /tmp.
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:-/tmp:/var/tmp:$ROOT}
# Never let a multi-GPU program use NVLink multicast (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say "== thaw GPU run: $(cat .gpu/PACKED | head -2 | tr '\n' ' ')"
say "host: $(uname -r), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
command -v nvidia-smi >/dev/null &&
	say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -4 | tr '\n' ';')"
say "thp: enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
say "runc: $(runc --version | head -1); criu: $("$THAW_CRIU" --version | awk '/^Version/ {print $2}')"
# The figures are those of a host whose /run is a tmpfs (a systemd host), as
# bench/RESULTS.md says: GPU_RUN_TMPFS=0 keeps the machine's /run as it is.
[ "${GPU_RUN_TMPFS:-1}" = 0 ] || say "run: $(bash "$ROOT/scripts/gpu-run.sh" --run-tmpfs 2>&1 | tail -1)"

# step NAME CMD...: run one step under a timeout; PASS/SKIP/FAIL into the summary.
ran=""
step() {
	local name=$1 t0=$SECONDS rc
	shift
	local pat hit=""
	for pat in ${GPU_STEPS:-""}; do
		case "$pat" in
		=*) [ "$name" = "${pat#=}" ] && hit=1 ;;
		*) case "$name" in *$pat*) hit=1 ;; esac ;;
		esac
	done
	[ -n "$hit" ] || [ -z "${GPU_STEPS:-}" ] || return 0
	# Once: the loops over test/ below meet the tests named above again.
	case " $ran " in *" $name "*) return 0 ;; esac
	ran="$ran $name"
	echo "---- $name: $*"
	timeout -k 10 "${STEP_TIMEOUT:-600}" "$@" >"$OUT/logs/$name.log" 2>&1
	rc=$?
	tail -n 40 "$OUT/logs/$name.log"
	case $rc in
	0) say "PASS $name ($((SECONDS - t0)) s)" ;;
	77) say "SKIP $name: $(tail -n1 "$OUT/logs/$name.log")" ;;
	*) say "FAIL $name (exit $rc, $((SECONDS - t0)) s)"; failed=$((failed + 1)) ;;
	esac
}

step doctor "$X/build/thaw" doctor
step doctor-json "$X/build/thaw" doctor --json
step test_cuda "$X/build/test/test_cuda"
step test_gpu_restore "$X/build/test/test_gpu_restore"
step runc-criu-smoke bash scripts/gpu-run.sh --runc-smoke
# libthaw-cuda on PyTorch processes, no container: saved, checkpointed and
# restored by the driver, copied back; the driver alone as the baseline.
step test_gpumem_gpu "$X/build/test/test_gpumem_gpu"
# Several GPUs: the 2-process tensor-parallel function (skips, 77, on one GPU).
step gpu-tp env GPU_TP_ENV='{"UV_USE_IO_URING": "0", "USE_LIBUV": "0"}' bash bench/gpu-tp-run.sh /var/tmp/thaw-gpu-tp
# The same with NCCL's P2P transport off, which the driver restores
# (gpu-tp-probe): the ranks talk through /dev/shm segments (34 MB and more
# each), so the function's /dev/shm is sized for them.  PyTorch's store
# connections are TCP and come back closed (CRIU's tcp-close): its
# monitoring thread, which reads the store, is off.
TP_NOP2P_ENV='{"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN", "UV_USE_IO_URING": "0", "USE_LIBUV": "0", "TORCH_NCCL_ENABLE_MONITORING": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}'
step gpu-tp-nop2p env GPU_TP_ENV="$TP_NOP2P_ENV" GPU_TP_SPEC='{"shm_bytes": "512M"}' \
	bash bench/gpu-tp-run.sh /var/tmp/thaw-gpu-tp-nop2p
# And with SHM off too: NCCL's socket transport over loopback.
step gpu-tp-net env GPU_TP_ENV='{"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo", "TORCH_NCCL_ENABLE_MONITORING": "0", "UV_USE_IO_URING": "0", "USE_LIBUV": "0"}' \
	GPU_TP_SPEC='{"shm_bytes": "512M"}' bash bench/gpu-tp-run.sh /var/tmp/thaw-gpu-tp-net
# One process spanning 2 GPUs, 16 GiB dealt to both (skips, 77, on one GPU).
step gpu-span bash bench/gpu-span-run.sh /var/tmp/thaw-gpu-span
# What an exported VMM handle is as a file here (what pairing an importer's
# handle with its creator's allocation can rely on).
step gpu-share-probe bash -c 'set -o pipefail; python3 bench/gpu-share-probe.py |
	tee "$THAW_FIGURES/gpu-share-probe.jsonl"'
# Which NCCL transports or allocations make the driver refuse a 2-rank job's
# checkpoint (bench/gpu-tp-probe.py; skips, 77, on one GPU).
step gpu-tp-probe bash -c 'set -o pipefail; python3 bench/gpu-tp-probe.py |
	tee "$THAW_FIGURES/gpu-tp-probe.jsonl"'

# ==== EXTEND: GPU end-to-end tests and benchmarks ============================
# Add one `step NAME COMMAND...` line per GPU test or benchmark.  Each runs from
# the repo root with THAW_BUILD (binaries), THAW_ROOT, THAW_RUNC, THAW_CRIU,
# THAW_DATA_DIR and THAW_RAM_TIER set; a benchmark writes its figures (tables,
# CSV, JSON) into $THAW_FIGURES, which comes back as figures.tar.gz.  A test
# exits 0 pass, 77 skip, anything else fail.
#
# The GPU example function: $THAW_GPU_EXAMPLE is bench/functions/gpu_example.json
# with @THAW_ROOT@ and its python3 resolved.  Its weights (1.1B parameters,
# random, seeded) are built and saved by the gpu-llm-selftest step below, which
# also measures the function's own cold boot on the host (figures: import, CUDA
# context, load, first generate): keep it before the steps that snapshot it.
export GPU_LLM_MODEL_DIR=${GPU_LLM_MODEL_DIR:-/opt/thaw-gpu-model/default}
export THAW_GPU_EXAMPLE=$X/gpu_example.json
# The container's PATH is not this shell's: the spec's PATH starts with the
# GPU machine's torch venv (/opt/torch/.venv/bin); put this python3's there.
PYBIN=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
sed -e "s|@THAW_ROOT@|$ROOT|g" -e "s|/opt/torch/.venv/bin|$PYBIN|" \
	bench/functions/gpu_example.json >"$THAW_GPU_EXAMPLE"
# A python3 under /root is invisible to a confined function (no host /root):
# say so in the spec, explicitly, rather than fail at its boot.
case "$PYBIN" in
/root/*)
	python3 - "$THAW_GPU_EXAMPLE" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["sandbox"] = {"host_home": True}
json.dump(s, open(sys.argv[1], "w"))
EOF
	;;
esac
[ -n "${GPU_LLM_SKIP:-}" ] ||
	step gpu-llm-selftest python3 bench/functions/gpu_llm.py --selftest \
		--model-dir "$GPU_LLM_MODEL_DIR"
# The tokens the cold process generated: a restored instance must generate the same
# (given in the environment when the selftest ran in an earlier call).
E2E_GPU_TOKENS=${E2E_GPU_TOKENS:-$(sed -n 's/^tokens: //p' "$OUT/logs/gpu-llm-selftest.log" 2>/dev/null | head -n1)}
export E2E_GPU_TOKENS
[ -f test/e2e_snapshot.sh ] && step e2e-snapshot-gpu bash test/e2e_snapshot.sh --gpu
# Restored mapped (the default: the driver restores from the tier's memory files).
[ -f test/e2e_restore.sh ] && step e2e-restore-gpu-mapped bash test/e2e_restore.sh --gpu
# The same restored eagerly, and lazily (thaw's lazy-pages daemon serving the image while CUDA restores).
[ -f test/e2e_restore.sh ] && step e2e-restore-gpu env THAW_MAPPED=0 THAW_LAZY=0 bash test/e2e_restore.sh --gpu
[ -f test/e2e_restore.sh ] && step e2e-restore-gpu-lazy env THAW_MAPPED=0 THAW_LAZY=1 bash test/e2e_restore.sh --gpu
# Among them e2e_fallback_gpu (restore or boot): the GPU example with its
# snapshot made unrestorable (its record says a newer CRIU) boots, generates
# the cold process's tokens, and its re-snapshot restores again.
for t in test/*gpu*.sh; do
	[ -f "$t" ] && step "$(basename "$t" .sh)" bash "$t"
done
for t in "$X"/build/test/test_*gpu*; do
	[ -x "$t" ] && step "$(basename "$t")" "$t"
done
# e.g.: step bench-gpu-start "$X/build/bench/thaw-bench" --function gpu-example ...
# thaw-bench on the GPU example: one at a time with the cold-boot and plain-restore
# baselines, GPU_BURST (default 8) at once, cold tier; a start counts once it generates the cold tokens.
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpu-llm-thaw-bench bash bench/thaw-bench-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/thaw-bench" "${GPU_BURST:-8}"
# libthaw-cuda against the driver carrying the device memory, same thawd: the
# GPU example (one at a time, a burst of 8), a 16 GiB function, expandable
# segments with a worker thread (bench/gpumem-run.sh).
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpumem-bench bash bench/gpumem-run.sh "$THAW_FIGURES/gpumem" "$E2E_GPU_TOKENS"
# The same with thawd not filling the device memory itself (THAW_GPU_PREFILL=0:
# the library copies it back after the driver's restore), for the comparison.
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpumem-bench-noprefill env THAW_GPU_PREFILL=0 bash bench/gpumem-run.sh \
		"$THAW_FIGURES/gpumem-noprefill" "$E2E_GPU_TOKENS"
# Functions in a user namespace against the same without, same thawd: the GPU
# example and a 16 GiB function, one at a time (bench/gpumem-run.sh userns).
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpu-userns bash bench/gpumem-run.sh "$THAW_FIGURES/userns" "$E2E_GPU_TOKENS" userns
# What checking the fill costs a start: the 16 GiB function's thaw starts with
# the check off (THAW_GPU_VERIFY=0) and on, one thawd each, in turn.
step start-verify-ab bash -c 'for v in 0 1; do THAW_GPU_VERIFY=$v bash bench/gpumem-run.sh \
	"$THAW_FIGURES/verify-$v" none big-thaw || exit 1; done'
# What checking the RAM tier's checksums costs thawd's fill of device memory
# (bench/fill-verify.c): 16 GiB filled checked and unchecked, alternating, 5
# rounds each, the hash's rate on 1 and 16 threads, the bytes over the link's
# ~55 GB/s.  (e2e_tier_damage_gpu, among the test/*gpu*.sh above: 63 blocks of
# 4 KiB of the GPU example's tier entry flipped, the start restored from the
# entry made again.)
step bench-fill-verify bash -c 'set -o pipefail; "$0" --mib 16384 --rounds 5 --link-gbps 55 |
	tee "$THAW_FIGURES/fill-verify.txt"' "$X/build/bench/fill-verify"
# The same on a huge-page tier (thawd's default where it can mount one), without
# the engine-alone probes.
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpu-llm-thaw-bench-huge env THAW_TIER_HUGE=1 THAW_ENGINE_PROBE=0 bash bench/thaw-bench-run.sh \
		"$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/thaw-bench-huge" "${GPU_BURST:-8}"
# Several GPUs (2 or more; skipped on one): the GPU example started on each GPU by
# request (a restore onto another GPU than its snapshot's), and a burst of GPU_BURST
# placed by thawd against the same burst on GPU 0: bench/gpu-move-run.sh.
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/gpu-move-run.sh ] &&
	step gpu-llm-move bash bench/gpu-move-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/gpu-move" "${GPU_BURST:-8}"
# A GPU instance killed from outside (its record and logs kept, its GPU memory
# freed) and admission by GPU memory (--gpu-mem-reserve): bench/gpu-limits-run.sh.
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/gpu-limits-run.sh ] &&
	step gpu-llm-limits bash bench/gpu-limits-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/gpu-limits"
# Mapped against lazy and eager (bench/mapped-burst-run.sh): one start at a time and
# bursts of GPU_BURST (default 8), MAPPED_ROUNDS (default 2) rounds each, warm tier,
# and the host memory GPU_BURST kept instances add; every start must generate the tokens.
[ -n "${E2E_GPU_TOKENS:-}" ] &&
	step gpu-llm-mapped-burst bash bench/mapped-burst-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/mapped-burst" "${GPU_BURST:-8}" "${MAPPED_ROUNDS:-2}"
# Bursts against their floors (bench/gpu-burst-run.sh): normal starts one at a time
# and 8 at once against the driver's own burst floor on the same processes; standby
# takes holding nothing and holding their contexts, one at a time and 8 at once;
# routed requests from zero; 4 context takes of the 16 GiB function against the
# link's speed.  GPU_BURST_PARTS picks parts (example routed big).
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/gpu-burst-run.sh ] &&
	step gpu-burst bash bench/gpu-burst-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/gpu-burst" ${GPU_BURST_PARTS:-}
# GET /metrics with GPU instances running, and DELETE of each (the answer's time, and
# when the instance was unreachable, its GPU memory released, its stop ended):
# bench/stop-metrics-run.sh, 2 instances of the GPU example.
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/stop-metrics-run.sh ] &&
	step stop-metrics bash bench/stop-metrics-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		"$THAW_FIGURES/stop-metrics" 2
# CPU standby takes against normal starts of the CPU example on this host's cgroup v2
# (bench/standby-run.sh, 10 each, no plain baseline): a take should be <= 0.25x.
[ -f bench/standby-run.sh ] &&
	step cpu-standby env STANDBY_PLAIN_RUNS=0 bash bench/standby-run.sh bench/functions/cpu_example.json \
		cpu-example 'GET /infer?x=7' '"y": 34689' "$THAW_FIGURES/cpu-standby" 10
# Standby starts (bench/standby-run.sh): STANDBY_ROUNDS (default 10) starts one at a
# time taking a standby (restored ahead, CUDA state checkpointed: no GPU memory held),
# against normal mapped starts and the plain restore, and what a waiting standby holds.
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/standby-run.sh ] &&
	step gpu-llm-standby bash bench/standby-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/standby" "${STANDBY_ROUNDS:-10}"
# Eager against lazy starts, one at a time from a warm tier (thaw-bench), and lazy_done;
# LAZY_REPEAT starts a series (default 3).
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/lazy-eager-run.sh ] &&
	step gpu-llm-lazy-eager bash bench/lazy-eager-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/lazy-eager" "${LAZY_REPEAT:-3}"
# A burst of GPU_BURST (default 8) starts at once, 3 rounds, warm tier, three ways:
# THAW_LAZY=auto (lazy while at most THAW_LAZY_MAX_GPU_STARTS, default 1, GPU starts
# are in flight, eager beyond), 1 and 0; p50/p99 of each in lazy-burst/summary.txt.
[ -n "${E2E_GPU_TOKENS:-}" ] && [ -f bench/lazy-burst-run.sh ] &&
	step gpu-llm-lazy-burst bash bench/lazy-burst-run.sh "$THAW_GPU_EXAMPLE" gpu-example \
		'POST /generate {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}' \
		"\"tokens\": $E2E_GPU_TOKENS" "$THAW_FIGURES/lazy-burst" "${GPU_BURST:-8}" 3
# The store's ingest (issue 2) on this machine's cores: new random data, the
# same again, and a real CRIU image pair, with SHA-256 and zstd -1 as baselines.
step bench-store bash -c 'set -o pipefail; "$0" --random-mib 1024 --repeat 3 --work /dev/shm | tee "$1"' \
	"$X/build/bench/store" "$THAW_FIGURES/store.txt"
# The same into a store on this machine's disk (the default data directory is
# on disk, and there every chunk object is a file the filesystem allocates).
step bench-store-disk bash -c 'set -o pipefail; mkdir -p /var/tmp/bs &&
	"$0" --random-mib 1024 --repeat 3 --work /var/tmp/bs | tee "$1"; r=$?; rm -rf /var/tmp/bs; exit $r' \
	"$X/build/bench/store" "$THAW_FIGURES/store-disk.txt"
# The restore engine against the naive engine and the copy floor, into /dev/shm
# and into a huge-page tmpfs (bench/engine.c), with 16 threads; last, since it
# drops the page cache.  2 runs: about 2-3 minutes; its table into engine.txt.
step bench-engine timeout -k 10 300 bash -c 'set -o pipefail
	"$0" --dir /var/tmp/be --threads 16 --runs 2 | tee "$THAW_FIGURES/engine.txt"' \
	"$X/build/bench/engine"
# How the workers share out the chunks, on the snapshot bench-engine left, into
# a huge-page tmpfs: runs of 1 against runs of 32 (warm); each worker in its own
# share against one stream in store order, warm and cold (O_DIRECT).
step bench-engine-take bash -c 'set -o pipefail; bash bench/engine-ab-run.sh /var/tmp/be 3 warm \
	"1=--take 1" "32=--take 32" | tee "$THAW_FIGURES/engine-take.txt"'
step bench-engine-order bash -c 'set -o pipefail; {
	bash bench/engine-ab-run.sh /var/tmp/be 3 cold "shares=--order shares" "stream=--order stream" &&
	bash bench/engine-ab-run.sh /var/tmp/be 3 warm "shares=--order shares" "stream=--order stream"
	} | tee "$THAW_FIGURES/engine-order.txt"'
# Cold reads (O_DIRECT), A/B: the engine's queue depth, and build/thaw-old
# at both depths where gpu-pack was given GPU_PACK_OLD (thaw built at an older
# commit).  Makes the snapshot if bench-engine did not.
step bench-engine-qd bash -c 'set -o pipefail; {
	"$0" --dir /var/tmp/be --runs 0 &&
	old=() && { [ ! -x "$THAW_BUILD/thaw-old" ] ||
		old=("old64=$THAW_BUILD/thaw-old --qd 64" "old256=$THAW_BUILD/thaw-old --qd 256"); } &&
	bash bench/engine-ab-run.sh /var/tmp/be 4 cold "qd64=--qd 64" "qd256=--qd 256" "${old[@]}"
	} | tee "$THAW_FIGURES/engine-qd.txt"' "$X/build/bench/engine"
rm -rf /var/tmp/be
# The disk tier against the disk (bench/disk-tier-run.sh): a 16 GB image in a
# store on this disk; its packs read with O_DIRECT (the floor) against the
# manifest load and materialisation into a RAM tier from a cold page cache,
# 3 rounds; and a 17.2 GB image's manifest, JSON against binary.  ~3-4 minutes.
step disk-tier bash bench/disk-tier-run.sh "${DISK_TIER_GB:-16}" /var/tmp/thaw-disk-tier \
	"$THAW_FIGURES/disk-tier"
# ==== end of EXTEND ===========================================================

if [ -n "${GPU_ALL_TESTS:-}" ]; then
	step all-tests env B=.gpu/x/build scripts/run-tests.sh
	cp -r "$X/build/test-logs" "$OUT/logs/" 2>/dev/null
fi

say "== $failed failed, $((SECONDS - start_all)) s in all"
# Figures the steps printed ("figure: ..." lines) go into the summary too.
grep -h "^figure:" "$OUT"/logs/*.log >>"$SUMMARY" 2>/dev/null
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
if [ -n "$(ls -A "$OUT/figures")" ]; then
	tar -C "$OUT" -czf "$OUT/figures.tar.gz" figures
fi
rm -rf "$OUT/figures"
[ $failed = 0 ]
