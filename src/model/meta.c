/* Read access to a loaded model's GGUF metadata for front ends (chat
 * templates, names) without exposing the gguf layer. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "util/error.h"

char *tutti_model_meta_str(const tutti_model *model, const char *key) {
    if (!model || !key) return NULL;
    gguf_str s;
    int64_t i = gguf_find_key(model->gguf, key);
    if (i < 0 || gguf_kv_type(model->gguf, i) != GGUF_TYPE_STRING) return NULL;
    s = gguf_kv_str(model->gguf, i, 0);
    char *out = malloc(s.len + 1);
    if (!out) {
        tutti_set_error("%s: out of memory copying metadata '%s'", gguf_path(model->gguf), key);
        return NULL;
    }
    memcpy(out, s.data, s.len);
    out[s.len] = 0;
    return out;
}
