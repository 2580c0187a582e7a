# gpu-tp-probe.py — can the CUDA driver checkpoint a 2-rank NCCL job, and which
# NCCL transports (or allocations) make it refuse?  Run on a host with two or
# more GPUs (scripts/gpu-run.sh's step gpu-tp-probe; skips, 77, with fewer):
#   python3 bench/gpu-tp-probe.py      one JSON line per variant: the driver's
#                                      answer to lock, checkpoint, restore and
#                                      unlock of each rank, and whether the
#                                      ranks' next all_reduce was right
# Variants: two processes without NCCL (solo), NCCL by default, without P2P and
# SHM, without P2P, with cuMem off, and both; NVLS and cuMem host memory off in
# all (ONLY="tag ..." picks some).  From the project's probe
# (../shared/probes/tp_probe.py), first run here.
import ctypes, json, os, signal, subprocess, sys, tempfile, time
D = os.environ.get("TP_DIR") or tempfile.mkdtemp(prefix="tp-")
os.environ["TP_DIR"] = D
PY = sys.executable
if len(sys.argv) > 1 and sys.argv[1] == "rank":
    import torch, torch.distributed as dist
    r = int(os.environ["RANK"]); tag = os.environ["TAG"]
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", rank=r, world_size=2, init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                            device_id=torch.device("cuda", r))
    x = torch.ones(1 << 22, device="cuda") * (r + 1)
    dist.all_reduce(x); torch.cuda.synchronize()
    open(D + "/tp-%s-ready-%d" % (tag, r), "w").write(str(os.getpid()))
    while not os.path.exists(D + "/tp-%s-go" % tag): time.sleep(0.02)
    x = torch.ones(1 << 22, device="cuda") * (r + 1); dist.all_reduce(x); torch.cuda.synchronize()
    open(D + "/tp-%s-done-%d" % (tag, r), "w").write(str(x[0].item()))
    os._exit(0)
if len(sys.argv) > 1 and sys.argv[1] == "solo":
    import torch
    r = int(os.environ["RANK"]); tag = os.environ["TAG"]
    torch.cuda.set_device(r); x = torch.ones(1 << 22, device="cuda") * (r + 1); torch.cuda.synchronize()
    open(D + "/tp-%s-ready-%d" % (tag, r), "w").write(str(os.getpid()))
    while not os.path.exists(D + "/tp-%s-go" % tag): time.sleep(0.02)
    open(D + "/tp-%s-done-%d" % (tag, r), "w").write(str((x * 2)[0].item()))
    os._exit(0)

cu = ctypes.CDLL("libcuda.so.1"); cu.cuInit(0)
_n = ctypes.c_int(0); cu.cuDeviceGetCount(ctypes.byref(_n))
if _n.value < 2:
    print("skipped: %d GPU(s); the probe needs two" % _n.value); sys.exit(77)
def call(name, pid, timeout_ms=0):
    buf = (ctypes.c_ubyte * 256)()
    if timeout_ms: ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint))[0] = timeout_ms
    t = time.monotonic(); r = getattr(cu, name)(ctypes.c_int(pid), buf)
    return r, (time.monotonic() - t) * 1e3
def state(pid):
    s = ctypes.c_int(-1); r = cu.cuCheckpointProcessGetState(ctypes.c_int(pid), ctypes.byref(s)); return (r, s.value)

VARIANTS = [
    ("solo", "solo", {}),
    ("nccl-default", "rank", {}),
    ("nccl-no-p2p-no-shm", "rank", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}),
    ("nccl-no-p2p", "rank", {"NCCL_P2P_DISABLE": "1"}),
    ("nccl-cumem-off", "rank", {"NCCL_CUMEM_ENABLE": "0"}),
    ("nccl-cumem-off-no-p2p-no-shm", "rank", {"NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}),
]
only = os.environ.get("ONLY", "")
port = 29600
for tag, mode, extra in VARIANTS:
    if only and tag not in only.split(): continue
    port += 1
    os.system("rm -f %s/tp-%s-*" % (D, tag))
    env = dict(os.environ, TAG=tag, PORT=str(port), NCCL_NVLS_ENABLE="0", NCCL_CUMEM_HOST_ENABLE="0",
               NCCL_SOCKET_IFNAME="lo", NCCL_DEBUG="WARN", **extra)
    procs = [subprocess.Popen([PY, __file__, mode], env=dict(env, RANK=str(r)), stdout=open(D + "/tp-%s-log-%d" % (tag, r), "w"),
                              stderr=subprocess.STDOUT, start_new_session=True) for r in range(2)]
    pids = []
    for _ in range(1800):
        if all(os.path.exists(D + "/tp-%s-ready-%d" % (tag, r)) for r in range(2)): break
        if any(p.poll() is not None for p in procs): break
        time.sleep(0.1)
    res = {"variant": tag, "env": extra}
    try:
        pids = [int(open(D + "/tp-%s-ready-%d" % (tag, r)).read()) for r in range(2)]
    except Exception as e:
        res["error"] = "ranks not ready: %s" % e
        for r in range(2): res["log%d" % r] = open(D + "/tp-%s-log-%d" % (tag, r)).read()[-1500:]
    if pids:
        res["state0"] = [state(p) for p in pids]
        ok = True
        for step, to in (("cuCheckpointProcessLock", 15000), ("cuCheckpointProcessCheckpoint", 0),
                         ("cuCheckpointProcessRestore", 0), ("cuCheckpointProcessUnlock", 0)):
            out = [call(step, p, to) for p in pids]
            res[step] = out
            if any(r != 0 for r, _ in out):
                ok = False
                # undo what can be undone
                if step == "cuCheckpointProcessCheckpoint":
                    for p, (r, _) in zip(pids, out):
                        if r == 0: call("cuCheckpointProcessRestore", p)
                    [call("cuCheckpointProcessUnlock", p) for p in pids]
                elif step == "cuCheckpointProcessLock":
                    for p, (r, _) in zip(pids, out):
                        if r == 0: call("cuCheckpointProcessUnlock", p)
                break
        res["state1"] = [state(p) for p in pids]
        open(D + "/tp-%s-go" % tag, "w").write("1")
        for _ in range(300):
            if all(os.path.exists(D + "/tp-%s-done-%d" % (tag, r)) for r in range(2)): break
            time.sleep(0.1)
        res["after"] = [open(D + "/tp-%s-done-%d" % (tag, r)).read() if os.path.exists(D + "/tp-%s-done-%d" % (tag, r)) else None for r in range(2)]
        res["ok"] = ok
        if not ok or None in res["after"]:
            for r in range(2): res["log%d" % r] = open(D + "/tp-%s-log-%d" % (tag, r)).read()[-800:]
    for p in procs:
        try: os.killpg(p.pid, signal.SIGKILL)
        except Exception: pass
        p.wait()
    print(json.dumps(res), flush=True)
