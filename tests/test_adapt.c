/* Weights that follow the text (fixed share over the members' posterior,
 * src/fusion/adapt.c): the update on a hand-computable sequence, its limits
 * (alpha 0 is the exact mixture of whole sequences, computed here from the
 * members' own token-level log-likelihoods; alpha 1 is the static mixture),
 * the ensemble-file line, and what it gains on ../shared/eval/mixed-dev.txt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/ensemble_impl.h"
#include "test_common.h"

#define make_ens(rel, n, align) test_ensemble((rel), (n), (align), TUTTI_RULE_MIX)

static const char *SAME_VOCAB[] = {"models/stories260K.gguf", "models/stories260K-ft/stories260K-dreams.gguf"};

static void test_update_by_hand(void **state) {
    (void)state;
    require_shared();
    tutti_ensemble *e = make_ens(SAME_VOCAB, 2, TUTTI_ALIGN_TOKEN);
    assert_non_null(e);
    double prior[2] = {0.5, 0.5}, w[2] = {0.5, 0.5};
    double l1[2] = {log(0.8), log(0.2)}, l2[2] = {log(0.5), log(1.0)};
    /* alpha 0: Bayes.  unit 1: mixture 0.5, posterior (0.8, 0.2) */
    assert_true(fabs(fusion_adapt_update(e, 0, prior, w, l1, NULL) - log(0.5)) < 1e-12);
    assert_true(fabs(w[0] - 0.8) < 1e-12 && fabs(w[1] - 0.2) < 1e-12);
    /* unit 2: mixture 0.8*0.5 + 0.2*1 = 0.6, posterior (0.4/0.6, 0.2/0.6) */
    assert_true(fabs(fusion_adapt_update(e, 0, prior, w, l2, NULL) - log(0.6)) < 1e-12);
    assert_true(fabs(w[0] - 2.0 / 3) < 1e-12 && fabs(w[1] - 1.0 / 3) < 1e-12);
    /* alpha 0.1 toward the prior: 0.9 * (0.8, 0.2) + 0.1 * (0.5, 0.5) */
    w[0] = w[1] = 0.5;
    fusion_adapt_update(e, 0.1, prior, w, l1, NULL);
    assert_true(fabs(w[0] - 0.77) < 1e-12 && fabs(w[1] - 0.23) < 1e-12);
    /* alpha 1: the prior every step */
    fusion_adapt_update(e, 1, prior, w, l2, NULL);
    assert_true(fabs(w[0] - 0.5) < 1e-12 && fabs(w[1] - 0.5) < 1e-12);
    /* a member with prior 0 stays at 0; a unit nobody can produce keeps the weights */
    double p0[2] = {1, 0}, w0[2] = {1, 0}, none[2] = {-INFINITY, -INFINITY};
    fusion_adapt_update(e, 0.3, p0, w0, l1, NULL);
    assert_true(w0[1] == 0 && fabs(w0[0] - 1) < 1e-12);
    assert_true(fusion_adapt_update(e, 0.3, p0, w0, none, NULL) == -INFINITY && w0[0] == 1);
    /* member 2 gone (no distribution at this unit): the mixture is member 1's
     * probability, member 2's posterior 0, then alpha of the prior back */
    double wg[2] = {0.5, 0.5};
    bool gone[2] = {false, true};
    assert_true(fabs(fusion_adapt_update(e, 0.2, prior, wg, l1, gone) - log(0.8)) < 1e-12);
    assert_true(fabs(wg[0] - 0.9) < 1e-12 && fabs(wg[1] - 0.1) < 1e-12);
    /* range checks */
    assert_int_equal(tutti_ensemble_set_adapt(e, 1.5), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_set_rule(e, TUTTI_RULE_PRODUCT), 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0.01), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "mix"));
    tutti_ensemble_free(e);
}

static void test_limits_on_real_text(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *text = read_file(shared_path("eval/stories-dev.txt"), &len);
    assert_non_null(text);
    tutti_ensemble *e = make_ens(SAME_VOCAB, 2, TUTTI_ALIGN_TOKEN);
    assert_non_null(e);
    tutti_bpb_result stat, bayes, one;
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &stat), 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &bayes), 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, 1), 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &one), 0);
    /* alpha 0: -log(0.5 exp(-N1) + 0.5 exp(-N2)) with N_i each member's own
     * token-level log-loss of the whole text (the same tokenization) */
    double ln2n = log(2.0) * (double)stat.n_bytes;
    double n1 = stat.member_bpb[0] * ln2n, n2 = stat.member_bpb[1] * ln2n, mn = n1 < n2 ? n1 : n2;
    double want = (mn - log(0.5 * exp(mn - n1) + 0.5 * exp(mn - n2))) / ln2n;
    printf("members %.6f %.6f, static mix %.6f, adapt 0 %.6f (sequence mixture %.6f), adapt 1 %.6f\n",
           stat.member_bpb[0], stat.member_bpb[1], stat.ensemble_bpb, bayes.ensemble_bpb, want, one.ensemble_bpb);
    assert_true(fabs(bayes.ensemble_bpb - want) < 1e-4 * want);
    assert_true(fabs(one.ensemble_bpb - stat.ensemble_bpb) < 1e-6 * stat.ensemble_bpb);
    tutti_ensemble_free(e);
    free(text);
}

static void test_file_line(void **state) {
    (void)state;
    char path[] = "/tmp/tutti-adapt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "%s 0.5\n%s 0.5\nadapt 0.01\n", shared_path(SAME_VOCAB[0]), shared_path(SAME_VOCAB[1]));
    fclose(f);
    tutti_ensemble_file *ef = tutti_ensemble_file_read(path);
    assert_non_null(ef);
    assert_true(fabs(ef->adapt - 0.01) < 1e-12);
    tutti_ensemble_file_free(ef);
    f = fopen(path, "w");
    fprintf(f, "%s\nadapt 2\n", shared_path(SAME_VOCAB[0]));
    fclose(f);
    assert_null(tutti_ensemble_file_read(path));
    assert_non_null(strstr(tutti_last_error(), "line 2"));
    unlink(path);
}

/* The specialists of ../shared/eval/mixed-dev.txt (stories, "AI dream" text,
 * Tang poems) in byte alignment: weights that follow the text must beat
 * every member and the fitted static mixture. */
static void test_mixed_domains(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *text = read_file(shared_path("eval/mixed-dev.txt"), &len);
    assert_non_null(text);
    const char *rel[] = {"models/stories260K.gguf", "models/aidreams260K/aidreams260K.gguf",
                         "models/zh-poem/zh-poem-750K.gguf"};
    tutti_ensemble *e = make_ens(rel, 3, TUTTI_ALIGN_BYTE);
    assert_non_null(e);
    tutti_fit_result fs, fa;
    int rc0 = tutti_ensemble_fit(e, text, len, NULL, 0, &fs);
    if (rc0) printf("fit: %s\n", tutti_last_error());
    assert_int_equal(rc0, 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
    rc0 = tutti_ensemble_fit(e, text, len, NULL, 0, &fa);
    if (rc0) printf("fit: %s\n", tutti_last_error());
    assert_int_equal(rc0, 0);
    tutti_bpb_result r;
    rc0 = tutti_ensemble_eval_bpb(e, text, len, &r);
    if (rc0) printf("eval: %s\n", tutti_last_error());
    assert_int_equal(rc0, 0);
    printf("mixed-dev: uniform %.4f, fitted static %.4f, adapt (alpha %g) %.4f; members (byte)",
           fs.uniform_bpb, fs.fitted_bpb, fa.adapt_alpha, r.ensemble_bpb);
    for (int i = 0; i < 3; i++) printf(" %.4f", r.member_byte_bpb[i]);
    printf("\n");
    assert_true(fabs(r.ensemble_bpb - fa.fitted_bpb) < 1e-9);
    assert_true(r.ensemble_bpb < fs.fitted_bpb);
    for (int i = 0; i < 3; i++) assert_true(r.ensemble_bpb < r.member_byte_bpb[i]);
    tutti_ensemble_free(e);
    free(text);
}

typedef struct sbuf {
    char b[4096];
    size_t n;
} sbuf;

static int collect(const char *bytes, size_t n, void *u) {
    sbuf *s = u;
    if (s->n + n < sizeof s->b) memcpy(s->b + s->n, bytes, n), s->n += n;
    s->b[s->n] = 0;
    return 0;
}

static void gen(tutti_ensemble *e, const char *prompt, int n_units, sbuf *out) {
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    tutti_mask m = {.max_len = n_units};
    out->n = 0;
    out->b[0] = 0;
    assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, collect, out, NULL), 0);
}

/* Generation: alpha 1 is the static mixture (every alignment); alpha 0 in
 * token alignment is greedy decoding of the exact mixture of whole
 * sequences, computed here from each member's own session logits. */
static void test_generation(void **state) {
    (void)state;
    require_shared();
    const char *prompt = "Once upon a time";
    tutti_align aligns[] = {TUTTI_ALIGN_TOKEN, TUTTI_ALIGN_BYTE, TUTTI_ALIGN_SPAN};
    for (int a = 0; a < 3; a++) {
        tutti_ensemble *e = make_ens(SAME_VOCAB, 2, aligns[a]);
        assert_non_null(e);
        sbuf st, one;
        gen(e, prompt, 60, &st);
        assert_int_equal(tutti_ensemble_set_adapt(e, 1), 0);
        gen(e, prompt, 60, &one);
        assert_string_equal(st.b, one.b);
        tutti_ensemble_free(e);
    }
    /* the reference: both members step by step, weights = prior x sequence likelihood */
    tutti_ensemble *e = make_ens(SAME_VOCAB, 2, TUTTI_ALIGN_TOKEN);
    assert_non_null(e);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
    sbuf got;
    const int N = 40;
    gen(e, prompt, N, &got);
    tutti_session *ss[2];
    const tutti_model *m0 = tutti_ensemble_member_model(e, 0);
    const tutti_vocab *v = tutti_model_vocab(m0);
    int32_t V = tutti_model_n_vocab(m0);
    for (int i = 0; i < 2; i++) {
        tutti_session_params p = tutti_session_default_params();
        p.n_threads = 1;
        ss[i] = tutti_session_new(tutti_ensemble_member_model(e, i), &p);
    }
    int32_t ids[64];
    int32_t n = tutti_tokenize(v, prompt, strlen(prompt), true, false, ids, 64);
    for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(ss[i], ids, n, NULL), 0);
    double seq[2] = {log(0.5), log(0.5)};
    char want[4096] = "";
    size_t nw = 0;
    double *lp[2] = {malloc(sizeof(double) * (size_t)V), malloc(sizeof(double) * (size_t)V)};
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < 2; i++) {
            const float *l = tutti_session_logits(ss[i]);
            double mx = -INFINITY, z = 0;
            for (int32_t x = 0; x < V; x++) mx = l[x] > mx ? l[x] : mx;
            for (int32_t x = 0; x < V; x++) z += exp(l[x] - mx);
            for (int32_t x = 0; x < V; x++) lp[i][x] = l[x] - mx - log(z);
        }
        double mx = seq[0] > seq[1] ? seq[0] : seq[1];
        double w0 = exp(seq[0] - mx), w1 = exp(seq[1] - mx), ws = w0 + w1;
        int32_t best = 0;
        double bp = -1;
        for (int32_t x = 0; x < V; x++) {
            double p = (w0 * exp(lp[0][x]) + w1 * exp(lp[1][x])) / ws;
            if (p > bp) bp = p, best = x;
        }
        if (tutti_vocab_is_eog(v, best)) break;
        seq[0] += lp[0][best], seq[1] += lp[1][best];
        char piece[64];
        int32_t k = tutti_token_to_piece(v, best, false, piece, sizeof piece);
        memcpy(want + nw, piece, (size_t)k), nw += (size_t)k, want[nw] = 0;
        for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(ss[i], &best, 1, NULL), 0);
    }
    printf("adapt 0 (sequence mixture) greedy: [%s]\nreference:                          [%s]\n", got.b, want);
    assert_string_equal(got.b, want);
    free(lp[0]), free(lp[1]);
    for (int i = 0; i < 2; i++) tutti_session_free(ss[i]);
    tutti_ensemble_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        shared_unit_test(test_update_by_hand),
        shared_unit_test(test_limits_on_real_text),
        cmocka_unit_test(test_file_line),
        shared_unit_test(test_mixed_domains),
        shared_unit_test(test_generation),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
