/* Model work of byte alignment (issue 12): lazy evaluation of hypotheses
 * below the pruning share, sessions that take a sibling's prefix by copy,
 * and speculative evaluation ahead.  The references: the single-model API
 * (tutti_session_eval of each whole sequence) for logits, and the exact
 * byte marginal (pruning share 1e-9, which test_byte_marginal_bruteforce
 * checks against an enumeration of every tokenization) for the pruned ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"
#include "fusion/fusion.h"

static const char *M_STORIES = "models/stories260K.gguf";
static const char *M_656K = "models/TinyStories-656K-Q8_0.gguf";

static const char *TEXT = "Once upon a time, there was a little girl named Lily.";

/* Siblings [p, a], [p, b], [p, c] after p: every answer equals the model's
 * own logits of the whole sequence, and the prefix runs once (the sessions
 * that answer b and c copy p's cache rows instead of running p again). */
static void test_sibling_prefix_copy(void **state) {
    (void)state;
    const char *path = shared_path(M_STORIES);
    fusion_member *fm = fusion_member_local_new(path, 6, 0, 1);
    assert_non_null(fm);
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *model = tutti_model_load(path, &mp);
    assert_non_null(model);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    tutti_session *ref = tutti_session_new(model, &sp);
    assert_non_null(ref);
    int32_t V = fm->n_vocab;
    int32_t p[12];
    int32_t np = tutti_tokenize(fm->vocab, "Once upon a time there", 22, true, false, p, 12);
    assert_true(np > 3 && np < 10);
    const float *row = fusion_member_logits_view(fm, p, np, NULL);
    assert_non_null(row);
    int64_t tok0 = fm->n_forward_tokens;
    assert_int_equal(tok0, np);
    int32_t seq[3][12];
    const int32_t *ids[3];
    int32_t n[3];
    const int32_t extra[3] = {30, 31, 77};
    for (int k = 0; k < 3; k++) {
        memcpy(seq[k], p, sizeof(int32_t) * (size_t)np);
        seq[k][np] = extra[k];
        ids[k] = seq[k], n[k] = np + 1;
    }
    const float *rows[3];
    assert_int_equal(fm->vt->logits_batch(fm, 3, ids, n, rows), 3);
    assert_int_equal(fm->n_forward_tokens - tok0, 3); /* one token each, no replay of p */
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tutti_session_rewind(ref, 0), 0);
        assert_int_equal(tutti_session_eval(ref, ids[k], n[k], NULL), 0);
        const float *z = tutti_session_logits(ref);
        for (int32_t x = 0; x < V; x++) worst = fmax(worst, fabs((double)z[x] - (double)rows[k][x]));
    }
    printf("siblings after a %d-token prefix: max |logit - own| = %.3g\n", np, worst);
    assert_true(worst < 1e-4);
    tutti_session_free(ref);
    tutti_model_free(model);
    fm->vt->free(fm);
}

typedef struct run {
    fusion_member *m;
    fusion_bytes *st;
} run;

static run run_new(const char *path, const fusion_trie *tr, double prune, int32_t max_hyps, bool lazy) {
    run r;
    r.m = fusion_member_local_new(path, max_hyps + 8, 0, 1);
    assert_non_null(r.m);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = prune, .max_hyps = max_hyps, .lazy = lazy};
    r.st = fusion_bytes_new(r.m, tr, &bp);
    assert_non_null(r.st);
    /* TinyStories-656K has no BOS: the first word is the given context */
    assert_int_equal(fusion_bytes_start(r.st, TEXT, 4), 0);
    return r;
}

/* Lazy evaluation at the default pruning (1e-4, 8 hypotheses): next-byte
 * distributions stay within the pruning's own distance of the exact ones,
 * with fewer forward passes than evaluating every hypothesis. */
static void check_lazy(const char *rel) {
    const char *path = shared_path(rel);
    fusion_member *tm = fusion_member_local_new(path, 1, 0, 1);
    assert_non_null(tm);
    fusion_trie *tr = fusion_trie_build(tm->vocab);
    assert_non_null(tr);
    /* the reference: pruning share 1e-9 (test_byte_marginal_bruteforce: within 1e-6 of every tokenization
     * enumerated) */
    run ex = run_new(path, tr, 1e-9, 1024, false);
    run eager = run_new(path, tr, 1e-4, 8, false);
    run lazy = run_new(path, tr, 1e-4, 8, true);
    double worst_lazy = 0, worst_eager = 0;
    size_t len = strlen(TEXT);
    for (size_t i = 4; i <= len; i++) {
        double pe[257], pp[257], pl[257], dl = 0, dp = 0;
        assert_int_equal(fusion_bytes_next(ex.st, pe), 0);
        assert_int_equal(fusion_bytes_next(eager.st, pp), 0);
        assert_int_equal(fusion_bytes_next(lazy.st, pl), 0);
        for (int k = 0; k < 257; k++) dl += fabs(pl[k] - pe[k]), dp += fabs(pp[k] - pe[k]);
        worst_lazy = fmax(worst_lazy, dl), worst_eager = fmax(worst_eager, dp);
        if (i == len) break;
        uint8_t b = (uint8_t)TEXT[i];
        assert_true(pl[b] > 0); /* the text's own bytes stay possible */
        assert_int_equal(fusion_bytes_commit(ex.st, b), 0);
        assert_int_equal(fusion_bytes_commit(eager.st, b), 0);
        assert_int_equal(fusion_bytes_commit(lazy.st, b), 0);
    }
    printf("%s: %zu bytes: max L1 to exact: eager %.3g, lazy %.3g; forward passes eager %lld, lazy %lld; tokens "
           "eager %lld, lazy %lld\n", rel, len, worst_eager, worst_lazy, (long long)eager.m->n_forward_calls,
           (long long)lazy.m->n_forward_calls, (long long)eager.m->n_forward_tokens,
           (long long)lazy.m->n_forward_tokens);
    assert_true(worst_lazy < 1e-3);
    assert_true(lazy.m->n_forward_calls < eager.m->n_forward_calls);
    run *all[3] = {&ex, &eager, &lazy};
    for (int k = 0; k < 3; k++) {
        fusion_bytes_free(all[k]->st);
        all[k]->m->vt->free(all[k]->m);
    }
    fusion_trie_free(tr);
    tm->vt->free(tm);
}

static void test_lazy_close_to_exact(void **state) {
    (void)state;
    check_lazy(M_STORIES);
    check_lazy(M_656K);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sibling_prefix_copy),
        cmocka_unit_test(test_lazy_close_to_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
