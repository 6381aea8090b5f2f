/* Sampler tests.  Expected values come from the definitions (softmax,
 * nucleus, min-p, CTRL penalty) evaluated here directly, not from the
 * sampler's own output. */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tutti.h"
#include "util/fastmath.h"

static tutti_sampler_params plain(float temp, uint64_t seed) {
    tutti_sampler_params p = tutti_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

static void test_greedy_is_argmax_lowest_id_on_ties(void **state) {
    (void)state;
    tutti_sampler_params p = plain(0.0f, 1);
    tutti_sampler *s = tutti_sampler_new(&p);
    float z[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY};
    assert_int_equal(tutti_sampler_sample(s, z, 6), 1);
    tutti_sampler_free(s);
}

static void test_same_seed_same_draws(void **state) {
    (void)state;
    float z[50];
    for (int i = 0; i < 50; i++) z[i] = (float)sin(i * 1.3);
    tutti_sampler_params p = plain(1.0f, 42);
    tutti_sampler *a = tutti_sampler_new(&p), *b = tutti_sampler_new(&p);
    p.seed = 43;
    tutti_sampler *c = tutti_sampler_new(&p);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = tutti_sampler_sample(a, z, 50), y = tutti_sampler_sample(b, z, 50);
        assert_int_equal(x, y);
        differ += x != tutti_sampler_sample(c, z, 50);
    }
    assert_true(differ > 50); /* another seed gives other draws */
    tutti_sampler_free(a);
    tutti_sampler_free(b);
    tutti_sampler_free(c);
}

/* Draw frequencies match softmax(z / T) within 5 standard errors. */
static void test_frequencies_match_softmax(void **state) {
    (void)state;
    const int n = 4, draws = 40000;
    float z[4] = {1.0f, 0.0f, 2.0f, -1.0f};
    const float temp = 0.7f;
    double p[4], sum = 0;
    for (int i = 0; i < n; i++) sum += p[i] = exp(z[i] / temp);
    tutti_sampler_params sp = plain(temp, 7);
    tutti_sampler *s = tutti_sampler_new(&sp);
    int count[4] = {0};
    for (int d = 0; d < draws; d++) count[tutti_sampler_sample(s, z, n)]++;
    for (int i = 0; i < n; i++) {
        double q = p[i] / sum, se = sqrt(q * (1 - q) / draws);
        assert_true(fabs((double)count[i] / draws - q) < 5 * se + 1e-9);
    }
    tutti_sampler_free(s);
}

static void test_top_k_top_p_min_p_support(void **state) {
    (void)state;
    /* softmax of z at T=1: ids sorted by z are 3 (0.6439), 0 (0.2369), 2 (0.0871), 1 (0.0321) */
    float z[4] = {1.0f, -1.0f, 0.0f, 2.0f};
    tutti_sampler_params p = plain(1.0f, 3);
    p.top_k = 2;
    tutti_sampler *s = tutti_sampler_new(&p);
    for (int i = 0; i < 2000; i++) {
        int32_t t = tutti_sampler_sample(s, z, 4);
        assert_true(t == 3 || t == 0);
    }
    tutti_sampler_free(s);
    /* top_p 0.7: cumulative 0.644 < 0.7 <= 0.881, so the nucleus is {3, 0} */
    p = plain(1.0f, 4);
    p.top_p = 0.7f;
    s = tutti_sampler_new(&p);
    int seen0 = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t t = tutti_sampler_sample(s, z, 4);
        assert_true(t == 3 || t == 0);
        seen0 += t == 0;
    }
    assert_true(seen0 > 0);
    tutti_sampler_free(s);
    /* min_p 0.1: keep p >= 0.0644 -> {3, 0, 2} */
    p = plain(1.0f, 5);
    p.min_p = 0.1f;
    s = tutti_sampler_new(&p);
    int seen2 = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t t = tutti_sampler_sample(s, z, 4);
        assert_true(t != 1);
        seen2 += t == 2;
    }
    assert_true(seen2 > 0);
    tutti_sampler_free(s);
}

static void test_repetition_penalty(void **state) {
    (void)state;
    /* CTRL penalty 2: positive logit 3 -> 1.5, so id 1 (2.0) becomes the argmax. */
    float z[3] = {3.0f, 2.0f, -5.0f};
    tutti_sampler_params p = plain(0.0f, 1);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 4;
    tutti_sampler *s = tutti_sampler_new(&p);
    assert_int_equal(tutti_sampler_sample(s, z, 3), 0);
    tutti_sampler_accept(s, 0);
    assert_int_equal(tutti_sampler_sample(s, z, 3), 1);
    /* after 4 other accepts, id 0 has left the window */
    for (int i = 0; i < 4; i++) tutti_sampler_accept(s, 2);
    assert_int_equal(tutti_sampler_sample(s, z, 3), 0);
    tutti_sampler_free(s);
}

/* ---- a 151,669-token vocabulary (Qwen3): the vectorised scans ---- */

#define BIG_V 151669

static uint64_t big_rng = 99;
static float big_rand(void) {
    big_rng ^= big_rng << 13, big_rng ^= big_rng >> 7, big_rng ^= big_rng << 17;
    return (float)((double)(big_rng >> 11) / 9007199254740992.0 * 20.0 - 10.0);
}

/* The k best ids by the definition: descending logit, lower id first. */
static const float *g_z;
static int cmp_ids(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (g_z[x] != g_z[y]) return g_z[x] > g_z[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* Draws at a huge temperature (nearly uniform over the kept set) must hit
 * exactly the expected set. */
static void check_support(const tutti_sampler_params *p, const float *z, const int32_t *want, int n_want) {
    tutti_sampler *s = tutti_sampler_new(p);
    assert_non_null(s);
    int *hits = calloc(BIG_V, sizeof(int));
    for (int d = 0; d < 20 * n_want; d++) {
        int32_t t = tutti_sampler_sample(s, z, BIG_V);
        assert_true(t >= 0 && t < BIG_V);
        hits[t]++;
    }
    int in_set = 0;
    for (int k = 0; k < n_want; k++) {
        assert_true(hits[want[k]] > 0);
        in_set += hits[want[k]];
    }
    assert_int_equal(in_set, 20 * n_want); /* nothing outside */
    free(hits);
    tutti_sampler_free(s);
}

static void test_large_vocabulary(void **state) {
    (void)state;
    float *z = malloc(sizeof(float) * BIG_V);
    int32_t *ids = malloc(sizeof(int32_t) * BIG_V);
    /* a long flat tail and 100 clearly better tokens spread over the vocabulary */
    for (int32_t i = 0; i < BIG_V; i++) z[i] = big_rand() - 12.0f;
    for (int k = 0; k < 100; k++) z[(int32_t)((k * 1517ull + 3) % BIG_V)] = big_rand() * 0.4f + 6.0f;
    /* masked entries and a tie across the top-40 boundary (NaN is an error:
     * test_nonfinite_is_an_error) */
    for (int32_t i = 5; i < BIG_V; i += 97) z[i] = -INFINITY;
    for (int32_t i = 0; i < BIG_V; i++) ids[i] = i;
    g_z = z;
    int32_t n_ids = 0;
    for (int32_t i = 0; i < BIG_V; i++)
        if (z[i] > -INFINITY) ids[n_ids++] = i;
    qsort(ids, (size_t)n_ids, sizeof *ids, cmp_ids);
    float tie = z[ids[38]];
    for (int k = 0; k < 4; k++) z[BIG_V - 1 - 1000 * k] = tie; /* 4 more equal to the 39th best, all higher ids */
    z[ids[39]] = tie;                                          /* ... and the 40th itself */
    n_ids = 0;
    for (int32_t i = 0; i < BIG_V; i++)
        if (z[i] > -INFINITY) ids[n_ids++] = i;
    qsort(ids, (size_t)n_ids, sizeof *ids, cmp_ids);

    /* greedy: the first maximum, put in the last block and duplicated later */
    tutti_sampler_params g = plain(0.0f, 1);
    tutti_sampler *s = tutti_sampler_new(&g);
    float keep = z[BIG_V - 3];
    z[BIG_V - 3] = 50.0f;
    assert_int_equal(tutti_sampler_sample(s, z, BIG_V), BIG_V - 3);
    z[BIG_V - 1] = 50.0f;
    assert_int_equal(tutti_sampler_sample(s, z, BIG_V), BIG_V - 3);
    z[BIG_V - 1] = tie, z[BIG_V - 3] = keep;
    assert_int_equal(tutti_sampler_sample(s, z, BIG_V), ids[0]);
    tutti_sampler_free(s);

    /* top-k 40 (the heap scan): the 40 best by the definition, ties to the lower ids */
    tutti_sampler_params p = plain(1e6f, 5);
    p.top_k = 40;
    check_support(&p, z, ids, 40);
    p.top_k = 150; /* into the flat tail */
    check_support(&p, z, ids, 150);

    /* top-k off: min-p keeps p >= min_p p_max, i.e. z >= z_max + log(min_p) */
    p = plain(1e6f, 6);
    p.min_p = 0.2f;
    int n_min = 0;
    while (n_min < n_ids && (double)z[ids[n_min]] >= (double)z[ids[0]] + log((double)0.2f)) n_min++;
    printf("min-p 0.2 over %d tokens: %d kept\n", BIG_V, n_min);
    assert_true(n_min > 1);
    check_support(&p, z, ids, n_min);
    /* top-p over the whole vocabulary: the shortest prefix reaching top_p of the mass */
    const float tps[2] = {0.5f, 0.9f};
    for (int k = 0; k < 2; k++) {
        p = plain(1e6f, 7);
        p.top_p = tps[k];
        double tot = 0, cum = 0;
        for (int j = 0; j < n_ids; j++) tot += exp((double)z[ids[j]] - z[ids[0]]);
        int n_p = 0;
        while (cum < tps[k] * tot) cum += exp((double)z[ids[n_p++]] - z[ids[0]]);
        printf("top-p %.1f over %d tokens: %d kept\n", (double)tps[k], BIG_V, n_p);
        assert_true(n_p > 1);
        check_support(&p, z, ids, n_p);
    }
    free(z);
    free(ids);
}

/* NaN or +inf logits and a distribution with nothing left are errors on
 * every path of the chain (greedy, top-k heap, top-p/min-p selection, the
 * unfiltered draw), never an id. */
static void test_nonfinite_is_an_error(void **state) {
    (void)state;
    const int32_t n = 1000;
    float *z = malloc(sizeof(float) * (size_t)n);
    tutti_sampler_params ps[5];
    ps[0] = plain(0.0f, 1);                      /* greedy */
    ps[1] = plain(1.0f, 1), ps[1].top_k = 40;    /* top-k */
    ps[2] = plain(1.0f, 1), ps[2].top_p = 0.9f;  /* top-p */
    ps[3] = plain(1.0f, 1), ps[3].min_p = 0.05f; /* min-p */
    ps[4] = plain(1.0f, 1);                      /* every filter off */
    const float bad[2] = {NAN, INFINITY};
    const int32_t at[3] = {0, 517, n - 1}; /* first, inside a vector block, in the scalar tail */
    for (int k = 0; k < 5; k++) {
        tutti_sampler *s = tutti_sampler_new(&ps[k]);
        assert_non_null(s);
        for (int b = 0; b < 2; b++)
            for (int a = 0; a < 3; a++) {
                for (int32_t i = 0; i < n; i++) z[i] = (float)sin(i * 0.7) * 3.0f;
                z[at[a]] = bad[b];
                assert_int_equal(tutti_sampler_sample(s, z, n), -1);
                assert_non_null(strstr(tutti_last_error(), b == 0 ? "NaN" : "+inf"));
            }
        /* nothing left: every logit -inf */
        for (int32_t i = 0; i < n; i++) z[i] = -INFINITY;
        assert_int_equal(tutti_sampler_sample(s, z, n), -1);
        assert_non_null(strstr(tutti_last_error(), "-inf"));
        /* -inf entries are masked outcomes, not errors */
        for (int32_t i = 0; i < n; i++) z[i] = i == 700 ? 1.0f : -INFINITY;
        assert_int_equal(tutti_sampler_sample(s, z, n), 700);
        tutti_sampler_free(s);
    }
    free(z);
}

/* tutti_fast_exp on special and out-of-range inputs: NaN in, NaN out; no
 * float -> int conversion of NaN or of a value out of range (the UBSan
 * build aborts on those); against libm's exp elsewhere. */
static void test_fast_exp_special_inputs(void **state) {
    (void)state;
    assert_true(isnan(tutti_fast_exp(NAN)));
    assert_true(isnan(tutti_fast_exp(-NAN)));
    assert_true(tutti_fast_exp(INFINITY) == INFINITY);
    assert_true(tutti_fast_exp(-INFINITY) == 0.0f);
    const float huge[] = {1e30f, 3e38f, 100.0f, 88.5f, 1e9f};
    for (size_t k = 0; k < sizeof huge / sizeof *huge; k++) {
        assert_true(tutti_fast_exp(huge[k]) == INFINITY);
        assert_true(tutti_fast_exp(-huge[k]) == 0.0f);
    }
    for (float x = -87.0f; x <= 88.0f; x += 0.37f) {
        double want = exp((double)x), got = tutti_fast_exp(x);
        if (fabs(got - want) > 1e-6 * want) fail_msg("fast_exp(%g) = %.9g, exp = %.9g", (double)x, got, want);
    }
    assert_true(tutti_fast_exp(-87.5f) == 0.0f); /* documented flush below -87 */
    assert_true(isnan(tutti_fast_log(NAN)));
    assert_true(tutti_fast_log(INFINITY) == INFINITY);
    assert_true(tutti_fast_log(0.0f) == -INFINITY);
    assert_true(isnan(tutti_fast_log(-1.0f)));
}

/* Draws follow the exact distribution on a 151,669-token vocabulary, for
 * every path: the unfiltered inverse CDF, top-k, top-p, min-p, top-p with
 * min-p.  Expected probabilities come from the definitions (a full sort and
 * softmax in double here); the vocabulary is cut into bins of equal expected
 * mass (in id order, so the draw order of the sampler does not matter) and
 * a chi-square statistic over 6,000 seeded draws (300 expected per bin)
 * must stay below its 0.9999 quantile (Wilson-Hilferty: df 19 gives 50.8).
 * Fewer draws keep it to seconds under ASan; a sampler that misses one bin
 * by a fifth of its mass still fails. */
static double chi2_quantile_9999(int df) {
    const double z = 3.719, v = 2.0 / (9.0 * df); /* z: the normal's 0.9999 quantile */
    const double c = 1.0 - v + z * sqrt(v);
    return df * c * c * c;
}
static void check_chi2(const tutti_sampler_params *p, const float *z, const int32_t *order, int n_keep) {
    const int n_bins = 20, draws = 6000;
    double *q = calloc(BIG_V, sizeof(double));
    double mx = z[order[0]], tot = 0;
    for (int k = 0; k < n_keep; k++) tot += q[order[k]] = exp(((double)z[order[k]] - mx) / (double)p->temp);
    int *bin = malloc(sizeof(int) * BIG_V);
    double e[20] = {0}, cum = 0;
    for (int32_t i = 0; i < BIG_V; i++) {
        q[i] /= tot;
        int b = (int)(cum * n_bins);
        bin[i] = b < n_bins ? b : n_bins - 1;
        e[bin[i]] += q[i];
        cum += q[i];
    }
    tutti_sampler *s = tutti_sampler_new(p);
    assert_non_null(s);
    double o[20] = {0};
    for (int d = 0; d < draws; d++) {
        int32_t t = tutti_sampler_sample(s, z, BIG_V);
        assert_true(t >= 0 && t < BIG_V);
        if (!(q[t] > 0)) fail_msg("drew id %d, outside the kept set", t);
        o[bin[t]]++;
    }
    double chi2 = 0;
    int df = -1;
    for (int b = 0; b < n_bins; b++)
        if (e[b] > 0) chi2 += (o[b] - e[b] * draws) * (o[b] - e[b] * draws) / (e[b] * draws), df++;
    printf("top_k %d top_p %.2f min_p %.2f temp %.2f: %d kept, chi2 %.1f (df %d)\n", p->top_k, (double)p->top_p,
           (double)p->min_p, (double)p->temp, n_keep, chi2, df);
    assert_true(df >= 10);
    assert_true(chi2 < chi2_quantile_9999(df));
    tutti_sampler_free(s);
    free(q);
    free(bin);
}

static float *big_logits(int32_t **order_out) {
    float *z = malloc(sizeof(float) * BIG_V);
    int32_t *ids = malloc(sizeof(int32_t) * BIG_V);
    big_rng = 12345;
    /* a language-model-like spread: a long tail and some strong candidates */
    for (int32_t i = 0; i < BIG_V; i++) z[i] = big_rand() * 0.6f - 6.0f;
    for (int k = 0; k < 300; k++) z[(int32_t)((k * 7919ull + 11) % BIG_V)] = 5.0f + big_rand() * 0.2f;
    for (int32_t i = 3; i < BIG_V; i += 101) z[i] = -INFINITY;
    int32_t n = 0;
    for (int32_t i = 0; i < BIG_V; i++)
        if (z[i] > -INFINITY) ids[n++] = i;
    g_z = z;
    qsort(ids, (size_t)n, sizeof *ids, cmp_ids);
    *order_out = ids;
    return z;
}

/* number of ids kept by top-p (the shortest prefix reaching p of the mass) and min-p */
static int n_top_p(const float *z, const int32_t *ids, int n, double p) {
    double tot = 0, cum = 0;
    for (int j = 0; j < n; j++) tot += exp((double)z[ids[j]] - z[ids[0]]);
    int k = 0;
    while (k < n && cum < p * tot) cum += exp((double)z[ids[k++]] - z[ids[0]]);
    return k;
}
static int n_min_p(const float *z, const int32_t *ids, int n, double p) {
    int k = 0;
    while (k < n && (double)z[ids[k]] >= (double)z[ids[0]] + log(p)) k++;
    return k;
}

static void test_distribution_chi2(void **state) {
    (void)state;
    int32_t *ids;
    float *z = big_logits(&ids);
    int n = 0;
    for (int32_t i = 0; i < BIG_V; i++) n += z[i] > -INFINITY;
    tutti_sampler_params p = plain(1.0f, 11);
    check_chi2(&p, z, ids, n); /* every filter off */
    p = plain(1.0f, 13), p.top_k = 40;
    check_chi2(&p, z, ids, 40);
    p = plain(1.0f, 14), p.top_p = 0.9f;
    check_chi2(&p, z, ids, n_top_p(z, ids, n, 0.9f));
    p = plain(1.0f, 16), p.min_p = 0.05f;
    check_chi2(&p, z, ids, n_min_p(z, ids, n, 0.05f));
    p = plain(0.7f, 17), p.top_p = 0.9f, p.min_p = 0.5f;
    int a = n_top_p(z, ids, n, 0.9f), b = n_min_p(z, ids, n, 0.5f);
    check_chi2(&p, z, ids, a < b ? a : b);
    /* the same seed gives the same draws on the selection paths too */
    p = plain(1.0f, 99), p.top_p = 0.95f;
    tutti_sampler *s1 = tutti_sampler_new(&p), *s2 = tutti_sampler_new(&p);
    p.top_p = 1.0f;
    tutti_sampler *s3 = tutti_sampler_new(&p), *s4 = tutti_sampler_new(&p);
    for (int d = 0; d < 200; d++) {
        assert_int_equal(tutti_sampler_sample(s1, z, BIG_V), tutti_sampler_sample(s2, z, BIG_V));
        assert_int_equal(tutti_sampler_sample(s3, z, BIG_V), tutti_sampler_sample(s4, z, BIG_V));
    }
    tutti_sampler_free(s1), tutti_sampler_free(s2), tutti_sampler_free(s3), tutti_sampler_free(s4);
    free(z);
    free(ids);
}

/* Microseconds per sample on 151,669 logits, printed only (tests never
 * assert timings; bench/ measures speed). */
static double us_per_sample(const tutti_sampler_params *p, const float *z) {
    tutti_sampler *s = tutti_sampler_new(p);
    struct timespec t0, t1;
    const int reps = 200;
    double best = 1e30;
    for (int round = 0; round < 3; round++) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < reps; r++) assert_true(tutti_sampler_sample(s, z, BIG_V) >= 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / reps;
        best = us < best ? us : best;
    }
    tutti_sampler_free(s);
    return best;
}

static void test_speed_151669(void **state) {
    (void)state;
    int32_t *ids;
    float *z = big_logits(&ids);
    tutti_sampler_params off = plain(0.8f, 1), k40 = plain(0.8f, 1), tp = plain(0.8f, 1),
                         def = tutti_sampler_default_params();
    k40.top_k = 40;
    tp.top_p = 0.9f;
    double t_off = us_per_sample(&off, z), t_k40 = us_per_sample(&k40, z), t_tp = us_per_sample(&tp, z);
    double t_def = us_per_sample(&def, z);
    printf("us per sample, 151669 logits: filters off %.1f, top-k 40 %.1f, top-p 0.9 %.1f, default chain %.1f\n", t_off,
           t_k40, t_tp, t_def);
    free(z);
    free(ids);
}

static void test_errors(void **state) {
    (void)state;
    float z[2] = {-INFINITY, -INFINITY};
    tutti_sampler_params p = plain(1.0f, 1);
    tutti_sampler *s = tutti_sampler_new(&p);
    assert_int_equal(tutti_sampler_sample(s, z, 2), -1);
    assert_non_null(strstr(tutti_last_error(), "masked"));
    tutti_sampler_free(s);
    p.top_p = 0.0f;
    assert_null(tutti_sampler_new(&p));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax_lowest_id_on_ties),
        cmocka_unit_test(test_same_seed_same_draws),
        cmocka_unit_test(test_frequencies_match_softmax),
        cmocka_unit_test(test_top_k_top_p_min_p_support),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_large_vocabulary),
        cmocka_unit_test(test_nonfinite_is_an_error),
        cmocka_unit_test(test_fast_exp_special_inputs),
        cmocka_unit_test(test_distribution_chi2),
        cmocka_unit_test(test_speed_151669),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
