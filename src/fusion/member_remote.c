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
#include "fusion/member_remote.h"
#include "fusion/remote_answer.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "remote/http.h"
#include "util/error.h"

enum { API_AUTO = FUSION_REMOTE_API_AUTO, API_LLAMA = FUSION_REMOTE_API_LLAMA, API_OPENAI = FUSION_REMOTE_API_OPENAI };
enum { REST_UNIFORM, REST_RENORM };

/* Bytes with many kinds of token: words, digits, punctuation, newline,
 * quotes, multi-byte UTF-8 (byte fallback in small SPM vocabularies). */
static const char PROBE[] = "Once upon a time, Lily said: \"Look! 42 cats.\"\nThe end. caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80";

typedef struct remote_member {
    fusion_member base;
    tutti_vocab *vocab;
    remote_http *http;
    char *model;        /* MODEL of the spec ("" when none) */
    char *model_json;   /* it as a JSON string, NULL when none */
    int api;
    int rest;
    bool leave;         /* on_fail=leave */
    bool left;
    bool warned_mass;   /* a top-k answer summing past 1 was renormalised (said once) */
    int32_t top_k;
    char *body;         /* request scratch */
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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
                return tutti_set_error("remote member %s: '%s' is not KEY=VALUE (the model name comes first)",
                                       sp->base, it);
            if (strlen(it) >= sizeof sp->model) return tutti_set_error("remote member %s: model name too long", sp->base);
            snprintf(sp->model, sizeof sp->model, "%s", it);
            continue;
        }
        *eq = 0;
        const char *k = it, *v = eq + 1;
        long x;
        if (!strcmp(k, "MODEL") || !strcmp(k, "model")) {
            if (strlen(v) >= sizeof sp->model) return tutti_set_error("remote member %s: model name too long", sp->base);
            snprintf(sp->model, sizeof sp->model, "%s", v);
        } else if (!strcmp(k, "vocab")) {
            if (strlen(v) >= sizeof sp->vocab) return tutti_set_error("remote member %s: vocab path too long", sp->base);
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
                                   "on_fail)", sp->base, k);
        }
    }
    return 0;
}

/* ---- answer parsing (remote_answer.h): bytes in, no network ---- */

/* A short, printable excerpt of a response for error messages. */
static void excerpt(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap && k < 120; i++) out[k++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '.';
    out[k] = 0;
}

/* The JSON root of an answer, or NULL + error. */
static cJSON *parse_json(const char *where, const char *resp, size_t n) {
    cJSON *j = cJSON_ParseWithLength(resp, n);
    if (!j) {
        char ex[128];
        excerpt(resp, n, ex, sizeof ex);
        tutti_set_error("%s: the answer is not JSON: \"%s\"", where, ex);
    }
    return j;
}

/* ---- piece -> id (classic OpenAI answers name tokens by text) ---- */

static _Thread_local const fusion_remote_vocab *g_sort_rv; /* qsort has no context argument (C11) */

static int cmp_piece(const void *a, const void *b) {
    const fusion_remote_vocab *rv = g_sort_rv;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = rv->piece_off[x + 1] - rv->piece_off[x], ly = rv->piece_off[y + 1] - rv->piece_off[y];
    int c = memcmp(rv->pieces + rv->piece_off[x], rv->pieces + rv->piece_off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int build_pieces(fusion_remote_vocab *rv) {
    int32_t V = rv->n_vocab;
    rv->piece_off = malloc(sizeof(int64_t) * ((size_t)V + 1));
    rv->by_piece = malloc(sizeof(int32_t) * (size_t)V);
    size_t cap = (size_t)V * 8 + 64, n = 0;
    rv->pieces = malloc(cap);
    if (!rv->piece_off || !rv->by_piece || !rv->pieces) return tutti_set_error("out of memory");
    for (int32_t i = 0; i < V; i++) {
        rv->piece_off[i] = (int64_t)n;
        for (;;) {
            int32_t k = tutti_token_to_piece(rv->vocab, i, true, rv->pieces + n, (int32_t)(cap - n > 1 << 20 ? 1 << 20 : cap - n));
            if (k >= 0) {
                n += (size_t)k;
                break;
            }
            char *np = realloc(rv->pieces, cap * 2);
            if (!np) return tutti_set_error("out of memory");
            rv->pieces = np, cap *= 2;
        }
        rv->by_piece[i] = i;
    }
    rv->piece_off[V] = (int64_t)n;
    g_sort_rv = rv;
    qsort(rv->by_piece, (size_t)V, sizeof(int32_t), cmp_piece);
    return 0;
}

int fusion_remote_vocab_init(fusion_remote_vocab *rv, const tutti_vocab *vocab, int32_t n_vocab) {
    memset(rv, 0, sizeof *rv);
    rv->vocab = vocab;
    rv->n_vocab = n_vocab;
    rv->seen = calloc((size_t)n_vocab + 1, 1);
    return rv->seen ? 0 : tutti_set_error("out of memory");
}

void fusion_remote_vocab_free(fusion_remote_vocab *rv) {
    free(rv->seen), free(rv->by_piece), free(rv->pieces), free(rv->piece_off);
    memset(rv, 0, sizeof *rv);
}

/* Equal pieces (SPM's byte token <0x61> and "a"): the highest id, as
 * byte-fallback and control tokens come first in the vocabularies, and a
 * server naming a token by its text means the ordinary one. */
int32_t fusion_remote_piece_id(fusion_remote_vocab *rv, const char *s, size_t n) {
    if (!rv->vocab) return -1;
    if (!rv->by_piece && build_pieces(rv) < 0) return -1;
    int32_t lo = 0, hi = rv->n_vocab;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2, id = rv->by_piece[mid];
        size_t l = (size_t)(rv->piece_off[id + 1] - rv->piece_off[id]);
        int c = memcmp(rv->pieces + rv->piece_off[id], s, l < n ? l : n);
        if (!c) c = l < n ? -1 : l > n;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    int32_t found = -1;
    for (; lo < rv->n_vocab; lo++) {
        int32_t id = rv->by_piece[lo];
        size_t l = (size_t)(rv->piece_off[id + 1] - rv->piece_off[id]);
        if (l != n || memcmp(rv->pieces + rv->piece_off[id], s, n)) break;
        found = id; /* equal pieces are sorted by id */
    }
    return found;
}

/* ---- next-token answers ---- */

/* Reads one entry {id|token, logprob} into (*id, *lp). */
static int read_entry(fusion_remote_vocab *rv, const cJSON *e, int32_t *id, double *lp) {
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(e, "id");
    const cJSON *jlp = cJSON_GetObjectItemCaseSensitive(e, "logprob");
    if (!cJSON_IsNumber(jlp)) return -1;
    *lp = jlp->valuedouble;
    if (cJSON_IsNumber(jid)) {
        double d = jid->valuedouble;
        if (!(d >= 0 && d < rv->n_vocab) || d != floor(d)) return -2;
        *id = (int32_t)d;
        return 0;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(e, "token");
    if (!cJSON_IsString(tok)) return -1;
    *id = fusion_remote_piece_id(rv, tok->valuestring, strlen(tok->valuestring));
    return *id < 0 ? -3 : 0;
}

/* Finds the array of top entries in a response. */
static const cJSON *top_list(int api, const cJSON *root, bool *classic) {
    *classic = false;
    if (api == API_LLAMA) {
        const cJSON *cp = cJSON_GetObjectItemCaseSensitive(root, "completion_probabilities");
        const cJSON *first = cJSON_IsArray(cp) ? cJSON_GetArrayItem(cp, 0) : NULL;
        return first ? cJSON_GetObjectItemCaseSensitive(first, "top_logprobs") : NULL;
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
    const cJSON *lp = c0 ? cJSON_GetObjectItemCaseSensitive(c0, "logprobs") : NULL;
    if (!lp) return NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(lp, "content");
    if (cJSON_IsArray(content)) { /* llama-server's /v1 form: by id */
        const cJSON *f = cJSON_GetArrayItem(content, 0);
        return f ? cJSON_GetObjectItemCaseSensitive(f, "top_logprobs") : NULL;
    }
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"); /* classic: [{text: lp}] */
    *classic = true;
    return cJSON_IsArray(tl) ? cJSON_GetArrayItem(tl, 0) : NULL;
}

/* ---- fast path for llama-server's /completion answer ----
 *
 * With the full distribution the answer holds n_vocab entries, each with
 * the token's text and bytes, and cJSON builds a tree of them (about 0.4 ms
 * a step for a 512-token vocabulary, most of our part of a step).  This
 * scanner reads only completion_probabilities[0].top_logprobs[].{id,
 * logprob} and timings.{prompt_ms, predicted_ms}, skipping every other
 * value while checking the JSON syntax.  It gives up (-1) on anything it
 * does not expect -- duplicate or escaped keys, a token listed twice, an id
 * out of range, a non-finite number, a number or string cJSON would not
 * take -- and the cJSON path then parses the answer and names the error.
 * So whatever the scanner reads, cJSON reads the same way (fuzz/
 * fuzz_remote.c checks it bit for bit). */

typedef struct jscan {
    const char *p, *end; /* not NUL-terminated: nothing at or past end is read */
} jscan;

static void js_ws(jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static bool js_lit(jscan *s, char c) {
    js_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* \uXXXX at p (p + 6 <= end): its code unit, or -1 when a digit is not hex */
static long js_hex4(const char *p) {
    long v = 0;
    for (int i = 2; i < 6; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* a string; [*a, *a + *n) are its raw (still escaped) contents.  Escapes
 * are checked as strictly as cJSON decodes them (or more: then the full
 * parser decides), so that the scanner never takes a string it rejects:
 * one of \" \\ \/ \b \f \n \r \t, or \u with 4 hex digits, a surrogate
 * only as a high-low pair. */
static bool js_str(jscan *s, const char **a, size_t *n) {
    js_ws(s);
    if (s->p >= s->end || *s->p != '"') return false;
    const char *st = ++s->p;
    while (s->p < s->end && *s->p != '"') {
        if ((unsigned char)*s->p < 0x20) return false;
        if (*s->p != '\\') {
            s->p++;
            continue;
        }
        if (s->end - s->p < 2) return false;
        char c = s->p[1];
        if (c != 'u') {
            if (!c || !strchr("\"\\/bfnrt", c)) return false;
            s->p += 2;
            continue;
        }
        long u = s->end - s->p >= 6 ? js_hex4(s->p) : -1;
        if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = s->end - s->p >= 12 && s->p[6] == '\\' && s->p[7] == 'u' ? js_hex4(s->p + 6) : -1;
            if (!(lo >= 0xDC00 && lo <= 0xDFFF)) return false;
            s->p += 6;
        }
        s->p += 6;
    }
    if (s->p >= s->end) return false;
    *a = st, *n = (size_t)(s->p - st);
    s->p++;
    return true;
}

/* a key and its ':' (in skipped values: any key) */
static bool js_any_key(jscan *s) {
    const char *a;
    size_t n;
    return js_str(s, &a, &n) && js_lit(s, ':');
}

/* a key that is compared, and its ':'.  One with an escape is declined:
 * cJSON compares the decoded text ("\u0069d" is "id", "id\u0000x" too) */
static bool js_name(jscan *s, const char **a, size_t *n) {
    return js_str(s, a, n) && !memchr(*a, '\\', *n) && js_lit(s, ':');
}

static bool js_key(jscan *s, const char *want, bool *match) {
    const char *a;
    size_t n;
    if (!js_name(s, &a, &n)) return false;
    *match = n == strlen(want) && !memcmp(a, want, n);
    return true;
}

/* A number, read as cJSON reads it: the run of the characters it takes
 * (digits + - . e E, at most 63 of them, else declined) copied and given
 * to strtod.  Not strtod on the text itself: it would read on past end
 * (the text is not NUL-terminated) and it takes more than JSON (0x10, inf,
 * nan), which the full parser rejects. */
static bool js_num(jscan *s, double *out) {
    js_ws(s);
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) return false;
    char buf[64];
    size_t n = 0;
    for (; s->p + n < s->end; n++) {
        char c = s->p[n];
        if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) break;
        if (n == sizeof buf - 1) return false;
        buf[n] = c;
    }
    buf[n] = 0;
    char *e;
    *out = strtod(buf, &e);
    if (e == buf || !isfinite(*out)) return false;
    s->p += e - buf;
    return true;
}

static bool js_skip(jscan *s, int depth) {
    js_ws(s);
    if (s->p >= s->end || depth > 32) return false;
    char c = *s->p;
    if (c == '"') {
        const char *a;
        size_t n;
        return js_str(s, &a, &n);
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        if (js_lit(s, close)) return true;
        for (;;) {
            if (c == '{' && !js_any_key(s)) return false;
            if (!js_skip(s, depth + 1)) return false;
            if (js_lit(s, ',')) continue;
            return js_lit(s, close);
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double d;
        return js_num(s, &d);
    }
    static const char *const lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(s->end - s->p) >= l && !memcmp(s->p, lits[i], l)) {
            s->p += l;
            return true;
        }
    }
    return false;
}

/* completion_probabilities[0]: its top_logprobs into out/seen */
static bool js_first_entry(fusion_remote_vocab *rv, jscan *s, float *out, int32_t *k, double *mass) {
    if (!js_lit(s, '{')) return false;
    bool got = false;
    if (js_lit(s, '}')) return false;
    for (;;) {
        bool is_top;
        if (!js_key(s, "top_logprobs", &is_top)) return false;
        if (is_top) {
            if (got || !js_lit(s, '[') || js_lit(s, ']')) return false;
            got = true;
            do {
                if (!js_lit(s, '{')) return false;
                bool has_id = false, has_lp = false;
                double id = -1, lp = 0;
                for (;;) {
                    const char *a;
                    size_t n;
                    if (!js_name(s, &a, &n)) return false;
                    if (n == 2 && !memcmp(a, "id", 2)) {
                        if (has_id || !js_num(s, &id)) return false;
                        has_id = true;
                    } else if (n == 7 && !memcmp(a, "logprob", 7)) {
                        if (has_lp || !js_num(s, &lp)) return false;
                        has_lp = true;
                    } else if (!js_skip(s, 3)) {
                        return false;
                    }
                    if (js_lit(s, ',')) continue;
                    if (!js_lit(s, '}')) return false;
                    break;
                }
                if (!has_id || !has_lp || !(id >= 0 && id < rv->n_vocab) || id != floor(id) || lp > 1e-3)
                    return false;
                int32_t i = (int32_t)id;
                if (rv->seen[i]) return false;
                rv->seen[i] = 1;
                out[i] = lp > 0 ? 0.0f : (float)lp;
                *mass += exp(lp > 0 ? 0 : lp);
                (*k)++;
            } while (js_lit(s, ','));
            if (!js_lit(s, ']')) return false;
        } else if (!js_skip(s, 2)) {
            return false;
        }
        if (js_lit(s, ',')) continue;
        return js_lit(s, '}') && got;
    }
}

/* 0: read (k entries, their mass, the server's ms); -1: use cJSON */
static int fast_llama_answer(fusion_remote_vocab *rv, const char *resp, size_t n, float *out, int32_t *k, double *mass,
                             double *server_ms) {
    jscan s = {resp, resp + n};
    bool got = false, got_t = false;
    *k = 0, *mass = 0, *server_ms = 0;
    if (!js_lit(&s, '{') || js_lit(&s, '}')) return -1;
    for (;;) {
        const char *a;
        size_t kl;
        if (!js_name(&s, &a, &kl)) return -1;
        if (kl == 24 && !memcmp(a, "completion_probabilities", 24)) {
            if (got || !js_lit(&s, '[') || js_lit(&s, ']') || !js_first_entry(rv, &s, out, k, mass)) return -1;
            while (js_lit(&s, ','))
                if (!js_skip(&s, 1)) return -1;
            if (!js_lit(&s, ']')) return -1;
            got = true;
        } else if (kl == 7 && !memcmp(a, "timings", 7)) {
            if (got_t || !js_lit(&s, '{')) return -1;
            got_t = true;
            bool got_pm = false, got_pd = false; /* cJSON takes the first of a key given twice */
            if (!js_lit(&s, '}'))
                for (;;) {
                    const char *b;
                    size_t bl;
                    double v;
                    if (!js_name(&s, &b, &bl)) return -1;
                    bool pm = bl == 9 && !memcmp(b, "prompt_ms", 9), pd = bl == 12 && !memcmp(b, "predicted_ms", 12);
                    if ((pm && got_pm) || (pd && got_pd)) return -1;
                    got_pm |= pm, got_pd |= pd;
                    bool want = pm || pd;
                    js_ws(&s);
                    if (want && s.p < s.end && (*s.p == '-' || (*s.p >= '0' && *s.p <= '9'))) {
                        if (!js_num(&s, &v)) return -1;
                        *server_ms += v;
                    } else if (!js_skip(&s, 2)) {
                        return -1;
                    }
                    if (js_lit(&s, ',')) continue;
                    if (!js_lit(&s, '}')) return -1;
                    break;
                }
        } else if (!js_skip(&s, 1)) {
            return -1;
        }
        if (js_lit(&s, ',')) continue;
        if (!js_lit(&s, '}')) return -1;
        break;
    }
    js_ws(&s);
    return s.p == s.end && got && *k > 0 ? 0 : -1;
}

static void clear_next(fusion_remote_vocab *rv, float *out, fusion_remote_next *info) {
    memset(rv->seen, 0, (size_t)rv->n_vocab);
    for (int32_t i = 0; i < rv->n_vocab; i++) out[i] = -INFINITY;
    info->k = 0, info->mass = 0, info->server_ms = 0;
}

int fusion_remote_scan_llama(fusion_remote_vocab *rv, const char *resp, size_t n, float *out,
                             fusion_remote_next *info) {
    clear_next(rv, out, info);
    if (fast_llama_answer(rv, resp, n, out, &info->k, &info->mass, &info->server_ms) == 0) return 0;
    clear_next(rv, out, info);
    return -1;
}

int fusion_remote_parse_next(fusion_remote_vocab *rv, int api, bool scan, const char *where, const char *resp,
                             size_t n, float *out, fusion_remote_next *info) {
    if (scan && api == API_LLAMA && fusion_remote_scan_llama(rv, resp, n, out, info) == 0) return 0;
    clear_next(rv, out, info);
    cJSON *root = parse_json(where, resp, n);
    if (!root) return TUTTI_ERR;
    int rc = 0;
    int32_t k = 0;
    double mass = 0;
    bool classic;
    const cJSON *list = top_list(api, root, &classic);
    if (!list || (classic ? !cJSON_IsObject(list) : !cJSON_IsArray(list)) || !cJSON_GetArraySize(list)) {
        rc = tutti_set_error("%s: the answer has no top log-probabilities for the next token", where);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        int32_t id = -1;
        double lp = 0;
        int r;
        if (classic) {
            if (!cJSON_IsNumber(e) || !e->string) r = -1;
            else {
                lp = e->valuedouble;
                id = fusion_remote_piece_id(rv, e->string, strlen(e->string));
                r = id < 0 ? -3 : 0;
            }
        } else {
            r = read_entry(rv, e, &id, &lp);
        }
        if (r == -3) continue; /* a token text the vocabulary does not have: its mass counts as approximated */
        if (r < 0 || isnan(lp) || lp > 1e-3 || (id >= 0 && rv->seen[id])) {
            rc = tutti_set_error("%s: malformed top log-probability entry %d (%s)", where, k,
                                 r == -2 ? "token id out of range" : r < 0 ? "missing id or logprob" :
                                 (id >= 0 && rv->seen[id]) ? "token listed twice" : "not a log-probability");
            goto done;
        }
        rv->seen[id] = 1;
        out[id] = lp > 0 ? 0.0f : (float)lp;
        mass += exp(lp > 0 ? 0 : lp);
        k++;
    }
    if (k == 0) {
        rc = tutti_set_error("%s: none of the answer's tokens is in the vocabulary", where);
        goto done;
    }
    info->k = k, info->mass = mass;
    /* the server's own compute, to tell our overhead from its work */
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "timings");
    if (cJSON_IsObject(tm)) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(tm, "prompt_ms");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(tm, "predicted_ms");
        info->server_ms = (cJSON_IsNumber(a) ? a->valuedouble : 0) + (cJSON_IsNumber(b) ? b->valuedouble : 0);
    }
done:
    cJSON_Delete(root);
    return rc;
}

int fusion_remote_check_next(const fusion_remote_vocab *rv, const char *where, float *out, fusion_remote_next *info,
                             bool *renormalised) {
    *renormalised = false;
    double m = info->mass;
    if (!isfinite(m) || m <= 0) return tutti_set_error("%s: the answer's probabilities sum to %g", where, m);
    if (info->k >= rv->n_vocab && fabs(m - 1) > FUSION_REMOTE_MASS_TOL)
        return tutti_set_error("%s: the answer's probabilities of all %d tokens sum to %g, not 1: it is not a "
                               "distribution", where, rv->n_vocab, m);
    if (m <= 1 + FUSION_REMOTE_MASS_TOL) return 0;
    float shift = (float)log(m);
    for (int32_t i = 0; i < rv->n_vocab; i++)
        if (rv->seen[i]) out[i] -= shift;
    info->mass = 1;
    *renormalised = true;
    return 0;
}

/* ---- the start's answers ---- */

int fusion_remote_parse_tokenize(const char *where, const char *resp, size_t n, const int32_t *want,
                                 int32_t n_want, int32_t *n_got) {
    *n_got = 0;
    cJSON *r = parse_json(where, resp, n);
    if (!r) return TUTTI_ERR;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(r, "tokens");
    int ok = cJSON_IsArray(toks) ? 1 : -1;
    int32_t nr = ok > 0 ? cJSON_GetArraySize(toks) : 0;
    if (ok > 0 && nr != n_want) ok = 0;
    for (int32_t i = 0; ok > 0 && i < nr; i++) {
        const cJSON *t = cJSON_GetArrayItem(toks, i);
        if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "id"); /* with_pieces form */
        if (!cJSON_IsNumber(t) || t->valuedouble != want[i]) ok = 0;
    }
    cJSON_Delete(r);
    *n_got = nr;
    if (ok < 0) return tutti_set_error("%s: the answer has no \"tokens\" array", where);
    return ok;
}

int fusion_remote_parse_detokenize(const char *where, const char *resp, size_t n, const char *text, size_t len) {
    cJSON *r = parse_json(where, resp, n);
    if (!r) return TUTTI_ERR;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "content");
    /* the server renders BOS as text and may keep the SPM leading space:
     * the text must be the end of what it gives */
    size_t lc = cJSON_IsString(c) ? strlen(c->valuestring) : 0;
    bool same = cJSON_IsString(c) && lc >= len && !memcmp(c->valuestring + lc - len, text, len);
    cJSON_Delete(r);
    return same ? 1 : 0;
}

static int json_int(const cJSON *o, const char *k, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1e15)) return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

int fusion_remote_parse_props(const char *resp, size_t n, bool *llama, int64_t *n_ctx) {
    *llama = false, *n_ctx = 0;
    cJSON *props = cJSON_ParseWithLength(resp, n);
    if (!props) return -1;
    const cJSON *dgs = cJSON_GetObjectItemCaseSensitive(props, "default_generation_settings");
    if (cJSON_IsObject(dgs)) {
        *llama = true;
        int64_t c;
        if (json_int(dgs, "n_ctx", &c) == 0) *n_ctx = c;
    }
    cJSON_Delete(props);
    return 0;
}

int fusion_remote_parse_models(const char *resp, size_t n, const char *model, int64_t *n_vocab, int64_t *n_ctx) {
    *n_vocab = 0, *n_ctx = 0;
    cJSON *models = cJSON_ParseWithLength(resp, n);
    if (!models) return -1;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(models, "data");
    const cJSON *d;
    cJSON_ArrayForEach(d, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (*model && (!cJSON_IsString(id) || strcmp(id->valuestring, model))) continue;
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(d, "meta");
        int64_t c;
        if (cJSON_IsObject(meta)) {
            if (json_int(meta, "n_vocab", &c) == 0) *n_vocab = c;
            if (json_int(meta, "n_ctx", &c) == 0) *n_ctx = c;
        }
        break;
    }
    cJSON_Delete(models);
    return 0;
}

/* ---- requests ---- */

/* 0 for an HTTP 200 answer, else TUTTI_ERR + error (transport: already
 * set; another status: it and an excerpt of the body). */
static int http_ok(const char *where, int status, const char *resp, size_t n) {
    if (status < 0) return TUTTI_ERR;
    if (status != 200) {
        char ex[128];
        excerpt(resp, n, ex, sizeof ex);
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
    double t0 = now_s();
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
        sprintf(p, ",\"n_predict\":1,\"n_probs\":%d,\"samplers\":[],\"post_sampling_probs\":false,"
                   "\"cache_prompt\":true,\"return_tokens\":false,\"stream\":false}", rm->top_k);
    } else {
        path = "/v1/completions";
        p += sprintf(p, "{");
        if (rm->model_json) p += sprintf(p, "\"model\":%s,", rm->model_json);
        p += sprintf(p, "\"prompt\":");
        p += put_ids(p, ids, n);
        sprintf(p, ",\"max_tokens\":1,\"temperature\":0,\"logprobs\":%d,\"echo\":false,\"stream\":false}",
                rm->top_k);
    }
    double t1 = now_s();
    const char *resp = NULL;
    size_t nresp = 0;
    int status = remote_http_request(rm->http, path, rm->body, &resp, &nresp);
    double t2 = now_s();
    char where[1200];
    where_of(rm, path, where, sizeof where);
    fusion_remote_next a;
    bool renorm;
    if (http_ok(where, status, resp, nresp) < 0 ||
        fusion_remote_parse_next(&rm->rv, rm->api, true, where, resp, nresp, out, &a) < 0 ||
        fusion_remote_check_next(&rm->rv, where, out, &a, &renorm) < 0)
        return TUTTI_ERR;
    if (renorm && !rm->warned_mass) {
        fprintf(stderr, "tutti: member %s: the server's top %d probabilities sum to more than 1; renormalised (said "
                        "once)\n", m->name, a.k);
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
    double t3 = now_s(), dt = t3 - t0;
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
        fprintf(stderr, "tutti: member %s: %lld requests, %.3f ms each (server compute %.3f ms, added %.3f ms, of "
                        "which %.3f ms here); "
                        "top %d, approximated mass per step %.3g (max %.3g)\n", m->name, (long long)st->n_requests,
                1e3 * st->t_request_s / (double)st->n_requests, 1e3 * st->t_server_s / (double)st->n_requests,
                1e3 * (st->t_request_s - st->t_server_s) / (double)st->n_requests,
                1e3 * st->t_client_s / (double)st->n_requests, st->top_k,
                st->approx_mass / (double)st->n_requests, st->approx_mass_max);
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
    int ok = http_ok(where, status, resp, n) < 0 ? TUTTI_ERR : fusion_remote_parse_tokenize(where, resp, n, loc, nl, &nr);
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
    int same = http_ok(where, status, resp, n) < 0 ? TUTTI_ERR
                                                    : fusion_remote_parse_detokenize(where, resp, n, PROBE, sizeof PROBE - 1);
    if (same < 0) return TUTTI_ERR;
    if (!same)
        return tutti_set_error("%s/detokenize: the probe's tokens do not give its bytes back (vocab=%s differs "
                               "from the server's)", remote_http_base(rm->http), vocab_path);
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
        fprintf(stderr, "tutti: member %s: the server has no /tokenize, so vocab=%s cannot be checked against it; "
                        "the member is byte-aligned with every other\n", rm->base.name, sp.vocab);
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

/* ---- dispatch for the ensemble ---- */

fusion_member *fusion_member_open(const char *path, const tutti_model *shared, int32_t n_sessions, int32_t n_ctx,
                                  int32_t n_threads) {
    if (fusion_is_remote_spec(path)) return fusion_member_remote_new(path, n_ctx);
    return fusion_member_local_new_shared(path, shared, n_sessions, n_ctx, n_threads);
}

int fusion_member_vocab_hash(const char *path, uint64_t *out) {
    if (!fusion_is_remote_spec(path)) return fusion_vocab_hash_file(path, out);
    /* the identity is only known once the server has been asked */
    fusion_member *m = remote_new(path, 0, true); /* the member made next says what it finds */
    if (!m) return TUTTI_ERR;
    *out = m->vocab_hash;
    m->vt->free(m);
    return 0;
}
