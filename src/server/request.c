/* Request body parsing for `tutti serve` (see request.h): strict JSON, then
 * the one table of known fields. */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.h"

/* ---- strict JSON ---- */

/* The length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlong
 * forms, surrogates or code points past U+10FFFF), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t cp = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0;
    return len;
}

/* A JSON number at s[0..n) by RFC 8259's grammar: its length, 0 when it is
 * not one (cJSON also takes "01", "1." and "-.5"). */
static size_t json_number_len(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n &&
        ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
        return 0;
    return i;
}

/* What cJSON lets through and RFC 8259 does not, plus \u0000: 0, or -1
 * with the message.  Structure (brackets, commas, literals) is cJSON's to
 * check. */
static int json_lexical_check(const char *b, size_t n, char *err, size_t cap) {
    const unsigned char *s = (const unsigned char *)b;
    bool in_str = false;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == 0) return snprintf(err, cap, "a NUL byte at byte %zu of the request body", i), -1;
        if (c >= 0x80) {
            const size_t k = utf8_len(s + i, n - i);
            if (!k) return snprintf(err, cap, "the request body is not valid UTF-8 (byte %zu)", i), -1;
            i += k;
            continue;
        }
        if (in_str) {
            if (c < 0x20)
                return snprintf(err, cap, "a control character (U+%04X) at byte %zu must be escaped in a JSON string",
                                c, i),
                       -1;
            if (c == '"') in_str = false;
            if (c == '\\') {
                if (i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4))
                    return snprintf(err, cap, "\\u0000 (a NUL character) at byte %zu: not accepted in text", i), -1;
                i += i + 1 < n ? 2 : 1;
                continue;
            }
            i++;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t k = json_number_len(b + i, n - i);
            if (!k) return snprintf(err, cap, "malformed number at byte %zu of the request body", i), -1;
            i += k;
            continue;
        }
        i++;
    }
    return 0;
}

struct cJSON *srv_json_parse(const char *body, size_t len, char *err, size_t cap) {
    if (json_lexical_check(body, len, err, cap) < 0) return NULL;
    const char *end = NULL;
    /* cJSON records a failed parse in a global too: one parse at a time
     * keeps concurrent connections from racing on it */
    static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_mu);
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    pthread_mutex_unlock(&parse_mu);
    size_t pos = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
    if (!root) {
        snprintf(err, cap, "malformed JSON in the request body at byte %zu", pos);
        return NULL;
    }
    while (pos < len && (body[pos] == ' ' || body[pos] == '\t' || body[pos] == '\n' || body[pos] == '\r')) pos++;
    if (pos < len) {
        cJSON_Delete(root);
        snprintf(err, cap, "the request body goes on after its JSON value (byte %zu): send one JSON object", pos);
        return NULL;
    }
    return root;
}

/* ---- values ---- */

typedef struct pctx {
    char *buf;
    size_t cap;
    const char **param;
    srv_request *r;
    int64_t top_logprobs; /* -1: not given */
    bool logprobs_true;   /* chat's "logprobs": true */
} pctx;

static int bad(pctx *x, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(pctx *x, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->buf, x->cap, fmt, ap);
    va_end(ap);
    *x->param = param;
    return 400;
}

static int oom(pctx *x) { return bad(x, NULL, "out of memory"); }

/* The field, or NULL when absent or null. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static char *dup_str(const char *s, size_t *len) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    if (len) *len = n;
    return d;
}

static int number(pctx *x, const char *name, const cJSON *v, double lo, double hi, double *out) {
    if (!cJSON_IsNumber(v)) return bad(x, name, "'%s' must be a number", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi) return bad(x, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, d);
    *out = d;
    return 0;
}

static int integer(pctx *x, const char *name, const cJSON *v, double lo, double hi, int64_t *out) {
    double d = 0;
    int rc = number(x, name, v, lo, hi, &d);
    if (rc) return rc;
    if (d != floor(d)) return bad(x, name, "'%s' must be an integer, got %g", name, d);
    *out = (int64_t)d;
    return 0;
}

static int boolean(pctx *x, const char *name, const cJSON *v, bool *out) {
    if (!cJSON_IsBool(v)) return bad(x, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* ---- honoured fields: one function each, v non-null ---- */

typedef int (*field_fn)(pctx *x, const char *name, const cJSON *v);

static int f_model(pctx *x, const char *name, const cJSON *v) {
    if (!cJSON_IsString(v)) return bad(x, name, "'model' must be a string");
    return (x->r->model = dup_str(v->valuestring, NULL)) ? 0 : oom(x);
}

/* a token-id prompt: integers in [0, 2^31) (the model's range is checked
 * once the model is known) */
static int id_prompt(pctx *x, const cJSON *a, srv_prompt *p) {
    int n = cJSON_GetArraySize(a);
    if (n < 1) return bad(x, "prompt", "'prompt': a token-id prompt must hold at least one id");
    if (!(p->ids = malloc(sizeof(int32_t) * (size_t)n))) return oom(x);
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(d >= 0 && d < 2147483648.0) || d != floor(d))
            return bad(x, "prompt", "'prompt': token %d of a token-id prompt is not a token id (an integer >= 0)",
                       p->n_ids);
        p->ids[p->n_ids++] = (int32_t)d;
    }
    return 0;
}

/* OpenAI's forms: a string, an array of strings (a batch), an array of
 * token ids, or an array of arrays of token ids (a batch) */
static int f_prompt(pctx *x, const char *name, const cJSON *v) {
    srv_request *r = x->r;
    if (cJSON_IsString(v)) {
        r->n_prompts = 1;
        return (r->prompts[0].text = dup_str(v->valuestring, &r->prompts[0].len)) ? 0 : oom(x);
    }
    if (!cJSON_IsArray(v))
        return bad(x, name,
                   "'prompt' must be a string, an array of strings, an array of token ids or an array of "
                   "arrays of token ids");
    int n = cJSON_GetArraySize(v);
    if (n < 1) return bad(x, name, "'prompt' is an empty array");
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsNumber(first)) {
        r->n_prompts = 1;
        return id_prompt(x, v, &r->prompts[0]);
    }
    if (n > SRV_MAX_N) return bad(x, name, "'prompt' holds at most %d prompts", SRV_MAX_N);
    bool texts = cJSON_IsString(first);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        srv_prompt *p = &r->prompts[r->n_prompts++];
        int rc;
        if (texts && cJSON_IsString(it)) rc = (p->text = dup_str(it->valuestring, &p->len)) ? 0 : oom(x);
        else if (!texts && cJSON_IsArray(it)) rc = id_prompt(x, it, p);
        else rc = bad(x, name, "'prompt': a batch holds only strings or only arrays of token ids");
        if (rc) return rc;
    }
    return 0;
}

/* message content: a string, or an array of {"type":"text","text":...}
 * parts (concatenated) */
static int parse_content(pctx *x, const cJSON *c, char **out) {
    if (!c) return 0;
    if (cJSON_IsString(c)) return (*out = dup_str(c->valuestring, NULL)) ? 0 : oom(x);
    if (!cJSON_IsArray(c))
        return bad(x, "messages", "a message's 'content' must be a string or an array of text parts");
    size_t n = 0;
    char *s = malloc(1);
    if (!s) return oom(x);
    s[0] = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            free(s);
            return bad(x, "messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        }
        size_t k = strlen(text->valuestring);
        char *t = realloc(s, n + k + 1);
        if (!t) return free(s), oom(x);
        s = t;
        memcpy(s + n, text->valuestring, k + 1);
        n += k;
    }
    *out = s;
    return 0;
}

/* Message fields that would change the conversation and are not honoured
 * (the legacy function calls; tools' fields are read by tools_req.c). */
static const char *const msg_refused[] = {"function_call", NULL};

static int f_messages(pctx *x, const char *name, const cJSON *m) {
    srv_request *r = x->r;
    if (!cJSON_IsArray(m)) return bad(x, name, "'messages' must be an array");
    int n = cJSON_GetArraySize(m);
    if (n < 1) return bad(x, name, "'messages' must hold at least one message");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return oom(x);
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsObject(it)) return bad(x, name, "every message must be an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsString(role) || !role->valuestring[0])
            return bad(x, name, "message %d: 'role' must be a non-empty string", r->n_msgs + 1);
        for (int k = 0; msg_refused[k]; k++) {
            const cJSON *f = field(it, msg_refused[k]);
            if (f && !(cJSON_IsArray(f) && !cJSON_GetArraySize(f)) && !(cJSON_IsString(f) && !f->valuestring[0]))
                return bad(x, name, "message %d: '%s' is not supported (the legacy function calls: use tools)",
                           r->n_msgs + 1, msg_refused[k]);
        }
        srv_msg *dst = &r->msgs[r->n_msgs++];
        if (!(dst->role = dup_str(role->valuestring, NULL))) return oom(x);
        char terr[512];
        if (srv_msg_tools_parse(dst, it, terr, sizeof terr) < 0) return bad(x, name, "message %d: %s", r->n_msgs, terr);
        int rc = parse_content(x, field(it, "content"), &dst->content);
        if (rc) return rc;
    }
    return 0;
}

/* tools, tool_choice, parallel_tool_calls (tools_req.c) */
static int f_tools(pctx *x, const char *name, const cJSON *v) {
    char e[512];
    return srv_tools_parse(&x->r->tools, v, e, sizeof e) < 0 ? bad(x, name, "%s", e) : 0;
}

static int f_tool_choice(pctx *x, const char *name, const cJSON *v) {
    char e[512];
    return srv_tool_choice_parse(&x->r->tools, v, e, sizeof e) < 0 ? bad(x, name, "%s", e) : 0;
}

static int f_parallel_tool_calls(pctx *x, const char *name, const cJSON *v) {
    if (!cJSON_IsBool(v)) return bad(x, name, "'parallel_tool_calls' must be true or false");
    x->r->tools.parallel = cJSON_IsTrue(v);
    return 0;
}

/* max_tokens, max_completion_tokens (chat's newer name) and n_predict
 * (llama-server's): the first given in the table's order counts */
static int f_max_tokens(pctx *x, const char *name, const cJSON *v) {
    int64_t k = 0;
    int rc = integer(x, name, v, name[0] == 'n' ? -1 : 0, 1e9, &k);
    if (!rc && x->r->max_tokens < 0) x->r->max_tokens = k; /* n_predict -1: no limit */
    return rc;
}

static int f_top_p(pctx *x, const char *name, const cJSON *v) {
    double d = 0;
    int rc = number(x, name, v, 0, 1, &d);
    if (rc) return rc;
    if (!(d > 0)) return bad(x, name, "'top_p' must be > 0");
    x->r->sp.top_p = (float)d;
    return 0;
}

/* llama-server's: -1 = the whole context, 0 = off */
static int f_repeat_last_n(pctx *x, const char *name, const cJSON *v) {
    int64_t k = 0;
    int rc = integer(x, name, v, -1, 1 << 20, &k);
    if (rc) return rc;
    x->r->repeat_last_n_ctx = k < 0;
    x->r->sp.repeat_last_n = k < 0 ? 0 : (int32_t)k;
    return 0;
}

/* seeds up to 2^53 (exact in a JSON number); llama-server's -1 = random */
static int f_seed(pctx *x, const char *name, const cJSON *v) {
    int64_t k = 0;
    int rc = integer(x, name, v, -1, 9007199254740992.0, &k);
    if (rc) return rc;
    x->r->seed_set = k >= 0;
    if (k >= 0) x->r->sp.seed = (uint64_t)k;
    return 0;
}

static int f_stop(pctx *x, const char *name, const cJSON *s) {
    srv_request *r = x->r;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return 0;
        return (r->stop[r->n_stop++] = dup_str(s->valuestring, NULL)) ? 0 : oom(x);
    }
    if (!cJSON_IsArray(s)) return bad(x, name, "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > SRV_MAX_STOP) return bad(x, name, "'stop' holds at most %d strings", SRV_MAX_STOP);
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (!cJSON_IsString(it)) return bad(x, name, "'stop' must be a string or an array of strings");
        if (!it->valuestring[0]) continue;
        if (!(r->stop[r->n_stop++] = dup_str(it->valuestring, NULL))) return oom(x);
    }
    return 0;
}

static int f_stream(pctx *x, const char *name, const cJSON *v) { return boolean(x, name, v, &x->r->stream); }

/* the prompt in front of the completion (with logprobs: its tokens' too) */
static int f_echo(pctx *x, const char *name, const cJSON *v) { return boolean(x, name, v, &x->r->echo); }

static int f_stream_options(pctx *x, const char *name, const cJSON *v) {
    if (!cJSON_IsObject(v)) return bad(x, name, "'stream_options' must be an object");
    const cJSON *u = field(v, "include_usage");
    return u ? boolean(x, name, u, &x->r->include_usage) : 0;
}

static int f_n(pctx *x, const char *name, const cJSON *v) {
    int64_t k = 0;
    int rc = integer(x, name, v, 1, SRV_MAX_N, &k);
    if (!rc) x->r->n = (int)k;
    return rc;
}

/* completions take the number of alternatives ("logprobs": N, the legacy
 * API), chat a boolean plus "top_logprobs": N; OpenAI's limits (0..20) */
static int f_logprobs(pctx *x, const char *name, const cJSON *v) {
    if (x->r->kind == SRV_CHAT) return boolean(x, name, v, &x->logprobs_true);
    int64_t k = 0;
    int rc = integer(x, name, v, 0, SRV_MAX_TOP_LOGPROBS, &k);
    if (!rc) x->r->logprobs = (int)k;
    return rc;
}

static int f_top_logprobs(pctx *x, const char *name, const cJSON *v) {
    return integer(x, name, v, 0, SRV_MAX_TOP_LOGPROBS, &x->top_logprobs);
}

/* One constraint at a time, as llama-server ("either json_schema or
 * grammar"). */
static int set_grammar(pctx *x, const char *name, tutti_grammar *g, const char *what) {
    if (!g) return bad(x, name, "%s: %s", what, tutti_last_error());
    if (x->r->grammar) {
        tutti_grammar_free(g);
        return bad(x, name, "'%s' and '%s' both constrain the output: give one of them", x->r->grammar_field, name);
    }
    x->r->grammar = g;
    x->r->grammar_field = name;
    return 0;
}

/* lenient: the extension field "lenient" of response_format's json_schema
 * object (or of a json_object response_format): a keyword that cannot be
 * enforced is dropped (logged) instead of a 400, as --json-schema-lenient. */
static int schema_grammar(pctx *x, const char *name, const cJSON *schema, const char *what, const cJSON *lenient) {
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return bad(x, name, "%s must be a JSON schema (an object)", what);
    if (lenient && !cJSON_IsBool(lenient)) return bad(x, name, "%s: 'lenient' must be true or false", what);
    char *txt = cJSON_PrintUnformatted(schema);
    if (!txt) return oom(x);
    tutti_json_schema_params jp = tutti_json_schema_default_params();
    jp.lenient = cJSON_IsTrue(lenient);
    tutti_grammar *g = tutti_grammar_from_json_schema_params(txt, strlen(txt), &jp);
    free(txt);
    if (g && jp.warnings) fprintf(stderr, "tutti serve: %s (lenient):\n%s", what, jp.warnings);
    free(jp.warnings);
    return set_grammar(x, name, g, what);
}

/* json_object (any JSON object, or valid against its "schema", as
 * llama-server) and json_schema ({"json_schema": {"schema": {...}}}),
 * through the grammar layer on the fused distribution (tutti_mask.grammar) */
static int f_response_format(pctx *x, const char *name, const cJSON *rf) {
    const cJSON *type = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (!cJSON_IsString(type)) return bad(x, name, "'response_format' must be an object with a 'type'");
    const char *t = type->valuestring;
    if (!strcmp(t, "json_object")) {
        const cJSON *schema = field(rf, "schema");
        if (schema) return schema_grammar(x, name, schema, "response_format json_object schema", field(rf, "lenient"));
        static const char obj[] = "{\"type\": \"object\"}";
        return set_grammar(x, name, tutti_grammar_from_json_schema(obj, sizeof obj - 1), "response_format");
    }
    if (!strcmp(t, "json_schema")) {
        const cJSON *js = field(rf, "json_schema");
        const cJSON *schema = cJSON_IsObject(js) ? field(js, "schema") : NULL;
        if (!schema) return bad(x, name, "response_format json_schema needs {\"json_schema\": {\"schema\": {...}}}");
        return schema_grammar(x, name, schema, "json_schema", field(js, "lenient"));
    }
    if (strcmp(t, "text"))
        return bad(x, name, "response_format type '%.40s' is not one of text, json_object, json_schema", t);
    return 0;
}

static int f_json_schema(pctx *x, const char *name, const cJSON *v) {
    return schema_grammar(x, name, v, "json_schema", NULL);
}

static int f_grammar(pctx *x, const char *name, const cJSON *v) {
    if (!cJSON_IsString(v)) return bad(x, name, "'grammar' must be a string (GBNF)");
    if (!v->valuestring[0]) return 0; /* llama-server: "" = none */
    return set_grammar(x, name, tutti_grammar_parse(v->valuestring, strlen(v->valuestring)), "grammar");
}

/* OpenAI's {"id": bias} (ids as decimal strings, bias in [-100, 100]) or
 * llama-server's [[id, bias], ...] (bias false = banned) */
static int bias_entry(pctx *x, const char *name, const char *key, const cJSON *id, const cJSON *b) {
    srv_request *r = x->r;
    double d = -1;
    if (key) {
        char *end;
        d = strtod(key, &end);
        if (!key[0] || *end || key[0] < '0' || key[0] > '9') d = -1;
    } else if (cJSON_IsNumber(id)) {
        d = id->valuedouble;
    }
    if (!(d >= 0 && d < 2147483648.0) || d != floor(d))
        return bad(x, name, "'logit_bias': keys must be token ids (integers >= 0), got %s%.40s%s", key ? "'" : "",
                   key ? key : "a non-integer", key ? "'" : "");
    float bias;
    if (cJSON_IsFalse(b)) bias = -INFINITY;
    else if (cJSON_IsNumber(b) && b->valuedouble >= -100 && b->valuedouble <= 100) bias = (float)b->valuedouble;
    else
        return bad(x, name, "'logit_bias': the bias of token %.0f must be a number in [-100, 100] (or false: banned)",
                   d);
    if (r->n_bias == SRV_MAX_BIAS) return bad(x, name, "'logit_bias' holds at most %d tokens", SRV_MAX_BIAS);
    r->bias_ids[r->n_bias] = (int32_t)d;
    r->bias[r->n_bias++] = bias;
    return 0;
}

static int f_logit_bias(pctx *x, const char *name, const cJSON *v) {
    srv_request *r = x->r;
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return bad(x, name, "'logit_bias' must be an object {\"token id\": bias} or an array of [id, bias] pairs");
    int n = cJSON_GetArraySize(v);
    if (n > SRV_MAX_BIAS) return bad(x, name, "'logit_bias' holds at most %d tokens", SRV_MAX_BIAS);
    r->bias_ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    r->bias = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!r->bias_ids || !r->bias) return oom(x);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        int rc;
        if (cJSON_IsObject(v)) rc = bias_entry(x, name, it->string, NULL, it);
        else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2)
            rc = bias_entry(x, name, NULL, cJSON_GetArrayItem(it, 0), cJSON_GetArrayItem(it, 1));
        else rc = bad(x, name, "'logit_bias' as an array holds [id, bias] pairs");
        if (rc) return rc;
    }
    return 0;
}

/* output modalities: text only */
static int f_modalities(pctx *x, const char *name, const cJSON *v) {
    const cJSON *it;
    if (!cJSON_IsArray(v)) return bad(x, name, "'modalities' must be an array");
    cJSON_ArrayForEach(it, v) if (!cJSON_IsString(it) || strcmp(it->valuestring, "text")) return bad(
        x, name, "'modalities': only \"text\" output is supported");
    return 0;
}

static int float_list(pctx *x, const cJSON *a, const char *name, int n_expect, float *out) {
    if (!cJSON_IsArray(a)) return bad(x, "tutti", "'tutti.%s' must be an array of numbers", name);
    if (cJSON_GetArraySize(a) != n_expect)
        return bad(x, "tutti", "'tutti.%s' needs one number per member (%d)", name, n_expect);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || fabs(it->valuedouble) > 3e38)
            return bad(x, "tutti", "'tutti.%s' must be an array of finite numbers", name);
        out[k++] = (float)it->valuedouble;
    }
    return 0;
}

/* an inline ensemble; its settings through the library's validator */
static int f_tutti(pctx *x, const char *name, const cJSON *t) {
    srv_inline_ens *e = &x->r->ens;
    if (!cJSON_IsObject(t)) return bad(x, name, "'tutti' must be an object");
    const cJSON *sh = field(t, "shares");
    if (sh && !cJSON_IsBool(sh) && !cJSON_IsNull(sh)) return bad(x, name, "'tutti.shares' must be true or false");
    x->r->shares = cJSON_IsTrue(sh);
    const cJSON *m = field(t, "members");
    if (!m) return 0; /* other tutti fields may come later; no members = no inline ensemble */
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) < 1 || cJSON_GetArraySize(m) > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return bad(x, name, "'tutti.members' must be an array of 1 to %d model names", TUTTI_ENSEMBLE_MAX_MEMBERS);
    e->present = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it)) return bad(x, name, "'tutti.members' must be an array of model names");
        if (!(e->members[e->n_members++] = dup_str(it->valuestring, NULL))) return oom(x);
    }
    const cJSON *w = field(t, "weights"), *tp = field(t, "temperatures");
    int rc;
    if (w && (rc = float_list(x, w, "weights", e->n_members, e->weights))) return rc;
    if (tp && (rc = float_list(x, tp, "temperatures", e->n_members, e->temps))) return rc;
    e->has_weights = w != NULL;
    e->has_temps = tp != NULL;
    const cJSON *rule = field(t, "rule"), *al = field(t, "align");
    if (rule && (!cJSON_IsString(rule) || (e->rule = tutti_rule_parse(rule->valuestring)) < 0))
        return bad(x, name, "'tutti.rule' must be one of mix, product, gate, contrastive");
    if (al && (!cJSON_IsString(al) || (e->align = tutti_align_parse(al->valuestring)) < 0))
        return bad(x, name, "'tutti.align' must be one of auto, token, byte, span");
    for (int i = 0; e->has_temps && i < e->n_members; i++)
        if (tutti_check_temp(i + 1, e->temps[i]) < 0) return bad(x, name, "tutti.temperatures: %s", tutti_last_error());
    float wv[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int i = 0; i < e->n_members; i++) wv[i] = e->has_weights ? e->weights[i] : NAN;
    if (tutti_check_weights(wv, e->n_members, e->rule >= 0 ? (tutti_fusion_rule)e->rule : TUTTI_RULE_MIX) < 0)
        return bad(x, name, "tutti%s: %s", e->has_weights ? ".weights" : "", tutti_last_error());
    return 0;
}

/* ---- the table ---- */

enum { K_CMPL = 1, K_CHAT = 2, K_BOTH = 3 };
typedef enum field_how {
    HONOUR, /* parsed into the request */
    INERT,  /* accepted: changes nothing here (metadata, caching hints, settings of an off sampler) */
    REFUSE, /* 400 naming it unless it has its neutral value */
} field_how;
typedef enum neutral_kind { N_EQ, N_LE, N_GE, N_FALSE, N_TRUE, N_EMPTY, N_WORDS } neutral_kind;

typedef struct srv_field {
    const char *name;
    unsigned kinds; /* K_CMPL | K_CHAT: the endpoints that know it (others ignore it) */
    field_how how;
    field_fn fn; /* HONOUR: the parser; NULL: a sampler number, [lo, hi] into sp at `at` */
    double lo, hi;
    size_t at;
    bool integer;
    neutral_kind neutral; /* REFUSE: the values that change nothing */
    double num;           /* N_EQ, N_LE, N_GE */
    const char *words;    /* N_WORDS: "a|b" */
    const char *what;     /* REFUSE: what it would need */
} srv_field;

#define HONOURED(n, k, f) \
    { (n), (k), HONOUR, (f), 0, 0, 0, false, N_EQ, 0, NULL, NULL }
#define SAMPLER(n, lo, hi, member, is_int) \
    { (n), K_BOTH, HONOUR, NULL, (lo), (hi), offsetof(tutti_sampler_params, member), (is_int), N_EQ, 0, NULL, NULL }
#define ACCEPTED(n, k) \
    { (n), (k), INERT, NULL, 0, 0, 0, false, N_EQ, 0, NULL, NULL }
#define REFUSED(n, k, kind, num, words, what) \
    { (n), (k), REFUSE, NULL, 0, 0, 0, false, (kind), (num), (words), (what) }

/* Every field of OpenAI's completions and chat completions and of
 * llama-server's /completion and /v1 endpoints: what tutti does with it.
 * The order is the order of the checks (the max_tokens aliases: the first
 * given counts). */
static const srv_field fields[] = {
    HONOURED("model", K_BOTH, f_model),
    HONOURED("prompt", K_CMPL, f_prompt),
    HONOURED("messages", K_CHAT, f_messages),
    HONOURED("max_tokens", K_BOTH, f_max_tokens),
    HONOURED("max_completion_tokens", K_CHAT, f_max_tokens),
    HONOURED("n_predict", K_BOTH, f_max_tokens),
    SAMPLER("temperature", 0, 100, temp, false),
    HONOURED("top_p", K_BOTH, f_top_p),
    SAMPLER("top_k", 0, 1e9, top_k, true),
    SAMPLER("min_p", 0, 1, min_p, false),
    SAMPLER("repeat_penalty", 1e-3, 100, repeat_penalty, false),
    HONOURED("repeat_last_n", K_BOTH, f_repeat_last_n),
    HONOURED("seed", K_BOTH, f_seed),
    HONOURED("stop", K_BOTH, f_stop),
    HONOURED("stream", K_BOTH, f_stream),
    HONOURED("stream_options", K_BOTH, f_stream_options),
    HONOURED("n", K_BOTH, f_n),
    HONOURED("logprobs", K_BOTH, f_logprobs),
    HONOURED("echo", K_CMPL, f_echo),
    HONOURED("top_logprobs", K_CHAT, f_top_logprobs),
    HONOURED("response_format", K_BOTH, f_response_format),
    HONOURED("json_schema", K_BOTH, f_json_schema),
    HONOURED("grammar", K_BOTH, f_grammar),
    HONOURED("logit_bias", K_BOTH, f_logit_bias),
    HONOURED("modalities", K_CHAT, f_modalities),
    HONOURED("tutti", K_BOTH, f_tutti),
    HONOURED("tools", K_CHAT, f_tools),
    HONOURED("tool_choice", K_CHAT, f_tool_choice),
    HONOURED("parallel_tool_calls", K_CHAT, f_parallel_tool_calls),
    /* changes nothing here */
    ACCEPTED("user", K_BOTH),
    ACCEPTED("metadata", K_BOTH),
    ACCEPTED("store", K_BOTH),
    ACCEPTED("service_tier", K_BOTH),
    ACCEPTED("prompt_cache_key", K_BOTH),
    ACCEPTED("safety_identifier", K_BOTH),
    ACCEPTED("prediction", K_CHAT),
    ACCEPTED("cache_prompt", K_BOTH),
    ACCEPTED("id_slot", K_BOTH),
    ACCEPTED("n_keep", K_BOTH),
    ACCEPTED("n_discard", K_BOTH),
    ACCEPTED("timings_per_token", K_BOTH),
    ACCEPTED("return_progress", K_BOTH),
    ACCEPTED("reasoning_format", K_CHAT),
    ACCEPTED("mirostat_tau", K_BOTH),
    ACCEPTED("mirostat_eta", K_BOTH),
    ACCEPTED("dry_base", K_BOTH),
    ACCEPTED("dry_allowed_length", K_BOTH),
    ACCEPTED("dry_penalty_last_n", K_BOTH),
    ACCEPTED("dry_sequence_breakers", K_BOTH),
    ACCEPTED("xtc_threshold", K_BOTH),
    ACCEPTED("dynatemp_exponent", K_BOTH),
    /* would change the output and are not honoured */
    REFUSED("functions", K_CHAT, N_EMPTY, 0, NULL, "the legacy function calls: use tools"),
    REFUSED("function_call", K_CHAT, N_WORDS, 0, "none|auto", "the legacy function calls: use tool_choice"),
    REFUSED("best_of", K_CMPL, N_LE, 1, NULL, "choosing the best of several generations is not implemented"),
    REFUSED("suffix", K_CMPL, N_EMPTY, 0, NULL, "insertion (text after the completion) is not implemented"),
    REFUSED("presence_penalty", K_BOTH, N_EQ, 0, NULL, "use repeat_penalty"),
    REFUSED("frequency_penalty", K_BOTH, N_EQ, 0, NULL, "use repeat_penalty"),
    REFUSED("audio", K_CHAT, N_EMPTY, 0, NULL, "the models produce text only"),
    REFUSED("reasoning_effort", K_CHAT, N_EMPTY, 0, NULL, "the models have no reasoning modes"),
    REFUSED("verbosity", K_CHAT, N_EMPTY, 0, NULL, "not implemented"),
    REFUSED("web_search_options", K_CHAT, N_EMPTY, 0, NULL, "there is no web search"),
    REFUSED("chat_template_kwargs", K_CHAT, N_EMPTY, 0, NULL, "template variables are not implemented"),
    REFUSED("add_generation_prompt", K_CHAT, N_TRUE, 0, NULL, "the assistant's turn is always opened"),
    REFUSED("continue_final_message", K_CHAT, N_FALSE, 0, NULL, "continuing a message is not implemented"),
    REFUSED("ignore_eos", K_BOTH, N_FALSE, 0, NULL, "generation ends at end of text"),
    REFUSED("typical_p", K_BOTH, N_GE, 1, NULL, "locally typical sampling is not implemented"),
    REFUSED("tfs_z", K_BOTH, N_GE, 1, NULL, "tail-free sampling is not implemented"),
    REFUSED("mirostat", K_BOTH, N_EQ, 0, NULL, "mirostat is not implemented"),
    REFUSED("dry_multiplier", K_BOTH, N_EQ, 0, NULL, "DRY sampling is not implemented"),
    REFUSED("xtc_probability", K_BOTH, N_EQ, 0, NULL, "XTC sampling is not implemented"),
    REFUSED("top_n_sigma", K_BOTH, N_LE, 0, NULL, "top-n-sigma sampling is not implemented"),
    REFUSED("dynatemp_range", K_BOTH, N_EQ, 0, NULL, "dynamic temperature is not implemented"),
    REFUSED("min_keep", K_BOTH, N_LE, 0, NULL, "not implemented"),
    REFUSED("samplers", K_BOTH, N_EMPTY, 0, NULL, "the sampler order is tutti's (temperature, top-k, top-p, min-p)"),
    REFUSED("n_probs", K_BOTH, N_LE, 0, NULL, "use logprobs (or llama-server's /completion)"),
    REFUSED("post_sampling_probs", K_BOTH, N_FALSE, 0, NULL, "logprobs are of the fused distribution before sampling"),
    REFUSED("return_tokens", K_BOTH, N_FALSE, 0, NULL, "not implemented"),
    REFUSED("response_fields", K_BOTH, N_EMPTY, 0, NULL, "not implemented"),
    REFUSED("t_max_predict_ms", K_BOTH, N_LE, 0, NULL, "a time limit is not implemented: use max_tokens"),
    REFUSED("n_indent", K_BOTH, N_LE, 0, NULL, "not implemented"),
    REFUSED("lora", K_BOTH, N_EMPTY, 0, NULL, "adapters are not implemented"),
    REFUSED("grammar_lazy", K_BOTH, N_FALSE, 0, NULL, "lazy grammars are not implemented"),
    REFUSED("grammar_triggers", K_BOTH, N_EMPTY, 0, NULL, "lazy grammars are not implemented"),
    REFUSED("preserved_tokens", K_BOTH, N_EMPTY, 0, NULL, "not implemented"),
    REFUSED("image_data", K_BOTH, N_EMPTY, 0, NULL, "the models take text only"),
    REFUSED("multimodal_data", K_BOTH, N_EMPTY, 0, NULL, "the models take text only"),
};

static bool words_has(const char *words, const char *w) {
    size_t n = strlen(w);
    for (const char *p = words; *p;) {
        const char *e = strchr(p, '|');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !memcmp(p, w, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

/* A sampler number of the table, into the request's sampler settings. */
static int sampler_number(pctx *x, const srv_field *f, const cJSON *v) {
    double d = 0;
    int64_t k = 0;
    int rc = f->integer ? integer(x, f->name, v, f->lo, f->hi, &k) : number(x, f->name, v, f->lo, f->hi, &d);
    if (rc) return rc;
    char *dst = (char *)&x->r->sp + f->at;
    if (f->integer) *(int32_t *)dst = (int32_t)k;
    else *(float *)dst = (float)d;
    return 0;
}

/* A refused field: its neutral value passes, anything else is a 400. */
static int refuse(pctx *x, const srv_field *f, const cJSON *v) {
    const char *nm = f->name;
    switch (f->neutral) {
    case N_EQ:
    case N_LE:
    case N_GE:
        if (!cJSON_IsNumber(v)) return bad(x, nm, "'%s' must be a number", nm);
        if (f->neutral == N_EQ   ? v->valuedouble == f->num
            : f->neutral == N_LE ? v->valuedouble <= f->num
                                 : v->valuedouble >= f->num)
            return 0;
        return bad(x, nm, "'%s' %g is not supported (%s); leave it out or set it to %g", nm, v->valuedouble, f->what,
                   f->num);
    case N_FALSE:
    case N_TRUE:
        if (!cJSON_IsBool(v)) return bad(x, nm, "'%s' must be true or false", nm);
        if (cJSON_IsTrue(v) == (f->neutral == N_TRUE)) return 0;
        return bad(x, nm, "'%s' %s is not supported (%s); leave it out", nm, cJSON_IsTrue(v) ? "true" : "false",
                   f->what);
    case N_EMPTY:
        if ((cJSON_IsString(v) && !v->valuestring[0]) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child))
            return 0;
        return bad(x, nm, "'%s' is not supported (%s); leave it out", nm, f->what);
    case N_WORDS:
        if (cJSON_IsString(v) && words_has(f->words, v->valuestring)) return 0;
        return bad(x, nm, "'%s' is not supported (%s); leave it out (or give one of: %s)", nm, f->what, f->words);
    }
    return 0;
}

/* cross-field rules, after the table */
static int finish(pctx *x) {
    srv_request *r = x->r;
    if (r->kind == SRV_CHAT && !r->n_msgs) return bad(x, "messages", "'messages' is required");
    if (r->kind == SRV_COMPLETION && !r->n_prompts) return bad(x, "prompt", "'prompt' is required");
    if (r->kind == SRV_COMPLETION && r->n_prompts * r->n > SRV_MAX_N)
        return bad(x, "n", "%d prompts with n %d are %d choices; at most %d", r->n_prompts, r->n, r->n_prompts * r->n,
                   SRV_MAX_N);
    if (r->kind == SRV_CHAT) {
        if (x->top_logprobs >= 0 && !x->logprobs_true)
            return bad(x, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (x->logprobs_true) r->logprobs = x->top_logprobs >= 0 ? (int)x->top_logprobs : 0;
        char e[512];
        const char *p = NULL;
        if (srv_tools_check(r, e, sizeof e, &p) < 0) return bad(x, p, "%s", e);
    }
    return 0;
}

int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *r, char *err, size_t errlen,
                      const char **param) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = tutti_sampler_default_params();
    r->n = 1;
    r->max_tokens = -1;
    r->logprobs = -1;
    r->ens.rule = r->ens.align = -1;
    r->tools.parallel = true;
    *param = NULL;
    if (errlen) err[0] = 0;
    pctx x = {err, errlen, param, r, -1, false};
    cJSON *root = srv_json_parse(body, len, err, errlen);
    if (!root) return 400;
    int rc = 0;
    if (!cJSON_IsObject(root)) rc = bad(&x, NULL, "the request body must be a JSON object");
    unsigned k = kind == SRV_CHAT ? K_CHAT : K_CMPL;
    for (size_t i = 0; !rc && i < sizeof fields / sizeof *fields; i++) {
        const srv_field *f = &fields[i];
        const cJSON *v = f->kinds & k ? field(root, f->name) : NULL;
        if (!v || f->how == INERT) continue;
        rc = f->how == REFUSE ? refuse(&x, f, v) : f->fn ? f->fn(&x, f->name, v) : sampler_number(&x, f, v);
    }
    if (!rc) rc = finish(&x);
    cJSON_Delete(root);
    return rc;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    tutti_grammar_free(r->grammar);
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompts[i].text), free(r->prompts[i].ids);
    for (int i = 0; i < r->n_msgs; i++) free(r->msgs[i].role), free(r->msgs[i].content), free(r->msgs[i].tool_json);
    srv_tools_free(&r->tools);
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (int i = 0; i < r->ens.n_members; i++) free(r->ens.members[i]);
    free(r->bias_ids);
    free(r->bias);
    memset(r, 0, sizeof *r);
}
