/* Multiple-choice scoring (tutti_ensemble_eval_choices): log-likelihoods
 * against a direct computation from the session API's logits, accuracies of
 * the story models on ../shared/eval/cloze-dev.jsonl against llama.cpp's
 * figures in ../shared/README.md, and the checks on malformed items. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/ensemble_impl.h"
#include "test_common.h"

#define make_ens(rel, n, align, rule) test_ensemble((rel), (n), (align), (rule))

static void test_ll_is_direct_computation(void **state) {
    (void)state;
    const char *rel[] = {"models/stories260K.gguf"};
    tutti_ensemble *e = make_ens(rel, 1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    const char *choices[] = {" a cold glass of water.", " a big box of crayons.", " the moon"};
    tutti_choice_item it = {"Lily was thirsty. She drank", choices, 3, 0};
    double ll[TUTTI_MAX_CHOICES * 2];
    tutti_choices_result r;
    assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, ll, NULL, NULL), 0);
    double ctx = test_direct_ll(shared_path(rel[0]), it.context);
    for (int c = 0; c < 3; c++) {
        char full[256];
        snprintf(full, sizeof full, "%s%s", it.context, choices[c]);
        double want = test_direct_ll(shared_path(rel[0]), full) - ctx;
        printf("choice %d: LL %.6f, direct %.6f, ensemble %.6f\n", c, ll[c * 2], want, ll[c * 2 + 1]);
        assert_true(fabs(ll[c * 2] - want) < 1e-3);     /* the member alone */
        assert_true(fabs(ll[c * 2 + 1] - want) < 1e-3); /* a one-member TOKEN ensemble is the member */
    }
    tutti_ensemble_free(e);
}

/* BYTE alignment scores choices from cloned byte states of the context:
 * the same as scoring context + choice and the context as whole texts. */
static void test_branches_equal_whole_texts(void **state) {
    (void)state;
    const char *rel[] = {"models/stories260K.gguf", "models/BabyLlama-tok361/babyllama-tok361.gguf"};
    tutti_ensemble *e = make_ens(rel, 2, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    const char *ctx = "Tom dropped his ice cream. He";
    const char *cont[] = {" began to cry.", " was glad.", " ran"};
    double br[3], m[TUTTI_ENSEMBLE_MAX_MEMBERS], whole, c0;
    assert_int_equal(fusion_branches_nll(e, ctx, cont, 3, br), 0);
    assert_int_equal(fusion_text_nll(e, ctx, strlen(ctx), m, &c0), 0);
    for (int c = 0; c < 3; c++) {
        char full[128];
        snprintf(full, sizeof full, "%s%s", ctx, cont[c]);
        assert_int_equal(fusion_text_nll(e, full, strlen(full), m, &whole), 0);
        printf("%s: branch %.6f, whole - context %.6f\n", cont[c], br[c], whole - c0);
        assert_true(fabs(br[c] - (whole - c0)) < 1e-3);
    }
    tutti_ensemble_free(e);
}

static double lse2(double a, double b) {
    double m = a > b ? a : b;
    return m + log(exp(a - m) + exp(b - m));
}

/* The posterior after the context (adapt alpha 0 over the item from BOS)
 * is the exact mixture of the members as sequence models:
 * LL = log Σ w_i p_i(ctx + choice) - log Σ w_i p_i(ctx), computed here from
 * each member's own logits.  TOKEN alignment (shared vocabulary): exact;
 * BYTE alignment: the members' byte-level probabilities add the mass of the
 * non-canonical tokenizations (small for these members), so a looser bound,
 * still far below the static per-byte mixture's distance from it. */
static void test_posterior_is_sequence_mixture(void **state) {
    (void)state;
    require_shared();
    const char *same[] = {"models/stories260K.gguf", "models/stories260K-ft/stories260K-dreams.gguf"};
    const char *diff[] = {"models/BabyLlama-tok105/babyllama-tok105.gguf",
                          "models/BabyLlama-tok361/babyllama-tok361.gguf"};
    const char *choices[] = {" began to cry.", " was very glad.", " ate the moon."};
    tutti_choice_item it = {"Tom dropped his ice cream on the ground. He", choices, 3, 0};
    for (int pass = 0; pass < 2; pass++) {
        const char *const *rel = pass == 0 ? same : diff;
        const int align = pass == 0 ? TUTTI_ALIGN_TOKEN : TUTTI_ALIGN_BYTE;
        const double tol = pass == 0 ? 1e-3 : 0.03;
        tutti_ensemble *e = make_ens(rel, 2, align, TUTTI_RULE_MIX);
        assert_non_null(e);
        const float w[2] = {0.7f, 0.3f};
        assert_int_equal(tutti_ensemble_set_weights(e, w, NULL), 0);
        double ctx[2];
        for (int i = 0; i < 2; i++) ctx[i] = test_direct_ll(shared_path(rel[i]), it.context);
        double ll_static[TUTTI_MAX_CHOICES * 3], ll[TUTTI_MAX_CHOICES * 3];
        tutti_choices_result r;
        assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, ll_static, NULL, NULL), 0);
        assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
        assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, ll, NULL, NULL), 0);
        double far = 0;
        for (int c = 0; c < 3; c++) {
            char full[256];
            snprintf(full, sizeof full, "%s%s", it.context, choices[c]);
            double lw0 = log(0.7), lw1 = log(0.3);
            double want =
                lse2(lw0 + test_direct_ll(shared_path(rel[0]), full), lw1 + test_direct_ll(shared_path(rel[1]), full)) -
                lse2(lw0 + ctx[0], lw1 + ctx[1]);
            printf("%s %s: posterior %.6f, direct %.6f, static %.6f\n", align == TUTTI_ALIGN_TOKEN ? "token" : "byte",
                   choices[c], ll[c * 3 + 2], want, ll_static[c * 3 + 2]);
            assert_true(fabs(ll[c * 3 + 2] - want) < tol);
            if (fabs(ll_static[c * 3 + 2] - want) > far) far = fabs(ll_static[c * 3 + 2] - want);
        }
        assert_true(far > 10 * tol); /* the static mixture is another quantity */
        tutti_ensemble_free(e);
    }
}

/* route + adapt both set the weights from the context: refused */
static void test_route_and_adapt_refused(void **state) {
    (void)state;
    require_shared();
    const char *rel[] = {"models/stories260K.gguf", "models/stories260K-ft/stories260K-dreams.gguf"};
    tutti_ensemble *e = make_ens(rel, 2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    const char *two[] = {" a", " b"};
    tutti_choice_item it = {"x", two, 2, 0};
    tutti_choices_result r;
    assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
    assert_int_equal(tutti_ensemble_set_route(e, 0.25), 0);
    assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, NULL, NULL, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "route and adapt"));
    tutti_ensemble_free(e);
}

typedef struct cloze {
    cJSON *root[64];
    tutti_choice_item items[64];
    const char *ch[64][TUTTI_MAX_CHOICES];
    int n;
} cloze;

static void cloze_read(cloze *c) {
    size_t len;
    char *txt = read_file(shared_path("eval/cloze-dev.jsonl"), &len);
    assert_non_null(txt);
    c->n = 0;
    for (char *line = strtok(txt, "\n"); line && c->n < 64; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        c->root[c->n] = j;
        tutti_choice_item *it = &c->items[c->n];
        it->context = cJSON_GetObjectItem(j, "context")->valuestring;
        cJSON *chs = cJSON_GetObjectItem(j, "choices");
        it->n_choices = 0;
        cJSON *x;
        cJSON_ArrayForEach(x, chs) c->ch[c->n][it->n_choices++] = x->valuestring;
        it->choices = c->ch[c->n];
        it->label = cJSON_GetObjectItem(j, "label")->valueint;
        c->n++;
    }
    free(txt);
}

static void cloze_free(cloze *c) {
    for (int i = 0; i < c->n; i++) cJSON_Delete(c->root[i]);
}

/* ../shared/README.md: acc / acc_norm measured with llama.cpp. */
static void test_cloze_members_match_llamacpp(void **state) {
    (void)state;
    cloze c;
    cloze_read(&c);
    assert_int_equal(c.n, 40);
    const char *rel[] = {"models/stories260K.gguf", "models/TinyStories-656K-Q8_0.gguf",
                         "models/BabyLlama-tok105/babyllama-tok105.gguf",
                         "models/BabyLlama-tok361/babyllama-tok361.gguf"};
    const double acc[] = {0.500, 0.550, 0.450, 0.450}, acc_norm[] = {0.500, 0.550, 0.400, 0.525};
    tutti_fusion_rule rules[] = {TUTTI_RULE_MIX, TUTTI_RULE_PRODUCT};
    for (int ri = 0; ri < 2; ri++) {
        tutti_ensemble *e = make_ens(rel, 4, TUTTI_ALIGN_BYTE, rules[ri]);
        assert_non_null(e);
        tutti_choices_result r;
        assert_int_equal(tutti_ensemble_eval_choices(e, c.items, c.n, &r, NULL, NULL, NULL), 0);
        for (int i = 0; i < 4; i++) {
            printf("%s: acc %.3f acc_norm %.3f (llama.cpp %.3f / %.3f)\n", rel[i], r.member_acc[i],
                   r.member_acc_norm[i], acc[i], acc_norm[i]);
            /* TinyStories-656K: acc_norm is "slightly approximate" in the reference
             * (its context tokens are not a prefix): allow one item there */
            assert_true(fabs(r.member_acc[i] - acc[i]) < 1e-9);
            assert_true(fabs(r.member_acc_norm[i] - acc_norm[i]) < (i == 1 ? 0.026 : 1e-9));
        }
        printf("ensemble (%s, byte, static weights): acc %.3f acc_norm %.3f\n", tutti_rule_name(rules[ri]),
               r.ensemble_acc, r.ensemble_acc_norm);
        assert_true(r.ensemble_acc > 0.25 && r.ensemble_acc_norm > 0.25); /* above chance */
        if (rules[ri] == TUTTI_RULE_MIX) {
            /* the posterior after the context (eval --choices' default for
             * mix): at least the best member's acc_norm (llama.cpp: 0.550),
             * where the static per-byte mixture has 0.450 */
            assert_int_equal(tutti_ensemble_set_adapt(e, 0), 0);
            assert_int_equal(tutti_ensemble_eval_choices(e, c.items, c.n, &r, NULL, NULL, NULL), 0);
            printf("ensemble (mix, byte, posterior after the context): acc %.3f acc_norm %.3f\n", r.ensemble_acc,
                   r.ensemble_acc_norm);
            assert_true(r.ensemble_acc_norm >= 0.550 - 1e-9);
        }
        tutti_ensemble_free(e);
    }
    cloze_free(&c);
}

static void test_bad_items(void **state) {
    (void)state;
    const char *rel[] = {"models/stories260K.gguf"};
    tutti_ensemble *e = make_ens(rel, 1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    tutti_choices_result r;
    const char *two[] = {" a", " b"}, *empty[] = {" a", ""};
    tutti_choice_item bad_label = {"x", two, 2, 2}, one = {"x", two, 1, 0}, emp = {"x", empty, 2, 0};
    assert_int_equal(tutti_ensemble_eval_choices(e, &bad_label, 1, &r, NULL, NULL, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "label 2"));
    assert_int_equal(tutti_ensemble_eval_choices(e, &one, 1, &r, NULL, NULL, NULL), TUTTI_ERR);
    assert_int_equal(tutti_ensemble_eval_choices(e, &emp, 1, &r, NULL, NULL, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "choice 2 is empty"));
    assert_int_equal(tutti_ensemble_eval_choices(e, NULL, 0, &r, NULL, NULL, NULL), TUTTI_ERR);
    tutti_ensemble_free(e);
}

/* The CLI: eval --choices --json --plot on the first items of cloze-dev. */
static void test_cli_choices_json_plot(void **state) {
    (void)state;
    char items[] = "/tmp/tutti-choices-XXXXXX";
    int fd = mkstemp(items);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"context\": \"Lily was very thirsty. She drank\", \"choices\": [\" a cold glass of water.\", "
               "\" a big box of crayons.\"], \"label\": 0}\n\n"
               "{\"context\": \"Tom fell and hurt his knee. He began to\", \"choices\": [\" cry.\", \" fly.\", "
               "\" sing.\"], \"label\": 0}\n");
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s eval --choices %s -m %s --json --plot %s.svg 2>/dev/null", TUTTI_CLI, items,
             shared_path("models/stories260K.gguf"), items);
    int st;
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "members"), 0);
    cJSON *en = cJSON_GetObjectItem(j, "ensemble");
    assert_non_null(cJSON_GetObjectItem(m0, "acc"));
    assert_non_null(cJSON_GetObjectItem(m0, "acc_norm"));
    assert_non_null(cJSON_GetObjectItem(en, "acc"));
    assert_int_equal(cJSON_GetObjectItem(j, "items")->valueint, 2);
    /* one member in TOKEN alignment: the ensemble is the member */
    assert_true(cJSON_GetObjectItem(m0, "acc")->valuedouble == cJSON_GetObjectItem(en, "acc")->valuedouble);
    cJSON_Delete(j);
    free(out);
    char svg_path[64];
    snprintf(svg_path, sizeof svg_path, "%s.svg", items);
    size_t len;
    char *svg = read_file(svg_path, &len);
    assert_non_null(svg);
    assert_non_null(strstr(svg, "<svg"));
    assert_non_null(strstr(svg, "</svg>"));
    assert_non_null(strstr(svg, "stories260K.gguf"));
    assert_non_null(strstr(svg, "acc_norm"));
    free(svg);
    unlink(svg_path);
    /* a malformed line: exit 1 naming the line */
    f = fopen(items, "w");
    fprintf(f, "{\"context\": \"x\", \"choices\": [\" a\", \" b\"], \"label\": 0}\n{\"context\": 3}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s eval --choices %s -m %s 2>&1", TUTTI_CLI, items,
             shared_path("models/stories260K.gguf"));
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "line 2"));
    free(out);
    unlink(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ll_is_direct_computation),      cmocka_unit_test(test_branches_equal_whole_texts),
        shared_unit_test(test_posterior_is_sequence_mixture), shared_unit_test(test_route_and_adapt_refused),
        cmocka_unit_test(test_cloze_members_match_llamacpp),  cmocka_unit_test(test_bad_items),
        cmocka_unit_test(test_cli_choices_json_plot),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
