/* The architecture table: everything that differs between the supported
 * decoder-only transformers, as data.  Values follow the models' published
 * designs (and llama.cpp's GGUF conventions for tensor names). */
#include <string.h>

#include "model/model.h"

static const tutti_arch g_archs[] = {
    /* Llama 2/3.x, Mistral, TinyLlama, SmolLM: GPT-J-style rope, SwiGLU;
     * Mixtral: the same with routed experts as wide as feed_forward_length,
     * softmax router, top-k weights renormalized. */
    {.name = "llama",
     .rope_mode = TUTTI_ROPE_NORMAL,
     .act = TUTTI_ACT_SILU,
     .rot_full = true,
     .moe = TUTTI_MOE_OPTIONAL,
     .gating = TUTTI_GATING_SOFTMAX,
     .moe_norm_w = true,
     .exp_width = TUTTI_EXPW_N_FF,
     .attn_out_bias = true},
    /* Qwen2 / Qwen2.5: NeoX rope, biases on q/k/v (bound when present). */
    {.name = "qwen2", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_SILU, .rot_full = true},
    /* Qwen3: per-head RMSNorm of q and k before rope; head_dim from key_length. */
    {.name = "qwen3", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_SILU, .qk_norm = true, .rot_full = true},
    /* Gemma 2: embeddings × sqrt(n_embd), GeGLU, norms after both branches,
     * soft-capped attention and final logits, sliding window on even layers. */
    {.name = "gemma2",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_GELU_TANH,
     .post_norms = true,
     .embd_scale = true,
     .swa_pattern = 2,
     .swa_default = 4096,
     .softcap = true,
     .n_layer_scale_embd = 46,
     .no_output = true,
     .attn_scale_on_q = true},
    /* Gemma 3 (text): as Gemma 2 without soft-capping, plus q/k norms; five
     * local layers (own rope base) per global one; no window when
     * attention.sliding_window is absent. */
    {.name = "gemma3",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_GELU_TANH,
     .qk_norm = true,
     .post_norms = true,
     .embd_scale = true,
     .swa_pattern = 6,
     .swa_local_rope_base = true,
     .final_softcap_key = true,
     .n_layer_scale_embd = 62,
     .attn_scale_on_q = true},
    /* Phi-3: fused qkv and fused gate/up projections; attention.sliding_window
     * is not applied (llama.cpp disables Phi SWA); LongRoPE factors. */
    {.name = "phi3",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .fused_qkv = true,
     .fused_gate_up = true,
     .longrope = true,
     .attn_scale_on_q = true},

    /* ---- mixtures of experts (llama.cpp's build_moe_ffn) ---- */
    /* Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): qwen3's attention, softmax
     * router, top-k weights renormalized, no shared expert. */
    {.name = "qwen3moe",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .qk_norm = true,
     .rot_full = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX,
     .moe_norm_w = true,
     .exp_width = TUTTI_EXPW_KEY_OR_DIV},
    /* Qwen1.5/2-MoE: q/k/v biases, softmax router without renormalization,
     * one shared expert scaled by sigmoid(ffn_gate_inp_shexp . x). */
    {.name = "qwen2moe",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .rot_full = true,
     .q_is_n_embd = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX,
     .exp_width = TUTTI_EXPW_KEY_OR_DIV,
     .shexp = TUTTI_SHEXP_GATED},
    /* OLMoE: q/k RMS norms over the whole projection, softmax router
     * without renormalization, experts as wide as feed_forward_length. */
    {.name = "olmoe",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .qk_norm_full = true,
     .rot_full = true,
     .q_is_n_embd = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX,
     .exp_width = TUTTI_EXPW_N_FF},
    /* Granite-MoE: llama's layout scaled (embeddings, both residual branches,
     * q·k, logits), softmax router renormalized, an optional shared expert. */
    {.name = "granitemoe",
     .rope_mode = TUTTI_ROPE_NORMAL,
     .act = TUTTI_ACT_SILU,
     .rot_full = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX,
     .moe_norm_w = true,
     .exp_width = TUTTI_EXPW_N_FF,
     .shexp = TUTTI_SHEXP_LEN,
     .granite_scales = true,
     .attn_out_bias = true},
    /* GLM-4.5 / 4.6 / Air: q/k/v biases, optional q/k norms, rotary on part
     * of the head, leading dense layers, sigmoid router with a selection
     * bias, shared experts; the pre-FFN norm is called post_attention_norm. */
    {.name = "glm4moe",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .qk_norm = true,
     .qk_norm_optional = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SIGMOID,
     .gating_key = true,
     .moe_norm_key = true,
     .exp_width = TUTTI_EXPW_KEY,
     .shexp = TUTTI_SHEXP_COUNT,
     .dense_lead = true,
     .exp_probs_b = 2,
     .ffn_norm_name = "post_attention_norm"},
    /* gpt-oss: q/k/v/o biases, attention sinks, sliding window on even
     * layers, YaRN everywhere; the router's logits select and a softmax
     * over the selected ones weighs; biased experts with the clamped SwiGLU. */
    {.name = "gpt-oss",
     .rope_mode = TUTTI_ROPE_NEOX,
     .act = TUTTI_ACT_SILU,
     .rot_full = true,
     .swa_pattern = 2,
     .swa_required = true,
     .yarn_with_swa = true,
     .attn_sinks = true,
     .attn_out_bias = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX_WEIGHT,
     .exp_width = TUTTI_EXPW_KEY,
     .moe_oai = true,
     .ffn_norm_name = "post_attention_norm"},
    /* DeepSeek V2 / V3 / R1, Kimi K2: multi-head latent attention (a
     * compressed KV cache), q LoRA or plain q, leading dense layers, shared
     * experts; softmax or sigmoid router (+ selection bias, expert groups). */
    {.name = "deepseek2",
     .rope_mode = TUTTI_ROPE_NORMAL,
     .act = TUTTI_ACT_SILU,
     .mla = true,
     .moe = TUTTI_MOE_REQUIRED,
     .gating = TUTTI_GATING_SOFTMAX,
     .gating_key = true,
     .moe_norm_key = true,
     .exp_width = TUTTI_EXPW_KEY,
     .shexp = TUTTI_SHEXP_COUNT,
     .dense_lead = true,
     .exp_probs_b = 1},
};

const tutti_arch *tutti_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (strlen(g_archs[i].name) == len && memcmp(g_archs[i].name, name, len) == 0) return &g_archs[i];
    return NULL;
}

const char *tutti_arch_list(void) {
    return "llama (also Mixtral), qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, qwen2moe, olmoe, granitemoe, "
           "glm4moe, gpt-oss, deepseek2";
}
