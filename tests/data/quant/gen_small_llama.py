#!/usr/bin/env python3
"""A small random-weight dense llama model (float32) for the tensor-type tests
of tests/test_quant.c and tests/test_arch.c, and text for llama-imatrix.

Runs inside the oracle chroot (numpy and gguf-py; see make_models.sh).
Every weight matrix has rows of 256 elements (n_embd = n_ff = q dim = 256),
so that llama-quantize --pure can store every one of them, token_embd and
output included, in a 256-element i-quant; one layer keeps the files small.
The SentencePiece vocabulary is copied from SOURCE_VOCAB.gguf (the 105 tokens
of ../shared/models/BabyLlama-tok105: a small vocabulary keeps token_embd,
output and the logits references small).

Usage: gen_small_llama.py SOURCE_VOCAB.gguf OUT_F32.gguf OUT_TEXT.txt"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter

src, out, text = sys.argv[1], sys.argv[2], sys.argv[3]
r = GGUFReader(src)
f = r.fields
tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
ttypes = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
n_vocab = len(tokens)
N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_LAYER = 256, 4, 2, 64, 256, 1
rng = np.random.default_rng(23)


def rnd(*shape, scale=None):
    s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
    return (rng.standard_normal(shape) * s).astype(np.float32)


def norm(n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


w = GGUFWriter(out, "llama")
w.add_name("random small llama (tensor types)")
w.add_context_length(512); w.add_embedding_length(N_EMBD); w.add_block_count(N_LAYER)
w.add_feed_forward_length(N_FF); w.add_head_count(N_HEAD); w.add_head_count_kv(N_HEAD_KV)
w.add_key_length(HEAD_DIM); w.add_value_length(HEAD_DIM); w.add_rope_dimension_count(HEAD_DIM)
w.add_rope_freq_base(10000.0); w.add_layer_norm_rms_eps(1e-6); w.add_vocab_size(n_vocab)
w.add_tokenizer_model("llama")
w.add_token_list(tokens); w.add_token_scores(scores); w.add_token_types(ttypes)
w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
w.add_tensor("token_embd.weight", rnd(n_vocab, N_EMBD, scale=1.0))
w.add_tensor("output_norm.weight", norm(N_EMBD))
w.add_tensor("output.weight", rnd(n_vocab, N_EMBD))
for i in range(N_LAYER):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", norm(N_EMBD))
    w.add_tensor(p + "attn_q.weight", rnd(N_HEAD * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_k.weight", rnd(N_HEAD_KV * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_v.weight", rnd(N_HEAD_KV * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_output.weight", rnd(N_EMBD, N_HEAD * HEAD_DIM))
    w.add_tensor(p + "ffn_norm.weight", norm(N_EMBD))
    w.add_tensor(p + "ffn_gate.weight", rnd(N_FF, N_EMBD))
    w.add_tensor(p + "ffn_up.weight", rnd(N_FF, N_EMBD))
    w.add_tensor(p + "ffn_down.weight", rnd(N_EMBD, N_FF))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

# llama-imatrix text: vocabulary pieces in random order (random weights: any
# text that tokenizes into many different ids will do)
pieces = [t.replace("\u2581", " ") for t, ty in zip(tokens, ttypes) if ty == 1 and t.strip("\u2581")]
open(text, "w").write("".join(pieces[i] for i in rng.integers(0, len(pieces), 6000)))
print(out)
