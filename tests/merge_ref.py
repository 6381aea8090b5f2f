#!/usr/bin/python3
"""Independent numpy reference for `tutti merge` (tests/test_merge.c runs it).

Written from the papers and mergekit's documented semantics, not from tutti's
C code: its own minimal GGUF reader (F32, F16, BF16, Q8_0 dequantized here),
mergekit's parameter lookup (per-source, slice, global; gradients as lists
interpolated over t = layer / (n_layers - 1); conditional {filter, value}
lists matched as substrings of the Hugging Face tensor name), and the merge
methods of mergekit (linear, slerp, nuslerp, task_arithmetic, ties,
dare_linear, dare_ties, della, della_linear, breadcrumbs, breadcrumbs_ties,
model_stock, passthrough).

Where mergekit leaves something to a library's unspecified behaviour, the
convention tutti documents is used (docs/merge-study.md):
  * ties in |delta| are broken by element index (stable sort);
  * random masks (DARE, DELLA) come from a counter-based generator:
    u = splitmix64(key + (i + 1) * GOLDEN) / 2^64 with
    key = fnv1a64(output tensor name) ^ (seed * GOLDEN) ^ ((source + 1) * MIX),
    element i kept when u < p.
Arithmetic is float64 on float32 inputs (deltas are float32, as in mergekit).

usage:
  merge_ref.py check CONFIG.json MERGED.gguf SEED [CONFIG MERGED SEED ...]
        exit 0 when every tensor of each MERGED (dequantized) equals the
        reference within 1e-6 relative (scale floor: 1e-6 of the tensor's max)
  merge_ref.py hash FILE.gguf       prints "name sha256-of-data" per tensor
Configs are JSON (a subset of YAML: the test writes them so).
"""
import hashlib
import json
import struct
import sys

import numpy as np

# ---------------------------------------------------------------- GGUF reader

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
# ggml type id -> (block elements, block bytes)
_BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20),
          6: (32, 22), 7: (32, 24), 10: (256, 84), 11: (256, 110), 12: (256, 144),
          13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136), 39: (32, 17)}


class Gguf:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic = self.buf[:4]
        if magic != b"GGUF":
            raise ValueError(path + ": not GGUF")
        self.pos = 4
        self.version = self._u32()
        n_tensors = self._u64()
        n_kv = self._u64()
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            t = self._u32()
            self.kv[key] = self._value(t)
        self.tensors = {}
        self.order = []
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u32()
            ne = [self._u64() for _ in range(nd)]
            typ = self._u32()
            off = self._u64()
            self.tensors[name] = (ne, typ, off)
            self.order.append(name)
        align = self.kv.get("general.alignment", 32)
        self.data0 = (self.pos + align - 1) // align * align

    def _u32(self):
        v = struct.unpack_from("<I", self.buf, self.pos)[0]
        self.pos += 4
        return v

    def _u64(self):
        v = struct.unpack_from("<Q", self.buf, self.pos)[0]
        self.pos += 8
        return v

    def _str(self):
        n = self._u64()
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "surrogateescape")

    def _value(self, t):
        if t == 8:
            return self._str()
        if t == 9:
            et = self._u32()
            n = self._u64()
            return [self._value(et) for _ in range(n)]
        fmt = _SCALAR[t]
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def raw(self, name):
        ne, typ, off = self.tensors[name]
        be, bb = _BLOCK[typ]
        n = int(np.prod(ne))
        size = n // be * bb
        start = self.data0 + off
        return self.buf[start:start + size]

    def shape(self, name):
        return tuple(self.tensors[name][0])

    def get(self, name):
        """float32 array of shape (ne[n-1], ..., ne[0]) (numpy order)."""
        ne, typ, _ = self.tensors[name]
        raw = self.raw(name)
        if typ == 0:
            x = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif typ == 1:
            x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif typ == 30:
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            x = u.view(np.float32)
        elif typ == 8:
            b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
            d = b[:, :2].copy().view("<f2").astype(np.float32)
            q = b[:, 2:].copy().view(np.int8).astype(np.float32)
            x = (q * d).reshape(-1)
        else:
            raise ValueError("%s: tensor %s: type %d not in the reference" % (self.path, name, typ))
        return x.reshape(tuple(reversed(ne)))


# ------------------------------------------------------------ tensor naming

_HF_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "ffn_gate_up": "mlp.gate_up_proj",
}


def hf_name(arch, name):
    """Hugging Face name of a GGUF tensor (what mergekit's filters match)."""
    parts = name.split(".")
    gemma = arch.startswith("gemma")
    if parts[0] == "blk":
        layer, kind, rest = parts[1], parts[2], ".".join(parts[3:])
        if kind == "ffn_norm":
            hf = "pre_feedforward_layernorm" if gemma else "post_attention_layernorm"
        elif kind == "post_attention_norm":
            hf = "post_attention_layernorm"
        elif kind == "post_ffw_norm":
            hf = "post_feedforward_layernorm"
        else:
            hf = _HF_LAYER.get(kind, kind)
        return "model.layers.%s.%s.%s" % (layer, hf, rest)
    top = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    return top.get(parts[0], parts[0]) + ("." + ".".join(parts[1:]) if len(parts) > 1 else "")


# --------------------------------------------------------- parameter lookup

def evaluate(setting, tensor_name, t):
    """mergekit's evaluate_setting: scalar, gradient list, or conditions."""
    if isinstance(setting, (bool, int, float, str)):
        return setting
    if isinstance(setting, dict):
        setting = [setting]
    if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in setting):
        scaled = t * (len(setting) - 1)
        i0 = int(scaled)
        i1 = min(len(setting) - 1, i0 + 1)
        frac = scaled - i0
        return (1 - frac) * setting[i0] + frac * setting[i1]
    if all(isinstance(e, (int, float, str, bool)) for e in setting):
        return setting[int(t * (len(setting) - 1))]
    for cond in setting:
        f = cond.get("filter")
        if f is None or f == "*" or f in tensor_name:
            return evaluate(cond["value"], tensor_name, t)
    return None


def lookup(name, levels, tensor_name, t, default=None):
    for params in levels:
        if params and name in params:
            v = evaluate(params[name], tensor_name, t)
            if v is not None:
                return v
    return default


# ------------------------------------------------------------------ methods

GOLDEN = 0x9E3779B97F4A7C15
MIX = 0xD1B54A32D192ED03
M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def uniforms(name, seed, source, n):
    key = fnv1a64(name) ^ ((seed * GOLDEN) & M64) ^ (((source + 1) * MIX) & M64)
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(key) + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def l1_rescale(delta, masked):
    before = np.abs(delta.astype(np.float64)).sum()
    after = np.abs(masked.astype(np.float64)).sum()
    if before < 1e-7 or after < 1e-7:
        return masked.astype(np.float64)
    return masked.astype(np.float64) * (before / after)


def sparsify(kind, delta, p, name, seed, source, rescale):
    """delta: float32 flat; returns float64 flat."""
    n = delta.size
    dens = p["density"]
    if kind is None or dens >= 1:
        return delta.astype(np.float64)
    mag = np.abs(delta)
    mask = np.zeros(n, dtype=bool)
    if kind == "magnitude":
        k = int(dens * n)
        mask[np.argsort(-mag, kind="stable")[:k]] = True
    elif kind == "outliers":
        target = int(dens * n)
        n_top = int(p["gamma"] * n)
        n_bot = n - target - n_top
        if n_bot < 0:
            n_top += n_bot
            n_bot = 0
        order = np.argsort(mag, kind="stable")
        mask[order[n_bot:n - n_top]] = True
    elif kind == "random":
        mask = uniforms(name, seed, source, n) < dens
    elif kind == "della":
        if dens <= 0:
            return np.zeros(n)
        eps = p["epsilon"]
        if dens + eps >= 1 or dens - eps <= 0:
            raise ValueError("epsilon out of range")
        rows = p["rows"]
        m2 = mag.reshape(rows, -1)
        cols = m2.shape[1]
        ranks = np.argsort(np.argsort(m2, axis=1, kind="stable"), axis=1, kind="stable")
        rn = ranks.astype(np.float64) / (cols - 1) if cols > 1 else np.zeros_like(m2, dtype=np.float64)
        probs = (dens - eps) + rn * 2 * eps
        mask = (uniforms(name, seed, source, n) < probs.reshape(-1))
    masked = np.where(mask, delta, np.float32(0))
    if rescale:
        return l1_rescale(delta, masked)
    return masked.astype(np.float64)


GTA = {  # consensus, sparsification, default normalize, default rescale
    "task_arithmetic": (False, None, False, False),
    "ties": (True, "magnitude", True, False),
    "dare_ties": (True, "random", False, True),
    "dare_linear": (False, "random", False, True),
    "breadcrumbs": (False, "outliers", False, False),
    "breadcrumbs_ties": (True, "outliers", False, False),
    "della": (True, "della", True, True),
    "della_linear": (False, "della", False, True),
}


def merge_gta(method, xs, base_i, params, name, seed):
    consensus, kind, dn, dr = GTA[method]
    g = params["global"]
    normalize = g("normalize", dn)
    rescale = g("rescale", dr)
    lam = g("lambda", 1.0)
    base = xs[base_i].reshape(-1)
    deltas, weights = [], []
    for i, x in enumerate(xs):
        if i == base_i:
            continue
        pm = params["source"](i)
        delta = (x.reshape(-1) - base).astype(np.float32)
        p = {"density": pm("density", 1.0), "gamma": pm("gamma", 0.01),
             "epsilon": pm("epsilon", 0.15), "rows": params["rows"]}
        deltas.append(sparsify(kind, delta, p, name, seed, i, rescale))
        weights.append(pm("weight", None))
    wd = [w * d for w, d in zip(weights, deltas)]
    if consensus:
        total = np.zeros_like(wd[0])
        for d in wd:
            total = total + d
        major = np.where(total >= 0, 1.0, -1.0)
        mixed = np.zeros_like(total)
        div = np.zeros_like(total)
        for w, d in zip(weights, wd):
            m = np.sign(d) == major
            mixed = mixed + np.where(m, d, 0.0)
            div = div + np.where(m, w, 0.0)
        div[div == 0] = 1
    else:
        mixed = np.zeros_like(wd[0])
        for d in wd:
            mixed = mixed + d
        s = sum(weights)
        div = 1.0 if abs(s) < 1e-8 else s
    if normalize:
        mixed = mixed / div
    mixed = mixed * lam
    return base.astype(np.float64) + mixed


def slerp(t, a, b):
    a64 = a.reshape(-1).astype(np.float64)
    b64 = b.reshape(-1).astype(np.float64)
    if t == 0:
        return a64
    if t == 1:
        return b64
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    an = a64 / na if na > 1e-8 else a64
    bn = b64 / nb if nb > 1e-8 else b64
    dot = np.sum(an * bn)
    if abs(dot) > 0.9995:
        return (1 - t) * a64 + t * b64
    th = np.arccos(dot)
    s = np.sin(th)
    return np.sin(th - th * t) / s * a64 + np.sin(th * t) / s * b64


def nuslerp_vecs(t, v0, v1):
    """rows of v0, v1 (2-D float64): nuslerp along the last axis."""
    n0 = np.maximum(np.linalg.norm(v0, axis=-1, keepdims=True), 1e-7)
    n1 = np.maximum(np.linalg.norm(v1, axis=-1, keepdims=True), 1e-7)
    cos = np.clip(np.sum((v0 / n0) * (v1 / n1), axis=-1, keepdims=True), -1, 1)
    th = np.arccos(cos)
    s = np.sin(th)
    col = np.abs(s) < 1e-8
    with np.errstate(divide="ignore", invalid="ignore"):
        res = (np.sin((1 - t) * th) * v0 + np.sin(t * th) * v1) / s
    return np.where(col, (1 - t) * v0 + t * v1, res)


def merge_nuslerp(xs, base_i, params, shape):
    g = params["global"]
    others = [i for i in range(len(xs)) if i != base_i]
    w = [params["source"](i)("weight", None) for i in others]
    t = 0.5 if abs(sum(w)) < 1e-6 else w[1] / sum(w)
    v = [xs[i].astype(np.float64) for i in others]
    if base_i is not None:
        base = xs[base_i].astype(np.float64)
        v = [x - base for x in v]
    flatten = g("nuslerp_flatten", True)
    row_wise = g("nuslerp_row_wise", False)
    if flatten:
        r = nuslerp_vecs(t, v[0].reshape(1, -1), v[1].reshape(1, -1))
    elif row_wise and len(shape) > 1:
        a, b = v[0].reshape(shape), v[1].reshape(shape)
        r = nuslerp_vecs(t, a.reshape(a.shape[0], -1).T, b.reshape(b.shape[0], -1).T).T
    else:
        r = nuslerp_vecs(t, v[0].reshape(-1, shape[-1]), v[1].reshape(-1, shape[-1]))
    r = r.reshape(-1)
    if base_i is not None:
        r = xs[base_i].reshape(-1).astype(np.float64) + r
    return r


def merge_model_stock(xs, base_i, params, shape):
    filter_wise = params["global"]("filter_wise", False)
    w0 = xs[base_i].astype(np.float64)
    ws = [xs[i].astype(np.float64) for i in range(len(xs)) if i != base_i]
    if filter_wise:
        w0 = w0.reshape(-1, shape[-1])
        ws = [w.reshape(-1, shape[-1]) for w in ws]
    else:
        w0 = w0.reshape(1, -1)
        ws = [w.reshape(1, -1) for w in ws]
    off = [w - w0 for w in ws]
    cs = []
    for i in range(len(off)):
        for j in range(i + 1, len(off)):
            npd = np.linalg.norm(off[i], axis=-1) * np.linalg.norm(off[j], axis=-1)
            cs.append(np.clip(np.sum(off[i] * off[j], axis=-1) / np.maximum(npd, 1e-6), -1, 1))
    cos = np.mean(np.stack(cs), axis=0)[:, None]
    n = len(ws)
    t = n * cos / (1 + (n - 1) * cos)
    avg = sum(ws) / n
    return (t * avg + (1 - t) * w0).reshape(-1)


def merge_linear(xs, params):
    w = [params["source"](i)("weight", None) for i in range(len(xs))]
    r = np.zeros(xs[0].size)
    for wi, x in zip(w, xs):
        r = r + wi * x.reshape(-1).astype(np.float64)
    if params["global"]("normalize", True):
        r = r / sum(w)
    return r


# ------------------------------------------------------------------- driver

def check(cfg_path, merged_path, seed):
    with open(cfg_path) as f:
        cfg = json.load(f)
    out = Gguf(merged_path)
    method = cfg["merge_method"]
    files = {}

    def load(p):
        if p not in files:
            files[p] = Gguf(p)
        return files[p]

    base_model = cfg.get("base_model")
    if "models" in cfg:
        srcs = [dict(m) for m in cfg["models"]]
        if base_model and all(m["model"] != base_model for m in srcs):
            srcs.append({"model": base_model})
        n_layers = load(srcs[0]["model"]).kv[load(srcs[0]["model"]).kv["general.architecture"] + ".block_count"]
        for s in srcs:
            s["layer_range"] = [0, n_layers]
        slices = [{"sources": srcs}]
    else:
        slices = cfg["slices"]
    first = load(slices[0]["sources"][0]["model"])
    arch = first.kv["general.architecture"]
    gparams = cfg.get("parameters")

    def tensor(g, name):
        if name not in g.tensors and name.startswith("output."):
            name = "token_embd." + name.split(".", 1)[1]  # tied output
        return g.get(name)

    def merge_one(out_name, in_names, sl, t):
        srcs = sl["sources"]
        gs = [load(s["model"]) for s in srcs]
        xs = [tensor(g, n) for g, n in zip(gs, in_names)]
        shape = xs[0].shape
        hf = hf_name(arch, out_name)
        bm = sl.get("base_model", base_model)
        base_i = next((i for i, s in enumerate(srcs) if s["model"] == bm), None)
        params = {
            "global": lambda k, d: lookup(k, [sl.get("parameters"), gparams], hf, t, d),
            "source": lambda i: (lambda k, d: lookup(k, [srcs[i].get("parameters"), sl.get("parameters"), gparams], hf, t, d)),
            "rows": int(np.prod(shape[:-1])) if len(shape) > 1 else 1,
        }
        if any(x.shape != shape for x in xs):
            raise ValueError("shape mismatch " + out_name)
        if out_name.startswith("rope_freqs"):
            return xs[0].reshape(-1).astype(np.float64)
        if method == "passthrough":
            r = xs[0].reshape(-1).astype(np.float64)
            sc = params["global"]("scale", None)
            return r * sc if sc is not None else r
        if len(xs) == 1:
            return xs[0].reshape(-1).astype(np.float64)
        if method == "linear":
            return merge_linear(xs, params)
        if method == "slerp":
            other = 1 - base_i
            return slerp(params["global"]("t", None), xs[base_i], xs[other])
        if method == "nuslerp":
            return merge_nuslerp(xs, base_i, params, shape)
        if method == "model_stock":
            return merge_model_stock(xs, base_i, params, shape)
        if method in GTA:
            return merge_gta(method, xs, base_i, params, out_name, seed)
        raise ValueError("unknown method " + method)

    expect = {}
    # pre weights: t = 0 from the first slice; post weights: t = 1 from the last
    layer_re = lambda n: n.startswith("blk.")
    names0 = [n for n in first.order]
    for n in names0:
        if not layer_re(n) and not n.startswith(("output", )):
            expect[n] = (n, [n] * len(slices[0]["sources"]), slices[0], 0.0)
    last = slices[-1]
    post = set(n for n in names0 if n.startswith("output"))
    for s in last["sources"]:
        post |= set(n for n in load(s["model"]).order if n.startswith("output"))
    for n in sorted(post):
        expect[n] = (n, [n] * len(last["sources"]), last, 1.0)
    layer = 0
    for sl in slices:
        lo = [s["layer_range"][0] for s in sl["sources"]]
        nl = sl["sources"][0]["layer_range"][1] - lo[0]
        for k in range(nl):
            t = k / (nl - 1) if nl > 1 else 1.0
            g0 = load(sl["sources"][0]["model"])
            pre = "blk.%d." % (lo[0] + k)
            for n in g0.order:
                if n.startswith(pre):
                    suffix = n[len(pre):]
                    ins = ["blk.%d.%s" % (l + k, suffix) for l in lo]
                    expect["blk.%d.%s" % (layer, suffix)] = (None, ins, sl, t)
            layer += 1

    ok = True
    if set(expect) != set(out.tensors):
        print("tensor sets differ: missing %s, extra %s" % (sorted(set(expect) - set(out.tensors)),
                                                            sorted(set(out.tensors) - set(expect))))
        return False
    want_layers = layer
    got_layers = out.kv.get(arch + ".block_count")
    if got_layers != want_layers:
        print("block_count %s, expected %d" % (got_layers, want_layers))
        ok = False
    worst = 0.0
    for n, (_, ins, sl, t) in expect.items():
        ref = merge_one(n, ins, sl, t)
        got = out.get(n).reshape(-1).astype(np.float64)
        if got.shape != ref.shape:
            print("%s: %d elements, expected %d" % (n, got.size, ref.size))
            ok = False
            continue
        ref32 = ref.astype(np.float32).astype(np.float64)
        scale = np.max(np.abs(ref32)) if ref32.size else 0.0
        err = np.abs(got - ref32) / np.maximum(np.abs(ref32), 1e-6 * scale + 1e-30)
        e = float(np.max(err)) if err.size else 0.0
        worst = max(worst, e)
        if not (e <= 1e-6):
            i = int(np.argmax(err))
            print("%s: max relative error %.3g at %d (got %r, reference %r)" % (n, e, i, got[i], ref32[i]))
            ok = False
    print("%s: %d tensors, max relative error %.3g" % (method, len(expect), worst))
    return ok


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "check" and (len(sys.argv) - 2) % 3 == 0:
        ok = True
        for i in range(2, len(sys.argv), 3):
            ok = check(sys.argv[i], sys.argv[i + 1], int(sys.argv[i + 2])) and ok
        sys.exit(0 if ok else 1)
    if len(sys.argv) == 3 and sys.argv[1] == "hash":
        g = Gguf(sys.argv[2])
        for n in g.order:
            print(n, hashlib.sha256(g.raw(n)).hexdigest())
        return
    sys.stderr.write(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
