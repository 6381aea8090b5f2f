/* `tutti serve` at scale (issue 24): continuous batching across requests
 * (each request's text and logprobs the same as when it runs alone, the
 * slots sharing forward passes).
 *
 * References: a request's answer alone on the server (one slot busy, so
 * every pass is its own) against its answer while three others run; the
 * one-request answers themselves equal `tutti generate`/`tutti run`
 * (test_serve.c). */
#include "test_common.h"
#include "serve_common.h"
#include "tutti.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Posts bodies[0..n) to path at once (curl processes in the background)
 * and returns each answer's body (malloc'd; status 200 checked). */
static void post_concurrently(server *s, const char *path, const char *const *bodies, int n, char **out) {
    char cmd[16384];
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        char bf[300];
        snprintf(bf, sizeof bf, "%s/cbody_%d", s->dir, i);
        FILE *f = fopen(bf, "wb");
        assert_non_null(f);
        fputs(bodies[i], f);
        fclose(f);
        o += (size_t)snprintf(cmd + o, sizeof cmd - o,
                              "curl -sS -o %s/cout_%d -w '%%{http_code}\\n' -H 'Content-Type: application/json' "
                              "--data-binary @%s 'http://127.0.0.1:%d%s' > %s/ccode_%d & ",
                              s->dir, i, bf, s->port, path, s->dir, i);
    }
    snprintf(cmd + o, sizeof cmd - o, "wait");
    int rc;
    free(run_cmd(cmd, &rc));
    for (int i = 0; i < n; i++) {
        char f[300];
        size_t len;
        snprintf(f, sizeof f, "%s/ccode_%d", s->dir, i);
        char *code = read_file(f, &len);
        snprintf(f, sizeof f, "%s/cout_%d", s->dir, i);
        out[i] = read_file(f, &len);
        if (!code || atoi(code) != 200 || !out[i]) fail_msg("request %d: status %s: %s", i, code, out[i]);
        free(code);
    }
}

/* The part of an answer that must not depend on other requests: every
 * choice's text, finish_reason and logprobs (ids and times differ). */
static char *choices_of(const char *body) {
    cJSON *j = cJSON_Parse(body);
    if (!j) fail_msg("not JSON: %s", body);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "choices");
    assert_non_null(c);
    char *r = cJSON_PrintUnformatted(c);
    cJSON_Delete(j);
    return r;
}

/* ---- continuous batching ---- */

#define N_REQ 6

/* Each request alone, then all at once: the same choices; the slots share
 * passes (single model: passes per generated token near 1/4). */
static void test_batching_identical(void **state) {
    (void)state;
    server s;
    char args[4096], cfg[512];
    snprintf(cfg, sizeof cfg, "/tmp/tutti_test_scale_cfg_%d.json", (int)getpid());
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "{\"models\": [{\"path\": \"%s\", \"name\": \"dreams\"}],\n"
               " \"ensembles\": [{\"name\": \"tok\", \"members\": [\"stories260K\", \"dreams\"], \"weights\": [0.6, 0.4]},\n"
               "   {\"name\": \"bytes\", \"members\": [\"stories260K\", \"babyllama-tok361\"], \"align\": \"byte\"},\n"
               "   {\"name\": \"spans\", \"members\": [\"stories260K\", \"babyllama-tok361\"], \"align\": \"span\"}]}\n",
            shared_path(M_DREAMS));
    fclose(f);
    snprintf(args, sizeof args, "-m %s -m %s --config %s --parallel %d -t 1 -ub 32", shared_path(M_STORIES),
             shared_path(M_B361), cfg, N_REQ);
    start(&s, "TUTTI_SERVE_TEST_START_TOGETHER=" "6", args, true);
    /* a prompt of ~250 tokens goes in 32-token chunks beside the others' tokens */
    char long_prompt[2048] = "";
    for (int k = 0; k < 12; k++) strcat(long_prompt, "Tom and Lily went to the park to play. ");
    char lp_body[4096];
    snprintf(lp_body, sizeof lp_body, "{\"model\":\"stories260K\",\"prompt\":\"%s\",\"max_tokens\":24,\"seed\":1}",
             long_prompt);
    const char *bodies[N_REQ] = {
        "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"seed\":3,\"temperature\":0.8,"
        "\"logprobs\":2}",
        "{\"model\":\"stories260K\",\"prompt\":\"The little dog\",\"max_tokens\":60,\"temperature\":0}",
        "{\"model\":\"tok\",\"prompt\":\"One day\",\"max_tokens\":50,\"seed\":7,\"logprobs\":1}",
        "{\"model\":\"bytes\",\"prompt\":\"Lily saw\",\"max_tokens\":30,\"seed\":9,\"logprobs\":1}",
        "{\"model\":\"spans\",\"prompt\":\"Tim had\",\"max_tokens\":20,\"seed\":4}",
        lp_body,
    };
    char *alone[N_REQ], *together[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        int st;
        char *b = http(&s, "POST", "/v1/completions", bodies[i], NULL, &st);
        if (st != 200) fail_msg("%s: %d %s", bodies[i], st, b);
        alone[i] = choices_of(b);
        free(b);
    }
    /* the first requests ran while the others' slots waited to start
     * together; from now on every job starts at once */
    double p0 = metric(&s, "tutti_batch_passes_total");
    char *out[N_REQ];
    post_concurrently(&s, "/v1/completions", bodies, N_REQ, out);
    for (int i = 0; i < N_REQ; i++) {
        together[i] = choices_of(out[i]);
        if (strcmp(alone[i], together[i]))
            fail_msg("request %d differs when batched with the others:\n  alone:    %s\n  together: %s", i, alone[i],
                     together[i]);
        free(out[i]);
    }
    double p1 = metric(&s, "tutti_batch_passes_total");
    assert_true(p1 > p0);
    /* passes per generated token: four single-model requests of 100 tokens
     * at once share their passes (alone: one pass per token) */
    const char *same[4] = {
        "{\"model\":\"stories260K\",\"prompt\":\"Once\",\"max_tokens\":100,\"temperature\":0,\"ignore_eos\":false}",
        "{\"model\":\"stories260K\",\"prompt\":\"A cat\",\"max_tokens\":100,\"seed\":1}",
        "{\"model\":\"stories260K\",\"prompt\":\"The sun\",\"max_tokens\":100,\"seed\":2}",
        "{\"model\":\"stories260K\",\"prompt\":\"Ben\",\"max_tokens\":100,\"seed\":3}",
    };
    double g0 = metric(&s, "tutti_generated_tokens_total");
    p0 = metric(&s, "tutti_batch_passes_total");
    post_concurrently(&s, "/v1/completions", same, 4, out); /* 4 of the 6 slots: the start waits 10 s at most */
    for (int i = 0; i < 4; i++) free(out[i]);
    double g1 = metric(&s, "tutti_generated_tokens_total");
    p1 = metric(&s, "tutti_batch_passes_total");
    print_message("4 clients: %.0f passes for %.0f generated tokens (%.2f per token)\n", p1 - p0, g1 - g0,
                  (p1 - p0) / (g1 - g0));
    assert_true(g1 - g0 >= 100);
    assert_true((p1 - p0) / (g1 - g0) < 0.5);
    for (int i = 0; i < N_REQ; i++) free(alone[i]), free(together[i]);
    assert_int_equal(stop(&s), 0);
    unlink(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batching_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
