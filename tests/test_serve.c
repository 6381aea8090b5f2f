#define _GNU_SOURCE /* strcasestr */
/* `tutti serve` end to end: starts the server (the built CLI) on a free
 * loopback port with the story models from ../shared and talks to it with
 * the curl command and with the official `openai` npm package
 * (tests/serve/, installed by `npm ci` there; .ci/run does it).
 *
 * References: the served text must equal `tutti generate` (one model) and
 * `tutti run` (fused) output byte for byte for the same seed and settings,
 * streamed or not; the KV reuse check counts tokens from the tokenizer's
 * own token counts (usage), not from the server's expectations. */
#include "test_common.h"
#include "serve_common.h"
#include "tutti.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- logprobs of the fused distribution ---- */

/* log-softmax in double of logits[0..n) into out */
static void log_softmax(const float *logits, int32_t n, double *out) {
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int32_t i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    for (int32_t i = 0; i < n; i++) out[i] = (double)logits[i] - mx - log(z);
}

/* The reference for TOKEN-aligned logprobs, independent of the server and
 * of the fusion layer: each member's own logits for the context (its own
 * session, C API), softmax, the weighted mix sum_i w_i p_i / sum_i w_i, and
 * greedy decoding.  lp is a legacy completions logprobs object (temperature
 * 0): every entry's token is the argmax's piece, its logprob that of the
 * reference within 1e-4, its top_logprobs the reference's top_n (same
 * texts, same values); the entries' tokens concatenate to text.  shares
 * (or NULL): the choice's tutti.shares, each member's share of entry e
 * w_i p_i(token) / sum_k w_k p_k(token) within 2e-4 (given to 4 places). */
static void check_token_logprobs(const char *const *paths, const double *w, int n_m, const cJSON *lp, const char *text,
                                 int top_n, const cJSON *shares) {
    tutti_model *m[4];
    tutti_session *ss[4];
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 256, sp.n_threads = 1;
    for (int i = 0; i < n_m; i++) {
        assert_non_null(m[i] = tutti_model_load(shared_path(paths[i]), NULL));
        assert_non_null(ss[i] = tutti_session_new(m[i], &sp));
    }
    const tutti_vocab *v = tutti_model_vocab(m[0]);
    int32_t V = tutti_vocab_n_tokens(v), ids[64];
    int32_t n = tutti_tokenize(v, PROMPT, strlen(PROMPT), tutti_vocab_add_bos(v), false, ids, 64);
    assert_true(n > 0);
    for (int i = 0; i < n_m; i++) assert_int_equal(tutti_session_eval(ss[i], ids, n, NULL), 0);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *tlp = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    int n_e = cJSON_GetArraySize(toks);
    assert_true(n_e > 3);
    assert_int_equal(cJSON_GetArraySize(tlp), n_e);
    assert_int_equal(cJSON_GetArraySize(top), n_e);
    double *ls = malloc(sizeof(double) * (size_t)V), *mix = malloc(sizeof(double) * (size_t)V);
    char cat[4096] = "";
    for (int e = 0; e < n_e; e++) {
        double wsum = 0;
        for (int32_t x = 0; x < V; x++) mix[x] = 0;
        for (int i = 0; i < n_m; i++) {
            log_softmax(tutti_session_logits(ss[i]), V, ls);
            for (int32_t x = 0; x < V; x++) mix[x] += w[i] * exp(ls[x]);
            wsum += w[i];
        }
        int32_t best = 0;
        for (int32_t x = 0; x < V; x++) {
            mix[x] = log(mix[x] / wsum);
            if (mix[x] > mix[best]) best = x;
        }
        char piece[256];
        int32_t k = tutti_token_to_piece(v, best, false, piece, sizeof piece - 1);
        assert_true(k >= 0);
        piece[k] = 0;
        const char *got = cJSON_GetArrayItem(toks, e)->valuestring;
        if (strcmp(got, piece)) fail_msg("entry %d: token '%s', the reference's argmax is '%s'", e, got, piece);
        double gl = cJSON_GetArrayItem(tlp, e)->valuedouble;
        if (fabs(gl - mix[best]) > 1e-4)
            fail_msg("entry %d ('%s'): logprob %.7f, reference %.7f", e, piece, gl, mix[best]);
        strncat(cat, got, sizeof cat - strlen(cat) - 1);
        /* the reference's top_n, most likely first */
        const cJSON *d = cJSON_GetArrayItem(top, e);
        assert_int_equal(cJSON_GetArraySize(d), top_n);
        double prev = INFINITY;
        for (int t = 0; t < top_n; t++) {
            int32_t b = -1;
            for (int32_t x = 0; x < V; x++)
                if (mix[x] < prev && (b < 0 || mix[x] > mix[b])) b = x;
            prev = mix[b];
            k = tutti_token_to_piece(v, b, true, piece, sizeof piece - 1);
            piece[k] = 0;
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(d, piece);
            if (!cJSON_IsNumber(a)) fail_msg("entry %d: top_logprobs lacks the reference's #%d '%s'", e, t + 1, piece);
            if (fabs(a->valuedouble - mix[b]) > 1e-4)
                fail_msg("entry %d: top '%s' %.7f, reference %.7f", e, piece, a->valuedouble, mix[b]);
        }
        if (shares) {
            const cJSON *se = cJSON_GetArrayItem(shares, e);
            k = tutti_token_to_piece(v, best, false, piece, sizeof piece - 1);
            piece[k] = 0;
            assert_string_equal(jstr(se, "text"), piece);
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(se, "share");
            assert_int_equal(cJSON_GetArraySize(sh), n_m);
            double wp[4], z = 0;
            for (int i = 0; i < n_m; i++) {
                log_softmax(tutti_session_logits(ss[i]), V, ls);
                z += wp[i] = w[i] * exp(ls[best]);
            }
            for (int i = 0; i < n_m; i++)
                if (fabs(cJSON_GetArrayItem(sh, i)->valuedouble - wp[i] / z) > 2e-4)
                    fail_msg("entry %d ('%s'): member %d's share %.5f, reference %.5f", e, piece, i + 1,
                             cJSON_GetArrayItem(sh, i)->valuedouble, wp[i] / z);
        }
        for (int i = 0; i < n_m; i++) assert_int_equal(tutti_session_eval(ss[i], &best, 1, NULL), 0);
    }
    if (shares) assert_int_equal(cJSON_GetArraySize(shares), cJSON_GetArraySize(toks));
    expect_same("logprobs tokens concatenated vs text", text, cat);
    free(ls), free(mix);
    for (int i = 0; i < n_m; i++) tutti_session_free(ss[i]), tutti_model_free(m[i]);
}

/* Entries of a chat logprobs.content array: bytes concatenate to text,
 * token = the bytes' text, alternatives sorted, at most top_n, the chosen one
 * among them when it is likelier than their last (BYTE: one character per
 * entry; its first byte's alternative is at least as likely as it). */
static void check_chat_entries(const cJSON *content, const char *text, int top_n, bool byte) {
    assert_true(cJSON_IsArray(content));
    size_t n = 0, tl = strlen(text);
    const cJSON *e;
    cJSON_ArrayForEach(e, content) {
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *b;
        const char *tok = jstr(e, "token");
        double l = jnum(e, "logprob");
        assert_true(l <= 1e-6);
        char buf[256];
        size_t k = 0;
        cJSON_ArrayForEach(b, bytes) buf[k++] = (char)(int)b->valuedouble;
        buf[k] = 0;
        assert_true(k > 0);
        if (n + k > tl || memcmp(text + n, buf, k))
            fail_msg("entry bytes '%s' at %zu do not follow the text [%s]", buf, n, text);
        if (strncmp(tok, "bytes:", 6)) assert_string_equal(tok, buf);
        if (byte) { /* one whole character */
            unsigned char c0 = (unsigned char)buf[0];
            size_t want = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : 4;
            assert_int_equal(k, want);
        }
        n += k;
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(e, "top_logprobs"), *a;
        assert_true(cJSON_IsArray(top));
        assert_true(cJSON_GetArraySize(top) <= top_n);
        double prev = INFINITY, last = INFINITY;
        bool has = false;
        cJSON_ArrayForEach(a, top) {
            double al = jnum(a, "logprob");
            assert_true(al <= prev);
            prev = last = al;
            const char *at = jstr(a, "token");
            if (at && !strcmp(at, tok)) {
                has = true;
                assert_true(fabs(al - l) < 1e-9);
            }
            if (byte && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(a, "bytes")) &&
                (int)jnum(a, "bytes.0") == (unsigned char)buf[0])
                assert_true(al >= l - 1e-6); /* the first byte's mass holds the character's */
        }
        /* the chosen one is among the alternatives when it is likelier than their last */
        if (top_n > 0 && !has && (l > last + 1e-6 || cJSON_GetArraySize(top) < top_n) && !(byte && k > 1))
            fail_msg("the chosen '%s' (%g) is missing from its top_logprobs (last %g)", tok, l, last);
    }
    if (n != tl) fail_msg("the entries cover %zu of the text's %zu bytes [%s]", n, tl, text);
}

/* Streams body and returns its choice 0's logprobs entries, gathered from
 * every chunk (chat: content entries; completions: {token, logprob, top,
 * offset} per entry), and the text in *text. */
static cJSON *stream_entries(server *s, const char *path, const char *body, char **text) {
    int st;
    bool chat = strstr(path, "chat") != NULL;
    char *out = http(s, "POST", path, body, "-N", &st);
    if (st != 200) fail_msg("stream %s: %d %s", body, st, out);
    cJSON *all = cJSON_CreateArray();
    size_t cap = strlen(out) + 1, n = 0;
    *text = calloc(cap, 1);
    for (char *ev = out; ev && *ev;) {
        char *next = strstr(ev, "\n\n");
        if (next) *next = 0, next += 2;
        if (strcmp(ev, "data: [DONE]")) {
            cJSON *j = cJSON_Parse(ev + 6);
            assert_non_null(j);
            const char *t = chat ? jstr(j, "choices.0.delta.content") : jstr(j, "choices.0.text");
            if (t) memcpy(*text + n, t, strlen(t)), n += strlen(t);
            const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
            const cJSON *lp = c0 ? cJSON_GetObjectItemCaseSensitive(c0, "logprobs") : NULL;
            if (cJSON_IsObject(lp)) {
                if (chat) {
                    const cJSON *e;
                    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(lp, "content"))
                        cJSON_AddItemToArray(all, cJSON_Duplicate(e, true));
                } else {
                    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
                    for (int i = 0; i < cJSON_GetArraySize(toks); i++) {
                        cJSON *o = cJSON_CreateObject();
                        cJSON_AddItemToObject(o, "token", cJSON_Duplicate(cJSON_GetArrayItem(toks, i), true));
                        const char *keys[3] = {"token_logprobs", "top_logprobs", "text_offset"};
                        for (int k = 0; k < 3; k++)
                            cJSON_AddItemToObject(
                                o, keys[k],
                                cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, keys[k]), i),
                                                true));
                        cJSON_AddItemToArray(all, o);
                    }
                }
            }
            cJSON_Delete(j);
        }
        ev = next;
    }
    free(out);
    return all;
}

/* Two arrays of logprobs entries: the same texts and bytes, log-probabilities
 * within tol (a slot that reuses a cached prefix evaluates it in other
 * batch shapes, which moves the last float digits). */
static bool entries_equal(const cJSON *a, const cJSON *b, double tol) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return fabs(a->valuedouble - b->valuedouble) <= tol;
    if (cJSON_IsArray(a) || cJSON_IsObject(a)) {
        if (a->type != b->type || cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return false;
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if ((x->string || y->string) && (!x->string || !y->string || strcmp(x->string, y->string))) return false;
            else if (!entries_equal(x, y, tol)) return false;
        return true;
    }
    return cJSON_Compare(a, b, true);
}

/* legacy logprobs object -> the per-entry form of stream_entries */
static cJSON *legacy_entries(const cJSON *lp) {
    cJSON *all = cJSON_CreateArray();
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    for (int i = 0; i < cJSON_GetArraySize(toks); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "token", cJSON_Duplicate(cJSON_GetArrayItem(toks, i), true));
        const char *keys[3] = {"token_logprobs", "top_logprobs", "text_offset"};
        for (int k = 0; k < 3; k++)
            cJSON_AddItemToObject(
                o, keys[k],
                cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, keys[k]), i), true));
        cJSON_AddItemToArray(all, o);
    }
    return all;
}

/* non-streamed body vs the same streamed: the same entries and text */
static void expect_stream_same_entries(server *s, const char *path, const char *body) {
    bool chat = strstr(path, "chat") != NULL;
    cJSON *j = post_json(s, path, body, 200);
    const char *text = chat ? jstr(j, "choices.0.message.content") : jstr(j, "choices.0.text");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c0, "logprobs");
    assert_true(cJSON_IsObject(lp));
    cJSON *want = chat ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(lp, "content"), true) : legacy_entries(lp);
    char sb[4096], *stext;
    snprintf(sb, sizeof sb, "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    cJSON *got = stream_entries(s, path, sb, &stext);
    expect_same("streamed text", text, stext);
    if (!entries_equal(want, got, 1e-5)) {
        char *a = cJSON_PrintUnformatted(want), *b = cJSON_PrintUnformatted(got);
        fail_msg("streamed logprobs differ:\n  %s\n  %s", a, b);
    }
    cJSON_Delete(want), cJSON_Delete(got), cJSON_Delete(j);
    free(stext);
}

/* ---- one server for most tests: the four story models ---- */

static server g_s;

static int setup(void **state) {
    (void)state;
    char args[8192], cfg[512];
    /* the config file: a renamed model and a named ensemble */
    snprintf(cfg, sizeof cfg, "/tmp/tutti_test_serve_cfg_%d.json", (int)getpid());
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    /* the tiny model named twice: both names serve it; the first, with a
     * quote, a backslash and a line feed, labels its /metrics lines */
    fprintf(
        f,
        "{\"models\": [{\"path\": \"%s\", \"name\": \"ti\\\"ny\\\\\\n\"}, {\"path\": \"%s\", \"name\": \"tiny\"}],\n"
        " \"ensembles\": [{\"name\": \"pair\", \"members\": [\"stories260K\", \"babyllama-tok361\"],\n"
        "   \"weights\": [0.7, 0.3], \"rule\": \"product\", \"align\": \"byte\"}]}\n",
        shared_path(M_TINY), shared_path(M_TINY));
    fclose(f);
    snprintf(args, sizeof args, "%s --config %s --chat-template %s -t 1 --parallel 2 --max-body 65536", four_models(),
             cfg, TEMPLATE);
    start(&g_s, "", args, true);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    /* graceful stop: the log says so before the exit */
    kill(g_s.pid, SIGTERM);
    bool said = false;
    for (int t = 0; t < 200 && !said; t++) {
        size_t n;
        char *log = read_file(g_s.log, &n);
        said = log && strstr(log, "shutting down");
        free(log);
        if (!said) sleep_ms(25);
    }
    int rc = stop(&g_s);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "/tmp/tutti_test_serve_cfg_%d.json", (int)getpid());
    unlink(cfg);
    /* graceful stop on SIGTERM: exit status 0 after saying so */
    return rc == 0 && said ? 0 : -1;
}

static void test_health_models_metrics(void **state) {
    (void)state;
    int st;
    char *b = http(&g_s, "GET", "/health", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_non_null(strstr(b, "\"ok\""));
    free(b);
    b = http(&g_s, "GET", "/v1/models", NULL, NULL, &st);
    assert_int_equal(st, 200);
    cJSON *j = cJSON_Parse(b);
    assert_non_null(j);
    assert_string_equal(jstr(j, "object"), "list");
    const char *want[] = {"default",          "stories260K",      "tiny", "ti\"ny\\\n",
                          "babyllama-tok105", "babyllama-tok361", "pair"};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        bool found = false;
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "data")) found |= !strcmp(jstr(m, "id"), want[k]);
        if (!found) fail_msg("/v1/models lacks %s: %s", want[k], b);
    }
    /* the alignment in use: four vocabularies fuse per byte, one model per token */
    assert_string_equal(jstr(j, "data.0.id"), "default");
    assert_string_equal(jstr(j, "data.0.tutti.align"), "byte");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "data")) if (!strcmp(jstr(m, "id"), "stories260K"))
        assert_string_equal(jstr(m, "tutti.align"), "token");
    cJSON_Delete(j);
    free(b);
    const char *names[] = {"tutti_requests_total",
                           "tutti_generated_tokens_total",
                           "tutti_tokens_per_second",
                           "tutti_queue_length",
                           "tutti_member_forward_seconds_total",
                           "tutti_prompt_tokens_evaluated_total",
                           "tutti_prompt_tokens_reused_total"};
    b = http(&g_s, "GET", "/metrics", NULL, NULL, &st);
    assert_int_equal(st, 200);
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (!strstr(b, names[k])) fail_msg("/metrics lacks %s", names[k]);
    assert_non_null(strstr(b, "tutti_requests_total{endpoint=\"/v1/models\",code=\"200\"}"));
    /* a model name from --config is escaped in the label (\\, \" and \n):
     * one line per sample, the label closed */
    if (!strstr(b, "tutti_member_forward_tokens_total{model=\"ti\\\"ny\\\\\\n\"} "))
        fail_msg("/metrics does not escape the label:\n%s", b);
    for (char *l = b; *l; l = strchr(l, '\n') + 1) {
        if (*l != '#' && !strchr(l, ' ')) fail_msg("/metrics line without a value: %.80s", l);
        if (!strchr(l, '\n')) break;
    }
    free(b);
}

/* One model: equal to `tutti generate`; fused: equal to `tutti run`;
 * non-streamed, streamed, and again on the warm slot. */
static void test_equals_cli(void **state) {
    (void)state;
    char args[8192], body[1024];
    snprintf(args, sizeof args, "generate -m %s -p '" PROMPT "' -n 40 --seed 5 -t 1 --temp 0.9 --top-k 20",
             shared_path(M_STORIES));
    char *want1 = cli(args);
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"seed\":5,"
             "\"temperature\":0.9,\"top_k\":20}");
    for (int rep = 0; rep < 2; rep++) {
        char *got = completion_text(&g_s, body);
        expect_same("one model", want1, got);
        free(got);
    }
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"seed\":5,"
             "\"temperature\":0.9,\"top_k\":20,\"stream\":true}");
    char fin[16];
    int n_chunks;
    char *got = stream_text(&g_s, "/v1/completions", body, fin, &n_chunks);
    expect_same("one model, streamed", want1, got);
    assert_string_equal(fin, "length");
    assert_true(n_chunks >= 10); /* streamed piece by piece, not at the end */
    free(got);
    free(want1);

    /* the server's members keep their hard context limit (llama-server's default): the CLI's too */
    snprintf(args, sizeof args,
             "run %s -p '" PROMPT "' -n 120 --seed 11 -t 1 --top-p 0.9 --min-p 0.02 --no-context-shift", four_models());
    char *want4 = cli(args);
    snprintf(body, sizeof body,
             "{\"prompt\":\"" PROMPT "\",\"max_tokens\":120,\"seed\":11,\"top_p\":0.9,\"min_p\":0.02}");
    for (int rep = 0; rep < 2; rep++) {
        got = completion_text(&g_s, body);
        expect_same("four models fused", want4, got);
        free(got);
    }
    snprintf(body, sizeof body,
             "{\"model\":\"default\",\"prompt\":\"" PROMPT "\",\"max_tokens\":120,\"seed\":11,\"top_p\":0.9,"
             "\"min_p\":0.02,\"stream\":true}");
    got = stream_text(&g_s, "/v1/completions", body, fin, &n_chunks);
    expect_same("four models fused, streamed", want4, got);
    free(got);
    free(want4);

    /* the config's named ensemble and the same one inline */
    snprintf(args, sizeof args,
             "run -m %s -m %s -w 0.7,0.3 --rule product --align byte -p '" PROMPT "' -n 60 --seed 2 -t 1",
             shared_path(M_STORIES), shared_path(M_B361));
    char *want2 = cli(args);
    got = completion_text(&g_s, "{\"model\":\"pair\",\"prompt\":\"" PROMPT "\",\"max_tokens\":60,\"seed\":2}");
    expect_same("config ensemble", want2, got);
    free(got);
    got = completion_text(&g_s, "{\"model\":\"mine\",\"prompt\":\"" PROMPT "\",\"max_tokens\":60,\"seed\":2,"
                                "\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],\"weights\":[0.7,0.3],"
                                "\"rule\":\"product\",\"align\":\"byte\"}}");
    expect_same("inline ensemble", want2, got);
    free(got);
    free(want2);
}

static void test_request_options(void **state) {
    (void)state;
    /* response_format json_schema: greedy output is JSON valid against the schema */
    char *js = completion_text(
        &g_s, "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":200,\"temperature\":0,"
              "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":"
              "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
              "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}}}}");
    cJSON *o = cJSON_Parse(js);
    if (!o) fail_msg("response_format: not JSON: %s", js);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *age = cJSON_GetObjectItemCaseSensitive(o, "age");
    assert_true(cJSON_IsString(name) && strlen(name->valuestring) <= 12);
    assert_true(cJSON_IsNumber(age) && age->valuedouble == (double)(long long)age->valuedouble);
    assert_int_equal(cJSON_GetArraySize(o), 2);
    cJSON_Delete(o);
    free(js);
    /* json_object, sampled: a story model keeps adding pairs past any
     * max_tokens (finish "length", a cut object), so '}' (id 128 in
     * stories260K's vocabulary, the byte 0x7D) is favoured by a logit bias
     * where the grammar allows it; every answer that ends by itself
     * ("stop") must be a JSON object, and some do */
    int n_stop = 0;
    for (int seed = 1; seed <= 8; seed++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":200,\"seed\":%d,"
                 "\"logit_bias\":{\"128\":10},\"response_format\":{\"type\":\"json_object\"}}",
                 seed);
        cJSON *j = post_json(&g_s, "/v1/completions", body, 200);
        const char *t = jstr(j, "choices.0.text"), *fin = jstr(j, "choices.0.finish_reason");
        assert_non_null(t);
        assert_non_null(fin);
        if (!strcmp(fin, "stop")) {
            cJSON *v = cJSON_Parse(t);
            if (!v || !cJSON_IsObject(v)) fail_msg("json_object, seed %d, finish stop: not a JSON object: %s", seed, t);
            cJSON_Delete(v);
            n_stop++;
        } else {
            assert_string_equal(fin, "length");
        }
        cJSON_Delete(j);
    }
    print_message("json_object: %d of 8 sampled answers ended by themselves\n", n_stop);
    assert_true(n_stop > 0);
    /* stop: the text ends before the stop string */
    char *full = completion_text(&g_s, "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":40,"
                                       "\"temperature\":0}");
    char *cut = strstr(full + 3, " ");
    assert_non_null(cut);
    char stop[8] = {0};
    memcpy(stop, cut, 3);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"temperature\":0,"
             "\"stop\":[\"%s\"],\"unknown_field\":{\"x\":[1,2]}}",
             stop);
    cJSON *j = post_json(&g_s, "/v1/completions", body, 200);
    const char *t = jstr(j, "choices.0.text");
    assert_non_null(t);
    assert_int_equal(strlen(t), (size_t)(cut - full));
    assert_memory_equal(t, full, strlen(t));
    assert_string_equal(jstr(j, "choices.0.finish_reason"), "stop");
    cJSON_Delete(j);
    /* n = 2: two choices, the first as with n = 1 */
    j = post_json(&g_s, "/v1/completions",
                  "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":40,\"temperature\":0,\"n\":2}",
                  200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "choices")), 2);
    assert_string_equal(jstr(j, "choices.0.text"), full);
    assert_int_equal((int)jnum(j, "choices.1.index"), 1);
    cJSON_Delete(j);
    free(full);
    /* max_tokens far beyond the context: capped (babyllama's context is 256) */
    j = post_json(&g_s, "/v1/completions",
                  "{\"model\":\"babyllama-tok105\",\"prompt\":\"" PROMPT "\",\"max_tokens\":100000000}", 200);
    assert_true(jnum(j, "usage.completion_tokens") + jnum(j, "usage.prompt_tokens") <= 256);
    cJSON_Delete(j);
    /* max_tokens 0 */
    j = post_json(&g_s, "/v1/completions", "{\"model\":\"stories260K\",\"prompt\":\"x\",\"max_tokens\":0}", 200);
    assert_string_equal(jstr(j, "choices.0.text"), "");
    assert_string_equal(jstr(j, "choices.0.finish_reason"), "length");
    cJSON_Delete(j);
}

/* A byte-aligned ensemble cut by a member's full context finishes with
 * "length", as OpenAI and a single model do (issue 21, item 2: it said
 * "stop"), also with a schema left unfinished: "pair" fuses stories260K with
 * the character-level BabyLlama-tok361, whose 256-token context fills long
 * before a JSON string of 400 or more characters can end. */
static void test_full_context_finish_length(void **state) {
    (void)state;
    cJSON *j = post_json(&g_s, "/v1/completions",
                         "{\"model\":\"pair\",\"prompt\":\"" PROMPT "\",\"max_tokens\":2000,\"temperature\":0,"
                         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":"
                         "{\"type\":\"string\",\"minLength\":400}}}}",
                         200);
    const char *t = jstr(j, "choices.0.text");
    assert_non_null(t);
    print_message("pair, a string of >= 400 characters: %zu bytes, finish_reason %s\n", strlen(t),
                  jstr(j, "choices.0.finish_reason"));
    while (*t == ' ' || *t == '\n' || *t == '\t') t++;              /* JSON's leading whitespace */
    assert_true(t[0] == '"' && strlen(t) > 100 && strlen(t) < 400); /* unterminated */
    assert_string_equal(jstr(j, "choices.0.finish_reason"), "length");
    cJSON_Delete(j);
}

static void test_errors(void **state) {
    (void)state;
    /* the '}' at byte 15 is where the parser stops */
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\": \"x\",}", NULL, 400, "at byte 15", NULL, NULL);
    expect_error(&g_s, "POST", "/v1/completions", "", NULL, 400, "malformed JSON", NULL, NULL);
    expect_error(&g_s, "POST", "/v1/completions", "[1]", NULL, 400, "JSON object", NULL, NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"10\"}", NULL, 400, NULL,
                 "max_tokens", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"temperature\":-1}", NULL, 400, NULL,
                 "temperature", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"stop\":[1]}", NULL, 400, NULL, "stop", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"stream\":1}", NULL, 400, NULL, "stream", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":0}", NULL, 400, NULL, "n", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"max_tokens\":3}", NULL, 400, "required", "prompt", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":[1,-2,3]}", NULL, 400, "token id", "prompt", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":[]}", NULL, 400, "empty", "prompt", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"model\":\"stories260K\",\"prompt\":[1,99999]}", NULL, 400,
                 "not in the vocabulary", "prompt", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":[\"a\",[1]]}", NULL, 400, "batch", "prompt", NULL);
    expect_error(&g_s, "POST", "/v1/chat/completions", "{\"messages\":[]}", NULL, 400, NULL, "messages", NULL);
    expect_error(&g_s, "POST", "/v1/chat/completions", "{\"messages\":[{\"content\":\"x\"}]}", NULL, 400, "role",
                 "messages", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"model\":\"nope\",\"prompt\":\"x\"}", NULL, 404, "nope", "model",
                 "model_not_found");
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"tutti\":{\"members\":[\"stories260K\",\"nope\"]}}", NULL, 404, "nope", "tutti",
                 "model_not_found");
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"tutti\":{\"members\":[\"stories260K\",\"tiny\"],\"align\":\"token\"}}", NULL, 400,
                 "different vocabularies", NULL, NULL);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}", NULL, 400,
                 "needs", "response_format", NULL);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                 "{\"type\":\"array\",\"uniqueItems\":true}}}}",
                 NULL, 400, "keyword 'uniqueItems'", "response_format", NULL);
    /* tutti's "lenient" extension: the keyword is dropped, the rest enforced */
    char *lt = completion_text(&g_s, "{\"model\":\"stories260K\",\"prompt\":\"x\",\"max_tokens\":6,\"temperature\":0,"
                                     "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"lenient\":true,"
                                     "\"schema\":{\"type\":\"array\",\"uniqueItems\":true}}}}");
    if (lt[strspn(lt, " \t\r\n")] != '[') fail_msg("lenient json_schema: not an array: [%s]", lt);
    free(lt);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"lenient\":1,"
                 "\"schema\":{\"type\":\"array\"}}}}",
                 NULL, 400, "'lenient' must be", "response_format", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"xml\"}}", NULL,
                 400, "not one of", "response_format", NULL);
    /* logprobs: OpenAI's types and limits (0..20), span alignment refused */
    const char *M1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char lb[512];
    snprintf(lb, sizeof lb, "%s\"logprobs\":1}", M1);
    expect_error(&g_s, "POST", "/v1/chat/completions", lb, NULL, 400, "true or false", "logprobs", NULL);
    snprintf(lb, sizeof lb, "%s\"logprobs\":true,\"top_logprobs\":21}", M1);
    expect_error(&g_s, "POST", "/v1/chat/completions", lb, NULL, 400, "top_logprobs", "top_logprobs", NULL);
    snprintf(lb, sizeof lb, "%s\"logprobs\":true,\"top_logprobs\":\"3\"}", M1);
    expect_error(&g_s, "POST", "/v1/chat/completions", lb, NULL, 400, "number", "top_logprobs", NULL);
    snprintf(lb, sizeof lb, "%s\"top_logprobs\":3}", M1);
    expect_error(&g_s, "POST", "/v1/chat/completions", lb, NULL, 400, "needs 'logprobs': true", "top_logprobs", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":21}", NULL, 400, "logprobs",
                 "logprobs", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":1.5}", NULL, 400, "integer",
                 "logprobs", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":true}", NULL, 400, "number",
                 "logprobs", NULL);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"logprobs\":2,\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],"
                 "\"align\":\"span\"}}",
                 NULL, 400, "logprobs need token or byte alignment", "logprobs", NULL);
    expect_error(&g_s, "GET", "/v1/nothing", NULL, NULL, 404, "no such endpoint", NULL, NULL);
    expect_error(&g_s, "GET", "/v1/completions", NULL, NULL, 405, "POST", NULL, NULL);
    expect_error(&g_s, "POST", "/v1/models", "{}", NULL, 405, "GET", NULL, NULL);
    /* a prompt longer than a member's context (babyllama: 256 tokens) */
    size_t n = 3000;
    char *big = malloc(n + 64);
    strcpy(big, "{\"model\":\"babyllama-tok105\",\"prompt\":\"");
    size_t o = strlen(big);
    for (size_t i = 0; i < 1200; i++) big[o++] = i % 2 ? ' ' : 'a';
    strcpy(big + o, "\"}");
    expect_error(&g_s, "POST", "/v1/completions", big, NULL, 400, "context", "prompt", "context_length_exceeded");
    free(big);
    /* a body over --max-body (65536) */
    n = 70000;
    big = malloc(n + 64);
    strcpy(big, "{\"prompt\":\"");
    o = strlen(big);
    memset(big + o, 'a', n);
    strcpy(big + o + n, "\"}");
    expect_error(&g_s, "POST", "/v1/completions", big, NULL, 413, "larger than", NULL, NULL);
    free(big);
}

/* A chat growing by one turn evaluates only the new tokens: greedy, one
 * model (token alignment).  The slot's cache holds turn 1's prompt and its
 * reply but the last generated token (drawn, never evaluated), so turn 2
 * must evaluate exactly n2 - (n1 + k - 1) tokens when the reply re-tokenizes
 * as generated. */
static void test_chat_kv_reuse(void **state) {
    (void)state;
    const char *m1 = "{\"role\":\"user\",\"content\":\"Tell me a story.\"}";
    char body[4096];
    snprintf(body, sizeof body, "{\"model\":\"stories260K\",\"messages\":[%s],\"max_tokens\":30,\"temperature\":0}",
             m1);
    cJSON *a = post_json(&g_s, "/v1/chat/completions", body, 200);
    assert_string_equal(jstr(a, "object"), "chat.completion");
    assert_string_equal(jstr(a, "choices.0.message.role"), "assistant");
    int n1 = (int)jnum(a, "usage.prompt_tokens"), k = (int)jnum(a, "usage.completion_tokens");
    cJSON *reply = cJSON_CreateString(jstr(a, "choices.0.message.content"));
    char *rj = cJSON_PrintUnformatted(reply);
    double reused0 = metric(&g_s, "tutti_prompt_tokens_reused_total");
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"messages\":[%s,{\"role\":\"assistant\",\"content\":%s},"
             "{\"role\":\"user\",\"content\":\"More.\"}],\"max_tokens\":30,\"temperature\":0}",
             m1, rj);
    cJSON *b = post_json(&g_s, "/v1/chat/completions", body, 200);
    int n2 = (int)jnum(b, "usage.prompt_tokens");
    int ev = (int)jnum(b, "usage.tutti.prompt_tokens_evaluated.0");
    assert_true(n2 > n1 + k);
    if (ev != n2 - (n1 + k - 1))
        fail_msg("turn 2: %d of %d prompt tokens evaluated, want %d", ev, n2, n2 - (n1 + k - 1));
    double reused1 = metric(&g_s, "tutti_prompt_tokens_reused_total");
    assert_true(reused1 - reused0 >= n1 + k - 1);
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* fused (byte alignment): every member reuses most of its prompt */
    snprintf(body, sizeof body, "{\"messages\":[%s],\"max_tokens\":30,\"temperature\":0}", m1);
    a = post_json(&g_s, "/v1/chat/completions", body, 200);
    cJSON_Delete(reply);
    free(rj);
    reply = cJSON_CreateString(jstr(a, "choices.0.message.content"));
    rj = cJSON_PrintUnformatted(reply);
    snprintf(body, sizeof body,
             "{\"messages\":[%s,{\"role\":\"assistant\",\"content\":%s},{\"role\":\"user\",\"content\":\"More.\"}],"
             "\"max_tokens\":30,\"temperature\":0}",
             m1, rj);
    b = post_json(&g_s, "/v1/chat/completions", body, 200);
    for (int i = 0; i < 4; i++) {
        char p1[64], p2[64];
        snprintf(p1, sizeof p1, "usage.tutti.prompt_tokens.%d", i);
        snprintf(p2, sizeof p2, "usage.tutti.prompt_tokens_evaluated.%d", i);
        int n1i = (int)jnum(a, p1), n2i = (int)jnum(b, p1), evi = (int)jnum(b, p2);
        /* the reply's first bytes may merge with turn 1's last prompt token
         * when the conversation is tokenized again: up to 2 more */
        if (evi > n2i - n1i + 2)
            fail_msg("fused turn 2, member %d: %d of %d prompt tokens evaluated (turn 1 had %d)", i + 1, evi, n2i, n1i);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(reply);
    free(rj);
}

static void test_chat_stream(void **state) {
    (void)state;
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be nice.\"},{\"role\":\"user\",\"content\":"
                    "\"Hi <s> there\"}],\"max_tokens\":40,\"seed\":9,\"model\":\"default\"}";
    cJSON *j = post_json(&g_s, "/v1/chat/completions", b, 200);
    char *want = strdup(jstr(j, "choices.0.message.content"));
    cJSON_Delete(j);
    char sb[1024], fin[16];
    snprintf(sb, sizeof sb, "%.*s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", (int)strlen(b) - 1, b);
    int n_chunks;
    char *got = stream_text(&g_s, "/v1/chat/completions", sb, fin, &n_chunks);
    expect_same("chat streamed vs not", want, got);
    assert_true(fin[0] != 0);
    free(want);
    free(got);
}

/* The openai npm package against one model and the four fused. */
static void test_openai_npm(void **state) {
    (void)state;
    struct stat st;
    if (stat(TUTTI_SOURCE_DIR "/tests/serve/node_modules/openai/package.json", &st) != 0)
        fail_msg("the openai npm package is missing: run `npm ci` in tests/serve (Node 20)");
    const struct {
        const char *model;
        const char *cli_fmt;
        int n;
    } cases[] = {{"stories260K", "generate -m %s -p '" PROMPT "' -n %d --seed 4 -t 1", 30},
                 {"default", "run %s -p '" PROMPT "' -n %d --seed 4 -t 1", 80}};
    for (size_t c = 0; c < 2; c++) {
        char cmd[8192], args[8192];
        snprintf(cmd, sizeof cmd, "node %s/tests/serve/openai_client.mjs http://127.0.0.1:%d %s '" PROMPT "' %d 4",
                 TUTTI_SOURCE_DIR, g_s.port, cases[c].model, cases[c].n);
        int rc;
        char *out = run_cmd(cmd, &rc);
        if (rc != 0) fail_msg("%s failed (%d): %s", cmd, rc, out ? out : "");
        cJSON *j = cJSON_Parse(out);
        if (!j) fail_msg("openai client output: %s", out);
        snprintf(args, sizeof args, cases[c].cli_fmt, c == 0 ? shared_path(M_STORIES) : four_models(), cases[c].n);
        char *want = cli(args);
        expect_same("openai completions", want, jstr(j, "completion"));
        expect_same("openai completions streamed", want, jstr(j, "completion_stream"));
        assert_string_equal(jstr(j, "completion_finish"), "length");
        assert_string_equal(jstr(j, "completion_stream_finish"), "length");
        assert_string_equal(jstr(j, "chat_role"), "assistant");
        assert_non_null(jstr(j, "chat"));
        expect_same("openai chat streamed vs not", jstr(j, "chat"), jstr(j, "chat_stream"));
        assert_non_null(jstr(j, "chat_stream_finish"));
        /* logprobs through the package: entries cover the text (TOKEN for
         * one model, one per character for the four fused in BYTE), the
         * streamed ones equal */
        check_chat_entries(cJSON_GetObjectItemCaseSensitive(j, "lp_content"), jstr(j, "lp_text"), 3, c == 1);
        expect_same("openai logprobs text streamed vs not", jstr(j, "lp_text"), jstr(j, "lp_stream_text"));
        if (!entries_equal(cJSON_GetObjectItemCaseSensitive(j, "lp_content"),
                           cJSON_GetObjectItemCaseSensitive(j, "lp_stream_content"), 1e-5))
            fail_msg("openai: streamed logprobs differ from the plain ones");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "completion_lp_tokens"), *it;
        char cat[8192] = "";
        cJSON_ArrayForEach(it, ct) strncat(cat, it->valuestring, sizeof cat - strlen(cat) - 1);
        expect_same("openai completion logprobs tokens vs text", jstr(j, "completion_lp_text"), cat);
        expect_same("openai completion with logprobs vs CLI", want, jstr(j, "completion_lp_text"));
        assert_int_equal((int)jnum(j, "error_status"), 404);
        assert_string_equal(jstr(j, "error_code"), "model_not_found");
        free(want);
        cJSON_Delete(j);
        free(out);
    }
}

/* Issue 21, item 5: the fields that change the output are honoured or
 * refused naming the field; the neutral values of refused fields pass. */
static void test_output_fields(void **state) {
    (void)state;
    /* grammar (GBNF): the text is one of the grammar's sentences, greedy and sampled */
    for (int k = 0; k < 3; k++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":\"" PROMPT "\",\"max_tokens\":20,\"seed\":%d,%s"
                 "\"grammar\":\"root ::= \\\" yes\\\" | \\\" no\\\" | \\\" maybe so\\\"\"}",
                 k == 2 ? "default" : "stories260K", k, k == 0 ? "\"temperature\":0," : "");
        char *t = completion_text(&g_s, body);
        if (strcmp(t, " yes") && strcmp(t, " no") && strcmp(t, " maybe so")) fail_msg("grammar ignored: [%s]", t);
        free(t);
    }
    /* top-level json_schema (llama-server) and response_format json_object with a schema */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
                         "\"additionalProperties\":false}";
    for (int k = 0; k < 2; k++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":60,\"seed\":3,%s%s%s}",
                 k ? "\"response_format\":{\"type\":\"json_object\",\"schema\":" : "\"json_schema\":", schema,
                 k ? "}" : "");
        char *t = completion_text(&g_s, body);
        cJSON *o = cJSON_Parse(t);
        if (!o || !cJSON_IsObject(o) || cJSON_GetArraySize(o) != 1 ||
            !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "n")))
            fail_msg("%s ignored: [%s]", k ? "response_format.schema" : "json_schema", t);
        cJSON_Delete(o);
        free(t);
    }
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{\"type\":\"object\"}}", NULL,
                 400, "both constrain", "grammar", NULL);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= (\"}", NULL, 400, "grammar",
                 "grammar", NULL);
    /* logit_bias: the greedy first token banned (-100) is not drawn, the
     * second most likely is (llama-server's /completion names both, by the
     * model's own distribution); a token pushed +100 is drawn */
    cJSON *nat =
        post_json(&g_s, "/completion", "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"n_probs\":2}", 200);
    int best = (int)jnum(nat, "completion_probabilities.0.top_logprobs.0.id");
    int second = (int)jnum(nat, "completion_probabilities.0.top_logprobs.1.id");
    char *second_text = strdup(jstr(nat, "completion_probabilities.0.top_logprobs.1.token")); /* its piece */
    cJSON_Delete(nat);
    char body[1024];
    const char *forms[3] = {"{\"%d\":-100}", "[[%d,false]]", "{\"%d\":-100.0}"};
    for (int k = 0; k < 3; k++) {
        char bias[64];
        snprintf(bias, sizeof bias, forms[k], best);
        snprintf(body, sizeof body,
                 "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":1,"
                 "\"temperature\":0,\"logit_bias\":%s}",
                 bias);
        char *t = completion_text(&g_s, body);
        expect_same("greedy first token with the best one banned", second_text, t);
        free(t);
    }
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":1,\"seed\":1,"
             "\"logit_bias\":{\"%d\":100}}",
             second);
    char *t = completion_text(&g_s, body);
    expect_same("a token pushed by +100", second_text, t);
    free(t);
    free(second_text);
    expect_error(&g_s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"5\":1}}", NULL, 400,
                 "token alignment", "logit_bias", NULL); /* default: four vocabularies, byte-aligned */
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"model\":\"stories260K\",\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", NULL, 400, "[-100, 100]",
                 "logit_bias", NULL);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"model\":\"stories260K\",\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", NULL, 400, "token ids",
                 "logit_bias", NULL);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"model\":\"stories260K\",\"prompt\":\"x\",\"logit_bias\":{\"99999\":1}}", NULL, 400,
                 "not in the vocabulary", "logit_bias", NULL);
    /* not honoured: a 400 naming the field; the neutral values pass */
    const char *M = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    const struct {
        const char *path, *field, *bad, *neutral;
    } refused[] = {
        {"/v1/chat/completions", "functions", "[{\"name\":\"f\"}]", "[]"},
        {"/v1/completions", "best_of", "2", "1"},
        {"/v1/completions", "suffix", "\"end\"", "\"\""},
        {"/v1/completions", "presence_penalty", "0.5", "0"},
        {"/v1/completions", "frequency_penalty", "-1", "0"},
        {"/v1/completions", "mirostat", "2", "0"},
        {"/v1/completions", "typical_p", "0.5", "1"},
        {"/v1/completions", "ignore_eos", "true", "false"},
        {"/v1/chat/completions", "audio", "{\"voice\":\"a\"}", "{}"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
        bool chat = strstr(refused[k].path, "chat") != NULL;
        char b1[512];
        snprintf(b1, sizeof b1, "{%s,\"model\":\"stories260K\",\"max_tokens\":2,\"%s\":%s}",
                 chat ? M : "\"prompt\":\"x\"", refused[k].field, refused[k].bad);
        expect_error(&g_s, "POST", refused[k].path, b1, NULL, 400, "not supported", refused[k].field, NULL);
        if (chat) continue; /* the story models have no chat template */
        snprintf(b1, sizeof b1, "{\"prompt\":\"x\",\"model\":\"stories260K\",\"max_tokens\":2,\"%s\":%s}",
                 refused[k].field, refused[k].neutral);
        cJSON_Delete(post_json(&g_s, refused[k].path, b1, 200));
    }
    /* fields that change nothing stay accepted */
    cJSON_Delete(
        post_json(&g_s, "/v1/completions",
                  "{\"prompt\":\"x\",\"model\":\"stories260K\",\"max_tokens\":2,\"user\":\"u\",\"store\":false,"
                  "\"cache_prompt\":true,\"metadata\":{\"a\":\"b\"},\"no_such_field\":[1]}",
                  200));
}

/* Item 7: token-id prompts (OpenAI's array of ids and array of arrays):
 * the text of the same ids as given as text; a batch answers each prompt
 * (choice p * n + k), as separate requests do. */
static void test_token_prompts(void **state) {
    (void)state;
    cJSON *tk = post_json(&g_s, "/tokenize",
                          "{\"model\":\"stories260K\",\"content\":\"" PROMPT "\",\"add_special\":true}", 200);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tk, "tokens"));
    cJSON_Delete(tk);
    const char *models[2] = {"stories260K", "default"}; /* one model; four fused by bytes */
    for (int m = 0; m < 2; m++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"" PROMPT "\",\"max_tokens\":12,\"temperature\":0}",
                 models[m]);
        char *want = completion_text(&g_s, body);
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":%s,\"max_tokens\":12,\"temperature\":0}", models[m],
                 ids);
        char *got = completion_text(&g_s, body);
        expect_same("token-id prompt vs its text", want, got);
        free(got);
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":[%s,[1]],\"max_tokens\":12,\"temperature\":0,\"n\":2}", models[m], ids);
        cJSON *j = post_json(&g_s, "/v1/completions", body, 200);
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
        assert_int_equal(cJSON_GetArraySize(ch), 4);
        expect_same("batch prompt 0", want, jstr(j, "choices.0.text"));
        expect_same("batch prompt 0, choice 1", want, jstr(j, "choices.1.text")); /* greedy */
        assert_int_equal((int)jnum(j, "choices.3.index"), 3);
        cJSON_Delete(j);
        free(want);
    }
    free(ids);
    cJSON *j = post_json(
        &g_s, "/v1/completions",
        "{\"model\":\"stories260K\",\"prompt\":[\"" PROMPT "\",\"Lily\"],\"max_tokens\":5,\"temperature\":0}", 200);
    char *one =
        completion_text(&g_s, "{\"model\":\"stories260K\",\"prompt\":\"Lily\",\"max_tokens\":5,\"temperature\":0}");
    expect_same("batch of texts, prompt 1", one, jstr(j, "choices.1.text"));
    free(one);
    cJSON_Delete(j);
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":2}", NULL, 400, "choices",
                 "n", NULL);
}

/* Item 8: one validator: the inline ensemble's temperatures 0, 1e-30 and
 * 1e30 refused with the CLI's message. */
static void test_inline_settings(void **state) {
    (void)state;
    const char *temps[] = {"0", "1e-30", "1e30", "-1"};
    for (size_t k = 0; k < sizeof temps / sizeof *temps; k++) {
        char body[512], cmd[2048];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"x\",\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],"
                 "\"temperatures\":[%s,1]}}",
                 temps[k]);
        int st;
        char *out = http(&g_s, "POST", "/v1/completions", body, NULL, &st);
        assert_int_equal(st, 400);
        snprintf(cmd, sizeof cmd, "%s run -m %s -m %s --temps %s,1 -p x -n 2 2>&1 >/dev/null", TUTTI_CLI,
                 shared_path(M_STORIES), shared_path(M_B361), temps[k]);
        char *cli_msg = run_cmd(cmd, &st);
        assert_int_equal(st, 2);
        const char *core = strstr(cli_msg, "member 1: temperature");
        assert_non_null(core);
        char want[512];
        snprintf(want, sizeof want, "%.*s", (int)strcspn(core, "\n"), core);
        cJSON *j = cJSON_Parse(out);
        const char *msg = jstr(j, "error.message");
        if (!msg || !strstr(msg, want))
            fail_msg("temperature %s: the server says '%s', the CLI '%s'", temps[k], msg, want);
        assert_string_equal(jstr(j, "error.param"), "tutti");
        cJSON_Delete(j);
        free(out), free(cli_msg);
    }
    expect_error(&g_s, "POST", "/v1/completions",
                 "{\"prompt\":\"x\",\"tutti\":{\"members\":[\"stories260K\",\"tiny\"],\"weights\":[-1,1]}}", NULL, 400,
                 "negative", "tutti", NULL);
}

/* Item 9: strict JSON (llama-server answers 400): \u0000, invalid UTF-8,
 * raw control characters, trailing bytes, non-JSON numbers. */
static void test_strict_json(void **state) {
    (void)state;
    const struct {
        const char *body, *want;
    } bad[] = {
        {"{\"prompt\":\"ab\\u0000cd\"}", "\\u0000"},
        {"{\"prompt\":\"ab\xff\xfe\"}", "UTF-8"},
        {"{\"prompt\":\"\xc0\xaf\"}", "UTF-8"},     /* overlong */
        {"{\"prompt\":\"\xed\xa0\x80\"}", "UTF-8"}, /* a surrogate */
        {"{\"prompt\":\"a\tb\"}", "control character"},
        {"{\"prompt\":\"x\"} trailing", "goes on"},
        {"{\"prompt\":\"x\"}{\"prompt\":\"y\"}", "goes on"},
        {"{\"prompt\":\"x\",\"max_tokens\":01}", "number"},
        {"{\"prompt\":\"x\",\"max_tokens\":1.}", "number"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        expect_error(&g_s, "POST", "/v1/completions", bad[k].body, NULL, 400, bad[k].want, NULL, NULL);
    expect_error(&g_s, "POST", "/tokenize", "{\"content\":\"a\\u0000\"} x", NULL, 400, NULL, NULL, NULL);
    /* what stays valid: escapes, UTF-8, whitespace after the value */
    cJSON_Delete(
        post_json(&g_s, "/v1/completions",
                  "{\"model\":\"stories260K\",\"prompt\":\"caf\xc3\xa9 \\u00e9\\n\\ud83d\\ude00\",\"max_tokens\":1}"
                  " \r\n",
                  200));
}

/* Items 10 and 11: no path or flag in error bodies, an inline ensemble
 * named for its members, empty logprobs lists for an empty text, CORS. */
static void test_leaks_and_small(void **state) {
    (void)state;
    int st;
    char *out =
        http(&g_s, "POST", "/v1/completions",
             "{\"prompt\":\"x\",\"tutti\":{\"members\":[\"stories260K\",\"tiny\"],\"align\":\"token\"}}", NULL, &st);
    assert_int_equal(st, 400);
    if (strstr(out, TUTTI_SHARED_DIR) || strstr(out, ".gguf") || strstr(out, "--"))
        fail_msg("an error body shows a path or a flag: %s", out);
    assert_non_null(strstr(out, "different vocabularies"));
    free(out);
    cJSON *j = post_json(
        &g_s, "/v1/completions",
        "{\"prompt\":\"x\",\"max_tokens\":3,\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"]}}", 200);
    assert_string_equal(jstr(j, "model"), "inline(stories260K,babyllama-tok361)");
    cJSON_Delete(j);
    /* logprobs of an empty text: empty lists, not null (OpenAI's shape) */
    j = post_json(&g_s, "/v1/completions",
                  "{\"model\":\"stories260K\",\"prompt\":\"x\",\"max_tokens\":0,\"logprobs\":2}", 200);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs");
    const char *keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(lp, keys[k]);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a)) fail_msg("logprobs.%s of an empty text is not []", keys[k]);
    }
    cJSON_Delete(j);
}

/* CORS headers of an answer: `curl -si` of a request */
static char *head_of(server *s, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "curl -s -i -o - %s 'http://127.0.0.1:%d/v1/chat/completions'", args, s->port);
    int st;
    char *out = run_cmd(cmd, &st);
    assert_non_null(out);
    return out;
}

/* ---- servers of their own ---- */

static void test_loading_auth(void **state) {
    (void)state;
    server s;
    char args[4096];
    snprintf(args, sizeof args, "-m %s --api-key s3cret -t 1", shared_path(M_STORIES));
    start(&s, "TUTTI_SERVE_TEST_LOAD_DELAY_MS=3000", args, false);
    /* loading: 503 until the models are in */
    expect_error(&s, "GET", "/health", NULL, NULL, 503, "loading", NULL, NULL);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"x\"}", "-H 'Authorization: Bearer s3cret'", 503,
                 "loading", NULL, NULL);
    int st = 0;
    for (int t = 0; t < 600 && st != 200; t++) {
        free(http(&s, "GET", "/health", NULL, NULL, &st));
        if (st != 200) sleep_ms(50);
    }
    assert_int_equal(st, 200);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"x\"}", NULL, 401, "API key", NULL, "invalid_api_key");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"x\"}", "-H 'Authorization: Bearer wrong'", 401,
                 "API key", NULL, "invalid_api_key");
    expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret2'", 401, NULL, NULL, NULL);
    /* the scheme is case-insensitive (RFC 9110 section 11.1) */
    free(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: bearer s3cret'", &st));
    assert_int_equal(st, 200);
    free(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: BEARER   s3cret'", &st));
    assert_int_equal(st, 200);
    /* a CORS preflight carries no credentials: answered, with the headers */
    char *h = head_of(&s, "-X OPTIONS -H 'Origin: http://page.example' -H 'Access-Control-Request-Method: POST' "
                          "-H 'Access-Control-Request-Headers: authorization, content-type'");
    if (!strstr(h, " 204 ") || !strcasestr(h, "Access-Control-Allow-Origin: *") ||
        !strcasestr(h, "Access-Control-Allow-Methods:") ||
        !strcasestr(h, "Access-Control-Allow-Headers: authorization"))
        fail_msg("CORS preflight:\n%s", h);
    free(h);
    h = head_of(&s, "-H 'Origin: http://page.example'");
    if (!strstr(h, " 401 ") || !strcasestr(h, "Access-Control-Allow-Origin: *")) fail_msg("CORS on an answer:\n%s", h);
    free(h);
    char *b = http(&s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":3}",
                   "-H 'Authorization: Bearer s3cret'", &st);
    assert_int_equal(st, 200);
    free(b);
    /* a story model has no chat template, and this server has no override */
    expect_error(&s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "-H 'Authorization: Bearer s3cret'", 400, "chat_template", NULL, NULL);
    assert_int_equal(stop(&s), 0);
}

/* --api-key-file (one key per line) and TUTTI_API_KEY: the key off the
 * command line (ps shows it otherwise). */
static void test_key_sources(void **state) {
    (void)state;
    server s;
    char args[4096], kf[256];
    snprintf(kf, sizeof kf, "/tmp/tutti_test_serve_keys_%d", (int)getpid());
    FILE *f = fopen(kf, "w");
    assert_non_null(f);
    fprintf(f, "# keys\nkey-one\n\n  key-two  \n");
    fclose(f);
    for (int k = 0; k < 2; k++) {
        if (k == 0) snprintf(args, sizeof args, "-m %s --api-key-file %s -t 1", shared_path(M_STORIES), kf);
        else snprintf(args, sizeof args, "-m %s -t 1", shared_path(M_STORIES));
        start(&s, k ? "TUTTI_API_KEY=env-key" : "", args, true);
        int st;
        const char *good[2][2] = {{"key-one", "key-two"}, {"env-key", "env-key"}};
        for (int g = 0; g < 2; g++) {
            char hdr[128];
            snprintf(hdr, sizeof hdr, "-H 'Authorization: Bearer %s'", good[k][g]);
            free(http(&s, "GET", "/v1/models", NULL, hdr, &st));
            assert_int_equal(st, 200);
        }
        expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer # keys'", 401, NULL, NULL, NULL);
        expect_error(&s, "GET", "/v1/models", NULL, NULL, 401, NULL, NULL, NULL);
        assert_int_equal(stop(&s), 0);
    }
    unlink(kf);
    char cmd[4096];
    int st;
    snprintf(cmd, sizeof cmd, "%s serve --port 0 -m %s --api-key a --api-key-file %s 2>&1", TUTTI_CLI,
             shared_path(M_STORIES), kf);
    free(run_cmd(cmd, &st));
    assert_int_equal(st, 2);
}

/* Item 11: every file is checked before "listening": a missing model, a
 * file that is no GGUF, a bad config: exit 1, never listening. */
static void test_checks_before_listening(void **state) {
    (void)state;
    char cmd[4096], bad_cfg[256];
    snprintf(bad_cfg, sizeof bad_cfg, "/tmp/tutti_test_serve_badcfg_%d.json", (int)getpid());
    FILE *f = fopen(bad_cfg, "w");
    assert_non_null(f);
    fprintf(f, "{\"models\": [{\"path\": \"/nonexistent/m.gguf\"}]}");
    fclose(f);
    const char *cases[] = {"-m %s -m /nonexistent/b.gguf", "-m %s -m " TUTTI_SOURCE_DIR "/README.md",
                           "-m %s --config /nonexistent/cfg.json", "-m %s --config %s"};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char a[1024];
        snprintf(a, sizeof a, cases[k], shared_path(M_STORIES), bad_cfg);
        snprintf(cmd, sizeof cmd, "%s serve --port 0 %s 2>&1", TUTTI_CLI, a);
        int st;
        char *out = run_cmd(cmd, &st);
        if (st != 1 || strstr(out, "listening")) fail_msg("tutti serve %s: exit %d, or it listened:\n%s", a, st, out);
        free(out);
    }
    unlink(bad_cfg);
}

/* One slot, no queue: a second request while the first streams is a 503;
 * a client that disconnects mid-stream stops its generation and frees the
 * slot. */
static void test_queue_disconnect(void **state) {
    (void)state;
    server s;
    char args[8192];
    snprintf(args, sizeof args, "%s -t 1 --parallel 1 --queue 0", four_models());
    /* 20 ms per piece of text: greedy, the generation would run to the
     * contexts' end (~1000 bytes, 20 s) */
    start(&s, "TUTTI_SERVE_TEST_PIECE_DELAY_MS=20", args, true);
    char cmd[4096];
    /* a long fused generation (byte alignment, up to the 256-token contexts) */
    snprintf(cmd, sizeof cmd,
             "curl -sN -o %s/long.out http://127.0.0.1:%d/v1/completions -H 'Content-Type: application/json' "
             "--data-binary '{\"prompt\":\"" PROMPT
             "\",\"max_tokens\":100000,\"temperature\":0,\"stream\":true}' </dev/null >/dev/null 2>&1 & echo $!",
             s.dir, s.port);
    int rc;
    char *pid = run_cmd(cmd, &rc);
    pid_t cp = atoi(pid);
    free(pid);
    assert_true(cp > 0);
    for (int t = 0; t < 200 && metric(&s, "tutti_slots_busy") < 1; t++) sleep_ms(20);
    assert_int_equal((int)metric(&s, "tutti_slots_busy"), 1);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", NULL, 503, "busy", NULL, NULL);
    sleep_ms(200);
    kill(cp, SIGKILL); /* the client goes away mid-stream */
    waitpid(cp, NULL, 0);
    int t = 0;
    for (; t < 100 && metric(&s, "tutti_slots_busy") > 0; t++) sleep_ms(10);
    if (metric(&s, "tutti_slots_busy") > 0) fail_msg("the slot is still busy 1 s after the client left");
    assert_int_equal((int)metric(&s, "tutti_requests_cancelled_total"), 1);
    /* it stopped long before the contexts were full (~1000 bytes) */
    double units = metric(&s, "tutti_generated_tokens_total");
    if (!(units > 0 && units < 150)) fail_msg("%g bytes generated for a client that left after ~0.3 s", units);
    size_t n;
    char path[512];
    snprintf(path, sizeof path, "%s/long.out", s.dir);
    char *got = read_file(path, &n);
    assert_non_null(got);
    assert_null(strstr(got, "[DONE]"));
    free(got);
    /* the slot serves the next request */
    int st;
    char *b = http(&s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", NULL, &st);
    assert_int_equal(st, 200);
    free(b);
    assert_int_equal(stop(&s), 0);
}

static void test_logprobs(void **state) {
    (void)state;
    require_shared();
    server s;
    char args[4096], body[4096];
    snprintf(args, sizeof args, "-m %s -m %s -m %s --chat-template %s -t 1", shared_path(M_STORIES),
             shared_path(M_DREAMS), shared_path(M_B361), TEMPLATE);
    start(&s, "", args, true);
    /* one model: log-softmax of its own logits */
    const char *one[] = {M_STORIES};
    double w1[] = {1};
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":24,"
             "\"temperature\":0,\"logprobs\":5}");
    cJSON *j = post_json(&s, "/v1/completions", body, 200);
    check_token_logprobs(one, w1, 1,
                         cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs"),
                         jstr(j, "choices.0.text"), 5, NULL);
    assert_int_equal((int)jnum(j, "choices.0.logprobs.text_offset.0"), 0);
    cJSON_Delete(j);
    expect_stream_same_entries(&s, "/v1/completions", body);
    /* two members with one vocabulary, fused in TOKEN alignment: the mix of
     * their own distributions */
    const char *two[] = {M_STORIES, M_DREAMS};
    double w2[] = {0.7, 0.3};
    snprintf(body, sizeof body,
             "{\"prompt\":\"" PROMPT "\",\"max_tokens\":24,\"temperature\":0,\"logprobs\":4,"
             "\"tutti\":{\"members\":[\"stories260K\",\"stories260K-dreams\"],\"weights\":[0.7,0.3],"
             "\"rule\":\"mix\",\"align\":\"token\",\"shares\":true}}");
    j = post_json(&s, "/v1/completions", body, 200);
    /* with each member's share of every token (the page's colours) */
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    check_token_logprobs(two, w2, 2, cJSON_GetObjectItemCaseSensitive(c0, "logprobs"), jstr(j, "choices.0.text"), 4,
                         cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "tutti"), "shares"));
    cJSON_Delete(j);
    /* BYTE alignment (two vocabularies), sampled: one entry per character,
     * streamed = not streamed; chat and completions */
    const char *ens = "\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],\"align\":\"byte\"}";
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":30,"
             "\"seed\":11,\"temperature\":0.9,\"logprobs\":true,\"top_logprobs\":5,%s}",
             ens);
    j = post_json(&s, "/v1/chat/completions", body, 200);
    check_chat_entries(cJSON_GetObjectItemCaseSensitive(
                           cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs"),
                           "content"),
                       jstr(j, "choices.0.message.content"), 5, true);
    cJSON_Delete(j);
    expect_stream_same_entries(&s, "/v1/chat/completions", body);
    snprintf(body, sizeof body, "{\"prompt\":\"" PROMPT "\",\"max_tokens\":20,\"seed\":3,\"logprobs\":3,%s}", ens);
    expect_stream_same_entries(&s, "/v1/completions", body);
    /* BYTE alignment's shares: one per character, spelling the text, each
     * a distribution over the members */
    snprintf(body, sizeof body,
             "{\"prompt\":\"" PROMPT "\",\"max_tokens\":20,\"seed\":3,"
             "\"tutti\":{\"members\":[\"stories260K\",\"babyllama-tok361\"],\"align\":\"byte\","
             "\"shares\":true}}");
    j = post_json(&s, "/v1/completions", body, 200);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "tutti"),
                    "shares"),
                *u;
    char spelled[4096] = "";
    size_t chars = 0;
    for (const char *p = jstr(j, "choices.0.text"); *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
    assert_int_equal(cJSON_GetArraySize(sh), (int)chars);
    cJSON_ArrayForEach(u, sh) {
        strncat(spelled, jstr(u, "text"), sizeof spelled - strlen(spelled) - 1);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(u, "share");
        assert_int_equal(cJSON_GetArraySize(v), 2);
        double t = cJSON_GetArrayItem(v, 0)->valuedouble + cJSON_GetArrayItem(v, 1)->valuedouble;
        assert_true(fabs(t - 1) < 2e-4);
    }
    expect_same("byte shares spell the text", jstr(j, "choices.0.text"), spelled);
    cJSON_Delete(j);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"echo\":true,\"tutti\":{\"shares\":true}}", NULL,
                 400, "echo", "tutti", NULL);
    /* one model in chat, TOKEN: tokens' bytes are the message's */
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
             "\"max_tokens\":30,\"seed\":5,\"logprobs\":true,\"top_logprobs\":3}");
    j = post_json(&s, "/v1/chat/completions", body, 200);
    check_chat_entries(cJSON_GetObjectItemCaseSensitive(
                           cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs"),
                           "content"),
                       jstr(j, "choices.0.message.content"), 3, false);
    cJSON_Delete(j);
    expect_stream_same_entries(&s, "/v1/chat/completions", body);
    /* a stop string inside a token (greedy: ", there was a ..."; "re w" cuts
     * " there" to " the"): the entries end with the text, cut token included */
    snprintf(body, sizeof body,
             "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"max_tokens\":10,"
             "\"temperature\":0,\"stop\":\"re w\",\"logprobs\":2}");
    j = post_json(&s, "/v1/completions", body, 200);
    const char *t = jstr(j, "choices.0.text");
    assert_string_equal(t, ", the");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0),
                                         "logprobs"),
        "tokens");
    assert_int_equal(cJSON_GetArraySize(toks), 2);
    assert_string_equal(cJSON_GetArrayItem(toks, 1)->valuestring, " the");
    cJSON_Delete(j);
    expect_stream_same_entries(&s, "/v1/completions", body);
    /* no logprobs asked: null, as before */
    j = post_json(&s, "/v1/completions", "{\"model\":\"stories260K\",\"prompt\":\"x\",\"max_tokens\":3}", 200);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "logprobs")));
    cJSON_Delete(j);
    assert_int_equal(stop(&s), 0);
}

/* llama-server's endpoints (src/server/native.c): /completion's n_probs
 * against the model's own log-softmax (C API), /tokenize against the
 * tokenizer, /detokenize back, /props, and their errors. */
static void test_native(void **state) {
    (void)state;
    server s;
    char args[4096];
    snprintf(args, sizeof args, "-m %s -m %s -t 1", shared_path(M_STORIES), shared_path(M_B361));
    start(&s, "", args, true);
    tutti_model *m = tutti_model_load(shared_path(M_STORIES), NULL);
    assert_non_null(m);
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t ids[64], V = tutti_vocab_n_tokens(v);
    int32_t n = tutti_tokenize(v, PROMPT, strlen(PROMPT), true, false, ids, 64);
    assert_true(n > 1);
    /* /tokenize: the tokenizer's ids; with_pieces: their texts */
    cJSON *j =
        post_json(&s, "/tokenize", "{\"model\":\"stories260K\",\"content\":\"" PROMPT "\",\"add_special\":true}", 200);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    assert_int_equal(cJSON_GetArraySize(t), n);
    for (int32_t i = 0; i < n; i++) assert_int_equal((int)cJSON_GetArrayItem(t, i)->valuedouble, ids[i]);
    cJSON_Delete(j);
    j = post_json(&s, "/tokenize", "{\"model\":\"stories260K\",\"content\":\"Once\",\"with_pieces\":true}", 200);
    assert_string_equal(jstr(j, "tokens.0.piece"), " Once");
    cJSON_Delete(j);
    char body[2048];
    int k = snprintf(body, sizeof body, "{\"model\":\"stories260K\",\"tokens\":[");
    for (int32_t i = 0; i < n; i++) k += snprintf(body + k, sizeof body - (size_t)k, i ? ",%d" : "%d", ids[i]);
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    j = post_json(&s, "/detokenize", body, 200);
    assert_string_equal(jstr(j, "content"), PROMPT);
    cJSON_Delete(j);
    /* /completion: every token's logprob is the model's own log-softmax */
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    tutti_session *ss = tutti_session_new(m, &sp);
    assert_int_equal(tutti_session_eval(ss, ids, n, NULL), 0);
    double *ls = malloc(sizeof(double) * (size_t)V);
    log_softmax(tutti_session_logits(ss), V, ls);
    k = snprintf(body, sizeof body, "{\"model\":\"stories260K\",\"n_predict\":1,\"n_probs\":%d,\"prompt\":[", V);
    for (int32_t i = 0; i < n; i++) k += snprintf(body + k, sizeof body - (size_t)k, i ? ",%d" : "%d", ids[i]);
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    for (int rep = 0; rep < 2; rep++) { /* the second reuses the slot's cached prefix */
        j = post_json(&s, "/completion", body, 200);
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "completion_probabilities"), 0), "top_logprobs");
        assert_int_equal(cJSON_GetArraySize(top), V);
        double prev = INFINITY;
        const cJSON *e;
        cJSON_ArrayForEach(e, top) {
            int id = (int)jnum(e, "id");
            double l = jnum(e, "logprob");
            assert_true(id >= 0 && id < V && l <= prev);
            prev = l;
            if (fabs(l - ls[id]) > 1e-5) fail_msg("token %d: /completion %.7f, the model's own %.7f", id, l, ls[id]);
        }
        assert_int_equal((int)jnum(j, "completion_probabilities.0.id"),
                         (int)jnum(j, "completion_probabilities.0.top_logprobs.0.id"));
        if (rep == 1) assert_int_equal((int)jnum(j, "timings.prompt_n"), 1);
        cJSON_Delete(j);
    }
    free(ls);
    tutti_session_free(ss);
    tutti_model_free(m);
    j = post_json(&s, "/completion", "{\"model\":\"stories260K\",\"prompt\":\"" PROMPT "\",\"n_probs\":3}", 200);
    assert_int_equal(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "completion_probabilities"), 0), "top_logprobs")),
        3);
    cJSON_Delete(j);
    int st;
    char *props = http(&s, "GET", "/props", NULL, NULL, &st);
    assert_int_equal(st, 200);
    j = cJSON_Parse(props);
    assert_true(jnum(j, "default_generation_settings.n_ctx") > 0);
    cJSON_Delete(j);
    free(props);
    j = post_json(&s, "/tokenize", "{\"model\":\"stories260K\",\"content\":\"x\"}", 200);
    cJSON_Delete(j);
    /* errors */
    expect_error(&s, "POST", "/completion", "{\"prompt\":[1,2]}", NULL, 400, "ensemble", NULL, NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"nope\",\"prompt\":[1]}", NULL, 404, "does not exist", NULL,
                 NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"stories260K\",\"prompt\":[1,99999]}", NULL, 400, "token id",
                 NULL, NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"stories260K\",\"prompt\":[1],\"n_predict\":5}", NULL, 400,
                 "n_predict", NULL, NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"stories260K\",\"prompt\":[1],\"n_probs\":-1}", NULL, 400,
                 "n_probs", NULL, NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"stories260K\",\"prompt\":[]}", NULL, 400, "empty", NULL,
                 NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":\"stories260K\",\"prompt\":[1],\"stream\":true}", NULL, 400,
                 "stream", NULL, NULL);
    expect_error(&s, "POST", "/completion", "{\"model\":", NULL, 400, "malformed JSON", NULL, NULL);
    expect_error(&s, "POST", "/tokenize", "{\"model\":\"stories260K\",\"content\":3}", NULL, 400, "content", NULL,
                 NULL);
    expect_error(&s, "POST", "/detokenize", "{\"model\":\"stories260K\",\"tokens\":[\"a\"]}", NULL, 400, "token", NULL,
                 NULL);
    expect_error(&s, "GET", "/tokenize", NULL, NULL, 405, "POST", NULL, NULL);
    assert_int_equal(stop(&s), 0);
}

/* usage errors exit 2, runtime errors 1 */

/* --route and --adapt on 'default' (flags, as tutti run's): the served text
 * equals tutti run's with the same flags, and the same on the warm slot
 * (route puts the given weights back after each request). */
static void test_route_adapt(void **state) {
    (void)state;
    const char *flags[2] = {"--route --route-tau 0.5", "--adapt-alpha 0.05"};
    for (int k = 0; k < 2; k++) {
        server s;
        char args[8192], body[1024];
        snprintf(args, sizeof args, "-m %s -m %s -w 0.6,0.4 %s -t 1", shared_path(M_STORIES), shared_path(M_B361),
                 flags[k]);
        start(&s, "", args, true);
        snprintf(args, sizeof args, "run -m %s -m %s -w 0.6,0.4 %s -p '" PROMPT "' -n 60 --seed 4 -t 1",
                 shared_path(M_STORIES), shared_path(M_B361), flags[k]);
        char *want = cli(args);
        snprintf(body, sizeof body, "{\"prompt\":\"" PROMPT "\",\"max_tokens\":60,\"seed\":4}");
        for (int rep = 0; rep < 2; rep++) {
            char *got = completion_text(&s, body);
            expect_same(flags[k], want, got);
            free(got);
        }
        free(want);
        assert_int_equal(stop(&s), 0);
    }
}

/* A file from `tutti fit --context --select-share` (context weights and
 * selective fusion) serves unchanged: 'default' from -e gives what `tutti
 * run -e` gives. */
static void test_context_file(void **state) {
    (void)state;
    require_shared();
    char ens[] = "/tmp/tutti_test_ctxw_XXXXXX", txt[300], args[8192], body[1024];
    int fd = mkstemp(ens);
    assert_true(fd >= 0);
    close(fd);
    snprintf(txt, sizeof txt, "%s.txt", ens);
    FILE *f = fopen(txt, "w");
    fprintf(f, "Tom had a red ball. He liked to throw it to his dog. One day the ball went into the pond.\n\n"
               "The dog jumped in and got the ball. Tom was happy and gave the dog a big hug.\n\n"
               "Mia found a little bird. It was cold, so she put it in a warm box.\n");
    fclose(f);
    snprintf(args, sizeof args,
             "fit --quiet --text %s -m %s -m %s --align byte --temp-grid 1 --context entropy,loss "
             "--select-share 0.5 -o %s -t 1",
             txt, shared_path(M_STORIES), shared_path(M_B361), ens);
    free(cli(args));
    size_t n;
    char *file = read_file(ens, &n);
    assert_non_null(file);
    assert_non_null(strstr(file, "context entropy loss"));
    assert_non_null(strstr(file, "select "));
    free(file);
    server s;
    snprintf(args, sizeof args, "-e %s -t 1", ens);
    start(&s, "", args, true);
    snprintf(args, sizeof args, "run -e %s -p '" PROMPT "' -n 60 --seed 4 -t 1", ens);
    char *want = cli(args);
    snprintf(body, sizeof body, "{\"prompt\":\"" PROMPT "\",\"max_tokens\":60,\"seed\":4}");
    char *got = completion_text(&s, body);
    expect_same("context weights and selective fusion from the fitted file", want, got);
    free(got), free(want);
    assert_int_equal(stop(&s), 0);
    unlink(ens), unlink(txt);
}

static void test_cli_usage(void **state) {
    (void)state;
    char cmd[4096];
    int st;
    const char *usage[] = {"", "--port 70000 -m x.gguf", "--parallel 0 -m x.gguf", "--bogus", "-m"};
    for (size_t k = 0; k < sizeof usage / sizeof *usage; k++) {
        snprintf(cmd, sizeof cmd, "%s serve %s 2>&1", TUTTI_CLI, usage[k]);
        free(run_cmd(cmd, &st));
        if (st != 2) fail_msg("`tutti serve %s` exited %d, want 2", usage[k], st);
    }
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --host not-an-address -m %s 2>&1", TUTTI_CLI, shared_path(M_STORIES));
    free(run_cmd(cmd, &st));
    assert_int_equal(st, 2);
    snprintf(cmd, sizeof cmd, "%s serve --port 0 -m /nonexistent/model.gguf 2>&1", TUTTI_CLI);
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "/nonexistent/model.gguf"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s serve --help", TUTTI_CLI);
    out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--parallel"));
    free(out);
}

int main(void) {
    const struct CMUnitTest shared_server[] = {
        cmocka_unit_test(test_health_models_metrics),
        cmocka_unit_test(test_equals_cli),
        cmocka_unit_test(test_request_options),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_chat_kv_reuse),
        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_openai_npm),
        cmocka_unit_test(test_output_fields),
        cmocka_unit_test(test_token_prompts),
        cmocka_unit_test(test_inline_settings),
        cmocka_unit_test(test_strict_json),
        cmocka_unit_test(test_leaks_and_small),
        cmocka_unit_test(test_full_context_finish_length),
    };
    const struct CMUnitTest own_server[] = {
        cmocka_unit_test(test_loading_auth),
        cmocka_unit_test(test_key_sources),
        cmocka_unit_test(test_checks_before_listening),
        cmocka_unit_test(test_queue_disconnect),
        cmocka_unit_test(test_cli_usage),
        shared_unit_test(test_logprobs),
        cmocka_unit_test(test_native),
        cmocka_unit_test(test_route_adapt),
        shared_unit_test(test_context_file),
    };
    test_select_part();
    int rc = cmocka_run_group_tests(shared_server, setup, teardown);
    rc |= cmocka_run_group_tests(own_server, NULL, NULL);
    return rc;
}
