/* `tutti serve`: the OpenAI-style request body -> srv_request (cJSON).
 * Pure (no model, no I/O), so it is fuzzed on its own (fuzz/fuzz_http.c).
 *
 * Rules: the body is strict JSON (RFC 8259: valid UTF-8, no raw control
 * characters in strings, nothing after the value; also refused: \u0000,
 * which would cut a C string short); one table (request.c, `fields`) lists
 * every field of OpenAI's and llama-server's completion APIs and what is
 * done with it: honoured, accepted as changing nothing (`user`, `store`,
 * ...), or refused with a 400 naming it unless it has its neutral value
 * (`best_of` 1, `presence_penalty` 0, ...);
 * fields no API defines are ignored; a JSON null counts as absent (clients
 * send explicit nulls); a known field of the wrong type or out of range is a
 * 400 naming the field. */
#ifndef TUTTI_SERVER_REQUEST_H
#define TUTTI_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#define SRV_MAX_STOP 16
#define SRV_MAX_N 16      /* choices of a request: prompts x n */
#define SRV_MAX_BIAS 1024 /* logit_bias entries */

typedef enum srv_kind { SRV_COMPLETION = 0, SRV_CHAT = 1 } srv_kind;

typedef struct srv_msg {
    char *role;
    char *content; /* NULL: no content */
    /* OpenAI's tool fields of the message as a JSON object for the chat
     * template (tools.c): tool_calls (each call's arguments an object, as
     * Hugging Face templates expect), tool_call_id, name; NULL: none */
    char *tool_json;
} srv_msg;

/* tool_choice */
typedef enum srv_tool_choice { SRV_TC_AUTO = 0, SRV_TC_NONE, SRV_TC_REQUIRED, SRV_TC_NAMED } srv_tool_choice;

#define SRV_MAX_TOOLS 128

/* The request's tools (OpenAI's chat "tools": functions with a JSON-schema
 * "parameters"), parsed by tools_req.c. */
typedef struct srv_tools {
    int n; /* 0: none */
    char *name[SRV_MAX_TOOLS];
    char *params[SRV_MAX_TOOLS]; /* each one's parameters schema (JSON text) */
    char *json;                  /* the tools array as given, for the chat template */
    srv_tool_choice choice;
    char *named;   /* SRV_TC_NAMED: the function's name */
    bool parallel; /* parallel_tool_calls (default true) */
} srv_tools;

/* One prompt of /v1/completions: text, or token ids of member 1's
 * vocabulary (OpenAI's "array of tokens"; ids checked against the model
 * later, as the parser knows none). */
typedef struct srv_prompt {
    char *text; /* NULL for an id prompt */
    size_t len;
    int32_t *ids; /* NULL for a text prompt; n_ids >= 1 */
    int32_t n_ids;
} srv_prompt;

/* An ensemble described inline under the request's "tutti" field:
 * {"members": ["name", ...], "weights": [..], "temperatures": [..],
 *  "rule": "mix", "align": "byte"}; members are loaded model names.
 * Weights and temperatures pass the library's validator (tutti.h). */
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
    char *model;                   /* NULL: "default" */
    srv_prompt prompts[SRV_MAX_N]; /* completions: 1..SRV_MAX_N (a batch: choice c answers prompt c / n) */
    int n_prompts;
    srv_msg *msgs; /* chat */
    int n_msgs;
    int64_t max_tokens;      /* -1: not given */
    tutti_sampler_params sp; /* tutti's defaults (as `tutti run`) overridden by the request */
    bool seed_set;
    bool repeat_last_n_ctx; /* repeat_last_n -1: the whole context (set once it is known) */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    int n;              /* choices per prompt, 1..SRV_MAX_N */
    srv_inline_ens ens;
    /* the output's constraint (owned), NULL: text: grammar (GBNF),
     * json_schema, or response_format json_object / json_schema */
    tutti_grammar *grammar;
    const char *grammar_field; /* the field it came from (a static string) */
    /* logit_bias: ids (member 1's vocabulary) and their biases, -INFINITY = banned */
    int32_t *bias_ids;
    float *bias;
    int32_t n_bias;
    /* log-probabilities of the fused distribution: -1 off, else the number
     * of alternatives per entry (0..SRV_MAX_TOP_LOGPROBS).  Completions:
     * "logprobs": N; chat: "logprobs": true with "top_logprobs": N. */
    int logprobs;
    bool echo;       /* completions: the prompt returned in front of the text (echo.c) */
    bool shares;     /* "tutti": {"shares": true}: each member's share of every unit (logprobs.h) */
    srv_tools tools; /* chat: tools, tool_choice, parallel_tool_calls */
} srv_request;

#define SRV_MAX_TOP_LOGPROBS 20

/* Parses body[0..len) (not NUL-terminated) as a request of `kind`.  Returns
 * 0, or an HTTP status (400) with a message in err[errlen] and the
 * offending field name in *param (NULL if none; a static string).  r is
 * always safe to free. */
int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *r, char *err, size_t errlen,
                      const char **param);
void srv_request_free(srv_request *r);

/* tools_req.c: the fields "tools", "tool_choice", "parallel_tool_calls" and
 * a message's tool fields, each 0 or -1 with a message in err; the
 * cross-field checks once all are read (0, or -1 with err and *param). */
struct cJSON;
int srv_tools_parse(srv_tools *t, const struct cJSON *v, char *err, size_t cap);
int srv_tool_choice_parse(srv_tools *t, const struct cJSON *v, char *err, size_t cap);
int srv_msg_tools_parse(srv_msg *m, const struct cJSON *msg, char *err, size_t cap);
int srv_tools_check(const srv_request *r, char *err, size_t cap, const char **param);
void srv_tools_free(srv_tools *t);

/* A request body as strict JSON (the rules above): the root, or NULL with a
 * message naming the byte.  Also for llama-server's endpoints (native.c). */
struct cJSON;
struct cJSON *srv_json_parse(const char *body, size_t len, char *err, size_t errlen);

#endif
