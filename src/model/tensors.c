/* Tensors bound by name, every shape and type checked (tutti_weight points
 * into the file's mapping; load.c moves them afterwards).  Names and shapes
 * are llama.cpp's (llama-arch.cpp, each architecture's load_tensors), and so
 * is the rule that a file with a tensor the architecture does not take is
 * refused. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "util/error.h"

enum { W_REQUIRED = 0, W_OPTIONAL = 1, W_F32 = 2 };

const void *tutti_weight_mat(const tutti_weight *w, int64_t i) {
    if (w->part && i >= w->part0 && i < w->part1)
        return (const char *)w->part +
               (size_t)(i - w->part0) * (size_t)w->n_rows * tutti_row_size(w->part_type, w->n_cols);
    return (const char *)w->data + (size_t)i * (size_t)w->n_rows * tutti_row_size(w->type, w->n_cols);
}

int tutti_weight_mat_type(const tutti_weight *w, int64_t i) {
    return w->part && i >= w->part0 && i < w->part1 ? w->part_type : w->type;
}

static void fmt_shape(char *buf, size_t n, const int64_t *ne, uint32_t n_dims) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (uint32_t i = 0; i < n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Binding state: the model being filled and which of the file's tensors a
 * weight took (llama.cpp's loader refuses a file with tensors it did not
 * create: every tensor must be used exactly once). */
typedef struct binder {
    tutti_model *m;
    uint8_t *used; /* one flag per tensor of the file */
} binder;

/* Binds tensor `name` with expected shape [ne0] (ne1 == 0), [ne0, ne1] or
 * [ne0, ne1, ne2] (ne2 > 0: n_mat matrices); ne1 < 0 accepts any row count
 * (read back from the file).  The shape rule is llama.cpp's
 * (check_tensor_dims): every dimension equal, the ones past the expected
 * shape 1. */
static int bind3(binder *b, tutti_weight *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, int flags) {
    const tutti_model *m = b->m;
    memset(w, 0, sizeof *w);
    const gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (flags & W_OPTIONAL) return TUTTI_OK;
        return tutti_set_error("%s: missing tensor '%s' (required for architecture %s)", m->path, name, m->arch->name);
    }
    int64_t want[GGUF_MAX_DIMS] = {ne0, ne1 < 0 ? t->ne[1] : (ne1 == 0 ? 1 : ne1), ne2 > 0 ? ne2 : 1, 1};
    uint32_t want_dims = ne2 > 0 ? 3 : ne1 == 0 ? 1 : 2;
    bool ok = true;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) ok = ok && t->ne[i] == want[i];
    if (!ok) {
        char a[128], c[128];
        fmt_shape(a, sizeof a, want, want_dims);
        fmt_shape(c, sizeof c, t->ne, t->n_dims ? t->n_dims : 1);
        return tutti_set_error("%s: tensor '%s' has wrong shape; expected %s, got %s", m->path, name, a, c);
    }
    if (!tutti_type_supported(t->type))
        return tutti_set_error("%s: tensor '%s' has type %s, which tutti cannot compute with", m->path, name,
                               tutti_type_name(t->type));
    if ((flags & W_F32) && t->type != TUTTI_TYPE_F32)
        return tutti_set_error("%s: tensor '%s' has type %s, expected f32 (norm weights and biases)", m->path, name,
                               tutti_type_name(t->type));
    if (tutti_row_size(t->type, t->ne[0]) == 0)
        return tutti_set_error("%s: tensor '%s': row of %" PRId64 " elements is not a whole number of %s blocks",
                               m->path, name, t->ne[0], tutti_type_name(t->type));
    b->used[t - gguf_tensor(m->gguf, 0)] = 1;
    w->data = t->data;
    w->type = t->type;
    w->n_cols = t->ne[0];
    w->n_rows = t->ne[1];
    w->n_mat = t->ne[2];
    return TUTTI_OK;
}

static int bind(binder *b, tutti_weight *w, const char *name, int64_t ne0, int64_t ne1, int flags) {
    return bind3(b, w, name, ne0, ne1, 0, flags);
}

/* Optional tensors that llama.cpp's loader (libllama 0.7.0, the oracle)
 * creates per architecture; a file holding one it does not create is
 * refused there ("wrong number of tensors"), and here as unused.  Learnt by
 * loading variants of the ref/arch models in the oracle:
 * tests/data/gguf_oracle/tensor_sets.txt.  q/k/v biases: every architecture
 * with separate q/k/v; output.weight: all but Gemma 2 (always tied);
 * rope_freqs: Llama only. */
static bool arch_takes_qkv_bias(const tutti_arch *a) { return !a->fused_qkv; }
static bool arch_takes_output(const tutti_arch *a) { return !a->no_output; }
static bool arch_takes_rope_freqs(const tutti_arch *a) { return strcmp(a->name, "llama") == 0; }

#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)

/* q, k, v (separate or fused), their biases and norms, the output
 * projection (+ bias), attention sinks. */
static int bind_attention(binder *b, int il) {
    tutti_model *m = b->m;
    const tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    tutti_layer *L = &m->layers[il];
    const int64_t n_embd = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k,
                  nk = (int64_t)hp->n_head_kv * hp->head_dim_k, nv = (int64_t)hp->n_head_kv * hp->head_dim_v,
                  no = (int64_t)hp->n_head * hp->head_dim_v;
    char n[96];
    /* phi3: fused attn_qkv, or attn_q/k/v as llama.cpp also accepts */
    const bool fused = a->fused_qkv && (gguf_find_tensor(m->gguf, NAME("attn_qkv.weight")) ||
                                        !gguf_find_tensor(m->gguf, NAME("attn_q.weight")));
    if (fused) {
        if (bind(b, &L->wqkv, NAME("attn_qkv.weight"), n_embd, nq + nk + nv, W_REQUIRED)) return TUTTI_ERR;
    } else {
        if (bind(b, &L->wq, NAME("attn_q.weight"), n_embd, nq, W_REQUIRED) ||
            bind(b, &L->wk, NAME("attn_k.weight"), n_embd, nk, W_REQUIRED) ||
            bind(b, &L->wv, NAME("attn_v.weight"), n_embd, nv, W_REQUIRED))
            return TUTTI_ERR;
    }
    /* Biases are optional (Qwen2 has them, Llama usually not). */
    if (arch_takes_qkv_bias(a) && (bind(b, &L->bq, NAME("attn_q.bias"), nq, 0, W_OPTIONAL | W_F32) ||
                                   bind(b, &L->bk, NAME("attn_k.bias"), nk, 0, W_OPTIONAL | W_F32) ||
                                   bind(b, &L->bv, NAME("attn_v.bias"), nv, 0, W_OPTIONAL | W_F32)))
        return TUTTI_ERR;
    const int norm = W_F32 | (a->qk_norm_optional ? W_OPTIONAL : W_REQUIRED);
    if (a->qk_norm && (bind(b, &L->q_norm, NAME("attn_q_norm.weight"), hp->head_dim_k, 0, norm) ||
                       bind(b, &L->k_norm, NAME("attn_k_norm.weight"), hp->head_dim_k, 0, norm)))
        return TUTTI_ERR;
    /* olmoe: over the whole projection (llama.cpp sizes both n_embd) */
    if (a->qk_norm_full && (bind(b, &L->q_norm, NAME("attn_q_norm.weight"), n_embd, 0, W_F32) ||
                            bind(b, &L->k_norm, NAME("attn_k_norm.weight"), n_embd, 0, W_F32)))
        return TUTTI_ERR;
    if (a->qk_norm_full && nk != n_embd)
        return tutti_set_error("%s: attn_k_norm spans embedding_length %" PRId64 " but the keys are %" PRId64
                               " wide (head_count_kv must equal head_count for architecture %s)",
                               m->path, n_embd, nk, a->name);
    if (bind(b, &L->wo, NAME("attn_output.weight"), no, n_embd, W_REQUIRED) ||
        (a->attn_out_bias && bind(b, &L->bo, NAME("attn_output.bias"), n_embd, 0, W_OPTIONAL | W_F32)) ||
        (a->attn_sinks && bind(b, &L->attn_sinks, NAME("attn_sinks.weight"), hp->n_head, 0, W_F32)))
        return TUTTI_ERR;
    return TUTTI_OK;
}

/* Multi-head latent attention (deepseek2): q (LoRA or plain), the
 * compressed kv with the rope part of the key, and the per-head matrices
 * that absorb the key into the query and decompress the values. */
static int bind_mla(binder *b, int il) {
    tutti_model *m = b->m;
    const tutti_hparams *hp = &m->hp;
    tutti_layer *L = &m->layers[il];
    const int64_t n_embd = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k_mla;
    const int64_t nope = hp->head_dim_k_mla - hp->n_rot;
    char n[96];
    if (hp->n_lora_q > 0) {
        if (bind(b, &L->wq_a, NAME("attn_q_a.weight"), n_embd, hp->n_lora_q, W_REQUIRED) ||
            bind(b, &L->q_a_norm, NAME("attn_q_a_norm.weight"), hp->n_lora_q, 0, W_F32) ||
            bind(b, &L->wq_b, NAME("attn_q_b.weight"), hp->n_lora_q, nq, W_REQUIRED))
            return TUTTI_ERR;
    } else if (bind(b, &L->wq, NAME("attn_q.weight"), n_embd, nq, W_REQUIRED)) {
        return TUTTI_ERR;
    }
    if (bind(b, &L->wkv_a_mqa, NAME("attn_kv_a_mqa.weight"), n_embd, hp->n_lora_kv + hp->n_rot, W_REQUIRED) ||
        bind(b, &L->kv_a_norm, NAME("attn_kv_a_norm.weight"), hp->n_lora_kv, 0, W_F32) ||
        bind3(b, &L->wk_b, NAME("attn_k_b.weight"), nope, hp->n_lora_kv, hp->n_head, W_REQUIRED) ||
        bind3(b, &L->wv_b, NAME("attn_v_b.weight"), hp->n_lora_kv, hp->head_dim_v_mla, hp->n_head, W_REQUIRED) ||
        bind(b, &L->wo, NAME("attn_output.weight"), (int64_t)hp->n_head * hp->head_dim_v_mla, n_embd, W_REQUIRED))
        return TUTTI_ERR;
    return TUTTI_OK;
}

/* A gated FFN of width n_ff: [gate; up] fused (phi3) or separate, down. */
static int bind_ffn(binder *b, int il, tutti_weight *gate, tutti_weight *up, tutti_weight *down, const char *suffix,
                    int64_t n_ff, bool fused) {
    const int64_t n_embd = b->m->hp.n_embd;
    char n[96];
    snprintf(n, sizeof n, "blk.%d.ffn_gate%s.weight", il, suffix);
    if (!fused && bind(b, gate, n, n_embd, n_ff, W_REQUIRED)) return TUTTI_ERR;
    snprintf(n, sizeof n, "blk.%d.ffn_up%s.weight", il, suffix);
    if (bind(b, up, n, n_embd, fused ? 2 * n_ff : n_ff, W_REQUIRED)) return TUTTI_ERR;
    snprintf(n, sizeof n, "blk.%d.ffn_down%s.weight", il, suffix);
    return bind(b, down, n, n_ff, n_embd, W_REQUIRED);
}

/* A routing layer: the router (+ biases), the routed experts (3-D: one
 * matrix per expert) and the shared expert(s). */
static int bind_moe(binder *b, int il) {
    tutti_model *m = b->m;
    const tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    tutti_layer *L = &m->layers[il];
    const int64_t n_embd = hp->n_embd, ne = hp->n_expert, nf = hp->n_ff_exp;
    char n[96];
    if (bind(b, &L->ffn_gate_inp, NAME("ffn_gate_inp.weight"), n_embd, ne, W_REQUIRED) ||
        bind3(b, &L->ffn_gate_exps, NAME("ffn_gate_exps.weight"), n_embd, nf, ne, W_REQUIRED) ||
        bind3(b, &L->ffn_up_exps, NAME("ffn_up_exps.weight"), n_embd, nf, ne, W_REQUIRED) ||
        bind3(b, &L->ffn_down_exps, NAME("ffn_down_exps.weight"), nf, n_embd, ne, W_REQUIRED))
        return TUTTI_ERR;
    if (a->exp_probs_b &&
        bind(b, &L->exp_probs_b, NAME("exp_probs_b.bias"), ne, 0, W_F32 | (a->exp_probs_b == 1 ? W_OPTIONAL : 0)))
        return TUTTI_ERR;
    if (a->moe_oai && (bind(b, &L->ffn_gate_inp_b, NAME("ffn_gate_inp.bias"), ne, 0, W_F32) ||
                       bind(b, &L->ffn_gate_exps_b, NAME("ffn_gate_exps.bias"), nf, ne, W_F32) ||
                       bind(b, &L->ffn_up_exps_b, NAME("ffn_up_exps.bias"), nf, ne, W_F32) ||
                       bind(b, &L->ffn_down_exps_b, NAME("ffn_down_exps.bias"), n_embd, ne, W_F32)))
        return TUTTI_ERR;
    if (hp->n_ff_shexp > 0 &&
        bind_ffn(b, il, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, "_shexp", hp->n_ff_shexp, false))
        return TUTTI_ERR;
    if (a->shexp == TUTTI_SHEXP_GATED &&
        bind(b, &L->ffn_gate_inp_shexp, NAME("ffn_gate_inp_shexp.weight"), n_embd, 0, W_F32))
        return TUTTI_ERR;
    return TUTTI_OK;
}

static int bind_layer(binder *b, int il) {
    tutti_model *m = b->m;
    const tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    tutti_layer *L = &m->layers[il];
    const int64_t n_embd = hp->n_embd;
    char n[96];
    if (bind(b, &L->attn_norm, NAME("attn_norm.weight"), n_embd, 0, W_F32)) return TUTTI_ERR;
    if (a->mla ? bind_mla(b, il) : bind_attention(b, il)) return TUTTI_ERR;
    if (a->post_norms && (bind(b, &L->post_attn_norm, NAME("post_attention_norm.weight"), n_embd, 0, W_F32) ||
                          bind(b, &L->post_ffn_norm, NAME("post_ffw_norm.weight"), n_embd, 0, W_F32)))
        return TUTTI_ERR;
    char ffn_norm[64];
    snprintf(ffn_norm, sizeof ffn_norm, "%s.weight", a->ffn_norm_name ? a->ffn_norm_name : "ffn_norm");
    snprintf(n, sizeof n, "blk.%d.%s", il, ffn_norm);
    if (bind(b, &L->ffn_norm, n, n_embd, 0, W_F32)) return TUTTI_ERR;
    const bool moe = hp->n_expert > 0 && il >= hp->n_layer_dense_lead;
    if (moe ? bind_moe(b, il) : bind_ffn(b, il, &L->ffn_gate, &L->ffn_up, &L->ffn_down, "", hp->n_ff, a->fused_gate_up))
        return TUTTI_ERR;

    /* Sliding window: local layers are il % p < p - 1 (see tutti_arch). */
    const int p = hp->swa_pattern;
    const bool local = a->swa_pattern > 0 && hp->n_swa > 0 && (p == 0 || il % p < p - 1);
    L->n_swa = local ? hp->n_swa : 0;
    L->rope_base = local ? hp->rope_base_swa : hp->rope_base;
    L->rope_scale = local && a->swa_local_rope_base ? 1.0f : hp->rope_scale;
    return TUTTI_OK;
}
#undef NAME

/* Binds every weight of the model (b->used marks the tensors taken; a
 * tensor nobody takes is refused afterwards, as llama.cpp does). */
static int bind_all(binder *b) {
    tutti_model *m = b->m;
    tutti_hparams *hp = &m->hp;
    /* Phi-3 LongRoPE divisors (llama.cpp reads them for phi3 only) */
    if (m->arch->longrope &&
        (bind(b, &m->rope_long, "rope_factors_long.weight", hp->n_rot / 2, 0, W_OPTIONAL | W_F32) ||
         bind(b, &m->rope_short, "rope_factors_short.weight", hp->n_rot / 2, 0, W_OPTIONAL | W_F32)))
        return TUTTI_ERR;
    if (bind(b, &m->token_embd, "token_embd.weight", hp->n_embd, -1, W_REQUIRED)) return TUTTI_ERR;
    if (m->token_embd.n_rows < 1 || m->token_embd.n_rows > INT32_MAX)
        return tutti_set_error("%s: tensor 'token_embd.weight' has %" PRId64 " rows (vocabulary size)", m->path,
                               m->token_embd.n_rows);
    hp->n_vocab = (int32_t)m->token_embd.n_rows;
    if (bind(b, &m->output_norm, "output_norm.weight", hp->n_embd, 0, W_F32) ||
        (arch_takes_output(m->arch) && bind(b, &m->output, "output.weight", hp->n_embd, hp->n_vocab, W_OPTIONAL)) ||
        (arch_takes_rope_freqs(m->arch) &&
         bind(b, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 0, W_OPTIONAL | W_F32)))
        return TUTTI_ERR;
    if (!m->output.data) {
        m->output = m->token_embd; /* tied embeddings */
        m->tied = true;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return tutti_set_error("%s: out of memory", m->path);
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(b, il)) return TUTTI_ERR;
    return TUTTI_OK;
}

/* Binds the weights, then refuses the file if any of its tensors was left
 * over (as llama.cpp's loader does). */
int tutti_bind_tensors(tutti_model *m) {
    const int64_t n_tensors = gguf_n_tensors(m->gguf);
    binder bd = {m, calloc((size_t)n_tensors + 1, 1)};
    if (!bd.used) return tutti_set_error("%s: out of memory", m->path);
    int rc = bind_all(&bd);
    /* llama.cpp: done_getting_tensors, n_created == n_tensors */
    for (int64_t i = 0; rc == TUTTI_OK && i < n_tensors; i++) {
        if (bd.used[i]) continue;
        int64_t n_used = 0;
        for (int64_t j = 0; j < n_tensors; j++) n_used += bd.used[j];
        const gguf_tensor_info *t = gguf_tensor(m->gguf, i);
        rc = tutti_set_error("%s: tensor '%.*s' is not used by architecture %s (wrong number of tensors: the "
                             "file has %" PRId64 ", the model takes %" PRId64 "); an unknown tensor, or a feature "
                             "tutti does not implement",
                             m->path, (int)t->name.len, t->name.data, m->arch->name, n_tensors, n_used);
    }
    free(bd.used);
    return rc;
}
