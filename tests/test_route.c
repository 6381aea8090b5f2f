/* Routing (PackLLM-sim, src/fusion/route.c): the weights against a direct
 * computation from each member's logits of the prompt (session API, one
 * forward pass, in double), the prior, the Bayes limit tau = 1/n_bytes, a
 * member whose context cannot hold the prompt, generation with route on
 * (its output equal to a generation with those weights given by hand, the
 * given weights back afterwards), choice items, the ensemble-file line, the
 * CLI flags and the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/ensemble_impl.h"
#include "test_common.h"

static const char *THREE[] = {"models/stories260K.gguf", "models/TinyStories-656K-Q8_0.gguf",
                              "models/BabyLlama-tok361/babyllama-tok361.gguf"};
static const char *PROMPT = "One day, a little boy named Tim went to the park with his mom. He saw a big red "
                            "ball under a tree. Tim ran to the ball and";

/* w_i ∝ w0_i exp(-(−LL_i / n_bytes) / tau), from the direct log-likelihoods */
static void want_weights(const double *ll, const double *w0, int n, double n_bytes, double tau, double *w) {
    double a[8], mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) {
        a[i] = log(w0[i]) + ll[i] / n_bytes / tau;
        if (a[i] > mx) mx = a[i];
    }
    for (int i = 0; i < n; i++) z += exp(a[i] - mx);
    for (int i = 0; i < n; i++) w[i] = exp(a[i] - mx) / z;
}

static void test_weights_equal_direct(void **state) {
    (void)state;
    tutti_ensemble *e = test_ensemble(THREE, 3, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    double ll[3], nb = (double)strlen(PROMPT);
    for (int i = 0; i < 3; i++) ll[i] = test_direct_ll(shared_path(THREE[i]), PROMPT);
    const double uniform[3] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
    const double taus[] = {0.25, 1.0, 1.0 / nb /* Bayes: w ∝ w0 p(prompt) */};
    for (int t = 0; t < 3; t++) {
        float w[3];
        double lb[3], want[3];
        assert_int_equal(tutti_ensemble_route_weights(e, PROMPT, strlen(PROMPT), taus[t], w, lb), 0);
        want_weights(ll, uniform, 3, nb, taus[t], want);
        for (int i = 0; i < 3; i++) {
            printf("tau %.4g member %d: %.6f nats/byte (direct %.6f), weight %.6f (direct %.6f)\n", taus[t], i + 1,
                   lb[i], -ll[i] / nb, (double)w[i], want[i]);
            assert_true(fabs(lb[i] + ll[i] / nb) < 1e-5);
            assert_true(fabs((double)w[i] - want[i]) < 1e-4);
        }
    }
    /* the given weights are the prior (a member at 0 stays at 0) */
    const float given[3] = {0.6f, 0.4f, 0.0f};
    assert_int_equal(tutti_ensemble_set_weights(e, given, NULL), 0);
    float w[3];
    double want[3];
    const double prior[3] = {0.6, 0.4, 1e-300};
    assert_int_equal(tutti_ensemble_route_weights(e, PROMPT, strlen(PROMPT), 0.25, w, NULL), 0);
    want_weights(ll, prior, 3, nb, 0.25, want);
    for (int i = 0; i < 3; i++) assert_true(fabs((double)w[i] - want[i]) < 1e-4);
    assert_true(w[2] == 0.0f);
    /* an empty prompt: no evidence, the given weights */
    assert_int_equal(tutti_ensemble_route_weights(e, "", 0, 0.25, w, NULL), 0);
    assert_true(fabs(w[0] - 0.6f) < 1e-6 && fabs(w[1] - 0.4f) < 1e-6 && w[2] == 0.0f);
    tutti_ensemble_free(e);
}

/* BabyLlama-tok361 is character-level with a 256-token context: a longer
 * prompt is NAN for it (weight 0), the others share the weight. */
static void test_member_without_room(void **state) {
    (void)state;
    tutti_ensemble *e = test_ensemble(THREE, 3, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    char longp[1200] = "";
    while (strlen(longp) + strlen(PROMPT) + 2 < sizeof longp) strcat(strcat(longp, PROMPT), " ");
    float w[3];
    double lb[3];
    assert_int_equal(tutti_ensemble_route_weights(e, longp, strlen(longp), 0.25, w, lb), 0);
    printf("long prompt (%zu bytes): %g %g %g\n", strlen(longp), (double)w[0], (double)w[1], (double)w[2]);
    assert_true(isnan(lb[2]) && w[2] == 0.0f);
    assert_true(fabs(w[0] + w[1] - 1.0f) < 1e-6);
    tutti_ensemble_free(e);
}

typedef struct notes {
    char text[4096];
} notes;

static void on_notice(const char *msg, void *user) {
    notes *n = user;
    strncat(n->text, msg, sizeof n->text - strlen(n->text) - 2);
    strcat(n->text, "\n");
}

typedef struct out_text {
    char s[1024];
} out_text;

static int on_text(const char *bytes, size_t n, void *user) {
    out_text *o = user;
    size_t k = strlen(o->s);
    if (k + n < sizeof o->s) memcpy(o->s + k, bytes, n), o->s[k + n] = 0;
    return 0;
}

/* Greedy generation with route on equals the generation with the route
 * weights given by hand, and differs from the one with the given weights
 * (byte: TinyStories-656K's canonical tokens of the prompt cost it 1.29 nats
 * a byte against stories260K's 0.25; token: the story model against its
 * "AI dream" fine-tune, on a story); the given weights are back afterwards. */
static void test_generation(void **state) {
    (void)state;
    require_shared();
    const char *byte_pair[] = {THREE[0], THREE[1]};
    const char *token_pair[] = {"models/stories260K.gguf", "models/stories260K-ft/stories260K-dreams.gguf"};
    const char *const *rels[] = {byte_pair, token_pair};
    const int aligns[] = {TUTTI_ALIGN_BYTE, TUTTI_ALIGN_TOKEN};
    for (int a = 0; a < 2; a++) {
        tutti_ensemble *e = test_ensemble(rels[a], 2, aligns[a], TUTTI_RULE_MIX);
        assert_non_null(e);
        notes n = {{0}};
        tutti_ensemble_set_notice(e, on_notice, &n);
        assert_int_equal(tutti_ensemble_set_route(e, 0.25), 0);
        assert_true(tutti_ensemble_route(e) == 0.25);
        float w[2];
        assert_int_equal(tutti_ensemble_route_weights(e, PROMPT, strlen(PROMPT), 0.25, w, NULL), 0);
        tutti_sampler_params sp = tutti_sampler_default_params();
        sp.temp = 0; /* greedy */
        tutti_mask mask = {.max_len = 40};
        out_text routed = {{0}}, by_hand = {{0}}, given = {{0}};
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &mask, on_text, &routed, NULL), 0);
        printf("%s: notice: %sroute weights %g %g: \"%s\"\n", tutti_align_name(tutti_ensemble_align(e)), n.text,
               (double)w[0], (double)w[1], routed.s);
        assert_non_null(strstr(n.text, "route (tau 0.25"));
        assert_true(strlen(routed.s) > 0);
        assert_true(tutti_ensemble_member_weight(e, 0) == 0.5f && tutti_ensemble_member_weight(e, 1) == 0.5f);
        assert_int_equal(tutti_ensemble_set_route(e, -1), 0);
        assert_true(tutti_ensemble_route(e) < 0);
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &mask, on_text, &given, NULL), 0);
        printf("given weights: \"%s\"\n", given.s);
        assert_string_not_equal(routed.s, given.s);
        assert_int_equal(tutti_ensemble_set_weights(e, w, NULL), 0);
        assert_int_equal(tutti_ensemble_generate(e, PROMPT, strlen(PROMPT), &sp, &mask, on_text, &by_hand, NULL), 0);
        assert_string_equal(routed.s, by_hand.s);
        tutti_ensemble_free(e);
    }
}

/* A choice item's ensemble LL with route equals the static scoring with the
 * weights routed from its context. */
static void test_choices(void **state) {
    (void)state;
    tutti_ensemble *e = test_ensemble(THREE, 3, TUTTI_ALIGN_BYTE, TUTTI_RULE_PRODUCT);
    assert_non_null(e);
    const char *ch[] = {" kicked it high.", " ate it for lunch."};
    tutti_choice_item it = {PROMPT, ch, 2, 0};
    double ll[TUTTI_MAX_CHOICES * 4], want[TUTTI_MAX_CHOICES * 4];
    tutti_choices_result r;
    float w[3];
    assert_int_equal(tutti_ensemble_set_route(e, 0.25), 0);
    assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, ll, NULL, NULL), 0);
    assert_true(tutti_ensemble_member_weight(e, 0) == tutti_ensemble_member_weight(e, 2)); /* given weights back */
    assert_int_equal(tutti_ensemble_route_weights(e, PROMPT, strlen(PROMPT), 0.25, w, NULL), 0);
    assert_int_equal(tutti_ensemble_set_route(e, -1), 0);
    assert_int_equal(tutti_ensemble_set_weights(e, w, NULL), 0);
    assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, want, NULL, NULL), 0);
    for (int c = 0; c < 2; c++) {
        printf("%s: route %.6f, by hand %.6f\n", ch[c], ll[c * 4 + 3], want[c * 4 + 3]);
        assert_true(fabs(ll[c * 4 + 3] - want[c * 4 + 3]) < 1e-4); /* set_weights renormalises the floats */
    }
    tutti_ensemble_free(e);
}

static void test_errors(void **state) {
    (void)state;
    const char *rel[] = {THREE[0]};
    tutti_ensemble *e = test_ensemble(rel, 1, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    float w[1];
    assert_int_equal(tutti_ensemble_set_route(e, 0), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_set_route(e, NAN), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_set_route(e, INFINITY), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_route_weights(e, "x", 1, 0, w, NULL), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_route_weights(e, "x", 1, 0.25, NULL, NULL), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_route_weights(e, "a\0b", 3, 0.25, w, NULL), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_set_rule(e, TUTTI_RULE_GATE), 0);
    assert_int_equal(tutti_ensemble_set_route(e, 0.25), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "mix or product"));
    tutti_ensemble_free(e);
}

/* The CLI: --route / --route-tau in run, the ensemble-file line, bad values. */
static void test_cli(void **state) {
    (void)state;
    char cmd[4096];
    int st;
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s --route-tau 0.5 -p 'Once upon a time' -n 20 --temp 0 2>&1", TUTTI_CLI,
             shared_path(THREE[0]), shared_path(THREE[2]));
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "route (tau 0.5 nats/byte): weights"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s run -m %s --route-tau 0 -p x -n 2 2>&1", TUTTI_CLI, shared_path(THREE[0]));
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s run --help 2>&1", TUTTI_CLI);
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--route-tau"));
    assert_non_null(strstr(out, "0.25"));
    free(out);
    /* the ensemble file: `route TAU` read, written back by fit */
    char ef[] = "/tmp/tutti-route-XXXXXX";
    int fd = mkstemp(ef);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "%s\n%s\nroute 0.125\n", shared_path(THREE[0]), shared_path(THREE[2]));
    fclose(f);
    tutti_ensemble_file *file = tutti_ensemble_file_read(ef);
    assert_non_null(file);
    assert_true(file->route == 0.125);
    tutti_ensemble_file_free(file);
    snprintf(cmd, sizeof cmd, "%s run -e %s -p 'Once upon a time' -n 10 --temp 0 2>&1", TUTTI_CLI, ef);
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "route (tau 0.125"));
    free(out);
    f = fopen(ef, "w");
    fprintf(f, "%s\nroute 0\n", shared_path(THREE[0]));
    fclose(f);
    assert_null(tutti_ensemble_file_read(ef));
    assert_non_null(strstr(tutti_last_error(), "line 2"));
    unlink(ef);
    /* eval --choices: --route and --adapt together are a usage error */
    char items[] = "/tmp/tutti-route-items-XXXXXX";
    fd = mkstemp(items);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fprintf(f, "{\"context\": \"Tom fell and hurt his knee. He began to\", \"choices\": [\" cry.\", \" fly.\"], "
               "\"label\": 0}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s eval --choices %s -m %s -m %s --route --adapt 2>&1", TUTTI_CLI, items,
             shared_path(THREE[0]), shared_path(THREE[2]));
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s eval --choices %s -m %s -m %s --route --json 2>/dev/null", TUTTI_CLI, items,
             shared_path(THREE[0]), shared_path(THREE[2]));
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"choice_weights\":\"route\""));
    assert_non_null(strstr(out, "\"route_tau\":0.25"));
    free(out);
    unlink(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_equal_direct),
        cmocka_unit_test(test_member_without_room),
        shared_unit_test(test_generation),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cli),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
