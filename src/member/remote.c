/* Remote member: next-token distributions from a model server over HTTP.
 *
 * APIs.  llama-server's native API (api=llama, found by GET /props): the
 * context goes as token ids to POST /completion with n_predict 1 and
 * n_probs K; the answer's completion_probabilities[0].top_logprobs are the
 * log-probabilities of the K most likely next tokens, by id, taken from the
 * raw logits (post_sampling_probs off, no samplers), so they are the
 * model's distribution.  OpenAI-style servers (api=openai): POST
 * /v1/completions with max_tokens 1, temperature 0 and logprobs K; the top
 * tokens come back by id (llama-server's own /v1 form) or by token text
 * (classic OpenAI), which is mapped to ids through the local vocabulary.
 *
 * Vocabulary.  The fusion layer needs the member's tokenizer as a
 * tutti_vocab (TOKEN alignment compares vocabularies, the byte trie of BYTE
 * alignment needs every token's bytes), and a server does not hand one out.
 * So the spec names a local GGUF file with the tokenizer (vocab=PATH, a
 * vocab-only GGUF is enough), and it is checked at start: a probe text is
 * tokenized by the server (/tokenize) and locally, and the ids must be the
 * same, then /detokenize must give back the probe's bytes.  Only then does
 * the member carry the file's vocabulary hash (so TOKEN alignment with a
 * local model of that vocabulary is allowed); a server without /tokenize
 * gets a hash of its own (BYTE alignment) and a note on stderr.
 *
 * Partial distributions.  With K < n_vocab the server gives the top K only.
 * The rest of the mass, r = 1 - sum(top K), is either spread uniformly over
 * the other n_vocab - K tokens (rest=uniform, the default: no token becomes
 * impossible, the distribution stays normalised) or dropped, renormalising
 * over the top K (rest=renorm; across members this is UniTE's union of
 * top-k, Yao et al. 2024: the fusion renormalises over the tokens some
 * member kept).  r is added to the member's statistics (approximated mass).
 *
 * Failures.  Each request has a timeout.  on_fail=stop (default): an error
 * stops the run.  on_fail=leave: the member says so on stderr, answers
 * uniform logits from then on and fusion_member_has_left() turns true; the
 * ensemble then gives it weight 0 (the others renormalised). */
#include "member/remote.h"
#include "member/remote_json.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "net/http.h"
#include "util/clock.h"
#include "util/error.h"

enum { API_AUTO = FUSION_REMOTE_API_AUTO, API_LLAMA = FUSION_REMOTE_API_LLAMA, API_OPENAI = FUSION_REMOTE_API_OPENAI };
enum { REST_UNIFORM, REST_RENORM };

/* Bytes with many kinds of token: words, digits, punctuation, newline,
 * quotes, multi-byte UTF-8 (byte fallback in small SPM vocabularies). */
static const char PROBE[] =
    "Once upon a time, Lily said: \"Look! 42 cats.\"\nThe end. caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80";

typedef struct remote_member {
    fusion_member base;
    tutti_vocab *vocab;
    remote_http *http;
    char *model;      /* MODEL of the spec ("" when none) */
    char *model_json; /* it as a JSON string, NULL when none */
    int api;
    int rest;
    bool leave; /* on_fail=leave */
    bool left;
    bool warned_mass; /* a top-k answer summing past 1 was renormalised (said once) */
    int32_t top_k;
    char *body; /* request scratch */
    size_t body_cap;
    fusion_remote_vocab rv; /* ids, scratch and token texts for reading the answers */
    fusion_remote_stats st;
} remote_member;

static const fusion_member_vt remote_vt;

bool fusion_is_remote_spec(const char *path) {
    return path && (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8));
}

bool fusion_member_has_left(const fusion_member *m) {
    return m && m->vt == &remote_vt && ((const remote_member *)m)->left;
}

int fusion_member_remote_stats(const fusion_member *m, fusion_remote_stats *out) {
    if (!m || m->vt != &remote_vt) return TUTTI_ERR;
    *out = ((const remote_member *)m)->st;
    return 0;
}

/* ---- spec ---- */

typedef struct spec {
    char base[1024];
    char model[256];
    char vocab[1024];
    int api, rest;
    int32_t top_k;
    long timeout_ms;
    bool leave;
} spec;

static int parse_long(const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_spec(const char *s, spec *sp) {
    memset(sp, 0, sizeof *sp);
    sp->timeout_ms = 10000;
    const char *hash = strchr(s, '#');
    size_t bl = hash ? (size_t)(hash - s) : strlen(s);
    if (bl >= sizeof sp->base) return tutti_set_error("remote member: URL too long");
    memcpy(sp->base, s, bl);
    const char *hostp = strstr(sp->base, "://");
    if (!hostp || !hostp[3] || hostp[3] == '/')
        return tutti_set_error("remote member %s: no host in the URL", sp->base);
    if (!hash) return 0;
    char frag[4096];
    if (strlen(hash + 1) >= sizeof frag) return tutti_set_error("remote member %s: spec too long", sp->base);
    snprintf(frag, sizeof frag, "%s", hash + 1);
    int idx = 0;
    for (char *save = NULL, *it = strtok_r(frag, ";", &save); it; it = strtok_r(NULL, ";", &save), idx++) {
        char *eq = strchr(it, '=');
        if (!eq) {
            if (idx != 0)
                return tutti_set_error("remote member %s: '%s' is not KEY=VALUE (the model name comes first)", sp->base,
                                       it);
            if (strlen(it) >= sizeof sp->model)
                return tutti_set_error("remote member %s: model name too long", sp->base);
            snprintf(sp->model, sizeof sp->model, "%s", it);
            continue;
        }
        *eq = 0;
        const char *k = it, *v = eq + 1;
        long x;
        if (!strcmp(k, "MODEL") || !strcmp(k, "model")) {
            if (strlen(v) >= sizeof sp->model)
                return tutti_set_error("remote member %s: model name too long", sp->base);
            snprintf(sp->model, sizeof sp->model, "%s", v);
        } else if (!strcmp(k, "vocab")) {
            if (strlen(v) >= sizeof sp->vocab)
                return tutti_set_error("remote member %s: vocab path too long", sp->base);
            snprintf(sp->vocab, sizeof sp->vocab, "%s", v);
        } else if (!strcmp(k, "api")) {
            if (!strcmp(v, "llama")) sp->api = API_LLAMA;
            else if (!strcmp(v, "openai")) sp->api = API_OPENAI;
            else if (!strcmp(v, "auto")) sp->api = API_AUTO;
            else return tutti_set_error("remote member %s: api=%s: expected llama, openai or auto", sp->base, v);
        } else if (!strcmp(k, "rest")) {
            if (!strcmp(v, "uniform")) sp->rest = REST_UNIFORM;
            else if (!strcmp(v, "renorm")) sp->rest = REST_RENORM;
            else return tutti_set_error("remote member %s: rest=%s: expected uniform or renorm", sp->base, v);
        } else if (!strcmp(k, "top")) {
            if (parse_long(v, 1, 1 << 24, &x) < 0)
                return tutti_set_error("remote member %s: top=%s: expected a positive integer", sp->base, v);
            sp->top_k = (int32_t)x;
        } else if (!strcmp(k, "timeout")) {
            if (parse_long(v, 1, 86400000L, &x) < 0)
                return tutti_set_error("remote member %s: timeout=%s: expected milliseconds > 0", sp->base, v);
            sp->timeout_ms = x;
        } else if (!strcmp(k, "on_fail")) {
            if (!strcmp(v, "leave")) sp->leave = true;
            else if (!strcmp(v, "stop")) sp->leave = false;
            else return tutti_set_error("remote member %s: on_fail=%s: expected stop or leave", sp->base, v);
        } else {
            return tutti_set_error("remote member %s: unknown option '%s' (known: vocab, api, top, rest, timeout, "
                                   "on_fail)",
                                   sp->base, k);
        }
    }
    return 0;
}

/* ---- requests ---- */

/* 0 for an HTTP 200 answer, else TUTTI_ERR + error (transport: already
 * set; another status: it and an excerpt of the body). */
static int http_ok(const char *where, int status, const char *resp, size_t n) {
    if (status < 0) return TUTTI_ERR;
    if (status != 200) {
        char ex[128];
        fusion_remote_excerpt(resp, n, ex, sizeof ex);
        return tutti_set_error("%s: HTTP status %d%s%s", where, status, n ? ": " : "", ex);
    }
    return 0;
}

static void where_of(const remote_member *rm, const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", remote_http_base(rm->http), path);
}

static int body_reserve(remote_member *rm, size_t need) {
    if (need <= rm->body_cap) return 0;
    size_t c = rm->body_cap ? rm->body_cap : 1024;
    while (c < need) c *= 2;
    char *b = realloc(rm->body, c);
    if (!b) return tutti_set_error("member %s: out of memory", rm->base.name);
    rm->body = b, rm->body_cap = c;
    return 0;
}

/* Appends ids as a JSON array. */
static size_t put_ids(char *p, const int32_t *ids, int32_t n) {
    size_t k = 0;
    p[k++] = '[';
    for (int32_t i = 0; i < n; i++) k += (size_t)sprintf(p + k, i ? ",%d" : "%d", ids[i]);
    p[k++] = ']';
    p[k] = 0;
    return k;
}

static int fetch(remote_member *rm, const int32_t *ids, int32_t n, float *out) {
    fusion_member *m = &rm->base;
    int32_t V = m->n_vocab;
    if (n < 1) return tutti_set_error("member %s: no token to condition on (give a prompt)", m->name);
    if (n > m->n_ctx)
        return tutti_set_error("member %s: context full (%d tokens needed, n_ctx %d)", m->name, n, m->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) return tutti_set_error("member %s: token id %d out of range", m->name, ids[i]);
    if (body_reserve(rm, (size_t)n * 12 + strlen(rm->model) * 6 + 256) < 0) return TUTTI_ERR;
    double t0 = tutti_now_s();
    char *p = rm->body;
    const char *path;
    if (rm->api == API_LLAMA) {
        path = "/completion";
        p += sprintf(p, "{");
        /* llama-server ignores "model"; tutti serve picks the model by it */
        if (rm->model_json) p += sprintf(p, "\"model\":%s,", rm->model_json);
        p += sprintf(p, "\"prompt\":");
        p += put_ids(p, ids, n);
        /* no samplers and pre-sampling probabilities: the model's own
         * distribution; cache_prompt reuses the server's KV cache for the
         * shared prefix, so a step costs one token of compute there */
        sprintf(p,
                ",\"n_predict\":1,\"n_probs\":%d,\"samplers\":[],\"post_sampling_probs\":false,"
                "\"cache_prompt\":true,\"return_tokens\":false,\"stream\":false}",
                rm->top_k);
    } else {
        path = "/v1/completions";
        p += sprintf(p, "{");
        if (rm->model_json) p += sprintf(p, "\"model\":%s,", rm->model_json);
        p += sprintf(p, "\"prompt\":");
        p += put_ids(p, ids, n);
        sprintf(p, ",\"max_tokens\":1,\"temperature\":0,\"logprobs\":%d,\"echo\":false,\"stream\":false}", rm->top_k);
    }
    double t1 = tutti_now_s();
    const char *resp = NULL;
    size_t nresp = 0;
    int status = remote_http_request(rm->http, path, rm->body, &resp, &nresp);
    double t2 = tutti_now_s();
    char where[1200];
    where_of(rm, path, where, sizeof where);
    fusion_remote_next a;
    bool renorm;
    if (http_ok(where, status, resp, nresp) < 0 ||
        fusion_remote_parse_next(&rm->rv, rm->api, true, where, resp, nresp, out, &a) < 0 ||
        fusion_remote_check_next(&rm->rv, where, out, &a, &renorm) < 0)
        return TUTTI_ERR;
    if (renorm && !rm->warned_mass) {
        fprintf(stderr,
                "tutti: member %s: the server's top %d probabilities sum to more than 1; renormalised (said "
                "once)\n",
                m->name, a.k);
        rm->warned_mass = true;
    }
    double r = a.k >= V ? 0 : (a.mass < 1 ? 1 - a.mass : 0);
    if (a.k < V && rm->rest == REST_UNIFORM && r > 0) {
        float fill = (float)log(r / (double)(V - a.k));
        for (int32_t i = 0; i < V; i++)
            if (!rm->rv.seen[i]) out[i] = fill;
    }
    rm->st.approx_mass += r;
    if (r > rm->st.approx_mass_max) rm->st.approx_mass_max = r;
    if (a.server_ms > 0 && a.server_ms < 1e9) rm->st.t_server_s += a.server_ms * 1e-3;
    double t3 = tutti_now_s(), dt = t3 - t0;
    rm->st.t_client_s += (t1 - t0) + (t3 - t2);
    rm->st.n_requests++;
    rm->st.t_request_s += dt;
    m->t_forward_s += dt;
    m->n_forward_tokens += 1;
    m->n_forward_calls++;
    return 0;
}

static int remote_logits(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    remote_member *rm = (remote_member *)m;
    if (!rm->left) {
        if (fetch(rm, ids, n, out) == 0) return 0;
        if (!rm->leave) return TUTTI_ERR;
        /* tell the user once; the message names the URL, never the key */
        fprintf(stderr, "tutti: member %s leaves the ensemble (weight 0, the others renormalised): %s\n", m->name,
                tutti_last_error());
        rm->left = true;
    }
    for (int32_t i = 0; i < m->n_vocab; i++) out[i] = 0.0f;
    return 0;
}

static int remote_logits_all(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    /* the completion API gives the next token only: one request per
     * prefix; the server's prompt cache makes each one a single token */
    for (int32_t i = 1; i <= n; i++)
        if (remote_logits(m, ids, i, out + (size_t)(i - 1) * (size_t)m->n_vocab) < 0) return TUTTI_ERR;
    return 0;
}

static void remote_free(fusion_member *m) {
    remote_member *rm = (remote_member *)m;
    if (!rm) return;
    const fusion_remote_stats *st = &rm->st;
    if (st->n_requests > 0)
        fprintf(stderr,
                "tutti: member %s: %lld requests, %.3f ms each (server compute %.3f ms, added %.3f ms, of "
                "which %.3f ms here); "
                "top %d, approximated mass per step %.3g (max %.3g)\n",
                m->name, (long long)st->n_requests, 1e3 * st->t_request_s / (double)st->n_requests,
                1e3 * st->t_server_s / (double)st->n_requests,
                1e3 * (st->t_request_s - st->t_server_s) / (double)st->n_requests,
                1e3 * st->t_client_s / (double)st->n_requests, st->top_k, st->approx_mass / (double)st->n_requests,
                st->approx_mass_max);
    remote_http_free(rm->http);
    tutti_vocab_free(rm->vocab);
    free(rm->model), free(rm->body);
    cJSON_free(rm->model_json);
    fusion_remote_vocab_free(&rm->rv);
    free(rm);
}

static const fusion_member_vt remote_vt = {remote_logits, remote_logits_all, remote_free, NULL, NULL, NULL};

/* ---- start: API, context, vocabulary check ---- */

/* The server's context (tokens) and vocabulary size where it says them
 * (0 = not said). */
static int probe_server(remote_member *rm, int64_t *n_ctx, int64_t *n_vocab) {
    *n_ctx = 0, *n_vocab = 0;
    const char *resp = NULL;
    size_t n = 0;
    int status = remote_http_request(rm->http, "/props", NULL, &resp, &n);
    if (status < 0) return TUTTI_ERR; /* not reachable at all */
    bool llama;
    int64_t c;
    if (status == 200 && fusion_remote_parse_props(resp, n, &llama, &c) == 0 && llama) {
        if (rm->api == API_AUTO) rm->api = API_LLAMA;
        *n_ctx = c;
    }
    if (rm->api == API_AUTO) rm->api = API_OPENAI;
    status = remote_http_request(rm->http, "/v1/models", NULL, &resp, &n);
    int64_t v;
    if (status == 200 && fusion_remote_parse_models(resp, n, rm->model, &v, &c) == 0) {
        *n_vocab = v;
        if (!*n_ctx) *n_ctx = c;
    }
    return 0;
}

/* 1: the server tokenizes the probe exactly as the local vocabulary and
 * gives its bytes back; 0: the server has no /tokenize (cannot check);
 * error: they differ, or garbage. */
static int check_vocab(remote_member *rm, const char *vocab_path) {
    int32_t loc[256];
    int32_t nl = tutti_tokenize(rm->vocab, PROBE, sizeof PROBE - 1, tutti_vocab_add_bos(rm->vocab), false, loc, 256);
    if (nl < 0) return tutti_set_error("vocabulary %s: cannot tokenize the probe text", vocab_path);
    cJSON *q = cJSON_CreateObject();
    if (!q || !cJSON_AddStringToObject(q, "content", PROBE) || !cJSON_AddBoolToObject(q, "add_special", true) ||
        (*rm->model && !cJSON_AddStringToObject(q, "model", rm->model))) {
        cJSON_Delete(q);
        return tutti_set_error("out of memory");
    }
    char *body = cJSON_PrintUnformatted(q);
    cJSON_Delete(q);
    if (!body) return tutti_set_error("out of memory");
    const char *resp = NULL;
    size_t n = 0;
    char where[1200];
    where_of(rm, "/tokenize", where, sizeof where);
    int status = remote_http_request(rm->http, "/tokenize", body, &resp, &n);
    cJSON_free(body);
    if (status == 404 || status == 405) return 0;
    int32_t nr = 0;
    int ok =
        http_ok(where, status, resp, n) < 0 ? TUTTI_ERR : fusion_remote_parse_tokenize(where, resp, n, loc, nl, &nr);
    if (ok < 0) return TUTTI_ERR;
    if (!ok)
        return tutti_set_error("%s: the server's tokenizer differs from vocab=%s (the probe text gives %d tokens "
                               "there and %d here, or other ids); give the GGUF file of the served model",
                               remote_http_base(rm->http), vocab_path, nr, nl);
    /* the bytes of the ids: llama-server's /detokenize (not every server has it) */
    char idbuf[256 * 12 + 2048];
    size_t k = (size_t)snprintf(idbuf, 1600, "{%s%s%s\"tokens\":", rm->model_json ? "\"model\":" : "",
                                rm->model_json ? rm->model_json : "", rm->model_json ? "," : "");
    put_ids(idbuf + k, loc, nl);
    strcat(idbuf, "}");
    where_of(rm, "/detokenize", where, sizeof where);
    status = remote_http_request(rm->http, "/detokenize", idbuf, &resp, &n);
    if (status == 404 || status == 405) return 1;
    int same = http_ok(where, status, resp, n) < 0
                   ? TUTTI_ERR
                   : fusion_remote_parse_detokenize(where, resp, n, PROBE, sizeof PROBE - 1);
    if (same < 0) return TUTTI_ERR;
    if (!same)
        return tutti_set_error("%s/detokenize: the probe's tokens do not give its bytes back (vocab=%s differs "
                               "from the server's)",
                               remote_http_base(rm->http), vocab_path);
    return 1;
}

static fusion_member *remote_new(const char *spec_s, int32_t n_ctx, bool quiet) {
    spec sp;
    if (parse_spec(spec_s, &sp) < 0) return NULL;
    if (!*sp.vocab) {
        tutti_set_error("remote member %s: needs the server's vocabulary: add ;vocab=PATH (a GGUF file with its "
                        "tokenizer; a vocab-only GGUF is enough), e.g. %s#%s;vocab=model.gguf",
                        sp.base, sp.base, *sp.model ? sp.model : "MODEL");
        return NULL;
    }
    uint64_t h = 0;
    if (fusion_vocab_hash_file(sp.vocab, &h) < 0) {
        tutti_error_prefix("remote member %s: vocab", sp.base);
        return NULL;
    }
    remote_member *rm = calloc(1, sizeof *rm);
    if (!rm) return tutti_set_error("out of memory"), NULL;
    rm->base.vt = &remote_vt;
    char shown[sizeof sp.base]; /* the name goes into messages: no credentials */
    snprintf(rm->base.name, sizeof rm->base.name, "%.180s%s%.60s", tutti_redact_urls(sp.base, shown, sizeof shown),
             *sp.model ? "#" : "", sp.model);
    rm->api = sp.api, rm->rest = sp.rest, rm->leave = sp.leave;
    rm->model = strdup(sp.model);
    if (*sp.model) {
        cJSON *js = cJSON_CreateString(sp.model);
        rm->model_json = js ? cJSON_PrintUnformatted(js) : NULL;
        cJSON_Delete(js);
        if (!rm->model_json) {
            tutti_set_error("out of memory");
            goto fail;
        }
    }
    rm->vocab = tutti_vocab_load(sp.vocab);
    if (!rm->model || !rm->vocab) {
        if (!rm->vocab) tutti_error_prefix("remote member %s: vocab=%s", sp.base, sp.vocab);
        else tutti_set_error("out of memory");
        goto fail;
    }
    rm->base.vocab = rm->vocab;
    rm->base.n_vocab = tutti_vocab_n_tokens(rm->vocab);
    rm->base.bos = tutti_vocab_add_bos(rm->vocab) ? tutti_vocab_bos(rm->vocab) : -1;
    if (fusion_remote_vocab_init(&rm->rv, rm->vocab, rm->base.n_vocab) < 0) goto fail;
    /* the key comes from the environment only (never from the spec, which
     * ends up in messages and ensemble files) */
    const char *key = getenv("TUTTI_API_KEY");
    if (!key || !*key) key = getenv("OPENAI_API_KEY");
    rm->http = remote_http_new(sp.base, sp.timeout_ms, key);
    if (!rm->http) goto fail;
    int64_t s_ctx, s_vocab;
    if (probe_server(rm, &s_ctx, &s_vocab) < 0) {
        tutti_error_prefix("remote member %s: cannot reach the server", rm->base.name);
        goto fail;
    }
    if (s_vocab && s_vocab != rm->base.n_vocab) {
        tutti_set_error("remote member %s: the server's model has %lld tokens, vocab=%s has %d", rm->base.name,
                        (long long)s_vocab, sp.vocab, rm->base.n_vocab);
        goto fail;
    }
    /* never more context than the user gave (n_ctx), nor than the server holds */
    int64_t c = s_ctx > 0 ? s_ctx : 4096;
    if (n_ctx > 0 && n_ctx < c) c = n_ctx;
    rm->base.n_ctx = (int32_t)(c > (1 << 30) ? (1 << 30) : c);
    int32_t def_k = rm->api == API_LLAMA ? rm->base.n_vocab : 20;
    rm->top_k = sp.top_k > 0 ? sp.top_k : def_k;
    if (rm->top_k > rm->base.n_vocab) rm->top_k = rm->base.n_vocab;
    rm->st.top_k = rm->top_k;
    int v = check_vocab(rm, sp.vocab);
    if (v < 0) {
        tutti_error_prefix("remote member %s", rm->base.name);
        goto fail;
    }
    if (v == 0 && !quiet)
        fprintf(stderr,
                "tutti: member %s: the server has no /tokenize, so vocab=%s cannot be checked against it; "
                "the member is byte-aligned with every other\n",
                rm->base.name, sp.vocab);
    if (v == 0) h = h * 0x9e3779b97f4a7c15ull + 0x5bd1e995u; /* a hash of its own */
    rm->base.vocab_hash = h;
    return &rm->base;
fail:
    remote_free(&rm->base);
    return NULL;
}

int fusion_remote_spec_resolve(const char *s, const char *dir, char *out, size_t cap) {
    const char *v = strstr(s, ";vocab=");
    if (!v) v = strstr(s, "#vocab=");
    size_t n = strlen(s);
    if (!v || !dir || !*dir || v[7] == '/') {
        if (n >= cap) return tutti_set_error("remote member spec too long");
        memcpy(out, s, n + 1);
        return 0;
    }
    size_t head = (size_t)(v - s) + 7, dl = strlen(dir);
    if (n + dl >= cap) return tutti_set_error("remote member spec too long");
    memcpy(out, s, head);
    memcpy(out + head, dir, dl);
    memcpy(out + head + dl, s + head, n - head + 1);
    return 0;
}

fusion_member *fusion_member_remote_new(const char *spec_s, int32_t n_ctx) { return remote_new(spec_s, n_ctx, false); }

/* Vocabulary identity of a remote spec (member/vocab_id.c): a member made
 * quietly (the member made next says what it finds). */
int fusion_member_remote_vocab_hash(const char *spec_s, uint64_t *out) {
    fusion_member *m = remote_new(spec_s, 0, true);
    if (!m) return TUTTI_ERR;
    *out = m->vocab_hash;
    m->vt->free(m);
    return 0;
}
