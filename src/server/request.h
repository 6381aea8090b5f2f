/* `tutti serve`: the OpenAI-style request body -> srv_request (cJSON).
 * Pure (no model, no I/O), so it is fuzzed on its own (fuzz/fuzz_http.c).
 *
 * Rules: unknown fields are ignored; a JSON null counts as absent (clients
 * send explicit nulls); a known field of the wrong type or out of range is
 * a 400 naming the field; features not implemented (token-id prompts) are
 * a clear 400, never silently ignored. */
#ifndef TUTTI_SERVER_REQUEST_H
#define TUTTI_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#define SRV_MAX_STOP 16
#define SRV_MAX_N 16

typedef enum srv_kind { SRV_COMPLETION = 0, SRV_CHAT = 1 } srv_kind;

typedef struct srv_msg {
    char *role;
    char *content; /* NULL: no content */
} srv_msg;

/* An ensemble described inline under the request's "tutti" field:
 * {"members": ["name", ...], "weights": [..], "temperatures": [..],
 *  "rule": "mix", "align": "byte"}; members are loaded model names. */
typedef struct srv_inline_ens {
    bool present;
    char *members[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_members;
    float weights[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool has_weights;
    float temps[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool has_temps;
    int rule, align; /* -1: not given */
} srv_inline_ens;

typedef struct srv_request {
    srv_kind kind;
    char *model;         /* NULL: "default" */
    char *prompt;        /* completions */
    size_t prompt_len;
    srv_msg *msgs;       /* chat */
    int n_msgs;
    int64_t max_tokens;  /* -1: not given */
    tutti_sampler_params sp; /* tutti's defaults (as `tutti run`) overridden by the request */
    bool seed_set;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage;  /* stream_options.include_usage */
    int n;               /* choices, 1..SRV_MAX_N */
    srv_inline_ens ens;
    tutti_grammar *grammar; /* response_format json_object / json_schema (owned), NULL: text */
    /* log-probabilities of the fused distribution: -1 off, else the number
     * of alternatives per entry (0..SRV_MAX_TOP_LOGPROBS).  Completions:
     * "logprobs": N; chat: "logprobs": true with "top_logprobs": N. */
    int logprobs;
} srv_request;

#define SRV_MAX_TOP_LOGPROBS 20

/* Parses body[0..len) as a request of `kind`.  Returns 0, or an HTTP status
 * (400) with a message in err[errlen] and the offending field name in
 * *param (NULL if none; a static string).  r is always safe to free. */
int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *r, char *err, size_t errlen,
                      const char **param);
void srv_request_free(srv_request *r);

#endif
