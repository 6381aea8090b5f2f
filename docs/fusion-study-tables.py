#!/usr/bin/env python3
"""Tables of docs/fusion-study.md from the JSON of docs/fusion-study.sh.

usage: fusion-study-tables.py WORK > docs/fusion-study/results.md

Each JSON file is one `tutti eval --json` with --compare: the members, the
first ensemble and the others.  A member's figure is the better of its
token-level and byte-level bits per byte (the ensemble sees the byte level);
"vs best" is the ensemble's change against the best member, in percent."""
import json
import math
import os
import re
import sys

W = sys.argv[1]
CONFIGS = ["uniform-mix", "uniform-product", "gate", "sequence-mixture", "mix", "mix-adapt", "product", "span",
           "mix-context", "mix-context-adapt", "product-context", "product-select", "auto"]
CLOZE = ["uniform mix (posterior)", "uniform product", "mix fitted on stories", "mix + adapt fitted on stories",
         "product fitted on stories", "mix + context fitted on stories", "product + context fitted on stories",
         "auto fitted on stories", "fit --choices, mix (posterior)", "fit --choices, product"]


def load(name):
    path = os.path.join(W, name + ".json")
    try:
        return json.load(open(path))
    except (OSError, ValueError):  # not run (yet)
        return None


def members_bpb(j):
    out = []
    for m in j["members"]:
        v = [m.get("bits_per_byte"), m.get("byte_bits_per_byte")]
        v = [x for x in v if x is not None and math.isfinite(x)]
        out.append(min(v) if v else math.inf)
    return out


def ensembles(j):
    return [j["ensemble"]] + j.get("compare", [])


def by_name(j, first):
    """the ensembles of one eval by config name (WORK/PREFIX-NAME.ens; the
    first one, eval's -e, is named FIRST)"""
    out = {first: j["ensemble"]}
    for e in j.get("compare", []):
        out[re.sub(r"^(cv[AB]-)?(st|mx)-", "", name_of(e["file"]))] = e
    return out


def bpb_of(j, c):
    """c's bits per byte in j: None if not run, inf if n/a (a member that
    cannot spell the text under product, a chunk past a member's context)"""
    e = by_name(j, CONFIGS[0]).get(c) if j else None
    if e is None:
        return None
    v = e.get("bits_per_byte")
    return math.inf if v is None else v


def name_of(path):
    return os.path.basename(path or "").replace(".ens", "")


def short(m):
    return os.path.basename(m["model"]).replace(".gguf", "")


def bpb_table(title, runs, note=""):
    """runs: list of (column title, json)"""
    runs = [(t, j) for t, j in runs if j]
    if not runs:
        return
    print(f"### {title}\n")
    if note:
        print(note + "\n")
    print("| | " + " | ".join(t for t, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for i, m in enumerate(runs[0][1]["members"]):
        print(f"| {short(m)} | " + " | ".join(fmt(members_bpb(j)[i]) for _, j in runs) + " |")
    best = [min(members_bpb(j)) for _, j in runs]
    print("| **best member** | " + " | ".join(f"**{fmt(b)}**" for b in best) + " |")
    for c in CONFIGS:
        cells = []
        for (t, j), b in zip(runs, best):
            e = bpb_of(j, c)
            cells.append("not run" if e is None else f"{fmt(e)} ({100 * (e - b) / b:+.1f} %)" if math.isfinite(e)
                         else "n/a")
        if any(x != "not run" for x in cells):
            print(f"| {c} | " + " | ".join(cells) + " |")
    print()


def fmt(x):
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.4f}"


def combine(ja, jb):
    """bits per byte over both halves of a cross-validation (A measured with
    the fit on B, B with the fit on A)"""
    if not ja or not jb:
        return None
    na, nb = ja["bytes"], jb["bytes"]
    j = json.loads(json.dumps(ja))
    for m, ma, mb in zip(j["members"], ja["members"], jb["members"]):
        for key in ("bits_per_byte", "byte_bits_per_byte"):
            if key in ma and key in mb:
                va, vb = ma[key], mb[key]
                m[key] = None if va is None or vb is None else (va * na + vb * nb) / (na + nb)
    for e, ea, eb in zip(ensembles(j), ensembles(ja), ensembles(jb)):
        va, vb = ea.get("bits_per_byte"), eb.get("bits_per_byte")
        e["bits_per_byte"] = None if va is None or vb is None else (va * na + vb * nb) / (na + nb)
    j["bytes"] = na + nb
    return j


def oracle(domains):
    """per-domain specialist oracle: each domain's bytes at its best member's figure"""
    num = den = 0
    for j in domains:
        if j:
            num += min(members_bpb(j)) * j["bytes"]
            den += j["bytes"]
    return num / den if den else math.nan


def mixed_table(title, whole, domains):
    if not whole:
        return
    o = oracle(domains)
    bpb_table(title, [("whole", whole)] + [(d, j) for d, j in zip(("stories", "dreams", "poems"), domains)],
              f"Per-domain specialist oracle (each domain at its best member's figure): **{fmt(o)}** bits/byte.")
    print("| rule / fit | whole vs oracle | worse than the best member on |")
    print("|---|---|---|")
    for c in CONFIGS:
        e = bpb_of(whole, c)
        if e is None:
            continue
        worse = [d for d, j in zip(("stories", "dreams", "poems"), domains)
                 if j and bpb_of(j, c) is not None and not bpb_of(j, c) <= min(members_bpb(j))]
        vs = f"{fmt(e)} ({100 * (e - o) / o:+.1f} %)" if math.isfinite(e) else "n/a"
        print(f"| {c} | {vs} | {', '.join(worse) or 'none'} |")
    print()


def cloze_table(title, runs, names):
    runs = [(t, j) for t, j in runs if j]
    if not runs:
        return
    print(f"### {title}\n")
    print("| | " + " | ".join(f"{t} acc | {t} acc_norm" for t, _ in runs) + " |")
    print("|---|" + "---|---|" * len(runs))
    for i, m in enumerate(runs[0][1]["members"]):
        print(f"| {short(m)} | " + " | ".join(
            f"{j['members'][i]['acc']:.3f} | {j['members'][i]['acc_norm']:.3f}" for _, j in runs) + " |")
    for k, c in enumerate(names):
        cells = []
        for _, j in runs:
            e = ensembles(j)
            cells.append(f"{e[k]['acc']:.3f} | {e[k]['acc_norm']:.3f}" if k < len(e) else "n/a | n/a")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()


print("# Fusion study: the tables (written by docs/fusion-study.sh)\n")
bpb_table("Stories: the four story models, fitted on stories-dev.txt",
          [("held-out (tests/data/heldout/stories.txt)", load("stories-heldout")),
           ("dev (in-sample)", load("stories-dev")),
           ("cross-validated halves of stories-dev", combine(load("cv-stories-dev-A"), load("cv-stories-dev-B")))])
mixed_table("Mixed: the three specialists on the held-out text, fitted on mixed-dev.txt", load("mixed-heldout"),
            [load(f"mixed-heldout-{d}") for d in ("stories", "dreams", "poems")])
mixed_table("Mixed: in-sample (mixed-dev.txt)", load("mixed-dev"), [load(f"mixed-dev-{d}") for d in ("stories", "dreams", "poems")])
mixed_table("Mixed: cross-validated halves of mixed-dev.txt", combine(load("cv-mixed-dev-A"), load("cv-mixed-dev-B")),
            [combine(load(f"cv-mixed-dev-A-{d}"), load(f"cv-mixed-dev-B-{d}")) for d in ("stories", "dreams", "poems")])
cloze_table("Cloze: the story models", [("held-out", load("cloze-heldout")), ("dev", load("cloze-dev"))], CLOZE)
cloze_table("Cloze: cross-validated halves of cloze-dev (fit --choices on one half)",
            [("A (fit on B)", load("cv-cloze-A")), ("B (fit on A)", load("cv-cloze-B"))],
            ["uniform mix (posterior)", "uniform product", "fit --choices on the other half, mix (posterior)",
             "fit --choices on the other half, product"])
