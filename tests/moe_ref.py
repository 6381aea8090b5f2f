#!/usr/bin/python3
"""Independent numpy reference for tutti's mergekit-moe merges (tests/test_merge_moe.c).

Written from mergekit's moe/ (config.py, router.py, mixtral.py) and llama.cpp's
Mixtral layout, not from tutti's C code; GGUF files are read with
tests/merge_ref.py's reader.  A llama forward pass in float64 (RMSNorm, rotary
embeddings in llama.cpp's adjacent-pair layout, grouped-query causal attention,
SwiGLU, and the Mixtral feed-forward: softmax router, top-k experts, weights
renormalized) gives the hidden states mergekit's gate_mode "hidden" reads
(Hugging Face's hidden_states[l]: the residual stream entering layer l).

usage:
  moe_ref.py check CONFIG.yaml MERGED.gguf PROMPT_IDS.json SEED
        every tensor of MERGED against the reference: the router of each layer
        (gate vectors per gate_mode; prompt token ids from PROMPT_IDS.json, a
        {prompt: [ids]} map made with llama.cpp's tokenizer), attention, norms,
        embeddings and output from base_model, the experts' feed-forward
        matrices from their source models (residual_scale applied), each
        rounded to the merged tensor's type (F32 or F16); exit 0 when all agree
        (router within 2e-4 for the hidden modes, whose forward passes are float32 in
        tutti and float64 here, 1e-6 for the others; everything else exactly)
  moe_ref.py logits MODEL.gguf IDS LOGITS.f32
        this forward pass on the comma-separated IDS against raw float32 logits
        [n][n_vocab] (e.g. llama.cpp's); prints the largest log-softmax
        difference, exit 0 when below 0.05 (stories260K: 0.009 over 118 positions; llama.cpp rounds more than the F16 cache this emulates; a misread layout is off by whole nats)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from merge_ref import Gguf, uniforms  # noqa: E402


def hparams(g):
    a = g.kv["general.architecture"] + "."
    n_embd = g.kv[a + "embedding_length"]
    n_head = g.kv[a + "attention.head_count"]
    return {
        "n_layer": g.kv[a + "block_count"], "n_embd": n_embd, "n_head": n_head,
        "n_head_kv": g.kv.get(a + "attention.head_count_kv", n_head), "head_dim": n_embd // n_head,
        "eps": g.kv[a + "attention.layer_norm_rms_epsilon"], "base": g.kv.get(a + "rope.freq_base", 10000.0),
        "n_expert": g.kv.get(a + "expert_count", 0), "n_used": g.kv.get(a + "expert_used_count", 0),
    }


def w(g, name):
    return g.get(name).astype(np.float64)


def rms(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, hd, base):
    """x: (n, heads, hd); llama.cpp's normal mode rotates adjacent pairs."""
    n = x.shape[0]
    i = np.arange(hd // 2)
    theta = np.arange(n)[:, None] * base ** (-2.0 * i / hd)[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def silu(x):
    return x / (1 + np.exp(-x))


def forward(g, ids):
    """(logits [n][n_vocab], hidden [n_layer][n][n_embd]: each layer's input)."""
    hp = hparams(g)
    n, hd = len(ids), hp["head_dim"]
    x = w(g, "token_embd.weight")[ids]
    hidden = []
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(hp["n_layer"]):
        p = "blk.%d." % l
        hidden.append(x.copy())
        h = rms(x, w(g, p + "attn_norm.weight"), hp["eps"])
        q = rope((h @ w(g, p + "attn_q.weight").T).reshape(n, hp["n_head"], hd), hd, hp["base"])
        k = rope((h @ w(g, p + "attn_k.weight").T).reshape(n, hp["n_head_kv"], hd), hd, hp["base"])
        v = (h @ w(g, p + "attn_v.weight").T).reshape(n, hp["n_head_kv"], hd)
        # llama.cpp's F16 KV cache: K and V are stored in F16, and ggml converts the other
        # operand of each product (q, then the attention weights) to F16 as well
        f16 = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731
        q, k, v = f16(q), f16(k), f16(v)
        rep = hp["n_head"] // hp["n_head_kv"]
        att = np.empty((n, hp["n_head"], hd))
        for hh in range(hp["n_head"]):
            sc = q[:, hh, :] @ k[:, hh // rep, :].T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(axis=1, keepdims=True))
            att[:, hh, :] = f16(sc / sc.sum(axis=1, keepdims=True)) @ v[:, hh // rep, :]
        x = x + att.reshape(n, -1) @ w(g, p + "attn_output.weight").T
        h = rms(x, w(g, p + "ffn_norm.weight"), hp["eps"])
        if hp["n_expert"]:
            r = h @ w(g, p + "ffn_gate_inp.weight").T
            pr = np.exp(r - r.max(axis=1, keepdims=True))
            pr = pr / pr.sum(axis=1, keepdims=True)
            gate, up, down = (w(g, p + "ffn_%s_exps.weight" % k_) for k_ in ("gate", "up", "down"))
            out = np.zeros_like(x)
            for t in range(n):
                top = np.argsort(-pr[t], kind="stable")[:hp["n_used"]]
                ws = pr[t, top] / pr[t, top].sum()
                for e, we in zip(top, ws):
                    out[t] += we * (down[e] @ (silu(gate[e] @ h[t]) * (up[e] @ h[t])))
            x = x + out
        else:
            x = x + (silu(h @ w(g, p + "ffn_gate.weight").T) * (h @ w(g, p + "ffn_up.weight").T)) @ w(
                g, p + "ffn_down.weight").T
    out_w = w(g, "output.weight") if "output.weight" in g.tensors else w(g, "token_embd.weight")
    return rms(x, w(g, "output_norm.weight"), hp["eps"]) @ out_w.T, np.stack(hidden)


def normal(seed, n):
    """tutti's counter-based N(0, 1): Box-Muller of uniforms 2i and 2i + 1."""
    u = uniforms("moe.gate", seed, 0, 2 * n)
    return np.sqrt(-2 * np.log(1 - u[0::2])) * np.cos(2 * np.pi * u[1::2])


def gate_vectors(cfg, base, prompt_ids, seed):
    """mergekit's get_gate_params: [n_layer][n_expert][n_embd]."""
    hp = hparams(base)
    mode = cfg.get("gate_mode", "hidden")
    L, E, D = hp["n_layer"], len(cfg["experts"]), hp["n_embd"]
    if mode == "random":
        return normal(seed, L * E * D).reshape(L, E, D)
    if mode == "uniform_random":
        return ((uniforms("moe.gate", seed, 0, L * E * D) * 2 - 1) / np.sqrt(D)).reshape(L, E, D)
    emb = w(base, "token_embd.weight")

    def do_it(prompts):
        if mode == "cheap_embed":
            s = sum(emb[prompt_ids[p]].sum(axis=0) for p in prompts)
            s = s / max(np.linalg.norm(s), 1e-8)
            return np.repeat(s[None, :], L, axis=0)
        states = []
        for p in prompts:
            hid = forward(base, prompt_ids[p])[1]  # (L, n, D)
            states.append(hid.mean(axis=1) if mode == "hidden_avg" else hid[:, -1, :])
        return sum(states) / len(states)
    out = np.empty((L, E, D))
    for e, ex in enumerate(cfg["experts"]):
        v = do_it(ex["positive_prompts"])
        if ex.get("negative_prompts"):
            v = v - do_it(ex["negative_prompts"])
        out[:, e, :] = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-8)
    return out


def rounded(x, typ):
    return x.astype(np.float16).astype(np.float64) if typ == 1 else x.astype(np.float32).astype(np.float64)


def check(cfg_path, merged_path, ids_path, seed):
    import yaml
    with open(cfg_path) as f:
        cfg = yaml.safe_load(f)
    with open(ids_path) as f:
        prompt_ids = json.load(f)
    out = Gguf(merged_path)
    base = Gguf(cfg["base_model"])
    srcs = [Gguf(e["source_model"]) for e in cfg["experts"]]
    hp = hparams(base)
    ok = True
    E = len(cfg["experts"])
    if out.kv.get("llama.expert_count") != E or out.kv.get("llama.expert_used_count") != cfg.get("experts_per_token", 2):
        print("expert_count / expert_used_count: %s / %s" % (out.kv.get("llama.expert_count"),
                                                           out.kv.get("llama.expert_used_count")))
        ok = False
    gates = gate_vectors(cfg, base, prompt_ids, seed)
    expect = set()
    worst_router = 0.0
    # hidden states: tutti's float32 forward against this float64 one; the other modes are plain arithmetic
    tol = 2e-4 if cfg.get("gate_mode", "hidden").startswith("hidden") else 1e-6
    for name in base.order:
        parts = name.split(".")
        if parts[0] == "blk" and parts[2] in ("ffn_gate", "ffn_up", "ffn_down"):
            l, kind = int(parts[1]), parts[2]
            oname = "blk.%d.%s_exps.weight" % (l, kind)
            expect.add(oname)
            got = out.get(oname).astype(np.float64)
            typ = out.tensors[oname][1]
            for e, (src, ex) in enumerate(zip(srcs, cfg["experts"])):
                ref = w(src, name)
                if kind == "ffn_down" and ex.get("residual_scale") is not None:  # float32, as torch
                    ref = (ref.astype(np.float32) * np.float32(ex["residual_scale"])).astype(np.float64)
                if not np.array_equal(got[e], rounded(ref, typ)):
                    print("%s expert %d: max |diff| %g" % (oname, e, np.max(np.abs(got[e] - rounded(ref, typ)))))
                    ok = False
            if kind == "ffn_gate":
                rname = "blk.%d.ffn_gate_inp.weight" % l
                expect.add(rname)
                got_r = out.get(rname).astype(np.float64)
                err = float(np.max(np.abs(got_r - gates[l])))
                worst_router = max(worst_router, err)
                if not err <= tol:
                    print("%s: max |diff| %g" % (rname, err))
                    ok = False
            continue
        expect.add(name)
        typ = out.tensors[name][1]
        if not np.array_equal(out.get(name).astype(np.float64), rounded(w(base, name), typ)):
            print("%s differs from the base's" % name)
            ok = False
    if expect != set(out.tensors):
        print("tensor sets differ: missing %s, extra %s" % (sorted(expect - set(out.tensors)),
                                                            sorted(set(out.tensors) - expect)))
        ok = False
    print("moe %s: %d tensors, %d experts, router max |diff| %.3g" % (cfg.get("gate_mode", "hidden"), len(expect), E,
                                                                    worst_router))
    return ok


def logits_check(model_path, ids, logits_path):
    g = Gguf(model_path)
    ids = [int(t) for t in ids.split(",")]
    ref = np.fromfile(logits_path, dtype="<f4").astype(np.float64).reshape(len(ids), -1)
    got = forward(g, ids)[0]

    def ls(x):
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    d = float(np.max(np.abs(ls(got) - ls(ref))))
    print("%s: numpy forward vs the given logits: max |log-softmax diff| %.3g over %d positions" % (
        os.path.basename(model_path), d, len(ids)))
    return d < 5e-2


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])) else 1)
    if len(sys.argv) == 5 and sys.argv[1] == "logits":
        sys.exit(0 if logits_check(sys.argv[2], sys.argv[3], sys.argv[4]) else 1)
    sys.stderr.write(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
