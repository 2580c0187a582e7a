#!/usr/bin/env python3
# stop-probe.py — what a GPU instance's stop and a /metrics scrape cost in the
# driver (run on the GPU host as root; bench/LOG.md, 2026-11-29, has its figures).
#   1. the calls thawd's /metrics makes per scrape (cuda_devices: cuDevice*,
#      nvmlDeviceGetHandleByUUID, nvmlDeviceGetMemoryInfo, GetMinorNumber), each timed;
#   2. a PyTorch process holding GIB GiB and computing: lock, [checkpoint], SIGKILL,
#      then how long until it is reaped and until NVML's free figure has it back.
import ctypes, os, signal, subprocess, sys, time

GIB = int(os.environ.get("GIB", "16"))
cu = ctypes.CDLL("libcuda.so.1")
nv = ctypes.CDLL("libnvidia-ml.so.1")

def ms(t0):
    return (time.monotonic() - t0) * 1000

class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

class LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("r0", ctypes.c_uint), ("r1", ctypes.c_ulonglong * 7)]

class Plain(ctypes.Structure):
    _fields_ = [("r", ctypes.c_ulonglong * 8)]

def check(name, r):
    if r != 0:
        print(f"{name} -> {r}", flush=True)
    return r

t0 = time.monotonic(); check("cuInit", cu.cuInit(0)); print(f"cuInit {ms(t0):.1f} ms")
t0 = time.monotonic(); check("nvmlInit", nv.nvmlInit_v2()); print(f"nvmlInit {ms(t0):.1f} ms")

def scrape(tag):
    t_all = time.monotonic()
    cnt = ctypes.c_int()
    t = {}
    t0 = time.monotonic(); cu.cuDeviceGetCount(ctypes.byref(cnt)); t["count"] = ms(t0)
    free = []
    for i in range(cnt.value):
        dev = ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        uuid = (ctypes.c_ubyte * 16)()
        total = ctypes.c_size_t()
        t0 = time.monotonic()
        cu.cuDeviceGet(ctypes.byref(dev), i)
        cu.cuDeviceGetName(name, 256, dev)
        cu.cuDeviceGetUuid(uuid, dev)
        cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
        v = ctypes.c_int()
        cu.cuDeviceGetAttribute(ctypes.byref(v), 75, dev)
        t["cuDevice*"] = ms(t0)
        b = bytes(uuid)
        us = "GPU-%s-%s-%s-%s-%s" % (b[0:4].hex(), b[4:6].hex(), b[6:8].hex(), b[8:10].hex(), b[10:16].hex())
        h = ctypes.c_void_p()
        t0 = time.monotonic(); check("byUUID", nv.nvmlDeviceGetHandleByUUID(us.encode(), ctypes.byref(h))); t["nvmlByUUID"] = ms(t0)
        m = Mem()
        t0 = time.monotonic(); check("memInfo", nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))); t["nvmlMemoryInfo"] = ms(t0)
        mi = ctypes.c_uint()
        t0 = time.monotonic(); nv.nvmlDeviceGetMinorNumber(h, ctypes.byref(mi)); t["nvmlMinor"] = ms(t0)
        free.append(m.free)
    t0 = time.monotonic()
    for d in os.listdir("/proc/driver/nvidia/gpus") if os.path.isdir("/proc/driver/nvidia/gpus") else []:
        open(f"/proc/driver/nvidia/gpus/{d}/information").read()
    t["procinfo"] = ms(t0)
    print(f"scrape[{tag}] total {ms(t_all):.1f} ms: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()), flush=True)
    return free

def nvml_free():
    h = ctypes.c_void_p(); nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    m = Mem(); nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)); return m.free

for k in range(3):
    scrape(f"idle {k}")

CHILD = r'''
import os, signal, sys, torch
signal.signal(signal.SIGTERM, lambda *a: None)
gib = int(sys.argv[1])
keep = [torch.ones(256 * 1024 * 1024, dtype=torch.float32, device="cuda") for _ in range(gib)]
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
c = a @ b; torch.cuda.synchronize()
print("ready", flush=True)
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
'''

def child():
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(GIB)], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    time.sleep(0.5)
    return p

def stop(p, mode, base_free):
    st = ctypes.c_int()
    la = LockArgs(10000); pa = Plain()
    t_all = time.monotonic()
    t0 = time.monotonic(); r = check("lock", cu.cuCheckpointProcessLock(p.pid, ctypes.byref(la))); t_lock = ms(t0)
    t_ck = 0.0
    if mode == "checkpoint":
        t0 = time.monotonic(); check("checkpoint", cu.cuCheckpointProcessCheckpoint(p.pid, ctypes.byref(pa))); t_ck = ms(t0)
    t0 = time.monotonic(); os.kill(p.pid, signal.SIGKILL); p.wait(); t_reap = ms(t0)
    t0 = time.monotonic()
    while nvml_free() < base_free - (256 << 20) and ms(t0) < 30000:
        time.sleep(0.005)
    t_free = ms(t0)
    print(f"stop[{mode}, {GIB} GiB]: lock {t_lock:.1f} ms, checkpoint {t_ck:.1f} ms, kill->reaped {t_reap:.1f} ms, "
          f"reaped->GPU memory free {t_free:.1f} ms, total {ms(t_all):.1f} ms", flush=True)

base = nvml_free()
for mode in ["checkpoint", "lock-only", "checkpoint", "lock-only"]:
    p = child()
    print(f"child {p.pid} holds {(base - nvml_free()) / 2**30:.1f} GiB", flush=True)
    if mode == "checkpoint":
        p2 = child()
        for k in range(2):
            scrape(f"2 GPU processes {k}")
        cu.cuCheckpointProcessLock(p2.pid, ctypes.byref(LockArgs(10000)))
        p2.kill(); p2.wait()
        t0 = time.monotonic()
        while nvml_free() < base - (GIB << 30) - (1 << 30) and ms(t0) < 30000:
            time.sleep(0.01)
    stop(p, mode, base)
print("done", flush=True)
