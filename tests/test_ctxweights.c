/* Context-dependent weights, selective fusion and their fit
 * (src/fusion/ctxweights.c, fit_ctx.c): the features and the weights on
 * hand-computable rows, eval's log-likelihood of a small stream against a
 * formula written out here, a two-member text where the right weight
 * depends on the members' entropy (the fit must find it), the fit's
 * gradient against central finite differences, and the ensemble-file
 * lines.  No model is loaded: the ensemble is the fusion layer's struct
 * with just the fields the weigher reads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/ctxweights.h"
#include "fusion/eval_impl.h"
#include "fusion/fit_ctx.h"
#include "test_common.h"

#define NEAR(a, b, tol) assert_true(fabs((a) - (b)) <= (tol) * (1 + fabs(b)))

static tutti_ensemble *fake_ensemble(int32_t n, tutti_fusion_rule rule) {
    tutti_ensemble *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->n = n, e->rule = rule, e->align = TUTTI_ALIGN_BYTE, e->select = -1;
    for (int32_t i = 0; i < n; i++) e->w[i] = 1.0f / (float)n, e->temp[i] = 1;
    return e;
}

static double H3(const double *p) { /* entropy of a 3-outcome distribution / ln 3 */
    double h = 0;
    for (int x = 0; x < 3; x++) h -= p[x] > 0 ? p[x] * log(p[x]) : 0;
    return h / log(3.0);
}

/* rows[i] + u*3 = log p for member i at unit u */
static void put(float *row, const double *p) {
    for (int x = 0; x < 3; x++) row[x] = p[x] > 0 ? (float)log(p[x]) : -INFINITY;
}

static const double A1[3] = {0.6, 0.3, 0.1}, B1[3] = {0.2, 0.2, 0.6};
static const double A2[3] = {0.1, 0.8, 0.1}, B2[3] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
static const double A3[3] = {0.25, 0.25, 0.5}, B3[3] = {0.7, 0.2, 0.1};

static void features_by_hand(void **state) {
    (void)state;
    float ra[3], rb[3], scratch[3 * 3];
    put(ra, A1), put(rb, B1);
    const float *rows[2] = {ra, rb};
    fusion_loss_state ls;
    fusion_loss_reset(&ls, 1); /* lambda 1/2 */
    double f[2][TUTTI_N_FEATURES];
    fusion_unit_features(2, rows, 3, NULL, &ls, 0xf, scratch, f);
    NEAR(f[0][TUTTI_FEAT_ENTROPY], H3(A1), 1e-6);
    NEAR(f[1][TUTTI_FEAT_ENTROPY], H3(B1), 1e-6);
    NEAR(f[0][TUTTI_FEAT_TOP], 0.6, 1e-6);
    NEAR(f[1][TUTTI_FEAT_TOP], 0.6, 1e-6);
    /* agreement: Σ_x pA(x) pB(x) = 0.12 + 0.06 + 0.06 */
    NEAR(f[0][TUTTI_FEAT_AGREE], 0.24, 1e-6);
    NEAR(f[1][TUTTI_FEAT_AGREE], 0.24, 1e-6);
    assert_true(f[0][TUTTI_FEAT_LOSS] == 0 && f[1][TUTTI_FEAT_LOSS] == 0); /* nothing seen yet */
    /* LOSS: the decayed mean of -ln p over the units so far, the last weighing 1 */
    double lp1[2] = {log(0.6), log(0.2)}, lp2[2] = {log(0.8), log(1.0 / 3)};
    fusion_loss_push(&ls, 2, lp1, NULL, 1);
    fusion_loss_push(&ls, 2, lp2, NULL, 1);
    fusion_unit_features(2, rows, 3, NULL, &ls, 1u << TUTTI_FEAT_LOSS, scratch, f);
    NEAR(f[0][TUTTI_FEAT_LOSS], (0.5 * -log(0.6) + -log(0.8)) / 1.5, 1e-9);
    NEAR(f[1][TUTTI_FEAT_LOSS], (0.5 * -log(0.2) + -log(1.0 / 3)) / 1.5, 1e-9);
    assert_true(f[0][TUTTI_FEAT_ENTROPY] == 0); /* not asked for */
    /* a gone member has no features and does not count as "the others" */
    bool gone[2] = {false, true};
    fusion_unit_features(2, rows, 3, gone, &ls, 0xf, scratch, f);
    assert_true(f[0][TUTTI_FEAT_AGREE] == 0 && f[1][TUTTI_FEAT_TOP] == 0);
    /* a ruled-out unit counts as the clamp, per byte of a span */
    double lpx[2] = {-INFINITY, log(0.5) * 4};
    fusion_loss_reset(&ls, 1);
    fusion_loss_push(&ls, 2, lpx, NULL, 4);
    NEAR(ls.m[0], FUSION_LOSS_CLAMP, 1e-12);
    NEAR(ls.m[1], -log(0.5), 1e-12);
}

/* A stream of three units: weights w_i ∝ W_i exp(b_i · f_i) by hand, the
 * mixture's and the product's log-likelihood, selective fusion. */
static void weights_and_nll_by_hand(void **state) {
    (void)state;
    tutti_ensemble *e = fake_ensemble(2, TUTTI_RULE_MIX);
    e->w[0] = 0.3f, e->w[1] = 0.7f;
    tutti_context_weights cw = {.n_features = 2, .features = {TUTTI_FEAT_ENTROPY, TUTTI_FEAT_LOSS}, .halflife = 1};
    cw.coef[0][0] = -3, cw.coef[0][1] = -0.5f;
    cw.coef[1][0] = -2, cw.coef[1][1] = -1;
    assert_int_equal(tutti_ensemble_set_context(e, &cw), 0);
    float ta[9], tb[9];
    put(ta, A1), put(ta + 3, A2), put(ta + 6, A3);
    put(tb, B1), put(tb + 3, B2), put(tb + 6, B3);
    float *rows[2] = {ta, tb};
    int32_t y[3] = {0, 1, 2};
    int64_t cs[2] = {0, 3};
    text_data d = {.n_chunks = 1, .n_rows = 3, .y = y, .width = 3, .chunk_start = cs};
    const double *P[3][2] = {{A1, B1}, {A2, B2}, {A3, B3}};
    /* by hand: loss features from the units before (half-life 1) */
    double la = 0, lb = 0, za = 0, zb = 0, want_mix = 0, want_prod = 0;
    for (int u = 0; u < 3; u++) {
        double fa = za > 0 ? la / za : 0, fb = zb > 0 ? lb / zb : 0;
        double ua = log(0.3) - 3 * H3(P[u][0]) - 0.5 * fa, ub = log(0.7) - 2 * H3(P[u][1]) - 1 * fb;
        double wa = exp(ua) / (exp(ua) + exp(ub)), wb = 1 - wa;
        want_mix -= log(wa * P[u][0][y[u]] + wb * P[u][1][y[u]]);
        double z = 0;
        for (int x = 0; x < 3; x++) z += exp(wa * log(P[u][0][x]) + wb * log(P[u][1][x]));
        want_prod -= wa * log(P[u][0][y[u]]) + wb * log(P[u][1][y[u]]) - log(z);
        la = 0.5 * la - log(P[u][0][y[u]]), za = 0.5 * za + 1;
        lb = 0.5 * lb - log(P[u][1][y[u]]), zb = 0.5 * zb + 1;
    }
    double nll, fused;
    assert_int_equal(fusion_ensemble_nll_fused(e, &d, rows, e->w, &nll, &fused), 0);
    printf("mix: %.9f (by hand %.9f)\n", nll, want_mix);
    NEAR(nll, want_mix, 1e-6);
    assert_true(fused == 1);
    e->rule = TUTTI_RULE_PRODUCT;
    assert_int_equal(fusion_ensemble_nll(e, &d, rows, e->w, &nll), 0);
    printf("product: %.9f (by hand %.9f)\n", nll, want_prod);
    NEAR(nll, want_prod, 1e-5);
    /* coefficients 0: the static mixture with the given weights */
    e->rule = TUTTI_RULE_MIX;
    memset(cw.coef, 0, sizeof cw.coef);
    assert_int_equal(tutti_ensemble_set_context(e, &cw), 0);
    double stat = 0;
    for (int u = 0; u < 3; u++) stat -= log(0.3 * P[u][0][y[u]] + 0.7 * P[u][1][y[u]]);
    assert_int_equal(fusion_ensemble_nll(e, &d, rows, e->w, &nll), 0);
    NEAR(nll, stat, 1e-6);
    /* selective fusion with static weights: D = H(0.3 A + 0.7 B) - 0.3 H(A) - 0.7 H(B) (nats) */
    assert_int_equal(tutti_ensemble_set_context(e, NULL), 0);
    double D[3];
    for (int u = 0; u < 3; u++) {
        double m[3], hm = 0, ha = 0, hb = 0;
        for (int x = 0; x < 3; x++) {
            m[x] = 0.3 * P[u][0][x] + 0.7 * P[u][1][x];
            hm -= m[x] * log(m[x]), ha -= P[u][0][x] * log(P[u][0][x]), hb -= P[u][1][x] * log(P[u][1][x]);
        }
        D[u] = hm - 0.3 * ha - 0.7 * hb;
    }
    /* a threshold between the smallest D and the others: that unit goes to
     * member 2 alone (the larger weight, 0.7), the others are fused */
    int lo = 0;
    for (int u = 1; u < 3; u++)
        if (D[u] < D[lo]) lo = u;
    double next = INFINITY;
    for (int u = 0; u < 3; u++)
        if (u != lo && D[u] < next) next = D[u];
    double thr = (D[lo] + next) / 2, want_sel = 0;
    printf("D = %.4f %.4f %.4f, threshold %.4f\n", D[0], D[1], D[2], thr);
    for (int u = 0; u < 3; u++)
        want_sel -= u == lo ? log(P[u][1][y[u]]) : log(0.3 * P[u][0][y[u]] + 0.7 * P[u][1][y[u]]);
    assert_int_equal(tutti_ensemble_set_select(e, thr), 0);
    assert_int_equal(fusion_ensemble_nll_fused(e, &d, rows, e->w, &nll, &fused), 0);
    NEAR(nll, want_sel, 1e-6);
    NEAR(fused, 2.0 / 3, 1e-12);
    assert_int_equal(tutti_ensemble_set_select(e, 0), 0); /* 0: every unit fused */
    assert_int_equal(fusion_ensemble_nll_fused(e, &d, rows, e->w, &nll, &fused), 0);
    NEAR(nll, stat, 1e-6);
    assert_true(fused == 1);
    /* validation */
    assert_int_equal(tutti_ensemble_set_select(e, 1e9), TUTTI_ERR);
    cw.halflife = 0;
    assert_int_equal(tutti_ensemble_set_context(e, &cw), TUTTI_ERR);
    cw.halflife = 16, cw.features[1] = TUTTI_FEAT_ENTROPY;
    assert_int_equal(tutti_ensemble_set_context(e, &cw), TUTTI_ERR);
    cw.features[1] = TUTTI_FEAT_TOP, cw.coef[1][0] = NAN;
    assert_int_equal(tutti_ensemble_set_context(e, &cw), TUTTI_ERR);
    cw.coef[1][0] = 0;
    e->rule = TUTTI_RULE_GATE;
    assert_int_equal(tutti_ensemble_set_context(e, &cw), TUTTI_ERR);
    free(e);
}

/* Two members, each sure and right on half of the units and unsure on the
 * other half.  Static weights cannot do better than 1/2 each:
 * p(y) = (0.9 + 0.34) / 2 = 0.62 per unit; weights that follow the
 * entropy reach the confident member's 0.9. */
static void entropy_decides(void **state) {
    (void)state;
    const int N = 200;
    float *ta = malloc(sizeof(float) * 3 * N), *tb = malloc(sizeof(float) * 3 * N);
    int32_t *y = malloc(sizeof(int32_t) * N);
    const double sure0[3] = {0.9, 0.05, 0.05}, sure1[3] = {0.05, 0.9, 0.05}, unsure0[3] = {0.34, 0.33, 0.33},
                 unsure1[3] = {0.33, 0.34, 0.33};
    for (int u = 0; u < N; u++) {
        bool a = u % 2 == 0;
        put(ta + 3 * u, a ? sure0 : unsure1);
        put(tb + 3 * u, a ? unsure0 : sure1);
        y[u] = a ? 0 : 1;
    }
    tutti_ensemble *e = fake_ensemble(2, TUTTI_RULE_MIX);
    float *rows[2] = {ta, tb};
    int64_t cs[2] = {0, N};
    text_data d = {.n_chunks = 1, .n_rows = N, .y = y, .width = 3, .chunk_start = cs};
    int32_t feat[1] = {TUTTI_FEAT_ENTROPY};
    double mean[1], sd[1];
    ctx_fit_data cd;
    assert_int_equal(fusion_ctx_data_build(e, &d, rows, e->w, feat, 1, 16, &cd, mean, sd), 0);
    double theta[4] = {log(0.5), log(0.5), 0, 0};
    double L0 = fusion_ctx_objective(&cd, theta, -1, NULL);
    NEAR(L0 / N, -log(0.62), 1e-6);
    double L = fusion_ctx_descend(&cd, theta, 400);
    printf("per unit: static %.4f, fitted %.4f, the confident member alone %.4f; b (standardised) %.3f %.3f\n", L0 / N,
           L / N, -log(0.9), theta[2], theta[3]);
    assert_true(L / N < -log(0.9) + 0.02);
    assert_true(theta[2] < 0 && theta[3] < 0); /* the surer member gets the weight */
    fusion_ctx_data_free(&cd);
    /* the whole fit (mapped back to raw features) on the ensemble, then eval's figure */
    double held;
    assert_int_equal(fusion_fit_context(e, &d, rows, feat, 1, &held), 0);
    double nll;
    assert_int_equal(fusion_ensemble_nll(e, &d, rows, e->w, &nll), 0);
    printf("eval with the fitted context weights: %.4f per unit (coef %.3f %.3f)\n", nll / N, (double)e->ctx.coef[0][0],
           (double)e->ctx.coef[1][0]);
    assert_true(nll / N < -log(0.9) + 0.02);
    free(ta), free(tb), free(y), free(e);
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* The analytic gradient of the context-weight loss against central
 * differences, for the mixture and the product, with a member gone on some
 * units and held-out units. */
static void gradient_check(void **state) {
    (void)state;
    const int32_t n = 3, K = 4, W = 5, N = 40;
    for (int rule = 0; rule < 2; rule++) {
        float *t[3];
        int32_t y[40];
        for (int32_t i = 0; i < n; i++) t[i] = malloc(sizeof(float) * (size_t)(W * N));
        ctx_fit_data d = {.n = n,
                          .K = K,
                          .rule = rule ? TUTTI_RULE_PRODUCT : TUTTI_RULE_MIX,
                          .n_units = N,
                          .width = W,
                          .rows = t,
                          .y = y};
        d.lp = malloc(sizeof(double) * (size_t)(N * n));
        d.gone = calloc((size_t)(N * n), sizeof(bool));
        d.f = malloc(sizeof(double) * (size_t)(N * n * K));
        d.held = calloc((size_t)N, sizeof(bool));
        for (int32_t i = 0; i < n; i++) d.active[i] = true;
        for (int32_t u = 0; u < N; u++) {
            y[u] = (int32_t)(urand() * W);
            d.held[u] = u % 5 == 4;
            for (int32_t i = 0; i < n; i++) {
                double z[5], s = 0;
                for (int x = 0; x < W; x++) s += (z[x] = exp(3 * urand()));
                for (int x = 0; x < W; x++) t[i][u * W + x] = (float)log(z[x] / s);
                d.gone[u * n + i] = i == 2 && u % 7 == 3;
                if (d.gone[u * n + i])
                    for (int x = 0; x < W; x++) t[i][u * W + x] = -INFINITY;
                d.lp[u * n + i] = t[i][u * W + y[u]];
                for (int32_t k = 0; k < K; k++) d.f[(u * n + i) * K + k] = d.gone[u * n + i] ? 0 : 2 * urand() - 1;
            }
        }
        double theta[3 + 12], g[3 + 12];
        for (int j = 0; j < n + n * K; j++) theta[j] = urand() - 0.5;
        for (int part = -1; part <= 1; part++) {
            fusion_ctx_objective(&d, theta, part, g);
            double worst = 0;
            for (int j = 0; j < n + n * K; j++) {
                double h = 1e-5, keep = theta[j];
                theta[j] = keep + h;
                double lp = fusion_ctx_objective(&d, theta, part, NULL);
                theta[j] = keep - h;
                double lm = fusion_ctx_objective(&d, theta, part, NULL);
                theta[j] = keep;
                double fd = (lp - lm) / (2 * h), err = fabs(fd - g[j]) / (1e-6 + fabs(fd));
                worst = err > worst ? err : worst;
            }
            printf("%s, part %d: largest relative gradient error %.2e\n", rule ? "product" : "mix", part, worst);
            assert_true(worst < 1e-5);
        }
        for (int32_t i = 0; i < n; i++) free(t[i]);
        free(d.lp), free(d.gone), free(d.f), free(d.held);
    }
}

static void file_lines(void **state) {
    (void)state;
    require_shared();
    char path[] = "/tmp/tutti-ctxw-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f,
            "%s 0.5\n%s 0.5\ncontext entropy loss   # features\ncontext-halflife 8\n"
            "context-coef 2 -1.5 0.25\nselect 0.05\n",
            shared_path("models/stories260K.gguf"), shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf"));
    fclose(f);
    tutti_ensemble_file *ef = tutti_ensemble_file_read(path);
    assert_non_null(ef);
    assert_int_equal(ef->context.n_features, 2);
    assert_int_equal(ef->context.features[1], TUTTI_FEAT_LOSS);
    assert_true(ef->context.halflife == 8);
    assert_true(ef->context.coef[0][0] == 0 && ef->context.coef[1][0] == -1.5f && ef->context.coef[1][1] == 0.25f);
    assert_true(ef->select == 0.05);
    tutti_ensemble_file_free(ef);
    /* malformed lines name the line */
    const char *bad[] = {"context entropy bogus\n",
                         "context-coef 1 0.5\n",
                         "context loss\ncontext-coef 1 0.5 2\n",
                         "context loss\ncontext-coef 3 0.5\n",
                         "context loss\ncontext-halflife 0\n",
                         "select -1\n",
                         "context\n",
                         "context loss\ncontext top\n"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        f = fopen(path, "w");
        fprintf(f, "%s\n%s\n%s", shared_path("models/stories260K.gguf"), shared_path("models/stories260K.gguf"),
                bad[k]);
        fclose(f);
        ef = tutti_ensemble_file_read(path);
        printf("%s -> %s\n", bad[k], ef ? "read" : tutti_last_error());
        assert_null(ef);
        assert_non_null(strstr(tutti_last_error(), "line") ? "ok" : strstr(tutti_last_error(), "member"));
    }
    unlink(path);
}

/* ---- real members, TOKEN alignment: eval and generation against the
 * formula computed here from each member's own session logits ---- */

static const char *SAME_VOCAB[] = {"models/stories260K.gguf", "models/stories260K-ft/stories260K-dreams.gguf"};

/* log-softmax of a logits row in double */
static void lsm(const float *z, int32_t V, double *out) {
    double mx = -INFINITY, s = 0;
    for (int32_t x = 0; x < V; x++) mx = z[x] > mx ? z[x] : mx;
    for (int32_t x = 0; x < V; x++) s += exp((double)z[x] - mx);
    for (int32_t x = 0; x < V; x++) out[x] = (double)z[x] - mx - log(s);
}

/* The two members' weights at one position by the formula of tutti.h:
 * w_i ∝ W_i exp(Σ_k b_ik f_ik), f = (entropy / ln V, top, loss, agree). */
static void hand_weights(const tutti_context_weights *cw, const float *W, double *const *lp, int32_t V,
                         const double *loss, double *w) {
    double f[2][4] = {{0}}, agree = 0;
    for (int32_t x = 0; x < V; x++) agree += exp(lp[0][x]) * exp(lp[1][x]);
    for (int i = 0; i < 2; i++) {
        double h = 0, top = 0;
        for (int32_t x = 0; x < V; x++) {
            double p = exp(lp[i][x]);
            h -= p * lp[i][x];
            top = p > top ? p : top;
        }
        f[i][0] = h / log((double)V), f[i][1] = top, f[i][2] = loss[i], f[i][3] = agree;
    }
    double u[2];
    for (int i = 0; i < 2; i++) {
        u[i] = log((double)W[i]);
        for (int k = 0; k < cw->n_features; k++) u[i] += (double)cw->coef[i][k] * f[i][cw->features[k]];
    }
    w[0] = 1 / (1 + exp(u[1] - u[0])), w[1] = 1 - w[0];
}

typedef struct hand_ctx {
    tutti_session *ss[2];
    int32_t V;
    double *lp[2];
    double lm[2], lz[2], lambda; /* LOSS state */
} hand_ctx;

static void hand_push(hand_ctx *h, int32_t tok) {
    for (int i = 0; i < 2; i++) {
        double l = -h->lp[i][tok];
        h->lm[i] = h->lambda * h->lm[i] + (l > 30 ? 30 : l), h->lz[i] = h->lambda * h->lz[i] + 1;
    }
}

static void token_by_hand(void **state) {
    (void)state;
    require_shared();
    tutti_ensemble *e = test_ensemble(SAME_VOCAB, 2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    float W[2] = {0.4f, 0.6f};
    assert_int_equal(tutti_ensemble_set_weights(e, W, NULL), 0);
    tutti_context_weights cw = {.n_features = 4,
                                .features = {TUTTI_FEAT_ENTROPY, TUTTI_FEAT_TOP, TUTTI_FEAT_LOSS, TUTTI_FEAT_AGREE},
                                .halflife = 2};
    const float b[2][4] = {{-4, 1, -0.5f, 2}, {-1, -2, 0.3f, -1}};
    memcpy(cw.coef, b, sizeof b);
    assert_int_equal(tutti_ensemble_set_context(e, &cw), 0);
    const tutti_model *m0 = tutti_ensemble_member_model(e, 0);
    const tutti_vocab *v = tutti_model_vocab(m0);
    hand_ctx h = {.V = tutti_model_n_vocab(m0), .lambda = pow(2, -0.5)};
    int32_t V = h.V;
    for (int i = 0; i < 2; i++) {
        tutti_session_params p = tutti_session_default_params();
        p.n_threads = 1;
        h.ss[i] = tutti_session_new(tutti_ensemble_member_model(e, i), &p);
        h.lp[i] = malloc(sizeof(double) * (size_t)V);
    }
    /* eval: one chunk from BOS; each member's logits at every position in one session pass */
    const char *text = "Once upon a time, there was a little dog who liked to run.";
    int32_t ids[128];
    int32_t n = tutti_tokenize(v, text, strlen(text), true, false, ids, 128);
    float *rows[2] = {malloc(sizeof(float) * (size_t)n * (size_t)V), malloc(sizeof(float) * (size_t)n * (size_t)V)};
    for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(h.ss[i], ids, n, rows[i]), 0);
    double want = 0;
    for (int32_t k = 0; k + 1 < n; k++) {
        for (int i = 0; i < 2; i++) lsm(rows[i] + (size_t)k * (size_t)V, V, h.lp[i]);
        double loss[2] = {h.lz[0] > 0 ? h.lm[0] / h.lz[0] : 0, h.lz[1] > 0 ? h.lm[1] / h.lz[1] : 0}, w[2];
        hand_weights(&cw, W, h.lp, V, loss, w);
        want -= log(w[0] * exp(h.lp[0][ids[k + 1]]) + w[1] * exp(h.lp[1][ids[k + 1]]));
        hand_push(&h, ids[k + 1]);
    }
    tutti_bpb_result r;
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, strlen(text), &r), 0);
    double ens = r.ensemble_bpb * log(2.0) * (double)r.n_bytes;
    printf("eval: %.6f nats, by hand %.6f\n", ens, want);
    NEAR(ens, want, 1e-5);
    free(rows[0]), free(rows[1]);
    /* generation: greedy decoding of the same mixture, the loss from the first generated token on */
    const char *prompt = "Lily saw a cat";
    n = tutti_tokenize(v, prompt, strlen(prompt), true, false, ids, 128);
    for (int i = 0; i < 2; i++) {
        tutti_session_free(h.ss[i]);
        tutti_session_params p = tutti_session_default_params();
        p.n_threads = 1;
        h.ss[i] = tutti_session_new(tutti_ensemble_member_model(e, i), &p);
        assert_int_equal(tutti_session_eval(h.ss[i], ids, n, NULL), 0);
    }
    h.lm[0] = h.lm[1] = h.lz[0] = h.lz[1] = 0;
    char hand[1024] = "";
    size_t nh = 0;
    for (int t = 0; t < 30; t++) {
        for (int i = 0; i < 2; i++) lsm(tutti_session_logits(h.ss[i]), V, h.lp[i]);
        double loss[2] = {h.lz[0] > 0 ? h.lm[0] / h.lz[0] : 0, h.lz[1] > 0 ? h.lm[1] / h.lz[1] : 0}, w[2], bp = -1;
        hand_weights(&cw, W, h.lp, V, loss, w);
        int32_t best = 0;
        for (int32_t x = 0; x < V; x++) {
            double p = w[0] * exp(h.lp[0][x]) + w[1] * exp(h.lp[1][x]);
            if (p > bp) bp = p, best = x;
        }
        if (tutti_vocab_is_eog(v, best)) break;
        hand_push(&h, best);
        char piece[64];
        int32_t k = tutti_token_to_piece(v, best, false, piece, sizeof piece);
        memcpy(hand + nh, piece, (size_t)k), nh += (size_t)k, hand[nh] = 0;
        for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(h.ss[i], &best, 1, NULL), 0);
    }
    test_sink got = {.n = 0};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    tutti_mask mk = {.max_len = 30};
    assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &mk, test_sink_cb, &got, NULL), 0);
    printf("generated: [%s]\nby hand:   [%s]\n", got.b, hand);
    assert_string_equal(got.b, hand);
    for (int i = 0; i < 2; i++) tutti_session_free(h.ss[i]), free(h.lp[i]);
    tutti_ensemble_free(e);
}

/* BYTE and SPAN generation: context weights with b = 0 are the static
 * ensemble bit for bit (the weights are W normalised, as fusion_combine
 * normalises them), and with b != 0 they generate (and report the share
 * fused under selective fusion). */
static void byte_span_generation(void **state) {
    (void)state;
    require_shared();
    const char *rel[] = {"models/stories260K.gguf", "models/BabyLlama-tok361/babyllama-tok361.gguf"};
    tutti_align aligns[] = {TUTTI_ALIGN_BYTE, TUTTI_ALIGN_SPAN};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    tutti_mask mk = {.max_len = 48};
    for (int a = 0; a < 2; a++) {
        tutti_ensemble *e = test_ensemble(rel, 2, aligns[a], TUTTI_RULE_MIX);
        assert_non_null(e);
        test_sink st = {.n = 0}, zero = {.n = 0}, ctx = {.n = 0};
        assert_int_equal(tutti_ensemble_generate(e, "Once upon", 9, &sp, &mk, test_sink_cb, &st, NULL), 0);
        tutti_context_weights cw = {.n_features = 4, .features = {0, 1, 2, 3}, .halflife = 16};
        assert_int_equal(tutti_ensemble_set_context(e, &cw), 0);
        assert_int_equal(tutti_ensemble_generate(e, "Once upon", 9, &sp, &mk, test_sink_cb, &zero, NULL), 0);
        assert_string_equal(st.b, zero.b);
        cw.coef[0][0] = -6, cw.coef[1][2] = -1, cw.coef[1][3] = 2;
        assert_int_equal(tutti_ensemble_set_context(e, &cw), 0);
        tutti_ensemble_stats stats;
        if (aligns[a] == TUTTI_ALIGN_BYTE) assert_int_equal(tutti_ensemble_set_select(e, 0.02), 0);
        else assert_int_equal(tutti_ensemble_set_select(e, 0.02), TUTTI_ERR); /* a span draft is one member's */
        assert_int_equal(tutti_ensemble_generate(e, "Once upon", 9, &sp, &mk, test_sink_cb, &ctx, &stats), 0);
        printf("%s: static [%s]\n      context [%s], %d of %d units fused\n", tutti_align_name(aligns[a]), st.b, ctx.b,
               stats.n_fused, stats.n_units);
        assert_true(stats.n_units > 0 && stats.n_fused <= stats.n_units);
        if (aligns[a] == TUTTI_ALIGN_SPAN) assert_int_equal(stats.n_fused, stats.n_units);
        tutti_ensemble_free(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(features_by_hand),     cmocka_unit_test(weights_and_nll_by_hand),
        cmocka_unit_test(entropy_decides),      cmocka_unit_test(gradient_check),
        shared_unit_test(file_lines),           shared_unit_test(token_by_hand),
        shared_unit_test(byte_span_generation),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
