/* The architecture table: everything that differs between the supported
 * decoder-only transformers, as data.  Values follow the models' published
 * designs (and llama.cpp's GGUF conventions for tensor names). */
#include <string.h>

#include "model/model.h"

static const tutti_arch g_archs[] = {
    /* Llama 2/3.x, Mistral, TinyLlama, SmolLM: GPT-J-style rope, SwiGLU. */
    {.name = "llama", .rope_mode = TUTTI_ROPE_NORMAL, .act = TUTTI_ACT_SILU, .rot_full = true},
    /* Qwen2 / Qwen2.5: NeoX rope, biases on q/k/v (bound when present). */
    {.name = "qwen2", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_SILU, .rot_full = true},
    /* Qwen3: per-head RMSNorm of q and k before rope; head_dim from key_length. */
    {.name = "qwen3", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_SILU, .qk_norm = true, .rot_full = true},
    /* Gemma 2: embeddings × sqrt(n_embd), GeGLU, norms after both branches,
     * soft-capped attention and final logits, sliding window on even layers. */
    {.name = "gemma2", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_GELU_TANH, .post_norms = true,
     .embd_scale = true, .swa_pattern = 2, .swa_default = 4096, .softcap = true, .n_layer_scale_embd = 46,
     .no_output = true,
     .attn_scale_on_q = true},
    /* Gemma 3 (text): as Gemma 2 without soft-capping, plus q/k norms; five
     * local layers (own rope base) per global one; no window when
     * attention.sliding_window is absent. */
    {.name = "gemma3", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_GELU_TANH, .qk_norm = true,
     .post_norms = true, .embd_scale = true, .swa_pattern = 6, .swa_local_rope_base = true,
     .final_softcap_key = true, .n_layer_scale_embd = 62, .attn_scale_on_q = true},
    /* Phi-3: fused qkv and fused gate/up projections; attention.sliding_window
     * is not applied (llama.cpp disables Phi SWA); LongRoPE factors. */
    {.name = "phi3", .rope_mode = TUTTI_ROPE_NEOX, .act = TUTTI_ACT_SILU, .fused_qkv = true,
     .fused_gate_up = true, .longrope = true, .attn_scale_on_q = true},
};

const tutti_arch *tutti_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (strlen(g_archs[i].name) == len && memcmp(g_archs[i].name, name, len) == 0) return &g_archs[i];
    return NULL;
}

const char *tutti_arch_list(void) { return "llama, qwen2, qwen3, gemma2, gemma3, phi3"; }
