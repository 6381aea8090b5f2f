/* Fuzz harness of the remote member's answer parsing (src/fusion/
 * member/remote.c through member/remote_json.h): what a model server sends back
 * is outside input.  See fuzz/README.md for the pattern.
 *
 * Input: byte 0 picks the answer and the vocabulary, the rest is the answer
 * as it came over HTTP (not NUL-terminated).
 *   bits 0-2: 0, 6, 7 llama-server's /completion (native API); 1 OpenAI-style
 *             /v1/completions (by id, or classic OpenAI's by token text);
 *             2 /tokenize; 3 /detokenize; 4 /props; 5 /v1/models
 *   bit 3:    0 the vocabulary of stories260K (512 tokens, token texts for
 *             classic answers; read once from $TUTTI_SHARED_DIR/models, else
 *             the test build's TUTTI_SHARED_DIR, else ../shared beside the
 *             source tree; without it the same 512 ids and no texts);
 *             1 no vocabulary, n_vocab = 1 + (byte 0 >> 4) (1..16: ids near
 *             the range's end)
 * The answer is copied to the end of a page followed by an inaccessible
 * one (guarded.h), so that a read past its end faults even inside libc
 * (ASan does not check strtod) and cJSON.
 *
 * Promises checked (trap when broken):
 *  - next-token answers: 0 or TUTTI_ERR with a message naming the URL; on 0,
 *    1 <= k <= n_vocab tokens marked seen, exactly those have a
 *    log-probability (<= 0, not NaN), every other token -inf, and the mass
 *    is the sum of their probabilities;
 *  - llama-server answers: whenever the fast scanner reads an answer, the
 *    full JSON parser (cJSON) reads the same bytes to the same result, bit
 *    for bit (the scanner is an optimisation, never a second opinion), and
 *    the member's path (scanner first) gives that result;
 *  - /tokenize, /detokenize, /props, /v1/models: results in their ranges.
 * Crashes, leaks, undefined behaviour and timeouts are the other findings. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "member/remote_json.h"
#include "common.h"
#include "guarded.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static tutti_vocab *g_vocab;
static bool g_tried;

static tutti_vocab *get_vocab(void) {
    if (!g_tried) {
        g_tried = true;
        char path[4096];
        fuzz_shared_path("models/stories260K.gguf", path, sizeof path);
        g_vocab = tutti_vocab_load(path);
    }
    return g_vocab;
}

static const char WHERE[] = "http://fuzz.invalid:8080/answer";

static void check_error(void) {
    const char *e = tutti_last_error();
    CHECK(e && strstr(e, WHERE));
}

/* The promises of one successful next-token read. */
static void check_next(const fusion_remote_vocab *rv, const float *out, const fusion_remote_next *a) {
    int32_t V = rv->n_vocab, seen = 0;
    double mass = 0;
    CHECK(a->k >= 1 && a->k <= V);
    for (int32_t i = 0; i < V; i++) {
        CHECK(rv->seen[i] == 0 || rv->seen[i] == 1);
        if (!rv->seen[i]) {
            CHECK(isinf(out[i]) && out[i] < 0);
            continue;
        }
        seen++;
        CHECK(!isnan(out[i]) && out[i] <= 0);
        mass += exp((double)out[i]);
    }
    CHECK(seen == a->k);
    /* out holds each log-probability rounded to float */
    CHECK(a->mass >= 0 && fabs(a->mass - mass) <= 1e-6 * (1 + a->mass));
}

typedef struct result {
    int rc;
    fusion_remote_next a;
    float *out;
    uint8_t *seen;
} result;

static void keep(result *r, int rc, const fusion_remote_vocab *rv, const float *out, const fusion_remote_next *a) {
    r->rc = rc;
    r->a = *a;
    memcpy(r->out, out, sizeof(float) * (size_t)rv->n_vocab);
    memcpy(r->seen, rv->seen, (size_t)rv->n_vocab);
}

static bool same_result(const result *x, const result *y, int32_t V) {
    bool ms = x->a.server_ms == y->a.server_ms || (isnan(x->a.server_ms) && isnan(y->a.server_ms));
    return x->rc == y->rc && x->a.k == y->a.k && x->a.mass == y->a.mass && ms &&
           !memcmp(x->out, y->out, sizeof(float) * (size_t)V) && !memcmp(x->seen, y->seen, (size_t)V);
}

static void next_token(fusion_remote_vocab *rv, int api, const char *body, size_t n) {
    int32_t V = rv->n_vocab;
    float *out = malloc(sizeof(float) * (size_t)V);
    result r[3];
    for (int i = 0; i < 3; i++) {
        r[i].out = malloc(sizeof(float) * (size_t)V);
        r[i].seen = malloc((size_t)V);
        CHECK(r[i].out && r[i].seen);
    }
    CHECK(out);
    fusion_remote_next a;
    /* the member's path */
    int rc = fusion_remote_parse_next(rv, api, true, WHERE, body, n, out, &a);
    CHECK(rc == 0 || rc == TUTTI_ERR);
    if (rc == 0) check_next(rv, out, &a);
    else check_error();
    keep(&r[0], rc, rv, out, &a);
    if (rc == 0) { /* as a distribution (on a copy: the comparisons below use the answer as read) */
        fusion_remote_next b = a;
        bool renorm;
        float *o2 = malloc(sizeof(float) * (size_t)V);
        CHECK(o2);
        memcpy(o2, out, sizeof(float) * (size_t)V);
        int rd = fusion_remote_check_next(rv, WHERE, o2, &b, &renorm);
        CHECK(rd == 0 || rd == TUTTI_ERR);
        if (rd == 0) {
            double m = 0;
            for (int32_t i = 0; i < V; i++)
                if (rv->seen[i]) m += exp((double)o2[i]);
            CHECK(m <= 1 + 2 * FUSION_REMOTE_MASS_TOL);
            if (b.k >= V) CHECK(fabs(m - 1) <= 2 * FUSION_REMOTE_MASS_TOL);
        } else {
            check_error();
        }
        free(o2);
    }
    if (api == FUSION_REMOTE_API_LLAMA) {
        /* the full parser alone, and the scanner alone */
        rc = fusion_remote_parse_next(rv, api, false, WHERE, body, n, out, &a);
        CHECK(rc == 0 || rc == TUTTI_ERR);
        if (rc == 0) check_next(rv, out, &a);
        else check_error();
        keep(&r[1], rc, rv, out, &a);
        rc = fusion_remote_scan_llama(rv, body, n, out, &a);
        CHECK(rc == 0 || rc == -1);
        if (rc == 0) {
            check_next(rv, out, &a);
            keep(&r[2], rc, rv, out, &a);
            CHECK(same_result(&r[2], &r[1], V)); /* the full parser agrees */
            CHECK(same_result(&r[2], &r[0], V)); /* and the member took the scanner's */
        } else {
            for (int32_t i = 0; i < V; i++) CHECK(rv->seen[i] == 0 && isinf(out[i]) && out[i] < 0);
            CHECK(a.k == 0);
            CHECK(same_result(&r[1], &r[0], V)); /* the member took the full parser's */
        }
    }
    for (int i = 0; i < 3; i++) free(r[i].out), free(r[i].seen);
    free(out);
}

int tutti_fuzz_remote_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = guarded_copy(data + 1, size - 1);
    if (!body) return 0;
    size_t n = size - 1;
    int kind = data[0] & 7;
    const tutti_vocab *vocab = (data[0] & 8) ? NULL : get_vocab();
    int32_t V = (data[0] & 8) ? 1 + (data[0] >> 4) : vocab ? tutti_vocab_n_tokens(vocab) : 512;
    switch (kind) {
    case 1:
    case 0:
    case 6:
    case 7: {
        fusion_remote_vocab rv;
        CHECK(fusion_remote_vocab_init(&rv, vocab, V) == 0);
        next_token(&rv, kind == 1 ? FUSION_REMOTE_API_OPENAI : FUSION_REMOTE_API_LLAMA, body, n);
        fusion_remote_vocab_free(&rv);
        break;
    }
    case 2: {
        /* stories260K's ids of "Once upon a time" with BOS */
        static const int32_t want[] = {1, 403, 407, 261, 378};
        int32_t got = -1;
        int rc = fusion_remote_parse_tokenize(WHERE, body, n, want, 5, &got);
        CHECK(rc == 1 || rc == 0 || rc == TUTTI_ERR);
        CHECK(got >= 0);
        if (rc == 1) CHECK(got == 5);
        if (rc < 0) check_error();
        break;
    }
    case 3: {
        static const char text[] = "Once upon a time caf\xc3\xa9";
        int rc = fusion_remote_parse_detokenize(WHERE, body, n, text, sizeof text - 1);
        CHECK(rc == 1 || rc == 0 || rc == TUTTI_ERR);
        if (rc < 0) check_error();
        break;
    }
    case 4: {
        bool llama = true;
        int64_t n_ctx = -1;
        int rc = fusion_remote_parse_props(body, n, &llama, &n_ctx);
        CHECK(rc == 0 || rc == -1);
        CHECK(n_ctx >= 0 && n_ctx < (int64_t)1e15);
        if (!llama || rc < 0) CHECK(n_ctx == 0);
        break;
    }
    case 5: {
        int64_t nv = -1, nc = -1;
        int rc = fusion_remote_parse_models(body, n, (data[0] & 16) ? "fake" : "", &nv, &nc);
        CHECK(rc == 0 || rc == -1);
        CHECK(nv >= 0 && nv < (int64_t)1e15 && nc >= 0 && nc < (int64_t)1e15);
        if (rc < 0) CHECK(nv == 0 && nc == 0);
        break;
    }
    }
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_remote_one(data, size);
    return 0;
}
#endif
