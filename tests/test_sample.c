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
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
