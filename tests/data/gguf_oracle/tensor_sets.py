# Runs in the oracle chroot (python3 + gguf-py): writes variants of the
# ref/arch models with tensors added or removed, to learn which tensor sets
# llama.cpp's loader accepts for each architecture (loadcheck.c loads them).
# usage: python3 tensor_sets.py <dir with ref/arch/*.gguf> <out dir>
import os, sys
import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)

def copy(base, dst, drop=(), add=()):
    r = GGUFReader(base)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.alignment"):
            continue
        vt = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[-1]) if vt == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vt, sub_type=sub)
    for t in r.tensors:
        if any(t.name == d or (d.startswith("*") and t.name.endswith(d[1:])) for d in drop):
            continue
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed([int(x) for x in t.shape])),
                     raw_dtype=t.tensor_type)
    for name, shape in add:
        w.add_tensor(name, np.ones(list(reversed(shape)), dtype=np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

for arch in ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"]:
    base = os.path.join(src, arch + "-F16.gguf")
    r = GGUFReader(base)
    ts = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    n_embd, n_vocab = ts["token_embd.weight"]
    if "blk.0.attn_q.weight" in ts:
        nq, nk = ts["blk.0.attn_q.weight"][1], ts["blk.0.attn_k.weight"][1]
    else:
        nq = nk = 0
    n_ff = ts["blk.0.ffn_down.weight"][0]
    v = {
        "base": ([], []),
        "plus-qkv-bias": ([], [("blk.0.attn_q.bias", [nq]), ("blk.0.attn_k.bias", [nk]), ("blk.0.attn_v.bias", [nk])]),
        "plus-wo-bias": ([], [("blk.0.attn_output.bias", [n_embd])]),
        "plus-ffn-up-bias": ([], [("blk.0.ffn_up.bias", [n_ff])]),
        "plus-rope-freqs": ([], [("rope_freqs.weight", [32])]),
        "plus-unknown": ([], [("foo.weight", [4])]),
        "plus-q-norm": ([], [("blk.0.attn_q_norm.weight", [64]), ("blk.0.attn_k_norm.weight", [64])]),
        "plus-post-norm": ([], [("blk.0.post_attention_norm.weight", [n_embd]), ("blk.0.post_ffw_norm.weight", [n_embd])]),
        "plus-layer": ([], [("blk.99.attn_norm.weight", [n_embd])]),
    }
    if "output.weight" in ts:
        v["minus-output"] = (["output.weight"], [])
    else:
        v["plus-output"] = ([], [("output.weight", [n_embd, n_vocab])])
    if "blk.0.attn_q.bias" in ts:
        v["minus-qkv-bias"] = (["*attn_q.bias", "*attn_k.bias", "*attn_v.bias"], [])
    if "blk.0.attn_q_norm.weight" in ts:
        v["minus-q-norm"] = (["*attn_q_norm.weight", "*attn_k_norm.weight"], [])
    if "blk.0.post_attention_norm.weight" in ts:
        v["minus-post-norm"] = (["*post_attention_norm.weight"], [])
    for name, (drop, add) in v.items():
        if any(a[0] in ts for a in add):
            continue
        copy(base, os.path.join(out, "%s-%s.gguf" % (arch, name)), drop, add)
