/* Fuzz harness of the model loader (see fuzz/README.md for the pattern).
 *
 * Loads the input as a model with tutti_model_load_buffer (GGUF reader,
 * hyper-parameters, tensor binding, tokenizer).  When it loads, checks the
 * loader's promises (n_vocab = vocabulary size, a positive context), then
 * runs three tokens through a small session (one batch of two, one single),
 * checks that an out-of-range id is refused without advancing the session,
 * and tokenizes a short text: every id must be a valid row.  Seeds:
 * NAME.in of fuzz/corpus/model.tar, written by tests/test_model_hostile.c (tiny
 * self-made models, valid and hostile), moe-*.in (three of the mixture-of-
 * experts files of tests/data/moe: a gated shared expert; gpt-oss's sinks,
 * biases and window; latent attention with expert groups), plus minimized
 * coverage inputs of a 7-minute run (3.66M execs, no findings) named by
 * their SHA-1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

/* Bigger models than this are loaded (the loader is what is fuzzed) but not
 * evaluated: a forward pass over megabytes of weights per input would slow
 * the fuzzer to a crawl without covering anything new. */
#define MAX_EVAL_PARAMS (1 << 20)

int tutti_fuzz_model_one(const uint8_t *data, size_t size) {
    tutti_model *m = tutti_model_load_buffer(data, size, "fuzz.gguf", NULL);
    if (!m) return 0;
    const int32_t n_vocab = tutti_model_n_vocab(m);
    CHECK(n_vocab > 0);
    CHECK(tutti_vocab_n_tokens(tutti_model_vocab(m)) == n_vocab);
    CHECK(tutti_model_n_ctx_train(m) > 0);

    const tutti_hparams *hp = &m->hp;
    int64_t per_layer = (int64_t)hp->n_embd * (hp->n_head * hp->head_dim_k * 2 + hp->n_head_kv * hp->head_dim_k +
                                               hp->n_head_kv * hp->head_dim_v + 3 * (int64_t)hp->n_ff);
    per_layer += (int64_t)hp->n_expert * 3 * hp->n_embd * hp->n_ff_exp + 3 * (int64_t)hp->n_embd * hp->n_ff_shexp;
    int64_t params = per_layer * hp->n_layer + 2 * (int64_t)n_vocab * hp->n_embd;
    if (params <= MAX_EVAL_PARAMS) {
        tutti_session_params sp = tutti_session_default_params();
        sp.n_ctx = 8;
        sp.n_threads = 1;
        tutti_session *s = tutti_session_new(m, &sp);
        if (s) {
            int32_t ids[2] = {0, n_vocab - 1};
            float *all = malloc(sizeof(float) * 2 * (size_t)n_vocab);
            if (all && tutti_session_eval(s, ids, 2, all) == TUTTI_OK) {
                CHECK(tutti_session_n_past(s) == 2);
                int32_t one = n_vocab / 2;
                CHECK(tutti_session_eval(s, &one, 1, NULL) == TUTTI_OK);
                const float *lg = tutti_session_logits(s);
                CHECK(lg != NULL);
                volatile float sink = 0;
                for (int32_t i = 0; i < n_vocab; i++) sink += lg[i] + all[i] + all[n_vocab + i];
                (void)sink;
                int32_t bad[2] = {0, n_vocab};
                CHECK(tutti_session_eval(s, bad, 2, NULL) != TUTTI_OK);
                CHECK(tutti_session_n_past(s) == 3);
            }
            free(all);
            tutti_session_free(s);
        }
    }

    /* the tokenizer of a loaded model only produces valid rows */
    int32_t toks[64];
    int32_t n = tutti_tokenize(tutti_model_vocab(m), "Once upon a time, \xff\xfe", 20, true, false, toks, 64);
    for (int32_t i = 0; i < n && i < 64; i++) CHECK(toks[i] >= 0 && toks[i] < n_vocab);
    tutti_model_free(m);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_model_one(data, size);
    return 0;
}
#endif
