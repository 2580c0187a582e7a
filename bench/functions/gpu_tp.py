#!/usr/bin/env python3
"""A tensor-parallel function of 2 processes over NCCL (PyTorch distributed):
rank 0 serves HTTP on --port; each request runs one column-parallel matmul
split over both GPUs and an all-reduce, and answers the checksum.  Rank 1
follows rank 0.  For thaw's "gpus": 2 (bench/functions/gpu_tp.json): every
CUDA process of the container is locked, checkpointed, restored and unlocked
as one.

Idle, no process has GPU work queued or a CUDA call under way: rank 1 waits
for rank 0's word on a FIFO (a read on the CPU), not in an NCCL broadcast.
A broadcast kernel spinning on the GPU until the next request would never
finish, and the driver's lock waits for queued work to finish: it answers
CUDA_ERROR_NOT_READY.  Serving systems wait the same way (vLLM's workers
read a shared-memory queue).  The parent process does not use CUDA at all
(it only spawns the ranks), so it holds no context the driver must lock."""
import argparse, json, os, sys, tempfile
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N = 4096


def step(rank, w, x):
    y = x @ w                      # this rank's half of the columns
    s = y.sum()
    dist.all_reduce(s)             # NCCL between the two GPUs
    return float(s.item())


def worker(rank, port, fifo):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    if torch.cuda.device_count() < 2:
        sys.exit("gpu_tp.py needs 2 GPUs, sees %d" % torch.cuda.device_count())
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cpu").manual_seed(1234)
    w = torch.randn(N, N, generator=g)[:, rank * N // 2:(rank + 1) * N // 2].cuda()
    if rank == 1:
        with open(fifo, "rb", buffering=0) as words:
            while words.read(1) == b"1":   # one byte a step; EOF: rank 0 is gone
                x = torch.empty(1, N, device="cuda")
                dist.broadcast(x, 0)
                step(rank, w, x)
        return
    words = open(fifo, "wb", buffering=0)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/health"):
                body = b"ok"
            else:
                words.write(b"1")
                x = torch.ones(1, N, device="cuda")
                dist.broadcast(x, 0)
                body = json.dumps({"sum": step(0, w, x), "gpus": 2}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer(("0.0.0.0", port), H).serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    a = ap.parse_args()
    fifo = os.path.join(tempfile.mkdtemp(prefix="gpu-tp-"), "steps")
    os.mkfifo(fifo)
    mp.spawn(worker, args=(a.port, fifo), nprocs=2, join=True)
