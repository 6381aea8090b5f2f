/* Fuzz harness of `tutti serve`'s request handling (src/server/request.c,
 * framing.c, format.c); see fuzz/README.md for the pattern.
 *
 * Input: byte 0 picks the endpoint (bit 0: chat completions, else
 * completions); the rest is the request body as it arrives (not
 * NUL-terminated), and is also read as an HTTP request head (a request line
 * and header lines) for the framing checks.  Promises checked (trap when
 * broken): the parser returns 0 or 400, a 400 has a message; an accepted
 * request is internally consistent (n in 1..16, choices at most 16, stop
 * strings non-empty, prompts without NUL, token-id prompts non-empty, a
 * prompt or >= 1 message with a role (tool fields a JSON object), tools
 * named with parameters that parse, a named tool_choice among them, no
 * grammar beside tools in use, logit_bias ids >= 0 with biases in
 * [-100, 100] or -inf); an accepted body is valid UTF-8 without NUL;
 * srv_utf8_clean of any bytes is valid UTF-8 without NUL; an error object
 * built from any message is JSON that parses back with the same shape; the
 * framing check returns 0 or 400 (with a message), always 400 for
 * Transfer-Encoding next to Content-Length; srv_first_line says 1 only for
 * a line srv_request_line_ok takes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "server/format.h"
#include "server/framing.h"
#include "server/request.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static void check_request(const srv_request *r, srv_kind kind, const char *body, size_t len) {
    CHECK(r->kind == kind && r->n >= 1 && r->n <= SRV_MAX_N && r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP);
    for (int i = 0; i < r->n_stop; i++) CHECK(r->stop[i] && r->stop[i][0]);
    CHECK(r->max_tokens >= -1);
    CHECK(r->logprobs >= -1 && r->logprobs <= SRV_MAX_TOP_LOGPROBS);
    CHECK(fuzz_valid_utf8((const unsigned char *)body, len) && !memchr(body, 0, len));
    if (kind == SRV_CHAT) {
        CHECK(r->n_msgs >= 1 && r->msgs);
        for (int i = 0; i < r->n_msgs; i++) {
            CHECK(r->msgs[i].role && r->msgs[i].role[0]);
            if (r->msgs[i].tool_json) { /* the template's tool fields: a JSON object */
                cJSON *m = cJSON_Parse(r->msgs[i].tool_json);
                CHECK(cJSON_IsObject(m));
                cJSON_Delete(m);
            }
        }
        /* tools: named, with parameters that parse; a named tool_choice is one of them */
        const srv_tools *t = &r->tools;
        CHECK(t->n >= 0 && t->n <= SRV_MAX_TOOLS && (!t->n || t->json));
        bool named = false;
        for (int k = 0; k < t->n; k++) {
            CHECK(t->name[k] && t->name[k][0] && t->params[k]);
            cJSON *p = cJSON_Parse(t->params[k]);
            CHECK(cJSON_IsObject(p));
            cJSON_Delete(p);
            named |= t->choice == SRV_TC_NAMED && !strcmp(t->name[k], t->named);
        }
        CHECK(t->choice != SRV_TC_NAMED || named);
        CHECK(!(t->n && t->choice != SRV_TC_NONE && r->grammar));
    } else {
        CHECK(r->n_prompts >= 1 && r->n_prompts * r->n <= SRV_MAX_N);
        for (int p = 0; p < r->n_prompts; p++) {
            const srv_prompt *q = &r->prompts[p];
            CHECK(!q->text != !q->ids);
            if (q->text) CHECK(strlen(q->text) == q->len);
            else CHECK(q->n_ids >= 1);
            for (int32_t k = 0; q->ids && k < q->n_ids; k++) CHECK(q->ids[k] >= 0);
        }
    }
    for (int32_t k = 0; k < r->n_bias; k++)
        CHECK(r->bias_ids[k] >= 0 && (r->bias[k] == -INFINITY || (r->bias[k] >= -100 && r->bias[k] <= 100)));
    if (r->ens.present) CHECK(r->ens.n_members >= 1 && r->ens.n_members <= TUTTI_ENSEMBLE_MAX_MEMBERS);
}

/* the bytes as an HTTP head: the request line, then "Name: value" lines */
static void check_framing(const char *b, size_t n) {
    int first = srv_first_line(b, n, n);
    CHECK(first >= -1 && first <= 1);
    const char *lf = memchr(b, '\n', n);
    if (first == 1) {
        size_t i = 0;
        while (i < n && (b[i] == '\n' || b[i] == '\r')) i++;
        const char *e = memchr(b + i, '\n', n - i);
        size_t k = (size_t)(e - (b + i));
        if (k && b[i + k - 1] == '\r') k--;
        CHECK(srv_request_line_ok(b + i, k));
    }
    srv_header h[32];
    char *names[32], *values[32];
    size_t nh = 0;
    bool te = false, cl = false;
    for (const char *p = lf ? lf + 1 : b + n; p < b + n && nh < 32;) {
        const char *e = memchr(p, '\n', (size_t)(b + n - p));
        size_t k = e ? (size_t)(e - p) : (size_t)(b + n - p);
        const char *colon = memchr(p, ':', k);
        if (colon) {
            names[nh] = strndup(p, (size_t)(colon - p));
            values[nh] = strndup(colon + 1, k - (size_t)(colon + 1 - p));
            CHECK(names[nh] && values[nh]);
            te |= !strcasecmp(names[nh], "Transfer-Encoding");
            cl |= !strcasecmp(names[nh], "Content-Length");
            h[nh] = (srv_header){names[nh], values[nh]};
            nh++;
        }
        p += k + 1;
    }
    char err[256] = "";
    int rc = srv_framing_check(h, nh, err, sizeof err);
    CHECK(rc == 0 || (rc == 400 && err[0]));
    if (te && cl) CHECK(rc == 400);
    for (size_t i = 0; i < nh; i++) free(names[i]), free(values[i]);
}

int tutti_fuzz_http_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_kind kind = (data[0] & 1) ? SRV_CHAT : SRV_COMPLETION;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_request r;
    char err[512];
    const char *param = (const char *)1;
    int rc = srv_request_parse(body, len, kind, &r, err, sizeof err, &param);
    CHECK(rc == 0 || rc == 400);
    if (rc) {
        CHECK(err[0] != 0);
    } else {
        CHECK(param == NULL);
        check_request(&r, kind, body, len);
    }
    srv_request_free(&r);
    check_framing(body, len);

    char *clean = srv_utf8_clean(body, len);
    CHECK(clean != NULL);
    CHECK(fuzz_valid_utf8((const unsigned char *)clean, strlen(clean)));
    /* every byte is kept or becomes U+FFFD: the text never shrinks */
    CHECK(strlen(clean) >= len);
    char *msg = malloc(len + 1);
    CHECK(msg != NULL);
    memcpy(msg, body, len);
    msg[len] = 0;
    char *json = srv_error_json(400, msg, "prompt", NULL);
    CHECK(json != NULL);
    cJSON *back = cJSON_Parse(json);
    CHECK(back != NULL);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(back, "error");
    CHECK(cJSON_IsObject(e) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")) &&
          cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")));
    cJSON_Delete(back);
    free(json);
    free(msg);
    free(clean);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_http_one(data, size);
    return 0;
}
#endif
