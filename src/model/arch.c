/* The architecture table: everything that differs between the supported
 * decoder-only transformers, as data.  Values follow the models' published
 * designs (and llama.cpp's GGUF conventions for tensor names). */
#include <string.h>

#include "model/model.h"

static const tutti_arch g_archs[] = {
    /* Llama 2/3.x, Mistral, TinyLlama, SmolLM: GPT-J-style rope, SwiGLU. */
    {.name = "llama", .rope_mode = TUTTI_ROPE_NORMAL, .act = TUTTI_ACT_SILU},
};

const tutti_arch *tutti_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (strlen(g_archs[i].name) == len && memcmp(g_archs[i].name, name, len) == 0) return &g_archs[i];
    return NULL;
}

const char *tutti_arch_list(void) { return "llama"; }
