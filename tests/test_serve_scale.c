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
    require_shared();
    server s;
    char args[4096], cfg[512];
    snprintf(cfg, sizeof cfg, "/tmp/tutti_test_scale_cfg_%d.json", (int)getpid());
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(
        f,
        "{\"models\": [{\"path\": \"%s\", \"name\": \"dreams\"}],\n"
        " \"ensembles\": [{\"name\": \"tok\", \"members\": [\"stories260K\", \"dreams\"], \"weights\": [0.6, 0.4]},\n"
        "   {\"name\": \"bytes\", \"members\": [\"stories260K\", \"babyllama-tok361\"], \"align\": \"byte\"},\n"
        "   {\"name\": \"spans\", \"members\": [\"stories260K\", \"babyllama-tok361\"], \"align\": \"span\"}]}\n",
        shared_path(M_DREAMS));
    fclose(f);
    snprintf(args, sizeof args, "-m %s -m %s --config %s --parallel %d -t 1 -ub 32", shared_path(M_STORIES),
             shared_path(M_B361), cfg, N_REQ);
    start(&s,
          "TUTTI_SERVE_TEST_START_TOGETHER="
          "6",
          args, true);
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

/* ---- echo with logprobs ---- */

/* the prompt ids and llama.cpp's logits of ../shared/ref/models/MODEL.pN */
static int32_t ref_prompt(const char *model, int p, int32_t *ids, int cap, float **logits, int32_t V) {
    char rel[256];
    snprintf(rel, sizeof rel, "ref/models/%s.p%d.jsonl", model, p);
    size_t len;
    char *js = read_file(shared_path(rel), &len);
    assert_non_null(js);
    int32_t n = 0;
    for (char *q = js; (q = strstr(q, "\"token\":")) && n < cap; q += 8) ids[n++] = (int32_t)strtol(q + 8, NULL, 10);
    free(js);
    snprintf(rel, sizeof rel, "ref/models/%s.p%d.logits.f32", model, p);
    *logits = (float *)read_file(shared_path(rel), &len);
    assert_non_null(*logits);
    assert_int_equal(len, sizeof(float) * (size_t)n * (size_t)V);
    return n;
}

/* log_softmax(row)[id] in double */
static double ref_lp(const float *row, int32_t V, int32_t id) {
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    for (int32_t i = 0; i < V; i++) z += exp((double)row[i] - mx);
    return (double)row[id] - mx - log(z);
}

static char *ids_json(const int32_t *ids, int32_t n) {
    char *b = malloc(16 * (size_t)n + 4);
    size_t o = (size_t)sprintf(b, "[");
    for (int32_t i = 0; i < n; i++) o += (size_t)sprintf(b + o, "%s%d", i ? "," : "", ids[i]);
    sprintf(b + o, "]");
    return b;
}

/* all n rows of logits of ids under the model at path (the C API) */
static float *api_logits(const char *path, const int32_t *ids, int32_t n) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(path, &mp);
    assert_non_null(m);
    tutti_session_params sp = {.n_ctx = 512, .n_threads = 1};
    tutti_session *se = tutti_session_new(m, &sp);
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)tutti_model_n_vocab(m));
    assert_int_equal(tutti_session_eval(se, ids, n, out), 0);
    tutti_session_free(se);
    tutti_model_free(m);
    return out;
}

static const cJSON *choice_lp(const cJSON *j, int c, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), c),
                                         "logprobs"),
        key);
}

/* ensembles: token alignment against the members' mixed softmax (C API
 * logits, uniform weights); byte alignment: the characters of a generated
 * text scored by echo as generation scored them, and a token-id prompt
 * regrouped into one entry per token whose sum is the characters' */
static void echo_ensembles(server *s) {
    int32_t ids[64];
    float *ref;
    int32_t n = ref_prompt("stories260K", 2, ids, 64, &ref, 512);
    free(ref);
    char *idj = ids_json(ids, n), body[8192];
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"max_tokens\":0,\"echo\":true,\"logprobs\":1,"
             "\"tutti\":{\"members\":[\"stories260K\",\"stories260K-dreams\"]}}",
             idj);
    cJSON *j = post_json(s, "/v1/completions", body, 200);
    float *a = api_logits(shared_path(M_STORIES), ids, n), *b = api_logits(shared_path(M_DREAMS), ids, n);
    const cJSON *tl = choice_lp(j, 0, "token_logprobs");
    assert_int_equal(cJSON_GetArraySize(tl), n);
    double worst = 0;
    for (int32_t k = 1; k < n; k++) {
        double la = ref_lp(a + (size_t)(k - 1) * 512, 512, ids[k]), lb = ref_lp(b + (size_t)(k - 1) * 512, 512, ids[k]);
        double want = log(0.5 * exp(la) + 0.5 * exp(lb)), got = cJSON_GetArrayItem(tl, k)->valuedouble;
        if (fabs(got - want) > worst) worst = fabs(got - want);
    }
    print_message("token-aligned ensemble: max |logprob - mix of the members| %.2e\n", worst);
    assert_true(worst < 1e-4);
    free(a), free(b);
    cJSON_Delete(j);
    /* byte alignment: generate, then echo the prompt + the generated text */
    const char *ens = "\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],\"align\":\"byte\"}";
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":1,%s}",
             ens);
    j = post_json(s, "/v1/completions", body, 200);
    char gen[512];
    snprintf(gen, sizeof gen, "%s", jstr(j, "choices.0.text"));
    cJSON *gl = cJSON_Duplicate(choice_lp(j, 0, "token_logprobs"), true);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon%s\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1,%s}", gen,
             ens);
    j = post_json(s, "/v1/completions", body, 200);
    tl = choice_lp(j, 0, "token_logprobs");
    int n_gen = cJSON_GetArraySize(gl), n_all = cJSON_GetArraySize(tl);
    assert_int_equal(n_all, (int)strlen("Once upon") + n_gen); /* ASCII: one entry per byte */
    worst = 0;
    double chars = 0;
    for (int k = 0; k < n_all; k++)
        chars += cJSON_GetArrayItem(tl, k)->valuedouble; /* byte alignment: the first character too */
    for (int k = 0; k < n_gen; k++) {
        double d =
            fabs(cJSON_GetArrayItem(tl, n_all - n_gen + k)->valuedouble - cJSON_GetArrayItem(gl, k)->valuedouble);
        worst = d > worst ? d : worst;
    }
    print_message("byte-aligned ensemble: max |echo - generation| over %d characters %.2e\n", n_gen, worst);
    assert_true(worst < 1e-3);
    cJSON_Delete(gl);
    cJSON_Delete(j);
    /* the same text as member 1's token ids: one entry per token */
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"Once upon%s\",\"max_tokens\":0,\"echo\":true,"
             "\"logprobs\":0}",
             gen);
    j = post_json(s, "/v1/completions", body, 200);
    int n_tok = cJSON_GetArraySize(choice_lp(j, 0, "tokens"));
    cJSON_Delete(j);
    int32_t tid[64];
    tutti_vocab *v = tutti_vocab_load(shared_path(M_STORIES));
    char txt[600];
    snprintf(txt, sizeof txt, "Once upon%s", gen);
    int32_t nt = tutti_tokenize(v, txt, strlen(txt), true, false, tid, 64);
    tutti_vocab_free(v);
    assert_int_equal(nt, n_tok);
    char *tj = ids_json(tid, nt);
    snprintf(body, sizeof body, "{\"prompt\":%s,\"max_tokens\":0,\"echo\":true,\"logprobs\":1,%s}", tj, ens);
    j = post_json(s, "/v1/completions", body, 200);
    tl = choice_lp(j, 0, "token_logprobs");
    assert_int_equal(cJSON_GetArraySize(tl), nt);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
    double toks = 0;
    for (int k = 1; k < nt; k++) toks += cJSON_GetArrayItem(tl, k)->valuedouble;
    print_message("byte-aligned ensemble, %d token ids: sum %.5f, characters' sum %.5f\n", nt, toks, chars);
    assert_true(fabs(toks - chars) < 1e-3);
    assert_string_equal(jstr(j, "choices.0.text"), txt);
    cJSON_Delete(j);
    free(tj), free(idj);
}

/* one model: the echoed prompt's token logprobs are llama.cpp's log-softmax
 * (within 0.02), the first null; as ids (lm-eval) and as text (BOS added:
 * the same tokens); an lm-eval loglikelihood request (a batch of
 * context+continuation id lists, max_tokens 1, echo, logprobs 1) gives
 * the continuation's sum */
static void test_echo_logprobs(void **state) {
    (void)state;
    require_shared();
    server s;
    char args[4096];
    snprintf(args, sizeof args, "-m %s -m %s -m %s -m %s --parallel 2 -t 1", shared_path(M_STORIES),
             shared_path(M_DREAMS), shared_path(M_B361), shared_path(M_TINY));
    start(&s, "", args, true);
    const struct {
        const char *name;
        int32_t V;
        int p;
    } cases[] = {{"stories260K", 512, 1}, {"stories260K", 512, 2}, {"TinyStories-656K-Q8_0", 2048, 3}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const char *name = cases[ci].name;
        const int32_t V = cases[ci].V;
        int p = cases[ci].p;
        int32_t ids[512];
        float *ref;
        int32_t n = ref_prompt(name, p, ids, 512, &ref, V);
        char *idj = ids_json(ids, n), body[16384];
        char ptxt[2048];
        snprintf(ptxt, sizeof ptxt, "ref/models/p%d.txt", p);
        size_t plen;
        char *prompt = read_file(shared_path(ptxt), &plen);
        for (int form = 0; form < 2; form++) {
            if (form == 0)
                snprintf(body, sizeof body,
                         "{\"model\":\"%s\",\"prompt\":%s,\"max_tokens\":0,\"echo\":true,\"logprobs\":1}", name, idj);
            else {
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "model", name);
                cJSON_AddStringToObject(b, "prompt", prompt);
                cJSON_AddNumberToObject(b, "max_tokens", 0);
                cJSON_AddTrueToObject(b, "echo");
                cJSON_AddNumberToObject(b, "logprobs", 3);
                char *t = cJSON_PrintUnformatted(b);
                snprintf(body, sizeof body, "%s", t);
                free(t);
                cJSON_Delete(b);
            }
            cJSON *j = post_json(&s, "/v1/completions", body, 200);
            const cJSON *lp = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs");
            const cJSON *tl = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
            const cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
            const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
            assert_int_equal(cJSON_GetArraySize(tl), n);
            assert_true(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
            assert_true(cJSON_IsNull(cJSON_GetArrayItem(tops, 0)));
            double worst = 0;
            char cat[4096] = "";
            for (int32_t k = 0; k < n; k++) {
                strncat(cat, cJSON_GetArrayItem(toks, k)->valuestring, sizeof cat - strlen(cat) - 1);
                if (k == 0) continue;
                double got = cJSON_GetArrayItem(tl, k)->valuedouble,
                       want = ref_lp(ref + (size_t)(k - 1) * V, V, ids[k]);
                if (fabs(got - want) > worst) worst = fabs(got - want);
                /* the alternatives' best is at least the token's own */
                double best = -INFINITY;
                const cJSON *it;
                cJSON_ArrayForEach(it, cJSON_GetArrayItem(tops, k)) best =
                    it->valuedouble > best ? it->valuedouble : best;
                assert_true(best >= got - 1e-9);
            }
            print_message("%s p%d %s: %d tokens, max |logprob - llama.cpp| %.5f\n", name, p, form ? "text" : "ids", n,
                          worst);
            assert_true(worst < 0.02);
            /* the tokens spell the echoed text, which is the prompt */
            assert_string_equal(cat, jstr(j, "choices.0.text"));
            if (form == 1) assert_string_equal(jstr(j, "choices.0.text"), prompt);
            cJSON_Delete(j);
        }
        /* lm-eval: context = ids[0..c), continuation = ids[c..n) */
        int32_t c = n / 2;
        char *ctx = ids_json(ids, c);
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":[%s,%s],\"max_tokens\":1,\"temperature\":0,\"logprobs\":1,"
                 "\"seed\":1234,\"echo\":true}",
                 name, idj, ctx);
        cJSON *j = post_json(&s, "/v1/completions", body, 200);
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0),
                                             "logprobs"),
            "token_logprobs");
        assert_int_equal(cJSON_GetArraySize(tl), n + 1); /* the prompt and the one generated token */
        double got = 0, want = 0;
        for (int32_t k = c; k < n; k++)
            got += cJSON_GetArrayItem(tl, k)->valuedouble, want += ref_lp(ref + (size_t)(k - 1) * V, V, ids[k]);
        print_message("p%d loglikelihood of the continuation: %.5f (llama.cpp %.5f)\n", p, got, want);
        assert_true(fabs(got - want) < 0.02 * (n - c));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(
                                 cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 1), "logprobs"),
                             "token_logprobs")),
                         c + 1);
        cJSON_Delete(j);
        free(ctx), free(idj), free(ref), free(prompt);
    }
    echo_ensembles(&s);
    assert_int_equal(stop(&s), 0);
}

/* The JSON a Node script of tests/serve prints: node SCRIPT URL ARGS
 * (fails when it fails or prints something else). */
static cJSON *node_json(const server *s, const char *script, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "node %s/tests/serve/%s http://127.0.0.1:%d %s", TUTTI_SOURCE_DIR, script, s->port, args);
    int rc;
    char *out = run_cmd(cmd, &rc);
    if (rc != 0) fail_msg("%s failed (%d): %s", cmd, rc, out ? out : "");
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("%s printed: %s", script, out);
    free(out);
    return j;
}

/* ---- /v1/embeddings ---- */

/* cosine of a JSON array of numbers with another */
static double cosine(const cJSON *a, const cJSON *b) {
    double ab = 0, aa = 0, bb = 0;
    int n = cJSON_GetArraySize(a);
    assert_int_equal(n, cJSON_GetArraySize(b));
    for (int i = 0; i < n; i++) {
        double x = cJSON_GetArrayItem(a, i)->valuedouble, y = cJSON_GetArrayItem(b, i)->valuedouble;
        ab += x * y, aa += x * x, bb += y * y;
    }
    return ab / sqrt(aa * bb);
}

/* the worst cosine of got's vectors (data[i].embedding, or arrays) with want's */
static double worst_cosine(const cJSON *got, const cJSON *want) {
    assert_int_equal(cJSON_GetArraySize(got), cJSON_GetArraySize(want));
    double worst = 1;
    for (int i = 0; i < cJSON_GetArraySize(want); i++) {
        const cJSON *g = cJSON_GetArrayItem(got, i);
        if (cJSON_IsObject(g)) {
            assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(g, "index")->valuedouble, i);
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(g, "object")->valuestring, "embedding");
            g = cJSON_GetObjectItemCaseSensitive(g, "embedding");
        }
        double c = cosine(g, cJSON_GetArrayItem(want, i));
        worst = c < worst ? c : worst;
        double nn = 0;
        for (int k = 0; k < cJSON_GetArraySize(g); k++) nn += pow(cJSON_GetArrayItem(g, k)->valuedouble, 2);
        assert_true(fabs(sqrt(nn) - 1) < 1e-4); /* normalised as llama-server's --embd-normalize 2 */
    }
    return worst;
}

/* tutti serve's vectors against llama-server --embeddings' (embd_refs.json,
 * made by tests/data/serve/make_embd_refs.sh): strings and token ids,
 * mean / cls / last pooling, batched and not, one -ub 16 micro-batch and
 * several; the openai npm package's base64 answer; the refusals. */
static void test_embeddings(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *txt = read_file(TUTTI_SOURCE_DIR "/tests/data/serve/embd_refs.json", &len);
    assert_non_null(txt);
    cJSON *refs = cJSON_Parse(txt);
    free(txt);
    assert_non_null(refs);
    const char *poolings[] = {"mean", "cls", "last"};
    for (int pi = 0; pi < 3; pi++) {
        server s;
        char args[4096];
        snprintf(args, sizeof args, "-m %s -m %s --parallel 2 -t 1 -ub 16 %s%s", shared_path(M_STORIES),
                 shared_path(M_TINY), pi ? "--pooling " : "", pi ? poolings[pi] : "");
        if (pi == 1) strcat(args, " -nocb"); /* the session's own passes, not tutti_batch's */
        start(&s, "", args, true);
        const cJSON *c;
        cJSON_ArrayForEach(c, refs) {
            if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "pooling")->valuestring, poolings[pi])) continue;
            const char *model = cJSON_GetObjectItemCaseSensitive(c, "model")->valuestring;
            const cJSON *r;
            cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(c, "requests")) {
                const cJSON *input = cJSON_GetObjectItemCaseSensitive(r, "input");
                const cJSON *want = cJSON_GetObjectItemCaseSensitive(r, "embeddings");
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "model", model);
                cJSON_AddItemToObject(b, "input", cJSON_Duplicate(input, true));
                char *body = cJSON_PrintUnformatted(b);
                cJSON_Delete(b);
                cJSON *j = post_json(&s, "/v1/embeddings", body, 200);
                free(body);
                assert_string_equal(jstr(j, "object"), "list");
                assert_string_equal(jstr(j, "model"), model);
                assert_int_equal((int)jnum(j, "usage.prompt_tokens"),
                                 (int)cJSON_GetObjectItemCaseSensitive(r, "prompt_tokens")->valuedouble);
                double w = worst_cosine(cJSON_GetObjectItemCaseSensitive(j, "data"), want);
                print_message("%s %s pooling, %d inputs: worst cosine with llama-server %.7f\n", model, poolings[pi],
                              cJSON_GetArraySize(want), w);
                assert_true(w > 1 - 1e-3);
                cJSON_Delete(j);
                /* one input alone (a string, or one list of ids): its vector */
                cJSON *one = cJSON_CreateObject();
                cJSON_AddStringToObject(one, "model", model);
                cJSON_AddItemToObject(one, "input", cJSON_Duplicate(cJSON_GetArrayItem(input, 1), true));
                body = cJSON_PrintUnformatted(one);
                cJSON_Delete(one);
                j = post_json(&s, "/v1/embeddings", body, 200);
                free(body);
                assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "data")), 1);
                assert_true(cosine(cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0), "embedding"),
                                   cJSON_GetArrayItem(want, 1)) > 1 - 1e-3);
                cJSON_Delete(j);
            }
            /* the openai npm package (base64 by default, and float) */
            if (pi == 0 && !strcmp(model, "stories260K")) {
                const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "requests"), 0);
                char *in = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r0, "input")), na[4096];
                snprintf(na, sizeof na, "%s '%s'", model, in);
                free(in);
                cJSON *j = node_json(&s, "openai_embed.mjs", na);
                const cJSON *want = cJSON_GetObjectItemCaseSensitive(r0, "embeddings");
                double wb = worst_cosine(cJSON_GetObjectItemCaseSensitive(j, "base64"), want);
                double wf = worst_cosine(cJSON_GetObjectItemCaseSensitive(j, "float"), want);
                print_message("openai npm: worst cosine base64 %.7f, float %.7f\n", wb, wf);
                assert_true(wb > 1 - 1e-3 && wf > 1 - 1e-3);
                /* base64 carries the same float32 values */
                const cJSON *vb = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "base64"), 0),
                            *vf = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "float"), 0);
                for (int k = 0; k < cJSON_GetArraySize(vf); k++)
                    assert_true(fabs(cJSON_GetArrayItem(vb, k)->valuedouble - cJSON_GetArrayItem(vf, k)->valuedouble) <
                                1e-6);
                cJSON_Delete(j);
            }
        }
        if (pi == 0) {
            const char *P = "/v1/embeddings";
            expect_error(&s, "POST", P, "{\"model\":\"default\",\"input\":\"a\"}", NULL, 400, "ensemble", "model",
                         NULL);
            expect_error(&s, "POST", P, "{\"model\":\"nope\",\"input\":\"a\"}", NULL, 404, "does not exist", "model",
                         NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\"}", NULL, 400, "required", "input", NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":[]}", NULL, 400, "no tokens", "input",
                         NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":[3,512]}", NULL, 400, "not a token id",
                         "input", NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":[\"a\",[1,-2]]}", NULL, 400,
                         "not a token id", "input", NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":7}", NULL, 400, "must be", "input", NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":\"a\",\"encoding_format\":\"hex\"}", NULL,
                         400, "base64", "encoding_format", NULL);
            expect_error(&s, "POST", P, "{\"model\":\"stories260K\",\"input\":\"a\",\"dimensions\":8}", NULL, 400,
                         "64 dimensions", "dimensions", NULL);
            expect_error(&s, "GET", P, NULL, NULL, 405, "POST", NULL, NULL);
            assert_true(metric(&s, "tutti_requests_total{endpoint=\"/v1/embeddings\",code=\"200\"}") >= 4);
        }
        assert_int_equal(stop(&s), 0);
    }
    cJSON_Delete(refs);
}

/* ---- tools ---- */

static const char *const TOOL_SCHEMAS[2][2] = {
    {"get_weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Rome\","
                    "\"Oslo\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"city\","
                    "\"days\"],\"additionalProperties\":false}"},
    {"get_time", "{\"type\":\"object\",\"properties\":{\"zone\":{\"type\":\"string\",\"maxLength\":12}},\"required\":"
                 "[\"zone\"],\"additionalProperties\":false}"},
};

/* Every call of calls (OpenAI's, or the node script's {name, arguments})
 * names a tool, has a 9-character id, and its arguments validate against
 * the tool's schema (python3-jsonschema, the independent validator);
 * returns the number of calls. */
static int check_calls(const cJSON *calls, const char *dir) {
    char path[300];
    snprintf(path, sizeof path, "%s/calls.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputc('[', f);
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn ? fn : c, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn ? fn : c, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        assert_true(cJSON_IsString(name) && cJSON_IsString(args) && cJSON_IsString(id));
        assert_int_equal(strlen(id->valuestring), 9);
        const char *schema = NULL;
        for (int k = 0; k < 2; k++)
            if (!strcmp(TOOL_SCHEMAS[k][0], name->valuestring)) schema = TOOL_SCHEMAS[k][1];
        if (!schema) fail_msg("a call of an unknown function '%s'", name->valuestring);
        cJSON *a = cJSON_CreateString(args->valuestring);
        char *as = cJSON_PrintUnformatted(a);
        fprintf(f, "%s[%s,%s]", n++ ? "," : "", schema, as);
        free(as);
        cJSON_Delete(a);
    }
    fputc(']', f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys,jsonschema\n"
             "for s,a in json.load(open(sys.argv[1])): jsonschema.validate(json.loads(a), s)' %s 2>&1",
             path);
    int rc;
    char *out = run_cmd(cmd, &rc);
    if (rc != 0) fail_msg("arguments do not match their schema: %s", out);
    free(out);
    return n;
}

static const cJSON *case_of(const cJSON *j, const char *what) {
    const cJSON *c;
    cJSON_ArrayForEach(
        c, cJSON_GetObjectItemCaseSensitive(
               j, "cases")) if (!strcmp(cJSON_GetObjectItemCaseSensitive(c, "what")->valuestring, what)) return c;
    fail_msg("no case %s", what);
    return NULL;
}

/* a chat body with the two tools */
static char *tools_body(const char *model, const char *extra) {
    static char b[4096];
    snprintf(b, sizeof b,
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":120,"
             "\"seed\":3,\"parallel_tool_calls\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
             "\"%s\",\"parameters\":%s}},{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"parameters\":%s}}]%s}",
             model, TOOL_SCHEMAS[0][0], TOOL_SCHEMAS[0][1], TOOL_SCHEMAS[1][0], TOOL_SCHEMAS[1][1], extra);
    return b;
}

/* Tool calls in the Hermes format (the real Qwen3 template), the generic
 * one (Llama 3.0's template, which has no tools) with the openai npm
 * package: "required", a named function, "auto", parallel calls, streamed
 * deltas, a conversation going on after a tool message; the Llama 3.1 and
 * Mistral formats (minimal templates that name their markers) with curl;
 * the refusals.  Every returned call's arguments match its schema. */
static void test_tools(void **state) {
    (void)state;
    require_shared();
    char llama31[256], mistral[256];
    snprintf(llama31, sizeof llama31, "/tmp/tutti_test_tools_l31_%d.jinja", (int)getpid());
    snprintf(mistral, sizeof mistral, "/tmp/tutti_test_tools_mis_%d.jinja", (int)getpid());
    FILE *f = fopen(llama31, "w");
    assert_non_null(f);
    fputs("{% if tools %}Environment: ipython\n{{ tools | tojson }}\nAnswer {\"name\": N, \"parameters\": {...}}\n"
          "{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: ",
          f);
    fclose(f);
    f = fopen(mistral, "w");
    assert_non_null(f);
    fputs("[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% for m in messages %}[INST]{{ m.content }}[/INST]"
          "{% if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}{% endif %}{% endfor %}",
          f);
    fclose(f);
    const char *tmpls[4] = {"ref/chat/qwen3.jinja", "ref/chat/llama3.jinja", llama31, mistral};
    for (int t = 0; t < 4; t++) {
        server s;
        char args[4096];
        snprintf(args, sizeof args, "-m %s --chat-template %s -t 1", shared_path(M_STORIES),
                 t < 2 ? shared_path(tmpls[t]) : tmpls[t]);
        start(&s, "", args, true);
        if (t < 2) {
            cJSON *j = node_json(&s, "openai_tools.mjs", "stories260K");
            const char *must[] = {"required", "named", "stream"};
            for (int k = 0; k < 3; k++) {
                const cJSON *c = case_of(j, must[k]);
                assert_string_equal(cJSON_GetObjectItemCaseSensitive(c, "finish")->valuestring, "tool_calls");
                assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "content")));
                assert_int_equal(check_calls(cJSON_GetObjectItemCaseSensitive(c, "calls"), s.dir), 1);
            }
            const cJSON *named = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(case_of(j, "named"), "calls"), 0);
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(named, "name")->valuestring, "get_weather");
            /* streamed: the same call as the plain answer (same seed) */
            const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(case_of(j, "required"), "calls"), 0);
            const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(case_of(j, "stream"), "calls"), 0);
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(a, "arguments")->valuestring,
                                cJSON_GetObjectItemCaseSensitive(b, "arguments")->valuestring);
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(b, "type")->valuestring, "function");
            /* auto and parallel: whatever calls come back are valid */
            int n_auto = check_calls(cJSON_GetObjectItemCaseSensitive(case_of(j, "auto"), "calls"), s.dir);
            int n_par = check_calls(cJSON_GetObjectItemCaseSensitive(case_of(j, "parallel"), "calls"), s.dir);
            print_message("%s: auto %d calls, parallel %d calls\n", tmpls[t], n_auto, n_par);
            /* "required" with parallel calls: every call valid, and with Qwen's
             * template at least one complete within max_tokens (seeded: how many
             * fit depends on what the model samples; Llama 3's JSON form may be
             * cut before its first call ends) */
            if (t == 0) assert_true(n_par >= 1);
            const cJSON *cont = cJSON_GetObjectItemCaseSensitive(j, "continued");
            assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cont, "content")) ||
                        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cont, "calls")) > 0);
            cJSON_Delete(j);
        } else {
            cJSON *j =
                post_json(&s, "/v1/chat/completions", tools_body("stories260K", ",\"tool_choice\":\"required\""), 200);
            assert_string_equal(jstr(j, "choices.0.finish_reason"), "tool_calls");
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0),
                                                 "message"),
                "tool_calls");
            assert_int_equal(check_calls(calls, s.dir), 1);
            cJSON_Delete(j);
        }
        if (t == 0) {
            const char *P = "/v1/chat/completions";
            expect_error(&s, "POST", P,
                         tools_body("stories260K", ",\"tool_choice\":{\"type\":\"function\",\"function\":"
                                                   "{\"name\":\"nope\"}}"),
                         NULL, 400, "nope", "tool_choice", NULL);
            expect_error(&s, "POST", P, tools_body("stories260K", ",\"response_format\":{\"type\":\"json_object\"}"),
                         NULL, 400, "grammar", "response_format", NULL);
            expect_error(&s, "POST", P,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", NULL,
                         400, "no tools", "tool_choice", NULL);
            expect_error(&s, "POST", P,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                         "\"function\"}]}",
                         NULL, 400, "every tool", "tools", NULL);
            expect_error(&s, "POST", P, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", NULL, 400,
                         "tool_calls", "messages", NULL);
            expect_error(&s, "POST", P, tools_body("stories260K", ",\"tool_choice\":\"sometimes\""), NULL, 400,
                         "required", "tool_choice", NULL);
        }
        assert_int_equal(stop(&s), 0);
    }
    unlink(llama31), unlink(mistral);
}

/* ---- the page at GET / ---- */

/* a share title "NAME 12.3%, NAME 87.7%": the members in order, shares in
 * [0, 100] summing to 100 (each given to 0.1) */
static void check_share_title(const char *title, const char *const *names, int n) {
    const char *p = title;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        size_t l = strlen(names[k]);
        if (strncmp(p, names[k], l) || p[l] != ' ')
            fail_msg("share title '%s': member %d is not %s", title, k + 1, names[k]);
        char *end;
        double v = strtod(p + l + 1, &end);
        if (*end != '%' || v < 0 || v > 100) fail_msg("share title '%s': no share for %s", title, names[k]);
        sum += v;
        p = end + 1;
        if (k + 1 < n && strncmp(p, ", ", 2)) fail_msg("share title '%s'", title);
        p += k + 1 < n ? 2 : 0;
    }
    if (*p || fabs(sum - 100) > 0.1 * n) fail_msg("share title '%s': the shares sum to %.1f%%", title, sum);
}

/* The page in a real browser (Debian's chromium through puppeteer-core,
 * tests/serve/page_browser.mjs; scripts/bootstrap.sh installs both): an
 * ensemble's reply comes as units whose titles give each member's share
 * (the members named, in order) under bars in the members' colours, the
 * units spell the reply, the mean shares and the speed follow; no script
 * errors.  The shares' values are checked against the members' own
 * distributions in test_serve.c (test_logprobs). */
static void browser_page(server *s) {
    if (access("/usr/bin/chromium", X_OK) != 0 && !getenv("TUTTI_CHROMIUM"))
        fail_msg("the browser test needs chromium (Debian's package: scripts/bootstrap.sh installs it)");
    cJSON *j = node_json(s, "page_browser.mjs", "default 'Hello there'");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "errors")), 0);
    assert_string_equal(jstr(j, "reply_class"), "msg assistant");
    const char *names[2] = {"stories260K", "stories260K-dreams"};
    const cJSON *units = cJSON_GetObjectItemCaseSensitive(j, "units"), *u;
    assert_true(cJSON_GetArraySize(units) > 0);
    char spelled[16384] = "";
    cJSON_ArrayForEach(u, units) {
        check_share_title(jstr(u, "title"), names, 2);
        assert_non_null(strstr(jstr(u, "bar"), "linear-gradient"));
        strncat(spelled, jstr(u, "text"), sizeof spelled - strlen(spelled) - 1);
    }
    const char *reply = jstr(j, "reply");
    if (strncmp(reply, spelled, strlen(spelled))) fail_msg("the units spell '%s', the reply is '%s'", spelled, reply);
    const char *sum = jstr(j, "summary");
    assert_non_null(sum);
    assert_non_null(strstr(sum, "shares:"));
    for (int k = 0; k < 2; k++) assert_non_null(strstr(sum, names[k]));
    assert_non_null(strstr(jstr(j, "stats"), "tokens/s"));
    print_message("browser: %d units, %s | %s\n", cJSON_GetArraySize(units), sum, jstr(j, "stats"));
    /* a single model: plain text, no shares */
    cJSON_Delete(j);
    j = node_json(s, "page_browser.mjs", "stories260K 'Hello'");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "units")), 0);
    assert_true(strlen(jstr(j, "reply")) > 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "summary")));
    cJSON_Delete(j);
}

/* The page: served as built in (the source file's bytes), self-contained
 * (no outside URL, a CSP that loads nothing else), GET only; its script,
 * run by tests/serve/page_driver.mjs against a minimal DOM (no browser on
 * the test machines), lists /v1/models, shows the ensemble's members in
 * their colours, streams a chat reply and the speed. */
static void test_web_page(void **state) {
    (void)state;
    require_shared();
    server s;
    char args[4096];
    snprintf(args, sizeof args, "-m %s -m %s --chat-template %s -t 1", shared_path(M_STORIES), shared_path(M_DREAMS),
             shared_path("ref/chat/qwen3.jinja"));
    start(&s, "", args, true);
    int st;
    char *page = http(&s, "GET", "/", NULL, "-i", &st);
    assert_int_equal(st, 200);
    assert_non_null(strstr(page, "Content-Type: text/html; charset=utf-8"));
    assert_non_null(strstr(page, "Content-Security-Policy: default-src 'none'"));
    size_t len;
    char *src = read_file(TUTTI_SOURCE_DIR "/src/server/web/index.html", &len);
    assert_non_null(src);
    const char *body = strstr(page, "\r\n\r\n");
    assert_non_null(body);
    assert_string_equal(body + 4, src);
    assert_null(strstr(src, "http://"));
    assert_null(strstr(src, "https://"));
    assert_null(strstr(src, " src="));
    assert_null(strstr(src, " href="));
    free(src), free(page);
    expect_error(&s, "POST", "/", "{}", NULL, 405, "GET", NULL, NULL);
    cJSON *j = node_json(&s, "page_driver.mjs", "default 'Hello there'");
    const char *want[] = {"default", "stories260K", "stories260K-dreams"};
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "options");
    assert_int_equal(cJSON_GetArraySize(opts), 3);
    for (int k = 0; k < 3; k++) assert_string_equal(cJSON_GetArrayItem(opts, k)->valuestring, want[k]);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "members");
    for (int k = 0; k < 2; k++) {
        const cJSON *m = cJSON_GetArrayItem(mem, k);
        assert_string_equal(cJSON_GetArrayItem(m, 0)->valuestring, want[k + 1]);
        assert_true(cJSON_IsString(cJSON_GetArrayItem(m, 1)) && cJSON_GetArrayItem(m, 1)->valuestring[0] == '#');
    }
    assert_string_equal(jstr(j, "user"), "Hello there");
    assert_string_equal(jstr(j, "reply_class"), "msg assistant");
    assert_true(strlen(jstr(j, "reply")) > 0);
    print_message("page reply: %s | %s\n", jstr(j, "reply"), jstr(j, "stats"));
    assert_non_null(strstr(jstr(j, "stats"), "tokens/s"));
    cJSON_Delete(j);
    browser_page(&s);
    assert_int_equal(stop(&s), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batching_identical), cmocka_unit_test(test_echo_logprobs),
        cmocka_unit_test(test_embeddings),         cmocka_unit_test(test_tools),
        cmocka_unit_test(test_web_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
