/* Vocabulary identity of members: a hash of exactly the tokenizer metadata
 * that decides the text <-> ids mapping.  TOKEN alignment needs equal
 * hashes (member/member.h); any other pair of members is byte-aligned. */
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"
#include "member/member.h"
#include "member/remote.h"
#include "util/error.h"
#include "util/hash.h"

int fusion_vocab_hash_file(const char *path, uint64_t *out) {
    gguf_file *f = gguf_open(path);
    if (!f) return TUTTI_ERR;
    /* Order-independent combination of one hash per tokenizer entry:
     * two files with the same tokens, merges, scores, types and special ids
     * are the same vocabulary whatever their names or key order. */
    uint64_t acc = 0;
    int64_t n_kv = gguf_n_kv(f), n_used = 0;
    for (int64_t i = 0; i < n_kv; i++) {
        gguf_str key = gguf_kv_key(f, i);
        /* only what decides the text <-> ids mapping (padding or separator
         * ids, chat templates and names do not) */
        static const char *const keys[] = {"tokenizer.ggml.model",
                                           "tokenizer.ggml.pre",
                                           "tokenizer.ggml.tokens",
                                           "tokenizer.ggml.merges",
                                           "tokenizer.ggml.scores",
                                           "tokenizer.ggml.token_type",
                                           "tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.unknown_token_id",
                                           "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.add_bos_token",
                                           "tokenizer.ggml.add_eos_token",
                                           "tokenizer.ggml.add_space_prefix",
                                           "tokenizer.ggml.remove_extra_whitespaces"};
        bool wanted = false;
        for (size_t k = 0; k < sizeof keys / sizeof *keys && !wanted; k++) wanted = gguf_str_eq(key, keys[k]);
        if (!wanted) continue;
        uint64_t h = tutti_fnv1a(TUTTI_FNV_OFFSET, key.data, key.len);
        gguf_type t = gguf_kv_type(f, i);
        h = tutti_fnv1a(h, &t, sizeof t);
        if (t == GGUF_TYPE_STRING) {
            gguf_str s = gguf_kv_str(f, i, 0);
            h = tutti_fnv1a(h, s.data, s.len);
        } else if (t == GGUF_TYPE_ARRAY) {
            gguf_type et = gguf_kv_arr_type(f, i);
            uint64_t n = gguf_kv_arr_n(f, i);
            h = tutti_fnv1a(h, &et, sizeof et);
            h = tutti_fnv1a(h, &n, sizeof n);
            if (et == GGUF_TYPE_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    gguf_str s = gguf_kv_str(f, i, j);
                    h = tutti_fnv1a(h, &s.len, sizeof s.len);
                    h = tutti_fnv1a(h, s.data, s.len);
                }
            } else if (gguf_type_size(et)) {
                h = tutti_fnv1a(h, gguf_kv_data(f, i), (size_t)n * gguf_type_size(et));
            }
        } else if (gguf_type_size(t)) {
            h = tutti_fnv1a(h, gguf_kv_data(f, i), gguf_type_size(t));
        }
        acc += h * 0x9e3779b97f4a7c15ull + (h >> 29);
        n_used++;
    }
    gguf_close(f);
    if (!n_used) return tutti_set_error("model %s: no tokenizer.ggml.* metadata (no vocabulary)", path);
    *out = acc ^ (uint64_t)n_used;
    return 0;
}

int fusion_member_vocab_hash(const char *path, uint64_t *out) {
    if (!fusion_is_remote_spec(path)) return fusion_vocab_hash_file(path, out);
    /* the identity is only known once the server has been asked */
    return fusion_member_remote_vocab_hash(path, out);
}
