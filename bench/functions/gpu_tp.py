#!/usr/bin/env python3
"""A tensor-parallel function of 2 processes over NCCL (PyTorch distributed):
rank 0 serves HTTP on --port; each request runs one column-parallel matmul
split over both GPUs and an all-reduce, and answers the checksum.  Rank 1
only follows rank 0's broadcasts.  For thaw's "gpus": 2 (bench/functions/
gpu_tp.json): every CUDA process of the container is locked, checkpointed,
restored and unlocked as one."""
import argparse, json, os, sys
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


def worker(rank, port):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    g = torch.Generator(device="cpu").manual_seed(1234)
    w = torch.randn(N, N, generator=g)[:, rank * N // 2:(rank + 1) * N // 2].cuda()
    cmd = torch.zeros(1, dtype=torch.int64, device="cuda")
    if rank == 1:
        while True:                # follow rank 0: 1 = a step, 0 = stop
            dist.broadcast(cmd, 0)
            if int(cmd.item()) == 0:
                return
            x = torch.empty(1, N, device="cuda")
            dist.broadcast(x, 0)
            step(rank, w, x)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/health"):
                body = b"ok"
            else:
                cmd.fill_(1)
                dist.broadcast(cmd, 0)
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
    if torch.cuda.device_count() < 2:
        sys.exit("gpu_tp.py needs 2 GPUs, sees %d" % torch.cuda.device_count())
    mp.spawn(worker, args=(a.port,), nprocs=2, join=True)
