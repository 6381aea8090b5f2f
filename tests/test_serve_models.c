/* `tutti serve --models-dir` (issue 24): models on demand.  Three GGUF
 * files under a folder (one in a subfolder), at most two loaded: each
 * loaded at its first request, the least recently used idle one unloaded,
 * /v1/models saying which are loaded, and every answer what `tutti
 * generate` (`tutti run` for an ensemble of two of them) gives for the same
 * file, greedy; a model in use by a running request or an ensemble is never
 * unloaded under it (the answers stay right while the limit is exceeded). */
#include "test_common.h"
#include "serve_common.h"
#include "tutti.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_M 3
static const char *const NAMES[N_M] = {"babyllama-tok361", "stories260K", "stories260K-dreams"};
static const char *const FILES[N_M] = {M_B361, M_STORIES, M_DREAMS};
static char g_dir[256];

/* the folder: links to the shared models, babyllama in a subfolder */
static void make_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tutti_test_models_%d", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s/sub && ln -s %s %s/sub/ && ln -s %s %s/ && ln -s %s %s/ && "
             "echo not a model > %s/notes.txt",
             g_dir, g_dir, shared_path(M_B361), g_dir, shared_path(M_STORIES), g_dir, shared_path(M_DREAMS), g_dir,
             g_dir);
    int rc;
    free(run_cmd(cmd, &rc));
    assert_int_equal(rc, 0);
}

static void remove_dir(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    int rc;
    free(run_cmd(cmd, &rc));
}

/* each name's "loaded" in /v1/models (1/0), -1 when not listed */
static int loaded(server *s, const char *name) {
    int st;
    char *body = http(s, "GET", "/v1/models", NULL, NULL, &st);
    assert_int_equal(st, 200);
    cJSON *j = cJSON_Parse(body);
    assert_non_null(j);
    free(body);
    int r = -1;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "data")) {
        if (strcmp(jstr(m, "id"), name)) continue;
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tutti"), "loaded");
        assert_true(cJSON_IsBool(l));
        r = cJSON_IsTrue(l);
        assert_string_equal(jstr(m, "status.value"), r ? "loaded" : "unloaded");
    }
    cJSON_Delete(j);
    return r;
}

static int n_loaded(server *s) {
    int n = 0;
    for (int k = 0; k < N_M; k++) n += loaded(s, NAMES[k]) == 1;
    return n;
}

/* an unloading frees the model once its last holder (a slot's ensemble,
 * dropped between jobs) lets go: polled, not timed */
static void wait_loaded_at_most(server *s, int n) {
    for (int t = 0; t < 200 && n_loaded(s) > n; t++) sleep_ms(50);
    assert_true(n_loaded(s) <= n);
}

static char *g_want[N_M], *g_want_ens;

static char *body_for(const char *model) {
    static char b[1024];
    snprintf(b, sizeof b, "{\"model\":\"%s\",\"prompt\":\"" PROMPT "\",\"max_tokens\":30,\"temperature\":0}", model);
    return b;
}

#define ENS_BODY                                                                         \
    "{\"model\":\"pair\",\"prompt\":\"" PROMPT "\",\"max_tokens\":30,\"temperature\":0," \
    "\"tutti\":{\"members\":[\"stories260K\",\"stories260K-dreams\"]}}"

static void ask(server *s, int k) {
    char *got = completion_text(s, body_for(NAMES[k]));
    expect_same(NAMES[k], g_want[k], got);
    free(got);
}

static void references(void) {
    char args[2048];
    for (int k = 0; k < N_M; k++) {
        snprintf(args, sizeof args, "generate -m %s -p '" PROMPT "' -n 30 --temp 0 -t 1", shared_path(FILES[k]));
        g_want[k] = cli(args);
    }
    snprintf(args, sizeof args, "run -m %s -m %s -p '" PROMPT "' -n 30 --temp 0 -t 1", shared_path(M_STORIES),
             shared_path(M_DREAMS));
    g_want_ens = cli(args);
}

/* one at a time: loaded at the first request, least recently used out */
static void test_lru(void **state) {
    (void)state;
    require_shared();
    make_dir();
    references();
    server s;
    char args[1024];
    snprintf(args, sizeof args, "--models-dir %s --models-max 2 --parallel 2 -t 1", g_dir);
    start(&s, "", args, true);
    for (int k = 0; k < N_M; k++) assert_int_equal(loaded(&s, NAMES[k]), 0);
    assert_int_equal(loaded(&s, "notes"), -1);
    ask(&s, 0);
    assert_int_equal(loaded(&s, NAMES[0]), 1);
    ask(&s, 1);
    assert_int_equal(n_loaded(&s), 2);
    ask(&s, 2); /* the third: the least recently used (babyllama) goes */
    wait_loaded_at_most(&s, 2);
    assert_int_equal(loaded(&s, NAMES[0]), 0);
    assert_int_equal(loaded(&s, NAMES[2]), 1);
    ask(&s, 0); /* loaded again, answers the same; stories260K is the oldest now */
    wait_loaded_at_most(&s, 2);
    assert_int_equal(loaded(&s, NAMES[1]), 0);
    assert_int_equal(loaded(&s, NAMES[0]), 1);
    /* an inline ensemble of two on-demand models, also after they were unloaded */
    for (int rep = 0; rep < 2; rep++) {
        char *got = completion_text(&s, ENS_BODY);
        expect_same("inline ensemble", g_want_ens, got);
        free(got);
        assert_int_equal(loaded(&s, NAMES[1]), 1);
        assert_int_equal(loaded(&s, NAMES[2]), 1);
        ask(&s, 0);
        wait_loaded_at_most(&s, 2);
    }
    /* the llama-server endpoints load on demand too */
    int st;
    char *b = http(&s, "POST", "/tokenize", "{\"model\":\"stories260K\",\"content\":\"Once\"}", NULL, &st);
    assert_int_equal(st, 200);
    assert_non_null(strstr(b, "\"tokens\""));
    free(b);
    size_t len;
    char *log = read_file(s.log, &len);
    assert_non_null(log);
    assert_non_null(strstr(log, "loading babyllama-tok361 (on demand)"));
    assert_non_null(strstr(log, "unloading babyllama-tok361"));
    free(log);
    assert_int_equal(stop(&s), 0);
}

/* --models-max 1 while an ensemble of two and a third model answer at once
 * (slowed down so that they overlap): nothing in use is unloaded, every
 * answer stays right, and once they are done one model is left */
static void test_in_use(void **state) {
    (void)state;
    require_shared();
    server s;
    char args[1024];
    snprintf(args, sizeof args, "--models-dir %s --models-max 1 --parallel 3 -t 1", g_dir);
    start(&s, "TUTTI_SERVE_TEST_PIECE_DELAY_MS=5", args, true);
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "cd %s && for i in 0 1 2; do curl -sS -o out_$i -H 'Content-Type: application/json' --data-binary @body_$i "
        "http://127.0.0.1:%d/v1/completions & done; wait",
        g_dir, s.port);
    char bodies[3][1024];
    snprintf(bodies[0], sizeof bodies[0], "%s", ENS_BODY);
    snprintf(bodies[1], sizeof bodies[1], "%s", body_for(NAMES[0]));
    snprintf(bodies[2], sizeof bodies[2], "%s", body_for(NAMES[1]));
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 3; i++) {
            char p[512];
            snprintf(p, sizeof p, "%s/body_%d", g_dir, i);
            FILE *f = fopen(p, "w");
            assert_non_null(f);
            fputs(bodies[i], f);
            fclose(f);
        }
        int rc;
        free(run_cmd(cmd, &rc));
        const char *want[3] = {g_want_ens, g_want[0], g_want[1]};
        for (int i = 0; i < 3; i++) {
            char p[512];
            snprintf(p, sizeof p, "%s/out_%d", g_dir, i);
            size_t len;
            char *o = read_file(p, &len);
            assert_non_null(o);
            cJSON *j = cJSON_Parse(o);
            if (!j || !cJSON_GetObjectItemCaseSensitive(j, "choices")) fail_msg("request %d: %s", i, o);
            expect_same(i ? NAMES[i - 1] : "ensemble", want[i], jstr(j, "choices.0.text"));
            cJSON_Delete(j);
            free(o);
        }
        wait_loaded_at_most(&s, 1);
    }
    assert_int_equal(stop(&s), 0);
    remove_dir();
    for (int k = 0; k < N_M; k++) free(g_want[k]);
    free(g_want_ens);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_in_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
