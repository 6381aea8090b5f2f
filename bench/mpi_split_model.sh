#!/bin/bash
# The random-weight model of bench/mpi_split.sh (never committed): a
# Llama-shaped GGUF (n_embd 1024, 8 layers, n_ff 4096, 32000 tokens; about
# 150 MiB in Q8_0), large enough that a layer split's compute outweighs its
# transfers.  Written by the oracle chroot's gguf-py (the writer of
# ../shared/oracle/gen_bench_model.py, with this shape), quantised by its
# llama-quantize.  usage: bench/mpi_split_model.sh [ROOT=/opt/llamacpp-oracle]  (root)
set -euo pipefail
ROOT=${1:-${TUTTI_ORACLE_ROOT:-/opt/llamacpp-oracle}}
D=/tmp/mpi2
mkdir -p "$ROOT$D"
[ -s "$ROOT$D/split-q8_0.gguf" ] && { echo "$ROOT$D/split-q8_0.gguf"; exit 0; }
cat >"$ROOT$D/gen.py" <<'PY'
import sys, numpy as np, gguf
E, L, F, H, HKV, V = 1024, 8, 4096, 16, 4, 32000
hd = E // H
rng = np.random.default_rng(0)
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_name("random split bench")
w.add_context_length(4096); w.add_embedding_length(E); w.add_block_count(L)
w.add_feed_forward_length(F); w.add_head_count(H); w.add_head_count_kv(HKV)
w.add_rope_freq_base(10000.0); w.add_layer_norm_rms_eps(1e-5); w.add_vocab_size(V); w.add_rope_dimension_count(hd)
w.add_tokenizer_model("llama")
toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [f"t{i}" for i in range(V - 259)]
w.add_token_list(toks); w.add_token_scores([0.0] * V); w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (V - 259))
w.add_bos_token_id(1); w.add_eos_token_id(2)
def r(*s): return (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float16)
w.add_tensor("token_embd.weight", r(V, E))
w.add_tensor("output_norm.weight", np.ones(E, np.float32))
w.add_tensor("output.weight", r(V, E))
for i in range(L):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
    w.add_tensor(p + "attn_q.weight", r(H * hd, E)); w.add_tensor(p + "attn_k.weight", r(HKV * hd, E))
    w.add_tensor(p + "attn_v.weight", r(HKV * hd, E)); w.add_tensor(p + "attn_output.weight", r(E, H * hd))
    w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
    w.add_tensor(p + "ffn_gate.weight", r(F, E)); w.add_tensor(p + "ffn_up.weight", r(F, E))
    w.add_tensor(p + "ffn_down.weight", r(E, F))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
chroot "$ROOT" python3 $D/gen.py $D/split-f16.gguf
chroot "$ROOT" llama-quantize $D/split-f16.gguf $D/split-q8_0.gguf Q8_0 2 >/dev/null 2>&1
rm -f "$ROOT$D/split-f16.gguf"
echo "$ROOT$D/split-q8_0.gguf"
