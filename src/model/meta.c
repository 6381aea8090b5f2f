/* Read access to a loaded model's GGUF metadata for front ends (chat
 * templates, names) without exposing the gguf layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/error.h"

static char *meta_str(const gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    if (i < 0 || gguf_kv_type(f, i) != GGUF_TYPE_STRING) return NULL;
    gguf_str s = gguf_kv_str(f, i, 0);
    char *out = malloc(s.len + 1);
    if (!out) {
        tutti_set_error("%s: out of memory copying metadata '%s'", gguf_path(f), key);
        return NULL;
    }
    memcpy(out, s.data, s.len);
    out[s.len] = 0;
    return out;
}

char *tutti_model_meta_str(const tutti_model *model, const char *key) {
    if (!model || !key) return NULL;
    return meta_str(model->gguf, key);
}

char *tutti_file_meta_str(const char *path, const char *key) {
    if (!path || !key) return NULL;
    char *local = tutti_hub_resolve(path); /* a model spec (src/hub): its cached file */
    gguf_file *f = local ? gguf_open(local) : NULL;
    free(local);
    if (!f) return NULL;
    char *out = meta_str(f, key);
    gguf_close(f);
    return out;
}

int32_t tutti_model_n_embd(const tutti_model *model) { return model ? model->hp.n_embd : 0; }

int tutti_model_pooling(const tutti_model *model) {
    if (!model) return -1;
    char key[256];
    snprintf(key, sizeof key, "%s.pooling_type", model->arch->name);
    uint32_t v = 0;
    if (!gguf_get_u32(model->gguf, key, &v)) return -1;
    return v <= TUTTI_POOL_RANK ? (int)v : -1;
}
