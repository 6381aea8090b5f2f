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

/* the log-weights lw as weights */
static double W(const double *lw, int i) { return exp(lw[i]); }
static void set_lw(double *lw, double a, double b) { lw[0] = log(a), lw[1] = log(b); }

static void test_update_by_hand(void **state) {
    (void)state;
    require_shared();
    tutti_ensemble *e = make_ens(SAME_VOCAB, 2, TUTTI_ALIGN_TOKEN);
    assert_non_null(e);
    double prior[2] = {0.5, 0.5}, w[2];
    fusion_adapt_start(e, prior, w);
    assert_true(fabs(W(w, 0) - 0.5) < 1e-15 && fabs(W(w, 1) - 0.5) < 1e-15);
    double l1[2] = {log(0.8), log(0.2)}, l2[2] = {log(0.5), log(1.0)};
    /* alpha 0: Bayes.  unit 1: mixture 0.5, posterior (0.8, 0.2) */
    assert_true(fabs(fusion_adapt_update(e, 0, prior, w, l1, NULL) - log(0.5)) < 1e-12);
    assert_true(fabs(W(w, 0) - 0.8) < 1e-12 && fabs(W(w, 1) - 0.2) < 1e-12);
    /* unit 2: mixture 0.8*0.5 + 0.2*1 = 0.6, posterior (0.4/0.6, 0.2/0.6) */
    assert_true(fabs(fusion_adapt_update(e, 0, prior, w, l2, NULL) - log(0.6)) < 1e-12);
    assert_true(fabs(W(w, 0) - 2.0 / 3) < 1e-12 && fabs(W(w, 1) - 1.0 / 3) < 1e-12);
    /* alpha 0.1: before the unit, toward the prior: 0.9 * (0.8, 0.2) + 0.1 *
     * (0.5, 0.5) = (0.77, 0.23); then Bayes on l2: mixture 0.385 + 0.23 */
    set_lw(w, 0.8, 0.2);
    assert_true(fabs(fusion_adapt_update(e, 0.1, prior, w, l2, NULL) - log(0.615)) < 1e-12);
    assert_true(fabs(W(w, 0) - 0.385 / 0.615) < 1e-12 && fabs(W(w, 1) - 0.23 / 0.615) < 1e-12);
    /* alpha 1: the prior every step (mixture 0.75, posterior (1/3, 2/3)) */
    assert_true(fabs(fusion_adapt_update(e, 1, prior, w, l2, NULL) - log(0.75)) < 1e-12);
    assert_true(fabs(W(w, 0) - 1.0 / 3) < 1e-12 && fabs(W(w, 1) - 2.0 / 3) < 1e-12);
    /* a member with prior 0 stays at 0; a unit nobody can produce keeps the weights */
    double p0[2] = {1, 0}, w0[2], none[2] = {-INFINITY, -INFINITY};
    fusion_adapt_start(e, p0, w0);
    fusion_adapt_update(e, 0.3, p0, w0, l1, NULL);
    assert_true(W(w0, 1) == 0 && fabs(W(w0, 0) - 1) < 1e-12);
    assert_true(fusion_adapt_update(e, 0.3, p0, w0, none, NULL) == -INFINITY && W(w0, 0) == 1);
    /* member 2 gone (no distribution at this unit): the mixture is member 1's
     * probability, and member 2 sleeps: neither the share nor Bayes touches
     * its 0.3, member 1 keeps the 0.7 of the members present */
    double wg[2];
    set_lw(wg, 0.7, 0.3);
    bool gone[2] = {false, true};
    assert_true(fabs(fusion_adapt_update(e, 0.2, prior, wg, l1, gone) - log(0.8)) < 1e-12);
    assert_true(fabs(W(wg, 0) - 0.7) < 1e-12 && fabs(W(wg, 1) - 0.3) < 1e-12);
    /* the members present all ruled out (member 1 gave 0 to a unit) while
     * the other sleeps: alpha of everyone's weight is theirs, (0.5, 0.5) */
    double zero[2] = {-INFINITY, log(0.5)};
    set_lw(wg, 0.5, 0.5);
    assert_true(fabs(fusion_adapt_update(e, 0, prior, wg, zero, NULL) - log(0.25)) < 1e-12);
    assert_true(W(wg, 0) == 0 && fabs(W(wg, 1) - 1) < 1e-12);
    assert_true(fabs(fusion_adapt_update(e, 0.5, prior, wg, l1, gone) - log(0.8)) < 1e-12);
    assert_true(fabs(W(wg, 0) - 0.5) < 1e-12 && fabs(W(wg, 1) - 0.5) < 1e-12);
    /* range checks */
    assert_int_equal(tutti_ensemble_set_adapt(e, 1.5), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_set_rule(e, TUTTI_RULE_PRODUCT), 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0.01), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "mix"));
    tutti_ensemble_free(e);
}

/* Log-probability of a whole sequence under the mixture of sequence models
 * log Σ_i prior_i exp(S_i), computed directly (the reference for alpha 0). */
static double seq_mixture(int n, const double *prior, const double *S) {
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) mx = S[i] > mx ? S[i] : mx;
    for (int i = 0; i < n; i++) z += prior[i] * exp(S[i] - mx);
    return mx + log(z);
}

/* A weight that reaches 0 must not drop its member for good where Bayes'
 * rule keeps it: a member gone at a unit sleeps (the exact mixture of the
 * members completed by the mixture there), and a member far behind keeps a
 * weight below the smallest double.  alpha 0 throughout: the sum of the
 * returned log-probabilities must be the sequence mixture computed from the
 * members' whole-sequence log-likelihoods. */
static void test_weights_come_back(void **state) {
    (void)state;
    const tutti_ensemble two = {.n = 2}, *e = &two; /* the update reads only the member count */
    double prior[2] = {0.5, 0.5}, w[2];
    /* member 2 gone at the first unit, then better than member 1: its
     * completed sequence has the mixture's 0.8 at unit 1, so the text has
     * 0.5 * 0.8 * 0.1 + 0.5 * 0.8 * 0.9 = 0.4 */
    bool gone1[2] = {false, true};
    double u1[2] = {log(0.8), -INFINITY}, u2[2] = {log(0.1), log(0.9)};
    fusion_adapt_start(e, prior, w);
    double ll = fusion_adapt_update(e, 0, prior, w, u1, gone1);
    assert_true(fabs(W(w, 1) - 0.5) < 1e-12);
    ll += fusion_adapt_update(e, 0, prior, w, u2, NULL);
    assert_true(fabs(ll - log(0.4)) < 1e-12);
    /* ... a unit later it leads: posterior 0.45 / 0.5 = 0.9 */
    assert_true(fabs(W(w, 1) - 0.9) < 1e-12);
    /* 800 nats behind, then 1000 ahead: the sequences score S = (-1000, -800),
     * the mixture log(0.5 e^-1000 + 0.5 e^-800) = -800 + log 0.5 + log1p(e^-200);
     * as plain weights member 2's e^-800 is 0 and the text would get -1000 */
    double v1[2] = {0, -800}, v2[2] = {-1000, 0}, S[2] = {-1000, -800};
    fusion_adapt_start(e, prior, w);
    ll = fusion_adapt_update(e, 0, prior, w, v1, NULL);
    assert_true(W(w, 1) == 0 && w[1] > -801 && w[1] < -799); /* below a double's range, kept in logs */
    ll += fusion_adapt_update(e, 0, prior, w, v2, NULL);
    double want = seq_mixture(2, prior, S);
    printf("800 nats behind then back: %.12f, sequence mixture %.12f\n", ll, want);
    assert_true(fabs(ll - want) < 1e-9);
    assert_true(fabs(W(w, 1) - 1) < 1e-12);
    /* three members, one sleeping through several units while the others
     * trade the lead, then back: against the sequence mixture of the
     * completed members (a sleeping member scores the mixture's probability) */
    const tutti_ensemble e3 = {.n = 3};
    double p3[3] = {0.5, 0.3, 0.2};
    double lp[4][3] = {{log(0.6), log(0.3), log(0.5)},
                       {log(0.2), log(0.7), 0},
                       {log(0.5), log(0.1), 0},
                       {log(0.05), log(0.1), log(0.9)}};
    bool g3[4][3] = {{0, 0, 0}, {0, 0, 1}, {0, 0, 1}, {0, 0, 0}};
    for (int a = 0; a < 2; a++) {
        double alpha = a ? 0.25 : 0, lw3[3], S3[3] = {0, 0, 0}, got = 0;
        fusion_adapt_start(&e3, p3, lw3);
        double pw[3] = {0.5, 0.3, 0.2}; /* the reference's weights as plain numbers */
        for (int t = 0; t < 4; t++) {
            double r = fusion_adapt_update(&e3, alpha, p3, lw3, lp[t], g3[t]);
            got += r;
            double wa = 0, pa = 0;
            for (int i = 0; i < 3; i++)
                if (!g3[t][i]) wa += pw[i], pa += p3[i];
            for (int i = 0; i < 3; i++)
                if (!g3[t][i]) pw[i] = (1 - alpha) * pw[i] + alpha * wa * p3[i] / pa;
            double num = 0;
            for (int i = 0; i < 3; i++)
                if (!g3[t][i]) num += pw[i] * exp(lp[t][i]);
            double mix = num / wa; /* the mixture over the members present */
            assert_true(fabs(r - log(mix)) < 1e-12);
            /* Bayes over the completed members (a gone one predicts mix) */
            double z = 0;
            for (int i = 0; i < 3; i++) {
                double q = g3[t][i] ? mix : exp(lp[t][i]);
                S3[i] += log(q);
                z += (pw[i] *= q);
            }
            for (int i = 0; i < 3; i++) pw[i] /= z;
            for (int i = 0; i < 3; i++) assert_true(fabs(exp(lw3[i]) - pw[i]) < 1e-12);
        }
        if (alpha == 0) assert_true(fabs(got - seq_mixture(3, p3, S3)) < 1e-12);
    }
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
    printf("mixed-dev: uniform %.4f, fitted static %.4f, adapt (alpha %g) %.4f; members (byte)", fs.uniform_bpb,
           fs.fitted_bpb, fa.adapt_alpha, r.ensemble_bpb);
    for (int i = 0; i < 3; i++) printf(" %.4f", r.member_byte_bpb[i]);
    printf("\n");
    assert_true(fabs(r.ensemble_bpb - fa.fitted_bpb) < 1e-9);
    assert_true(r.ensemble_bpb < fs.fitted_bpb);
    for (int i = 0; i < 3; i++) assert_true(r.ensemble_bpb < r.member_byte_bpb[i]);
    tutti_ensemble_free(e);
    /* alpha 0, uniform: the sequence mixture of the members (each one
     * completed by the mixture where it is gone: zh-poem on English, say) is
     * within log2(3) bits of the whole text of every member that scores it */
    e = make_ens(rel, 3, TUTTI_ALIGN_BYTE);
    assert_non_null(e);
    assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
    rc0 = tutti_ensemble_eval_bpb(e, text, len, &r);
    if (rc0) printf("eval: %s\n", tutti_last_error());
    assert_int_equal(rc0, 0);
    printf("mixed-dev: sequence mixture %.4f; members (byte)", r.ensemble_bpb);
    for (int i = 0; i < 3; i++) printf(" %.4f", r.member_byte_bpb[i]);
    printf("\n");
    assert_true(isfinite(r.ensemble_bpb));
    int scored = 0;
    for (int i = 0; i < 3; i++) {
        if (!isfinite(r.member_byte_bpb[i])) continue;
        scored++;
        assert_true(r.ensemble_bpb <= r.member_byte_bpb[i] + log2(3.0) / (double)r.n_bytes + 1e-9);
    }
    assert_true(scored >= 1);
    /* the weigher's path (selective fusion at threshold 0 fuses every unit,
     * so the figure is the same) sleeps gone members as eval's does */
    tutti_bpb_result plain, weighed;
    assert_int_equal(tutti_ensemble_set_adapt(e, 0.03), 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &plain), 0);
    assert_int_equal(tutti_ensemble_set_select(e, 0), 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &weighed), 0);
    printf("mixed-dev, alpha 0.03: %.9f, through the weigher %.9f\n", plain.ensemble_bpb, weighed.ensemble_bpb);
    assert_true(fabs(plain.ensemble_bpb - weighed.ensemble_bpb) < 1e-9 * plain.ensemble_bpb);
    tutti_ensemble_free(e);
    free(text);
}

/* A member that the static fit finds useless (zh-poem on English stories:
 * its weight falls below 1e-4) is set to weight 0 by a static fit, but not
 * when the weights are to follow the text: a prior of 0 would drop it for
 * good, whatever the text does later. */
static void test_fit_keeps_members(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *text = read_file(shared_path("eval/stories-dev.txt"), &len);
    assert_non_null(text);
    const char *rel[] = {"models/stories260K.gguf", "models/zh-poem/zh-poem-750K.gguf"};
    float w[2];
    for (int a = 0; a < 2; a++) {
        tutti_ensemble *e = make_ens(rel, 2, TUTTI_ALIGN_BYTE);
        assert_non_null(e);
        if (a) assert_int_equal(tutti_ensemble_set_adapt(e, 0.01), 0);
        tutti_fit_result fr;
        int rc = tutti_ensemble_fit(e, text, len, NULL, 0, &fr);
        if (rc) printf("fit: %s\n", tutti_last_error());
        assert_int_equal(rc, 0);
        w[a] = e->w[1];
        tutti_ensemble_free(e);
    }
    printf("zh-poem's fitted weight on stories: static %g, with adapt %g\n", (double)w[0], (double)w[1]);
    assert_true(w[0] == 0);
    assert_true(w[1] > 0);
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
        shared_unit_test(test_update_by_hand),      cmocka_unit_test(test_weights_come_back),
        shared_unit_test(test_limits_on_real_text), cmocka_unit_test(test_file_line),
        shared_unit_test(test_mixed_domains),       shared_unit_test(test_fit_keeps_members),
        shared_unit_test(test_generation),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
