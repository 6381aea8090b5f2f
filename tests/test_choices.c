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

/* Σ log p(token_k | tokens_<k) over the tokenization of text from BOS, in
 * double, straight from the logits of one forward pass. */
static double direct_ll(const char *model_path, const char *text) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(model_path, &mp);
    assert_non_null(m);
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t ids[1024];
    int32_t n = tutti_tokenize(v, text, strlen(text), tutti_vocab_add_bos(v), false, ids, 1024);
    assert_true(n >= 1);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    tutti_session *s = tutti_session_new(m, &sp);
    int32_t V = tutti_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    assert_int_equal(tutti_session_eval(s, ids, n, logits), 0);
    double ll = 0;
    for (int32_t k = 0; k + 1 < n; k++) {
        const float *row = logits + (size_t)k * (size_t)V;
        double mx = -INFINITY, z = 0;
        for (int32_t t = 0; t < V; t++) mx = row[t] > mx ? row[t] : mx;
        for (int32_t t = 0; t < V; t++) z += exp((double)row[t] - mx);
        ll += (double)row[ids[k + 1]] - mx - log(z);
    }
    free(logits);
    tutti_session_free(s);
    tutti_model_free(m);
    return ll;
}

static void test_ll_is_direct_computation(void **state) {
    (void)state;
    require_shared();
    const char *rel[] = {"models/stories260K.gguf"};
    tutti_ensemble *e = make_ens(rel, 1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    const char *choices[] = {" a cold glass of water.", " a big box of crayons.", " the moon"};
    tutti_choice_item it = {"Lily was thirsty. She drank", choices, 3, 0};
    double ll[TUTTI_MAX_CHOICES * 2];
    tutti_choices_result r;
    assert_int_equal(tutti_ensemble_eval_choices(e, &it, 1, &r, ll, NULL, NULL), 0);
    double ctx = direct_ll(shared_path(rel[0]), it.context);
    for (int c = 0; c < 3; c++) {
        char full[256];
        snprintf(full, sizeof full, "%s%s", it.context, choices[c]);
        double want = direct_ll(shared_path(rel[0]), full) - ctx;
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
    require_shared();
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
    require_shared();
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
        printf("ensemble (%s, byte): acc %.3f acc_norm %.3f\n", tutti_rule_name(rules[ri]), r.ensemble_acc,
               r.ensemble_acc_norm);
        assert_true(r.ensemble_acc > 0.25 && r.ensemble_acc_norm > 0.25); /* above chance */
        tutti_ensemble_free(e);
    }
    cloze_free(&c);
}

static void test_bad_items(void **state) {
    (void)state;
    require_shared();
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
    require_shared();
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
    snprintf(cmd, sizeof cmd, "%s eval --choices %s -m %s 2>&1", TUTTI_CLI, items, shared_path("models/stories260K.gguf"));
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "line 2"));
    free(out);
    unlink(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ll_is_direct_computation),
        cmocka_unit_test(test_branches_equal_whole_texts),
        cmocka_unit_test(test_cloze_members_match_llamacpp),
        cmocka_unit_test(test_bad_items),
        cmocka_unit_test(test_cli_choices_json_plot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
