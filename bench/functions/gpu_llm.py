#!/usr/bin/env python3
"""gpu_llm.py -- thaw's GPU example function: a Llama model served over HTTP.

No weights can be downloaded on the GPU machine, so the model is a real Llama
architecture with random weights, built from a LlamaConfig and seeded, so that
every run builds the same weights.  The first run (or --prepare) saves them as
safetensors into the model directory; every run then LOADS them from there, as
a real inference function loads its checkpoint, and moves the model to CUDA.

  GET  /health    200 {"status":"ok"} (the server only listens once loaded)
  GET  /info      the config, parameter count and the startup timings
  POST /generate  {"prompt_ids":[1,2,3], "max_new_tokens":16}
                  -> {"tokens":[...], "ms": ...}   greedy decoding, deterministic

Size: --hidden --layers --heads --kv-heads --intermediate --vocab (or the env
GPU_LLM_HIDDEN, ...).  The default, about 1.1B parameters in bf16 (2.2 GB of
safetensors), is TinyLlama's shape: hidden 2048, 22 layers, 32 heads, 4 KV
heads, intermediate 5632, vocab 32000.

bench/functions/gpu_example.json is its function spec, a template: replace
@THAW_ROOT@ with the repository's path.  Its PATH starts with the GPU
machine's torch venv (/opt/torch/.venv/bin): the container's PATH is not the
shell's, and /usr/bin/python3 there has no torch (scripts/gpu-run.sh puts the
directory of its own python3 there).

Inside a thaw container /tmp is a tmpfs that CRIU dumps with the process, so
the weights must live elsewhere: the default model directory is
/opt/thaw-gpu-model/<shape> (bound read-only into the container).
Prepare it on the host first:  python3 gpu_llm.py --prepare

  python3 gpu_llm.py [--port 8000] [--model-dir DIR] [size options]
  python3 gpu_llm.py --prepare     build and save the weights, then exit
  python3 gpu_llm.py --selftest    load, serve on a free port, call /health and
                                   /generate twice through HTTP, print timings
                                   ("figure: ..." lines), exit 0 if all is well
"""

import argparse
import json
import os
import sys
import time

T0 = time.monotonic()
TIMINGS = {}
# Nothing is ever downloaded (the GPU machine has no network), and the
# container's home is read-only: keep the hub libraries from trying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def log(msg):
    print("gpu_llm: %s" % msg, file=sys.stderr, flush=True)


def env_int(name, default):
    v = os.environ.get("GPU_LLM_" + name)
    return int(v) if v else default


def parse_args():
    p = argparse.ArgumentParser(description="thaw's GPU example function")
    p.add_argument("--port", type=int, default=env_int("PORT", 8000))
    p.add_argument("--host", default=os.environ.get("GPU_LLM_HOST", "0.0.0.0"))
    p.add_argument("--model-dir", default=os.environ.get("GPU_LLM_MODEL_DIR"))
    p.add_argument("--hidden", type=int, default=env_int("HIDDEN", 2048))
    p.add_argument("--layers", type=int, default=env_int("LAYERS", 22))
    p.add_argument("--heads", type=int, default=env_int("HEADS", 32))
    p.add_argument("--kv-heads", type=int, default=env_int("KV_HEADS", 4))
    p.add_argument("--intermediate", type=int, default=env_int("INTERMEDIATE", 5632))
    p.add_argument("--vocab", type=int, default=env_int("VOCAB", 32000))
    p.add_argument("--max-positions", type=int, default=env_int("MAX_POSITIONS", 2048))
    p.add_argument("--seed", type=int, default=env_int("SEED", 1234))
    p.add_argument("--prepare", action="store_true", help="build and save the weights, exit")
    p.add_argument("--selftest", action="store_true", help="serve, call it over HTTP, exit")
    a = p.parse_args()
    shape = "h%d-l%d-a%d-kv%d-i%d-v%d-p%d-s%d" % (a.hidden, a.layers, a.heads, a.kv_heads,
                                                  a.intermediate, a.vocab, a.max_positions,
                                                  a.seed)
    if not a.model_dir:
        a.model_dir = os.path.join("/opt/thaw-gpu-model", shape)
    return a


def llama_config(a):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        intermediate_size=a.intermediate,
        vocab_size=a.vocab,
        max_position_embeddings=a.max_positions,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def have_weights(d):
    return os.path.isfile(os.path.join(d, "config.json")) and any(
        f.endswith(".safetensors") for f in os.listdir(d))


def prepare(a):
    """Build the seeded random model and save it as safetensors, atomically:
    into a temporary directory beside, then renamed, so that a reader never
    sees half a checkpoint and two preparers do not collide."""
    import torch
    from transformers import LlamaForCausalLM

    if have_weights(a.model_dir):
        return
    t = time.monotonic()
    torch.manual_seed(a.seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # build in bf16: half the memory and time
    try:
        model = LlamaForCausalLM(llama_config(a))
    finally:
        torch.set_default_dtype(old)
    model = model.to(torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    parent = os.path.dirname(os.path.abspath(a.model_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = "%s.tmp-%d" % (a.model_dir, os.getpid())
    try:
        model.save_pretrained(tmp, safe_serialization=True)
    except TypeError:  # transformers 5 writes safetensors only, and has no such flag
        model.save_pretrained(tmp)
    # safetensors writes the weights 0600: made readable by every uid, so
    # that the function runs in a user namespace too (its uid 0 is not the
    # host's).  Random weights, no secret.
    for f in os.listdir(tmp):
        os.chmod(os.path.join(tmp, f), 0o644)
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, a.model_dir)
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # another preparer won the race
        if not have_weights(a.model_dir):
            raise
    TIMINGS["build_save_s"] = round(time.monotonic() - t, 3)
    log("built %.2fB parameters, saved to %s in %.1f s" % (n / 1e9, a.model_dir,
                                                           TIMINGS["build_save_s"]))


class Model:
    def __init__(self, a):
        import torch
        import transformers  # noqa: F401  (part of what a cold boot pays for)

        TIMINGS["import_s"] = round(time.monotonic() - T0, 3)
        if not torch.cuda.is_available():
            raise SystemExit("gpu_llm: no CUDA device")
        t = time.monotonic()
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the CUDA context
        TIMINGS["cuda_context_s"] = round(time.monotonic() - t, 3)

        if not have_weights(a.model_dir):
            prepare(a)

        from transformers import LlamaForCausalLM

        t = time.monotonic()
        try:
            m = LlamaForCausalLM.from_pretrained(a.model_dir, dtype=torch.bfloat16)
        except TypeError:  # transformers < 4.56 knows only torch_dtype
            m = LlamaForCausalLM.from_pretrained(a.model_dir, torch_dtype=torch.bfloat16)
        TIMINGS["load_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        self.model = m.to("cuda").eval()
        torch.cuda.synchronize()
        TIMINGS["to_cuda_s"] = round(time.monotonic() - t, 3)
        self.torch = torch
        self.vocab = a.vocab
        self.params = sum(p.numel() for p in self.model.parameters())
        self.max_positions = a.max_positions

    def generate(self, prompt_ids, max_new_tokens):
        """Greedy decoding with the KV cache, token by token: deterministic,
        and independent of generate()'s changing defaults across versions."""
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor([prompt_ids], dtype=torch.long, device="cuda")
            out = self.model(input_ids=ids, use_cache=True)
            tokens = []
            for i in range(max_new_tokens):
                tok = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                tokens.append(int(tok.item()))
                if i + 1 < max_new_tokens:
                    out = self.model(input_ids=tok, past_key_values=out.past_key_values,
                                     use_cache=True)
        return tokens


def make_handler(model, info):
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # keep stderr for what matters
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/info":
                self.reply(200, info)
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/generate":
                self.reply(404, {"error": "not found"})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if n < 0 or n > 1 << 20:
                    raise ValueError("body too large")
                req = json.loads(self.rfile.read(n) or b"{}")
                prompt = req.get("prompt_ids", [1])
                max_new = int(req.get("max_new_tokens", 16))
                if (not isinstance(prompt, list) or not prompt or
                        not all(isinstance(t, int) and 0 <= t < model.vocab for t in prompt)):
                    raise ValueError("prompt_ids: a non-empty list of token ids < %d"
                                     % model.vocab)
                if not 1 <= max_new <= 1024 or len(prompt) + max_new > model.max_positions:
                    raise ValueError("max_new_tokens: 1..1024, within %d positions"
                                     % model.max_positions)
            except (ValueError, TypeError, AttributeError) as e:
                self.reply(400, {"error": str(e)})
                return
            t = time.monotonic()
            tokens = model.generate(prompt, max_new)
            self.reply(200, {"tokens": tokens, "ms": round((time.monotonic() - t) * 1e3, 2)})

    return Handler


def selftest(server, port):
    """Call the running server over HTTP; print figures; True if all is well."""
    import urllib.request

    def call(method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                     data=json.dumps(body).encode() if body else None)
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())

    ok = True
    st, _ = call("GET", "/health")
    ok &= st == 200
    body = {"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}
    t = time.monotonic()
    st, first = call("POST", "/generate", body)
    first_ms = (time.monotonic() - t) * 1e3
    t = time.monotonic()
    st2, second = call("POST", "/generate", body)
    second_ms = (time.monotonic() - t) * 1e3
    ok &= st == 200 and st2 == 200 and len(first["tokens"]) == 32
    ok &= first["tokens"] == second["tokens"]
    st, info = call("GET", "/info")
    print("tokens: %s" % first["tokens"])
    print("figure: gpu_llm params %.3fB" % (info["params"] / 1e9))
    for k, v in sorted(TIMINGS.items()):
        print("figure: gpu_llm %s %.3f" % (k, v))
    print("figure: gpu_llm first_generate_ms %.1f" % first_ms)
    print("figure: gpu_llm second_generate_ms %.1f" % second_ms)
    print("selftest: %s" % ("ok" if ok else "FAILED (tokens differ or bad answer)"))
    server.shutdown()
    return ok


def main():
    a = parse_args()
    if a.prepare:
        prepare(a)
        return 0
    model = Model(a)
    from http.server import HTTPServer

    port = 0 if a.selftest else a.port
    host = "127.0.0.1" if a.selftest else a.host
    TIMINGS["ready_s"] = round(time.monotonic() - T0, 3)
    info = {"params": model.params, "model_dir": a.model_dir, "timings_s": TIMINGS,
            "config": {k: getattr(a, k) for k in ("hidden", "layers", "heads", "kv_heads",
                                                  "intermediate", "vocab", "seed")}}
    server = HTTPServer((host, port), make_handler(model, info))
    log("ready on %s:%d (%.2fB parameters): %s" % (host, server.server_address[1],
                                                   model.params / 1e9, json.dumps(TIMINGS)))
    if a.selftest:
        import threading

        threading.Thread(target=server.serve_forever, daemon=True).start()
        return 0 if selftest(server, server.server_address[1]) else 1
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
