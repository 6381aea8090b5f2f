#!/usr/bin/python3
"""Bounded load test of `tutti serve` (loopback only; stdlib only).

Starts the server with the four story models fused (README's first command)
and --parallel P, then:
  1. load: 2*P clients send a fixed number of completion requests
     (different seeds), twice; reports requests/s, generated units/s
     (bytes in byte alignment), latency percentiles and the server's RSS
     after each round (stable RSS = no growth between rounds);
  2. overhead: one client, one request at a time, against the same
     generation run by the CLI (`tutti run`, same seed, settings and
     threads), whose own stderr report gives the generation's time; the
     server's overhead per unit is (client latency - CLI time) / units.

usage: bench/load_serve.py [--tutti build/tutti] [--shared ../shared]
                           [--parallel 2] [--requests 40] [--max-tokens 64]
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tutti", default="build/tutti")
ap.add_argument("--shared", default="../shared")
ap.add_argument("--parallel", type=int, default=2)
ap.add_argument("--requests", type=int, default=40)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--threads", type=int, default=1, help="threads per slot (-t)")
ap.add_argument("--overhead-runs", type=int, default=8)
a = ap.parse_args()

M = os.path.join(a.shared, "models")
MODELS = [os.path.join(M, p) for p in ("stories260K.gguf", "TinyStories-656K-Q8_0.gguf",
                                       "BabyLlama-tok105/babyllama-tok105.gguf",
                                       "BabyLlama-tok361/babyllama-tok361.gguf")]
margs = sum((["-m", p] for p in MODELS), [])
PROMPT = "Once upon a time"


def start(parallel):
    p = subprocess.Popen([a.tutti, "serve", "--port", "0", "--parallel", str(parallel), "-t", str(a.threads),
                          "--queue", "64"] + margs, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready" in line:
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def complete(port, seed):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": PROMPT, "max_tokens": a.max_tokens, "seed": seed})
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    dt = time.monotonic() - t0
    c.close()
    if r.status != 200:
        raise SystemExit(f"status {r.status}: {data[:200]}")
    j = json.loads(data)
    return dt, j["usage"]["completion_tokens"], j["choices"][0]["text"], j["usage"]["tutti"]["generation_seconds"]


def load_round(port, n_clients, n_requests, seed0):
    lock = threading.Lock()
    todo = list(range(n_requests))
    lat, units = [], []

    def client():
        while True:
            with lock:
                if not todo:
                    return
                k = todo.pop()
            dt, u, _, _ = complete(port, seed0 + k)
            with lock:
                lat.append(dt)
                units.append(u)

    t0 = time.monotonic()
    th = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    return wall, lat, units


p, port = start(a.parallel)
try:
    complete(port, 0)  # warm-up: every slot's ensemble is built on first use
    n_clients = 2 * a.parallel
    print(f"load: {n_clients} clients, {a.requests} requests per round, max_tokens {a.max_tokens}, "
          f"--parallel {a.parallel}, -t {a.threads}")
    rss = [rss_kib(p.pid)]
    for rnd in range(2):
        wall, lat, units = load_round(port, n_clients, a.requests, 1000 * (rnd + 1))
        rss.append(rss_kib(p.pid))
        lat.sort()
        print(f"  round {rnd + 1}: {a.requests / wall:.2f} requests/s, {sum(units) / wall:.1f} units/s, "
              f"latency p50 {lat[len(lat) // 2]:.3f} s p95 {lat[int(len(lat) * 0.95) - 1]:.3f} s, "
              f"RSS {rss[-1] / 1024:.1f} MiB")
    print(f"  RSS: {rss[0] / 1024:.1f} MiB after warm-up, {rss[1] / 1024:.1f} / {rss[2] / 1024:.1f} MiB after "
          f"rounds 1 / 2 (growth between rounds {(rss[2] - rss[1]) / 1024:+.1f} MiB)")
finally:
    p.send_signal(signal.SIGTERM)
    p.wait(30)

# overhead per unit vs the CLI, one request at a time
p, port = start(1)
try:
    complete(port, 0)
    srv_over, srv_unit, vs_cli = [], [], []
    for k in range(a.overhead_runs):
        seed = 77 + k
        dt, u, text, t_gen = complete(port, seed)
        cli = subprocess.run([a.tutti, "run"] + margs + ["-p", PROMPT, "-n", str(a.max_tokens), "--seed", str(seed),
                                                          "-t", str(a.threads)], capture_output=True, text=True)
        t_cli = float(re.search(r"\((\d+) bytes\) in ([0-9.]+) s", cli.stderr).group(2))
        if cli.stdout != text:
            print(f"  seed {seed}: served text differs from tutti run's", file=sys.stderr)
        srv_over.append((dt - t_gen) / t_gen)       # HTTP, JSON, tokenizing, queueing
        srv_unit.append((dt - t_gen) / max(u, 1) * 1e3)
        vs_cli.append((dt - t_cli) / t_cli)         # the whole request vs the CLI's generation
    print(f"overhead ({a.overhead_runs} requests of {a.max_tokens} units, one at a time, same seeds as tutti run):")
    print(f"  server outside the generation: median {100 * statistics.median(srv_over):+.1f} % "
          f"({statistics.median(srv_unit):.4f} ms per unit)")
    print(f"  request latency vs tutti run's own generation time: median {100 * statistics.median(vs_cli):+.1f} % "
          f"(the CLI starts cold: fresh sessions and memory; a slot keeps its KV cache)")
finally:
    p.send_signal(signal.SIGTERM)
    p.wait(30)
