/* Model metadata -> hyper-parameters (tutti_hparams), with every value
 * range-checked before anything is sized from it.  Keys are
 * "<arch>.<name>" as llama.cpp writes and reads them (llama-arch.cpp);
 * defaults and which keys each architecture reads follow llama.cpp 0.7.0's
 * loader (llama-model.cpp), so that a file computes what it computes there. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"

/* Bounds that keep every size product far from overflow and refuse absurd
 * metadata before anything is allocated. */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096
#define MAX_EXPERTS 512 /* llama.cpp's LLAMA_MAX_EXPERTS */

static bool has_key(const tutti_model *m, const char *suffix) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    return gguf_find_key(m->gguf, key) >= 0;
}

/* Reads "<arch>.<suffix>" as an unsigned integer in [lo, hi].  Absent:
 * *out = def, or an error when required. */
static int get_u32_in(const tutti_model *m, const char *suffix, bool required, int32_t def, uint32_t lo, uint32_t hi,
                      int32_t *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    if (gguf_find_key(m->gguf, key) < 0) {
        if (required)
            return tutti_set_error("%s: metadata key %s is missing (required for architecture %s)", m->path, key,
                                   m->arch->name);
        *out = def;
        return TUTTI_OK;
    }
    uint32_t v;
    if (!gguf_get_u32(m->gguf, key, &v))
        return tutti_set_error("%s: metadata key %s must be a single unsigned integer (per-layer arrays are "
                               "not supported)",
                               m->path, key);
    if (v < lo || v > hi)
        return tutti_set_error("%s: metadata key %s = %u is out of range (%u..%u)", m->path, key, v, lo, hi);
    *out = (int32_t)v;
    return TUTTI_OK;
}

/* A positive dimension (1..MAX_DIM). */
static int get_dim(const tutti_model *m, const char *suffix, bool required, int32_t def, int32_t *out) {
    return get_u32_in(m, suffix, required, def, 1, MAX_DIM, out);
}

static int get_float(const tutti_model *m, const char *suffix, float def, float *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    if (gguf_find_key(m->gguf, key) < 0) {
        *out = def;
        return TUTTI_OK;
    }
    if (!gguf_get_f32(m->gguf, key, out)) return tutti_set_error("%s: metadata key %s must be a float", m->path, key);
    if (!isfinite(*out)) return tutti_set_error("%s: metadata key %s is not finite", m->path, key);
    return TUTTI_OK;
}

static int get_bool(const tutti_model *m, const char *suffix, bool def, bool *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    if (gguf_find_key(m->gguf, key) < 0) {
        *out = def;
        return TUTTI_OK;
    }
    if (!gguf_get_bool(m->gguf, key, out))
        return tutti_set_error("%s: metadata key %s must be a boolean", m->path, key);
    return TUTTI_OK;
}

/* block_count, context_length, widths, heads and head sizes. */
static int load_dims(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    if (get_u32_in(m, "block_count", true, 0, 1, MAX_LAYERS, &hp->n_layer) ||
        get_dim(m, "context_length", true, 0, &hp->n_ctx_train) ||
        get_dim(m, "embedding_length", true, 0, &hp->n_embd) || get_dim(m, "feed_forward_length", true, 0, &hp->n_ff) ||
        get_dim(m, "attention.head_count", true, 0, &hp->n_head) ||
        get_dim(m, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv))
        return TUTTI_ERR;
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
    /* equal key and value heads, but for latent attention (its values are a
     * prefix of its keys: mla.c) */
    if (!a->mla && hp->head_dim_v != hp->head_dim_k)
        return tutti_set_error("%s: attention.value_length %d differs from attention.key_length %d (value_length "
                               "defaults to embedding_length/head_count = %d when absent)",
                               m->path, hp->head_dim_v, hp->head_dim_k, hp->n_embd / hp->n_head);
    if (a->rot_full && hp->n_rot != hp->head_dim_k)
        return tutti_set_error("%s: rope.dimension_count = %d must equal the head size %d for architecture %s", m->path,
                               hp->n_rot, hp->head_dim_k, a->name);
    if (hp->n_rot > hp->head_dim_k || hp->n_rot % 2)
        return tutti_set_error("%s: rope.dimension_count = %d must be even and at most the head size %d", m->path,
                               hp->n_rot, hp->head_dim_k);
    if (a->q_is_n_embd && (int64_t)hp->n_head * hp->head_dim_k != hp->n_embd)
        return tutti_set_error("%s: attention.head_count %d × head size %d must equal embedding_length %d for "
                               "architecture %s",
                               m->path, hp->n_head, hp->head_dim_k, hp->n_embd, a->name);

    char key[256];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a->name);
    if (gguf_find_key(m->gguf, key) < 0)
        return tutti_set_error("%s: metadata key %s is missing (required for architecture %s)", m->path, key, a->name);
    if (get_float(m, "attention.layer_norm_rms_epsilon", 0, &hp->rms_eps)) return TUTTI_ERR;
    if (!(hp->rms_eps > 0) || hp->rms_eps > 1)
        return tutti_set_error("%s: %s = %g is out of range (0, 1]", m->path, key, hp->rms_eps);
    return TUTTI_OK;
}

/* llama.cpp's get_mscale (llama-context.cpp). */
static float get_mscale(float scale, float mscale) { return scale <= 1.0f ? 1.0f : 0.1f * mscale * logf(scale) + 1.0f; }

/* The attn_factor llama.cpp hands ggml's YaRN rope, before
 * rope.scaling.attn_factor: it cancels ggml's own 1 + 0.1 ln(factor) but
 * for the ratio of the two mscale terms when yarn_log_multiplier is set
 * (a ratio of 1 for deepseek2). */
static float yarn_attn_factor(const tutti_model *m, float factor, float log_mul) {
    float af = get_mscale(factor, 1.0f);
    if (log_mul != 0.0f)
        af = get_mscale(factor, m->arch->mla && log_mul != 1.0f ? log_mul : 1.0f) / get_mscale(factor, log_mul);
    return af * (1.0f / (1.0f + 0.1f * logf(factor)));
}

/* rope.freq_base(_swa), scaling (linear, longrope, YaRN), soft-capping. */
static int load_rope(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    /* local layers' rope base: rope.freq_base_swa, default rope.freq_base (gemma3: 10000) */
    hp->attn_softcap = hp->final_softcap = 0;
    if (get_float(m, "rope.freq_base", 10000.0f, &hp->rope_base) ||
        get_float(m, "rope.freq_base_swa", a->swa_local_rope_base ? 10000.0f : hp->rope_base, &hp->rope_base_swa) ||
        (a->softcap && (get_float(m, "attn_logit_softcapping", 50.0f, &hp->attn_softcap) ||
                        get_float(m, "final_logit_softcapping", 30.0f, &hp->final_softcap))) ||
        (a->final_softcap_key && get_float(m, "final_logit_softcapping", 0, &hp->final_softcap)))
        return TUTTI_ERR;
    if (!(hp->rope_base > 0) || !(hp->rope_base_swa > 0))
        return tutti_set_error("%s: rope.freq_base must be positive", m->path);
    if (hp->attn_softcap < 0 || hp->final_softcap < 0)
        return tutti_set_error("%s: logit soft-capping values must not be negative", m->path);

    hp->rope_scale = 1.0f;
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a->name);
    gguf_str st;
    bool has_type = gguf_get_str(m->gguf, key, &st);
    /* "longrope" (Phi-3): the factors are tensors; like llama.cpp, a
     * rope.scaling.factor still scales positions as with "linear" */
    const bool longrope = has_type && gguf_str_eq(st, "longrope") && a->longrope;
    /* YaRN: not with sliding-window layers of their own base and scale (Gemma) */
    const bool yarn_ok = a->swa_pattern == 0 || a->yarn_with_swa;
    const bool yarn = has_type && gguf_str_eq(st, "yarn") && yarn_ok;
    if (has_type && !gguf_str_eq(st, "none") && !gguf_str_eq(st, "linear") && !longrope && !yarn)
        return tutti_set_error("%s: %s = '%.*s' is not supported for architecture %s (only 'linear', 'none'%s)",
                               m->path, key, (int)(st.len > 64 ? 64 : st.len), st.data, a->name,
                               a->longrope ? ", 'longrope', 'yarn'"
                               : yarn_ok   ? ", 'yarn'"
                                           : "");
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
    /* deepseek2: the converter stores 0.1 × mscale_all_dim, llama.cpp divides the 0.1 out */
    float log_mul = 0;
    if (a->mla && get_float(m, "rope.scaling.yarn_log_multiplier", 0, &log_mul)) return TUTTI_ERR;
    log_mul /= 0.1f;
    const float ln_inv_scale = logf(1.0f / hp->rope_scale);
    if (yarn && hp->rope_scale != 1.0f) {
        /* ggml's YaRN multiplies the magnitude by 1 + 0.1 ln(factor) on top of
         * the attn_factor it is given; the position scale moves into
         * per-frequency blends (session.c) */
        hp->yarn_scale = hp->rope_scale;
        hp->rope_attn_factor *= yarn_attn_factor(m, 1.0f / hp->rope_scale, log_mul);
        hp->kq_mscale = hp->rope_attn_factor * (1.0f + 0.1f * ln_inv_scale);
        hp->rope_attn_factor = hp->kq_mscale;
        hp->rope_scale = 1.0f;
    } else {
        hp->kq_mscale = hp->rope_attn_factor * (1.0f + 0.1f * ln_inv_scale);
    }
    /* deepseek2's graph: q·k × mscale², mscale = its magnitude × (1 + 0.1 log_mul ln(1 / freq_scale)) */
    hp->kq_mscale *= 1.0f + 0.1f * log_mul * ln_inv_scale;
    if (get_dim(m, "rope.scaling.original_context_length", false, hp->n_ctx_train, &hp->n_ctx_orig)) return TUTTI_ERR;
    return TUTTI_OK;
}

/* attention.sliding_window(_pattern). */
static int load_swa(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    hp->n_swa = 0;
    hp->swa_pattern = a->swa_pattern;
    if (a->swa_pattern == 0) return TUTTI_OK;
    /* 0: no window (gemma3; gemma2 would mask every key, llama.cpp computes NaN) */
    char key[256];
    snprintf(key, sizeof key, "%s.attention.sliding_window", a->name);
    uint32_t p;
    if (gguf_find_key(m->gguf, key) >= 0 && gguf_get_u32(m->gguf, key, &p) && p == 0 && a->swa_default == 0)
        hp->n_swa = 0;
    else if (get_dim(m, "attention.sliding_window", a->swa_required, a->swa_default, &hp->n_swa)) return TUTTI_ERR;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a->name);
    if (gguf_find_key(m->gguf, key) >= 0) {
        if (!gguf_get_u32(m->gguf, key, &p) || p > MAX_LAYERS)
            return tutti_set_error("%s: metadata key %s must be one unsigned integer up to %d (per-layer "
                                   "arrays are not supported)",
                                   m->path, key, MAX_LAYERS);
        hp->swa_pattern = (int32_t)p;
    }
    return TUTTI_OK;
}

/* expert_group_count / expert_group_used_count, checked as llama.cpp's
 * loader asserts them (groups of at least two: each group's score is the
 * sum of its two best). */
static int load_expert_groups(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    if (get_u32_in(m, "expert_group_count", false, 1, 0, MAX_EXPERTS, &hp->n_expert_groups) ||
        get_u32_in(m, "expert_group_used_count", false, 0, 0, MAX_EXPERTS, &hp->n_group_used))
        return TUTTI_ERR;
    if (hp->n_expert_groups <= 1) {
        hp->n_expert_groups = 1;
        hp->n_group_used = 1;
        return TUTTI_OK;
    }
    const int32_t per = hp->n_expert / hp->n_expert_groups;
    if (hp->n_expert % hp->n_expert_groups || per < 2 || hp->n_group_used < 1 ||
        hp->n_group_used >= hp->n_expert_groups || (int64_t)hp->n_group_used * per < hp->n_expert_used)
        return tutti_set_error("%s: expert_group_count %d / expert_group_used_count %d do not fit expert_count %d "
                               "and expert_used_count %d (groups of 2 or more experts, fewer groups used than "
                               "there are, enough experts in them)",
                               m->path, hp->n_expert_groups, hp->n_group_used, hp->n_expert, hp->n_expert_used);
    return TUTTI_OK;
}

/* The mixture-of-experts keys (llama.cpp's build_moe_ffn parameters). */
static int load_moe(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = hp->n_ff_shexp = hp->n_layer_dense_lead = 0;
    hp->n_expert_groups = hp->n_group_used = 1;
    if (get_u32_in(m, "expert_count", false, 0, 0, MAX_EXPERTS, &hp->n_expert)) return TUTTI_ERR;
    if (a->moe == TUTTI_MOE_NONE && hp->n_expert > 0)
        return tutti_set_error("%s: %s.expert_count is set: mixture-of-experts models are not supported for "
                               "architecture %s",
                               m->path, a->name, a->name);
    if (a->moe == TUTTI_MOE_REQUIRED && hp->n_expert == 0)
        return tutti_set_error("%s: %s.expert_count must be set (1..%d) for architecture %s", m->path, a->name,
                               MAX_EXPERTS, a->name);
    if (hp->n_expert == 0) return TUTTI_OK;
    if (get_u32_in(m, "expert_used_count", true, 0, 1, (uint32_t)hp->n_expert, &hp->n_expert_used)) return TUTTI_ERR;
    switch (a->exp_width) {
    case TUTTI_EXPW_N_FF: hp->n_ff_exp = hp->n_ff; break;
    case TUTTI_EXPW_KEY_OR_DIV:
        if (get_dim(m, "expert_feed_forward_length", false, hp->n_ff / hp->n_expert_used, &hp->n_ff_exp))
            return TUTTI_ERR;
        if (hp->n_ff_exp == 0)
            return tutti_set_error("%s: feed_forward_length / expert_used_count is 0 and there is no "
                                   "expert_feed_forward_length",
                                   m->path);
        break;
    case TUTTI_EXPW_KEY:
        if (get_dim(m, "expert_feed_forward_length", true, 0, &hp->n_ff_exp)) return TUTTI_ERR;
        break;
    }
    int32_t n_shared = 0;
    switch (a->shexp) {
    case TUTTI_SHEXP_NONE: break;
    case TUTTI_SHEXP_GATED:
        if (get_dim(m, "expert_shared_feed_forward_length", false, hp->n_ff, &hp->n_ff_shexp)) return TUTTI_ERR;
        break;
    case TUTTI_SHEXP_LEN:
        if (get_u32_in(m, "expert_shared_feed_forward_length", false, 0, 0, MAX_DIM, &hp->n_ff_shexp)) return TUTTI_ERR;
        break;
    case TUTTI_SHEXP_COUNT:
        if (get_u32_in(m, "expert_shared_count", true, 0, 0, 64, &n_shared)) return TUTTI_ERR;
        hp->n_ff_shexp = hp->n_ff_exp * n_shared;
        if (hp->n_ff_shexp > MAX_DIM) return tutti_set_error("%s: expert_shared_count is too large", m->path);
        break;
    }
    if (a->dense_lead &&
        get_u32_in(m, "leading_dense_block_count", false, 0, 0, (uint32_t)hp->n_layer, &hp->n_layer_dense_lead))
        return TUTTI_ERR;
    int32_t g = 0;
    if (a->gating_key && get_u32_in(m, "expert_gating_func", false, 0, 0, 2, &g)) return TUTTI_ERR;
    hp->gating = g ? (tutti_gating)g : a->gating; /* 1 softmax, 2 sigmoid; 0 (none): the default */
    if ((a->moe_norm_key && get_bool(m, "expert_weights_norm", a->moe_norm_w, &hp->expert_norm_w)) ||
        get_float(m, "expert_weights_scale", 0.0f, &hp->expert_weights_scale))
        return TUTTI_ERR;
    if (!a->moe_norm_key) hp->expert_norm_w = a->moe_norm_w;
    return load_expert_groups(m);
}

/* Multi-head latent attention (deepseek2): the cache is one KV head of
 * kv_lora_rank + rope dims (key_length), values its first kv_lora_rank
 * (value_length); the query heads are key_length_mla wide before they are
 * absorbed. */
static int load_mla(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    hp->n_lora_q = hp->n_lora_kv = hp->head_dim_k_mla = hp->head_dim_v_mla = 0;
    if (!m->arch->mla) return TUTTI_OK;
    if (!has_key(m, "attention.key_length_mla") || !has_key(m, "attention.value_length_mla"))
        return tutti_set_error("%s: no attention.key_length_mla / value_length_mla: a DeepSeek file of the "
                               "old layout (attn_kv_b, full K/V cache), which tutti does not run; convert it "
                               "again with a current llama.cpp (attn_k_b / attn_v_b)",
                               m->path);
    if (get_u32_in(m, "attention.q_lora_rank", false, 0, 0, MAX_DIM, &hp->n_lora_q) ||
        get_dim(m, "attention.kv_lora_rank", true, 0, &hp->n_lora_kv) ||
        get_dim(m, "attention.key_length_mla", true, 0, &hp->head_dim_k_mla) ||
        get_dim(m, "attention.value_length_mla", true, 0, &hp->head_dim_v_mla))
        return TUTTI_ERR;
    if (hp->n_head_kv != 1 || hp->head_dim_k != hp->n_lora_kv + hp->n_rot || hp->head_dim_v != hp->n_lora_kv ||
        hp->head_dim_k_mla <= hp->n_rot)
        return tutti_set_error("%s: latent attention needs head_count_kv 1, key_length = kv_lora_rank + "
                               "rope.dimension_count, value_length = kv_lora_rank and key_length_mla > "
                               "rope.dimension_count (got %d, %d, %d, %d; kv_lora_rank %d, rope %d)",
                               m->path, hp->n_head_kv, hp->head_dim_k, hp->head_dim_v, hp->head_dim_k_mla,
                               hp->n_lora_kv, hp->n_rot);
    if ((int64_t)hp->n_head * hp->head_dim_k_mla > MAX_DIM || (int64_t)hp->n_head * hp->head_dim_v_mla > MAX_DIM)
        return tutti_set_error("%s: head_count × key/value_length_mla is too large", m->path);
    float temp = 0;
    if (get_float(m, "attention.temperature_scale", 0, &temp)) return TUTTI_ERR;
    if (temp != 0)
        return tutti_set_error("%s: attention.temperature_scale (attention temperature tuning) is not supported",
                               m->path);
    return TUTTI_OK;
}

/* Scales of the embeddings, residual branches, attention and logits
 * (granitemoe's keys; Gemma's sqrt(n_embd)), and the attention scale. */
static int load_scales(tutti_model *m) {
    tutti_hparams *hp = &m->hp;
    const tutti_arch *a = m->arch;
    hp->embd_scale = a->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->residual_scale = hp->logit_scale = 1.0f;
    /* Scaled dot-product attention: 1/sqrt(d_k), but 1/sqrt(n_embd/n_head)
     * for the Gemma 27B models (told by their layer count, as llama.cpp does);
     * latent attention: the query head before absorption, times YaRN's mscale². */
    const bool scale_embd = a->n_layer_scale_embd > 0 && hp->n_layer == a->n_layer_scale_embd;
    const int32_t d = a->mla ? hp->head_dim_k_mla : scale_embd ? hp->n_embd / hp->n_head : hp->head_dim_k;
    hp->attn_scale = 1.0f / sqrtf((float)d);
    if (a->mla) hp->attn_scale = hp->kq_mscale * hp->kq_mscale / sqrtf((float)d);
    if (!a->granite_scales) return TUTTI_OK;
    if (!has_key(m, "logit_scale"))
        return tutti_set_error("%s: metadata key %s.logit_scale is missing (required for architecture %s)", m->path,
                               a->name, a->name);
    float embd = 0, resid = 0, attn = 0, logit = 0;
    bool rope_finetuned = true;
    if (get_float(m, "embedding_scale", 0, &embd) || get_float(m, "residual_scale", 0, &resid) ||
        get_float(m, "attention.scale", 0, &attn) || get_float(m, "logit_scale", 0, &logit) ||
        get_bool(m, "rope.scaling.finetuned", true, &rope_finetuned))
        return TUTTI_ERR;
    if (!rope_finetuned)
        return tutti_set_error("%s: rope.scaling.finetuned = false (no rotary embedding) is not supported", m->path);
    if (logit == 0) return tutti_set_error("%s: %s.logit_scale must not be 0", m->path, a->name);
    /* llama.cpp: 0 (absent) means no scale; logits × 1/logit_scale */
    if (embd != 0) hp->embd_scale = embd;
    if (resid != 0) hp->residual_scale = resid;
    if (attn != 0) hp->attn_scale = attn;
    hp->logit_scale = 1.0f / logit;
    return TUTTI_OK;
}

int tutti_load_hparams(tutti_model *m) {
    if (load_dims(m) || load_moe(m) || load_rope(m) || load_swa(m) || load_mla(m) || load_scales(m)) return TUTTI_ERR;
    return TUTTI_OK;
}
