#!/usr/bin/env python3
"""Side-by-side speed of tutti and llama.cpp (llama-bench) on a random-weight
mixture of experts of a real model's layer shape, same file, same threads.

usage (root, with the oracle chroot): bench/moe.py [--shape olmoe|qwen15moe|qwen3moe|small]
        [--layers N] [--type Q4_K_M] [-t 2] [-p 512] [-n 128] [-r 3] [--interleave K]
        [--keep] [--tutti CMD] [--root /opt/llamacpp-oracle]

The model is written when needed by ../shared/oracle/gen_moe_models.py
(--config: the shape below, the 512-token stories260K vocabulary) inside the
chroot, quantized with llama-quantize, its F32 source deleted at once, and
the quantized file deleted at the end (--keep keeps it for the next run).
Every layer has the published model's shape; only the layer count is cut
(--layers, default 4) so that the F32 file the generator holds in memory
fits this machine:

  olmoe      OLMoE-1B-7B: n_embd 2048, 16 heads x 128, 64 experts (8 per token) 1024 wide
             (16 layers in the real model; 4 layers: 1.6 B parameters, 6.5 GB F32, ~1 GB Q4_K_M)
  qwen15moe  Qwen1.5-MoE-A2.7B: n_embd 2048, 16 heads x 128, 60 experts (4 per token) 1408
             wide, a shared expert 5632 wide behind its sigmoid gate (24 layers real)
  qwen3moe   Qwen3-30B-A3B: n_embd 2048, 32 q / 4 kv heads x 128, 128 experts (8 per token)
             768 wide (48 layers real)
  small      n_embd 256, 8 experts (2 per token): checks that the script runs

Then, as bench/run.py does for the dense shapes: llama-bench -t T -p P -n N
-r R (inside the chroot) and `tutti bench` with the same numbers, each in
its own process, K rounds alternating the two (--interleave), medians of
all runs; peak RSS of each child.  Prints a markdown table for
bench/RESULTS.md, with the active weight bytes per token (what generation
must stream: attention, routers, shared experts, n_expert_used experts per
layer, the output matrix) and the bandwidth tutti's generation reaches
on them.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run import bench_pair, machine_details, run_child, tutti_bench_cmd  # noqa: E402

SHAPES = {
    "olmoe": ("olmoe", dict(arch="olmoe", n_embd=2048, n_head=16, n_head_kv=16, head_dim=128, n_expert=64,
                            n_expert_used=8, n_ff_exp=1024, n_ff=1024, rope_base=10000.0)),
    "qwen15moe": ("qwen2moe", dict(arch="qwen2moe", n_embd=2048, n_head=16, n_head_kv=16, head_dim=128,
                                   n_expert=60, n_expert_used=4, n_ff_exp=1408, n_ff_shexp=5632, n_ff=5632,
                                   rope_base=1000000.0)),
    "qwen3moe": ("qwen3moe", dict(arch="qwen3moe", n_embd=2048, n_head=32, n_head_kv=4, head_dim=128,
                                  n_expert=128, n_expert_used=8, n_ff_exp=768, n_ff=6144, rope_base=1000000.0)),
    "small": ("qwen3moe", dict(arch="qwen3moe", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_expert=8,
                               n_expert_used=2, n_ff_exp=256, n_ff=512, rope_base=1000000.0)),
}


def make_model(a, name, cfg, rel):
    """Writes root + rel (the quantized file) unless it is there; returns its size."""
    if os.path.exists(a.root + rel):
        return os.path.getsize(a.root + rel)
    work = "/tmp/tutti-bench-moe"
    os.makedirs(a.root + work, exist_ok=True)
    shared = os.environ.get("TUTTI_SHARED_DIR", os.path.join(REPO, "..", "shared"))
    for f in ("oracle/gen_moe_models.py", "models/stories260K.gguf"):
        subprocess.run(["cp", os.path.join(shared, f), a.root + work], check=True)
    with open(a.root + work + "/config.json", "w") as f:
        json.dump({name: dict(cfg, n_layer=a.layers)}, f)
    print(f"generating {name} ({a.layers} layers) in {a.root + work}", file=sys.stderr, flush=True)
    subprocess.run(["chroot", a.root, "python3", work + "/gen_moe_models.py", work + "/stories260K.gguf", work,
                    "--config", work + "/config.json"], check=True, stdout=subprocess.DEVNULL)
    f32 = f"{work}/{name}-F32.gguf"
    subprocess.run(["chroot", a.root, "llama-quantize", f32, rel + ".part", a.type, "2"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.remove(a.root + f32)
    os.rename(a.root + rel + ".part", a.root + rel)
    return os.path.getsize(a.root + rel)


ACTIVE = """
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
used = int(r.fields[arch + ".expert_used_count"].parts[-1][0])
n_exp = int(r.fields[arch + ".expert_count"].parts[-1][0])
print(sum(int(t.n_bytes) * used // n_exp if "_exps." in t.name else int(t.n_bytes)
          for t in r.tensors if t.name != "token_embd.weight"))
"""


def active_bytes(a, rel):
    """Weight bytes one generated token reads: every tensor but token_embd,
    the expert tensors counted for n_expert_used of their n_expert matrices
    (gguf-py, in the chroot)."""
    out = subprocess.run(["chroot", a.root, "python3", "-c", ACTIVE, rel], check=True, capture_output=True,
                         text=True).stdout
    return int(out.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="olmoe", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--interleave", type=int, default=1, help="rounds of (llama-bench, tutti)")
    ap.add_argument("--keep", action="store_true", help="keep the model file for the next run")
    ap.add_argument("--tutti", default=None, help="command of tutti's bench subcommand (default: build-bench/)")
    ap.add_argument("--root", default=os.environ.get("TUTTI_ORACLE_ROOT", "/opt/llamacpp-oracle"))
    a = ap.parse_args()

    name, cfg = SHAPES[a.shape]
    rel = f"/tmp/tutti-bench-moe/{a.shape}-{a.layers}l-{a.type.lower()}.gguf"
    tutti = tutti_bench_cmd(a.tutti)
    try:
        size = make_model(a, name, cfg, rel)
        act = active_bytes(a, rel)
        for l in machine_details():
            print(l)
        print(f"{a.shape} ({name}), {a.layers} layers, {a.type}: {size / 2**20:.0f} MiB, "
              f"{act / 2**20:.1f} MiB of weights per generated token; threads {a.threads}, pp{a.n_prompt} / "
              f"tg{a.n_gen}, {a.reps} repetitions after a warm-up x {a.interleave} rounds (t/s: median ± sd)\n")
        lsamp, tsamp, l_rss, t_rss = bench_pair(a, tutti, rel)
        print("| model | test | llama.cpp t/s | tutti t/s | tutti / llama.cpp | tutti GB/s of active weights | "
              "llama.cpp peak RSS MiB | tutti peak RSS MiB |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
        for key in (f"pp{a.n_prompt}", f"tg{a.n_gen}"):
            if key not in lsamp or key not in tsamp:
                continue
            lt, tt = statistics.median(lsamp[key]), statistics.median(tsamp[key])
            bw = f"{tt * act / 1e9:.2f}" if key.startswith("tg") else "-"
            print(f"| {a.shape} {a.layers}L {a.type} | {key} | {lt:.2f} ± {sd(lsamp[key]):.2f} | "
                  f"{tt:.2f} ± {sd(tsamp[key]):.2f} | {tt / lt:.2f} | {bw} | {l_rss:.0f} | {t_rss:.0f} |",
                  flush=True)
        print("<!-- load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " -->")
    finally:
        if not a.keep and os.path.exists(a.root + rel):
            os.remove(a.root + rel)
        for f in ("gen_moe_models.py", "stories260K.gguf", "config.json"):
            if os.path.exists(f"{a.root}/tmp/tutti-bench-moe/{f}"):
                os.remove(f"{a.root}/tmp/tutti-bench-moe/{f}")


if __name__ == "__main__":
    main()
