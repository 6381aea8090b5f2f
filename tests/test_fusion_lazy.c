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
#include "model/model.h"

static const char *M_STORIES = "models/stories260K.gguf";
static const char *M_656K = "models/TinyStories-656K-Q8_0.gguf";

static const char *TEXT = "Once upon a time, there was a little girl named Lily.";

/* stories260K as a member (6 sessions) and, for the references, as a
 * model with one single-thread session of the single-model API. */
typedef struct lazy_pair {
    fusion_member *fm;
    tutti_model *model;
    tutti_session *ref;
} lazy_pair;

static lazy_pair lazy_pair_open(void) {
    const char *path = shared_path(M_STORIES);
    lazy_pair lp = {.fm = fusion_member_local_new(path, 6, 0, 1)};
    assert_non_null(lp.fm);
    tutti_model_params mp = tutti_model_default_params();
    lp.model = tutti_model_load(path, &mp);
    assert_non_null(lp.model);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    lp.ref = tutti_session_new(lp.model, &sp);
    assert_non_null(lp.ref);
    return lp;
}

static void lazy_pair_close(lazy_pair *lp) {
    tutti_session_free(lp->ref);
    tutti_model_free(lp->model);
    lp->fm->vt->free(lp->fm);
}

/* Siblings [p, a], [p, b], [p, c] after p: every answer equals the model's
 * own logits of the whole sequence, and the prefix runs once (the sessions
 * that answer b and c copy p's cache rows instead of running p again). */
/* logits_batch_from (byte alignment's drafting: a window of known text
 * and other hypotheses' last rows in one pass): the window's rows from
 * `from` on and each other sequence's last row equal, bit for bit, the
 * single-model API's logits of every prefix (tutti_session_eval of the
 * whole sequence with all rows), also when the window's session held less
 * than `from` (its rows go through scratch) and when a sibling shares the
 * window's prefix. */
static void test_batch_from_rows(void **state) {
    (void)state;
    lazy_pair lp = lazy_pair_open();
    fusion_member *fm = lp.fm;
    tutti_session *ref = lp.ref;
    assert_non_null(fm->logits_batch_from);
    int32_t V = fm->n_vocab, w[32];
    int32_t nw = tutti_tokenize(fm->vocab, TEXT, strlen(TEXT), true, false, w, 32);
    assert_true(nw > 12);
    float *all = malloc(sizeof(float) * (size_t)nw * (size_t)V), *out = malloc(sizeof(float) * 8 * (size_t)V);
    assert_non_null(all), assert_non_null(out);
    assert_int_equal(tutti_session_eval(ref, w, nw, all), 0);
    for (int round = 0; round < 2; round++) {
        /* round 0: nothing cached (the window runs from 0, its rows from
         * `from` through scratch); round 1: the prefix cached by round 0 */
        int32_t from = 6 + round, n0 = from + 5;
        int32_t sib[16];
        memcpy(sib, w, sizeof(int32_t) * 4);
        sib[4] = 77; /* off the window after its first 4 tokens */
        const int32_t *ids[2] = {w, sib};
        int32_t n[2] = {n0, 5}, fr[2] = {from, 0};
        float *o[2] = {out, NULL};
        const float *rows[2];
        assert_int_equal(fm->logits_batch_from(fm, 2, ids, n, fr, o, rows), 2);
        for (int32_t r = 0; r < n0 - from; r++)
            assert_memory_equal(out + (size_t)r * (size_t)V, all + (size_t)(from + r) * (size_t)V, sizeof(float) * V);
        assert_memory_equal(rows[0], all + (size_t)(n0 - 1) * (size_t)V, sizeof(float) * V);
        float *z = malloc(sizeof(float) * (size_t)V);
        assert_int_equal(tutti_session_rewind(ref, 0), 0);
        assert_int_equal(tutti_session_eval(ref, sib, 5, NULL), 0);
        memcpy(z, tutti_session_logits(ref), sizeof(float) * (size_t)V);
        assert_memory_equal(rows[1], z, sizeof(float) * V);
        free(z);
    }
    int32_t bad_from[1] = {12};
    const int32_t *ids1[1] = {w};
    int32_t n1[1] = {12};
    float *o1[1] = {out};
    const float *rows1[1];
    assert_int_equal(fm->logits_batch_from(fm, 1, ids1, n1, bad_from, o1, rows1), TUTTI_ERR);
    free(all), free(out);
    lazy_pair_close(&lp);
}

static void test_sibling_prefix_copy(void **state) {
    (void)state;
    lazy_pair lp = lazy_pair_open();
    fusion_member *fm = lp.fm;
    tutti_session *ref = lp.ref;
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
    lazy_pair_close(&lp);
}

/* Sessions sharing a workspace (tutti_session_new_sharing, the member
 * pool's sessions): evaluated in turn, each gives the bits of a session of
 * its own (the shared activations carry nothing from one pass to the
 * next), the one that created the workspace can go first, and a session
 * that differs is refused. */
static void test_shared_workspace(void **state) {
    (void)state;
    tutti_model *model = tutti_model_load(shared_path(M_STORIES), NULL);
    assert_non_null(model);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 2;
    sp.n_ctx = 64;
    tutti_session *a = tutti_session_new(model, &sp), *b = tutti_session_new_sharing(model, &sp, a);
    tutti_session *ra = tutti_session_new(model, &sp), *rb = tutti_session_new(model, &sp);
    assert_non_null(a), assert_non_null(b), assert_non_null(ra), assert_non_null(rb);
    const int32_t V = tutti_model_n_vocab(model);
    int32_t pa[4] = {1, 403, 407, 261}, pb[6] = {1, 30, 31, 77, 99, 100};
    assert_int_equal(tutti_session_eval(a, pa, 4, NULL), 0);
    assert_int_equal(tutti_session_eval(b, pb, 6, NULL), 0);
    assert_int_equal(tutti_session_eval(ra, pa, 4, NULL), 0);
    assert_int_equal(tutti_session_eval(rb, pb, 6, NULL), 0);
    for (int step = 0; step < 4; step++) {
        int32_t t = 200 + step;
        assert_int_equal(tutti_session_eval(a, &t, 1, NULL), 0);
        assert_int_equal(tutti_session_eval(b, &t, 1, NULL), 0);
        assert_int_equal(tutti_session_eval(ra, &t, 1, NULL), 0);
        assert_int_equal(tutti_session_eval(rb, &t, 1, NULL), 0);
        assert_memory_equal(tutti_session_logits(a), tutti_session_logits(ra), sizeof(float) * (size_t)V);
        assert_memory_equal(tutti_session_logits(b), tutti_session_logits(rb), sizeof(float) * (size_t)V);
    }
    tutti_session_free(a); /* b keeps the workspace */
    int32_t t = 300;
    assert_int_equal(tutti_session_eval(b, &t, 1, NULL), 0);
    assert_int_equal(tutti_session_eval(rb, &t, 1, NULL), 0);
    assert_memory_equal(tutti_session_logits(b), tutti_session_logits(rb), sizeof(float) * (size_t)V);
    tutti_session_params other = sp;
    other.n_ctx = 32;
    assert_null(tutti_session_new_sharing(model, &other, b));
    assert_non_null(strstr(tutti_last_error(), "differ"));
    tutti_session_free(b);
    tutti_session_free(ra);
    tutti_session_free(rb);
    tutti_model_free(model);
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
    double worst_lazy = 0, worst_eager = 0, worst_resolved = 0;
    int64_t resolve_calls = 0;
    size_t len = strlen(TEXT);
    for (size_t i = 4; i <= len; i++) {
        double pe[257], pp[257], pl[257], dl = 0, dp = 0;
        assert_int_equal(fusion_bytes_next(ex.st, pe), 0);
        assert_int_equal(fusion_bytes_next(eager.st, pp), 0);
        assert_int_equal(fusion_bytes_next(lazy.st, pl), 0);
        for (int k = 0; k < 257; k++) dl += fabs(pl[k] - pe[k]), dp += fabs(pp[k] - pe[k]);
        worst_lazy = fmax(worst_lazy, dl), worst_eager = fmax(worst_eager, dp);
        /* resolved (stale hypotheses expanded, deferred ones evaluated): as
         * close, and end of text as likely as the exact state says */
        int64_t c0 = lazy.m->n_forward_calls;
        fusion_bytes *rs = fusion_bytes_clone(lazy.st);
        assert_non_null(rs);
        double pr[257], dr = 0;
        assert_int_equal(fusion_bytes_resolve(rs), 0);
        assert_int_equal(fusion_bytes_n_deferred(rs), 0);
        assert_int_equal(fusion_bytes_next(rs, pr), 0);
        for (int k = 0; k < 257; k++) dr += fabs(pr[k] - pe[k]);
        worst_resolved = fmax(worst_resolved, dr);
        fusion_bytes_free(rs);
        resolve_calls += lazy.m->n_forward_calls - c0; /* not the lazy state's own work */
        if (i == len) break;
        uint8_t b = (uint8_t)TEXT[i];
        assert_true(pl[b] > 0); /* the text's own bytes stay possible */
        assert_int_equal(fusion_bytes_commit(ex.st, b), 0);
        assert_int_equal(fusion_bytes_commit(eager.st, b), 0);
        assert_int_equal(fusion_bytes_commit(lazy.st, b), 0);
    }
    printf("%s: %zu bytes: max L1 to exact: eager %.3g, lazy %.3g; forward passes eager %lld, lazy %lld; tokens "
           "eager %lld, lazy %lld\n",
           rel, len, worst_eager, worst_lazy, (long long)eager.m->n_forward_calls,
           (long long)(lazy.m->n_forward_calls - resolve_calls), (long long)eager.m->n_forward_tokens,
           (long long)lazy.m->n_forward_tokens);
    printf("  resolved lazy state: max L1 to exact %.3g\n", worst_resolved);
    assert_true(worst_lazy < 1e-3);
    assert_true(worst_resolved < 1e-3);
    assert_true(lazy.m->n_forward_calls - resolve_calls < eager.m->n_forward_calls);
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

/* The known text ahead (fusion_bytes_expect, and fusion_bytes_start's own
 * prompt): the same next-byte distributions as without it, within float
 * rounding (the canonical path's logits come from one batched pass instead
 * of one pass per token), exact pruning (1e-9, not lazy), in fewer passes. */
static void check_expect(const char *rel) {
    const char *path = shared_path(rel);
    fusion_member *tm = fusion_member_local_new(path, 1, 0, 1);
    assert_non_null(tm);
    fusion_trie *tr = fusion_trie_build(tm->vocab);
    assert_non_null(tr);
    size_t len = strlen(TEXT);
    /* plain: the prompt's first word, then byte by byte without a hint;
     * hinted: the same, told the rest of the text */
    run plain = run_new(path, tr, 1e-9, 1024, false), hinted = run_new(path, tr, 1e-9, 1024, false);
    int64_t c0 = hinted.m->n_forward_calls;
    assert_int_equal(fusion_bytes_expect(hinted.st, TEXT + 4, len - 4), 0);
    double worst = 0;
    for (size_t i = 4; i <= len; i++) {
        double a[257], b[257];
        assert_int_equal(fusion_bytes_next(plain.st, a), 0);
        assert_int_equal(fusion_bytes_next(hinted.st, b), 0);
        for (int k = 0; k < 257; k++) worst = fmax(worst, fabs(a[k] - b[k]));
        if (i == len) break;
        assert_int_equal(fusion_bytes_commit(plain.st, (uint8_t)TEXT[i]), 0);
        assert_int_equal(fusion_bytes_commit(hinted.st, (uint8_t)TEXT[i]), 0);
    }
    printf("%s: expect: max |p - p without| %.3g; forward passes %lld without, %lld with\n", rel, worst,
           (long long)plain.m->n_forward_calls, (long long)(hinted.m->n_forward_calls - c0));
    assert_true(worst < 1e-5);
    assert_true(hinted.m->n_forward_calls - c0 < plain.m->n_forward_calls);
    /* a whole prompt given to start: the same state as committing it after an empty start */
    run whole = run_new(path, tr, 1e-9, 1024, false);
    assert_int_equal(fusion_bytes_start(whole.st, TEXT, len), 0);
    double a[257], b[257];
    assert_int_equal(fusion_bytes_next(whole.st, a), 0);
    assert_int_equal(fusion_bytes_next(plain.st, b), 0);
    for (int k = 0; k < 257; k++) assert_true(fabs(a[k] - b[k]) < 1e-5);
    /* a hint the text then does not follow changes nothing either */
    run wrong = run_new(path, tr, 1e-9, 1024, false), ref = run_new(path, tr, 1e-9, 1024, false);
    assert_int_equal(fusion_bytes_expect(wrong.st, " upon a dog", 11), 0);
    const char *other = " upon a time";
    for (size_t i = 0; i < strlen(other); i++) {
        assert_int_equal(fusion_bytes_next(wrong.st, a), 0);
        assert_int_equal(fusion_bytes_next(ref.st, b), 0);
        for (int k = 0; k < 257; k++) assert_true(fabs(a[k] - b[k]) < 1e-5);
        assert_int_equal(fusion_bytes_commit(wrong.st, (uint8_t)other[i]), 0);
        assert_int_equal(fusion_bytes_commit(ref.st, (uint8_t)other[i]), 0);
    }
    run *all[5] = {&plain, &hinted, &whole, &wrong, &ref};
    for (int k = 0; k < 5; k++) {
        fusion_bytes_free(all[k]->st);
        all[k]->m->vt->free(all[k]->m);
    }
    fusion_trie_free(tr);
    tm->vt->free(tm);
}

static void test_expect_same(void **state) {
    (void)state;
    check_expect(M_STORIES);
    check_expect(M_656K);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sibling_prefix_copy), cmocka_unit_test(test_batch_from_rows),
        cmocka_unit_test(test_shared_workspace),    cmocka_unit_test(test_lazy_close_to_exact),
        cmocka_unit_test(test_expect_same),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
