/* Fuzz harness of `tutti serve`'s llama-server endpoints (src/server/
 * native.c): the bodies of POST /completion, /tokenize and /detokenize are
 * outside input.  See fuzz/README.md for the pattern.
 *
 * Input: byte 0 picks the endpoint and the served models, the rest is the
 * request body as it arrives (not NUL-terminated).
 *   bits 0-1: 0 /completion (srv_native_parse_completion); 1 /tokenize;
 *             2 /detokenize; 3 /v1/embeddings (srv_embd_prepare, embed.c)
 *   bit 2:    0 one model "stories" (context 64); 1 two, "a" (context 64)
 *             and "b" (context 8), and the ensembles "pair" (a, b) and
 *             "solo" (b alone)
 * The model is stories260K (512 tokens), read once from
 * $TUTTI_SHARED_DIR/models, else the test build's TUTTI_SHARED_DIR, else
 * ../shared beside the source tree; without it the harness does nothing.
 *
 * Promises checked (trap when broken):
 *  - /completion: 0 or 400/404 with a message; an accepted request names a
 *    served file, 1 <= prompt tokens < that file's context, every id in
 *    range, 0 <= n_probs <= n_vocab, n_predict 0 or 1; then the answer
 *    srv_native_completion_json writes for it (logits made from the prompt,
 *    with ties) is read back by the remote member's parser
 *    (member/remote_json.h), by its fast scanner: exactly the n_probs most
 *    likely tokens, each with its log-softmax (to float precision);
 *  - /tokenize, /detokenize: an answer, or NULL with a 4xx/5xx status and
 *    a message; the answer is JSON with the promised shape (ids in range;
 *    content valid UTF-8);
 *  - /v1/embeddings: 0, or 400/404 with a message and the field; an
 *    accepted request names a served single file, holds 1 to 2048 inputs of
 *    1 to n_ctx ids in range, and its answer (made of stand-in vectors) is
 *    JSON with one vector per input (float or base64 of n_embd float32s).
 * Crashes, leaks, undefined behaviour and timeouts are the other findings. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "member/remote_json.h"
#include "common.h"
#include "guarded.h"
#include "server/native.h"
#include "server/server.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static tutti_model *g_model;
static bool g_tried;
static srv_registry g_reg[2];

static void add_spec(srv_registry *reg, const char *name, int n, const int *files) {
    srv_spec *s = &reg->specs[reg->n_specs++];
    memset(s, 0, sizeof *s);
    s->name = (char *)name;
    s->n = n;
    for (int i = 0; i < n; i++) s->file[i] = files[i], s->w[i] = NAN, s->t[i] = NAN;
    s->align_used = -1;
}

/* The two registries, made once (they never change afterwards, but for
 * each file's answer fragments, built at its first answer). */
static bool setup(void) {
    if (g_tried) return g_model != NULL;
    g_tried = true;
    char path[4096];
    fuzz_shared_path("models/stories260K.gguf", path, sizeof path);
    g_model = tutti_model_load(path, NULL);
    if (!g_model) return false;
    static srv_file files[3];
    static srv_spec specs[2];
    files[0] = (srv_file){.path = "stories260K.gguf",
                          .name = "stories",
                          .model = g_model,
                          .vocab = tutti_model_vocab(g_model),
                          .n_ctx = 64};
    files[1] = (srv_file){
        .path = "stories260K.gguf", .name = "a", .model = g_model, .vocab = tutti_model_vocab(g_model), .n_ctx = 64};
    files[2] = (srv_file){
        .path = "stories260K-b.gguf", .name = "b", .model = g_model, .vocab = tutti_model_vocab(g_model), .n_ctx = 8};
    g_reg[0].files = &files[0], g_reg[0].n_files = 1;
    g_reg[1].files = &files[1], g_reg[1].n_files = 2;
    g_reg[1].specs = specs;
    add_spec(&g_reg[1], "pair", 2, (const int[]){0, 1});
    add_spec(&g_reg[1], "solo", 1, (const int[]){1});
    return true;
}

/* Logits of a prompt: few distinct values (ties are the sort's hard part). */
static void make_logits(const int32_t *ids, int32_t n, float *z, int32_t V) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 16777619u;
    for (int32_t i = 0; i < V; i++) z[i] = (float)((i * 7u + h) % 23u) * 0.5f - 4.0f;
    z[h % (uint32_t)V] = 9.0f;
}

/* The answer for an accepted request, read back by the remote member. */
static void check_answer(srv_file *f, const srv_job *j) {
    const tutti_vocab *v = tutti_model_vocab(f->model);
    int32_t V = tutti_vocab_n_tokens(v);
    float *z = malloc(sizeof(float) * (size_t)V), *out = malloc(sizeof(float) * (size_t)V);
    CHECK(z && out);
    make_logits(j->nat_ids, j->n_nat_ids, z, V);
    char *js = srv_native_completion_json(f, z, j->n_probs, j->n_predict, j->n_nat_ids, 1, 1e-3);
    CHECK(js != NULL);
    cJSON *root = cJSON_Parse(js);
    CHECK(root != NULL && cJSON_IsObject(root));
    cJSON_Delete(root);
    if (j->n_probs >= 1 && j->n_predict == 1) {
        fusion_remote_vocab rv;
        fusion_remote_next a;
        CHECK(fusion_remote_vocab_init(&rv, v, V) == 0);
        /* the scanner reads our own server's answers (no fallback needed) */
        CHECK(fusion_remote_scan_llama(&rv, js, strlen(js), out, &a) == 0);
        CHECK(a.k == j->n_probs);
        double mx = -INFINITY, s = 0;
        for (int32_t i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
        for (int32_t i = 0; i < V; i++) s += exp((double)z[i] - mx);
        double lz = mx + log(s);
        float lo_seen = INFINITY, hi_unseen = -INFINITY;
        for (int32_t i = 0; i < V; i++) {
            if (rv.seen[i]) {
                double want = (double)z[i] - lz; /* printed with 9 digits, read as float */
                CHECK(fabs((double)out[i] - want) <= 1e-6 + 1e-7 * fabs(want));
                lo_seen = z[i] < lo_seen ? z[i] : lo_seen;
            } else {
                hi_unseen = z[i] > hi_unseen ? z[i] : hi_unseen;
            }
        }
        CHECK(lo_seen >= hi_unseen); /* the most likely ones */
        fusion_remote_vocab_free(&rv);
    }
    free(js);
    free(z), free(out);
}

static void completion(srv_registry *reg, const char *body, size_t n) {
    srv_job j;
    memset(&j, 0, sizeof j);
    char err[512] = "";
    int rc = srv_native_parse_completion(reg, body, n, &j, err, sizeof err);
    CHECK(rc == 0 || rc == 400 || rc == 404);
    if (rc) {
        CHECK(err[0] != 0);
    } else {
        CHECK(j.nat_file >= 0 && j.nat_file < reg->n_files);
        srv_file *f = &reg->files[j.nat_file];
        int32_t V = tutti_model_n_vocab(f->model);
        CHECK(j.nat_ids && j.n_nat_ids >= 1 && j.n_nat_ids < f->n_ctx);
        for (int32_t i = 0; i < j.n_nat_ids; i++) CHECK(j.nat_ids[i] >= 0 && j.nat_ids[i] < V);
        CHECK(j.n_probs >= 0 && j.n_probs <= V);
        CHECK(j.n_predict == 0 || j.n_predict == 1);
        check_answer(f, &j);
    }
    free(j.nat_ids); /* as srv_job_unref, also after an error */
}

static void tokenize(srv_registry *reg, const char *body, size_t n) {
    int status = 0;
    char err[512] = "";
    char *r = srv_native_tokenize(reg, body, n, &status, err, sizeof err);
    if (!r) {
        CHECK(status >= 400 && status < 600 && err[0]);
        return;
    }
    cJSON *root = cJSON_Parse(r);
    CHECK(root);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *e;
    CHECK(cJSON_IsArray(t));
    int32_t V = tutti_model_n_vocab(g_model);
    cJSON_ArrayForEach(e, t) {
        const cJSON *id = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "id") : e;
        CHECK(cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < V);
        if (cJSON_IsObject(e)) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "piece");
            CHECK(cJSON_IsString(p) || cJSON_IsArray(p));
            if (cJSON_IsString(p))
                CHECK(fuzz_valid_utf8((const unsigned char *)p->valuestring, strlen(p->valuestring)));
        }
    }
    cJSON_Delete(root);
    free(r);
}

static void detokenize(srv_registry *reg, const char *body, size_t n) {
    int status = 0;
    char err[512] = "";
    char *r = srv_native_detokenize(reg, body, n, &status, err, sizeof err);
    if (!r) {
        CHECK(status >= 400 && status < 600 && err[0]);
        return;
    }
    cJSON *root = cJSON_Parse(r);
    CHECK(root);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    CHECK(cJSON_IsString(c) && fuzz_valid_utf8((const unsigned char *)c->valuestring, strlen(c->valuestring)));
    cJSON_Delete(root);
    free(r);
}

static void embeddings(srv_registry *reg, const char *body, size_t n) {
    static srv_server srv; /* only reg and opts.pooling are read */
    srv.reg = *reg;
    srv.opts.pooling = -1;
    srv_job j;
    memset(&j, 0, sizeof j);
    char err[512] = "";
    const char *param = NULL;
    int rc = srv_embd_prepare(&srv, &j, body, n, err, sizeof err, &param);
    CHECK(rc == 0 || rc == 400 || rc == 404);
    if (rc) {
        CHECK(err[0] != 0);
    } else {
        srv_embd *e = &j.embd;
        CHECK(e->file >= 0 && e->file < reg->n_files && e->n >= 1 && e->n <= 2048);
        const srv_file *f = &reg->files[e->file];
        int32_t V = tutti_model_n_vocab(f->model);
        int64_t total = 0;
        for (int i = 0; i < e->n; i++) {
            CHECK(e->n_ids[i] >= 1 && e->n_ids[i] <= f->n_ctx);
            for (int32_t k = 0; k < e->n_ids[i]; k++) CHECK(e->ids[i][k] >= 0 && e->ids[i][k] < V);
            total += e->n_ids[i];
        }
        CHECK(total == e->n_tokens);
        e->dim = tutti_model_n_embd(f->model);
        e->out = malloc(sizeof(float) * (size_t)e->n * (size_t)e->dim);
        CHECK(e->out);
        for (size_t k = 0; k < (size_t)e->n * (size_t)e->dim; k++) e->out[k] = (float)(k % 7) * 0.125f - 0.375f;
        char *js = srv_embd_json(&j);
        CHECK(js);
        cJSON *root = cJSON_Parse(js);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
        CHECK(cJSON_IsArray(data) && cJSON_GetArraySize(data) == e->n);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "embedding");
        if (e->base64) CHECK(cJSON_IsString(v) && strlen(v->valuestring) == ((size_t)e->dim * 4 + 2) / 3 * 4);
        else CHECK(cJSON_IsArray(v) && cJSON_GetArraySize(v) == e->dim);
        cJSON_Delete(root);
        free(js);
    }
    srv_embd_free(&j.embd); /* as srv_job_unref, also after an error */
}

int tutti_fuzz_native_one(const uint8_t *data, size_t size) {
    if (size < 1 || !setup()) return 0;
    srv_registry *reg = &g_reg[(data[0] >> 2) & 1];
    const char *body = guarded_copy(data + 1, size - 1); /* cJSON is not instrumented */
    size_t n = size - 1;
    if (!body) return 0;
    switch (data[0] & 3) {
    case 1: tokenize(reg, body, n); break;
    case 2: detokenize(reg, body, n); break;
    case 3: embeddings(reg, body, n); break;
    default: completion(reg, body, n); break;
    }
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_native_one(data, size);
    return 0;
}
#endif
