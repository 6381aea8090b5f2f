#!/usr/bin/python3
"""Continuous batching throughput (issue 24): `tutti serve --parallel 4`
against llama-server -np 4 on the same GGUF file and threads (stdlib only;
loopback; run as root in a quiet window).

For each server: one client alone (sequential requests), then 4 clients at
once; each request is a completion of --max-tokens tokens at temperature 0
from its own prompt.  Reports aggregate generated tokens/s (usage.
completion_tokens over the wall time of the round), the ratios the issue
asks for (tutti 4 clients >= 1.5x llama-server 4 clients, >= 2.5x tutti 1
client), and whether every tutti answer with 4 clients equals its answer
alone (continuous batching must not change a request's text).

The model (never committed): bench/make_models.sh writes
/opt/llamacpp-oracle/tmp/tutti-bench/qwen2.5-0.5b-q8_0.gguf (random weights,
Qwen2.5-0.5B's shapes), inside the oracle chroot so llama-server reads the
same file.

usage: bench/batch_serve.py [--tutti build/tutti] [--root /opt/llamacpp-oracle]
         [--model /tmp/tutti-bench/qwen2.5-0.5b-q8_0.gguf] [--threads 2]
         [--max-tokens 64] [--rounds 2] [--requests 8]
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tutti", default="build/tutti")
ap.add_argument("--root", default="/opt/llamacpp-oracle")
ap.add_argument("--model", default="/tmp/tutti-bench/qwen2.5-0.5b-q8_0.gguf", help="path inside the chroot")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--requests", type=int, default=8, help="requests per round (a multiple of 4)")
ap.add_argument("--ctx", type=int, default=1024, help="context per slot")
a = ap.parse_args()

PROMPTS = ["Once upon a time", "The weather today", "In the beginning", "A long way from home"]
CLIENTS = 4


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"port {port}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"server on port {port} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"server on port {port} not ready")


def body(i):
    return {"model": "default", "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": a.max_tokens, "temperature": 0,
            "seed": 1}


def round_(port, n_clients):
    """n_clients at once sharing --requests requests: (tokens/s, texts by request)"""
    texts, toks, lock = {}, [0], threading.Lock()

    def client(k):
        for i in range(k, a.requests, n_clients):
            r = post(port, body(i))
            with lock:
                texts[i] = r["choices"][0]["text"]
                toks[0] += r["usage"]["completion_tokens"]

    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return toks[0] / (time.monotonic() - t0), texts


def measure(name, cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, p)
        round_(port, 1)  # warm-up
        res = {}
        for n in (1, CLIENTS):
            best, texts = 0.0, None
            for _ in range(a.rounds):
                tps, texts = round_(port, n)
                best = max(best, tps)
            res[n] = (best, texts)
            print(f"{name}: {n} client(s): {best:.1f} tokens/s", flush=True)
        return res
    finally:
        p.terminate()
        p.wait()


host_model = a.root + a.model
if not os.path.exists(host_model):
    sys.exit(f"{host_model} is missing: run bench/make_models.sh")
t = a.threads
tutti = measure("tutti serve --parallel 4",
                [a.tutti, "serve", "-m", host_model, "--parallel", "4", "-t", str(t), "-c", str(a.ctx),
                 "--port", "18941"], 18941)
llama = measure("llama-server -np 4",
                ["chroot", a.root, "llama-server", "-m", a.model, "-np", "4", "-t", str(t), "-c", str(4 * a.ctx),
                 "--port", "18942"], 18942)
same = all(tutti[CLIENTS][1][i] == tutti[1][1][i] for i in range(a.requests))
r_llama = tutti[CLIENTS][0] / llama[CLIENTS][0]
r_self = tutti[CLIENTS][0] / tutti[1][0]
print(f"tutti 4 clients / llama-server 4 clients: {r_llama:.2f} (issue: >= 1.5)")
print(f"tutti 4 clients / tutti 1 client:         {r_self:.2f} (issue: >= 2.5)")
print(f"llama-server 4 clients / 1 client:        {llama[CLIENTS][0] / llama[1][0]:.2f}")
print(f"tutti texts with 4 clients equal to alone: {'yes' if same else 'NO'}")
