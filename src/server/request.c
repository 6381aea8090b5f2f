/* Request body parsing for `tutti serve` (see request.h). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.h"

typedef struct perr {
    char *buf;
    size_t cap;
    const char **param;
} perr;

static int bad(perr *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->cap, fmt, ap);
    va_end(ap);
    *e->param = param;
    return 400;
}

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

static int get_number(perr *e, const cJSON *o, const char *name, double lo, double hi, double *out, bool *set) {
    const cJSON *v = field(o, name);
    if (set) *set = false;
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad(e, name, "'%s' must be a number", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi) return bad(e, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, d);
    *out = d;
    if (set) *set = true;
    return 0;
}

static int get_int(perr *e, const cJSON *o, const char *name, double lo, double hi, int64_t *out, bool *set) {
    double d;
    bool s = false;
    int rc = get_number(e, o, name, lo, hi, &d, &s);
    if (rc) return rc;
    if (set) *set = s;
    if (!s) return 0;
    if (d != floor(d)) return bad(e, name, "'%s' must be an integer, got %g", name, d);
    *out = (int64_t)d;
    return 0;
}

static int get_bool(perr *e, const cJSON *o, const char *name, bool *out) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad(e, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int oom(perr *e) { return bad(e, NULL, "out of memory"); }

/* message content: a string, or an array of {"type":"text","text":...}
 * parts (concatenated) */
static int parse_content(perr *e, const cJSON *c, char **out) {
    if (!c) return 0;
    if (cJSON_IsString(c)) return (*out = dup_str(c->valuestring, NULL)) ? 0 : oom(e);
    if (!cJSON_IsArray(c)) return bad(e, "messages", "a message's 'content' must be a string or an array of text parts");
    size_t n = 0;
    char *s = malloc(1);
    if (!s) return oom(e);
    s[0] = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            free(s);
            return bad(e, "messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        }
        size_t k = strlen(text->valuestring);
        char *t = realloc(s, n + k + 1);
        if (!t) return free(s), oom(e);
        s = t;
        memcpy(s + n, text->valuestring, k + 1);
        n += k;
    }
    *out = s;
    return 0;
}

static int parse_messages(perr *e, const cJSON *root, srv_request *r) {
    const cJSON *m = field(root, "messages");
    if (!m) return bad(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return bad(e, "messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(m);
    if (n < 1) return bad(e, "messages", "'messages' must hold at least one message");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return oom(e);
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsObject(it)) return bad(e, "messages", "every message must be an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsString(role) || !role->valuestring[0])
            return bad(e, "messages", "message %d: 'role' must be a non-empty string", r->n_msgs + 1);
        srv_msg *dst = &r->msgs[r->n_msgs++];
        if (!(dst->role = dup_str(role->valuestring, NULL))) return oom(e);
        int rc = parse_content(e, field(it, "content"), &dst->content);
        if (rc) return rc;
    }
    return 0;
}

static int parse_prompt(perr *e, const cJSON *root, srv_request *r) {
    const cJSON *p = field(root, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) != 1 || !cJSON_IsString(cJSON_GetArrayItem(p, 0)))
            return bad(e, "prompt", "'prompt' must be a string or an array of one string (token-id prompts and "
                                    "batches of prompts are not supported)");
        p = cJSON_GetArrayItem(p, 0);
    }
    if (!cJSON_IsString(p)) return bad(e, "prompt", "'prompt' must be a string");
    return (r->prompt = dup_str(p->valuestring, &r->prompt_len)) ? 0 : oom(e);
}

static int parse_stop(perr *e, const cJSON *root, srv_request *r) {
    const cJSON *s = field(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return 0;
        return (r->stop[r->n_stop++] = dup_str(s->valuestring, NULL)) ? 0 : oom(e);
    }
    if (!cJSON_IsArray(s)) return bad(e, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > SRV_MAX_STOP) return bad(e, "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (!cJSON_IsString(it)) return bad(e, "stop", "'stop' must be a string or an array of strings");
        if (!it->valuestring[0]) continue;
        if (!(r->stop[r->n_stop++] = dup_str(it->valuestring, NULL))) return oom(e);
    }
    return 0;
}

static int float_list(perr *e, const cJSON *a, const char *name, int n_expect, float *out) {
    if (!cJSON_IsArray(a)) return bad(e, "tutti", "'tutti.%s' must be an array of numbers", name);
    if (cJSON_GetArraySize(a) != n_expect)
        return bad(e, "tutti", "'tutti.%s' needs one number per member (%d)", name, n_expect);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return bad(e, "tutti", "'tutti.%s' must be an array of finite numbers", name);
        out[k++] = (float)it->valuedouble;
    }
    return 0;
}

static int parse_inline(perr *e, const cJSON *root, srv_inline_ens *x) {
    const cJSON *t = field(root, "tutti");
    x->rule = x->align = -1;
    if (!t) return 0;
    if (!cJSON_IsObject(t)) return bad(e, "tutti", "'tutti' must be an object");
    const cJSON *m = field(t, "members");
    if (!m) return 0; /* other tutti fields may come later; no members = no inline ensemble */
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) < 1 || cJSON_GetArraySize(m) > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return bad(e, "tutti", "'tutti.members' must be an array of 1 to %d model names", TUTTI_ENSEMBLE_MAX_MEMBERS);
    x->present = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!cJSON_IsString(it)) return bad(e, "tutti", "'tutti.members' must be an array of model names");
        if (!(x->members[x->n_members++] = dup_str(it->valuestring, NULL))) return oom(e);
    }
    const cJSON *w = field(t, "weights"), *tp = field(t, "temperatures");
    int rc;
    if (w && (rc = float_list(e, w, "weights", x->n_members, x->weights))) return rc;
    if (tp && (rc = float_list(e, tp, "temperatures", x->n_members, x->temps))) return rc;
    x->has_weights = w != NULL;
    x->has_temps = tp != NULL;
    const cJSON *rule = field(t, "rule"), *al = field(t, "align");
    if (rule && (!cJSON_IsString(rule) || (x->rule = tutti_rule_parse(rule->valuestring)) < 0))
        return bad(e, "tutti", "'tutti.rule' must be one of mix, product, gate, contrastive");
    if (al && (!cJSON_IsString(al) || (x->align = tutti_align_parse(al->valuestring)) < 0))
        return bad(e, "tutti", "'tutti.align' must be one of auto, token, byte, span");
    return 0;
}

static int parse_fields(perr *e, const cJSON *root, srv_request *r) {
    int rc;
    const cJSON *model = field(root, "model");
    if (model) {
        if (!cJSON_IsString(model)) return bad(e, "model", "'model' must be a string");
        if (!(r->model = dup_str(model->valuestring, NULL))) return oom(e);
    }
    if ((rc = r->kind == SRV_CHAT ? parse_messages(e, root, r) : parse_prompt(e, root, r))) return rc;
    bool set;
    int64_t i64;
    double d;
    /* max_completion_tokens is the newer name in chat completions */
    if ((rc = get_int(e, root, "max_tokens", 0, 1e9, &r->max_tokens, &set))) return rc;
    if (!set && r->kind == SRV_CHAT && (rc = get_int(e, root, "max_completion_tokens", 0, 1e9, &r->max_tokens, &set)))
        return rc;
    if (!set) r->max_tokens = -1;
    if ((rc = get_number(e, root, "temperature", 0, 100, &d, &set))) return rc;
    if (set) r->sp.temp = (float)d;
    if ((rc = get_number(e, root, "top_p", 0, 1, &d, &set))) return rc;
    if (set) {
        if (!(d > 0)) return bad(e, "top_p", "'top_p' must be > 0");
        r->sp.top_p = (float)d;
    }
    if ((rc = get_int(e, root, "top_k", 0, 1e9, &i64, &set))) return rc;
    if (set) r->sp.top_k = (int32_t)i64;
    if ((rc = get_number(e, root, "min_p", 0, 1, &d, &set))) return rc;
    if (set) r->sp.min_p = (float)d;
    if ((rc = get_number(e, root, "repeat_penalty", 1e-3, 100, &d, &set))) return rc;
    if (set) r->sp.repeat_penalty = (float)d;
    /* seeds up to 2^53 (exact in a JSON number) */
    if ((rc = get_int(e, root, "seed", 0, 9007199254740992.0, &i64, &r->seed_set))) return rc;
    if (r->seed_set) r->sp.seed = (uint64_t)i64;
    if ((rc = parse_stop(e, root, r))) return rc;
    if ((rc = get_bool(e, root, "stream", &r->stream))) return rc;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return bad(e, "stream_options", "'stream_options' must be an object");
        if ((rc = get_bool(e, so, "include_usage", &r->include_usage))) return rc;
    }
    if ((rc = get_int(e, root, "n", 1, SRV_MAX_N, &i64, &set))) return rc;
    r->n = set ? (int)i64 : 1;
    /* logprobs: completions take the number of alternatives ("logprobs":
     * N, the legacy API), chat a boolean plus "top_logprobs": N; OpenAI's
     * limits (0..20) */
    const cJSON *lp = field(root, "logprobs");
    r->logprobs = -1;
    if (r->kind == SRV_COMPLETION) {
        if ((rc = get_int(e, root, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &i64, &set))) return rc;
        if (set) r->logprobs = (int)i64;
    } else {
        if (lp && !cJSON_IsBool(lp)) return bad(e, "logprobs", "'logprobs' must be true or false");
        if ((rc = get_int(e, root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &i64, &set))) return rc;
        bool want = lp && cJSON_IsTrue(lp);
        if (set && !want) return bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (want) r->logprobs = set ? (int)i64 : 0;
    }
    const cJSON *rf = field(root, "response_format");
    if (rf) {
        const cJSON *type = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(type)) return bad(e, "response_format", "'response_format' must be an object with a 'type'");
        /* json_object: any JSON object; json_schema: JSON valid against
         * json_schema.schema; both through the grammar layer, applied to the
         * fused distribution (tutti_mask.grammar) */
        const char *t = type->valuestring;
        if (!strcmp(t, "json_object")) {
            static const char obj[] = "{\"type\": \"object\"}";
            if (!(r->grammar = tutti_grammar_from_json_schema(obj, sizeof obj - 1)))
                return bad(e, "response_format", "%s", tutti_last_error());
        } else if (!strcmp(t, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            const cJSON *schema = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
            if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
                return bad(e, "response_format", "response_format json_schema needs {\"json_schema\": {\"schema\": {...}}}");
            char *txt = cJSON_PrintUnformatted(schema);
            if (!txt) return bad(e, "response_format", "out of memory");
            r->grammar = tutti_grammar_from_json_schema(txt, strlen(txt));
            free(txt);
            if (!r->grammar) return bad(e, "response_format", "json_schema: %s", tutti_last_error());
        } else if (strcmp(t, "text")) {
            return bad(e, "response_format", "response_format type '%.40s' is not one of text, json_object, json_schema", t);
        }
    }
    return parse_inline(e, root, &r->ens);
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
    *param = NULL;
    if (errlen) err[0] = 0;
    perr e = {err, errlen, param};
    const char *end = NULL;
    /* cJSON records a failed parse in a global too: one parse at a time
     * keeps concurrent connections from racing on it */
    static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_mu);
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    pthread_mutex_unlock(&parse_mu);
    if (!root) {
        size_t pos = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return bad(&e, NULL, "malformed JSON in the request body at byte %zu", pos);
    }
    int rc;
    if (!cJSON_IsObject(root)) rc = bad(&e, NULL, "the request body must be a JSON object");
    else rc = parse_fields(&e, root, r);
    cJSON_Delete(root);
    return rc;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    tutti_grammar_free(r->grammar);
    r->grammar = NULL;
    free(r->model);
    free(r->prompt);
    for (int i = 0; i < r->n_msgs; i++) free(r->msgs[i].role), free(r->msgs[i].content);
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (int i = 0; i < r->ens.n_members; i++) free(r->ens.members[i]);
    memset(r, 0, sizeof *r);
}
