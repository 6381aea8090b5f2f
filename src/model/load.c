/* Model loading: GGUF metadata -> hyper-parameters, tensors bound by name
 * with every shape and type checked, tokenizer.  Weights stay in the
 * read-only mapping owned by the gguf_file (never copied).
 *
 * Metadata keys and tensor names follow llama.cpp's GGUF conventions
 * (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): keys are
 * "<arch>.<name>", tensors "token_embd.weight", "blk.N.attn_q.weight", ... */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"
#include "quant/quant.h"
#include "quant/vecdot.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"


/* Bounds that keep every size product far from overflow and refuse absurd
 * metadata before anything is allocated. */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096

tutti_model_params tutti_model_default_params(void) {
    tutti_model_params p = {.verbose = false, .use_mmap = false};
    return p;
}

/* ---- metadata ---- */

/* Reads "<arch>.<suffix>" as a positive int32.  Absent: *out = def, or an
 * error when required. */
static int get_dim(const tutti_model *m, const char *suffix, bool required, int32_t def, int32_t *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    if (gguf_find_key(m->gguf, key) < 0) {
        if (required)
            return tutti_set_error("%s: metadata key %s is missing (required for architecture %s)", m->path,
                                   key, m->arch->name);
        *out = def;
        return TUTTI_OK;
    }
    uint32_t v;
    if (!gguf_get_u32(m->gguf, key, &v))
        return tutti_set_error("%s: metadata key %s must be a single unsigned integer (per-layer arrays are "
                               "not supported)",
                               m->path, key);
    if (v == 0 || v > MAX_DIM)
        return tutti_set_error("%s: metadata key %s = %u is out of range (1..%d)", m->path, key, v, MAX_DIM);
    *out = (int32_t)v;
    return TUTTI_OK;
}

static int get_float(const tutti_model *m, const char *suffix, float def, float *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    if (gguf_find_key(m->gguf, key) < 0) {
        *out = def;
        return TUTTI_OK;
    }
    if (!gguf_get_f32(m->gguf, key, out))
        return tutti_set_error("%s: metadata key %s must be a float", m->path, key);
    if (!isfinite(*out)) return tutti_set_error("%s: metadata key %s is not finite", m->path, key);
    return TUTTI_OK;
}

static int load_hparams(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    if (get_dim(m, "block_count", true, 0, &hp->n_layer) ||
        get_dim(m, "context_length", true, 0, &hp->n_ctx_train) ||
        get_dim(m, "embedding_length", true, 0, &hp->n_embd) ||
        get_dim(m, "feed_forward_length", true, 0, &hp->n_ff) ||
        get_dim(m, "attention.head_count", true, 0, &hp->n_head) ||
        get_dim(m, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv))
        return TUTTI_ERR;
    if (hp->n_layer > MAX_LAYERS)
        return tutti_set_error("%s: %s.block_count = %d is out of range (1..%d)", m->path, m->arch->name,
                               hp->n_layer, MAX_LAYERS);
    if (hp->n_head % hp->n_head_kv != 0)
        return tutti_set_error("%s: attention.head_count (%d) is not a multiple of attention.head_count_kv (%d)",
                               m->path, hp->n_head, hp->n_head_kv);
    /* llama.cpp's defaults: both head sizes n_embd/n_head (value_length does
     * not follow key_length), rope over the whole key head. */
    if (get_dim(m, "attention.key_length", false, hp->n_embd / hp->n_head, &hp->head_dim_k) ||
        get_dim(m, "attention.value_length", false, hp->n_embd / hp->n_head, &hp->head_dim_v) ||
        get_dim(m, "rope.dimension_count", false, hp->head_dim_k, &hp->n_rot))
        return TUTTI_ERR;
    if (hp->head_dim_k == 0 || hp->head_dim_v == 0)
        return tutti_set_error("%s: cannot derive the head size: embedding_length %d < head_count %d and no "
                               "attention.key_length/value_length",
                               m->path, hp->n_embd, hp->n_head);
    if ((int64_t)hp->n_head * hp->head_dim_k > MAX_DIM || (int64_t)hp->n_head * hp->head_dim_v > MAX_DIM)
        return tutti_set_error("%s: head_count × head size is too large", m->path);
    /* every supported architecture's attention needs equal key and value heads */
    if (hp->head_dim_v != hp->head_dim_k)
        return tutti_set_error("%s: attention.value_length %d differs from attention.key_length %d (value_length "
                               "defaults to embedding_length/head_count = %d when absent)",
                               m->path, hp->head_dim_v, hp->head_dim_k, hp->n_embd / hp->n_head);
    if (m->arch->rot_full && hp->n_rot != hp->head_dim_k)
        return tutti_set_error("%s: rope.dimension_count = %d must equal the head size %d for architecture %s",
                               m->path, hp->n_rot, hp->head_dim_k, m->arch->name);
    if (hp->n_rot > hp->head_dim_k || hp->n_rot % 2)
        return tutti_set_error("%s: rope.dimension_count = %d must be even and at most the head size %d", m->path,
                               hp->n_rot, hp->head_dim_k);

    char key[256];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch->name);
    if (gguf_find_key(m->gguf, key) < 0)
        return tutti_set_error("%s: metadata key %s is missing (required for architecture %s)", m->path, key,
                               m->arch->name);
    if (get_float(m, "attention.layer_norm_rms_epsilon", 0, &hp->rms_eps)) return TUTTI_ERR;
    if (!(hp->rms_eps > 0) || hp->rms_eps > 1)
        return tutti_set_error("%s: %s = %g is out of range (0, 1]", m->path, key, hp->rms_eps);

    /* Mixture-of-experts files carry expert tensors this dense pass has no use for. */
    snprintf(key, sizeof key, "%s.expert_count", m->arch->name);
    uint32_t n_expert = 0;
    if (gguf_find_key(m->gguf, key) >= 0 && (!gguf_get_u32(m->gguf, key, &n_expert) || n_expert > 0))
        return tutti_set_error("%s: %s is set: mixture-of-experts models are not supported", m->path, key);

    /* local layers' rope base: rope.freq_base_swa, default rope.freq_base (gemma3: 10000) */
    hp->attn_softcap = hp->final_softcap = 0;
    if (get_float(m, "rope.freq_base", 10000.0f, &hp->rope_base) ||
        get_float(m, "rope.freq_base_swa", m->arch->swa_local_rope_base ? 10000.0f : hp->rope_base,
                  &hp->rope_base_swa) ||
        (m->arch->softcap && (get_float(m, "attn_logit_softcapping", 50.0f, &hp->attn_softcap) ||
                              get_float(m, "final_logit_softcapping", 30.0f, &hp->final_softcap))) ||
        (m->arch->final_softcap_key && get_float(m, "final_logit_softcapping", 0, &hp->final_softcap)))
        return TUTTI_ERR;
    if (!(hp->rope_base > 0) || !(hp->rope_base_swa > 0))
        return tutti_set_error("%s: rope.freq_base must be positive", m->path);
    if (hp->attn_softcap < 0 || hp->final_softcap < 0)
        return tutti_set_error("%s: logit soft-capping values must not be negative", m->path);

    /* RoPE scaling: only linear position interpolation is implemented. */
    hp->rope_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch->name);
    gguf_str st;
    bool has_type = gguf_get_str(m->gguf, key, &st);
    /* "longrope" (Phi-3): the factors are tensors; like llama.cpp, a
     * rope.scaling.factor still scales positions as with "linear" */
    const bool longrope = has_type && gguf_str_eq(st, "longrope") && m->arch->longrope;
    /* YaRN: not with sliding-window layers (their own base and scale) */
    const bool yarn = has_type && gguf_str_eq(st, "yarn") && m->arch->swa_pattern == 0;
    if (has_type && !gguf_str_eq(st, "none") && !gguf_str_eq(st, "linear") && !longrope && !yarn)
        return tutti_set_error("%s: %s = '%.*s' is not supported for architecture %s (only 'linear', 'none'%s)",
                               m->path, key, (int)(st.len > 64 ? 64 : st.len), st.data, m->arch->name,
                               m->arch->longrope ? ", 'longrope', 'yarn'" : m->arch->swa_pattern ? "" : ", 'yarn'");
    hp->yarn_scale = 0;
    if (!has_type || gguf_str_eq(st, "linear") || longrope || yarn) {
        float factor;
        if (get_float(m, "rope.scaling.factor", 0, &factor)) return TUTTI_ERR;
        if (factor == 0 && get_float(m, "rope.scale_linear", 0, &factor)) return TUTTI_ERR; /* the old key */
        if (factor < 0) return tutti_set_error("%s: rope.scaling.factor = %g must be positive", m->path, factor);
        if (factor > 0 && factor != 1.0f) hp->rope_scale = 1.0f / factor;
    }
    if (get_float(m, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor)) return TUTTI_ERR;
    if (!(hp->rope_attn_factor > 0))
        return tutti_set_error("%s: rope.scaling.attn_factor = %g must be positive", m->path, hp->rope_attn_factor);
    if (yarn && hp->rope_scale != 1.0f) {
        /* ggml's YaRN: magnitude 1 + 0.1 ln(factor) on the rotated dims, the
         * position scale moves into per-frequency blends (session.c) */
        hp->yarn_scale = hp->rope_scale;
        hp->rope_attn_factor *= 1.0f + 0.1f * logf(1.0f / hp->rope_scale);
        hp->rope_scale = 1.0f;
    }
    if (get_dim(m, "rope.scaling.original_context_length", false, hp->n_ctx_train, &hp->n_ctx_orig))
        return TUTTI_ERR;

    hp->n_swa = 0;
    hp->swa_pattern = m->arch->swa_pattern;
    if (m->arch->swa_pattern > 0) {
        /* 0: no window (gemma3; gemma2 would mask every key, llama.cpp computes NaN) */
        snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch->name);
        uint32_t p;
        if (gguf_find_key(m->gguf, key) >= 0 && gguf_get_u32(m->gguf, key, &p) && p == 0 &&
            m->arch->swa_default == 0)
            hp->n_swa = 0;
        else if (get_dim(m, "attention.sliding_window", false, m->arch->swa_default, &hp->n_swa))
            return TUTTI_ERR;
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch->name);
        if (gguf_find_key(m->gguf, key) >= 0) {
            if (!gguf_get_u32(m->gguf, key, &p) || p > MAX_LAYERS)
                return tutti_set_error("%s: metadata key %s must be one unsigned integer up to %d (per-layer "
                                       "arrays are not supported)",
                                       m->path, key, MAX_LAYERS);
            hp->swa_pattern = (int32_t)p;
        }
    }

    /* Scaled dot-product attention: 1/sqrt(d_k), but 1/sqrt(n_embd/n_head)
     * for the Gemma 27B models (told by their layer count, as llama.cpp does). */
    const bool scale_embd = m->arch->n_layer_scale_embd > 0 && hp->n_layer == m->arch->n_layer_scale_embd;
    hp->attn_scale = 1.0f / sqrtf((float)(scale_embd ? hp->n_embd / hp->n_head : hp->head_dim_k));
    return TUTTI_OK;
}

/* ---- tensors ---- */

enum { W_REQUIRED = 0, W_OPTIONAL = 1, W_F32 = 2 };

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

/* Binds tensor `name` with expected shape [ne0] (ne1 == 0) or [ne0, ne1];
 * ne1 < 0 accepts any row count (read back from the file).  The shape rule
 * is llama.cpp's (check_tensor_dims): every dimension equal, the ones past
 * the expected shape 1. */
static int bind(binder *b, tutti_weight *w, const char *name, int64_t ne0, int64_t ne1, int flags) {
    const tutti_model *m = b->m;
    memset(w, 0, sizeof *w);
    const gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (flags & W_OPTIONAL) return TUTTI_OK;
        return tutti_set_error("%s: missing tensor '%s' (required for architecture %s)", m->path, name,
                               m->arch->name);
    }
    int64_t want[GGUF_MAX_DIMS] = {ne0, ne1 < 0 ? t->ne[1] : (ne1 == 0 ? 1 : ne1), 1, 1};
    uint32_t want_dims = ne1 == 0 ? 1 : 2;
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
        return tutti_set_error("%s: tensor '%s' has type %s, expected f32 (norm weights and biases)", m->path,
                               name, tutti_type_name(t->type));
    if (tutti_row_size(t->type, t->ne[0]) == 0)
        return tutti_set_error("%s: tensor '%s': row of %" PRId64 " elements is not a whole number of %s blocks",
                               m->path, name, t->ne[0], tutti_type_name(t->type));
    b->used[t - gguf_tensor(m->gguf, 0)] = 1;
    w->data = t->data;
    w->type = t->type;
    w->n_cols = t->ne[0];
    w->n_rows = t->ne[1];
    return TUTTI_OK;
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

static int bind_layer(binder *b, int il) {
    tutti_model *m = b->m;
    const tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    tutti_layer *L = &m->layers[il];
    const int64_t n_embd = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k,
                  nk = (int64_t)hp->n_head_kv * hp->head_dim_k, nv = (int64_t)hp->n_head_kv * hp->head_dim_v,
                  no = (int64_t)hp->n_head * hp->head_dim_v;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if (bind(b, &L->attn_norm, NAME("attn_norm.weight"), n_embd, 0, W_F32)) return TUTTI_ERR;
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
    if (a->qk_norm && (bind(b, &L->q_norm, NAME("attn_q_norm.weight"), hp->head_dim_k, 0, W_F32) ||
                       bind(b, &L->k_norm, NAME("attn_k_norm.weight"), hp->head_dim_k, 0, W_F32)))
        return TUTTI_ERR;
    if (bind(b, &L->wo, NAME("attn_output.weight"), no, n_embd, W_REQUIRED)) return TUTTI_ERR;
    if (a->post_norms && (bind(b, &L->post_attn_norm, NAME("post_attention_norm.weight"), n_embd, 0, W_F32) ||
                          bind(b, &L->post_ffn_norm, NAME("post_ffw_norm.weight"), n_embd, 0, W_F32)))
        return TUTTI_ERR;
    if (bind(b, &L->ffn_norm, NAME("ffn_norm.weight"), n_embd, 0, W_F32)) return TUTTI_ERR;
    if (a->fused_gate_up) {
        if (bind(b, &L->ffn_up, NAME("ffn_up.weight"), n_embd, 2 * (int64_t)hp->n_ff, W_REQUIRED))
            return TUTTI_ERR;
    } else {
        if (bind(b, &L->ffn_gate, NAME("ffn_gate.weight"), n_embd, hp->n_ff, W_REQUIRED) ||
            bind(b, &L->ffn_up, NAME("ffn_up.weight"), n_embd, hp->n_ff, W_REQUIRED))
            return TUTTI_ERR;
    }
    if (bind(b, &L->ffn_down, NAME("ffn_down.weight"), hp->n_ff, n_embd, W_REQUIRED)) return TUTTI_ERR;
#undef NAME

    /* Sliding window: local layers are il % p < p - 1 (see tutti_arch). */
    const int p = hp->swa_pattern;
    const bool local = a->swa_pattern > 0 && hp->n_swa > 0 && (p == 0 || il % p < p - 1);
    L->n_swa = local ? hp->n_swa : 0;
    L->rope_base = local ? hp->rope_base_swa : hp->rope_base;
    L->rope_scale = local && a->swa_local_rope_base ? 1.0f : hp->rope_scale;
    return TUTTI_OK;
}

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
        (arch_takes_output(m->arch) &&
         bind(b, &m->output, "output.weight", hp->n_embd, hp->n_vocab, W_OPTIONAL)) ||
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
static int bind_tensors(tutti_model *m) {
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

/* ---- weight placement ---- */

/* Where the weights live.  Generation streams every weight once per token,
 * so they are moved out of the file mapping into one anonymous arena that
 * is 2 MiB-aligned and advised as transparent huge pages (4 KiB pages of
 * the mapping cost a TLB miss every 4 KiB: +9% tokens/s measured on
 * Llama-1B Q8_0, +2-3% on Q4_K_M).  One arena, not one allocation per
 * tensor: huge pages are resident whole, so per-tensor allocations would
 * each waste up to 2 MiB of resident memory.  All tensors move, small
 * ones too (norms, biases): the page cache may hold the file in 2 MiB
 * folios, and touching one 1 KiB norm would map a whole folio (measured:
 * Qwen2.5-0.5B Q8_0 kept 140 MiB of the file resident for its 47 MiB of
 * small matrices).  On the way, a weight whose type has an interleaved
 * layout (quant.h) is repacked when the kernel path has kernels for it, as
 * llama.cpp's CPU "repack" buffers do (the kernels then feed 8 rows per
 * activation load).  The mapped pages are given back (madvise) slice by
 * slice, so resident memory does not double, not even at the peak.  An
 * untied token_embd stays mapped (lookups touch only the rows used), and
 * so do the unrepacked weights of a model loaded from a caller's buffer.  A
 * tied output matrix (alias = token_embd) shares a plain copy, but keeps
 * the original for the embedding lookups when repacked. */
/* Bytes w takes in the arena (0: stays where it is); *rt = repacked type or -1. */
static size_t place_size(const tutti_model *m, const tutti_weight *w, int *rt) {
    *rt = -1;
    if (!w->data) return 0;
    const int t = tutti_repack_type(w->type);
    const size_t bytes = t >= 0 && tutti_vec_dot_get(t) ? tutti_repack_size(w->type, w->n_rows, w->n_cols) : 0;
    if (bytes) {
        *rt = t;
        return bytes;
    }
    return m->mapped ? tutti_row_size(w->type, w->n_cols) * (size_t)w->n_rows : 0;
}

/* Copies (rt < 0) or repacks (into type rt) w to dst. */
static void place_weight(const tutti_model *m, tutti_weight *w, tutti_weight *alias, char *dst, int rt) {
    /* in slices of ~8 MiB whose source pages are given back at once */
    const bool give_back = m->mapped && !(rt >= 0 && alias);
    const size_t src_row = tutti_row_size(w->type, w->n_cols);
    const size_t dst_row = rt >= 0 ? tutti_row_size(rt, w->n_cols) : src_row;
    int64_t slice = (int64_t)(((size_t)8 << 20) / src_row) / 8 * 8;
    if (slice < 8) slice = 8;
    for (int64_t r = 0; r < w->n_rows; r += slice) {
        const int64_t nr = w->n_rows - r < slice ? w->n_rows - r : slice;
        const char *src = (const char *)w->data + (size_t)r * src_row;
        if (rt >= 0)
            tutti_repack(w->type, src, dst + (size_t)r * dst_row, nr, w->n_cols);
        else
            memcpy(dst + (size_t)r * dst_row, src, (size_t)nr * src_row);
        if (give_back) {
            const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            const uintptr_t lo = ((uintptr_t)src + page - 1) / page * page;
            const uintptr_t hi = ((uintptr_t)src + (size_t)nr * src_row) / page * page;
            if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advisory: failure only costs memory */
        }
    }
    w->data = dst;
    if (rt >= 0)
        w->type = rt;
    else if (alias)
        alias->data = dst;
}

#define LAYER_WEIGHTS 17

/* The weights of the model's part (all layers of a whole model) but
 * token_embd, output last (entries may be absent: data NULL). */
static int model_weights(tutti_model *m, tutti_weight **out, int cap) {
    int n = 0;
    for (int il = m->part_il0; il < m->part_il1; il++) {
        tutti_layer *L = &m->layers[il];
        tutti_weight *ws[LAYER_WEIGHTS] = {&L->attn_norm, &L->wq,    &L->wk,       &L->wv,
                                           &L->wqkv,      &L->bq,    &L->bk,       &L->bv,
                                           &L->q_norm,    &L->k_norm, &L->wo,      &L->post_attn_norm,
                                           &L->ffn_norm,  &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                                           &L->post_ffn_norm};
        for (int i = 0; i < LAYER_WEIGHTS && n < cap; i++) out[n++] = ws[i];
    }
    tutti_weight *top[] = {&m->output_norm, &m->rope_freqs, &m->output};
    for (int i = 0; i < 3 && n < cap && m->part_head; i++) out[n++] = top[i];
    return n;
}

static int place_weights(tutti_model *m) {
    const int cap = LAYER_WEIGHTS * m->hp.n_layer + 3;
    tutti_weight **ws = malloc(sizeof *ws * (size_t)cap);
    if (!ws) return tutti_set_error("%s: out of memory", m->path);
    const int n = model_weights(m, ws, cap);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int rt;
        total += (place_size(m, ws[i], &rt) + 63) / 64 * 64;
    }
    if (total) {
        void *arena = NULL;
        if (posix_memalign(&arena, (size_t)2 << 20, total)) {
            free(ws); /* no memory for a copy: the weights stay mapped (and unrepacked) */
            return TUTTI_OK;
        }
        (void)madvise(arena, total, MADV_HUGEPAGE); /* advisory */
        m->weights_mem = arena;
        char *at = arena;
        for (int i = 0; i < n; i++) {
            int rt;
            const size_t sz = place_size(m, ws[i], &rt);
            if (!sz) continue;
            place_weight(m, ws[i], ws[i] == &m->output && m->tied ? &m->token_embd : NULL, at, rt);
            at += (sz + 63) / 64 * 64;
        }
    }
    free(ws);
    return TUTTI_OK;
}

/* ---- public ---- */

/* Loads from path (buf == NULL: mmap) or from the caller's buffer. */
static tutti_model *load_local(const char *path, const void *buf, size_t size, const tutti_model_params *params,
                               int32_t il0, int32_t il1, bool head) {
    tutti_model_params defaults = tutti_model_default_params();
    if (!params) params = &defaults;
    if (!path) {
        tutti_set_error("tutti_model_load: path is NULL");
        return NULL;
    }
    tutti_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        tutti_set_error("%s: out of memory", path);
        return NULL;
    }
    m->gguf = buf ? gguf_open_buffer(buf, size, path) : gguf_open(path);
    if (!m->gguf) goto fail;

    gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) {
        if (gguf_find_key(m->gguf, "general.architecture") < 0)
            tutti_set_error("%s: metadata key general.architecture is missing (is this a model file, not a "
                            "vocabulary-only file?)",
                            path);
        goto fail;
    }
    m->arch = tutti_arch_find(arch.data, arch.len);
    if (!m->arch) {
        tutti_set_error("%s: architecture '%.*s' is not supported (supported: %s)", path,
                        (int)(arch.len > 64 ? 64 : arch.len), arch.data, tutti_arch_list());
        goto fail;
    }
    if (gguf_n_tensors(m->gguf) == 0) {
        tutti_set_error("%s: the file has no tensors (a vocabulary-only GGUF? tutti tokenize accepts those)", path);
        goto fail;
    }
    if (load_hparams(m) || bind_tensors(m)) goto fail;
    if (il1 < 0) il1 = m->hp.n_layer; /* the whole model */
    if (il0 < 0 || il0 > il1 || il1 > m->hp.n_layer) {
        tutti_set_error("%s: layers [%d, %d) are not a range of the model's %d layers", path, il0, il1,
                        m->hp.n_layer);
        goto fail;
    }
    m->part_il0 = il0, m->part_il1 = il1, m->part_head = head;

    m->vocab = tutti_vocab_from_gguf(m->gguf);
    if (!m->vocab) {
        /* the vocabulary's messages mostly name the file already */
        if (!strstr(tutti_last_error(), path)) tutti_error_prefix("%s: tokenizer", path);
        goto fail;
    }
    /* Token ids index token_embd/output rows and the vocabulary alike: a
     * mismatch would read past one of them (llama.cpp requires equality too). */
    if (tutti_vocab_n_tokens(m->vocab) != m->hp.n_vocab) {
        tutti_set_error("%s: tensor 'token_embd.weight' has %d rows but the vocabulary (tokenizer.ggml.tokens) "
                        "has %d tokens",
                        path, m->hp.n_vocab, tutti_vocab_n_tokens(m->vocab));
        goto fail;
    }
    m->mapped = !buf;
    if (!params->use_mmap && place_weights(m)) goto fail;
    if (params->verbose) tutti_model_describe(m, stderr);
    return m;
fail:
    tutti_model_free(m);
    return NULL;
}

/* A model spec "hf://..." (src/hub) loads its cached file. */
static tutti_model *load(const char *path, const void *buf, size_t size, const tutti_model_params *params,
                         int32_t il0, int32_t il1, bool head) {
    if (buf || !tutti_is_hub_spec(path)) return load_local(path, buf, size, params, il0, il1, head);
    char *local = tutti_hub_resolve(path);
    tutti_model *m = local ? load_local(local, NULL, 0, params, il0, il1, head) : NULL;
    free(local);
    return m;
}

tutti_model *tutti_model_load(const char *path, const tutti_model_params *params) {
    return load(path, NULL, 0, params, 0, -1, true);
}

tutti_model *tutti_model_load_part(const char *path, const tutti_model_params *params, int32_t il0, int32_t il1,
                                   bool head) {
    return load(path, NULL, 0, params, il0, il1, head);
}

tutti_model *tutti_model_load_buffer(const void *buf, size_t size, const char *name,
                                     const tutti_model_params *params) {
    if (!buf) {
        tutti_set_error("tutti_model_load_buffer: buffer is NULL");
        return NULL;
    }
    return load(name ? name : "(buffer)", buf, size, params, 0, -1, true);
}

void tutti_model_free(tutti_model *model) {
    if (!model) return;
    tutti_vocab_free(model->vocab);
    free(model->layers);
    free(model->weights_mem);
    gguf_close(model->gguf);
    free(model->path);
    free(model);
}

const tutti_vocab *tutti_model_vocab(const tutti_model *model) { return model ? model->vocab : NULL; }
int32_t tutti_model_n_vocab(const tutti_model *model) { return model ? model->hp.n_vocab : 0; }
int32_t tutti_model_n_ctx_train(const tutti_model *model) { return model ? model->hp.n_ctx_train : 0; }
const char *tutti_model_arch(const tutti_model *model) { return model ? model->arch->name : NULL; }

void tutti_model_describe(const tutti_model *model, FILE *out) {
    if (!model || !out) return;
    const tutti_hparams *hp = &model->hp;
    gguf_str name = {"", 0};
    gguf_get_str(model->gguf, "general.name", &name);
    fprintf(out, "model: %s\n  name: %.*s\n  architecture: %s\n", model->path, (int)(name.len > 200 ? 200 : name.len),
            name.data, model->arch->name);
    fprintf(out,
            "  n_vocab %d, n_ctx_train %d, n_embd %d, n_layer %d, n_ff %d\n"
            "  n_head %d, n_head_kv %d, head_dim %d/%d (k/v), n_rot %d, rms_eps %g\n"
            "  rope: base %g%s, position scale %g%s\n",
            hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv,
            hp->head_dim_k, hp->head_dim_v, hp->n_rot, hp->rms_eps, hp->rope_base,
            model->rope_freqs.data ? " with rope_freqs factors" : "", hp->rope_scale,
            model->arch->rope_mode == TUTTI_ROPE_NEOX ? ", neox" : ", normal");
    if (hp->yarn_scale > 0 || hp->rope_attn_factor != 1.0f || model->rope_long.data)
        fprintf(out, "  rope scaling:%s attn_factor %g, original context %d%s\n",
                hp->yarn_scale > 0 ? " yarn," : "", hp->rope_attn_factor, hp->n_ctx_orig,
                model->rope_long.data ? ", longrope factors (long above the original context)" : "");
    if (hp->n_swa) {
        if (hp->swa_pattern == 0)
            fprintf(out, "  sliding window %d on every layer", hp->n_swa);
        else
            fprintf(out, "  sliding window %d on layers il %% %d < %d", hp->n_swa, hp->swa_pattern,
                    hp->swa_pattern - 1);
        fprintf(out, ", their rope base %g", hp->rope_base_swa);
        fprintf(out, "\n");
    }
    if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        fprintf(out, "  soft-capping: attention %g, final %g\n", hp->attn_softcap, hp->final_softcap);
    const tutti_arch *a = model->arch;
    fprintf(out, "  attention: scale %g on %s, q/k/v bias %s, q/k norm %s, %s qkv\n", hp->attn_scale,
            a->attn_scale_on_q ? "q" : "scores", model->layers[0].bq.data ? "yes" : "no", a->qk_norm ? "yes" : "no",
            a->fused_qkv ? "fused" : "separate");
    fprintf(out, "  ffn: %s gate, %s gate/up; post-norms %s; embeddings x sqrt(n_embd) %s\n",
            a->act == TUTTI_ACT_GELU_TANH ? "GELU (tanh)" : "SiLU", a->fused_gate_up ? "fused" : "separate",
            a->post_norms ? "yes" : "no", a->embd_scale ? "yes" : "no");
    fprintf(out, "  output: %s\n", model->tied ? "tied to token_embd" : "separate");

    /* tensor types: count and bytes per type */
    int64_t count[TUTTI_TYPE_COUNT] = {0};
    uint64_t bytes[TUTTI_TYPE_COUNT] = {0}, total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(model->gguf); i++) {
        const gguf_tensor_info *t = gguf_tensor(model->gguf, i);
        if (t->type >= 0 && t->type < TUTTI_TYPE_COUNT) {
            count[t->type]++;
            bytes[t->type] += t->size;
        }
        total += t->size;
    }
    fprintf(out, "  tensors: %" PRId64 ", %.2f MiB:", gguf_n_tensors(model->gguf), (double)total / (1 << 20));
    for (int t = 0; t < TUTTI_TYPE_COUNT; t++)
        if (count[t])
            fprintf(out, " %s×%" PRId64 " (%.2f MiB)", tutti_type_name(t), count[t], (double)bytes[t] / (1 << 20));
    fprintf(out, "\n");
    fprintf(out, "  tokenizer: %s (pre %s), %d tokens\n", tutti_vocab_type(model->vocab),
            tutti_vocab_pre(model->vocab), tutti_vocab_n_tokens(model->vocab));
}
