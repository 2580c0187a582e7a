#!/usr/bin/env python3
"""cpu_example.py -- thaw's CPU example function (Python standard library only).

At start it builds THAW_EXAMPLE_MIB MiB (default 256) of deterministic state
from a seeded PRNG, a little at a time, as a model load would, then serves
HTTP on $PORT (default 8000):

  GET  /health      200 "ok"
  GET  /infer?x=N   {"x":N,"y":...}: a pure function of the state and N, so a
                    restored instance answers exactly as the original did
  GET  /info        {"mib","digest","load_s","pid"}: digest is a hash of the
                    whole state, computed at load
  POST /state?v=K   sets a mutable value; GET /state returns it (instances
                    restored from one snapshot do not share it)
  GET  /pid         os.getpid()
  GET  /netns       the network namespace, readlink("/proc/self/ns/net")
"""

import hashlib
import http.server
import json
import os
import random
import sys
import time
import urllib.parse

CHUNK = 1 << 20
MIB = int(os.environ.get("THAW_EXAMPLE_MIB", "256"))
PORT = int(os.environ.get("PORT", "8000"))
HOST = os.environ.get("HOST", "0.0.0.0")


def log(msg):
    print("cpu_example: %s" % msg, file=sys.stderr, flush=True)


def load_state(mib):
    """mib chunks of 1 MiB from a seeded PRNG, with a light pass over each
    (as weights are converted on load) so that building it takes a while."""
    rng = random.Random(20260101)
    chunks = []
    h = hashlib.sha256()
    for _ in range(mib):
        c = bytearray(rng.randbytes(CHUNK))
        # Touch every page, as a load that converts its data would.
        for off in range(0, CHUNK, 4096):
            c[off] ^= 0x5A
        h.update(c)
        chunks.append(c)
    return chunks, h.hexdigest()


t0 = time.monotonic()
STATE, DIGEST = load_state(MIB)
LOAD_S = time.monotonic() - t0
TOTAL = len(STATE) * CHUNK
mutable = {"v": None}


def infer(x):
    """Sum of 256 bytes of the state picked by x: deterministic."""
    y = 0
    for i in range(256):
        idx = (x * 2654435761 + i * 40503 + (y & 0xFF)) % TOTAL
        y += STATE[idx // CHUNK][idx % CHUNK]
    return y


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection

    def reply(self, code, obj):
        body = obj if isinstance(obj, bytes) else (json.dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(obj, bytes) else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path == "/health":
            self.reply(200, b"ok")
        elif u.path == "/infer":
            try:
                x = int(q.get("x", ["0"])[0])
            except ValueError:
                return self.reply(400, {"error": "x must be an integer"})
            self.reply(200, {"x": x, "y": infer(x)})
        elif u.path == "/info":
            self.reply(200, {"mib": MIB, "digest": DIGEST, "load_s": LOAD_S, "pid": os.getpid()})
        elif u.path == "/state":
            self.reply(200, {"v": mutable["v"]})
        elif u.path == "/pid":
            self.reply(200, {"pid": os.getpid()})
        elif u.path == "/netns":
            self.reply(200, {"netns": os.readlink("/proc/self/ns/net")})
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        u = urllib.parse.urlparse(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if u.path == "/state":
            mutable["v"] = urllib.parse.parse_qs(u.query).get("v", [None])[0]
            self.reply(200, {"v": mutable["v"]})
        elif u.path == "/infer":
            self.do_GET()
        else:
            self.reply(404, {"error": "not found"})

    def log_message(self, fmt, *args):
        pass  # quiet: thaw keeps this process's stderr as its log


class Server(http.server.HTTPServer):
    allow_reuse_address = True
    # socketserver's backlog is 5: more clients connecting at once would see
    # SYNs dropped and retried a second later.
    request_queue_size = 64


if __name__ == "__main__":
    srv = Server((HOST, PORT), Handler)
    log("state %d MiB (digest %s) built in %.2f s; listening on %s:%d"
        % (MIB, DIGEST[:16], LOAD_S, HOST, PORT))
    srv.serve_forever()
