/* Mixture sampling (tutti_ensemble_set_mix_sample, src/fusion/mixsample.h):
 *   - the sampled texts are distributed as the mix rule's fused
 *     distribution Σ w_i p_i: a chi-square test of the first three tokens'
 *     joint frequencies over 6000 seeds against the exact distribution
 *     computed here, in double, from each member's own logits (sessions of
 *     the two models, no ensemble code), for fixed weights 0.7/0.3 with
 *     member temperatures 1 and 2, and for weights that follow the text
 *     (--adapt, fixed share alpha 0 and 0.25: the exact sequential
 *     posterior weights computed here).  Each test also checks that it can
 *     fail: the same counts are rejected against a mixture with other
 *     weights (uniform weights, as a member choice that ignored the weights would give, swapped weights, or static weights for adapt);
 *   - a step receiver does not change the text: the runs without one (one
 *     member per token, the others catching up in one pass when drawn) give
 *     the texts of the runs with one, token for token, with one forward
 *     pass per token in all (the writer's) and about w_i of the passes for
 *     member i; with adapt alpha 0 one member writes the whole text;
 *   - the settings under which the sampler's distribution is not the
 *     mixture (temperature, top-k, top-p, min-p, repetition penalty, logit
 *     bias, forbidden strings, drafting, selective fusion, the product
 *     rule) fall back to the ordinary step: no token mixture-sampled, a
 *     notice, and the text of the run without mixture sampling;
 *   - tutti run --mix-sample (its defaults, the summary line, the notice). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"
#include "tutti.h"

#define MA "models/stories260K.gguf"
#define MB "models/stories260K-ft/stories260K-poems.gguf"
#define PROMPT "Once upon a time"
#define DEPTH 3
#define TOPK 3
#define N_NODES (1 + TOPK + TOPK * TOPK)
#define N_LEAF (TOPK * TOPK * TOPK)
#define N_CELLS (N_LEAF + 1) /* the leaves and "anything else" */
#define N_SEEDS 6000

static const float W[2] = {0.7f, 0.3f};
static const float TAU[2] = {1.0f, 2.0f};

static tutti_sampler_params mix_params(uint64_t seed) {
    return (tutti_sampler_params){.temp = 1.0f,
                                  .top_k = 0,
                                  .top_p = 1.0f,
                                  .min_p = 0.0f,
                                  .repeat_penalty = 1.0f,
                                  .repeat_last_n = 64,
                                  .seed = seed};
}

/* The two members with weights W and temperatures TAU, mixture sampling on. */
static tutti_ensemble *pair(double alpha) {
    const char *rel[2] = {MA, MB};
    tutti_ensemble *e = test_ensemble(rel, 2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    assert_int_equal(tutti_ensemble_set_weights(e, W, TAU), 0);
    assert_int_equal(tutti_ensemble_set_adapt(e, alpha), 0); /* alpha < 0: off */
    assert_int_equal(tutti_ensemble_set_mix_sample(e, true), 0);
    assert_true(tutti_ensemble_mix_sample(e));
    return e;
}

/* ---- the exact distribution, from the members' own logits ---- */

typedef struct members {
    tutti_model *m[2];
    int32_t V;
    double *p; /* [2][V] scratch */
} members;

/* p_i(. | ids[0..n)) = softmax(z_i / TAU_i) of each member, in double. */
static void member_probs(members *mm, const int32_t *ids, int32_t n) {
    for (int i = 0; i < 2; i++) {
        tutti_session_params sp = tutti_session_default_params();
        sp.n_threads = 1;
        tutti_session *s = tutti_session_new(mm->m[i], &sp);
        assert_non_null(s);
        assert_int_equal(tutti_session_eval(s, ids, n, NULL), 0);
        const float *z = tutti_session_logits(s);
        double mx = -INFINITY, sum = 0, *p = mm->p + (size_t)i * (size_t)mm->V;
        for (int32_t x = 0; x < mm->V; x++) mx = z[x] > mx ? z[x] : mx;
        for (int32_t x = 0; x < mm->V; x++) sum += p[x] = exp(((double)z[x] - mx) / TAU[i]);
        for (int32_t x = 0; x < mm->V; x++) p[x] /= sum;
        tutti_session_free(s);
    }
}

/* The cells: the sequences of the three most likely tokens (under the
 * static mixture) at each of DEPTH positions, and the rest. */
typedef struct tree {
    int32_t cand[N_NODES][TOPK];
    double want[N_CELLS];
} tree;

/* Exact probabilities of the cells under the sequential mixture whose
 * weights at this node are wt[2]; after token x the next weights are the
 * posterior (wt_i p_i(x) normalised) shared toward the prior with alpha
 * (alpha 1: the prior again, fixed weights). */
static void build(members *mm, const int32_t *ids, int32_t n, const double *wt, double alpha, tree *t, int node,
                  int depth, double pr, int cell) {
    const double prior[2] = {W[0] / (W[0] + W[1]), W[1] / (W[0] + W[1])};
    member_probs(mm, ids, n);
    const double *p0 = mm->p, *p1 = mm->p + mm->V;
    /* the candidates: top-3 of the static mixture (the same cells for every alpha) */
    for (int k = 0; k < TOPK; k++) {
        int32_t best = -1;
        for (int32_t x = 0; x < mm->V; x++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= t->cand[node][j] == x;
            double q = prior[0] * p0[x] + prior[1] * p1[x];
            if (!taken && (best < 0 || q > prior[0] * p0[best] + prior[1] * p1[best])) best = x;
        }
        t->cand[node][k] = best;
    }
    double pa[TOPK][2];
    for (int k = 0; k < TOPK; k++) pa[k][0] = p0[t->cand[node][k]], pa[k][1] = p1[t->cand[node][k]];
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(n + 1));
    memcpy(seq, ids, sizeof(int32_t) * (size_t)n);
    for (int k = 0; k < TOPK; k++) {
        double q = wt[0] * pa[k][0] + wt[1] * pa[k][1];
        if (depth + 1 == DEPTH) {
            t->want[cell * TOPK + k] = pr * q;
            continue;
        }
        /* nothing follows an end of text: the tree must not go on past one */
        assert_false(tutti_vocab_is_eog(tutti_model_vocab(mm->m[0]), t->cand[node][k]));
        double next[2];
        for (int i = 0; i < 2; i++) next[i] = (1 - alpha) * wt[i] * pa[k][i] / q + alpha * prior[i];
        seq[n] = t->cand[node][k];
        build(mm, seq, n + 1, next, alpha, t, node * TOPK + 1 + k, depth + 1, pr * q, cell * TOPK + k);
    }
    free(seq);
}

static void exact_cells(members *mm, const int32_t *prompt, int32_t n_prompt, double alpha, const double *w0, tree *t) {
    build(mm, prompt, n_prompt, w0, alpha, t, 0, 0, 1.0, 0);
    double rest = 1;
    for (int c = 0; c < N_LEAF; c++) rest -= t->want[c];
    t->want[N_LEAF] = rest > 0 ? rest : 0;
}

/* The cell of a generated sequence (N_LEAF: anything else). */
static int cell_of(const tree *t, const int32_t *ids, int n) {
    if (n < DEPTH) return N_LEAF;
    int node = 0, cell = 0;
    for (int d = 0; d < DEPTH; d++) {
        int k = 0;
        while (k < TOPK && t->cand[node][k] != ids[d]) k++;
        if (k == TOPK) return N_LEAF;
        cell = cell * TOPK + k;
        node = node * TOPK + 1 + k;
    }
    return cell;
}

typedef struct ids_out {
    int32_t ids[256];
    int n;
} ids_out;

static int collect(const tutti_step *st, void *user) {
    ids_out *o = user;
    if (o->n < 256) o->ids[o->n++] = st->chosen;
    return 0;
}

/* Chi-square of mixture-sampled texts against the exact sequential mixture
 * with alpha (1: fixed weights), and against `wrong` (the exact mixture
 * under other weights w_wrong and alpha_wrong), which must be rejected. */
static void sampled_distribution(double alpha, const double *w_wrong, double alpha_wrong) {
    require_shared();
    members mm;
    tutti_model_params mp = tutti_model_default_params();
    mm.m[0] = tutti_model_load(shared_path(MA), &mp);
    mm.m[1] = tutti_model_load(shared_path(MB), &mp);
    assert_non_null(mm.m[0]);
    assert_non_null(mm.m[1]);
    mm.V = tutti_model_n_vocab(mm.m[0]);
    mm.p = malloc(sizeof(double) * 2 * (size_t)mm.V);
    const tutti_vocab *v = tutti_model_vocab(mm.m[0]);
    int32_t prompt[64];
    int32_t n_prompt = tutti_tokenize(v, PROMPT, strlen(PROMPT), tutti_vocab_add_bos(v), false, prompt, 64);
    assert_true(n_prompt > 1);
    static tree t, tw;
    const double prior[2] = {W[0] / (W[0] + W[1]), W[1] / (W[0] + W[1])};
    exact_cells(&mm, prompt, n_prompt, alpha, prior, &t);
    exact_cells(&mm, prompt, n_prompt, alpha_wrong, w_wrong, &tw);
    assert_memory_equal(t.cand, tw.cand, sizeof t.cand);

    tutti_ensemble *e = pair(alpha < 1 ? alpha : -1);
    ids_out out;
    tutti_ensemble_set_step_cb(e, collect, &out);
    static int count[N_CELLS];
    memset(count, 0, sizeof count);
    tutti_mask m = {.max_tokens = DEPTH};
    for (int s = 0; s < N_SEEDS; s++) {
        tutti_sampler_params sp = mix_params(7000 + (uint64_t)s);
        tutti_ensemble_stats st;
        out.n = 0;
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &m, NULL, NULL, &st), 0);
        assert_int_equal(st.n_mix_sampled, st.n_units); /* the receiver's run is mixture-sampled too */
        count[cell_of(&t, out.ids, out.n)]++;
    }
    int df, dfw;
    double crit, critw, chi2 = test_chi2(count, t.want, N_CELLS, N_SEEDS, &df, &crit);
    double chi2w = test_chi2(count, tw.want, N_CELLS, N_SEEDS, &dfw, &critw);
    printf("alpha %g: chi-square %.1f on %d degrees of freedom (0.1%% critical value %.1f); against the wrong "
           "mixture %.1f (critical %.1f)\n",
           alpha, chi2, df, crit, chi2w, critw);
    assert_true(df >= 10);
    assert_true(chi2 < crit);
    assert_true(chi2w > critw); /* the test can tell another mixture apart */
    tutti_ensemble_free(e);
    free(mm.p);
    tutti_model_free(mm.m[0]);
    tutti_model_free(mm.m[1]);
}

static void test_fixed_weights(void **state) {
    (void)state;
    const double uniform[2] = {0.5, 0.5}; /* a member choice that ignores the weights */
    sampled_distribution(1.0, uniform, 1.0);
}

static void test_adapt_bayes(void **state) {
    (void)state;
    const double prior[2] = {0.7, 0.3};
    sampled_distribution(0.0, prior, 1.0); /* wrong: the weights never follow the text */
}

static void test_adapt_share(void **state) {
    (void)state;
    const double swapped[2] = {0.3, 0.7};
    sampled_distribution(0.25, swapped, 0.25);
}

/* ---- the real fast path: no receiver ---- */

static void receiver_keeps_text(double alpha) {
    require_shared();
    tutti_ensemble *e = pair(alpha);
    tutti_mask m = {.max_tokens = 24};
    ids_out out;
    int64_t passes[2] = {0, 0}, steps = 0;
    for (int s = 0; s < 200; s++) {
        tutti_sampler_params sp = mix_params(100 + (uint64_t)s);
        test_sink with = {.n = 0}, without = {.n = 0};
        tutti_ensemble_stats st;
        out.n = 0;
        tutti_ensemble_set_step_cb(e, collect, &out);
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &m, test_sink_cb, &with, &st), 0);
        for (int i = 0; i < 2; i++) assert_int_equal(st.n_member_passes[i], out.n); /* every member, every step */
        tutti_ensemble_set_step_cb(e, NULL, NULL);
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &m, test_sink_cb, &without, &st), 0);
        assert_string_equal(with.b, without.b);
        assert_int_equal(st.n_mix_sampled, st.n_units);
        /* one pass per step (out.n steps: the end of text is a step too), the writer's */
        assert_int_equal(st.n_member_passes[0] + st.n_member_passes[1], out.n);
        if (alpha == 0) assert_true(st.n_member_passes[0] == 0 || st.n_member_passes[1] == 0);
        passes[0] += st.n_member_passes[0], passes[1] += st.n_member_passes[1], steps += out.n;
    }
    double share = (double)passes[0] / (double)steps;
    printf("alpha %g: member 1 ran %.3f of %lld steps (weight 0.7)\n", alpha, share, (long long)steps);
    if (alpha < 0) assert_true(share > 0.65 && share < 0.75);
    tutti_ensemble_free(e);
}

static void test_receiver_keeps_text(void **state) {
    (void)state;
    receiver_keeps_text(-1);
}

static void test_receiver_keeps_text_adapt(void **state) {
    (void)state;
    receiver_keeps_text(0);
}

/* ---- settings that make it inexact fall back ---- */

typedef struct notes {
    int n;
    char last[512];
} notes;

static void on_notice(const char *msg, void *user) {
    notes *nt = user;
    nt->n++;
    snprintf(nt->last, sizeof nt->last, "%s", msg);
}

static void test_fallback(void **state) {
    (void)state;
    require_shared();
    tutti_ensemble *e = pair(-1);
    notes nt = {0};
    tutti_ensemble_set_notice(e, on_notice, &nt);
    const int32_t bias_id = 300;
    const float bias_v = 2.0f;
    const char *forbid[1] = {"the"};
    enum { TEMP, TOPK_, TOPP, MINP, PENALTY, BIAS, FORBID, IGNORE_EOS, DRAFT, SELECT, PRODUCT, N_CASES };
    for (int c = -1; c < N_CASES; c++) {
        tutti_sampler_params sp = mix_params(42);
        tutti_mask m = {.max_tokens = 12};
        switch (c) {
        case TEMP: sp.temp = 0.8f; break;
        case TOPK_: sp.top_k = 40; break;
        case TOPP: sp.top_p = 0.9f; break;
        case MINP: sp.min_p = 0.05f; break;
        case PENALTY: sp.repeat_penalty = 1.3f; break;
        case BIAS: m.bias_ids = &bias_id, m.bias = &bias_v, m.n_bias = 1; break;
        case FORBID: m.forbidden = forbid, m.n_forbidden = 1; break;
        case IGNORE_EOS: m.ignore_eos = true; break;
        case DRAFT: {
            tutti_draft_params dp = tutti_draft_default_params();
            dp.lookup_n = 2;
            assert_int_equal(tutti_ensemble_set_draft(e, &dp), 0);
            break;
        }
        case SELECT: assert_int_equal(tutti_ensemble_set_select(e, 0.5), 0); break;
        case PRODUCT: assert_int_equal(tutti_ensemble_set_rule(e, TUTTI_RULE_PRODUCT), 0); break;
        default: break;
        }
        test_sink on = {.n = 0}, off = {.n = 0};
        tutti_ensemble_stats st;
        nt.n = 0;
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &m, test_sink_cb, &on, &st), 0);
        if (c < 0) { /* every setting exact: mixture-sampled, no notice */
            assert_int_equal(st.n_mix_sampled, st.n_units);
            assert_int_equal(nt.n, 0);
            continue;
        }
        printf("case %d: %s\n", c, nt.last);
        assert_int_equal(st.n_mix_sampled, 0);
        assert_int_equal(nt.n, 1);
        assert_non_null(strstr(nt.last, "mixture sampling is not exact"));
        /* the ordinary step: the text of the run without mixture sampling */
        assert_int_equal(tutti_ensemble_set_mix_sample(e, false), 0);
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &m, test_sink_cb, &off, &st), 0);
        assert_int_equal(tutti_ensemble_set_mix_sample(e, true), 0);
        assert_string_equal(on.b, off.b);
        /* back to the exact settings */
        if (c == DRAFT) assert_int_equal(tutti_ensemble_set_draft(e, NULL), 0);
        if (c == SELECT) assert_int_equal(tutti_ensemble_set_select(e, -1), 0);
        if (c == PRODUCT) assert_int_equal(tutti_ensemble_set_rule(e, TUTTI_RULE_MIX), 0);
    }
    tutti_ensemble_free(e);
}

/* tutti run --mix-sample: the plain mixture's settings by default, the
 * summary's count; an inexact setting given: the notice, none drawn */
static void test_cli(void **state) {
    (void)state;
    require_shared();
    char cmd[4096], a[1024], b[1024];
    snprintf(a, sizeof a, "%s", shared_path(MA));
    snprintf(b, sizeof b, "%s", shared_path(MB));
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s run -m %s -m %s -p 'Once upon a time' -n 20 -t 1 -s 3 --mix-sample %s 2>&1",
                 TUTTI_CLI, a, b, k ? "--temp 0.8" : "");
        int st;
        char *out = run_cmd(cmd, &st);
        assert_int_equal(st, 0);
        if (k == 0) {
            assert_non_null(strstr(out, "mixture sampling: 20 of 20 tokens"));
            assert_null(strstr(out, "not exact"));
        } else {
            assert_non_null(strstr(out, "mixture sampling is not exact here (the sampler's temperature"));
            assert_non_null(strstr(out, "mixture sampling: 0 of 20 tokens"));
        }
        free(out);
    }
}

int main(void) {
    test_select_part();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_weights),
        cmocka_unit_test(test_adapt_bayes),
        cmocka_unit_test(test_adapt_share),
        cmocka_unit_test(test_receiver_keeps_text),
        cmocka_unit_test(test_receiver_keeps_text_adapt),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
