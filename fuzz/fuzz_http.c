/* Fuzz harness of `tutti serve`'s request handling (src/server/request.c,
 * format.c); see fuzz/README.md for the pattern.
 *
 * Input: byte 0 picks the endpoint (bit 0: chat completions, else
 * completions); the rest is the request body as it arrives (not
 * NUL-terminated).  Promises checked (trap when broken): the parser returns
 * 0 or 400, a 400 has a message; an accepted request is internally
 * consistent (n in 1..16, stop strings non-empty, a prompt or >= 1 message
 * with a role); srv_utf8_clean of any bytes is valid UTF-8 without NUL; an
 * error object built from any message is JSON that parses back with the
 * same shape. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "server/format.h"
#include "server/request.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)


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
        CHECK(r.kind == kind && r.n >= 1 && r.n <= SRV_MAX_N && r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
        for (int i = 0; i < r.n_stop; i++) CHECK(r.stop[i] && r.stop[i][0]);
        CHECK(r.max_tokens >= -1);
        CHECK(r.logprobs >= -1 && r.logprobs <= SRV_MAX_TOP_LOGPROBS);
        if (kind == SRV_CHAT) {
            CHECK(r.n_msgs >= 1 && r.msgs);
            for (int i = 0; i < r.n_msgs; i++) CHECK(r.msgs[i].role && r.msgs[i].role[0]);
        } else {
            CHECK(r.prompt != NULL && strlen(r.prompt) == r.prompt_len);
        }
        if (r.ens.present) CHECK(r.ens.n_members >= 1 && r.ens.n_members <= TUTTI_ENSEMBLE_MAX_MEMBERS);
    }
    srv_request_free(&r);

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
