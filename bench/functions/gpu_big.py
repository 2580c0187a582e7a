#!/usr/bin/env python3
"""gpu_big.py -- a GPU function that holds a lot of device memory (thaw's
libthaw-cuda benchmark, bench/gpumem-run.sh).

It fills --gib GiB of device memory with seeded random tensors (256 MiB
each; the allocator is whatever PYTORCH_CUDA_ALLOC_CONF says) and records,
in host memory, a checksum of each.  With --gpus K the tensors are dealt
to GPUs 0..K-1 in turn (one process spanning K GPUs).  With --worker a background thread
keeps launching matmuls on its own stream, before and after a snapshot.

  GET  /health   200 once everything is allocated and checksummed
  POST /check    recomputes every tensor's checksum on the GPU now and
                 compares it with the one recorded at boot:
                 {"match": true, "tensors": N, "gib": G, "worker": K, "ms": T}
Deterministic: the same seed gives the same tensors, so the answer of a
restored instance equals the cold process's ("match": true and the same N).
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=8000)
ap.add_argument("--gib", type=float, default=16.0)
ap.add_argument("--worker", action="store_true")
ap.add_argument("--gpus", type=int, default=1)
a = ap.parse_args()

torch.manual_seed(20261127)
dev = torch.device("cuda:0")
CHUNK = 256 << 20
tensors = [torch.randn(CHUNK // 4, device=torch.device("cuda", i % a.gpus))
           for i in range(max(1, int(a.gib * (1 << 30)) // CHUNK))]


def sums():
    # One copy back per GPU (in the order of the devices, the same each time).
    return [x for d in range(a.gpus)
            for x in torch.stack([t.double().sum() for t in tensors if t.device.index == d]).cpu().tolist()]


recorded = sums()
worker_done = 0


def worker():
    global worker_done
    x = torch.randn(2048, 2048, device=dev)
    st = torch.cuda.Stream()
    while True:
        with torch.cuda.stream(st):
            x = torch.tanh(x @ x)
            x.sum().item()
        worker_done += 1


class H(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        self.reply(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if self.path != "/check":
            return self.reply(404, {})
        t = time.monotonic()
        now = sums()
        self.reply(200, {"match": now == recorded, "tensors": len(tensors), "gib": a.gib,
                         "gpus": sorted({t.device.index for t in tensors}),
                         "worker": worker_done, "ms": round((time.monotonic() - t) * 1e3, 1)})

    def log_message(self, *args):
        pass


if a.worker:
    threading.Thread(target=worker, daemon=True).start()
for i in range(a.gpus):
    torch.cuda.synchronize(i)
ThreadingHTTPServer(("0.0.0.0", a.port), H).serve_forever()
