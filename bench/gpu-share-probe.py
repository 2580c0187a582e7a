#!/usr/bin/env python3
# gpu-share-probe.py — what an exported VMM handle is, as a file, on this
# driver: the facts libthaw-cuda's carrying of shared device memory depends
# on (how an importer's handle is paired with its creator's allocation).
#   python3 bench/gpu-share-probe.py     one JSON line per fact
# The creator makes 2 MiB with cuMemCreate (POSIX fd handles), writes a
# pattern, exports it twice; an importer process (this script, "importer")
# gets one fd by inheritance, imports it, maps it and reads the pattern.
# Said: each fd's fstat (dev, ino, rdev, mode), its /proc link and fdinfo,
# whether the two exports are one open file (kcmp KCMP_FILE), whether the
# importer's fd is the creator's, and whether the importer saw the bytes.
import ctypes, json, os, subprocess, sys

cu = ctypes.CDLL("libcuda.so.1")
libc = ctypes.CDLL(None, use_errno=True)
u64, sz = ctypes.c_uint64, ctypes.c_size_t


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("loc", Loc),
                ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]


class Access(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]


def ok(r, what):
    if r:
        print(json.dumps({"error": what, "cuda": r}), flush=True)
        sys.exit(1)


def fd_facts(fd):
    st = os.fstat(fd)
    try:
        info = open("/proc/self/fdinfo/%d" % fd).read().split("\n")
    except OSError:
        info = []
    return {"dev": st.st_dev, "ino": st.st_ino, "rdev": st.st_rdev, "mode": oct(st.st_mode),
            "link": os.readlink("/proc/self/fd/%d" % fd), "fdinfo": [l for l in info if l]}


def setup():
    ok(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    p = Prop(type=1, handle_types=1, loc=Loc(1, 0))
    g = sz()
    ok(cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(p), 0), "granularity")
    return p, g.value


def map_at(h, size):
    va = u64()
    ok(cu.cuMemAddressReserve(ctypes.byref(va), sz(size), sz(0), u64(0), u64(0)), "reserve")
    ok(cu.cuMemMap(va, sz(size), sz(0), h, u64(0)), "map")
    a = Access(loc=Loc(1, 0), flags=3)
    ok(cu.cuMemSetAccess(va, sz(size), ctypes.byref(a), sz(1)), "access")
    return va


if len(sys.argv) > 2 and sys.argv[1] == "importer":
    fd = int(sys.argv[2])
    p, size = setup()
    facts = fd_facts(fd)
    h = u64()
    r = cu.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), 1)
    ok(r, "import")
    os.close(fd)  # as NCCL does: the handle outlives the fd
    va = map_at(h, size)
    buf = (ctypes.c_ubyte * 16)()
    ok(cu.cuMemcpyDtoH_v2(buf, va, sz(16)), "read")
    again = ctypes.c_int(-1)
    r2 = cu.cuMemExportToShareableHandle(ctypes.byref(again), h, 1, u64(0))
    # Is the importer's own export the creator's open file (kcmp, as root)?
    kc = libc.syscall(312, os.getppid(), os.getpid(), 0, fd, again.value) if r2 == 0 else None
    print(json.dumps({"importer": facts, "bytes": list(buf), "reexport_result": r2,
                      "reexport": fd_facts(again.value) if r2 == 0 else None,
                      "kcmp_creator_export_vs_reexport": kc}), flush=True)
    sys.exit(0)

p, size = setup()
h = u64()
ok(cu.cuMemCreate(ctypes.byref(h), sz(size), ctypes.byref(p), u64(0)), "cuMemCreate")
va = map_at(h, size)
ok(cu.cuMemsetD8_v2(va, ctypes.c_ubyte(0x5a), sz(size)), "memset")
ok(cu.cuCtxSynchronize(), "sync")
fds = []
for _ in range(2):
    fd = ctypes.c_int(-1)
    ok(cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, 1, u64(0)), "export")
    fds.append(fd.value)
SYS_kcmp, KCMP_FILE = 312, 0
me = os.getpid()
same = libc.syscall(SYS_kcmp, me, me, KCMP_FILE, fds[0], fds[1])
print(json.dumps({"creator": [fd_facts(f) for f in fds], "granularity": size,
                  "kcmp_two_exports": same}), flush=True)
child = subprocess.Popen([sys.executable, __file__, "importer", str(fds[0])], pass_fds=[fds[0]])
child.wait()
print(json.dumps({"importer_exit": child.returncode}), flush=True)
