/* Sampler tests.  Expected values come from the definitions (softmax,
 * nucleus, min-p, CTRL penalty) evaluated here directly, not from the
 * sampler's own output. */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"

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
    /* masked entries, NaN, and a tie across the top-40 boundary */
    for (int32_t i = 5; i < BIG_V; i += 97) z[i] = -INFINITY;
    z[77] = NAN;
    for (int32_t i = 0; i < BIG_V; i++) ids[i] = i;
    g_z = z;
    /* NaN sorts unpredictably: leave it out of the reference order */
    int32_t n_ids = 0;
    for (int32_t i = 0; i < BIG_V; i++)
        if (z[i] > -INFINITY) ids[n_ids++] = i;
    qsort(ids, (size_t)n_ids, sizeof *ids, cmp_ids);
    float tie = z[ids[38]];
    for (int k = 0; k < 4; k++) z[BIG_V - 1 - 1000 * k] = tie; /* 4 more equal to the 39th best, all higher ids */
    z[ids[39]] = tie;                                           /* ... and the 40th itself */
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
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
