#!/usr/bin/env python3
"""Side-by-side speed of tutti and llama.cpp (llama-bench) on the same files.

usage: bench/run.py [-t THREADS] [-r REPS] [-p 512] [-n 128] [--interleave K]
                    [--shapes llama3.2-1b,qwen2.5-0.5b] [--types q8_0,q4_k_m] [--no-fused]
                    [--tutti CMD] [--root /opt/llamacpp-oracle]

1. Makes the random-weight models if missing (bench/make_models.sh: the
   oracle's gen_bench_model.py writes F16, llama-quantize makes Q8_0 and
   Q4_K_M; the oracle chroot is set up by ../shared/oracle/setup.sh if absent).
2. Builds tutti (Release, build-bench/) unless --tutti gives the command.
3. For each model: llama-bench -t T -p P -n N -r R (inside the chroot) and
   `tutti bench` with the same numbers, one after the other, each in its own
   process, K rounds alternating the two (--interleave; on a shared machine
   the medians of interleaved runs are what can be compared); peak RSS of each is the child's maximum resident set
   (getrusage RUSAGE_CHILDREN, measured the same way for both).
4. Fused generation of three members (the shape's F16, Q8_0, Q4_K_M files)
   vs the sum of their single-model generation times (`tutti bench --fused`).
Prints a markdown table (paste it into bench/RESULTS.md with the machine
details this script prints first).
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def run_child(cmd):
    """Runs cmd in a fresh process; returns (stdout, peak RSS MiB of that child)."""
    # RUSAGE_CHILDREN is a running maximum over all waited-for children, so
    # run each measurement through a one-shot Python child that reports only
    # its own child's peak.
    probe = ("import resource,subprocess,sys,json;"
             "r=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE,text=True);"
             "sys.stderr.write(r.stderr);"
             "print(json.dumps({'rc':r.returncode,'out':r.stdout,"
             "'rss':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0}))")
    r = subprocess.run([sys.executable, "-c", probe] + cmd, stdout=subprocess.PIPE, text=True)
    res = json.loads(r.stdout)
    if res["rc"] != 0:
        sys.exit(f"bench/run.py: command failed ({res['rc']}): {' '.join(cmd)}")
    return res["out"], res["rss"]


def bench_pair(a, tutti, rel):
    """llama-bench and `tutti bench` on root + rel with a's -t -p -n -r, in
    --interleave K rounds of (llama-bench, tutti), each with -r reps, so both
    see the same background load; returns each one's t/s samples per test
    (pp512, tg128, ...) and its peak RSS."""
    lsamp, tsamp, l_rss, t_rss = {}, {}, 0.0, 0.0
    for _ in range(a.interleave):
        out, rss = run_child(["chroot", a.root, "llama-bench", "-m", rel, "-t", str(a.threads), "-p",
                              str(a.n_prompt), "-n", str(a.n_gen), "-r", str(a.reps), "-o", "json"])
        l_rss = max(l_rss, rss)
        for o in json.loads(out):
            key = f"pp{o['n_prompt']}" if o["n_prompt"] else f"tg{o['n_gen']}"
            lsamp.setdefault(key, []).extend(o.get("samples_ts") or [o["avg_ts"]])
        out, rss = run_child(tutti + ["-m", a.root + rel, "-t", str(a.threads), "-p", str(a.n_prompt), "-n",
                                      str(a.n_gen), "-r", str(a.reps), "--json"])
        t_rss = max(t_rss, rss)
        for line in out.splitlines():
            if line.startswith("{"):
                o = json.loads(line)
                tsamp.setdefault(o["test"], []).extend(o.get("samples") or [o["tps"]])
    return lsamp, tsamp, l_rss, t_rss


def tutti_bench_cmd(given):
    """The command of tutti's bench subcommand: given (--tutti), else
    build-bench/tutti bench, built here (Release, no tests)."""
    if given:
        return given.split()
    bd = os.path.join(REPO, "build-bench")
    subprocess.run(["cmake", "-S", REPO, "-B", bd, "-DCMAKE_BUILD_TYPE=Release", "-DTUTTI_TESTS=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", bd, "-j2", "--target", "tutti"], check=True, stdout=subprocess.DEVNULL)
    return [os.path.join(bd, "tutti"), "bench"]


def machine_details():
    lines = []
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
        flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
        simd = [x for x in flags if x.startswith(("avx", "fma", "f16c", "asimd", "sve"))]
        lines.append(f"CPU: {model}, {os.cpu_count()} logical CPUs; SIMD flags: {' '.join(sorted(simd))}")
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            lines.append("memory: " + f.readline().split(":", 1)[1].strip())
    except OSError:
        pass
    lines.append("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--shapes", default="llama3.2-1b,qwen2.5-0.5b")
    ap.add_argument("--types", default="q8_0,q4_k_m")
    ap.add_argument("--interleave", type=int, default=1, help="rounds of (llama-bench, tutti) per model")
    ap.add_argument("--no-fused", action="store_true")
    ap.add_argument("--tutti", default=None, help="command that runs tutti's bench subcommand "
                    "(default: build-bench/tutti bench, built here)")
    ap.add_argument("--root", default=os.environ.get("TUTTI_ORACLE_ROOT", "/opt/llamacpp-oracle"))
    a = ap.parse_args()

    subprocess.run([os.path.join(HERE, "make_models.sh"), a.root], check=True)
    tutti = tutti_bench_cmd(a.tutti)

    for l in machine_details():
        print(l)
    kernels = os.environ.get("TUTTI_KERNELS", "best available")
    print(f"threads {a.threads}, pp{a.n_prompt} / tg{a.n_gen}, {a.reps} repetitions after a warm-up "
          f"(t/s: median of the repetitions ± standard deviation); tutti kernels: {kernels}\n")
    print("| model | test | llama.cpp t/s | tutti t/s | tutti / llama.cpp | llama.cpp peak RSS MiB | "
          "tutti peak RSS MiB | RSS ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for shape in a.shapes.split(","):
        for ty in a.types.split(","):
            rel = f"/tmp/tutti-bench/{shape}-{ty}.gguf"
            lsamp, tsamp, l_rss, t_rss = bench_pair(a, tutti, rel)
            sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
            lres = {k: (statistics.median(v), sd(v)) for k, v in lsamp.items()}
            tres = {k: (statistics.median(v), sd(v)) for k, v in tsamp.items()}
            for key in (f"pp{a.n_prompt}", f"tg{a.n_gen}"):
                if key not in lres or key not in tres:
                    continue
                (lt, lsd), (tt, tsd) = lres[key], tres[key]
                print(f"| {shape} {ty} | {key} | {lt:.2f} ± {lsd:.2f} | {tt:.2f} ± {tsd:.2f} | {tt / lt:.2f} | "
                      f"{l_rss:.0f} | {t_rss:.0f} | {t_rss / l_rss:.2f} |", flush=True)
            print(f"<!-- load average after {shape} {ty}: "
                  + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " -->", flush=True)
    if not a.no_fused:
        shape = a.shapes.split(",")[-1]
        ms = []
        for ty in ("f16", "q8_0", "q4_k_m"):
            ms += ["-m", f"{a.root}/tmp/tutti-bench/{shape}-{ty}.gguf"]
        print()
        for par in (1, 2):
            out, rss = run_child(tutti + ms + ["-t", str(a.threads), "-p", "0", "-n", str(a.n_gen), "-r",
                                               str(a.reps), "--fused", "--parallel", str(par), "--json"])
            for line in out.splitlines():
                if line.startswith("{") and "fused" in line:
                    o = json.loads(line)
                    mode = "members in turn, all threads each" if par == 1 else "members concurrently"
                    print(f"fused generation ({shape} F16 + Q8_0 + Q4_K_M, {o['units']} tokens, {mode}): "
                          f"{o['fused_s']:.3f} s (forward passes {o['fused_forward_s']:.3f} s, fusion "
                          f"{o['fused_fusion_s']:.3f} s) vs sum of the three single-model runs of the same length "
                          f"{o['sum_single_s']:.3f} s = {o['ratio']:.3f}x; "
                          f"peak RSS {rss:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
