/* GGUF tensor names -> Hugging Face names.
 *
 * mergekit's parameter filters are substrings of the Hugging Face tensor
 * name (`self_attn`, `mlp`, `input_layernorm`, `q_proj`, `embed_tokens`,
 * `lm_head` ...).  GGUF files carry llama.cpp's names (convert_hf_to_gguf's
 * tensor map, read backwards): blk.N.attn_q.weight is
 * model.layers.N.self_attn.q_proj.weight.  The norms around the feed-forward
 * block differ: llama/qwen/phi3 call the pre-FFN norm post_attention_layernorm,
 * gemma2/3 have four norms per layer. */
#include <stdio.h>
#include <string.h>

#include "merge/merge.h"

static const struct {
    const char *gguf, *hf;
} k_layer[] = {
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_qkv", "self_attn.qkv_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_norm", "input_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_up", "mlp.gate_up_proj"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

void merge_hf_name(const char *arch, const char *name, char *buf, size_t size) {
    bool gemma = arch && !strncmp(arch, "gemma", 5);
    int layer;
    int off = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &off) == 1 && off > 0) {
        const char *kind = name + off;
        const char *dot = strchr(kind, '.');
        size_t kl = dot ? (size_t)(dot - kind) : strlen(kind);
        const char *rest = dot ? dot : "";
        const char *hf = NULL;
        if (kl == 8 && !strncmp(kind, "ffn_norm", 8))
            hf = gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm";
        for (size_t i = 0; !hf && i < sizeof k_layer / sizeof *k_layer; i++)
            if (strlen(k_layer[i].gguf) == kl && !strncmp(kind, k_layer[i].gguf, kl)) hf = k_layer[i].hf;
        if (hf) snprintf(buf, size, "model.layers.%d.%s%s", layer, hf, rest);
        else snprintf(buf, size, "model.layers.%d.%s", layer, kind);
        return;
    }
    static const struct {
        const char *gguf, *hf;
    } top[] = {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++) {
        size_t l = strlen(top[i].gguf);
        if (!strncmp(name, top[i].gguf, l) && (name[l] == '.' || !name[l])) {
            snprintf(buf, size, "%s%s", top[i].hf, name + l);
            return;
        }
    }
    snprintf(buf, size, "%s", name);
}
